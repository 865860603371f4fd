// context.h — the framework-op context of each thread: which framework ops (e.g. aten::addmm)
// are running on it right now, innermost last, each with its call index. Adapters push/pop;
// library-level hooks read it so a BLAS violation says "inside aten::addmm #12", which links it
// to that op's own events.
#pragma once

#include <cstdint>
#include <vector>

namespace fumi {

struct OpSite;

struct ContextEntry {
  const OpSite* site;
  uint64_t call_index;
};

// `site` may be null: an op the adapter could not name (kept so pushes and pops pair up).
void pushContext(const OpSite* site, uint64_t call_index);
void popContext();
// The current thread's framework ops, outermost first. When the innermost one is the call
// `self` (site, index) itself — a framework op's own check — it is left out.
std::vector<ContextEntry> currentContext(const OpSite* self = nullptr, uint64_t self_index = 0);

// Whether a framework op running on this thread reads memory another process may write (the
// adapter's probe, adapter_api.h set_shared_probe): a library call inside it is not checked.
// False outside framework ops and without a probe.
void setSharedProbe(int (*probe)());
bool contextReadsSharedMemory();

// Training phase of the current thread's framework ops: "backward" inside an autograd node,
// "optimizer" inside an optimizer step, "forward" otherwise; "" outside any framework op.
const char* currentPhase();
// The phase a range or op of this name begins (OpSite::phase_marker, read by currentPhase on
// every kept op: two string comparisons per framework op around it had cost 150 instructions):
// an autograd node's ("backward"), an optimizer step's, or none.
constexpr uint8_t kPhaseNone = 0, kPhaseBackward = 1, kPhaseOptimizer = 2;
uint8_t phaseMarkerOf(const char* name);
// The innermost autograd node range the calling thread runs in (its site), or null: outside
// the backward pass.
const OpSite* innermostAutogradNode();
// Backward passes the process has begun: an autograd node range entered at the top of a thread's
// stack after that thread's ops outside any (autograd.grad's, then loss.backward()'s, in one
// step: two; on CPU the calling thread runs the nodes).
uint64_t backwardPasses();

}  // namespace fumi
