// absmax — an example check plugin, built out of tree against an installed fumi (see
// CMakeLists.txt). It flags calls whose outputs hold a value larger in magnitude than `limit`:
// by default 65504, the largest fp16 value, i.e. fp32 results that would overflow if this op
// ran in half precision. Written with fumi's optional C++ helpers (fumi/plugin_host.h); the raw
// C ABI is fumi/plugin.h (docs/plugin-abi.md).
//
// Policy entry:  - { plugin: absmax, limit: 1e4 }
//   metric absmax       the largest finite |output| of the call, against `limit`
//   extra  over_limit   how many output elements exceed `limit`
// NaN and Inf are left to the nan_inf check.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "fumi/plugin_host.h"

namespace {

class AbsMaxCheck {
 public:
  static constexpr const char* kName = "absmax";
  static constexpr const char* kDescription = "largest |output| against a limit (default 65504)";
  static constexpr fumi_kind kKind = FUMI_KIND_ERROR;
  static std::vector<std::string> knownParams() { return {"limit"}; }

  explicit AbsMaxCheck(const fumi::metrics::Params& p)
      : limit_(p.getDouble("limit", 65504.0,
                           fumi::metrics::Bounds{0.0, std::numeric_limits<double>::max()})) {}

  fumi_status run(fumi::plugin::Context& ctx) const {
    const std::vector<int32_t> outputs = ctx.floating(FUMI_ROLE_OUTPUT);
    size_t total = 0, largest = 0;
    fumi::plugin::countElements(ctx, outputs, &total, &largest);
    if (total == 0) return FUMI_SKIPPED;

    double* a = ctx.allocDense(largest);  // host scratch, freed when the check returns
    if (!a) return FUMI_NO_SCRATCH;
    double absmax = 0.0;
    size_t over = 0;
    for (int32_t o : outputs) {
      FUMI_RETURN_IF_NOT_OK(ctx.gatherOriginal(o, a));  // any dtype and layout -> dense fp64
      const size_t n = ctx.numel(o);
      for (size_t i = 0; i < n; ++i) {
        const double m = std::fabs(a[i]);
        if (!std::isfinite(m)) continue;
        absmax = std::max(absmax, m);
        over += m > limit_ ? 1 : 0;
      }
    }
    ctx.report(fumi::plugin::Verdict("absmax", absmax, limit_)
                   .extra("over_limit", static_cast<double>(over)));
    return FUMI_OK;
  }

 private:
  const double limit_;
};

}  // namespace

FUMI_DEFINE_PLUGIN_ENTRY(AbsMaxCheck)
