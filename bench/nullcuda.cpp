// nullcuda.cpp — no-op stand-ins for libcublas.so.13 and libcudart.so.13, for the cuBLAS
// hook-overhead benchmark (bench_cublas_hook). There is no GPU here, and the time to measure
// is libfumi's wrapper, not a GEMM.
//
// Built twice (bench/CMakeLists.txt) against the real CUDA 13 headers, which check every
// signature; the simulated device's version scripts (tests/simdevice/cublas.map, cudart.map)
// pick what each copy exports under the real library's soname and version node: cublas* from
// libcublas.so.13 (the cublasLt* functions libfumi resolves included: it looks them up in any
// loaded library), cuda* from libcudart.so.13.
//
// - cublasSgemm_v2 checks its handle and sizes and reads alpha and beta, as host pointer mode
//   does, and returns success. It never touches A, B or C (they would be device memory) and
//   computes nothing.
// - Every function libfumi resolves for its own use (interposer/cuda/cuda_api.def and
//   cublas_fns.def, the same tables) answers like CUDA 13 on a machine without a driver:
//   cudaErrorInsufficientDriver, CUBLAS_STATUS_NOT_INITIALIZED. With both stand-ins loaded,
//   libfumi finds the whole CUDA API as in a real CUDA process, so a matching cuBLAS call pays for reading the handle's state
//   (cublasGet{Stream,MathMode,PointerMode}); a sampled call finds that the checker cannot
//   start, and runs unchecked.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

namespace {

template <class R>
R noDriver();
template <>
cudaError_t noDriver<cudaError_t>() {
  return cudaErrorInsufficientDriver;
}
template <>
cublasStatus_t noDriver<cublasStatus_t>() {
  return CUBLAS_STATUS_NOT_INITIALIZED;
}
template <>
const char* noDriver<const char*>() {  // cudaGetErrorString: libfumi logs it
  return "CUDA driver version is insufficient for CUDA runtime version (fumi bench stand-in)";
}

}  // namespace

#define FUMI_CUDA_FN(name, ret, params) \
  extern "C" ret name params { return noDriver<ret>(); }
#include "cuda_api.def"
#include "cublas_fns.def"
#undef FUMI_CUDA_FN

extern "C" cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t,
                                         cublasOperation_t, int m, int n, int k, const float* alpha,
                                         const float*, int, const float*, int, const float* beta,
                                         float*, int) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
  // Read the scalars, as the real call does in host pointer mode; volatile keeps the loads.
  const volatile float* a = alpha;
  const volatile float* b = beta;
  (void)*a;
  (void)*b;
  return CUBLAS_STATUS_SUCCESS;
}
