// cudnn_common.h — what the cuDNN hooks share (legacy convolution in cudnn.cpp, batch norm in
// cudnn_norm.cpp): cuDNN types as fumi dtypes, tensor descriptors kept by value (Dims), and
// fumi's own cuDNN handle on the checker thread.
#pragma once

#include <cudnn.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/checker.h"
#include "cuda/cudnn_fns.h"
#include "cuda/device_call.h"
#include "fumi/dtype.hpp"
#include "fumi/plugin.h"

namespace fumi::hooks {

using cuda::Checker;
using cuda::CudnnApi;

inline constexpr int kMaxDims = 5;     // N, C and up to 3 spatial dimensions
inline constexpr int kMaxSpatial = 3;

// ---- types -----------------------------------------------------------------------------------

inline fumi_dtype dtypeOfCudnn(cudnnDataType_t t) {
  switch (t) {
    case CUDNN_DATA_DOUBLE: return FUMI_DTYPE_F64;
    case CUDNN_DATA_FLOAT: return FUMI_DTYPE_F32;
    case CUDNN_DATA_HALF: return FUMI_DTYPE_F16;
    case CUDNN_DATA_BFLOAT16: return FUMI_DTYPE_BF16;
    default: return FUMI_DTYPE_UNKNOWN;
  }
}

inline cudnnDataType_t cudnnOfDtype(fumi_dtype d) {
  return d == FUMI_DTYPE_F64 ? CUDNN_DATA_DOUBLE : d == FUMI_DTYPE_F16 ? CUDNN_DATA_HALF
                                               : d == FUMI_DTYPE_BF16 ? CUDNN_DATA_BFLOAT16
                                                                      : CUDNN_DATA_FLOAT;
}

// The precision the convolution really multiplies in. FLOAT data under any math type but
// FMA may run on TF32 tensor cores (cuDNN's default on Ampere and later).
inline fumi_dtype computePrecision(cudnnDataType_t data, cudnnDataType_t compute, cudnnMathType_t math) {
  switch (compute) {
    case CUDNN_DATA_DOUBLE: return FUMI_DTYPE_F64;
    case CUDNN_DATA_HALF: return FUMI_DTYPE_F16;
    case CUDNN_DATA_BFLOAT16: return FUMI_DTYPE_BF16;
    case CUDNN_DATA_FLOAT:
      return data == CUDNN_DATA_FLOAT && math != CUDNN_FMA_MATH ? FUMI_DTYPE_TF32 : FUMI_DTYPE_F32;
    default: return FUMI_DTYPE_UNKNOWN;
  }
}

inline const char* mathName(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH: return "default";
    case CUDNN_TENSOR_OP_MATH: return "tensor_op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor_op_allow_conversion";
    case CUDNN_FMA_MATH: return "fma";
    default: return "?";
  }
}

// alpha/beta (host pointers): double for DOUBLE data, float otherwise.
inline fumi_dtype scaleOf(cudnnDataType_t data) {
  return data == CUDNN_DATA_DOUBLE ? FUMI_DTYPE_F64 : FUMI_DTYPE_F32;
}

inline std::string joined(const int* v, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

// ---- descriptors, kept by value ----------------------------------------------------------------

// Elements from the lowest to the highest address + 1 of dims/strides (non-negative strides).
template <class D>
int64_t spanOf(int nd, const D* dims, const int64_t* strides) {
  int64_t last = 0;
  for (int i = 0; i < nd; ++i) {
    if (dims[i] <= 0) return 0;
    last += (dims[i] - 1) * strides[i];
  }
  return last + 1;
}

// A tensor or filter as fumi keeps it: logical dims (N, C, spatial... or K, C/g, spatial...)
// and element strides.
struct Dims {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int nd = 0;
  int dims[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
  int64_t span() const { return spanOf(nd, dims, strides); }
  size_t bytes() const {
    return static_cast<size_t>(span()) * static_cast<size_t>(dtypeBytes(dtypeOfCudnn(type)));
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < nd; ++i) n *= dims[i];
    return n;
  }
  // "nchw" or "nhwc" when packed that way, else "strided".
  const char* layout() const {
    int64_t packed = 1;
    bool nchw = true;
    for (int i = nd - 1; i >= 0; --i) {
      nchw = nchw && strides[i] == packed;
      packed *= dims[i];
    }
    if (nchw) return "nchw";
    bool nhwc = strides[1] == 1;
    packed = dims[1];
    for (int i = nd - 1; i >= 2; --i) {
      nhwc = nhwc && strides[i] == packed;
      packed *= dims[i];
    }
    return nhwc && strides[0] == packed ? "nhwc" : "strided";
  }
  fumi_tensor tensor(const char* name, fumi_role role, void* data) const {
    fumi_tensor t{};
    t.name = name;
    t.dtype = dtypeOfCudnn(type);
    t.memory = FUMI_MEMORY_DEVICE;
    t.role = role;
    t.ndim = nd;
    for (int i = 0; i < nd; ++i) {
      t.shape[i] = dims[i];
      t.strides[i] = strides[i];
    }
    t.data = data;
    return t;
  }
};

struct TensorDims : Dims {
  bool read(const CudnnApi& api, cudnnTensorDescriptor_t d) {
    int st[8] = {}, dm[8] = {};
    if (!d || api.cudnnGetTensorNdDescriptor(d, 8, &type, &nd, dm, st) != CUDNN_STATUS_SUCCESS ||
        nd < 3 || nd > kMaxDims)
      return false;
    for (int i = 0; i < nd; ++i) {
      if (st[i] < 0) return false;
      dims[i] = dm[i];
      strides[i] = st[i];
    }
    return true;
  }
  // A descriptor like this one holding `as`; nullptr on failure.
  cudnnTensorDescriptor_t create(const CudnnApi& api, cudnnDataType_t as) const {
    cudnnTensorDescriptor_t d = nullptr;
    int st[kMaxDims];
    for (int i = 0; i < nd; ++i) st[i] = static_cast<int>(strides[i]);
    if (api.cudnnCreateTensorDescriptor(&d) != CUDNN_STATUS_SUCCESS) return nullptr;
    if (api.cudnnSetTensorNdDescriptor(d, as, nd, dims, st) != CUDNN_STATUS_SUCCESS) {
      api.cudnnDestroyTensorDescriptor(d);
      return nullptr;
    }
    return d;
  }
};


// fumi's own cuDNN handle (checker thread only), bound to the checker's stream.
inline cudnnHandle_t checkerCudnn(Checker& ck, const CudnnApi& api) {
  return cuda::checkerHandle<cudnnHandle_t>([&](cudnnHandle_t* h) {
    return api.cudnnCreate(h) == CUDNN_STATUS_SUCCESS &&
           api.cudnnSetStream(*h, ck.stream()) == CUDNN_STATUS_SUCCESS;
  });
}


// A rerun's status as a check sees it: a configuration cuDNN does not run (a wider type for
// this algo or layout) is not checked; any other failure is an error.
inline fumi_status rerunStatus(cudnnStatus_t st) {
  if (st == CUDNN_STATUS_SUCCESS) return FUMI_OK;
  return st == CUDNN_STATUS_NOT_SUPPORTED || st == CUDNN_STATUS_BAD_PARAM ? FUMI_UNSUPPORTED
                                                                         : FUMI_ERROR;
}

}  // namespace fumi::hooks
