// cublas.cpp — cuBLAS and cuBLASLt GEMM hooks (table in cublas.def).
//
// A sampled call is decoded into one canonical form (GemmProblem: op(A) m x k, op(B) k x n,
// C/D m x n, batches, types, compute type, scalars), its operands are snapshotted on the call's
// own stream into the checker's pool (inputs before the call, the output after it), and the
// check is queued for the checker thread (cuda/checker.h). Reruns run there, on the checker's
// stream and handles: the same entry point with the same arguments for checks at the call's own
// precision (determinism must compare like with like), or cublasGemmStridedBatchedEx /
// cublasLtMatmul with wider types and no TF32 for higher-precision references.
// docs/cuda.md describes what is decoded from each entry point.
#include <array>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <spdlog/fmt/fmt.h>

#include "call.h"
#include "cuda/checker.h"
#include "cuda/cublas_fns.h"
#include "cuda/device_call.h"
#include "cuda/kernels.h"
#include "engine.h"
#include "fumi/dtype.hpp"
#include "hook.h"
#include "reference.h"
#include "report.h"
#include "scratch_arena.h"

namespace fumi::cuda {

namespace {
void fillBlas(BlasApi& api, const char*& absent) {
#define FUMI_CUDA_FN(name, ret, params) resolveInto(api.name, #name, absent);
#include "cuda/cublas_fns.def"
#undef FUMI_CUDA_FN
}
}  // namespace

const BlasApi* blasApi(const char** missing) { return resolvedTable<BlasApi, fillBlas>(missing); }

}  // namespace fumi::cuda

namespace fumi::hooks {

#define FUMI_HOOK(name, backend, dtype, handler, ret, params, args) \
  using name##_fn = ret(*) params;                                  \
  inline name##_fn try_real_##name();
#include "cublas.def"
#undef FUMI_HOOK

namespace {

using cuda::BlasApi;
using cuda::Checker;
using cuda::HostScalars;
using cuda::Snapshots;

// ---- types -----------------------------------------------------------------------------------

fumi_dtype dtypeOfCuda(cudaDataType t) {
  switch (t) {
    case CUDA_R_64F: return FUMI_DTYPE_F64;
    case CUDA_R_32F: return FUMI_DTYPE_F32;
    case CUDA_R_16F: return FUMI_DTYPE_F16;
    case CUDA_R_16BF: return FUMI_DTYPE_BF16;
    default: return FUMI_DTYPE_UNKNOWN;
  }
}

cudaDataType cudaOfDtype(fumi_dtype d) {
  return d == FUMI_DTYPE_F64 ? CUDA_R_64F : d == FUMI_DTYPE_F16 ? CUDA_R_16F
                                          : d == FUMI_DTYPE_BF16 ? CUDA_R_16BF
                                                                 : CUDA_R_32F;
}

// The precision a compute type (with the handle's math mode) really multiplies in.
fumi_dtype computePrecision(cublasComputeType_t c, bool tf32_math) {
  switch (c) {
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC: return FUMI_DTYPE_F64;
    case CUBLAS_COMPUTE_32F: return tf32_math ? FUMI_DTYPE_TF32 : FUMI_DTYPE_F32;
    case CUBLAS_COMPUTE_32F_PEDANTIC: return FUMI_DTYPE_F32;
    case CUBLAS_COMPUTE_32F_FAST_TF32: return FUMI_DTYPE_TF32;
    case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_16F:
    case CUBLAS_COMPUTE_16F_PEDANTIC: return FUMI_DTYPE_F16;
    case CUBLAS_COMPUTE_32F_FAST_16BF: return FUMI_DTYPE_BF16;
    default: return FUMI_DTYPE_UNKNOWN;
  }
}

// alpha/beta are of the compute type's scale type (cuBLAS) or the descriptor's (cuBLASLt).
cudaDataType scaleTypeOf(cublasComputeType_t c) {
  switch (c) {
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC: return CUDA_R_64F;
    case CUBLAS_COMPUTE_16F:
    case CUBLAS_COMPUTE_16F_PEDANTIC: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

double scalarValue(const void* p, cudaDataType t) {
  return loadAsDouble(p, 0, dtypeOfCuda(t));
}

const char* opName(cublasOperation_t op) {
  return op == CUBLAS_OP_N ? "N" : op == CUBLAS_OP_T ? "T" : op == CUBLAS_OP_C ? "C" : "?";
}

// ---- the canonical problem --------------------------------------------------------------------

// One operand as stored: element (i, j) of the logical matrix at data + i*rs + j*cs, batch b
// at + b*bs (elements). Pointer-array batches have no single base: `array` holds device
// pointers to each batch's matrix.
struct Operand {
  const void* data = nullptr;
  const void* const* array = nullptr;
  cudaDataType type = CUDA_R_32F;
  int64_t rows = 0, cols = 0, rs = 1, cs = 1, bs = 0;
  int64_t matrixSpan() const {  // elements from the lowest to the highest address + 1
    return rows && cols ? (rows - 1) * rs + (cols - 1) * cs + 1 : 0;
  }
  int64_t span(int64_t batch) const {
    return matrixSpan() ? matrixSpan() + (batch - 1) * bs : 0;
  }
  size_t bytes(int64_t batch) const {
    return static_cast<size_t>(span(batch)) * dtypeBytes(dtypeOfCuda(type));
  }
  // The batch stride (elements) of a pointer-array operand's packed snapshot: one matrix span
  // rounded up to 256 bytes, the alignment of cudaMalloc's own allocations. A rerun lists these
  // matrices in pointer arrays, and cuBLAS's half-precision kernels fault on pointer-array
  // matrices that are not 16-byte aligned (an H200, 2026-11-26: "misaligned address").
  int64_t packedStride() const {
    const int64_t es = dtypeBytes(dtypeOfCuda(type));
    return es > 0 ? (matrixSpan() * es + 255) / 256 * 256 / es : matrixSpan();
  }
};

struct GemmProblem {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  Operand a, b, c, d, bias;  // bias: rows = m, cols = 1 (cuBLASLt epilogues)
  bool has_bias = false;
  cudaDataType scale = CUDA_R_32F;
  fumi_dtype compute = FUMI_DTYPE_UNKNOWN;
  const void* alpha = nullptr;
  const void* beta = nullptr;
  bool device_scalars = false;
  bool pointer_array = false;
  // Whether beta may be non-zero: C is then an input and is snapshotted.
  bool readsC() const {
    return device_scalars || scalarValue(beta, scale) != 0.0;
  }
  int64_t size() const { return m * n * k * batch; }
};

// Stored operand of a column-major BLAS matrix: op(X) is rows x cols, X stored with `ld`.
Operand blasOperand(const void* data, cudaDataType type, cublasOperation_t op, int64_t rows,
                    int64_t cols, int64_t ld, int64_t bs) {
  Operand o;
  o.data = data;
  o.type = type;
  o.rows = rows;
  o.cols = cols;
  const bool t = op != CUBLAS_OP_N;
  o.rs = t ? ld : 1;
  o.cs = t ? 1 : ld;
  o.bs = bs;
  return o;
}

// ---- rerun -----------------------------------------------------------------------------------

// Operands of one rerun, in device memory the checker owns.
struct RerunOperands {
  fumi_dtype precision;
  const void* a;
  const void* b;
  const void* c;  // beta's input (for cuBLAS the same buffer as d)
  void* d;
  const void* bias;
  double alpha, beta;
};
using Launch = std::function<cublasStatus_t(Checker&, const RerunOperands&)>;

class DeviceGemmCall final : public Call {
 public:
  DeviceGemmCall(OpSite& site, const GemmProblem& p, uint64_t index, fumi_dtype dtype)
      : Call(site, dtype, p.compute, p.size(), index), p_(p) {}
  int a = -1, b = -1, c_in = -1, d = -1, bias = -1;
  double alpha = 0, beta = 0;
  const void* alpha_snapshot = nullptr;  // device pointer mode: the scalars as they were
  const void* beta_snapshot = nullptr;
  bool c_separate = false;  // cuBLASLt: C and D are distinct arguments
  MatmulSpec::Act act = MatmulSpec::Act::kNone;  // cuBLASLt epilogue
  Launch same;      // the intercepted entry point again, at the call's precision
  Launch wider;     // a higher-precision reference
  std::function<void()> cleanup;  // checker-side resources of the launches

  ~DeviceGemmCall() override {
    if (cleanup) cleanup();
  }

  fumi_status rerun(fumi_dtype precision, void* const* buf) override {
    Checker* ck = Checker::get();
    if (!ck) return FUMI_UNSUPPORTED;
    const auto& ts = tensors();
    if (!readScalars(*ck)) return FUMI_ERROR;
    // At the call's own precision every buffer holds its tensor's own type (plugin.h).
    const bool own = precision == info().dtype;
    RerunOperands o{precision, pick(buf, a), pick(buf, b), nullptr, buf[d],
                    bias >= 0 ? pick(buf, bias) : nullptr, alpha, beta};
    if (c_in >= 0) {
      const void* cin = pick(buf, c_in);
      if (c_separate) {
        o.c = cin;
      } else {
        const fumi_dtype held = own ? ts[d].dtype : precision;
        const size_t bytes = static_cast<size_t>(tensorSpan(ts[d])) * dtypeBytes(held);
        if (!ck->copy(o.d, cin, bytes, cudaMemcpyDeviceToDevice)) return FUMI_ERROR;
        o.c = o.d;
      }
    } else {
      o.c = o.d;  // beta == 0: C is not read
    }
    const Launch& launch = own ? same : wider;
    if (!launch) return FUMI_UNSUPPORTED;
    const cublasStatus_t st = launch(*ck, o);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) return FUMI_UNSUPPORTED;
    return st == CUBLAS_STATUS_SUCCESS ? FUMI_OK : FUMI_ERROR;
  }

  fumi_status reference(int32_t output, double* out) override {
    Checker* ck = Checker::get();
    if (!ck || !readScalars(*ck)) return FUMI_UNSUPPORTED;
    return matmulReference(tensors(), spec(), output, out);
  }
  // The operands are contracted where they are, by fumi's kernels on the checker's stream
  // (Call::contractDevice): only the projections come back. Where that cannot be done (no
  // kernels, a bias), they are copied to the host as they are (their own dtype and layout,
  // into the thread's scratch arena) and read in place by the host's contraction kernels, as
  // a CPU BLAS call's are. Read through fp64 copies instead, a checksum of a 4096^3
  // cublasSgemm took a second on an H200's host (benchmarks.md part 5c).
  fumi_status project(int32_t output, const std::vector<Projection>& sides) override {
    Checker* ck = Checker::get();
    if (!ck || !readScalars(*ck) || output != d) return FUMI_UNSUPPORTED;
    std::vector<fumi_tensor> host = tensors();
    // The output's shape only: a projection of the exact result never reads the call's own.
    host[static_cast<size_t>(d)].data = nullptr;
    const DeviceContract device = [this](const fumi_tensor& view, int32_t dim, int32_t count,
                                         const double* vectors, double* out) {
      return contractDevice(view, dim, count, vectors, out);
    };
    if (matmulProjection(host, spec(), output, sides, &device) == FUMI_OK) return FUMI_OK;
    std::array<Stage, 4> stages;  // given back last first, as an array's elements are
    size_t staged = 0;
    for (int i : {a, b, beta != 0 ? c_in : -1, bias}) {
      if (i < 0) continue;
      fumi_tensor& t = host[static_cast<size_t>(i)];
      fumi_dtype dtype = t.dtype;
      const void* copy = tensorHostData(t, nullptr, &dtype, stages[staged++], this);
      if (!copy) return FUMI_UNSUPPORTED;
      t.data = const_cast<void*>(copy);
      t.memory = FUMI_MEMORY_HOST;
    }
    host[static_cast<size_t>(d)].memory = FUMI_MEMORY_HOST;
    return matmulProjection(host, spec(), output, sides);
  }

  const GemmProblem& problem() const { return p_; }

 private:
  MatmulSpec spec() const { return MatmulSpec{a, b, c_in, d, bias, alpha, beta, act}; }
  const void* pick(void* const* buf, int i) const {
    return buf[i] ? buf[i] : tensors()[static_cast<size_t>(i)].data;
  }
  bool readScalars(Checker& ck) {
    if (!alpha_snapshot) return true;
    unsigned char raw[2][8] = {};
    const size_t bytes = static_cast<size_t>(dtypeBytes(dtypeOfCuda(p_.scale)));
    if (!ck.copy(raw[0], alpha_snapshot, bytes, cudaMemcpyDeviceToHost) ||
        !ck.copy(raw[1], beta_snapshot, bytes, cudaMemcpyDeviceToHost))
      return false;
    alpha = scalarValue(raw[0], p_.scale);
    beta = scalarValue(raw[1], p_.scale);
    alpha_snapshot = nullptr;
    return true;
  }
  GemmProblem p_;
};

// The checker's own cuBLAS and cuBLASLt handles (checker thread only).
cublasHandle_t checkerBlas(Checker& ck, const BlasApi& api) {
  return cuda::checkerHandle<cublasHandle_t>([&](cublasHandle_t* h) {
    return api.cublasCreate_v2(h) == CUBLAS_STATUS_SUCCESS &&
           api.cublasSetStream_v2(*h, ck.stream()) == CUBLAS_STATUS_SUCCESS;
  });
}
cublasLtHandle_t checkerLt(const BlasApi& api) {
  return cuda::checkerHandle<cublasLtHandle_t>(
      [&](cublasLtHandle_t* h) { return api.cublasLtCreate(h) == CUBLAS_STATUS_SUCCESS; });
}

// The checker's cuBLAS handle set up like the program's was (math mode), host scalars.
cublasHandle_t rerunHandle(Checker& ck, cublasMath_t math) {
  const BlasApi* api = cuda::blasApi();
  cublasHandle_t h = api ? checkerBlas(ck, *api) : nullptr;
  if (!h) return nullptr;
  api->cublasSetMathMode(h, math);
  api->cublasSetPointerMode_v2(h, CUBLAS_POINTER_MODE_HOST);
  return h;
}

// The higher-precision reference for any cuBLAS GEMM: strided-batched Ex in `precision` with
// pedantic compute (no TF32, no reduced-precision reductions). Snapshots of pointer-array
// batches are packed, so one strided form serves every entry point.
Launch widerCublas(const GemmProblem& p, cublasOperation_t ta, cublasOperation_t tb,
                   int64_t lda, int64_t ldb, int64_t ldc, int64_t sa, int64_t sb, int64_t sc) {
  return [=](Checker& ck, const RerunOperands& o) {
    auto fn = try_real_cublasGemmStridedBatchedEx_64();
    cublasHandle_t h = rerunHandle(ck, CUBLAS_PEDANTIC_MATH);
    if (!fn || !h) return CUBLAS_STATUS_NOT_SUPPORTED;
    const cudaDataType t = cudaOfDtype(o.precision);
    const bool f64 = o.precision == FUMI_DTYPE_F64;
    const cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F_PEDANTIC
                                            : CUBLAS_COMPUTE_32F_PEDANTIC;
    const HostScalars s(o.alpha, o.beta, f64 ? FUMI_DTYPE_F64 : FUMI_DTYPE_F32);
    return fn(h, ta, tb, p.m, p.n, p.k, s.alpha, o.a, t, lda, sa, o.b, t, ldb, sb, s.beta, o.d, t,
              ldc, sc, p.batch, compute, CUBLAS_GEMM_DEFAULT);
  };
}

// ---- snapshotting on the user's thread --------------------------------------------------------

// Add operand `o` (snapshot at `snap`) to the call, as a [batch x] rows x cols tensor.
int addOperand(DeviceGemmCall& call, const char* name, fumi_role role, const Operand& o,
               int64_t batch, void* snap) {
  fumi_tensor t{};
  t.name = name;
  t.dtype = dtypeOfCuda(o.type);
  t.memory = FUMI_MEMORY_DEVICE;
  t.role = role;
  const int64_t bs = o.array ? o.packedStride() : o.bs;  // packed pointer-array snapshots
  if (batch > 1) {
    t.ndim = 3;
    const int64_t shape[3] = {batch, o.rows, o.cols}, strides[3] = {bs, o.rs, o.cs};
    std::memcpy(t.shape, shape, sizeof shape);
    std::memcpy(t.strides, strides, sizeof strides);
  } else {
    t.ndim = 2;
    t.shape[0] = o.rows;
    t.shape[1] = o.cols;
    t.strides[0] = o.rs;
    t.strides[1] = o.cs;
  }
  t.data = snap;
  return call.addTensor(t);
}

// The pointer arrays of a batched call, read on the checker thread: copying them needs the
// call's stream synchronised, which a program thread must not do (another thread's
// global-mode capture would break). Only sampled pointer-array calls pay this wait.
bool readPointerArrays(Checker& ck, cudaStream_t stream, const GemmProblem& p,
                       std::vector<const void*> (&out)[3]) {
  const Operand* ops[3] = {&p.a, &p.b, &p.d};
  bool ok = true;
  ck.runOnChecker([&] {
    for (int i = 0; i < 3 && ok; ++i) {
      out[i].resize(static_cast<size_t>(p.batch));
      ok = ck.api().cudaMemcpyAsync(out[i].data(), ops[i]->array, out[i].size() * sizeof(void*),
                                    cudaMemcpyDeviceToHost, stream) == cudaSuccess;
    }
    ok = ok && ck.api().cudaStreamSynchronize(stream) == cudaSuccess;
  });
  return ok;
}

// The policy's sampling decision for a GEMM of m x n x k (x batch) with A of type `a`, made
// from the call's arguments alone, so that reading the handle's state and decoding the call is
// paid only by sampled calls; nullptr: forward unchecked. Each call is decided once.
RuleSampler* selectGemm(const CallSite& cs, int64_t m, int64_t n, int64_t k, int64_t batch,
                        cudaDataType a) {
  const fumi_dtype dtype = dtypeOfCuda(a);
  const int64_t size = m * n * k * batch;  // GemmProblem::size()
  if (size <= 0 || dtype == FUMI_DTYPE_UNKNOWN) return nullptr;
  return cs.decision.select(CallFacts{size, dtype, "cuda"}, cs.call_index);
}

// The common path of every GEMM hook. `forward` runs the program's call; `describe` adds the
// entry point's own arguments to the report and sets the call's launches.
template <class Forward, class Describe>
cublasStatus_t checkedGemm(const CallSite& cs, RuleSampler* sampler, cudaStream_t stream,
                           GemmProblem& p, Forward&& forward, Describe&& describe) {
  auto call = std::make_unique<DeviceGemmCall>(cs.site, p, cs.call_index, dtypeOfCuda(p.a.type));
  std::vector<const void*> arrays[3];
  void *sa = nullptr, *sb = nullptr, *sc = nullptr, *sbias = nullptr, *sd = nullptr;
  // Pointer-array operands: each batch's matrix packed into one snapshot.
  auto take = [&](Snapshots& snaps, const Operand& o, const std::vector<const void*>& ptrs) {
    const size_t es = static_cast<size_t>(dtypeBytes(dtypeOfCuda(o.type)));
    return p.pointer_array
               ? snaps.copyBatches(o.bytes(1), static_cast<size_t>(o.packedStride()) * es, ptrs)
               : snaps.copy(o.data, o.bytes(p.batch));
  };
  auto before = [&](Checker& ck, Snapshots& snaps) -> const char* {
    if (p.pointer_array && !readPointerArrays(ck, stream, p, arrays))
      return "pointer arrays unreadable";
    sa = take(snaps, p.a, arrays[0]);
    sb = take(snaps, p.b, arrays[1]);
    if (p.readsC()) sc = take(snaps, p.c, arrays[2]);
    if (p.has_bias) sbias = snaps.copy(p.bias.data, p.bias.bytes(1));
    if (p.device_scalars) {
      const size_t bytes = static_cast<size_t>(dtypeBytes(dtypeOfCuda(p.scale)));
      call->alpha_snapshot = snaps.copy(p.alpha, bytes);
      call->beta_snapshot = snaps.copy(p.beta, bytes);
    } else {
      call->alpha = scalarValue(p.alpha, p.scale);
      call->beta = scalarValue(p.beta, p.scale);
    }
    return nullptr;
  };
  auto after = [&](Snapshots& snaps) { return (sd = take(snaps, p.d, arrays[2])) != nullptr; };
  auto build = [&]() -> std::unique_ptr<Call> {
    call->a = addOperand(*call, "A", FUMI_ROLE_INPUT, p.a, p.batch, sa);
    call->b = addOperand(*call, "B", FUMI_ROLE_INPUT, p.b, p.batch, sb);
    if (sc) call->c_in = addOperand(*call, "C", FUMI_ROLE_INPUT, p.c, p.batch, sc);
    if (sbias) call->bias = addOperand(*call, "bias", FUMI_ROLE_INPUT, p.bias, 1, sbias);
    call->d = addOperand(*call, p.c.data == p.d.data ? "C" : "D", FUMI_ROLE_OUTPUT, p.d, p.batch,
                         sd);
    call->addArg("m", std::to_string(p.m));
    call->addArg("n", std::to_string(p.n));
    call->addArg("k", std::to_string(p.k));
    call->setReductionLength(p.k);
    if (p.batch > 1) call->addArg("batch", std::to_string(p.batch));
    call->addArg("compute", dtypeName(p.compute));
    call->addArg("pointer_mode", p.device_scalars ? "device" : "host");
    if (!p.device_scalars) {
      call->addArg("alpha", formatScalar(call->alpha));
      call->addArg("beta", formatScalar(call->beta));
    }
    describe(*call);
    return std::move(call);
  };
  return cuda::checkedDeviceCall(cs, sampler, stream, CUBLAS_STATUS_SUCCESS, forward, before,
                                 after, build);
}

// ---- handle state ----------------------------------------------------------------------------

struct HandleState {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  bool device_scalars = false;
  bool tf32() const {
    return (math & 0xf) == CUBLAS_TF32_TENSOR_OP_MATH;
  }
};

HandleState handleState(cublasHandle_t h) {
  HandleState s;
  const BlasApi* api = cuda::blasApi();
  if (!api) return s;
  InsideScope inside;
  cublasPointerMode_t pm = CUBLAS_POINTER_MODE_HOST;
  api->cublasGetStream_v2(h, &s.stream);
  api->cublasGetMathMode(h, &s.math);
  api->cublasGetPointerMode_v2(h, &pm);
  s.device_scalars = pm == CUBLAS_POINTER_MODE_DEVICE;
  return s;
}

// Fill the BLAS-style part of a problem (column-major, op(A) m x k, op(B) k x n, C m x n).
GemmProblem blasProblem(const HandleState& hs, cublasOperation_t ta, cublasOperation_t tb,
                        int64_t m, int64_t n, int64_t k, const void* A, cudaDataType at,
                        int64_t lda, int64_t sa, const void* B, cudaDataType bt, int64_t ldb,
                        int64_t sb, void* C, cudaDataType ct, int64_t ldc, int64_t sc,
                        int64_t batch, cublasComputeType_t compute, const void* alpha,
                        const void* beta) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.batch = batch;
  p.a = blasOperand(A, at, ta, m, k, lda, sa);
  p.b = blasOperand(B, bt, tb, k, n, ldb, sb);
  p.c = blasOperand(C, ct, CUBLAS_OP_N, m, n, ldc, sc);
  p.d = p.c;
  p.scale = scaleTypeOf(compute);
  p.compute = computePrecision(compute, hs.tf32());
  p.alpha = alpha;
  p.beta = beta;
  p.device_scalars = hs.device_scalars;
  return p;
}

void describeBlas(DeviceGemmCall& call, cublasOperation_t ta, cublasOperation_t tb, int64_t lda,
                  int64_t ldb, int64_t ldc, const HandleState& hs) {
  call.addArg("transa", opName(ta));
  call.addArg("transb", opName(tb));
  call.addArg("lda", std::to_string(lda));
  call.addArg("ldb", std::to_string(ldb));
  call.addArg("ldc", std::to_string(ldc));
  call.addArg("math_mode", hs.tf32() ? "tf32" : (hs.math & 0xf) == CUBLAS_PEDANTIC_MATH
                                                    ? "pedantic" : "default");
}

// Set the call's launches for a cuBLAS entry point: `replay(handle, ops, scalars)` calls it
// again with the checker's handle; the wider reference is the strided-batched Ex form.
template <class Replay>
void setBlasLaunches(DeviceGemmCall& call, const GemmProblem& p, const HandleState& hs,
                     cublasOperation_t ta, cublasOperation_t tb, int64_t lda, int64_t ldb,
                     int64_t ldc, int64_t sa, int64_t sb, int64_t sc, Replay replay) {
  const cublasMath_t math = hs.math;
  const cudaDataType scale = p.scale;
  call.same = [=](Checker& ck, const RerunOperands& o) {
    cublasHandle_t h = rerunHandle(ck, math);
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    const HostScalars s(o.alpha, o.beta, dtypeOfCuda(scale));
    return replay(ck, h, o, s);
  };
  call.wider = widerCublas(p, ta, tb, lda, ldb, ldc, sa, sb, sc);
}

// Typed entry points: cublas{S,D,H}gemm[_v2][_64].
template <class T>
constexpr cudaDataType cudaTypeOf() {
  return sizeof(T) == 8 ? CUDA_R_64F : sizeof(T) == 4 ? CUDA_R_32F : CUDA_R_16F;
}
template <class T>
constexpr cublasComputeType_t computeOf() {
  return sizeof(T) == 8 ? CUBLAS_COMPUTE_64F : sizeof(T) == 4 ? CUBLAS_COMPUTE_32F
                                                              : CUBLAS_COMPUTE_16F;
}

template <class T, class Real, class I>
cublasStatus_t typedGemm(const CallSite& cs, Real real, cublasHandle_t h, cublasOperation_t ta,
                         cublasOperation_t tb, I m, I n, I k, const T* alpha, const T* A, I lda,
                         const T* B, I ldb, const T* beta, T* C, I ldc) {
  auto forward = [&] { return forwardReal(real, h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc); };
  constexpr cudaDataType t = cudaTypeOf<T>();
  RuleSampler* sampler = selectGemm(cs, m, n, k, 1, t);
  if (!sampler) return forward();
  const HandleState hs = handleState(h);
  GemmProblem p = blasProblem(hs, ta, tb, m, n, k, A, t, lda, 0, B, t, ldb, 0, C, t, ldc, 0, 1,
                              computeOf<T>(), alpha, beta);
  return checkedGemm(cs, sampler, hs.stream, p, forward, [&](DeviceGemmCall& call) {
    describeBlas(call, ta, tb, lda, ldb, ldc, hs);
    setBlasLaunches(call, p, hs, ta, tb, lda, ldb, ldc, 0, 0, 0,
                    [=](Checker&, cublasHandle_t hh, const RerunOperands& o, const HostScalars& s) {
                      return real(hh, ta, tb, m, n, k, reinterpret_cast<const T*>(s.alpha),
                                  static_cast<const T*>(o.a), lda, static_cast<const T*>(o.b),
                                  ldb, reinterpret_cast<const T*>(s.beta), static_cast<T*>(o.d),
                                  ldc);
                    });
  });
}

// cublas{S,D}gemmStridedBatched[_64].
template <class T, class Real, class I>
cublasStatus_t typedStrided(const CallSite& cs, Real real, cublasHandle_t h, cublasOperation_t ta,
                            cublasOperation_t tb, I m, I n, I k, const T* alpha, const T* A,
                            I lda, long long sa, const T* B, I ldb, long long sb, const T* beta,
                            T* C, I ldc, long long sc, I batch) {
  auto forward = [&] {
    return forwardReal(real, h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc,
                       batch);
  };
  constexpr cudaDataType t = cudaTypeOf<T>();
  RuleSampler* sampler = selectGemm(cs, m, n, k, batch, t);
  if (!sampler) return forward();
  const HandleState hs = handleState(h);
  GemmProblem p = blasProblem(hs, ta, tb, m, n, k, A, t, lda, sa, B, t, ldb, sb, C, t, ldc, sc,
                              batch, computeOf<T>(), alpha, beta);
  return checkedGemm(cs, sampler, hs.stream, p, forward, [&](DeviceGemmCall& call) {
    describeBlas(call, ta, tb, lda, ldb, ldc, hs);
    call.addArg("strides", fmt::format("{},{},{}", sa, sb, sc));
    setBlasLaunches(call, p, hs, ta, tb, lda, ldb, ldc, sa, sb, sc,
                    [=](Checker&, cublasHandle_t hh, const RerunOperands& o, const HostScalars& s) {
                      return real(hh, ta, tb, m, n, k, reinterpret_cast<const T*>(s.alpha),
                                  static_cast<const T*>(o.a), lda, sa,
                                  static_cast<const T*>(o.b), ldb, sb,
                                  reinterpret_cast<const T*>(s.beta), static_cast<T*>(o.d), ldc,
                                  sc, batch);
                    });
  });
}

void describeEx(DeviceGemmCall& call, cudaDataType at, cudaDataType bt, cudaDataType ct,
                cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  call.addArg("types", fmt::format("{},{},{}", dtypeName(dtypeOfCuda(at)),
                                   dtypeName(dtypeOfCuda(bt)), dtypeName(dtypeOfCuda(ct))));
  call.addArg("compute_type", std::to_string(static_cast<int>(compute)));
  call.addArg("algo", std::to_string(static_cast<int>(algo)));
}

// cublasGemmEx[_64].
template <class Real, class I>
cublasStatus_t gemmEx(const CallSite& cs, Real real, cublasHandle_t h, cublasOperation_t ta,
                      cublasOperation_t tb, I m, I n, I k, const void* alpha, const void* A,
                      cudaDataType at, I lda, const void* B, cudaDataType bt, I ldb,
                      const void* beta, void* C, cudaDataType ct, I ldc,
                      cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  auto forward = [&] {
    return forwardReal(real, h, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc,
                       compute, algo);
  };
  RuleSampler* sampler = selectGemm(cs, m, n, k, 1, at);
  if (!sampler) return forward();
  const HandleState hs = handleState(h);
  GemmProblem p = blasProblem(hs, ta, tb, m, n, k, A, at, lda, 0, B, bt, ldb, 0, C, ct, ldc, 0, 1,
                              compute, alpha, beta);
  return checkedGemm(cs, sampler, hs.stream, p, forward, [&](DeviceGemmCall& call) {
    describeBlas(call, ta, tb, lda, ldb, ldc, hs);
    describeEx(call, at, bt, ct, compute, algo);
    setBlasLaunches(call, p, hs, ta, tb, lda, ldb, ldc, 0, 0, 0,
                    [=](Checker&, cublasHandle_t hh, const RerunOperands& o, const HostScalars& s) {
                      return real(hh, ta, tb, m, n, k, s.alpha, o.a, at, lda, o.b, bt, ldb, s.beta,
                                  o.d, ct, ldc, compute, algo);
                    });
  });
}

// cublasGemmStridedBatchedEx[_64].
template <class Real, class I>
cublasStatus_t stridedEx(const CallSite& cs, Real real, cublasHandle_t h, cublasOperation_t ta,
                         cublasOperation_t tb, I m, I n, I k, const void* alpha, const void* A,
                         cudaDataType at, I lda, long long sa, const void* B, cudaDataType bt,
                         I ldb, long long sb, const void* beta, void* C, cudaDataType ct, I ldc,
                         long long sc, I batch, cublasComputeType_t compute,
                         cublasGemmAlgo_t algo) {
  auto forward = [&] {
    return forwardReal(real, h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C,
                       ct, ldc, sc, batch, compute, algo);
  };
  RuleSampler* sampler = selectGemm(cs, m, n, k, batch, at);
  if (!sampler) return forward();
  const HandleState hs = handleState(h);
  GemmProblem p = blasProblem(hs, ta, tb, m, n, k, A, at, lda, sa, B, bt, ldb, sb, C, ct, ldc, sc,
                              batch, compute, alpha, beta);
  return checkedGemm(cs, sampler, hs.stream, p, forward, [&](DeviceGemmCall& call) {
    describeBlas(call, ta, tb, lda, ldb, ldc, hs);
    describeEx(call, at, bt, ct, compute, algo);
    call.addArg("strides", fmt::format("{},{},{}", sa, sb, sc));
    setBlasLaunches(call, p, hs, ta, tb, lda, ldb, ldc, sa, sb, sc,
                    [=](Checker&, cublasHandle_t hh, const RerunOperands& o, const HostScalars& s) {
                      return real(hh, ta, tb, m, n, k, s.alpha, o.a, at, lda, sa, o.b, bt, ldb,
                                  sb, s.beta, o.d, ct, ldc, sc, batch, compute, algo);
                    });
  });
}

// cublasGemmBatchedEx[_64]: pointer arrays in device memory. Snapshots are packed, so a
// rerun builds pointer arrays into them in checker scratch.
template <class Real, class I>
cublasStatus_t batchedEx(const CallSite& cs, Real real, cublasHandle_t h, cublasOperation_t ta,
                         cublasOperation_t tb, I m, I n, I k, const void* alpha,
                         const void* const* A, cudaDataType at, I lda, const void* const* B,
                         cudaDataType bt, I ldb, const void* beta, void* const* C,
                         cudaDataType ct, I ldc, I batch, cublasComputeType_t compute,
                         cublasGemmAlgo_t algo) {
  auto forward = [&] {
    return forwardReal(real, h, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc,
                       batch, compute, algo);
  };
  RuleSampler* sampler = selectGemm(cs, m, n, k, batch, at);
  if (!sampler) return forward();
  const HandleState hs = handleState(h);
  GemmProblem p = blasProblem(hs, ta, tb, m, n, k, nullptr, at, lda, 0, nullptr, bt, ldb, 0,
                              nullptr, ct, ldc, 0, batch, compute, alpha, beta);
  p.pointer_array = true;
  p.a.array = A;
  p.b.array = B;
  p.c.array = C;
  p.d.array = C;
  // Packed snapshots: batch stride = one matrix span, 256-byte aligned (Operand::packedStride).
  const int64_t sa = p.a.packedStride(), sb = p.b.packedStride(), sc = p.c.packedStride();
  return checkedGemm(cs, sampler, hs.stream, p, forward, [&](DeviceGemmCall& call) {
    describeBlas(call, ta, tb, lda, ldb, ldc, hs);
    describeEx(call, at, bt, ct, compute, algo);
    const size_t ea = static_cast<size_t>(dtypeBytes(dtypeOfCuda(at))),
                 eb = static_cast<size_t>(dtypeBytes(dtypeOfCuda(bt))),
                 ec = static_cast<size_t>(dtypeBytes(dtypeOfCuda(ct)));
    setBlasLaunches(
        call, p, hs, ta, tb, lda, ldb, ldc, sa, sb, sc,
        [=](Checker& ck, cublasHandle_t hh, const RerunOperands& o, const HostScalars& s) {
          const size_t nb = static_cast<size_t>(batch);
          std::vector<const void*> ptrs(3 * nb);
          for (size_t i = 0; i < nb; ++i) {
            ptrs[i] = static_cast<const char*>(o.a) + i * static_cast<size_t>(sa) * ea;
            ptrs[nb + i] = static_cast<const char*>(o.b) + i * static_cast<size_t>(sb) * eb;
            ptrs[2 * nb + i] = static_cast<char*>(o.d) + i * static_cast<size_t>(sc) * ec;
          }
          void* dev = ck.scratch(ptrs.size() * sizeof(void*));
          if (!dev) return CUBLAS_STATUS_ALLOC_FAILED;
          cublasStatus_t st = CUBLAS_STATUS_INTERNAL_ERROR;
          if (ck.copy(dev, ptrs.data(), ptrs.size() * sizeof(void*), cudaMemcpyHostToDevice)) {
            auto arrays = static_cast<void* const*>(dev);
            st = real(hh, ta, tb, m, n, k, s.alpha, const_cast<const void* const*>(arrays), at,
                      lda, const_cast<const void* const*>(arrays + nb), bt, ldb, s.beta,
                      arrays + 2 * nb, ct, ldc, batch, compute, algo);
            ck.api().cudaStreamSynchronize(ck.stream());  // before the arrays go back
          }
          ck.give(dev);
          return st;
        });
  });
}

// ---- cuBLASLt ----------------------------------------------------------------------------------

template <class V>
bool descAttr(const BlasApi& api, cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
              V* v) {
  size_t written = 0;
  return api.cublasLtMatmulDescGetAttribute(d, a, v, sizeof(V), &written) ==
         CUBLAS_STATUS_SUCCESS;
}
template <class V>
bool layoutAttr(const BlasApi& api, cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a,
                V* v) {
  size_t written = 0;
  return api.cublasLtMatrixLayoutGetAttribute(l, a, v, sizeof(V), &written) ==
         CUBLAS_STATUS_SUCCESS;
}

// A matrix layout as fumi keeps it (the program may destroy or change its own after the call).
struct Layout {
  uint32_t type = CUDA_R_32F;
  int32_t order = CUBLASLT_ORDER_COL;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0, batch_offset = 0;
  int32_t batch = 1;
  bool read(const BlasApi& api, cublasLtMatrixLayout_t l) {
    return l && layoutAttr(api, l, CUBLASLT_MATRIX_LAYOUT_TYPE, &type) &&
           layoutAttr(api, l, CUBLASLT_MATRIX_LAYOUT_ORDER, &order) &&
           layoutAttr(api, l, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows) &&
           layoutAttr(api, l, CUBLASLT_MATRIX_LAYOUT_COLS, &cols) &&
           layoutAttr(api, l, CUBLASLT_MATRIX_LAYOUT_LD, &ld) &&
           layoutAttr(api, l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch) &&
           layoutAttr(api, l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_offset) &&
           (order == CUBLASLT_ORDER_COL || order == CUBLASLT_ORDER_ROW);
  }
  // The stored matrix, seen through `op`, as an Operand.
  Operand operand(const void* data, cublasOperation_t op) const {
    Operand o;
    o.data = data;
    o.type = static_cast<cudaDataType>(type);
    const int64_t r = static_cast<int64_t>(rows), c = static_cast<int64_t>(cols);
    const int64_t srs = order == CUBLASLT_ORDER_COL ? 1 : ld, scs = order == CUBLASLT_ORDER_COL ? ld : 1;
    const bool t = op != CUBLAS_OP_N;
    o.rows = t ? c : r;
    o.cols = t ? r : c;
    o.rs = t ? scs : srs;
    o.cs = t ? srs : scs;
    o.bs = batch > 1 ? batch_offset : 0;
    return o;
  }
  // A layout object like this one holding `as` (or its own type).
  cublasLtMatrixLayout_t create(const BlasApi& api, cudaDataType as) const {
    cublasLtMatrixLayout_t l = nullptr;
    if (api.cublasLtMatrixLayoutCreate(&l, as, rows, cols, ld) != CUBLAS_STATUS_SUCCESS)
      return nullptr;
    api.cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, sizeof order);
    api.cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                         sizeof batch);
    api.cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                         &batch_offset, sizeof batch_offset);
    return l;
  }
};

// The matmul descriptor's attributes fumi understands; anything else makes the call unchecked.
struct MatmulDesc {
  int32_t compute = CUBLAS_COMPUTE_32F, scale = CUDA_R_32F, pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  int32_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N, tc = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int32_t bias_type = -1;
  bool read(const BlasApi& api, cublasLtMatmulDesc_t d) {
    return d && descAttr(api, d, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &compute) &&
           descAttr(api, d, CUBLASLT_MATMUL_DESC_SCALE_TYPE, &scale) &&
           descAttr(api, d, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pointer_mode) &&
           descAttr(api, d, CUBLASLT_MATMUL_DESC_TRANSA, &ta) &&
           descAttr(api, d, CUBLASLT_MATMUL_DESC_TRANSB, &tb) &&
           descAttr(api, d, CUBLASLT_MATMUL_DESC_TRANSC, &tc) &&
           descAttr(api, d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue) &&
           descAttr(api, d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias) &&
           descAttr(api, d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type);
  }
  bool supported() const {
    const bool ep = epilogue == CUBLASLT_EPILOGUE_DEFAULT || epilogue == CUBLASLT_EPILOGUE_RELU ||
                    epilogue == CUBLASLT_EPILOGUE_BIAS || epilogue == CUBLASLT_EPILOGUE_RELU_BIAS ||
                    epilogue == CUBLASLT_EPILOGUE_GELU || epilogue == CUBLASLT_EPILOGUE_GELU_BIAS;
    return ep && tc == CUBLAS_OP_N &&
           (pointer_mode == CUBLASLT_POINTER_MODE_HOST ||
            pointer_mode == CUBLASLT_POINTER_MODE_DEVICE);
  }
  bool hasBias() const { return (epilogue & CUBLASLT_EPILOGUE_BIAS) != 0; }
  MatmulSpec::Act activation() const {
    return (epilogue & CUBLASLT_EPILOGUE_RELU) == CUBLASLT_EPILOGUE_RELU   ? MatmulSpec::Act::kRelu
           : (epilogue & CUBLASLT_EPILOGUE_GELU) == CUBLASLT_EPILOGUE_GELU ? MatmulSpec::Act::kGelu
                                                                           : MatmulSpec::Act::kNone;
  }
  const char* epilogueName() const {
    switch (epilogue) {
      case CUBLASLT_EPILOGUE_RELU: return "relu";
      case CUBLASLT_EPILOGUE_BIAS: return "bias";
      case CUBLASLT_EPILOGUE_RELU_BIAS: return "relu_bias";
      case CUBLASLT_EPILOGUE_GELU: return "gelu";
      case CUBLASLT_EPILOGUE_GELU_BIAS: return "gelu_bias";
      default: return "default";
    }
  }
  // A descriptor like this one, computing in `compute`/`scale`, bias of `bias_as` at `bias_ptr`,
  // host scalars.
  cublasLtMatmulDesc_t create(const BlasApi& api, cublasComputeType_t c, cudaDataType s,
                              const void* bias_ptr, int32_t bias_as) const {
    cublasLtMatmulDesc_t d = nullptr;
    if (api.cublasLtMatmulDescCreate(&d, c, s) != CUBLAS_STATUS_SUCCESS) return nullptr;
    const int32_t host = CUBLASLT_POINTER_MODE_HOST;
    api.cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_POINTER_MODE, &host, sizeof host);
    api.cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    api.cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    api.cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                       sizeof epilogue);
    if (hasBias()) {
      api.cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr,
                                         sizeof bias_ptr);
      api.cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_as,
                                         sizeof bias_as);
    }
    return d;
  }
};

// Rerun of a cublasLtMatmul with descriptors built from the kept attributes, in `as` types
// (the call's own, or a wider one), with `algo` (nullptr: the library's heuristic).
cublasStatus_t ltRerun(Checker& ck, const MatmulDesc& md, const Layout (&l)[4],
                       cublasComputeType_t compute, cudaDataType scale, const cudaDataType (&as)[4],
                       int32_t bias_as, const cublasLtMatmulAlgo_t* algo, size_t workspace,
                       const RerunOperands& o) {
  auto fn = try_real_cublasLtMatmul();
  const BlasApi* blas = cuda::blasApi();
  cublasLtHandle_t h = blas ? checkerLt(*blas) : nullptr;
  if (!fn || !h) return CUBLAS_STATUS_NOT_SUPPORTED;
  const BlasApi& api = *blas;
  cublasLtMatmulDesc_t d = md.create(api, compute, scale, o.bias, bias_as);
  cublasLtMatrixLayout_t ls[4];
  for (int i = 0; i < 4; ++i) ls[i] = l[i].create(api, as[i]);
  void* ws = workspace ? ck.scratch(workspace) : nullptr;
  cublasStatus_t st = CUBLAS_STATUS_ALLOC_FAILED;
  if (d && ls[0] && ls[1] && ls[2] && ls[3] && (ws || !workspace)) {
    const HostScalars s(o.alpha, o.beta, dtypeOfCuda(scale));
    st = fn(h, d, s.alpha, o.a, ls[0], o.b, ls[1], s.beta, o.c, ls[2], o.d, ls[3], algo, ws,
            workspace, ck.stream());
    ck.api().cudaStreamSynchronize(ck.stream());  // before workspace and descriptors go
  }
  if (ws) ck.give(ws);
  for (auto* x : ls)
    if (x) api.cublasLtMatrixLayoutDestroy(x);
  if (d) api.cublasLtMatmulDescDestroy(d);
  return st;
}

// selectGemm for a cublasLtMatmul: the facts the decision needs are in the descriptors, so
// only those are read (A's type and shape, transa, D's shape and batch: 7 attribute reads; the
// full decode, ~37, waits for a sampled call). Descriptors that cannot be read are decided
// with unknown facts, so that a sampled call still counts as skipped.
RuleSampler* selectLt(const CallSite& cs, const BlasApi* api, cublasLtMatmulDesc_t desc,
                      cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t d) {
  int32_t ta = CUBLAS_OP_N, batch = 1;
  uint32_t a_type = 0;
  uint64_t a_rows = 0, a_cols = 0, m = 0, n = 0;
  bool read = false;
  if (api && desc && a && d) {
    InsideScope inside;
    read = descAttr(*api, desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta) &&
           layoutAttr(*api, a, CUBLASLT_MATRIX_LAYOUT_TYPE, &a_type) &&
           layoutAttr(*api, a, CUBLASLT_MATRIX_LAYOUT_ROWS, &a_rows) &&
           layoutAttr(*api, a, CUBLASLT_MATRIX_LAYOUT_COLS, &a_cols) &&
           layoutAttr(*api, d, CUBLASLT_MATRIX_LAYOUT_ROWS, &m) &&
           layoutAttr(*api, d, CUBLASLT_MATRIX_LAYOUT_COLS, &n) &&
           layoutAttr(*api, d, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch);
  }
  if (!read) return cs.decision.select(CallFacts{1, FUMI_DTYPE_UNKNOWN, "cuda"}, cs.call_index);
  const uint64_t k = ta == CUBLAS_OP_N ? a_cols : a_rows;
  return selectGemm(cs, static_cast<int64_t>(m), static_cast<int64_t>(n), static_cast<int64_t>(k),
                    std::max<int32_t>(1, batch), static_cast<cudaDataType>(a_type));
}

template <class Real>
cublasStatus_t ltMatmul(const CallSite& cs, Real real, cublasLtHandle_t lh,
                        cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                        cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                        const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                        cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo,
                        void* workspace, size_t ws_size, cudaStream_t stream) {
  auto forward = [&] {
    return forwardReal(real, lh, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo,
                       workspace, ws_size, stream);
  };
  const BlasApi* api = cuda::blasApi();
  RuleSampler* sampler = selectLt(cs, api, desc, Adesc, Ddesc);
  if (!sampler) return forward();
  MatmulDesc md;
  Layout l[4];
  {
    InsideScope inside;
    if (!api || !md.read(*api, desc) || !md.supported() || !l[0].read(*api, Adesc) ||
        !l[1].read(*api, Bdesc) || !l[2].read(*api, Cdesc) || !l[3].read(*api, Ddesc)) {
      // A layout order, epilogue or pointer mode fumi does not model: the call runs unchecked.
      cs.site.countSkipped("descriptor attributes not supported");
      return forward();
    }
  }
  GemmProblem p;
  const auto ta = static_cast<cublasOperation_t>(md.ta), tb = static_cast<cublasOperation_t>(md.tb);
  p.a = l[0].operand(A, ta);
  p.b = l[1].operand(B, tb);
  p.c = l[2].operand(C, CUBLAS_OP_N);
  p.d = l[3].operand(D, CUBLAS_OP_N);
  p.m = p.d.rows;
  p.n = p.d.cols;
  p.k = p.a.cols;
  p.batch = std::max<int32_t>(1, l[3].batch);
  p.scale = static_cast<cudaDataType>(md.scale);
  p.compute = computePrecision(static_cast<cublasComputeType_t>(md.compute), false);
  p.alpha = alpha;
  p.beta = beta;
  p.device_scalars = md.pointer_mode == CUBLASLT_POINTER_MODE_DEVICE;
  const int32_t bias_type = md.bias_type >= 0 ? md.bias_type : static_cast<int32_t>(l[3].type);
  if (md.hasBias()) {
    p.has_bias = true;
    p.bias.data = md.bias;
    p.bias.type = static_cast<cudaDataType>(bias_type);
    p.bias.rows = p.m;
    p.bias.cols = 1;
  }
  const cublasLtMatmulAlgo_t algo_copy = algo ? *algo : cublasLtMatmulAlgo_t{};
  const bool has_algo = algo != nullptr;
  return checkedGemm(cs, sampler, stream, p, forward, [&](DeviceGemmCall& call) {
    call.c_separate = true;
    call.act = md.activation();
    call.addArg("transa", opName(ta));
    call.addArg("transb", opName(tb));
    call.addArg("epilogue", md.epilogueName());
    call.addArg("order", l[0].order == CUBLASLT_ORDER_ROW ? "row" : "col");
    call.addArg("lda", std::to_string(l[0].ld));
    call.addArg("ldb", std::to_string(l[1].ld));
    call.addArg("ldc", std::to_string(l[2].ld));
    call.addArg("ldd", std::to_string(l[3].ld));
    call.addArg("compute_type", std::to_string(md.compute));
    const cudaDataType own[4] = {p.a.type, p.b.type, p.c.type, p.d.type};
    call.same = [=](Checker& ck, const RerunOperands& o) {
      return ltRerun(ck, md, l, static_cast<cublasComputeType_t>(md.compute), p.scale, own,
                     bias_type, has_algo ? &algo_copy : nullptr, ws_size, o);
    };
    call.wider = [=](Checker& ck, const RerunOperands& o) {
      const cudaDataType t = cudaOfDtype(o.precision);
      const cudaDataType wide[4] = {t, t, t, t};
      const bool f64 = o.precision == FUMI_DTYPE_F64;
      return ltRerun(ck, md, l, f64 ? CUBLAS_COMPUTE_64F_PEDANTIC : CUBLAS_COMPUTE_32F_PEDANTIC,
                     f64 ? CUDA_R_64F : CUDA_R_32F, wide, t, nullptr, 0, o);
    };
  });
}

}  // namespace

#define FUMI_HOOK FUMI_HOOK_STATE
#include "cublas.def"
#undef FUMI_HOOK

}  // namespace fumi::hooks

#define FUMI_HOOK FUMI_HOOK_WRAPPER
#include "cublas.def"
#undef FUMI_HOOK
