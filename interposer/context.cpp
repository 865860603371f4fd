// context.cpp — per-thread framework-op stack (fixed depth; deeper nesting is counted, not
// stored, so pushes and pops always pair up).
#include "context.h"

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

}  // namespace fumi
