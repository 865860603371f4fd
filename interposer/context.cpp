// context.cpp — per-thread framework-op stack (fixed depth; deeper nesting is counted, not
// stored, so pushes and pops always pair up).
#include "context.h"

#include <cstring>

#include "site.h"

namespace fumi {
namespace {
constexpr int kMaxDepth = 32;
__thread OpSite* t_stack[kMaxDepth] __attribute__((tls_model("initial-exec")));
__thread int t_depth __attribute__((tls_model("initial-exec"))) = 0;
}  // namespace

void pushContext(OpSite* site) {
  if (t_depth < kMaxDepth) t_stack[t_depth] = site;
  ++t_depth;
}

void popContext() {
  if (t_depth > 0) --t_depth;
}

std::vector<std::string> currentContext() {
  std::vector<std::string> names;
  const int n = t_depth < kMaxDepth ? t_depth : kMaxDepth;
  for (int i = 0; i < n; ++i) names.emplace_back(t_stack[i]->name);
  return names;
}

const char* currentPhase() {
  const int n = t_depth < kMaxDepth ? t_depth : kMaxDepth;
  if (n == 0) return "";
  for (int i = 0; i < n; ++i) {
    // Names PyTorch gives these ranges (RecordFunction, 1.13 and 2.x).
    const char* name = t_stack[i]->name;
    if (std::strncmp(name, "autograd::engine::evaluate_function", 35) == 0) return "backward";
    if (std::strncmp(name, "Optimizer.step", 14) == 0) return "optimizer";
  }
  return "forward";
}

}  // namespace fumi
