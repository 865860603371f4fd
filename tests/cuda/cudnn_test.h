// cudnn_test.h — what the cuDNN test programs (cuda_conv.cpp, cuda_norm.cpp, cuda_graph.cpp)
// share on top of device_test.h: checked cuDNN calls and cuDNN data types as device_test's
// element types.
#pragma once

#include <cudnn.h>

#include "device_test.h"

#define CHECK_DNN(x) CHECK_STATUS(x, CUDNN_STATUS_SUCCESS)

namespace devtest {

inline Elem elemOf(cudnnDataType_t t) {
  return t == CUDNN_DATA_DOUBLE ? Elem::kF64 : t == CUDNN_DATA_FLOAT ? Elem::kF32
                                       : t == CUDNN_DATA_HALF ? Elem::kF16 : Elem::kBF16;
}

inline const char* typeName(cudnnDataType_t t) {
  switch (t) {
    case CUDNN_DATA_DOUBLE: return "f64";
    case CUDNN_DATA_FLOAT: return "f32";
    case CUDNN_DATA_HALF: return "f16";
    case CUDNN_DATA_BFLOAT16: return "bf16";
    default: return "?";
  }
}

inline size_t sizeOf(cudnnDataType_t t) { return bytesOf(elemOf(t)); }

// `elements` values of type t in device memory: value(i) at element i.
template <class F>
void* upload(cudnnDataType_t t, size_t elements, F value) {
  return upload(elemOf(t), elements, value);
}

}  // namespace devtest
