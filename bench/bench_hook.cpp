// bench_hook.cpp — cost of one call to sgemm_ as the program sees it, in ns/call.
//
// Linked to libfumi_bench_nullblas (an sgemm_ that does nearly nothing), so that the time is
// the call itself: run plainly it is the PLT call into nullblas; run under
// LD_PRELOAD=libfumi.so it is libfumi's wrapper (guard, counter, decision pointer, maybe the
// policy's sampling decision) plus the forwarded call. bench/run.sh runs it once per case and
// subtracts the plain time. Options, method and output: hook_timing.h.
#include "fortran_blas.h"
#include "hook_timing.h"

namespace {

// One thread's operands, on their own cache lines so threads share nothing but libfumi's state.
struct alignas(64) Operands {
  int m = 8, n = 8, k = 8, ld = 8;
  float alpha = 1.0f, beta = 0.0f;
  float a[64], b[64], c[64];
  Operands() {
    for (int i = 0; i < 64; ++i) {
      a[i] = 1.0f;
      b[i] = 1.0f;
      c[i] = 0.0f;
    }
  }
};

void callBatch(Operands& o, long calls) {
  for (long i = 0; i < calls; ++i)
    sgemm_("N", "N", &o.m, &o.n, &o.k, &o.alpha, o.a, &o.ld, o.b, &o.ld, &o.beta, o.c, &o.ld, 1, 1);
}

}  // namespace

int main(int argc, char** argv) {
  return fumi_bench::runHookBench<Operands>("bench_hook", argc, argv, callBatch);
}
