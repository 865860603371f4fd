// cuda_gemm.cpp — a CUDA program for fumi's CUDA tests: it calls every GEMM entry point fumi
// hooks, the way frameworks do, and prints one line per call: the case name and a hash of the
// output bytes (so runs with and without libfumi can be compared bit for bit).
//
// Built against the real CUDA 13 headers and linked against the REAL libcudart/libcublas/
// libcublasLt; on machines without a GPU the tests preload the simulated device's stand-ins
// (tests/simdevice), on a GPU it runs as is. Scenarios (argv[1]):
//   sweep    every hooked entry point x every transpose pair x data types, leading dimensions
//            larger than needed, strided batches with gaps, pointer-array batches, cuBLASLt
//            with row/column order, epilogues and batches. Operands hold multiples of 1/4 in
//            [-1, 1] (C: multiples of 1/2), alpha 1, beta 1/2, k 8: every result is exact in
//            every type, so a correct rerun matches to the last bit.
//   tf32     cublasSgemm_v2 on inputs 1 + 2^-11 + 2^-13 (not representable in TF32) twice:
//            default math (exact) and CUBLAS_TF32_TENSOR_OP_MATH (off by 3.7e-4).
//   fault    cublasSgemm_v2 of shape 7x6x5 and cublasLtMatmul 9x3x4 (f32): plant faults with
//            FUMI_SIM_FAULTS for these shapes.
//   capture  cublasSgemm_v2 and cublasLtMatmul recorded into a CUDA graph (global capture
//            mode), then the graph launched; prints the simulator's capture-violation count.
//   device-scalars  cublasSgemm_v2 and cublasLtMatmul with alpha/beta in device memory.
//   profiler cublasSgemm_v2 three times, then the program becomes a CUPTI client itself, as
//            torch.profiler does mid-run (cuptiSubscribe_v2 + launch callbacks, resolved from
//            the global scope as a program linked against libcupti binds them), then three
//            more; prints the subscribe's result and the launches its subscriber saw on this
//            thread.
//   exit     twelve cublasSgemm_v2 calls, then main returns at once, the checks of a sampled
//            run still queued: they must finish before the libraries' exit handlers tear them
//            down. On the simulated device an exit handler registered after the calls stands
//            for that teardown (cublasFumiSimTeardown: a GEMM after it ends the process).
//   poolrace a stream held back by a host function while calls are issued on it and on a
//            second stream: a cublasSgemm_v2 (its check waits for the held stream), a 64^3
//            bias-epilogue cublasLtMatmul on row-major layouts that cuBLASLt declines
//            (NOT_SUPPORTED, after fumi queued the snapshot copies of its operands), a small
//            cublasSgemm_v2, then on the free stream the same matmul on column-major layouts
//            with other operands; once that has run, the held stream is released. The declined
//            call's pool blocks must not be handed out before its queued copies have run (they
//            would land in the last matmul's snapshots, which its check reads after them).
//   errors   a GEMM with invalid arguments and a cublasLtMatmul with an epilogue fumi does not
//            model (the library's status must come back unchanged)
//            and a cudaGetLastError probe (fumi's own CUDA calls must leave no error behind).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <dlfcn.h>

#include "device_test.h"

#include <atomic>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace {

#define CHECK_BLAS(x) CHECK_STATUS(x, CUBLAS_STATUS_SUCCESS)

size_t sizeOf(cudaDataType t) {
  switch (t) {
    case CUDA_R_64F: return 8;
    case CUDA_R_32F: return 4;
    default: return 2;
  }
}

const char* typeName(cudaDataType t) {
  switch (t) {
    case CUDA_R_64F: return "f64";
    case CUDA_R_32F: return "f32";
    case CUDA_R_16F: return "f16";
    case CUDA_R_16BF: return "bf16";
    default: return "?";
  }
}

devtest::Elem elemOf(cudaDataType t) {
  using devtest::Elem;
  return t == CUDA_R_64F ? Elem::kF64 : t == CUDA_R_32F ? Elem::kF32
                                      : t == CUDA_R_16F ? Elem::kF16 : Elem::kBF16;
}

// `elements` values of type t in device memory: value(i) at element i.
template <class F>
void* upload(cudaDataType t, size_t elements, F value) {
  return devtest::upload(elemOf(t), elements, value);
}

// Multiples of 1/4 in [-1, 1] (a fixed pattern per operand `salt`).
double quarter(size_t i, int salt) {
  return static_cast<double>(static_cast<int>((i * 7 + static_cast<size_t>(salt) * 3) % 9) - 4) /
         4.0;
}

using devtest::printHash;

// One GEMM's operands: column-major op(A) m x k, op(B) k x n, C m x n, with leading dimensions
// 2 more than needed and batch strides 7 elements more than one matrix.
struct Gemm {
  int m = 6, n = 5, k = 8, batch = 1;
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  cudaDataType ab = CUDA_R_32F, c = CUDA_R_32F;
  int lda() const { return (ta == CUBLAS_OP_N ? m : k) + 2; }
  int ldb() const { return (tb == CUBLAS_OP_N ? k : n) + 2; }
  int ldc() const { return m + 2; }
  // Batch strides with a gap of 7 to 14 elements after each matrix, rounded to 8 elements so
  // that every matrix starts 16-byte aligned: pointer arrays (cublasGemmBatchedEx) list these
  // matrices, and cuBLAS's half-precision kernels fault on misaligned ones on hardware
  // ("misaligned address" on an H200, 2026-11-26).
  static long long gapped(long long elements) { return (elements + 7 + 7) / 8 * 8; }
  long long strideA() const {
    return gapped(static_cast<long long>(lda()) * (ta == CUBLAS_OP_N ? k : m));
  }
  long long strideB() const {
    return gapped(static_cast<long long>(ldb()) * (tb == CUBLAS_OP_N ? n : k));
  }
  long long strideC() const { return gapped(static_cast<long long>(ldc()) * n); }
  size_t elemsA() const { return static_cast<size_t>(strideA() * batch); }
  size_t elemsB() const { return static_cast<size_t>(strideB() * batch); }
  size_t elemsC() const { return static_cast<size_t>(strideC() * batch); }
  void *A = nullptr, *B = nullptr, *C = nullptr;
  static double initialC(size_t i) { return 2 * quarter(i, 3); }
  void allocate() {
    A = upload(ab, elemsA(), [](size_t i) { return quarter(i, 1); });
    B = upload(ab, elemsB(), [](size_t i) { return quarter(i, 2); });
    C = upload(c, elemsC(), initialC);
  }
  void release() {
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
  }
  std::string name(const char* entry) const {
    const auto t = [](cublasOperation_t o) { return o == CUBLAS_OP_N ? 'N' : 'T'; };
    return std::string(entry) + " " + t(ta) + t(tb) + " " + typeName(ab) + "->" + typeName(c) +
           (batch > 1 ? " batch" + std::to_string(batch) : "");
  }
  // Prints the result, then puts C back as it was: every call starts from the same operands,
  // so every result stays exact.
  void print(const char* entry) {
    printHash(name(entry), C, elemsC() * sizeOf(c));
    void* fresh = upload(c, elemsC(), initialC);
    CHECK_CUDA(cudaMemcpy(C, fresh, elemsC() * sizeOf(c), cudaMemcpyDeviceToDevice));
    CHECK_CUDA(cudaFree(fresh));
  }
};

const double kAlpha = 1.0, kBeta = 0.5;

// Scalars in the scale type of `compute`.
struct Scalars {
  double d[2] = {kAlpha, kBeta};
  float f[2] = {static_cast<float>(kAlpha), static_cast<float>(kBeta)};
  __half h[2] = {__double2half(kAlpha), __double2half(kBeta)};
  const void* alpha(cublasComputeType_t c) const {
    return c == CUBLAS_COMPUTE_64F ? static_cast<const void*>(&d[0])
           : c == CUBLAS_COMPUTE_16F ? static_cast<const void*>(&h[0])
                                     : static_cast<const void*>(&f[0]);
  }
  const void* beta(cublasComputeType_t c) const {
    return c == CUBLAS_COMPUTE_64F ? static_cast<const void*>(&d[1])
           : c == CUBLAS_COMPUTE_16F ? static_cast<const void*>(&h[1])
                                     : static_cast<const void*>(&f[1]);
  }
};
const Scalars kScalars;

// The typed and Ex entry points, 32- and 64-bit variants.
void typedGemms(cublasHandle_t h, Gemm g) {
  g.batch = 1;
  const float fa = 1, fb = 0.5f;
  const double da = 1, db = 0.5;
  const __half ha = __double2half(1), hb = __double2half(0.5);
  g.ab = g.c = CUDA_R_32F;
  g.allocate();
  CHECK_BLAS(cublasSgemm_v2(h, g.ta, g.tb, g.m, g.n, g.k, &fa, (const float*)g.A, g.lda(),
                            (const float*)g.B, g.ldb(), &fb, (float*)g.C, g.ldc()));
  g.print("cublasSgemm_v2");
  CHECK_BLAS(cublasSgemm_v2_64(h, g.ta, g.tb, g.m, g.n, g.k, &fa, (const float*)g.A, g.lda(),
                               (const float*)g.B, g.ldb(), &fb, (float*)g.C, g.ldc()));
  g.print("cublasSgemm_v2_64");
  g.release();
  g.ab = g.c = CUDA_R_64F;
  g.allocate();
  CHECK_BLAS(cublasDgemm_v2(h, g.ta, g.tb, g.m, g.n, g.k, &da, (const double*)g.A, g.lda(),
                            (const double*)g.B, g.ldb(), &db, (double*)g.C, g.ldc()));
  g.print("cublasDgemm_v2");
  CHECK_BLAS(cublasDgemm_v2_64(h, g.ta, g.tb, g.m, g.n, g.k, &da, (const double*)g.A, g.lda(),
                               (const double*)g.B, g.ldb(), &db, (double*)g.C, g.ldc()));
  g.print("cublasDgemm_v2_64");
  g.release();
  g.ab = g.c = CUDA_R_16F;
  g.allocate();
  CHECK_BLAS(cublasHgemm(h, g.ta, g.tb, g.m, g.n, g.k, &ha, (const __half*)g.A, g.lda(),
                         (const __half*)g.B, g.ldb(), &hb, (__half*)g.C, g.ldc()));
  g.print("cublasHgemm");
  CHECK_BLAS(cublasHgemm_64(h, g.ta, g.tb, g.m, g.n, g.k, &ha, (const __half*)g.A, g.lda(),
                            (const __half*)g.B, g.ldb(), &hb, (__half*)g.C, g.ldc()));
  g.print("cublasHgemm_64");
  g.release();
}

struct ExTypes {
  cudaDataType ab, c;
  cublasComputeType_t compute;
};
const ExTypes kExTypes[] = {
    {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F},  {CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_64F},
    {CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F},  {CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F},
    {CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F}, {CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_16F},
};

void exGemms(cublasHandle_t h, Gemm g) {
  for (const ExTypes& t : kExTypes) {
    g.ab = t.ab;
    g.c = t.c;
    g.batch = 1;
    g.allocate();
    const void* al = kScalars.alpha(t.compute);
    const void* be = kScalars.beta(t.compute);
    CHECK_BLAS(cublasGemmEx(h, g.ta, g.tb, g.m, g.n, g.k, al, g.A, g.ab, g.lda(), g.B, g.ab,
                            g.ldb(), be, g.C, g.c, g.ldc(), t.compute, CUBLAS_GEMM_DEFAULT));
    g.print("cublasGemmEx");
    CHECK_BLAS(cublasGemmEx_64(h, g.ta, g.tb, g.m, g.n, g.k, al, g.A, g.ab, g.lda(), g.B, g.ab,
                               g.ldb(), be, g.C, g.c, g.ldc(), t.compute, CUBLAS_GEMM_DEFAULT));
    g.print("cublasGemmEx_64");
    g.release();

    g.batch = 3;
    g.allocate();
    CHECK_BLAS(cublasGemmStridedBatchedEx(h, g.ta, g.tb, g.m, g.n, g.k, al, g.A, g.ab, g.lda(),
                                          g.strideA(), g.B, g.ab, g.ldb(), g.strideB(), be, g.C,
                                          g.c, g.ldc(), g.strideC(), g.batch, t.compute,
                                          CUBLAS_GEMM_DEFAULT));
    g.print("cublasGemmStridedBatchedEx");
    CHECK_BLAS(cublasGemmStridedBatchedEx_64(h, g.ta, g.tb, g.m, g.n, g.k, al, g.A, g.ab,
                                             g.lda(), g.strideA(), g.B, g.ab, g.ldb(),
                                             g.strideB(), be, g.C, g.c, g.ldc(), g.strideC(),
                                             g.batch, t.compute, CUBLAS_GEMM_DEFAULT));
    g.print("cublasGemmStridedBatchedEx_64");

    // Pointer arrays: each batch's matrix of the strided buffers, listed in reverse order so a
    // decoder that assumed a stride would read the wrong matrices.
    std::vector<const void*> ptrs;
    for (int which = 0; which < 3; ++which)
      for (int b = g.batch - 1; b >= 0; --b) {
        const char* base = static_cast<const char*>(which == 0 ? g.A : which == 1 ? g.B : g.C);
        const long long stride = which == 0 ? g.strideA() : which == 1 ? g.strideB() : g.strideC();
        const size_t es = sizeOf(which == 2 ? g.c : g.ab);
        ptrs.push_back(base + static_cast<size_t>(b * stride) * es);
      }
    void* arrays = nullptr;
    CHECK_CUDA(cudaMalloc(&arrays, ptrs.size() * sizeof(void*)));
    CHECK_CUDA(cudaMemcpy(arrays, ptrs.data(), ptrs.size() * sizeof(void*), cudaMemcpyHostToDevice));
    auto* pa = static_cast<const void* const*>(arrays);
    auto* pc = static_cast<void* const*>(arrays) + 2 * g.batch;
    CHECK_BLAS(cublasGemmBatchedEx(h, g.ta, g.tb, g.m, g.n, g.k, al, pa, g.ab, g.lda(),
                                   pa + g.batch, g.ab, g.ldb(), be, pc, g.c, g.ldc(), g.batch,
                                   t.compute, CUBLAS_GEMM_DEFAULT));
    g.print("cublasGemmBatchedEx");
    CHECK_BLAS(cublasGemmBatchedEx_64(h, g.ta, g.tb, g.m, g.n, g.k, al, pa, g.ab, g.lda(),
                                      pa + g.batch, g.ab, g.ldb(), be, pc, g.c, g.ldc(),
                                      g.batch, t.compute, CUBLAS_GEMM_DEFAULT));
    g.print("cublasGemmBatchedEx_64");
    cudaFree(arrays);
    g.release();
  }
}

void stridedGemms(cublasHandle_t h, Gemm g) {
  const float fa = 1, fb = 0.5f;
  const double da = 1, db = 0.5;
  g.batch = 3;
  g.ab = g.c = CUDA_R_32F;
  g.allocate();
  CHECK_BLAS(cublasSgemmStridedBatched(h, g.ta, g.tb, g.m, g.n, g.k, &fa, (const float*)g.A,
                                       g.lda(), g.strideA(), (const float*)g.B, g.ldb(),
                                       g.strideB(), &fb, (float*)g.C, g.ldc(), g.strideC(),
                                       g.batch));
  g.print("cublasSgemmStridedBatched");
  CHECK_BLAS(cublasSgemmStridedBatched_64(h, g.ta, g.tb, g.m, g.n, g.k, &fa, (const float*)g.A,
                                          g.lda(), g.strideA(), (const float*)g.B, g.ldb(),
                                          g.strideB(), &fb, (float*)g.C, g.ldc(), g.strideC(),
                                          g.batch));
  g.print("cublasSgemmStridedBatched_64");
  g.release();
  g.ab = g.c = CUDA_R_64F;
  g.allocate();
  CHECK_BLAS(cublasDgemmStridedBatched(h, g.ta, g.tb, g.m, g.n, g.k, &da, (const double*)g.A,
                                       g.lda(), g.strideA(), (const double*)g.B, g.ldb(),
                                       g.strideB(), &db, (double*)g.C, g.ldc(), g.strideC(),
                                       g.batch));
  g.print("cublasDgemmStridedBatched");
  CHECK_BLAS(cublasDgemmStridedBatched_64(h, g.ta, g.tb, g.m, g.n, g.k, &da, (const double*)g.A,
                                          g.lda(), g.strideA(), (const double*)g.B, g.ldb(),
                                          g.strideB(), &db, (double*)g.C, g.ldc(), g.strideC(),
                                          g.batch));
  g.print("cublasDgemmStridedBatched_64");
  g.release();
}

// ---- cuBLASLt ------------------------------------------------------------------------------

struct LtCase {
  cublasLtOrder_t order = CUBLASLT_ORDER_COL;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  int batch = 1;
  cudaDataType type = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  bool device_scalars = false;
  int salt = 0;  // added to the operands' fill patterns
};

cublasLtMatrixLayout_t ltLayout(cudaDataType t, int rows, int cols, int ld, cublasLtOrder_t order,
                                int batch, long long stride) {
  cublasLtMatrixLayout_t l = nullptr;
  CHECK_BLAS(cublasLtMatrixLayoutCreate(&l, t, rows, cols, ld));
  CHECK_BLAS(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, sizeof order));
  CHECK_BLAS(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                              sizeof batch));
  const int64_t s = stride;
  CHECK_BLAS(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s,
                                              sizeof s));
  return l;
}

// D = epilogue(alpha op(A) op(B) + beta C + bias), C and D distinct, shape m x n x k: set up,
// run on a stream, then (after the stream has run) printed and freed.
class LtMatmul {
 public:
  LtMatmul(const LtCase& lc, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
           const char* label)
      : lc_(lc) {
    const bool row = lc.order == CUBLASLT_ORDER_ROW;
    // Stored shapes (rows x cols) and leading dimensions (+2) in the layout's order.
    const int ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
    const int br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
    const int lda = (row ? ac : ar) + 2, ldb = (row ? bc : br) + 2, ldc = (row ? n : m) + 2;
    const long long sa = static_cast<long long>(lda) * (row ? ar : ac) + 5;
    const long long sb = static_cast<long long>(ldb) * (row ? br : bc) + 5;
    sc_ = static_cast<long long>(ldc) * (row ? m : n) + 5;
    const cudaDataType t = lc.type;
    const int salt = lc.salt;
    A_ = upload(t, static_cast<size_t>(sa * lc.batch),
                [salt](size_t i) { return quarter(i, 4 + salt); });
    B_ = upload(t, static_cast<size_t>(sb * lc.batch),
                [salt](size_t i) { return quarter(i, 5 + salt); });
    C_ = upload(t, static_cast<size_t>(sc_ * lc.batch),
                [salt](size_t i) { return 2 * quarter(i, 6 + salt); });
    D_ = upload(t, static_cast<size_t>(sc_ * lc.batch), [](size_t) { return 0.0; });
    bias_ = upload(t, static_cast<size_t>(m), [salt](size_t i) { return quarter(i, 7 + salt); });
    const cudaDataType scale = lc.compute == CUBLAS_COMPUTE_64F ? CUDA_R_64F : CUDA_R_32F;
    CHECK_BLAS(cublasLtMatmulDescCreate(&desc_, lc.compute, scale));
    CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, &lc.epilogue,
                                              sizeof lc.epilogue));
    if (lc.epilogue & CUBLASLT_EPILOGUE_BIAS)
      CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_,
                                                sizeof bias_));
    alpha_ = kScalars.alpha(lc.compute);
    beta_ = kScalars.beta(lc.compute);
    if (lc.device_scalars) {
      const cublasLtPointerMode_t pm = CUBLASLT_POINTER_MODE_DEVICE;
      CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm,
                                                sizeof pm));
      const size_t es = sizeOf(scale);
      CHECK_CUDA(cudaMalloc(&scalars_dev_, 2 * es));
      CHECK_CUDA(cudaMemcpy(scalars_dev_, alpha_, es, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMemcpy(static_cast<char*>(scalars_dev_) + es, beta_, es,
                            cudaMemcpyHostToDevice));
      alpha_ = scalars_dev_;
      beta_ = static_cast<char*>(scalars_dev_) + es;
    }
    la_ = ltLayout(t, ar, ac, lda, lc.order, lc.batch, sa);
    lb_ = ltLayout(t, br, bc, ldb, lc.order, lc.batch, sb);
    lc_layout_ = ltLayout(t, m, n, ldc, lc.order, lc.batch, sc_);
    ld_ = ltLayout(t, m, n, ldc, lc.order, lc.batch, sc_);
    const auto tn = [](cublasOperation_t o) { return o == CUBLAS_OP_N ? 'N' : 'T'; };
    name_ = std::string(label) + " " + tn(ta) + tn(tb) + (row ? " row" : " col") + " ep" +
            std::to_string(static_cast<int>(lc.epilogue)) + " " + typeName(t) + " batch" +
            std::to_string(lc.batch);
  }

  // Not every combination runs on hardware (an H200's cuBLASLt declines a bias epilogue on
  // row-major layouts): the program says so and goes on, with or without libfumi alike.
  void run(cublasLtHandle_t lt, cudaStream_t stream) {
    st_ = cublasLtMatmul(lt, desc_, alpha_, A_, la_, B_, lb_, beta_, C_, lc_layout_, D_, ld_,
                         nullptr, nullptr, 0, stream);
    if (st_ != CUBLAS_STATUS_NOT_SUPPORTED) CHECK_BLAS(st_);
    // The program may destroy its descriptors right away: fumi must have kept what it needs.
    cublasLtMatrixLayoutDestroy(la_);
    cublasLtMatrixLayoutDestroy(lb_);
    cublasLtMatrixLayoutDestroy(lc_layout_);
    cublasLtMatrixLayoutDestroy(ld_);
    cublasLtMatmulDescDestroy(desc_);
  }

  void finish() {
    if (st_ == CUBLAS_STATUS_NOT_SUPPORTED) std::printf("%s not supported\n", name_.c_str());
    else printHash(name_, D_, static_cast<size_t>(sc_ * lc_.batch) * sizeOf(lc_.type));
    for (void* p : {A_, B_, C_, D_, bias_, scalars_dev_}) cudaFree(p);
  }

 private:
  LtCase lc_;
  long long sc_ = 0;
  void *A_ = nullptr, *B_ = nullptr, *C_ = nullptr, *D_ = nullptr, *bias_ = nullptr,
       *scalars_dev_ = nullptr;
  const void* alpha_ = nullptr;
  const void* beta_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, lc_layout_ = nullptr, ld_ = nullptr;
  cublasStatus_t st_ = CUBLAS_STATUS_SUCCESS;
  std::string name_;
};

void ltMatmul(cublasLtHandle_t lt, const LtCase& lc, cublasOperation_t ta, cublasOperation_t tb,
              int m, int n, int k, cudaStream_t stream, const char* label) {
  LtMatmul mm(lc, ta, tb, m, n, k, label);
  mm.run(lt, stream);
  mm.finish();
}

const cublasOperation_t kOps[] = {CUBLAS_OP_N, CUBLAS_OP_T};

int sweep() {
  cublasHandle_t h = nullptr;
  CHECK_BLAS(cublasCreate(&h));
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreate(&stream));
  CHECK_BLAS(cublasSetStream(h, stream));
  for (cublasOperation_t ta : kOps)
    for (cublasOperation_t tb : kOps) {
      Gemm g;
      g.ta = ta;
      g.tb = tb;
      typedGemms(h, g);
      stridedGemms(h, g);
      exGemms(h, g);
    }
  cublasLtHandle_t lt = nullptr;
  CHECK_BLAS(cublasLtCreate(&lt));
  const cublasLtEpilogue_t epilogues[] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS,
                                          CUBLASLT_EPILOGUE_RELU_BIAS, CUBLASLT_EPILOGUE_GELU};
  for (cublasOperation_t ta : kOps)
    for (cublasOperation_t tb : kOps)
      for (cublasLtOrder_t order : {CUBLASLT_ORDER_COL, CUBLASLT_ORDER_ROW})
        for (cublasLtEpilogue_t ep : epilogues) {
          LtCase lc;
          lc.order = order;
          lc.epilogue = ep;
          lc.batch = ep == CUBLASLT_EPILOGUE_DEFAULT ? 2 : 1;
          ltMatmul(lt, lc, ta, tb, 6, 5, 8, stream, "cublasLtMatmul");
        }
  for (const ExTypes& t : kExTypes) {
    if (t.compute == CUBLAS_COMPUTE_16F || t.ab != t.c) continue;
    LtCase lc;
    lc.type = t.ab;
    lc.compute = t.compute;
    ltMatmul(lt, lc, CUBLAS_OP_T, CUBLAS_OP_N, 6, 5, 8, stream, "cublasLtMatmul");
  }
  cublasLtDestroy(lt);
  cublasDestroy(h);
  cudaStreamDestroy(stream);
  return 0;
}

int tf32() {
  cublasHandle_t h = nullptr;
  CHECK_BLAS(cublasCreate(&h));
  const int m = 4, n = 4, k = 16;
  const double x = 1.0 + 1.0 / 2048 + 1.0 / 8192;  // exact in fp32, rounds up in TF32
  void* A = upload(CUDA_R_32F, m * k, [&](size_t) { return x; });
  void* B = upload(CUDA_R_32F, k * n, [](size_t) { return 1.0; });
  void* C = upload(CUDA_R_32F, m * n, [](size_t) { return 0.0; });
  const float one = 1, zero = 0;
  for (cublasMath_t math : {CUBLAS_DEFAULT_MATH, CUBLAS_TF32_TENSOR_OP_MATH}) {
    CHECK_BLAS(cublasSetMathMode(h, math));
    CHECK_BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, (const float*)A, m,
                           (const float*)B, k, &zero, (float*)C, m));
    printHash(math == CUBLAS_DEFAULT_MATH ? "default" : "tf32", C, m * n * 4);
  }
  cublasDestroy(h);
  return 0;
}

// An fp16 GEMM with k = 4096 (all-positive operands, so partial sums grow to ~1000 where an
// fp16 ulp is 0.5), accumulated in fp16 and then in fp32: the first loses its sums' low bits.
int accum16() {
  cublasHandle_t h = nullptr;
  CHECK_BLAS(cublasCreate(&h));
  const int m = 8, n = 8, k = 4096;
  void* A = upload(CUDA_R_16F, static_cast<size_t>(m) * k,
                   [](size_t i) { return 0.25 + 0.5 * quarter(i, 1); });
  void* B = upload(CUDA_R_16F, static_cast<size_t>(k) * n,
                   [](size_t i) { return 0.25 + 0.5 * quarter(i, 2); });
  void* C = upload(CUDA_R_16F, static_cast<size_t>(m) * n, [](size_t) { return 0.0; });
  const __half h_one = __double2half(1.0), h_zero = __double2half(0.0);
  const float f_one = 1, f_zero = 0;
  for (cublasComputeType_t c : {CUBLAS_COMPUTE_16F, CUBLAS_COMPUTE_32F}) {
    const bool half = c == CUBLAS_COMPUTE_16F;
    CHECK_BLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k,
                            half ? static_cast<const void*>(&h_one) : &f_one, A, CUDA_R_16F, m, B,
                            CUDA_R_16F, k, half ? static_cast<const void*>(&h_zero) : &f_zero, C,
                            CUDA_R_16F, m, c, CUBLAS_GEMM_DEFAULT));
    printHash(half ? "accumulate f16" : "accumulate f32", C, static_cast<size_t>(m) * n * 2);
  }
  cublasDestroy(h);
  return 0;
}

// An f32 Gemm of the given shape, allocated.
Gemm f32Gemm(int m, int n, int k) {
  Gemm g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.allocate();
  return g;
}

// cublasSgemm_v2 on g (alpha 1, beta 1/2), its result printed as `name`.
void sgemm(cublasHandle_t h, Gemm& g, const char* name) {
  const float fa = 1, fb = 0.5f;
  CHECK_BLAS(cublasSgemm(h, g.ta, g.tb, g.m, g.n, g.k, &fa, (const float*)g.A, g.lda(),
                         (const float*)g.B, g.ldb(), &fb, (float*)g.C, g.ldc()));
  g.print(name);
}

int fault() {
  cublasHandle_t h = nullptr;
  CHECK_BLAS(cublasCreate(&h));
  Gemm g = f32Gemm(7, 6, 5);
  sgemm(h, g, "cublasSgemm_v2");
  g.release();
  cublasLtHandle_t lt = nullptr;
  CHECK_BLAS(cublasLtCreate(&lt));
  ltMatmul(lt, LtCase{}, CUBLAS_OP_N, CUBLAS_OP_N, 9, 3, 4, nullptr, "cublasLtMatmul");
  cublasLtDestroy(lt);
  cublasDestroy(h);
  return 0;
}

// Two 256 x 256 x 256 cublasSgemm_v2 (the second with both operands transposed), for the
// checks' projections on the device: what they move to the host against the operands' size.
int large() {
  cublasHandle_t h = nullptr;
  CHECK_BLAS(cublasCreate(&h));
  for (cublasOperation_t t : {CUBLAS_OP_N, CUBLAS_OP_T}) {
    Gemm g;
    g.m = g.n = g.k = 256;
    g.ta = g.tb = t;
    g.allocate();
    sgemm(h, g, t == CUBLAS_OP_N ? "cublasSgemm_v2 NN" : "cublasSgemm_v2 TT");
    g.release();
  }
  cublasDestroy(h);
  return 0;
}

std::atomic<bool> g_release{false};

void CUDART_CB holdStream(void*) {
  while (!g_release.load()) {
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, nullptr);
  }
}

int poolRace() {
  cudaStream_t held = nullptr, free_stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&held, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithFlags(&free_stream, cudaStreamNonBlocking));
  cublasHandle_t h = nullptr;
  CHECK_BLAS(cublasCreate(&h));
  CHECK_BLAS(cublasSetStream(h, held));
  cublasLtHandle_t lt = nullptr;
  CHECK_BLAS(cublasLtCreate(&lt));
  // Everything is set up (allocations and uploads synchronise) before the stream is held.
  Gemm first, last;
  first.allocate();
  last.allocate();
  LtCase rows, cols;
  rows.order = CUBLASLT_ORDER_ROW;
  rows.epilogue = cols.epilogue = CUBLASLT_EPILOGUE_BIAS;
  rows.salt = 3;  // operands unlike the checked matmul's
  LtMatmul declined(rows, CUBLAS_OP_N, CUBLAS_OP_N, 64, 64, 64, "cublasLtMatmul");
  LtMatmul checked(cols, CUBLAS_OP_N, CUBLAS_OP_N, 64, 64, 64, "cublasLtMatmul");
  CHECK_CUDA(cudaLaunchHostFunc(held, holdStream, nullptr));
  const float fa = 1, fb = 0.5f;
  for (Gemm* g : {&first, &last}) {
    CHECK_BLAS(cublasSgemm(h, g->ta, g->tb, g->m, g->n, g->k, &fa, (const float*)g->A, g->lda(),
                           (const float*)g->B, g->ldb(), &fb, (float*)g->C, g->ldc()));
    if (g == &first) declined.run(lt, held);
  }
  checked.run(lt, free_stream);
  CHECK_CUDA(cudaStreamSynchronize(free_stream));  // its snapshots taken, release the held work
  g_release = true;
  CHECK_CUDA(cudaDeviceSynchronize());
  first.print("cublasSgemm_v2 first");
  declined.finish();
  last.print("cublasSgemm_v2 last");
  checked.finish();
  first.release();
  last.release();
  cublasLtDestroy(lt);
  cublasDestroy(h);
  return 0;
}

int deviceScalars() {
  cublasHandle_t h = nullptr;
  CHECK_BLAS(cublasCreate(&h));
  CHECK_BLAS(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
  Gemm g;
  g.allocate();
  void* scalars = upload(CUDA_R_32F, 2, [](size_t i) { return i ? kBeta : kAlpha; });
  CHECK_BLAS(cublasSgemm(h, g.ta, g.tb, g.m, g.n, g.k, (const float*)scalars, (const float*)g.A,
                         g.lda(), (const float*)g.B, g.ldb(), (const float*)scalars + 1,
                         (float*)g.C, g.ldc()));
  g.print("cublasSgemm_v2");
  g.release();
  cublasLtHandle_t lt = nullptr;
  CHECK_BLAS(cublasLtCreate(&lt));
  LtCase lc;
  lc.device_scalars = true;
  ltMatmul(lt, lc, CUBLAS_OP_N, CUBLAS_OP_T, 6, 5, 8, nullptr, "cublasLtMatmul");
  cublasLtDestroy(lt);
  cublasDestroy(h);
  cudaFree(scalars);
  return 0;
}

// Global-mode capture on one stream while the same thread runs a checked GEMM on another:
// fumi's work for that check must not break the capture, and the GEMM recorded into the graph
// must not be checked at all.
int capture() {
  cublasHandle_t free_h = nullptr, captured_h = nullptr;
  CHECK_BLAS(cublasCreate(&free_h));
  CHECK_BLAS(cublasCreate(&captured_h));
  cudaStream_t free_s = nullptr, captured_s = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&free_s, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithFlags(&captured_s, cudaStreamNonBlocking));
  CHECK_BLAS(cublasSetStream(free_h, free_s));
  CHECK_BLAS(cublasSetStream(captured_h, captured_s));
  Gemm g1, g2;
  g1.allocate();
  g2.allocate();
  const float fa = 1, fb = 0.5f;
  CHECK_CUDA(cudaStreamBeginCapture(captured_s, cudaStreamCaptureModeGlobal));
  CHECK_BLAS(cublasSgemm(free_h, g1.ta, g1.tb, g1.m, g1.n, g1.k, &fa, (const float*)g1.A,
                         g1.lda(), (const float*)g1.B, g1.ldb(), &fb, (float*)g1.C, g1.ldc()));
  CHECK_BLAS(cublasSgemm(captured_h, g2.ta, g2.tb, g2.m, g2.n, g2.k, &fa, (const float*)g2.A,
                         g2.lda(), (const float*)g2.B, g2.ldb(), &fb, (float*)g2.C, g2.ldc()));
  cudaGraph_t graph = nullptr;
  CHECK_CUDA(cudaStreamEndCapture(captured_s, &graph));
  cudaGraphExec_t exec = nullptr;
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  CHECK_CUDA(cudaGraphLaunch(exec, captured_s));
  CHECK_CUDA(cudaStreamSynchronize(captured_s));
  g1.print("uncaptured cublasSgemm_v2");
  g2.print("captured cublasSgemm_v2");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  g1.release();
  g2.release();
  cublasDestroy(free_h);
  cublasDestroy(captured_h);
  // The simulator counts calls that would have broken a capture on a GPU.
  using ViolationsFn = int (*)();
  if (auto fn = reinterpret_cast<ViolationsFn>(dlsym(RTLD_DEFAULT, "cudaFumiSimCaptureViolations")))
    std::printf("capture violations %d\n", fn());
  return 0;
}

// The library's own error statuses come back unchanged, and fumi's CUDA calls leave no error
// for the program's next cudaGetLastError.
int errors() {
  cublasHandle_t h = nullptr;
  CHECK_BLAS(cublasCreate(&h));
  Gemm g;
  g.allocate();
  const float fa = 1, fb = 0.5f;
  const cublasStatus_t bad = cublasSgemm(h, g.ta, g.tb, g.m, g.n, g.k, &fa, (const float*)g.A,
                                         /*lda=*/1, (const float*)g.B, g.ldb(), &fb,
                                         (float*)g.C, g.ldc());
  std::printf("invalid lda status %d\n", static_cast<int>(bad));
  {
    // An epilogue neither fumi nor the simulated cuBLASLt models (a bias gradient): the
    // library's own status comes back, and fumi counts the sampled call as skipped.
    cublasLtHandle_t lt = nullptr;
    CHECK_BLAS(cublasLtCreate(&lt));
    cublasLtMatmulDesc_t desc = nullptr;
    CHECK_BLAS(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BGRADB;
    CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
    cublasLtMatrixLayout_t la = ltLayout(CUDA_R_32F, g.m, g.k, g.lda(), CUBLASLT_ORDER_COL, 1, 0);
    cublasLtMatrixLayout_t lb = ltLayout(CUDA_R_32F, g.k, g.n, g.ldb(), CUBLASLT_ORDER_COL, 1, 0);
    cublasLtMatrixLayout_t lc = ltLayout(CUDA_R_32F, g.m, g.n, g.ldc(), CUBLASLT_ORDER_COL, 1, 0);
    const cublasStatus_t st = cublasLtMatmul(lt, desc, &fa, g.A, la, g.B, lb, &fb, g.C, lc, g.C,
                                             lc, nullptr, nullptr, 0, nullptr);
    std::printf("unsupported epilogue status %d\n", static_cast<int>(st));
    for (cublasLtMatrixLayout_t l : {la, lb, lc}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(lt);
  }
  CHECK_BLAS(cublasSgemm(h, g.ta, g.tb, g.m, g.n, g.k, &fa, (const float*)g.A, g.lda(),
                         (const float*)g.B, g.ldb(), &fb, (float*)g.C, g.ldc()));
  std::printf("last error after a checked call %d\n", static_cast<int>(cudaGetLastError()));
  g.print("cublasSgemm_v2");
  g.release();
  cublasDestroy(h);
  return 0;
}

}  // namespace

// The program's own CUPTI client (profiler mode): launches seen on the main thread.
std::atomic<int> g_profiled_launches{0};
thread_local bool t_main_thread = false;

void CUPTIAPI onProfiledApi(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void* data) {
  if (t_main_thread &&
      static_cast<const CUpti_CallbackData*>(data)->callbackSite == CUPTI_API_ENTER)
    ++g_profiled_launches;
}

int profiler() {
  t_main_thread = true;
  if (!dlopen("libcupti.so.13", RTLD_NOW | RTLD_GLOBAL)) {
    std::printf("no libcupti: %s\n", dlerror());
    return 0;
  }
  using Subscribe = CUptiResult (*)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*,
                                    CUpti_SubscriberParams*);
  using Enable = CUptiResult (*)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                                 CUpti_CallbackId);
  using Unsubscribe = CUptiResult (*)(CUpti_SubscriberHandle);
  auto subscribe = reinterpret_cast<Subscribe>(dlsym(RTLD_DEFAULT, "cuptiSubscribe_v2"));
  auto enable = reinterpret_cast<Enable>(dlsym(RTLD_DEFAULT, "cuptiEnableCallback"));
  auto unsubscribe = reinterpret_cast<Unsubscribe>(dlsym(RTLD_DEFAULT, "cuptiUnsubscribe"));
  if (!subscribe || !enable || !unsubscribe) {
    std::fprintf(stderr, "libcupti lacks the callback API\n");
    return 1;
  }
  cublasHandle_t h = nullptr;
  CHECK_BLAS(cublasCreate(&h));
  Gemm g = f32Gemm(5, 4, 3);
  auto gemms = [&](const char* name) {
    for (int i = 0; i < 3; ++i) sgemm(h, g, name);
  };
  gemms("cublasSgemm_v2");
  CUpti_SubscriberHandle sub = nullptr;
  CUpti_SubscriberParams params{};
  params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  params.subscriberName = "cuda_gemm";
  const CUptiResult r = subscribe(&sub, onProfiledApi, nullptr, &params);
  std::printf("subscribe %d\n", static_cast<int>(r));
  if (r == CUPTI_SUCCESS) {
    for (CUpti_CallbackId id : {CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
                                CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000})
      if (enable(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API, id) != CUPTI_SUCCESS) return 1;
  }
  gemms("cublasSgemm_v2 profiled");
  CHECK_CUDA(cudaDeviceSynchronize());
  if (r == CUPTI_SUCCESS) unsubscribe(sub);
  std::printf("profiled launches %d\n", g_profiled_launches.load());
  g.release();
  cublasDestroy(h);
  return 0;
}

int exitEarly() {
  cublasHandle_t h = nullptr;
  CHECK_BLAS(cublasCreate(&h));
  Gemm g = f32Gemm(96, 80, 64);
  const float fa = 1, fb = 0.5f;
  for (int i = 0; i < 12; ++i)
    CHECK_BLAS(cublasSgemm(h, g.ta, g.tb, g.m, g.n, g.k, &fa, (const float*)g.A, g.lda(),
                           (const float*)g.B, g.ldb(), &fb, (float*)g.C, g.ldc()));
  g.print("cublasSgemm_v2 x12");
  // The real libraries register such handlers lazily, after fumi's own (cuBLASLt's fp64
  // heuristics, first used by a check).
  if (auto teardown = reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "cublasFumiSimTeardown")))
    std::atexit(teardown);
  return 0;  // no cublasDestroy, no synchronisation: the program just ends
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "sweep";
  if (mode == "sweep") return sweep();
  if (mode == "tf32") return tf32();
  if (mode == "accum16") return accum16();
  if (mode == "fault") return fault();
  if (mode == "large") return large();
  if (mode == "device-scalars") return deviceScalars();
  if (mode == "capture") return capture();
  if (mode == "errors") return errors();
  if (mode == "poolrace") return poolRace();
  if (mode == "exit") return exitEarly();
  if (mode == "profiler") return profiler();
  std::fprintf(stderr,
               "usage: %s sweep|tf32|accum16|fault|large|device-scalars|capture|errors|poolrace|"
               "exit|profiler\n",
               argv[0]);
  return 64;
}
