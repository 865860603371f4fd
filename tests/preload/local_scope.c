/* local_scope.c — loads blas_user (and with it libblas) with dlopen(RTLD_LOCAL), then calls it.
 * This program itself does not link BLAS. Usage: local_scope /path/to/libblas_user.so */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  float (*fn)(void) = NULL;
  void* sym = dlsym(h, "blas_user_cancel");
  memcpy(&fn, &sym, sizeof fn); /* ISO C has no object-to-function pointer cast */
  if (!fn) return 1;
  printf("local %a\n", (double)fn());
  return 0;
}
