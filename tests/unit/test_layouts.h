// test_layouts.h — tensors as checks meet them, for the tests of the host's typed loops
// (test_tensor_copy.cpp, test_elementwise.cpp).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "fumi/dtype.hpp"

namespace fumi {

constexpr fumi_dtype kDtypes[] = {FUMI_DTYPE_F64, FUMI_DTYPE_F32, FUMI_DTYPE_TF32, FUMI_DTYPE_F16,
                                  FUMI_DTYPE_BF16};

inline fumi_tensor makeTensor(std::vector<int64_t> shape, std::vector<int64_t> strides) {
  fumi_tensor t{};
  t.ndim = static_cast<int32_t>(shape.size());
  for (int k = 0; k < t.ndim; ++k) {
    t.shape[k] = shape[static_cast<size_t>(k)];
    t.strides[k] = strides[static_cast<size_t>(k)];
  }
  return t;
}

// Layouts a check meets: row-major, column-major with a leading dimension, negative strides,
// batched column-major, channels-last, a permuted 3-D view, size-1 and broadcast dimensions.
inline std::vector<fumi_tensor> layouts() {
  return {
      makeTensor({5, 7}, {7, 1}),
      makeTensor({37, 45}, {1, 40 + 11}),            // column-major, lda > m, odd sizes
      makeTensor({64, 64}, {1, 64}),                 // power-of-two transpose
      makeTensor({9}, {-3}),                         // BLAS vector with a negative increment
      makeTensor({3, 10, 12}, {130, 1, 11}),         // batched column-major with gaps
      makeTensor({2, 3, 4, 5}, {60, 1, 15, 3}),      // NCHW logical, channels-last storage
      makeTensor({4, 6, 5}, {1, 20, 4}),             // permuted
      makeTensor({1, 8, 1, 3}, {99, 3, 7, 1}),       // size-1 dimensions with odd strides
      makeTensor({6, 4}, {-4, 1}),                   // rows reversed
      makeTensor({5, 3, 3, 3}, {27, 9, 3, 1}),       // a filter: dense, dims that read as one
      makeTensor({2, 3, 4}, {12, -4, -1}),           // reversed runs that read as one
      makeTensor({}, {}),                            // a scalar
  };
}

inline std::vector<unsigned char> randomBuffer(const fumi_tensor& t, fumi_dtype dtype, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-3.0, 3.0);
  std::vector<unsigned char> bytes(static_cast<size_t>(tensorSpan(t) + 1) * 8);
  // Every slot of the span holds a value; the logical elements are a subset.
  for (int64_t i = 0; i <= tensorSpan(t); ++i) storeFromDouble(bytes.data(), i, dist(gen), dtype);
  return bytes;
}

}  // namespace fumi
