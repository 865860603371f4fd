// contract.cpp — contractAxis and contractTensor (contract.h). Built -O3 with the vector flags of
// fumi/simd.h (interposer/CMakeLists.txt).
#include "contract.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "element_types.h"
#include "fumi/dtype.hpp"
#include "fumi/simd.h"

namespace fumi {

namespace {

using namespace element_types;

// The contracted axis has unit stride: per kept index, S dot products over the contiguous run
// (which stays in L1 between them), each an `omp simd` sum.
template <class E, int S>
FUMI_WIDE void dotKernel(const typename E::T* m, int64_t K, int64_t sk, int64_t L,
                         const double* V, int64_t ldv, double alpha, bool accumulate, double* out,
                         int64_t out_k, int64_t out_s) {
  for (int64_t k = 0; k < K; ++k) {
    const typename E::T* row = m + k * sk;
    for (int s = 0; s < S; ++s) {
      const double* v = V + s * ldv;
      double sum = 0;
      FUMI_SIMD(reduction(+ : sum))
      for (int64_t l = 0; l < L; ++l) sum += E::load(row[l]) * v[l];
      double* o = out + k * out_k + s * out_s;
      *o = accumulate ? *o + alpha * sum : alpha * sum;
    }
  }
}

// The kept axis has unit stride: per contracted index, S scaled adds of the contiguous run into
// per-vector rows of `tmp` (S x K), vectorised along the run.
template <class E, int S>
FUMI_WIDE void axpyKernel(const typename E::T* m, int64_t K, int64_t L, int64_t sl,
                          const double* V, int64_t ldv, double* tmp) {
  std::fill(tmp, tmp + S * K, 0.0);
  for (int64_t l = 0; l < L; ++l) {
    const typename E::T* col = m + l * sl;
    double v[S];
    for (int s = 0; s < S; ++s) v[s] = V[s * ldv + l];
    for (int s = 0; s < S; ++s) {
      double* t = tmp + s * K;
      const double w = v[s];
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
