// checker.h — where checks of device calls run: one fumi thread (the checker) with its own
// stream and a device memory pool. Each library's handles for reruns live with its hooks,
// created on the checker thread on first use (device_call.h: checkerHandle).
//
// The asynchronous design (docs/cuda.md): a sampled call's operands are snapshotted with
// device-to-device copies enqueued on the call's own stream (inputs before the call, outputs
// after it), an event is recorded after them, and the check is queued. The user's thread never
// synchronises, allocates or frees: the checker waits for the event, runs the plugins (their
// reruns go to its own stream) and reports. Snapshots live in a pool the checker allocated
// once, so the user's thread issues nothing but copies and an event record. The queue is
// bounded: a sampled call that finds it full (or the pool short) is skipped and counted.
// FUMI_CUDA_MODE=sync makes the calling thread wait for its check (debugging).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "call.h"
#include "cuda_api.h"
#include "engine.h"

namespace fumi::cuda {

// A check waiting for its call's stream to pass the snapshot copies.
struct PendingCheck {
  std::unique_ptr<Call> call;
  RuleSampler* sampler = nullptr;
  CallOrigin origin;
  cudaEvent_t ready = nullptr;       // recorded on the call's stream after the snapshots
  std::vector<void*> blocks;         // pool memory held until the check is done
  uint64_t kernels = 0;              // KernelRecorder token of the call (0: not recorded)
  bool discard = false;              // not to be checked after all (autotuning): only released

  PendingCheck() = default;
  PendingCheck(const PendingCheck&) = delete;
  PendingCheck& operator=(const PendingCheck&) = delete;
  ~PendingCheck();  // a token never taken is discarded
};

class Checker {
 public:
  // The process's checker, started on first use; nullptr when CUDA checks cannot run here
  // (missing functions, no device memory for the pool, a forked child). Says why once.
  static Checker* get();
  // Finish queued checks (bounded wait) and stop the thread; at exit and before the summary.
  static void drain();
  // `fn` runs when drain() starts, before its wait: checks a backend still holds go into the
  // queue then (cuDNN's, held until their variant pack settles). Registering twice runs twice.
  static void beforeDrain(void (*fn)());

  // Snapshot memory from the pool for the calling thread; nullptr when the pool's snapshot
  // share is used up. give() returns it.
  void* take(size_t bytes);
  void give(void* p);
  // An event from the checker's set (nullptr: all in use — the queue is full); a call that
  // ends up not queued gives it back.
  cudaEvent_t takeEvent();
  void returnEvent(cudaEvent_t e);
  // Scratch for the checks (the pool's other share); give() returns it. Checker thread.
  void* scratch(size_t bytes);

  // Queue a check; with FUMI_CUDA_MODE=sync, returns once it has run.
  void submit(std::unique_ptr<PendingCheck> check);
  // Run `fn` on the checker thread and wait for it (work a user thread must not issue itself:
  // stream synchronisation, which would break another thread's global-mode capture).
  void runOnChecker(const std::function<void()>& fn);

  // Checker thread only.
  cudaStream_t stream() const { return stream_; }
  const CudaApi& api() const { return api_; }
  bool copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);

  struct State;  // defined in checker.cpp

 private:
  explicit Checker(const CudaApi& api) : api_(api) {}
  const CudaApi& api_;
  cudaStream_t stream_ = nullptr;
  friend struct State;
};

// Errors fumi's own CUDA calls raise must not show up in the program's cudaGetLastError.
// Wrap a user-thread region that issues CUDA calls: its errors are cleared at the end unless
// the program had an error pending before.
class LastErrorScope {
 public:
  explicit LastErrorScope(const CudaApi& api) : api_(api), before_(api.cudaPeekAtLastError()) {}
  ~LastErrorScope() {
    if (before_ == cudaSuccess) api_.cudaGetLastError();
  }
  LastErrorScope(const LastErrorScope&) = delete;
  LastErrorScope& operator=(const LastErrorScope&) = delete;

 private:
  const CudaApi& api_;
  cudaError_t before_;
};

}  // namespace fumi::cuda
