// metrics.h — the arithmetic shared by fumi's check plugins: error metrics over dense fp64
// arrays, dtype properties (from fumi/dtypes.def), a deterministic RNG and the parsing of a
// policy entry's parameters. Header-only plain C++17 with no host calls, so unit tests exercise
// every number here without libfumi.
//
// Conventions of the metrics:
//   - Arrays are dense fp64 of length n, as host->gather produces them; compareValues and
//     scanValues also read typed arrays (the host's element-wise primitives, plugin.h ABI 2).
//   - Comparison metrics skip an element where either side is NaN or Inf (the nan_inf check
//     reports those) and count it in `*skipped` when that pointer is given.
//   - Loops are plain and branch-light on purpose: ATen-style whole-array expressions cost 5x more
//     per element here (see DESIGN.md, "Established facts").
#pragma once

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "counter_draw.h"
#include "fumi/dtype.hpp"
#include "fumi/plugin.h"
#include "fumi/simd.h"

namespace fumi::metrics {

// Dtype properties: the one table, fumi/dtypes.def, through fumi/dtype.hpp.
using fumi::DtypeInfo;
using fumi::dtypeInfo;

// ---------------------------------------------------------------------------------------------
// Metrics

namespace detail {

// The loops below compute every candidate value unconditionally and then select it with a mask
// (`ok ? v : 0.0`), never `continue` or a select around a computation: that is the shape GCC
// turns into branch-free code. With data-dependent branches instead, a pass over 1M random
// elements took 6 ms rather than 1 ms; as written, passes run near memory bandwidth.

constexpr double kMaxFinite = std::numeric_limits<double>::max();

// Both finite (NaN compares false).
inline bool finitePair(double a, double b) {
  return (std::fabs(a) <= kMaxFinite) & (std::fabs(b) <= kMaxFinite);
}

// The power-of-two arithmetic below (to compareScales) compiles for CUDA devices too: fumi's
// comparison kernels derive the second pass's scales from the first pass's maxima where they
// are (interposer/cuda/device_kernels.h), with the host's own functions.

// A double from its bits.
FUMI_HOST_DEVICE inline double fromBits(uint64_t bits) {
  double v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// 2^e for e in [-1022, 1023], built from its bits.
FUMI_HOST_DEVICE inline double pow2Normal(int e) {
  return fromBits(static_cast<uint64_t>(e + 1023) << 52);
}

// 2^e for e in [-1074, 1023], subnormal results included (0 below).
FUMI_HOST_DEVICE inline double pow2(int e) {
  if (e >= -1022) return pow2Normal(e);
  return e < -1074 ? 0.0 : fromBits(uint64_t{1} << (e + 1074));
}

// Unbiased exponent of a finite double (floor(log2|x|)) for normal x; -1023 for zero and
// subnormals, which every caller clamps to a dtype's normal range anyway.
FUMI_HOST_DEVICE inline int rawExponent(double x) {
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return static_cast<int>((bits >> 52) & 0x7ff) - 1023;
}

// 2^floor(log2|x|) for normal x, 0 for zero and subnormals, inf for inf and NaN: x's exponent
// bits alone (one AND, which vectorises where rawExponent's integers do not).
inline double powerOf(double x) {
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  bits &= uint64_t{0x7ff} << 52;
  double v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// Exponent e such that m * 2^-e lies in [1, 2) for finite m > 0, clamped so that 2^-e stays a
// normal double (a subnormal m gives -1022); 0 for m == 0.
FUMI_HOST_DEVICE inline int scaleExponent(double m) {
  if (!(m > 0)) return 0;
  const int e = rawExponent(m);
  return e < -1022 ? -1022 : e;
}

// 1, or 1/2 when values up to `max_abs` could overflow in a sum or difference. A power of two:
// scaling by it is exact except for subnormals, which only matter next to a huge maximum.
FUMI_HOST_DEVICE inline double overflowScale(double max_abs) {
  return max_abs <= kMaxFinite * 0.5 ? 1.0 : 0.5;
}

}  // namespace detail

// The default guard of the elementwise metrics (fumiRatio, maxRelGuarded) for outputs computed
// in `precision`: components smaller than guard * max|y| are left out. Why: an output component
// that is a near-zero sum of much larger terms (a batch-norm backward's grad_input is a centred
// sum, so some components sit near zero by construction) moves by the rounding of those terms,
// and its own relative change says nothing about the op. An elementwise ratio over n outputs
// always finds such a component, with an amplification of up to 1/guard. The guard grows with
// the output's resolution: 16 unit roundoffs, at least 1e-3 (f64, f32: 1e-3; tf32, f16: 2^-7;
// bf16: 2^-4), so a last-bit perturbation of bf16 inputs (2^-7) cannot look like a 100% error.
// See docs/policy.md, "Guarded elementwise metrics".
inline double defaultGuard(fumi_dtype precision) {
  const DtypeInfo* d = dtypeInfo(precision);
  const double u16 = d ? std::ldexp(1.0, 4 - (d->mantissa_bits + 1)) : 0.0;
  return std::max(1e-3, u16);
}

// Elements read as fp64, for the typed loops: Dense is an fp64 array; the host passes its own
// element types (interposer/element_types.h: f32, f16, bf16 storage) to the same templates.
struct Dense {
  using T = double;
  static double load(T x) { return x; }
};

// Everything a check compares between an output y and a reference (or rerun) ref, from two
// passes over both: the fields of fumi_comparison (plugin.h), with fumi_compare_spec's guards.
// Pairs where either side is NaN or Inf are left out and counted in `nonfinite`.
//   fumi_ratio   FuMi's R = max_i |y_i - ref_i| / |y_i + ref_i| over the elements whose
//                |y_i + ref_i| is above ratio_guard times the largest such sum (and above
//                zero): near-zero sums make the ratio meaningless. 0 when none qualifies.
//                Under a perturbation of the inputs it is a lower bound of the operation's
//                maximal relative error. fumi_ratio_unguarded: the same with guard 0.
//   normwise     ||y - ref||_2 / ||ref||_2: 0 when both norms are zero, +inf when only ||ref||
//                is. Each norm is accumulated with its own power-of-two scale (exact), so
//                neither squares nor sums overflow or underflow for any finite input.
//   max_rel      max_i |y_i - ref_i| / |ref_i| over |ref_i| above rel_guard * max_j |ref_j|
//                (and above zero); 0 when none qualifies.
//   ulp          max_i |y_i - ref_i| / ulp(ref_i) with ulp(r) = 2^(floor(log2|r|) - p), p the
//                ulp_dtype's mantissa bits and |r| clamped below to its smallest normal. NaN for
//                an unknown dtype; a difference beyond DBL_MAX reads as +inf ULPs.
//   norm_ratio   ||y||_2 / ||ref||_2 (scaled likewise; 0 when both are zero, +inf when only
//                ||ref|| is).
//   max_abs_diff max_i |y_i - ref_i|.
//   mismatches   elements whose fp64 bit patterns differ (+0 and -0 differ, equal NaNs do
//                not); counted over every element.
//   underflow    elements with 0 < |ref_i| < underflow_below and |y_i| < underflow_below: y's
//                dtype flushed (or denormalised) a value its smallest normal cannot hold.
// `metrics` (fumi_compare_metric flags, 0: all) names the fields the caller reads; the others
// come back NaN.
inline fumi_compare_spec compareSpec(double ratio_guard = 0.0, double rel_guard = 0.0,
                                     fumi_dtype ulp_dtype = FUMI_DTYPE_UNKNOWN,
                                     double underflow_below = 0.0, uint32_t metrics = 0) {
  fumi_compare_spec s{};
  s.struct_size = sizeof s;
  s.ratio_guard = ratio_guard;
  s.rel_guard = rel_guard;
  s.ulp_dtype = ulp_dtype;
  s.underflow_below = underflow_below;
  s.metrics = metrics;
  return s;
}

// The smallest positive value of `dtype` (its smallest subnormal: f32's 2^-149); 0 when unknown.
inline double smallestSubnormal(fumi_dtype dtype) {
  const DtypeInfo* d = dtypeInfo(dtype);
  return d ? std::ldexp(1.0, d->min_exponent - d->mantissa_bits) : 0.0;
}

// The smallest normal magnitude of `dtype` where values underflow in training: f16's 2^-14
// (bf16 and tf32 share f32's exponent range; a gradient that small is lost to f32 too). 0:
// not counted.
inline double underflowBelow(fumi_dtype dtype) {
  return dtype == FUMI_DTYPE_F16 || dtype == FUMI_DTYPE_BF16
             ? std::ldexp(1.0, dtypeInfo(dtype)->min_exponent)
             : 0.0;
}

namespace detail {

// compareValues' first pass: maxima over the elements where both sides are finite, mismatches
// over all. kFinite: the caller knows every element is finite, so nothing is masked.
struct ComparePass1 {
  size_t nonfinite = 0, mismatches = 0;
  double max_half_sum = 0.0, max_y = 0.0, max_ref = 0.0, max_diff = 0.0;
};
template <class LY, class LR, bool kFinite>
FUMI_WIDE ComparePass1 comparePass1(const typename LY::T* y, const typename LR::T* ref, size_t n,
                                    double* nonfinite_sum) {
  size_t nonfinite = 0, mismatches = 0;
  double max_half_sum = 0.0, max_y = 0.0, max_ref = 0.0, max_diff = 0.0, probe = 0.0;
  // Halves: |y + ref| / 2 cannot overflow.
  FUMI_SIMD(reduction(+ : nonfinite, mismatches, probe)
                reduction(max : max_half_sum, max_y, max_ref, max_diff))
  for (size_t i = 0; i < n; ++i) {
    const double a = LY::load(y[i]), b = LR::load(ref[i]);
    const bool ok = kFinite || finitePair(a, b);
    uint64_t x, z;
    std::memcpy(&x, &a, sizeof x);
    std::memcpy(&z, &b, sizeof z);
    mismatches += x != z ? 1 : 0;
    if (kFinite) probe += (a - a) + (b - b);  // NaN once any element is NaN or Inf
    else nonfinite += ok ? 0 : 1;
    max_half_sum = std::max(max_half_sum, ok ? std::fabs(0.5 * a + 0.5 * b) : 0.0);
    max_y = std::max(max_y, ok ? std::fabs(a) : 0.0);
    max_ref = std::max(max_ref, ok ? std::fabs(b) : 0.0);
    max_diff = std::max(max_diff, ok ? std::fabs(a - b) : 0.0);
  }
  if (nonfinite_sum) *nonfinite_sum = probe;
  return ComparePass1{nonfinite, mismatches, max_half_sum, max_y, max_ref, max_diff};
}

// compareValues' underflow count, a pass of its own: only a check that asks for it pays.
template <class LY, class LR>
FUMI_WIDE size_t countUnderflow(const typename LY::T* y, const typename LR::T* ref, size_t n,
                                double below) {
  size_t underflow = 0;
  FUMI_SIMD(reduction(+ : underflow))
  for (size_t i = 0; i < n; ++i) {
    const double a = LY::load(y[i]), b = LR::load(ref[i]);
    underflow += (b != 0.0) & (std::fabs(b) < below) & (std::fabs(a) < below) ? 1 : 0;
  }
  return underflow;
}

// The second pass's sums and maxima: the norms' sums always (no division), FuMi's ratio (kRatio)
// and the relative and ULP figures (kRel, kUlp) only where the caller reads them. A division
// per element costs three times everything else in the pass, and almost no element raises a
// maximum: the elements go in blocks, and a block's quotients are computed only where a
// division-free test says one of them may exceed the maximum so far (diff > max * sum, against
// a product rounded down: the same maxima, bit for bit, as dividing everywhere). The ULP count
// likewise (its integer exponent arithmetic cost as much as the rest of the pass on AVX2):
// ulp(b) is 2^-p times s = max(powerOf(b), 2^emin), so the count can exceed m only where
// |a - b| 2^p > m s, all in floating point. kFinite as above.
struct ComparePass2 {
  double ratio = 0.0, all = 0.0, total_diff = 0.0, total_ref = 0.0, total_y = 0.0,
         worst_rel = 0.0, worst_ulp = 0.0;
};
template <class LY, class LR, bool kRatio, bool kRel, bool kUlp, bool kFinite>
FUMI_WIDE ComparePass2 comparePass2(const typename LY::T* y, const typename LR::T* ref, size_t n,
                                    double f, double ratio_threshold, double rel_threshold,
                                    double s_diff, double s_ref, double s_y, int p, int emin) {
  // An fp64 ulp below 2^-1022 is subnormal and cannot be built from exponent bits: for those,
  // numerator and ulp are both scaled by 2^64 (exact for the numerator unless it overflows, in
  // which case the ULP count would overflow too). Dividing by the ulp is multiplying by its
  // reciprocal, a normal power of two: the same correctly rounded result, without a division.
  const double k_up = pow2Normal(64);
  // A quotient q = diff / den exceeds the maximum m so far only if diff - t * den > 0 with
  // t = m (1 - 2^-50) rounded: t * den, rounded, stays below m * den wherever it is a normal
  // number, and the difference keeps its sign. Values read from narrower dtypes (f32, f16,
  // bf16) keep every such product normal; fp64 ones answer yes below 2^-1000 (and a zero
  // difference, whose quotient is 0, never). The test may say yes where no maximum moves (a
  // zero or non-finite sum, a masked element): the block's
  // quotients are then computed for nothing, and masked as always.
  constexpr bool kNarrow = sizeof(typename LY::T) < 8 && sizeof(typename LR::T) < 8;
  constexpr double kBelow = 1.0 - 0x1p-50, kTiny = 0x1p-1000;
  constexpr size_t kBlock = 1024;
  double ratio = 0.0, all = 0.0, total_diff = 0.0, total_ref = 0.0, total_y = 0.0, worst_rel = 0.0,
         worst_ulp = 0.0;
  // Element i: both values, whether both are finite, both scaled, and their scaled difference.
  struct Element {
    double a, b;
    bool ok;
    double as, bs, diff;
  };
  const auto element = [&](size_t i) __attribute__((always_inline)) {
    const double a = LY::load(y[i]), b = LR::load(ref[i]);
    const double as = a * f, bs = b * f;
    return Element{a, b, kFinite || finitePair(a, b), as, bs, std::fabs(as - bs)};
  };
  const double ulp_units = kUlp ? std::ldexp(1.0, p) : 0.0, ulp_floor = kUlp ? pow2(emin) : 0.0;
  for (size_t i0 = 0; i0 < n; i0 += kBlock) {
    const size_t i1 = std::min(n, i0 + kBlock);
    const double t_ratio = ratio * kBelow, t_all = all * kBelow, t_rel = worst_rel * kBelow,
                 t_ulp = worst_ulp * kBelow;
    double raise = -1.0;  // > 0: a quotient of the block may raise a maximum
    FUMI_SIMD(reduction(max : raise) reduction(+ : total_diff, total_ref, total_y))
    for (size_t i = i0; i < i1; ++i) {
      const auto [a, b, ok, as, bs, diff] = element(i);
      if (kRatio) {
        const double sum = std::fabs(as + bs);
        const double p_all = t_all * sum, p_ratio = t_ratio * sum;
        raise = std::max(raise, diff - p_all);
        raise = std::max(raise, sum > ratio_threshold ? diff - p_ratio : -1.0);
        if (!kNarrow)
          raise = std::max(raise, diff > 0.0 && (p_all < kTiny || p_ratio < kTiny) ? 1.0 : -1.0);
      }
      if (kRel) {
        const double m = std::fabs(bs), p_rel = t_rel * m;
        raise = std::max(raise, m > rel_threshold ? diff - p_rel : -1.0);
        if (!kNarrow) raise = std::max(raise, diff > 0.0 && p_rel < kTiny ? 1.0 : -1.0);
      }
      const double d = a * s_diff - b * s_diff, rr = b * s_ref, yy = a * s_y;
      total_diff += ok ? d * d : 0.0;
      total_ref += ok ? rr * rr : 0.0;
      total_y += ok ? yy * yy : 0.0;
      if (kUlp) {
        const double du = std::fabs(a - b) * ulp_units;
        const double p_ulp = t_ulp * std::max(powerOf(b), ulp_floor);
        raise = std::max(raise, du - p_ulp);
        raise = std::max(raise, du > 0.0 && p_ulp < kTiny ? 1.0 : -1.0);
      }
    }
    if (!(raise > 0.0)) continue;
    // Every candidate is computed and then selected with a mask (inf or NaN where a divisor is
    // 0 or a value non-finite: masked).
    FUMI_SIMD(reduction(max : ratio, all, worst_rel, worst_ulp))
    for (size_t i = i0; i < i1; ++i) {
      const auto [a, b, ok, as, bs, diff] = element(i);
      if (kRatio) {
        const double sum = std::fabs(as + bs);
        const double r = diff / sum;
        const bool ok_sum = ok & (sum > 0.0);
        ratio = std::max(ratio, ok_sum & (sum > ratio_threshold) ? r : 0.0);
        all = std::max(all, ok_sum ? r : 0.0);
      }
      if (kRel) {
        const double m = std::fabs(bs);
        const double rel = diff / m;
        worst_rel = std::max(worst_rel, ok & (m > rel_threshold) & (m > 0.0) ? rel : 0.0);
      }
      if (kUlp) {
        const int e = std::max(rawExponent(b), emin) - p;
        const bool tiny = e < -1022;
        const double inv_ulp = pow2Normal(tiny ? -(e + 64) : -e);
        const double du = std::fabs(a - b) * (tiny ? k_up : 1.0);
        worst_ulp = std::max(worst_ulp, ok ? du * inv_ulp : 0.0);
      }
    }
  }
  return ComparePass2{ratio, all, total_diff, total_ref, total_y, worst_rel, worst_ulp};
}

// Pass two for what the caller reads (fumi_compare_spec.metrics): the combinations the built-in
// checks ask for have loops of their own, any other runs the full one.
template <class LY, class LR, bool kFinite>
auto pass2For(bool ratio, bool rel, bool ulp) {
  if (ratio && !rel && !ulp) return comparePass2<LY, LR, true, false, false, kFinite>;
  if (!ratio && !rel && !ulp) return comparePass2<LY, LR, false, false, false, kFinite>;
  if (!ratio) return ulp ? comparePass2<LY, LR, false, true, true, kFinite>
                         : comparePass2<LY, LR, false, true, false, kFinite>;
  return ulp ? comparePass2<LY, LR, true, true, true, kFinite>
             : comparePass2<LY, LR, true, true, false, kFinite>;
}

// What the second pass needs from the first: the fields the caller reads (the spec's
// `metrics`; ulp only with a known unit), the scale f of sums and differences (1 or 1/2: they
// cannot overflow), the guards' thresholds, the power-of-two scales of the norms (each side
// near its largest magnitude, so the scaled difference stays within [0, 4]) and the ULP unit.
// Shared by the host's loops, fumi's comparison kernels (which derive the scales on the device
// from the first pass's fields: interposer/cuda/device_kernels.h) and a framework adapter's
// ATen reductions (interposer/torch), which run the same passes in other code.
struct CompareScales {
  bool ratio, rel, ulp, norms;
  double ratio_guard, rel_guard;
  double f, ratio_threshold, rel_threshold, s_diff, s_ref, s_y;
  int e_diff, e_ref, e_y, p, emin;
  FUMI_HOST_DEVICE bool any() const { return ratio || rel || ulp || norms; }  // else no pass 2
};
// What the spec decides before any pass: the fields, the guards, the ULP unit.
inline CompareScales compareWants(const fumi_compare_spec& spec) {
  CompareScales k{};
  const uint32_t want = spec.metrics ? spec.metrics : ~0u;
  const DtypeInfo* unit = dtypeInfo(spec.ulp_dtype);
  k.ratio = want & FUMI_COMPARE_RATIO;
  k.rel = want & FUMI_COMPARE_MAX_REL;
  k.ulp = (want & FUMI_COMPARE_ULP) && unit;
  k.norms = want & FUMI_COMPARE_NORMS;
  k.ratio_guard = spec.ratio_guard;
  k.rel_guard = spec.rel_guard;
  k.p = unit ? unit->mantissa_bits : 0;
  k.emin = unit ? unit->min_exponent : 0;
  return k;
}
// The rest, from the first pass's maxima (ComparePass1's max_half_sum, max_y, max_ref).
FUMI_HOST_DEVICE inline void scaleFromMaxima(CompareScales& k, double max_half_sum, double max_y,
                                             double max_ref) {
  const double max_any = max_y > max_ref ? max_y : max_ref;
  k.f = overflowScale(max_any);
  k.ratio_threshold = k.ratio_guard * (max_half_sum * (2.0 * k.f));
  k.rel_threshold = k.rel_guard * (max_ref * k.f);
  k.e_diff = scaleExponent(max_any);
  k.e_ref = scaleExponent(max_ref);
  k.e_y = scaleExponent(max_y);
  k.s_diff = pow2(-k.e_diff);
  k.s_ref = pow2(-k.e_ref);
  k.s_y = pow2(-k.e_y);
}
inline CompareScales compareScales(const ComparePass1& p1, const fumi_compare_spec& spec) {
  CompareScales k = compareWants(spec);
  scaleFromMaxima(k, p1.max_half_sum, p1.max_y, p1.max_ref);
  return k;
}

// The comparison from both passes' results: the fields the caller did not ask for NaN
// (underflow, counted apart, set by the caller).
inline fumi_comparison compareResult(const ComparePass1& p1, const ComparePass2& p2,
                                     const CompareScales& k) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  fumi_comparison c{};
  c.struct_size = sizeof c;
  c.nonfinite = p1.nonfinite;
  c.mismatches = p1.mismatches;
  c.max_abs_diff = p1.max_diff;
  c.fumi_ratio = k.ratio ? p2.ratio : nan;
  c.fumi_ratio_unguarded = k.ratio ? p2.all : nan;
  c.max_rel = k.rel ? p2.worst_rel : nan;
  c.ulp = k.ulp ? p2.worst_ulp : nan;
  c.normwise = c.norm_ratio = nan;
  if (k.norms) {
    const double inf = std::numeric_limits<double>::infinity();
    c.normwise = p2.total_ref == 0.0
                     ? (p2.total_diff == 0.0 ? 0.0 : inf)
                     : std::ldexp(std::sqrt(p2.total_diff) / std::sqrt(p2.total_ref),
                                  k.e_diff - k.e_ref);
    c.norm_ratio = p2.total_ref == 0.0 ? (p2.total_y == 0.0 ? 0.0 : inf)
                                       : std::ldexp(std::sqrt(p2.total_y) /
                                                        std::sqrt(p2.total_ref),
                                                    k.e_y - k.e_ref);
  }
  return c;
}

}  // namespace detail

// Both passes. The first runs unmasked and checks that every element is finite as it goes
// (masking and counting every element costs four times as much); only when one is not do both
// passes mask. The second runs for the fields the spec's `metrics` asks for only (the others
// are NaN), and not at all when it asks for none of them.
template <class LY, class LR>
fumi_comparison compareValues(const typename LY::T* y, const typename LR::T* ref, size_t n,
                              const fumi_compare_spec& spec) {
  double probe = 0.0;
  detail::ComparePass1 p1 = detail::comparePass1<LY, LR, true>(y, ref, n, &probe);
  const bool finite = probe == 0.0;
  if (!finite) p1 = detail::comparePass1<LY, LR, false>(y, ref, n, nullptr);
  const detail::CompareScales k = detail::compareScales(p1, spec);
  detail::ComparePass2 p2;
  if (k.any()) {
    const auto pass2 = finite ? detail::pass2For<LY, LR, true>(k.ratio, k.rel, k.ulp)
                              : detail::pass2For<LY, LR, false>(k.ratio, k.rel, k.ulp);
    p2 = pass2(y, ref, n, k.f, k.ratio_threshold, k.rel_threshold, k.s_diff, k.s_ref, k.s_y,
               k.p, k.emin);
  }
  fumi_comparison c = detail::compareResult(p1, p2, k);
  if (spec.underflow_below > 0)
    c.underflow = detail::countUnderflow<LY, LR>(y, ref, n, spec.underflow_below);
  return c;
}

// The same comparison of two dense fp64 arrays, one metric at a time (tests, small callers; a
// check wanting several calls compareValues once).
inline fumi_comparison compareDense(const double* y, const double* ref, size_t n,
                                    const fumi_compare_spec& spec = compareSpec()) {
  return compareValues<Dense, Dense>(y, ref, n, spec);
}
inline void fumiRatios(const double* y, const double* yp, size_t n, double guard_rel,
                       double* guarded, double* unguarded, size_t* skipped = nullptr) {
  const fumi_comparison c = compareDense(
      y, yp, n, compareSpec(guard_rel, 0.0, FUMI_DTYPE_UNKNOWN, 0.0, FUMI_COMPARE_RATIO));
  *guarded = c.fumi_ratio;
  *unguarded = c.fumi_ratio_unguarded;
  if (skipped) *skipped = c.nonfinite;
}
inline double fumiRatio(const double* y, const double* yp, size_t n, double guard_rel,
                        size_t* skipped = nullptr) {
  double guarded = 0.0, unguarded = 0.0;
  fumiRatios(y, yp, n, guard_rel, &guarded, &unguarded, skipped);
  return guarded;
}
inline double normwiseRel(const double* y, const double* ref, size_t n,
                          size_t* skipped = nullptr) {
  const fumi_comparison c =
      compareDense(y, ref, n, compareSpec(0.0, 0.0, FUMI_DTYPE_UNKNOWN, 0.0, FUMI_COMPARE_NORMS));
  if (skipped) *skipped = c.nonfinite;
  return c.normwise;
}
inline double maxRelGuarded(const double* y, const double* ref, size_t n, double guard_rel,
                            size_t* skipped = nullptr) {
  const fumi_comparison c = compareDense(
      y, ref, n, compareSpec(0.0, guard_rel, FUMI_DTYPE_UNKNOWN, 0.0, FUMI_COMPARE_MAX_REL));
  if (skipped) *skipped = c.nonfinite;
  return c.max_rel;
}
inline double maxUlp(const double* y, const double* ref, size_t n, fumi_dtype dtype,
                     size_t* skipped = nullptr) {
  const fumi_comparison c = compareDense(y, ref, n, compareSpec(0.0, 0.0, dtype, 0.0, FUMI_COMPARE_ULP));
  if (skipped) *skipped = c.nonfinite;
  return c.ulp;
}
inline double normRatio(const double* a, const double* b, size_t n) {
  return compareDense(a, b, n, compareSpec(0.0, 0.0, FUMI_DTYPE_UNKNOWN, 0.0, FUMI_COMPARE_NORMS))
      .norm_ratio;
}
inline double maxAbsDiff(const double* a, const double* b, size_t n) {
  return compareDense(a, b, n, compareSpec(0.0, 0.0, FUMI_DTYPE_UNKNOWN, 0.0, FUMI_COMPARE_DIFFS))
      .max_abs_diff;
}
inline size_t bitwiseMismatches(const double* a, const double* b, size_t n) {
  return compareDense(a, b, n, compareSpec(0.0, 0.0, FUMI_DTYPE_UNKNOWN, 0.0, FUMI_COMPARE_DIFFS))
      .mismatches;
}

// Unit roundoff 2^-(p+1) of `dtype` (NaN for an unknown one).
inline double unitRoundoff(fumi_dtype dtype) {
  const DtypeInfo* d = dtypeInfo(dtype);
  return d ? std::ldexp(1.0, -(d->mantissa_bits + 1)) : std::numeric_limits<double>::quiet_NaN();
}

// The narrower of a storage dtype and a compute precision: what results can be expected to
// carry (fp32 storage with TF32 math -> TF32; fp16 storage with fp32 accumulation -> fp16).
inline fumi_dtype narrowerPrecision(fumi_dtype storage, fumi_dtype compute) {
  const DtypeInfo* s = dtypeInfo(storage);
  const DtypeInfo* c = dtypeInfo(compute);
  return s && c && c->mantissa_bits < s->mantissa_bits ? compute : storage;
}

namespace detail {
// Squares of magnitudes up to max_abs neither overflow nor underflow in an fp64 sum (all zero,
// or within 2^±400): the plain sum of squares gives the norm.
inline bool squaresInRange(double max_abs) {
  return max_abs == 0.0 || (max_abs < 0x1p400 && max_abs > 0x1p-400);
}
}  // namespace detail

// scanValues' result from its first, unmasked pass alone — the sum of squares and the largest
// magnitude of the elements, taken without looking at finiteness — where that pass is the whole
// scan: the sum finite (so is every element) and the squares in range. False otherwise: the
// elements need scanValues' further passes.
inline bool scanFromSquares(double sum_sq, double max_abs, fumi_scan* out) {
  if (!(sum_sq <= detail::kMaxFinite) || !detail::squaresInRange(max_abs)) return false;
  *out = fumi_scan{};
  out->struct_size = sizeof(fumi_scan);
  out->max_abs = max_abs;
  out->norm = std::sqrt(sum_sq);
  return true;
}

// NaN and Inf counts, the largest finite magnitude and the 2-norm of the finite elements of n
// elements (fumi_scan of plugin.h): one pass when every element is finite; a pass that counts
// and masks otherwise; and where the squares could overflow or underflow (magnitudes beyond
// 2^±400: fp64 data alone), a pass summing them scaled by a power of two.
template <class L>
FUMI_WIDE fumi_scan scanValues(const typename L::T* x, size_t n) {
  // The first pass sums squares and takes magnitudes without looking at finiteness, in two
  // streams (halves of x: two independent chains of vector adds): a NaN or Inf anywhere, or a
  // square beyond fp64's range, leaves the sum non-finite, and only then a second pass counts
  // and masks. Six times faster than masking and counting every element.
  double sum0 = 0.0, sum1 = 0.0, max0 = 0.0, max1 = 0.0;
  const size_t half = n / 2;
  FUMI_SIMD(reduction(+ : sum0, sum1) reduction(max : max0, max1))
  for (size_t i = 0; i < half; ++i) {
    const double a = L::load(x[i]), b = L::load(x[i + half]);
    sum0 += a * a;
    sum1 += b * b;
    max0 = std::max(max0, std::fabs(a));
    max1 = std::max(max1, std::fabs(b));
  }
  if (n % 2 == 1) {
    const double a = L::load(x[n - 1]);
    sum0 += a * a;
    max0 = std::max(max0, std::fabs(a));
  }
  double max_abs = std::max(max0, max1), sum = sum0 + sum1;
  fumi_scan s{};
  if (scanFromSquares(sum, max_abs, &s)) return s;
  size_t nan = 0, nonfinite = 0;
  if (!(sum <= detail::kMaxFinite)) {
    max_abs = sum = 0.0;
    FUMI_SIMD(reduction(+ : nan, nonfinite, sum) reduction(max : max_abs))
    for (size_t i = 0; i < n; ++i) {
      const double v = L::load(x[i]);
      const double m = std::fabs(v);
      const bool finite = m <= detail::kMaxFinite;
      nan += v != v ? 1 : 0;
      nonfinite += finite ? 0 : 1;
      max_abs = std::max(max_abs, finite ? m : 0.0);
      sum += finite ? m * m : 0.0;
    }
  }
  s.struct_size = sizeof s;
  s.nan = nan;
  s.inf = nonfinite - nan;
  s.max_abs = max_abs;
  if (detail::squaresInRange(max_abs)) {
    s.norm = std::sqrt(sum);
    return s;
  }
  const int e = detail::scaleExponent(max_abs);
  const double scale = detail::pow2(-e);
  double scaled = 0.0;
  FUMI_SIMD(reduction(+ : scaled))
  for (size_t i = 0; i < n; ++i) {
    const double v = L::load(x[i]);
    const double t = std::fabs(v) <= detail::kMaxFinite ? v * scale : 0.0;
    scaled += t * t;
  }
  s.norm = std::ldexp(std::sqrt(scaled), e);
  return s;
}

// Number of NaN or +-Inf elements.
inline size_t countNonFinite(const double* x, size_t n) {
  const fumi_scan s = scanValues<Dense>(x, n);
  return s.nan + s.inf;
}

// Number of NaN elements.
inline size_t countNaN(const double* x, size_t n) { return scanValues<Dense>(x, n).nan; }

// ---------------------------------------------------------------------------------------------
// Deterministic random numbers

// splitmix64: one 64-bit word of state, full period, good enough statistics for input noise,
// and trivially reproducible from a seed. No global state: each check owns its generator.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  uint64_t next() { return drawMix(state_ += kDrawGolden); }

  // Uniform in [0, 1), 53 random bits.
  double uniform01() { return drawUnit(next()); }

  // Uniform in [-1, 1).
  double uniformSym() { return 2.0 * uniform01() - 1.0; }

  // Draw number `index` (0-based) of perturb's noise stream `seed`, on its own (not this
  // generator's sequence: a counter-based one in 32-bit arithmetic, counter_draw.h), so a loop
  // draws element i without the draws before it and vectorises. The torch adapter draws the
  // same numbers with integer ops on a device (noiseMix's constants); fumi's CUDA kernels call
  // uniformSymDraw.
  static double uniformSymAt(uint64_t seed, uint64_t index) {
    return uniformSymDraw(seed, index);
  }

 private:
  uint64_t state_;
};

// A seed derived from `seed` and `salt` such that nearby inputs give unrelated streams.
inline uint64_t mixSeed(uint64_t seed, uint64_t salt) {
  Rng rng(seed ^ (salt * 0xd1342543de82ef95ULL));
  return rng.next();
}

// FNV-1a of a C string (0 for nullptr), to fold names into seeds.
inline uint64_t hashString(const char* s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  if (!s) return 0;
  for (; *s; ++s) h = (h ^ static_cast<unsigned char>(*s)) * 0x100000001b3ULL;
  return h;
}

// ---------------------------------------------------------------------------------------------
// Parameters of a policy entry

// A bad parameter. Thrown only inside a plugin's create and turned into its error message there.
class ParamError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Whole-string decimal/hex/exponent float, finite, no surrounding spaces or trailing garbage.
inline bool parseDouble(const char* text, double* out) {
  if (!text || !*text || std::isspace(static_cast<unsigned char>(*text))) return false;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !std::isfinite(v)) return false;
  // ERANGE on underflow still gives the correctly rounded tiny value; only overflow is an error,
  // and it shows as a non-finite result above.
  *out = v;
  return true;
}

// Whole-string base-10 integer in int64 range, no surrounding spaces or trailing garbage.
inline bool parseInt(const char* text, int64_t* out) {
  if (!text || !*text || std::isspace(static_cast<unsigned char>(*text))) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || errno == ERANGE) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

// Comma-separated list; items are trimmed of spaces and must not be empty.
inline bool parseList(const char* text, std::vector<std::string>* out) {
  if (!text) return false;
  std::vector<std::string> items;
  const char* p = text;
  for (;;) {
    const char* end = std::strchr(p, ',');
    const char* stop = end ? end : p + std::strlen(p);
    const char* b = p;
    while (b < stop && std::isspace(static_cast<unsigned char>(*b))) ++b;
    const char* e = stop;
    while (e > b && std::isspace(static_cast<unsigned char>(e[-1]))) --e;
    if (b == e) return false;
    items.emplace_back(b, e);
    if (!end) break;
    p = end + 1;
  }
  *out = std::move(items);
  return true;
}

// The error tolerance model `precision` (docs/policy.md, "Error tolerances from the
// precision"): what an op computing in `precision` (the narrower of its storage dtype and its
// compute precision) promises about its normwise relative error against an exact result,
//   tau = kResultRoundings * u_out + kAccumulationSpread * sqrt(k) * u_acc
// u_out: the unit roundoff of `precision`, which the result is rounded to (each element by at
// most u_out, so the normwise error by at most u_out); kResultRoundings = 2 allows one more
// rounding to that dtype inside the op (a bias or C added after the product, an epilogue, an
// intermediate a kernel stores in the output's dtype).
// u_acc: f32's unit roundoff 2^-24 — the accumulation every library offers at no cost, so an
// op accumulating in fp16 (CUBLAS_COMPUTE_16F) is measured against it and is an error —, or
// `compute`'s where that is finer (f64). k: the terms each output sums. Rounding errors of a
// k-term sum grow like sqrt(k) * u when they are independent and of mean zero (Higham & Mary,
// "A new approach to probabilistic rounding error analysis", 2019): each element's error is
// within lambda * sqrt(k) * u of the sum of its terms' magnitudes with probability at least
// 1 - 2 exp(-lambda^2 / 2); kAccumulationSpread = lambda = 5 makes that 1 - 7.5e-6 per element,
// and a normwise figure, an average, stays well below it. No cancellation factor
// (|| |A||B| || / ||AB||): an op that cancels loses digits, which is what a user wants to see.
constexpr double kResultRoundings = 2;
constexpr double kAccumulationSpread = 5;

inline double precisionTolerance(fumi_dtype precision, fumi_dtype compute, int64_t k) {
  const double u_out = unitRoundoff(precision);
  if (std::isnan(u_out) || k < 1) return std::numeric_limits<double>::quiet_NaN();
  const double u_compute = unitRoundoff(compute);  // NaN (unknown) leaves f32's
  const double u_acc = u_compute < unitRoundoff(FUMI_DTYPE_F32) ? u_compute
                                                               : unitRoundoff(FUMI_DTYPE_F32);
  return kResultRoundings * u_out +
         kAccumulationSpread * std::sqrt(static_cast<double>(k)) * u_acc;
}

// Where a check's tolerance comes from: the policy entry's `tolerance:` (NaN: unset), else the
// policy's `tolerances:` entry for the check's kind at the call's precision (NaN: unset), else,
// under the `precision` model, precisionTolerance where the call's reduction length is known
// (under `max`, the larger of it and the default), else a default the check supplies (the dtype
// table's, for relative errors).
struct Tolerance {
  double configured = std::numeric_limits<double>::quiet_NaN();
  double kind[FUMI_TOLERANCE_SLOTS] = {NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN,
                                       NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN};
  fumi_tolerance_model model = FUMI_TOLERANCE_TABLE;
  // The same, for a call computing in `precision` with compute precision `compute` whose
  // outputs each sum `k` terms (0: unknown).
  double resolve(fumi_dtype precision, fumi_dtype compute, int64_t k, double fallback) const {
    const double r = resolve(precision, std::numeric_limits<double>::quiet_NaN());
    if (!std::isnan(r)) return r;
    if ((model == FUMI_TOLERANCE_PRECISION || model == FUMI_TOLERANCE_MAX) && k > 0) {
      const double t = precisionTolerance(precision, compute, k);
      if (!std::isnan(t))
        return model == FUMI_TOLERANCE_MAX && !(t >= fallback) ? fallback : t;
    }
    return fallback;
  }
  double resolve(fumi_dtype precision, double fallback) const {
    if (!std::isnan(configured)) return configured;
    const int slot = static_cast<int>(precision);
    if (slot >= 0 && slot < FUMI_TOLERANCE_SLOTS && !std::isnan(kind[slot])) return kind[slot];
    return fallback;
  }
};

// Numeric bounds of a parameter, inclusive unless marked open.
struct Bounds {
  double lo;
  double hi;
  bool lo_open = false;
  bool hi_open = false;
};

// The `key: value` parameters of one policy entry, checked against the keys a plugin knows.
// Getters throw ParamError with a message naming the key and the plugin.
class Params {
 public:
  // Keys handled by the host itself; accepted by every plugin.
  static bool isReserved(const std::string& key) { return key == "plugin" || key == "tolerance"; }

  Params(const fumi_params* params, const char* plugin, const std::vector<std::string>& known)
      : plugin_(plugin ? plugin : "?") {
    if (!params) return;
    // Fields after `seed` were appended: read below only where struct_size covers them.
    if (params->struct_size < offsetof(fumi_params, kind_tolerances))
      throw ParamError("plugin '" + plugin_ + "': fumi_params too old (struct_size " +
                       std::to_string(params->struct_size) + ")");
    seed_ = params->seed;
    tolerance_ = params->tolerance;
    // `kind_tolerances` was appended: an older host's fumi_params ends before it.
    if (params->struct_size >= offsetof(fumi_params, kind_tolerances) + sizeof(const double*) &&
        params->kind_tolerances)
      std::copy(params->kind_tolerances, params->kind_tolerances + FUMI_TOLERANCE_SLOTS,
                kind_tolerances_);
    // `error_model` was appended after it.
    if (params->struct_size >= offsetof(fumi_params, error_model) + sizeof(fumi_tolerance_model))
      error_model_ = params->error_model;
    if (params->count < 0 || (params->count > 0 && !params->items))
      throw ParamError("plugin '" + plugin_ + "': malformed parameter list");
    for (int32_t i = 0; i < params->count; ++i) {
      const fumi_param& item = params->items[i];
      if (!item.key || !item.value)
        throw ParamError("plugin '" + plugin_ + "': parameter without key or value");
      const std::string key = item.key;
      if (!isReserved(key) && std::find(known.begin(), known.end(), key) == known.end()) {
        std::string list;
        for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
        throw ParamError("unknown parameter '" + key + "' for plugin '" + plugin_ +
                         "' (known: " + (list.empty() ? "none" : list) + ")");
      }
      for (const auto& kv : items_)
        if (kv.first == key)
          throw ParamError("parameter '" + key + "' given twice for plugin '" + plugin_ + "'");
      items_.emplace_back(key, item.value);
    }
    // The entry's tolerance normally arrives in fumi_params::tolerance; accept it as an item too.
    if (std::isnan(tolerance_)) {
      if (const char* t = find("tolerance")) tolerance_ = parseDoubleOrThrow("tolerance", t);
    }
    if (std::isnan(tolerance_)) return;
    if (!(tolerance_ >= 0.0))
      throw ParamError("parameter 'tolerance' of plugin '" + plugin_ + "' must be >= 0, got " +
                       num(tolerance_));
  }

  // The raw text of `key`, or nullptr when the entry does not set it.
  const char* find(const char* key) const {
    for (const auto& kv : items_)
      if (kv.first == key) return kv.second.c_str();
    return nullptr;
  }

  double getDouble(const char* key, double fallback, Bounds bounds) const {
    const char* text = find(key);
    if (!text) return fallback;
    const double v = parseDoubleOrThrow(key, text);
    const bool lo_ok = bounds.lo_open ? v > bounds.lo : v >= bounds.lo;
    const bool hi_ok = bounds.hi_open ? v < bounds.hi : v <= bounds.hi;
    if (!lo_ok || !hi_ok)
      throw ParamError("parameter '" + std::string(key) + "' of plugin '" + plugin_ +
                       "' must be in " + (bounds.lo_open ? "(" : "[") + num(bounds.lo) + ", " +
                       num(bounds.hi) + (bounds.hi_open ? ")" : "]") + ", got '" + text + "'");
    return v;
  }

  int64_t getInt(const char* key, int64_t fallback, int64_t lo, int64_t hi) const {
    const char* text = find(key);
    if (!text) return fallback;
    int64_t v = 0;
    if (!parseInt(text, &v))
      throw ParamError("parameter '" + std::string(key) + "' of plugin '" + plugin_ +
                       "': expected an integer, got '" + text + "'");
    if (v < lo || v > hi)
      throw ParamError("parameter '" + std::string(key) + "' of plugin '" + plugin_ +
                       "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                       "], got '" + text + "'");
    return v;
  }

  // One of `choices`; returns its index (0 when the key is absent).
  size_t getChoice(const char* key, const std::vector<std::string>& choices) const {
    const char* text = find(key);
    if (!text) return 0;
    for (size_t i = 0; i < choices.size(); ++i)
      if (choices[i] == text) return i;
    std::string list;
    for (const std::string& c : choices) list += (list.empty() ? "" : ", ") + c;
    throw ParamError("parameter '" + std::string(key) + "' of plugin '" + plugin_ +
                     "' must be one of " + list + ", got '" + text + "'");
  }

  // Comma-separated names; empty when the key is absent.
  std::vector<std::string> getList(const char* key) const {
    std::vector<std::string> items;
    const char* text = find(key);
    if (text && !parseList(text, &items))
      throw ParamError("parameter '" + std::string(key) + "' of plugin '" + plugin_ +
                       "': expected a comma-separated list of names, got '" + text + "'");
    return items;
  }

  // The entry's tolerance, or NaN when it sets none (use the dtype table then).
  double tolerance() const { return tolerance_; }
  // The entry's tolerance and the policy's per-kind table, resolved per call.
  Tolerance tolerances() const {
    Tolerance t;
    t.configured = tolerance_;
    std::copy(kind_tolerances_, kind_tolerances_ + FUMI_TOLERANCE_SLOTS, t.kind);
    t.model = error_model_;
    return t;
  }
  uint64_t seed() const { return seed_; }
  const std::string& plugin() const { return plugin_; }

 private:
  double parseDoubleOrThrow(const char* key, const char* text) const {
    double v = 0.0;
    if (!parseDouble(text, &v))
      throw ParamError("parameter '" + std::string(key) + "' of plugin '" + plugin_ +
                       "': expected a finite number, got '" + text + "'");
    return v;
  }

  static std::string num(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
  }

  std::string plugin_;
  std::vector<std::pair<std::string, std::string>> items_;
  double tolerance_ = std::numeric_limits<double>::quiet_NaN();
  double kind_tolerances_[FUMI_TOLERANCE_SLOTS] = {
      NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN};
  fumi_tolerance_model error_model_ = FUMI_TOLERANCE_TABLE;
  uint64_t seed_ = 0;
};

}  // namespace fumi::metrics
