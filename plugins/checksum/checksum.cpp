// checksum — algorithm-based fault tolerance (Huang-Abraham checksums, Freivalds' projection):
// the call's output C is compared with the exact result along a few random directions only.
// The host projects the exact result without computing it (fumi_host_api.project: for a GEMM
// C = alpha op(A) op(B) + beta C0, C_exact R = alpha op(A) (op(B) R) + beta C0 R, and
// L^T C_exact likewise, all in fp64), the check contracts C with the same vectors and
// estimates the normwise relative error ||C - C_exact||_F / ||C_exact||_F from the
// differences, in O((mn + mk + kn) * vectors) instead of the O(mnk) of a rerun. The estimator,
// its confidence and the choice of the vector count: common/checksum.h, docs/checksum.md.
//
// Policy parameters:
//   vectors   Gaussian vectors per side (right: over the columns; left: over the rows), 1 to
//             64, default 8: 16 samples, so the estimate is within 2x of the true error with
//             probability >= 99.8% even for a rank-1 error (one wrong element or column).
//             An output with one side only (a vector) gets 2 * vectors on it. A side no
//             longer than its vectors is projected on its unit vectors: exact, not estimated.
//   tolerance of the normwise relative error, per precision like highprec's (dtype table).
// fp64 calls are checked with compensated sums on both sides (about 4x the cost).
#include <string>
#include <vector>

#include "checksum.h"
#include "plugin_host.h"

namespace {

using fumi::checksum::Estimate;
using fumi::metrics::Params;
using fumi::plugin::Context;
using fumi::plugin::Verdict;

constexpr int64_t kDefaultVectors = 8;

class ChecksumCheck {
 public:
  static constexpr const char* kName = "checksum";
  static constexpr const char* kDescription =
      "compare the output with fumi's exact fp64 result along random projections (ABFT): "
      "normwise error estimate at O(n^2) cost";
  static constexpr fumi_kind kKind = FUMI_KIND_ERROR;
  static std::vector<std::string> knownParams() { return {"vectors"}; }

  explicit ChecksumCheck(const Params& p)
      : vectors_(static_cast<int32_t>(p.getInt("vectors", kDefaultVectors, 1, 64))),
        tolerance_(p.tolerances()),
        seed_(p.seed()) {}

  fumi_status run(Context& ctx) const {
    if (!fumi::metrics::dtypeInfo(ctx.info().dtype)) return FUMI_UNSUPPORTED;
    const fumi_dtype precision = fumi::plugin::effectivePrecision(ctx.info());
    // An fp64 result's error is near fp64 rounding: both sides need compensated sums then.
    const bool compensated = precision == FUMI_DTYPE_F64;
    const uint64_t seed = ctx.callSeed(seed_);
    Estimate worst;
    int32_t worst_output = -1;
    for (int32_t o : ctx.floating(FUMI_ROLE_OUTPUT)) {
      Estimate e;
      const fumi_status st = estimateOutput(ctx, o, compensated, fumi::metrics::mixSeed(seed, o), &e);
      if (st == FUMI_UNSUPPORTED || st == FUMI_SKIPPED) continue;
      if (st != FUMI_OK) return st;
      if (worst_output < 0 || !(e.rel <= worst.rel)) {
        worst = e;
        worst_output = o;
      }
    }
    if (worst_output < 0) return FUMI_UNSUPPORTED;
    const double tolerance = fumi::plugin::toleranceFor(tolerance_, precision);
    Verdict v("normwise_rel", worst.rel, tolerance);
    // Over tolerance: how far its terms cancel, from the op rerun on |x| (one rerun, on
    // violations only), so that the host can tell a kernel's error from inputs that cancel
    // (Shampoo's f32 bias update, a near-zero value head: batch 14).
    if (!(worst.rel <= tolerance) && !worst.nonfinite) {
      std::vector<bool> noise;
      std::vector<double> ratios;
      const fumi_status st = fumi::plugin::noiseOutputs(
          ctx, ctx.floating(FUMI_ROLE_INPUT), {worst_output}, ctx.info().dtype, &noise, 0,
          nullptr, nullptr, 0, &ratios);
      if (st == FUMI_OK) {  // otherwise the verdict goes without them
        fumi::plugin::Terms terms;
        terms.add(worst.rel, ratios[0], true);
        fumi::plugin::addTerms(v, terms);
      }
    }
    v.extra("out_fro", worst.out_norm)  // the error's norm is value * out_fro
        .extra("samples", worst.samples)
        .extra("worst_row", static_cast<double>(worst.worst_row))
        .extra("worst_col", static_cast<double>(worst.worst_col))
        .extra("col_share", worst.col_share)
        .extra("exact", worst.exact ? 1.0 : 0.0)
        .detail(worst.nonfinite ? "checksum: non-finite output where the exact projections are finite"
                : worst.exact   ? "checksum: exact, on the unit vectors of the output's narrow side, "
                                  "against host fp64"
                                : "checksum: random projections against host fp64");
    ctx.report(v);
    return FUMI_OK;
  }

 private:
  // One output: both sides projected (checksum.h) with the host's exact projections. Plain
  // sums: the host contracts the output in place and scans it for its norm in the same pass
  // (no copy at all); compensated (fp64): a dense copy contracted here.
  fumi_status estimateOutput(Context& ctx, int32_t o, bool compensated, uint64_t seed,
                             Estimate* out) const {
    const fumi_tensor& t = ctx.tensor(o);
    const size_t n = ctx.numel(o);
    auto project = [&](const std::vector<fumi_side>& sides) { return ctx.projectSides(o, sides); };
    auto alloc = [&](size_t size) { return ctx.allocDense(size); };
    if (compensated || !ctx.hasContract()) {
      double* y = ctx.allocDense(n);
      if (!y) return FUMI_NO_SCRATCH;
      FUMI_RETURN_IF_NOT_OK(ctx.gatherOriginal(o, y));
      return fumi::checksum::estimateOutput(y, n, t.shape, t.ndim, vectors_, compensated, seed,
                                            project, alloc, out);
    }
    return fumi::checksum::estimateOutput(
        n, t.shape, t.ndim, vectors_, compensated, seed, project,
        [&](const std::vector<fumi_side>& sides, fumi_scan* scan) {
          return ctx.contractSides(o, sides, scan);
        },
        alloc, out);
  }

  const int32_t vectors_;
  const fumi::metrics::Tolerance tolerance_;
  const uint64_t seed_;
};

}  // namespace

FUMI_DEFINE_PLUGIN_ENTRY(ChecksumCheck)
