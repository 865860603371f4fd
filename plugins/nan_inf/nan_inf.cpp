// nan_inf — NaN and Inf in a call's outputs, without rerunning it. A non-finite output "appeared"
// in this call when every floating input is finite, and "propagated" through it otherwise; the
// first is where a trainer wants to look.
//
// Policy parameters: none besides tolerance (default 0: any non-finite output is a violation).
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
  static std::vector<std::string> knownParams() { return {}; }

  explicit NanInfCheck(const Params& p)
      : tolerance_(std::isnan(p.tolerance()) ? 0.0 : p.tolerance()) {}

  fumi_status run(Context& ctx) const {
    const std::vector<int32_t> outputs = ctx.floating(FUMI_ROLE_OUTPUT);
    const std::vector<int32_t> inputs = ctx.floating(FUMI_ROLE_INPUT);
    size_t out_total = 0, out_largest = 0, in_total = 0, in_largest = 0;
    fumi::plugin::countElements(ctx, outputs, &out_total, &out_largest);
    fumi::plugin::countElements(ctx, inputs, &in_total, &in_largest);
    if (out_total == 0) return FUMI_SKIPPED;

    // One array, refilled tensor by tensor: this check only counts.
    double* a = ctx.allocDense(std::max(out_largest, in_largest));
    if (!a) return FUMI_NO_SCRATCH;
    size_t nonfinite = 0, nan = 0;
    for (int32_t o : outputs) {
      const size_t n = ctx.numel(o);
      FUMI_RETURN_IF_NOT_OK(ctx.gatherOriginal(o, a));
      const size_t bad = fumi::metrics::countNonFinite(a, n);
      nonfinite += bad;
      if (bad) nan += fumi::metrics::countNaN(a, n);
    }

    Verdict v("nonfinite", static_cast<double>(nonfinite), tolerance_);
    if (nonfinite > 0) {
      // Inputs are read only when there is something to explain.
      size_t input_nonfinite = 0;
      for (int32_t i : inputs) {
        FUMI_RETURN_IF_NOT_OK(ctx.gatherOriginal(i, a));
        input_nonfinite += fumi::metrics::countNonFinite(a, ctx.numel(i));
      }
      v.extra("nan", static_cast<double>(nan))
          .extra("inf", static_cast<double>(nonfinite - nan))
          .extra("input_nonfinite", static_cast<double>(input_nonfinite))
          .detail(input_nonfinite == 0 ? "appeared" : "propagated");
    }
    ctx.report(v);
    return FUMI_OK;
  }

 private:
  const double tolerance_;
};

}  // namespace

FUMI_DEFINE_PLUGIN_ENTRY(NanInfCheck)
