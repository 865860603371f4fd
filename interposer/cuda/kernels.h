// kernels.h — which kernels a checked device call launched, and how long they ran, for the
// report: CUPTI, loaded at run time (libcupti.so.13, never linked) when it is there and no
// other CUPTI client (a profiler) uses it. Everything works without it.
//
// The program's own call is bracketed on its thread: CUPTI's launch callbacks (runtime and
// driver API) tell the correlation ids of the launches made in between, and CUPTI's kernel
// activity records (names, start/end) are matched to them by correlation id when the checker
// thread takes them, after the call's stream has passed the call.
//
// CUPTI takes one subscriber per process. fumi never takes it from someone else: it does not
// start when another subscriber exists (Nsight Systems/Compute, a debugger, an earlier
// torch.profiler), when CUDA_INJECTION64_PATH names an injected tool, or when another libcupti
// version is loaded; and it steps aside (stepAside()) when the program starts a CUPTI client
// of its own later, before that client's first CUPTI call. FUMI_CUPTI=0 turns it off.
//
// Bounded: at most kMaxPending calls' records are held (the oldest untaken call is dropped
// and counted), kMaxKernelsPerCall kernels per call, and a fixed pool of activity buffers
// (records CUPTI cannot place are dropped by CUPTI and counted).
#pragma once

#include <cstdint>
#include <vector>

#include "engine.h"  // KernelRecord (times: cuptiGetTimestamp's clock)

namespace fumi::cuda {

struct KernelRecorderStats {
  uint64_t calls = 0;             // tokens handed out
  uint64_t calls_dropped = 0;     // pending calls pushed out before take() / discard()
  uint64_t kernels = 0;           // kernel records matched to a call
  uint64_t kernels_missing = 0;   // launches seen without a record by take() time
  uint64_t kernels_over_cap = 0;  // records beyond kMaxKernelsPerCall for one call
  uint64_t records_dropped = 0;   // records CUPTI dropped (no buffer space)
};

class KernelRecorder {
 public:
  static constexpr size_t kMaxPending = 256;  // power of two
  static constexpr size_t kMaxKernelsPerCall = 16;

  // The process's recorder, started on first use; nullptr when kernel records are off here
  // (FUMI_CUPTI=0, libcupti not loadable, another CUPTI client, a CUPTI error, a forked
  // child, or stepped aside). Says why once through fumi's log. Never throws or aborts.
  // Call it only where CUDA is known to work (after the checker started).
  static KernelRecorder* get();

  // The program starts its own CUPTI client (a cuptiSubscribe / cuptiActivity* call seen by
  // a hook, before forwarding it): fumi releases CUPTI (flushes its records, disables its
  // activity kind, unsubscribes) and never takes it again in this process. Safe at any time
  // and from any thread, before get() too; cheap after the first call.
  static void stepAside(const char* why);

  // Around the program's own (forwarded) call, on the calling thread: kernels launched on
  // this thread between begin() and end() belong to the token. 0 means "not recorded"
  // (recorder off, or nested inside another begin() on this thread: the outer token gets the
  // kernels); end(0), take(0) and discard(0) do nothing. No allocation.
  uint64_t begin();
  void end(uint64_t token);

  // Later, on any thread (fumi's checker), once the call's stream has passed the call: the
  // token's kernels in launch order, flushing CUPTI's buffers if some are still missing;
  // empty if none or unknown. Each token is taken (or discarded) once. Static: records that
  // reached fumi before it stepped aside are still handed out.
  static std::vector<KernelRecord> take(uint64_t token);
  // A token whose call will not be reported (its check was not queued or did not run).
  static void discard(uint64_t token);

  static KernelRecorderStats stats();

  struct State;  // defined in kernels.cpp

 private:
  KernelRecorder() = default;
};

}  // namespace fumi::cuda
