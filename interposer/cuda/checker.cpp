// checker.cpp — the CUDA checker thread, its queue and its device memory pool (checker.h).
#include "checker.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include <spdlog/fmt/fmt.h>

#include "device_launch.h"
#include "kernels.h"
#include "report.h"
#include "runtime.h"
#include "settings.h"

namespace fumi::cuda {

namespace {
constexpr size_t kAlign = 256;  // what cudaMalloc guarantees; copies and kernels expect it
}

struct Checker::State {
  std::mutex mu;
  std::condition_variable cv;    // work arrived / work done
  std::deque<std::function<void()>> work;
  size_t running = 0;            // items taken but not finished
  bool stopping = false;
  // Set at exit when the queue outlived the wait (FUMI_EXIT_WAIT): the checks still queued
  // release what they hold and are counted as skipped instead of running.
  std::atomic<bool> dropping{false};
  double exit_wait_s = 60;
  std::thread thread;

  // Pool: one device allocation, first-fit over free ranges (offset -> size), coalesced.
  char* base = nullptr;
  size_t size = 0;
  size_t snapshot_limit = 0;     // the users' share: the rest stays for the checks' scratch
  size_t snapshot_used = 0;
  std::map<size_t, size_t> free_ranges;
  std::map<size_t, std::pair<size_t, bool>> used;  // offset -> (size, is snapshot)
  std::vector<cudaEvent_t> events;

  void* allocate(size_t bytes, bool snapshot) {
    bytes = (bytes + kAlign - 1) / kAlign * kAlign;
    std::lock_guard<std::mutex> lock(mu);
    if (snapshot && snapshot_used + bytes > snapshot_limit) return nullptr;
    for (auto it = free_ranges.begin(); it != free_ranges.end(); ++it) {
      if (it->second < bytes) continue;
      const size_t off = it->first, rest = it->second - bytes;
      free_ranges.erase(it);
      if (rest) free_ranges.emplace(off + bytes, rest);
      used.emplace(off, std::make_pair(bytes, snapshot));
      if (snapshot) snapshot_used += bytes;
      return base + off;
    }
    return nullptr;
  }

  void release(void* p) {
    std::lock_guard<std::mutex> lock(mu);
    const size_t off = static_cast<size_t>(static_cast<char*>(p) - base);
    auto u = used.find(off);
    if (u == used.end()) return;
    size_t start = off, len = u->second.first;
    if (u->second.second) snapshot_used -= len;
    used.erase(u);
    auto next = free_ranges.lower_bound(start);
    if (next != free_ranges.end() && next->first == start + len) {
      len += next->second;
      next = free_ranges.erase(next);
    }
    if (next != free_ranges.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == start) {
        start = prev->first;
        len += prev->second;
        free_ranges.erase(prev);
      }
    }
    free_ranges.emplace(start, len);
  }
};

namespace {

std::mutex g_start_mu;
Checker* g_checker = nullptr;
Checker::State* g_state_ptr = nullptr;
bool g_unusable = false;  // tried and failed, or a forked child (CUDA does not survive fork)
bool g_sync = false;

void logOnce(fumi_log_level level, const std::string& text) {
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) logMessage(level, text);
}

void atforkChild() {
  // The child has no checker thread and no usable CUDA context.
  g_checker = nullptr;
  g_state_ptr = nullptr;
  g_unusable = true;
}

void* deviceAlloc(size_t bytes) { return g_state_ptr ? g_state_ptr->allocate(bytes, false) : nullptr; }
void deviceRelease(void* p) {
  if (g_state_ptr) g_state_ptr->release(p);
}
bool deviceToHost(void* dst, const void* src, size_t bytes) {
  return g_checker && g_checker->copy(dst, src, bytes, cudaMemcpyDeviceToHost);
}
bool hostToDevice(void* dst, const void* src, size_t bytes) {
  return g_checker && g_checker->copy(dst, src, bytes, cudaMemcpyHostToDevice);
}
// The checker's stream, pool and copies, for the kernels (checker thread).
Exec checkerExec() {
  Exec ex;
  ex.stream = g_checker->stream();
  ex.alloc = deviceAlloc;
  ex.release = deviceRelease;
  ex.copy = [](void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    return g_checker->copy(dst, src, bytes, kind);
  };
  return ex;
}
fumi_status deviceContractFn(const fumi_tensor& view, int32_t dim, int32_t count,
                             const double* vectors, double* out) {
  return g_checker ? deviceContract(checkerExec(), view, dim, count, vectors, out)
                   : FUMI_UNSUPPORTED;
}
fumi_status deviceScanFn(const fumi_tensor& t, const void* data, fumi_dtype dtype,
                         fumi_scan* out) {
  return g_checker ? deviceScan(checkerExec(), t, data, dtype, out) : FUMI_UNSUPPORTED;
}
fumi_status deviceCompareFn(const fumi_tensor& t, const void* a, fumi_dtype a_dtype,
                            const void* b, fumi_dtype b_dtype, const fumi_compare_spec& spec,
                            fumi_comparison* out) {
  return g_checker ? deviceCompare(checkerExec(), t, a, a_dtype, b, b_dtype, spec, out)
                   : FUMI_UNSUPPORTED;
}
fumi_status deviceMapFn(const fumi_tensor& t, const void* src, fumi_dtype src_dtype, void* dst,
                        fumi_dtype dst_dtype, const fumi_map_spec& spec, uint64_t* changed) {
  return g_checker ? deviceMap(checkerExec(), t, src, src_dtype, dst, dst_dtype, spec, changed)
                   : FUMI_UNSUPPORTED;
}
fumi_status deviceConvolveFn(const fumi_device_conv& conv) {
  return g_checker ? deviceConvolve(checkerExec(), conv) : FUMI_UNSUPPORTED;
}
const DeviceMemory kDeviceMemory{deviceAlloc,      deviceRelease, deviceToHost,    hostToDevice,
                                 deviceContractFn, deviceScanFn,  deviceCompareFn, deviceMapFn,
                                 deviceConvolveFn};

void checkerLoop(Checker::State& st) {
  InsideScope inside;  // everything this thread calls goes straight to the real libraries
  for (;;) {
    std::function<void()> item;
    {
      std::unique_lock<std::mutex> lock(st.mu);
      st.cv.wait(lock, [&] { return st.stopping || !st.work.empty(); });
      if (st.work.empty()) return;
      item = std::move(st.work.front());
      st.work.pop_front();
      ++st.running;
    }
    item();
    {
      std::lock_guard<std::mutex> lock(st.mu);
      --st.running;
    }
    st.cv.notify_all();
  }
}

}  // namespace

Checker* Checker::get() {
  std::lock_guard<std::mutex> lock(g_start_mu);
  if (g_checker || g_unusable) return g_checker;
  g_unusable = true;  // until proven otherwise
  const char* missing = nullptr;
  const CudaApi* api = cudaApi(&missing);
  if (!api) {
    logOnce(FUMI_LOG_WARN, fmt::format("CUDA calls are not checked: {} not found in the process",
                                       missing ? missing : "?"));
    return nullptr;
  }
  Engine* eng = engine();
  if (!eng) return nullptr;
  const Settings settings = readSettings();
  g_sync = settings.cuda_mode == "sync";
  if (!g_sync && settings.cuda_mode != "async")
    logMessage(FUMI_LOG_WARN, "FUMI_CUDA_MODE must be async or sync; using async");
  const size_t depth = std::max(1, std::atoi(settings.cuda_queue.c_str()));
  char* wait_end = nullptr;
  const double exit_wait = std::strtod(settings.exit_wait.c_str(), &wait_end);
  const bool wait_ok = wait_end && *wait_end == '\0' && exit_wait >= 0 && exit_wait <= 86400;
  if (!wait_ok)
    logMessage(FUMI_LOG_WARN, "FUMI_EXIT_WAIT must be a number of seconds from 0 to 86400; "
                              "using 60");

  auto* checker = new Checker(*api);
  auto* st = new State();
  st->exit_wait_s = wait_ok ? exit_wait : 60;
  // Set up on the checker thread itself: it runs in relaxed capture mode, so its allocations
  // and synchronisations never invalidate a graph capture a program thread has under way.
  std::string error;
  bool ready = false;
  std::mutex ready_mu;
  std::condition_variable ready_cv;
  const size_t pool = eng->policy().scratch_budget;
  st->thread = fumiThread([&, checker, st] {
    InsideScope inside;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    api->cudaThreadExchangeStreamCaptureMode(&mode);
    cudaError_t e = api->cudaStreamCreateWithFlags(&checker->stream_, cudaStreamNonBlocking);
    void* mem = nullptr;
    if (e == cudaSuccess) e = api->cudaMalloc(&mem, pool);
    for (size_t i = 0; e == cudaSuccess && i < depth; ++i) {
      cudaEvent_t ev = nullptr;
      e = api->cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
      if (e == cudaSuccess) st->events.push_back(ev);
    }
    {
      // Notified under the lock: ready_mu and ready_cv live on the starting thread's stack,
      // which may return as soon as it sees `ready`.
      std::lock_guard<std::mutex> l(ready_mu);
      if (e != cudaSuccess)
        error = api->cudaGetErrorString(e);
      st->base = static_cast<char*>(mem);
      st->size = pool;
      st->snapshot_limit = pool / 2;
      st->free_ranges.emplace(0, pool);
      ready = true;
      ready_cv.notify_all();
    }
    if (e == cudaSuccess) checkerLoop(*st);
  });
  {
    std::unique_lock<std::mutex> l(ready_mu);
    ready_cv.wait(l, [&] { return ready; });
  }
  if (!error.empty()) {
    st->thread.join();
    logOnce(FUMI_LOG_WARN, "CUDA calls are not checked: the checker could not set up (" + error +
                               ")");
    return nullptr;
  }
  g_state_ptr = st;
  g_checker = checker;
  g_unusable = false;
  setDeviceMemory(&kDeviceMemory);
  static std::once_flag hooks;
  std::call_once(hooks, [] {
    pthread_atfork(nullptr, nullptr, atforkChild);
    // Registered after the CUDA runtime initialised, so it runs before the runtime's own exit
    // handler tears the device down: queued checks still finish.
    std::atexit(drain);
    setBeforeSummary(drain);
  });
  return g_checker;
}

namespace {
std::mutex g_before_drain_mu;
std::vector<void (*)()>& beforeDrainFns() {
  static auto* fns = new std::vector<void (*)()>;  // never destroyed: drain runs at exit
  return *fns;
}
}  // namespace

void Checker::beforeDrain(void (*fn)()) {
  std::lock_guard<std::mutex> lock(g_before_drain_mu);
  beforeDrainFns().push_back(fn);
}

void Checker::drain() {
  State* st = g_state_ptr;
  if (!st) return;
  std::vector<void (*)()> before;
  {
    std::lock_guard<std::mutex> lock(g_before_drain_mu);
    before = beforeDrainFns();
  }
  for (void (*fn)() : before) fn();
  size_t dropped = 0;
  {
    const PromptSignals prompt;  // a SIGTERM now ends the job, as without fumi
    std::unique_lock<std::mutex> lock(st->mu);
    const auto wait = std::chrono::duration<double>(st->exit_wait_s);
    if (!st->cv.wait_for(lock, wait, [&] { return st->work.empty() && st->running == 0; })) {
      dropped = st->work.size();
      st->dropping = true;
    }
    st->stopping = true;
  }
  if (dropped)
    logMessage(FUMI_LOG_WARN,
               fmt::format("exit: {} queued CUDA check(s) dropped, not done after {} s "
                           "(FUMI_EXIT_WAIT); counted as skipped",
                           dropped, st->exit_wait_s));
  st->cv.notify_all();
  if (st->thread.joinable()) {
    if (st->thread.get_id() == std::this_thread::get_id()) st->thread.detach();
    else st->thread.join();
  }
  static std::atomic<bool> said{false};
  const KernelRecorderStats ks = KernelRecorder::stats();
  if (ks.calls && !said.exchange(true))
    logMessage(FUMI_LOG_INFO,
               fmt::format("kernel records: {} calls recorded, {} kernels matched, {} launches "
                           "without a record, {} calls dropped, {} kernels over the per-call "
                           "cap, {} records dropped by CUPTI",
                           ks.calls, ks.kernels, ks.kernels_missing, ks.calls_dropped,
                           ks.kernels_over_cap, ks.records_dropped));
  // The pool and handles stay: the process is ending. Later calls are not checked.
  std::lock_guard<std::mutex> lock(g_start_mu);
  g_checker = nullptr;
  g_unusable = true;
}

void* Checker::take(size_t bytes) { return g_state_ptr->allocate(bytes, true); }
void Checker::give(void* p) { g_state_ptr->release(p); }

cudaEvent_t Checker::takeEvent() {
  State& st = *g_state_ptr;
  std::lock_guard<std::mutex> lock(st.mu);
  if (st.events.empty()) return nullptr;
  cudaEvent_t e = st.events.back();
  st.events.pop_back();
  return e;
}

void Checker::returnEvent(cudaEvent_t e) {
  State& st = *g_state_ptr;
  std::lock_guard<std::mutex> lock(st.mu);
  st.events.push_back(e);
}

void* Checker::scratch(size_t bytes) { return g_state_ptr->allocate(bytes, false); }

PendingCheck::~PendingCheck() { KernelRecorder::discard(kernels); }

void Checker::submit(std::unique_ptr<PendingCheck> check) {
  State& st = *g_state_ptr;
  auto shared = std::shared_ptr<PendingCheck>(std::move(check));
  auto run = [this, shared] {
    PendingCheck& pc = *shared;
    if (pc.discard || g_state_ptr->dropping) {
      api_.cudaEventSynchronize(pc.ready);  // the snapshot copies are done with the pool memory
      if (!pc.discard) pc.call->site().addStats(0, 1);
    } else if (api_.cudaEventSynchronize(pc.ready) == cudaSuccess) {
      try {
        // The call's kernels ran before the event: their records are complete.
        pc.origin.kernels = KernelRecorder::take(pc.kernels);
        pc.kernels = 0;
        engine()->runChecks(*pc.call, *pc.sampler, &pc.origin);
      } catch (const std::exception& e) {
        internalError(pc.call->info().op, e.what());
      } catch (...) {
        internalError(pc.call->info().op, "unknown exception");
      }
    } else {
      pc.call->site().addStats(0, 1);
    }
    pc.call.reset();  // its destructor may free checker-side resources
    for (void* b : pc.blocks) give(b);
    returnEvent(pc.ready);
  };
  if (!g_sync) {
    {
      std::lock_guard<std::mutex> lock(st.mu);
      st.work.emplace_back(std::move(run));
    }
    st.cv.notify_all();
    return;
  }
  runOnChecker(run);
}

void Checker::runOnChecker(const std::function<void()>& fn) {
  State& st = *g_state_ptr;
  bool done = false;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    st.work.emplace_front([&] {
      fn();
      std::lock_guard<std::mutex> l(st.mu);
      done = true;
    });
  }
  st.cv.notify_all();
  std::unique_lock<std::mutex> lock(st.mu);
  st.cv.wait(lock, [&] { return done; });
}

bool Checker::copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  return api_.cudaMemcpyAsync(dst, src, bytes, kind, stream_) == cudaSuccess &&
         api_.cudaStreamSynchronize(stream_) == cudaSuccess;
}

}  // namespace fumi::cuda
