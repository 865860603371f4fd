// cuda.cpp — the simulated device's stand-in for the driver library, libcuda.so.1: the module
// and launch calls libfumi uses to run its own kernels (interposer/cuda/device_launch.cpp).
//
// A GPU runs a module's machine code; the simulated device has none, so it runs the kernels'
// bodies (interposer/cuda/device_kernels.h, the source nvcc compiles for the GPU) on the host:
//  - cuModuleLoadData accepts a fatbin, cubin (ELF) or PTX image, as the driver does, and
//    refuses anything else (CUDA_ERROR_INVALID_IMAGE);
//  - cuModuleGetFunction finds fumi's kernels by name (CUDA_ERROR_NOT_FOUND otherwise);
//  - cuLaunchKernel checks the launch against the hardware's limits (block <= 1024 threads,
//    grid y and z <= 65535), copies the parameters at the launch (as the driver does) and
//    enqueues the kernel on the stream through the runtime stand-in, ordered with the
//    stream's other work; the kernel runs every (block, thread) of the grid. A pointer in the
//    parameters that is not device memory ends the process, as it would fault on a GPU.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "../../interposer/cuda/device_kernels.h"
#include "sim.h"

extern "C" cudaError_t cudaFumiSimLaunchKernel(cudaStream_t stream, const char* kernel,
                                               cudaHostFn_t fn, void* userData);

namespace {

namespace kn = fumi::cuda::kern;

template <class T>
T* onHost(T* p) {
  if (p && !sim::isDevicePointer(p)) {
    std::fprintf(stderr, "simulated device: a kernel parameter is not device memory (%p)\n",
                 static_cast<const void*>(p));
    std::abort();
  }
  return static_cast<T*>(sim::hostAddress(p));
}
// Every pointer of a kernel's parameters, translated as the kernel would dereference them.
template <class... T>
void onHostAll(T*&... ptrs) {
  ((ptrs = onHost(ptrs)), ...);
}

struct Launch {
  unsigned gx, gy;
  kn::ContractParams contract;
  kn::ReduceParams reduce;
  kn::ConvParams conv;
  void (*run)(Launch&);
};

void runContractPartial(Launch& l) {
  kn::runGridOnHost(l.gx, l.gy,
                    [&](int64_t t, int64_t y) { kn::contractPartialBody(l.contract, t, y); });
}
void runContractReduce(Launch& l) {
  kn::runGridOnHost(l.gx, l.gy, [&](int64_t t, int64_t) { kn::contractReduceBody(l.contract, t); });
}
void runReducePartial(Launch& l) {
  kn::runGridOnHost(l.gx, l.gy, [&](int64_t t, int64_t) { kn::reducePartialBody(l.reduce, t); });
}
void runReduceCombine(Launch& l) {
  kn::runGridOnHost(l.gx, l.gy, [&](int64_t t, int64_t) { kn::reduceCombineBody(l.reduce, t); });
}
void runConvPartial(Launch& l) {
  kn::runGridOnHost(l.gx, l.gy, [&](int64_t t, int64_t y) { kn::convPartialBody(l.conv, t, y); });
}
void runConvReduce(Launch& l) {
  kn::runGridOnHost(l.gx, l.gy, [&](int64_t t, int64_t) { kn::convReduceBody(l.conv, t); });
}

enum class Params { kContract, kReduce, kConv };  // a kernel's parameter block
struct Kernel {
  const char* name;
  Params params;
  void (*run)(Launch&);
};
const Kernel kKernels[] = {
    {kn::kContractPartial, Params::kContract, runContractPartial},
    {kn::kContractReduce, Params::kContract, runContractReduce},
    {kn::kReducePartial, Params::kReduce, runReducePartial},
    {kn::kReduceCombine, Params::kReduce, runReduceCombine},
    {kn::kConvPartial, Params::kConv, runConvPartial},
    {kn::kConvReduce, Params::kConv, runConvReduce},
};

struct Module {
  int loaded = 1;
};

void CUDART_CB runLaunch(void* data) {
  Launch* l = static_cast<Launch*>(data);
  l->run(*l);
  delete l;
}

}  // namespace

extern "C" {

CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
  const auto* b = static_cast<const unsigned char*>(image);
  uint32_t magic = 0;
  std::memcpy(&magic, b, 4);
  const bool fatbin = magic == 0xBA55ED50u;
  const bool elf = b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F';
  const bool ptx = b[0] == '.' || b[0] == '/';
  if (!fatbin && !elf && !ptx) return CUDA_ERROR_INVALID_IMAGE;
  *module = reinterpret_cast<CUmodule>(new Module);
  return CUDA_SUCCESS;
}

// One simulated device: its context is current on every thread.
CUresult cuCtxGetCurrent(CUcontext* ctx) {
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  static int context;
  *ctx = reinterpret_cast<CUcontext>(&context);
  return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule module) {
  if (!module) return CUDA_ERROR_INVALID_HANDLE;
  delete reinterpret_cast<Module*>(module);
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction* fn, CUmodule module, const char* name) {
  if (!fn || !module || !name) return CUDA_ERROR_INVALID_VALUE;
  for (const Kernel& k : kKernels)
    if (std::strcmp(k.name, name) == 0) {
      *fn = reinterpret_cast<CUfunction>(const_cast<Kernel*>(&k));
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_NOT_FOUND;
}

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared, CUstream stream,
                        void** params, void** extra) {
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || gy > 65535 ||
      gz > 65535 || bx > 1024 || by > 1024 || bz > 64 || uint64_t{bx} * by * bz > 1024 ||
      shared > 48 * 1024 || !params || extra)
    return CUDA_ERROR_INVALID_VALUE;
  // fumi's kernels run kThreads threads a block, on grids of one or two dimensions.
  if (gz != 1 || by != 1 || bz != 1 || bx != kn::kThreads) return CUDA_ERROR_NOT_SUPPORTED;
  const Kernel& k = *reinterpret_cast<const Kernel*>(f);
  auto* l = new Launch{gx, gy, {}, {}, {}, k.run};
  if (k.params == Params::kContract) {
    kn::ContractParams& p = l->contract = *static_cast<const kn::ContractParams*>(params[0]);
    onHostAll(p.data, p.vectors, p.partial, p.out);
  } else if (k.params == Params::kReduce) {
    kn::ReduceParams& p = l->reduce = *static_cast<const kn::ReduceParams*>(params[0]);
    onHostAll(p.a, p.b, p.dst, p.partial, p.out, p.fields, p.previous, p.from, p.to);
  } else {
    kn::ConvParams& p = l->conv = *static_cast<const kn::ConvParams*>(params[0]);
    onHostAll(p.dev, p.host, p.partial, p.out);
  }
  if (cudaFumiSimLaunchKernel(reinterpret_cast<cudaStream_t>(stream), k.name, runLaunch, l) !=
      cudaSuccess) {
    delete l;
    return CUDA_ERROR_LAUNCH_FAILED;
  }
  return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char** str) {
  if (!str) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
    case CUDA_SUCCESS: *str = "no error"; break;
    case CUDA_ERROR_INVALID_VALUE: *str = "invalid argument"; break;
    case CUDA_ERROR_INVALID_IMAGE: *str = "device kernel image is invalid"; break;
    case CUDA_ERROR_NOT_FOUND: *str = "named symbol not found"; break;
    default: *str = "unknown error"; break;
  }
  return CUDA_SUCCESS;
}

}  // extern "C"
