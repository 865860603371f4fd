// hook.h — the machinery that turns one hook-table row into everything a hook needs.
//
// How to add a hooked library: write <lib>.def with one FUMI_HOOK row per function
//   FUMI_HOOK(name, backend, dtype, handler, ret, (params...), (args...))
// and a <lib>.cpp that defines the handlers (namespace fumi::hooks) and then expands the table
// twice: FUMI_HOOK_STATE (real pointer + op site + typed accessor) and FUMI_HOOK_WRAPPER (the
// exported wrapper). The version script and knownOpNames() read the same table.
// A handler(CallSite, real, args...) is called only when the policy can check this op; it must
// forward the call to `real` exactly once, whatever happens, through forwardReal(real, args...),
// which each <lib>.cpp defines: a plain call, or one that marks the thread as inside fumi when
// the library calls other hooked functions internally (cuBLAS calls cuBLASLt: one call, the
// outer one, is what the program made).
#pragma once

#include <atomic>

#include "fumi/plugin.h"
#include "resolve.h"
#include "runtime.h"
#include "site.h"

#define FUMI_EXPAND(...) __VA_ARGS__

namespace fumi {
// What a handler learns about the intercepted call besides its arguments.
struct CallSite {
  OpSite& site;
  OpDecision& decision;
  uint64_t call_index;  // among all calls of this op in the process
  const void* caller;   // the return address of the intercepted call: in its caller's code
};
}  // namespace fumi

#define FUMI_HOOK_STATE(name, backend, dtype, handler, ret, params, args)               \
  using name##_fn = ret(*) params;                                                     \
  std::atomic<void*> g_real_##name{nullptr};                                           \
  OpSite g_site_##name(#name, #backend, FUMI_DTYPE_##dtype);                           \
  inline name##_fn real_##name() {                                                     \
    void* p = g_real_##name.load(std::memory_order_acquire);                           \
    if (__builtin_expect(p == nullptr, 0)) p = resolveRealOrDie(#name, g_real_##name); \
    return reinterpret_cast<name##_fn>(p);                                             \
  }                                                                                    \
  /* For reruns: null instead of abort when no library defines it. */                 \
  inline name##_fn try_real_##name() {                                                 \
    void* p = g_real_##name.load(std::memory_order_acquire);                           \
    if (!p && (p = resolveReal(#name)) != nullptr)                                     \
      g_real_##name.store(p, std::memory_order_release);                               \
    return reinterpret_cast<name##_fn>(p);                                             \
  }

// The hot path: guard, counter, decision pointer, then the real function. Plain function
// pointers and no locks, so a call the policy does not sample costs a few nanoseconds.
#define FUMI_HOOK_WRAPPER(name, backend, dtype, handler, ret, params, args)              \
  extern "C" FUMI_EXPORT ret name params {                                              \
    using namespace fumi::hooks;                                                        \
    const name##_fn real = real_##name();                                               \
    if (!fumi::enter()) return real args;                                               \
    uint64_t call_index;                                                                \
    fumi::OpDecision* decision = g_site_##name.onCall(call_index);                      \
    if (__builtin_expect(decision == nullptr, 1)) return forwardReal(real, FUMI_EXPAND args); \
    return handler(fumi::CallSite{g_site_##name, *decision, call_index,                 \
                                  __builtin_return_address(0)},                          \
                   real, FUMI_EXPAND args);                                             \
  }
