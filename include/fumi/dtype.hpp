// fumi/dtype.hpp — C++ helpers over fumi/dtypes.def: dtype properties, conversions between storage
// dtypes and fp64, strided traversal of a fumi_tensor. Header-only; used by the host and plugins.
#pragma once

#include <cstdint>
#include <cstring>

#include "fumi/plugin.h"

// The conversions below compile for CUDA devices too (fumi's own kernels read and store
// elements with them: the same bits on the device as on the host).
#ifdef __CUDACC__
#define FUMI_HOST_DEVICE __host__ __device__
#else
#define FUMI_HOST_DEVICE
#endif

namespace fumi {

// One row of fumi/dtypes.def (see there for the meaning of each column).
struct DtypeInfo {
  const char* name;
  int bytes;
  int mantissa_bits;
  int min_exponent;
  double perturb_shift;
  double tolerance;
};

// Row of fumi/dtypes.def for `dt`, or nullptr (FUMI_DTYPE_UNKNOWN / out of range).
inline const DtypeInfo* dtypeInfo(fumi_dtype dt) {
  switch (dt) {
#define FUMI_DTYPE(e, name, bytes, bits, emin, shift, tol)    \
  case FUMI_DTYPE_##e: {                                      \
    static constexpr DtypeInfo k{name, bytes, bits, emin, shift, tol}; \
    return &k;                                                \
  }
#include "fumi/dtypes.def"
#undef FUMI_DTYPE
    default:
      return nullptr;
  }
}

inline const char* dtypeName(fumi_dtype dt) {
  const DtypeInfo* i = dtypeInfo(dt);
  return i ? i->name : "unknown";
}

// The dtype spelled `name` in policies and reports ("f32"); FUMI_DTYPE_UNKNOWN for none.
inline fumi_dtype dtypeNamed(const char* name) {
  for (int d = 0; d < FUMI_DTYPE_UNKNOWN; ++d) {
    const DtypeInfo* info = dtypeInfo(static_cast<fumi_dtype>(d));
    if (info && std::strcmp(name, info->name) == 0) return static_cast<fumi_dtype>(d);
  }
  return FUMI_DTYPE_UNKNOWN;
}

inline int dtypeBytes(fumi_dtype dt) {
  const DtypeInfo* i = dtypeInfo(dt);
  return i ? i->bytes : 0;
}

FUMI_HOST_DEVICE inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
FUMI_HOST_DEVICE inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Round an fp32 bit pattern to keep `keep` fraction bits, nearest-even; NaN/Inf unchanged.
FUMI_HOST_DEVICE inline uint32_t roundFloatBits(uint32_t u, int keep) {
  if ((u & 0x7f800000u) == 0x7f800000u) return u;
  const int drop = 23 - keep;
  const uint32_t half = 1u << (drop - 1);
  const uint32_t lsb = (u >> drop) & 1u;
  u += half - 1 + lsb;
  return u & ~((1u << drop) - 1);
}

FUMI_HOST_DEVICE inline float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bitsFloat(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return bitsFloat(sign);
    // Subnormal: value = mant * 2^-24.
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

FUMI_HOST_DEVICE inline uint16_t floatToHalf(float f) {
  const uint32_t u = floatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u) return sign | (abs > 0x7f800000u ? 0x7e00u : 0x7c00u);
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: overflow to Inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero) in fp16: quantum 2^-24, round to nearest even.
    const float a = bitsFloat(abs);
    const float scaled = a * 16777216.0f;  // exact: a / 2^-24
    float r = static_cast<float>(static_cast<int32_t>(scaled));
    const float frac = scaled - r;
    if (frac > 0.5f || (frac == 0.5f && (static_cast<int32_t>(r) & 1))) r += 1.0f;
    return sign | static_cast<uint16_t>(r);
  }
  const uint32_t rounded = roundFloatBits(abs, 10);
  return sign | static_cast<uint16_t>(((rounded >> 13) - (112u << 10)) & 0x7fffu);
}

FUMI_HOST_DEVICE inline float bf16ToFloat(uint16_t b) {
  return bitsFloat(static_cast<uint32_t>(b) << 16);
}
FUMI_HOST_DEVICE inline uint16_t floatToBf16(float f) {
  const uint32_t u = floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>(roundFloatBits(u, 7) >> 16);
}

FUMI_HOST_DEVICE inline double loadAsDouble(const void* base, int64_t i, fumi_dtype dt) {
  switch (dt) {
    case FUMI_DTYPE_F64: return static_cast<const double*>(base)[i];
    case FUMI_DTYPE_F32:
    case FUMI_DTYPE_TF32: return static_cast<const float*>(base)[i];
    case FUMI_DTYPE_F16: return halfToFloat(static_cast<const uint16_t*>(base)[i]);
    case FUMI_DTYPE_BF16: return bf16ToFloat(static_cast<const uint16_t*>(base)[i]);
    default: return 0.0;
  }
}

FUMI_HOST_DEVICE inline void storeFromDouble(void* base, int64_t i, double v, fumi_dtype dt) {
  switch (dt) {
    case FUMI_DTYPE_F64: static_cast<double*>(base)[i] = v; break;
    case FUMI_DTYPE_F32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case FUMI_DTYPE_TF32:
      static_cast<float*>(base)[i] = bitsFloat(roundFloatBits(floatBits(static_cast<float>(v)), 10));
      break;
    case FUMI_DTYPE_F16:
      static_cast<uint16_t*>(base)[i] = floatToHalf(static_cast<float>(v));
      break;
    case FUMI_DTYPE_BF16:
      static_cast<uint16_t*>(base)[i] = floatToBf16(static_cast<float>(v));
      break;
    default: break;
  }
}

// Number of logical elements.
inline int64_t tensorNumel(const fumi_tensor& t) {
  int64_t n = 1;
  for (int d = 0; d < t.ndim; ++d) n *= t.shape[d];
  return n;
}

// Offset (in elements from `data`) of logical element 0; see fumi_tensor.
inline int64_t tensorBase(const fumi_tensor& t) {
  int64_t base = 0;
  for (int d = 0; d < t.ndim; ++d)
    if (t.strides[d] < 0 && t.shape[d] > 0) base += (t.shape[d] - 1) * -t.strides[d];
  return base;
}

// Whether some dimension of `t` runs backwards in memory (logical element 0 is then not at
// `data`; see tensorBase).
inline bool hasNegativeStride(const fumi_tensor& t) {
  for (int d = 0; d < t.ndim; ++d)
    if (t.strides[d] < 0) return true;
  return false;
}

// Elements a buffer laid out like `t` must hold (0 for an empty tensor).
inline int64_t tensorSpan(const fumi_tensor& t) {
  int64_t span = 1;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] == 0) return 0;
    span += (t.shape[d] - 1) * (t.strides[d] < 0 ? -t.strides[d] : t.strides[d]);
  }
  return span;
}

// Call f(dense_index, element_offset) for every logical element in row-major order.
template <class F>
inline void forEachElement(const fumi_tensor& t, F&& f) {
  const int64_t n = tensorNumel(t);
  if (n == 0) return;
  const int64_t base = tensorBase(t);
  if (t.ndim == 0) {
    f(int64_t{0}, base);
    return;
  }
  if (t.ndim == 1) {
    const int64_t s = t.strides[0];
    for (int64_t i = 0; i < n; ++i) f(i, base + i * s);
    return;
  }
  // Inner loop over the last dim, odometer over the others.
  const int last = t.ndim - 1;
  const int64_t inner = t.shape[last], s_in = t.strides[last];
  int64_t idx[FUMI_MAX_DIMS] = {0};
  int64_t outer_off = base;
  for (int64_t k = 0; k < n; k += inner) {
    if (s_in == 1) {  // contiguous rows: a unit-stride loop the compiler can vectorise
      for (int64_t i = 0; i < inner; ++i) f(k + i, outer_off + i);
    } else {
      for (int64_t i = 0; i < inner; ++i) f(k + i, outer_off + i * s_in);
    }
    for (int d = last - 1; d >= 0; --d) {
      outer_off += t.strides[d];
      if (++idx[d] < t.shape[d]) break;
      outer_off -= t.strides[d] * t.shape[d];
      idx[d] = 0;
    }
  }
}

}  // namespace fumi
