// test_metrics.cpp — the arithmetic of plugins/common/metrics.h against values worked out by
// hand: FuMi ratio, normwise and guarded relative errors, ULPs per dtype, counts, the RNG and
// parameter parsing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "metrics.h"

namespace fm = fumi::metrics;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- dtype table -----------------------------------------------------------------------------

TEST(MetricsDtypeInfo, MatchesTheTableForEveryDtype) {
  // Each row comes from dtypes.def; check the fields that the metrics depend on.
  const fm::DtypeInfo* f32 = fm::dtypeInfo(FUMI_DTYPE_F32);
  ASSERT_NE(f32, nullptr);
  EXPECT_STREQ(f32->name, "f32");
  EXPECT_EQ(f32->bytes, 4);
  EXPECT_EQ(f32->mantissa_bits, 23);
  const fm::DtypeInfo* f16 = fm::dtypeInfo(FUMI_DTYPE_F16);
  ASSERT_NE(f16, nullptr);
  EXPECT_EQ(f16->mantissa_bits, 10);
  EXPECT_EQ(fm::dtypeInfo(FUMI_DTYPE_BF16)->mantissa_bits, 7);
  EXPECT_EQ(fm::dtypeInfo(FUMI_DTYPE_TF32)->bytes, 4);
  EXPECT_EQ(fm::dtypeInfo(FUMI_DTYPE_TF32)->mantissa_bits, 10);
  EXPECT_EQ(fm::dtypeInfo(FUMI_DTYPE_F64)->mantissa_bits, 52);
  // Default tolerance is coarser than the perturbation shift for every dtype.
  for (fumi_dtype d :
       {FUMI_DTYPE_F64, FUMI_DTYPE_F32, FUMI_DTYPE_F16, FUMI_DTYPE_BF16, FUMI_DTYPE_TF32}) {
    ASSERT_NE(fm::dtypeInfo(d), nullptr) << d;
    EXPECT_GT(fm::dtypeInfo(d)->tolerance, fm::dtypeInfo(d)->perturb_shift) << d;
  }
}

TEST(MetricsDtypeInfo, UnknownIsNull) {
  EXPECT_EQ(fm::dtypeInfo(FUMI_DTYPE_UNKNOWN), nullptr);
  EXPECT_EQ(fm::dtypeInfo(static_cast<fumi_dtype>(9)), nullptr);
}

// ---- FuMi ratio --------------------------------------------------------------------------------

TEST(MetricsFumiRatio, KnownPairs) {
  // |1 - 1.1| / |2.1| = 1/21 ; |2 - 2| / 4 = 0 ; |-3 - -3.6| / |-6.6| = 1/11: the max is 1/11.
  const double y[] = {1.0, 2.0, -3.0};
  const double yp[] = {1.1, 2.0, -3.6};
  EXPECT_NEAR(fm::fumiRatio(y, yp, 3, 0.0), 1.0 / 11.0, 1e-15);
  // Symmetric in its arguments.
  EXPECT_NEAR(fm::fumiRatio(yp, y, 3, 0.0), 1.0 / 11.0, 1e-15);
  // Opposite signs give ratios above 1: |1 - -3| / |1 + -3| = 2.
  const double a[] = {1.0};
  const double b[] = {-3.0};
  EXPECT_NEAR(fm::fumiRatio(a, b, 1, 0.0), 2.0, 1e-15);
}

TEST(MetricsFumiRatio, IdenticalIsZero) {
  const double y[] = {1.0, -2.0, 3.5};
  EXPECT_EQ(fm::fumiRatio(y, y, 3, 1e-3), 0.0);
}

TEST(MetricsFumiRatio, GuardExcludesNearZeroSums) {
  // Element 1 has sum 2e-6 and ratio 0.5; the largest sum is 200, so guard 1e-3 (threshold 0.2)
  // drops it and leaves element 0: |100 - 100.2| / 200.2.
  const double y[] = {100.0, 1.5e-6};
  const double yp[] = {100.2, 0.5e-6};
  EXPECT_NEAR(fm::fumiRatio(y, yp, 2, 1e-3), 0.2 / 200.2, 1e-15);
  // Without the guard the near-zero element dominates.
  EXPECT_NEAR(fm::fumiRatio(y, yp, 2, 0.0), 0.5, 1e-12);
}

TEST(MetricsFumiRatio, ZeroSumsNeverQualify) {
  // y + y' = 0 (opposite values) would divide by zero: left out even with guard 0.
  const double y[] = {1.0, 3.0};
  const double yp[] = {-1.0, 3.3};
  EXPECT_NEAR(fm::fumiRatio(y, yp, 2, 0.0), 0.3 / 6.3, 1e-15);
  const double zy[] = {0.0, 0.0};
  EXPECT_EQ(fm::fumiRatio(zy, zy, 2, 0.0), 0.0);
}

TEST(MetricsFumiRatio, NonFiniteSkippedAndCounted) {
  const double y[] = {1.0, kNaN, kInf, 4.0};
  const double yp[] = {1.5, 1.0, kInf, kNaN};
  size_t skipped = 0;
  EXPECT_NEAR(fm::fumiRatio(y, yp, 4, 0.0, &skipped), 0.5 / 2.5, 1e-15);
  EXPECT_EQ(skipped, 3u);
}

TEST(MetricsFumiRatio, NoOverflowNearDblMax) {
  const double big = std::numeric_limits<double>::max() * 0.75;
  const double y[] = {big};
  const double yp[] = {big * 0.5};
  // |big - big/2| / |big + big/2| = 1/3, although big + big/2 overflows.
  EXPECT_NEAR(fm::fumiRatio(y, yp, 1, 0.0), 1.0 / 3.0, 1e-15);
}

// ---- normwise ----------------------------------------------------------------------------------

TEST(MetricsNormwiseRel, KnownVector) {
  // ref = (3, 4): ||ref|| = 5; y - ref = (0.3, 0.4): ||y - ref|| = 0.5; ratio 0.1.
  const double ref[] = {3.0, 4.0};
  const double y[] = {3.3, 4.4};
  EXPECT_NEAR(fm::normwiseRel(y, ref, 2), 0.1, 1e-15);
}

TEST(MetricsNormwiseRel, ErrorMuchLargerThanReference) {
  // The two norms are scaled by different powers of two (2^-8 and 2^-2 here); the result must
  // undo both: ||(300, 400)|| / ||(3, 4)|| = 100.
  const double ref[] = {3.0, 4.0};
  const double y[] = {303.0, 404.0};
  EXPECT_NEAR(fm::normwiseRel(y, ref, 2), 100.0, 1e-12);
}

TEST(MetricsNormwiseRel, ZeroCases) {
  const double zero[] = {0.0, 0.0};
  const double one[] = {0.0, 1.0};
  EXPECT_EQ(fm::normwiseRel(zero, zero, 2), 0.0);
  EXPECT_EQ(fm::normwiseRel(one, zero, 2), kInf);
  EXPECT_EQ(fm::normwiseRel(zero, one, 2), 1.0);
}

TEST(MetricsNormwiseRel, HugeAndTinyValuesDoNotOverflowOrUnderflow) {
  // Squares of 3e200 overflow and squares of 3e-200 underflow in fp64; the scaled sums do not.
  const double ref_big[] = {3e200, 4e200};
  const double y_big[] = {3.3e200, 4.4e200};
  EXPECT_NEAR(fm::normwiseRel(y_big, ref_big, 2), 0.1, 1e-14);
  const double ref_tiny[] = {3e-200, 4e-200};
  const double y_tiny[] = {3.3e-200, 4.4e-200};
  EXPECT_NEAR(fm::normwiseRel(y_tiny, ref_tiny, 2), 0.1, 1e-14);
  // Differences of values near DBL_MAX overflow unless scaled first: ||(-M) - M|| / ||M|| = 2.
  const double m = std::numeric_limits<double>::max();
  const double ref_max[] = {m};
  const double y_max[] = {-m};
  EXPECT_NEAR(fm::normwiseRel(y_max, ref_max, 1), 2.0, 1e-15);
}

TEST(MetricsNormwiseRel, NonFiniteSkipped) {
  const double ref[] = {3.0, kNaN, 4.0};
  const double y[] = {3.3, 1.0, 4.4};
  size_t skipped = 0;
  EXPECT_NEAR(fm::normwiseRel(y, ref, 3, &skipped), 0.1, 1e-15);
  EXPECT_EQ(skipped, 1u);
}

// ---- guarded elementwise relative error ----------------------------------------------------

TEST(MetricsMaxRelGuarded, GuardDropsSmallReferences) {
  // Element 1: |1e-6 - 2e-6| / 1e-6 = 1, but 1e-6 < 1e-3 * 10: excluded. Element 0: 0.01.
  const double ref[] = {10.0, 1e-6, -2.0};
  const double y[] = {10.1, 2e-6, -2.01};
  EXPECT_NEAR(fm::maxRelGuarded(y, ref, 3, 1e-3), 0.01, 1e-13);
  EXPECT_NEAR(fm::maxRelGuarded(y, ref, 3, 0.0), 1.0, 1e-12);
}

TEST(MetricsMaxRelGuarded, ZeroReferenceNeverDivides) {
  const double ref[] = {0.0, 2.0};
  const double y[] = {1.0, 3.0};
  EXPECT_NEAR(fm::maxRelGuarded(y, ref, 2, 0.0), 0.5, 1e-15);
  const double zero[] = {0.0};
  const double one[] = {1.0};
  EXPECT_EQ(fm::maxRelGuarded(one, zero, 1, 0.0), 0.0);
}

// ---- ULPs ---------------------------------------------------------------------------------------

TEST(MetricsMaxUlp, OneUlpAboveOneInF32) {
  const double ref[] = {1.0};
  const double y[] = {1.0 + std::ldexp(1.0, -23)};
  EXPECT_EQ(fm::maxUlp(y, ref, 1, FUMI_DTYPE_F32), 1.0);
  // The same difference is 2^29 fp64 ULPs.
  EXPECT_EQ(fm::maxUlp(y, ref, 1, FUMI_DTYPE_F64), std::ldexp(1.0, 29));
}

TEST(MetricsMaxUlp, Fp16UlpNearOneIsTwoToMinusTen) {
  const double ref[] = {1.0, 1.5};
  const double y[] = {1.0 + std::ldexp(1.0, -10), 1.5};
  EXPECT_EQ(fm::maxUlp(y, ref, 2, FUMI_DTYPE_F16), 1.0);
  // bf16 has 7 mantissa bits: 2^-10 is 1/8 ULP; TF32 has 10 like fp16.
  EXPECT_EQ(fm::maxUlp(y, ref, 2, FUMI_DTYPE_BF16), 0.125);
  EXPECT_EQ(fm::maxUlp(y, ref, 2, FUMI_DTYPE_TF32), 1.0);
}

TEST(MetricsMaxUlp, UlpGrowsWithTheBinade) {
  // In [2, 4) an fp32 ULP is 2^-22: a difference of 2^-22 at 3.0 is one ULP, at 1.0 two.
  const double ref[] = {3.0};
  const double y[] = {3.0 - std::ldexp(1.0, -22)};
  EXPECT_EQ(fm::maxUlp(y, ref, 1, FUMI_DTYPE_F32), 1.0);
  const double ref1[] = {1.0};
  const double y1[] = {1.0 + std::ldexp(1.0, -22)};
  EXPECT_EQ(fm::maxUlp(y1, ref1, 1, FUMI_DTYPE_F32), 2.0);
}

TEST(MetricsMaxUlp, ClampedToSmallestNormal) {
  // Below 2^-126 an fp32 ULP stays 2^-149; below 2^-14 an fp16 ULP stays 2^-24.
  const double ref[] = {0.0};
  const double y32[] = {std::ldexp(1.0, -149)};
  EXPECT_EQ(fm::maxUlp(y32, ref, 1, FUMI_DTYPE_F32), 1.0);
  const double y16[] = {std::ldexp(3.0, -24)};
  EXPECT_EQ(fm::maxUlp(y16, ref, 1, FUMI_DTYPE_F16), 3.0);
  const double ref_sub[] = {std::ldexp(1.0, -20)};  // subnormal in fp16
  const double y_sub[] = {std::ldexp(1.0, -20) + std::ldexp(1.0, -24)};
  EXPECT_EQ(fm::maxUlp(y_sub, ref_sub, 1, FUMI_DTYPE_F16), 1.0);
  // fp64: the ULP of 0 is the smallest subnormal 2^-1074.
  const double y64[] = {std::ldexp(1.0, -1073)};
  EXPECT_EQ(fm::maxUlp(y64, ref, 1, FUMI_DTYPE_F64), 2.0);
}

TEST(MetricsMaxUlp, UnknownDtypeIsNaNAndNonFiniteSkipped) {
  const double ref[] = {1.0, kInf};
  const double y[] = {1.0, 1.0};
  EXPECT_TRUE(std::isnan(fm::maxUlp(y, ref, 2, FUMI_DTYPE_UNKNOWN)));
  size_t skipped = 0;
  EXPECT_EQ(fm::maxUlp(y, ref, 2, FUMI_DTYPE_F32, &skipped), 0.0);
  EXPECT_EQ(skipped, 1u);
}

// ---- counts -------------------------------------------------------------------------------------

TEST(MetricsCounts, NonFiniteAndNaN) {
  const double x[] = {1.0, kNaN, -kInf, kInf, 0.0, -kNaN, std::numeric_limits<double>::max()};
  EXPECT_EQ(fm::countNonFinite(x, 7), 4u);
  EXPECT_EQ(fm::countNaN(x, 7), 2u);
  EXPECT_EQ(fm::countNonFinite(x, 0), 0u);
}

TEST(MetricsCounts, BitwiseMismatchesTreatsNaNByBits) {
  const double nan_a = kNaN;
  double nan_b;  // a NaN with a different payload
  uint64_t bits;
  std::memcpy(&bits, &nan_a, sizeof bits);
  bits ^= 1;
  std::memcpy(&nan_b, &bits, sizeof nan_b);
  ASSERT_TRUE(std::isnan(nan_b));
  const double a[] = {1.0, nan_a, 0.0, nan_a, 2.0};
  const double b[] = {1.0, nan_a, -0.0, nan_b, std::nextafter(2.0, 3.0)};
  // Same-bit NaNs are equal; +0/-0 differ; NaN payloads differ; 1-ulp differences count.
  EXPECT_EQ(fm::bitwiseMismatches(a, b, 5), 3u);
  EXPECT_EQ(fm::bitwiseMismatches(a, a, 5), 0u);
}

TEST(MetricsCounts, MaxAbsDiffIgnoresNonFinite) {
  const double a[] = {1.0, kNaN, 5.0};
  const double b[] = {1.5, 2.0, 3.0};
  EXPECT_EQ(fm::maxAbsDiff(a, b, 3), 2.0);
}

// ---- RNG ----------------------------------------------------------------------------------------

TEST(MetricsRng, SameSeedSameStreamDifferentSeedDifferentStream) {
  fm::Rng a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const uint64_t va = a.next();
    EXPECT_EQ(va, b.next());
    differs |= va != c.next();
  }
  EXPECT_TRUE(differs);
}

TEST(MetricsRng, UniformSymInRangeAndCentred) {
  fm::Rng rng(7);
  double sum = 0.0, lo = 1.0, hi = -1.0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double u = rng.uniformSym();
    ASSERT_GE(u, -1.0);
    ASSERT_LE(u, 1.0);
    sum += u;
    lo = std::min(lo, u);
    hi = std::max(hi, u);
  }
  // Mean of U[-1,1] is 0 with standard error 1/sqrt(3n) ~ 0.0018; both ends are reached.
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_LT(lo, -0.99);
  EXPECT_GT(hi, 0.99);
}

TEST(MetricsRng, CounterBasedDrawsAreUniformAndIndependent) {
  // perturb draws element i on its own (vectorised, 32-bit lanes): the draws must look like
  // independent uniforms on [-1, 1) whatever the seed and wherever the index, also across a
  // multiple of 2^32 (where the index's high half enters).
  for (const uint64_t first : {uint64_t{0}, (uint64_t{1} << 32) - 50000, uint64_t{7} << 40}) {
    for (const uint64_t seed : {uint64_t{0}, uint64_t{0xfeed}, ~uint64_t{0}}) {
      const int n = 100000, bins = 20;
      std::vector<int> hist(bins, 0);
      double sum = 0, lag = 0, cross = 0, prev = 0;
      for (int k = 0; k < n; ++k) {
        const double u = fm::Rng::uniformSymAt(seed, first + k);
        ASSERT_GE(u, -1.0);
        ASSERT_LT(u, 1.0);
        ++hist[static_cast<int>((u + 1) / 2 * bins)];
        sum += u;
        lag += u * prev;
        prev = u;
        cross += u * fm::Rng::uniformSymAt(seed + 1, first + k);  // a neighbouring seed
      }
      // Mean 0 and correlations 0, each with standard error ~1/sqrt(3n) and 1/(3 sqrt(n)).
      EXPECT_NEAR(sum / n, 0.0, 0.01) << seed << " " << first;
      EXPECT_NEAR(lag / n, 0.0, 0.006) << seed << " " << first;
      EXPECT_NEAR(cross / n, 0.0, 0.006) << seed << " " << first;
      double chi2 = 0;  // 19 degrees of freedom: P(chi2 > 45) < 1e-3
      for (int c : hist) chi2 += (c - n / bins) * double(c - n / bins) / (n / bins);
      EXPECT_LT(chi2, 45.0) << seed << " " << first;
    }
  }
  // The draw is a function of (seed, index): the same on its own as in a run of draws, and the
  // streams of indices 2^32 apart differ.
  EXPECT_EQ(fm::Rng::uniformSymAt(3, 12345), fm::uniformSymDraw(3, 12345));
  int same = 0;
  for (uint64_t k = 0; k < 1000; ++k)
    same += fm::Rng::uniformSymAt(3, k) == fm::Rng::uniformSymAt(3, k + (uint64_t{1} << 32));
  EXPECT_LT(same, 3);
}

TEST(MetricsFumiRatio, BothRatiosFromOnePassAgreeWithTheSingleForms) {
  fm::Rng rng(5);
  std::vector<double> y(1001), yp(1001);
  for (size_t i = 0; i < y.size(); ++i) {
    const bool tiny = i % 17 == 0;  // near-zero sums that move by more: only the guard drops them
    y[i] = rng.uniformSym() * (tiny ? 1e-6 : 1.0);
    yp[i] = y[i] + (tiny ? 1e-9 : 1e-7 * y[i]) * rng.uniformSym();
  }
  y[3] = std::numeric_limits<double>::quiet_NaN();
  double guarded = -1, unguarded = -1;
  size_t skipped = 0;
  fm::fumiRatios(y.data(), yp.data(), y.size(), 1e-3, &guarded, &unguarded, &skipped);
  EXPECT_EQ(guarded, fm::fumiRatio(y.data(), yp.data(), y.size(), 1e-3));
  EXPECT_EQ(unguarded, fm::fumiRatio(y.data(), yp.data(), y.size(), 0.0));
  EXPECT_LT(guarded, unguarded);  // the near-zero sums move most
  EXPECT_EQ(skipped, 1u);
}

TEST(MetricsRng, MixSeedSeparatesSalts) {
  std::set<uint64_t> seeds;
  for (uint64_t salt = 0; salt < 1000; ++salt) seeds.insert(fm::mixSeed(1, salt));
  EXPECT_EQ(seeds.size(), 1000u);
  EXPECT_EQ(fm::mixSeed(5, 6), fm::mixSeed(5, 6));
  EXPECT_NE(fm::hashString("sgemm_"), fm::hashString("dgemm_"));
}

// ---- parameter parsing --------------------------------------------------------------------------

TEST(MetricsParseNumbers, RejectsGarbage) {
  double d = 0.0;
  EXPECT_TRUE(fm::parseDouble("1e-3", &d));
  EXPECT_EQ(d, 1e-3);
  EXPECT_TRUE(fm::parseDouble("-2.5", &d));
  EXPECT_EQ(d, -2.5);
  for (const char* bad : {"", "1e-3x", "abc", " 1", "1 ", "nan", "inf", "1e999", "0.5.5"})
    EXPECT_FALSE(fm::parseDouble(bad, &d)) << "'" << bad << "'";
  EXPECT_FALSE(fm::parseDouble(nullptr, &d));

  int64_t i = 0;
  EXPECT_TRUE(fm::parseInt("12", &i));
  EXPECT_EQ(i, 12);
  EXPECT_TRUE(fm::parseInt("-3", &i));
  EXPECT_EQ(i, -3);
  for (const char* bad : {"", "3.0", "3x", "0x10", " 3", "99999999999999999999"})
    EXPECT_FALSE(fm::parseInt(bad, &i)) << "'" << bad << "'";
}

TEST(MetricsParseList, TrimsAndRejectsEmptyItems) {
  std::vector<std::string> items;
  ASSERT_TRUE(fm::parseList(" A, B ,C", &items));
  EXPECT_EQ(items, (std::vector<std::string>{"A", "B", "C"}));
  EXPECT_FALSE(fm::parseList("A,,B", &items));
  EXPECT_FALSE(fm::parseList("", &items));
  EXPECT_FALSE(fm::parseList("A,", &items));
}

// A fumi_params over `items`, with the given tolerance and seed.
struct ParamsFixture {
  std::vector<fumi_param> items;
  fumi_params params{};
  explicit ParamsFixture(std::initializer_list<fumi_param> kv, double tolerance = kNaN,
                         uint64_t seed = 9)
      : items(kv) {
    params.struct_size = sizeof(fumi_params);
    params.count = static_cast<int32_t>(items.size());
    params.items = items.data();
    params.tolerance = tolerance;
    params.seed = seed;
  }
};

std::string errorOf(const fumi_params* p, const std::vector<std::string>& known) {
  try {
    fm::Params parsed(p, "perturb", known);
  } catch (const fm::ParamError& e) {
    return e.what();
  }
  return "";
}

TEST(MetricsParams, UnknownKeyNamesKeyPluginAndKnownKeys) {
  ParamsFixture f({{"trials", "3"}, {"trails", "4"}});
  EXPECT_EQ(errorOf(&f.params, {"trials", "shift"}),
            "unknown parameter 'trails' for plugin 'perturb' (known: trials, shift)");
  EXPECT_EQ(errorOf(&f.params, {}),
            "unknown parameter 'trials' for plugin 'perturb' (known: none)");
}

TEST(MetricsParams, DuplicateKeyRejected) {
  ParamsFixture f({{"trials", "3"}, {"trials", "4"}});
  EXPECT_NE(errorOf(&f.params, {"trials"}).find("given twice"), std::string::npos);
}

TEST(MetricsParams, TypedGettersValidate) {
  ParamsFixture f({{"trials", "5"},
                   {"shift", "1e-6"},
                   {"bad", "1e-6z"},
                   {"metric", "normwise"},
                   {"inputs", "A,B"}},
                  /*tolerance=*/0.25, /*seed=*/77);
  const fm::Params p(&f.params, "perturb", {"trials", "shift", "bad", "metric", "inputs", "n"});
  EXPECT_EQ(p.getInt("trials", 3, 1, 10), 5);
  EXPECT_EQ(p.getInt("n", 3, 1, 10), 3);  // absent: fallback
  EXPECT_EQ(p.getDouble("shift", 0.0, fm::Bounds{0.0, 1.0, true}), 1e-6);
  EXPECT_THROW(p.getDouble("bad", 0.0, fm::Bounds{0.0, 1.0}), fm::ParamError);
  EXPECT_THROW(p.getInt("trials", 3, 1, 4), fm::ParamError);  // out of range
  EXPECT_THROW(p.getInt("shift", 3, 1, 4), fm::ParamError);   // not an integer
  EXPECT_THROW(p.getDouble("shift", 0.0, fm::Bounds{1.0, 2.0}), fm::ParamError);
  EXPECT_EQ(p.getChoice("metric", {"ratio", "normwise"}), 1u);
  EXPECT_THROW(p.getChoice("metric", {"ratio", "ulp"}), fm::ParamError);
  EXPECT_EQ(p.getList("inputs"), (std::vector<std::string>{"A", "B"}));
  EXPECT_EQ(p.tolerance(), 0.25);
  EXPECT_EQ(p.seed(), 77u);
  try {
    p.getDouble("bad", 0.0, fm::Bounds{0.0, 1.0});
    FAIL() << "no exception";
  } catch (const fm::ParamError& e) {
    EXPECT_EQ(std::string(e.what()),
              "parameter 'bad' of plugin 'perturb': expected a finite number, got '1e-6z'");
  }
}

TEST(MetricsParams, OpenBoundsExcludeTheirEnds) {
  ParamsFixture f({{"shift", "0"}, {"guard", "1"}});
  const fm::Params p(&f.params, "perturb", {"shift", "guard"});
  EXPECT_THROW(p.getDouble("shift", 1.0, fm::Bounds{0.0, 1.0, true}), fm::ParamError);
  EXPECT_EQ(p.getDouble("shift", 1.0, fm::Bounds{0.0, 1.0}), 0.0);
  EXPECT_THROW(p.getDouble("guard", 0.0, fm::Bounds{0.0, 1.0, false, true}), fm::ParamError);
}

TEST(MetricsParams, ToleranceFromStructOrItemAndValidated) {
  ParamsFixture none({});
  EXPECT_TRUE(std::isnan(fm::Params(&none.params, "x", {}).tolerance()));
  ParamsFixture item({{"tolerance", "0.5"}, {"plugin", "x"}});  // reserved keys are accepted
  EXPECT_EQ(fm::Params(&item.params, "x", {}).tolerance(), 0.5);
  ParamsFixture negative({}, -1.0);
  EXPECT_NE(errorOf(&negative.params, {}).find("tolerance"), std::string::npos);
  ParamsFixture bad_item({{"tolerance", "lots"}});
  EXPECT_NE(errorOf(&bad_item.params, {}).find("'lots'"), std::string::npos);
}

TEST(MetricsParams, MalformedStructsRejected) {
  ParamsFixture f({{"trials", "3"}});
  f.params.struct_size = 4;
  EXPECT_NE(errorOf(&f.params, {"trials"}), "");
  ParamsFixture g({{"trials", nullptr}});
  EXPECT_NE(errorOf(&g.params, {"trials"}), "");
  EXPECT_EQ(errorOf(nullptr, {}), "");  // no parameters at all is fine
}

}  // namespace

namespace {

// `tolerances: { error: precision }` (docs/policy.md, "Error tolerances from the precision"):
// tau = 2 u_out + 5 sqrt(k) u_acc, u_acc f32's 2^-24 unless the compute precision is wider.
TEST(PrecisionTolerance, RoundingOfTheResultPlusAccumulationGrowingWithSqrtK) {
  using fumi::metrics::precisionTolerance;
  const double u32 = std::ldexp(1.0, -24), u64 = std::ldexp(1.0, -53);
  // f32 elementwise (k = 1): 7 unit roundoffs.
  EXPECT_DOUBLE_EQ(precisionTolerance(FUMI_DTYPE_F32, FUMI_DTYPE_F32, 1), 7 * u32);
  // f32 GEMM, k = 4096: 2u + 5 * 64 * u = 322 u = 1.92e-5, five times tighter than FuMi's 1e-4.
  EXPECT_DOUBLE_EQ(precisionTolerance(FUMI_DTYPE_F32, FUMI_DTYPE_F32, 4096), 322 * u32);
  EXPECT_NEAR(precisionTolerance(FUMI_DTYPE_F32, FUMI_DTYPE_F32, 4096), 1.92e-5, 1e-7);
  // bf16 output, f32 accumulation, k = 4096: the output's rounding dominates.
  EXPECT_DOUBLE_EQ(precisionTolerance(FUMI_DTYPE_BF16, FUMI_DTYPE_BF16, 4096),
                   2 * std::ldexp(1.0, -8) + 320 * u32);
  // f64: the accumulation is f64's own.
  EXPECT_DOUBLE_EQ(precisionTolerance(FUMI_DTYPE_F64, FUMI_DTYPE_F64, 100), 52 * u64);
  // TF32 math on f32 storage: the inputs' rounding to 10 bits is the precision asked for.
  EXPECT_DOUBLE_EQ(precisionTolerance(FUMI_DTYPE_TF32, FUMI_DTYPE_TF32, 1024),
                   2 * std::ldexp(1.0, -11) + 160 * u32);
  // Unknown reduction length or dtype: no derived tolerance.
  EXPECT_TRUE(std::isnan(precisionTolerance(FUMI_DTYPE_F32, FUMI_DTYPE_F32, 0)));
  EXPECT_TRUE(std::isnan(precisionTolerance(FUMI_DTYPE_UNKNOWN, FUMI_DTYPE_F32, 8)));
}

// The fp16 GEMM accumulating in fp16 (CUBLAS_COMPUTE_16F, k = 4096) measured 0.11 normwise on
// the simulated device: against f32 accumulation as the norm it stays an error, with a margin
// of 100; the f16 accumulation's own sqrt(k) u_f16 (0.16) would have hidden it.
TEST(PrecisionTolerance, Fp16AccumulationStaysAnError) {
  using fumi::metrics::precisionTolerance;
  const double tau = precisionTolerance(FUMI_DTYPE_F16, FUMI_DTYPE_F16, 4096);
  EXPECT_NEAR(tau, 2 * std::ldexp(1.0, -11) + 320 * std::ldexp(1.0, -24), 1e-15);
  EXPECT_LT(100 * tau, 0.11);
  EXPECT_GT(5 * 64 * std::ldexp(1.0, -11), 0.11);
  // The same GEMM accumulating in f32 gets the same tolerance: its error (about u_f16) passes.
  EXPECT_DOUBLE_EQ(precisionTolerance(FUMI_DTYPE_F16, FUMI_DTYPE_F32, 4096), tau);
  EXPECT_GT(tau, std::ldexp(1.0, -11));
}

// Precedence: the entry's tolerance, the policy's per-kind number, then the model where the
// reduction length is known, then the check's fallback (FuMi's table).
TEST(PrecisionTolerance, ResolveOrder) {
  fumi::metrics::Tolerance t;
  EXPECT_DOUBLE_EQ(t.resolve(FUMI_DTYPE_F32, FUMI_DTYPE_F32, 4096, 1e-4), 1e-4);  // model table
  t.model = FUMI_TOLERANCE_PRECISION;
  EXPECT_DOUBLE_EQ(t.resolve(FUMI_DTYPE_F32, FUMI_DTYPE_F32, 4096, 1e-4),
                   fumi::metrics::precisionTolerance(FUMI_DTYPE_F32, FUMI_DTYPE_F32, 4096));
  EXPECT_DOUBLE_EQ(t.resolve(FUMI_DTYPE_F32, FUMI_DTYPE_F32, 0, 1e-4), 1e-4);  // k unknown
  // max: the table where it is larger (k = 4096: 5 * 64 * 2^-24 = 1.9e-5 < 1e-4), the
  // accumulation bound where a long f32 sum needs more (k = 2^22: 0.00061 > 1e-4).
  t.model = FUMI_TOLERANCE_MAX;
  EXPECT_DOUBLE_EQ(t.resolve(FUMI_DTYPE_F32, FUMI_DTYPE_F32, 4096, 1e-4), 1e-4);
  EXPECT_DOUBLE_EQ(t.resolve(FUMI_DTYPE_F32, FUMI_DTYPE_F32, int64_t{1} << 22, 1e-4),
                   fumi::metrics::precisionTolerance(FUMI_DTYPE_F32, FUMI_DTYPE_F32,
                                                     int64_t{1} << 22));
  EXPECT_GT(t.resolve(FUMI_DTYPE_F32, FUMI_DTYPE_F32, int64_t{1} << 22, 1e-4), 5e-4);
  EXPECT_DOUBLE_EQ(t.resolve(FUMI_DTYPE_F32, FUMI_DTYPE_F32, 0, 1e-4), 1e-4);  // k unknown
  t.kind[FUMI_DTYPE_F32] = 3e-5;
  EXPECT_DOUBLE_EQ(t.resolve(FUMI_DTYPE_F32, FUMI_DTYPE_F32, 4096, 1e-4), 3e-5);
  t.configured = 7e-3;
  EXPECT_DOUBLE_EQ(t.resolve(FUMI_DTYPE_F32, FUMI_DTYPE_F32, 4096, 1e-4), 7e-3);
}

}  // namespace

namespace {

// Values the output's dtype flushed: the reference nonzero below the smallest normal and the
// output zero or subnormal there. Values still normal, exact zeros and a spec without a bound
// count nothing.
TEST(Underflow, CountsValuesFlushedBelowTheSmallestNormal) {
  const double tiny = fumi::metrics::underflowBelow(FUMI_DTYPE_F16);
  EXPECT_EQ(tiny, std::ldexp(1.0, -14));
  EXPECT_EQ(fumi::metrics::underflowBelow(FUMI_DTYPE_F32), 0.0);
  const double ref[6] = {1e-6, 2e-6, 0.0, 1.0, 3e-5, 1e-7};
  const double out[6] = {0.0, 1.9e-6, 0.0, 1.0, 3e-5, 0.0};  // 3e-5 < 2^-14 = 6.1e-5 too
  const fumi_comparison c =
      fumi::metrics::compareDense(out, ref, 6, fumi::metrics::compareSpec(0, 0, FUMI_DTYPE_UNKNOWN, tiny));
  EXPECT_EQ(c.underflow, 4u);
  EXPECT_EQ(fumi::metrics::compareDense(out, ref, 6).underflow, 0u);
}

}  // namespace
