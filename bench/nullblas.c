/* nullblas.c — a stand-in BLAS for the hook-overhead benchmark (bench_hook).
 *
 * It defines sgemm_ with the gfortran calling convention (hidden CHARACTER lengths included)
 * and does almost nothing: it reads the scalar arguments and writes one element of C, so that
 * a call costs a few cycles and what bench_hook measures under LD_PRELOAD is the hook, not the
 * multiplication. The result is NOT a matrix product. */
#include <stddef.h>

#if defined(__GNUC__)
#define NULLBLAS_EXPORT __attribute__((visibility("default")))
#else
#define NULLBLAS_EXPORT
#endif

NULLBLAS_EXPORT void sgemm_(const char* ta, const char* tb, const int* m, const int* n,
                            const int* k, const float* alpha, const float* a, const int* lda,
                            const float* b, const int* ldb, const float* beta, float* c,
                            const int* ldc, size_t la, size_t lb) {
  (void)ta;
  (void)tb;
  (void)la;
  (void)lb;
  if (*m <= 0 || *n <= 0 || *k <= 0 || *lda <= 0 || *ldb <= 0 || *ldc <= 0) return;
  c[0] = *alpha * a[0] * b[0] + *beta * c[0];
}
