// device_test.h — what the CUDA test programs (cuda_gemm.cpp, cuda_conv.cpp) share: checked
// runtime calls, typed uploads to device memory, and the hash of an output that runs with and
// without libfumi compare bit for bit.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CHECK_CUDA(x)                                                              \
  do {                                                                             \
    cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                       \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,              \
                   cudaGetErrorString(e_));                                        \
      std::exit(2);                                                                \
    }                                                                              \
  } while (0)

// A library call that must return `ok` (CHECK_BLAS, CHECK_DNN in the programs).
#define CHECK_STATUS(x, ok)                                                            \
  do {                                                                                 \
    const auto s_ = (x);                                                               \
    if (s_ != (ok)) {                                                                  \
      std::fprintf(stderr, "%s:%d: %s: status %d\n", __FILE__, __LINE__, #x, (int)s_); \
      std::exit(3);                                                                    \
    }                                                                                  \
  } while (0)

namespace devtest {

// Element types of the programs' operands (each maps its library's type enum onto these).
enum class Elem { kF64, kF32, kF16, kBF16 };

inline size_t bytesOf(Elem e) { return e == Elem::kF64 ? 8 : e == Elem::kF32 ? 4 : 2; }

inline void store(void* p, Elem e, double v) {
  switch (e) {
    case Elem::kF64: std::memcpy(p, &v, 8); break;
    case Elem::kF32: { const float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
    case Elem::kF16: { const __half h = __double2half(v); std::memcpy(p, &h, 2); break; }
    case Elem::kBF16: {
      const __nv_bfloat16 h = __double2bfloat16(v);
      std::memcpy(p, &h, 2);
      break;
    }
  }
}

// `elements` values of type e in device memory: value(i) at element i.
template <class F>
void* upload(Elem e, size_t elements, F value) {
  const size_t b = bytesOf(e);
  std::vector<unsigned char> host(elements * b);
  for (size_t i = 0; i < elements; ++i) store(host.data() + i * b, e, value(i));
  void* dev = nullptr;
  CHECK_CUDA(cudaMalloc(&dev, host.size() ? host.size() : 1));
  CHECK_CUDA(cudaMemcpy(dev, host.data(), host.size(), cudaMemcpyHostToDevice));
  return dev;
}

inline uint64_t fnv(const unsigned char* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Prints "name hash" of `bytes` of device memory, once the device is idle.
inline void printHash(const std::string& name, const void* dev, size_t bytes) {
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<unsigned char> host(bytes);
  CHECK_CUDA(cudaMemcpy(host.data(), dev, bytes, cudaMemcpyDeviceToHost));
  std::printf("%s %016llx\n", name.c_str(), static_cast<unsigned long long>(fnv(host.data(), bytes)));
}

}  // namespace devtest
