// device_call.h — what the hooks of every device library (cuBLAS/cuBLASLt, cuDNN) share on the
// program's thread: forwarding the call inside fumi's scope, snapshots into the checker's pool,
// the checked-call path (capture safety, an event from the checker's set, snapshots before and
// after the call, queueing the check), and host scalars for reruns on the checker thread.
//
// How a hook uses it: decide sampling from the arguments first; then checkedDeviceCall() with
// the call's stream and four steps (forward, snapshot inputs, snapshot outputs, build the Call).
// docs/cuda.md describes the asynchronous design.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/fmt/fmt.h>

#include "call.h"
#include "cuda/checker.h"
#include "cuda/kernels.h"
#include "engine.h"
#include "fumi/dtype.hpp"
#include "hooks/hook.h"
#include "report.h"

namespace fumi::hooks {

// Device libraries call each other's hooked entry points internally (cuBLAS calls cuBLASLt;
// cuDNN may call either): while the program's call runs, this thread is "inside fumi", so
// those inner calls pass straight through and the program's call is the one counted and
// checked. hook.h's wrapper forwards unsampled calls through this too.
template <class F, class... A>
inline auto forwardReal(F f, A... a) {
  InsideScope inside;
  return f(a...);
}

}  // namespace fumi::hooks

namespace fumi::cuda {

// Scalars in `type` for a host-pointer-mode rerun.
struct HostScalars {
  unsigned char alpha[8] = {}, beta[8] = {};
  HostScalars(double a, double b, fumi_dtype type) {
    storeFromDouble(alpha, 0, a, type);
    storeFromDouble(beta, 0, b, type);
  }
};

// A library handle of the checker thread (the only thread that reruns), created there on first
// use by `create(H*)` (true: created, bound to the checker's stream); nullptr when the library
// cannot create one here. One handle per call site: each lambda type has its own.
template <class H, class Create>
H checkerHandle(Create create) {
  static H handle = nullptr;
  static bool tried = false;
  if (!tried) {
    tried = true;
    if (!create(&handle)) handle = nullptr;
  }
  return handle;
}

// Device-to-device copies into the checker's pool, enqueued on the call's stream. Blocks not
// released to a queued check go back to the pool.
class Snapshots {
 public:
  Snapshots(Checker& ck, cudaStream_t s) : ck_(ck), stream_(s) {}
  ~Snapshots() {
    for (void* b : blocks_) ck_.give(b);
  }
  Snapshots(const Snapshots&) = delete;
  Snapshots& operator=(const Snapshots&) = delete;

  void* copy(const void* src, size_t bytes) {
    if (!ok_) return nullptr;
    void* dst = ck_.take(bytes ? bytes : 1);
    if (!dst) return fail();
    blocks_.push_back(dst);
    if (bytes && ck_.api().cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_) !=
                     cudaSuccess)
      return fail();
    return dst;
  }
  // Matrices of `one` bytes each at `ptrs`, packed into one snapshot `stride` bytes apart
  // (pointer-array batches).
  void* copyBatches(size_t one, size_t stride, const std::vector<const void*>& ptrs) {
    if (!ok_) return nullptr;
    auto* dst = static_cast<unsigned char*>(ck_.take(stride * ptrs.size() + 1));
    if (!dst) return fail();
    blocks_.push_back(dst);
    for (size_t i = 0; i < ptrs.size(); ++i)
      if (ck_.api().cudaMemcpyAsync(dst + i * stride, ptrs[i], one, cudaMemcpyDeviceToDevice,
                                    stream_) != cudaSuccess)
        return fail();
    return dst;
  }
  bool ok() const { return ok_; }
  std::vector<void*> release() { return std::move(blocks_); }

 private:
  void* fail() {
    ok_ = false;
    return nullptr;
  }
  Checker& ck_;
  cudaStream_t stream_;
  std::vector<void*> blocks_;
  bool ok_ = true;
};

// The common path of a sampled device call on the program's thread; returns the library's
// status unchanged. The steps:
//   forward()                     the program's call, run exactly once whatever happens
//   before(Checker&, Snapshots&)  snapshot the inputs on `stream` before the call; returns
//                                 nullptr, or why the call cannot be checked
//   after(Snapshots&)             snapshot the outputs after a successful call (false: not checked)
//   build()                       the Call (std::unique_ptr), operands on the snapshots; may throw
//   hold(pending)                 optional: true when it took the built check to submit later
// Nothing is issued while `stream` captures a graph; the program's thread never synchronises,
// allocates or frees; fumi's own CUDA errors are cleared (LastErrorScope).
template <class Status, class Forward, class Before, class After, class Build>
Status checkedDeviceCall(const CallSite& cs, RuleSampler* sampler, cudaStream_t stream,
                         Status success, Forward&& forward, Before&& before, After&& after,
                         Build&& build,
                         const std::function<bool(std::unique_ptr<PendingCheck>&)>& hold = {}) {
  Checker* ck = nullptr;
  {
    InsideScope inside;
    ck = Checker::get();
  }
  if (!ck) {
    cs.site.countSkipped("CUDA checks unavailable");
    return forward();
  }
  const CudaApi& api = ck->api();
  auto pending = std::make_unique<PendingCheck>();
  Snapshots snaps(*ck, stream);
  // A call that will not be checked after its snapshot copies were queued on `stream`: their
  // blocks must not go back to the pool before the copies have run (they would write into
  // whatever the pool hands out next). `ready` is recorded behind them and the blocks go to the
  // checker as a discarded check, which waits for it and then gives them back. Where the event
  // cannot be recorded, the blocks are never given back (nothing here may synchronise).
  // `blocks`: those already taken from `snaps`.
  auto abandon = [&](cudaEvent_t ready, std::vector<void*> blocks = {}) {
    for (void* b : snaps.release()) blocks.push_back(b);
    if (blocks.empty()) {
      ck->returnEvent(ready);
      return;
    }
    if (api.cudaEventRecord(ready, stream) != cudaSuccess) return;
    auto gone = std::make_unique<PendingCheck>();
    gone->ready = ready;
    gone->blocks = std::move(blocks);
    gone->discard = true;
    ck->submit(std::move(gone));
  };
  {
    InsideScope inside;
    LastErrorScope keep_errors(api);
    // Capture safety: while the call's stream records a graph, fumi issues nothing at all.
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (api.cudaStreamIsCapturing(stream, &capture) != cudaSuccess ||
        capture != cudaStreamCaptureStatusNone) {
      cs.site.countSkipped("stream is capturing a graph");
      return forward();
    }
    pending->ready = ck->takeEvent();
    if (!pending->ready) {
      cs.site.countSkipped("check queue full");
      return forward();
    }
    const char* why = before(*ck, snaps);
    if (!why && !snaps.ok()) why = "no pool memory for snapshots";
    if (why) {
      cs.site.countSkipped(why);
      abandon(pending->ready);
      return forward();
    }
  }
  // Which kernels the call launches (CUPTI, when available): bracketed on this thread.
  KernelRecorder* kr = nullptr;
  {
    InsideScope inside;
    kr = KernelRecorder::get();
  }
  pending->kernels = kr ? kr->begin() : 0;
  const Status status = forward();
  if (kr) kr->end(pending->kernels);
  {
    InsideScope inside;
    LastErrorScope keep_errors(api);
    const bool ok = status == success && after(snaps) && snaps.ok() &&
                    api.cudaEventRecord(pending->ready, stream) == cudaSuccess;
    if (!ok) {
      // Not checked: the program's call failed (its status is returned as is) or a snapshot
      // could not be taken (pool share used up).
      cs.site.countSkipped(status != success ? "the call failed" : "no pool memory for snapshots");
      abandon(pending->ready);
      return status;
    }
    try {
      pending->call = build();
      pending->origin = engine()->captureOrigin(cs.site, cs.call_index);
      pending->sampler = sampler;
      pending->blocks = snaps.release();
      if (!hold || !hold(pending)) ck->submit(std::move(pending));
    } catch (const std::exception& e) {
      internalError(cs.site.name, e.what());
      // Else the queued check owns the event and the blocks.
      if (pending) abandon(pending->ready, std::move(pending->blocks));
    }
  }
  return status;
}

}  // namespace fumi::cuda
