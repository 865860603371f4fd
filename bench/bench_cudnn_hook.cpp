// bench_cudnn_hook.cpp — cost of one call to cudnnBackendExecute as the program sees it, in
// ns/call: bench_hook's measurement (hook_timing.h) for libfumi's cuDNN backend hook.
//
// Linked by soname to libcudnn.so.9 — in the build, the no-op stand-in of nullcudnn.cpp — so
// that the call goes through the PLT as in a program linked against the real cuDNN, and
// LD_PRELOAD=libfumi.so interposes it the same way. Each thread finalizes an execution plan and
// a variant pack once, through the backend API as a framework does (libfumi keeps their
// shadows), then executes the plan on the pack back to back; the handle is a dummy.
// bench/run.sh runs it once per case and subtracts the plain time. Options, method and output:
// hook_timing.h.
#include <cudnn.h>

#include "hook_timing.h"

namespace {

struct alignas(64) Operands {
  cudnnHandle_t handle = reinterpret_cast<cudnnHandle_t>(this);
  cudnnBackendDescriptor_t plan = nullptr, pack = nullptr;
  Operands() {
    cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
    cudnnBackendFinalize(plan);
    cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
    cudnnBackendFinalize(pack);
  }
  ~Operands() {
    cudnnBackendDestroyDescriptor(pack);
    cudnnBackendDestroyDescriptor(plan);
  }
  Operands(const Operands&) = delete;
  Operands& operator=(const Operands&) = delete;
};

void callBatch(Operands& o, long calls) {
  for (long i = 0; i < calls; ++i) cudnnBackendExecute(o.handle, o.plan, o.pack);
}

}  // namespace

int main(int argc, char** argv) {
  return fumi_bench::runHookBench<Operands>("bench_cudnn_hook", argc, argv, callBatch);
}
