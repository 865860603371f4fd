// plugin_host.h — what every check plugin does with the host API, written once: the C-ABI glue
// that keeps C++ exceptions inside the plugin, a view of the call's tensors, the element-wise
// primitives (map, compare, scan: the work stays where the tensors live), dense fp64 copies in
// scratch memory where positions matter, rerun buffers, and verdicts. Header-only; each plugin
// is one .cpp that defines a check class and exports it with FUMI_DEFINE_PLUGIN_ENTRY.
//
// How to write a check class (see plugins/nan_inf/nan_inf.cpp for the smallest one):
//   class MyCheck {
//    public:
//     static constexpr const char* kName = "my";            // the policy's `plugin: my`
//     static constexpr const char* kDescription = "...";
//     static constexpr fumi_kind kKind = FUMI_KIND_ERROR;  // or FUMI_KIND_SENSITIVITY
//     static std::vector<std::string> knownParams();        // keys besides plugin/tolerance
//     explicit MyCheck(const fumi::metrics::Params& p);     // throws ParamError on bad values
//     fumi_status run(fumi::plugin::Context& ctx) const;    // const: may run on several threads
//   };
//   FUMI_DEFINE_PLUGIN_ENTRY(MyCheck)
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "fumi/plugin.h"
#include "metrics.h"

// Returns the status of `expr` from the enclosing function unless it is FUMI_OK.
#define FUMI_RETURN_IF_NOT_OK(expr)                   \
  do {                                                \
    const fumi_status fumi_status_ = (expr);          \
    if (fumi_status_ != FUMI_OK) return fumi_status_; \
  } while (0)

namespace fumi::plugin {

// The narrower of a call's storage dtype and compute precision (metrics::narrowerPrecision).
// Default tolerances, default shifts and ULP units follow it.
inline fumi_dtype effectivePrecision(const fumi_call_info& info) {
  return metrics::narrowerPrecision(info.dtype, info.compute);
}

// The tolerance of a relative-error check on a call computing in `precision`: the entry's, else
// the policy's per-kind table's, else the dtype table's default (FuMi's).
inline double toleranceFor(const metrics::Tolerance& t, fumi_dtype precision) {
  const metrics::DtypeInfo* d = metrics::dtypeInfo(precision);
  return t.resolve(precision, d ? d->tolerance : std::numeric_limits<double>::quiet_NaN());
}

// The number of terms each output of the call sums, where the host knows it; 0 otherwise
// (and from hosts older than the field).
inline int64_t reductionLength(const fumi_call_info& info) {
  if (info.struct_size < offsetof(fumi_call_info, reduction_length) + sizeof(int64_t)) return 0;
  return info.reduction_length;
}

// The call's training phase ("forward", "backward", "optimizer"; "" unknown, and from hosts
// older than the field).
inline const char* phaseOf(const fumi_call_info& info) {
  if (info.struct_size < offsetof(fumi_call_info, phase) + sizeof(const char*) || !info.phase)
    return "";
  return info.phase;
}

// fumi_call_info.nonfinite_scalars, 0 where the host's struct predates it.
inline int32_t nonfiniteScalarsOf(const fumi_call_info& info) {
  if (info.struct_size < offsetof(fumi_call_info, nonfinite_scalars) + sizeof(int32_t)) return 0;
  return info.nonfinite_scalars;
}

// The tolerance of an error check on the call `info`: as toleranceFor, with the policy's error
// model (`tolerances: { error: precision }`) deriving it from the call's precision and shape.
inline double errorToleranceFor(const metrics::Tolerance& t, const fumi_call_info& info) {
  const fumi_dtype precision = effectivePrecision(info);
  const metrics::DtypeInfo* d = metrics::dtypeInfo(precision);
  return t.resolve(precision, info.compute, reductionLength(info),
                   d ? d->tolerance : std::numeric_limits<double>::quiet_NaN());
}

// One fumi_verdict being filled in. `violated` is decided as !(value <= tolerance), so a NaN
// metric counts as a violation rather than passing silently.
class Verdict {
 public:
  Verdict(const char* metric, double value, double tolerance) {
    v_.struct_size = sizeof(v_);
    v_.metric = metric;
    v_.value = value;
    v_.tolerance = tolerance;
    v_.violated = !(value <= tolerance);
  }
  Verdict& extra(const char* name, double value) {
    if (v_.nextra >= FUMI_MAX_EXTRA_METRICS) throw std::logic_error("too many extra metrics");
    v_.extra[v_.nextra++] = fumi_metric{name, value};
    return *this;
  }
  // Overrides the tolerance comparison (a finding that is counted, not raised).
  Verdict& violated(bool v) {
    v_.violated = v ? 1 : 0;
    return *this;
  }
  Verdict& detail(const char* text) {
    v_.detail = text;
    return *this;
  }
  const fumi_verdict& get() const { return v_; }

 private:
  fumi_verdict v_{};
};

// What Context::map writes (fumi_map_spec): a copy or |x| converted to the destination dtype,
// or x perturbed by the counter-based noise of `seed` from draw `first` on.
inline fumi_map_spec mapSpec(fumi_map_kind kind, double shift = 0.0, uint64_t seed = 0,
                             uint64_t first = 0, uint32_t flags = 0) {
  fumi_map_spec m{};
  m.struct_size = sizeof m;
  m.kind = kind;
  m.shift = shift;
  m.seed = seed;
  m.first = first;
  m.flags = flags;
  return m;
}

// The call being checked, seen through the host API. Created by the glue for each `check`.
class Context {
 public:
  Context(const fumi_host_api* host, fumi_call* call) : host_(host), call_(call) {}

  // FUMI_OK when the call's description is usable; otherwise the status `check` returns.
  fumi_status open() {
    info_ = host_->call_info(call_);
    if (!info_) return fail("call_info returned NULL");
    // `reduction_length` was appended: an older host's call info ends before it.
    if (info_->struct_size < offsetof(fumi_call_info, reduction_length)) return FUMI_UNSUPPORTED;
    if (info_->ntensors < 0 || (info_->ntensors > 0 && !info_->tensors))
      return fail("call_info has a malformed tensor list");
    // The host's fumi_tensor may be newer (larger) than the one compiled here: step through the
    // array by the size the host wrote, read only the fields we know.
    stride_ = info_->ntensors > 0 ? info_->tensors[0].struct_size : sizeof(fumi_tensor);
    if (stride_ < sizeof(fumi_tensor)) return FUMI_UNSUPPORTED;
    return FUMI_OK;
  }

  const fumi_call_info& info() const { return *info_; }
  int32_t tensorCount() const { return info_->ntensors; }
  const fumi_tensor& tensor(int32_t i) const {
    return *reinterpret_cast<const fumi_tensor*>(reinterpret_cast<const char*>(info_->tensors) +
                                                 static_cast<size_t>(i) * stride_);
  }
  bool isFloating(int32_t i) const { return metrics::dtypeInfo(tensor(i).dtype) != nullptr; }

  // Indices of the floating tensors with `role`, in call order.
  std::vector<int32_t> floating(fumi_role role) const {
    std::vector<int32_t> out;
    for (int32_t i = 0; i < tensorCount(); ++i)
      if (tensor(i).role == role && isFloating(i)) out.push_back(i);
    return out;
  }

  size_t numel(int32_t i) const {
    const int64_t n = host_->numel(call_, i);
    return n > 0 ? static_cast<size_t>(n) : 0;
  }

  // Dense fp64 scratch of n elements (host memory); nullptr when the budget is exhausted.
  double* allocDense(size_t n) {
    if (n > SIZE_MAX / sizeof(double)) return nullptr;
    return static_cast<double*>(
        host_->alloc(call_, std::max<size_t>(n, 1) * sizeof(double), FUMI_MEMORY_HOST));
  }
  void* allocLike(int32_t i, fumi_dtype dtype) { return host_->alloc_like(call_, i, dtype); }
  // What tensor i's rerun buffer holds for a rerun in `precision`: `precision`, except at the
  // call's own dtype, where every tensor keeps its own (fp16 inputs with an fp32 output stay so).
  fumi_dtype bufferDtype(int32_t i, fumi_dtype precision) const {
    return precision == info_->dtype ? tensor(i).dtype : precision;
  }

  // Tensor i read from `buffer` holding `dtype` (nullptr: its own data), dense fp64 in `order`
  // (plugin.h, fumi_order: STORAGE wherever positions do not matter — it never transposes).
  fumi_status gather(int32_t i, const void* buffer, fumi_dtype dtype, double* out,
                     fumi_order order = FUMI_ORDER_LOGICAL) {
    if (order != FUMI_ORDER_LOGICAL && hasOrderedCopies())
      return host_->gather_in(call_, i, buffer, dtype, out, order);
    return host_->gather(call_, i, buffer, dtype, out);
  }
  // The call's own data of tensor i, read as the tensor's dtype.
  fumi_status gatherOriginal(int32_t i, double* out, fumi_order order = FUMI_ORDER_LOGICAL) {
    return gather(i, nullptr, tensor(i).dtype, out, order);
  }
  fumi_status scatter(int32_t i, const double* in, void* buffer, fumi_dtype dtype,
                      fumi_order order = FUMI_ORDER_LOGICAL) {
    if (order != FUMI_ORDER_LOGICAL && hasOrderedCopies())
      return host_->scatter_in(call_, i, in, buffer, dtype, order);
    return host_->scatter(call_, i, in, buffer, dtype);
  }
  // `buffers` has one entry per tensor of the call.
  fumi_status rerun(fumi_dtype precision, const std::vector<void*>& buffers) {
    return host_->rerun(call_, precision, buffers.data());
  }
  // Scratch laid out like each of `tensors`, holding `dtype`, stored at buffers[tensor].
  fumi_status allocLikeAll(const std::vector<int32_t>& tensors, fumi_dtype dtype,
                           std::vector<void*>* buffers) {
    buffers->resize(static_cast<size_t>(tensorCount()), nullptr);
    for (int32_t i : tensors) {
      void* b = allocLike(i, bufferDtype(i, dtype));
      if (!b) return FUMI_NO_SCRATCH;
      (*buffers)[static_cast<size_t>(i)] = b;
    }
    return FUMI_OK;
  }

  // Output i recomputed by the host's own fp64 implementation (fumi_host_api.reference).
  fumi_status reference(int32_t i, double* out) {
    if (host_->struct_size < offsetof(fumi_host_api, reference) + sizeof(host_->reference) ||
        !host_->reference)
      return FUMI_UNSUPPORTED;
    return host_->reference(call_, i, out);
  }

  // Output i as `reference` computes it, contracted along dimension `dim` with `count` vectors
  // (fumi_host_api.project; out_lo may be null).
  fumi_status project(int32_t i, int32_t dim, int32_t count, const double* vectors, double* out,
                      double* out_lo) {
    if (host_->struct_size < offsetof(fumi_host_api, project) + sizeof(host_->project) ||
        !host_->project)
      return FUMI_UNSUPPORTED;
    return host_->project(call_, i, dim, count, vectors, out, out_lo);
  }

  // Tensor i (buffer/dtype as gather) contracted along `dim` with `count` vectors, read in place
  // by the host (fumi_host_api.contract); FUMI_UNSUPPORTED from an older host.
  fumi_status contract(int32_t i, const void* buffer, fumi_dtype dtype, int32_t dim, int32_t count,
                       const double* vectors, double* out) {
    if (!hasContract()) return FUMI_UNSUPPORTED;
    return host_->contract(call_, i, buffer, dtype, dim, count, vectors, out);
  }
  bool hasContract() const {
    return host_->struct_size >= offsetof(fumi_host_api, contract) + sizeof(host_->contract) &&
           host_->contract;
  }

  // project and contract for several sets of vectors at once (fumi_host_api.project_sides,
  // contract_sides; `scan` may be null): the host reads the operands once for all of them where
  // it can. From a host without them, one project or contract call per side and a scan.
  fumi_status projectSides(int32_t i, const std::vector<fumi_side>& sides) {
    if (hasSides())
      return host_->project_sides(call_, i, static_cast<int32_t>(sides.size()), sides.data());
    for (const fumi_side& s : sides)
      FUMI_RETURN_IF_NOT_OK(project(i, s.dim, s.count, s.vectors, s.out, s.out_lo));
    return FUMI_OK;
  }
  fumi_status contractSides(int32_t i, const std::vector<fumi_side>& sides, fumi_scan* scan) {
    if (scan) scan->struct_size = sizeof(fumi_scan);
    if (hasSides())
      return host_->contract_sides(call_, i, nullptr, tensor(i).dtype,
                                   static_cast<int32_t>(sides.size()), sides.data(), scan);
    for (const fumi_side& s : sides)
      FUMI_RETURN_IF_NOT_OK(
          contract(i, nullptr, tensor(i).dtype, s.dim, s.count, s.vectors, s.out));
    return scan ? this->scan(i, nullptr, FUMI_DTYPE_UNKNOWN, scan) : FUMI_OK;
  }
  bool hasSides() const {
    return host_->struct_size >=
               offsetof(fumi_host_api, contract_sides) + sizeof(host_->contract_sides) &&
           host_->project_sides && host_->contract_sides;
  }

  // The element-wise primitives (plugin.h, ABI 2): buffers laid out like tensor i, each in its
  // own dtype and memory. map writes `dst` from the call's own data of tensor i.
  fumi_status map(int32_t i, void* dst, fumi_dtype dst_dtype, const fumi_map_spec& spec,
                  uint64_t* changed = nullptr) {
    return host_->map(call_, i, nullptr, tensor(i).dtype, dst, dst_dtype, &spec, changed);
  }
  // `a` against `b` (the reference side); each nullptr for the call's own data.
  // fumi_comparison.underflow as compare leaves it where the host did not count.
  static constexpr uint64_t kNotCounted = ~uint64_t{0};
  fumi_status compare(int32_t i, const void* a, fumi_dtype a_dtype, const void* b,
                      fumi_dtype b_dtype, const fumi_compare_spec& spec, fumi_comparison* out) {
    out->struct_size = sizeof(fumi_comparison);
    out->underflow = kNotCounted;  // a host older than the field leaves it so
    return host_->compare(call_, i, a, a ? a_dtype : tensor(i).dtype, b,
                          b ? b_dtype : tensor(i).dtype, &spec, out);
  }
  fumi_status scan(int32_t i, const void* buffer, fumi_dtype dtype, fumi_scan* out) {
    out->struct_size = sizeof(fumi_scan);
    return host_->scan(call_, i, buffer, buffer ? dtype : tensor(i).dtype, out);
  }

  void report(const Verdict& verdict) { host_->report(call_, &verdict.get()); }

  // An older host has no gather_in/scatter_in: every order is then LOGICAL, still one
  // permutation for all of a check's copies.
  bool hasOrderedCopies() const {
    return host_->struct_size >= offsetof(fumi_host_api, scatter_in) + sizeof(host_->scatter_in) &&
           host_->gather_in && host_->scatter_in;
  }
  void log(fumi_log_level level, const std::string& message) const {
    host_->log(level, message.c_str());
  }

  // A seed for this call: the check instance's seed mixed with the op and its call index, so
  // noise is reproducible per call whatever the order threads check calls in.
  uint64_t callSeed(uint64_t instance_seed) const {
    return metrics::mixSeed(metrics::mixSeed(instance_seed, info_->call_index),
                            metrics::hashString(info_->op));
  }

 private:
  fumi_status fail(const char* why) const {
    log(FUMI_LOG_ERROR, std::string("host error: ") + why);
    return FUMI_ERROR;
  }

  const fumi_host_api* host_;
  fumi_call* call_;
  const fumi_call_info* info_ = nullptr;
  size_t stride_ = sizeof(fumi_tensor);
};

// Sum and largest of the element counts of `tensors`.
inline void countElements(const Context& ctx, const std::vector<int32_t>& tensors, size_t* total,
                          size_t* largest) {
  *total = 0;
  *largest = 0;
  for (int32_t i : tensors) {
    const size_t n = ctx.numel(i);
    *total += n;
    *largest = std::max(*largest, n);
  }
}

// Reruns the call in `precision` on `inputs` mapped by `kind` (FUMI_MAP_COPY: converted to the
// rerun's dtype; FUMI_MAP_ABS: |x|) straight into rerun buffers, with fresh buffers for
// `outputs`; `buffers` receives them all. `reuse`: the buffers of an earlier rerun in the same
// precision whose inputs' buffers are free now — the inputs are mapped into those (a second
// set of input copies in fp64 had put a 512-channel 7x7 convolution's backward over the
// scratch budget).
inline fumi_status rerunMapped(Context& ctx, const std::vector<int32_t>& inputs,
                               const std::vector<int32_t>& outputs, fumi_dtype precision,
                               fumi_map_kind kind, std::vector<void*>* buffers,
                               const std::vector<void*>* reuse = nullptr) {
  std::vector<int32_t> fresh;  // the inputs that get new buffers
  buffers->assign(static_cast<size_t>(ctx.tensorCount()), nullptr);
  for (int32_t i : inputs) {
    const size_t k = static_cast<size_t>(i);
    if (reuse && k < reuse->size() && (*reuse)[k])
      (*buffers)[k] = (*reuse)[k];
    else
      fresh.push_back(i);
  }
  FUMI_RETURN_IF_NOT_OK(ctx.allocLikeAll(fresh, precision, buffers));
  FUMI_RETURN_IF_NOT_OK(ctx.allocLikeAll(outputs, precision, buffers));
  for (int32_t i : inputs)
    FUMI_RETURN_IF_NOT_OK(ctx.map(i, (*buffers)[static_cast<size_t>(i)],
                                  ctx.bufferDtype(i, precision), mapSpec(kind)));
  return ctx.rerun(precision, *buffers);
}

// Outputs that are rounding noise: a sum of terms much larger than itself whose exact value is
// about zero (a convolution's bias gradient when batch norm follows, the saved mean of rows
// already normalised). Whatever the op does, such an output holds the rounding of its terms,
// and any relative figure of it — error or sensitivity — is meaningless. The terms'
// magnitudes are the op rerun on |x| (exact for sums and products: GEMM, convolution and
// their backwards give |A||B|; elsewhere a guess, and a small op(|x|) marks nothing). Output k
// is noise when ||y_k|| <= level * ||op(|x|)_k|| for the call's own output y_k and, where the
// check has it (`exact`: highprec's wider rerun, at `precision`), for the exact value as well:
// an output the op got wrong is no noise when either is not (all zeros or values flushed below
// the dtype's normals where the exact value is not; values the size of the terms where the
// exact value is rounding). The level (noiseLevel) is kNoiseRoundoffs unit roundoffs u of the
// output's dtype, or of `resolution` if larger (perturb: its shift, the inputs' own last bit —
// a bf16 input's noise reaches an f32 output such as batch norm's saved mean), and more for
// gradients; a call whose every output is at that level is noise only in the backward pass
// (see below). Costs one rerun at `precision` (its inputs in `exact`'s input buffers, which
// that rerun no longer needs); checks call it only for a verdict over tolerance.
constexpr double kNoiseRoundoffs = 4;
// A gradient that is zero in exact arithmetic is what the rounding of the ops before it left:
// each of its terms is a product of a chain of rounded ops, a few to hundreds of roundoffs off,
// and their sum is at that level of their magnitudes, however exactly this op adds them (batch
// 7's public programs: quantization-aware training's fused conv-bn, whose per-channel scale
// batch norm takes out again, at 4 to 280 roundoffs; a convolution's bias before batch norm in
// channels_last at 4 to 8). In the backward pass an output is noise up to
// kGradientNoiseRoundoffs roundoffs, for f32 and wider: where a roundoff is coarser (bf16, f16)
// at most kGradientNoiseCeiling of the terms, and never below kNoiseRoundoffs of them. A
// gradient that cancels less (batch norm's grad_weight on MobileNet, 1e4 of its terms: 1700
// roundoffs at f32) is still judged.
constexpr double kGradientNoiseRoundoffs = 1024;
constexpr double kGradientNoiseCeiling = 1.0 / 1024;

// The level below which an output with unit roundoff u is rounding noise (noiseOutputs).
inline double noiseLevel(double u, bool gradient) {
  const double level = kNoiseRoundoffs * u;
  return gradient ? std::max(level, std::min(kGradientNoiseRoundoffs * u, kGradientNoiseCeiling))
                  : level;
}

// A normalisation's saved mean (the hosts name it "save_mean": native_layer_norm,
// native_group_norm, native_batch_norm, cuDNN's batch norm) is an auxiliary output the op keeps
// for its backward, which uses it as x − mean, as the op itself did for its result. Its error
// matters against the magnitudes of the terms it averages, not against its own size: the mean
// of rows already normalised (a Transformer's final LayerNorm after the last layer's own) is a
// cancellation nothing reads, and its relative error, 1e-3 for an f32 mean as good as f32 allows,
// had raised highprec and perturb on healthy jobs (batch 13). noiseOutputs leaves such an output
// out when its deviation (the check's normwise figure for it, against its own size) is within
// `tolerance` once measured against its terms (times ||y_k|| / ||op(|x|)_k||): a mean wrong by a
// share of its rows' spread is still judged.
inline bool savedMean(const fumi_tensor& t) {
  return t.name && std::strcmp(t.name, "save_mean") == 0;
}

// `deviation` (with `tolerance`): the check's normwise figure for each output, for savedMean's.
// `of_terms`, where asked for: each output's ||y_k|| / ||op(|x|)_k||, the exact value's where the
// check has it (a sum that cancels 1e6-fold: 1e-6), for the verdict's `cancellation`.
inline fumi_status noiseOutputs(Context& ctx, const std::vector<int32_t>& inputs,
                                const std::vector<int32_t>& outputs, fumi_dtype precision,
                                std::vector<bool>* noise, double resolution = 0,
                                const std::vector<void*>* exact = nullptr,
                                const std::vector<double>* deviation = nullptr,
                                double tolerance = 0, std::vector<double>* of_terms = nullptr) {
  noise->assign(outputs.size(), false);
  if (of_terms) of_terms->assign(outputs.size(), 0.0);
  std::vector<void*> buffers;
  FUMI_RETURN_IF_NOT_OK(
      rerunMapped(ctx, inputs, outputs, precision, FUMI_MAP_ABS, &buffers, exact));
  const bool gradient = std::strcmp(phaseOf(ctx.info()), "backward") == 0;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const int32_t o = outputs[k];
    const double u = std::max(metrics::unitRoundoff(ctx.tensor(o).dtype), resolution);
    // ||y|| / ||op(|x|)||, y the call's output (null) or the exact one.
    const auto ofTerms = [&](const void* y, double* ratio) {
      fumi_comparison c;
      FUMI_RETURN_IF_NOT_OK(ctx.compare(o, y, ctx.bufferDtype(o, precision),
                                        buffers[static_cast<size_t>(o)],
                                        ctx.bufferDtype(o, precision),
                                        metrics::compareSpec(0.0, 0.0, FUMI_DTYPE_UNKNOWN, 0.0,
                                                             FUMI_COMPARE_NORMS),
                                        &c));
      *ratio = c.norm_ratio;
      return FUMI_OK;
    };
    const double level = noiseLevel(u, gradient);
    const bool mean = deviation && savedMean(ctx.tensor(o));
    double own = 0, exact_ratio = 0;
    FUMI_RETURN_IF_NOT_OK(ofTerms(nullptr, &own));
    if (exact && (own <= level || mean || of_terms))
      FUMI_RETURN_IF_NOT_OK(ofTerms((*exact)[static_cast<size_t>(o)], &exact_ratio));
    if (of_terms) (*of_terms)[k] = exact ? exact_ratio : own;
    // At noise level, as the call gave it and as it is exactly (where the check has that).
    (*noise)[k] = own <= level && (!exact || exact_ratio <= level);
    // A saved mean: its deviation against its terms (by the reference's size, else its own).
    if (mean)
      (*noise)[k] = (*noise)[k] || (*deviation)[k] * (exact ? exact_ratio : own) <= tolerance;
  }
  // A call whose every output is at that level is a cancellation to report (a GEMM whose
  // exact result is 1 from terms of 1e8): only auxiliary outputs beside meaningful ones are
  // left out. Not in the backward pass: there such a call is a gradient that is zero to within
  // its terms' rounding — a bias before a normalisation (batch norm takes out what the bias
  // adds, so its gradient is exactly 0), a parameter at its optimum — whose rounding is all
  // the op can produce; convolution_backward's grad_bias is the same output beside others.
  if (!gradient &&
      std::all_of(noise->begin(), noise->end(), [](bool is_noise) { return is_noise; }))
    noise->assign(outputs.size(), false);
  return FUMI_OK;
}

// How far the terms of a violating call's results cancel, for the verdict's extras
// `cancellation` and `error_of_terms` (addTerms), from which the host tells a result the op got
// wrong from one whose inputs cancel (docs/policy.md, "Cancellation in the data").
struct Terms {
  // ||y|| / ||op(|x|)|| of the output with the largest error (the exact value's where the check
  // has it); 0: not measured.
  double of_terms = 0;
  // The largest normwise error of any judged output against its terms' magnitudes (its error
  // times its of_terms): within the error tolerance only when every output is as accurate as
  // the precision allows against its terms.
  double error_of_terms = 0;
  // Output k's normwise error `error` whose of_terms is `ratio`; `worst` says it has the
  // largest error so far.
  void add(double error, double ratio, bool worst) {
    if (worst) of_terms = ratio;
    const double e = error * ratio;
    if (!(e <= error_of_terms)) error_of_terms = e;  // NaN (0 * inf) stays: nothing excused
  }
};

// What the noise rule (noiseOutputs) left out of a verdict: `outputs` of the call's outputs;
// `all`: every one (a backward-pass call whose every output is rounding noise of its terms),
// so nothing was judged: the verdict keeps the call's own figure, whatever it is, and is not
// raised (the host counts it; a figure of 0 had stood for such calls in the summary, and the
// maximum of an op's distribution followed the tolerance: batch 15).
struct LeftOut {
  size_t outputs = 0;
  bool all = false;
  // From noiseOutputs' flags, one per output.
  static LeftOut of(const std::vector<bool>& noise) {
    LeftOut left;
    left.outputs = static_cast<size_t>(std::count(noise.begin(), noise.end(), true));
    left.all = left.outputs > 0 && left.outputs == noise.size();
    return left;
  }
  // Some outputs left out beside judged ones: the verdict's figures are the judged outputs'.
  bool some() const { return outputs > 0 && !all; }
  // The verdict's extra `noise_outputs` and, for `all`, its override.
  void apply(Verdict& v) const {
    if (outputs) v.extra("noise_outputs", static_cast<double>(outputs));
    if (all) v.violated(false);
  }
};

// The verdict's `cancellation` (how many times the terms' magnitudes exceed the result) and
// `error_of_terms`, where measured.
inline void addTerms(Verdict& v, const Terms& t) {
  if (t.of_terms > 0)
    v.extra("cancellation", 1.0 / t.of_terms).extra("error_of_terms", t.error_of_terms);
}

// Copies `msg` into a C buffer, truncated and always NUL-terminated.
// Outputs against a reference (highprec: a wider rerun; reference: the host's own fp64
// implementation): normwise relative error, guarded max elementwise relative error and ULP error
// in the call's precision. Policy parameters `metric` (the primary one; ulp needs an explicit
// tolerance) and `guard` (max_rel leaves out reference elements below guard*max|ref|).
class ReferenceErrors {
 public:
  static std::vector<std::string> params() { return {"metric", "guard"}; }

  ReferenceErrors(const metrics::Params& p, const char* plugin)
      : primary_(p.getChoice("metric", {"normwise_rel", "max_rel", "ulp"})),
        guard_(p.getDouble("guard", std::numeric_limits<double>::quiet_NaN(),
                           metrics::Bounds{0.0, 1.0, false, /*hi_open=*/true})),
        tolerance_(p.tolerances()) {
    if (primary_ == kUlp && std::isnan(tolerance_.configured))
      throw metrics::ParamError(std::string("plugin '") + plugin +
                                "': metric 'ulp' needs an explicit tolerance (in ULPs)");
  }

  // One output of n elements: the call's `got` against `ref`. Per-call state lives in Sums.
  struct Sums {
    double metric[3] = {0.0, 0.0, 0.0};
    size_t nonfinite_skipped = 0;
    // Low-precision outputs' values flushed below their smallest normal (countUnderflow).
    uint64_t underflow = 0;
    uint64_t underflow_elements = 0;  // 0: no output counted
  };
  // Output of `n` elements compared with a spec that counted underflow (underflowBelow).
  static void countUnderflow(Sums& s, const fumi_comparison& c, uint64_t n) {
    if (c.underflow == Context::kNotCounted) return;
    s.underflow += c.underflow;
    s.underflow_elements += n;
  }
  // What to compare an output computed in `precision` with its reference (Context::compare).
  fumi_compare_spec spec(fumi_dtype precision) const {
    const double guard = std::isnan(guard_) ? metrics::defaultGuard(precision) : guard_;
    return metrics::compareSpec(0.0, guard, precision, 0.0,
                                FUMI_COMPARE_NORMS | FUMI_COMPARE_MAX_REL | FUMI_COMPARE_ULP);
  }
  // `out`: the compared output's dtype. Where no element differs from its reference by half
  // that dtype's smallest subnormal, the output is its reference correctly rounded: exact (an
  // f32 exp(-120) is 0, 7.6e-53 being no f32 value; every call raised it, normwise 1: batch 28).
  void add(Sums& s, const fumi_comparison& c, fumi_dtype out = FUMI_DTYPE_UNKNOWN) const {
    if (c.max_abs_diff <= 0.5 * metrics::smallestSubnormal(out) && c.nonfinite == 0) return;
    s.metric[kNormwise] = std::max(s.metric[kNormwise], c.normwise);
    s.metric[kMaxRel] = std::max(s.metric[kMaxRel], c.max_rel);
    s.metric[kUlp] = std::max(s.metric[kUlp], c.ulp);
    s.nonfinite_skipped += c.nonfinite;
  }
  // The same for dense fp64 arrays (the host's reference).
  void add(Sums& s, const double* got, const double* ref, size_t n, fumi_dtype precision) const {
    add(s, metrics::compareDense(got, ref, n, spec(precision)));
  }
  static void merge(Sums& into, const Sums& from) {
    for (size_t m = 0; m < 3; ++m) into.metric[m] = std::max(into.metric[m], from.metric[m]);
    into.nonfinite_skipped += from.nonfinite_skipped;
    into.underflow += from.underflow;
    into.underflow_elements += from.underflow_elements;
  }
  // Whether the primary metric is over the tolerance.
  bool violates(Context& ctx, const Sums& s) const {
    return !(s.metric[primary_] <= tolerance(ctx));
  }
  static double normwise(const Sums& s) { return s.metric[kNormwise]; }
  // The tolerance a relative figure such as normwise is held to (NaN: the primary metric counts
  // ULPs).
  double relativeTolerance(Context& ctx) const {
    return primary_ == kUlp ? std::numeric_limits<double>::quiet_NaN() : tolerance(ctx);
  }
  // The verdict: primary metric against the tolerance (the policy's, else the dtype table's for
  // the call's effective precision), the others as extras. `left`: outputs left out as
  // rounding noise (noiseOutputs).
  // `terms` (where measured): how far the results' terms cancel (addTerms): a kernel as good as
  // its precision allows keeps its error against their magnitudes near a unit roundoff however
  // far they cancel.
  void report(Context& ctx, const Sums& s, const std::string& detail,
              const LeftOut& left = LeftOut(), const Terms& terms = Terms()) const {
    static constexpr const char* kNames[3] = {"normwise_rel", "max_rel", "ulp"};
    Verdict v(kNames[primary_], s.metric[primary_], tolerance(ctx));
    for (size_t m = 0; m < 3; ++m)
      if (m != primary_) v.extra(kNames[m], s.metric[m]);
    v.extra("nonfinite_skipped", static_cast<double>(s.nonfinite_skipped)).detail(detail.c_str());
    left.apply(v);
    if (primary_ != kUlp) addTerms(v, terms);  // relative figures: the host compares them
    if (s.underflow_elements)  // the fraction of a low-precision output's values flushed
      v.extra("underflow",
              static_cast<double>(s.underflow) / static_cast<double>(s.underflow_elements));
    ctx.report(v);
  }

 private:
  double tolerance(Context& ctx) const { return errorToleranceFor(tolerance_, ctx.info()); }
  enum Metric : size_t { kNormwise = 0, kMaxRel = 1, kUlp = 2 };
  const size_t primary_;
  const double guard_;  // NaN: metrics::defaultGuard of the call's precision
  const metrics::Tolerance tolerance_;
};

inline void copyMessage(char* dst, size_t len, const std::string& msg) {
  if (dst && len > 0) std::snprintf(dst, len, "%s", msg.c_str());
}

// The C ABI of a check class: create / check / destroy with every exception caught.
template <class Check>
struct Glue {
  struct Instance {
    const fumi_host_api* host;
    Check check;
  };

  static void* create(const fumi_host_api* host, const fumi_params* params, char* err,
                      size_t err_len) noexcept {
    try {
      const std::string why = hostProblem(host);
      if (!why.empty()) {
        copyMessage(err, err_len, std::string("plugin '") + Check::kName + "': " + why);
        return nullptr;
      }
      const metrics::Params p(params, Check::kName, Check::knownParams());
      return new Instance{host, Check(p)};
    } catch (const std::exception& e) {
      copyMessage(err, err_len, e.what());
    } catch (...) {
      copyMessage(err, err_len, std::string("plugin '") + Check::kName + "': unknown error");
    }
    return nullptr;
  }

  static fumi_status check(void* instance, fumi_call* call) noexcept {
    if (!instance) return FUMI_ERROR;
    const Instance* self = static_cast<const Instance*>(instance);
    try {
      Context ctx(self->host, call);
      FUMI_RETURN_IF_NOT_OK(ctx.open());
      return self->check.run(ctx);
    } catch (const std::bad_alloc&) {
      logFailure(self->host, "out of memory");
    } catch (const std::exception& e) {
      logFailure(self->host, e.what());
    } catch (...) {
      logFailure(self->host, "unknown exception");
    }
    return FUMI_ERROR;
  }

  static void destroy(void* instance) noexcept { delete static_cast<Instance*>(instance); }

  static constexpr fumi_plugin kPlugin = {FUMI_PLUGIN_ABI_VERSION,
                                          sizeof(fumi_plugin),
                                          Check::kName,
                                          Check::kDescription,
                                          &create,
                                          &check,
                                          &destroy,
                                          Check::kKind};

 private:
  // Empty when the host API is one this plugin can use.
  static std::string hostProblem(const fumi_host_api* host) {
    if (!host) return "no host API";
    if (host->abi_version != FUMI_PLUGIN_ABI_VERSION)
      return "host ABI version " + std::to_string(host->abi_version) + ", plugin speaks " +
             std::to_string(FUMI_PLUGIN_ABI_VERSION);
    // `reference` was appended: hosts without it still serve every other plugin.
    if (host->struct_size < offsetof(fumi_host_api, reference)) return "host API struct too small";
    if (!host->call_info || !host->alloc || !host->alloc_like || !host->numel || !host->gather ||
        !host->scatter || !host->rerun || !host->report || !host->log)
      return "host API has missing entry points";
    // ABI 2's element-wise primitives: every host speaking 2 has them.
    if (host->struct_size < offsetof(fumi_host_api, scan) + sizeof(host->scan) || !host->map ||
        !host->compare || !host->scan)
      return "host API lacks the element-wise primitives of ABI 2";
    return {};
  }

  static void logFailure(const fumi_host_api* host, const char* what) noexcept {
    try {
      host->log(FUMI_LOG_ERROR, (std::string("plugin '") + Check::kName + "': " + what).c_str());
    } catch (...) {
    }
  }
};

}  // namespace fumi::plugin

// Defines the one exported symbol of a plugin library for check class `Check`.
#define FUMI_DEFINE_PLUGIN_ENTRY(Check)                               \
  extern "C" FUMI_EXPORT const fumi_plugin* fumi_plugin_entry(void) { \
    return &::fumi::plugin::Glue<Check>::kPlugin;                     \
  }
