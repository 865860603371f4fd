// determinism — reruns the call on the same inputs into fresh output buffers and compares the
// outputs bit for bit with the original ones. Catches nondeterministic kernels (atomics,
// split-K reductions, thread-count dependent blocking) that make runs irreproducible.
//
// Policy parameters:
//   runs  reruns per checked call (default 1); the verdict reports the worst one
//   tolerance (default 0): mismatching elements allowed
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "plugin_host.h"

namespace {

using fumi::metrics::Params;
using fumi::plugin::Context;
using fumi::plugin::Verdict;

class DeterminismCheck {
 public:
  static constexpr const char* kName = "determinism";
  static constexpr const char* kDescription =
      "rerun on the same inputs and count outputs that differ bit for bit";
  static constexpr fumi_kind kKind = FUMI_KIND_ERROR;
  static std::vector<std::string> knownParams() { return {"runs"}; }

  explicit DeterminismCheck(const Params& p)
      : runs_(static_cast<int>(p.getInt("runs", 1, 1, 1000))),
        tolerance_(std::isnan(p.tolerance()) ? 0.0 : p.tolerance()) {}

  fumi_status run(Context& ctx) const {
    const fumi_dtype storage = ctx.info().dtype;
    if (!fumi::metrics::dtypeInfo(storage)) return FUMI_UNSUPPORTED;
    const std::vector<int32_t> outputs = ctx.floating(FUMI_ROLE_OUTPUT);
    size_t out_total = 0, out_largest = 0;
    fumi::plugin::countElements(ctx, outputs, &out_total, &out_largest);
    if (out_total == 0) return FUMI_SKIPPED;

    // Inputs stay NULL: the rerun runs at the call's own dtype on its own input data. Outputs
    // are compared with their reruns where they live, in their own dtype (plugin.h, compare).
    std::vector<void*> buffers;
    FUMI_RETURN_IF_NOT_OK(ctx.allocLikeAll(outputs, storage, &buffers));

    size_t worst = 0;
    int mismatched_runs = 0;
    double max_abs_diff = 0.0;
    for (int r = 0; r < runs_; ++r) {
      FUMI_RETURN_IF_NOT_OK(ctx.rerun(storage, buffers));
      size_t mismatches = 0;
      // Bit-for-bit differences only: the comparison's first pass.
      const fumi_compare_spec diffs =
          fumi::metrics::compareSpec(0.0, 0.0, FUMI_DTYPE_UNKNOWN, 0.0, FUMI_COMPARE_DIFFS);
      for (int32_t o : outputs) {
        fumi_comparison c;
        FUMI_RETURN_IF_NOT_OK(ctx.compare(o, nullptr, FUMI_DTYPE_UNKNOWN,
                                          buffers[static_cast<size_t>(o)],
                                          ctx.bufferDtype(o, storage), diffs, &c));
        if (c.mismatches) max_abs_diff = std::max(max_abs_diff, c.max_abs_diff);
        mismatches += c.mismatches;
      }
      worst = std::max(worst, mismatches);
      mismatched_runs += mismatches > 0 ? 1 : 0;
    }

    Verdict v("mismatches", static_cast<double>(worst), tolerance_);
    v.extra("max_abs_diff", max_abs_diff)
        .extra("runs", runs_)
        .extra("mismatched_runs", mismatched_runs);
    ctx.report(v);
    return FUMI_OK;
  }

 private:
  const int runs_;
  const double tolerance_;
};

}  // namespace

FUMI_DEFINE_PLUGIN_ENTRY(DeterminismCheck)
