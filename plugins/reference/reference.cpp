// reference — differential check against an independent implementation: each output of the call
// is recomputed by fumi's own host fp64 code (interposer/reference.h: the GEMM family, BLAS and
// cuBLAS/cuBLASLt alike, epilogues included; compensated sums) and the call's result is compared
// with it. Unlike highprec, nothing of the library that ran the call is reused, so a wrong
// kernel that is wrong the same way in every precision is caught too. Operations fumi has no
// implementation for are counted as unsupported.
//
// Policy parameters (as highprec): metric normwise_rel (default) | max_rel | ulp, guard.
#include <string>
#include <vector>

#include "plugin_host.h"

namespace {

using fumi::metrics::Params;
using fumi::plugin::Context;
using fumi::plugin::ReferenceErrors;

class ReferenceCheck {
 public:
  static constexpr const char* kName = "reference";
  static constexpr const char* kDescription =
      "recompute the outputs with fumi's own host fp64 implementation and report normwise, "
      "guarded elementwise and ULP errors against it";
  static constexpr fumi_kind kKind = FUMI_KIND_ERROR;
  static std::vector<std::string> knownParams() { return ReferenceErrors::params(); }

  explicit ReferenceCheck(const Params& p) : errors_(p, kName) {}

  fumi_status run(Context& ctx) const {
    if (!fumi::metrics::dtypeInfo(ctx.info().dtype)) return FUMI_UNSUPPORTED;
    const std::vector<int32_t> outputs = ctx.floating(FUMI_ROLE_OUTPUT);
    size_t out_total = 0, out_largest = 0;
    fumi::plugin::countElements(ctx, outputs, &out_total, &out_largest);
    if (out_total == 0) return FUMI_SKIPPED;
    double* got = ctx.allocDense(out_largest);
    double* ref = ctx.allocDense(out_largest);
    if (!got || !ref) return FUMI_NO_SCRATCH;
    const fumi_dtype precision = fumi::plugin::effectivePrecision(ctx.info());
    ReferenceErrors::Sums sums;
    for (int32_t o : outputs) {
      FUMI_RETURN_IF_NOT_OK(ctx.reference(o, ref));
      FUMI_RETURN_IF_NOT_OK(ctx.gatherOriginal(o, got));
      errors_.add(sums, got, ref, ctx.numel(o), precision);
    }
    errors_.report(ctx, sums, "reference: host fp64");
    return FUMI_OK;
  }

 private:
  const ReferenceErrors errors_;
};

}  // namespace

FUMI_DEFINE_PLUGIN_ENTRY(ReferenceCheck)
