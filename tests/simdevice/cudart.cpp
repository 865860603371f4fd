// cudart.cpp — the simulated device's stand-in for the CUDA runtime (libcudart.so.13).
//
// Test programs are linked against the real libcudart.so.13; preloading this library makes
// them bind to these definitions (same names, same signatures from <cuda_runtime_api.h>), so
// they run on machines without a GPU or driver. sim.h gives the overall contract; here:
//
// Emulated (faithfully enough that what passes here would pass on a GPU):
//  - memory: cudaMalloc returns tagged, non-dereferenceable device pointers (sim.h); a
//    registry of live allocations answers cudaPointerGetAttributes and rejects device
//    pointers outside any live allocation with cudaErrorInvalidValue. Pinned and managed
//    memory are plain host memory (registered as such). 80 GiB of device memory is pretended.
//  - streams: every stream (the legacy default stream and each thread's per-thread default
//    stream included) has its own worker thread running a FIFO of tasks, so work really is
//    asynchronous. Legacy-stream semantics are kept with enqueue/complete counters (fences):
//    legacy work waits for earlier work on all blocking streams and vice versa.
//  - synchronous cudaMemcpy/cudaMemset follow the runtime's host-synchronisation rules:
//    device-to-device copies and memsets of device memory return before completion (as on a
//    GPU), everything else returns after completion.
//  - events (timing with the host steady clock), cudaStreamWaitEvent, cudaLaunchHostFunc
//    (how the cuBLAS/cuBLASLt stand-ins run their "kernels").
//  - stream capture and graphs: captured work is appended to a graph instead of running;
//    graphs are instantiated and launched in capture order. The capture-mode rules for
//    "potentially unsafe" calls (Global/ThreadLocal/Relaxed), synchronising or querying
//    capturing work, implicit synchronisation with the legacy stream, and cross-capture
//    event dependencies are enforced: the offending call fails and invalidates the captures
//    concerned, and cudaFumiSimCaptureViolations() counts such calls.
//  - a profiling tool (sim_tool.h, test-only): the CUPTI stand-in installs itself with
//    cudaFumiSimSetTool, and the cuBLAS/cuBLASLt stand-ins launch their "kernels" with
//    cudaFumiSimLaunchKernel, which the tool sees as cudaLaunchKernel calls (API enter/exit on
//    the launching thread) and as kernels with start/end times (on the stream). Without a tool
//    it is cudaLaunchHostFunc. Launches captured into a graph get no kernel record.
//    cudaFumiSimGraphAddKernelNode appends such a kernel to a graph directly (cuDNN's
//    cudnnBackendPopulateCudaGraph).
//
// Not emulated: device code (cudaLaunchKernel and nvcc-generated launches fail with
// cudaErrorInvalidDeviceFunction; the fatbinary registration entry points are no-ops so
// nvcc-built host code loads), multiple devices, graph topology (captured work is linearised;
// forked capture streams are not checked for rejoining), stream-ordered allocation during
// capture (rejected as a capture violation), memory pools, arrays/textures, IPC, peer access,
// and everything else the real header declares but this file does not define.
//
// Robustness: no C++ exception leaves an extern "C" function; global state is a leaked
// singleton so worker threads never touch destroyed objects at process exit (pending work
// may be dropped then); worker threads are detached; after fork() the child gets fresh,
// lazily started queues (work pending in the parent is not run in the child).

#include <cuda_runtime_api.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "sim.h"
#include "sim_tool.h"

namespace {

using Task = std::function<void()>;
using Clock = std::chrono::steady_clock;

constexpr size_t kTotalDeviceMemory = size_t{80} << 30;
constexpr int kVersion = 13000;
constexpr size_t kAllocAlignment = 256;  // cudaMalloc guarantees at least 256-byte alignment
constexpr int kGreatestPriority = -5;    // cudaDeviceGetStreamPriorityRange on an H100
constexpr int kLeastPriority = 0;

// Bumped in a forked child: queues of an older generation have no worker there, so waiting
// on them would hang; they count as complete instead.
std::atomic<uint64_t> g_generation{0};

// ---------------------------------------------------------------------------------------
// Queue: one stream's FIFO of tasks and the worker thread running it.
// ---------------------------------------------------------------------------------------
struct Queue {
  std::mutex m;
  std::condition_variable cv;  // signalled on every enqueue and every completion
  std::deque<Task> tasks;
  uint64_t enqueued = 0;   // sequence number of the last task pushed (tasks are 1, 2, ...)
  uint64_t completed = 0;  // sequence number of the last task finished
  bool started = false;    // worker thread exists (started lazily: no threads at load time)
  bool stop = false;       // stream destroyed: worker exits once the queue is drained
  uint64_t generation = g_generation.load();
};
using QueuePtr = std::shared_ptr<Queue>;

// "Task `seq` of `q` must have completed": ordering between streams.
struct Fence {
  QueuePtr q;
  uint64_t seq;
};

bool stale(const Queue& q) { return q.generation != g_generation.load(); }

// The worker owns a reference to its queue, so a destroyed stream's work still drains.
void workerMain(QueuePtr q) {
  std::unique_lock<std::mutex> lk(q->m);
  for (;;) {
    q->cv.wait(lk, [&] { return !q->tasks.empty() || q->stop; });
    if (q->tasks.empty()) return;  // stopped and drained
    Task t = std::move(q->tasks.front());
    q->tasks.pop_front();
    lk.unlock();
    try {
      t();
    } catch (...) {
      // A throwing host function must not take the worker (and the process) down.
    }
    t = nullptr;  // release what the task captured before reporting completion
    lk.lock();
    ++q->completed;
    q->cv.notify_all();
  }
}

uint64_t push(const QueuePtr& q, Task t) {
  std::lock_guard<std::mutex> lk(q->m);
  if (!q->started) {
    std::thread(workerMain, q).detach();  // may throw: then nothing has changed
    q->started = true;
  }
  q->tasks.push_back(std::move(t));
  q->cv.notify_all();
  return ++q->enqueued;
}

void waitFor(const QueuePtr& q, uint64_t seq) {
  if (!q || seq == 0 || stale(*q)) return;
  std::unique_lock<std::mutex> lk(q->m);
  q->cv.wait(lk, [&] { return q->completed >= seq; });
}

bool reached(const QueuePtr& q, uint64_t seq) {
  if (!q || seq == 0 || stale(*q)) return true;
  std::lock_guard<std::mutex> lk(q->m);
  return q->completed >= seq;
}

// ---------------------------------------------------------------------------------------
// Streams, events, graphs, captures.
// ---------------------------------------------------------------------------------------
struct Capture;

struct Stream {
  unsigned flags = 0;
  int priority = 0;
  unsigned long long id = 0;
  bool legacy = false;
  bool perThread = false;
  QueuePtr q;
  std::shared_ptr<Capture> capture;  // set while the stream is part of a capture sequence
  // Blocking streams synchronise with the legacy stream (the per-thread stream is one).
  bool blocking() const { return !legacy && !(flags & cudaStreamNonBlocking); }
};
using StreamPtr = std::shared_ptr<Stream>;

// A graph node: work, or (cudaEventRecordExternal during capture) an event record, which
// must update the event when the graph is launched rather than when it was captured.
struct Node {
  Task fn;
  cudaEvent_t recordEvent = nullptr;
};
struct Graph {
  std::vector<Node> nodes;
};
struct GraphExec {
  std::vector<Node> nodes;
};

struct Capture {
  unsigned long long id = 0;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id owner;  // thread that began the capture
  bool invalidated = false;
  bool ended = false;
  Graph* graph = nullptr;
  std::vector<Stream*> members;  // origin stream first, then streams joined via events
};
using CapturePtr = std::shared_ptr<Capture>;

struct Stamp {
  std::atomic<bool> done{false};
  Clock::time_point time;
};

struct Event {
  unsigned flags = 0;
  QueuePtr q;       // queue of the latest record (null: never recorded)
  uint64_t seq = 0;
  std::shared_ptr<Stamp> stamp;
  CapturePtr capture;  // latest record was made in this capture sequence
  bool capturedNow() const { return capture && !capture->ended; }
};

struct Alloc {
  size_t size;
  cudaMemoryType type;
};

struct QueueRef {
  std::weak_ptr<Queue> q;
  bool blocking;
};

struct State {
  std::mutex mu;  // streams, events, graphs, captures, queue list; taken before allocMu
  StreamPtr legacy;
  std::unordered_map<Stream*, StreamPtr> streams;  // user and per-thread streams
  std::vector<QueueRef> queues;                    // every queue that may hold work
  std::unordered_set<Event*> events;
  std::unordered_set<Graph*> graphs;
  std::unordered_set<GraphExec*> execs;
  std::vector<CapturePtr> captures;  // not yet ended
  unsigned long long nextStreamId = 1;
  unsigned long long nextCaptureId = 1;

  std::mutex allocMu;
  std::map<uintptr_t, Alloc> allocs;  // keyed by host address
  size_t deviceBytes = 0;

  std::atomic<int> violations{0};
};

void forkPrepare();
void forkParent();
void forkChild();

// Leaked on purpose: detached workers and thread-exit handlers may run after static
// destructors would have destroyed it.
State& S() {
  static State* s = [] {
    auto* st = new State();
    pthread_atfork(forkPrepare, forkParent, forkChild);
    return st;
  }();
  return *s;
}

thread_local cudaError_t tl_lastError = cudaSuccess;
thread_local cudaStreamCaptureMode tl_captureMode = cudaStreamCaptureModeGlobal;

// Runs an API body: converts exceptions into error codes and keeps the thread's last error
// (cudaErrorNotReady is a status, not an error, as in the real runtime).
template <class F>
cudaError_t api(F&& body) noexcept {
  cudaError_t e;
  try {
    e = body();
  } catch (const std::bad_alloc&) {
    e = cudaErrorMemoryAllocation;
  } catch (...) {
    e = cudaErrorUnknown;
  }
  if (e != cudaSuccess && e != cudaErrorNotReady) tl_lastError = e;
  return e;
}

QueuePtr newQueueLocked(bool blocking) {
  State& st = S();
  auto q = std::make_shared<Queue>();
  st.queues.push_back({q, blocking});
  return q;
}

// The per-thread default stream lives as long as its thread.
struct PerThreadHolder {
  StreamPtr s;
  ~PerThreadHolder() {
    if (!s) return;
    try {
      State& st = S();
      std::lock_guard<std::mutex> lk(st.mu);
      st.streams.erase(s.get());
      std::lock_guard<std::mutex> qlk(s->q->m);
      s->q->stop = true;
      s->q->cv.notify_all();
    } catch (...) {
    }
  }
};
thread_local PerThreadHolder tl_perThread;

Stream* legacyLocked() {
  State& st = S();
  if (!st.legacy) {
    auto s = std::make_shared<Stream>();
    s->legacy = true;
    s->q = newQueueLocked(false);
    st.legacy = s;
  }
  return st.legacy.get();
}

Stream* perThreadLocked() {
  State& st = S();
  if (!tl_perThread.s) {
    auto s = std::make_shared<Stream>();
    s->perThread = true;
    s->id = st.nextStreamId++;
    s->q = newQueueLocked(true);
    st.streams.emplace(s.get(), s);
    tl_perThread.s = s;
  }
  return tl_perThread.s.get();
}

// nullptr: not a live stream handle.
Stream* resolveLocked(cudaStream_t h) {
  if (h == nullptr || h == cudaStreamLegacy) return legacyLocked();
  if (h == cudaStreamPerThread) return perThreadLocked();
  State& st = S();
  auto it = st.streams.find(reinterpret_cast<Stream*>(h));
  return it == st.streams.end() ? nullptr : it->second.get();
}

// A property of a live stream, read into *out (the cudaStreamGet* queries).
template <class T, class Get>
cudaError_t queryStream(cudaStream_t h, T* out, Get get) {
  return api([&] {
    if (!out) return cudaErrorInvalidValue;
    std::lock_guard<std::mutex> lk(S().mu);
    const Stream* s = resolveLocked(h);
    if (!s) return cudaErrorInvalidResourceHandle;
    *out = static_cast<T>(get(*s));
    return cudaSuccess;
  });
}

Event* findEventLocked(cudaEvent_t h) {
  auto* e = reinterpret_cast<Event*>(h);
  return S().events.count(e) ? e : nullptr;
}

// --- capture rules -----------------------------------------------------------------------

void invalidate(Capture& c) { c.invalidated = true; }

void countViolation() { S().violations.fetch_add(1); }

// A "potentially unsafe" call (allocation, synchronisation, synchronous copies) under the
// calling thread's capture mode: true (and the captures concerned invalidated) when it is
// prohibited. Per cudaThreadExchangeStreamCaptureMode: Global threads are restricted by their
// own non-relaxed captures and by Global captures of any thread; ThreadLocal threads only by
// their own non-relaxed captures; Relaxed threads never.
bool prohibitedLocked() {
  if (tl_captureMode == cudaStreamCaptureModeRelaxed) return false;
  const auto self = std::this_thread::get_id();
  bool hit = false;
  for (auto& c : S().captures) {
    const bool own = c->owner == self && c->mode != cudaStreamCaptureModeRelaxed;
    const bool global = tl_captureMode == cudaStreamCaptureModeGlobal &&
                        c->mode == cudaStreamCaptureModeGlobal;
    if (own || global) {
      invalidate(*c);
      hit = true;
    }
  }
  if (hit) countViolation();
  return hit;
}

// Work on the legacy stream would synchronise implicitly with capturing blocking streams.
bool implicitSyncViolationLocked() {
  bool hit = false;
  for (auto& c : S().captures) {
    for (Stream* m : c->members) {
      if (m->blocking()) {
        invalidate(*c);
        hit = true;
        break;
      }
    }
  }
  if (hit) countViolation();
  return hit;
}

bool legacyWouldSyncWithCaptureLocked() {
  for (auto& c : S().captures)
    for (Stream* m : c->members)
      if (m->blocking()) return true;
  return false;
}

// Synchronising/querying capturing work is always illegal and invalidates its capture.
cudaError_t captureMisuse(Capture& c) {
  invalidate(c);
  countViolation();
  return cudaErrorStreamCaptureUnsupported;
}

void endCaptureLocked(const CapturePtr& c) {
  State& st = S();
  for (Stream* m : c->members) m->capture.reset();
  c->members.clear();
  c->ended = true;
  for (auto it = st.captures.begin(); it != st.captures.end(); ++it) {
    if (*it == c) {
      st.captures.erase(it);
      break;
    }
  }
}

// --- enqueueing ----------------------------------------------------------------------------

// Enqueues `fn` on non-capturing stream `s` behind `fences` and the legacy-stream fences;
// returns its sequence number.
uint64_t enqueueLocked(Stream& s, Task fn, std::vector<Fence> fences = {}) {
  State& st = S();
  if (s.legacy) {
    // Legacy work waits for everything already enqueued on blocking streams.
    auto& qs = st.queues;
    for (size_t i = 0; i < qs.size();) {
      QueuePtr q = qs[i].q.lock();
      if (!q) {
        qs[i] = qs.back();
        qs.pop_back();
        continue;
      }
      if (qs[i].blocking && q != s.q && !stale(*q)) {
        std::lock_guard<std::mutex> lk(q->m);
        if (q->completed < q->enqueued) fences.push_back({q, q->enqueued});
      }
      ++i;
    }
  } else if (s.blocking() && st.legacy) {
    // Blocking-stream work waits for everything already enqueued on the legacy stream.
    const QueuePtr& lq = st.legacy->q;
    std::lock_guard<std::mutex> lk(lq->m);
    if (lq->completed < lq->enqueued) fences.push_back({lq, lq->enqueued});
  }
  if (!fences.empty()) {
    fn = [waits = std::move(fences), work = std::move(fn)] {
      for (const Fence& f : waits) waitFor(f.q, f.seq);
      work();
    };
  }
  return push(s.q, std::move(fn));
}

// Stream work goes through here: appended to the capture graph when the stream captures,
// otherwise enqueued. *seq gets the task's sequence number (0 when captured).
cudaError_t submitLocked(Stream& s, Task fn, uint64_t* seq = nullptr,
                         std::vector<Fence> fences = {}) {
  if (seq) *seq = 0;
  if (s.capture) {
    if (s.capture->invalidated) return cudaErrorStreamCaptureInvalidated;
    s.capture->graph->nodes.push_back({std::move(fn), nullptr});
    return cudaSuccess;
  }
  if (s.legacy && implicitSyncViolationLocked()) return cudaErrorStreamCaptureImplicit;
  const uint64_t n = enqueueLocked(s, std::move(fn), std::move(fences));
  if (seq) *seq = n;
  return cudaSuccess;
}

// Snapshot of every queue's pending work (taken under mu, waited for without it).
std::vector<Fence> allPendingLocked() {
  std::vector<Fence> out;
  for (auto& r : S().queues) {
    QueuePtr q = r.q.lock();
    if (!q || stale(*q)) continue;
    std::lock_guard<std::mutex> lk(q->m);
    if (q->completed < q->enqueued) out.push_back({q, q->enqueued});
  }
  return out;
}

void waitAll(const std::vector<Fence>& fences) {
  for (const Fence& f : fences) waitFor(f.q, f.seq);
}

void syncDevice() {
  std::vector<Fence> pending;
  {
    std::lock_guard<std::mutex> lk(S().mu);
    pending = allPendingLocked();
  }
  waitAll(pending);
}

cudaError_t recordLocked(Event& e, Stream& s, unsigned flags, cudaEvent_t handle) {
  if (s.capture) {
    Capture& c = *s.capture;
    if (c.invalidated) return cudaErrorStreamCaptureInvalidated;
    e.capture = s.capture;
    if (flags & cudaEventRecordExternal) c.graph->nodes.push_back({Task{}, handle});
    return cudaSuccess;
  }
  auto stamp = std::make_shared<Stamp>();
  uint64_t seq = 0;
  cudaError_t err = submitLocked(
      s,
      [stamp] {
        stamp->time = Clock::now();
        stamp->done.store(true, std::memory_order_release);
      },
      &seq);
  if (err != cudaSuccess) return err;
  e.q = s.q;
  e.seq = seq;
  e.stamp = std::move(stamp);
  e.capture.reset();
  return cudaSuccess;
}

// --- memory registry -----------------------------------------------------------------------

// The live allocation containing host range [h, h+n), of the device kind or not; null if none.
const Alloc* findAllocLocked(uintptr_t h, size_t n, bool device, uintptr_t* base = nullptr) {
  auto& allocs = S().allocs;
  auto it = allocs.upper_bound(h);
  if (it == allocs.begin()) return nullptr;
  --it;
  const Alloc& a = it->second;
  if ((a.type == cudaMemoryTypeDevice) != device) return nullptr;
  const uintptr_t off = h - it->first;
  if (off > a.size || n > a.size - off) return nullptr;
  if (n == 0 && off == a.size && a.size != 0) return nullptr;  // one past the end
  if (base) *base = it->first;
  return &a;
}

// A device pointer must lie (with n bytes) inside a live device allocation; host pointers
// are not checked (pageable memory is legal for copies).
bool validRange(const void* p, size_t n) {
  if (!sim::isDevicePointer(p)) return true;
  std::lock_guard<std::mutex> lk(S().allocMu);
  return findAllocLocked(reinterpret_cast<uintptr_t>(sim::hostAddress(p)), n, true) != nullptr;
}

// Memset targets: device memory, or registered (pinned/managed) host memory.
bool validMemsetTarget(const void* p, size_t n) {
  if (sim::isDevicePointer(p)) return validRange(p, n);
  std::lock_guard<std::mutex> lk(S().allocMu);
  return findAllocLocked(reinterpret_cast<uintptr_t>(p), n, false) != nullptr;
}

// Extent in bytes of a pitched 2D region.
size_t extent2D(size_t pitch, size_t width, size_t height) {
  return height == 0 ? 0 : pitch * (height - 1) + width;
}

cudaError_t allocate(void** out, size_t size, cudaMemoryType type) {
  if (!out) return cudaErrorInvalidValue;
  {
    std::lock_guard<std::mutex> lk(S().mu);
    if (prohibitedLocked()) return cudaErrorStreamCaptureUnsupported;
  }
  *out = nullptr;
  if (size == 0) return type == cudaMemoryTypeDevice ? cudaSuccess : cudaErrorInvalidValue;
  State& st = S();
  {
    std::lock_guard<std::mutex> lk(st.allocMu);
    if (type == cudaMemoryTypeDevice && size > kTotalDeviceMemory - st.deviceBytes)
      return cudaErrorMemoryAllocation;
  }
  void* h = nullptr;
  if (posix_memalign(&h, kAllocAlignment, size) != 0 || !h) return cudaErrorMemoryAllocation;
  {
    std::lock_guard<std::mutex> lk(st.allocMu);
    st.allocs[reinterpret_cast<uintptr_t>(h)] = Alloc{size, type};
    if (type == cudaMemoryTypeDevice) st.deviceBytes += size;
  }
  *out = type == cudaMemoryTypeDevice ? sim::deviceAddress(h) : h;
  return cudaSuccess;
}

// Unregisters the allocation starting exactly at p (as the caller sees it) if its kind is
// accepted; returns its host address or null.
void* unregister(const void* p, bool acceptDevice, bool acceptHost, bool acceptManaged) {
  State& st = S();
  std::lock_guard<std::mutex> lk(st.allocMu);
  auto it = st.allocs.find(reinterpret_cast<uintptr_t>(sim::hostAddress(p)));
  if (it == st.allocs.end()) return nullptr;
  const cudaMemoryType t = it->second.type;
  const bool tagged = sim::isDevicePointer(p);
  const bool ok = (t == cudaMemoryTypeDevice && tagged && acceptDevice) ||
                  (t == cudaMemoryTypeHost && !tagged && acceptHost) ||
                  (t == cudaMemoryTypeManaged && !tagged && acceptManaged);
  if (!ok) return nullptr;
  if (t == cudaMemoryTypeDevice) st.deviceBytes -= it->second.size;
  st.allocs.erase(it);
  return sim::hostAddress(p);
}

cudaError_t freeMemory(void* p, bool device) {
  if (!p) return cudaSuccess;
  {
    std::lock_guard<std::mutex> lk(S().mu);
    if (prohibitedLocked()) return cudaErrorStreamCaptureUnsupported;
  }
  void* h = device ? unregister(p, true, false, true) : unregister(p, false, true, false);
  if (!h) return cudaErrorInvalidValue;
  // cudaFree/cudaFreeHost synchronise the device: in-flight work may still use the memory.
  syncDevice();
  std::free(h);
  return cudaSuccess;
}

// --- copies --------------------------------------------------------------------------------

bool validKind(cudaMemcpyKind kind) {
  return kind >= cudaMemcpyHostToHost && kind <= cudaMemcpyDefault;
}

// The meter: bytes copied from device memory to host memory, printed at exit as
// "sim_bytes_to_host N" on stderr when FUMI_SIM_METER=1 (what a check moves off the device).
std::atomic<uint64_t> g_bytes_to_host{0};
struct Meter {
  ~Meter() {
    const char* on = std::getenv("FUMI_SIM_METER");
    if (on && std::strcmp(on, "1") == 0)
      std::fprintf(stderr, "sim_bytes_to_host %llu\n",
                   static_cast<unsigned long long>(g_bytes_to_host.load()));
  }
} g_meter;
void meter(void* dst, const void* src, size_t n) {
  if (sim::isDevicePointer(src) && !sim::isDevicePointer(dst)) g_bytes_to_host += n;
}

Task copyTask(void* dst, const void* src, size_t n) {
  meter(dst, src, n);
  return [d = sim::hostAddress(dst), s = sim::hostAddress(src), n] { std::memmove(d, s, n); };
}

Task copy2DTask(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                size_t height) {
  meter(dst, src, width * height);
  return [d = static_cast<char*>(sim::hostAddress(dst)), dpitch,
          s = static_cast<const char*>(sim::hostAddress(src)), spitch, width, height] {
    for (size_t r = 0; r < height; ++r) std::memmove(d + r * dpitch, s + r * spitch, width);
  };
}

Task setTask(void* p, int value, size_t n) {
  return [d = sim::hostAddress(p), value, n] { std::memset(d, value, n); };
}

Task set2DTask(void* p, size_t pitch, int value, size_t width, size_t height) {
  return [d = static_cast<char*>(sim::hostAddress(p)), pitch, value, width, height] {
    for (size_t r = 0; r < height; ++r) std::memset(d + r * pitch, value, width);
  };
}

cudaError_t checkCopy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  if (!validKind(kind)) return cudaErrorInvalidMemcpyDirection;
  if (n == 0) return cudaSuccess;
  if (!dst || !src) return cudaErrorInvalidValue;
  if (!validRange(dst, n) || !validRange(src, n)) return cudaErrorInvalidValue;
  return cudaSuccess;
}

cudaError_t checkCopy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                        size_t height, cudaMemcpyKind kind) {
  if (!validKind(kind)) return cudaErrorInvalidMemcpyDirection;
  if (width > dpitch || width > spitch) return cudaErrorInvalidPitchValue;
  if (width == 0 || height == 0) return cudaSuccess;
  if (!dst || !src) return cudaErrorInvalidValue;
  if (!validRange(dst, extent2D(dpitch, width, height)) ||
      !validRange(src, extent2D(spitch, width, height)))
    return cudaErrorInvalidValue;
  return cudaSuccess;
}

// Synchronous copy/memset: checked against capture rules, enqueued on the legacy stream, and
// waited for unless the runtime would return early (`async`).
cudaError_t runOnLegacy(Task work, bool async) {
  QueuePtr q;
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> lk(S().mu);
    if (prohibitedLocked()) return cudaErrorStreamCaptureUnsupported;
    Stream* s = legacyLocked();
    cudaError_t e = submitLocked(*s, std::move(work), &seq);
    if (e != cudaSuccess) return e;
    q = s->q;
  }
  if (!async) waitFor(q, seq);
  return cudaSuccess;
}

cudaError_t submitTo(cudaStream_t stream, Task work) {
  std::lock_guard<std::mutex> lk(S().mu);
  Stream* s = resolveLocked(stream);
  if (!s) return cudaErrorInvalidResourceHandle;
  return submitLocked(*s, std::move(work));
}

// --- error strings ---------------------------------------------------------------------------

#define FUMI_SIM_CUDA_ERRORS(X)                                                              \
  X(cudaSuccess) X(cudaErrorInvalidValue) X(cudaErrorMemoryAllocation)                       \
  X(cudaErrorInitializationError) X(cudaErrorCudartUnloading) X(cudaErrorProfilerDisabled)   \
  X(cudaErrorProfilerNotInitialized) X(cudaErrorProfilerAlreadyStarted)                      \
  X(cudaErrorProfilerAlreadyStopped) X(cudaErrorInvalidConfiguration)                        \
  X(cudaErrorInvalidPitchValue) X(cudaErrorInvalidSymbol) X(cudaErrorInvalidHostPointer)     \
  X(cudaErrorInvalidDevicePointer) X(cudaErrorInvalidTexture)                                \
  X(cudaErrorInvalidTextureBinding) X(cudaErrorInvalidChannelDescriptor)                     \
  X(cudaErrorInvalidMemcpyDirection) X(cudaErrorAddressOfConstant)                           \
  X(cudaErrorTextureFetchFailed) X(cudaErrorTextureNotBound)                                 \
  X(cudaErrorSynchronizationError) X(cudaErrorInvalidFilterSetting)                          \
  X(cudaErrorInvalidNormSetting) X(cudaErrorMixedDeviceExecution)                            \
  X(cudaErrorNotYetImplemented) X(cudaErrorMemoryValueTooLarge) X(cudaErrorStubLibrary)      \
  X(cudaErrorInsufficientDriver) X(cudaErrorCallRequiresNewerDriver)                         \
  X(cudaErrorInvalidSurface) X(cudaErrorDuplicateVariableName)                               \
  X(cudaErrorDuplicateTextureName) X(cudaErrorDuplicateSurfaceName)                          \
  X(cudaErrorDevicesUnavailable) X(cudaErrorIncompatibleDriverContext)                       \
  X(cudaErrorMissingConfiguration) X(cudaErrorPriorLaunchFailure)                            \
  X(cudaErrorLaunchMaxDepthExceeded) X(cudaErrorLaunchFileScopedTex)                         \
  X(cudaErrorLaunchFileScopedSurf) X(cudaErrorSyncDepthExceeded)                             \
  X(cudaErrorLaunchPendingCountExceeded) X(cudaErrorInvalidDeviceFunction)                   \
  X(cudaErrorNoDevice) X(cudaErrorInvalidDevice) X(cudaErrorDeviceNotLicensed)               \
  X(cudaErrorSoftwareValidityNotEstablished) X(cudaErrorStartupFailure)                      \
  X(cudaErrorInvalidKernelImage) X(cudaErrorDeviceUninitialized)                             \
  X(cudaErrorMapBufferObjectFailed) X(cudaErrorUnmapBufferObjectFailed)                      \
  X(cudaErrorArrayIsMapped) X(cudaErrorAlreadyMapped) X(cudaErrorNoKernelImageForDevice)     \
  X(cudaErrorAlreadyAcquired) X(cudaErrorNotMapped) X(cudaErrorNotMappedAsArray)             \
  X(cudaErrorNotMappedAsPointer) X(cudaErrorECCUncorrectable) X(cudaErrorUnsupportedLimit)   \
  X(cudaErrorDeviceAlreadyInUse) X(cudaErrorPeerAccessUnsupported) X(cudaErrorInvalidPtx)    \
  X(cudaErrorInvalidGraphicsContext) X(cudaErrorNvlinkUncorrectable)                         \
  X(cudaErrorJitCompilerNotFound) X(cudaErrorUnsupportedPtxVersion)                          \
  X(cudaErrorJitCompilationDisabled) X(cudaErrorUnsupportedExecAffinity)                     \
  X(cudaErrorUnsupportedDevSideSync) X(cudaErrorContained) X(cudaErrorInvalidSource)         \
  X(cudaErrorFileNotFound) X(cudaErrorSharedObjectSymbolNotFound)                            \
  X(cudaErrorSharedObjectInitFailed) X(cudaErrorOperatingSystem)                             \
  X(cudaErrorInvalidResourceHandle) X(cudaErrorIllegalState) X(cudaErrorLossyQuery)          \
  X(cudaErrorSymbolNotFound) X(cudaErrorNotReady) X(cudaErrorIllegalAddress)                 \
  X(cudaErrorLaunchOutOfResources) X(cudaErrorLaunchTimeout)                                 \
  X(cudaErrorLaunchIncompatibleTexturing) X(cudaErrorPeerAccessAlreadyEnabled)               \
  X(cudaErrorPeerAccessNotEnabled) X(cudaErrorSetOnActiveProcess)                            \
  X(cudaErrorContextIsDestroyed) X(cudaErrorAssert) X(cudaErrorTooManyPeers)                 \
  X(cudaErrorHostMemoryAlreadyRegistered) X(cudaErrorHostMemoryNotRegistered)                \
  X(cudaErrorHardwareStackError) X(cudaErrorIllegalInstruction)                              \
  X(cudaErrorMisalignedAddress) X(cudaErrorInvalidAddressSpace) X(cudaErrorInvalidPc)        \
  X(cudaErrorLaunchFailure) X(cudaErrorCooperativeLaunchTooLarge)                            \
  X(cudaErrorTensorMemoryLeak) X(cudaErrorNotPermitted) X(cudaErrorNotSupported)             \
  X(cudaErrorSystemNotReady) X(cudaErrorSystemDriverMismatch)                                \
  X(cudaErrorCompatNotSupportedOnDevice) X(cudaErrorMpsConnectionFailed)                     \
  X(cudaErrorMpsRpcFailure) X(cudaErrorMpsServerNotReady) X(cudaErrorMpsMaxClientsReached)   \
  X(cudaErrorMpsMaxConnectionsReached) X(cudaErrorMpsClientTerminated)                       \
  X(cudaErrorCdpNotSupported) X(cudaErrorCdpVersionMismatch)                                 \
  X(cudaErrorStreamCaptureUnsupported) X(cudaErrorStreamCaptureInvalidated)                  \
  X(cudaErrorStreamCaptureMerge) X(cudaErrorStreamCaptureUnmatched)                          \
  X(cudaErrorStreamCaptureUnjoined) X(cudaErrorStreamCaptureIsolation)                       \
  X(cudaErrorStreamCaptureImplicit) X(cudaErrorCapturedEvent)                                \
  X(cudaErrorStreamCaptureWrongThread) X(cudaErrorTimeout) X(cudaErrorGraphExecUpdateFailure) \
  X(cudaErrorExternalDevice) X(cudaErrorInvalidClusterSize) X(cudaErrorFunctionNotLoaded)    \
  X(cudaErrorInvalidResourceType) X(cudaErrorInvalidResourceConfiguration) X(cudaErrorUnknown)

const char* errorName(cudaError_t e) {
  switch (e) {
#define FUMI_SIM_CASE(name) \
  case name:                \
    return #name;
    FUMI_SIM_CUDA_ERRORS(FUMI_SIM_CASE)
#undef FUMI_SIM_CASE
    default:
      return nullptr;
  }
}

// Descriptions of the errors programs commonly report; other known codes describe themselves
// by name.
const char* errorDescription(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorCudartUnloading: return "driver shutting down";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidPitchValue: return "invalid pitch argument";
    case cudaErrorInvalidSymbol: return "invalid device symbol";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver:
      return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorInvalidDeviceFunction:
      return "invalid device function (the simulated device runs no device code)";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidKernelImage: return "device kernel image is invalid";
    case cudaErrorNoKernelImageForDevice: return "no kernel image is available for execution on the device";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorSymbolNotFound: return "named symbol not found";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotPermitted: return "operation not permitted";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureMerge: return "operation would result in a merge of separate capture sequences";
    case cudaErrorStreamCaptureUnmatched: return "capture was not ended in the same stream as it began";
    case cudaErrorStreamCaptureUnjoined: return "capturing stream has unjoined work";
    case cudaErrorStreamCaptureIsolation:
      return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorStreamCaptureWrongThread:
      return "attempt to terminate a thread-local capture sequence from another thread";
    case cudaErrorTimeout: return "wait operation timed out";
    case cudaErrorUnknown: return "unknown error";
    default: return errorName(e);
  }
}

// --- fork ----------------------------------------------------------------------------------

void forkPrepare() {
  State& st = S();
  st.mu.lock();
  st.allocMu.lock();
}

void forkParent() {
  State& st = S();
  st.allocMu.unlock();
  st.mu.unlock();
}

// The child has only the forking thread: every stream gets a fresh queue whose worker starts
// on first use; old queues become stale (their pending work is dropped in the child).
void forkChild() {
  State& st = S();
  g_generation.fetch_add(1);
  st.queues.clear();
  if (st.legacy) st.legacy->q = newQueueLocked(false);
  for (auto& kv : st.streams) kv.second->q = newQueueLocked(kv.second->blocking());
  st.allocMu.unlock();
  st.mu.unlock();
}

// --- device description --------------------------------------------------------------------

constexpr int kMajor = 9, kMinor = 0, kSMs = 132, kWarp = 32, kMaxThreadsPerBlock = 1024;
constexpr int kSharedPerBlock = 48 * 1024, kSharedPerBlockOptin = 227 * 1024;
constexpr int kSharedPerSM = 228 * 1024, kRegs = 65536, kL2 = 50 * 1024 * 1024;

void fillProperties(cudaDeviceProp& p) {
  std::memset(&p, 0, sizeof p);
  std::strncpy(p.name, "fumi simulated device", sizeof p.name - 1);
  for (int i = 0; i < 16; ++i) p.uuid.bytes[i] = static_cast<char>(0xf0 + i);
  p.totalGlobalMem = kTotalDeviceMemory;
  p.sharedMemPerBlock = kSharedPerBlock;
  p.regsPerBlock = kRegs;
  p.warpSize = kWarp;
  p.memPitch = 2147483647;
  p.maxThreadsPerBlock = kMaxThreadsPerBlock;
  p.maxThreadsDim[0] = 1024;
  p.maxThreadsDim[1] = 1024;
  p.maxThreadsDim[2] = 64;
  p.maxGridSize[0] = 2147483647;
  p.maxGridSize[1] = 65535;
  p.maxGridSize[2] = 65535;
  p.totalConstMem = 65536;
  p.major = kMajor;
  p.minor = kMinor;
  p.textureAlignment = 512;
  p.texturePitchAlignment = 32;
  p.multiProcessorCount = kSMs;
  p.canMapHostMemory = 1;
  p.concurrentKernels = 1;
  p.asyncEngineCount = 3;
  p.unifiedAddressing = 1;
  p.memoryBusWidth = 5120;
  p.l2CacheSize = kL2;
  p.maxThreadsPerMultiProcessor = 2048;
  p.streamPrioritiesSupported = 1;
  p.globalL1CacheSupported = 1;
  p.localL1CacheSupported = 1;
  p.sharedMemPerMultiprocessor = kSharedPerSM;
  p.regsPerMultiprocessor = kRegs;
  p.managedMemory = 1;
  p.concurrentManagedAccess = 1;
  p.computePreemptionSupported = 1;
  p.cooperativeLaunch = 1;
  p.sharedMemPerBlockOptin = kSharedPerBlockOptin;
  p.maxBlocksPerMultiProcessor = 32;
  p.reservedSharedMemPerBlock = 1024;
  p.memoryPoolsSupported = 1;
  p.clusterLaunch = 1;
  p.deviceNumaId = -1;
  p.hostNumaId = -1;
}

int attributeValue(cudaDeviceAttr attr) {
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: return kMaxThreadsPerBlock;
    case cudaDevAttrMaxBlockDimX: return 1024;
    case cudaDevAttrMaxBlockDimY: return 1024;
    case cudaDevAttrMaxBlockDimZ: return 64;
    case cudaDevAttrMaxGridDimX: return 2147483647;
    case cudaDevAttrMaxGridDimY: return 65535;
    case cudaDevAttrMaxGridDimZ: return 65535;
    case cudaDevAttrMaxSharedMemoryPerBlock: return kSharedPerBlock;
    case cudaDevAttrTotalConstantMemory: return 65536;
    case cudaDevAttrWarpSize: return kWarp;
    case cudaDevAttrMaxRegistersPerBlock: return kRegs;
    case cudaDevAttrClockRate: return 1980000;
    case cudaDevAttrMultiProcessorCount: return kSMs;
    case cudaDevAttrCanMapHostMemory: return 1;
    case cudaDevAttrConcurrentKernels: return 1;
    case cudaDevAttrMemoryClockRate: return 2619000;
    case cudaDevAttrGlobalMemoryBusWidth: return 5120;
    case cudaDevAttrL2CacheSize: return kL2;
    case cudaDevAttrMaxThreadsPerMultiProcessor: return 2048;
    case cudaDevAttrAsyncEngineCount: return 3;
    case cudaDevAttrUnifiedAddressing: return 1;
    case cudaDevAttrComputeCapabilityMajor: return kMajor;
    case cudaDevAttrComputeCapabilityMinor: return kMinor;
    case cudaDevAttrStreamPrioritiesSupported: return 1;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: return kSharedPerSM;
    case cudaDevAttrMaxRegistersPerMultiprocessor: return kRegs;
    case cudaDevAttrManagedMemory: return 1;
    case cudaDevAttrConcurrentManagedAccess: return 1;
    case cudaDevAttrCooperativeLaunch: return 1;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: return kSharedPerBlockOptin;
    case cudaDevAttrMaxBlocksPerMultiprocessor: return 32;
    case cudaDevAttrMemoryPoolsSupported: return 1;
    case cudaDevAttrClusterLaunch: return 1;
    default: return 0;  // unknown attributes read as "not supported"
  }
}

cudaError_t checkDevice(int device) {
  return device == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

void* g_fatbinHandle[8];  // what __cudaRegisterFatBinary hands out

std::atomic<const FumiSimTool*> g_tool{nullptr};  // sim_tool.h

}  // namespace

// Declarations of the entry points nvcc-generated host code uses (the headers declare them
// only for nvcc's own compilation).
extern "C" {
void** __cudaRegisterFatBinary(void* fatCubin);
void __cudaRegisterFatBinaryEnd(void** handle);
void __cudaUnregisterFatBinary(void** handle);
void __cudaRegisterFunction(void** handle, const char* hostFun, char* deviceFun,
                            const char* deviceName, int threadLimit, uint3* tid, uint3* bid,
                            dim3* bDim, dim3* gDim, int* wSize);
void __cudaRegisterVar(void** handle, char* hostVar, char* deviceAddress,
                       const char* deviceName, int ext, size_t size, int constant, int global);
void __cudaRegisterManagedVar(void** handle, void** hostVarPtrAddress, char* deviceAddress,
                              const char* deviceName, int ext, size_t size, int constant,
                              int global);
char __cudaInitModule(void** handle);
unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                     struct CUstream_st* stream);
cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim, size_t* sharedMem,
                                       void* stream);
cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* func);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args,
                               size_t sharedMem, cudaStream_t stream);
// Test-only extra (not a real runtime symbol; named cuda* so the version script exports it):
// how many calls broke the stream-capture rules (and so invalidated captures) so far.
int cudaFumiSimCaptureViolations(void);
}

extern "C" {

// =========================================================================================
// Errors, versions, device
// =========================================================================================

cudaError_t cudaGetLastError(void) {
  const cudaError_t e = tl_lastError;
  tl_lastError = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return tl_lastError; }

const char* cudaGetErrorName(cudaError_t error) {
  const char* n = errorName(error);
  return n ? n : "unrecognized error code";
}

const char* cudaGetErrorString(cudaError_t error) {
  const char* d = errorDescription(error);
  return d ? d : "unrecognized error code";
}

cudaError_t cudaDriverGetVersion(int* driverVersion) {
  return api([&] {
    if (!driverVersion) return cudaErrorInvalidValue;
    *driverVersion = kVersion;
    return cudaSuccess;
  });
}

cudaError_t cudaRuntimeGetVersion(int* runtimeVersion) {
  return api([&] {
    if (!runtimeVersion) return cudaErrorInvalidValue;
    *runtimeVersion = kVersion;
    return cudaSuccess;
  });
}

cudaError_t cudaGetDeviceCount(int* count) {
  return api([&] {
    if (!count) return cudaErrorInvalidValue;
    *count = 1;
    return cudaSuccess;
  });
}

cudaError_t cudaGetDevice(int* device) {
  return api([&] {
    if (!device) return cudaErrorInvalidValue;
    *device = 0;
    return cudaSuccess;
  });
}

cudaError_t cudaSetDevice(int device) { return api([&] { return checkDevice(device); }); }

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  return api([&] {
    if (!prop) return cudaErrorInvalidValue;
    if (checkDevice(device) != cudaSuccess) return cudaErrorInvalidDevice;
    fillProperties(*prop);
    return cudaSuccess;
  });
}

cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  return api([&] {
    if (!value) return cudaErrorInvalidValue;
    if (checkDevice(device) != cudaSuccess) return cudaErrorInvalidDevice;
    *value = attributeValue(attr);
    return cudaSuccess;
  });
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  return api([&] {
    if (leastPriority) *leastPriority = kLeastPriority;
    if (greatestPriority) *greatestPriority = kGreatestPriority;
    return cudaSuccess;
  });
}

cudaError_t cudaDeviceSynchronize(void) {
  return api([&] {
    std::vector<Fence> pending;
    {
      std::lock_guard<std::mutex> lk(S().mu);
      if (prohibitedLocked()) return cudaErrorStreamCaptureUnsupported;
      pending = allPendingLocked();
    }
    waitAll(pending);
    return cudaSuccess;
  });
}

// Waits for all work and releases every allocation (the real reset destroys the context).
// Streams, events and graphs stay valid here: programs that reset rarely reuse them.
cudaError_t cudaDeviceReset(void) {
  return api([&] {
    syncDevice();
    State& st = S();
    std::map<uintptr_t, Alloc> old;
    {
      std::lock_guard<std::mutex> lk(st.allocMu);
      old.swap(st.allocs);
      st.deviceBytes = 0;
    }
    for (auto& kv : old) std::free(reinterpret_cast<void*>(kv.first));
    return cudaSuccess;
  });
}

// =========================================================================================
// Memory
// =========================================================================================

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  return api([&] { return allocate(devPtr, size, cudaMemoryTypeDevice); });
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  return api([&] { return allocate(ptr, size, cudaMemoryTypeHost); });
}

cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int) {
  return api([&] { return allocate(pHost, size, cudaMemoryTypeHost); });
}

cudaError_t cudaMallocManaged(void** devPtr, size_t size, unsigned int) {
  return api([&] { return allocate(devPtr, size, cudaMemoryTypeManaged); });
}

cudaError_t cudaFree(void* devPtr) { return api([&] { return freeMemory(devPtr, true); }); }

cudaError_t cudaFreeHost(void* ptr) { return api([&] { return freeMemory(ptr, false); }); }

// Stream-ordered allocation: the memory exists at once (lenient), the free is ordered. Inside
// a capture the runtime would create allocation nodes; the simulator rejects that as a
// capture violation, since a checker must not allocate in the user's capture.
cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t hStream) {
  return api([&] {
    if (!devPtr) return cudaErrorInvalidValue;
    {
      std::lock_guard<std::mutex> lk(S().mu);
      Stream* s = resolveLocked(hStream);
      if (!s) return cudaErrorInvalidResourceHandle;
      if (s->capture) {
        if (s->capture->invalidated) return cudaErrorStreamCaptureInvalidated;
        return captureMisuse(*s->capture);
      }
      if (s->legacy && implicitSyncViolationLocked()) return cudaErrorStreamCaptureImplicit;
    }
    *devPtr = nullptr;
    if (size == 0) return cudaSuccess;
    State& st = S();
    {
      std::lock_guard<std::mutex> lk(st.allocMu);
      if (size > kTotalDeviceMemory - st.deviceBytes) return cudaErrorMemoryAllocation;
    }
    void* h = nullptr;
    if (posix_memalign(&h, kAllocAlignment, size) != 0 || !h) return cudaErrorMemoryAllocation;
    {
      std::lock_guard<std::mutex> lk(st.allocMu);
      st.allocs[reinterpret_cast<uintptr_t>(h)] = Alloc{size, cudaMemoryTypeDevice};
      st.deviceBytes += size;
    }
    *devPtr = sim::deviceAddress(h);
    return cudaSuccess;
  });
}

cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t hStream) {
  return api([&] {
    if (!devPtr) return cudaSuccess;
    std::lock_guard<std::mutex> lk(S().mu);
    Stream* s = resolveLocked(hStream);
    if (!s) return cudaErrorInvalidResourceHandle;
    if (s->capture) {
      if (s->capture->invalidated) return cudaErrorStreamCaptureInvalidated;
      return captureMisuse(*s->capture);
    }
    if (s->legacy && implicitSyncViolationLocked()) return cudaErrorStreamCaptureImplicit;
    // Invalid for new work at once; the memory itself goes when the stream gets there.
    void* h = unregister(devPtr, true, false, false);
    if (!h) return cudaErrorInvalidValue;
    enqueueLocked(*s, [h] { std::free(h); });
    return cudaSuccess;
  });
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  return api([&] {
    State& st = S();
    std::lock_guard<std::mutex> lk(st.allocMu);
    if (free) *free = kTotalDeviceMemory - st.deviceBytes;
    if (total) *total = kTotalDeviceMemory;
    return cudaSuccess;
  });
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* attributes, const void* ptr) {
  return api([&] {
    if (!attributes) return cudaErrorInvalidValue;
    std::memset(attributes, 0, sizeof *attributes);
    State& st = S();
    std::lock_guard<std::mutex> lk(st.allocMu);
    const auto h = reinterpret_cast<uintptr_t>(sim::hostAddress(ptr));
    if (sim::isDevicePointer(ptr)) {
      // A tagged pointer outside every live allocation is a bug (freed or out of bounds).
      if (!findAllocLocked(h, 0, true)) return cudaErrorInvalidValue;
      attributes->type = cudaMemoryTypeDevice;
      attributes->device = 0;
      attributes->devicePointer = const_cast<void*>(ptr);
      attributes->hostPointer = nullptr;
      return cudaSuccess;
    }
    const Alloc* a = ptr ? findAllocLocked(h, 0, false) : nullptr;
    if (!a) {
      attributes->type = cudaMemoryTypeUnregistered;
      attributes->device = -2;
      return cudaSuccess;
    }
    attributes->type = a->type;
    attributes->device = 0;
    attributes->devicePointer = const_cast<void*>(ptr);  // unified addressing: same address
    attributes->hostPointer = const_cast<void*>(ptr);
    return cudaSuccess;
  });
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  return api([&] {
    cudaError_t e = checkCopy(dst, src, count, kind);
    if (e != cudaSuccess || count == 0) return e;
    // Device-to-device copies do not synchronise the host (as documented for cudaMemcpy).
    const bool d2d = sim::isDevicePointer(dst) && sim::isDevicePointer(src);
    return runOnLegacy(copyTask(dst, src, count), d2d);
  });
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return api([&] {
    cudaError_t e = checkCopy(dst, src, count, kind);
    if (e != cudaSuccess || count == 0) return e;
    return submitTo(stream, copyTask(dst, src, count));
  });
}

cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                         size_t height, enum cudaMemcpyKind kind) {
  return api([&] {
    cudaError_t e = checkCopy2D(dst, dpitch, src, spitch, width, height, kind);
    if (e != cudaSuccess || width == 0 || height == 0) return e;
    const bool d2d = sim::isDevicePointer(dst) && sim::isDevicePointer(src);
    return runOnLegacy(copy2DTask(dst, dpitch, src, spitch, width, height), d2d);
  });
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind,
                              cudaStream_t stream) {
  return api([&] {
    cudaError_t e = checkCopy2D(dst, dpitch, src, spitch, width, height, kind);
    if (e != cudaSuccess || width == 0 || height == 0) return e;
    return submitTo(stream, copy2DTask(dst, dpitch, src, spitch, width, height));
  });
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  return api([&] {
    if (count == 0) return cudaSuccess;
    if (!devPtr || !validMemsetTarget(devPtr, count)) return cudaErrorInvalidValue;
    // Asynchronous to the host for device memory, synchronous for host-resident memory.
    return runOnLegacy(setTask(devPtr, value, count), sim::isDevicePointer(devPtr));
  });
}

cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  return api([&] {
    if (count == 0) return cudaSuccess;
    if (!devPtr || !validMemsetTarget(devPtr, count)) return cudaErrorInvalidValue;
    return submitTo(stream, setTask(devPtr, value, count));
  });
}

cudaError_t cudaMemset2D(void* devPtr, size_t pitch, int value, size_t width, size_t height) {
  return api([&] {
    if (width > pitch) return cudaErrorInvalidPitchValue;
    if (width == 0 || height == 0) return cudaSuccess;
    if (!devPtr || !validMemsetTarget(devPtr, extent2D(pitch, width, height)))
      return cudaErrorInvalidValue;
    return runOnLegacy(set2DTask(devPtr, pitch, value, width, height),
                       sim::isDevicePointer(devPtr));
  });
}

cudaError_t cudaMemset2DAsync(void* devPtr, size_t pitch, int value, size_t width, size_t height,
                              cudaStream_t stream) {
  return api([&] {
    if (width > pitch) return cudaErrorInvalidPitchValue;
    if (width == 0 || height == 0) return cudaSuccess;
    if (!devPtr || !validMemsetTarget(devPtr, extent2D(pitch, width, height)))
      return cudaErrorInvalidValue;
    return submitTo(stream, set2DTask(devPtr, pitch, value, width, height));
  });
}

// =========================================================================================
// Streams
// =========================================================================================

// Shared by the cudaStreamCreate* entry points. (Entry points never call each other: an
// interposer preloaded ahead of this library would see the inner calls.)
static cudaError_t createStream(cudaStream_t* pStream, unsigned int flags, int priority) {
  return api([&] {
    if (!pStream || (flags & ~unsigned{cudaStreamNonBlocking})) return cudaErrorInvalidValue;
    State& st = S();
    std::lock_guard<std::mutex> lk(st.mu);
    auto s = std::make_shared<Stream>();
    s->flags = flags;
    // The runtime clamps priorities into the supported range.
    s->priority = priority > kLeastPriority      ? kLeastPriority
                  : priority < kGreatestPriority ? kGreatestPriority
                                                 : priority;
    s->id = st.nextStreamId++;
    s->q = newQueueLocked(s->blocking());
    st.streams.emplace(s.get(), s);
    *pStream = reinterpret_cast<cudaStream_t>(s.get());
    return cudaSuccess;
  });
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags,
                                         int priority) {
  return createStream(pStream, flags, priority);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  return createStream(pStream, flags, 0);
}

cudaError_t cudaStreamCreate(cudaStream_t* pStream) {
  return createStream(pStream, cudaStreamDefault, 0);
}

// Returns at once; work already enqueued still runs (the worker drains, then exits).
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  return api([&] {
    State& st = S();
    std::lock_guard<std::mutex> lk(st.mu);
    auto it = st.streams.find(reinterpret_cast<Stream*>(stream));
    if (it == st.streams.end() || it->second->perThread) return cudaErrorInvalidResourceHandle;
    StreamPtr s = it->second;
    if (CapturePtr c = s->capture) {
      // Destroying a capturing stream breaks its capture sequence.
      invalidate(*c);
      if (!c->members.empty() && c->members.front() == s.get()) {
        st.graphs.erase(c->graph);
        delete c->graph;
        c->graph = nullptr;
        endCaptureLocked(c);
      } else {
        auto& m = c->members;
        for (auto mi = m.begin(); mi != m.end(); ++mi) {
          if (*mi == s.get()) {
            m.erase(mi);
            break;
          }
        }
        s->capture.reset();
      }
    }
    st.streams.erase(it);
    std::lock_guard<std::mutex> qlk(s->q->m);
    s->q->stop = true;
    s->q->cv.notify_all();
    return cudaSuccess;
  });
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return api([&] {
    QueuePtr q;
    uint64_t seq = 0;
    {
      std::lock_guard<std::mutex> lk(S().mu);
      Stream* s = resolveLocked(stream);
      if (!s) return cudaErrorInvalidResourceHandle;
      if (s->capture) return captureMisuse(*s->capture);
      if (prohibitedLocked()) return cudaErrorStreamCaptureUnsupported;
      q = s->q;
      std::lock_guard<std::mutex> qlk(q->m);
      seq = q->enqueued;
    }
    waitFor(q, seq);
    return cudaSuccess;
  });
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  return api([&] {
    std::lock_guard<std::mutex> lk(S().mu);
    Stream* s = resolveLocked(stream);
    if (!s) return cudaErrorInvalidResourceHandle;
    if (s->capture) return captureMisuse(*s->capture);
    if (stale(*s->q)) return cudaSuccess;
    std::lock_guard<std::mutex> qlk(s->q->m);
    return s->q->completed >= s->q->enqueued ? cudaSuccess : cudaErrorNotReady;
  });
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  return api([&] {
    if (flags & ~1u) return cudaErrorInvalidValue;  // cudaEventWaitDefault / External
    std::lock_guard<std::mutex> lk(S().mu);
    Stream* s = resolveLocked(stream);
    if (!s) return cudaErrorInvalidResourceHandle;
    Event* e = findEventLocked(event);
    if (!e) return cudaErrorInvalidResourceHandle;
    if (e->capturedNow()) {
      // Waiting on an event recorded in a capture: the waiting stream joins that capture.
      CapturePtr c = e->capture;
      if (c->invalidated) return cudaErrorStreamCaptureInvalidated;
      if (s->capture == c) return cudaSuccess;  // captured work is linearised already
      if (s->capture) {
        invalidate(*s->capture);
        invalidate(*c);
        countViolation();
        return cudaErrorStreamCaptureMerge;
      }
      if (s->legacy) {
        invalidate(*c);
        countViolation();
        return cudaErrorStreamCaptureImplicit;
      }
      s->capture = c;
      c->members.push_back(s);
      return cudaSuccess;
    }
    if (s->capture) {
      if (s->capture->invalidated) return cudaErrorStreamCaptureInvalidated;
      if (!e->q) return cudaSuccess;  // never recorded: no dependency
      // A dependency on uncaptured work would cross the capture boundary.
      invalidate(*s->capture);
      countViolation();
      return cudaErrorStreamCaptureIsolation;
    }
    if (!e->q) return cudaSuccess;
    return submitLocked(*s, [] {}, nullptr, {Fence{e->q, e->seq}});
  });
}

cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int* flags) {
  return queryStream(hStream, flags, [](const Stream& s) { return s.flags; });
}

cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int* priority) {
  return queryStream(hStream, priority, [](const Stream& s) { return s.priority; });
}

cudaError_t cudaStreamGetId(cudaStream_t hStream, unsigned long long* streamId) {
  return queryStream(hStream, streamId, [](const Stream& s) { return s.id; });
}

cudaError_t cudaStreamGetDevice(cudaStream_t hStream, int* device) {
  return queryStream(hStream, device, [](const Stream&) { return 0; });
}

// Host functions run on the stream's worker, in stream order. They must not call CUDA
// functions that wait for streams (as on the real runtime).
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  return api([&] {
    if (!fn) return cudaErrorInvalidValue;
    return submitTo(stream, [fn, userData] { fn(userData); });
  });
}

cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback,
                                  void* userData, unsigned int flags) {
  return api([&] {
    if (!callback || flags != 0) return cudaErrorInvalidValue;
    return submitTo(stream, [stream, callback, userData] {
      callback(stream, cudaSuccess, userData);
    });
  });
}

// Kernels cannot run on the simulated device: it has no device code.
cudaError_t cudaLaunchKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t) {
  return api([] { return cudaErrorInvalidDeviceFunction; });
}

void cudaFumiSimSetTool(const FumiSimTool* tool) { g_tool.store(tool, std::memory_order_release); }

cudaError_t cudaFumiSimLaunchKernel(cudaStream_t stream, const char* kernel, cudaHostFn_t fn,
                                    void* userData) {
  const FumiSimTool* tool = g_tool.load(std::memory_order_acquire);
  if (!tool) return cudaLaunchHostFunc(stream, fn, userData);
  FumiSimLaunch launch{kernel, reinterpret_cast<const void*>(fn), stream, 0, 0, cudaSuccess};
  tool->launchEnter(&launch);
  launch.result = api([&] {
    if (!fn) return cudaErrorInvalidValue;
    unsigned long long streamId = 0;
    bool capturing = false;
    {
      std::lock_guard<std::mutex> lk(S().mu);
      Stream* s = resolveLocked(stream);
      if (!s) return cudaErrorInvalidResourceHandle;
      streamId = s->id;
      capturing = s->capture != nullptr;
    }
    // The record is handed out at most once: a capture starting between the check above and
    // the submission below puts the task into a graph, which may replay it.
    auto record = std::make_shared<std::atomic<void*>>(nullptr);
    Task task = [tool, record, fn, userData] {
      const uint64_t start = record->load() ? tool->timestamp() : 0;
      fn(userData);
      if (void* r = record->exchange(nullptr)) tool->kernelDone(r, 1, start, tool->timestamp());
    };
    if (!capturing) record->store(tool->kernelRecord(&launch, streamId));
    // Not enqueued (failed, threw, or captured): the record ends as "never ran".
    struct Cancel {
      const FumiSimTool* tool;
      std::atomic<void*>* record;
      bool enqueued = false;
      ~Cancel() {
        if (!enqueued)
          if (void* r = record->exchange(nullptr)) tool->kernelDone(r, 0, 0, 0);
      }
    } cancel{tool, record.get()};
    uint64_t seq = 0;
    std::lock_guard<std::mutex> lk(S().mu);
    Stream* s = resolveLocked(stream);
    const cudaError_t e = s ? submitLocked(*s, std::move(task), &seq)
                            : cudaErrorInvalidResourceHandle;
    cancel.enqueued = e == cudaSuccess && seq != 0;
    return e;
  });
  tool->launchExit(&launch);
  return launch.result;
}

// =========================================================================================
// Events
// =========================================================================================

static cudaError_t createEvent(cudaEvent_t* event, unsigned int flags) {
  return api([&] {
    constexpr unsigned kKnown = cudaEventBlockingSync | cudaEventDisableTiming |
                                cudaEventInterprocess;
    if (!event || (flags & ~kKnown)) return cudaErrorInvalidValue;
    if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming))
      return cudaErrorInvalidValue;
    auto e = std::make_unique<Event>();
    e->flags = flags;
    std::lock_guard<std::mutex> lk(S().mu);
    S().events.insert(e.get());
    *event = reinterpret_cast<cudaEvent_t>(e.release());
    return cudaSuccess;
  });
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  return createEvent(event, flags);
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return createEvent(event, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  return api([&] {
    std::lock_guard<std::mutex> lk(S().mu);
    Event* e = findEventLocked(event);
    if (!e) return cudaErrorInvalidResourceHandle;
    S().events.erase(e);
    delete e;  // pending record tasks hold the stamp, not the event
    return cudaSuccess;
  });
}

static cudaError_t recordEvent(cudaEvent_t event, cudaStream_t stream, unsigned int flags) {
  return api([&] {
    if (flags & ~unsigned{cudaEventRecordExternal}) return cudaErrorInvalidValue;
    std::lock_guard<std::mutex> lk(S().mu);
    Event* e = findEventLocked(event);
    if (!e) return cudaErrorInvalidResourceHandle;
    Stream* s = resolveLocked(stream);
    if (!s) return cudaErrorInvalidResourceHandle;
    return recordLocked(*e, *s, flags, event);
  });
}

cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags) {
  return recordEvent(event, stream, flags);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return recordEvent(event, stream, cudaEventRecordDefault);
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  return api([&] {
    std::lock_guard<std::mutex> lk(S().mu);
    Event* e = findEventLocked(event);
    if (!e) return cudaErrorInvalidResourceHandle;
    if (e->capturedNow()) return captureMisuse(*e->capture);
    return reached(e->q, e->seq) ? cudaSuccess : cudaErrorNotReady;
  });
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return api([&] {
    QueuePtr q;
    uint64_t seq = 0;
    {
      std::lock_guard<std::mutex> lk(S().mu);
      Event* e = findEventLocked(event);
      if (!e) return cudaErrorInvalidResourceHandle;
      if (e->capturedNow()) return captureMisuse(*e->capture);
      if (prohibitedLocked()) return cudaErrorStreamCaptureUnsupported;
      q = e->q;
      seq = e->seq;
    }
    waitFor(q, seq);
    return cudaSuccess;
  });
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  return api([&] {
    if (!ms) return cudaErrorInvalidValue;
    std::lock_guard<std::mutex> lk(S().mu);
    Event* a = findEventLocked(start);
    Event* b = findEventLocked(end);
    if (!a || !b) return cudaErrorInvalidResourceHandle;
    if ((a->flags | b->flags) & cudaEventDisableTiming) return cudaErrorInvalidResourceHandle;
    if (!a->stamp || !b->stamp) return cudaErrorInvalidResourceHandle;  // never recorded
    if (!a->stamp->done.load(std::memory_order_acquire) ||
        !b->stamp->done.load(std::memory_order_acquire))
      return cudaErrorNotReady;
    *ms = std::chrono::duration<float, std::milli>(b->stamp->time - a->stamp->time).count();
    return cudaSuccess;
  });
}

// =========================================================================================
// Stream capture and graphs
// =========================================================================================

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  return api([&] {
    if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
        mode != cudaStreamCaptureModeRelaxed)
      return cudaErrorInvalidValue;
    State& st = S();
    std::lock_guard<std::mutex> lk(st.mu);
    Stream* s = resolveLocked(stream);
    if (!s) return cudaErrorInvalidResourceHandle;
    if (s->legacy) return cudaErrorStreamCaptureUnsupported;
    if (s->capture) return cudaErrorIllegalState;
    auto c = std::make_shared<Capture>();
    c->id = st.nextCaptureId++;
    c->mode = mode;
    c->owner = std::this_thread::get_id();
    c->graph = new Graph();
    st.graphs.insert(c->graph);
    c->members.push_back(s);
    s->capture = c;
    st.captures.push_back(std::move(c));
    return cudaSuccess;
  });
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph) {
  return api([&] {
    if (!pGraph) return cudaErrorInvalidValue;
    State& st = S();
    std::lock_guard<std::mutex> lk(st.mu);
    Stream* s = resolveLocked(stream);
    if (!s) return cudaErrorInvalidResourceHandle;
    CapturePtr c = s->capture;
    if (!c) return cudaErrorIllegalState;
    if (c->members.front() != s) return cudaErrorStreamCaptureUnmatched;
    if (c->mode != cudaStreamCaptureModeRelaxed && c->owner != std::this_thread::get_id())
      return cudaErrorStreamCaptureWrongThread;
    endCaptureLocked(c);
    if (c->invalidated) {
      st.graphs.erase(c->graph);
      delete c->graph;
      c->graph = nullptr;
      *pGraph = nullptr;
      return cudaErrorStreamCaptureInvalidated;
    }
    *pGraph = reinterpret_cast<cudaGraph_t>(c->graph);
    return cudaSuccess;
  });
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream,
                                  enum cudaStreamCaptureStatus* pCaptureStatus) {
  return api([&] {
    if (!pCaptureStatus) return cudaErrorInvalidValue;
    std::lock_guard<std::mutex> lk(S().mu);
    Stream* s = resolveLocked(stream);
    if (!s) return cudaErrorInvalidResourceHandle;
    if (s->legacy && legacyWouldSyncWithCaptureLocked()) return cudaErrorStreamCaptureImplicit;
    *pCaptureStatus = !s->capture               ? cudaStreamCaptureStatusNone
                      : s->capture->invalidated ? cudaStreamCaptureStatusInvalidated
                                                : cudaStreamCaptureStatusActive;
    return cudaSuccess;
  });
}

// Dependencies are not tracked (captured work is linearised): none are reported.
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream,
                                     enum cudaStreamCaptureStatus* captureStatus_out,
                                     unsigned long long* id_out, cudaGraph_t* graph_out,
                                     const cudaGraphNode_t** dependencies_out,
                                     const cudaGraphEdgeData** edgeData_out,
                                     size_t* numDependencies_out) {
  return api([&] {
    if (!captureStatus_out) return cudaErrorInvalidValue;
    std::lock_guard<std::mutex> lk(S().mu);
    Stream* s = resolveLocked(stream);
    if (!s) return cudaErrorInvalidResourceHandle;
    if (s->legacy && legacyWouldSyncWithCaptureLocked()) return cudaErrorStreamCaptureImplicit;
    const Capture* c = s->capture.get();
    *captureStatus_out = !c                ? cudaStreamCaptureStatusNone
                         : c->invalidated ? cudaStreamCaptureStatusInvalidated
                                          : cudaStreamCaptureStatusActive;
    if (id_out) *id_out = c ? c->id : 0;
    if (graph_out) *graph_out = c ? reinterpret_cast<cudaGraph_t>(c->graph) : nullptr;
    if (dependencies_out) *dependencies_out = nullptr;
    if (edgeData_out) *edgeData_out = nullptr;
    if (numDependencies_out) *numDependencies_out = 0;
    return cudaSuccess;
  });
}

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode* mode) {
  return api([&] {
    if (!mode) return cudaErrorInvalidValue;
    if (*mode != cudaStreamCaptureModeGlobal && *mode != cudaStreamCaptureModeThreadLocal &&
        *mode != cudaStreamCaptureModeRelaxed)
      return cudaErrorInvalidValue;
    std::swap(*mode, tl_captureMode);
    return cudaSuccess;
  });
}

cudaError_t cudaGraphCreate(cudaGraph_t* pGraph, unsigned int flags) {
  return api([&] {
    if (!pGraph || flags != 0) return cudaErrorInvalidValue;
    auto g = std::make_unique<Graph>();
    std::lock_guard<std::mutex> lk(S().mu);
    S().graphs.insert(g.get());
    *pGraph = reinterpret_cast<cudaGraph_t>(g.release());
    return cudaSuccess;
  });
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  return api([&] {
    State& st = S();
    std::lock_guard<std::mutex> lk(st.mu);
    auto* g = reinterpret_cast<Graph*>(graph);
    if (!st.graphs.count(g)) return cudaErrorInvalidValue;
    for (auto& c : st.captures)
      if (c->graph == g) return cudaErrorIllegalState;  // still being captured into
    st.graphs.erase(g);
    delete g;
    return cudaSuccess;
  });
}

cudaError_t cudaFumiSimGraphAddKernelNode(cudaGraph_t graph, const char* kernel,
                                          cudaHostFn_t fn, void* userData) {
  (void)kernel;  // graph-launched kernels get no kernel record (sim_tool.h)
  return api([&] {
    if (!fn) return cudaErrorInvalidValue;
    State& st = S();
    std::lock_guard<std::mutex> lk(st.mu);
    auto* g = reinterpret_cast<Graph*>(graph);
    if (!st.graphs.count(g)) return cudaErrorInvalidValue;
    for (auto& c : st.captures)
      if (c->graph == g) return cudaErrorIllegalState;
    g->nodes.push_back({[fn, userData] { fn(userData); }, nullptr});
    return cudaSuccess;
  });
}

// Count only is meaningful; node handles are opaque and usable for nothing else.
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* numNodes) {
  return api([&] {
    if (!numNodes) return cudaErrorInvalidValue;
    State& st = S();
    std::lock_guard<std::mutex> lk(st.mu);
    auto* g = reinterpret_cast<Graph*>(graph);
    if (!st.graphs.count(g)) return cudaErrorInvalidValue;
    const size_t n = g->nodes.size();
    if (nodes) {
      for (size_t i = 0; i < *numNodes; ++i)
        nodes[i] = i < n ? reinterpret_cast<cudaGraphNode_t>(&g->nodes[i]) : nullptr;
      if (n < *numNodes) *numNodes = n;
    } else {
      *numNodes = n;
    }
    return cudaSuccess;
  });
}

static cudaError_t instantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph) {
  return api([&] {
    if (!pGraphExec) return cudaErrorInvalidValue;
    State& st = S();
    std::lock_guard<std::mutex> lk(st.mu);
    auto* g = reinterpret_cast<Graph*>(graph);
    if (!st.graphs.count(g)) return cudaErrorInvalidValue;
    auto x = std::make_unique<GraphExec>();
    x->nodes = g->nodes;
    st.execs.insert(x.get());
    *pGraphExec = reinterpret_cast<cudaGraphExec_t>(x.release());
    return cudaSuccess;
  });
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                 unsigned long long) {
  return instantiate(pGraphExec, graph);
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                          unsigned long long) {
  return instantiate(pGraphExec, graph);
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  return api([&] {
    State& st = S();
    std::lock_guard<std::mutex> lk(st.mu);
    auto* x = reinterpret_cast<GraphExec*>(graphExec);
    if (!st.execs.count(x)) return cudaErrorInvalidValue;
    st.execs.erase(x);
    delete x;  // launched work holds copies of the tasks
    return cudaSuccess;
  });
}

// Enqueues the graph's work on `stream` in capture order (launching into a capturing stream
// appends it to that capture, like a child-graph node).
cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  return api([&] {
    State& st = S();
    std::lock_guard<std::mutex> lk(st.mu);
    auto* x = reinterpret_cast<GraphExec*>(graphExec);
    if (!st.execs.count(x)) return cudaErrorInvalidValue;
    Stream* s = resolveLocked(stream);
    if (!s) return cudaErrorInvalidResourceHandle;
    if (s->capture) {
      if (s->capture->invalidated) return cudaErrorStreamCaptureInvalidated;
      auto& dst = s->capture->graph->nodes;
      dst.insert(dst.end(), x->nodes.begin(), x->nodes.end());
      return cudaSuccess;
    }
    if (s->legacy && implicitSyncViolationLocked()) return cudaErrorStreamCaptureImplicit;
    for (const Node& n : x->nodes) {
      cudaError_t e = cudaSuccess;
      if (n.recordEvent) {
        if (Event* ev = findEventLocked(n.recordEvent)) e = recordLocked(*ev, *s, 0, n.recordEvent);
      } else {
        e = submitLocked(*s, n.fn);
      }
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  });
}

int cudaFumiSimCaptureViolations(void) { return S().violations.load(); }

// =========================================================================================
// nvcc-generated host code: registration is accepted, launches fail (no device code here).
// =========================================================================================

void** __cudaRegisterFatBinary(void*) {
  return g_fatbinHandle;
}
void __cudaRegisterFatBinaryEnd(void**) {}
void __cudaUnregisterFatBinary(void**) {}
void __cudaRegisterFunction(void**, const char*, char*, const char*, int, uint3*, uint3*, dim3*,
                            dim3*, int*) {}
void __cudaRegisterVar(void**, char*, char*, const char*, int, size_t, int, int) {}
void __cudaRegisterManagedVar(void**, void**, char*, const char*, int, size_t, int, int) {}
char __cudaInitModule(void**) { return 0; }

unsigned __cudaPushCallConfiguration(dim3, dim3, size_t, struct CUstream_st*) { return 0; }

cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim, size_t* sharedMem,
                                       void* stream) {
  if (gridDim) *gridDim = dim3();
  if (blockDim) *blockDim = dim3();
  if (sharedMem) *sharedMem = 0;
  if (stream) *static_cast<cudaStream_t*>(stream) = nullptr;
  return cudaSuccess;
}

cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* func) {
  if (kernel) *kernel = reinterpret_cast<cudaKernel_t>(const_cast<void*>(func));
  return cudaSuccess;
}

cudaError_t __cudaLaunchKernel(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t) {
  return api([] { return cudaErrorInvalidDeviceFunction; });
}

}  // extern "C"
