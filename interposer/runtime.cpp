// runtime.cpp — lazy initialisation, fork handling, shutdown summary, internal-error policy.
#include "runtime.h"

#include <dlfcn.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <thread>

#include <spdlog/spdlog.h>

#include "contract.h"
#include "engine.h"
#include "loss_scaling.h"
#include "nan_search.h"
#include "plugin_loader.h"
#include "policy.h"
#include "report.h"
#include "resolve.h"
#include "settings.h"
#include "site.h"

namespace fumi {

std::atomic<int> g_state{kUninit};
__thread bool t_inside_fumi __attribute__((tls_model("initial-exec"))) = false;
std::atomic<int> g_reruns{0};

// omp_in_parallel of the OpenMP runtime the process loaded (libgomp with torch), looked up once;
// none loaded: no parallel region.
bool insideParallelRegion() {
  using Fn = int (*)();
  static const Fn in_parallel = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "omp_in_parallel"));
  return in_parallel && in_parallel() != 0;
}
__thread int t_deferred_signal __attribute__((tls_model("initial-exec"))) = 0;
__thread int t_signals_prompt __attribute__((tls_model("initial-exec"))) = 0;

namespace {
__thread siginfo_t t_deferred_info __attribute__((tls_model("initial-exec")));

int g_wake_fd = -1;  // the snapshot thread's eventfd: a signal handler's request

// A deferred signal waits for its thread to leave fumi at most kDeferGrace seconds: then the
// snapshot thread sends it to the thread again, handled at once (signalsOverdue) — a thread
// stuck inside fumi (batch 19: a rerun deadlocked on torch's generator lock) had made the job
// deaf to SIGTERM and SIGINT. One deferral is watched at a time (the first), which is enough:
// once one is overdue, every later signal is handled at once.
constexpr int64_t kDeferGraceNs = int64_t{5} * 1000 * 1000 * 1000;
std::atomic<int> g_deferred_sig{0};  // the watched one; -1 while deferSignal fills the rest
std::atomic<pid_t> g_deferred_tid{0};
std::atomic<int64_t> g_deferred_at_ns{0};
std::atomic<bool> g_signals_overdue{false};

int64_t monotonicNs() {  // async-signal-safe
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}
}  // namespace

bool signalsOverdue() { return g_signals_overdue.load(std::memory_order_relaxed); }

void deferSignal(int signal, const siginfo_t* info) {
  if (info) t_deferred_info = *info;
  else t_deferred_info = siginfo_t{};
  t_deferred_info.si_signo = signal;
  t_deferred_signal = signal;
  int none = 0;
  if (g_wake_fd >= 0 && g_deferred_sig.compare_exchange_strong(none, -1)) {
    g_deferred_tid.store(static_cast<pid_t>(::syscall(SYS_gettid)));
    g_deferred_at_ns.store(monotonicNs());
    g_deferred_sig.store(signal);
    const uint64_t one = 1;  // the snapshot thread starts watching the grace period
    if (::write(g_wake_fd, &one, sizeof one) < 0) {
    }
  }
}

void redeliverSignal() {
  const int sig = t_deferred_signal;
  const int saved_errno = errno;  // the hook's real call may have set it for the program
  t_deferred_signal = 0;
  if (g_deferred_sig.load() > 0 &&
      g_deferred_tid.load() == static_cast<pid_t>(::syscall(SYS_gettid)))
    g_deferred_sig.store(0);
  // To this thread, as it came (sender, code); the kernel lets a thread queue any siginfo to
  // itself. The handler runs before the call returns (the signal is not blocked here).
  if (::syscall(SYS_rt_tgsigqueueinfo, getpid(), gettid(), sig, &t_deferred_info) != 0)
    ::raise(sig);
  errno = saved_errno;
}

SignalsBlocked::SignalsBlocked() {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old_);
}
SignalsBlocked::~SignalsBlocked() {
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

namespace {

// Created once by init and deliberately never destroyed: other threads may still be inside
// a check while the process exits.
Reporter* g_reporter = nullptr;
Engine* g_engine = nullptr;
bool g_abort_on_error = false;
// The process fumi's state belongs to: set at init and in fork children. A vfork or
// posix_spawn child runs on its parent's memory with another pid, and must not touch it.
pid_t g_owner_pid = 0;
std::atomic<void (*)()> g_before_summary{nullptr};
std::atomic<void (*)()> g_after_init{nullptr};

// The snapshot thread: started by init, and again in each fork child (afterForkInChild), whose
// threads fork did not copy.
pid_t g_snapshot_pid = 0;    // the process whose thread it is
std::atomic<int> g_pending_signal{0};
std::atomic<uint64_t> g_requested{0};
std::atomic<uint64_t> g_served{0};

const char* signalName(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    default: return "signal";
  }
}

// A deferred signal past its grace (deferSignal): sent to its thread again, which now handles
// it at once (signals.cpp): the snapshot it asks this thread for, then the program's
// disposition.
void deliverOverdueSignal() {
  const int sig = g_deferred_sig.load();
  if (sig <= 0 || monotonicNs() - g_deferred_at_ns.load() < kDeferGraceNs) return;
  g_signals_overdue.store(true);
  const pid_t tid = g_deferred_tid.load();
  g_reporter->log().warn("{} waited {} s for thread {} to leave fumi (stuck inside a check?): "
                         "handled now",
                         signalName(sig), kDeferGraceNs / 1000000000, tid);
  g_deferred_sig.store(0);
  ::syscall(SYS_tgkill, getpid(), tid, sig);
}

void snapshotLoop(double every) {
  InsideScope inside;
  const int64_t every_ns = every > 0 ? static_cast<int64_t>(std::min(every, 2.0e6) * 1e9) : -1;
  int64_t next_periodic = every_ns > 0 ? monotonicNs() + every_ns : -1;
  for (;;) {
    // Until the next periodic snapshot, or the end of a deferred signal's grace.
    int64_t until = next_periodic;
    if (g_deferred_sig.load() > 0) {
      const int64_t due = g_deferred_at_ns.load() + kDeferGraceNs;
      until = until < 0 ? due : std::min(until, due);
    }
    const int timeout_ms =
        until < 0 ? -1
                  : static_cast<int>(std::clamp<int64_t>((until - monotonicNs()) / 1000000 + 1, 0,
                                                         int64_t{2000000000}));
    pollfd p{g_wake_fd, POLLIN, 0};
    const int r = ::poll(&p, 1, timeout_ms);
    if (g_state.load(std::memory_order_acquire) != kActive) return;  // shut down
    try {
      if (r > 0) {
        uint64_t n = 0;
        if (::read(g_wake_fd, &n, sizeof n) < 0) continue;
        // A signal's request (snapshotForSignal), or a deferral to watch (deferSignal).
        const uint64_t requested = g_requested.load();
        if (requested != g_served.load()) {
          g_reporter->snapshot(signalName(g_pending_signal.exchange(0)));
          g_served.store(requested);
        }
      }
      deliverOverdueSignal();
      if (next_periodic >= 0 && monotonicNs() >= next_periodic) {
        g_reporter->snapshot("periodic");
        next_periodic = monotonicNs() + every_ns;
      }
    } catch (const std::exception& e) {
      g_reporter->log().error("snapshot failed: {}", e.what());
    }
  }
}

// A thread that never receives the program's asynchronous signals (fumiThread).
void startSnapshotThread(double every) {
  g_wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (g_wake_fd < 0) {
    g_reporter->log().warn("no eventfd ({}): no snapshots", std::strerror(errno));
    return;
  }
  try {
    fumiThread([every] { snapshotLoop(every); }).detach();
    g_snapshot_pid = getpid();
  } catch (const std::exception& e) {
    g_reporter->log().warn("no snapshot thread ({}): no snapshots", e.what());
  }
}

std::string builtinPluginDir() {
  const std::string dir = selfDir();
  return dir.empty() ? dir : dir + "/fumi/plugins";
}

// fork() copies memory, not threads: a mutex another thread held at that moment stays locked
// in the child forever. The reporter's lock is taken across fork (prepare/parent/child); the
// sites' statistics mutexes are re-created in the child, where they are unused by anyone else.
void beforeFork() {
  if (g_reporter) g_reporter->lockForFork();
}
void afterForkInParent() {
  if (g_reporter) g_reporter->unlockAfterFork();
}
void afterForkInChild() {
  g_owner_pid = getpid();
  if (!g_reporter) return;
  g_reporter->unlockAfterFork();
  if (g_state.load() != kActive) return;
  for (OpSite* s = firstSite(); s; s = s->next) {
    s->resetCounts();
    new (&s->stats_mu) std::mutex();
    s->stats = OpStats{};
  }
  g_engine->resetSamplingAfterFork();
  g_engine->budget().restartAfterFork();
  g_reruns.store(0);  // another thread's rerun at the fork did not come along
  lossScalingAfterFork();
  nanSearchAfterFork();
  g_reporter->reopenInChild();
  // A thread of its own for its periodic and signal snapshots (a pool worker ended by SIGTERM
  // had lost everything it did), on an eventfd of its own: the inherited one is the parent's.
  if (g_wake_fd >= 0) ::close(g_wake_fd);
  g_wake_fd = -1;
  g_deferred_sig.store(0);  // the parent's thread that deferred it is not here
  g_signals_overdue.store(false);
  g_snapshot_pid = 0;
  startSnapshotThread(g_reporter->settings().snapshot_every);
}

void printDiagnostics(const PolicyResult& pr) {
  for (const Diagnostic& d : pr.diagnostics) std::fprintf(stderr, "[fumi] %s\n", d.str().c_str());
}

bool initialise() {
  const Settings settings = readSettings();
  if (settings.disable == "1") return false;
  if (!settings.vector_lanes.empty()) setContractLanesCap(std::atoi(settings.vector_lanes.c_str()));
  PolicyResult pr = loadConfiguredPolicy();
  printDiagnostics(pr);
  g_abort_on_error = settings.on_error == "abort" ||
                     (settings.on_error.empty() && pr.policy &&
                      pr.policy->on_error == OnError::kAbort);
  if (!pr.ok()) {
    if (g_abort_on_error) {
      std::fprintf(stderr, "[fumi] policy has errors and on_error is abort: aborting\n");
      std::abort();
    }
    std::fprintf(stderr, "[fumi] policy has errors: fumi is disabled, the program runs unchecked\n");
    return false;
  }
  Policy& policy = *pr.policy;
  const std::string out = settings.out.empty() ? policy.report.dir : settings.out;
  if (!settings.prometheus.empty()) policy.report.prometheus = settings.prometheus;
  const std::string level = settings.log_level.empty() ? policy.report.log_level
                                                        : settings.log_level;
  g_reporter = new Reporter(policy.report, out, level, policy.source);
  g_reporter->open();
  for (const Diagnostic& d : pr.diagnostics) g_reporter->warning("policy", d.loc.str(), d.message);
  auto dirs = pluginSearchPath(policy.plugin_dirs, builtinPluginDir());
  g_engine = new Engine(std::move(policy), *g_reporter, std::move(dirs));
  g_engine->compileAll();
  g_owner_pid = getpid();
  pthread_atfork(beforeFork, afterForkInParent, afterForkInChild);
  startSnapshotThread(g_reporter->settings().snapshot_every);
  return true;
}

}  // namespace

Engine* engine() { return g_engine; }
Reporter* activeReporter() { return g_reporter; }

bool initSlow() {
  InsideScope inside;
  int expected = kUninit;
  if (!g_state.compare_exchange_strong(expected, kInitializing)) {
    // Another thread is initialising: wait for it, so that calls of a multi-threaded program
    // are counted and sampled from the start. Bounded, because this thread might hold a lock
    // init needs (e.g. the loader's, when BLAS is called from a library constructor): after
    // the bound the call passes through unchecked.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (g_state.load(std::memory_order_acquire) == kInitializing &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    return g_state.load(std::memory_order_acquire) == kActive;
  }
  bool ok = false;
  try {
    ok = initialise();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[fumi] initialisation failed: %s; the program runs unchecked\n",
                 e.what());
    if (g_abort_on_error) std::abort();
  } catch (...) {
    std::fprintf(stderr, "[fumi] initialisation failed; the program runs unchecked\n");
    if (g_abort_on_error) std::abort();
  }
  g_state.store(ok ? kActive : kDisabled, std::memory_order_release);
  if (ok)
    if (auto step = g_after_init.load()) step();
  return ok;  // the call that triggered init is intercepted like any other
}

void setAfterInit(void (*step)()) { g_after_init.store(step); }

bool ownsProcessState() { return getpid() == g_owner_pid; }

bool snapshotForSignal(int signal) {
  if (g_state.load(std::memory_order_acquire) != kActive || g_snapshot_pid != getpid())
    return false;
  g_pending_signal.store(signal);
  const uint64_t want = g_requested.fetch_add(1) + 1;
  const uint64_t one = 1;
  if (::write(g_wake_fd, &one, sizeof one) < 0) return false;
  for (int waited_ms = 0; waited_ms < 2000; ++waited_ms) {
    if (g_served.load() >= want) return true;
    const timespec ms{0, 1000000};
    ::nanosleep(&ms, nullptr);
  }
  return false;
}

void snapshotBeforeExec() {
  if (t_inside_fumi || !ownsProcessState()) return;
  if (g_state.load(std::memory_order_acquire) != kActive) return;
  InsideScope inside;
  try {
    g_reporter->snapshot("exec");
  } catch (...) {
  }
}

void internalError(const char* where, const char* message) {
  if (g_reporter) g_reporter->log().error("{}: {}", where, message);
  else std::fprintf(stderr, "[fumi] error: %s: %s\n", where, message);
  if (g_abort_on_error) {
    std::fprintf(stderr, "[fumi] on_error is abort: aborting\n");
    if (g_reporter) g_reporter->summary();
    std::abort();
  }
}

void shutdown() {
  // Not from inside fumi on this thread (a signal handler interrupting fumi may hold its
  // locks), and not from a child sharing its parent's memory.
  if (t_inside_fumi || getpid() != g_owner_pid) return;
  int expected = kActive;
  if (!g_state.compare_exchange_strong(expected, kDisabled)) return;
  InsideScope inside;
  try {
    if (auto step = g_before_summary.load()) step();
    nanSearchAtExit();
    lossScalingAtExit();
    g_reporter->summary();
  } catch (...) {
  }
}

void setBeforeSummary(void (*step)()) { g_before_summary.store(step); }

void beforeExit() {
  if (t_inside_fumi || getpid() != g_owner_pid || g_state.load() != kActive) return;
  InsideScope inside;
  try {
    if (auto step = g_before_summary.load()) step();
  } catch (...) {
  }
}

namespace {
__attribute__((destructor)) void shutdownAtExit() { shutdown(); }
}  // namespace

}  // namespace fumi
