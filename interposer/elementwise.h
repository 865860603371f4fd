// elementwise.h — the host's element-wise primitives (plugin.h, ABI 2: map, compare, scan) over
// buffers laid out like a tensor, each in its own dtype: one typed loop per dtype pair over the
// elements in memory, with fp64 arithmetic per element and fp64 accumulators (the formulas are
// metrics.h's compareValues and scanValues). A tensor whose elements fill their span exactly
// (contiguous or a permutation of it: a transposed BLAS operand, a channels-last activation) is
// walked as one flat run; others (views with gaps, broadcast or negative strides) are packed
// into a dense copy in FUMI_ORDER_STORAGE first. All pointers are host memory.
#pragma once

#include <cstdint>

#include "fumi/plugin.h"

namespace fumi {

// dst (laid out like t, holding dst_dtype) = spec's function of src (laid out like t, holding
// src_dtype); *changed (may be null): elements whose stored value differs from the source's.
// FUMI_UNSUPPORTED for a dtype without storage or an unknown map kind.
fumi_status mapTensor(const fumi_tensor& t, const void* src, fumi_dtype src_dtype, void* dst,
                      fumi_dtype dst_dtype, const fumi_map_spec& spec, uint64_t* changed);

// mapTensor's perturbation with the first column of t's last dimension copied, not perturbed:
// indices stored as floating values (framework_projection.h, frameworkIndexColumn). *changed
// counts the elements of both parts. FUMI_UNSUPPORTED as mapTensor's, and for a last
// dimension of negative stride.
fumi_status mapKeepingIndexColumn(const fumi_tensor& t, const void* src, fumi_dtype src_dtype,
                                  void* dst, fumi_dtype dst_dtype, const fumi_map_spec& spec,
                                  uint64_t* changed);

// How a normalisation's mean broadcasts over its input (mapCentred): the input's element at
// dense row-major index i has the mean at dense index
// (i / (channels * inner)) * outer + ((i / inner) % channels) / per_group
// (batch norm: channels C, inner the spatial size, outer 0; layer norm: inner the normalised
// size, outer 1; group norm: channels C, inner H*W, per_group C / groups, outer the groups).
struct Centring {
  int64_t inner = 1, channels = 1, per_group = 1, outer = 0;
};

// dst (laid out like t) = mean + |src - mean|: t's elements reflected about their means (dense
// fp64, `means` of them; `c` says which is whose), so that every x - mean is |x - mean|: the
// terms map of a normalisation's backward (framework_projection.h, TermsMap). *changed as
// mapTensor's. FUMI_UNSUPPORTED for a dtype without storage or a mean index out of range.
fumi_status mapCentred(const fumi_tensor& t, const void* src, fumi_dtype src_dtype, void* dst,
                       fumi_dtype dst_dtype, const double* means, int64_t count,
                       const Centring& c, uint64_t* changed);

// dst (laid out like t) = -|src|: the terms map of softmax's backward (TermsMap). *changed as
// mapTensor's; FUMI_UNSUPPORTED for a dtype without storage.
fumi_status mapNegatedAbs(const fumi_tensor& t, const void* src, fumi_dtype src_dtype, void* dst,
                          fumi_dtype dst_dtype, uint64_t* changed);

// `a` against `b`, both laid out like t (fumi_comparison; metrics.h, compareValues).
fumi_status compareTensor(const fumi_tensor& t, const void* a, fumi_dtype a_dtype, const void* b,
                          fumi_dtype b_dtype, const fumi_compare_spec& spec, fumi_comparison* out);

// NaN/Inf counts and the largest finite magnitude of `buffer` laid out like t.
fumi_status scanTensor(const fumi_tensor& t, const void* buffer, fumi_dtype dtype, fumi_scan* out);

}  // namespace fumi
