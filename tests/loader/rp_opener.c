/* rp_opener.c — dlopens "libfumi_rp_dep.so" by bare name: only its own RUNPATH ($ORIGIN/sub)
 * can resolve it, the way cuDNN 9 loads its sub-libraries. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

__attribute__((visibility("default"))) int rp_open_dep(void) {
  void* h = dlopen("libfumi_rp_dep.so", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "rp_opener: %s\n", dlerror());
    return -1;
  }
  int (*fn)(void) = NULL;
  void* sym = dlsym(h, "rp_dep_value");
  memcpy(&fn, &sym, sizeof fn);
  return fn ? fn() : -2;
}
