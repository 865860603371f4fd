// bench_cublas_checked: wall time of `calls` cublasSgemm calls, n x n x n in device memory,
// synchronised once at the end (bench/gpu.sh; needs a GPU). Under libfumi the checks run on its
// checker thread: this time is what the program waits for (snapshot copies, queueing), and
// the checks' own time comes from fumi's summary (check_s).
//   bench_cublas_checked [n] [calls]   prints "n=N calls=C ms_per_call=T"
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                           \
  do {                                                                     \
    const auto s_ = (x);                                                   \
    if (static_cast<int>(s_) != 0) {                                       \
      std::fprintf(stderr, "%s: status %d\n", #x, static_cast<int>(s_));   \
      std::exit(2);                                                        \
    }                                                                      \
  } while (0)

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 1024;
  const int calls = argc > 2 ? std::atoi(argv[2]) : 10;
  cublasHandle_t h = nullptr;
  CHECK(cublasCreate(&h));
  // Well-conditioned data, uniform-looking in [0.5, 1), as bench_checked's.
  std::vector<float> host(static_cast<size_t>(n) * n);
  for (size_t i = 0; i < host.size(); ++i)
    host[i] = 0.5f + 0.5f * static_cast<float>((i * 2654435761u) % 1000) / 1000.f;
  const size_t bytes = host.size() * sizeof(float);
  void *a = nullptr, *b = nullptr, *c = nullptr;
  CHECK(cudaMalloc(&a, bytes));
  CHECK(cudaMalloc(&b, bytes));
  CHECK(cudaMalloc(&c, bytes));
  CHECK(cudaMemcpy(a, host.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b, host.data(), bytes, cudaMemcpyHostToDevice));
  const float one = 1, zero = 0;
  auto gemm = [&] {
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, static_cast<float*>(a), n,
                      static_cast<float*>(b), n, &zero, static_cast<float*>(c), n));
  };
  gemm();  // warm-up: handle, heuristics, clocks
  CHECK(cudaDeviceSynchronize());
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) gemm();
  CHECK(cudaDeviceSynchronize());
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("n=%d calls=%d ms_per_call=%.3f\n", n, calls, ms / calls);
  return 0;
}
