// perturb — FuMi's fuzz-and-check. Reruns the call on inputs x' = x·(1 + δu), u uniform in
// [-1, 1], and compares the outputs with the original ones. FuMi's ratio
// R = max|y - y'| / |y + y'| (guarded against near-zero sums), maximised over trials, is a lower
// bound of the operation's maximal relative error: ill-conditioned calls amplify a last-bit
// input change into a large output change. Costs `trials` reruns at the call's own precision.
//
// Policy parameters:
//   trials  reruns with fresh noise (default 3)
//   shift   relative input shift δ (default: dtypes.def's perturb_shift of the call's precision,
//           raised to 2^-p of the storage dtype when it is too small to survive rounding)
//   guard   sums below guard·max|y + y'| are left out of the ratio (default: metrics::defaultGuard
//           of the call's precision — 1e-3 for f32/f64, 2^-4 for bf16); FuMi's unguarded ratio
//           is reported too, as extra `fumi_ratio_unguarded`
//
// Findings are of kind sensitivity (plugin.h): the default tolerance is the dtype table's, but a
// policy's `tolerances: { sensitivity: ... }` replaces it for every perturb entry without its own.
//   inputs  comma-separated input tensor names to perturb (default: every floating input);
//           `first` stands for the call's first floating input, whatever its name (FuMi's
//           wrappers perturb that one only: an op's activations, not its weights)
//   metric  primary metric: ratio (-> "fumi_ratio", default) | normwise (-> "normwise")
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "plugin_host.h"

namespace {

using fumi::metrics::Bounds;
using fumi::metrics::Params;
using fumi::plugin::Context;
using fumi::plugin::Verdict;

class PerturbCheck {
 public:
  static constexpr const char* kName = "perturb";
  static constexpr const char* kDescription =
      "FuMi fuzz/check: rerun on inputs x(1+delta*u) and report max|y-y'|/|y+y'|, a lower bound "
      "of the max relative error";
  static constexpr fumi_kind kKind = FUMI_KIND_SENSITIVITY;
  static std::vector<std::string> knownParams() {
    return {"trials", "shift", "guard", "inputs", "metric"};
  }

  explicit PerturbCheck(const Params& p)
      : trials_(static_cast<int>(p.getInt("trials", 3, 1, 1000))),
        shift_(p.getDouble("shift", std::numeric_limits<double>::quiet_NaN(),
                           Bounds{0.0, 1.0, /*lo_open=*/true})),
        guard_(p.getDouble("guard", std::numeric_limits<double>::quiet_NaN(),
                           Bounds{0.0, 1.0, false, /*hi_open=*/true})),
        inputs_(p.getList("inputs")),
        normwise_primary_(p.getChoice("metric", {"ratio", "normwise"}) == 1),
        tolerance_(p.tolerances()),
        seed_(p.seed()) {}

  fumi_status run(Context& ctx) const {
    const fumi_dtype storage = ctx.info().dtype;
    if (!fumi::metrics::dtypeInfo(storage)) return FUMI_UNSUPPORTED;
    const fumi_dtype precision = fumi::plugin::effectivePrecision(ctx.info());
    const double shift = std::isnan(shift_) ? defaultShift(precision, storage) : shift_;
    const double tolerance = fumi::plugin::toleranceFor(tolerance_, precision);
    const double guard = std::isnan(guard_) ? fumi::metrics::defaultGuard(precision) : guard_;

    const std::vector<int32_t> outputs = ctx.floating(FUMI_ROLE_OUTPUT);
    const std::vector<int32_t> inputs = selectInputs(ctx);
    size_t out_total = 0, out_largest = 0, in_total = 0, in_largest = 0;
    fumi::plugin::countElements(ctx, outputs, &out_total, &out_largest);
    fumi::plugin::countElements(ctx, inputs, &in_total, &in_largest);
    if (out_total == 0 || in_total == 0) return FUMI_SKIPPED;

    // Rerun buffers, reused across trials (inputs not perturbed stay NULL: the rerun runs at the
    // call's own dtype, where the host keeps their original data). The host perturbs each input
    // straight into its buffer and compares each output with its rerun where they live, in
    // their own dtypes (plugin.h, the element-wise primitives): no dense copies.
    std::vector<void*> buffers;
    FUMI_RETURN_IF_NOT_OK(ctx.allocLikeAll(inputs, storage, &buffers));
    FUMI_RETURN_IF_NOT_OK(ctx.allocLikeAll(outputs, storage, &buffers));

    // Counter-based noise: draw number j of the call's stream, whatever order it is drawn in.
    const uint64_t noise_seed = ctx.callSeed(seed_);
    uint64_t drawn = 0;
    // Per output, maximised over trials: noise outputs are left out below.
    std::vector<double> ratio_k(outputs.size(), 0.0), unguarded_k(outputs.size(), 0.0),
        normwise_k(outputs.size(), 0.0);
    // What rounding to storage left of the shift, per input and trial: a shift below half an ulp
    // of the storage dtype perturbs nothing, and the report should say so. Read only after the
    // loop (FUMI_MAP_CHANGED_LATER: a device's count comes back with the comparisons').
    std::vector<uint64_t> moved(inputs.size() * static_cast<size_t>(trials_), 0);
    size_t skipped_max = 0;
    const fumi_compare_spec spec = fumi::metrics::compareSpec(
        guard, 0.0, FUMI_DTYPE_UNKNOWN, 0.0, FUMI_COMPARE_RATIO | FUMI_COMPARE_NORMS);
    for (int trial = 0; trial < trials_; ++trial) {
      for (size_t k = 0; k < inputs.size(); ++k) {
        const int32_t t = inputs[k];
        FUMI_RETURN_IF_NOT_OK(
            ctx.map(t, buffers[static_cast<size_t>(t)], ctx.bufferDtype(t, storage),
                    fumi::plugin::mapSpec(FUMI_MAP_PERTURB, shift, noise_seed, drawn,
                                          FUMI_MAP_CHANGED_LATER),
                    &moved[static_cast<size_t>(trial) * inputs.size() + k]));
        drawn += ctx.numel(t);
      }
      FUMI_RETURN_IF_NOT_OK(ctx.rerun(storage, buffers));
      size_t skipped_trial = 0;
      for (size_t k = 0; k < outputs.size(); ++k) {
        const int32_t o = outputs[k];
        // The rerun against the original: normwise relative to the original output.
        fumi_comparison c;
        FUMI_RETURN_IF_NOT_OK(ctx.compare(o, buffers[static_cast<size_t>(o)],
                                          ctx.bufferDtype(o, storage), nullptr,
                                          FUMI_DTYPE_UNKNOWN, spec, &c));
        ratio_k[k] = std::max(ratio_k[k], c.fumi_ratio);
        unguarded_k[k] = std::max(unguarded_k[k], c.fumi_ratio_unguarded);
        normwise_k[k] = std::max(normwise_k[k], c.normwise);
        skipped_trial += c.nonfinite;
      }
      skipped_max = std::max(skipped_max, skipped_trial);
    }

    auto worst = [&](const std::vector<double>& v, const std::vector<bool>* skip) {
      double w = 0.0;
      for (size_t k = 0; k < v.size(); ++k)
        if (!skip || !(*skip)[k]) w = std::max(w, v[k]);
      return w;
    };
    double ratio = worst(ratio_k, nullptr), unguarded = worst(unguarded_k, nullptr),
           normwise = worst(normwise_k, nullptr);
    fumi::plugin::LeftOut left;
    if (!((normwise_primary_ ? normwise : ratio) <= tolerance)) {
      // Over tolerance: outputs that are rounding noise of their terms do not count, at the
      // resolution the inputs were perturbed at (an f32 output of bf16 inputs: their 2^-8), nor
      // a saved mean that moved little against its terms (its normwise change by them).
      std::vector<bool> noise;
      FUMI_RETURN_IF_NOT_OK(fumi::plugin::noiseOutputs(ctx, ctx.floating(FUMI_ROLE_INPUT), outputs,
                                                        storage, &noise, shift, nullptr,
                                                        &normwise_k, tolerance));
      left = fumi::plugin::LeftOut::of(noise);
      if (left.some()) {
        ratio = worst(ratio_k, &noise);
        unguarded = worst(unguarded_k, &noise);
        normwise = worst(normwise_k, &noise);
      }
    }
    uint64_t changed = 0;
    for (uint64_t m : moved) changed += m;
    const double perturbed_fraction =
        static_cast<double>(changed) / (static_cast<double>(in_total) * trials_);
    if (changed == 0 && shiftIsToBlame(shift, storage, nonzeroAtLeast(ctx, inputs)))
      warnIneffective(ctx, shift, storage);

    Verdict v = normwise_primary_ ? Verdict("normwise", normwise, tolerance)
                                  : Verdict("fumi_ratio", ratio, tolerance);
    if (normwise_primary_)
      v.extra("fumi_ratio", ratio).detail("normwise relative output change under perturbation");
    else
      v.extra("normwise", normwise).detail("lower bound of max relative error");
    v.extra("fumi_ratio_unguarded", unguarded)
        .extra("guard", guard)
        .extra("trials", trials_)
        .extra("shift", shift)
        .extra("perturbed_fraction", perturbed_fraction)
        .extra("nonfinite_skipped", static_cast<double>(skipped_max));
    left.apply(v);
    ctx.report(v);
    return FUMI_OK;
  }

 private:
  // The floating inputs named by `inputs`, or all of them when it is not set. Names that this
  // call does not have are ignored: one policy entry may cover ops with different operands.
  // `first` names the first floating input (in the op's argument order).
  std::vector<int32_t> selectInputs(const Context& ctx) const {
    std::vector<int32_t> all = ctx.floating(FUMI_ROLE_INPUT);
    if (inputs_.empty()) return all;
    std::vector<int32_t> chosen;
    for (size_t k = 0; k < all.size(); ++k) {
      const char* name = ctx.tensor(all[k]).name;
      for (const std::string& want : inputs_)
        if ((name && want == name) || (k == 0 && want == kFirstInput)) {
          chosen.push_back(all[k]);
          break;
        }
    }
    return chosen;
  }
  static constexpr const char* kFirstInput = "first";

  // FuMi's shift for the call's precision, raised to 2^-p of the storage dtype (p mantissa bits).
  // FuMi's fp32/fp16/bf16 shifts (1e-8, 1e-6, 1e-4) are below half an ulp of their own storage,
  // so x·(1 + δu) rounded back to storage would equal x and the rerun would measure nothing. At
  // 2^-p, 50-75% of the elements move by one ulp: last-bit noise, which is what the check needs.
  // An explicit `shift` is taken literally.
  static double defaultShift(fumi_dtype precision, fumi_dtype storage) {
    const double table = fumi::metrics::dtypeInfo(precision)->perturb_shift;
    return std::max(table, lastBit(storage));
  }

  // 2^-p of a dtype with p mantissa bits: the relative size of its last bit.
  static double lastBit(fumi_dtype storage) { return 2 * fumi::metrics::unitRoundoff(storage); }

  // Whether "no input moved" says the shift is too small rather than that a few elements drew
  // small noise. At a shift of at least 2^-p of the storage dtype, every nonzero normal element
  // moves with probability 1/2 or more, so a handful of them (a sum over a loss's five scores,
  // a gradient that ReLU zeroed but for a few elements) all stay put now and then by chance;
  // past kChanceElements draws of nonzero elements that no longer happens (2^-kChanceElements).
  // A shift below 2^-p is a configuration that moves few elements at best: said whatever the
  // count. `nonzero`: at least that many input elements are nonzero (nonzeroAtLeast).
  bool shiftIsToBlame(double shift, fumi_dtype storage, double nonzero) const {
    if (!(nonzero > 0)) return false;  // zeros stay zeros whatever the shift
    return shift < lastBit(storage) || nonzero * trials_ >= static_cast<double>(kChanceElements);
  }
  static constexpr int kChanceElements = 32;

  // A lower bound on the number of nonzero finite input elements, from each input's scan:
  // ||x||_2^2 <= nonzero(x) * max|x|^2. Infinity where an input cannot be scanned (it may hold
  // anything). All-zero inputs (an accuracy count with nothing right, a head initialised to
  // zero) give 0.
  static double nonzeroAtLeast(Context& ctx, const std::vector<int32_t>& inputs) {
    double count = 0;
    for (int32_t t : inputs) {
      fumi_scan sc{};
      sc.struct_size = sizeof sc;
      if (ctx.scan(t, nullptr, FUMI_DTYPE_UNKNOWN, &sc) != FUMI_OK)
        return std::numeric_limits<double>::infinity();
      if (sc.max_abs > 0) count += std::max(1.0, std::floor(std::pow(sc.norm / sc.max_abs, 2)));
    }
    return count;
  }

  // Once per policy entry: the verdicts carry perturbed_fraction = 0 for every call anyway.
  void warnIneffective(const Context& ctx, double shift, fumi_dtype storage) const {
    if (warned_.exchange(true)) return;
    char msg[256];
    std::snprintf(msg, sizeof msg,
                  "perturb: shift %g changes no input of %s once rounded to %s; the check "
                  "measures nothing there (raise `shift`)",
                  shift, ctx.info().op ? ctx.info().op : "?",
                  fumi::metrics::dtypeInfo(storage)->name);
    ctx.log(FUMI_LOG_WARN, msg);
  }

  const int trials_;
  const double shift_;  // NaN: the dtype table's
  const double guard_;  // NaN: metrics::defaultGuard of the call's precision
  const std::vector<std::string> inputs_;
  const bool normwise_primary_;
  const fumi::metrics::Tolerance tolerance_;
  const uint64_t seed_;
  mutable std::atomic<bool> warned_{false};
};

}  // namespace

FUMI_DEFINE_PLUGIN_ENTRY(PerturbCheck)
