// cupti.cpp — the simulated device's stand-in for CUPTI (libcupti.so.13): the subset of the
// Callback and Activity APIs a tool needs to learn which kernels a call launched and how long
// they ran, with the real library's rules, so tools can be tested on machines without a GPU.
//
// It learns about launches from the cudart stand-in (sim_tool.h), which it joins at load as
// the driver's profiling client: the cuBLAS/cuBLASLt stand-ins launch each GEMM as a kernel
// through cudaFumiSimLaunchKernel.
//
// Emulated:
//  - one subscriber at a time: cuptiSubscribe / cuptiSubscribe_v2 while one exists answer
//    CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED (_v2 names the existing one, "CUPTI for
//    <name>"); FUMI_SIM_CUPTI_SUBSCRIBER=<name> makes a tool of that name (a profiler, as
//    Nsight Systems injects itself) the subscriber from load on, for back-off tests.
//  - cuptiEnableCallback / cuptiEnableDomain (validated domain and cbid, per subscriber),
//    cuptiUnsubscribe. Each simulated launch is a cudaLaunchKernel_v7000 in the runtime
//    domain: enter and exit callbacks on the launching thread, with the launch's correlation
//    id, cudaLaunchKernel_v7000_params, the kernel as symbolName, the return value at exit.
//  - activity records of kind CONCURRENT_KERNEL (CUpti_ActivityKernel10, the current version):
//    a record is reserved in the current buffer at launch (in launch order) and completed
//    with start/end when the kernel has run; launches captured into a graph get none.
//    Buffers come from the client's request callback (CUPTI's maxNumRecords honoured; a
//    refused, misaligned or too small buffer drops the record, counted for
//    cuptiActivityGetNumDroppedRecords) and go back through its completion callback: full
//    buffers once all their records are complete, on the stand-in's own delivery thread (as
//    CUPTI uses its own thread); cuptiActivityFlushAll(0) delivers, on the calling thread,
//    every non-empty buffer whose records are all complete, and waits for deliveries in
//    progress; CUPTI_ACTIVITY_FLAG_FLUSH_FORCED delivers all of them, incomplete records
//    with unknown (0) timestamps. cuptiActivityGetNextRecord, cuptiGetTimestamp (the host's
//    steady clock, the clock of the records), cuptiGetVersion, cuptiGetResultString.
//
// Not emulated: the driver API domain (a simulated launch has no cuLaunchKernel under it),
// other callback domains' events (enabling them is accepted, nothing is issued), other
// activity kinds (cuptiActivityEnable answers CUPTI_ERROR_NOT_SUPPORTED), kernels replayed
// from graphs, per-context activity control, cuptiFinalize, the event/metric/profiler APIs,
// and everything else the real headers declare but this file does not define. The client's
// buffer-request callback runs under the stand-in's lock (it must not call CUPTI). After
// fork() the child has no delivery thread.
//
// Robustness: no C++ exception leaves an extern "C" function; state is a leaked singleton,
// and the library is linked -z nodelete, because stream work launched earlier calls back into
// it at any time, exit included.

#include <cupti.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "sim_tool.h"

struct CUpti_Subscriber_st {
  CUpti_CallbackFunc callback;
  void* userdata;
  std::string name;
  // Enabled callback ids, one flag per cbid of each domain.
  std::vector<bool> enabled[CUPTI_CB_DOMAIN_SIZE];
};

namespace {

using Record = CUpti_ActivityKernel10;
constexpr size_t kRecordSize = (sizeof(Record) + 7) / 8 * 8;

uint32_t domainSize(CUpti_CallbackDomain d) {
  switch (d) {
    case CUPTI_CB_DOMAIN_DRIVER_API:
      return CUPTI_DRIVER_TRACE_CBID_SIZE;
    case CUPTI_CB_DOMAIN_RUNTIME_API:
      return CUPTI_RUNTIME_TRACE_CBID_SIZE;
    case CUPTI_CB_DOMAIN_RESOURCE:
      return CUPTI_CBID_RESOURCE_SIZE;
    case CUPTI_CB_DOMAIN_SYNCHRONIZE:
      return CUPTI_CBID_SYNCHRONIZE_SIZE;
    case CUPTI_CB_DOMAIN_NVTX:
      return CUPTI_CBID_NVTX_SIZE;
    case CUPTI_CB_DOMAIN_STATE:
      return CUPTI_CBID_STATE_SIZE;
    default:
      return 0;
  }
}

// An activity buffer the client lent; records are reserved in launch order.
struct Buffer {
  uint8_t* data = nullptr;
  size_t size = 0;
  size_t used = 0;
  size_t maxRecords = 0;  // 0: as many as fit
  size_t records = 0;
  int incomplete = 0;      // reserved records whose kernel has not finished
  bool closed = false;     // no more records go in
  bool delivered = false;  // back with the client: the stand-in must not touch it
};
using BufferPtr = std::shared_ptr<Buffer>;

// What kernelRecord hands the cudart stand-in.
struct Reservation {
  BufferPtr buffer;
  size_t offset;
};

struct State {
  std::mutex mu;
  CUpti_Subscriber_st* subscriber = nullptr;  // the one subscriber (ours or the phantom's)
  bool phantom = false;                       // FUMI_SIM_CUPTI_SUBSCRIBER's pretend tool
  std::atomic<uint32_t> nextCorrelation{1};
  std::atomic<int64_t> nextGrid{1};

  CUpti_BuffersCallbackRequestFunc request = nullptr;
  CUpti_BuffersCallbackCompleteFunc complete = nullptr;
  bool kernelsEnabled = false;
  BufferPtr current;
  std::vector<BufferPtr> closed;  // closed, not yet delivered
  std::deque<BufferPtr> ready;    // for the delivery thread
  bool threadDelivering = false;  // the delivery thread is handing a buffer over
  std::condition_variable cv;     // ready grew / the delivery thread finished one
  bool deliveryStarted = false;
  size_t dropped = 0;
};

// Leaked on purpose (see the header).
State& S() {
  static State* s = new State();
  return *s;
}

uint64_t now() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

void deliver(State& st, const BufferPtr& b) {
  CUpti_BuffersCallbackCompleteFunc complete;
  {
    std::lock_guard<std::mutex> lk(st.mu);
    complete = st.complete;
  }
  if (complete) complete(nullptr, 0, b->data, b->size, b->used);
}

void deliveryMain() {
  State& st = S();
  std::unique_lock<std::mutex> lk(st.mu);
  for (;;) {
    st.cv.wait(lk, [&] { return !st.ready.empty(); });
    BufferPtr b = std::move(st.ready.front());
    st.ready.pop_front();
    st.threadDelivering = true;
    lk.unlock();
    deliver(st, b);
    lk.lock();
    st.threadDelivering = false;
    st.cv.notify_all();
  }
}

// A closed buffer whose records are all complete goes to the delivery thread.
void maybeReadyLocked(State& st, const BufferPtr& b) {
  if (!b->closed || b->delivered || b->incomplete > 0) return;
  for (auto it = st.closed.begin(); it != st.closed.end(); ++it)
    if (*it == b) {
      st.closed.erase(it);
      break;
    }
  b->delivered = true;
  st.ready.push_back(b);
  if (!st.deliveryStarted) {
    std::thread(deliveryMain).detach();
    st.deliveryStarted = true;
  }
  st.cv.notify_all();
}

void closeCurrentLocked(State& st) {
  if (!st.current) return;
  BufferPtr b = std::move(st.current);
  st.current = nullptr;
  b->closed = true;
  st.closed.push_back(b);
  maybeReadyLocked(st, b);
}

bool fits(const Buffer& b) {
  return b.used + kRecordSize <= b.size && (b.maxRecords == 0 || b.records < b.maxRecords);
}

// ---- the tool side of sim_tool.h -------------------------------------------------------------

void issue(CUpti_ApiCallbackSite site, FumiSimLaunch* l) {
  CUpti_CallbackFunc cb = nullptr;
  void* userdata = nullptr;
  {
    State& st = S();
    std::lock_guard<std::mutex> lk(st.mu);
    const CUpti_Subscriber_st* sub = st.subscriber;
    if (!sub || !sub->callback ||
        !sub->enabled[CUPTI_CB_DOMAIN_RUNTIME_API][CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000])
      return;
    cb = sub->callback;
    userdata = sub->userdata;
  }
  cudaLaunchKernel_v7000_params params{};
  params.func = l->func;
  params.gridDim = dim3(1, 1, 1);
  params.blockDim = dim3(1, 1, 1);
  params.stream = l->stream;
  CUpti_CallbackData data{};
  data.callbackSite = site;
  data.functionName = "cudaLaunchKernel";
  data.functionParams = &params;
  data.functionReturnValue = &l->result;
  data.symbolName = l->kernel;
  data.contextUid = 1;
  data.correlationData = &l->correlationData;
  data.correlationId = l->correlationId;
  cb(userdata, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, &data);
}

void launchEnter(FumiSimLaunch* l) {
  l->correlationId = S().nextCorrelation.fetch_add(1);
  issue(CUPTI_API_ENTER, l);
}

void launchExit(FumiSimLaunch* l) { issue(CUPTI_API_EXIT, l); }

void* kernelRecord(const FumiSimLaunch* l, unsigned long long streamId) {
  State& st = S();
  try {
    std::lock_guard<std::mutex> lk(st.mu);
    if (!st.kernelsEnabled || !st.request) return nullptr;
    if (st.current && !fits(*st.current)) closeCurrentLocked(st);
    if (!st.current) {
      uint8_t* data = nullptr;
      size_t size = 0, maxRecords = 0;
      st.request(&data, &size, &maxRecords);
      if (!data || size < kRecordSize || reinterpret_cast<uintptr_t>(data) % 8 != 0) {
        ++st.dropped;  // CUPTI keeps no buffer of its own: the record is lost
        return nullptr;
      }
      st.current = std::make_shared<Buffer>();
      st.current->data = data;
      st.current->size = size;
      st.current->maxRecords = maxRecords;
    }
    Buffer& b = *st.current;
    auto* r = reinterpret_cast<Record*>(b.data + b.used);
    std::memset(static_cast<void*>(r), 0, kRecordSize);
    r->kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    r->start = CUPTI_TIMESTAMP_UNKNOWN;
    r->end = CUPTI_TIMESTAMP_UNKNOWN;
    r->completed = CUPTI_TIMESTAMP_UNKNOWN;
    r->deviceId = 0;
    r->contextId = 1;
    r->streamId = static_cast<uint32_t>(streamId);
    r->gridX = r->gridY = r->gridZ = 1;
    r->blockX = r->blockY = r->blockZ = 1;
    r->correlationId = l->correlationId;
    r->gridId = st.nextGrid.fetch_add(1);
    r->name = l->kernel;
    r->launchType = CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR;
    auto* res = new Reservation{st.current, b.used};
    b.used += kRecordSize;
    ++b.records;
    ++b.incomplete;
    return res;
  } catch (...) {
    return nullptr;
  }
}

void kernelDone(void* handle, int ran, uint64_t start, uint64_t end) {
  std::unique_ptr<Reservation> res(static_cast<Reservation*>(handle));
  State& st = S();
  std::lock_guard<std::mutex> lk(st.mu);
  Buffer& b = *res->buffer;
  if (b.delivered) return;  // force-flushed while the kernel ran: the client has it as it was
  auto* r = reinterpret_cast<Record*>(b.data + res->offset);
  if (ran) {
    r->start = start;
    r->end = end;
    r->completed = end;
  } else {
    r->kind = CUPTI_ACTIVITY_KIND_INVALID;  // a launch that never ran: skipped when iterating
  }
  --b.incomplete;
  try {
    maybeReadyLocked(st, res->buffer);
  } catch (...) {
    // No delivery thread could be started: the buffer waits for the next flush.
  }
}

uint64_t toolTimestamp() { return now(); }

const FumiSimTool kTool{launchEnter, launchExit, kernelRecord, kernelDone, toolTimestamp};

__attribute__((constructor)) void attach() {
  State& st = S();
  if (const char* name = std::getenv("FUMI_SIM_CUPTI_SUBSCRIBER"); name && *name) {
    st.subscriber = new CUpti_Subscriber_st{nullptr, nullptr, name, {}};
    st.phantom = true;
  }
  cudaFumiSimSetTool(&kTool);
}

template <class F>
CUptiResult guarded(F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return CUPTI_ERROR_OUT_OF_MEMORY;
  } catch (...) {
    return CUPTI_ERROR_UNKNOWN;
  }
}

CUptiResult subscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                      void* userdata, CUpti_SubscriberParams* params) {
  return guarded([&] {
    if (!subscriber) return CUPTI_ERROR_INVALID_PARAMETER;
    if (params && params->structSize == 0) return CUPTI_ERROR_INVALID_PARAMETER;
    State& st = S();
    std::lock_guard<std::mutex> lk(st.mu);
    if (st.subscriber) {
      if (params && params->oldSubscriberName && params->oldSubscriberSize > 0) {
        const std::string old = "CUPTI for " + st.subscriber->name;
        const size_t n = std::min(old.size(), params->oldSubscriberSize - 1);
        std::memcpy(params->oldSubscriberName, old.data(), n);
        params->oldSubscriberName[n] = '\0';
      }
      return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    }
    auto* sub = new CUpti_Subscriber_st{callback, userdata, "", {}};
    if (params && params->subscriberName)
      sub->name.assign(params->subscriberName,
                       strnlen(params->subscriberName, CUPTI_SUBSCRIBER_NAME_MAX_LEN));
    for (int d = 0; d < CUPTI_CB_DOMAIN_SIZE; ++d)
      sub->enabled[d].assign(domainSize(static_cast<CUpti_CallbackDomain>(d)), false);
    st.subscriber = sub;
    *subscriber = sub;
    return CUPTI_SUCCESS;
  });
}

// The subscriber handle, validated; nullptr when it is not the live one.
CUpti_Subscriber_st* liveLocked(CUpti_SubscriberHandle h) {
  State& st = S();
  return h && h == st.subscriber && !st.phantom ? h : nullptr;
}

const char* resultName(CUptiResult r) {
  switch (r) {
#define FUMI_SIM_CUPTI_RESULT(x) \
  case x:                        \
    return #x;
    FUMI_SIM_CUPTI_RESULT(CUPTI_SUCCESS)
    FUMI_SIM_CUPTI_RESULT(CUPTI_ERROR_INVALID_PARAMETER)
    FUMI_SIM_CUPTI_RESULT(CUPTI_ERROR_INVALID_DEVICE)
    FUMI_SIM_CUPTI_RESULT(CUPTI_ERROR_INVALID_CONTEXT)
    FUMI_SIM_CUPTI_RESULT(CUPTI_ERROR_INVALID_OPERATION)
    FUMI_SIM_CUPTI_RESULT(CUPTI_ERROR_OUT_OF_MEMORY)
    FUMI_SIM_CUPTI_RESULT(CUPTI_ERROR_MAX_LIMIT_REACHED)
    FUMI_SIM_CUPTI_RESULT(CUPTI_ERROR_NOT_READY)
    FUMI_SIM_CUPTI_RESULT(CUPTI_ERROR_NOT_COMPATIBLE)
    FUMI_SIM_CUPTI_RESULT(CUPTI_ERROR_NOT_INITIALIZED)
    FUMI_SIM_CUPTI_RESULT(CUPTI_ERROR_INVALID_KIND)
    FUMI_SIM_CUPTI_RESULT(CUPTI_ERROR_NOT_SUPPORTED)
    FUMI_SIM_CUPTI_RESULT(CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)
    FUMI_SIM_CUPTI_RESULT(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
    FUMI_SIM_CUPTI_RESULT(CUPTI_ERROR_UNKNOWN)
#undef FUMI_SIM_CUPTI_RESULT
    default:
      return nullptr;
  }
}

}  // namespace

extern "C" {

CUptiResult CUPTIAPI cuptiGetVersion(uint32_t* version) {
  if (!version) return CUPTI_ERROR_INVALID_PARAMETER;
  *version = CUPTI_API_VERSION;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char** str) {
  if (!str) return CUPTI_ERROR_INVALID_PARAMETER;
  const char* n = resultName(result);
  if (!n) return CUPTI_ERROR_INVALID_PARAMETER;
  *str = n;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetTimestamp(uint64_t* timestamp) {
  if (!timestamp) return CUPTI_ERROR_INVALID_PARAMETER;
  *timestamp = now();
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                                    void* userdata) {
  return subscribe(subscriber, callback, userdata, nullptr);
}

CUptiResult CUPTIAPI cuptiSubscribe_v2(CUpti_SubscriberHandle* subscriber,
                                       CUpti_CallbackFunc callback, void* userdata,
                                       CUpti_SubscriberParams* pParams) {
  return subscribe(subscriber, callback, userdata, pParams);
}

CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
  State& st = S();
  std::lock_guard<std::mutex> lk(st.mu);
  CUpti_Subscriber_st* sub = liveLocked(subscriber);
  if (!sub) return CUPTI_ERROR_INVALID_PARAMETER;
  st.subscriber = nullptr;
  // Callbacks read the subscriber only under the lock, so nothing uses it any more.
  delete sub;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                         CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  State& st = S();
  std::lock_guard<std::mutex> lk(st.mu);
  CUpti_Subscriber_st* sub = liveLocked(subscriber);
  if (!sub || cbid >= domainSize(domain)) return CUPTI_ERROR_INVALID_PARAMETER;
  sub->enabled[domain][cbid] = enable != 0;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                       CUpti_CallbackDomain domain) {
  State& st = S();
  std::lock_guard<std::mutex> lk(st.mu);
  CUpti_Subscriber_st* sub = liveLocked(subscriber);
  if (!sub || domainSize(domain) == 0) return CUPTI_ERROR_INVALID_PARAMETER;
  sub->enabled[domain].assign(domainSize(domain), enable != 0);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI
cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc funcBufferRequested,
                               CUpti_BuffersCallbackCompleteFunc funcBufferCompleted) {
  if (!funcBufferRequested || !funcBufferCompleted) return CUPTI_ERROR_INVALID_PARAMETER;
  State& st = S();
  std::lock_guard<std::mutex> lk(st.mu);
  st.request = funcBufferRequested;
  st.complete = funcBufferCompleted;
  return CUPTI_SUCCESS;
}

namespace {
// cuptiActivityEnable/Disable: only kernel records are emulated; enabling another kind is not
// supported, disabling one (never enabled) succeeds.
CUptiResult setActivity(CUpti_ActivityKind kind, bool on) {
  if (kind <= CUPTI_ACTIVITY_KIND_INVALID || kind >= CUPTI_ACTIVITY_KIND_COUNT)
    return CUPTI_ERROR_INVALID_KIND;
  if (kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
    return on ? CUPTI_ERROR_NOT_SUPPORTED : CUPTI_SUCCESS;
  State& st = S();
  std::lock_guard<std::mutex> lk(st.mu);
  st.kernelsEnabled = on;
  return CUPTI_SUCCESS;
}
}  // namespace

CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind) { return setActivity(kind, true); }

CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind) {
  return setActivity(kind, false);
}

CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t flag) {
  return guarded([&] {
    State& st = S();
    const bool forced = (flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) != 0;
    std::vector<BufferPtr> out;
    {
      std::unique_lock<std::mutex> lk(st.mu);
      if (!st.request || !st.complete) return CUPTI_ERROR_INVALID_OPERATION;
      if (st.current && st.current->records > 0 && (forced || st.current->incomplete == 0)) {
        st.current->closed = true;
        st.closed.push_back(std::move(st.current));
        st.current = nullptr;
      }
      for (auto it = st.closed.begin(); it != st.closed.end();) {
        if (forced || (*it)->incomplete == 0) {
          (*it)->delivered = true;
          out.push_back(std::move(*it));
          it = st.closed.erase(it);
        } else {
          ++it;
        }
      }
      while (!st.ready.empty()) {
        out.push_back(std::move(st.ready.front()));
        st.ready.pop_front();
      }
      // Whatever the delivery thread is handing over must be with the client on return.
      st.cv.wait(lk, [&] { return !st.threadDelivering; });
    }
    for (const BufferPtr& b : out) deliver(st, b);
    return CUPTI_SUCCESS;
  });
}

CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t* buffer, size_t validBufferSizeBytes,
                                                CUpti_Activity** record) {
  if (!buffer || !record) return CUPTI_ERROR_INVALID_PARAMETER;
  uint8_t* p = *record ? reinterpret_cast<uint8_t*>(*record) + kRecordSize : buffer;
  for (;; p += kRecordSize) {
    if (p + kRecordSize > buffer + validBufferSizeBytes) return CUPTI_ERROR_MAX_LIMIT_REACHED;
    auto* a = reinterpret_cast<CUpti_Activity*>(p);
    if (a->kind == CUPTI_ACTIVITY_KIND_INVALID) continue;
    if (a->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) return CUPTI_ERROR_INVALID_KIND;
    *record = a;
    return CUPTI_SUCCESS;
  }
}

CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
  if (!dropped) return CUPTI_ERROR_INVALID_PARAMETER;
  State& st = S();
  std::lock_guard<std::mutex> lk(st.mu);
  *dropped = st.dropped;
  st.dropped = 0;
  return CUPTI_SUCCESS;
}

}  // extern "C"
