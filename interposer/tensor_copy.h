// tensor_copy.h — moving a tensor's logical elements between layouts and dtypes at memory speed:
// the host's gather (the tensor's layout -> dense row-major fp64) and scatter (the reverse) are
// both copyElements. One typed loop per (source, destination) dtype pair, no per-element switch;
// unit-stride runs vectorise. The source is always read in its own memory order, dimensions
// contiguous on both sides are merged into one run, and a transposing copy (a column-major BLAS
// operand into row-major) goes through small tiles so neither side walks a line per element.
#pragma once

#include <cstdint>

#include "fumi/plugin.h"

namespace fumi {

// Where the elements of a logical array live: element (i0..in-1) is at
// data + (base + sum_d i_d * strides[d]) * element size (fumi_tensor's convention).
struct ElementLayout {
  const int64_t* strides;
  int64_t base;
};

// Copies the ndim-d array of `shape` from `src` (dtype `src_dtype`, layout `from`) to `dst`
// (`dst_dtype`, layout `to`), converting each element through fp64 semantics: widening is exact,
// narrowing rounds to nearest even (TF32 keeps 10 fraction bits in fp32 storage). Returns false
// for a dtype without storage (FUMI_DTYPE_UNKNOWN).
bool copyElements(int ndim, const int64_t* shape, const void* src, fumi_dtype src_dtype,
                  ElementLayout from, void* dst, fumi_dtype dst_dtype, ElementLayout to);

// Row-major strides of `shape` (ndim <= FUMI_MAX_DIMS) into `strides`.
void denseStrides(int ndim, const int64_t* shape, int64_t* strides);

// Dense channels-last strides of `shape`: dimension 1 innermost, the others row-major around it
// ([N, spatial..., C] for an [N, C, spatial...] shape); row-major below three dimensions.
void channelsLastStrides(int ndim, const int64_t* shape, int64_t* strides);

// Dense strides of `shape` in the memory order of `layout` (its dimensions by decreasing
// |stride|, ties in logical order): FUMI_ORDER_STORAGE of plugin.h. A copy between `layout` and
// these strides reads and writes both sides sequentially, with no transpose.
void storageStrides(int ndim, const int64_t* shape, const int64_t* layout, int64_t* strides);

}  // namespace fumi
