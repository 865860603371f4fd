// cublas.cpp — the simulated device's libcublas.so.13 stand-in (tests only).
//
// Emulated: handles (stream, math mode, pointer mode, user workspace: remembered and handed to
// cublasLtMatmul, which needs none), version/property/status queries, and the GEMM family in
// both widths (int and _64): cublas{S,D}gemm_v2, cublasHgemm, cublasGemmEx,
// cublas{S,D}gemmStridedBatched, cublasGemmStridedBatchedEx, cublasGemmBatchedEx. Arguments
// are validated like the real library: NOT_INITIALIZED for a bad handle, INVALID_VALUE for a
// bad transpose, negative sizes or batch counts and short leading dimensions, NOT_SUPPORTED
// for type/compute combinations outside sim_gemm.h's table; empty problems succeed doing
// nothing. The math mode applies as documented to COMPUTE_32F with fp32 inputs only:
// CUBLAS_TF32_TENSOR_OP_MATH runs it as COMPUTE_32F_FAST_TF32, the deprecated
// CUBLAS_TENSOR_OP_MATH as COMPUTE_32F_FAST_16F. Host-mode alpha/beta are read at call time,
// device-mode ones in stream order.
// Like the real library, every GEMM except the pointer-array form runs by building cuBLASLt
// descriptors and calling cublasLtMatmul through this library's PLT, so a tool interposing
// cublasLt* sees those calls nested inside the outer cuBLAS call. Pointer-array batches have
// no cuBLASLt form; they are enqueued on the handle's stream directly (sim_gemm.h).
// Not emulated: every other routine (level 1/2, other level 3, the typed pointer-array and
// grouped batches, cublasSgemmEx and other mixed-type forms, complex and integer types),
// algorithm selection (algo is accepted and ignored), atomics mode, SM count targets, the
// emulation math modes (FP32_EMULATED_BF16X9, FP64_EMULATED_FIXEDPOINT: computed as given),
// CUBLAS_PEDANTIC_MATH and CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION (the simulated
// kernel is already pedantic: one rounding to the output type), the device synchronisation
// of cublasDestroy, the logger; sizes or batch counts beyond int32 on the cuBLASLt path are
// NOT_SUPPORTED, as the cuBLASLt stand-in answers for such sizes.
// Test hook: cublasFumiSimTeardown() stands for the library's own exit-time teardown (the real
// libraries destroy state in exit handlers, some registered lazily); a GEMM after it ends the
// process, as using the real library then does (tests/cuda: the exit-order test).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "sim.h"
#include "sim_gemm.h"

namespace {

std::atomic<bool> g_torn_down{false};

using sim::gemm::DType;

constexpr uint32_t kHandleMagic = 0x43624864;  // "CbHd"
// cublasSetWorkspace rejects less-aligned buffers (documented requirement).
constexpr uintptr_t kWorkspaceAlignment = 256;

}  // namespace

struct cublasContext {
  uint32_t magic = kHandleMagic;
  cublasLtHandle_t lt = nullptr;
  cudaStream_t stream = nullptr;  // the legacy default stream
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  cublasPointerMode_t pointerMode = CUBLAS_POINTER_MODE_HOST;
  void* workspace = nullptr;
  size_t workspaceSize = 0;
};

namespace {

bool validHandle(cublasHandle_t h) { return h && h->magic == kHandleMagic; }

// Shape of one GEMM call: C (m x n) = alpha * op(A) (m x k) * op(B) (k x n) + beta * C, batch
// times. pointerArrays: each Matrix::ptr is a device array of per-batch device pointers.
// The transposes are kept as ints: callers pass out-of-range values, which an enum-typed
// object may not hold.
struct Shape {
  int transa, transb;
  int64_t m, n, k;
  int64_t batch = 1;
  bool pointerArrays = false;
};

// One matrix argument as the entry points receive it; stride (elements) only for strided
// batches.
struct Matrix {
  const void* ptr;
  cudaDataType type;
  int64_t ld;
  long long stride = 0;
};

bool transposed(int op, bool* t) {
  switch (op) {
    case CUBLAS_OP_N: *t = false; return true;
    case CUBLAS_OP_T:
    case CUBLAS_OP_C: *t = true; return true;  // real types: conjugate transpose == transpose
    default: return false;
  }
}

cudaDataType cudaType(DType t) {
  switch (t) {
    case DType::F64: return CUDA_R_64F;
    case DType::F32: return CUDA_R_32F;
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

// The compute type the handle's math mode makes of `compute`. Only plain COMPUTE_32F on fp32
// inputs is affected: explicit _PEDANTIC and _FAST compute types are the caller's choice.
cublasComputeType_t underMathMode(cublasMath_t math, cublasComputeType_t compute, DType inputs) {
  if (compute != CUBLAS_COMPUTE_32F || inputs != DType::F32) return compute;
  switch (math & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION) {
    case CUBLAS_TF32_TENSOR_OP_MATH: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case CUBLAS_TENSOR_OP_MATH: return CUBLAS_COMPUTE_32F_FAST_16F;  // cublas_api.h says so
    default: return compute;
  }
}

bool validMathMode(cublasMath_t math) {
  if (math & ~(0xf | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)) return false;
  switch (math & 0xf) {
    case CUBLAS_DEFAULT_MATH:
    case CUBLAS_TENSOR_OP_MATH:
    case CUBLAS_PEDANTIC_MATH:
    case CUBLAS_TF32_TENSOR_OP_MATH:
    case CUBLAS_FP32_EMULATED_BF16X9_MATH:
    case CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH: return true;
    default: return false;
  }
}

void decodeOperand(const Matrix& x, bool pointerArrays, sim::gemm::Operand* o) {
  if (pointerArrays)
    o->array = static_cast<const void* const*>(x.ptr);
  else
    o->base = x.ptr;
  o->ld = x.ld;
  o->batchStride = x.stride;
}

// Validates a call and decodes it into the problem the kernel runs: INVALID_VALUE checks
// first (they do not depend on the types), then NOT_SUPPORTED for the type combination.
cublasStatus_t decode(const cublasContext& h, const Shape& s, const void* alpha, const Matrix& a,
                      const Matrix& b, const void* beta, const Matrix& c,
                      cublasComputeType_t compute, sim::gemm::Problem* p) {
  if (!transposed(s.transa, &p->transA) || !transposed(s.transb, &p->transB))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (s.m < 0 || s.n < 0 || s.k < 0 || s.batch < 0 || !alpha || !beta)
    return CUBLAS_STATUS_INVALID_VALUE;
  // Column-major: each ld covers the stored rows, op() undone (and is never below 1).
  const int64_t aRows = p->transA ? s.k : s.m, bRows = p->transB ? s.n : s.k;
  if (a.ld < std::max<int64_t>(1, aRows) || b.ld < std::max<int64_t>(1, bRows) ||
      c.ld < std::max<int64_t>(1, s.m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!sim::gemm::dtypeFromCuda(a.type, &p->a.type) ||
      !sim::gemm::dtypeFromCuda(b.type, &p->b.type) ||
      !sim::gemm::dtypeFromCuda(c.type, &p->c.type) ||
      !sim::gemm::scaleTypeFor(compute, &p->scale) ||
      !sim::gemm::supportedCombination(compute, p->scale, p->a.type, p->b.type, p->c.type,
                                       p->c.type))
    return CUBLAS_STATUS_NOT_SUPPORTED;

  p->compute = underMathMode(h.math, compute, p->a.type);
  p->m = s.m;
  p->n = s.n;
  p->k = s.k;
  p->batch = s.batch;
  decodeOperand(a, s.pointerArrays, &p->a);
  decodeOperand(b, s.pointerArrays, &p->b);
  decodeOperand(c, s.pointerArrays, &p->c);
  p->d = p->c;  // cuBLAS GEMMs update C in place
  // The pointers go to cublasLtMatmul as passed; the values serve the pointer-array path.
  p->scalarsOnDevice = h.pointerMode == CUBLAS_POINTER_MODE_DEVICE;
  p->alphaPtr = alpha;
  p->betaPtr = beta;
  if (!p->scalarsOnDevice) {
    p->alpha = sim::gemm::readScalar(alpha, p->scale);
    p->beta = sim::gemm::readScalar(beta, p->scale);
  }
  return CUBLAS_STATUS_SUCCESS;
}

// --- the cuBLASLt path -------------------------------------------------------------------

// The descriptors of one cublasLtMatmul call. Destroying them as soon as it returns is
// allowed: cublasLtMatmul takes what it needs from them at call time.
struct LtObjects {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;

  LtObjects() = default;
  LtObjects(const LtObjects&) = delete;
  LtObjects& operator=(const LtObjects&) = delete;
  ~LtObjects() {
    for (cublasLtMatrixLayout_t l : {a, b, c})
      if (l) cublasLtMatrixLayoutDestroy(l);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

template <typename V>
cublasStatus_t setDesc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, V v) {
  return cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof v);
}

template <typename V>
cublasStatus_t setLayout(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr, V v) {
  return cublasLtMatrixLayoutSetAttribute(l, attr, &v, sizeof v);
}

// A column-major layout of rows x cols as stored (before op()), with the batch if any.
cublasStatus_t createLayout(const sim::gemm::Operand& o, int64_t rows, int64_t cols,
                            int64_t batch, cublasLtMatrixLayout_t* out) {
  cublasStatus_t st = cublasLtMatrixLayoutCreate(out, cudaType(o.type), static_cast<uint64_t>(rows),
                                                 static_cast<uint64_t>(cols), o.ld);
  if (st != CUBLAS_STATUS_SUCCESS || batch == 1) return st;
  if ((st = setLayout(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, static_cast<int32_t>(batch))) !=
      CUBLAS_STATUS_SUCCESS)
    return st;
  return setLayout(*out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, o.batchStride);
}

cublasStatus_t runOnLt(const cublasContext& h, const sim::gemm::Problem& p) {
  if (p.batch > INT32_MAX) return CUBLAS_STATUS_NOT_SUPPORTED;  // BATCH_COUNT is an int32_t
  LtObjects lt;
  const cublasOperation_t ta = p.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = p.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasLtPointerMode_t mode =
      p.scalarsOnDevice ? CUBLASLT_POINTER_MODE_DEVICE : CUBLASLT_POINTER_MODE_HOST;
  cublasStatus_t st;
  if ((st = cublasLtMatmulDescCreate(&lt.desc, p.compute, cudaType(p.scale))) !=
          CUBLAS_STATUS_SUCCESS ||
      (st = setDesc(lt.desc, CUBLASLT_MATMUL_DESC_TRANSA, ta)) != CUBLAS_STATUS_SUCCESS ||
      (st = setDesc(lt.desc, CUBLASLT_MATMUL_DESC_TRANSB, tb)) != CUBLAS_STATUS_SUCCESS ||
      (st = setDesc(lt.desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, mode)) != CUBLAS_STATUS_SUCCESS ||
      (st = createLayout(p.a, p.transA ? p.k : p.m, p.transA ? p.m : p.k, p.batch, &lt.a)) !=
          CUBLAS_STATUS_SUCCESS ||
      (st = createLayout(p.b, p.transB ? p.n : p.k, p.transB ? p.k : p.n, p.batch, &lt.b)) !=
          CUBLAS_STATUS_SUCCESS ||
      (st = createLayout(p.c, p.m, p.n, p.batch, &lt.c)) != CUBLAS_STATUS_SUCCESS)
    return st;
  return cublasLtMatmul(h.lt, lt.desc, p.alphaPtr, p.a.base, lt.a, p.b.base, lt.b, p.betaPtr,
                        p.c.base, lt.c, const_cast<void*>(p.d.base), lt.c, nullptr, h.workspace,
                        h.workspaceSize, h.stream);
}

// Every GEMM entry point ends here.
cublasStatus_t gemm(cublasHandle_t handle, const Shape& s, const void* alpha, const Matrix& a,
                    const Matrix& b, const void* beta, const Matrix& c,
                    cublasComputeType_t compute) noexcept {
  if (!validHandle(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (g_torn_down.load()) {
    std::fprintf(stderr, "simdevice: cuBLAS GEMM after the library's exit-time teardown\n");
    std::abort();
  }
  try {
    sim::gemm::Problem p;
    const cublasStatus_t st = decode(*handle, s, alpha, a, b, beta, c, compute, &p);
    if (st != CUBLAS_STATUS_SUCCESS || p.m == 0 || p.n == 0 || p.batch == 0) return st;
    return s.pointerArrays ? sim::gemm::enqueue(handle->stream, p) : runOnLt(*handle, p);
  } catch (const std::bad_alloc&) {
    return CUBLAS_STATUS_ALLOC_FAILED;
  } catch (...) {
    return CUBLAS_STATUS_INTERNAL_ERROR;
  }
}

}  // namespace

extern "C" {

void cublasFumiSimTeardown(void) { g_torn_down.store(true); }

// --- handles and queries -------------------------------------------------------------------

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  auto* h = new (std::nothrow) cublasContext;
  if (!h) return CUBLAS_STATUS_ALLOC_FAILED;
  const cublasStatus_t st = cublasLtCreate(&h->lt);
  if (st != CUBLAS_STATUS_SUCCESS) {
    delete h;
    return st;
  }
  *handle = h;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (!validHandle(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  cublasLtDestroy(handle->lt);
  handle->magic = 0;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

// Like the real call, also drops a user workspace (back to the library's own).
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId) {
  if (!validHandle(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = streamId;
  handle->workspace = nullptr;
  handle->workspaceSize = 0;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* streamId) {
  if (!validHandle(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!streamId) return CUBLAS_STATUS_INVALID_VALUE;
  *streamId = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!validHandle(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!validMathMode(mode)) return CUBLAS_STATUS_INVALID_VALUE;
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  if (!validHandle(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = handle->math;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode) {
  if (!validHandle(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE)
    return CUBLAS_STATUS_INVALID_VALUE;
  handle->pointerMode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t* mode) {
  if (!validHandle(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = handle->pointerMode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace,
                                     size_t workspaceSizeInBytes) {
  if (!validHandle(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (reinterpret_cast<uintptr_t>(workspace) % kWorkspaceAlignment != 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  handle->workspace = workspace;
  handle->workspaceSize = workspace ? workspaceSizeInBytes : 0;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetVersion_v2(cublasHandle_t, int* version) {
  if (!version) return CUBLAS_STATUS_INVALID_VALUE;
  *version = CUBLAS_VERSION;
  return CUBLAS_STATUS_SUCCESS;
}

// One library version: the real libcublas asks libcublasLt too.
cublasStatus_t cublasGetProperty(libraryPropertyType type, int* value) {
  return cublasLtGetProperty(type, value);
}

size_t cublasGetCudartVersion(void) { return CUDART_VERSION; }

const char* cublasGetStatusName(cublasStatus_t status) { return sim::gemm::statusName(status); }
const char* cublasGetStatusString(cublasStatus_t status) {
  return sim::gemm::statusString(status);
}

// --- GEMM ----------------------------------------------------------------------------------
// Thin: the int and _64 forms of each routine only differ in their parameters' widths.

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const float* alpha,
                              const float* A, int lda, const float* B, int ldb,
                              const float* beta, float* C, int ldc) {
  return gemm(handle, {transa, transb, m, n, k}, alpha, {A, CUDA_R_32F, lda},
              {B, CUDA_R_32F, ldb}, beta, {C, CUDA_R_32F, ldc}, CUBLAS_COMPUTE_32F);
}

cublasStatus_t cublasSgemm_v2_64(cublasHandle_t handle, cublasOperation_t transa,
                                 cublasOperation_t transb, int64_t m, int64_t n, int64_t k,
                                 const float* alpha, const float* A, int64_t lda,
                                 const float* B, int64_t ldb, const float* beta, float* C,
                                 int64_t ldc) {
  return gemm(handle, {transa, transb, m, n, k}, alpha, {A, CUDA_R_32F, lda},
              {B, CUDA_R_32F, ldb}, beta, {C, CUDA_R_32F, ldc}, CUBLAS_COMPUTE_32F);
}

cublasStatus_t cublasDgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const double* alpha,
                              const double* A, int lda, const double* B, int ldb,
                              const double* beta, double* C, int ldc) {
  return gemm(handle, {transa, transb, m, n, k}, alpha, {A, CUDA_R_64F, lda},
              {B, CUDA_R_64F, ldb}, beta, {C, CUDA_R_64F, ldc}, CUBLAS_COMPUTE_64F);
}

cublasStatus_t cublasDgemm_v2_64(cublasHandle_t handle, cublasOperation_t transa,
                                 cublasOperation_t transb, int64_t m, int64_t n, int64_t k,
                                 const double* alpha, const double* A, int64_t lda,
                                 const double* B, int64_t ldb, const double* beta, double* C,
                                 int64_t ldc) {
  return gemm(handle, {transa, transb, m, n, k}, alpha, {A, CUDA_R_64F, lda},
              {B, CUDA_R_64F, ldb}, beta, {C, CUDA_R_64F, ldc}, CUBLAS_COMPUTE_64F);
}

cublasStatus_t cublasHgemm(cublasHandle_t handle, cublasOperation_t transa,
                           cublasOperation_t transb, int m, int n, int k, const __half* alpha,
                           const __half* A, int lda, const __half* B, int ldb,
                           const __half* beta, __half* C, int ldc) {
  return gemm(handle, {transa, transb, m, n, k}, alpha, {A, CUDA_R_16F, lda},
              {B, CUDA_R_16F, ldb}, beta, {C, CUDA_R_16F, ldc}, CUBLAS_COMPUTE_16F);
}

cublasStatus_t cublasHgemm_64(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int64_t m, int64_t n, int64_t k,
                              const __half* alpha, const __half* A, int64_t lda,
                              const __half* B, int64_t ldb, const __half* beta, __half* C,
                              int64_t ldc) {
  return gemm(handle, {transa, transb, m, n, k}, alpha, {A, CUDA_R_16F, lda},
              {B, CUDA_R_16F, ldb}, beta, {C, CUDA_R_16F, ldc}, CUBLAS_COMPUTE_16F);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t) {
  return gemm(handle, {transa, transb, m, n, k}, alpha, {A, Atype, lda}, {B, Btype, ldb}, beta,
              {C, Ctype, ldc}, computeType);
}

cublasStatus_t cublasGemmEx_64(cublasHandle_t handle, cublasOperation_t transa,
                               cublasOperation_t transb, int64_t m, int64_t n, int64_t k,
                               const void* alpha, const void* A, cudaDataType Atype,
                               int64_t lda, const void* B, cudaDataType Btype, int64_t ldb,
                               const void* beta, void* C, cudaDataType Ctype, int64_t ldc,
                               cublasComputeType_t computeType, cublasGemmAlgo_t) {
  return gemm(handle, {transa, transb, m, n, k}, alpha, {A, Atype, lda}, {B, Btype, ldb}, beta,
              {C, Ctype, ldc}, computeType);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const float* alpha, const float* A, int lda,
                                         long long int strideA, const float* B, int ldb,
                                         long long int strideB, const float* beta, float* C,
                                         int ldc, long long int strideC, int batchCount) {
  return gemm(handle, {transa, transb, m, n, k, batchCount}, alpha,
              {A, CUDA_R_32F, lda, strideA}, {B, CUDA_R_32F, ldb, strideB}, beta,
              {C, CUDA_R_32F, ldc, strideC}, CUBLAS_COMPUTE_32F);
}

cublasStatus_t cublasSgemmStridedBatched_64(cublasHandle_t handle, cublasOperation_t transa,
                                            cublasOperation_t transb, int64_t m, int64_t n,
                                            int64_t k, const float* alpha, const float* A,
                                            int64_t lda, long long int strideA, const float* B,
                                            int64_t ldb, long long int strideB,
                                            const float* beta, float* C, int64_t ldc,
                                            long long int strideC, int64_t batchCount) {
  return gemm(handle, {transa, transb, m, n, k, batchCount}, alpha,
              {A, CUDA_R_32F, lda, strideA}, {B, CUDA_R_32F, ldb, strideB}, beta,
              {C, CUDA_R_32F, ldc, strideC}, CUBLAS_COMPUTE_32F);
}

cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const double* alpha, const double* A, int lda,
                                         long long int strideA, const double* B, int ldb,
                                         long long int strideB, const double* beta, double* C,
                                         int ldc, long long int strideC, int batchCount) {
  return gemm(handle, {transa, transb, m, n, k, batchCount}, alpha,
              {A, CUDA_R_64F, lda, strideA}, {B, CUDA_R_64F, ldb, strideB}, beta,
              {C, CUDA_R_64F, ldc, strideC}, CUBLAS_COMPUTE_64F);
}

cublasStatus_t cublasDgemmStridedBatched_64(cublasHandle_t handle, cublasOperation_t transa,
                                            cublasOperation_t transb, int64_t m, int64_t n,
                                            int64_t k, const double* alpha, const double* A,
                                            int64_t lda, long long int strideA, const double* B,
                                            int64_t ldb, long long int strideB,
                                            const double* beta, double* C, int64_t ldc,
                                            long long int strideC, int64_t batchCount) {
  return gemm(handle, {transa, transb, m, n, k, batchCount}, alpha,
              {A, CUDA_R_64F, lda, strideA}, {B, CUDA_R_64F, ldb, strideB}, beta,
              {C, CUDA_R_64F, ldc, strideC}, CUBLAS_COMPUTE_64F);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B,
                                          cudaDataType Btype, int ldb, long long int strideB,
                                          const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t) {
  return gemm(handle, {transa, transb, m, n, k, batchCount}, alpha, {A, Atype, lda, strideA},
              {B, Btype, ldb, strideB}, beta, {C, Ctype, ldc, strideC}, computeType);
}

cublasStatus_t cublasGemmStridedBatchedEx_64(cublasHandle_t handle, cublasOperation_t transa,
                                             cublasOperation_t transb, int64_t m, int64_t n,
                                             int64_t k, const void* alpha, const void* A,
                                             cudaDataType Atype, int64_t lda,
                                             long long int strideA, const void* B,
                                             cudaDataType Btype, int64_t ldb,
                                             long long int strideB, const void* beta, void* C,
                                             cudaDataType Ctype, int64_t ldc,
                                             long long int strideC, int64_t batchCount,
                                             cublasComputeType_t computeType, cublasGemmAlgo_t) {
  return gemm(handle, {transa, transb, m, n, k, batchCount}, alpha, {A, Atype, lda, strideA},
              {B, Btype, ldb, strideB}, beta, {C, Ctype, ldc, strideC}, computeType);
}

cublasStatus_t cublasGemmBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                   cublasOperation_t transb, int m, int n, int k,
                                   const void* alpha, const void* const Aarray[],
                                   cudaDataType Atype, int lda, const void* const Barray[],
                                   cudaDataType Btype, int ldb, const void* beta,
                                   void* const Carray[], cudaDataType Ctype, int ldc,
                                   int batchCount, cublasComputeType_t computeType,
                                   cublasGemmAlgo_t) {
  return gemm(handle, {transa, transb, m, n, k, batchCount, true}, alpha, {Aarray, Atype, lda},
              {Barray, Btype, ldb}, beta, {Carray, Ctype, ldc}, computeType);
}

cublasStatus_t cublasGemmBatchedEx_64(cublasHandle_t handle, cublasOperation_t transa,
                                      cublasOperation_t transb, int64_t m, int64_t n, int64_t k,
                                      const void* alpha, const void* const Aarray[],
                                      cudaDataType Atype, int64_t lda,
                                      const void* const Barray[], cudaDataType Btype,
                                      int64_t ldb, const void* beta, void* const Carray[],
                                      cudaDataType Ctype, int64_t ldc, int64_t batchCount,
                                      cublasComputeType_t computeType, cublasGemmAlgo_t) {
  return gemm(handle, {transa, transb, m, n, k, batchCount, true}, alpha, {Aarray, Atype, lda},
              {Barray, Btype, ldb}, beta, {Carray, Ctype, ldc}, computeType);
}

}  // extern "C"
