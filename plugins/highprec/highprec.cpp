// highprec — reference by upcast rerun: the call is rerun with its floating inputs converted to
// the next wider storage dtype (fp16/bf16/tf32 -> fp32, fp32 -> fp64) and computing there; the
// original outputs are compared with that reference. fp64 calls have nothing wider to run in and
// are counted as unsupported.
//
// An fp32 call computing in TF32 reruns in fp64, not fp32: rerun(fp32) is what "the call's own
// dtype" means to the host, so it may well reproduce the TF32 math it is meant to check.
//
// Policy parameters:
//   metric  primary metric: normwise_rel (default) | max_rel | ulp; the other two go to extra.
//           ulp needs an explicit tolerance (the dtype table's are relative errors).
//   guard   max_rel leaves out reference elements below guard·max|ref| (default 1e-3)
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "plugin_host.h"

namespace {

using fumi::metrics::Params;
using fumi::plugin::Context;
using fumi::plugin::ReferenceErrors;

// The storage dtype the reference runs in; FUMI_DTYPE_UNKNOWN when there is none.
fumi_dtype widerDtype(fumi_dtype storage) {
  switch (storage) {
    case FUMI_DTYPE_F16:
    case FUMI_DTYPE_BF16:
    case FUMI_DTYPE_TF32:
      return FUMI_DTYPE_F32;
    case FUMI_DTYPE_F32:
      return FUMI_DTYPE_F64;
    default:
      return FUMI_DTYPE_UNKNOWN;
  }
}

class HighprecCheck {
 public:
  static constexpr const char* kName = "highprec";
  static constexpr const char* kDescription =
      "rerun in the next wider dtype and report normwise, guarded elementwise and ULP errors "
      "against it";
  static constexpr fumi_kind kKind = FUMI_KIND_ERROR;
  static std::vector<std::string> knownParams() { return ReferenceErrors::params(); }

  explicit HighprecCheck(const Params& p) : errors_(p, kName) {}

  fumi_status run(Context& ctx) const {
    const fumi_dtype storage = ctx.info().dtype;
    if (!fumi::metrics::dtypeInfo(storage)) return FUMI_UNSUPPORTED;
    const fumi_dtype wider = widerDtype(storage);
    if (wider == FUMI_DTYPE_UNKNOWN) return FUMI_UNSUPPORTED;
    const fumi_dtype precision = fumi::plugin::effectivePrecision(ctx.info());

    const std::vector<int32_t> outputs = ctx.floating(FUMI_ROLE_OUTPUT);
    const std::vector<int32_t> inputs = ctx.floating(FUMI_ROLE_INPUT);
    size_t out_total = 0, out_largest = 0;
    fumi::plugin::countElements(ctx, outputs, &out_total, &out_largest);
    if (out_total == 0) return FUMI_SKIPPED;

    // Each input converted straight into its wider rerun buffer; each output compared with its
    // reference where both live, in their own dtypes (plugin.h, the element-wise primitives).
    std::vector<void*> buffers;
    FUMI_RETURN_IF_NOT_OK(
        fumi::plugin::rerunMapped(ctx, inputs, outputs, wider, FUMI_MAP_COPY, &buffers));

    std::vector<ReferenceErrors::Sums> per_output(outputs.size());
    ReferenceErrors::Sums sums;
    for (size_t k = 0; k < outputs.size(); ++k) {
      const int32_t o = outputs[k];
      // f16/bf16 outputs also count the values their dtype flushed (gradient underflow).
      fumi_compare_spec spec = errors_.spec(precision);
      spec.underflow_below = fumi::metrics::underflowBelow(ctx.tensor(o).dtype);
      fumi_comparison c;
      FUMI_RETURN_IF_NOT_OK(ctx.compare(o, nullptr, FUMI_DTYPE_UNKNOWN,
                                        buffers[static_cast<size_t>(o)], wider, spec, &c));
      errors_.add(per_output[k], c, ctx.tensor(o).dtype);
      if (spec.underflow_below > 0)
        ReferenceErrors::countUnderflow(per_output[k], c, static_cast<uint64_t>(ctx.numel(o)));
      ReferenceErrors::merge(sums, per_output[k]);
    }
    const std::string detail =
        std::string("reference: ") + fumi::metrics::dtypeInfo(wider)->name + " rerun";
    fumi::plugin::LeftOut left;
    fumi::plugin::Terms terms;  // how far the kept outputs' terms cancel
    if (errors_.violates(ctx, sums) && outputs.size() > 0) {
      // Over tolerance: outputs that are rounding noise of their terms do not count, nor a saved
      // mean accurate to its terms.
      std::vector<bool> noise;
      std::vector<double> deviation;  // a saved mean's, judged against its terms
      for (const ReferenceErrors::Sums& s : per_output)
        deviation.push_back(ReferenceErrors::normwise(s));
      std::vector<double> ratios;
      FUMI_RETURN_IF_NOT_OK(fumi::plugin::noiseOutputs(ctx, inputs, outputs, wider, &noise, 0,
                                                        &buffers, &deviation,
                                                        errors_.relativeTolerance(ctx), &ratios));
      left = fumi::plugin::LeftOut::of(noise);
      ReferenceErrors::Sums kept;
      double worst = -1;  // the kept output with the largest normwise error gives of_terms
      for (size_t k = 0; k < outputs.size(); ++k) {
        if (noise[k]) continue;
        ReferenceErrors::merge(kept, per_output[k]);
        const double error = ReferenceErrors::normwise(per_output[k]);
        terms.add(error, ratios[k], error > worst);
        worst = std::max(worst, error);
      }
      if (left.some()) sums = kept;
    }
    errors_.report(ctx, sums, detail, left, terms);
    return FUMI_OK;
  }

 private:
  const ReferenceErrors errors_;
};

}  // namespace

FUMI_DEFINE_PLUGIN_ENTRY(HighprecCheck)
