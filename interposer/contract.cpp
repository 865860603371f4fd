// contract.cpp — contractAxis, contractBoth, contractTensor and contractSides (contract.h).
// Built -O3 with the vector flags of fumi/simd.h (interposer/CMakeLists.txt).
#include "contract.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "element_types.h"
#include "elementwise.h"
#include "fumi/dtype.hpp"
#include "fumi/simd.h"
#include "metrics.h"

// The kernels are compiled for AVX-512, AVX2 and the baseline where GCC targets x86-64, and the
// widest the CPU has runs (target attributes, no ifunc: safe under ThreadSanitizer too).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FUMI_LANES_DISPATCH 1
#else
#define FUMI_LANES_DISPATCH 0
#endif

namespace fumi {

namespace {

// The cap on contractLanes (setContractLanesCap; 0: none).
std::atomic<int> g_lanes_cap{0};

}  // namespace

int contractLanes() {
  static const int best = [] {
#if FUMI_LANES_DISPATCH
    __builtin_cpu_init();
#if __GNUC__ >= 12
    if (__builtin_cpu_supports("x86-64-v4")) return 8;
    if (__builtin_cpu_supports("x86-64-v3")) return 4;
#else  // the levels' names came with GCC 12: their defining features
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512cd"))
      return 8;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("bmi2"))
      return 4;
#endif
#endif
    return 2;
  }();
  const int cap = g_lanes_cap.load(std::memory_order_relaxed);
  return cap > 0 ? std::min(best, std::max(2, cap)) : best;
}

void setContractLanesCap(int lanes) { g_lanes_cap.store(lanes, std::memory_order_relaxed); }

namespace {

using namespace element_types;

// W fp64 lanes, the width of the CPU's vector registers: 8 with AVX-512, 4 with AVX2, 2 with
// the x86-64 baseline (SSE2) and elsewhere. Each kernel below is written once for any W and
// compiled for each instruction set by withLanes (below), which picks the widest the CPU has.
// A vector type wider than the registers would be split by GCC, and its compares and selects
// lowered lane by lane through the stack (the AVX2 build of the kernels was 3-4x slower than
// the AVX-512 one for that alone). The kernels hold their sums in several vectors at once: a
// single chain of dependent adds runs at the add's latency, not at the FMA units' throughput.
template <int W>
struct Vec {
  typedef double Lanes __attribute__((vector_size(8 * W)));
  // Vector registers of the instruction set (AVX-512 has 32, AVX2 and SSE2 16): how many
  // sums a kernel keeps in flight without spilling them.
  static constexpr int kRegisters = W == 8 ? 32 : 16;
};
#define FUMI_KERNEL __attribute__((always_inline)) inline

// W consecutive elements as fp64 lanes.
template <int W, class E>
FUMI_KERNEL typename Vec<W>::Lanes loadLanes(const typename E::T* p) {
  using Lanes = typename Vec<W>::Lanes;
  if constexpr (std::is_same_v<E, F64>) {
    Lanes x;
    std::memcpy(&x, p, sizeof x);
    return x;
  } else if constexpr (std::is_same_v<E, F32>) {
    // Element by element: GCC makes this one widening load, where __builtin_convertvector
    // converts two halves and joins them (through the stack with AVX2).
    Lanes x;
    for (int i = 0; i < W; ++i) x[i] = p[i];
    return x;
  } else {
    Lanes x;
    for (int i = 0; i < W; ++i) x[i] = E::load(p[i]);
    return x;
  }
}

// |x| by clearing the sign bits: one AND (a compare and a select took three instructions).
template <int W>
FUMI_KERNEL typename Vec<W>::Lanes absLanes(typename Vec<W>::Lanes x) {
  typedef int64_t Bits __attribute__((vector_size(8 * W)));
  Bits b;
  std::memcpy(&b, &x, sizeof b);
  b &= INT64_MAX;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// The lanes' sum as a tree: the upper half added to the lower until one lane is left (log2 W
// vector adds; a sum lane by lane was W dependent scalar adds, each after an extract, which
// at the end of every short run cost as much as the run's own arithmetic).
#if defined(__clang__) || __GNUC__ >= 12
template <int W, size_t... I>
FUMI_KERNEL typename Vec<W / 2>::Lanes foldHalves(typename Vec<W>::Lanes x,
                                                   std::index_sequence<I...>) {
  return __builtin_shufflevector(x, x, I...) + __builtin_shufflevector(x, x, (I + W / 2)...);
}
#endif
template <int W>
FUMI_KERNEL double laneSum(typename Vec<W>::Lanes x) {
#if defined(__clang__) || __GNUC__ >= 12  // __builtin_shufflevector
  if constexpr (W == 1) {
    return x[0];
  } else {
    return laneSum<W / 2>(foldHalves<W>(x, std::make_index_sequence<W / 2>{}));
  }
#else
  double s = 0;
  for (int i = 0; i < W; ++i) s += x[i];
  return s;
#endif
}

// The lane sums of N vectors at once, out[i] = laneSum(v[i]): W vectors at a time folded
// pairwise as a tree, each fold two two-source shuffles and one add that halve both vectors'
// groups of lanes and interleave them, until one vector holds the W sums (lane i that of
// vector treeOrder[i]). N separate lane sums took N x log2(W) dependent folds, extracts and a
// trip through the stack: as much time as the arithmetic of a run of 256 elements.
#if defined(__clang__) || __GNUC__ >= 12
constexpr size_t foldIndex(int W, int B, size_t i, bool upper) {
  return static_cast<size_t>(((i / B) % 2 ? W : 0) + (i / (2 * B)) * 2 * B + i % B +
                             (upper ? B : 0));
}
template <int W, int B, size_t... I>
FUMI_KERNEL typename Vec<W>::Lanes foldPair(typename Vec<W>::Lanes x, typename Vec<W>::Lanes y,
                                            std::index_sequence<I...>) {
  return __builtin_shufflevector(x, y, foldIndex(W, B, I, false)...) +
         __builtin_shufflevector(x, y, foldIndex(W, B, I, true)...);
}
// Which vector's sum lane i of the tree's result holds (the folds above, run on labels).
template <int W>
constexpr std::array<int, W> treeOrder() {
  std::array<std::array<int, W>, W> v{};
  for (int t = 0; t < W; ++t)
    for (int i = 0; i < W; ++i) v[t][i] = t;
  for (int b = W / 2, n = W; b >= 1; b /= 2, n /= 2)
    for (int t = 0; t < n / 2; ++t) {
      std::array<int, W> f{};
      for (int i = 0; i < W; ++i) {
        const size_t j = foldIndex(W, b, static_cast<size_t>(i), false);
        f[i] = j < W ? v[2 * t][j] : v[2 * t + 1][j - W];
      }
      v[t] = f;
    }
  return v[0];
}
// N vectors folded into N / 2 with groups of B lanes, down to one vector.
template <int W, int B, int N>
FUMI_KERNEL void foldLevels(typename Vec<W>::Lanes* v) {
  for (int t = 0; t < N / 2; ++t)
    v[t] = foldPair<W, B>(v[2 * t], v[2 * t + 1], std::make_index_sequence<W>{});
  if constexpr (B > 1) foldLevels<W, B / 2, N / 2>(v);
}
#endif
template <int W, int N>
FUMI_KERNEL void laneSums(const typename Vec<W>::Lanes* x, double* out) {
#if defined(__clang__) || __GNUC__ >= 12
  if constexpr (W > 1) {
    using Lanes = typename Vec<W>::Lanes;
    constexpr std::array<int, W> order = treeOrder<W>();
    for (int c = 0; c < N; c += W) {
      Lanes v[W];
      for (int t = 0; t < W; ++t) v[t] = c + t < N ? x[c + t] : Lanes{};
      foldLevels<W, W / 2, W>(v);
      for (int i = 0; i < W; ++i)
        if (c + order[i] < N) out[c + order[i]] = v[0][i];
    }
    return;
  }
#endif
  for (int i = 0; i < N; ++i) out[i] = laneSum<W>(x[i]);
}

// The contracted axis has unit stride: dot products of the contiguous runs with the S vectors,
// R runs (kept indices) at a time, so each load of a vector serves R runs and R x S independent
// sums are in flight. R is a constant so that the sums stay in registers.
template <int W, class E, int S, int R>
FUMI_KERNEL void dotRuns(const typename E::T* m, int64_t k0, int64_t sk, int64_t L,
                         const double* V, int64_t ldv, double alpha, bool accumulate, double* out,
                         int64_t out_k, int64_t out_s) {
  using Lanes = typename Vec<W>::Lanes;
  Lanes acc[R][S] = {};
  int64_t l = 0;
  for (; l + W <= L; l += W) {
    Lanes v[S];
    for (int s = 0; s < S; ++s) std::memcpy(&v[s], V + s * ldv + l, sizeof(Lanes));
    for (int r = 0; r < R; ++r) {
      const Lanes x = loadLanes<W, E>(m + (k0 + r) * sk + l);
      for (int s = 0; s < S; ++s) acc[r][s] += x * v[s];
    }
  }
  double sums[R * S];
  laneSums<W, R * S>(&acc[0][0], sums);
  for (int r = 0; r < R; ++r) {
    const typename E::T* row = m + (k0 + r) * sk;
    for (int s = 0; s < S; ++s) {
      double sum = sums[r * S + s];
      for (int64_t q = l; q < L; ++q) sum += E::load(row[q]) * V[s * ldv + q];
      double* o = out + (k0 + r) * out_k + s * out_s;
      *o = accumulate ? *o + alpha * sum : alpha * sum;
    }
  }
}

template <int W, class E, int S>
FUMI_KERNEL void dotKernel(const typename E::T* m, int64_t K, int64_t sk, int64_t L,
                           const double* V, int64_t ldv, double alpha, bool accumulate,
                           double* out, int64_t out_k, int64_t out_s) {
  // R x S sums and S vectors in registers, with room for the loaded run.
  constexpr int R = Vec<W>::kRegisters >= 32 ? (S >= 4 ? 2 : 4) : (S >= 8 ? 1 : S >= 4 ? 2 : 4);
  int64_t k = 0;
  for (; k + R <= K; k += R)
    dotRuns<W, E, S, R>(m, k, sk, L, V, ldv, alpha, accumulate, out, out_k, out_s);
  for (; k < K; ++k) dotRuns<W, E, S, 1>(m, k, sk, L, V, ldv, alpha, accumulate, out, out_k, out_s);
}

// The kept axis has unit stride: scaled adds of the contiguous runs into per-vector rows of
// `tmp` (S x K), C runs (contracted indices) at a time, so each row of `tmp` is loaded and
// stored once per C runs: 8 where the registers hold 8 runs' weights for each of up to 2
// vectors (AVX-512; 4 runs took about 6% more time, 256 x 256 fp32 with 2 vectors), else 4.
// Along K in tiles whose S rows of sums stay in the L1 cache (16 KiB) while every run adds to
// them (a filter gradient's runs are thousands long).
template <int W, class E, int S>
FUMI_KERNEL void axpyKernel(const typename E::T* m, int64_t K, int64_t L, int64_t sl,
                            const double* V, int64_t ldv, double* tmp) {
  using Lanes = typename Vec<W>::Lanes;
  constexpr int C = Vec<W>::kRegisters >= 32 && S <= 2 ? 8 : 4;
  std::fill(tmp, tmp + S * K, 0.0);
  constexpr int64_t kTile = 2048 / S;
  for (int64_t k0 = 0; k0 < K; k0 += kTile) {
    const int64_t k1 = std::min(K, k0 + kTile);
    int64_t l = 0;
    for (; l + C <= L; l += C) {
      const typename E::T* col[C];
      double w[S][C];
      for (int c = 0; c < C; ++c) {
        col[c] = m + (l + c) * sl;
        for (int s = 0; s < S; ++s) w[s][c] = V[s * ldv + l + c];
      }
      // W lanes at a time, written out: GCC leaves the loop over S rows of tmp scalar.
      int64_t k = k0;
      for (; k + W <= k1; k += W) {
        Lanes x[C];
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) x[c] = loadLanes<W, E>(col[c] + k);
        for (int s = 0; s < S; ++s) {
          Lanes t;
          std::memcpy(&t, tmp + s * K + k, sizeof t);
          // One multiply-add per run: each row's chain is independent of the next W rows'
          // (a tree of products and adds took half as many more instructions).
#pragma GCC unroll 8
          for (int c = 0; c < C; ++c) t += x[c] * w[s][c];
          std::memcpy(tmp + s * K + k, &t, sizeof t);
        }
      }
      for (; k < k1; ++k)
        for (int c = 0; c < C; ++c) {
          const double x = E::load(col[c][k]);
          for (int s = 0; s < S; ++s) tmp[s * K + k] += x * w[s][c];
        }
    }
    for (; l < L; ++l) {
      const typename E::T* col = m + l * sl;
      for (int s = 0; s < S; ++s) {
        double* t = tmp + s * K;
        const double w = V[s * ldv + l];
        FUMI_SIMD()
        for (int64_t k = k0; k < k1; ++k) t[k] += E::load(col[k]) * w;
      }
    }
  }
}

// Both sides of a matrix at once (contractSides): M(k, l) = m[k + l * sl], unit stride along k.
// VL's S vectors run over l (kept k: sums into the rows of tmp, S x K, as axpyKernel), VK's S
// vectors over k (kept l: outL[l * S + s], as dotKernel); with kScan, the squares and the
// magnitudes of M as well (unmasked, as scanValues' first pass; the C runs' squares summed and
// their magnitudes compared first, so each iteration adds one add and one max to *sq and *mx).
// C runs (columns l) at a time.
template <int W, class E, int S, bool kScan, int C>
FUMI_KERNEL void twoSidedRuns(const typename E::T* m, int64_t K, int64_t l, int64_t sl,
                              const double* VL, int64_t ldvl, const double* VK, int64_t ldvk,
                              double* tmp, double* outL, typename Vec<W>::Lanes* sq,
                              typename Vec<W>::Lanes* mx) {
  using Lanes = typename Vec<W>::Lanes;
  const typename E::T* col[C];
  double w[S][C];
  for (int c = 0; c < C; ++c) {
    col[c] = m + (l + c) * sl;
    for (int s = 0; s < S; ++s) w[s][c] = VL[s * ldvl + l + c];
  }
  Lanes acc[C][S] = {};
  int64_t k = 0;
  for (; k + W <= K; k += W) {
    Lanes x[C];
    for (int c = 0; c < C; ++c) x[c] = loadLanes<W, E>(col[c] + k);
    for (int s = 0; s < S; ++s) {
      Lanes t, v;
      std::memcpy(&t, tmp + s * K + k, sizeof t);
      std::memcpy(&v, VK + s * ldvk + k, sizeof v);
      for (int c = 0; c < C; ++c) {
        t += x[c] * w[s][c];
        acc[c][s] += x[c] * v;
      }
      std::memcpy(tmp + s * K + k, &t, sizeof t);
    }
    if constexpr (kScan) {  // the C runs' squares and magnitudes, then one add and one max
      Lanes p = x[0] * x[0], a = absLanes<W>(x[0]);
      for (int c = 1; c < C; ++c) {
        p += x[c] * x[c];
        const Lanes b = absLanes<W>(x[c]);
        a = b > a ? b : a;
      }
      *sq += p;
      *mx = a > *mx ? a : *mx;
    }
  }
  laneSums<W, C * S>(&acc[0][0], outL + l * S);
  for (; k < K; ++k)
    for (int c = 0; c < C; ++c) {
      const double x = E::load(col[c][k]);
      for (int s = 0; s < S; ++s) {
        tmp[s * K + k] += x * w[s][c];
        outL[(l + c) * S + s] += x * VK[s * ldvk + k];
      }
      if constexpr (kScan) {
        (*sq)[0] += x * x;
        (*mx)[0] = std::max((*mx)[0], std::fabs(x));
      }
    }
}

template <int W, class E, int S, bool kScan>
FUMI_KERNEL void twoSidedKernel(const typename E::T* m, int64_t K, int64_t L, int64_t sl,
                                const double* VL, int64_t ldvl, const double* VK, int64_t ldvk,
                                double* tmp, double* outL, double* sum_sq, double* max_abs) {
  using Lanes = typename Vec<W>::Lanes;
  // C x S column sums in registers, with C runs' elements, a row of tmp and of VK and the
  // scan's sums. With AVX2's 16 registers, 4 runs and the scan spill column sums, whose store
  // and reload each iteration then wait on each other: 3 runs take a fifth less time there
  // (the 256 x 256 fp32 output of a GEMM, both sides with 2 vectors and the scan: 22 -> 18 us).
  constexpr int C = Vec<W>::kRegisters >= 32 ? 4 : S > 2 ? 2 : kScan ? 3 : 4;
  std::fill(tmp, tmp + S * K, 0.0);
  Lanes sq = {}, mx = {};
  int64_t l = 0;
  for (; l + C <= L; l += C)
    twoSidedRuns<W, E, S, kScan, C>(m, K, l, sl, VL, ldvl, VK, ldvk, tmp, outL, &sq, &mx);
  for (; l < L; ++l)
    twoSidedRuns<W, E, S, kScan, 1>(m, K, l, sl, VL, ldvl, VK, ldvk, tmp, outL, &sq, &mx);
  if constexpr (kScan) {
    *sum_sq += laneSum<W>(sq);
    for (int i = 0; i < W; ++i) *max_abs = std::max(*max_abs, mx[i]);
  }
}

// f(std::integral_constant<int, W>{}) compiled for the widest vectors the CPU has (contractLanes):
// f must be always inlined (FUMI_KERNEL_LAMBDA), as must every kernel it calls, so that their
// code is generated for the instruction set of the function that calls them here.
#define FUMI_KERNEL_LAMBDA __attribute__((always_inline))
template <int W, class F>
FUMI_KERNEL void lanesOf(F& f) {
  f(std::integral_constant<int, W>{});
}
#if FUMI_LANES_DISPATCH
template <class F>
__attribute__((target("arch=x86-64-v4"))) void onAvx512(F& f) {
  lanesOf<8>(f);
}
template <class F>
__attribute__((target("arch=x86-64-v3"))) void onAvx2(F& f) {
  lanesOf<4>(f);
}
#endif
template <class F>
void onBaseline(F& f) {
  lanesOf<2>(f);
}
template <class F>
void withLanes(F&& f) {
#if FUMI_LANES_DISPATCH
  const int lanes = contractLanes();
  if (lanes >= 8) return onAvx512(f);
  if (lanes >= 4) return onAvx2(f);
#endif
  onBaseline(f);
}

// The K sums of one vector, v[k * step], into o[k * c.out_k] as `c` says (alpha, accumulate):
// a loop for each case rather than a choice per element.
void putScaled(const AxisContraction& c, int64_t K, const double* v, int64_t step, double* o) {
  const double alpha = c.alpha;
  const int64_t ok = c.out_k;
  if (c.accumulate)
    for (int64_t k = 0; k < K; ++k) o[k * ok] += alpha * v[k * step];
  else if (alpha == 1.0)
    for (int64_t k = 0; k < K; ++k) o[k * ok] = v[k * step];
  else
    for (int64_t k = 0; k < K; ++k) o[k * ok] = alpha * v[k * step];
}

template <class E, int S>
void block(const AxisContraction& c, const typename E::T* m, const double* V, double* out,
           std::vector<double>& scratch) {
  if (c.sl == 1) {
    withLanes([&](auto w) FUMI_KERNEL_LAMBDA {
      dotKernel<decltype(w)::value, E, S>(m, c.K, c.sk, c.L, V, c.ldv, c.alpha, c.accumulate,
                                          out, c.out_k, c.out_s);
    });
    return;
  }
  if (c.sk == 1) {
    scratch.resize(static_cast<size_t>(S * c.K));
    withLanes([&](auto w) FUMI_KERNEL_LAMBDA {
      axpyKernel<decltype(w)::value, E, S>(m, c.K, c.L, c.sl, V, c.ldv, scratch.data());
    });
    for (int s = 0; s < S; ++s) putScaled(c, c.K, scratch.data() + s * c.K, 1, out + s * c.out_s);
    return;
  }
  // Neither axis contiguous: each run is staged as fp64, then the unit-stride kernel.
  scratch.resize(static_cast<size_t>(c.L));
  withLanes([&](auto w) FUMI_KERNEL_LAMBDA {
    for (int64_t k = 0; k < c.K; ++k) {
      const typename E::T* row = m + k * c.sk;
      for (int64_t l = 0; l < c.L; ++l) scratch[static_cast<size_t>(l)] = E::load(row[l * c.sl]);
      dotKernel<decltype(w)::value, F64, S>(scratch.data(), 1, 0, c.L, V, c.ldv, c.alpha,
                                            c.accumulate, out + k * c.out_k, 0, c.out_s);
    }
  });
}

template <class E>
void contractTyped(const AxisContraction& c) {
  thread_local std::vector<double> scratch;
  const auto* m = static_cast<const typename E::T*>(c.data) + c.base;
  // Vectors in blocks of 8, 4, 2, 1: each block reads M once.
  for (int32_t s0 = 0; s0 < c.count;) {
    const int32_t left = c.count - s0;
    const double* V = c.V + s0 * c.ldv;
    double* out = c.out + s0 * c.out_s;
    if (left >= 8) block<E, 8>(c, m, V, out, scratch), s0 += 8;
    else if (left >= 4) block<E, 4>(c, m, V, out, scratch), s0 += 4;
    else if (left >= 2) block<E, 2>(c, m, V, out, scratch), s0 += 2;
    else block<E, 1>(c, m, V, out, scratch), s0 += 1;
  }
  if (scratch.capacity() > (size_t{1} << 20)) std::vector<double>().swap(scratch);
}

}  // namespace

bool contractAxis(const AxisContraction& c) {
  if (c.K <= 0 || c.count <= 0) return dtypeBytes(c.dtype) > 0;
  return visitLoad(c.dtype, [&](auto e) { contractTyped<decltype(e)>(c); });
}

namespace {

// t with the dimensions that are one run in memory read as one: adjacent dimensions on the same
// side of `dim` where the outer one's stride is the inner one's extent times its stride, and
// without dimensions of extent 1 (other than dim). Row-major order is kept on each side, so the
// contraction's output layout is the same. *dim_out: where `dim` went.
fumi_tensor coalesced(const fumi_tensor& t, int32_t dim, int32_t* dim_out) {
  fumi_tensor u = t;
  u.ndim = 0;
  for (int32_t d = 0; d < t.ndim; ++d) {
    if (d != dim && t.shape[d] == 1) continue;
    const int32_t last = u.ndim - 1;
    if (d != dim && last >= 0 && last != *dim_out &&
        u.strides[last] == t.strides[d] * t.shape[d]) {
      u.shape[last] *= t.shape[d];
      u.strides[last] = t.strides[d];
      continue;
    }
    if (d == dim) *dim_out = u.ndim;
    u.shape[u.ndim] = t.shape[d];
    u.strides[u.ndim] = t.strides[d];
    ++u.ndim;
  }
  return u;
}

}  // namespace

bool contractTensor(const fumi_tensor& tensor, const void* data, fumi_dtype dtype, int32_t dim_in,
                    int32_t count, const double* vectors, double alpha, bool accumulate,
                    double* out) {
  if (dim_in < 0 || dim_in >= tensor.ndim || count < 1 || dtypeBytes(dtype) == 0) return false;
  // The kernel's kept axis is then as long as the layout allows: a filter gradient's
  // C_in x filter elements rather than its filter width (one kernel call per three elements:
  // 1.7 ns per element, 0.2-0.4 ns read as one run).
  int32_t dim = -1;
  const fumi_tensor t = coalesced(tensor, dim_in, &dim);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < t.ndim; ++d) {
    if (d < dim) outer *= t.shape[d];
    if (d > dim) inner *= t.shape[d];
  }
  const int64_t len = t.shape[dim];
  if (outer * inner == 0) return true;
  // Where each other dimension's index moves the output: row-major over the outer dimensions
  // (times count * inner) and over the inner ones.
  int64_t out_stride[FUMI_MAX_DIMS] = {0};
  int64_t step = 1;
  for (int d = t.ndim - 1; d > dim; --d) out_stride[d] = step, step *= t.shape[d];
  step = static_cast<int64_t>(count) * inner;
  for (int d = dim - 1; d >= 0; --d) out_stride[d] = step, step *= t.shape[d];
  // The kept axis of the kernel: the other dimension with the smallest stride in memory.
  int kept = -1;
  for (int d = 0; d < t.ndim; ++d)
    if (d != dim && t.shape[d] > 1 &&
        (kept < 0 || std::abs(t.strides[d]) <= std::abs(t.strides[kept])))
      kept = d;
  AxisContraction c;
  c.data = data;
  c.dtype = dtype;
  c.K = kept >= 0 ? t.shape[kept] : 1;
  c.sk = kept >= 0 ? t.strides[kept] : 0;
  c.L = len;
  c.sl = t.strides[dim];
  c.V = vectors;
  c.ldv = len;
  c.count = count;
  c.alpha = alpha;
  c.accumulate = accumulate;
  c.out_k = kept >= 0 ? out_stride[kept] : 0;
  c.out_s = inner;
  // The remaining dimensions: an odometer around the kernel.
  int others[FUMI_MAX_DIMS], n_others = 0;
  for (int d = 0; d < t.ndim; ++d)
    if (d != dim && d != kept && t.shape[d] > 1) others[n_others++] = d;
  int64_t idx[FUMI_MAX_DIMS] = {0};
  const int64_t base = tensorBase(t);
  int64_t src = 0, dst = 0;
  while (true) {
    c.base = base + src;
    c.out = out + dst;
    if (!contractAxis(c)) return false;
    int j = n_others - 1;
    for (; j >= 0; --j) {
      const int d = others[j];
      src += t.strides[d];
      dst += out_stride[d];
      if (++idx[j] < t.shape[d]) break;
      src -= t.strides[d] * t.shape[d];
      dst -= out_stride[d] * t.shape[d];
      idx[j] = 0;
    }
    if (j < 0) return true;
  }
}

bool contractBoth(const AxisContraction& a, const AxisContraction& b, double* sum_sq,
                  double* max_abs) {
  if (a.data != b.data || a.dtype != b.dtype || a.base != b.base || a.K != b.L || a.L != b.K ||
      a.sk != b.sl || a.sl != b.sk || a.count != b.count || a.count < 1)
    return false;
  if (a.sk != 1) return a.sl == 1 && contractBoth(b, a, sum_sq, max_abs);
  // M(k, l) = data[base + k + l * sl]: `a` sums over l (one sum per k: the kernel's tmp), `b`
  // over k (one per l: its outL).
  const int64_t K = a.K, L = a.L;
  thread_local std::vector<double> tmp, outL;
  tmp.resize(static_cast<size_t>(4 * K));
  outL.resize(static_cast<size_t>(4 * L));
  const bool ok = visitLoad(a.dtype, [&](auto e) {
    using E = decltype(e);
    const auto* m = static_cast<const typename E::T*>(a.data) + a.base;
    for (int32_t s0 = 0; s0 < a.count;) {
      const int32_t S = a.count - s0 >= 4 ? 4 : a.count - s0 >= 2 ? 2 : 1;
      const bool scan = sum_sq && s0 == 0;
      auto run = [&](auto s_const, auto scan_const) {
        withLanes([&](auto w) FUMI_KERNEL_LAMBDA {
          twoSidedKernel<decltype(w)::value, E, decltype(s_const)::value,
                         decltype(scan_const)::value>(m, K, L, a.sl, a.V + s0 * a.ldv, a.ldv,
                                                      b.V + s0 * b.ldv, b.ldv, tmp.data(),
                                                      outL.data(), sum_sq, max_abs);
        });
      };
      using T4 = std::integral_constant<int, 4>;
      using T2 = std::integral_constant<int, 2>;
      using T1 = std::integral_constant<int, 1>;
      using Yes = std::true_type;
      using No = std::false_type;
      if (S == 4) scan ? run(T4{}, Yes{}) : run(T4{}, No{});
      else if (S == 2) scan ? run(T2{}, Yes{}) : run(T2{}, No{});
      else scan ? run(T1{}, Yes{}) : run(T1{}, No{});
      for (int32_t s = 0; s < S; ++s) {
        putScaled(a, K, tmp.data() + s * K, 1, a.out + (s0 + s) * a.out_s);
        putScaled(b, L, outL.data() + s, S, b.out + (s0 + s) * b.out_s);
      }
      s0 += S;
    }
  });
  if (tmp.capacity() > (size_t{1} << 20)) std::vector<double>().swap(tmp);
  if (outL.capacity() > (size_t{1} << 20)) std::vector<double>().swap(outL);
  return ok;
}

namespace {

// contractSides' single pass, or false where it does not apply (the caller then goes side by
// side): `a` and `b` along the last two dimensions of a 2-D or 3-D t, one of them unit-stride.
// Squares and magnitudes into *sum_sq and *max_abs when sum_sq is not null.
bool twoSided(const fumi_tensor& t, const void* data, fumi_dtype dtype, const fumi_side& a,
              const fumi_side& b, double* sum_sq, double* max_abs) {
  const int nd = t.ndim, r = nd - 2, c = nd - 1;
  if ((nd != 2 && nd != 3) || a.count != b.count || a.dim == b.dim ||
      (a.dim != r && a.dim != c) || (b.dim != r && b.dim != c) ||
      (t.strides[r] != 1 && t.strides[c] != 1))
    return false;
  const int64_t batch = nd == 3 ? t.shape[0] : 1;
  // One contraction per side: side x sums over its dimension d, one sum per index of the other
  // dimension e, in fumi_host_api.project's layout: (b * len_e + i) * count + s when e comes
  // before d, (b * count + s) * len_e + i when after.
  auto along = [&](const fumi_side& x, int64_t bi) {
    const int d = x.dim, e = x.dim == r ? c : r;
    AxisContraction k;
    k.data = data;
    k.dtype = dtype;
    k.base = tensorBase(t) + (nd == 3 ? bi * t.strides[0] : 0);
    k.K = t.shape[e];
    k.sk = t.strides[e];
    k.L = t.shape[d];
    k.sl = t.strides[d];
    k.V = x.vectors;
    k.ldv = t.shape[d];
    k.count = x.count;
    k.out = x.out + bi * x.count * t.shape[e];
    k.out_k = e < d ? x.count : 1;
    k.out_s = e < d ? 1 : t.shape[e];
    return k;
  };
  for (int64_t bi = 0; bi < batch; ++bi)
    if (!contractBoth(along(a, bi), along(b, bi), sum_sq, max_abs)) return false;
  return true;
}

}  // namespace

bool contractSides(const fumi_tensor& t, const void* data, fumi_dtype dtype, int32_t n,
                   const fumi_side* sides, fumi_scan* scan) {
  if (n < 0 || (n > 0 && !sides) || dtypeBytes(dtype) == 0) return false;
  double sum_sq = 0.0, max_abs = 0.0;
  if (n == 2 && tensorNumel(t) > 0 &&
      twoSided(t, data, dtype, sides[0], sides[1], scan ? &sum_sq : nullptr, &max_abs)) {
    // The kernel's squares and magnitudes are scanValues' first pass: the whole scan unless an
    // element is not finite or the squares are out of range (then scanTensor's own passes).
    return !scan || metrics::scanFromSquares(sum_sq, max_abs, scan) ||
           scanTensor(t, data, dtype, scan) == FUMI_OK;
  }
  for (int32_t i = 0; i < n; ++i)
    if (!contractTensor(t, data, dtype, sides[i].dim, sides[i].count, sides[i].vectors, 1.0, false,
                        sides[i].out))
      return false;
  return !scan || scanTensor(t, data, dtype, scan) == FUMI_OK;
}

bool contractAxisOnDevice(const AxisContraction& c, const DeviceContract& device) {
  const int bytes = dtypeBytes(c.dtype);
  if (bytes <= 0 || c.sk < 0 || c.sl < 0 || c.count < 1 || c.K < 0 || c.L < 0 || c.ldv != c.L)
    return false;
  fumi_tensor view{};
  view.struct_size = sizeof view;
  view.dtype = c.dtype;
  view.memory = FUMI_MEMORY_DEVICE;
  view.ndim = 2;
  view.shape[0] = c.K;
  view.shape[1] = c.L;
  view.strides[0] = c.sk;
  view.strides[1] = c.sl;
  view.data = const_cast<char*>(static_cast<const char*>(c.data) + c.base * bytes);
  const auto count = static_cast<size_t>(c.count), K = static_cast<size_t>(c.K);
  std::vector<double> got(K * count);  // K x count: outer K, inner 1
  if (K > 0 && device(view, 1, c.count, c.V, got.data()) != FUMI_OK) return false;
  for (size_t k = 0; k < K; ++k)
    for (size_t s = 0; s < count; ++s) {
      double& o = c.out[static_cast<int64_t>(k) * c.out_k + static_cast<int64_t>(s) * c.out_s];
      const double v = c.alpha * got[k * count + s];
      o = c.accumulate ? o + v : v;
    }
  return true;
}

bool contractSidesOnDevice(const fumi_tensor& t, const void* data, fumi_dtype dtype, int32_t n,
                           const fumi_side* sides, const DeviceContract& device) {
  if (hasNegativeStride(t)) return false;
  fumi_tensor view = t;
  view.data = const_cast<void*>(data);
  view.dtype = dtype;
  for (int32_t i = 0; i < n; ++i)
    if (device(view, sides[i].dim, sides[i].count, sides[i].vectors, sides[i].out) != FUMI_OK)
      return false;
  return true;
}

}  // namespace fumi
