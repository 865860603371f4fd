/* blas_demo.c — an ordinary program calling OpenBLAS (sgemm_, dgemm_, sgemv_, dgemv_,
 * cblas_sgemm, cblas_dgemm). The preload tests run it with and without libfumi and compare its
 * output bit for bit, and read fumi's events.
 *   blas_demo ill      sgemm_ with catastrophic cancellation (exact result 1, fp32 gives 0)
 *   blas_demo well     well-conditioned sgemm_ (positive data)
 *   blas_demo layouts  every entry point, every transpose, padded leading dimensions, beta != 0,
 *                      row- and column-major cblas, negative vector increments
 *   blas_demo loop N   N small sgemm_ calls (sampling tests)
 *   blas_demo threads T N   T threads, each N small sgemm_ calls
 *   blas_demo empty    empty problems: sgemm_ with k = 0 (C = beta C), and with n = 0; dgemv_
 *                      with m = 0; then one well-conditioned sgemm_
 *   blas_demo overflow sgemm_ with finite inputs whose products overflow fp32 (Inf appears)
 *   blas_demo checksum 3 sgemm_ and 3 dgemm_ calls of 48x40 by 40x36 (transposes, beta != 0,
 *                      mixed-sign data); the checksum tests corrupt one of them (corrupt_blas.c)
 *   blas_demo exec     a well-conditioned sgemm_, then exec() of itself in mode "ill" (same pid)
 *   blas_demo fork     one sgemm_ in the parent, then fork(): one ill-conditioned sgemm_ in
 *                      the child (no exec), waited for by the parent
 *   blas_demo fork_exit  the same, the child ending with _exit() (no destructors run)
 *   blas_demo fork_big   the same, the parent's sgemm_ a large one (milliseconds: a check's
 *                      cost per second of op is learnt from it)
 *   blas_demo fork_term  one sgemm_ in the parent, then fork(): 3 small sgemm_ calls in the
 *                      child, which then waits; the parent ends it with SIGTERM (a pool worker)
 *   blas_demo linger MS  one sgemm_, then MS milliseconds of sleep before it exits (a process
 *                      that outlives the command that started it)
 *   blas_demo vfork    one sgemm_, then vfork() a child whose exec fails and which calls
 *                      _exit() on the parent's memory, then one more sgemm_ in the parent
 *   blas_demo sigterm exit|default  10 small sgemm_ calls, printing each one's number; with
 *                      "exit" a SIGTERM handler prints the calls done and calls exit(3)
 * Results are printed with %a so that any difference in any bit shows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

void sgemm_(const char*, const char*, const int*, const int*, const int*, const float*,
            const float*, const int*, const float*, const int*, const float*, float*, const int*);
void dgemm_(const char*, const char*, const int*, const int*, const int*, const double*,
            const double*, const int*, const double*, const int*, const double*, double*,
            const int*);
void sgemv_(const char*, const int*, const int*, const float*, const float*, const int*,
            const float*, const int*, const float*, float*, const int*);
void dgemv_(const char*, const int*, const int*, const double*, const double*, const int*,
            const double*, const int*, const double*, double*, const int*);
void cblas_sgemm(int, int, int, int, int, int, float, const float*, int, const float*, int, float,
                 float*, int);
void cblas_dgemm(int, int, int, int, int, int, double, const double*, int, const double*, int,
                 double, double*, int);

static unsigned lcg_state = 12345u;
static double next_uniform(void) { /* in [0.5, 1): positive data, no cancellation */
  lcg_state = lcg_state * 1664525u + 1013904223u;
  return 0.5 + 0.5 * (double)(lcg_state >> 8) / (double)(1u << 24);
}
static void fill_f(float* x, int n) { for (int i = 0; i < n; ++i) x[i] = (float)next_uniform(); }
static void fill_d(double* x, int n) { for (int i = 0; i < n; ++i) x[i] = next_uniform(); }
static void print_f(const char* tag, const float* x, int n) {
  printf("%s", tag);
  for (int i = 0; i < n; ++i) printf(" %a", (double)x[i]);
  printf("\n");
}
static void print_d(const char* tag, const double* x, int n) {
  printf("%s", tag);
  for (int i = 0; i < n; ++i) printf(" %a", x[i]);
  printf("\n");
}

static int ill(void) {
  /* Every C(i,j) = sum_p A(i,p) * B(p,j) = 1e8*s + 1 - 1e8*s = 1 exactly; in fp32 1e8 + 1 rounds
   * back to 1e8, so the computed result is 0: relative error 1. */
  enum { M = 8, N = 8, K = 3 };
  float a[M * K], b[K * N], c[M * N];
  for (int i = 0; i < M; ++i) {
    const float s = 1.0f + (float)i;
    a[i + 0 * M] = 1e8f * s;
    a[i + 1 * M] = 1.0f;
    a[i + 2 * M] = -1e8f * s;
  }
  for (int i = 0; i < K * N; ++i) b[i] = 1.0f;
  const int m = M, n = N, k = K;
  const float one = 1.0f, zero = 0.0f;
  sgemm_("N", "N", &m, &n, &k, &one, a, &m, b, &k, &zero, c, &m);
  print_f("ill", c, M * N);
  return 0;
}

static int well(void) {
  enum { M = 32, N = 24, K = 40 };
  float a[M * K], b[K * N], c[M * N];
  fill_f(a, M * K);
  fill_f(b, K * N);
  const int m = M, n = N, k = K;
  const float one = 1.0f, zero = 0.0f;
  sgemm_("N", "N", &m, &n, &k, &one, a, &m, b, &k, &zero, c, &m);
  print_f("well", c, M * N);
  return 0;
}

/* A well-conditioned 512x512x512 sgemm_ (milliseconds of op); prints a checksum of C. */
static int large(void) {
  enum { N = 512 };
  float* a = malloc(sizeof(float) * N * N);
  float* b = malloc(sizeof(float) * N * N);
  float* c = malloc(sizeof(float) * N * N);
  fill_f(a, N * N);
  fill_f(b, N * N);
  const int n = N;
  const float one = 1.0f, zero = 0.0f;
  sgemm_("N", "N", &n, &n, &n, &one, a, &n, b, &n, &zero, c, &n);
  double sum = 0;
  for (int i = 0; i < N * N; ++i) sum += c[i];
  printf("large %a\n", sum);
  free(a);
  free(b);
  free(c);
  return 0;
}

static int empty(void) {
  float a[4] = {1, 2, 3, 4}, b[4] = {1, 1, 1, 1}, c[4] = {1, 2, 3, 4};
  double da[4] = {1, 2, 3, 4}, dx[2] = {1, 1}, dy[2] = {5, 6};
  const int two = 2, zero_dim = 0, one_inc = 1;
  const float one = 1.0f, half = 0.5f;
  const double done = 1.0;
  sgemm_("N", "N", &two, &two, &zero_dim, &one, a, &two, b, &two, &half, c, &two);
  sgemm_("N", "N", &two, &zero_dim, &two, &one, a, &two, b, &two, &half, c, &two);
  dgemv_("N", &zero_dim, &two, &done, da, &two, dx, &one_inc, &done, dy, &one_inc);
  print_f("empty_c", c, 4);
  print_d("empty_y", dy, 2);
  return well();
}

static int layouts(void) {
  enum { M = 7, N = 5, K = 6, LD = 11, BIG = LD * 12 };
  const char* trans[2] = {"N", "T"};
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      const int m = M, n = N, k = K, ld = LD;
      float a[BIG], b[BIG], c[BIG];
      double da[BIG], db[BIG], dc[BIG];
      fill_f(a, BIG); fill_f(b, BIG); fill_f(c, BIG);
      fill_d(da, BIG); fill_d(db, BIG); fill_d(dc, BIG);
      const float alpha = 0.75f, beta = 0.5f;
      const double dalpha = 1.25, dbeta = -0.5;
      sgemm_(trans[ta], trans[tb], &m, &n, &k, &alpha, a, &ld, b, &ld, &beta, c, &ld);
      dgemm_(trans[ta], trans[tb], &m, &n, &k, &dalpha, da, &ld, db, &ld, &dbeta, dc, &ld);
      char tag[32];
      snprintf(tag, sizeof tag, "sgemm_%s%s", trans[ta], trans[tb]);
      print_f(tag, c, BIG);
      snprintf(tag, sizeof tag, "dgemm_%s%s", trans[ta], trans[tb]);
      print_d(tag, dc, BIG);
      for (int layout = 101; layout <= 102; ++layout) {
        fill_f(c, BIG);
        fill_d(dc, BIG);
        cblas_sgemm(layout, 111 + ta, 111 + tb, M, N, K, alpha, a, LD, b, LD, beta, c, LD);
        cblas_dgemm(layout, 111 + ta, 111 + tb, M, N, K, dalpha, da, LD, db, LD, 0.0, dc, LD);
        snprintf(tag, sizeof tag, "cblas_sgemm_%d%s%s", layout, trans[ta], trans[tb]);
        print_f(tag, c, BIG);
        snprintf(tag, sizeof tag, "cblas_dgemm_%d%s%s", layout, trans[ta], trans[tb]);
        print_d(tag, dc, BIG);
      }
    }
  }
  for (int t = 0; t < 2; ++t) {
    const int m = M, n = N, ld = LD, incx = 2, incy = -1;
    float a[BIG], x[BIG], y[BIG];
    double da[BIG], dx[BIG], dy[BIG];
    fill_f(a, BIG); fill_f(x, BIG); fill_f(y, BIG);
    fill_d(da, BIG); fill_d(dx, BIG); fill_d(dy, BIG);
    const float alpha = 1.5f, beta = 0.25f;
    const double dalpha = 0.3, dbeta = 2.0;  /* not dyadic: dgemv_'s result is rounded */
    sgemv_(trans[t], &m, &n, &alpha, a, &ld, x, &incx, &beta, y, &incy);
    dgemv_(trans[t], &m, &n, &dalpha, da, &ld, dx, &incx, &dbeta, dy, &incy);
    char tag[32];
    snprintf(tag, sizeof tag, "sgemv_%s", trans[t]);
    print_f(tag, y, BIG);
    snprintf(tag, sizeof tag, "dgemv_%s", trans[t]);
    print_d(tag, dy, BIG);
  }
  return 0;
}

static int overflow(void) {
  enum { S = 4 };
  float a[S * S], b[S * S], c[S * S];
  for (int i = 0; i < S * S; ++i) a[i] = b[i] = 1e30f;
  const int s = S;
  const float one = 1.0f, zero = 0.0f;
  sgemm_("N", "N", &s, &s, &s, &one, a, &s, b, &s, &zero, c, &s);
  print_f("overflow", c, S * S);
  return 0;
}

static int exec_self(const char* self) {
  well();
  fflush(stdout);
  execl(self, self, "ill", (char*)NULL);
  perror("execl");
  return 1;
}

/* `iters` small sgemm_ calls, `after_call` (if any) told after each how many are done; the sum of
 * one element of each result. */
static float small_sgemms(int iters, void (*after_call)(int done)) {
  enum { S = 8 };
  float a[S * S], b[S * S], c[S * S];
  fill_f(a, S * S);
  fill_f(b, S * S);
  const int s = S;
  const float one = 1.0f, zero = 0.0f;
  float sum = 0;
  for (int i = 0; i < iters; ++i) {
    sgemm_("N", "N", &s, &s, &s, &one, a, &s, b, &s, &zero, c, &s);
    sum += c[i % (S * S)];
    if (after_call) after_call(i + 1);
  }
  return sum;
}

static int loop(int iters) {
  printf("loop %d %a\n", iters, (double)small_sgemms(iters, NULL));
  return 0;
}

static volatile sig_atomic_t g_calls_done = 0;

static void exit_on_sigterm(int sig) {
  (void)sig;
  printf("SIGTERM after %d calls\n", (int)g_calls_done);
  exit(3);
}

static void print_call(int done) {
  g_calls_done = done;
  printf("call %d\n", done);
}

static int sigterm(const char* disposition) {
  setvbuf(stdout, NULL, _IOLBF, 0);  /* what was printed survives dying of the signal */
  if (!strcmp(disposition, "exit")) signal(SIGTERM, exit_on_sigterm);
  small_sgemms(10, print_call);
  return 0;
}

static void* thread_main(void* arg) {
  const int iters = *(const int*)arg;
  enum { S = 8 };
  float a[S * S], b[S * S], c[S * S];
  for (int i = 0; i < S * S; ++i) a[i] = b[i] = 0.5f + (float)i / 128.0f;
  const int s = S;
  const float one = 1.0f, zero = 0.0f;
  for (int i = 0; i < iters; ++i) sgemm_("N", "N", &s, &s, &s, &one, a, &s, b, &s, &zero, c, &s);
  return NULL;
}

static int threads(int nthreads, int iters) {
  pthread_t t[64];
  if (nthreads > 64) nthreads = 64;
  for (int i = 0; i < nthreads; ++i) pthread_create(&t[i], NULL, thread_main, &iters);
  for (int i = 0; i < nthreads; ++i) pthread_join(t[i], NULL);
  printf("threads %d x %d done\n", nthreads, iters);
  return 0;
}

static int forked(int with_exit, int big) {
  if (big)
    large();
  else
    well();
  fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    ill();
    fflush(stdout);
    if (with_exit) _exit(0);
    exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

static int fork_terminated(void) {
  well();
  fflush(stdout);
  int ready[2];
  if (pipe(ready) != 0) return 1;
  const pid_t pid = fork();
  if (pid == 0) {
    small_sgemms(3, NULL);
    const char one = 1;
    if (write(ready[1], &one, 1) != 1) _exit(1);
    for (;;) pause();
  }
  char got = 0;
  if (read(ready[0], &got, 1) != 1) return 1;
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  printf("child %s\n", WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM ? "ended by SIGTERM"
                                                                          : "ended otherwise");
  return 0;
}

static int vforked(void) {
  well();  /* fumi is active before the vfork */
  fflush(stdout);
  const pid_t pid = vfork();
  if (pid == 0) {
    execl("/nonexistent/fumi-test", "fumi-test", (char*)NULL);
    _exit(127);  /* what posix_spawn and Python's subprocess do when exec fails */
  }
  int status = 0;
  waitpid(pid, &status, 0);
  printf("child status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return well();
}

static int checksum(void) {
  enum { M = 48, N = 36, K = 40, LD = 50, BIG = LD * 50 };
  static float a[BIG], b[BIG], c[BIG];
  static double da[BIG], db[BIG], dc[BIG];
  const char* trans[3][2] = {{"N", "N"}, {"T", "N"}, {"N", "T"}};
  for (int t = 0; t < 3; ++t) {
    fill_f(a, BIG); fill_f(b, BIG); fill_f(c, BIG);
    fill_d(da, BIG); fill_d(db, BIG); fill_d(dc, BIG);
    for (int i = 0; i < BIG; ++i) { a[i] -= 0.75f; da[i] -= 0.75; }  /* mixed signs */
    const int m = M, n = N, k = K, ld = LD;
    const float alpha = 1.0f, beta = t == 1 ? 0.5f : 0.0f;
    const double dalpha = -0.5, dbeta = t == 2 ? 2.0 : 0.0;
    sgemm_(trans[t][0], trans[t][1], &m, &n, &k, &alpha, a, &ld, b, &ld, &beta, c, &ld);
    dgemm_(trans[t][0], trans[t][1], &m, &n, &k, &dalpha, da, &ld, db, &ld, &dbeta, dc, &ld);
    print_f("checksum_s", c, LD * N);
    print_d("checksum_d", dc, LD * N);
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s ill|well|layouts|loop N\n", argv[0]);
    return 2;
  }
  if (!strcmp(argv[1], "ill")) return ill();
  if (!strcmp(argv[1], "well")) return well();
  if (!strcmp(argv[1], "layouts")) return layouts();
  if (!strcmp(argv[1], "loop") && argc > 2) return loop(atoi(argv[2]));
  if (!strcmp(argv[1], "threads") && argc > 3) return threads(atoi(argv[2]), atoi(argv[3]));
  if (!strcmp(argv[1], "fork")) return forked(0, 0);
  if (!strcmp(argv[1], "fork_exit")) return forked(1, 0);
  if (!strcmp(argv[1], "fork_big")) return forked(0, 1);
  if (!strcmp(argv[1], "fork_term")) return fork_terminated();
  if (!strcmp(argv[1], "vfork")) return vforked();
  if (!strcmp(argv[1], "linger") && argc > 2) {
    loop(1);
    usleep((useconds_t)atoi(argv[2]) * 1000u);
    return 0;
  }
  if (!strcmp(argv[1], "overflow")) return overflow();
  if (!strcmp(argv[1], "empty")) return empty();
  if (!strcmp(argv[1], "checksum")) return checksum();
  if (!strcmp(argv[1], "exec")) return exec_self(argv[0]);
  if (!strcmp(argv[1], "sigterm") && argc > 2) return sigterm(argv[2]);
  fprintf(stderr, "unknown mode %s\n", argv[1]);
  return 2;
}
