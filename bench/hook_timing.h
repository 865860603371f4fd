// hook_timing.h — the timing harness of the hook-overhead benchmarks (bench_hook on sgemm_,
// bench_cublas_hook on cublasSgemm_v2). Each program supplies only its operands and the batch
// of calls being timed; options, threads, timing and the output line are the same, here.
//
// Method: a batch of --calls back-to-back calls is timed with steady_clock; --reps batches are
// run and the minimum and median batch time per call are printed (min-of-N: the least
// disturbed batch, the usual estimate of a short operation's own cost). With --threads T, T
// threads run their batches at the same time (each with its own operands; a spin barrier
// starts every batch together) and a batch's time is the slowest thread's.
//
// A multi-threaded batch counts only when the threads' timed loops overlapped for at least 90%
// of the slowest one's time (on a busy machine they may not have run at the same time at all).
//
// Output (one line): threads=T calls=N reps=R overlapped=K min_ns=X median_ns=Y
// (K: batches whose threads overlapped; all R with one thread.)
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace fumi_bench {

using Clock = std::chrono::steady_clock;

struct HookOptions {
  int threads = 1;
  long calls = 200000;
  int reps = 50;
  long warmup = 20000;
};

inline double nsPerCall(Clock::duration d, long calls) {
  return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()) /
         static_cast<double>(calls);
}

inline long parseLong(const char* prog, const char* flag, const char* text, long lo) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (!end || *end != '\0' || v < lo) {
    std::fprintf(stderr, "%s: %s needs an integer >= %ld, got '%s'\n", prog, flag, lo, text);
    std::exit(2);
  }
  return v;
}

inline HookOptions parseHookOptions(const char* prog, int argc, char** argv) {
  HookOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "usage: %s [--threads T] [--calls N] [--reps R] [--warmup W]\n", prog);
      std::exit(2);
    }
    const char* v = argv[++i];
    if (flag == "--threads")
      o.threads = static_cast<int>(parseLong(prog, "--threads", v, 1));
    else if (flag == "--calls")
      o.calls = parseLong(prog, "--calls", v, 1);
    else if (flag == "--reps")
      o.reps = static_cast<int>(parseLong(prog, "--reps", v, 1));
    else if (flag == "--warmup")
      o.warmup = parseLong(prog, "--warmup", v, 0);
    else {
      std::fprintf(stderr, "%s: unknown option %s\n", prog, flag.c_str());
      std::exit(2);
    }
  }
  return o;
}

// The whole program: parse the options, warm up, time the batches, print the line.
// `Operands` is one thread's arguments (default-constructible; give it alignas(64) so threads
// share no cache line); `callBatch(ops, n)` makes n back-to-back calls with them.
template <class Operands>
int runHookBench(const char* prog, int argc, char** argv, void (*callBatch)(Operands&, long)) {
  const HookOptions opt = parseHookOptions(prog, argc, argv);
  const auto nthreads = static_cast<size_t>(opt.threads);

  // Warm-up on the main thread: the first call initialises libfumi (policy, plugins) and, with
  // an every:N policy, is the one sampled call (index 0). None of it is timed.
  std::vector<Operands> ops(nthreads);
  callBatch(ops[0], opt.warmup);

  std::vector<double> per_rep, apart;  // ns/call of batches run together / not together
  std::vector<Clock::time_point> begin(nthreads), end(nthreads);
  // Per-rep barrier driven by the main thread: every worker reports ready, the main thread
  // opens rep r, all threads time their batch, and the main thread waits for all of them.
  std::atomic<int> ready{0};
  std::atomic<int> start_rep{-1};
  std::atomic<int> done{0};
  const int workers = opt.threads - 1;
  std::vector<std::thread> pool;
  for (size_t t = 1; t < nthreads; ++t) {
    pool.emplace_back([&, t] {
      callBatch(ops[t], opt.warmup);  // this thread's own warm-up (TLS, cache lines)
      for (int r = 0; r < opt.reps; ++r) {
        ready.fetch_add(1, std::memory_order_acq_rel);
        while (start_rep.load(std::memory_order_acquire) < r) {
        }
        begin[t] = Clock::now();
        callBatch(ops[t], opt.calls);
        end[t] = Clock::now();
        done.fetch_add(1, std::memory_order_acq_rel);
      }
    });
  }
  for (int r = 0; r < opt.reps; ++r) {
    while (ready.load(std::memory_order_acquire) < workers * (r + 1)) {
    }
    start_rep.store(r, std::memory_order_release);
    begin[0] = Clock::now();
    callBatch(ops[0], opt.calls);
    end[0] = Clock::now();
    // Wait for the other threads' rep r before the next rep starts.
    while (done.load(std::memory_order_acquire) < workers * (r + 1)) {
    }
    Clock::duration slowest{0};
    Clock::time_point last_begin = begin[0], first_end = end[0];
    for (size_t t = 0; t < nthreads; ++t) {
      slowest = std::max(slowest, end[t] - begin[t]);
      last_begin = std::max(last_begin, begin[t]);
      first_end = std::min(first_end, end[t]);
    }
    // A batch counts only if the threads really ran at the same time (a loaded machine may run
    // them one after the other): they must overlap for >= 90% of the slowest one's time.
    const bool together = nthreads == 1 || (first_end - last_begin) * 10 >= slowest * 9;
    if (together)
      per_rep.push_back(nsPerCall(slowest, opt.calls));
    else
      apart.push_back(nsPerCall(slowest, opt.calls));
  }
  for (auto& th : pool) th.join();

  // If no batch overlapped (a very busy machine), fall back to all of them; `overlapped` says
  // how many batches the figures come from.
  const size_t overlapped = per_rep.size();
  if (per_rep.empty()) per_rep = apart;
  std::sort(per_rep.begin(), per_rep.end());
  const double median = per_rep[per_rep.size() / 2];
  std::printf("threads=%d calls=%ld reps=%d overlapped=%zu min_ns=%.3f median_ns=%.3f\n",
              opt.threads, opt.calls, opt.reps, overlapped, per_rep.front(), median);
  return 0;
}

}  // namespace fumi_bench
