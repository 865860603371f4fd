// element_types.h — each storage dtype as a C++ element type with its conversions to and from
// fp64, for the host's typed loops over tensors (tensor_copy.cpp, contract.cpp): one loop per
// dtype, no per-element switch.
#pragma once

#include <cstdint>

#include "fumi/dtype.hpp"

namespace fumi::element_types {

struct F64 {
  using T = double;
  static double load(T x) { return x; }
  static T store(double v) { return v; }
};
struct F32 {
  using T = float;
  static double load(T x) { return x; }
  static T store(double v) { return static_cast<float>(v); }
};
struct TF32 {
  using T = float;
  static double load(T x) { return x; }
  static T store(double v) { return bitsFloat(roundFloatBits(floatBits(static_cast<float>(v)), 10)); }
};
struct F16 {
  using T = uint16_t;
  static double load(T x) { return halfToFloat(x); }
  static T store(double v) { return floatToHalf(static_cast<float>(v)); }
};
struct BF16 {
  using T = uint16_t;
  static double load(T x) { return bf16ToFloat(x); }
  static T store(double v) { return floatToBf16(static_cast<float>(v)); }
};

// Calls f(E{}) with the element type E that reads `dtype` (TF32 storage reads as fp32); false
// for a dtype without storage.
template <class F>
bool visitLoad(fumi_dtype dtype, F&& f) {
  switch (dtype) {
    case FUMI_DTYPE_F64: f(F64{}); return true;
    case FUMI_DTYPE_F32:
    case FUMI_DTYPE_TF32: f(F32{}); return true;
    case FUMI_DTYPE_F16: f(F16{}); return true;
    case FUMI_DTYPE_BF16: f(BF16{}); return true;
    default: return false;
  }
}

// Calls f(E{}) with the element type E that writes `dtype` (rounding as the dtype does).
template <class F>
bool visitStore(fumi_dtype dtype, F&& f) {
  switch (dtype) {
    case FUMI_DTYPE_TF32: f(TF32{}); return true;
    default: return visitLoad(dtype, f);
  }
}

}  // namespace fumi::element_types
