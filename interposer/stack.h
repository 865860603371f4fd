// stack.h — native stack traces for violations (Boost.Stacktrace + libbacktrace), with fumi's
// own frames (libfumi and plugins) trimmed. Only called on the slow path.
#pragma once

#include <string>
#include <vector>

namespace fumi {

// Remember an address inside an object whose frames are fumi's own (a plugin library).
void addOwnObject(const void* address_inside);

// Symbolised frames of the current thread, innermost user frame first, at most `depth`.
std::vector<std::string> captureStack(int depth);

}  // namespace fumi
