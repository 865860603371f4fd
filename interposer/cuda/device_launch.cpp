// device_launch.cpp — see device_launch.h. Launch shapes: device_kernels.h.
#include "device_launch.h"

#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "call.h"
#include "checker.h"
#include "cuda_api.h"
#include "device_compare.h"
#include "device_kernels.h"
#include "engine.h"
#include "metrics.h"
#include "report.h"
#include "settings.h"
#include "tensor_copy.h"

#if FUMI_DEVICE_FATBIN
extern "C" const unsigned char fumi_device_fatbin[];
#endif

namespace fumi::cuda {
namespace {

namespace kn = kern;

// The driver functions the launches use, and the module's kernels in one CUDA context.
struct Module {
  CUcontext context = nullptr;
  CUfunction contract_partial = nullptr, contract_reduce = nullptr, reduce_partial = nullptr,
             reduce_combine = nullptr, conv_partial = nullptr, conv_reduce = nullptr;
};

struct Driver {
  CUresult (*moduleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*moduleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*launchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, CUstream, void**, void**) = nullptr;
  CUresult (*ctxGetCurrent)(CUcontext*) = nullptr;
  CUresult (*getErrorString)(CUresult, const char**) = nullptr;
};

std::atomic<bool> g_failed{false};

void giveUp(const std::string& why) {
  if (!g_failed.exchange(true))
    logMessage(FUMI_LOG_WARN, "fumi's device kernels are off (" + why +
                                  "): checks of CUDA calls and of framework ops on CUDA "
                                  "read their operands another way (host copies, the "
                                  "framework's own ops)");
}

std::string driverError(const Driver& d, CUresult r) {
  const char* s = nullptr;
  if (d.getErrorString) d.getErrorString(r, &s);
  return s ? std::string(s) : "CUresult " + std::to_string(static_cast<int>(r));
}

// The driver's functions, opened once; nullptr when unavailable.
const Driver* driver() {
  static Driver d;
  static bool ready = false;
  static std::once_flag once;
  std::call_once(once, [] {
#if FUMI_DEVICE_FATBIN
    if (readSettings().device_kernels == "0") {
      g_failed = true;
      return;
    }
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return giveUp("libcuda.so.1 not loadable");
    const auto sym = [&](auto& slot, const char* name) {
      slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(dlsym(lib, name));
      return slot != nullptr;
    };
    if (!sym(d.moduleLoadData, "cuModuleLoadData") ||
        !sym(d.moduleGetFunction, "cuModuleGetFunction") ||
        !sym(d.launchKernel, "cuLaunchKernel") || !sym(d.ctxGetCurrent, "cuCtxGetCurrent"))
      return giveUp("the driver lacks cuModuleLoadData, cuModuleGetFunction, cuLaunchKernel or "
                    "cuCtxGetCurrent");
    sym(d.getErrorString, "cuGetErrorString");
    ready = true;
#endif
  });
  return ready && !g_failed.load() ? &d : nullptr;
}

// The module loaded in the calling thread's current context (the checker's, or the device
// a framework op ran on), on its first use there; nullptr when unavailable.
const Module* module() {
  const Driver* d = driver();
  CUcontext ctx = nullptr;
  if (!d || d->ctxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) return nullptr;
  static std::mutex mu;
  static std::array<Module, 16> loaded;  // one per context (device) used, in order of use
  std::lock_guard<std::mutex> lock(mu);
  Module* slot = nullptr;  // the first free one: slots fill in order
  for (Module& m : loaded) {
    if (m.context == ctx) return &m;
    if (!m.context) {
      slot = &m;
      break;
    }
  }
  if (!slot) return nullptr;  // more contexts than slots: the other ways serve
#if FUMI_DEVICE_FATBIN
  Module m;
  CUmodule mod = nullptr;
  if (const CUresult r = d->moduleLoadData(&mod, fumi_device_fatbin); r != CUDA_SUCCESS) {
    giveUp("cuModuleLoadData: " + driverError(*d, r));
    return nullptr;
  }
  const std::array<std::pair<CUfunction*, const char*>, 6> fns{{
      {&m.contract_partial, kn::kContractPartial},
      {&m.contract_reduce, kn::kContractReduce},
      {&m.reduce_partial, kn::kReducePartial},
      {&m.reduce_combine, kn::kReduceCombine},
      {&m.conv_partial, kn::kConvPartial},
      {&m.conv_reduce, kn::kConvReduce},
  }};
  for (const auto& [fn, name] : fns)
    if (const CUresult r = d->moduleGetFunction(fn, mod, name); r != CUDA_SUCCESS) {
      giveUp(std::string("cuModuleGetFunction ") + name + ": " + driverError(*d, r));
      return nullptr;
    }
  m.context = ctx;
  *slot = m;
  if (slot == &loaded[0])
    logMessage(FUMI_LOG_INFO, "device kernels loaded: the projections, scans, comparisons and "
                              "conversions of checks of CUDA calls run on the device");
  return slot;
#else
  return nullptr;
#endif
}

bool kernelsRead(fumi_dtype d) {
  return d == FUMI_DTYPE_F64 || d == FUMI_DTYPE_F32 || d == FUMI_DTYPE_F16 ||
         d == FUMI_DTYPE_BF16;
}

// Scratch holding several device buffers, 256-byte aligned, given back at scope end (its own
// copy of the Exec's release: work left queued on the stream may keep it past the Exec). Where
// the scratch is not reused in the stream's order (the checker's pool also serves the program
// thread's snapshots, which do not wait for the checker's stream), it is given back once the
// stream has got there: a primitive that gives up halfway leaves copies or kernels queued.
class DeviceScratch {
 public:
  DeviceScratch(const Exec& ex, const std::vector<size_t>& bytes)
      : release_(ex.release), stream_(ex.stream), ordered_(ex.ordered) {
    size_t total = 0;
    for (size_t b : bytes) {
      offsets_.push_back(total);
      total += (b + 255) / 256 * 256;
    }
    base_ = static_cast<char*>(ex.alloc(std::max<size_t>(total, 256)));
  }
  ~DeviceScratch() {
    if (!base_) return;
    if (!ordered_)
      if (const CudaApi* api = cudaApi())
        api->cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));  // idle after a result
    release_(base_);
  }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  explicit operator bool() const { return base_ != nullptr; }
  double* at(size_t i) const { return reinterpret_cast<double*>(base_ + offsets_[i]); }

 private:
  std::function<void(void*)> release_;
  void* stream_;
  bool ordered_;
  char* base_ = nullptr;
  std::vector<size_t> offsets_;
};

// Host data copied to the device on ex's stream, not waited for: the work queued after it
// there sees it, and the host may reuse a pageable source once this returns (the runtime has
// staged it). Only within a primitive that waits for its own results before it returns (a
// pinned source is read when the stream gets there: the caller's buffers are still live then).
bool put(const Exec& ex, void* dst, const void* src, size_t bytes) {
  const CudaApi* api = cudaApi();
  return api && api->cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                                     static_cast<cudaStream_t>(ex.stream)) == cudaSuccess;
}

template <class Params>
bool launch(const Exec& ex, CUfunction f, unsigned gx, unsigned gy, Params& p) {
  const Driver& d = *driver();  // set: module() found the kernel
  void* args[] = {&p};
  const CUresult r = d.launchKernel(f, gx, gy, 1, kn::kThreads, 1, 1, 0,
                                    reinterpret_cast<CUstream>(ex.stream), args, nullptr);
  if (r != CUDA_SUCCESS) giveUp("cuLaunchKernel: " + driverError(d, r));
  return r == CUDA_SUCCESS;
}

}  // namespace

bool streamExec(void* stream, Call& call, Exec* ex) {
  const CudaApi* api = cudaApi();
  if (!api) return false;
  const auto s = static_cast<cudaStream_t>(stream);
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (api->cudaStreamIsCapturing(s, &capturing) != cudaSuccess ||
      capturing != cudaStreamCaptureStatusNone)
    return false;
  ex->stream = stream;
  ex->ordered = true;
  ex->alloc = [&call](size_t bytes) { return call.allocDevice(bytes); };
  ex->release = [&call](void* p) { call.releaseDevice(p); };
  ex->copy = [api, s](void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    return api->cudaMemcpyAsync(dst, src, bytes, kind, s) == cudaSuccess &&
           api->cudaStreamSynchronize(s) == cudaSuccess;
  };
  return true;
}

fumi_status deviceContract(const Exec& ex, const fumi_tensor& view, int32_t dim, int32_t count,
                           const double* vectors, double* out) {
  const Module* m = module();
  if (!m || !kernelsRead(view.dtype) || count < 1 || !vectors || !out) return FUMI_UNSUPPORTED;
  kn::ContractParams p;
  if (!kn::planContract(view.ndim, view.shape, view.strides, dim, p)) return FUMI_UNSUPPORTED;
  const int64_t outputs = p.outputs, len = p.len;
  const auto results = static_cast<size_t>(outputs * count);
  if (outputs == 0) return FUMI_OK;
  if (len == 0) {
    std::fill(out, out + results, 0.0);
    return FUMI_OK;
  }
  const int32_t group = std::min(count, kn::kMaxVectors);
  DeviceScratch mem(ex, {static_cast<size_t>(count * len) * sizeof(double),
                         static_cast<size_t>(p.chunks * p.lanes * outputs * group) *
                             sizeof(double),
                         results * sizeof(double)});
  if (!mem) return FUMI_UNSUPPORTED;
  if (!put(ex, mem.at(0), vectors, static_cast<size_t>(count * len) * sizeof(double)))
    return FUMI_UNSUPPORTED;
  p.data = view.data;
  p.dtype = view.dtype;
  p.total = count;
  p.partial = mem.at(1);
  p.out = mem.at(2);
  const bool ran = kn::launchContraction(
      p, mem.at(0), [&](bool partial, unsigned gx, unsigned gy, kn::ContractParams& q) {
        return launch(ex, partial ? m->contract_partial : m->contract_reduce, gx, gy, q);
      });
  if (!ran) return FUMI_UNSUPPORTED;
  return ex.copy(out, mem.at(2), results * sizeof(double), cudaMemcpyDeviceToHost)
             ? FUMI_OK
             : FUMI_UNSUPPORTED;
}

fumi_status deviceConvolve(const Exec& ex, const fumi_device_conv& c) {
  const Module* m = module();
  const int32_t nd = c.spatial + 2;
  if (!m || c.struct_size < sizeof(fumi_device_conv) || !kernelsRead(c.device.dtype) ||
      c.device.ndim != nd || c.host.ndim != nd || c.out_ndim != nd ||
      c.host.dtype != FUMI_DTYPE_F64 || !c.host.data || !c.device.data || !c.out)
    return FUMI_UNSUPPORTED;
  kn::ConvParams p;
  p.direction = c.direction;
  if (!kn::planConv(c.spatial, c.device.shape, c.device.strides, c.host.shape, c.out_shape,
                    c.stride, c.padding, c.dilation, p))
    return FUMI_UNSUPPORTED;
  const auto host_numel = static_cast<size_t>(tensorNumel(c.host));
  const auto outputs = static_cast<size_t>(p.outputs);
  if (outputs == 0) return FUMI_OK;
  DeviceScratch mem(ex, {host_numel * sizeof(double),
                         static_cast<size_t>(p.chunks) * outputs * sizeof(double),
                         outputs * sizeof(double)});
  if (!mem || !put(ex, mem.at(0), c.host.data, host_numel * sizeof(double)))
    return FUMI_UNSUPPORTED;
  p.dev = c.device.data;
  p.dev_dtype = c.device.dtype;
  p.host = mem.at(0);
  p.partial = mem.at(1);
  p.out = mem.at(2);
  const bool ran = kn::launchConv(p, [&](bool partial, unsigned gx, unsigned gy,
                                         kn::ConvParams& q) {
    return launch(ex, partial ? m->conv_partial : m->conv_reduce, gx, gy, q);
  });
  if (!ran) return FUMI_UNSUPPORTED;
  return ex.copy(c.out, mem.at(2), outputs * sizeof(double), cudaMemcpyDeviceToHost)
             ? FUMI_OK
             : FUMI_UNSUPPORTED;
}

namespace {

// Pinned host slots for counts a map leaves on the device (FUMI_MAP_CHANGED_LATER): a copy into
// pageable memory would wait for the stream, one into these does not. This thread's (the
// thread that checks: the program's, for a framework's ops; the checker's), allocated on first
// use and kept for the thread's life (512 bytes; freeing them at thread exit could come after
// the runtime's own teardown).
class PinnedSlots {
 public:
  double* take(const CudaApi& api) {
    if (!tried_) {
      tried_ = true;
      void* p = nullptr;
      if (api.cudaHostAlloc(&p, kSlots * sizeof(double), cudaHostAllocPortable) == cudaSuccess)
        base_ = static_cast<double*>(p);
    }
    if (!base_ || used_ == ~uint64_t{0}) return nullptr;
    const int i = __builtin_ctzll(~used_);
    used_ |= uint64_t{1} << i;
    return base_ + i;
  }
  void give(double* slot) { used_ &= ~(uint64_t{1} << (slot - base_)); }

 private:
  static constexpr int kSlots = 64;
  double* base_ = nullptr;
  uint64_t used_ = 0;
  bool tried_ = false;
};
thread_local PinnedSlots t_slots;

// The count at `field` (in `mem`, written by work queued on ex's stream) copied to a pinned
// slot behind that work, and stored in *dst when the check settles (engine.h,
// deferUntilSettled): the host does not wait for it now. `mem` is kept until then (where the
// pool is not ordered on the stream, given back now it would be waited for). False where it
// cannot be (no slot left, the copy refused): the caller waits instead.
bool countLater(const Exec& ex, std::shared_ptr<DeviceScratch> mem, const double* field,
                uint64_t* dst) {
  const CudaApi* api = cudaApi();
  double* slot = api ? t_slots.take(*api) : nullptr;
  if (!slot) return false;
  const auto s = static_cast<cudaStream_t>(ex.stream);
  if (api->cudaMemcpyAsync(slot, field, sizeof(double), cudaMemcpyDeviceToHost, s) !=
      cudaSuccess) {
    t_slots.give(slot);
    return false;
  }
  deferUntilSettled([api, s, slot, dst, mem = std::move(mem)](bool write) mutable {
    const LastErrorScope scope(*api);  // fumi's errors are not the program's
    const bool done = api->cudaStreamSynchronize(s) == cudaSuccess;
    if (write) *dst = done ? static_cast<uint64_t>(*slot) : 0;
    t_slots.give(slot);
    mem.reset();
  });
  return true;
}

// Element-wise reductions over t's elements in `a` (and `b`), `count` passes run one after the
// other (each with its op and parameters set; a later one may read the one before it where it
// is, kComparePass2): their fields, count x kFields, in `fields`, in one copy. False where
// they cannot run (the caller stages instead). `fields` NULL (a map's count unwanted) on an
// ordered Exec: the element-wise pass alone, queued on the stream. `later` (one pass, fields
// NULL): field 0 stored there when the check settles (countLater), or now where it cannot be.
bool reduceOnDevice(const Module& m, const Exec& ex, const fumi_tensor& t, kn::ReduceParams* passes,
                    int count, double* fields, uint64_t* later = nullptr) {
  const auto results = static_cast<size_t>(count * kn::kFields);
  const int64_t threads = kn::reduceThreads(tensorNumel(t));
  auto scratch = std::make_shared<DeviceScratch>(
      ex, std::vector<size_t>{
              static_cast<size_t>(threads * kn::kFields) * sizeof(double),
              static_cast<size_t>((threads + kn::kFanIn - 1) / kn::kFanIn * kn::kFields) *
                  sizeof(double),
              results * sizeof(double)});
  const DeviceScratch& mem = *scratch;
  if (!mem) return false;
  const bool whole = fields || later || !ex.ordered;
  const CUfunction stages[] = {m.reduce_partial, m.reduce_combine};
  if (!kn::launchReductions(
          t.ndim, t.shape, t.strides, tensorNumel(t), passes, count, mem.at(0), mem.at(1),
          mem.at(2),
          [&](int stage, unsigned gx, unsigned gy, kn::ReduceParams& q) {
            return launch(ex, stages[stage], gx, gy, q);
          },
          whole))
    return false;
  if (!whole) return true;
  if (later && countLater(ex, scratch, mem.at(2), later)) return true;
  std::vector<double> ignored(fields ? 0 : results);
  double* to = fields ? fields : ignored.data();
  if (!ex.copy(to, mem.at(2), results * sizeof(double), cudaMemcpyDeviceToHost)) return false;
  if (later) *later = static_cast<uint64_t>(to[0]);
  return true;
}

}  // namespace

fumi_status deviceScan(const Exec& ex, const fumi_tensor& t, const void* data, fumi_dtype dtype,
                       fumi_scan* out) {
  const Module* m = module();
  if (!m || !kernelsRead(dtype) || !data || !out) return FUMI_UNSUPPORTED;
  kn::ReduceParams p;
  p.op = kn::kScan;
  p.a = data;
  p.a_dtype = dtype;
  p.max_mask = kn::kScanMax;
  double f[kn::kFields];
  if (!reduceOnDevice(*m, ex, t, &p, 1, f)) return FUMI_UNSUPPORTED;
  // The finite elements' squares and magnitude, read as the host's first pass reads them;
  // where they could leave fp64's range the host's scaled pass takes over.
  if (!metrics::scanFromSquares(f[3], f[2], out)) return FUMI_UNSUPPORTED;
  out->nan = static_cast<uint64_t>(f[0]);
  out->inf = static_cast<uint64_t>(f[1]);
  return FUMI_OK;
}

fumi_status deviceMap(const Exec& ex, const fumi_tensor& t, const void* src, fumi_dtype src_dtype,
                      void* dst, fumi_dtype dst_dtype, const fumi_map_spec& spec,
                      uint64_t* changed) {
  const Module* m = module();
  const bool kind = spec.kind == FUMI_MAP_COPY || spec.kind == FUMI_MAP_ABS ||
                    spec.kind == FUMI_MAP_PERTURB;
  if (!m || !kind || !kernelsRead(dst_dtype) || !kernelsRead(src_dtype) || !src || !dst)
    return FUMI_UNSUPPORTED;
  kn::ReduceParams p;
  p.op = kn::kMap;
  p.a = src;
  p.a_dtype = src_dtype;
  p.map_kind = spec.kind;
  p.dst = dst;
  p.dst_dtype = dst_dtype;
  if (spec.kind == FUMI_MAP_PERTURB) {
    int64_t storage[FUMI_MAX_DIMS];
    storageStrides(t.ndim, t.shape, t.strides, storage);
    if (!kn::planPerturb(t.ndim, t.shape, t.strides, storage, p)) return FUMI_UNSUPPORTED;
    p.shift = spec.shift;
    p.seed = spec.seed;
    p.first = spec.first;
  }
  double f[kn::kFields];
  const bool later = changed && (spec.flags & FUMI_MAP_CHANGED_LATER);
  if (!reduceOnDevice(*m, ex, t, &p, 1, changed && !later ? f : nullptr,
                      later ? changed : nullptr))
    return FUMI_UNSUPPORTED;
  if (changed && !later) *changed = static_cast<uint64_t>(f[0]);
  return FUMI_OK;
}

fumi_status deviceCompare(const Exec& ex, const fumi_tensor& t, const void* a, fumi_dtype a_dtype,
                          const void* b, fumi_dtype b_dtype, const fumi_compare_spec& spec,
                          fumi_comparison* out) {
  const Module* m = module();
  if (!m || !kernelsRead(a_dtype) || !kernelsRead(b_dtype) || !a || !b || !out)
    return FUMI_UNSUPPORTED;
  return compareWithKernels(
      a, a_dtype, b, b_dtype, spec,
      [&](kn::ReduceParams* passes, int count, double* fields) {
        return reduceOnDevice(*m, ex, t, passes, count, fields);
      },
      out);
}

}  // namespace fumi::cuda
