// The host's element-wise primitives (elementwise.h; plugin.h ABI 2: map, compare, scan)
// against straightforward element-by-element definitions written here: every storage dtype,
// flat and gapped, transposed, reversed and broadcast layouts, zeros, NaN/Inf, sizes 0 and 1.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "elementwise.h"
#include "fumi/dtype.hpp"
#include "metrics.h"
#include "plugin_host.h"
#include "tensor_copy.h"
#include "test_layouts.h"

namespace fumi {
namespace {

constexpr fumi_dtype kLoadable[] = {FUMI_DTYPE_F64, FUMI_DTYPE_F32, FUMI_DTYPE_F16,
                                    FUMI_DTYPE_BF16};

// layouts() plus the shapes only the primitives care about: empty, one element, a slice with
// gaps, a broadcast dimension (read-only: two logical elements share a slot).
std::vector<fumi_tensor> allLayouts() {
  std::vector<fumi_tensor> all = layouts();
  all.push_back(makeTensor({0}, {1}));
  all.push_back(makeTensor({1}, {1}));
  all.push_back(makeTensor({4, 6}, {8, 1}));
  all.push_back(makeTensor({3, 4}, {0, 1}));
  return all;
}

bool broadcast(const fumi_tensor& t) {
  for (int d = 0; d < t.ndim; ++d)
    if (t.strides[d] == 0 && t.shape[d] > 1) return true;
  return false;
}

// Random values with zeros, NaN and Inf planted at some slots.
std::vector<unsigned char> specialBuffer(const fumi_tensor& t, fumi_dtype dtype, uint32_t seed) {
  std::vector<unsigned char> b = randomBuffer(t, dtype, seed);
  const int64_t span = tensorSpan(t);
  for (int64_t i = 0; i < span; i += 5) storeFromDouble(b.data(), i, 0.0, dtype);
  if (span > 7) {
    storeFromDouble(b.data(), 3, std::numeric_limits<double>::quiet_NaN(), dtype);
    storeFromDouble(b.data(), 7, -std::numeric_limits<double>::infinity(), dtype);
  }
  return b;
}

// Logical elements of a buffer laid out like t, in row-major order.
std::vector<double> elements(const fumi_tensor& t, const void* data, fumi_dtype dtype) {
  std::vector<double> v(static_cast<size_t>(tensorNumel(t)));
  forEachElement(t, [&](int64_t k, int64_t off) {
    v[static_cast<size_t>(k)] = loadAsDouble(data, off, dtype);
  });
  return v;
}

bool finite(double x) { return std::isfinite(x); }

TEST(Elementwise, CompareMatchesTheDefinitions) {
  for (const fumi_tensor& t : allLayouts())
    for (fumi_dtype da : kLoadable)
      for (fumi_dtype db : kLoadable) {
        const auto a = specialBuffer(t, da, 11), b = specialBuffer(t, db, 12);
        const std::vector<double> x = elements(t, a.data(), da), y = elements(t, b.data(), db);
        // The definitions, one element at a time, in long double.
        long double diff2 = 0, ref2 = 0, x2 = 0;
        double max_sum = 0, max_ref = 0, max_diff = 0;
        size_t nonfinite = 0, mismatches = 0;
        for (size_t i = 0; i < x.size(); ++i) {
          uint64_t bx, by;
          std::memcpy(&bx, &x[i], 8);
          std::memcpy(&by, &y[i], 8);
          mismatches += bx != by;
          if (!finite(x[i]) || !finite(y[i])) {
            ++nonfinite;
            continue;
          }
          const long double d = static_cast<long double>(x[i]) - y[i];
          diff2 += d * d;
          ref2 += static_cast<long double>(y[i]) * y[i];
          x2 += static_cast<long double>(x[i]) * x[i];
          max_sum = std::max(max_sum, std::fabs(x[i] + y[i]));
          max_ref = std::max(max_ref, std::fabs(y[i]));
          max_diff = std::max(max_diff, std::fabs(x[i] - y[i]));
        }
        const double guard = 0.01, rel_guard = 0.05;
        double ratio = 0, unguarded = 0, max_rel = 0;
        for (size_t i = 0; i < x.size(); ++i) {
          if (!finite(x[i]) || !finite(y[i])) continue;
          const double s = std::fabs(x[i] + y[i]), d = std::fabs(x[i] - y[i]);
          if (s > 0) unguarded = std::max(unguarded, d / s);
          if (s > 0 && s > guard * max_sum) ratio = std::max(ratio, d / s);
          const double m = std::fabs(y[i]);
          if (m > 0 && m > rel_guard * max_ref) max_rel = std::max(max_rel, d / m);
        }
        fumi_comparison c{};
        c.struct_size = sizeof c;
        ASSERT_EQ(compareTensor(t, a.data(), da, b.data(), db,
                                metrics::compareSpec(guard, rel_guard, FUMI_DTYPE_F32), &c),
                  FUMI_OK);
        const std::string where = std::string("ndim ") + std::to_string(t.ndim) + " " +
                                  dtypeName(da) + "/" + dtypeName(db);
        EXPECT_EQ(c.nonfinite, nonfinite) << where;
        EXPECT_EQ(c.mismatches, mismatches) << where;
        EXPECT_DOUBLE_EQ(c.fumi_ratio, ratio) << where;
        EXPECT_DOUBLE_EQ(c.fumi_ratio_unguarded, unguarded) << where;
        EXPECT_DOUBLE_EQ(c.max_rel, max_rel) << where;
        EXPECT_DOUBLE_EQ(c.max_abs_diff, max_diff) << where;
        const double normwise = ref2 > 0 ? static_cast<double>(std::sqrt(diff2 / ref2))
                                         : (diff2 > 0 ? INFINITY : 0.0);
        const double norm_ratio = ref2 > 0 ? static_cast<double>(std::sqrt(x2 / ref2))
                                           : (x2 > 0 ? INFINITY : 0.0);
        EXPECT_NEAR(c.normwise, normwise, 1e-12 * std::max(1.0, normwise)) << where;
        EXPECT_NEAR(c.norm_ratio, norm_ratio, 1e-12 * std::max(1.0, norm_ratio)) << where;
        // ULPs of f32 at each reference value, with the smallest normal as the floor.
        double ulp = 0;
        for (size_t i = 0; i < x.size(); ++i) {
          if (!finite(x[i]) || !finite(y[i])) continue;
          const double r = std::max(std::fabs(y[i]), 0x1p-126);
          ulp = std::max(ulp, std::fabs(x[i] - y[i]) / std::ldexp(1.0, std::ilogb(r) - 23));
        }
        EXPECT_DOUBLE_EQ(c.ulp, ulp) << where;
        // A spec naming some of the fields (the loops that skip the others' divisions, and the
        // full loop for a set no check uses) gets the same values for those and NaN for the
        // rest; the first pass's fields always. Maxima are the same bit for bit; the norms' sums
        // may be added in another order by another loop.
        for (const uint32_t want : std::initializer_list<uint32_t>{
                 FUMI_COMPARE_RATIO | FUMI_COMPARE_NORMS,
                 FUMI_COMPARE_NORMS | FUMI_COMPARE_MAX_REL | FUMI_COMPARE_ULP,
                 FUMI_COMPARE_NORMS | FUMI_COMPARE_MAX_REL, FUMI_COMPARE_NORMS,
                 FUMI_COMPARE_DIFFS, FUMI_COMPARE_RATIO | FUMI_COMPARE_ULP}) {
          fumi_comparison s{};
          s.struct_size = sizeof s;
          ASSERT_EQ(compareTensor(
                        t, a.data(), da, b.data(), db,
                        metrics::compareSpec(guard, rel_guard, FUMI_DTYPE_F32, 0.0, want), &s),
                    FUMI_OK);
          const auto same = [&](double got, double all, uint32_t group, double rel = 0.0) {
            if (want & group) EXPECT_NEAR(got, all, rel * all) << where << " metrics " << want;
            else EXPECT_TRUE(std::isnan(got)) << where << " metrics " << want;
          };
          same(s.fumi_ratio, c.fumi_ratio, FUMI_COMPARE_RATIO);
          same(s.fumi_ratio_unguarded, c.fumi_ratio_unguarded, FUMI_COMPARE_RATIO);
          same(s.normwise, c.normwise, FUMI_COMPARE_NORMS, 1e-14);
          same(s.norm_ratio, c.norm_ratio, FUMI_COMPARE_NORMS, 1e-14);
          same(s.max_rel, c.max_rel, FUMI_COMPARE_MAX_REL);
          same(s.ulp, c.ulp, FUMI_COMPARE_ULP);
          EXPECT_EQ(s.nonfinite, c.nonfinite) << where;
          EXPECT_EQ(s.mismatches, c.mismatches) << where;
          EXPECT_EQ(s.max_abs_diff, c.max_abs_diff) << where;
        }
      }
}

// compare's second pass divides only in blocks where a division-free test says a quotient may
// raise a maximum: over many blocks, with the maxima in late blocks, near-ties one rounding
// apart, subnormal and huge fp64 values and guards that mask some elements, its ratio, unguarded
// ratio, max_rel and ULP count are those of dividing everywhere, bit for bit.
TEST(Elementwise, CompareMaximaOverBlocksEqualDividingEverywhere) {
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<double> unit(0.5, 1.0);
  for (int scenario = 0; scenario < 7; ++scenario)
    for (fumi_dtype dt : {FUMI_DTYPE_F64, FUMI_DTYPE_F32}) {
      if (dt != FUMI_DTYPE_F64 && (scenario == 3 || scenario == 4)) continue;  // fp64 ranges
      const size_t n = 9000 + static_cast<size_t>(scenario) * 301;
      std::vector<double> y(n), r(n);
      for (size_t i = 0; i < n; ++i) {
        // Magnitudes: 1 (0, 1), growing along the array (later elements make records: 2),
        // fp64 subnormal (3), above half the largest fp64 (4: compare scales by 1/2), mixed
        // with exact ties (5), one relative change everywhere (6: the quotients differ in their
        // last bits only, and the largest is anywhere).
        double mag = scenario == 3 ? 0x1p-1060 : scenario == 4 ? 0x1.8p1023 : 1.0;
        if (scenario == 2) mag = 1.0 + static_cast<double>(i);
        const double v = mag * unit(rng) * (i % 3 == 0 ? -1.0 : 1.0);
        // Subnormals hold about 14 bits here: their change is 1e-3.
        const double rel = (scenario == 2 ? static_cast<double>(i) : 1.0) *
                           (scenario == 3 ? 1e-3 : 1e-7) * (scenario == 6 ? 1.0 : unit(rng));
        r[i] = v;
        y[i] = scenario == 5 && i % 7 == 0 ? v : v * (1.0 + rel);
        if (scenario == 5 && i % 11 == 0) y[i] = std::nextafter(v, 0.0);  // near-ties
      }
      if (scenario == 1) y[n - 1] = r[n - 1] * (1.0 + 1e-3);  // the record in the last block
      std::vector<unsigned char> a(n * static_cast<size_t>(dtypeBytes(dt)));
      std::vector<unsigned char> b(a.size());
      for (size_t i = 0; i < n; ++i) {
        storeFromDouble(a.data(), static_cast<int64_t>(i), y[i], dt);
        storeFromDouble(b.data(), static_cast<int64_t>(i), r[i], dt);
      }
      const fumi_tensor t = makeTensor({static_cast<int64_t>(n)}, {1});
      const std::vector<double> x = elements(t, a.data(), dt), z = elements(t, b.data(), dt);
      double max_sum = 0, max_ref = 0, max_y = 0;
      for (size_t i = 0; i < n; ++i) {
        max_sum = std::max(max_sum, std::fabs(0.5 * x[i] + 0.5 * z[i]));
        max_ref = std::max(max_ref, std::fabs(z[i]));
        max_y = std::max(max_y, std::fabs(x[i]));
      }
      for (const double guard : {0.0, 0.3}) {
        fumi_comparison c{};
        c.struct_size = sizeof c;
        ASSERT_EQ(compareTensor(t, a.data(), dt, b.data(), dt,
                                metrics::compareSpec(guard, guard, dt), &c),
                  FUMI_OK);
        // The definitions on the same scaled values (a scale of 1/2 near the overflow).
        const double f =
            std::max(max_y, max_ref) > std::numeric_limits<double>::max() * 0.5 ? 0.5 : 1.0;
        if (scenario == 4) {
          EXPECT_EQ(f, 0.5);
        }
        double ratio = 0, unguarded = 0, max_rel = 0, ulp = 0;
        const DtypeInfo& info = *dtypeInfo(dt);
        for (size_t i = 0; i < n; ++i) {
          const double s = std::fabs(x[i] * f + z[i] * f), d = std::fabs(x[i] * f - z[i] * f);
          const double m = std::fabs(z[i] * f);
          if (s > 0) unguarded = std::max(unguarded, d / s);
          if (s > 0 && s > guard * (max_sum * (2 * f))) ratio = std::max(ratio, d / s);
          if (m > 0 && m > guard * (max_ref * f)) max_rel = std::max(max_rel, d / m);
          // ULPs of dt at the reference value (unscaled), the smallest normal's below it.
          const int e = z[i] == 0.0 ? info.min_exponent
                                    : std::max(std::ilogb(z[i]), info.min_exponent);
          ulp = std::max(ulp, std::ldexp(std::fabs(x[i] - z[i]), info.mantissa_bits - e));
        }
        const std::string where = "scenario " + std::to_string(scenario) + " " + dtypeName(dt) +
                                  " guard " + std::to_string(guard);
        EXPECT_GT(unguarded, 0.0) << where;
        EXPECT_EQ(c.fumi_ratio, ratio) << where;
        EXPECT_EQ(c.fumi_ratio_unguarded, unguarded) << where;
        EXPECT_EQ(c.max_rel, max_rel) << where;
        EXPECT_GT(ulp, 0.0) << where;
        EXPECT_EQ(c.ulp, ulp) << where;
      }
    }
}

TEST(Elementwise, CompareOfABufferWithItselfIsZero) {
  const fumi_tensor t = makeTensor({37, 45}, {1, 51});
  const auto a = randomBuffer(t, FUMI_DTYPE_BF16, 5);
  fumi_comparison c{};
  ASSERT_EQ(compareTensor(t, a.data(), FUMI_DTYPE_BF16, a.data(), FUMI_DTYPE_BF16,
                          metrics::compareSpec(1e-3, 1e-3, FUMI_DTYPE_BF16), &c),
            FUMI_OK);
  EXPECT_EQ(c.mismatches, 0u);
  EXPECT_EQ(c.normwise, 0.0);
  EXPECT_EQ(c.fumi_ratio, 0.0);
  EXPECT_EQ(c.ulp, 0.0);
  EXPECT_EQ(c.norm_ratio, 1.0);
  EXPECT_EQ(compareTensor(t, a.data(), FUMI_DTYPE_UNKNOWN, a.data(), FUMI_DTYPE_BF16,
                          metrics::compareSpec(), &c),
            FUMI_UNSUPPORTED);
}

TEST(Elementwise, ScanCountsNanInfTheLargestFiniteMagnitudeAndTheNorm) {
  for (const fumi_tensor& t : allLayouts())
    for (fumi_dtype d : kLoadable)
      for (double scale : {1.0, 0x1p700, 0x1p-700}) {  // fp64 magnitudes whose squares overflow
        if (scale != 1.0 && d != FUMI_DTYPE_F64) continue;  //  or underflow: the scaled pass
        auto a = specialBuffer(t, d, 21);
        for (int64_t i = 0; i < tensorSpan(t); ++i)
          storeFromDouble(a.data(), i, loadAsDouble(a.data(), i, d) * scale, d);
        size_t nan = 0, inf = 0;
        double max_abs = 0;
        long double sum = 0;
        for (double v : elements(t, a.data(), d)) {
          nan += std::isnan(v);
          inf += std::isinf(v);
          if (!finite(v)) continue;
          max_abs = std::max(max_abs, std::fabs(v));
          sum += static_cast<long double>(v / scale) * (v / scale);
        }
        const double norm = static_cast<double>(std::sqrt(sum)) * scale;
        fumi_scan s{};
        ASSERT_EQ(scanTensor(t, a.data(), d, &s), FUMI_OK);
        EXPECT_EQ(s.nan, nan) << dtypeName(d);
        EXPECT_EQ(s.inf, inf) << dtypeName(d);
        EXPECT_EQ(s.max_abs, max_abs) << dtypeName(d);
        EXPECT_NEAR(s.norm, norm, 1e-13 * norm) << dtypeName(d) << " scale " << scale;
      }
}

// map writes each logical element where the layout puts it, rounded like storeFromDouble, leaves
// the gaps alone, and counts the elements whose stored value moved. Perturbation draws element
// j's noise at position first + j of FUMI_ORDER_STORAGE.
TEST(Elementwise, MapCopiesAbsAndPerturbsElementByElement) {
  const fumi_map_kind kinds[] = {FUMI_MAP_COPY, FUMI_MAP_ABS, FUMI_MAP_PERTURB};
  for (const fumi_tensor& t : allLayouts()) {
    if (broadcast(t)) continue;  // a write target must not alias itself
    int64_t order[FUMI_MAX_DIMS];
    storageStrides(t.ndim, t.shape, t.strides, order);
    for (fumi_dtype ds : kLoadable)
      for (fumi_dtype dd : kDtypes)
        for (fumi_map_kind kind : kinds) {
          const auto src = specialBuffer(t, ds, 31);
          std::vector<unsigned char> dst(static_cast<size_t>(tensorSpan(t) + 1) * 8, 0xab),
              want = dst;
          const double shift = 0.01;
          const uint64_t seed = 77, first = 1000;
          size_t changed = 0;
          forEachElement(t, [&](int64_t k, int64_t off) {
            // The element's position in storage order, from its logical index.
            int64_t rest = k, j = 0;
            for (int d = t.ndim - 1; d >= 0; --d) {
              j += (rest % t.shape[d]) * order[d];
              rest /= t.shape[d];
            }
            const double x = loadAsDouble(src.data(), off, ds);
            double v = x;
            if (kind == FUMI_MAP_ABS) v = std::fabs(x);
            if (kind == FUMI_MAP_PERTURB && x != 0.0 && std::isfinite(x))
              v = x + x * (shift * metrics::Rng::uniformSymAt(
                                       seed, first + static_cast<uint64_t>(j)));
            storeFromDouble(want.data(), off, v, dd);
            const double stored = loadAsDouble(want.data(), off, dd);
            changed += std::memcmp(&stored, &x, 8) != 0;
          });
          const fumi_map_spec spec = plugin::mapSpec(kind, shift, seed, first);
          uint64_t got_changed = 0;
          ASSERT_EQ(mapTensor(t, src.data(), ds, dst.data(), dd, spec, &got_changed), FUMI_OK);
          EXPECT_EQ(dst, want) << "ndim " << t.ndim << " " << dtypeName(ds) << "->"
                               << dtypeName(dd) << " kind " << kind;
          EXPECT_EQ(got_changed, changed) << dtypeName(ds) << "->" << dtypeName(dd);
        }
  }
}

// Indices stored as floating values (rois' image column): column 0 of the last dimension copied
// exactly, every other element perturbed as the map perturbs (by at most shift |x|, zeros kept),
// the gaps left alone, `changed` counting what moved; a reversed last dimension refused.
TEST(Elementwise, MapKeepingIndexColumnPerturbsAllButColumnZero) {
  for (const fumi_tensor& t : allLayouts()) {
    if (broadcast(t) || t.ndim == 0) continue;
    const int last = t.ndim - 1;
    if (t.strides[last] < 0) {
      std::vector<double> src(static_cast<size_t>(tensorSpan(t)), 1.0), dst = src;
      EXPECT_EQ(mapKeepingIndexColumn(t, src.data(), FUMI_DTYPE_F64, dst.data(), FUMI_DTYPE_F64,
                                      plugin::mapSpec(FUMI_MAP_PERTURB, 0.01, 1, 0), nullptr),
                FUMI_UNSUPPORTED);
      continue;
    }
    for (fumi_dtype ds : kLoadable)
      for (fumi_dtype dd : kDtypes) {
        const auto src = specialBuffer(t, ds, 53);
        const std::vector<unsigned char> fresh(static_cast<size_t>(tensorSpan(t) + 1) * 8, 0xab);
        std::vector<unsigned char> dst = fresh, copied = fresh;
        const double shift = 0.1;
        const fumi_map_spec spec = plugin::mapSpec(FUMI_MAP_PERTURB, shift, 5, 300);
        uint64_t changed = 0;
        ASSERT_EQ(mapKeepingIndexColumn(t, src.data(), ds, dst.data(), dd, spec, &changed),
                  FUMI_OK);
        ASSERT_EQ(mapTensor(t, src.data(), ds, copied.data(), dd,
                            plugin::mapSpec(FUMI_MAP_COPY), nullptr),
                  FUMI_OK);
        uint64_t moved = 0, rest = 0, rest_moved = 0;
        std::vector<bool> element(dst.size(), false);
        forEachElement(t, [&](int64_t k, int64_t off) {
          const double x = loadAsDouble(src.data(), off, ds), y = loadAsDouble(dst.data(), off, dd),
                       c = loadAsDouble(copied.data(), off, dd);
          const size_t bytes = static_cast<size_t>(dtypeBytes(dd));
          for (size_t b = 0; b < bytes; ++b) element[static_cast<size_t>(off) * bytes + b] = true;
          moved += std::memcmp(&y, &x, 8) != 0;
          if (k % t.shape[last] == 0) {
            EXPECT_EQ(std::memcmp(&y, &c, 8), 0) << "column 0, element " << k;
            return;
          }
          if (!std::isfinite(x) || x == 0.0) {
            EXPECT_EQ(std::memcmp(&y, &c, 8), 0) << "element " << k;
            return;
          }
          ++rest;
          rest_moved += std::memcmp(&y, &c, 8) != 0;
          const double unit = dd == FUMI_DTYPE_BF16                             ? 0x1p-8
                              : dd == FUMI_DTYPE_F16 || dd == FUMI_DTYPE_TF32 ? 0x1p-11
                                                                              : 0;
          // The perturbation, then the rounding to the destination's dtype.
          EXPECT_LE(std::fabs(y - x), std::fabs(x) * (shift + unit * (1 + shift)) * 1.0001)
              << "element " << k << " " << dtypeName(ds) << "->" << dtypeName(dd);
        });
        EXPECT_EQ(changed, moved) << dtypeName(ds) << "->" << dtypeName(dd);
        if (rest >= 10) {
          EXPECT_GT(rest_moved, rest / 2) << dtypeName(ds) << "->" << dtypeName(dd);
        }
        for (size_t b = 0; b < dst.size(); ++b) {
          if (!element[b]) {
            EXPECT_EQ(dst[b], 0xab) << "gap byte " << b;
          }
        }
      }
  }
}

// A terms map (`map(src, ds, dst, dd, &changed)`) against `f(x, k)` for element k (dense
// row-major) of every layout and dtype pair: each element where the layout puts it, the gaps
// left alone, and the count of elements whose stored value moved.
template <class Map, class F>
void expectElementwise(const fumi_tensor& t, uint32_t seed, Map&& map, F&& f) {
  for (fumi_dtype ds : kLoadable)
    for (fumi_dtype dd : kDtypes) {
      const auto src = specialBuffer(t, ds, seed);
      std::vector<unsigned char> dst(static_cast<size_t>(tensorSpan(t) + 1) * 8, 0xab),
          want = dst;
      uint64_t changed = 0;
      forEachElement(t, [&](int64_t k, int64_t off) {
        const double x = loadAsDouble(src.data(), off, ds);
        storeFromDouble(want.data(), off, f(x, k), dd);
        const double stored = loadAsDouble(want.data(), off, dd);
        changed += std::memcmp(&stored, &x, 8) != 0;
      });
      uint64_t got = 0;
      ASSERT_EQ(map(src.data(), ds, dst.data(), dd, &got), FUMI_OK);
      EXPECT_EQ(dst, want) << "ndim " << t.ndim << " " << dtypeName(ds) << "->" << dtypeName(dd);
      EXPECT_EQ(got, changed);
    }
}

// The terms map of a normalisation's backward reflects each element about its own mean (batch
// norm's per channel, group norm's per sample and group), wherever the layout puts it, and
// refuses means it does not have.
TEST(Elementwise, MapCentredReflectsEachElementAboutItsMean) {
  for (const fumi_tensor& t : allLayouts()) {
    if (broadcast(t) || t.ndim < 2 || tensorNumel(t) == 0) continue;
    const int64_t channels = t.shape[1], n = tensorNumel(t);
    const int64_t inner = n / (t.shape[0] * channels);
    // Batch norm: one mean per channel. Group norm: channels in groups of one, per sample.
    const Centring per_channel{inner, channels, 1, 0}, per_sample{inner, channels, 1, channels};
    for (const Centring& c : {per_channel, per_sample}) {
      std::vector<double> means(static_cast<size_t>(c.outer ? t.shape[0] * channels : channels));
      for (size_t i = 0; i < means.size(); ++i) means[i] = 0.25 * static_cast<double>(i) - 0.6;
      const auto count = static_cast<int64_t>(means.size());
      expectElementwise(
          t, 41,
          [&](const void* src, fumi_dtype ds, void* dst, fumi_dtype dd, uint64_t* changed) {
            return mapCentred(t, src, ds, dst, dd, means.data(), count, c, changed);
          },
          [&](double x, int64_t k) {
            const int64_t channel = k / inner % channels, sample = k / (inner * channels);
            const double mu = means[static_cast<size_t>(sample * c.outer + channel)];
            return mu + std::fabs(x - mu);
          });
      // One mean short, or channels that do not tile the tensor: refused.
      std::vector<double> src(static_cast<size_t>(tensorSpan(t)), 1.0), dst = src;
      EXPECT_EQ(mapCentred(t, src.data(), FUMI_DTYPE_F64, dst.data(), FUMI_DTYPE_F64,
                           means.data(), count - 1, c, nullptr),
                FUMI_UNSUPPORTED);
      Centring wrong = c;
      wrong.inner = n + 1;
      EXPECT_EQ(mapCentred(t, src.data(), FUMI_DTYPE_F64, dst.data(), FUMI_DTYPE_F64,
                           means.data(), count, wrong, nullptr),
                FUMI_UNSUPPORTED);
    }
  }
}

// Softmax's backward's terms map: -|x| in place of each element.
TEST(Elementwise, MapNegatedAbsNegatesEachMagnitude) {
  for (const fumi_tensor& t : allLayouts()) {
    if (broadcast(t)) continue;
    expectElementwise(
        t, 43,
        [&](const void* src, fumi_dtype ds, void* dst, fumi_dtype dd, uint64_t* changed) {
          return mapNegatedAbs(t, src, ds, dst, dd, changed);
        },
        [](double x, int64_t) { return -std::fabs(x); });
  }
  const fumi_tensor one = makeTensor({1}, {1});
  double x = 1, y = 0;
  EXPECT_EQ(mapNegatedAbs(one, &x, FUMI_DTYPE_UNKNOWN, &y, FUMI_DTYPE_F64, nullptr),
            FUMI_UNSUPPORTED);
}

TEST(Elementwise, MapRefusesUnknownKindsAndDtypes) {
  const fumi_tensor t = makeTensor({4}, {1});
  std::vector<double> a(4, 1.0), b(4);
  fumi_map_spec spec = plugin::mapSpec(static_cast<fumi_map_kind>(9));
  EXPECT_EQ(mapTensor(t, a.data(), FUMI_DTYPE_F64, b.data(), FUMI_DTYPE_F64, spec, nullptr),
            FUMI_UNSUPPORTED);
  spec.kind = FUMI_MAP_COPY;
  EXPECT_EQ(mapTensor(t, a.data(), FUMI_DTYPE_UNKNOWN, b.data(), FUMI_DTYPE_F64, spec, nullptr),
            FUMI_UNSUPPORTED);
  EXPECT_EQ(mapTensor(t, a.data(), FUMI_DTYPE_F64, b.data(), FUMI_DTYPE_F64, spec, nullptr),
            FUMI_OK);
  EXPECT_EQ(b, a);
}

}  // namespace
}  // namespace fumi
