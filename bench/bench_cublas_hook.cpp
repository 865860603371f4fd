// bench_cublas_hook.cpp — cost of one call to cublasSgemm_v2 as the program sees it, in
// ns/call: bench_hook's measurement (hook_timing.h) for libfumi's cuBLAS hooks.
//
// Linked by soname to libcublas.so.13 — in the build, the no-op stand-in of nullcuda.cpp — so
// that the call goes through the PLT as in a program linked against the real cuBLAS, and
// LD_PRELOAD=libfumi.so interposes it the same way. The handle and the matrices are dummies:
// the stand-in reads only the scalars (host pointer mode), never A, B or C, which in a real
// program would be device memory. bench/run.sh runs it once per case and subtracts the plain
// time. Options, method and output: hook_timing.h.
#include <cublas_v2.h>

#include "hook_timing.h"

namespace {

// One thread's operands, on their own cache lines so threads share nothing but libfumi's state.
// `handle` only has to be non-null: nothing reads what it points to.
struct alignas(64) Operands {
  cublasHandle_t handle = reinterpret_cast<cublasHandle_t>(this);
  int m = 8, n = 8, k = 8, ld = 8;
  float alpha = 1.0f, beta = 0.0f;
  float a[64]{}, b[64]{}, c[64]{};
};

void callBatch(Operands& o, long calls) {
  for (long i = 0; i < calls; ++i)
    cublasSgemm_v2(o.handle, CUBLAS_OP_N, CUBLAS_OP_N, o.m, o.n, o.k, &o.alpha, o.a, o.ld, o.b,
                   o.ld, &o.beta, o.c, o.ld);
}

}  // namespace

int main(int argc, char** argv) {
  return fumi_bench::runHookBench<Operands>("bench_cublas_hook", argc, argv, callBatch);
}
