// loss_scaling.cpp — held NaN/Inf findings of the backward pass (loss_scaling.h).
#include "loss_scaling.h"

#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include <spdlog/spdlog.h>

#include "engine.h"
#include "nan_search.h"
#include "plugin_loader.h"
#include "report.h"
#include "runtime.h"
#include "site.h"

namespace fumi {

namespace {

struct Held {
  OpSite* site;
  std::string key;
  nlohmann::json event;
};

std::mutex g_mu;
std::vector<Held>* g_held = new std::vector<Held>;  // never freed: used at exit
uint64_t g_consecutive = 0;   // handled overflows since the last clean optimizer step
uint64_t g_overflow_steps = 0;   // steps whose overflow a scaler handled
uint64_t g_optimizer_steps = 0;  // optimizer steps (Optimizer.step ranges)
// Non-finite values a sentinel saw since the last marker, whatever checks were sampled: the
// site of the last (a step a scaler skips counts as an overflow step by them alone).
OpSite* g_seen = nullptr;
bool g_collapse_reported = false;
bool g_training = false;      // an optimizer range or GradScaler op was seen
bool g_accumulated = false;   // a gradient was accumulated since the last resolve

const LossScalingSettings* settings() {
  Engine* e = engine();
  return e ? &e->policy().loss_scaling : nullptr;
}

void writeRaised(Held& h, const char* why) {
  h.site->addHeldViolation(h.key);
  Reporter* rep = activeReporter();
  if (!rep) return;
  h.event["loss_scaling"] = why;
  // Seen appearing at its call, it is the NaN origin: claimed now that it is raised (held, it
  // claimed nothing, and later searches said "origin not found" beside it: batch 25).
  const std::string detail = h.event.value("detail", std::string());
  if (!h.event.value("origin", false) && (detail == "appeared" || detail == "nan_from_inf")) {
    std::vector<std::string> py;
    if (const auto it = h.event.find("python_stack"); it != h.event.end() && it->is_array())
      for (const auto& frame : *it)
        if (frame.is_string()) py.push_back(frame.get<std::string>());
    const std::string phase = h.event.value("phase", std::string());
    if (nlohmann::json fields = nanOriginEventFields(
            h.site, h.event.value("call_index", uint64_t{0}), detail.c_str(), py, phase.c_str());
        !fields.is_null())
      h.event.update(fields);
  }
  if (h.site->logsViolation(h.key))
    rep->log().warn("violation: {} {} (NaN/Inf {})", h.site->name, h.key, why);
  rep->event(std::move(h.event));
}

// Resolve every held finding; called with g_mu held. Not raised (a zero_grad, a scaler's
// unscale) where no gradient was accumulated since the last resolve: raised, "not_accumulated",
// and no overflow step counted (batch 34: HNN's Inf inside autograd.grad counted "handled by
// the loss scaler" in a job with none).
void resolve(bool raised, const char* why) {
  if (!raised && !g_accumulated) {
    raised = true;
    why = "not_accumulated";
  }
  g_accumulated = false;
  OpSite* const seen = g_seen;
  g_seen = nullptr;
  if (g_held->empty() && (raised || !seen)) return;
  std::vector<Held> held;
  held.swap(*g_held);
  OpSite* last = held.empty() ? seen : held.back().site;
  for (Held& h : held) {
    // The scaled loss overflowing in the forward pass reaches no gradient (the backward pass
    // takes the scale, not the product): an optimizer step after it is no error of its own.
    const bool scaled = h.event.value("detail", std::string()) == "scaled_overflow";
    if (raised && !(scaled && std::strncmp(why, "reached_", 8) == 0)) {
      writeRaised(h, why);
      continue;
    }
    h.site->addHandledOverflow();
    // A batch 24 job skipping its overflowed steps by design: a softmax's NaN of an all-masked
    // row, steps later, was taken for the spread of the loss's scaled overflow, which the scaler
    // had handled, and never reported.
    if (h.event.value("origin", false))
      nanOriginHandled(h.event.value("op", std::string()),
                       h.event.value("call_index", uint64_t{0}));
  }
  if (raised) return;
  ++g_overflow_steps;
  ++g_consecutive;
  const LossScalingSettings* cfg = settings();
  if (!cfg || g_collapse_reported || g_consecutive <= static_cast<uint64_t>(cfg->max_consecutive))
    return;
  g_collapse_reported = true;
  reportHostViolation(*last, 0, "loss_scaling", FUMI_KIND_ERROR, "consecutive_overflows",
                      static_cast<double>(g_consecutive),
                      static_cast<double>(cfg->max_consecutive),
                      {{"detail", "the loss scaler keeps finding overflowed gradients: "
                                  "the scale collapses and training stalls"},
                       {"rule", "loss_scaling"}});
}

}  // namespace

ScalerMarker scalerMarkerOf(const char* name) {
  if (std::strncmp(name, "Optimizer.zero_grad", 19) == 0) return ScalerMarker::kZeroGrad;
  if (std::strncmp(name, "Optimizer.step", 14) == 0) return ScalerMarker::kStep;
  if (std::strcmp(name, "aten::_amp_foreach_non_finite_check_and_unscale_") == 0)
    return ScalerMarker::kUnscale;
  return ScalerMarker::kNone;
}

bool lossScalingHolds(const std::string& metric, const char* phase, const std::string& detail) {
  const LossScalingSettings* cfg = settings();
  return metric == "nonfinite" && cfg && cfg->enabled &&
         ((phase && std::strcmp(phase, "backward") == 0) || detail == "scaled_overflow");
}

void lossScalingSawNonFinite(OpSite& site) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_seen = &site;
}

void holdViolation(OpSite& site, const std::string& key, nlohmann::json ev) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_held->push_back(Held{&site, key, std::move(ev)});
}

void scalerMarker(ScalerMarker m) {
  if (m == ScalerMarker::kNone) return;
  InsideScope inside;
  std::lock_guard<std::mutex> lock(g_mu);
  g_training = true;
  if (m == ScalerMarker::kStep) {
    ++g_optimizer_steps;
    const bool clean = g_held->empty();
    resolve(/*raised=*/true, "reached_optimizer");
    if (clean) g_consecutive = 0;
    return;
  }
  resolve(/*raised=*/false, nullptr);  // zero_grad, or GradScaler inspecting the gradients
}

void lossScalingAccumulated() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_accumulated = true;
}

int lossScalingHeld() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_held->empty() ? 0 : 1;
}

void lossScalingReachedParameters(OpSite&) {
  InsideScope inside;
  std::lock_guard<std::mutex> lock(g_mu);
  resolve(/*raised=*/true, "reached_parameters");
}

void lossScalingAtExit() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_training) {
    if (!g_held->empty() || g_seen) ++g_overflow_steps;
    g_seen = nullptr;
    for (Held& h : *g_held) h.site->addHandledOverflow();
    g_held->clear();
  } else {
    resolve(/*raised=*/true, "no_optimizer_step");
  }
}

void lossScalingAfterFork() {
  new (&g_mu) std::mutex();  // another thread may have held it at the fork
  g_held = new std::vector<Held>;  // the parent's findings stay the parent's to resolve
  g_seen = nullptr;
  g_consecutive = g_overflow_steps = g_optimizer_steps = 0;
  g_collapse_reported = g_training = false;
}

nlohmann::json lossScalingSummary() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_training) return nullptr;
  return {{"optimizer_steps", g_optimizer_steps}, {"overflow_steps", g_overflow_steps}};
}

}  // namespace fumi
