// cupti.cpp — pass-through hooks for CUPTI clients (cupti.def): fumi's kernel recorder
// (cuda/kernels.h) releases CUPTI before the program's own profiler takes it, then the call
// goes to the real libcupti unchanged. fumi's own CUPTI calls use pointers it resolved from
// the library it opened, so they never come through here.
#include <cupti.h>

#include <atomic>

#include "cuda/kernels.h"
#include "hook.h"

namespace fumi::hooks {
namespace {

// What a forwarded call answers when no loaded library defines it (nothing to forward to;
// a program linked against libcupti cannot get here).
constexpr CUptiResult kNoCupti = CUPTI_ERROR_NOT_INITIALIZED;

#define FUMI_PASS_HOOK(name, ret, params, args) std::atomic<void*> g_real_##name{nullptr};
#include "cupti.def"
#undef FUMI_PASS_HOOK

}  // namespace
}  // namespace fumi::hooks

#define FUMI_PASS_HOOK(name, ret, params, args)                                        \
  extern "C" FUMI_EXPORT ret name params {                                             \
    using namespace fumi::hooks;                                                       \
    if (fumi::enter()) /* not when fumi is off (FUMI_DISABLE) */                       \
      fumi::cuda::KernelRecorder::stepAside("the program uses CUPTI itself (" #name ")"); \
    void* p = g_real_##name.load(std::memory_order_acquire);                          \
    if (!p && (p = fumi::resolveReal(#name)) != nullptr)                               \
      g_real_##name.store(p, std::memory_order_release);                               \
    if (!p) return kNoCupti;                                                           \
    return reinterpret_cast<ret(*) params>(p) args;                                    \
  }
#include "cupti.def"
#undef FUMI_PASS_HOOK
