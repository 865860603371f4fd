// loss_scaling.h — overflow that a loss scaler handles is counted, not raised (issue 16).
//
// Mixed-precision training multiplies the loss by a scale so that small gradients survive the
// low-precision backward pass; when the scale is too large the backward pass overflows, the
// scaler sees non-finite gradients, skips the optimizer step and lowers the scale. That Inf is
// the scaler working, not an error. So a NaN/Inf finding (`nan_inf`, a NaN origin) of an op in
// the backward phase is held, not written, until what happens to the gradients shows:
//   handled   torch's GradScaler inspects them (aten::_amp_foreach_non_finite_check_and_unscale_)
//             or the optimizer zeroes them (an Optimizer.zero_grad range) before any optimizer
//             step: counted per op as `handled_overflow`, and per step in the summary's
//             `loss_scaling.overflow_steps`;
//   raised    an optimizer step (Optimizer.step range) begins first: the non-finite gradients
//             reach the parameters; every held finding becomes its violation, "loss_scaling":
//             "reached_optimizer" (but the scaled loss's own overflow, "scaled_overflow": the
//             backward pass takes the scale, not the overflowed product; counted handled);
//             or an op outside an optimizer step writes NaN/Inf into a parameter first (SAM's
//             ascent step reads the gradients into the weights, then zeroes them): raised,
//             "reached_parameters". A raised finding that saw the values appear at its call is
//             the NaN origin (claimed then, not when held);
//   collapse  more than `max_consecutive` handled overflows in a row without a clean optimizer
//             step between them (the scale keeps dropping, training stalls): one violation of
//             check `loss_scaling`, metric `consecutive_overflows`. A step is an overflow step
//             by what a NaN sentinel saw in it too (lossScalingSawNonFinite), so that sampling
//             does not hide a collapse (batch 22: a log(0) every step, 50 skipped, nothing said);
//   at exit   findings still held are raised when the process never ran an optimizer (no
//             training); in a training process they are counted as handled (the last step's
//             overflow, skipped as the loop ended).
// Policy: `loss_scaling: { enabled, max_consecutive }` (docs/policy.md#loss-scaling).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "fumi/plugin.h"

namespace fumi {

struct OpSite;

// What a framework range or op means to the scaler logic; set once per site (site.h).
enum class ScalerMarker : uint8_t { kNone = 0, kZeroGrad, kStep, kUnscale };
ScalerMarker scalerMarkerOf(const char* site_name);

// Whether a violation of `metric` by a call in `phase` is held instead of written: NaN/Inf
// findings ("nonfinite", of nan_inf checks and NaN origins) of the backward pass, and in any
// phase the origin `detail` "scaled_overflow" (a one-element Inf from multiplying finite values
// by a one-element factor above 1: the forward pass's loss times its scale).
bool lossScalingHolds(const std::string& metric, const char* phase, const std::string& detail = "");
// A NaN sentinel or search saw non-finite values in an op of `site` (loss scaling's step
// accounting).
void lossScalingSawNonFinite(OpSite& site);
// Hold violation event `ev` of `site` (metric `key`, already recorded as not violated).
void holdViolation(OpSite& site, const std::string& key, nlohmann::json ev);
// Whether findings are held (adapter ABI 18 held_findings).
int lossScalingHeld();
// autograd's AccumulateGrad ran (adapter ABI 20 gradient_accumulated): a parameter's gradient
// written, what a scaler's skip handles. A backward pass returning its gradients (autograd.grad,
// create_graph: an input gradient feeding the loss, HNN's, a gradient penalty's) writes none:
// its NaN/Inf goes on into the forward computation, no scaler's to handle.
void lossScalingAccumulated();
// An op of `site` outside an optimizer step wrote NaN/Inf into a parameter: what is held
// reached the parameters (raised, "reached_parameters").
void lossScalingReachedParameters(OpSite& site);
// A marked range or op began on this thread (context.cpp).
void scalerMarker(ScalerMarker m);
// At exit: resolve what is still held.
void lossScalingAtExit();
// In a forked child (a DataLoader worker): a process of its own that has trained nothing yet.
// The parent's held findings are not the child's (they would be written twice).
void lossScalingAfterFork();
// For the summary, in a training process (null otherwise): optimizer steps taken and steps whose
// overflow a scaler handled (skipped steps).
nlohmann::json lossScalingSummary();

}  // namespace fumi
