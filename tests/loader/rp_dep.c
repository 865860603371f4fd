/* rp_dep.c — a library that lives only in <build>/tests/rp/sub: found by a bare-name dlopen
 * only through the RUNPATH ($ORIGIN/sub) of rp_opener. */
__attribute__((visibility("default"))) int rp_dep_value(void) { return 42; }
