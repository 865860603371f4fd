// nan_search.h — finding the op where a NaN or Inf first appeared, cheaply enough for production.
//
// Checking every op's outputs on every step costs too much to leave on, so the search is armed
// by sentinels and only then looks everywhere:
//   sentinel   something cheap saw a non-finite value: a sampled nan_inf check (any backend), or
//              the torch adapter's scan of single-element outputs (losses, norms) on every op.
//              Where that op's inputs were all finite (0/0 in a metric; a nan_inf check's
//              "appeared"), it is the origin at once: reported without a search (a one-off
//              would never show to one).
//   search     every framework op's outputs are scanned; the first op whose outputs hold NaN or
//              Inf while its inputs (tensors and scalar arguments, outputs it writes in place
//              excepted) are finite is the origin: one `violation` event with "origin": true,
//              its native and Python stacks, and the sentinel that started the search. Training
//              steps repeat, so an origin that ran before the sentinel fired shows again on the
//              next step.
//   look back  when a sentinel starts a search, the torch adapter first looks over the ops this
//              thread ran since the last optimizer step began (a ring of the last few thousand,
//              holding their tensors weakly with their versions): the earliest whose outputs,
//              still held as they were, hold NaN or Inf made from inputs still held and finite
//              — directly, or through ops whose results are gone or were overwritten — is the
//              origin at once, reported without a native stack (the op has returned; its
//              Python frames are those kept when it ran, pystack.h); the search goes on only
//              for its stacks, written as a `nan_origin_stack` event should it make them again. A NaN that spreads into the weights through the optimizer step never
//              "appears" again for a search to find.
//   step down  the search ends at the origin, after `steps` optimizer steps past the one it
//              started in, or after `max_ops` scanned ops; without an origin it writes a
//              `nan_search` event "not_found" naming the first op that received non-finite
//              inputs (a NaN already in the parameters or the data never "appears").
// An origin already reported ends later searches quietly (counted as repeats); at most
// `max_searches` searches run per process. Policy: `nan_origin:` (docs/policy.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "adapter_api.h"

namespace fumi {

struct OpSite;

// Whether a search runs now (read by the adapter for every op: one relaxed load).
extern std::atomic<int> g_nan_search_active;

// A loss scaler handled the held origin `op` #`index` (loss_scaling.h): its values never reached
// the parameters, so NaN made of Inf after it is no spread of it (spreadOfEarlier).
void nanOriginHandled(const std::string& op, uint64_t index);

// A sentinel saw non-finite values in the outputs of `site`'s call `index`.
void nanSentinel(const OpSite* site, uint64_t index);
// An optimizer step began (the adapter sees "Optimizer.step#..." ranges).
void nanSearchStep();
// Optimizer steps so far (nanSearchStep's count): an origin's event carries it, so that the
// report can tell a backward-pass origin in the step of a forward one (its gradient).
uint64_t optimizerSteps();
// One more op scanned by the search; false once the search has ended (max_ops reached).
bool nanSearchOp();
// nanOrigin's bookkeeping alone, for a caller that reports the call itself (a sampled nan_inf
// check that saw the values appear from finite inputs), as fields for the call's own violation
// event: the origin's (`origin`, `optimizer_step`, the claimed `sentinel`), or `spread_of` where
// it is an origin's repeat or spread; null otherwise (see nanOriginClaim in nan_search.cpp).
nlohmann::json nanOriginEventFields(const OpSite* site, uint64_t index, const char* detail,
                                    const std::vector<std::string>& python_stack,
                                    const char* phase);
// One call an adapter saw before a sentinel, in `phase` (a static string).
struct PastCall {
  const OpSite* site;
  uint64_t index;
  const char* phase;
  uint32_t hops;  // in `through`: the fewest ops between it and the origin (1: an input's maker)
  uint32_t steps_ago = 0;  // optimizer steps begun since it ran (fumi_past_call.steps_ago)
  fumi_py_place place{};   // where it ran in the program's Python code (pystack.h)
  bool by_zero = false;     // a division by an exact 0 (fumi_past_call.by_zero)
  bool out_of_domain = false;  // its held input outside its domain (fumi_past_call.out_of_domain)
  // the forward call whose autograd node it ran in (fumi_past_call.forward_site), or null
  const OpSite* forward_site = nullptr;
  uint64_t forward_index = 0;
  bool positive_inf = false;  // its outputs hold +Inf (fumi_past_call.positive_inf)
};
// Non-finite outputs of `site`'s call `index` made from finite inputs: found by the search, or
// a sentinel that is its own origin (no search running; counted against max_searches).
// `detail`: "appeared", "nan_from_inf" or "scaled_overflow". Captures the calling thread's stacks.
// `forward`: for a call of the backward pass, the forward call whose autograd node it runs in
// (adapter_api.h nan_origin_forward): its Python frames are the origin's, and its event names it.
void nanOrigin(const OpSite* site, uint64_t index, const char* detail, uint64_t nan,
               uint64_t inf, const PastCall* forward = nullptr);
// The adapter's probe (adapter_api.h set_forward_probe).
void setForwardProbe(int (*probe)(fumi_past_call* out));
// The adapter's look-back probe (adapter_api.h set_look_back_probe), and asking it: true where
// it found and reported an origin.
void setLookBackProbe(int (*probe)(void));
bool lookBackNow();
// For a call of the backward pass that made NaN/Inf at its call on the calling thread (a
// check's finding): the forward call that made its autograd node, where the adapter knows it:
// its Python frames put before `py`'s (where it has any) and "op #index" into `call`; false
// otherwise.
bool forwardCallNow(std::vector<std::string>& py, std::string& call);
// What the adapter found looking back from the sentinel that has just started the search (see
// "look back" above; adapter_api.h nan_looked_back): with `not_origin` null, `call` is the
// origin, made `through` the calls listed; else `call` is the earliest op still holding the
// values and `not_origin` why it is not the origin (with a null site: why nothing was looked
// over), `through` where its inputs were followed back to, for the search's message.
void nanLookedBack(const PastCall& call, const char* detail, uint64_t nan, uint64_t inf,
                   const std::vector<PastCall>& through, const char* not_origin);
// The search saw `site`'s call receive non-finite values through input `input`.
void nanPropagated(const OpSite* site, const char* input);
// In a forked child (a DataLoader worker): no search runs and none has; the parent's search
// stays the parent's (a worker would end it "not_found" at its exit).
void nanSearchAfterFork();
// At exit: a search still running ends "not_found".
void nanSearchAtExit();

}  // namespace fumi
