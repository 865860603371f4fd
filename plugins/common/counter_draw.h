// counter_draw.h — random draws shared by the host and fumi's CUDA kernels: splitmix64 (Rng's
// sequential stream, metrics.h) and the counter-based uniform draws of perturb's noise: draw
// `index` of the stream of `seed`, on its own, so that a loop or a GPU thread draws element i
// without the draws before it. Compiles for CUDA devices too (fumi's own kernels perturb the
// operands of CUDA calls with the same draws: the same bits on the device as on the host).
#pragma once

#include <cstdint>

#include "fumi/dtype.hpp"  // FUMI_HOST_DEVICE

namespace fumi::metrics {

// The finaliser both hashes share: two rounds of xor-shift and multiply, then a last xor-shift.
template <class Word>
FUMI_HOST_DEVICE inline Word xorShiftMultiply(Word z, int a, Word m1, int b, Word m2, int c) {
  z = (z ^ (z >> a)) * m1;
  z = (z ^ (z >> b)) * m2;
  return z ^ (z >> c);
}

// splitmix64's constants: the stream's step and its two mixing multipliers.
constexpr uint64_t kDrawGolden = 0x9e3779b97f4a7c15ULL;
constexpr uint64_t kDrawMix1 = 0xbf58476d1ce4e5b9ULL;
constexpr uint64_t kDrawMix2 = 0x94d049bb133111ebULL;

FUMI_HOST_DEVICE inline uint64_t drawMix(uint64_t z) {
  return xorShiftMultiply<uint64_t>(z, 30, kDrawMix1, 27, kDrawMix2, 31);
}

// 53 random bits as a double in [0, 1) (signed: converts without a branch).
FUMI_HOST_DEVICE inline double drawUnit(uint64_t bits) {
  return static_cast<double>(static_cast<int64_t>(bits >> 11)) * 0x1.0p-53;
}

// Perturbation noise, in 32-bit integer arithmetic: vector units multiply 32-bit lanes natively
// (AVX2 has no 64-bit multiply, and splitmix64's draws ran scalar there, ~4 ns an element
// against ~1.3 vectorised). Draw i of stream `seed`: a Weyl sequence over i's low half, offset
// by a key of the seed and i's high half, through a 32-bit finaliser (two multiplies; the
// "lowbias32" constants), read as a signed integer times 2^-31: uniform in [-1, 1) with 32
// random bits, far more than the few ulps a perturbation moves.
constexpr uint32_t kNoiseStep = 0x9e3779b9u;  // the Weyl step of i's low half
constexpr uint32_t kNoiseHigh = 0x85ebca6bu;  // the weight of i's high half
constexpr uint32_t kNoiseMix1 = 0x7feb352du;
constexpr uint32_t kNoiseMix2 = 0x846ca68bu;

FUMI_HOST_DEVICE inline uint32_t noiseMix(uint32_t z) {
  return xorShiftMultiply<uint32_t>(z, 16, kNoiseMix1, 15, kNoiseMix2, 16);
}

// What draws `index` .. the next multiple of 2^32 share: the seed's key and the index's high
// half (a loop hoists it and runs on 32-bit lanes).
FUMI_HOST_DEVICE inline uint32_t noiseBase(uint64_t seed, uint64_t index) {
  return noiseMix(static_cast<uint32_t>(seed) ^ noiseMix(static_cast<uint32_t>(seed >> 32))) +
         static_cast<uint32_t>(index >> 32) * kNoiseHigh;
}

// The 32 random bits of the draw whose index has low half `low`, given its noiseBase.
FUMI_HOST_DEVICE inline uint32_t noiseBits(uint32_t base, uint32_t low) {
  return noiseMix(low * kNoiseStep + base);
}

// That draw, uniform in [-1, 1).
FUMI_HOST_DEVICE inline double noiseDraw(uint32_t base, uint32_t low) {
  return static_cast<double>(static_cast<int32_t>(noiseBits(base, low))) * 0x1.0p-31;
}

// Draw `index` (0-based) of the noise stream of `seed`, uniform in [-1, 1).
FUMI_HOST_DEVICE inline double uniformSymDraw(uint64_t seed, uint64_t index) {
  return noiseDraw(noiseBase(seed, index), static_cast<uint32_t>(index));
}

}  // namespace fumi::metrics
