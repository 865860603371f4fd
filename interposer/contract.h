// contract.h — a tensor contracted along one dimension with a few vectors, read in place: typed,
// in its own layout, no dense copy. The arithmetic of the `checksum` check (Freivalds'
// projections: O(size x vectors), against the O(mnk) of a rerun) on both sides: the host's exact
// projection of a GEMM (reference.cpp, matmulProjection) and the call's own output
// (fumi_host_api.contract). Plain fp64 sums; compensated projections stay in reference.cpp.
#pragma once

#include <cstdint>
#include <functional>

#include "fumi/plugin.h"

namespace fumi {

// A matrix M(k, l) = data[base + k * sk + l * sl] of `dtype` (k < K kept, l < L contracted)
// against `count` vectors V[s * ldv + l]:
//   out[k * out_k + s * out_s] = alpha * sum_l M(k, l) V[s * ldv + l]  (+ the old value when
//   `accumulate`).
// Either stride may be anything; a unit stride on either axis runs a vectorised kernel that
// reads each element of M once for up to 8 vectors. False for a dtype without storage.
struct AxisContraction {
  const void* data = nullptr;
  fumi_dtype dtype = FUMI_DTYPE_UNKNOWN;
  int64_t base = 0, K = 0, sk = 0, L = 0, sl = 0;
  const double* V = nullptr;
  int64_t ldv = 0;
  int32_t count = 0;
  double alpha = 1;
  bool accumulate = false;
  double* out = nullptr;
  int64_t out_k = 0, out_s = 0;
};
bool contractAxis(const AxisContraction& c);

// fp64 lanes of the vectors the contraction kernels run on: 8 (AVX-512), 4 (AVX2) or 2 (SSE2,
// and builds other than GCC on x86-64), the widest the CPU has, at most the cap that
// setContractLanesCap sets (0: none; libfumi sets FUMI_VECTOR_LANES at init, to time or test the
// narrower builds on a wide CPU).
int contractLanes();
void setContractLanesCap(int lanes);

// `a` and `b` over the same matrix in one pass, each along the other's kept axis (b's K, L and
// strides are a's L, K and strides swapped; as many vectors each), where one axis has unit
// stride; with `sum_sq` not null, the squares and (max_abs) magnitudes of the matrix accumulated
// too, unmasked: a sum that is not finite means NaN or Inf somewhere. False where the two do
// not fit together or neither axis has unit stride (nothing written then).
bool contractBoth(const AxisContraction& a, const AxisContraction& b, double* sum_sq,
                  double* max_abs);

// Tensor `t`'s elements, read from `data` (laid out like t) as `dtype`, contracted along its
// dimension `dim` with `count` vectors (vectors[s * len + i], len = t.shape[dim]): with t read as
// outer x len x inner around `dim`, out[(o * count + s) * inner + q] =
// alpha * sum_i vectors[s * len + i] * t[o, i, q] (+ the old value when `accumulate`) — the
// layout of fumi_host_api.project. False for a bad dimension or dtype.
bool contractTensor(const fumi_tensor& t, const void* data, fumi_dtype dtype, int32_t dim,
                    int32_t count, const double* vectors, double alpha, bool accumulate,
                    double* out);

// contractTensor for each of `n` sides (fumi_side: dim, count, vectors, out; out_lo unused) and,
// when `scan` is not null, scanTensor of t: in one pass over t where t is a matrix or a batch of
// matrices (ndim 2 or 3) with a unit stride along its rows or columns, contracted along both
// with as many vectors each (the `checksum` check's output); side by side otherwise. False as
// contractTensor.
bool contractSides(const fumi_tensor& t, const void* data, fumi_dtype dtype, int32_t n,
                   const fumi_side* sides, fumi_scan* scan);

// The contraction of a strided view of device memory along `dim` with host vectors, the result
// on the host, in the layouts of fumi_adapter_call.contract (Call::contractDevice): where
// checksum's projections of a device op run, so that only the projections move.
using DeviceContract = std::function<fumi_status(const fumi_tensor& view, int32_t dim,
                                                 int32_t count, const double* vectors,
                                                 double* out)>;

// contractAxis for a matrix in device memory, through `device`: its K x count projections come
// back and land in c.out as contractAxis writes them (alpha, accumulate, out strides). False
// where `device` declines it, for a negative stride, vectors not packed (ldv != L) or a dtype
// without storage.
bool contractAxisOnDevice(const AxisContraction& c, const DeviceContract& device);

// contractSides (without the scan) for tensor `t` in device memory, `data` a buffer laid out
// like it holding `dtype`: each side through `device`. False where `device` declines one or a
// stride is negative (the caller then copies the tensor to the host).
bool contractSidesOnDevice(const fumi_tensor& t, const void* data, fumi_dtype dtype, int32_t n,
                           const fumi_side* sides, const DeviceContract& device);

}  // namespace fumi
