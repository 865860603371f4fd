// nan_search.cpp — sentinel, search and step-down for the origin of NaN/Inf (nan_search.h).
#include "nan_search.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <mutex>
#include <set>
#include <string>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "context.h"
#include "engine.h"
#include "nan_makers.h"
#include "pystack.h"
#include "report.h"
#include "runtime.h"
#include "site.h"
#include "stack.h"

namespace fumi {

std::atomic<int> g_nan_search_active{0};

namespace {

// Optimizer steps the process has begun (nanSearchStep), whether a search runs or not.
std::atomic<uint64_t> g_steps{0};
// How many steps after an origin NaN made from Inf is taken for its spread (spreadOfEarlier):
// the spread shows within a step or two (an optimizer's moments); a NaN from Inf of the
// program's own (a masked row) that soon after an unrelated origin is missed.
constexpr uint64_t kSpreadSteps = 3;

// Everything below is touched on the slow path only (a sentinel fired or a search runs).
struct SearchState {
  std::mutex mu;
  int64_t searches = 0;
  int64_t repeats = 0;
  int64_t steps_left = 0;
  int64_t ops = 0;
  std::string sentinel_op;
  uint64_t sentinel_index = 0;
  const char* sentinel_phase = "";  // a static string (currentPhase)
  uint64_t sentinel_step = 0;       // g_steps when it fired
  std::string first_propagated;  // "aten::addmm (input 'weight')"
  std::string looked_back;  // what looking back from the sentinel found, when no origin
  // Ops already reported as origins; of those, the ones reported with the Python frames of
  // their call (op and frames, whereKey), and the ones found looking back whose frames are not
  // known. One op's origins at different lines are different defects (batch 23: two losses'
  // 0/0 over an all-ignored batch, 60 steps apart: the second went unreported).
  std::set<std::string> origins, origins_where, origins_unplaced;
  // The optimizer step the last origin made in a forward pass was made in (claim), and that
  // origin ("aten::log #1").
  uint64_t forward_origin_step = UINT64_MAX;
  std::string forward_origin;
  // The last origin of a backward pass: its step, the pass (backwardPasses) and its call.
  uint64_t backward_origin_step = UINT64_MAX, backward_origin_pass = 0;
  std::string backward_origin;
  // The calls running around the last origin claimed at its call (nanOriginClaim): one of them
  // returns what it made.
  std::vector<ContextEntry> origin_callers;
  // The calls claimed as origins (op site, call index): a look-back whose values came through
  // one is that origin's spread.
  std::set<std::pair<const OpSite*, uint64_t>> origin_calls;
  // Ops claimed as a loss scale's overflow (detail "scaled_overflow": the loss times its scale,
  // one element, past the dtype's range), or whose origin a loss scaler handled (its backward
  // pass's 0 * inf of the overflowed scale): a loss scaler's working.
  std::set<std::string> scaled;
  std::string last_origin;        // the last one reported: "aten::sqrt #1"
  uint64_t last_origin_step = 0;  // g_steps when it was reported
  // The op the running search found looking back (reported without a native stack): the search
  // goes on for its stacks, should it make non-finite values from finite inputs again.
  // Only a call in the same phase (forward, backward) gives them: the same op's calls in the
  // backward pass are other lines (batch 20: a CRF's forward `num - den` was shown at the
  // `loss.backward()` of a LogsumexpBackward0's subtraction).
  // Where the origin ran, where its Python place was kept (its innermost frame): only a call
  // there gives its stacks (another line's call of the op is another defect's).
  std::string awaiting_stack;
  uint64_t awaiting_index = 0;
  const char* awaiting_phase = "";  // a static string (currentPhase)
  std::string awaiting_frame;
};

SearchState* g_search = new SearchState;  // immortal: used by the exit summary

SearchState& state() { return *g_search; }

nlohmann::json sentinelJson(const SearchState& s) {
  return {{"op", s.sentinel_op},
          {"call_index", s.sentinel_index},
          {"phase", s.sentinel_phase},
          {"optimizer_step", s.sentinel_step}};
}

// Ends the running search (caller holds the lock): a `nan_search` event unless it ends quietly,
// as it does once it has found an origin looking back (the origin's event says so).
void endSearch(SearchState& s, const char* result, const std::string& message) {
  g_nan_search_active.store(0, std::memory_order_relaxed);
  const bool found_before = !s.awaiting_stack.empty();
  s.awaiting_stack.clear();
  // Nothing made them from finite values, begun within kSpreadSteps optimizer steps of an
  // origin reported and not handled by a loss scaler: that origin's spread (a mean teacher's
  // weights, written NaN through `.data` by an EMA whose decay was 1/0, read by the next
  // forward pass: batch 26 said "origin not found" beside the origin). A repeat, quietly.
  if (result && std::strcmp(result, "not_found") == 0 && !found_before &&
      !s.last_origin.empty() && s.sentinel_step >= s.last_origin_step &&
      s.sentinel_step - s.last_origin_step <= kSpreadSteps) {
    ++s.repeats;
    return;
  }
  Reporter* rep = activeReporter();
  if (!rep || !result || found_before) return;
  nlohmann::json ev;
  ev["event"] = "nan_search";
  ev["result"] = result;
  ev["sentinel"] = sentinelJson(s);
  ev["ops_scanned"] = s.ops;
  // an origin reported before it (its message says so too): maybe that origin's spread
  if (!s.last_origin.empty()) ev["after_origin"] = s.last_origin;
  ev["message"] = message;
  rep->event(std::move(ev));
  rep->log().warn("NaN/Inf search {}: {}", result, message);
}

const NanOriginSettings* settings() {
  Engine* e = engine();
  return e ? &e->policy().nan_origin : nullptr;
}

// What a search that found no origin can say: the first op after the
// sentinel with them in an input (not the first op that ever had them: the sentinel's own
// inputs may have, and ops before it; batch 16's NeRF named its `.item()`), what looking back
// from the sentinel saw, and the origin reported before, if any.
std::string seenSoFar(const SearchState& s) {
  std::string text;
  if (!s.first_propagated.empty())
    text = "; the first op after the sentinel seen receiving them was " + s.first_propagated;
  if (!s.looked_back.empty()) text += "; looking back from the sentinel: " + s.looked_back;
  if (!s.last_origin.empty())
    text += "; an origin was reported earlier in the process (" + s.last_origin +
            "): an optimizer step after it spreads its values into the parameters";
  return text;
}

std::string callText(const OpSite* site, uint64_t index) {
  return std::string(site ? site->name : "?") + " #" + std::to_string(index);
}

// NaN made from Inf within kSpreadSteps optimizer steps of a reported origin: that origin's
// values spreading (an optimizer's 0 * inf on the Inf the first one put into a moment estimate:
// batch 18 read it as a second origin), not a new one (caller holds the lock). Later, an origin
// of its own (the first's values gone, or it never reached the parameters).
// So is a Python number that is not finite, that soon after an origin: the origin's value read
// out with `.item()` (batch 38: a target scaled by the std of an empty slice, `y / y[n:n].std()
// .item()`, the division named a second origin "made of a non-finite scalar argument").
bool spreadOfEarlier(const SearchState& s, const char* detail) {
  return detail &&
         (std::strcmp(detail, "nan_from_inf") == 0 || std::strcmp(detail, "nonfinite_scalar") == 0) &&
         !s.last_origin.empty() &&
         g_steps.load(std::memory_order_relaxed) - s.last_origin_step <= kSpreadSteps;
}

// What tells one call of an op from another in the program: its innermost Python frames
// ("file:line in function") of the program's own code (of the others' where it has none), as
// many as a Python place keeps, joined; empty where there are none (no Python, another thread).
// A live call's stack (capturePythonStack: the program's frames first) and an origin's place
// found looking back give the same key.
std::string whereKey(const std::vector<std::string>& frames) {
  std::string key;
  const bool own = !frames.empty() && programFrame(frames.front());
  for (size_t i = 0; i < frames.size() && i < FUMI_PY_PLACE_FRAMES; ++i) {
    if (programFrame(frames[i]) != own) break;
    key += "\n" + frames[i];
  }
  return key;
}

// A search that ended at a loss scaler's working (`scaled`: an op claimed as the scaled loss's
// overflow, or whose origin a scaler handled) does not count against max_searches: a job whose
// scaler overflows by design every few steps spent them all in its first steps, and a softmax's
// NaN later went unsearched (batch 24). Such overflows are rare in real jobs (a scale grows
// every few thousand steps), each search ending in the step it began. Caller holds the lock.
void uncountScalerSearch(SearchState& s, const std::string& op) {
  if (s.scaled.count(op) && s.searches) --s.searches;
}

// nanOriginClaim with the lock held. The spread of an earlier origin claims nothing and leaves
// a running search as it is. `where`: whereKey of the call's Python frames: the calling
// thread's where the call is the op's own (the op running), those of its Python place where it
// was found looking back (the thread is at the sentinel), else empty. `phase` and `step`: the
// call's (the optimizer step it ran in).
nlohmann::json claim(SearchState& s, const OpSite* site, uint64_t index, const char* detail,
                     const std::string& where, const char* phase, uint64_t step,
                     std::string* spread_of = nullptr) {
  if (spreadOfEarlier(s, detail)) {
    if (spread_of) *spread_of = "made of the values of the NaN/Inf origin " + s.last_origin;
    return nullptr;
  }
  const bool searching = g_nan_search_active.load(std::memory_order_relaxed);
  const std::string placed = where.empty() ? std::string() : site->name + where;
  // NaN/Inf made in the backward pass of a step whose forward pass made an origin: that
  // origin's gradient formulas (DivBackward0's division of a forward 0/0, LogBackward0's of a
  // log(0): batches 26 and 27 reported each beside its forward origin), their line the
  // `backward()` call's, which tells nothing; the origin explains them (`fumi report` said so
  // of such a second origin). A repeat.
  // So is NaN/Inf made in a later backward pass of the step of a backward origin: a double
  // backward's (autograd.grad's 0/0, then loss.backward()'s DivBackward0 of it: batch 34's HNN).
  const bool backward = phase && std::strcmp(phase, "backward") == 0;
  const uint64_t pass = backwardPasses();
  const bool of_forward = backward && s.forward_origin_step == step;
  const bool gradient = of_forward || (backward && s.backward_origin_step == step &&
                                       s.backward_origin_pass < pass);
  // One call is one origin, however it was found (a nan_inf check's finding, then the
  // sentinel's of the same call placed at its forward call's line).
  const bool repeat = gradient || s.origin_calls.count({site, index}) > 0 ||
                      (placed.empty() ? s.origins.count(site->name) > 0
                                                  : s.origins_where.count(placed) > 0 ||
                                                        s.origins_unplaced.count(site->name) > 0);
  if (repeat) {
    ++s.repeats;  // the same origin again: already reported
    if (spread_of)
      *spread_of = gradient ? "made in the gradient of the NaN/Inf origin " +
                                  (of_forward ? s.forward_origin : s.backward_origin)
                            : "the NaN/Inf origin " + std::string(site->name) +
                                  " again, reported before";
    // A search awaiting an origin's stacks goes on: its op's calls in another phase (the
    // backward's division of a forward division's 0/0) are no stacks of it, and ending there
    // left a spectral norm's 0/0 without its line (batch 26).
    if (searching && s.awaiting_stack.empty()) {
      uncountScalerSearch(s, site->name);
      endSearch(s, nullptr, "");
    }
    return nullptr;
  }
  nlohmann::json sentinel;
  const bool scaled = detail && std::strcmp(detail, "scaled_overflow") == 0;
  if (scaled) s.scaled.insert(site->name);
  if (searching) {
    sentinel = sentinelJson(s);
    if (scaled) uncountScalerSearch(s, site->name);
    endSearch(s, "found", callText(site, index));
  } else {
    // A sentinel that is its own origin (its inputs were finite): no search is needed, but it
    // counts as one against max_searches, unless it is the scaled loss's overflow (above).
    const NanOriginSettings* cfg = settings();
    if (!cfg || !cfg->enabled || (!scaled && s.searches >= cfg->max_searches)) return nullptr;
    if (!scaled) ++s.searches;
    sentinel = {{"op", site->name}, {"call_index", index}};
  }
  s.origins.insert(site->name);
  s.origin_calls.insert({site, index});
  if (placed.empty()) s.origins_unplaced.insert(site->name);
  else s.origins_where.insert(placed);
  if (phase && std::strcmp(phase, "forward") == 0) {
    s.forward_origin_step = step;
    s.forward_origin = callText(site, index);
  } else if (backward) {
    s.backward_origin_step = step;
    s.backward_origin_pass = pass;
    s.backward_origin = callText(site, index);
  }
  s.last_origin = callText(site, index);
  s.last_origin_step = g_steps.load(std::memory_order_relaxed);
  return sentinel;
}

}  // namespace

void nanSentinel(const OpSite* site, uint64_t index) {
  const NanOriginSettings* cfg = settings();
  if (!cfg || !cfg->enabled || g_nan_search_active.load(std::memory_order_relaxed)) return;
  SearchState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (g_nan_search_active.load(std::memory_order_relaxed) || s.searches >= cfg->max_searches)
    return;
  ++s.searches;
  s.steps_left = cfg->steps + 1;  // the rest of this step, then `steps` whole ones
  s.ops = 0;
  s.sentinel_op = site ? site->name : "?";
  s.sentinel_index = index;
  s.sentinel_phase = currentPhase();
  s.sentinel_step = g_steps.load(std::memory_order_relaxed);
  s.first_propagated.clear();
  s.looked_back.clear();
  g_nan_search_active.store(1, std::memory_order_relaxed);
  if (Reporter* rep = activeReporter())
    rep->log().info("non-finite values in {} #{}: searching every op for where they appear",
                    s.sentinel_op, index);
}

uint64_t optimizerSteps() { return g_steps.load(std::memory_order_relaxed); }

void nanSearchStep() {
  g_steps.fetch_add(1, std::memory_order_relaxed);
  if (!g_nan_search_active.load(std::memory_order_relaxed)) return;
  SearchState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!g_nan_search_active.load(std::memory_order_relaxed) || --s.steps_left > 0) return;
  const NanOriginSettings* cfg = settings();
  endSearch(s, "not_found",
            "no op made NaN/Inf from finite inputs within " +
                std::to_string(cfg ? cfg->steps : 0) +
                " optimizer steps after the sentinel" +
                (s.first_propagated.empty()
                     ? " (no op saw non-finite values again: the cause did not recur)"
                     : " (they were already in the inputs, parameters, optimizer state or data "
                       "when the search began)") +
                seenSoFar(s));
}

bool nanSearchOp() {
  SearchState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!g_nan_search_active.load(std::memory_order_relaxed)) return false;
  const NanOriginSettings* cfg = settings();
  if (cfg && ++s.ops > cfg->max_ops) {
    endSearch(s, "not_found",
              "no origin within " + std::to_string(cfg->max_ops) + " scanned ops (nan_origin.max_ops)");
    return false;
  }
  return true;
}

void nanPropagated(const OpSite* site, const char* input) {
  SearchState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.first_propagated.empty() || !site) return;
  s.first_propagated = std::string(site->name) + " (input '" + (input ? input : "?") + "')";
}

namespace {

// nanOrigin's bookkeeping alone, for a caller that reports the call itself (a sampled nan_inf
// check that saw the values appear from finite inputs): ends a search running (found), or
// counts as one; the sentinel to write on the call's event ({"op", "call_index"}), or null
// where the call is not reported as an origin (its op already was one, origins are off, or
// max_searches are spent, or `detail` "nan_from_inf" soon after an earlier origin: its spread).
// `python_stack`: the call's Python frames as its event carries them (taken at the call; a
// check run behind it passes those taken then), which tell its origins at different lines
// apart. `phase`: the call's, where it is not the calling thread's current one. `spread_of`,
// where the call is an origin's repeat or spread: how it relates to that origin (its event's
// `spread_of`, for the report to say).
nlohmann::json nanOriginClaim(const OpSite* site, uint64_t index, const char* detail,
                              const std::vector<std::string>& python_stack,
                              const char* phase = nullptr, std::string* spread_of = nullptr) {
  if (!site) return nullptr;
  const std::string where = whereKey(python_stack);
  std::vector<ContextEntry> callers = currentContext(site, index);
  SearchState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  // A call around the origin last claimed at its call returns what that one made (every call
  // checked: nll_loss_nd around nll_loss_forward, two origins for one NaN: batch 28).
  if (std::any_of(s.origin_callers.begin(), s.origin_callers.end(),
                  [&](const ContextEntry& e) { return e.site == site && e.call_index == index; })) {
    ++s.repeats;
    if (spread_of && !s.last_origin.empty())
      *spread_of = "returns what the NaN/Inf origin " + s.last_origin + " made inside it";
    return nullptr;
  }
  nlohmann::json sentinel = claim(s, site, index, detail, where,
                                  phase ? phase : currentPhase(),
                                  g_steps.load(std::memory_order_relaxed), spread_of);
  if (!sentinel.is_null()) s.origin_callers = std::move(callers);
  return sentinel;
}

// The fields an origin's violation event carries: `origin`, the optimizer step it was made in
// (`optimizer_step`) and its claimed `sentinel`.
nlohmann::json originFields(nlohmann::json sentinel) {
  return {{"origin", true}, {"optimizer_step", optimizerSteps()}, {"sentinel", std::move(sentinel)}};
}

}  // namespace

nlohmann::json nanOriginEventFields(const OpSite* site, uint64_t index, const char* detail,
                                    const std::vector<std::string>& python_stack,
                                    const char* phase) {
  std::string spread_of;
  nlohmann::json sentinel = nanOriginClaim(site, index, detail, python_stack, phase, &spread_of);
  if (!sentinel.is_null()) return originFields(std::move(sentinel));
  if (!spread_of.empty()) return {{"spread_of", std::move(spread_of)}};  // every call: batch 30
  return nullptr;
}

namespace {
// Whether the Python frames `py` run a checkpointed segment again in the backward pass
// (torch.utils.checkpoint): its forward ops, at their own lines.
bool recomputing(const std::vector<std::string>& py) {
  return std::any_of(py.begin(), py.end(), [](const std::string& frame) {
    return frame.find("torch/utils/checkpoint.py") != std::string::npos;
  });
}
}  // namespace

// The search found again, with the stacks of the calling thread, the origin it found looking
// back: a `nan_origin_stack` event for the report to attach to that origin. False when the
// search awaits no such stack. A forward origin's stacks come from a forward call of it, or from
// its checkpointed segment's recomputation in the backward pass (batch 25: a DenseNet's planted
// log, named without a line, which the recomputation ran again at it).
bool originStack(const OpSite* site, uint64_t index) {
  uint64_t origin_index = 0;
  bool recompute = false;
  std::string frame;  // the origin's innermost, where its place was kept
  {
    SearchState& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    if (!site || s.awaiting_stack != site->name ||
        !g_nan_search_active.load(std::memory_order_relaxed))
      return false;
    if (std::strcmp(s.awaiting_phase, currentPhase()) != 0) {
      if (std::strcmp(s.awaiting_phase, "forward") != 0 ||
          std::strcmp(currentPhase(), "backward") != 0)
        return false;
      recompute = true;  // if its Python frames say so (below)
    }
    frame = s.awaiting_frame;
  }
  Reporter* rep = activeReporter();
  InsideScope inside;
  const int depth = rep ? rep->settings().stack_depth : 24;
  std::vector<std::string> py = capturePythonStack(depth);
  if (recompute && !recomputing(py)) return false;
  if (!frame.empty() && (py.empty() || py.front() != frame)) return false;  // another line's
  {
    SearchState& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.awaiting_stack != site->name || !g_nan_search_active.load(std::memory_order_relaxed))
      return false;
    origin_index = s.awaiting_index;
    endSearch(s, nullptr, "");
  }
  if (!rep) return true;
  nlohmann::json ev;
  ev["event"] = "nan_origin_stack";
  ev["op"] = site->name;
  ev["backend"] = site->backend;
  ev["call_index"] = index;
  ev["origin_call_index"] = origin_index;
  ev["stack"] = captureStack(depth);
  if (!py.empty()) {
    // the origin's place known now: its calls elsewhere are other defects
    if (const std::string where = whereKey(py); !where.empty()) {
      SearchState& s = state();
      std::lock_guard<std::mutex> lock(s.mu);
      s.origins_unplaced.erase(site->name);
      s.origins_where.insert(site->name + where);
    }
    ev["python_stack"] = std::move(py);
  }
  rep->event(std::move(ev));
  return true;
}

void nanOrigin(const OpSite* site, uint64_t index, const char* detail, uint64_t nan,
               uint64_t inf, const PastCall* forward) {
  if (originStack(site, index)) return;
  // The call's frames, taken once: they tell its origins at different lines apart, and its
  // event carries them (reportHostViolation takes none where `more` has them). A backward
  // op's are the backward() call's: its forward call's are the line the program wrote.
  const Reporter* rep = activeReporter();
  std::vector<std::string> py;
  if (forward) py = resolvePythonPlace(forward->place);
  if (py.empty()) py = capturePythonStack(rep ? rep->settings().stack_depth : 24);
  nlohmann::json sentinel = nanOriginClaim(site, index, detail, py);
  if (sentinel.is_null()) return;
  nlohmann::json more = originFields(std::move(sentinel));
  more.update({{"detail", detail ? detail : "appeared"},
               {"rule", "nan_origin"},
               {"extra", {{"nan", nan}, {"inf", inf}}}});
  if (!py.empty()) more["python_stack"] = std::move(py);
  if (forward) more["forward_call"] = callText(forward->site, forward->index);
  reportHostViolation(const_cast<OpSite&>(*site), index, "nan_inf", FUMI_KIND_ERROR, "nonfinite",
                      static_cast<double>(nan + inf), 0, more);
}

// Which of `through` made the values `call` held (nan_makers.h): the likeliest maker, where the
// holder is not one itself (a `cat` of a graph network's node features holding the 0/0 of a
// mean over no edges, a `dropout` the NaN a masked row's softmax made, a `neg` the -inf of a
// log(0), a gradient's `mul` the NaN of an exp's overflow: batch 22; an arithmetic holder may
// overflow, but a log, division or exp before it is far likelier); else through.size() (the
// holder).
namespace {
size_t makerOf(const PastCall& call, const char* detail, const std::vector<PastCall>& through) {
  if (through.empty() || !call.site) return through.size();
  std::vector<std::string> chain, phases;
  std::vector<uint64_t> hops;
  for (const PastCall& c : through) {
    chain.push_back(c.site ? c.site->name : "?");
    hops.push_back(c.hops);
    phases.push_back(c.phase ? c.phase : "");
  }
  chain.push_back(call.site->name);
  hops.push_back(0);
  phases.push_back(call.phase ? call.phase : "");
  const bool from_inf = detail && std::strcmp(detail, "nan_from_inf") == 0;
  const std::vector<size_t> likely =
      likelyMakers(chain, hops, phases, from_inf, call.positive_inf);
  // A division by an exact 0 among them, or the holder, made non-finite values for certain (a
  // temperature of 0 before an exp, the quotient gone: the exp had been named, batches 29, 31);
  // of several, the first that ran (an average's update dividing each parameter by a count of 0).
  if (!from_inf && call.by_zero) return through.size();
  if (!from_inf)
    for (size_t i = 0; i < through.size(); ++i)
      if (through[i].by_zero && through[i].site) return i;
  // The holder holds +Inf: of the likely makers one whose held input lies outside its domain
  // and that makes +Inf (an exp past its overflow), before nearer ones that may (a division)
  // or cannot (the log it fed: batch 35's Cox loss).
  if (call.positive_inf)
    for (size_t i : likely)
      if (i < through.size() && through[i].out_of_domain && through[i].site &&
          makesPositiveInf(through[i].site->name))
        return i;
  if (likely.empty() || likely[0] == through.size() || !through[likely[0]].site)
    return through.size();
  // Of calls of the same op, one whose held input lies outside its domain (two `** 0.5` on one
  // line, the nearer one of a finite base named: batch 33).
  if (!through[likely[0]].out_of_domain)
    for (size_t i : likely)
      if (i < through.size() && through[i].out_of_domain &&
          through[i].site == through[likely[0]].site)
        return i;
  return likely[0];
}

// Of the ops a look-back went through (all it followed), those its event or message lists, in
// the order they ran: the kListed nearest (the fewest ops between) and the likeliest maker
// `maker` (a position in `through`, or through.size()), wherever it ran.
constexpr size_t kListed = 16;
std::vector<PastCall> listedOf(const std::vector<PastCall>& through, size_t maker) {
  if (through.size() <= kListed) return through;
  std::vector<size_t> nearest(through.size());
  std::iota(nearest.begin(), nearest.end(), size_t{0});
  std::stable_sort(nearest.begin(), nearest.end(),
                   [&](size_t a, size_t b) { return through[a].hops < through[b].hops; });
  nearest.resize(kListed);
  if (maker < through.size() && std::find(nearest.begin(), nearest.end(), maker) == nearest.end())
    nearest.push_back(maker);
  std::sort(nearest.begin(), nearest.end());
  std::vector<PastCall> listed;
  for (size_t k : nearest) listed.push_back(through[k]);
  return listed;
}
}  // namespace

void nanLookedBack(const PastCall& call, const char* detail, uint64_t nan, uint64_t inf,
                   const std::vector<PastCall>& through, const char* not_origin) {
  if (not_origin) {
    SearchState& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    if (!g_nan_search_active.load(std::memory_order_relaxed)) return;
    // Still in the parameters from the step before, an origin reported (and not handled by a
    // loss scaler) before them: its spread, not a search's to say "origin not found" beside it
    // at every later sentinel (batch 24's F10).
    if (detail && std::strcmp(detail, "carried") == 0 && !s.last_origin.empty() &&
        s.awaiting_stack.empty()) {
      ++s.repeats;
      endSearch(s, nullptr, "");
      return;
    }
    s.looked_back = call.site ? "the earliest op since the last optimizer step whose outputs "
                                "still held them was " +
                                    callText(call.site, call.index) + ", " + not_origin
                              : std::string(not_origin);
    // Where its inputs were followed back to before they were lost (batch 20: data from numpy,
    // gone, under a planted sqrt: the chain names the maker).
    if (!through.empty()) {
      // the likeliest, should the unknown inputs have been finite (batch 22: a graph
      // network's mean over a node without edges, 0/0, among the node features' data)
      const size_t maker = makerOf(call, nullptr, through);
      s.looked_back += "; followed back through ";
      const std::vector<PastCall> listed = listedOf(through, maker);
      for (size_t i = 0; i < listed.size(); ++i)
        s.looked_back += (i ? ", " : "") + callText(listed[i].site, listed[i].index);
      s.looked_back += ", to inputs no longer known (one of these ops may have made them";
      if (maker < through.size())
        s.looked_back += "; likeliest " + callText(through[maker].site, through[maker].index) +
                         ", whose domain or range allows it";
      s.looked_back += ")";
    }
    return;
  }
  if (!call.site) return;
  if (detail && std::strcmp(detail, "spread") == 0) {  // an origin reported before: a repeat
    SearchState& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    ++s.repeats;
    if (g_nan_search_active.load(std::memory_order_relaxed) && s.awaiting_stack.empty()) {
      uncountScalerSearch(s, call.site->name);
      endSearch(s, nullptr, "");
    }
    return;
  }
  // Through a call already claimed as an origin at its call (every call checked: a division by a
  // zero temperature, its Inf then passed on by an exp whose input was gone: the exp had been
  // named a second origin, batch 29): that origin's spread, quietly.
  {
    SearchState& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    const auto claimed = [&](const PastCall& c) {
      return c.site && s.origin_calls.count({c.site, c.index}) > 0;
    };
    if (claimed(call) || std::any_of(through.begin(), through.end(), claimed)) {
      ++s.repeats;
      if (g_nan_search_active.load(std::memory_order_relaxed) && s.awaiting_stack.empty())
        endSearch(s, nullptr, "");
      return;
    }
  }
  // The op holding the values may not have made them: of the ops it got them through, their
  // results gone, the likeliest maker is the origin, the holder named beside it.
  const size_t maker = makerOf(call, detail, through);
  const PastCall& origin = maker < through.size() ? through[maker] : call;
  // Where it ran, kept when it ran (the thread is at the sentinel now). The GIL first, the lock
  // after, as everywhere.
  std::vector<std::string> origin_py = resolvePythonPlace(origin.place);
  nlohmann::json sentinel;
  {
    SearchState& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    const bool searching = g_nan_search_active.load(std::memory_order_relaxed);
    const uint64_t now = g_steps.load(std::memory_order_relaxed);
    sentinel = claim(s, origin.site, origin.index, detail, whereKey(origin_py), origin.phase,
                     now - std::min<uint64_t>(origin.steps_ago, now));
    if (sentinel.is_null()) {
      if (searching && spreadOfEarlier(s, detail))  // the search goes on: what it saw
        s.looked_back = "the earliest op since the last optimizer step whose outputs still held "
                        "them was " +
                        callText(call.site, call.index) +
                        ", which made NaN from Inf: the spread of the origin reported earlier";
      return;
    }
    // claim ended it: it goes on for the origin's stacks, but for a backward op placed at its
    // forward call's line (its own would be the engine's and the backward() call's)
    if (searching && !origin.forward_site) {
      g_nan_search_active.store(1, std::memory_order_relaxed);
      s.awaiting_stack = origin.site->name;
      s.awaiting_index = origin.index;
      s.awaiting_phase = origin.phase ? origin.phase : "";
      s.awaiting_frame = origin_py.empty() ? std::string() : origin_py.front();
    }
  }
  // The stacks are the sentinel's (the thread is there now), not the origin's.
  if (Reporter* rep = activeReporter()) {
    InsideScope inside;
    if (auto py = capturePythonStack(rep->settings().stack_depth); !py.empty())
      sentinel["python_stack"] = std::move(py);
  }
  nlohmann::json made = nlohmann::json::array(), hops = nlohmann::json::array(),
                 phases = nlohmann::json::array();
  const bool from_inf = detail && std::strcmp(detail, "nan_from_inf") == 0;
  for (const PastCall& c : from_inf ? through : listedOf(through, maker)) {
    made.push_back(callText(c.site, c.index));
    hops.push_back(c.hops);
    phases.push_back(c.phase ? c.phase : "");
  }
  nlohmann::json more = originFields(std::move(sentinel));
  // Made in an earlier step (the step before's look-back: a gradient's NaN its update spread):
  // that step's, and past its optimizer step, which no loss scaler skipped: not held for one.
  if (origin.steps_ago > 0) {
    more["optimizer_step"] = optimizerSteps() - std::min<uint64_t>(origin.steps_ago,
                                                                    optimizerSteps());
    if (origin.phase && std::strcmp(origin.phase, "backward") == 0)
      more["loss_scaling"] = "reached_optimizer";
  }
  more.update({{"detail", detail ? detail : "appeared"},
               {"looked_back", true},
               {"through", std::move(made)},
               {"through_hops", std::move(hops)},
               {"through_phases", std::move(phases)},
               {"rule", "nan_origin"},
               {"extra", {{"nan", nan}, {"inf", inf}}}});
  if (!origin_py.empty()) more["python_stack"] = std::move(origin_py);
  // the autograd node it ran in: a backward op's Python frames are the backward() call's
  if (origin.place.node)
    more["context"] = {static_cast<const OpSite*>(origin.place.node)->name};
  // and the forward call whose node that is, whose line its python_stack then is
  if (origin.forward_site)
    more["forward_call"] = callText(origin.forward_site, origin.forward_index);
  // why it was named among the calls followed (its held input outside its domain)
  if (origin.out_of_domain) more["out_of_domain"] = true;
  // or its division by an exact 0 (a one-element divisor of 0, a sqrt's gradient at 0)
  if (origin.by_zero) more["by_zero"] = true;
  // the holder held +Inf (which a log or root never makes): how the maker was ranked
  if (call.positive_inf) more["positive_inf"] = true;
  if (maker < through.size())
    more["held_by"] = {{"call", callText(call.site, call.index)},
                       {"phase", call.phase ? call.phase : ""}};
  reportHostViolation(const_cast<OpSite&>(*origin.site), origin.index, "nan_inf",
                      FUMI_KIND_ERROR, "nonfinite", static_cast<double>(nan + inf), 0, more,
                      origin.phase ? origin.phase : "");
}

void nanOriginHandled(const std::string& op, uint64_t index) {
  SearchState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.last_origin == op + " #" + std::to_string(index)) s.last_origin.clear();
  s.scaled.insert(op);  // its repeats are the scaler's working too
}

namespace {
std::atomic<int (*)(fumi_past_call*)> g_forward_probe{nullptr};
}  // namespace

void setForwardProbe(int (*probe)(fumi_past_call* out)) { g_forward_probe.store(probe); }

namespace {
std::atomic<int (*)(void)> g_look_back_probe{nullptr};
}  // namespace

void setLookBackProbe(int (*probe)(void)) { g_look_back_probe.store(probe); }

bool lookBackNow() {
  int (*probe)(void) = g_look_back_probe.load();
  return probe && probe() != 0;
}

bool forwardCallNow(std::vector<std::string>& py, std::string& call) {
  int (*probe)(fumi_past_call*) = g_forward_probe.load();
  fumi_past_call f{};
  if (!probe || !probe(&f) || !f.site) return false;
  // its frames first, then the calling thread's (the backward() call it ran under: a scaled
  // loss's overflow is that line's doing)
  if (std::vector<std::string> frames = resolvePythonPlace(f.place); !frames.empty()) {
    frames.insert(frames.end(), py.begin(), py.end());
    py = std::move(frames);
  }
  call = callText(static_cast<const OpSite*>(f.site), f.index);
  return true;
}

void nanSearchAfterFork() {
  g_nan_search_active.store(0, std::memory_order_relaxed);
  g_search = new SearchState;  // the parent's may be locked by a thread that did not fork
}

void nanSearchAtExit() {
  if (!g_nan_search_active.load(std::memory_order_relaxed)) return;
  SearchState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!g_nan_search_active.load(std::memory_order_relaxed)) return;
  endSearch(s, "not_found",
            "the process ended before the search found where the NaN/Inf appeared" +
                seenSoFar(s));
}

}  // namespace fumi
