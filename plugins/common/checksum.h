// checksum.h — the statistics of the `checksum` check (plugins/checksum, docs/checksum.md):
// random projection vectors, the call's own output contracted with them, and the error
// estimates from comparing that with the host's exact projection (fumi_host_api.project).
// Header-only, no host calls: unit tests run it against fumi's reference directly.
//
// The estimator. With E = C - C_exact (C the call's output) and vectors r of independent
// standard normal entries, E ||E r||^2 = ||E||_F^2. From N samples (right vectors r_s over the
// columns, left vectors l_s over the rows: E ||l^T E||^2 = ||E||_F^2 as well)
//   est^2 = (1/N) sum_s ||E r_s||^2 = ||E||_F^2 * (sum_i w_i chi2_N,i) / N,
// w_i = sigma_i^2 / ||E||_F^2 over the singular values of E: a weighted mean of chi-square
// variables, relative variance 2 sum_i w_i^2 / N <= 2 / N. The worst case is a rank-1 E (one
// wrong element, one wrong column), est^2 = ||E||_F^2 * chi2_N / N; docs/checksum.md gives the
// probabilities per N. The metric is est / ||C||_F, and for gross errors (est above
// kGrossError * ||C||_F, where ||C||_F no longer stands for ||C_exact||_F) est / est_exact with
// est_exact^2 = (1/N) sum_s ||C_exact r_s||^2 from the same vectors.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <vector>

#include "metrics.h"

namespace fumi::checksum {

// Above this estimated relative error, the output's own norm is a poor stand-in for the exact
// result's: the metric divides by the projected exact norm instead.
constexpr double kGrossError = 0.1;

namespace detail {

// ln(s) for a positive normal fp32 s, in plain arithmetic the compiler vectorises (std::log is
// a library call per element): s = 2^e * m with m folded into [sqrt(1/2), sqrt(2)), ln m =
// 2 atanh(z) with z = (m - 1) / (m + 1), |z| <= 0.172, from its odd series to z^9 (the next
// term is below 2^-30 of the sum). Within 2 ulp (fp32) of std::log; unit-tested against it.
inline float logPositive(float s) {
  uint32_t bits;
  std::memcpy(&bits, &s, sizeof bits);
  float e = static_cast<float>(static_cast<int32_t>(bits >> 23)) - 127.0f;
  const uint32_t mant = (bits & 0x007fffffu) | 0x3f800000u;  // [1, 2)
  float m;
  std::memcpy(&m, &mant, sizeof m);
  const bool fold = m > 1.41421356f;
  m = fold ? 0.5f * m : m;
  e = fold ? e + 1.0f : e;
  const float z = (m - 1.0f) / (m + 1.0f), z2 = z * z;
  float p = 1.0f / 9;
  for (int k = 7; k >= 3; k -= 2) p = p * z2 + 1.0f / static_cast<float>(k);
  return e * 0x1.62e430p-1f + (2.0f * z + 2.0f * z * z2 * p);
}

// Pairs p0 .. p0 + n - 1 (n <= kPairs) of the stream `seed` into out[0 .. 2n): each attempt of
// Marsaglia's polar method for all the pairs still open at once (their hashes, then s, the
// logarithm and the square root as vector loops), the rejected ones (21% at the first attempt)
// gathered for the next. The vector loops run in whole groups of kGroup, the lanes past the
// open pairs computed and not used: a loop's scalar remainder (with a scalar division, square
// root and logarithm per pair) was half the time at 64 pairs a call. In fp32, widened at the
// end: the deviates are exact inputs of both sides of the projection, so their precision does
// not matter, only their distribution (normal to fp32's resolution), and fp32's divisions and
// square roots take a quarter of fp64's time per element (1024 deviates 2.5 -> 1.3 us). Every
// element comes out of this one function, and each is a function of (seed, pair, attempt)
// alone, so a vector drawn whole, in blocks of any size, and an element drawn alone
// (gaussianAt) are the same bits in either clone.
constexpr int kPairs = 256;
constexpr int kGroup = 16;
FUMI_WIDE inline void gaussianPairs(uint64_t seed, uint64_t p0, int n, double* out) {
  float u[kPairs + kGroup], v[kPairs + kGroup], f[kPairs + kGroup];
  int open[kPairs + kGroup], m = n;
  for (int j = 0; j < n; ++j) open[j] = j;
  for (uint64_t a = 0; m > 0; ++a) {
    const uint64_t stream = a == 0 ? seed : metrics::mixSeed(seed, ~a);
    const int groups = (m + kGroup - 1) / kGroup;
    for (int j = m; j < groups * kGroup; ++j) open[j] = open[0];
    // (u, v) uniform in [-1, 1)^2 on a grid of 2^-23: draws 2p and 2p + 1 of the stream,
    // perturb's counter-based draws (32-bit arithmetic, vectorised on AVX2 too, where 64-bit
    // hashes ran scalar), their top 24 bits each. A run of pairs shares one high half of the
    // index (kPairs divides 2^31), so one base serves the loop.
    const uint32_t base = metrics::noiseBase(stream, 2 * p0);
    const uint32_t low0 = static_cast<uint32_t>(2 * p0);
    const auto draw = [base](uint32_t low) {
      const auto bits = static_cast<int32_t>(metrics::noiseBits(base, low));
      return static_cast<float>(bits >> 8) * 0x1.0p-23f;
    };
    for (int g = 0; g < groups; ++g) {
      FUMI_SIMD()
      for (int q = 0; q < kGroup; ++q) {
        const int j = g * kGroup + q;
        const uint32_t low = low0 + 2 * static_cast<uint32_t>(open[j]);
        u[j] = draw(low);
        v[j] = draw(low + 1);
        // f = 0 marks a point outside the unit disc (or its centre)
        const float s = u[j] * u[j] + v[j] * v[j];
        const bool in = s < 1.0f && s > 0.0f;
        const float t = in ? s : 0.5f;
        f[j] = in ? std::sqrt(-2.0f * logPositive(t) / t) : 0.0f;
      }
    }
    if (m == n) {  // the first attempt: every pair in place
      FUMI_SIMD()
      for (int j = 0; j < n; ++j) {
        out[2 * j] = static_cast<double>(u[j] * f[j]);
        out[2 * j + 1] = static_cast<double>(v[j] * f[j]);
      }
    } else {
      for (int j = 0; j < m; ++j) {
        out[2 * open[j]] = static_cast<double>(u[j] * f[j]);
        out[2 * open[j] + 1] = static_cast<double>(v[j] * f[j]);
      }
    }
    int left = 0;
    for (int j = 0; j < m; ++j) {  // without a branch: 21% rejections are unpredictable
      open[left] = open[j];
      left += f[j] == 0.0f ? 1 : 0;
    }
    m = left;
  }
}

}  // namespace detail

// Standard normal deviates: element i of the stream `seed` is one half of pair i / 2, drawn by
// Marsaglia's polar method on hashes of (seed, pair): a point (u, v) uniform in the square
// [-1, 1)^2 drawn until it falls inside the unit disc (attempt a > 0 hashes a stream of its own;
// 79% land at the first), then (u, v) * sqrt(-2 ln s / s) with s = u^2 + v^2: one logarithm
// and no sine or cosine per pair (Box-Muller's trigonometry was half the cost of drawing the
// vectors), all of it in fp32 vector loops (detail::gaussianPairs: 1024 deviates in about 1.3 us
// where a loop of std::log took 8). Any element of any vector is reproducible on its own, in any
// order.
inline double gaussianAt(uint64_t seed, uint64_t index) {
  double pair[2];
  detail::gaussianPairs(seed, index / 2, 1, pair);
  return pair[index % 2];
}

// `count` vectors of length `len`, vector s at v[s * len ...] (fumi_host_api.project's layout):
// element i of the whole array is gaussianAt(seed, i).
inline void gaussianVectors(uint64_t seed, int32_t count, int64_t len, double* v) {
  const uint64_t n = static_cast<uint64_t>(count) * static_cast<uint64_t>(len);
  const uint64_t pairs = n / 2;
  for (uint64_t p = 0; p < pairs; p += detail::kPairs)
    detail::gaussianPairs(seed, p, static_cast<int>(std::min<uint64_t>(detail::kPairs, pairs - p)),
                          v + 2 * p);
  if (n % 2 == 1) v[n - 1] = gaussianAt(seed, n - 1);
}

// A dense row-major shape read as outer x len x inner around dimension `dim`.
struct Split {
  int64_t outer = 1, len = 1, inner = 1;
};
inline Split splitAround(const int64_t* shape, int32_t ndim, int32_t dim) {
  Split s;
  for (int32_t d = 0; d < ndim; ++d) (d < dim ? s.outer : d == dim ? s.len : s.inner) *= shape[d];
  return s;
}

namespace detail {

// TwoSum/TwoProduct accumulation (the host's reference sums the same way): as accurate as a
// sum in twice the precision.
struct DoubleDouble {
  double s = 0, c = 0;
  void add(double a, double b) {
    const double p = a * b, pe = std::fma(a, b, -p);
    const double t = s + p, z = t - s;
    c += (s - (t - z)) + (p - z) + pe;
    s = t;
  }
};

}  // namespace detail

// The call's side of the projection: y (dense row-major, split `sp`) contracted along the split
// dimension with `count` vectors v[s * len + i]: out[(o * count + s) * inner + q], like
// fumi_host_api.project. out_lo null: plain fp64 sums; else compensated, out + out_lo.
inline void contract(const double* y, Split sp, int32_t count, const double* v, double* out,
                     double* out_lo) {
  const size_t row = static_cast<size_t>(count * sp.inner);
  if (sp.inner == 1 && !out_lo) {  // the last dimension: dot products of contiguous rows
    for (int64_t o = 0; o < sp.outer; ++o)
      for (int32_t s = 0; s < count; ++s) {
        const double* a = y + o * sp.len;
        const double* b = v + s * sp.len;
        double part[4] = {0, 0, 0, 0};  // independent chains the CPU can overlap
        int64_t i = 0;
        for (; i + 4 <= sp.len; i += 4)
          for (int lane = 0; lane < 4; ++lane) part[lane] += a[i + lane] * b[i + lane];
        for (; i < sp.len; ++i) part[0] += a[i] * b[i];
        out[o * count + s] = (part[0] + part[1]) + (part[2] + part[3]);
      }
    return;
  }
  std::vector<detail::DoubleDouble> acc(out_lo ? row : 0);
  for (int64_t o = 0; o < sp.outer; ++o) {
    double* dst = out + o * count * sp.inner;
    std::fill(dst, dst + row, 0.0);
    std::fill(acc.begin(), acc.end(), detail::DoubleDouble{});
    for (int64_t i = 0; i < sp.len; ++i) {
      const double* src = y + (o * sp.len + i) * sp.inner;
      for (int32_t s = 0; s < count; ++s) {
        const double w = v[s * sp.len + i];
        double* d = dst + s * sp.inner;
        if (out_lo) {
          detail::DoubleDouble* a = &acc[static_cast<size_t>(s * sp.inner)];
          for (int64_t q = 0; q < sp.inner; ++q) a[q].add(w, src[q]);
        } else {
          for (int64_t q = 0; q < sp.inner; ++q) d[q] += w * src[q];
        }
      }
    }
    if (out_lo)
      for (size_t k = 0; k < row; ++k) {
        const double hi = acc[k].s + acc[k].c;
        dst[k] = hi;
        out_lo[o * count * sp.inner + static_cast<int64_t>(k)] = acc[k].c - (hi - acc[k].s);
      }
  }
}

// What the check reports.
struct Estimate {
  double rel = 0;        // the metric: estimated normwise relative error
  double err_norm = 0;   // estimated ||E||_F
  double out_norm = 0;   // ||C||_F
  double ref_norm = 0;   // estimated ||C_exact||_F (same vectors)
  int32_t samples = 0;   // N; where `exact`, the unit vectors projected
  // The output's figure is exact, not an estimate: a dimension no longer than the vectors on it
  // was projected on its unit vectors (projectSides), which sum to ||E||_F^2 exactly.
  bool exact = false;
  // Where the error is: the row (right vectors) and column (left vectors) with the largest
  // estimated error, as indices of the output flattened around the projected dimension
  // (batched outputs: batch * m + i and batch * n + j); -1 where that side was not projected.
  int64_t worst_row = -1, worst_col = -1;
  double col_share = 0;  // the worst column's share of the column estimates (1: all in one)
  bool nonfinite = false;  // the output has NaN/Inf where the exact projections are finite
  bool unusable = false;   // the exact projections themselves are not finite
};

// Collects the sides of one output and turns them into an Estimate. Sums of squares are kept
// with a power-of-two scale per side, so nothing overflows for finite values.
class Estimator {
 public:
  // One side: `got` (the output contracted, + got_lo) against `exact` (+ exact_lo), laid out
  // as contract() writes them for `sp` (of the output) and `count` vectors. `columns`: the
  // vectors ran over the rows, so the per-index figures are per column.
  // `unit`: the vectors were the dimension's unit vectors (all of them), so the side's sums are
  // ||E||_F^2 and ||C_exact||_F^2 themselves, one sample.
  FUMI_WIDE void addSide(const double* got, const double* got_lo, const double* exact,
                         const double* exact_lo, Split sp, int32_t count, bool columns,
                         bool unit = false) {
    const int64_t n = sp.outer * count * sp.inner;
    std::vector<double>& per = columns ? per_col_ : per_row_;  // summed over repeated sides
    per.resize(static_cast<size_t>(sp.outer * sp.inner), 0.0);
    sq_.resize(static_cast<size_t>(n));
    double* d2 = sq_.data();
    // One vector loop: x - x is 0 for a finite x and NaN for Inf or NaN, so the sums of those
    // tell whether a side has a non-finite element; the magnitudes' maximum is that of the
    // finite ones when it has none (else the side is not used); and the squared differences
    // and sums, unscaled, stand where no square can leave fp64's normal range (the common
    // case: a separate pass for the scale first took a third of the estimator's time).
    double top = 0.0, zero_exact = 0.0, zero_got = 0.0, err = 0.0, ref = 0.0;
    FUMI_SIMD(reduction(+ : zero_exact, zero_got, err, ref) reduction(max : top))
    for (int64_t k = 0; k < n; ++k) {
      zero_exact += exact[k] - exact[k];
      zero_got += got[k] - got[k];
      top = std::max(top, std::max(std::fabs(exact[k]), std::fabs(got[k])));
      const double d = got[k] - exact[k];
      err += d * d;
      ref += exact[k] * exact[k];
      d2[k] = d * d;
    }
    unusable_ = unusable_ || !(zero_exact == 0.0);
    nonfinite_ = nonfinite_ || !(zero_got == 0.0);
    if (unusable_ || nonfinite_) return;
    // Scaled by 2^-e where the magnitudes are beyond 2^+-400 (or compensated): the same sums,
    // since a power of two scales exactly.
    const bool unscaled = !got_lo && !exact_lo && top < 0x1p400 && (top == 0.0 || top > 0x1p-400);
    const int e = unscaled || top == 0.0 ? 0 : std::max(std::ilogb(top), -1022);
    if (!unscaled) {
      const double scale = std::ldexp(1.0, -e);
      err = ref = 0.0;
      for (int64_t k = 0; k < n; ++k) {
        const double lo = (got_lo ? got_lo[k] : 0.0) - (exact_lo ? exact_lo[k] : 0.0);
        const double d = (got[k] * scale - exact[k] * scale) + lo * scale;
        const double r = exact[k] * scale;
        err += d * d;
        ref += r * r;
        d2[k] = d * d;
      }
    }
    // The per-index figures: the vectors' squares summed, brought back to scale 1 (2^(2e) as a
    // factor where it is a normal number: the same rounding as ldexp, without a call each).
    const bool direct = 2 * e >= -1022 && 2 * e <= 1023;
    const double unscale2 = direct ? std::ldexp(1.0, 2 * e) : 0.0;
    // Vector loops along the index, one vector at a time (a loop over the vectors for each
    // index was most of the estimator's time; a side's sums are the same, bit for bit).
    double* dst = per.data();
    if (!direct) {
      for (int64_t o = 0; o < sp.outer; ++o)
        for (int64_t q = 0; q < sp.inner; ++q) {
          double sum = 0.0;
          for (int32_t s = 0; s < count; ++s) sum += d2[(o * count + s) * sp.inner + q];
          dst[o * sp.inner + q] += std::ldexp(sum, 2 * e);
        }
    } else if (sp.inner == 1) {  // laid out index-major: every count-th square
      for (int32_t s = 0; s < count; ++s) {
        FUMI_SIMD()
        for (int64_t o = 0; o < sp.outer; ++o) dst[o] += d2[o * count + s] * unscale2;
      }
    } else {
      for (int64_t o = 0; o < sp.outer; ++o)
        for (int32_t s = 0; s < count; ++s) {
          const double* src = d2 + (o * count + s) * sp.inner;
          double* to = dst + o * sp.inner;
          FUMI_SIMD()
          for (int64_t q = 0; q < sp.inner; ++q) to[q] += src[q] * unscale2;
        }
    }
    sides_.push_back(Side{err, ref, e, count, unit});
    any_unit_ = any_unit_ || unit;
    if (columns) col_side_ = true;
    else row_side_ = true;
  }

  // ||C||_F of the output (over its finite elements): the host's scan, or metrics.h's
  // scanValues of a dense copy.
  void setOutputNorm(double norm) { out_norm_ = norm; }

  FUMI_WIDE Estimate result() const {
    Estimate est;
    est.out_norm = out_norm_;
    est.nonfinite = nonfinite_ && !unusable_;
    est.unusable = unusable_;
    if (unusable_) return est;
    if (nonfinite_) {
      est.rel = est.err_norm = std::numeric_limits<double>::infinity();
      return est;
    }
    // (1/N) sum over every sample of every side, each side's sums brought to one scale; only
    // the exact sides where there are any (an estimate would only add its spread).
    int top = -1022;
    for (const Side& s : sides_) top = std::max(top, s.exponent);
    double err = 0.0, ref = 0.0;
    int32_t samples = 0, vectors = 0;  // a unit-vector side is one sample of ||E||_F^2 itself
    for (const Side& s : sides_) {
      if (any_unit_ && !s.unit) continue;
      err += std::ldexp(s.err, 2 * (s.exponent - top));
      ref += std::ldexp(s.ref, 2 * (s.exponent - top));
      samples += s.unit ? 1 : s.count;
      vectors += s.count;
    }
    est.exact = any_unit_;
    est.samples = est.exact ? vectors : samples;
    if (samples == 0) return est;
    est.err_norm = std::ldexp(std::sqrt(err / samples), top);
    est.ref_norm = std::ldexp(std::sqrt(ref / samples), top);
    const double small = est.err_norm / out_norm_;  // inf or NaN when ||C|| is 0: below
    if (est.exact && est.ref_norm > 0) {  // both norms exact: the error relative to the exact
      est.rel = std::sqrt(err / ref);
    } else if (out_norm_ > 0 && small <= kGrossError) {
      est.rel = small;
    } else if (est.ref_norm > 0) {
      est.rel = std::sqrt(err / ref);
    } else {
      est.rel = est.err_norm == 0 ? 0.0 : std::numeric_limits<double>::infinity();
    }
    if (row_side_) est.worst_row = argmax(per_row_);
    if (col_side_) {
      est.worst_col = argmax(per_col_);
      const double* c = per_col_.data();
      double total = 0.0;
      FUMI_SIMD(reduction(+ : total))
      for (size_t i = 0; i < per_col_.size(); ++i) total += c[i];
      est.col_share = total > 0 ? per_col_[static_cast<size_t>(est.worst_col)] / total : 0.0;
    }
    return est;
  }

 private:
  struct Side {
    double err, ref;  // scaled by 2^-exponent (squares: 2^-2 exponent)
    int exponent;
    int32_t count;  // vectors
    bool unit;      // the dimension's unit vectors (Estimator::addSide)
  };
  // The first index of the largest (a vector loop for the value, then a search for it).
  static int64_t argmax(const std::vector<double>& v) {
    if (v.empty()) return -1;
    const double* p = v.data();
    const size_t n = v.size();
    double top = 0.0;  // the figures are sums of squares
    FUMI_SIMD(reduction(max : top))
    for (size_t i = 0; i < n; ++i) top = p[i] > top ? p[i] : top;  // std::max stays scalar
    return static_cast<int64_t>(std::find(v.begin(), v.end(), top) - v.begin());
  }

  std::vector<Side> sides_;
  std::vector<double> per_row_, per_col_;
  std::vector<double> sq_;  // addSide's squared differences
  double out_norm_ = 0.0;
  bool row_side_ = false, col_side_ = false, nonfinite_ = false, unusable_ = false;
  bool any_unit_ = false;
};

// Sets of vectors along dimensions of the output (`shape`), `count` vectors per stream of each
// set: the exact projections from `project` (a std::vector<fumi_side>, out and out_lo the exact
// side) -> fumi_status, with the semantics of fumi_host_api.project_sides, and the output's own
// from `contract_y` (the same sides with out and out_lo for the output, and a fumi_scan* that,
// when not null, receives the output's scan: fumi_host_api.contract_sides, or contract() of a
// dense copy), into `est`. One call of each for all the sets: the host reads every operand once
// for all of them where it can. `alloc(n)` gives n doubles of scratch (nullptr: none left).
struct SideRequest {
  int32_t dim;
  std::initializer_list<uint64_t> streams;  // one set of `count` vectors per stream
};
template <class Project, class Contract, class Alloc>
fumi_status projectSides(const int64_t* shape, int32_t ndim, std::initializer_list<SideRequest> req,
                         int32_t count, bool compensated, uint64_t seed, Project&& project,
                         Contract&& contract_y, Alloc&& alloc, fumi_scan* scan, Estimator* est) {
  std::vector<fumi_side> exact_sides, got_sides;
  std::vector<bool> unit;
  exact_sides.reserve(req.size());
  got_sides.reserve(req.size());
  for (const SideRequest& r : req) {
    const Split sp = splitAround(shape, ndim, r.dim);
    // A dimension no longer than the vectors asked for along it is projected on its unit
    // vectors instead: no more work, and the side's figure is exact (Estimator::addSide).
    const bool units = sp.len <= count * static_cast<int64_t>(r.streams.size());
    const int32_t total =
        units ? static_cast<int32_t>(sp.len) : count * static_cast<int32_t>(r.streams.size());
    const size_t size = static_cast<size_t>(sp.outer * total * sp.inner);
    double* v = alloc(static_cast<size_t>(sp.len * total));
    double* exact = alloc(size);
    double* got = alloc(size);
    double* exact_lo = compensated ? alloc(size) : nullptr;
    double* got_lo = compensated ? alloc(size) : nullptr;
    if (!v || !exact || !got || (compensated && (!exact_lo || !got_lo))) return FUMI_NO_SCRATCH;
    if (units) {
      std::fill(v, v + sp.len * total, 0.0);
      for (int64_t s = 0; s < sp.len; ++s) v[s * sp.len + s] = 1.0;
    } else {
      double* set = v;
      for (uint64_t stream : r.streams) {
        gaussianVectors(metrics::mixSeed(seed, stream), count, sp.len, set);
        set += static_cast<size_t>(count * sp.len);
      }
    }
    unit.push_back(units);
    exact_sides.push_back(fumi_side{sizeof(fumi_side), r.dim, total, v, exact, exact_lo});
    got_sides.push_back(fumi_side{sizeof(fumi_side), r.dim, total, v, got, got_lo});
  }
  fumi_status st = project(exact_sides);
  if (st != FUMI_OK) return st;
  st = contract_y(got_sides, scan);
  if (st != FUMI_OK) return st;
  for (size_t k = 0; k < exact_sides.size(); ++k) {
    const fumi_side& e = exact_sides[k];
    // Vectors over the rows (the dimension before the last, or a vector's only one) give
    // per-column figures.
    est->addSide(got_sides[k].out, got_sides[k].out_lo, e.out, e.out_lo,
                 splitAround(shape, ndim, e.dim), e.count,
                 /*columns=*/e.dim != ndim - 1 || ndim == 1, unit[k]);
  }
  return FUMI_OK;
}

// The estimate for an output of `shape` with n elements, contracted by `contract_y` (see
// projectSides; the first call that succeeds also scans the output for its 2-norm): `vectors`
// left vectors over the rows and `vectors` right vectors over the columns, both sides in one
// call; an output that cannot be projected by columns (a vector; an operation the host projects
// one way only) gets both sets over the rows, and one that cannot be projected by rows (a
// convolution: its channels) both over the first other dimension the host projects.
// `compensated`: both sides in double-double (fp64 results). FUMI_SKIPPED when the exact
// projections are not finite (NaN/Inf inputs: the nan_inf check's business).
template <class Project, class Contract, class Alloc>
fumi_status estimateOutput(size_t n, const int64_t* shape, int32_t ndim, int32_t vectors,
                           bool compensated, uint64_t seed, Project&& project,
                           Contract&& contract_y, Alloc&& alloc, Estimate* out) {
  if (n == 0 || ndim < 1) return FUMI_SKIPPED;
  Estimator est;
  fumi_scan scan{};
  scan.struct_size = sizeof scan;
  bool scanned = false;
  auto sides = [&](std::initializer_list<SideRequest> req) {
    const fumi_status st = projectSides(shape, ndim, req, vectors, compensated, seed, project,
                                        contract_y, alloc, scanned ? nullptr : &scan, &est);
    scanned = scanned || st == FUMI_OK;
    return st;
  };
  // Rows (stream 0) and columns (stream 1) together. A vector (rows are its columns) gets both
  // sets over its one dimension, and an operation the host projects along another dimension
  // only (a convolution's channels) both along the first one it can (streams 0 and 2).
  const int32_t rows = ndim >= 2 ? ndim - 2 : 0, cols = ndim - 1;
  const bool one_dim = cols == rows;
  // A side no longer than its vectors goes on its unit vectors, exactly (projectSides): that
  // side alone, where the host projects it.
  fumi_status st = FUMI_UNSUPPORTED;
  for (int32_t d : {cols, rows})
    if (!one_dim && st == FUMI_UNSUPPORTED && shape[d] <= vectors) st = sides({{d, {d == cols ? 1u : 0u}}});
  if (st == FUMI_UNSUPPORTED)
    st = one_dim ? sides({{rows, {0, 2}}}) : sides({{rows, {0}}, {cols, {1}}});
  if (st == FUMI_UNSUPPORTED && !one_dim) {  // one side at a time: which one does the host have?
    int32_t first = rows;
    st = sides({{rows, {0}}});
    for (int32_t d = 0; st == FUMI_UNSUPPORTED && d < ndim; ++d)
      if (d != rows && d != cols) st = sides({{first = d, {0, 2}}});
    if (st == FUMI_OK && first == rows) {  // the columns, or a second set over the rows
      st = sides({{cols, {1}}});
      if (st == FUMI_UNSUPPORTED) st = sides({{rows, {2}}});
    }
  }
  if (st != FUMI_OK) return st;
  est.setOutputNorm(scan.norm);
  *out = est.result();
  return out->unusable ? FUMI_SKIPPED : FUMI_OK;
}

// A projection one set at a time, (dim, count, vectors, out, out_lo) -> fumi_status, as the
// sets-at-once callable estimateOutput takes.
template <class F>
auto eachSide(F&& project_one) {
  return [project_one](const std::vector<fumi_side>& sides) {
    for (const fumi_side& s : sides)
      if (const fumi_status st = project_one(s.dim, s.count, s.vectors, s.out, s.out_lo);
          st != FUMI_OK)
        return st;
    return FUMI_OK;
  };
}

// The same for y dense row-major, contracted here (contract()).
template <class Project, class Alloc>
fumi_status estimateOutput(const double* y, size_t n, const int64_t* shape, int32_t ndim,
                           int32_t vectors, bool compensated, uint64_t seed, Project&& project,
                           Alloc&& alloc, Estimate* out) {
  return estimateOutput(
      n, shape, ndim, vectors, compensated, seed, project,
      [&](const std::vector<fumi_side>& sides, fumi_scan* scan) {
        for (const fumi_side& s : sides)
          contract(y, splitAround(shape, ndim, s.dim), s.count, s.vectors, s.out, s.out_lo);
        if (scan) *scan = metrics::scanValues<metrics::Dense>(y, n);
        return FUMI_OK;
      },
      alloc, out);
}

}  // namespace fumi::checksum
