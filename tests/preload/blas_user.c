/* blas_user.c — a shared library that calls sgemm_ through its PLT. local_scope.c loads it with
 * dlopen(RTLD_LOCAL), so its libblas dependency lives only in that local scope, as libblas does
 * under Python's torch: libfumi must still find the real sgemm_ there. */
void sgemm_(const char*, const char*, const int*, const int*, const int*, const float*,
            const float*, const int*, const float*, const int*, const float*, float*, const int*);

__attribute__((visibility("default"))) float blas_user_cancel(void) {
  /* 1e8 + 1 - 1e8 in fp32: 0 instead of 1. */
  const float a[3] = {1e8f, 1.0f, -1e8f}, b[3] = {1.0f, 1.0f, 1.0f};
  float c = 0.0f;
  const int one_i = 1, k = 3;
  const float one = 1.0f, zero = 0.0f;
  sgemm_("N", "N", &one_i, &one_i, &k, &one, a, &one_i, b, &k, &zero, &c, &one_i);
  return c;
}
