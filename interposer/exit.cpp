// exit.cpp — how a process ends, seen by fumi.
//
// `_exit`: processes that end with _exit() skip library destructors, so without the wrapper
// they would leave no summary: Python's multiprocessing workers (os._exit), forked DataLoader
// workers, servers' children. The summary is written (runtime.cpp: not from a vfork child, not
// from inside fumi), then the real _exit runs.
//
// `exit` and the return from main (`__libc_start_main` hands the program a main that returns
// through fumi): beforeExit() first. exit() runs the handlers registered with atexit and the
// destructors of static objects, latest first; a library's objects made after fumi's own
// handler was registered (cuBLASLt's fp64 heuristics, first used by a check on fumi's checker
// thread) were destroyed while that thread still ran checks, and the program crashed at exit
// (SIGSEGV in cublasLtDDDMatmulAlgoGetHeuristic on an H200, 2026-11-26). libc calls exit()
// after main returns without going through the symbol table, hence the wrapped main.
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

using MainFn = int (*)(int, char**, char**);
MainFn g_program_main = nullptr;

int mainThroughFumi(int argc, char** argv, char** envp) {
  const int status = g_program_main(argc, argv, envp);
  fumi::beforeExit();
  return status;
}

}  // namespace

extern "C" FUMI_EXPORT void exit(int status) {
  static const auto real = reinterpret_cast<void (*)(int)>(fumi::resolveReal("exit"));
  fumi::beforeExit();
  if (real) real(status);
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
}

extern "C" FUMI_EXPORT int __libc_start_main(MainFn main, int argc, char** argv, void (*init)(),
                                             void (*fini)(), void (*rtld_fini)(),
                                             void* stack_end) {
  using StartFn = int (*)(MainFn, int, char**, void (*)(), void (*)(), void (*)(), void*);
  const auto real = reinterpret_cast<StartFn>(fumi::resolveReal("__libc_start_main"));
  if (!real) return main(argc, argv, environ);  // not glibc's start-up: nothing to wrap
  g_program_main = main;
  return real(mainThroughFumi, argc, argv, init, fini, rtld_fini, stack_end);
}

extern "C" FUMI_EXPORT void _exit(int status) {
  fumi::shutdown();
  if (g_real_exit) g_real_exit(status);
  syscall(SYS_exit_group, status);  // no libc _exit found: end the process anyway
  __builtin_unreachable();
}
