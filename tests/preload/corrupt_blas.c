/* corrupt_blas.c — a planted silent data corruption for the checksum tests. Preloaded after
 * libfumi (LD_PRELOAD=libfumi.so:libcorrupt_blas.so; alone for the run without fumi), it wraps
 * sgemm_ and dgemm_, forwards to the real BLAS, and on the calls FUMI_TEST_CORRUPT names
 * ("sgemm_:1,dgemm_:0": the second sgemm_ call and the first dgemm_ call, 0-based) multiplies
 * C(m/2, n/2) by 4, as an exponent bit flip would; "*" corrupts every call (fumi's reruns,
 * which go through this shim too and would shift the counts, included). The program cannot
 * tell; fumi's checks see the corrupted C as the call's result. Built by the test itself
 * (test_preload.py). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*sgemm_fn)(const char*, const char*, const int*, const int*, const int*,
                         const float*, const float*, const int*, const float*, const int*,
                         const float*, float*, const int*, size_t, size_t);
typedef void (*dgemm_fn)(const char*, const char*, const int*, const int*, const int*,
                         const double*, const double*, const int*, const double*, const int*,
                         const double*, double*, const int*, size_t, size_t);

/* Whether call `index` of `op` is one FUMI_TEST_CORRUPT names. */
static int corrupted(const char* op, int index) {
  const char* spec = getenv("FUMI_TEST_CORRUPT");
  if (spec && !strcmp(spec, "*")) return 1;
  char want[64];
  snprintf(want, sizeof want, "%s:%d", op, index);
  for (const char* p = spec; p && *p;) {
    const char* end = strchr(p, ',');
    const size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == strlen(want) && !strncmp(p, want, len)) return 1;
    p = end ? end + 1 : NULL;
  }
  return 0;
}

void sgemm_(const char* ta, const char* tb, const int* m, const int* n, const int* k,
            const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
            const float* beta, float* c, const int* ldc, size_t la, size_t lb) {
  static int calls;
  ((sgemm_fn)dlsym(RTLD_NEXT, "sgemm_"))(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                                         la, lb);
  if (corrupted("sgemm_", calls++)) c[*m / 2 + (*n / 2) * *ldc] *= 4.0f;
}

void dgemm_(const char* ta, const char* tb, const int* m, const int* n, const int* k,
            const double* alpha, const double* a, const int* lda, const double* b,
            const int* ldb, const double* beta, double* c, const int* ldc, size_t la, size_t lb) {
  static int calls;
  ((dgemm_fn)dlsym(RTLD_NEXT, "dgemm_"))(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                                         la, lb);
  if (corrupted("dgemm_", calls++)) c[*m / 2 + (*n / 2) * *ldc] *= 4.0;
}
