// counter_draw.h — the counter-based uniform draws of perturb's noise (metrics.h, Rng): draw
// `index` of the stream of `seed`, on its own, so that a loop or a GPU thread draws element i
// without the draws before it. Compiles for CUDA devices too (fumi's own kernels perturb the
// operands of CUDA calls with the same draws: the same bits on the device as on the host).
#pragma once

#include <cstdint>

#include "fumi/dtype.hpp"  // FUMI_HOST_DEVICE

namespace fumi::metrics {

// splitmix64's constants: the stream's step and its two mixing multipliers.
constexpr uint64_t kDrawGolden = 0x9e3779b97f4a7c15ULL;
constexpr uint64_t kDrawMix1 = 0xbf58476d1ce4e5b9ULL;
constexpr uint64_t kDrawMix2 = 0x94d049bb133111ebULL;

FUMI_HOST_DEVICE inline uint64_t drawMix(uint64_t z) {
  z = (z ^ (z >> 30)) * kDrawMix1;
  z = (z ^ (z >> 27)) * kDrawMix2;
  return z ^ (z >> 31);
}

// 53 random bits as a double in [0, 1) (signed: converts without a branch).
FUMI_HOST_DEVICE inline double drawUnit(uint64_t bits) {
  return static_cast<double>(static_cast<int64_t>(bits >> 11)) * 0x1.0p-53;
}

// Draw `index` (0-based) of the stream of `seed`, uniform in [-1, 1).
FUMI_HOST_DEVICE inline double uniformSymDraw(uint64_t seed, uint64_t index) {
  return 2.0 * drawUnit(drawMix(seed + (index + 1) * kDrawGolden)) - 1.0;
}

}  // namespace fumi::metrics
