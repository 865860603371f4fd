// context.cpp — per-thread framework-op stack (fixed depth; deeper nesting is counted, not
// stored, so pushes and pops always pair up).
#include "context.h"

#include <atomic>
#include <cstring>

#include "loss_scaling.h"
#include "site.h"

namespace fumi {
namespace {
constexpr int kMaxDepth = 32;
__thread ContextEntry t_stack[kMaxDepth] __attribute__((tls_model("initial-exec")));
__thread int t_depth __attribute__((tls_model("initial-exec"))) = 0;

int storedDepth() { return t_depth < kMaxDepth ? t_depth : kMaxDepth; }

std::atomic<uint64_t> g_backward_passes{0};
// This thread's outermost op was outside autograd nodes since its last node (another thread's
// ops, a DataLoader's pin_memory during a backward pass, begin no pass of this one).
__thread bool t_outside_backward __attribute__((tls_model("initial-exec"))) = true;
}  // namespace

uint64_t backwardPasses() { return g_backward_passes.load(std::memory_order_relaxed); }

void pushContext(const OpSite* site, uint64_t call_index) {
  if (t_depth == 0 && site) {  // a thread's outermost op or range
    const bool node = site->phase_marker == kPhaseBackward;
    if (node == t_outside_backward) {
      t_outside_backward = !node;
      if (node) g_backward_passes.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (t_depth < kMaxDepth) t_stack[t_depth] = ContextEntry{site, call_index};
  ++t_depth;
  if (site && __builtin_expect(site->scaler_marker != 0, 0))
    scalerMarker(static_cast<ScalerMarker>(site->scaler_marker));
}

void popContext() {
  if (t_depth > 0) --t_depth;
}

std::vector<ContextEntry> currentContext(const OpSite* self, uint64_t self_index) {
  int n = storedDepth();
  if (n > 0 && self && t_stack[n - 1].site == self && t_stack[n - 1].call_index == self_index)
    --n;
  std::vector<ContextEntry> out;
  for (int i = 0; i < n; ++i)
    if (t_stack[i].site) out.push_back(t_stack[i]);  // null: an op the adapter could not name
  return out;
}

namespace {
std::atomic<int (*)()> g_shared_probe{nullptr};
}  // namespace

void setSharedProbe(int (*probe)()) { g_shared_probe.store(probe, std::memory_order_release); }

bool contextReadsSharedMemory() {
  if (t_depth == 0) return false;
  int (*probe)() = g_shared_probe.load(std::memory_order_acquire);
  return probe && probe() != 0;
}

uint8_t phaseMarkerOf(const char* name) {
  // Names PyTorch gives these ranges (RecordFunction, 1.13 and 2.x).
  if (std::strncmp(name, "autograd::engine::evaluate_function", 35) == 0) return kPhaseBackward;
  if (std::strncmp(name, "Optimizer.step", 14) == 0) return kPhaseOptimizer;
  return kPhaseNone;
}

const OpSite* innermostAutogradNode() {
  for (int i = storedDepth(); i-- > 0;)
    if (t_stack[i].site && t_stack[i].site->phase_marker == kPhaseBackward) return t_stack[i].site;
  return nullptr;
}

const char* currentPhase() {
  const int n = storedDepth();
  if (n == 0) return "";
  for (int i = 0; i < n; ++i) {
    if (!t_stack[i].site) continue;
    switch (t_stack[i].site->phase_marker) {
      case kPhaseBackward: return "backward";
      case kPhaseOptimizer: return "optimizer";
      default: break;
    }
  }
  return "forward";
}

}  // namespace fumi
