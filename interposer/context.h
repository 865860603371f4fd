// context.h — the framework-op context of each thread: which framework ops (e.g. aten::addmm)
// are running on it right now, innermost last. Adapters push/pop; library-level hooks read it
// so a BLAS violation says "inside aten::addmm".
#pragma once

#include <string>
#include <vector>

namespace fumi {

struct OpSite;

void pushContext(OpSite* site);
void popContext();
// Names of the current thread's framework ops, outermost first.
std::vector<std::string> currentContext();

// Training phase of the current thread's framework ops: "backward" inside an autograd node,
// "optimizer" inside an optimizer step, "forward" otherwise; "" outside any framework op.
const char* currentPhase();

}  // namespace fumi
