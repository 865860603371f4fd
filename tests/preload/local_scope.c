/* local_scope.c — libraries loaded with dlopen(RTLD_LOCAL), their functions called through
 * dlsym. This program itself does not link BLAS.
 * Usage: local_scope /path/to/libblas_user.so     calls blas_user_cancel (which calls sgemm_)
 *        local_scope LIBBLAS sgemm                looks up sgemm_ in LIBBLAS itself and calls it
 *                                                 on a 2x2 problem (prints C in hex) */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef void (*sgemm_fn)(const char*, const char*, const int*, const int*, const int*,
                         const float*, const float*, const int*, const float*, const int*,
                         const float*, float*, const int*);

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  if (argc > 2 && strcmp(argv[2], "sgemm") == 0) {
    sgemm_fn sgemm = NULL;
    void* sym = dlsym(h, "sgemm_");
    memcpy(&sgemm, &sym, sizeof sgemm);
    if (!sgemm) return 1;
    const int n = 2;
    const float one = 1.0f, zero = 0.0f;
    const float a[4] = {1.0f, 3.0f, 2.0f, 4.0f}, b[4] = {0.5f, -1.0f, 0.25f, 2.0f};
    float c[4] = {0};
    sgemm("N", "N", &n, &n, &n, &one, a, &n, b, &n, &zero, c, &n);
    printf("sgemm %a %a %a %a\n", (double)c[0], (double)c[1], (double)c[2], (double)c[3]);
    return 0;
  }
  float (*fn)(void) = NULL;
  void* sym = dlsym(h, "blas_user_cancel");
  memcpy(&fn, &sym, sizeof fn); /* ISO C has no object-to-function pointer cast */
  if (!fn) return 1;
  printf("local %a\n", (double)fn());
  return 0;
}
