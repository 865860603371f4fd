// signals.cpp — nothing lost when a job ends by a signal or replaces itself with exec().
//
// SIGTERM, SIGINT and SIGHUP: fumi's handler asks the snapshot thread for a snapshot (bounded
// wait, runtime.cpp), then does what the program's own disposition says: its handler runs (with
// its siginfo, mask and flags), or the default action ends the process by the same signal.
// A signal that interrupts a thread inside fumi (which may hold the locks the snapshot needs)
// waits until the thread leaves fumi, and is then sent to it again with its siginfo; but not in
// fumi's long waits (PromptSignals: the CUDA checks still queued at exit), and for 5 s at most
// (a thread stuck inside fumi must not make the job deaf to them: runtime.cpp, deferSignal).
// The program keeps seeing its own handlers: sigaction() and signal() for these signals record
// and return the program's disposition while fumi's handler stays in the kernel. A signal the
// program ignores (SIG_IGN, e.g. under nohup) is left alone, so it stays ignored across exec.
//
// SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT (the process crashing: a fault in an extension, an
// abort()): where the program's disposition is the default, the process is about to die of it,
// and its counts (since the last periodic snapshot) with it: the snapshot is written first
// (bounded wait, as above), then the default restored and the signal delivered again. Never
// deferred (returning from a fault re-runs the faulting instruction); where the program has a
// handler (Python's faulthandler, a DataLoader worker's), that handler runs at once, no snapshot:
// it may recover, and one that dies restores the default and raises the signal again.
//
// exec*(): the process image's state is written as a snapshot ("exec") before the real call.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <vector>

#include "fumi/plugin.h"
#include "resolve.h"
#include "runtime.h"

namespace {

using SigactionFn = int (*)(int, const struct sigaction*, struct sigaction*);
std::atomic<SigactionFn> g_real{nullptr};

// libc's sigaction, resolved on first use (another library's constructor may call it before
// libfumi's constructors ran).
int realSigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  SigactionFn f = g_real.load(std::memory_order_acquire);
  if (!f) {
    f = reinterpret_cast<SigactionFn>(fumi::resolveReal("sigaction"));
    if (!f) {
      errno = ENOSYS;
      return -1;
    }
    g_real.store(f, std::memory_order_release);
  }
  return f(sig, act, old);
}

constexpr int kWatched[] = {SIGTERM, SIGINT, SIGHUP};
constexpr int kFatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

struct Watched {
  std::atomic<bool> installed{false};
  struct sigaction program {};  // the program's own disposition
};
Watched g_watch[NSIG];

bool fatal(int sig) {
  for (int f : kFatal)
    if (f == sig) return true;
  return false;
}

bool watched(int sig) {
  for (int w : kWatched)
    if (w == sig) return true;
  return fatal(sig);
}

bool isHandler(const struct sigaction& a, void (*which)(int)) {
  return !(a.sa_flags & SA_SIGINFO) && a.sa_handler == which;
}

void onSignal(int sig, siginfo_t* info, void* ucontext);

// fumi's handler in the kernel, with the program's mask and the flags that change how the
// program's code sees the signal (restarted system calls, alternate stack, no deferral).
void installHandler(int sig, const struct sigaction& program) {
  struct sigaction ours {};
  ours.sa_sigaction = onSignal;
  ours.sa_mask = program.sa_mask;
  ours.sa_flags = SA_SIGINFO | (program.sa_flags & (SA_RESTART | SA_ONSTACK | SA_NODEFER));
  if (isHandler(program, SIG_DFL)) ours.sa_flags |= SA_RESTART;
  realSigaction(sig, &ours, nullptr);
}

void onSignal(int sig, siginfo_t* info, void* ucontext) {
  const bool crash = fatal(sig);
  if (!crash && fumi::t_inside_fumi && fumi::t_signals_prompt == 0 && !fumi::signalsOverdue()) {
    // Interrupted inside fumi, perhaps holding the locks the snapshot needs: handled (snapshot,
    // then the program's disposition) when this thread leaves fumi (runtime.h leaveFumi).
    fumi::deferSignal(sig, info);
    return;
  }
  // Handled now: overdue, its deferral is not to be delivered again when the thread leaves.
  if (fumi::t_deferred_signal == sig) fumi::t_deferred_signal = 0;
  const int saved_errno = errno;
  Watched& w = g_watch[sig];
  const struct sigaction program = w.program;
  if (!crash || isHandler(program, SIG_DFL)) fumi::snapshotForSignal(sig);
  errno = saved_errno;
  if (isHandler(program, SIG_IGN)) return;
  if (isHandler(program, SIG_DFL)) {
    // Die of the signal as the program would have: default disposition, then deliver it again
    // (it is blocked while this handler runs; unblocking delivers it).
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    w.installed.store(false);
    realSigaction(sig, &dfl, nullptr);
    raise(sig);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    // Still alive (the signal is blocked in the thread's original mask): take it back.
    installHandler(sig, program);
    w.installed.store(true);
    errno = saved_errno;
    return;
  }
  if (program.sa_flags & SA_RESETHAND) {
    w.program = {};
    w.program.sa_handler = SIG_DFL;
  }
  if (program.sa_flags & SA_SIGINFO) program.sa_sigaction(sig, info, ucontext);
  else program.sa_handler(sig);
}

void installSignalHandlers() {
  for (int sig = 1; sig < NSIG; ++sig) {
    if (!watched(sig)) continue;
    struct sigaction current {};
    if (realSigaction(sig, nullptr, &current) != 0 || isHandler(current, SIG_IGN)) continue;
    g_watch[sig].program = current;
    installHandler(sig, current);
    g_watch[sig].installed.store(true);
  }
}

__attribute__((constructor)) void registerSignalHandlers() {
  fumi::setAfterInit(installSignalHandlers);
}

template <typename Fn>
Fn realFn(const char* name) {
  static_assert(sizeof(Fn) == sizeof(void*));
  return reinterpret_cast<Fn>(fumi::resolveReal(name));
}

}  // namespace

extern "C" FUMI_EXPORT int sigaction(int sig, const struct sigaction* act,
                                     struct sigaction* old) {
  // A vfork child (Python's subprocess resets every handler in it before exec) has its own
  // dispositions in the kernel but its parent's memory: it must not touch the parent's record.
  if (sig <= 0 || sig >= NSIG || !watched(sig) || !g_watch[sig].installed.load() ||
      !fumi::ownsProcessState())
    return realSigaction(sig, act, old);
  Watched& w = g_watch[sig];
  if (old) *old = w.program;
  if (!act) return 0;
  if (isHandler(*act, SIG_IGN)) {  // ignored from now on: hand the signal back to the kernel
    w.installed.store(false);
    return realSigaction(sig, act, nullptr);
  }
  w.program = *act;
  installHandler(sig, *act);
  return 0;
}

// glibc's signal() installs through its internal sigaction, so it is wrapped too: for the
// signals fumi holds, BSD semantics (restarted calls, the signal blocked in its handler) through
// the sigaction wrapper; every other call goes to glibc's own (siginterrupt() kept).
extern "C" FUMI_EXPORT sighandler_t signal(int sig, sighandler_t handler) {
  if (sig <= 0 || sig >= NSIG || !watched(sig) || !g_watch[sig].installed.load() ||
      !fumi::ownsProcessState()) {
    static const auto real = realFn<sighandler_t (*)(int, sighandler_t)>("signal");
    if (!real) {
      errno = ENOSYS;
      return SIG_ERR;
    }
    return real(sig, handler);
  }
  struct sigaction act {}, old{};
  act.sa_handler = handler;
  sigemptyset(&act.sa_mask);
  if (sig > 0 && sig < NSIG) sigaddset(&act.sa_mask, sig);
  act.sa_flags = SA_RESTART;
  if (sigaction(sig, &act, &old) != 0) return SIG_ERR;
  return old.sa_handler;  // shares its storage with sa_sigaction
}

// ---- exec ------------------------------------------------------------------------------------

extern "C" FUMI_EXPORT int execve(const char* path, char* const argv[], char* const envp[]) {
  static auto real = realFn<int (*)(const char*, char* const[], char* const[])>("execve");
  fumi::snapshotBeforeExec();
  return real(path, argv, envp);
}

extern "C" FUMI_EXPORT int execv(const char* path, char* const argv[]) {
  static auto real = realFn<int (*)(const char*, char* const[])>("execv");
  fumi::snapshotBeforeExec();
  return real(path, argv);
}

extern "C" FUMI_EXPORT int execvp(const char* file, char* const argv[]) {
  static auto real = realFn<int (*)(const char*, char* const[])>("execvp");
  fumi::snapshotBeforeExec();
  return real(file, argv);
}

extern "C" FUMI_EXPORT int execvpe(const char* file, char* const argv[], char* const envp[]) {
  static auto real = realFn<int (*)(const char*, char* const[], char* const[])>("execvpe");
  fumi::snapshotBeforeExec();
  return real(file, argv, envp);
}

extern "C" FUMI_EXPORT int fexecve(int fd, char* const argv[], char* const envp[]) {
  static auto real = realFn<int (*)(int, char* const[], char* const[])>("fexecve");
  fumi::snapshotBeforeExec();
  return real(fd, argv, envp);
}

namespace {
// execl's argument list as an argv array; with `envp`, the pointer after the list's NULL.
std::vector<char*> listArgs(const char* arg0, va_list ap, char* const** envp) {
  std::vector<char*> argv{const_cast<char*>(arg0)};
  while (argv.back()) argv.push_back(va_arg(ap, char*));
  if (envp) *envp = va_arg(ap, char* const*);
  return argv;
}
}  // namespace

extern "C" FUMI_EXPORT int execl(const char* path, const char* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  std::vector<char*> argv = listArgs(arg, ap, nullptr);
  va_end(ap);
  return execv(path, argv.data());
}

extern "C" FUMI_EXPORT int execlp(const char* file, const char* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  std::vector<char*> argv = listArgs(arg, ap, nullptr);
  va_end(ap);
  return execvp(file, argv.data());
}

extern "C" FUMI_EXPORT int execle(const char* path, const char* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  char* const* envp = nullptr;
  std::vector<char*> argv = listArgs(arg, ap, &envp);
  va_end(ap);
  return execve(path, argv.data(), envp);
}
