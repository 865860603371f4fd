// cudnn_common.h — what the cuDNN stand-in's two translation units share: the legacy API
// (cudnn.cpp) and the backend graph API (cudnn_backend.cpp), both in libcudnn.so.9.
//
// Everything here is inline in namespace sim::dnn (not file-local): the planted-fault table
// and the nondet call counter are one object per library, so a graph convolution counts with
// the legacy ones, as the fault's "process-wide call counter" promises.
//
// Planted faults: FUMI_SIMCUDNN_FAULTS, read once, comma-separated (cudnn.cpp and
// cudnn_backend.cpp say which calls they hit):
//  - wrong:CxK      convolutions with C input and K output channels: results times 1 + 2^-7;
//  - wrongmm:MxNxK  graph matmuls of those sizes: results times 1 + 2^-7;
//  - wrongsdpa:SqxSkv  graph SDPA forwards with S_q queries and S_kv keys: O times 1 + 2^-7;
//  - accum16        HALF data with HALF compute accumulates in fp16;
//  - nondet         forward convolutions move output element 0 up one ulp every other call.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <string>

#include "sim.h"
#include "sim_gemm.h"
#include "sim_tool.h"

namespace sim {
namespace dnn {
constexpr uint32_t kHandleMagic = 0x436e4864;  // "CnHd"
}  // namespace dnn
}  // namespace sim

// The handle: a stream (default: the legacy default stream).
struct cudnnContext {
  uint32_t magic = sim::dnn::kHandleMagic;
  cudaStream_t stream = nullptr;
};

namespace sim {
namespace dnn {

using gemm::DType;

inline bool validHandle(const cudnnContext* h) { return h && h->magic == kHandleMagic; }

// --- planted faults ---------------------------------------------------------------------

struct Faults {
  bool wrong = false;
  int64_t wrongC = 0, wrongK = 0;
  bool wrongMatmul = false;
  int64_t mmM = 0, mmN = 0, mmK = 0;
  bool wrongSdpa = false;
  int64_t sdpaSq = 0, sdpaSkv = 0;
  bool accum16 = false;
  bool nondet = false;
  bool bnvar = false;  // batch-norm statistics one-pass, E[x^2] - E[x]^2, summed in the parameter type
};

// The factor a `wrong` fault multiplies results by (before the one rounding).
constexpr double kWrongScale = 1 + 1.0 / 128;

inline const Faults& faults() {
  static const Faults* f = [] {
    auto* r = new Faults;
    const char* env = std::getenv("FUMI_SIMCUDNN_FAULTS");
    const std::string s = env ? env : "";
    size_t pos = 0;
    while (pos <= s.size()) {
      const size_t end = s.find(',', pos) == std::string::npos ? s.size() : s.find(',', pos);
      const std::string item = s.substr(pos, end - pos);
      long long c = 0, k = 0, m = 0;
      if (item == "accum16") {
        r->accum16 = true;
      } else if (item == "nondet") {
        r->nondet = true;
      } else if (item == "bnvar") {
        r->bnvar = true;
      } else if (std::sscanf(item.c_str(), "wrongmm:%lldx%lldx%lld", &m, &c, &k) == 3) {
        r->wrongMatmul = true;
        r->mmM = m;
        r->mmN = c;
        r->mmK = k;
      } else if (std::sscanf(item.c_str(), "wrongsdpa:%lldx%lld", &m, &k) == 2) {
        r->wrongSdpa = true;
        r->sdpaSq = m;
        r->sdpaSkv = k;
      } else if (std::sscanf(item.c_str(), "wrong:%lldx%lld", &c, &k) == 2) {
        r->wrong = true;
        r->wrongC = c;
        r->wrongK = k;
      }
      pos = end + 1;
    }
    return r;
  }();
  return *f;
}

inline std::atomic<uint64_t>& nondetCounter() {
  static std::atomic<uint64_t> counter{0};
  return counter;
}

// --- types --------------------------------------------------------------------------------

inline bool validDataType(int t) { return t >= CUDNN_DATA_FLOAT && t <= CUDNN_DATA_COMPLEX_FP64; }

// Element size of the types the stand-in stores (0: not emulated).
inline size_t elementSize(cudnnDataType_t t) {
  switch (t) {
    case CUDNN_DATA_DOUBLE:
    case CUDNN_DATA_INT64:
      return 8;
    case CUDNN_DATA_FLOAT:
    case CUDNN_DATA_INT32:
    case CUDNN_DATA_UINT32:
      return 4;
    case CUDNN_DATA_HALF:
    case CUDNN_DATA_BFLOAT16:
      return 2;
    case CUDNN_DATA_INT8:
    case CUDNN_DATA_UINT8:
    case CUDNN_DATA_BOOLEAN:
    case CUDNN_DATA_FP8_E4M3:
    case CUDNN_DATA_FP8_E5M2:
    case CUDNN_DATA_FP8_E8M0:
      return 1;
    default:
      return 0;
  }
}

inline bool floatingType(cudnnDataType_t t, DType* out) {
  switch (t) {
    case CUDNN_DATA_DOUBLE:
      *out = DType::F64;
      return true;
    case CUDNN_DATA_FLOAT:
      *out = DType::F32;
      return true;
    case CUDNN_DATA_HALF:
      *out = DType::F16;
      return true;
    case CUDNN_DATA_BFLOAT16:
      *out = DType::BF16;
      return true;
    default:
      return false;
  }
}

inline const char* typeName(DType t) {
  switch (t) {
    case DType::F64:
      return "f64";
    case DType::F32:
      return "f32";
    case DType::F16:
      return "f16";
    case DType::BF16:
      return "bf16";
  }
  return "f32";
}

// NVIDIA_TF32_OVERRIDE=0 turns TF32 off, as in the real libraries.
inline bool tf32Disabled() {
  static const bool off = [] {
    const char* e = std::getenv("NVIDIA_TF32_OVERRIDE");
    return e && std::strcmp(e, "0") == 0;
  }();
  return off;
}

// --- device-accessibility ---------------------------------------------------------------

// Device memory, or pinned/managed host memory (cudaPointerGetAttributes).
inline bool deviceAccessible(const void* p) {
  if (!p) return false;
  if (isDevicePointer(p)) return true;
  cudaPointerAttributes attr;
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) return false;
  return attr.type != cudaMemoryTypeUnregistered;
}

// --- launching ----------------------------------------------------------------------------

struct Task {
  std::function<void()> fn;
  bool owned;  // false while captured into a graph: a graph may replay it
};

inline void CUDART_CB runTask(void* data) {
  Task* t = static_cast<Task*>(data);
  try {
    t->fn();
  } catch (...) {
  }
  if (t->owned) delete t;
}

// Enqueues fn as one "kernel" on the stream (recorded into the capture when it captures).
inline cudnnStatus_t launch(cudaStream_t stream, const char* kernel, std::function<void()> fn) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  const bool captured = cudaStreamIsCapturing(stream, &capture) != cudaSuccess ||
                        capture != cudaStreamCaptureStatusNone;
  auto* task = new Task{std::move(fn), !captured};
  if (cudaFumiSimLaunchKernel(stream, kernel, runTask, task) != cudaSuccess) {
    delete task;
    return CUDNN_STATUS_EXECUTION_FAILED;
  }
  return CUDNN_STATUS_SUCCESS;
}

// Runs an API body: no C++ exception leaves an extern "C" function.
template <typename F>
cudnnStatus_t guarded(F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
  } catch (...) {
    return CUDNN_STATUS_INTERNAL_ERROR;
  }
}

}  // namespace dnn
}  // namespace sim
