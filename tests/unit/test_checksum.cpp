// test_checksum.cpp — the checksum check's estimator (plugins/common/checksum.h) against the
// true error, with fumi's host projection (reference.h, matmulProjection) as the exact side:
// many random GEMMs and GEMVs (sizes, transposes, alpha/beta, batches, f32/f64) computed in
// their own precision, with and without planted errors of several ranks. The truth is
// ||C - C_exact||_F / ||C_exact||_F with C_exact in binary128 (fp64 results carry errors at
// fp64 rounding, below what an fp64 reference resolves), checked against fumi's
// matmulReference where that is accurate enough. Prints the accuracy figures quoted in
// docs/checksum.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "checksum.h"
#include "contract.h"
#include "elementwise.h"
#include "fumi/dtype.hpp"
#include "metrics.h"
#include "framework_projection.h"
#include "reference.h"
#include "scratch_arena.h"
#include "tensor_copy.h"

namespace fumi {
namespace {

using Wide = __float128;

enum class Plant { kNone, kElement, kColumn, kBf16, kScaled, kGross };
const char* plantName(Plant p) {
  switch (p) {
    case Plant::kNone: return "none (rounding only)";
    case Plant::kElement: return "one wrong element";
    case Plant::kColumn: return "one wrong column";
    case Plant::kBf16: return "bf16-rounded product";
    case Plant::kScaled: return "scaled result (1+d)C";
    case Plant::kGross: return "gross (SDC-sized) element";
  }
  return "?";
}

// One random problem: D = alpha op(A) op(B) + beta C0 ([batch x] m x n, or a length-m vector
// when `gemv`), operands column-major with padded leading dimensions as BLAS keeps them.
struct Problem {
  fumi_dtype dtype = FUMI_DTYPE_F32;
  int64_t batch = 1, m = 1, n = 1, k = 1;
  bool ta = false, tb = false, gemv = false, positive = false;
  double alpha = 1, beta = 0;
  Plant plant = Plant::kNone;
  double magnitude = 0;  // relative size of a planted error
};

template <class T>
class Instance {
 public:
  Instance(const Problem& p, metrics::Rng& rng) : p_(p) {
    const int64_t lda = (p.ta ? p.k : p.m) + 1, ldb = (p.tb ? p.n : p.k) + 2, ldc = p.m + 3;
    auto fill = [&](std::vector<T>& v, int64_t size) {
      v.resize(static_cast<size_t>(size));
      for (T& x : v) x = static_cast<T>(p.positive ? 0.5 + 0.5 * rng.uniform01() : rng.uniformSym());
    };
    const int64_t span_a = lda * (p.ta ? p.m : p.k), span_b = ldb * (p.tb ? p.k : p.n),
                  span_c = ldc * p.n;
    fill(a_, span_a * p.batch);
    fill(b_, span_b * p.batch);
    fill(c0_, span_c * p.batch);
    c_.assign(c0_.size(), T(0));
    const fumi_dtype dt = p.dtype;
    // op(A)(i, p) at i * ra + p * ca; batches at span_* apart.
    const int64_t ra = p.ta ? lda : 1, ca = p.ta ? 1 : lda, rb = p.tb ? ldb : 1, cb = p.tb ? 1 : ldb;
    const bool batched = p.batch > 1;
    auto add = [&](const char* name, fumi_role role, std::vector<T>& data, int64_t rows,
                   int64_t cols, int64_t rs, int64_t cs, int64_t span, bool vector) {
      fumi_tensor t{};
      t.struct_size = sizeof t;
      t.name = name;
      t.dtype = dt;
      t.memory = FUMI_MEMORY_HOST;
      t.role = role;
      if (vector) {
        t.ndim = 1;
        t.shape[0] = rows;
        t.strides[0] = rs;
      } else if (batched) {
        t.ndim = 3;
        t.shape[0] = p.batch, t.shape[1] = rows, t.shape[2] = cols;
        t.strides[0] = span, t.strides[1] = rs, t.strides[2] = cs;
      } else {
        t.ndim = 2;
        t.shape[0] = rows, t.shape[1] = cols;
        t.strides[0] = rs, t.strides[1] = cs;
      }
      t.data = data.data();
      tensors_.push_back(t);
      return static_cast<int>(tensors_.size()) - 1;
    };
    spec_.a = add("A", FUMI_ROLE_INPUT, a_, p.m, p.k, ra, ca, span_a, false);
    spec_.b = add("B", FUMI_ROLE_INPUT, b_, p.k, p.n, rb, cb, span_b, p.gemv);
    if (p.beta != 0) spec_.c = add("C", FUMI_ROLE_INPUT, c0_, p.m, p.n, 1, ldc, span_c, p.gemv);
    spec_.d = add("C", FUMI_ROLE_OUTPUT, c_, p.m, p.n, 1, ldc, span_c, p.gemv);
    spec_.alpha = p.alpha;
    spec_.beta = p.beta;

    // The result in the call's own precision, and the exact one in binary128.
    exact_.resize(static_cast<size_t>(p.batch * p.m * p.n));
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t i = 0; i < p.m; ++i)
        for (int64_t j = 0; j < p.n; ++j) {
          T sum = 0;
          Wide wide = 0;
          for (int64_t q = 0; q < p.k; ++q) {
            const T x = a_[static_cast<size_t>(b * span_a + i * ra + q * ca)];
            const T y = b_[static_cast<size_t>(b * span_b + q * rb + j * cb)];
            sum += x * y;
            wide += static_cast<Wide>(x) * static_cast<Wide>(y);
          }
          const size_t at = static_cast<size_t>(b * span_c + i + j * ldc);
          const T alpha = static_cast<T>(p.alpha), beta = static_cast<T>(p.beta);
          c_[at] = p.beta != 0 ? alpha * sum + beta * c0_[at] : alpha * sum;
          Wide e = static_cast<Wide>(alpha) * wide;
          if (p.beta != 0) e += static_cast<Wide>(beta) * static_cast<Wide>(c0_[at]);
          exact_[static_cast<size_t>((b * p.m + i) * p.n + j)] = e;
        }
    plant(rng, ldc, span_c);
  }

  const std::vector<fumi_tensor>& tensors() const { return tensors_; }
  const MatmulSpec& spec() const { return spec_; }

  // ||C - C_exact||_F / ||C_exact||_F.
  double truth() const {
    std::vector<double> c = dense();
    Wide err = 0, ref = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      const Wide d = static_cast<Wide>(c[i]) - exact_[i];
      err += d * d;
      ref += exact_[i] * exact_[i];
    }
    return std::sqrt(static_cast<double>(err)) / std::sqrt(static_cast<double>(ref));
  }

  // The output as gather would read it: dense row-major fp64.
  std::vector<double> dense() const {
    const fumi_tensor& t = tensors_[static_cast<size_t>(spec_.d)];
    std::vector<double> out(static_cast<size_t>(tensorNumel(t)));
    forEachElement(t, [&](int64_t k, int64_t off) { out[static_cast<size_t>(k)] = loadAsDouble(t.data, off, t.dtype); });
    return out;
  }

 private:
  void plant(metrics::Rng& rng, int64_t ldc, int64_t span_c) {
    double norm = 0;
    for (const Wide& e : exact_) norm += static_cast<double>(e * e);
    norm = std::sqrt(norm);
    const int64_t b = static_cast<int64_t>(rng.next() % static_cast<uint64_t>(p_.batch));
    const int64_t i = static_cast<int64_t>(rng.next() % static_cast<uint64_t>(p_.m));
    const int64_t j = static_cast<int64_t>(rng.next() % static_cast<uint64_t>(p_.n));
    auto at = [&](int64_t bb, int64_t ii, int64_t jj) -> T& {
      return c_[static_cast<size_t>(bb * span_c + ii + jj * ldc)];
    };
    switch (p_.plant) {
      case Plant::kNone: break;
      case Plant::kElement: at(b, i, j) += static_cast<T>(p_.magnitude * norm); break;
      case Plant::kGross: at(b, i, j) = static_cast<T>(p_.magnitude * norm); break;
      case Plant::kColumn:
        for (int64_t r = 0; r < p_.m; ++r)
          at(b, r, j) += static_cast<T>(p_.magnitude * norm * rng.uniformSym() / std::sqrt(double(p_.m)));
        break;
      case Plant::kBf16:
        for (T& x : c_) x = static_cast<T>(bf16ToFloat(floatToBf16(static_cast<float>(x))));
        break;
      case Plant::kScaled:
        for (T& x : c_) x = static_cast<T>(x * (1 + p_.magnitude));
        break;
    }
  }

  Problem p_;
  std::vector<T> a_, b_, c0_, c_;
  std::vector<Wide> exact_;
  std::vector<fumi_tensor> tensors_;
  MatmulSpec spec_;
};

// The plugin's estimate for one instance: checksum.h driven by matmulProjection.
template <class T>
fumi_status estimate(const Instance<T>& inst, int32_t vectors, uint64_t seed,
                     checksum::Estimate* out) {
  const std::vector<double> y = inst.dense();
  const fumi_tensor& t = inst.tensors()[static_cast<size_t>(inst.spec().d)];
  std::vector<std::unique_ptr<std::vector<double>>> scratch;
  return checksum::estimateOutput(
      y.data(), y.size(), t.shape, t.ndim, vectors, t.dtype == FUMI_DTYPE_F64, seed,
      checksum::eachSide(
          [&](int32_t dim, int32_t count, const double* v, double* exact, double* exact_lo) {
            return matmulProjection(inst.tensors(), inst.spec(), inst.spec().d,
                                    Projection{dim, count, v, exact, exact_lo});
          }),
      [&](size_t n) {
        scratch.push_back(std::make_unique<std::vector<double>>(n));
        return scratch.back()->data();
      },
      out);
}

// Figures over many cases. Above tolerance: truth > tol; such an error is "low" when the
// estimate is more than 2x below it (the chi-square tail: <= 0.11% per call for the worst,
// rank-1, errors at 16 samples) and "missed" when the estimate is not above the tolerance
// although the truth is more than twice it (an error within 2x of the tolerance may fall on
// either side of it). A false alarm is an estimate above tolerance for a truth at most half of
// it.
struct Tally {
  int cases = 0, within = 0, above = 0, low = 0, missed = 0, false_alarms = 0;
  double worst_low = 1e300, worst_high = 0, worst_low_above = 1e300;  // estimate / truth
  std::vector<double> log_ratio;
  void add(double est, double truth, double tolerance) {
    ++cases;
    const double r = est / truth;
    within += r >= 0.5 && r <= 2 ? 1 : 0;
    worst_low = std::min(worst_low, r);
    worst_high = std::max(worst_high, r);
    log_ratio.push_back(std::fabs(std::log2(r)));
    if (truth > tolerance) {
      ++above;
      low += r < 0.5 ? 1 : 0;
      missed += truth > 2 * tolerance && !(est > tolerance) ? 1 : 0;
      worst_low_above = std::min(worst_low_above, r);
    }
    false_alarms += truth <= tolerance / 2 && est > tolerance ? 1 : 0;
  }
  double quantile(double q) {
    std::sort(log_ratio.begin(), log_ratio.end());
    return log_ratio.empty() ? 0 : std::exp2(log_ratio[static_cast<size_t>(q * (log_ratio.size() - 1))]);
  }
};

Problem randomProblem(metrics::Rng& rng, int index) {
  Problem p;
  auto pick = [&](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(rng.next() % static_cast<uint64_t>(hi - lo + 1));
  };
  p.dtype = index % 2 ? FUMI_DTYPE_F64 : FUMI_DTYPE_F32;
  p.m = pick(1, 40);
  p.n = pick(1, 40);
  p.k = pick(1, 64);
  p.ta = rng.next() & 1;
  p.tb = rng.next() & 1;
  const int shape = static_cast<int>(pick(0, 9));
  if (shape == 0) p.gemv = true, p.n = 1, p.tb = false;
  if (shape == 1) p.batch = pick(2, 3);
  p.positive = pick(0, 3) == 0;
  static const double kAlphas[] = {1.0, -1.0, 0.75, 2.5};
  static const double kBetas[] = {0.0, 0.0, 1.0, -0.5};
  p.alpha = kAlphas[pick(0, 3)];
  p.beta = kBetas[pick(0, 3)];
  p.plant = static_cast<Plant>(index / 2 % 6);
  // Planted sizes from just above the precision's rounding to far beyond it.
  const double u = p.dtype == FUMI_DTYPE_F64 ? 1e-16 : 1e-7;
  p.magnitude = p.plant == Plant::kGross ? std::pow(10.0, static_cast<double>(pick(0, 6)))
                                         : u * std::pow(10.0, rng.uniform01() * std::log10(0.05 / u) + 1);
  return p;
}

TEST(Checksum, EstimateWithinTwiceTheTrueErrorOnRandomGemms) {
  metrics::Rng rng(20261201);
  const int kCases = 1800;
  Tally all;
  std::map<std::string, Tally> by_plant, by_dtype;
  int reference_checked = 0, exact = 0;
  for (int c = 0; c < kCases; ++c) {
    const Problem p = randomProblem(rng, c);
    checksum::Estimate est;
    double truth = 0;
    const double tolerance = dtypeInfo(p.dtype)->tolerance;
    fumi_status st;
    if (p.dtype == FUMI_DTYPE_F32) {
      const Instance<float> inst(p, rng);
      truth = inst.truth();
      st = estimate(inst, 8, rng.next(), &est);
      // fumi's own reference agrees with the binary128 truth for fp32 results.
      std::vector<double> ref(static_cast<size_t>(p.batch * p.m * p.n));
      ASSERT_EQ(matmulReference(inst.tensors(), inst.spec(), inst.spec().d, ref.data()), FUMI_OK);
      const std::vector<double> got = inst.dense();
      const double via_reference = metrics::normwiseRel(got.data(), ref.data(), got.size());
      ASSERT_NEAR(via_reference, truth, 1e-6 * truth + 1e-15) << c;
      ++reference_checked;
    } else {
      const Instance<double> inst(p, rng);
      truth = inst.truth();
      st = estimate(inst, 8, rng.next(), &est);
    }
    ASSERT_EQ(st, FUMI_OK) << c;
    ASSERT_GT(truth, 0) << c;
    if (est.exact) {
      // A side no longer than its vectors was projected on its unit vectors: the figure is exact.
      EXPECT_LE(est.samples, 16) << c;  // a GEMV's 2 x 8 on its one side
      EXPECT_NEAR(est.rel, truth, 1e-6 * truth) << c;
      ++exact;
    } else {
      EXPECT_EQ(est.samples, 16) << c;
    }
    all.add(est.rel, truth, tolerance);
    by_plant[plantName(p.plant)].add(est.rel, truth, tolerance);
    by_dtype[dtypeName(p.dtype)].add(est.rel, truth, tolerance);
  }
  auto print = [](const std::string& what, Tally t) {
    std::printf("  %-26s %4d cases, within 2x %6.2f%%, est/true %.3f..%.3f, |log2| p50 %.2fx "
                "p99 %.2fx; above tol %4d: >2x low %d, missed %d; false alarms %d\n",
                what.c_str(), t.cases, 100.0 * t.within / t.cases, t.worst_low, t.worst_high,
                t.quantile(0.5), t.quantile(0.99), t.above, t.low, t.missed, t.false_alarms);
  };
  std::printf("checksum estimator, 8 + 8 Gaussian vectors, %d random GEMM/GEMV cases:\n", kCases);
  print("all", all);
  std::printf("  (%d of them exact: a side no longer than its vectors, on its unit vectors)\n", exact);
  for (auto& [name, t] : by_dtype) print(name, t);
  for (auto& [name, t] : by_plant) print(name, t);
  EXPECT_GE(all.within, static_cast<int>(0.99 * all.cases));
  EXPECT_EQ(all.missed, 0);                    // every error above 2x tolerance is flagged
  EXPECT_LE(all.low * 1000, all.above * 3);    // > 2x low: the chi-square tail, <= 0.3%
  EXPECT_GE(all.worst_low_above, 0.25);        // and never 4x low
  EXPECT_EQ(all.false_alarms, 0);
  EXPECT_GT(all.above, kCases / 4);
  EXPECT_GT(reference_checked, 0);
}

// The worst case of the estimator is a rank-1 error: est^2 / ||E||^2 ~ chi2_N / N. Over many
// seeds, the share outside [1/2, 2] must match the chi-square tails docs/checksum.md quotes.
// The vectors: both halves of each polar-method pair are used, each element reproducible on its
// own, and the entries are standard normal (mean 0, variance 1, fourth moment 3, neighbours
// uncorrelated, as many below -1.96 and above 1.96 as a normal puts there).
TEST(Checksum, GaussianVectorsAreStandardNormalAndAddressable) {
  const int32_t count = 3;
  const int64_t len = 33335;  // an odd total: the last element comes from a half-used pair
  std::vector<double> v(static_cast<size_t>(count * len));
  checksum::gaussianVectors(77, count, len, v.data());
  double sum = 0, sq = 0, fourth = 0, lag = 0, tails = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i % 997 == 0 || i + 1 == v.size()) {
      ASSERT_EQ(v[i], checksum::gaussianAt(77, i)) << i;
    }
    sum += v[i];
    sq += v[i] * v[i];
    fourth += v[i] * v[i] * v[i] * v[i];
    tails += std::fabs(v[i]) > 1.959964 ? 1 : 0;
    if (i > 0) lag += v[i] * v[i - 1];
  }
  const double n = static_cast<double>(v.size());
  EXPECT_NEAR(sum / n, 0.0, 0.02);      // standard error 1/sqrt(n) ~ 0.0032
  EXPECT_NEAR(sq / n, 1.0, 0.03);       // standard error sqrt(2/n) ~ 0.0045
  EXPECT_NEAR(fourth / n, 3.0, 0.15);   // standard error sqrt(96/n) ~ 0.031
  EXPECT_NEAR(tails / n, 0.05, 0.005);  // standard error sqrt(0.05 * 0.95 / n) ~ 0.0007
  EXPECT_NEAR(lag / n, 0.0, 0.02);      // the two halves of a pair are independent
}

// The vectors' logarithm is fumi's own (vectorisable, fp32) one: within 2 ulp of the library's
// over every binade s can fall in (u^2 + v^2 in (0, 1) on a grid of 2^-23: down to 2^-46), and
// at the ends of each.
TEST(Checksum, VectorLogarithmMatchesTheLibrarys) {
  double worst = 0.0;
  auto check = [&](float s) {
    const double want = std::log(static_cast<double>(s));
    const double got = checksum::detail::logPositive(s);
    worst = std::max(worst, std::fabs(got - want) / std::fabs(want));
  };
  for (int e = -46; e < 0; ++e)
    for (float m : {1.0f, 1.0f + 0x1.0p-23f, 1.1f, 1.25f, 1.41421354f, 1.41421356f, 1.41421366f,
                    1.5f, 1.75f, 1.99999988f}) {
      const float s = std::ldexp(m, e);
      if (s < 1.0f) check(s);
    }
  metrics::Rng rng(3);
  for (int i = 0; i < 200000; ++i) {
    const float s = std::ldexp(static_cast<float>(0.5 + 0.5 * rng.uniform01()),
                               -static_cast<int>(rng.next() % 46));
    if (s < 1.0f) check(s);
  }
  EXPECT_LE(worst, 2.4e-7);  // 2 ulp of an fp32 result
}

TEST(Checksum, RankOneErrorFollowsChiSquare) {
  metrics::Rng rng(7);
  Problem p;
  p.m = 24, p.n = 20, p.k = 16;
  p.dtype = FUMI_DTYPE_F64;
  p.plant = Plant::kElement;
  p.magnitude = 1e-3;
  const Instance<double> inst(p, rng);
  const double truth = inst.truth();
  const int kSeeds = 4000;
  int low16 = 0, high16 = 0, low4 = 0;
  for (int s = 0; s < kSeeds; ++s) {
    checksum::Estimate e16, e4;
    ASSERT_EQ(estimate(inst, 8, 1000 + s, &e16), FUMI_OK);
    ASSERT_EQ(estimate(inst, 2, 1000 + s, &e4), FUMI_OK);
    low16 += e16.rel < truth / 2 ? 1 : 0;
    high16 += e16.rel > truth * 2 ? 1 : 0;
    low4 += e4.rel < truth / 2 ? 1 : 0;
  }
  std::printf("rank-1 error, %d seeds: 16 samples below 1/2 %.3f%% (chi2_16: 0.11%%), above 2 "
              "%.3f%%; 4 samples below 1/2 %.2f%% (chi2_4: 9.0%%)\n",
              kSeeds, 100.0 * low16 / kSeeds, 100.0 * high16 / kSeeds, 100.0 * low4 / kSeeds);
  EXPECT_LE(low16, kSeeds * 0.005);
  EXPECT_LE(high16, kSeeds * 0.001);
  EXPECT_NEAR(low4, kSeeds * 0.090, kSeeds * 0.02);  // P(chi2_4 < 1) = 1 - 1.5 e^-0.5
}

// A side no longer than its vectors is projected on its unit vectors: the figure is exact for
// every seed (a single dot product's estimate with 2 + 2 Gaussian vectors was chi-square spread:
// actor_critic's value head read 1.8x its error, over f32's tolerance).
TEST(Checksum, NarrowOutputsAreExact) {
  metrics::Rng rng(29);
  for (const auto& [m, n, gemv] : {std::tuple{1, 1, false}, std::tuple{37, 2, false},
                                   std::tuple{2, 45, false}, std::tuple{4, 1, true}}) {
    Problem p;
    p.m = m, p.n = n, p.k = 128, p.gemv = gemv;
    p.plant = Plant::kElement;
    p.magnitude = 1e-4;
    const Instance<float> inst(p, rng);
    const double truth = inst.truth();
    for (uint64_t seed = 0; seed < 50; ++seed) {
      checksum::Estimate e;
      ASSERT_EQ(estimate(inst, 2, seed, &e), FUMI_OK);
      EXPECT_TRUE(e.exact) << m << "x" << n;
      EXPECT_NEAR(e.rel, truth, 1e-9 * truth) << m << "x" << n << " seed " << seed;
      EXPECT_EQ(e.samples, gemv ? m : std::min(m, n)) << m << "x" << n;
    }
  }
  // Wider than the vectors on both sides: an estimate, as before.
  Problem p;
  p.m = 5, p.n = 6, p.k = 16;
  const Instance<float> inst(p, rng);
  checksum::Estimate e;
  ASSERT_EQ(estimate(inst, 2, 1, &e), FUMI_OK);
  EXPECT_FALSE(e.exact);
  EXPECT_EQ(e.samples, 4);
}

// Where the error is: one wrong element is found at its row and column.
TEST(Checksum, LocatesAWrongElement) {
  metrics::Rng rng(11);
  Problem p;
  p.m = 30, p.n = 25, p.k = 12;
  p.plant = Plant::kGross;
  p.magnitude = 1e-2;
  const Instance<float> inst(p, rng);
  const std::vector<double> c = inst.dense();
  checksum::Estimate e;
  ASSERT_EQ(estimate(inst, 8, 5, &e), FUMI_OK);
  std::vector<double> ref(c.size());
  ASSERT_EQ(matmulReference(inst.tensors(), inst.spec(), inst.spec().d, ref.data()), FUMI_OK);
  size_t worst = 0;
  for (size_t i = 0; i < c.size(); ++i)
    if (std::fabs(c[i] - ref[i]) > std::fabs(c[worst] - ref[worst])) worst = i;
  EXPECT_EQ(e.worst_row, static_cast<int64_t>(worst) / p.n);
  EXPECT_EQ(e.worst_col, static_cast<int64_t>(worst) % p.n);
  EXPECT_GT(e.col_share, 0.9);
}

// The projection is the reference contracted: checked against matmulReference for both
// dimensions, with and without compensated sums, a bias and batches.
TEST(Checksum, ProjectionMatchesTheContractedReference) {
  metrics::Rng rng(3);
  Problem p;
  p.dtype = FUMI_DTYPE_F64;
  p.batch = 2, p.m = 5, p.n = 7, p.k = 9;
  p.ta = true;
  p.alpha = 0.5, p.beta = -2;
  const Instance<double> inst(p, rng);
  std::vector<double> ref(static_cast<size_t>(p.batch * p.m * p.n));
  ASSERT_EQ(matmulReference(inst.tensors(), inst.spec(), inst.spec().d, ref.data()), FUMI_OK);
  const fumi_tensor& t = inst.tensors()[static_cast<size_t>(inst.spec().d)];
  for (int32_t dim : {1, 2}) {
    const checksum::Split sp = checksum::splitAround(t.shape, t.ndim, dim);
    const int32_t count = 3;
    std::vector<double> v(static_cast<size_t>(sp.len * count));
    checksum::gaussianVectors(9, count, sp.len, v.data());
    const size_t size = static_cast<size_t>(sp.outer * count * sp.inner);
    std::vector<double> want(size), plain(size), hi(size), lo(size);
    checksum::contract(ref.data(), sp, count, v.data(), want.data(), nullptr);
    ASSERT_EQ(matmulProjection(inst.tensors(), inst.spec(), inst.spec().d,
                               Projection{dim, count, v.data(), plain.data(), nullptr}),
              FUMI_OK);
    ASSERT_EQ(matmulProjection(inst.tensors(), inst.spec(), inst.spec().d,
                               Projection{dim, count, v.data(), hi.data(), lo.data()}),
              FUMI_OK);
    for (size_t i = 0; i < size; ++i) {
      EXPECT_NEAR(plain[i], want[i], 1e-12 * (1 + std::fabs(want[i]))) << dim << " " << i;
      EXPECT_NEAR(hi[i], want[i], 1e-12 * (1 + std::fabs(want[i]))) << dim << " " << i;
      EXPECT_LE(std::fabs(lo[i]), std::ldexp(std::fabs(hi[i]), -52)) << dim << " " << i;
    }
  }
  // The batch dimension is not one the projection contracts; activations are refused.
  std::vector<double> v(2), out(100);
  EXPECT_EQ(matmulProjection(inst.tensors(), inst.spec(), inst.spec().d,
                             Projection{0, 1, v.data(), out.data(), nullptr}),
            FUMI_UNSUPPORTED);
  MatmulSpec relu = inst.spec();
  relu.act = MatmulSpec::Act::kRelu;
  EXPECT_EQ(matmulProjection(inst.tensors(), relu, relu.d,
                             Projection{2, 1, v.data(), out.data(), nullptr}),
            FUMI_UNSUPPORTED);
}

// Variant 0..15 of the in-place projection tests: transposes (bits 0, 1), a batch of 3 (bit 2),
// beta (bit 3), 13 x 11 x 17; variant `gemv` a GEMV instead.
Problem variantProblem(int variant, int gemv) {
  Problem p;
  p.ta = variant & 1;
  p.tb = variant & 2;
  p.batch = variant & 4 ? 3 : 1;
  p.beta = variant & 8 ? -1.5 : 0;
  p.gemv = variant == gemv;
  p.m = 13, p.n = p.gemv ? 1 : 11, p.k = 17;
  p.alpha = 0.75;
  return p;
}

// The plain-sum projection reads the operands in place (contract.h): it agrees with the
// compensated one (which copies them) for every transpose combination, batches, beta, vector
// outputs and vector counts that split into kernel blocks of 8, 4, 2 and 1.
TEST(Checksum, InPlaceProjectionAgreesWithTheCompensatedOne) {
  metrics::Rng rng(21);
  for (int variant = 0; variant < 16; ++variant) {
    const Problem p = variantProblem(variant, 5);
    const Instance<float> inst(p, rng);
    const fumi_tensor& t = inst.tensors()[static_cast<size_t>(inst.spec().d)];
    for (int32_t dim = 0; dim < t.ndim; ++dim)
      for (int32_t count : {1, 3, 15}) {
        const checksum::Split sp = checksum::splitAround(t.shape, t.ndim, dim);
        std::vector<double> v(static_cast<size_t>(sp.len * count));
        checksum::gaussianVectors(static_cast<uint64_t>(variant), count, sp.len, v.data());
        const size_t size = static_cast<size_t>(sp.outer * count * sp.inner);
        std::vector<double> plain(size, -1), hi(size), lo(size);
        const fumi_status a = matmulProjection(inst.tensors(), inst.spec(), inst.spec().d,
                                               Projection{dim, count, v.data(), plain.data(), nullptr});
        const fumi_status b = matmulProjection(inst.tensors(), inst.spec(), inst.spec().d,
                                               Projection{dim, count, v.data(), hi.data(), lo.data()});
        ASSERT_EQ(a, b) << variant << " dim " << dim;
        if (a != FUMI_OK) continue;  // the batch dimension
        for (size_t i = 0; i < size; ++i)
          EXPECT_NEAR(plain[i], hi[i], 1e-12 * (4 + std::fabs(hi[i])))
              << "variant " << variant << " dim " << dim << " count " << count << " at " << i;
      }
  }
}

// A device op's projection (matmulProjection with `device`: what the torch adapter's contract
// does for a tensor on a GPU) equals the host's in-place one for every transpose, batches,
// beta and a vector output, both sides at once and one by one; the device is asked for
// contractions of views inside its operands only, and nothing falls back to reading device
// memory on the host: a device that declines, or compensated sums, leave it FUMI_UNSUPPORTED.
TEST(Checksum, DeviceProjectionAgreesWithTheHostOne) {
  metrics::Rng rng(23);
  for (int variant = 0; variant < 16; ++variant) {
    const Problem p = variantProblem(variant, 1);  // the GEMV with a transposed A
    const Instance<float> inst(p, rng);
    std::vector<fumi_tensor> on_device = inst.tensors();
    for (fumi_tensor& t : on_device) t.memory = FUMI_MEMORY_DEVICE;
    int calls = 0;
    // The device, played by the host kernels on the view, which must lie inside an operand.
    const DeviceContract device = [&](const fumi_tensor& view, int32_t dim, int32_t count,
                                      const double* vectors, double* out) {
      ++calls;
      EXPECT_EQ(view.memory, FUMI_MEMORY_DEVICE);
      const auto* at = static_cast<const unsigned char*>(view.data);
      const bool inside = std::any_of(on_device.begin(), on_device.end(), [&](const fumi_tensor& t) {
        const auto* base = static_cast<const unsigned char*>(t.data);
        return t.data && at >= base && at < base + tensorSpan(t) * dtypeBytes(t.dtype);
      });
      EXPECT_TRUE(inside) << variant;
      return contractTensor(view, view.data, view.dtype, dim, count, vectors, 1.0, false, out)
                 ? FUMI_OK
                 : FUMI_ERROR;
    };
    const fumi_tensor& t = inst.tensors()[static_cast<size_t>(inst.spec().d)];
    const int32_t rows = t.ndim == 3 ? 1 : 0, cols = t.ndim - 1;
    const int32_t count = 3;
    std::vector<std::vector<double>> v, host, dev;
    std::vector<Projection> host_sides, dev_sides;
    for (int32_t dim : {rows, cols}) {
      if (dim == rows && dim == cols && !host_sides.empty()) break;  // a vector: one side
      const checksum::Split sp = checksum::splitAround(t.shape, t.ndim, dim);
      v.emplace_back(static_cast<size_t>(sp.len * count));
      checksum::gaussianVectors(static_cast<uint64_t>(variant + dim), count, sp.len,
                                v.back().data());
      const size_t size = static_cast<size_t>(sp.outer * count * sp.inner);
      host.emplace_back(size, -1.0);
      dev.emplace_back(size, -2.0);
    }
    for (size_t i = 0; i < v.size(); ++i) {
      const int32_t dim = i == 0 ? rows : cols;
      host_sides.push_back(Projection{dim, count, v[i].data(), host[i].data(), nullptr});
      dev_sides.push_back(Projection{dim, count, v[i].data(), dev[i].data(), nullptr});
    }
    ASSERT_EQ(matmulProjection(inst.tensors(), inst.spec(), inst.spec().d, host_sides), FUMI_OK);
    for (bool together : {true, false}) {
      calls = 0;
      for (std::vector<double>& d : dev) std::fill(d.begin(), d.end(), -2.0);
      if (together) {
        ASSERT_EQ(matmulProjection(on_device, inst.spec(), inst.spec().d, dev_sides, &device),
                  FUMI_OK) << variant;
      } else {
        for (const Projection& side : dev_sides)
          ASSERT_EQ(matmulProjection(on_device, inst.spec(), inst.spec().d,
                                     std::vector<Projection>{side}, &device),
                    FUMI_OK) << variant;
      }
      EXPECT_GE(calls, 3 * static_cast<int>(p.batch)) << variant;
      for (size_t i = 0; i < dev.size(); ++i)
        for (size_t j = 0; j < dev[i].size(); ++j)
          EXPECT_NEAR(dev[i][j], host[i][j], 1e-12 * (4 + std::fabs(host[i][j])))
              << "variant " << variant << " side " << i << " at " << j;
    }
    const DeviceContract declines = [](const fumi_tensor&, int32_t, int32_t, const double*,
                                       double*) { return FUMI_UNSUPPORTED; };
    EXPECT_EQ(matmulProjection(on_device, inst.spec(), inst.spec().d, dev_sides, &declines),
              FUMI_UNSUPPORTED);
    std::vector<double> lo(dev[0].size());
    const Projection compensated{rows, count, v[0].data(), dev[0].data(), lo.data()};
    EXPECT_EQ(matmulProjection(on_device, inst.spec(), inst.spec().d,
                               std::vector<Projection>{compensated}, &device),
              FUMI_UNSUPPORTED);
    // The output itself, contracted on the device: the host's contractSides, side by side.
    std::vector<fumi_side> sides;
    std::vector<std::vector<double>> want;
    for (size_t i = 0; i < v.size(); ++i) {
      want.emplace_back(dev[i].size());
      sides.push_back(fumi_side{sizeof(fumi_side), dev_sides[i].dim, count, v[i].data(),
                                want[i].data(), nullptr});
    }
    ASSERT_TRUE(contractSides(t, t.data, t.dtype, static_cast<int32_t>(sides.size()),
                              sides.data(), nullptr));
    for (size_t i = 0; i < v.size(); ++i) sides[i].out = dev[i].data();
    const fumi_tensor& d = on_device[static_cast<size_t>(inst.spec().d)];
    ASSERT_TRUE(contractSidesOnDevice(d, d.data, d.dtype, static_cast<int32_t>(sides.size()),
                                      sides.data(), device));
    for (size_t i = 0; i < v.size(); ++i)
      for (size_t j = 0; j < want[i].size(); ++j)
        EXPECT_NEAR(dev[i][j], want[i][j], 1e-12 * (4 + std::fabs(want[i][j]))) << variant;
    EXPECT_FALSE(contractSidesOnDevice(d, d.data, d.dtype, static_cast<int32_t>(sides.size()),
                                       sides.data(), declines));
  }
}

// Dense random fp64 tensors (uniform in [-1, 1)) for the convolution tests, alive until clear().
class RandomTensors {
 public:
  explicit RandomTensors(uint64_t seed) : rng_(seed) {}
  fumi_tensor operator()(const char* name, const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    store_.emplace_back(static_cast<size_t>(n));
    for (double& e : store_.back()) e = rng_.uniformSym();
    return hostTensor(name, shape, store_.back().data());
  }
  // t's values rounded to `dtype` in a buffer of its own, laid out dense row-major or
  // channels-last (dimension 1 innermost).
  fumi_tensor stored(const fumi_tensor& t, fumi_dtype dtype, bool channels_last) {
    fumi_tensor s = t;
    if (channels_last) channelsLastStrides(t.ndim, t.shape, s.strides);
    else denseStrides(t.ndim, t.shape, s.strides);
    bytes_.emplace_back(static_cast<size_t>(tensorNumel(t)) * dtypeBytes(dtype));
    s.dtype = dtype;
    s.data = bytes_.back().data();
    EXPECT_TRUE(copyElements(t.ndim, t.shape, t.data, t.dtype, ElementLayout{t.strides, 0},
                             s.data, dtype, ElementLayout{s.strides, 0}));
    return s;
  }
  void clear() {
    store_.clear();
    bytes_.clear();
  }

 private:
  metrics::Rng rng_;
  std::deque<std::vector<double>> store_;  // a deque: earlier tensors' data never moves
  std::deque<std::vector<unsigned char>> bytes_;
};

// A convolution's projection along its channels is its reference contracted, in every
// direction, with groups, stride, padding and beta.
TEST(Checksum, ConvolutionProjectionMatchesTheContractedReference) {
  RandomTensors dense(5);
  using Dir = ConvSpec::Direction;
  for (Dir dir : {Dir::kForward, Dir::kBackwardData, Dir::kBackwardFilter})
    for (int groups : {1, 2})
    for (bool inner : {false, true}) {
      if (dir == Dir::kBackwardFilter && groups != 1) continue;
      dense.clear();
      // x 2 x 4 x 6 x 5, w 6 x 4/g x 3 x 2, stride 2 x 1, padding 1 x 0: y 2 x 6 x 3 x 4.
      // `inner`: cross-correlation, and the last spatial dimension strided, padded and dilated
      // too (stride 2, padding 1, dilation 2: y 2 x 6 x 3 x 3).
      ConvSpec s;
      s.direction = dir;
      s.groups = groups;
      s.pad[0] = 1;
      s.stride[0] = 2;
      s.alpha = 0.75;
      s.beta = -0.5;
      if (inner) {
        s.flip = false;
        s.stride[1] = 2;
        s.pad[1] = 1;
        s.dilation[1] = 2;
      }
      const std::vector<std::vector<int64_t>> shapes = {
          {2, 4, 6, 5}, {6, 4 / groups, 3, 2}, {2, 6, 3, inner ? 3 : 4}};
      std::vector<fumi_tensor> ts = {dense("x", shapes[0]), dense("w", shapes[1]),
                                     dense("y", shapes[2])};
      s.x = 0, s.w = 1, s.y = 2;
      const int out = dir == Dir::kForward ? 2 : dir == Dir::kBackwardData ? 0 : 1;
      ts.push_back(dense("prior", shapes[static_cast<size_t>(out)]));  // read through beta
      s.prior = 3;
      ts[static_cast<size_t>(out)].role = FUMI_ROLE_OUTPUT;
      const fumi_tensor& t = ts[static_cast<size_t>(out)];
      std::vector<double> ref(static_cast<size_t>(tensorNumel(ts[static_cast<size_t>(out)])));
      ASSERT_EQ(convReference(ts, s, out, ref.data()), FUMI_OK);
      const int32_t dim = dir == Dir::kBackwardFilter ? 0 : 1, count = 3;
      const checksum::Split sp = checksum::splitAround(t.shape, t.ndim, dim);
      std::vector<double> v(static_cast<size_t>(sp.len * count));
      checksum::gaussianVectors(11, count, sp.len, v.data());
      const size_t size = static_cast<size_t>(sp.outer * count * sp.inner);
      std::vector<double> want(size), got(size), lo(size);
      checksum::contract(ref.data(), sp, count, v.data(), want.data(), nullptr);
      ASSERT_EQ(convProjection(ts, s, out, Projection{dim, count, v.data(), got.data(), nullptr}),
                FUMI_OK);
      for (size_t i = 0; i < size; ++i)
        EXPECT_NEAR(got[i], want[i], 1e-12 * (1 + std::fabs(want[i]))) << i;
      // Other dimensions and compensated low parts are not offered.
      EXPECT_EQ(convProjection(ts, s, out, Projection{2, count, v.data(), got.data(), nullptr}),
                FUMI_UNSUPPORTED);
      EXPECT_EQ(convProjection(ts, s, out, Projection{dim, count, v.data(), got.data(), lo.data()}),
                FUMI_UNSUPPORTED);
    }
}

// Both kernels of the projection (channels-last from 16 contracted channels, or from runs of 8
// channels x filter width for backward filter; channels-first below) agree with the contracted
// reference: 1-D, 2-D and 3-D, groups, stride 2, dilation 2, padding as wide as the filter
// reaches (outputs no tap covers), asymmetric extents, channel counts that no vector width
// divides on either side of the thresholds, 1, 3 and 6 vectors, and the direct terms (prior, z,
// bias) in some cases only.
TEST(Checksum, ConvolutionProjectionKernelsMatchTheContractedReference) {
  RandomTensors dense(8);
  using Dir = ConvSpec::Direction;
  // (x channels C, y channels K): the projection contracts C (forward, backward filter) or K.
  // {2, 6}: backward filter's runs of C x filter width below kMergedRunMin (channels-first).
  const int64_t channel_pairs[5][2] = {{4, 6}, {20, 18}, {6, 24}, {24, 4}, {2, 6}};
  int cases = 0;
  for (Dir dir : {Dir::kForward, Dir::kBackwardData, Dir::kBackwardFilter})
    for (int spatial = 1; spatial <= 3; ++spatial)
      for (int variant = 0; variant < 3; ++variant)
        for (const auto& ck : channel_pairs)
          for (int groups : {1, 2})
            for (int32_t count : {1, 3, 6}) {  // 6: a block of four vectors and a rest
              if (dir == Dir::kBackwardFilter && groups != 1) continue;
              dense.clear();
              ConvSpec s;
              s.direction = dir;
              s.spatial = spatial;
              s.groups = groups;
              s.flip = variant != 1;
              s.alpha = variant == 2 ? -1.25 : 0.75;
              const bool terms = (variant + count) % 2 == 0;  // prior (and z, bias: forward)
              const int64_t in_ext[3] = {7, 6, 5}, f_ext[3] = {3, 2, 3};
              std::vector<int64_t> xs = {2, ck[0]}, ws = {ck[1], ck[0] / groups}, ys = {2, ck[1]};
              for (int e = 0; e < spatial; ++e) {
                // variant 0: stride 2 then 1, padding 1 then 0; 1: dilation 2 then 1, stride 1
                // then 2; 2: stride 2, dilation 2, padding as wide as the dilated filter (the
                // first output has no tap inside x)
                const int odd = e % 2;
                s.stride[e] = variant == 0 ? 2 - odd : variant == 1 ? 1 + odd : 2;
                s.dilation[e] = variant == 0 ? 1 : variant == 1 ? 2 - odd : 2;
                const int reach = s.dilation[e] * static_cast<int>(f_ext[e] - 1) + 1;
                s.pad[e] = variant == 0 ? 1 - odd : variant == 1 ? odd : reach;
                xs.push_back(in_ext[e]);
                ws.push_back(f_ext[e]);
                ys.push_back((in_ext[e] + 2 * s.pad[e] - reach) / s.stride[e] + 1);
              }
              std::vector<fumi_tensor> ts = {dense("x", xs), dense("w", ws), dense("y", ys)};
              s.x = 0, s.w = 1, s.y = 2;
              // How the operands are stored, one way per case in turn: fp64 row-major (read in
              // place), fp32 row-major (read in place as fp32), fp32 channels-last (in place
              // where the kernel reads channels-last, else copied), fp16 x with an fp64
              // channels-last w (copied, as fp64), bf16 x and y with an fp32 w (x copied to
              // fp32, w read in place).
              const int storage = cases % 5;
              for (int i = 0; i < 3 && storage > 0; ++i) {
                fumi_dtype dtype = FUMI_DTYPE_F32;
                if (storage == 3) dtype = i == 0 ? FUMI_DTYPE_F16 : FUMI_DTYPE_F64;
                if (storage == 4 && i != 1) dtype = FUMI_DTYPE_BF16;
                ts[static_cast<size_t>(i)] = dense.stored(
                    ts[static_cast<size_t>(i)], dtype, storage == 2 || (storage == 3 && i == 1));
              }
              const int out = dir == Dir::kForward ? 2 : dir == Dir::kBackwardData ? 0 : 1;
              const std::vector<int64_t>& out_shape = out == 0 ? xs : out == 1 ? ws : ys;
              if (terms) {
                ts.push_back(dense("prior", out_shape));
                s.prior = 3;
                s.beta = -0.5;
                if (dir == Dir::kForward) {
                  ts.push_back(dense("z", ys));
                  s.z = 4;
                  s.alpha2 = 1.5;
                  std::vector<int64_t> bias_shape(static_cast<size_t>(spatial + 2), 1);
                  bias_shape[1] = ck[1];
                  ts.push_back(dense("bias", bias_shape));
                  s.bias = 5;
                }
              }
              ts[static_cast<size_t>(out)].role = FUMI_ROLE_OUTPUT;
              const fumi_tensor& t = ts[static_cast<size_t>(out)];
              std::vector<double> ref(static_cast<size_t>(tensorNumel(ts[static_cast<size_t>(out)])));
              ASSERT_EQ(convReference(ts, s, out, ref.data()), FUMI_OK);
              const int32_t dim = dir == Dir::kBackwardFilter ? 0 : 1;
              const checksum::Split sp = checksum::splitAround(t.shape, t.ndim, dim);
              std::vector<double> v(static_cast<size_t>(sp.len * count));
              checksum::gaussianVectors(static_cast<uint64_t>(cases), count, sp.len, v.data());
              const size_t size = static_cast<size_t>(sp.outer * count * sp.inner);
              std::vector<double> want(size), got(size, -7);
              checksum::contract(ref.data(), sp, count, v.data(), want.data(), nullptr);
              ASSERT_EQ(
                  convProjection(ts, s, out, Projection{dim, count, v.data(), got.data(), nullptr}),
                  FUMI_OK);
              for (size_t i = 0; i < size; ++i)
                ASSERT_NEAR(got[i], want[i], 1e-12 * (1 + std::fabs(want[i])))
                    << "direction " << static_cast<int>(dir) << " spatial " << spatial
                    << " variant " << variant << " C " << ck[0] << " K " << ck[1] << " groups "
                    << groups << " count " << count << " storage " << storage << " at " << i;
              ++cases;
            }
  EXPECT_EQ(cases, 3 * 3 * 5 * (2 + 2 + 1) * 3);
}

// Inside a reference or a projection, fumi's own buffers count against the check's scratch
// budget (ScratchLimit). A convolution projection that prefers channels-last reads a
// channels-first activation through a copy; where the copy does not fit in what is left, it
// reads the activation in place, channels first, with the same result; where not even its
// reduced operand fits, NoScratch.
TEST(Checksum, ConvolutionProjectionWithinTheScratchBudget) {
  RandomTensors dense(11);
  ConvSpec s;
  s.direction = ConvSpec::Direction::kForward;
  s.spatial = 2;
  // 16 input channels: channels-last preferred; x fp32 row-major: a copy for channels-last.
  std::vector<fumi_tensor> ts = {dense.stored(dense("x", {2, 16, 20, 20}), FUMI_DTYPE_F32, false),
                                 dense.stored(dense("w", {8, 16, 3, 3}), FUMI_DTYPE_F32, false),
                                 dense("y", {2, 8, 18, 18})};
  s.x = 0, s.w = 1, s.y = 2;
  ts[2].role = FUMI_ROLE_OUTPUT;
  const int32_t count = 2;
  const checksum::Split sp = checksum::splitAround(ts[2].shape, ts[2].ndim, 1);
  std::vector<double> v(static_cast<size_t>(sp.len * count));
  checksum::gaussianVectors(5, count, sp.len, v.data());
  const size_t size = static_cast<size_t>(sp.outer * count * sp.inner);
  const size_t copy = 2 * 16 * 20 * 20 * sizeof(float);
  std::vector<double> free_run(size), tight(size);
  size_t charged_free = 0, charged_tight = 0;
  {
    ScratchLimit limit(size_t{1} << 30);
    ASSERT_EQ(convProjection(ts, s, 2, Projection{1, count, v.data(), free_run.data(), nullptr}),
              FUMI_OK);
    charged_free = limit.charged();
  }
  EXPECT_GE(charged_free, copy);  // the channels-last copy of x
  {
    ScratchLimit limit(copy - 1);
    ASSERT_EQ(convProjection(ts, s, 2, Projection{1, count, v.data(), tight.data(), nullptr}),
              FUMI_OK);
    charged_tight = limit.charged();
  }
  EXPECT_LT(charged_tight, copy);
  for (size_t i = 0; i < size; ++i)
    ASSERT_NEAR(tight[i], free_run[i], 1e-12 * (1 + std::fabs(free_run[i]))) << i;
  ScratchLimit none(16);
  EXPECT_THROW(convProjection(ts, s, 2, Projection{1, count, v.data(), tight.data(), nullptr}),
               NoScratch);
}

// torchvision's region ops hold each box's image in rois' column 0: never perturbed; no other
// tensor, shape or op is taken for one.
TEST(Checksum, FrameworkIndexColumnIsTheRoisImageColumn) {
  auto t = [&](const char* name, std::vector<int64_t> shape) {
    return hostTensor(name, shape, nullptr);
  };
  const std::vector<fumi_tensor> roi = {t("input", {2, 3, 8, 8}), t("rois", {6, 5}),
                                        t("out", {6, 3, 2, 2})};
  for (const char* op : {"torchvision::roi_align", "torchvision::_roi_align_backward",
                         "torchvision::ps_roi_align", "torchvision::roi_pool"}) {
    EXPECT_TRUE(frameworkIndexColumn(op, roi, 1)) << op;
    EXPECT_FALSE(frameworkIndexColumn(op, roi, 0)) << op;
    EXPECT_FALSE(frameworkIndexColumn(op, roi, 2)) << op;
    EXPECT_FALSE(frameworkIndexColumn(op, roi, 3)) << op;
  }
  EXPECT_FALSE(frameworkIndexColumn("aten::mm", roi, 1));
  EXPECT_FALSE(frameworkIndexColumn("torchvision::nms", roi, 1));
  EXPECT_FALSE(frameworkIndexColumn(nullptr, roi, 1));
  const std::vector<fumi_tensor> boxes_only = {t("input", {2, 3, 8, 8}), t("rois", {6, 4})};
  EXPECT_FALSE(frameworkIndexColumn("torchvision::roi_align", boxes_only, 1));
}

// The terms map of the normalisations' backward: the input centred on the mean its x^ used (batch
// norm's saved one in training, the running one in evaluation), that mean kept, every other
// tensor |x|; not where the input cannot be centred (device memory, broadcast strides, a mean
// of the wrong size), nor for any other op.
TEST(Checksum, FrameworkTermsMapCentresTheNormalisationsInput) {
  auto t = [&](const char* name, std::vector<int64_t> shape) {
    return hostTensor(name, shape, nullptr);
  };
  const std::vector<fumi_tensor> bn = {t("grad_out", {4, 3, 5, 5}), t("input", {4, 3, 5, 5}),
                                       t("weight", {3}), t("running_mean", {3}),
                                       t("running_var", {3}), t("save_mean", {3}),
                                       t("save_invstd", {3})};
  const char* op = "aten::native_batch_norm_backward";
  const TermsMap input = frameworkTermsMap(op, bn, {{"train", "True"}}, 1);
  EXPECT_EQ(input.role, TermsMap::kCentred);
  EXPECT_EQ(input.mean, 5);
  EXPECT_EQ(input.centring.channels, 3);
  EXPECT_EQ(input.centring.inner, 25);
  EXPECT_EQ(input.centring.outer, 0);
  EXPECT_EQ(frameworkTermsMap(op, bn, {{"train", "True"}}, 5).role, TermsMap::kKeep);
  for (int32_t other : {0, 2, 3, 4, 6})
    EXPECT_EQ(frameworkTermsMap(op, bn, {{"train", "True"}}, other).role, TermsMap::kAbs);
  EXPECT_EQ(frameworkTermsMap(op, bn, {{"train", "False"}}, 1).mean, 3);
  EXPECT_EQ(frameworkTermsMap(op, bn, {{"train", "False"}}, 3).role, TermsMap::kKeep);
  std::vector<fumi_tensor> moved = bn;
  moved[1].memory = FUMI_MEMORY_DEVICE;
  EXPECT_EQ(frameworkTermsMap(op, moved, {{"train", "True"}}, 1).role, TermsMap::kAbs);
  EXPECT_EQ(frameworkTermsMap(op, moved, {{"train", "True"}}, 5).role, TermsMap::kAbs);
  std::vector<fumi_tensor> expanded = bn;
  expanded[1].strides[0] = 0;
  EXPECT_EQ(frameworkTermsMap(op, expanded, {{"train", "True"}}, 1).role, TermsMap::kAbs);
  std::vector<fumi_tensor> short_mean = bn;
  short_mean[5] = t("save_mean", {2});
  EXPECT_EQ(frameworkTermsMap(op, short_mean, {{"train", "True"}}, 1).role, TermsMap::kAbs);
  // Layer norm: one mean per row; group norm: per sample and group.
  const TermsMap ln = frameworkTermsMap("aten::native_layer_norm_backward",
                                        {t("grad_out", {6, 10, 32}), t("input", {6, 10, 32}),
                                         t("mean", {6, 10, 1}), t("rstd", {6, 10, 1})},
                                        {}, 1);
  EXPECT_EQ(ln.role, TermsMap::kCentred);
  EXPECT_EQ(ln.mean, 2);
  EXPECT_EQ(ln.centring.inner, 32);
  EXPECT_EQ(ln.centring.outer, 1);
  const TermsMap gn = frameworkTermsMap(
      "aten::native_group_norm_backward",
      {t("grad_out", {2, 8, 3, 3}), t("input", {2, 8, 3, 3}), t("mean", {2, 2}),
       t("rstd", {2, 2})},
      {{"N", "2"}, {"C", "8"}, {"HxW", "9"}, {"group", "2"}}, 1);
  EXPECT_EQ(gn.role, TermsMap::kCentred);
  EXPECT_EQ(gn.mean, 2);
  EXPECT_EQ(gn.centring.inner, 9);
  EXPECT_EQ(gn.centring.channels, 8);
  EXPECT_EQ(gn.centring.per_group, 4);
  EXPECT_EQ(gn.centring.outer, 2);
  EXPECT_EQ(frameworkTermsMap("aten::native_batch_norm", bn, {{"train", "True"}}, 1).role,
            TermsMap::kAbs);
  // Softmax's backward, y * (g - sum g * y): y negated, g as |x|.
  const std::vector<fumi_tensor> softmax = {t("grad_output", {4, 10}), t("output", {4, 10})};
  const char* back = "aten::_softmax_backward_data";
  EXPECT_EQ(frameworkTermsMap(back, softmax, {{"dim", "-1"}}, 1).role, TermsMap::kNegAbs);
  EXPECT_EQ(frameworkTermsMap(back, softmax, {{"dim", "-1"}}, 0).role, TermsMap::kAbs);
  EXPECT_EQ(frameworkTermsMap("aten::_log_softmax_backward_data", softmax, {}, 1).role,
            TermsMap::kAbs);
  EXPECT_EQ(frameworkTermsMap("aten::mm", {t("self", {4, 4}), t("mat2", {4, 4})}, {}, 0).role,
            TermsMap::kAbs);
}

// The terms each output of a framework op sums, from its schema names (the error tolerance
// models `precision` and `max`): GEMMs their k, convolutions C_in/groups * filter elements, their
// backward the larger of grad_input's and grad_weight's, ops that round once 1, reductions the
// input elements per output, anything else unknown.
TEST(Checksum, FrameworkReductionLengths) {
  auto t = [&](const char* name, std::vector<int64_t> shape) {
    return hostTensor(name, shape, nullptr);
  };
  const std::vector<std::pair<const char*, std::string>> no_args;
  EXPECT_EQ(frameworkReductionLength("aten::mm", {t("self", {8, 300}), t("mat2", {300, 5})},
                                     no_args), 300);
  EXPECT_EQ(frameworkReductionLength("aten::addmm", {t("self", {5}), t("mat1", {8, 70}),
                                                     t("mat2", {70, 5})}, no_args), 70);
  EXPECT_EQ(frameworkReductionLength("aten::baddbmm", {t("self", {2, 8, 5}),
                                                       t("batch1", {2, 8, 33}),
                                                       t("batch2", {2, 33, 5})}, no_args), 33);
  EXPECT_EQ(frameworkReductionLength("aten::linear", {t("input", {4, 9, 64}),
                                                      t("weight", {16, 64})}, no_args), 64);
  // conv2d 3 -> 16 channels, 3x3 filter, batch 4, output 10x10.
  const std::vector<fumi_tensor> conv = {t("input", {4, 3, 12, 12}), t("weight", {16, 3, 3, 3})};
  EXPECT_EQ(frameworkReductionLength("aten::convolution", conv, {{"transposed", "False"}}), 27);
  EXPECT_EQ(frameworkReductionLength("aten::convolution", conv, {{"transposed", "True"}}), 0);
  const std::vector<fumi_tensor> back = {t("grad_output", {4, 16, 10, 10}),
                                         t("input", {4, 3, 12, 12}), t("weight", {16, 3, 3, 3})};
  EXPECT_EQ(frameworkReductionLength("aten::convolution_backward", back, {{"groups", "1"}}),
            4 * 10 * 10);  // grad_weight's N * output spatial beats grad_input's 16 * 9
  const std::vector<fumi_tensor> wide = {t("grad_output", {1, 64, 2, 2}),
                                         t("input", {1, 64, 4, 4}), t("weight", {64, 32, 3, 3})};
  EXPECT_EQ(frameworkReductionLength("aten::convolution_backward", wide, {{"groups", "2"}}),
            32 * 9);
  EXPECT_EQ(frameworkReductionLength("aten::mul.Tensor", {t("self", {5}), t("other", {5})},
                                     no_args), 1);
  EXPECT_EQ(frameworkReductionLength("aten::add_.Tensor", {t("self", {5}), t("other", {5})},
                                     {{"alpha", "1"}}), 1);
  EXPECT_EQ(frameworkReductionLength("aten::add_.Tensor", {t("self", {5}), t("other", {5})},
                                     {{"alpha", "-0.1"}}), 0);  // two roundings: not modelled
  EXPECT_EQ(frameworkReductionLength("aten::native_batch_norm", {t("input", {4, 3, 5, 5})},
                                     no_args), 0);
  // The normalisations' backward: grad_input sums what shares its mean, grad_weight what
  // shares its weight.
  EXPECT_EQ(frameworkReductionLength("aten::native_batch_norm_backward",
                                     {t("grad_out", {4, 3, 5, 5}), t("input", {4, 3, 5, 5})},
                                     {{"train", "True"}}), 100);
  EXPECT_EQ(frameworkReductionLength("aten::native_layer_norm_backward",
                                     {t("input", {6, 10, 32}), t("mean", {6, 10, 1})}, no_args),
            60);  // 60 rows a weight, 32 elements a mean
  EXPECT_EQ(frameworkReductionLength("aten::native_group_norm_backward",
                                     {t("input", {2, 8, 3, 3}), t("mean", {2, 2})},
                                     {{"N", "2"}, {"C", "8"}, {"HxW", "9"}, {"group", "2"}}),
            36);  // 4 channels of 9 a mean, beside 2 * 9 a weight
  // Softmax's backward sums g * y along its dimension.
  const std::vector<fumi_tensor> softmax = {t("grad_output", {4, 7, 10}), t("output", {4, 7, 10})};
  EXPECT_EQ(frameworkReductionLength("aten::_softmax_backward_data", softmax, {{"dim", "-1"}}), 10);
  EXPECT_EQ(frameworkReductionLength("aten::_log_softmax_backward_data", softmax, {{"dim", "1"}}),
            7);
  // Reductions: the input elements that fold into each output element.
  auto out = [&](std::vector<int64_t> shape) {
    fumi_tensor o = t("out", std::move(shape));
    o.role = FUMI_ROLE_OUTPUT;
    return o;
  };
  EXPECT_EQ(frameworkReductionLength("aten::norm.ScalarOpt_dim", {t("self", {2000, 1000}), out({})},
                                     no_args), 2000000);
  EXPECT_EQ(frameworkReductionLength("aten::sum.dim_IntList", {t("self", {8, 64, 10}), out({8, 10})},
                                     no_args), 64);
  EXPECT_EQ(frameworkReductionLength("aten::mean.dim", {t("self", {8, 64}), out({8, 1})},
                                     no_args), 64);
  EXPECT_EQ(frameworkReductionLength("aten::sum", {t("self", {8, 64})}, no_args), 0);  // no out
  EXPECT_EQ(frameworkReductionLength(nullptr, {}, no_args), 0);
}

// Framework ops are projected from their schema names and arguments as text: addmm's self is
// broadcast as C with beta and alpha; unparsable scalars fall back to the schema's defaults;
// transposed convolutions and unknown ops are not projected.
TEST(Checksum, FrameworkOpsProjectFromTheirSchemaArguments) {
  std::vector<double> self{1, -2}, m1{1, 2, 3, 4, 5, 6}, m2{1, 0, -1, 2, 0.5, 3}, out(6);
  // out = beta * self + alpha * m1 m2, m1 3x2, m2 2x2, self broadcast over rows
  const double alpha = 2, beta = 0.5;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j)
      out[static_cast<size_t>(i * 2 + j)] =
          beta * self[static_cast<size_t>(j)] +
          alpha * (m1[static_cast<size_t>(i * 2)] * m2[static_cast<size_t>(j)] +
                   m1[static_cast<size_t>(i * 2 + 1)] * m2[static_cast<size_t>(2 + j)]);
  std::vector<fumi_tensor> ts = {hostTensor("self", {2}, self.data()),
                                 hostTensor("mat1", {3, 2}, m1.data()),
                                 hostTensor("mat2", {2, 2}, m2.data()),
                                 hostTensor("out", {3, 2}, out.data())};
  ts[3].role = FUMI_ROLE_OUTPUT;
  const std::vector<std::pair<const char*, std::string>> args = {{"beta", "0.5"},
                                                                 {"alpha", "2."}};
  const double r[2] = {0.25, -1.5};
  double got[3] = {};
  ASSERT_EQ(frameworkProjection("aten::addmm", ts, args, 3, Projection{1, 1, r, got, nullptr}),
            FUMI_OK);
  for (int i = 0; i < 3; ++i)
    EXPECT_NEAR(got[i], r[0] * out[static_cast<size_t>(i * 2)] + r[1] * out[static_cast<size_t>(i * 2 + 1)], 1e-12);
  // "None" holds no number: alpha and beta fall back to 1, so the projection differs.
  const std::vector<std::pair<const char*, std::string>> none = {{"beta", "None"},
                                                                 {"alpha", "None"}};
  ASSERT_EQ(frameworkProjection("aten::addmm", ts, none, 3, Projection{1, 1, r, got, nullptr}),
            FUMI_OK);
  EXPECT_NE(got[0], r[0] * out[0] + r[1] * out[1]);
  EXPECT_EQ(frameworkProjection("aten::cumsum", ts, args, 3, Projection{1, 1, r, got, nullptr}),
            FUMI_UNSUPPORTED);
  EXPECT_EQ(frameworkProjection("aten::convolution", ts, {{"transposed", "True"}}, 3,
                                Projection{1, 1, r, got, nullptr}),
            FUMI_UNSUPPORTED);
}

// A device op's convolution projected through DeviceOps (framework_projection.h: what the torch
// adapter does on a GPU) equals the host's projection of the same op: forward with a bias,
// grad_input and grad_weight, with groups, stride, padding and dilation, 2-d and 1-d. The device
// is played by host code (contractions by contractTensor, the convolution by convReference,
// scans by scanTensor); host copies are asked for only where the device declines, never for a
// dimension or output that no path projects (the plugin probes those).
TEST(Checksum, DeviceConvolutionProjectionAgreesWithTheHostOne) {
  RandomTensors dense(17);
  using Args = std::vector<std::pair<const char*, std::string>>;
  for (int spatial : {2, 1})
    for (int groups : {1, 2}) {
      dense.clear();
      // x N x C x in, w K x C/g x f, y N x K x out: stride 2, padding 1, dilation 2 (2-d: the
      // last dimension 1) over 9 x 7 (2-d) or 11 (1-d) with a 3 x 2 (3) filter.
      const std::vector<int64_t> x_shape =
          spatial == 2 ? std::vector<int64_t>{2, 4, 9, 7} : std::vector<int64_t>{2, 4, 11};
      const std::vector<int64_t> w_shape =
          spatial == 2 ? std::vector<int64_t>{6, 4 / groups, 3, 2}
                       : std::vector<int64_t>{6, 4 / groups, 3};
      const std::vector<int64_t> y_shape =
          spatial == 2 ? std::vector<int64_t>{2, 6, 4, 4} : std::vector<int64_t>{2, 6, 5};
      const Args args = {{"stride", "[2]"},          {"padding", "[1]"},
                         {"dilation", spatial == 2 ? "[2, 1]" : "[2]"},
                         {"transposed", "False"},    {"groups", std::to_string(groups)}};
      // forward: input, weight, bias, out; backward: grad_output, input, weight, out0..2
      std::vector<fumi_tensor> fwd = {dense("input", x_shape), dense("weight", w_shape),
                                      dense("bias", {6}), dense("out", y_shape)};
      std::vector<fumi_tensor> bwd = {dense("grad_output", y_shape), dense("input", x_shape),
                                      dense("weight", w_shape), dense("out0", x_shape),
                                      dense("out1", w_shape), dense("out2", {6})};
      fwd[3].role = FUMI_ROLE_OUTPUT;
      for (int i = 3; i < 6; ++i) bwd[static_cast<size_t>(i)].role = FUMI_ROLE_OUTPUT;
      for (const auto& [op, ts, output] :
           {std::tuple{"aten::convolution", &fwd, 3},
            std::tuple{"aten::_convolution", &fwd, 3},  // its implementation step, as traced
            std::tuple{"aten::convolution_backward", &bwd, 3},
            std::tuple{"aten::convolution_backward", &bwd, 4}}) {
        const bool filter = output == 4;
        if (filter && groups != 1) continue;
        std::vector<fumi_tensor> on_device = *ts;
        for (fumi_tensor& t : on_device) t.memory = FUMI_MEMORY_DEVICE;
        int copies = 0, declined = 0;
        bool decline = false;
        DeviceOps dev;
        dev.contract = [&](const fumi_tensor& view, int32_t dim, int32_t count,
                           const double* vectors, double* out) {
          if (decline) return ++declined, FUMI_UNSUPPORTED;
          return contractTensor(view, view.data, view.dtype, dim, count, vectors, 1.0, false, out)
                     ? FUMI_OK
                     : FUMI_ERROR;
        };
        dev.convolve = [&](const fumi_device_conv& c) {
          // x, w, y of a groups-1 convolution: the device operand, the host one and the result
          fumi_tensor result = c.host;
          result.ndim = c.out_ndim;
          std::copy(c.out_shape, c.out_shape + c.out_ndim, result.shape);
          denseStrides(result.ndim, result.shape, result.strides);
          result.data = c.out;
          std::vector<fumi_tensor> conv;
          ConvSpec s;
          s.flip = false;
          s.spatial = c.spatial;
          for (int i = 0; i < 3; ++i)
            s.stride[i] = c.stride[i], s.pad[i] = c.padding[i], s.dilation[i] = c.dilation[i];
          s.x = 0, s.w = 1, s.y = 2;
          int out = 2;
          fumi_tensor operand = c.device;
          operand.memory = FUMI_MEMORY_HOST;  // the device's memory, read by the device
          if (c.direction == FUMI_CONV_FORWARD) {
            conv = {operand, c.host, result};
          } else if (c.direction == FUMI_CONV_BACKWARD_DATA) {
            conv = {result, c.host, operand};
            s.direction = ConvSpec::Direction::kBackwardData;
            out = 0;
          } else {
            conv = {operand, result, c.host};
            s.direction = ConvSpec::Direction::kBackwardFilter;
            out = 1;
          }
          return convReference(conv, s, out, c.out);
        };
        dev.scan = [&](int32_t index, fumi_scan* out) {
          const fumi_tensor& t = (*ts)[static_cast<size_t>(index)];
          return scanTensor(t, t.data, t.dtype, out);
        };
        dev.on_host = [&]() { return ++copies, ts; };
        const fumi_tensor& t = (*ts)[static_cast<size_t>(output)];
        const int32_t dim = filter ? 0 : 1, count = 3;
        const checksum::Split sp = checksum::splitAround(t.shape, t.ndim, dim);
        std::vector<double> v(static_cast<size_t>(sp.len * count));
        checksum::gaussianVectors(static_cast<uint64_t>(output + groups), count, sp.len,
                                  v.data());
        const size_t size = static_cast<size_t>(sp.outer * count * sp.inner);
        std::vector<double> host(size), device(size, -1.0);
        ASSERT_EQ(frameworkProjection(op, *ts, args, output, Projection{dim, count, v.data(),
                                                                         host.data(), nullptr}),
                  FUMI_OK) << op << " " << output;
        ASSERT_EQ(frameworkProjection(op, on_device, args, output,
                                      {Projection{dim, count, v.data(), device.data(), nullptr}},
                                      &dev),
                  FUMI_OK) << op << " " << output << " groups " << groups;
        double scale = 0;
        for (double h : host) scale = std::max(scale, std::fabs(h));
        for (size_t i = 0; i < size; ++i)
          EXPECT_NEAR(device[i], host[i], 1e-12 * scale) << op << " " << output << " at " << i;
        EXPECT_EQ(copies, 0);
        // Not projected anywhere: refused with nothing copied.
        std::vector<double> other(size * 8);
        EXPECT_EQ(frameworkProjection(op, on_device, args, output,
                                      {Projection{dim + 1, count, v.data(), other.data(), nullptr}},
                                      &dev),
                  FUMI_UNSUPPORTED);
        if (op == std::string("aten::convolution_backward")) {
          EXPECT_EQ(frameworkProjection(op, on_device, args, 5,
                                        {Projection{0, count, v.data(), other.data(), nullptr}},
                                        &dev),
                    FUMI_UNSUPPORTED);  // grad_bias
        }
        EXPECT_EQ(copies, 0);
        // A device that declines: the same projection from the host copies.
        decline = true;
        ASSERT_EQ(frameworkProjection(op, on_device, args, output,
                                      {Projection{dim, count, v.data(), device.data(), nullptr}},
                                      &dev),
                  FUMI_OK);
        EXPECT_GT(declined, 0);
        EXPECT_EQ(copies, 1);
        for (size_t i = 0; i < size; ++i) EXPECT_EQ(device[i], host[i]) << i;
      }
    }
}

// Estimator edge cases: a NaN in the output where the exact side is finite is reported as an
// infinite error; NaN in the exact side makes the call unusable (skipped).
TEST(Checksum, NonFiniteOutputs) {
  const int64_t shape[2] = {2, 2};
  const double y[4] = {1, 2, NAN, 4}, exact_y[4] = {1, 2, 3, 4};
  auto run = [&](const double* out_values, const double* exact_values, checksum::Estimate* e) {
    std::vector<std::unique_ptr<std::vector<double>>> scratch;
    return checksum::estimateOutput(
        out_values, 4, shape, 2, 2, false, 1,
        checksum::eachSide([&](int32_t dim, int32_t count, const double* v, double* exact,
                               double*) {
          checksum::contract(exact_values, checksum::splitAround(shape, 2, dim), count, v, exact,
                             nullptr);
          return FUMI_OK;
        }),
        [&](size_t n) {
          scratch.push_back(std::make_unique<std::vector<double>>(n));
          return scratch.back()->data();
        },
        e);
  };
  checksum::Estimate e;
  EXPECT_EQ(run(y, exact_y, &e), FUMI_OK);
  EXPECT_TRUE(e.nonfinite);
  EXPECT_TRUE(std::isinf(e.rel));
  EXPECT_EQ(run(exact_y, y, &e), FUMI_SKIPPED);
  EXPECT_EQ(run(exact_y, exact_y, &e), FUMI_OK);
  EXPECT_EQ(e.rel, 0.0);
}

}  // namespace
}  // namespace fumi
