// bench_checked.cpp — time per sgemm_ call on real OpenBLAS, for square sizes n.
//
// bench/run.sh runs it plainly and under LD_PRELOAD=libfumi.so with policies that check every
// call (sample: { every: 1 }) with one check set each, and divides: the factor is what a
// checked call costs relative to the plain call.
//
// Data: A and B uniform in [0.5, 1) (positive, so no cancellation: a well-conditioned product),
// C = A·B with alpha = 1, beta = 0. Each call is timed on its own; after two untimed warm-up
// calls (libfumi's initialisation, OpenBLAS's thread start-up) calls are made until both
// --min-calls calls and --min-time seconds are reached, or --max-calls. The median and the
// minimum per-call time are printed, one line per size:
//   n=N calls=C median_us=X min_us=Y
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "fortran_blas.h"


namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::vector<int> sizes{64, 256, 512};
  double min_time = 0.5;
  long min_calls = 5;
  long max_calls = 2000;
};

void usage() {
  std::fprintf(stderr,
               "usage: bench_checked [--sizes 64,256,512] [--min-time SECONDS] "
               "[--min-calls N] [--max-calls N]\n");
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage();
    const std::string v = argv[++i];
    try {
      if (flag == "--sizes") {
        o.sizes.clear();
        size_t pos = 0;
        while (pos <= v.size()) {
          const size_t comma = v.find(',', pos);
          const std::string item =
              v.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
          const int n = std::stoi(item);
          if (n < 1) usage();
          o.sizes.push_back(n);
          if (comma == std::string::npos) break;
          pos = comma + 1;
        }
      } else if (flag == "--min-time") {
        o.min_time = std::stod(v);
      } else if (flag == "--min-calls") {
        o.min_calls = std::stol(v);
      } else if (flag == "--max-calls") {
        o.max_calls = std::stol(v);
      } else {
        usage();
      }
    } catch (const std::exception&) {
      usage();
    }
  }
  if (o.min_calls < 1 || o.max_calls < o.min_calls || o.min_time < 0) usage();
  return o;
}

unsigned g_lcg = 12345u;
float nextUniform() {  // in [0.5, 1)
  g_lcg = g_lcg * 1664525u + 1013904223u;
  return 0.5f + 0.5f * static_cast<float>(g_lcg >> 8) / static_cast<float>(1u << 24);
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  for (const int n : opt.sizes) {
    const size_t elems = static_cast<size_t>(n) * static_cast<size_t>(n);
    std::vector<float> a(elems), b(elems), c(elems, 0.0f);
    for (float& x : a) x = nextUniform();
    for (float& x : b) x = nextUniform();
    const float alpha = 1.0f, beta = 0.0f;
    auto call = [&] {
      sgemm_("N", "N", &n, &n, &n, &alpha, a.data(), &n, b.data(), &n, &beta, c.data(), &n, 1, 1);
    };
    call();
    call();

    std::vector<double> us;
    const auto start = Clock::now();
    for (;;) {
      const auto t0 = Clock::now();
      call();
      const auto t1 = Clock::now();
      us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      const auto calls = static_cast<long>(us.size());
      if (calls >= opt.max_calls) break;
      if (calls >= opt.min_calls &&
          std::chrono::duration<double>(t1 - start).count() >= opt.min_time)
        break;
    }
    volatile float sink = c[elems / 2];  // the result is used
    (void)sink;
    std::sort(us.begin(), us.end());
    std::printf("n=%d calls=%zu median_us=%.2f min_us=%.2f\n", n, us.size(), us[us.size() / 2],
                us.front());
    std::fflush(stdout);
  }
  return 0;
}
