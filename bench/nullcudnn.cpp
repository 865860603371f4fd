// nullcudnn.cpp — a no-op stand-in for libcudnn.so.9, for the cuDNN hook-overhead benchmark
// (bench_cudnn_hook). There is no GPU here, and the time to measure is libfumi's wrapper of
// cudnnBackendExecute, not a convolution.
//
// Built against the real cuDNN 9 headers, exporting under the real soname and version node
// (tests/simdevice/cudnn.map).
// - The backend descriptor functions succeed: Create hands out a distinct block per
//   descriptor, SetAttribute and Finalize accept anything, GetAttribute answers 0 elements;
//   so libfumi keeps its shadows as with the real library.
// - cudnnBackendExecute checks its arguments for null and returns success, computing nothing.
// - Every other function libfumi resolves for its own use (interposer/cuda/cudnn_fns.def)
//   answers CUDNN_STATUS_NOT_INITIALIZED, like cuDNN on a machine without a driver.
#include <cudnn.h>

#include <cstdlib>

#define FUMI_CUDA_FN(name, ret, params) \
  extern "C" ret name params { return CUDNN_STATUS_NOT_INITIALIZED; }
// The backend API is defined below.
#define FUMI_CUDA_OPTIONAL_FN(name, ret, params)
#include "cudnn_fns.def"
#undef FUMI_CUDA_OPTIONAL_FN
#undef FUMI_CUDA_FN

extern "C" {

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t,
                                           cudnnBackendDescriptor_t* d) {
  if (!d) return CUDNN_STATUS_BAD_PARAM;
  *d = static_cast<cudnnBackendDescriptor_t>(std::malloc(64));
  return *d ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t d) {
  std::free(d);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t d) {
  return d ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t,
                                       cudnnBackendAttributeType_t, int64_t, const void*) {
  return d ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const d,
                                       cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
                                       int64_t, int64_t* count, void*) {
  if (!d) return CUDNN_STATUS_BAD_PARAM;
  if (count) *count = 0;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
                                  cudnnBackendDescriptor_t pack) {
  return handle && plan && pack ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

}  // extern "C"
