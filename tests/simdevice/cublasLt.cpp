// cublasLt.cpp — the simulated device's libcublasLt.so.13 stand-in (tests only).
//
// Emulated: handles; matmul descriptors (compute/scale type, pointer mode host|device,
// TRANSA/TRANSB/TRANSC, epilogue, bias pointer/type/batch stride, fill mode, SM count
// target, fast accumulation flag), matrix layouts (type, column|row order, rows, cols, ld,
// batch count, strided batch offset; plane offset and batch mode stored, only the defaults
// accepted by cublasLtMatmul), matmul preferences, a heuristic that offers one algorithm
// needing no workspace, and cublasLtMatmul itself: arguments are validated at call time like
// the real library (INVALID_VALUE for inconsistent dims/ld/batches, NOT_SUPPORTED for
// unsupported type/epilogue/order combinations), then the GEMM (sim_gemm.h) is enqueued on
// the stream as a host function holding its arguments by value. Host-mode alpha/beta are
// read at call time, device-mode ones in stream order.
// Descriptors keep their state inside the public opaque structs, so the *Init_internal entry
// points (stack-allocated descriptors) work as well.
// Not emulated: algorithm enumeration/configuration (algo is accepted and ignored, as is the
// workspace), matrix transforms, aux epilogues, alpha vectors, scale pointers, fp8 and
// integer/complex types, planar complex, pointer-array batch mode, the logger.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "sim.h"
#include "sim_gemm.h"

namespace {

using sim::gemm::DType;

constexpr uint32_t kHandleMagic = 0x4c744864;  // "LtHd"
constexpr uint32_t kDescMagic = 0x4c744473;    // "LtDs"
constexpr uint32_t kLayoutMagic = 0x4c744c79;  // "LtLy"
constexpr uint32_t kPrefMagic = 0x4c745066;    // "LtPf"

}  // namespace

struct cublasLtContext {
  uint32_t magic = kHandleMagic;
};

namespace {

struct DescState {
  uint32_t magic;
  int32_t computeType;
  int32_t scaleType;
  int32_t pointerMode;
  int32_t transA, transB, transC;
  int32_t fillMode;
  uint32_t epilogue;
  int32_t biasType;  // -1: D's type
  int32_t smCountTarget;
  int8_t fastAccum;
  const void* biasPointer;
  int64_t biasBatchStride;
};
static_assert(sizeof(DescState) <= sizeof(cublasLtMatmulDescOpaque_t), "desc state too big");

struct LayoutState {
  uint32_t magic;
  uint32_t type;
  int32_t order;
  int32_t batchCount;
  uint32_t batchMode;
  uint64_t rows, cols;
  int64_t ld;
  int64_t batchOffset;
  int64_t planeOffset;
};
static_assert(sizeof(LayoutState) <= sizeof(cublasLtMatrixLayoutOpaque_t), "layout too big");

struct PrefState {
  uint32_t magic;
  uint32_t searchMode;
  uint64_t maxWorkspace;
  uint32_t reductionMask;
  uint32_t alignA, alignB, alignC, alignD;
  float maxWaves;
  uint64_t implMask;
};
static_assert(sizeof(PrefState) <= sizeof(cublasLtMatmulPreferenceOpaque_t), "pref too big");

// State lives in the opaque structs' storage; copied in and out (no aliasing games).
template <typename State, typename Opaque>
bool getState(const Opaque* o, uint32_t magic, State* s) {
  if (!o) return false;
  std::memcpy(s, o, sizeof(State));
  return s->magic == magic;
}
template <typename State, typename Opaque>
void putState(Opaque* o, const State& s) {
  std::memcpy(o, &s, sizeof(State));
}

// One attribute: where it lives in the state and its size.
struct Field {
  void* p = nullptr;
  size_t size = 0;
};

Field descField(DescState& s, cublasLtMatmulDescAttributes_t a) {
  switch (a) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return {&s.computeType, 4};
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return {&s.scaleType, 4};
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return {&s.pointerMode, 4};
    case CUBLASLT_MATMUL_DESC_TRANSA: return {&s.transA, 4};
    case CUBLASLT_MATMUL_DESC_TRANSB: return {&s.transB, 4};
    case CUBLASLT_MATMUL_DESC_TRANSC: return {&s.transC, 4};
    case CUBLASLT_MATMUL_DESC_FILL_MODE: return {&s.fillMode, 4};
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return {&s.epilogue, 4};
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return {&s.biasPointer, sizeof(void*)};
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: return {&s.biasBatchStride, 8};
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return {&s.biasType, 4};
    case CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET: return {&s.smCountTarget, 4};
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM: return {&s.fastAccum, 1};
    default: return {};
  }
}

Field layoutField(LayoutState& s, cublasLtMatrixLayoutAttribute_t a) {
  switch (a) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return {&s.type, 4};
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return {&s.order, 4};
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return {&s.rows, 8};
    case CUBLASLT_MATRIX_LAYOUT_COLS: return {&s.cols, 8};
    case CUBLASLT_MATRIX_LAYOUT_LD: return {&s.ld, 8};
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return {&s.batchCount, 4};
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return {&s.batchOffset, 8};
    case CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET: return {&s.planeOffset, 8};
    case CUBLASLT_MATRIX_LAYOUT_BATCH_MODE: return {&s.batchMode, 4};
    default: return {};
  }
}

Field prefField(PrefState& s, cublasLtMatmulPreferenceAttributes_t a) {
  switch (a) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return {&s.searchMode, 4};
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return {&s.maxWorkspace, 8};
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: return {&s.reductionMask, 4};
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return {&s.alignA, 4};
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return {&s.alignB, 4};
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return {&s.alignC, 4};
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return {&s.alignD, 4};
    case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT: return {&s.maxWaves, 4};
    case CUBLASLT_MATMUL_PREF_IMPL_MASK: return {&s.implMask, 8};
    default: return {};
  }
}

// Set: buf non-NULL and sizeInBytes equal to the attribute's size.
cublasStatus_t setField(Field f, const void* buf, size_t sizeInBytes) {
  if (!f.p || !buf || sizeInBytes != f.size) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(f.p, buf, f.size);
  return CUBLAS_STATUS_SUCCESS;
}

// Get: sizeInBytes 0 asks for the size (sizeWritten required); else buf must hold the value.
cublasStatus_t getField(Field f, void* buf, size_t sizeInBytes, size_t* sizeWritten) {
  if (!f.p) return CUBLAS_STATUS_INVALID_VALUE;
  if (sizeInBytes == 0) {
    if (!sizeWritten) return CUBLAS_STATUS_INVALID_VALUE;
    *sizeWritten = f.size;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (!buf || sizeInBytes < f.size) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(buf, f.p, f.size);
  if (sizeWritten) *sizeWritten = f.size;
  return CUBLAS_STATUS_SUCCESS;
}

bool validHandle(cublasLtHandle_t h) { return h && h->magic == kHandleMagic; }

// Decoded, validated cublasLtMatmul arguments (everything but alpha/beta and the pointers).
struct Decoded {
  sim::gemm::Problem problem;
  DescState desc;
  LayoutState c, d;
};

bool decodeTrans(int32_t t, bool* trans) {
  switch (t) {
    case CUBLAS_OP_N: *trans = false; return true;
    case CUBLAS_OP_T:
    case CUBLAS_OP_C: *trans = true; return true;  // real types: conjugate transpose == transpose
    default: return false;
  }
}

cublasStatus_t decodeOperand(const LayoutState& l, sim::gemm::Operand* o) {
  if (l.order != CUBLASLT_ORDER_COL && l.order != CUBLASLT_ORDER_ROW)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (l.batchMode != CUBLASLT_BATCH_MODE_STRIDED || l.planeOffset != 0)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!sim::gemm::dtypeFromCuda(static_cast<int>(l.type), &o->type))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  o->rowOrder = l.order == CUBLASLT_ORDER_ROW;
  // ld: the stride between columns (column order) or rows (row order); no overlap allowed.
  const uint64_t minLd = o->rowOrder ? l.cols : l.rows;
  if (l.ld < 1 || static_cast<uint64_t>(l.ld) < minLd) return CUBLAS_STATUS_INVALID_VALUE;
  if (l.batchCount < 1) return CUBLAS_STATUS_INVALID_VALUE;
  if (l.rows > INT32_MAX || l.cols > INT32_MAX) return CUBLAS_STATUS_NOT_SUPPORTED;
  o->ld = l.ld;
  o->batchStride = l.batchOffset;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t decode(cublasLtMatmulDesc_t computeDesc, cublasLtMatrixLayout_t Adesc,
                      cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc,
                      cublasLtMatrixLayout_t Ddesc, Decoded* out) {
  DescState ds;
  LayoutState la, lb, lc, ld;
  if (!getState(computeDesc, kDescMagic, &ds) || !getState(Adesc, kLayoutMagic, &la) ||
      !getState(Bdesc, kLayoutMagic, &lb) || !getState(Cdesc, kLayoutMagic, &lc) ||
      !getState(Ddesc, kLayoutMagic, &ld))
    return CUBLAS_STATUS_INVALID_VALUE;
  sim::gemm::Problem& p = out->problem;
  if (!decodeTrans(ds.transA, &p.transA) || !decodeTrans(ds.transB, &p.transB))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (ds.transC != CUBLAS_OP_N) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (ds.fillMode != CUBLAS_FILL_MODE_FULL) return CUBLAS_STATUS_NOT_SUPPORTED;

  cublasStatus_t st;
  if ((st = decodeOperand(la, &p.a)) != CUBLAS_STATUS_SUCCESS ||
      (st = decodeOperand(lb, &p.b)) != CUBLAS_STATUS_SUCCESS ||
      (st = decodeOperand(lc, &p.c)) != CUBLAS_STATUS_SUCCESS ||
      (st = decodeOperand(ld, &p.d)) != CUBLAS_STATUS_SUCCESS)
    return st;

  // Types.
  p.compute = static_cast<cublasComputeType_t>(ds.computeType);
  if (!sim::gemm::dtypeFromCuda(ds.scaleType, &p.scale)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!sim::gemm::supportedCombination(p.compute, p.scale, p.a.type, p.b.type, p.c.type,
                                       p.d.type))
    return CUBLAS_STATUS_NOT_SUPPORTED;

  // Dimensions: D is m x n, C likewise, op(A) m x k, op(B) k x n.
  p.m = static_cast<int64_t>(ld.rows);
  p.n = static_cast<int64_t>(ld.cols);
  if (lc.rows != ld.rows || lc.cols != ld.cols) return CUBLAS_STATUS_INVALID_VALUE;
  const uint64_t aRows = p.transA ? la.cols : la.rows, aCols = p.transA ? la.rows : la.cols;
  const uint64_t bRows = p.transB ? lb.cols : lb.rows, bCols = p.transB ? lb.rows : lb.cols;
  if (aRows != ld.rows || bCols != ld.cols || aCols != bRows) return CUBLAS_STATUS_INVALID_VALUE;
  p.k = static_cast<int64_t>(aCols);

  // Batches: every operand has D's batch count.
  if (la.batchCount != ld.batchCount || lb.batchCount != ld.batchCount ||
      lc.batchCount != ld.batchCount)
    return CUBLAS_STATUS_INVALID_VALUE;
  p.batch = ld.batchCount;

  // Scalars and epilogue.
  if (ds.pointerMode != CUBLASLT_POINTER_MODE_HOST && ds.pointerMode != CUBLASLT_POINTER_MODE_DEVICE)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  p.scalarsOnDevice = ds.pointerMode == CUBLASLT_POINTER_MODE_DEVICE;
  switch (ds.epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT: break;
    case CUBLASLT_EPILOGUE_RELU: p.relu = true; break;
    case CUBLASLT_EPILOGUE_BIAS: p.bias = true; break;
    case CUBLASLT_EPILOGUE_RELU_BIAS: p.relu = p.bias = true; break;
    case CUBLASLT_EPILOGUE_GELU: p.gelu = true; break;
    case CUBLASLT_EPILOGUE_GELU_BIAS: p.gelu = p.bias = true; break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  // Bias epilogues need column-major layouts: an H200's cuBLASLt (13.0) answered NOT_SUPPORTED
  // for BIAS and RELU_BIAS on row-major ones, every transpose (2026-11-26); GELU alone ran.
  if (p.bias && ld.order == CUBLASLT_ORDER_ROW) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (p.bias) {
    if (!ds.biasPointer) return CUBLAS_STATUS_INVALID_VALUE;
    p.biasPtr = ds.biasPointer;
    p.biasBatchStride = ds.biasBatchStride;
    if (ds.biasType == -1) {
      p.biasType = p.d.type;  // default: D's type
    } else if (!sim::gemm::dtypeFromCuda(ds.biasType, &p.biasType)) {
      return CUBLAS_STATUS_NOT_SUPPORTED;
    }
  }
  out->desc = ds;
  out->c = lc;
  out->d = ld;
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) {
  if (!lightHandle) return CUBLAS_STATUS_INVALID_VALUE;
  auto* h = new (std::nothrow) cublasLtContext;
  if (!h) return CUBLAS_STATUS_ALLOC_FAILED;
  *lightHandle = h;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (!validHandle(lightHandle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  lightHandle->magic = 0;
  delete lightHandle;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasLtGetStatusName(cublasStatus_t status) { return sim::gemm::statusName(status); }
const char* cublasLtGetStatusString(cublasStatus_t status) {
  return sim::gemm::statusString(status);
}

size_t cublasLtGetVersion(void) { return CUBLAS_VERSION; }
size_t cublasLtGetCudartVersion(void) { return CUDART_VERSION; }

cublasStatus_t cublasLtGetProperty(libraryPropertyType type, int* value) {
  if (!value) return CUBLAS_STATUS_INVALID_VALUE;
  switch (type) {
    case MAJOR_VERSION: *value = CUBLAS_VER_MAJOR; return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CUBLAS_VER_MINOR; return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CUBLAS_VER_PATCH; return CUBLAS_STATUS_SUCCESS;
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

// --- matmul descriptors ------------------------------------------------------------------

cublasStatus_t cublasLtMatmulDescInit_internal(cublasLtMatmulDesc_t matmulDesc, size_t size,
                                               cublasComputeType_t computeType,
                                               cudaDataType_t scaleType) {
  if (!matmulDesc) return CUBLAS_STATUS_INVALID_VALUE;
  if (size < sizeof(cublasLtMatmulDescOpaque_t)) return CUBLAS_STATUS_ALLOC_FAILED;
  DescState s{};
  s.magic = kDescMagic;
  s.computeType = computeType;
  s.scaleType = scaleType;
  s.pointerMode = CUBLASLT_POINTER_MODE_HOST;
  s.transA = s.transB = s.transC = CUBLAS_OP_N;
  s.fillMode = CUBLAS_FILL_MODE_FULL;
  s.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  s.biasType = -1;
  s.biasPointer = nullptr;
  putState(matmulDesc, s);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc,
                                        cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  if (!matmulDesc) return CUBLAS_STATUS_INVALID_VALUE;
  auto* d = new (std::nothrow) cublasLtMatmulDescOpaque_t{};
  if (!d) return CUBLAS_STATUS_ALLOC_FAILED;
  cublasLtMatmulDescInit_internal(d, sizeof(*d), computeType, scaleType);
  *matmulDesc = d;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  if (!matmulDesc) return CUBLAS_STATUS_SUCCESS;
  std::memset(matmulDesc, 0, sizeof(*matmulDesc));
  delete matmulDesc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t sizeInBytes) {
  DescState s;
  if (!getState(matmulDesc, kDescMagic, &s)) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasStatus_t st = setField(descField(s, attr), buf, sizeInBytes);
  if (st == CUBLAS_STATUS_SUCCESS) putState(matmulDesc, s);
  return st;
}

cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                              cublasLtMatmulDescAttributes_t attr, void* buf,
                                              size_t sizeInBytes, size_t* sizeWritten) {
  DescState s;
  if (!getState(matmulDesc, kDescMagic, &s)) return CUBLAS_STATUS_INVALID_VALUE;
  return getField(descField(s, attr), buf, sizeInBytes, sizeWritten);
}

// --- matrix layouts ------------------------------------------------------------------------

cublasStatus_t cublasLtMatrixLayoutInit_internal(cublasLtMatrixLayout_t matLayout, size_t size,
                                                 cudaDataType type, uint64_t rows,
                                                 uint64_t cols, int64_t ld) {
  if (!matLayout) return CUBLAS_STATUS_INVALID_VALUE;
  if (size < sizeof(cublasLtMatrixLayoutOpaque_t)) return CUBLAS_STATUS_ALLOC_FAILED;
  LayoutState s{};
  s.magic = kLayoutMagic;
  s.type = static_cast<uint32_t>(type);
  s.order = CUBLASLT_ORDER_COL;
  s.batchCount = 1;
  s.batchMode = CUBLASLT_BATCH_MODE_STRIDED;
  s.rows = rows;
  s.cols = cols;
  s.ld = ld;
  putState(matLayout, s);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (!matLayout) return CUBLAS_STATUS_INVALID_VALUE;
  auto* l = new (std::nothrow) cublasLtMatrixLayoutOpaque_t{};
  if (!l) return CUBLAS_STATUS_ALLOC_FAILED;
  cublasLtMatrixLayoutInit_internal(l, sizeof(*l), type, rows, cols, ld);
  *matLayout = l;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  if (!matLayout) return CUBLAS_STATUS_SUCCESS;
  std::memset(matLayout, 0, sizeof(*matLayout));
  delete matLayout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t sizeInBytes) {
  LayoutState s;
  if (!getState(matLayout, kLayoutMagic, &s)) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasStatus_t st = setField(layoutField(s, attr), buf, sizeInBytes);
  if (st == CUBLAS_STATUS_SUCCESS) putState(matLayout, s);
  return st;
}

cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t matLayout,
                                                cublasLtMatrixLayoutAttribute_t attr, void* buf,
                                                size_t sizeInBytes, size_t* sizeWritten) {
  LayoutState s;
  if (!getState(matLayout, kLayoutMagic, &s)) return CUBLAS_STATUS_INVALID_VALUE;
  return getField(layoutField(s, attr), buf, sizeInBytes, sizeWritten);
}

// --- preferences and heuristics ------------------------------------------------------------

cublasStatus_t cublasLtMatmulPreferenceInit_internal(cublasLtMatmulPreference_t pref,
                                                     size_t size) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  if (size < sizeof(cublasLtMatmulPreferenceOpaque_t)) return CUBLAS_STATUS_ALLOC_FAILED;
  PrefState s{};
  s.magic = kPrefMagic;
  s.searchMode = CUBLASLT_SEARCH_BEST_FIT;
  s.reductionMask = CUBLASLT_REDUCTION_SCHEME_MASK;
  s.alignA = s.alignB = s.alignC = s.alignD = 256;
  s.implMask = ~uint64_t{0};
  putState(pref, s);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  auto* p = new (std::nothrow) cublasLtMatmulPreferenceOpaque_t{};
  if (!p) return CUBLAS_STATUS_ALLOC_FAILED;
  cublasLtMatmulPreferenceInit_internal(p, sizeof(*p));
  *pref = p;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  if (!pref) return CUBLAS_STATUS_SUCCESS;
  std::memset(pref, 0, sizeof(*pref));
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t sizeInBytes) {
  PrefState s;
  if (!getState(pref, kPrefMagic, &s)) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasStatus_t st = setField(prefField(s, attr), buf, sizeInBytes);
  if (st == CUBLAS_STATUS_SUCCESS) putState(pref, s);
  return st;
}

cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    void* buf, size_t sizeInBytes,
                                                    size_t* sizeWritten) {
  PrefState s;
  if (!getState(pref, kPrefMagic, &s)) return CUBLAS_STATUS_INVALID_VALUE;
  return getField(prefField(s, attr), buf, sizeInBytes, sizeWritten);
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle,
                                              cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc,
                                              cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc,
                                              cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference,
                                              int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount) {
  if (!validHandle(lightHandle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  PrefState ps;
  if (!getState(preference, kPrefMagic, &ps) || requestedAlgoCount <= 0 ||
      !heuristicResultsArray || !returnAlgoCount)
    return CUBLAS_STATUS_INVALID_VALUE;
  Decoded dec;
  const cublasStatus_t st = decode(operationDesc, Adesc, Bdesc, Cdesc, Ddesc, &dec);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  // One algorithm, no workspace, for every configuration the simulator runs.
  cublasLtMatmulHeuristicResult_t& r = heuristicResultsArray[0];
  std::memset(&r, 0, sizeof r);
  r.algo.data[0] = 1;
  r.workspaceSize = 0;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

// --- matmul ---------------------------------------------------------------------------------

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                              const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc,
                              const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                              const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspaceSizeInBytes,
                              cudaStream_t stream) {
  (void)algo;
  (void)workspace;
  (void)workspaceSizeInBytes;
  if (!validHandle(lightHandle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  Decoded dec;
  const cublasStatus_t st = decode(computeDesc, Adesc, Bdesc, Cdesc, Ddesc, &dec);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  // In place (C == D) needs C's layout to be D's.
  if (C == D && (dec.c.type != dec.d.type || dec.c.order != dec.d.order ||
                 dec.c.ld != dec.d.ld || dec.c.batchOffset != dec.d.batchOffset))
    return CUBLAS_STATUS_INVALID_VALUE;

  sim::gemm::Problem& p = dec.problem;
  p.a.base = A;
  p.b.base = B;
  p.c.base = C;
  p.d.base = D;
  if (p.scalarsOnDevice) {
    p.alphaPtr = alpha;
    p.betaPtr = beta;
  } else {  // host pointer mode: the values as of the call
    p.alpha = sim::gemm::readScalar(alpha, p.scale);
    p.beta = sim::gemm::readScalar(beta, p.scale);
  }
  if (p.m == 0 || p.n == 0) return CUBLAS_STATUS_SUCCESS;
  return sim::gemm::enqueue(stream, p);
}

}  // extern "C"
