// sim_gemm.h — the simulated device's one GEMM "kernel", shared (header-only) by the cuBLASLt
// and cuBLAS stand-ins, plus what both need around it: fp16/bf16/tf32 rounding, the supported
// type table, status names, planted faults and enqueueing on a stream.
//
// Emulated: D = epilogue(alpha * op(A) * op(B) + beta * C [+ bias]) for column- or row-order
// operands with leading dimensions, strided or pointer-array batches; data types R_64F, R_32F,
// R_16F, R_16BF; compute types 64F (double accumulation), 32F (float accumulation, k in order;
// FAST_TF32 / FAST_16F / FAST_16BF first round A and B elements to tf32 / fp16 / bf16), 16F
// (the running sum is rounded to fp16 after every step, as fp16 accumulation does); alpha/beta
// in the scale type (beta == 0: C is not read); epilogues RELU, BIAS, GELU (tanh approximation)
// and their combinations; the result is rounded once to D's type (round-to-nearest-even).
// Not emulated: tensor-core summation order or FMA contraction (the k loop is sequential
// a*b products added in the accumulator type), split-k, integer/fp8/complex types, aux
// outputs, alpha vectors, scale pointers.
//
// Planted faults (detection tests): FUMI_SIM_FAULTS, read once, entries `kind:dtype:MxNxK`
// joined by ',' with kind in {wrong, nan, nondet}, dtype (of D) in {f64, f32, f16, bf16}. A
// GEMM with D of that type and those dims gets element (0,0) of D, in every batch, replaced:
// wrong: d + 0.25|d| + 1; nan: NaN; nondet: d moved up one unit in the last place on every
// other execution of a matching GEMM (an atomic counter; each stand-in library holds its own,
// so the pointer-array path in libcublas counts apart from the cublasLtMatmul path).
//
// Only the task run on the stream (execute) translates device pointers to host addresses.
//
// Kernel names: each GEMM is launched as one kernel named sim_gemm_<A>_<D>_<math>_kernel
// (A's and D's types, <math> the multiply precision: f64, f32, tf32, f16fast, bf16fast, f16
// accumulation), through cudaFumiSimLaunchKernel (sim_tool.h): a profiling tool (the CUPTI
// stand-in) sees it as a cudaLaunchKernel; without one it is a plain host-function launch.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <library_types.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "sim.h"
#include "sim_tool.h"

namespace sim {
namespace gemm {

// ---------------------------------------------------------------------------------------
// Data types and conversions (the one place for fp16 / bf16 / tf32 rounding).

enum class DType { F64, F32, F16, BF16 };

inline bool dtypeFromCuda(int t, DType* out) {
  switch (t) {
    case CUDA_R_64F: *out = DType::F64; return true;
    case CUDA_R_32F: *out = DType::F32; return true;
    case CUDA_R_16F: *out = DType::F16; return true;
    case CUDA_R_16BF: *out = DType::BF16; return true;
    default: return false;
  }
}

inline size_t dtypeSize(DType t) {
  switch (t) {
    case DType::F64: return 8;
    case DType::F32: return 4;
    default: return 2;
  }
}

inline uint64_t bitsOf(double x) {
  uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
inline double fromBits(uint64_t b) {
  double x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// A binary floating-point format: p significand bits (implicit bit included), normal
// exponents emin..emax, gradual underflow, overflow to infinity.
struct Format {
  int p, emin, emax;
};
constexpr Format kHalf{11, -14, 15};
constexpr Format kBf16{8, -126, 127};
constexpr Format kTf32{11, -126, 127};

// Round x to format f, to nearest, ties to even (one rounding, from double).
inline double roundTo(double x, Format f) {
  const uint64_t b = bitsOf(x);
  const uint64_t mag = b & ~(uint64_t{1} << 63);
  if (mag == 0 || mag >= (uint64_t{0x7ff} << 52)) return x;  // zeros, inf, NaN
  int e = static_cast<int>(mag >> 52) - 1023;               // double subnormals: far below emin
  const int lead = e < f.emin ? f.emin : e;
  const int quantum = lead - (f.p - 1);  // exponent of the last kept bit
  // (x + c) - c with c = 1.5 * 2^(quantum + 52) rounds x to a multiple of 2^quantum, ties to
  // even, for |x| < 2^(quantum + 51) (true here: |x| < 2^(lead + 1), p <= 24).
  const double c = fromBits(static_cast<uint64_t>(quantum + 52 + 1023) << 52 |
                            (uint64_t{1} << 51));
  const double sum = x + c;
  const double r = sum - c;
  // Largest finite value: 1.11...1 (p bits) * 2^emax.
  const double maxFinite =
      fromBits(static_cast<uint64_t>(f.emax + 1023) << 52 |
               (((uint64_t{1} << (f.p - 1)) - 1) << (52 - (f.p - 1))));
  if (std::fabs(r) > maxFinite) return std::copysign(std::numeric_limits<double>::infinity(), x);
  return r;
}

inline double roundHalf(double x) { return roundTo(x, kHalf); }
inline double roundBf16(double x) { return roundTo(x, kBf16); }
inline double roundTf32(double x) { return roundTo(x, kTf32); }

inline double halfBitsToDouble(uint16_t h) {
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  const int ex = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (ex == 0) return sign * std::ldexp(static_cast<double>(mant), -24);
  if (ex == 31)
    return mant ? std::numeric_limits<double>::quiet_NaN()
                : sign * std::numeric_limits<double>::infinity();
  return sign * std::ldexp(static_cast<double>(1024 + mant), ex - 25);
}

inline uint16_t doubleToHalfBits(double x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return static_cast<uint16_t>(sign | 0x7e00);
  const double r = std::fabs(roundHalf(x));
  if (std::isinf(r)) return static_cast<uint16_t>(sign | 0x7c00);
  if (r == 0) return sign;
  if (r < std::ldexp(1.0, -14))  // subnormal: r = mant * 2^-24 exactly
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::ldexp(r, 24)));
  const uint64_t b = bitsOf(r);
  const int e = static_cast<int>(b >> 52) - 1023;
  const uint16_t mant = static_cast<uint16_t>((b >> 42) & 0x3ff);
  return static_cast<uint16_t>(sign | ((e + 15) << 10) | mant);
}

inline double bf16BitsToDouble(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint16_t doubleToBf16Bits(double x) {
  if (std::isnan(x)) return static_cast<uint16_t>((std::signbit(x) ? 0x8000 : 0) | 0x7fc0);
  const float f = static_cast<float>(roundBf16(x));  // exact: representable in bf16
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return static_cast<uint16_t>(u >> 16);
}

// x rounded to type t (the value a store to t then a load gives).
inline double roundToType(double x, DType t) {
  switch (t) {
    case DType::F64: return x;
    case DType::F32: return static_cast<double>(static_cast<float>(x));
    case DType::F16: return roundHalf(x);
    case DType::BF16: return roundBf16(x);
  }
  return x;
}

inline double load(const void* p, DType t) {
  switch (t) {
    case DType::F64: { double v; std::memcpy(&v, p, 8); return v; }
    case DType::F32: { float v; std::memcpy(&v, p, 4); return v; }
    case DType::F16: { uint16_t v; std::memcpy(&v, p, 2); return halfBitsToDouble(v); }
    case DType::BF16: { uint16_t v; std::memcpy(&v, p, 2); return bf16BitsToDouble(v); }
  }
  return 0;
}

inline void store(void* p, DType t, double x) {
  switch (t) {
    case DType::F64: std::memcpy(p, &x, 8); break;
    case DType::F32: { const float v = static_cast<float>(x); std::memcpy(p, &v, 4); break; }
    case DType::F16: { const uint16_t v = doubleToHalfBits(x); std::memcpy(p, &v, 2); break; }
    case DType::BF16: { const uint16_t v = doubleToBf16Bits(x); std::memcpy(p, &v, 2); break; }
  }
}

// One unit in the last place up (in magnitude away from -inf), in type t.
inline double nextUp(double x, DType t) {
  if (!std::isfinite(x)) return x;
  switch (t) {
    case DType::F64: return std::nextafter(x, std::numeric_limits<double>::infinity());
    case DType::F32:
      return std::nextafter(static_cast<float>(x), std::numeric_limits<float>::infinity());
    case DType::F16: {
      uint16_t h = doubleToHalfBits(x);
      if (h == 0x8000) h = 0;
      h = (h & 0x8000) ? static_cast<uint16_t>(h - 1) : static_cast<uint16_t>(h + 1);
      return halfBitsToDouble(h);
    }
    case DType::BF16: {
      uint16_t h = doubleToBf16Bits(x);
      if (h == 0x8000) h = 0;
      h = (h & 0x8000) ? static_cast<uint16_t>(h - 1) : static_cast<uint16_t>(h + 1);
      return bf16BitsToDouble(h);
    }
  }
  return x;
}

// ---------------------------------------------------------------------------------------
// Compute types and the supported type combinations (shared by cublasLtMatmul and cuBLAS).

// Scale type (type of alpha/beta) that goes with a compute type; false if unsupported.
inline bool scaleTypeFor(cublasComputeType_t c, DType* out) {
  switch (c) {
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC: *out = DType::F64; return true;
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
    case CUBLAS_COMPUTE_32F_FAST_TF32:
    case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF: *out = DType::F32; return true;
    case CUBLAS_COMPUTE_16F:
    case CUBLAS_COMPUTE_16F_PEDANTIC: *out = DType::F16; return true;
    default: return false;
  }
}

// The combinations cuBLAS / cuBLASLt support among the emulated types (A and B alike, C and D
// alike): 16F compute: all 16F; 32F: 32F->32F, 16F->16F|32F, 16BF->16BF|32F; 32F_FAST_*: all
// 32F; 64F: all 64F. Scale type must be the compute type's.
inline bool supportedCombination(cublasComputeType_t compute, DType scale, DType a, DType b,
                                 DType c, DType d) {
  DType want;
  if (!scaleTypeFor(compute, &want) || scale != want) return false;
  if (a != b || c != d) return false;
  switch (compute) {
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC: return a == DType::F64 && c == DType::F64;
    case CUBLAS_COMPUTE_16F:
    case CUBLAS_COMPUTE_16F_PEDANTIC: return a == DType::F16 && c == DType::F16;
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
      if (a == DType::F32) return c == DType::F32;
      if (a == DType::F16) return c == DType::F16 || c == DType::F32;
      if (a == DType::BF16) return c == DType::BF16 || c == DType::F32;
      return false;
    case CUBLAS_COMPUTE_32F_FAST_TF32:
    case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF: return a == DType::F32 && c == DType::F32;
    default: return false;
  }
}

inline const char* statusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "<unrecognized>";
}

inline const char* statusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "an error was detected when checking the current licensing";
  }
  return "unknown error";
}

// ---------------------------------------------------------------------------------------
// The problem, as captured at call time (by value, like a kernel's parameters).

struct Operand {
  const void* base = nullptr;          // device pointer as passed (strided batches)
  const void* const* array = nullptr;  // or: device array of device pointers, one per batch
  DType type = DType::F32;
  bool rowOrder = false;     // CUBLASLT_ORDER_ROW (else column order)
  int64_t ld = 0;            // elements
  int64_t batchStride = 0;   // elements
};

struct Problem {
  int64_t m = 0, n = 0, k = 0;  // D is m x n, op(A) m x k, op(B) k x n
  bool transA = false, transB = false;
  int64_t batch = 1;
  Operand a, b, c, d;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  DType scale = DType::F32;
  bool scalarsOnDevice = false;           // alpha/beta read in the task (stream order)
  const void* alphaPtr = nullptr;         // device mode
  const void* betaPtr = nullptr;
  double alpha = 1, beta = 0;             // host mode: values read at call time
  bool relu = false, gelu = false, bias = false;
  const void* biasPtr = nullptr;          // device pointer, m elements per batch
  DType biasType = DType::F32;
  int64_t biasBatchStride = 0;            // elements
};

inline double readScalar(const void* p, DType t) { return load(p, t); }

// ---------------------------------------------------------------------------------------
// Planted faults.

enum class FaultKind { Wrong, Nan, Nondet };
struct FaultSpec {
  FaultKind kind;
  DType type;
  int64_t m, n, k;
};

inline std::vector<FaultSpec> parseFaults(const char* env) {
  std::vector<FaultSpec> out;
  if (!env) return out;
  std::string all(env);
  size_t pos = 0;
  while (pos <= all.size()) {
    size_t comma = all.find(',', pos);
    if (comma == std::string::npos) comma = all.size();
    const std::string entry = all.substr(pos, comma - pos);
    pos = comma + 1;
    if (entry.empty()) continue;
    char kind[16] = {0}, type[16] = {0};
    long long m = 0, n = 0, k = 0;
    FaultSpec f{};
    bool ok = std::sscanf(entry.c_str(), "%15[^:]:%15[^:]:%lldx%lldx%lld", kind, type, &m, &n,
                          &k) == 5;
    const std::string ks(kind), ts(type);
    if (ok) {
      if (ks == "wrong") f.kind = FaultKind::Wrong;
      else if (ks == "nan") f.kind = FaultKind::Nan;
      else if (ks == "nondet") f.kind = FaultKind::Nondet;
      else ok = false;
      if (ts == "f64") f.type = DType::F64;
      else if (ts == "f32") f.type = DType::F32;
      else if (ts == "f16") f.type = DType::F16;
      else if (ts == "bf16") f.type = DType::BF16;
      else ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "simdevice: ignoring malformed FUMI_SIM_FAULTS entry '%s'\n",
                   entry.c_str());
      continue;
    }
    f.m = m;
    f.n = n;
    f.k = k;
    out.push_back(f);
  }
  return out;
}

// Leaked: stream work may still run during exit (a tool draining its checks from an atexit
// handler), after static destructors registered later than that handler have run.
inline const std::vector<FaultSpec>& faults() {
  static const auto* specs = new std::vector<FaultSpec>(parseFaults(std::getenv("FUMI_SIM_FAULTS")));
  return *specs;
}

inline std::atomic<uint64_t>& nondetCounter() {
  static std::atomic<uint64_t> counter{0};
  return counter;
}

// ---------------------------------------------------------------------------------------
// The kernel.

namespace detail {

inline const unsigned char* batchBase(const Operand& o, int64_t b) {
  if (o.array) {
    const void* const* arr = static_cast<const void* const*>(hostAddress(o.array));
    // Half-precision kernels read pointer-array matrices in 16-byte vectors: on hardware a
    // matrix that is not 16-byte aligned faults ("misaligned address", an H200, 2026-11-26;
    // strided batches are fine, cuBLAS sees their offsets). The simulated device has no
    // sticky context errors: it ends the process where the hardware would fault.
    if (dtypeSize(o.type) == 2 && reinterpret_cast<uintptr_t>(arr[b]) % 16 != 0) {
      std::fprintf(stderr, "simdevice: misaligned address: half-precision pointer-array matrix "
                           "%p (batch %lld) is not 16-byte aligned\n",
                   arr[b], static_cast<long long>(b));
      std::abort();
    }
    return static_cast<const unsigned char*>(hostAddress(arr[b]));
  }
  return static_cast<const unsigned char*>(hostAddress(o.base)) +
         b * o.batchStride * static_cast<int64_t>(dtypeSize(o.type));
}

inline int64_t offset(const Operand& o, int64_t r, int64_t c) {
  return o.rowOrder ? r * o.ld + c : r + c * o.ld;
}

inline double inputRounding(double x, cublasComputeType_t c) {
  switch (c) {
    case CUBLAS_COMPUTE_32F_FAST_TF32: return roundTf32(x);
    case CUBLAS_COMPUTE_32F_FAST_16F: return roundHalf(x);
    case CUBLAS_COMPUTE_32F_FAST_16BF: return roundBf16(x);
    default: return x;
  }
}

// op(A) as m x k rows (row i contiguous), op(B) as n x k rows (column j contiguous).
template <typename T>
void loadOperands(const Problem& p, int64_t b, std::vector<T>* A, std::vector<T>* B) {
  const unsigned char* pa = batchBase(p.a, b);
  const unsigned char* pb = batchBase(p.b, b);
  const size_t ea = dtypeSize(p.a.type), eb = dtypeSize(p.b.type);
  A->resize(static_cast<size_t>(p.m * p.k));
  B->resize(static_cast<size_t>(p.n * p.k));
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t l = 0; l < p.k; ++l) {
      const int64_t off = p.transA ? offset(p.a, l, i) : offset(p.a, i, l);
      (*A)[i * p.k + l] = static_cast<T>(inputRounding(load(pa + off * ea, p.a.type), p.compute));
    }
  for (int64_t j = 0; j < p.n; ++j)
    for (int64_t l = 0; l < p.k; ++l) {
      const int64_t off = p.transB ? offset(p.b, j, l) : offset(p.b, l, j);
      (*B)[j * p.k + l] = static_cast<T>(inputRounding(load(pb + off * eb, p.b.type), p.compute));
    }
}

template <typename T>
T epilogue(const Problem& p, T x, T biasValue) {
  if (p.bias) x = x + biasValue;
  if (p.relu) x = x < T(0) ? T(0) : x;  // NaN passes through
  if (p.gelu) {
    const T kAlpha = T(0.7978845608028654);  // sqrt(2/pi)
    x = T(0.5) * x * (T(1) + std::tanh(kAlpha * (x + T(0.044715) * x * x * x)));
  }
  return x;
}

}  // namespace detail

// Runs the GEMM. Called on the stream (inside the host-function task) only.
inline void execute(const Problem& p) {
  if (p.m <= 0 || p.n <= 0 || p.batch <= 0) return;
  const double alpha = p.scalarsOnDevice ? readScalar(hostAddress(p.alphaPtr), p.scale) : p.alpha;
  const double beta = p.scalarsOnDevice ? readScalar(hostAddress(p.betaPtr), p.scale) : p.beta;

  const FaultSpec* fault = nullptr;
  for (const FaultSpec& f : faults())
    if (f.type == p.d.type && f.m == p.m && f.n == p.n && f.k == p.k) {
      fault = &f;
      break;
    }
  bool perturb = false;
  if (fault && fault->kind == FaultKind::Nondet) perturb = (nondetCounter().fetch_add(1) & 1) != 0;

  const size_t ec = dtypeSize(p.c.type), ed = dtypeSize(p.d.type), ebias = dtypeSize(p.biasType);
  std::vector<double> out(static_cast<size_t>(p.m * p.n));
  std::vector<double> A64, B64;
  std::vector<float> A32, B32;
  for (int64_t b = 0; b < p.batch; ++b) {
    const unsigned char* pc = beta != 0 ? detail::batchBase(p.c, b) : nullptr;
    const unsigned char* pbias =
        p.bias ? static_cast<const unsigned char*>(hostAddress(p.biasPtr)) +
                     b * p.biasBatchStride * static_cast<int64_t>(ebias)
               : nullptr;
    auto cValue = [&](int64_t i, int64_t j) {
      return beta != 0 ? load(pc + detail::offset(p.c, i, j) * ec, p.c.type) : 0.0;
    };
    auto biasValue = [&](int64_t i) { return pbias ? load(pbias + i * ebias, p.biasType) : 0.0; };

    // One loop for every compute type: T is the accumulator's type, `add` one accumulation
    // step, `finish` what reaches the epilogue from t = alpha*acc + beta*c (both in T).
    auto gemm = [&](const auto& A, const auto& B, auto add, auto finish) {
      using T = typename std::decay_t<decltype(A)>::value_type;
      const T at = static_cast<T>(alpha), bt = static_cast<T>(beta);
      for (int64_t j = 0; j < p.n; ++j)
        for (int64_t i = 0; i < p.m; ++i) {
          const T* ra = A.data() + i * p.k;
          const T* rb = B.data() + j * p.k;
          T acc = 0;
          for (int64_t l = 0; l < p.k; ++l) acc = add(acc, ra[l] * rb[l]);
          T t = at * acc;
          if (beta != 0) t += bt * static_cast<T>(cValue(i, j));
          out[j * p.m + i] = roundToType(finish(t, biasValue(i)), p.d.type);
        }
    };
    switch (p.compute) {
      case CUBLAS_COMPUTE_64F:
      case CUBLAS_COMPUTE_64F_PEDANTIC:
        detail::loadOperands(p, b, &A64, &B64);
        gemm(A64, B64, [](double acc, double x) { return acc + x; },
             [&](double t, double bias) { return detail::epilogue(p, t, bias); });
        break;
      case CUBLAS_COMPUTE_16F:
      case CUBLAS_COMPUTE_16F_PEDANTIC:  // every step rounded to half
        detail::loadOperands(p, b, &A64, &B64);
        gemm(A64, B64, [](double acc, double x) { return roundHalf(acc + x); },
             [&](double t, double bias) {
               return detail::epilogue(p, static_cast<float>(roundHalf(t)),
                                       static_cast<float>(bias));
             });
        break;
      default:  // 32F and its variants: float accumulation
        detail::loadOperands(p, b, &A32, &B32);
        gemm(A32, B32, [](float acc, float x) { return acc + x; },
             [&](float t, double bias) {
               return detail::epilogue(p, t, static_cast<float>(bias));
             });
        break;
    }

    if (fault) {
      double& d0 = out[0];
      switch (fault->kind) {
        case FaultKind::Wrong: d0 = roundToType(d0 + 0.25 * std::fabs(d0) + 1, p.d.type); break;
        case FaultKind::Nan: d0 = std::numeric_limits<double>::quiet_NaN(); break;
        case FaultKind::Nondet:
          if (perturb) d0 = nextUp(d0, p.d.type);
          break;
      }
    }

    // All of D is written after all of C was read: C and D may alias.
    unsigned char* pd = const_cast<unsigned char*>(detail::batchBase(p.d, b));
    for (int64_t j = 0; j < p.n; ++j)
      for (int64_t i = 0; i < p.m; ++i)
        store(pd + detail::offset(p.d, i, j) * ed, p.d.type, out[j * p.m + i]);
  }
}

// ---------------------------------------------------------------------------------------
// Enqueueing on a stream: a host function owning a copy of the problem.

namespace detail {
struct Task {
  Problem problem;
  bool owned;  // false while captured into a graph: a graph may replay it, so it stays alive
};
inline void CUDART_CB runTask(void* data) {
  Task* t = static_cast<Task*>(data);
  execute(t->problem);
  if (t->owned) delete t;
}
}  // namespace detail

// The kernel's name (see the header); the strings live as long as the process, as a
// profiler expects of kernel names.
inline const char* kernelName(const Problem& p) {
  static const char* const kTypes[] = {"f64", "f32", "f16", "bf16"};
  static const char* const kMath[] = {"f64", "f32", "tf32", "f16fast", "bf16fast", "f16"};
  int math = 1;
  switch (p.compute) {
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC: math = 0; break;
    case CUBLAS_COMPUTE_32F_FAST_TF32: math = 2; break;
    case CUBLAS_COMPUTE_32F_FAST_16F: math = 3; break;
    case CUBLAS_COMPUTE_32F_FAST_16BF: math = 4; break;
    case CUBLAS_COMPUTE_16F:
    case CUBLAS_COMPUTE_16F_PEDANTIC: math = 5; break;
    default: break;
  }
  static char names[4][4][6][40];
  static std::once_flag once;
  std::call_once(once, [] {
    for (int a = 0; a < 4; ++a)
      for (int d = 0; d < 4; ++d)
        for (int m = 0; m < 6; ++m)
          std::snprintf(names[a][d][m], sizeof names[a][d][m], "sim_gemm_%s_%s_%s_kernel",
                        kTypes[a], kTypes[d], kMath[m]);
  });
  return names[static_cast<int>(p.a.type)][static_cast<int>(p.d.type)][math];
}

// Enqueues p on stream. CUBLAS_STATUS_EXECUTION_FAILED if the runtime refuses the launch.
inline cublasStatus_t enqueue(cudaStream_t stream, const Problem& p) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  const bool captured = cudaStreamIsCapturing(stream, &capture) != cudaSuccess ||
                        capture != cudaStreamCaptureStatusNone;
  auto* task = new detail::Task{p, !captured};
  if (cudaFumiSimLaunchKernel(stream, kernelName(p), detail::runTask, task) != cudaSuccess) {
    delete task;
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace gemm
}  // namespace sim
