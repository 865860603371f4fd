// runtime.h — process-wide state of libfumi: lazy idempotent initialisation from whichever
// hook runs first, the thread-local "inside fumi" guard, and shutdown at exit.
//
// Every hook starts with `if (!fumi::enter()) return REAL(...)`: calls made while fumi itself
// (or a plugin rerun) is running, or after fumi was disabled, pass straight through to the real
// function. A thread arriving while another initialises waits for it (bounded, runtime.cpp).
#pragma once

#include <signal.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <utility>

namespace fumi {

enum RuntimeState : int {
  kUninit = 0,
  kInitializing = 1,
  kActive = 2,
  kDisabled = 3,  // init failed, FUMI_DISABLE=1, or shut down: pass everything through
};

extern std::atomic<int> g_state;
// __thread rather than thread_local: no TLS wrapper call on the hot path.
extern __thread bool t_inside_fumi;
// A watched signal (SIGTERM/SIGINT/SIGHUP) that arrived while this thread was inside fumi: its
// handling waits until the thread leaves (the snapshot it asks for needs locks this thread may
// hold; the program's own handler, or dying of it, follows the snapshot). 0: none.
extern __thread int t_deferred_signal;
// From the signal handler: keep the signal (with its siginfo) for when the thread leaves fumi.
void deferSignal(int signal, const siginfo_t* info);
// Sends the deferred signal again to this thread, with its original siginfo.
void redeliverSignal();
// A deferred signal waited out its grace (5 s) with its thread still inside fumi: from then on
// watched signals are handled at once wherever they arrive (runtime.cpp, deferSignal).
bool signalsOverdue();

// Inside a PromptSignals scope (a count) watched signals are handled at once though the thread
// is inside fumi: long waits that hold nothing the snapshot needs (the CUDA checker's queue at
// exit, up to FUMI_EXIT_WAIT), which a job's SIGTERM must not wait out.
extern __thread int t_signals_prompt;
class PromptSignals {
 public:
  PromptSignals() { ++t_signals_prompt; }
  ~PromptSignals() { --t_signals_prompt; }
  PromptSignals(const PromptSignals&) = delete;
  PromptSignals& operator=(const PromptSignals&) = delete;
};

// Leaving fumi (the outermost scope ends): a signal deferred meanwhile is handled now.
inline void leaveFumi(bool previous) {
  t_inside_fumi = previous;
  if (!previous && __builtin_expect(t_deferred_signal != 0, 0)) redeliverSignal();
}

bool initSlow();

// Framework reruns in flight (RerunScope). An op fumi reruns can spread its work over the
// framework's OpenMP threads (aten's slow_conv2d, bmm: a BLAS call per image from each worker),
// which are not inside fumi by their own flag: while a rerun is in flight, a call from inside
// an OpenMP parallel region is taken as fumi's (insideParallelRegion).
extern std::atomic<int> g_reruns;
bool insideParallelRegion();

class RerunScope {
 public:
  RerunScope() { g_reruns.fetch_add(1, std::memory_order_relaxed); }
  ~RerunScope() { g_reruns.fetch_sub(1, std::memory_order_relaxed); }
  RerunScope(const RerunScope&) = delete;
  RerunScope& operator=(const RerunScope&) = delete;
};

inline bool enter() {
  if (t_inside_fumi) return false;
  const int s = g_state.load(std::memory_order_acquire);
  if (s == kActive)
    return __builtin_expect(g_reruns.load(std::memory_order_relaxed) == 0, 1) ||
           !insideParallelRegion();
  if (s == kUninit || s == kInitializing) return initSlow();  // init, or wait for it
  return false;
}

// Marks the current thread as inside fumi for the scope's lifetime (re-entrant).
class InsideScope {
 public:
  InsideScope() : prev_(t_inside_fumi) { t_inside_fumi = true; }
  ~InsideScope() { leaveFumi(prev_); }
  InsideScope(const InsideScope&) = delete;
  InsideScope& operator=(const InsideScope&) = delete;

 private:
  bool prev_;
};

// A lock the snapshot also takes (a site's statistics, the reporter's files), held with the
// thread marked inside fumi: a signal that lands meanwhile is handled once it is released,
// instead of waiting for a snapshot that needs it.
template <class Mutex>
class InsideLock {
 public:
  explicit InsideLock(Mutex& m) : lock_(m) {}

 private:
  InsideScope inside_;  // first: entered before locking, left after unlocking
  std::lock_guard<Mutex> lock_;
};

// Every signal blocked in the calling thread for the scope's lifetime (the mask restored after).
class SignalsBlocked {
 public:
  SignalsBlocked();
  ~SignalsBlocked();
  SignalsBlocked(const SignalsBlocked&) = delete;
  SignalsBlocked& operator=(const SignalsBlocked&) = delete;

 private:
  sigset_t old_;
};

// A thread of fumi's own (snapshot writer, CUDA checker): inside fumi for its whole life, it
// must never take the program's asynchronous signals, so it starts with all of them blocked
// (a new thread inherits its creator's mask).
template <class F>
std::thread fumiThread(F&& fn) {
  const SignalsBlocked blocked;
  return std::thread(std::forward<F>(fn));
}

// The process is ending (exit, return from main, _exit): write the summary once and pass
// everything through from now on.
void shutdown();
// Work that must finish before the summary is written (the CUDA checker's queue). One step.
void setBeforeSummary(void (*step)());
// The process starts to end (exit() called, or main returned: exit.cpp): that step runs now,
// before any exit handler, so that no library the step uses (cuBLAS, cuDNN) is torn down under
// it. The summary itself is still written when libfumi unloads (shutdown).
void beforeExit();

// Durable data (docs/report-schema.md#snapshots). The process that initialised fumi runs a
// thread writing `snapshot` events every report.snapshot_every seconds (when anything changed).
// From a signal handler: ask that thread for a snapshot named after `signal` and wait for it,
// at most ~2 s (async-signal-safe; false when there was none or it did not finish in time).
bool snapshotForSignal(int signal);
// Before exec() replaces the process image: its state as a snapshot ("exec"), written here.
void snapshotBeforeExec();
// Whether this process owns fumi's state: false in a vfork() child (or posix_spawn's), which
// runs on its parent's memory until it execs and must change nothing there.
bool ownsProcessState();
// Work to run once initialisation succeeded (libfumi installs its signal handlers). One step.
void setAfterInit(void (*step)());

// Internal failure: honours on_error (abort) or just logs and carries on.
void internalError(const char* where, const char* message);

}  // namespace fumi
