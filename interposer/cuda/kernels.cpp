// kernels.cpp — the CUPTI kernel recorder (kernels.h).
//
// Hot path (every kernel launch in the process, while CUPTI calls us): the launch callback
// reads one thread-local; only a thread inside begin()/end() does more, and then writes one
// atomic word of a direct-mapped table "correlation id -> token" (no lock, no allocation).
// Activity buffers come back on CUPTI's thread; their kernel records whose correlation id is
// in the table are appended to the token's slot. A table entry overwritten by a launch
// kWanted launches later, or a slot reused kMaxPending tokens later, loses that call's
// records: both are far beyond the checker's queue, and both are counted.
#include "kernels.h"

#include <cupti.h>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fumi/plugin.h"
#include "report.h"
#include "settings.h"

namespace fumi::cuda {

namespace {

struct CuptiApi {
#define FUMI_CUPTI_FN(name, ret, params) ret(*name) params = nullptr;
#include "cupti_api.def"
#undef FUMI_CUPTI_FN
};

constexpr const char* kSoname = "libcupti.so.13";
constexpr size_t kWanted = size_t{1} << 16;  // power of two
// Small buffers: CUPTI hands a buffer back once it is full and all its records complete, so
// on a GPU kept busy (where a flush finds the newest buffer incomplete) records still arrive
// soon after their kernels ran.
constexpr size_t kBufferBytes = size_t{32} << 10;
constexpr size_t kMaxBuffers = 64;  // 2 MiB at most; beyond it CUPTI drops (and counts)
// How long take() waits, on the checker thread, for a call's records still missing.
constexpr auto kTakeWait = std::chrono::milliseconds(50);
static_assert((KernelRecorder::kMaxPending & (KernelRecorder::kMaxPending - 1)) == 0,
              "slot index must survive truncating tokens to 32 bits");

// Kernel launches, runtime and driver API, every stream-ordered and per-thread-stream form.
constexpr CUpti_CallbackId kRuntimeLaunches[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000,
    CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000,
    CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000,
};
constexpr CUpti_CallbackId kDriverLaunches[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
};

// The call being recorded on this thread. A runtime launch calls the driver's: `depth`
// counts the nesting so that one launch counts once.
struct ActiveCall {
  uint64_t token;
  uint32_t launches;
  uint32_t depth;
};
__thread ActiveCall t_active;

// correlation id (high 32 bits) | token's low 32 bits; written by launch callbacks only.
std::atomic<uint64_t> g_wanted[kWanted];

// 0: not started, 1: recording, 2: off for good (says why once).
std::atomic<int> g_phase{0};
std::mutex g_start_mu;
KernelRecorder* g_recorder = nullptr;
KernelRecorder::State* g_state = nullptr;

std::string resultText(const CuptiApi& api, CUptiResult r) {
  const char* s = nullptr;
  if (api.cuptiGetResultString && api.cuptiGetResultString(r, &s) == CUPTI_SUCCESS && s) return s;
  return "CUPTI error " + std::to_string(static_cast<int>(r));
}

void sayOff(int level, const std::string& why) {
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) logMessage(level, "kernel records off: " + why);
}

}  // namespace

struct KernelRecorder::State {
  struct Entry {
    uint32_t correlation;
    KernelRecord record;
  };
  struct Slot {
    uint64_t token = 0;  // 0: free
    uint32_t launches = 0;
    std::vector<Entry> records;
  };

  KernelRecorder recorder;  // the one get() hands out
  CuptiApi api;
  CUpti_SubscriberHandle subscriber = nullptr;
  std::atomic<bool> on{false};
  // Set from a CUPTI callback, where calling CUPTI back is not safe: the next control step
  // (take, stepAside) releases CUPTI.
  std::atomic<bool> release_pending{false};

  std::mutex control;  // CUPTI calls that flush or change what fumi holds; before `mu`
  mutable std::mutex mu;
  Slot slots[kMaxPending];
  uint64_t next_token = 1;
  KernelRecorderStats stats;
  std::atomic<uint64_t> records_dropped{0};

  std::mutex buffers_mu;
  std::vector<uint8_t*> buffers;       // every buffer fumi allocated (never freed)
  std::vector<uint8_t*> free_buffers;  // not with CUPTI

  Slot& slot(uint64_t token) { return slots[token % kMaxPending]; }

  // `control` held. Disabling first: records made after the flush would land in a buffer
  // no later flush of ours returns.
  void releaseLocked() {
    on.store(false);
    release_pending.store(false);
    if (!subscriber) return;  // released already
    api.cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    api.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    api.cuptiUnsubscribe(subscriber);
    subscriber = nullptr;
  }

  // `control` held. false (and fumi steps back) when CUPTI fails.
  bool flushLocked(uint32_t flag) {
    if (release_pending.load()) releaseLocked();
    if (!on.load()) return false;
    const CUptiResult r = api.cuptiActivityFlushAll(flag);
    if (r == CUPTI_SUCCESS) return true;
    releaseLocked();
    g_phase.store(2);
    sayOff(FUMI_LOG_WARN, "cuptiActivityFlushAll failed (" + resultText(api, r) + ")");
    return false;
  }

  size_t missing(uint64_t token) const {
    std::lock_guard<std::mutex> lock(mu);
    const Slot& s = slots[token % kMaxPending];
    if (s.token != token) return 0;
    return s.launches > s.records.size() ? s.launches - s.records.size() : 0;
  }

  void consume(uint8_t* buffer, size_t valid) {
    struct Match {
      uint32_t correlation;
      uint32_t token32;
      const CUpti_ActivityKernel10* kernel;
    };
    std::vector<Match> matches;
    CUpti_Activity* r = nullptr;
    while (api.cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
      if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && r->kind != CUPTI_ACTIVITY_KIND_KERNEL)
        continue;
      // Every kernel record version keeps these fields where version 10 has them.
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(r);
      const uint64_t e = g_wanted[k->correlationId & (kWanted - 1)].load(std::memory_order_relaxed);
      if (k->correlationId != 0 && (e >> 32) == k->correlationId)
        matches.push_back({k->correlationId, static_cast<uint32_t>(e), k});
    }
    if (matches.empty()) return;
    std::lock_guard<std::mutex> lock(mu);
    for (const Match& m : matches) {
      Slot& s = slots[m.token32 % kMaxPending];
      if (s.token == 0 || static_cast<uint32_t>(s.token) != m.token32) continue;
      if (s.records.size() >= kMaxKernelsPerCall) {
        ++stats.kernels_over_cap;
        continue;
      }
      s.records.push_back({m.correlation, KernelRecord{m.kernel->name ? m.kernel->name : "",
                                                       m.kernel->start, m.kernel->end}});
      ++stats.kernels;
    }
  }
};

namespace {

// ---- CUPTI's callbacks: nothing may escape from them ----------------------------------------

void CUPTIAPI onApi(void*, CUpti_CallbackDomain domain, CUpti_CallbackId, const void* data) {
  ActiveCall& a = t_active;
  if (!a.token) return;
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
  const auto* d = static_cast<const CUpti_CallbackData*>(data);
  if (d->callbackSite == CUPTI_API_ENTER) {
    if (a.depth++ == 0) ++a.launches;
    g_wanted[d->correlationId & (kWanted - 1)].store(
        uint64_t{d->correlationId} << 32 | static_cast<uint32_t>(a.token),
        std::memory_order_relaxed);
  } else if (a.depth > 0 && --a.depth == 0) {
    // cudaError_t and CUresult alike: 0 is success. A failed launch runs no kernel.
    if (d->functionReturnValue && *static_cast<const int*>(d->functionReturnValue) != 0 &&
        a.launches > 0)
      --a.launches;
  }
}

void CUPTIAPI onBufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = nullptr;
  *size = 0;
  *max_records = 0;
  KernelRecorder::State* st = g_state;
  if (!st) return;
  try {
    std::lock_guard<std::mutex> lock(st->buffers_mu);
    uint8_t* b = nullptr;
    if (!st->free_buffers.empty()) {
      b = st->free_buffers.back();
      st->free_buffers.pop_back();
    } else if (st->buffers.size() < kMaxBuffers) {
      b = static_cast<uint8_t*>(std::aligned_alloc(64, kBufferBytes));
      if (!b) return;
      st->buffers.push_back(b);
    } else {
      return;  // every buffer is with CUPTI or being read: CUPTI drops and counts
    }
    *buffer = b;
    *size = kBufferBytes;
  } catch (...) {
  }
}

void CUPTIAPI onBufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  KernelRecorder::State* st = g_state;
  if (!st || !buffer) return;
  bool ours = false;
  {
    std::lock_guard<std::mutex> lock(st->buffers_mu);
    ours = std::find(st->buffers.begin(), st->buffers.end(), buffer) != st->buffers.end();
  }
  // A buffer fumi never lent: another client registered buffer callbacks before fumi did
  // and fumi took them over. fumi stops at once and gives CUPTI back at its next step; the
  // buffer is not fumi's to reuse.
  if (!ours) {
    st->on.store(false);
    st->release_pending.store(true);
    g_phase.store(2);
    sayOff(FUMI_LOG_WARN, "another CUPTI client's activity buffers reached fumi");
    return;
  }
  try {
    st->consume(buffer, valid);
  } catch (...) {
  }
  size_t dropped = 0;
  if (st->api.cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS)
    st->records_dropped.fetch_add(dropped);
  try {
    std::lock_guard<std::mutex> lock(st->buffers_mu);
    st->free_buffers.push_back(buffer);  // capacity reserved in start()
  } catch (...) {
  }
}

// ---- starting ------------------------------------------------------------------------------

struct LoadedScan {
  std::vector<std::string> dirs;  // directories of the CUDA 13 libraries in the process
  std::string other_cupti;        // a libcupti of another major version, if loaded
};

int scanLoaded(struct dl_phdr_info* info, size_t, void* data) {
  auto* scan = static_cast<LoadedScan*>(data);
  const char* path = info->dlpi_name;
  if (!path || !*path) return 0;
  const char* slash = std::strrchr(path, '/');
  const char* base = slash ? slash + 1 : path;
  if (std::strncmp(base, "libcupti.so.", 12) == 0 && std::strncmp(base + 12, "13", 2) != 0)
    scan->other_cupti = path;
  if (slash && (std::strncmp(base, "libcudart.so.13", 15) == 0 ||
                std::strncmp(base, "libcublas.so.13", 15) == 0 ||
                std::strncmp(base, "libcublasLt.so.13", 17) == 0)) {
    std::string dir(path, static_cast<size_t>(slash - path));
    if (std::find(scan->dirs.begin(), scan->dirs.end(), dir) == scan->dirs.end())
      scan->dirs.push_back(dir);
  }
  return 0;
}

// The program's own libcupti if loaded (dlopen by soname finds it), else the library path,
// else beside the CUDA libraries the program loaded (toolkit and pip wheel layouts).
void* openCupti(const LoadedScan& scan, std::string* error) {
  std::vector<std::string> candidates{kSoname};
  for (const std::string& d : scan.dirs) {
    candidates.push_back(d + "/" + kSoname);
    candidates.push_back(d + "/../extras/CUPTI/lib64/" + kSoname);
    candidates.push_back(d + "/../../cuda_cupti/lib/" + kSoname);
  }
  for (const std::string& c : candidates) {
    if (void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    if (error->empty()) {
      const char* e = dlerror();
      *error = e ? e : "not found";
    }
  }
  return nullptr;
}

void atforkChild() {
  // CUDA does not survive fork(): the child records nothing.
  g_phase.store(2);
  if (g_state) g_state->on.store(false);
}

// With g_start_mu held. The recorder, or nullptr with the reason in *why.
KernelRecorder* start(std::string* why, int* level) {
  *level = FUMI_LOG_INFO;
  if (readSettings().cupti == "0") {
    *level = FUMI_LOG_DEBUG;
    *why = "FUMI_CUPTI=0";
    return nullptr;
  }
  if (const char* inj = std::getenv("CUDA_INJECTION64_PATH"); inj && *inj) {
    *why = std::string("a CUDA tool is injected (CUDA_INJECTION64_PATH=") + inj + ")";
    return nullptr;
  }
  LoadedScan scan;
  dl_iterate_phdr(scanLoaded, &scan);
  if (!scan.other_cupti.empty()) {
    *why = "the program uses another CUPTI (" + scan.other_cupti + ")";
    return nullptr;
  }
  std::string error;
  void* lib = openCupti(scan, &error);
  if (!lib) {
    *why = std::string(kSoname) + " not loadable (" + error + ")";
    return nullptr;
  }
  // Leaked with the library (never dlclosed): CUPTI may call back until the process ends.
  auto* st = new KernelRecorder::State();
  CuptiApi& api = st->api;
  const char* absent = nullptr;
#define FUMI_CUPTI_FN(name, ret, params)                         \
  api.name = reinterpret_cast<ret(*) params>(dlsym(lib, #name)); \
  if (!api.name && !absent) absent = #name;
#include "cupti_api.def"
#undef FUMI_CUPTI_FN
  if (absent) {
    *why = std::string(kSoname) + " lacks " + absent;
    return nullptr;
  }
  // The buffer callbacks then never allocate for their bookkeeping.
  st->buffers.reserve(kMaxBuffers);
  st->free_buffers.reserve(kMaxBuffers);
  g_state = st;

  char old_name[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN] = {0};
  CUpti_SubscriberParams params{};
  params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  params.subscriberName = "fumi";
  params.oldSubscriberName = old_name;
  params.oldSubscriberSize = sizeof old_name;
  CUptiResult r = api.cuptiSubscribe_v2(&st->subscriber, onApi, nullptr, &params);
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    *why = "another CUPTI subscriber (a profiler) is active";
    if (old_name[0]) *why += std::string(" (") + old_name + ")";
    st->subscriber = nullptr;
    return nullptr;
  }
  if (r != CUPTI_SUCCESS) {
    *why = "cuptiSubscribe_v2: " + resultText(api, r);
    st->subscriber = nullptr;
    return nullptr;
  }
  const char* step = nullptr;
  for (CUpti_CallbackId id : kRuntimeLaunches)
    if (!step && (r = api.cuptiEnableCallback(1, st->subscriber, CUPTI_CB_DOMAIN_RUNTIME_API,
                                              id)) != CUPTI_SUCCESS)
      step = "cuptiEnableCallback";
  for (CUpti_CallbackId id : kDriverLaunches)
    if (!step && (r = api.cuptiEnableCallback(1, st->subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id)) !=
                     CUPTI_SUCCESS)
      step = "cuptiEnableCallback";
  if (!step && (r = api.cuptiActivityRegisterCallbacks(onBufferRequested, onBufferCompleted)) !=
                   CUPTI_SUCCESS)
    step = "cuptiActivityRegisterCallbacks";
  if (!step &&
      (r = api.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) != CUPTI_SUCCESS)
    step = "cuptiActivityEnable(CONCURRENT_KERNEL)";
  if (step) {
    *why = std::string(step) + ": " + resultText(api, r);
    std::lock_guard<std::mutex> lock(st->control);
    st->releaseLocked();
    return nullptr;
  }
  static std::once_flag atfork;
  std::call_once(atfork, [] { pthread_atfork(nullptr, nullptr, atforkChild); });
  st->on.store(true);
  uint32_t version = 0;
  api.cuptiGetVersion(&version);
  logMessage(FUMI_LOG_INFO,
             "kernel records on (CUPTI API " + std::to_string(version) + ", " + kSoname + ")");
  return &st->recorder;
}

}  // namespace

KernelRecorder* KernelRecorder::get() {
  const int phase = g_phase.load(std::memory_order_acquire);
  if (phase == 1) return g_recorder;
  if (phase == 2) return nullptr;
  std::string why;
  int level = FUMI_LOG_INFO;
  try {
    std::lock_guard<std::mutex> lock(g_start_mu);
    if (g_phase.load() != 0) return g_phase.load() == 1 ? g_recorder : nullptr;
    KernelRecorder* r = start(&why, &level);
    if (r) {
      g_recorder = r;
      g_phase.store(1, std::memory_order_release);
      return r;
    }
    g_phase.store(2);
  } catch (const std::exception& e) {
    g_phase.store(2);
    why = std::string("internal error: ") + e.what();
  } catch (...) {
    g_phase.store(2);
    why = "internal error";
  }
  sayOff(level, why);
  return nullptr;
}

void KernelRecorder::stepAside(const char* why) {
  if (g_phase.load(std::memory_order_acquire) == 2 && !(g_state && g_state->release_pending.load()))
    return;
  try {
    std::lock_guard<std::mutex> lock(g_start_mu);
    if (g_state && g_state->subscriber) {
      std::lock_guard<std::mutex> control(g_state->control);
      g_state->releaseLocked();
    }
    if (g_phase.exchange(2) == 2) return;
  } catch (...) {
    g_phase.store(2);
  }
  sayOff(FUMI_LOG_INFO, why ? why : "stepped aside for another CUPTI client");
}

uint64_t KernelRecorder::begin() {
  State* st = g_state;
  if (!st || !st->on.load(std::memory_order_relaxed)) return 0;
  ActiveCall& a = t_active;
  if (a.token) return 0;
  uint64_t token = 0;
  try {
    std::lock_guard<std::mutex> lock(st->mu);
    token = st->next_token++;
    if (static_cast<uint32_t>(token) == 0) token = st->next_token++;  // 0 marks "none"
    State::Slot& s = st->slot(token);
    if (s.token) ++st->stats.calls_dropped;
    s.token = token;
    s.launches = 0;
    s.records.clear();
    ++st->stats.calls;
  } catch (...) {
    return 0;
  }
  a.token = token;
  a.launches = 0;
  a.depth = 0;
  return token;
}

void KernelRecorder::end(uint64_t token) {
  ActiveCall& a = t_active;
  if (!token || a.token != token) return;
  const uint32_t launches = a.launches;
  a = ActiveCall{};
  State* st = g_state;
  try {
    std::lock_guard<std::mutex> lock(st->mu);
    State::Slot& s = st->slot(token);
    if (s.token == token) s.launches = launches;
  } catch (...) {
  }
}

std::vector<KernelRecord> KernelRecorder::take(uint64_t token) {
  State* st = g_state;
  if (!token || !st) return {};
  try {
    // Complete records usually wait in a buffer CUPTI has not returned yet. A flush returns
    // only buffers whose records are all complete: one holding the program's later kernels,
    // still running, comes back when they are done (or the buffer is full), so the flush is
    // retried for a while. Never a forced flush here: it would deliver those later records
    // without their times, for good. What is still missing then is counted.
    const auto deadline = std::chrono::steady_clock::now() + kTakeWait;
    while (st->missing(token) > 0) {
      {
        std::lock_guard<std::mutex> control(st->control);
        if (!st->flushLocked(0)) break;
      }
      if (st->missing(token) == 0 || std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    std::vector<State::Entry> entries;
    {
      std::lock_guard<std::mutex> lock(st->mu);
      State::Slot& s = st->slot(token);
      if (s.token != token) return {};
      if (s.launches > s.records.size()) st->stats.kernels_missing += s.launches - s.records.size();
      entries.swap(s.records);
      s.token = 0;
    }
    std::sort(entries.begin(), entries.end(), [](const State::Entry& x, const State::Entry& y) {
      return x.correlation < y.correlation;
    });
    std::vector<KernelRecord> out;
    out.reserve(entries.size());
    for (State::Entry& e : entries) out.push_back(std::move(e.record));
    return out;
  } catch (...) {
    return {};
  }
}

void KernelRecorder::discard(uint64_t token) {
  State* st = g_state;
  if (!token || !st) return;
  try {
    std::lock_guard<std::mutex> lock(st->mu);
    State::Slot& s = st->slot(token);
    if (s.token == token) s.token = 0;
  } catch (...) {
  }
}

KernelRecorderStats KernelRecorder::stats() {
  KernelRecorderStats out;
  State* st = g_state;
  if (!st) return out;
  try {
    std::lock_guard<std::mutex> lock(st->mu);
    out = st->stats;
  } catch (...) {
  }
  out.records_dropped = st->records_dropped.load();
  return out;
}

}  // namespace fumi::cuda
