// resolve.h — finding the real implementation of a hooked symbol.
#pragma once

#include <atomic>
#include <string>

namespace fumi {

// The next definition of `name` that is not libfumi's own: dlsym(RTLD_NEXT), then the global
// scope, then every loaded object one by one (a library loaded RTLD_LOCAL, e.g. libblas under
// Python's torch, is invisible to the first two). nullptr when nothing defines it yet.
void* resolveReal(const char* name);

// Load address of the object holding fumi's own code (libfumi.so; the executable for the CLI).
const void* selfBase();
// Whether `p` lies in that object (its loaded segments): a few comparisons, where dladdr of an
// address in a large executable scans its symbols (Python's: tens of microseconds).
bool inSelf(const void* p);
// Directory of that object's file ("" when unknown): plugins and the torch adapter live below it.
std::string selfDir();

// resolveReal, cached in `slot`. A hook whose real function cannot be found has nothing it
// could correctly call: print why and abort.
void* resolveRealOrDie(const char* name, std::atomic<void*>& slot);

}  // namespace fumi
