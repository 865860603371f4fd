/* rp_main.c — calls rp_opener (which dlopens a library only its RUNPATH reaches), and, as a
 * control, first tries the same bare-name dlopen itself, which must fail: the main program's
 * own search path does not reach tests/rp/sub. Prints both outcomes. */
#include <dlfcn.h>
#include <stdio.h>

int rp_open_dep(void);

int main(void) {
  /* First the control: once the opener has loaded the library, a bare name matches it. */
  void* h = dlopen("libfumi_rp_dep.so", RTLD_NOW | RTLD_LOCAL);
  printf("from main: %s\n", h ? "found" : "not found");
  printf("via opener: %d\n", rp_open_dep());
  return 0;
}
