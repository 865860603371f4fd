// nan_inf — NaN and Inf in a call's outputs, without rerunning it. What matters is where a
// non-finite value *appears*, not every op it flows through afterwards:
//   appeared      every floating input is finite: overflow, log(0), 0/0 happened here.
//   nan_from_inf  inputs hold Inf but no NaN, outputs hold NaN: Inf - Inf or 0 * Inf happened
//                 here (a fully masked softmax row, say).
//   propagated    otherwise: the non-finite values came in through the inputs (a mask's -inf
//                 flowing through baddbmm), tensors or scalar arguments (masked_fill(mask,
//                 -inf), fill_(-inf): fumi_call_info.nonfinite_scalars). Counted in the summary,
//                 not a violation, unless `propagated: violation`.
// A mask-style -inf that a softmax turns into zeros leaves no non-finite output: no event.
//
// Policy parameters:
//   tolerance    non-finite outputs allowed where they appear (default 0)
//   propagated   count (default) | violation
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "plugin_host.h"

namespace {

using fumi::metrics::Params;
using fumi::plugin::Context;
using fumi::plugin::Verdict;

class NanInfCheck {
 public:
  static constexpr const char* kName = "nan_inf";
  static constexpr const char* kDescription =
      "NaN/Inf in outputs: appeared in this call (inputs finite) or propagated through it";
  static constexpr fumi_kind kKind = FUMI_KIND_ERROR;
  static std::vector<std::string> knownParams() { return {"propagated"}; }

  explicit NanInfCheck(const Params& p)
      : tolerance_(std::isnan(p.tolerance()) ? 0.0 : p.tolerance()),
        propagated_violates_(p.getChoice("propagated", {"count", "violation"}) == 1) {}

  fumi_status run(Context& ctx) const {
    const std::vector<int32_t> outputs = ctx.floating(FUMI_ROLE_OUTPUT);
    const std::vector<int32_t> inputs = ctx.floating(FUMI_ROLE_INPUT);
    size_t out_total = 0, out_largest = 0;
    fumi::plugin::countElements(ctx, outputs, &out_total, &out_largest);
    if (out_total == 0) return FUMI_SKIPPED;

    // Counted where the tensors live, in their own dtypes (plugin.h, scan): no copies.
    size_t nonfinite = 0, nan = 0;
    for (int32_t o : outputs) {
      fumi_scan s;
      FUMI_RETURN_IF_NOT_OK(ctx.scan(o, nullptr, FUMI_DTYPE_UNKNOWN, &s));
      nonfinite += s.nan + s.inf;
      nan += s.nan;
    }

    Verdict v("nonfinite", static_cast<double>(nonfinite), tolerance_);
    if (nonfinite > 0) {
      // Inputs are read only when there is something to explain.
      // A non-finite scalar argument (masked_fill's -inf) counts as a non-finite input.
      const size_t scalars = static_cast<size_t>(fumi::plugin::nonfiniteScalarsOf(ctx.info()));
      size_t input_nonfinite = scalars, input_nan = 0;
      for (int32_t i : inputs) {
        fumi_scan s;
        FUMI_RETURN_IF_NOT_OK(ctx.scan(i, nullptr, FUMI_DTYPE_UNKNOWN, &s));
        input_nonfinite += s.nan + s.inf;
        input_nan += s.nan;
      }
      // (A NaN scalar is not told from an infinite one: with any, nothing is "from inf".)
      const bool nan_from_inf = input_nonfinite > 0 && input_nan == 0 && nan > 0 && scalars == 0;
      const bool propagated = input_nonfinite > 0 && !nan_from_inf;
      if (propagated && !propagated_violates_) v.violated(false);
      const char* origin = propagated ? "propagated" : nan_from_inf ? "nan_from_inf" : "appeared";
      v.extra("nan", static_cast<double>(nan))
          .extra("inf", static_cast<double>(nonfinite - nan))
          .extra("input_nonfinite", static_cast<double>(input_nonfinite))
          .detail(origin);
    }
    ctx.report(v);
    return FUMI_OK;
  }

 private:
  const double tolerance_;
  const bool propagated_violates_;
};

}  // namespace

FUMI_DEFINE_PLUGIN_ENTRY(NanInfCheck)
