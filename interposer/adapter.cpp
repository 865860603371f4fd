// adapter.cpp — loading framework adapters when their framework appears in the process.
// libfumi never links torch: after each dlopen it looks for libtorch_cpu among the loaded
// objects and, the first time it is there, loads libfumi_torch.so (built against that torch)
// from <dir of libfumi>/fumi/ and hands it the adapter API. Processes without torch pay one
// scan of the loaded-object list per dlopen and load nothing.
#include <dlfcn.h>
#include <link.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "adapter_api.h"
#include "call.h"
#include "engine.h"
#include "framework_projection.h"
#include "loss_scaling.h"
#include "pystack.h"
#include "report.h"
#include "context.h"
#include "elementwise.h"
#include "loader.h"
#include "plugin_loader.h"
#include "nan_search.h"
#include "resolve.h"
#include "runtime.h"
#include "settings.h"
#include "site.h"
#include "stack.h"
#include "tensor_copy.h"
#if FUMI_WITH_CUDA
#include "cuda/checker.h"
#include "cuda/cuda_api.h"
#include "cuda/device_launch.h"
#endif

namespace fumi {
namespace {

void* apiInternOp(const char* name, const char* backend) {
  if (!name || !backend) return nullptr;
  bool created = false;
  OpSite& site = internSite(name, backend, FUMI_DTYPE_UNKNOWN, &created);
  if (created)
    if (Engine* e = engine()) e->compileSite(site);
  return &site;
}

int apiBackendChecked(const char* backend) {
  Engine* e = engine();
  return e && backend && e->checksBackend(backend) ? 1 : 0;
}

uint64_t apiCountCall(void* site, int* checkable) {
  uint64_t index = 0;
  OpDecision* d = site ? static_cast<OpSite*>(site)->onIndexedCall(index) : nullptr;
  if (checkable) *checkable = d != nullptr;
  return index;
}

void* apiSample(void* site, uint64_t index, int64_t size, fumi_dtype dtype, const char* device,
                fumi_dtype autocast) {
  if (!site || size <= 0) return nullptr;
  OpDecision* d = static_cast<OpSite*>(site)->decision.load(std::memory_order_acquire);
  return d ? d->select(CallFacts{size, dtype, device ? device : "cpu", autocast}, index) : nullptr;
}

// A framework-op call as the engine sees it: the adapter's description, rerun through it.
class AdapterCall final : public Call {
 public:
  AdapterCall(OpSite& site, uint64_t index, const fumi_adapter_call& c)
      : Call(site, c.dtype, c.compute == FUMI_DTYPE_UNKNOWN ? c.dtype : c.compute, c.size, index),
        c_(c) {
    for (int32_t i = 0; i < c.ntensors; ++i) addTensor(c.tensors[i]);
    for (int32_t i = 0; i < c.nargs; ++i) addArg(c.arg_names[i], c.arg_values[i]);
    setAutocast(c.autocast);
    setOpSeconds(c.op_seconds);
    setReductionLength(frameworkReductionLength(site.name, tensors(), args()));
    // Scalar arguments arrive as text: a floating one reads "inf", "-inf" or "nan".
    int32_t nonfinite = 0;
    for (int32_t i = 0; i < c.nargs; ++i) {
      const char* v = c.arg_values[i];
      char* end = nullptr;
      const double d = std::strtod(v, &end);
      if (end != v && *end == '\0' && !std::isfinite(d)) ++nonfinite;
    }
    setNonfiniteScalars(nonfinite);
  }
  fumi_status rerun(fumi_dtype precision, void* const* buffers) override {
    const RerunScope rerunning;  // its BLAS calls from the framework's threads are fumi's
    return c_.rerun(c_.self, precision, buffers);
  }
  fumi_status reference(int32_t output, double* out) override {
    const RerunScope rerunning;
    return c_.reference ? c_.reference(c_.self, output, out) : FUMI_UNSUPPORTED;
  }
  // checksum's projections, from the op's schema names and arguments (framework_projection.h).
  // A device op is projected on its device where the adapter can (contractDevice and
  // convolveDevice); otherwise its operands are read on the host, device tensors copied there
  // first when a check asks for a projection (and only then).
  fumi_status project(int32_t output, const std::vector<Projection>& sides) override {
    // Host copies of the device tensors, made once, when the projection first needs them.
    std::vector<fumi_tensor> host;
    std::vector<std::unique_ptr<Stage>> copies;
    auto on_host = [&]() -> const std::vector<fumi_tensor>* {
      if (!host.empty()) return &host;
      std::vector<fumi_tensor> ts = tensors();
      for (size_t i = 0; i < ts.size(); ++i) {
        if (ts[i].memory == FUMI_MEMORY_HOST) continue;
        fumi_dtype dtype = ts[i].dtype;
        copies.push_back(std::make_unique<Stage>());
        const void* data = tensorHostData(ts[i], nullptr, &dtype, *copies.back(), this);
        if (!data) return nullptr;
        ts[i].data = const_cast<void*>(data);
        ts[i].memory = FUMI_MEMORY_HOST;
      }
      host = std::move(ts);
      return &host;
    };
    const auto device_memory = [](const fumi_tensor& t) { return t.memory != FUMI_MEMORY_HOST; };
    const bool on_device = std::any_of(tensors().begin(), tensors().end(), device_memory);
    if (!on_device) return frameworkProjection(site().name, tensors(), args(), output, sides);
    if (!c_.contract) {
      const std::vector<fumi_tensor>* ts = on_host();
      return ts ? frameworkProjection(site().name, *ts, args(), output, sides) : FUMI_UNSUPPORTED;
    }
    DeviceOps device = deviceOpsOf(*this);
    device.on_host = on_host;
    return frameworkProjection(site().name, tensors(), args(), output, sides, &device);
  }

  // The framework's device memory and element-wise work on it where the adapter offers them;
  // libfumi's (Call's defaults) where it does not, or declines a layout (FUMI_UNSUPPORTED).
  void* allocDevice(size_t bytes) override {
    return c_.alloc_device ? c_.alloc_device(c_.self, bytes) : Call::allocDevice(bytes);
  }
  void releaseDevice(void* p) override {
    if (c_.release_device) c_.release_device(c_.self, p);
    else Call::releaseDevice(p);
  }
  bool toHost(void* dst, const void* src, size_t bytes) override {
    return c_.to_host ? c_.to_host(c_.self, dst, src, bytes) != 0 : Call::toHost(dst, src, bytes);
  }
  bool toDevice(void* dst, const void* src, size_t bytes) override {
    return c_.to_device ? c_.to_device(c_.self, dst, src, bytes) != 0
                        : Call::toDevice(dst, src, bytes);
  }
  fumi_status mapDevice(int32_t index, const void* src, fumi_dtype src_dtype, void* dst,
                        fumi_dtype dst_dtype, const fumi_map_spec& spec,
                        uint64_t* changed) override {
    const fumi_tensor& t = tensors()[static_cast<size_t>(index)];
#if FUMI_WITH_CUDA
    if (const fumi_status st = onStream([&](const cuda::Exec& ex) {
          return cuda::deviceMap(ex, t, src, src_dtype, dst, dst_dtype, spec, changed);
        });
        st != FUMI_UNSUPPORTED)
      return st;
#endif
    if (c_.map) {
      int64_t order[FUMI_MAX_DIMS];
      storageStrides(t.ndim, t.shape, t.strides, order);
      const fumi_status st =
          c_.map(c_.self, index, order, src, src_dtype, dst, dst_dtype, &spec, changed);
      if (st != FUMI_UNSUPPORTED) return st;
    }
    return Call::mapDevice(index, src, src_dtype, dst, dst_dtype, spec, changed);
  }
  fumi_status compareDevice(int32_t index, const void* a, fumi_dtype a_dtype, const void* b,
                            fumi_dtype b_dtype, const fumi_compare_spec& spec,
                            fumi_comparison* out) override {
#if FUMI_WITH_CUDA
    if (const fumi_status st = onStream([&](const cuda::Exec& ex) {
          return cuda::deviceCompare(ex, tensors()[static_cast<size_t>(index)], a, a_dtype, b,
                                     b_dtype, spec, out);
        });
        st != FUMI_UNSUPPORTED)
      return st;
#endif
    if (c_.compare) {
      const fumi_status st = c_.compare(c_.self, index, a, a_dtype, b, b_dtype, &spec, out);
      if (st != FUMI_UNSUPPORTED) return st;
    }
    return Call::compareDevice(index, a, a_dtype, b, b_dtype, spec, out);
  }
  fumi_status contractDevice(const fumi_tensor& view, int32_t dim, int32_t count,
                             const double* vectors, double* out) override {
#if FUMI_WITH_CUDA
    if (const fumi_status st = onStream([&](const cuda::Exec& ex) {
          return cuda::deviceContract(ex, view, dim, count, vectors, out);
        });
        st != FUMI_UNSUPPORTED)
      return st;
#endif
    return c_.contract ? c_.contract(c_.self, &view, dim, count, vectors, out) : FUMI_UNSUPPORTED;
  }
  std::string writeAux(const std::string& dir) override {
    const char* text = c_.write_aux ? c_.write_aux(c_.self, dir.c_str()) : nullptr;
    return text ? text : "";
  }
  fumi_status convolveDevice(const fumi_device_conv& conv) override {
#if FUMI_WITH_CUDA
    if (const fumi_status st =
            onStream([&](const cuda::Exec& ex) { return cuda::deviceConvolve(ex, conv); });
        st != FUMI_UNSUPPORTED)
      return st;
#endif
    return c_.convolve ? c_.convolve(c_.self, &conv) : FUMI_UNSUPPORTED;
  }
  fumi_status scanDevice(int32_t index, const void* buffer, fumi_dtype dtype,
                         fumi_scan* out) override {
#if FUMI_WITH_CUDA
    if (const fumi_status st = onStream([&](const cuda::Exec& ex) {
          return cuda::deviceScan(ex, tensors()[static_cast<size_t>(index)], buffer, dtype, out);
        });
        st != FUMI_UNSUPPORTED)
      return st;
#endif
    if (c_.scan) {
      const fumi_status st = c_.scan(c_.self, index, buffer, dtype, out);
      if (st != FUMI_UNSUPPORTED) return st;
    }
    return Call::scanDevice(index, buffer, dtype, out);
  }

 private:
#if FUMI_WITH_CUDA
  // `run` (fumi's own kernels on an Exec) on the framework's CUDA stream, where the adapter
  // names one and the kernels can run there; else FUMI_UNSUPPORTED (the adapter's ops serve).
  template <class F>
  fumi_status onStream(F&& run) {
    void* stream = nullptr;
    cuda::Exec ex;
    if (!c_.cuda_stream || !c_.cuda_stream(c_.self, &stream) ||
        !cuda::streamExec(stream, *this, &ex))
      return FUMI_UNSUPPORTED;
    const cuda::LastErrorScope scope(*cuda::cudaApi());  // fumi's errors are not the program's
    return run(ex);
  }
#endif

  const fumi_adapter_call& c_;
};

int apiCheck(void* site, void* token, uint64_t index, const fumi_adapter_call* call) {
  if (!site || !token) return 0;
  OpSite& s = *static_cast<OpSite*>(site);
  if (!call || call->struct_size < sizeof(fumi_adapter_call)) {
    s.addStats(0, 1);
    return 0;
  }
  return checkSafely(s, *static_cast<RuleSampler*>(token),
                     [&] { return std::make_unique<AdapterCall>(s, index, *call); })
             ? 1
             : 0;
}

// A sampled call the adapter cannot check: counted skipped, and why said (OpSite::countSkipped).
void apiSkip(void* site, void*, const char* why) {
  if (site) static_cast<OpSite*>(site)->countSkipped(why);
}

void apiPush(void* site, uint64_t index) { pushContext(static_cast<OpSite*>(site), index); }
void apiPop() { popContext(); }
void apiLog(int level, const char* message) {
  if (message) logMessage(level, message);
}

uint64_t apiScratchBudget() {
  Engine* e = engine();
  return e ? e->policy().scratch_budget : 0;
}

int apiNanSentinels() {
  Engine* e = engine();
  return e && e->policy().nan_origin.enabled ? 1 : 0;
}
void apiNonfiniteSeen(void* site, uint64_t index) {
  if (site) lossScalingSawNonFinite(*static_cast<OpSite*>(site));
  nanSentinel(static_cast<const OpSite*>(site), index);
}
int apiNanSearch() { return g_nan_search_active.load(std::memory_order_relaxed); }
int apiNanSearchOp() { return nanSearchOp() ? 1 : 0; }
void apiNanOrigin(void* site, uint64_t index, const char* detail, uint64_t nan, uint64_t inf) {
  if (site) lossScalingSawNonFinite(*static_cast<OpSite*>(site));
  nanOrigin(static_cast<const OpSite*>(site), index, detail, nan, inf);
}
void apiNanPropagated(void* site, const char* input) {
  if (site) lossScalingSawNonFinite(*static_cast<OpSite*>(site));
  nanPropagated(static_cast<const OpSite*>(site), input);
}

PastCall pastCall(const fumi_past_call& c) {
  return PastCall{static_cast<const OpSite*>(c.site), c.index, c.phase, c.hops, c.steps_ago,
                  c.place,  c.by_zero != 0, c.out_of_domain != 0,
                  static_cast<const OpSite*>(c.forward_site), c.forward_index,
                  c.positive_inf != 0};
}
void apiNanLookedBack(const fumi_past_call* call, const char* detail, uint64_t nan, uint64_t inf,
                      const fumi_past_call* through, size_t n_through, const char* not_origin) {
  std::vector<PastCall> made;
  for (size_t i = 0; through && i < n_through; ++i) made.push_back(pastCall(through[i]));
  nanLookedBack(call ? pastCall(*call) : PastCall{nullptr, 0, nullptr, 0}, detail, nan, inf, made,
                not_origin);
}
void apiNanOriginForward(void* site, uint64_t index, const char* detail, uint64_t nan,
                         uint64_t inf, const fumi_past_call* forward) {
  if (site) lossScalingSawNonFinite(*static_cast<OpSite*>(site));
  const PastCall f = forward ? pastCall(*forward) : PastCall{nullptr, 0, nullptr, 0};
  nanOrigin(static_cast<const OpSite*>(site), index, detail, nan, inf, f.site ? &f : nullptr);
}
int apiNanLookBack() {
  Engine* e = engine();
  return e ? static_cast<int>(e->policy().nan_origin.look_back) : 0;
}

void apiNonfiniteParameter(void* site, uint64_t) {
  if (site) lossScalingReachedParameters(*static_cast<OpSite*>(site));
}

void apiAttribution(void* site, uint64_t index, const char* fields) {
  Reporter* rep = activeReporter();
  if (!site || !fields || !rep) return;
  InsideScope inside;
  nlohmann::json ev = nlohmann::json::parse(fields, nullptr, /*allow_exceptions=*/false);
  if (!ev.is_object()) return;
  ev["event"] = "attribution";
  ev["op"] = static_cast<OpSite*>(site)->name;
  ev["call_index"] = index;
  rep->event(std::move(ev));
}

void apiReport(void* site, uint64_t index, const char* name, fumi_kind kind, double value,
               double bound, const char* detail) {
  if (!site || !name) return;
  const std::string key = name;  // "check.metric"
  const size_t dot = key.find('.');
  nlohmann::json more = nlohmann::json::object();
  if (detail) more["detail"] = detail;
  reportHostViolation(*static_cast<OpSite*>(site), index, key.substr(0, dot), kind,
                      dot == std::string::npos ? "value" : key.substr(dot + 1), value, bound,
                      more);
}

void apiRecordMetric(void* site, uint64_t index, const char* name, fumi_kind kind, double value,
                     double bound) {
  if (!site || !name) return;
  if (std::isnan(bound) || value <= bound) {
    static_cast<OpSite*>(site)->recordMetric(name, kind, value, /*violated=*/false,
                                             /*counted_nonfinite=*/false, bound);
    return;
  }
  apiReport(site, index, name, kind, value, bound, nullptr);
}

double apiAutocastBound() {
  Engine* e = engine();
  return e ? e->policy().autocast_bound : NAN;
}

int apiQuiet(int on) {
  const bool previous = t_inside_fumi;
  if (on) t_inside_fumi = true;
  else leaveFumi(false);
  return previous ? 1 : 0;
}

fumi_status apiCompare(const fumi_tensor* t, const void* a, fumi_dtype a_dtype, const void* b,
                       fumi_dtype b_dtype, const fumi_compare_spec* spec, fumi_comparison* out) {
  if (!t || !a || !b || !spec || !out) return FUMI_ERROR;
  return compareTensor(*t, a, a_dtype, b, b_dtype, *spec, out);
}

// The adapter's own time on a sampled call (copies before the op, the work after its checks):
// the op's adapter_s, and part of what the overhead budget bounds.
void apiAccount(void* site, double seconds) {
  if (!site || !(seconds > 0)) return;
  static_cast<OpSite*>(site)->addAdapterSeconds(seconds);
  if (Engine* e = engine()) e->budget().charge(seconds);
}

void apiPythonPlace(fumi_py_place* out) {
  if (out) capturePythonPlace(*out);
}

const fumi_adapter_api kAdapterApi = {
    FUMI_ADAPTER_ABI_VERSION, sizeof(fumi_adapter_api), apiInternOp,      apiBackendChecked,
    apiCountCall,             apiSample,                apiCheck,         apiSkip,
    apiPush,                  apiPop,                   apiLog,           apiScratchBudget,
    apiNanSentinels,          apiNonfiniteSeen,         apiNanSearch,     apiNanSearchOp,
    apiNanOrigin,             apiNanPropagated,         nanSearchStep,    apiAttribution,
    apiRecordMetric,          apiAutocastBound,         setSharedProbe,   apiQuiet,
    apiCompare,               apiAccount,               apiReport,        currentPhase,
    apiNanLookedBack,         apiNanLookBack,           lossScalingHeld,  apiNonfiniteParameter,
    apiPythonPlace,           setScriptFrames,          lossScalingAccumulated,
    apiNanOriginForward,      setForwardProbe,          setLookBackProbe};

int findTorch(struct dl_phdr_info* info, size_t, void* found) {
  if (info->dlpi_name && std::strstr(info->dlpi_name, "/libtorch_cpu.so")) {
    *static_cast<bool*>(found) = true;
    return 1;
  }
  return 0;
}

std::string adapterPath() {
  const std::string dir = selfDir();
  return dir.empty() ? dir : dir + "/fumi/libfumi_torch.so";
}

std::atomic<bool> g_torch_attached{false};

}  // namespace

// PyTorch 1.13 rebuilds a thread's callback lists, with a few small allocations, each time the
// thread-local state is set (twice per autograd node) once any RecordFunction callback exists.
// Those allocations change which chunks glibc reuses, so its dynamic trim threshold (twice the
// largest block freed, e.g. the logits) hands the heap top back to the kernel and the next step
// faults it in again: 3x the page faults and 1.4x the step time on an LSTM language model
// (docs/benchmarks.md part 4c). Fixed thresholds (mmap 32 MiB, glibc's dynamic maximum; trim
// never) stop that; results are unchanged, the peak can grow (the LSTM of part 4e: 537 MB
// against 481-508; `malloc_thresholds: leave` keeps glibc's). Not when the program's
// environment tunes malloc itself.
static void pinMallocThresholds() {
  Engine* e = engine();
  if (!e || !e->policy().pin_malloc_thresholds) return;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables && std::strstr(tunables, "malloc")) return;
  for (const char* var : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_"})
    if (std::getenv(var)) return;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
}

void onLibraryLoaded() {
  if (g_torch_attached.load(std::memory_order_acquire) || t_inside_fumi) return;
  bool torch = false;
  dl_iterate_phdr(findTorch, &torch);
  if (!torch || g_torch_attached.exchange(true)) return;
  // Torch ops may run long before the first BLAS call: initialise now.
  if (!enter()) return;  // disabled, or the policy failed
  InsideScope inside;
  const std::string path = adapterPath();
  void* handle = dlopenAsCaller(path.c_str(), RTLD_NOW | RTLD_LOCAL,
                                reinterpret_cast<const void*>(&onLibraryLoaded));
  if (!handle) {
    const char* e = dlerror();
    internalError("torch adapter", (std::string("cannot load ") + path + ": " +
                                    (e ? e : "unknown error"))
                                       .c_str());
    return;
  }
  auto attach = reinterpret_cast<fumi_adapter_attach_fn>(dlsym(handle, FUMI_TORCH_ATTACH_SYMBOL));
  if (attach) addOwnObject(reinterpret_cast<const void*>(attach));  // trimmed from stacks
  char err[512] = "";
  if (!attach) {
    internalError("torch adapter", (path + " has no " FUMI_TORCH_ATTACH_SYMBOL).c_str());
  } else if (attach(&kAdapterApi, err, sizeof err) != 0) {
    internalError("torch adapter", err[0] ? err : "attach failed");
  } else {
    pinMallocThresholds();
  }
}

}  // namespace fumi
