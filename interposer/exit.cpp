// exit.cpp — `_exit` wrapper. Processes that end with _exit() skip library destructors, so
// without it they would leave no summary: Python's multiprocessing workers (os._exit), forked
// DataLoader workers, servers' children. The summary is written (runtime.cpp: not from a vfork
// child, not from inside fumi), then the real _exit runs.
#include <sys/syscall.h>
#include <unistd.h>

#include "fumi/plugin.h"
#include "resolve.h"
#include "runtime.h"

namespace {
// Resolved at load time: a vfork child calling _exit must not enter the dynamic loader, whose
// locks and state it shares with its parent.
using ExitFn = void (*)(int);
ExitFn g_real_exit = nullptr;
__attribute__((constructor)) void resolveExit() {
  g_real_exit = reinterpret_cast<ExitFn>(fumi::resolveReal("_exit"));
}
}  // namespace

extern "C" FUMI_EXPORT void _exit(int status) {
  fumi::shutdown();
  if (g_real_exit) g_real_exit(status);
  syscall(SYS_exit_group, status);  // no libc _exit found: end the process anyway
  __builtin_unreachable();
}
