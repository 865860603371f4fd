// contract.cpp — contractAxis and contractTensor (contract.h). Built -O3 with the vector flags of
// fumi/simd.h (interposer/CMakeLists.txt).
#include "contract.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "element_types.h"
#include "fumi/dtype.hpp"
#include "fumi/simd.h"

namespace fumi {

namespace {

using namespace element_types;

// Eight fp64 lanes: one AVX-512 register, two AVX2 ones, four SSE2 ones (GCC splits the type for
// each FUMI_WIDE clone). The kernels below hold their sums in several of them at once: a single
// chain of dependent adds runs at the add's latency, not at the FMA units' throughput.
typedef double Lanes __attribute__((vector_size(64)));
constexpr int kLanes = 8;

// Eight consecutive elements as fp64 lanes.
template <class E>
inline Lanes load8(const typename E::T* p) {
  if constexpr (std::is_same_v<E, F64>) {
    Lanes x;
    std::memcpy(&x, p, sizeof x);
    return x;
  } else if constexpr (std::is_same_v<E, F32>) {
    typedef float Floats __attribute__((vector_size(32)));
    Floats x;
    std::memcpy(&x, p, sizeof x);
    return __builtin_convertvector(x, Lanes);
  } else {
    Lanes x;
    for (int i = 0; i < kLanes; ++i) x[i] = E::load(p[i]);
    return x;
  }
}

inline double laneSum(Lanes x) {
  double s = 0;
  for (int i = 0; i < kLanes; ++i) s += x[i];
  return s;
}

// The contracted axis has unit stride: dot products of the contiguous runs with the S vectors,
// R runs (kept indices) at a time, so each load of a vector serves R runs and R x S independent
// sums are in flight.
template <class E, int S>
FUMI_WIDE void dotKernel(const typename E::T* m, int64_t K, int64_t sk, int64_t L,
                         const double* V, int64_t ldv, double alpha, bool accumulate, double* out,
                         int64_t out_k, int64_t out_s) {
  constexpr int R = S >= 4 ? 2 : 4;
  for (int64_t k0 = 0; k0 < K; k0 += R) {
    const int rows = static_cast<int>(std::min<int64_t>(R, K - k0));
    Lanes acc[R][S] = {};
    int64_t l = 0;
    for (; l + kLanes <= L; l += kLanes) {
      Lanes v[S];
      for (int s = 0; s < S; ++s) std::memcpy(&v[s], V + s * ldv + l, sizeof(Lanes));
      for (int r = 0; r < rows; ++r) {
        const Lanes x = load8<E>(m + (k0 + r) * sk + l);
        for (int s = 0; s < S; ++s) acc[r][s] += x * v[s];
      }
    }
    for (int r = 0; r < rows; ++r) {
      const typename E::T* row = m + (k0 + r) * sk;
      for (int s = 0; s < S; ++s) {
        double sum = laneSum(acc[r][s]);
        for (int64_t q = l; q < L; ++q) sum += E::load(row[q]) * V[s * ldv + q];
        double* o = out + (k0 + r) * out_k + s * out_s;
        *o = accumulate ? *o + alpha * sum : alpha * sum;
      }
    }
  }
}

// The kept axis has unit stride: scaled adds of the contiguous runs into per-vector rows of
// `tmp` (S x K), four runs (contracted indices) at a time, so each row of `tmp` is loaded and
// stored once per four runs.
template <class E, int S>
FUMI_WIDE void axpyKernel(const typename E::T* m, int64_t K, int64_t L, int64_t sl,
                          const double* V, int64_t ldv, double* tmp) {
  std::fill(tmp, tmp + S * K, 0.0);
  int64_t l = 0;
  for (; l + 4 <= L; l += 4) {
    const typename E::T* c0 = m + l * sl;
    const typename E::T *c1 = c0 + sl, *c2 = c1 + sl, *c3 = c2 + sl;
    double w[S][4];
    for (int s = 0; s < S; ++s)
      for (int j = 0; j < 4; ++j) w[s][j] = V[s * ldv + l + j];
    FUMI_SIMD()
    for (int64_t k = 0; k < K; ++k) {
      const double x0 = E::load(c0[k]), x1 = E::load(c1[k]), x2 = E::load(c2[k]),
                   x3 = E::load(c3[k]);
      for (int s = 0; s < S; ++s)
        tmp[s * K + k] += (x0 * w[s][0] + x1 * w[s][1]) + (x2 * w[s][2] + x3 * w[s][3]);
    }
  }
  for (; l < L; ++l) {
    const typename E::T* col = m + l * sl;
    for (int s = 0; s < S; ++s) {
      double* t = tmp + s * K;
      const double w = V[s * ldv + l];
      FUMI_SIMD()
      for (int64_t k = 0; k < K; ++k) t[k] += E::load(col[k]) * w;
    }
  }
}

template <class E, int S>
void block(const AxisContraction& c, const typename E::T* m, const double* V, double* out,
           std::vector<double>& scratch) {
  if (c.sl == 1) {
    dotKernel<E, S>(m, c.K, c.sk, c.L, V, c.ldv, c.alpha, c.accumulate, out, c.out_k, c.out_s);
    return;
  }
  if (c.sk == 1) {
    scratch.resize(static_cast<size_t>(S * c.K));
    axpyKernel<E, S>(m, c.K, c.L, c.sl, V, c.ldv, scratch.data());
    for (int s = 0; s < S; ++s)
      for (int64_t k = 0; k < c.K; ++k) {
        double* o = out + k * c.out_k + s * c.out_s;
        const double v = c.alpha * scratch[static_cast<size_t>(s * c.K + k)];
        *o = c.accumulate ? *o + v : v;
      }
    return;
  }
  // Neither axis contiguous: each run is staged as fp64, then the unit-stride kernel.
  scratch.resize(static_cast<size_t>(c.L));
  for (int64_t k = 0; k < c.K; ++k) {
    const typename E::T* row = m + k * c.sk;
    for (int64_t l = 0; l < c.L; ++l) scratch[static_cast<size_t>(l)] = E::load(row[l * c.sl]);
    dotKernel<F64, S>(scratch.data(), 1, 0, c.L, V, c.ldv, c.alpha, c.accumulate,
                      out + k * c.out_k, 0, c.out_s);
  }
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

bool contractTensor(const fumi_tensor& t, const void* data, fumi_dtype dtype, int32_t dim,
                    int32_t count, const double* vectors, double alpha, bool accumulate,
                    double* out) {
  if (dim < 0 || dim >= t.ndim || count < 1 || dtypeBytes(dtype) == 0) return false;
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

}  // namespace fumi
