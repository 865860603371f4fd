// stack.h — native stack traces for violations (Boost.Stacktrace + libbacktrace), with fumi's
// own frames (libfumi and plugins) trimmed. Only called on the slow path.
#pragma once

#include <string>
#include <vector>

namespace fumi {

// Remember an address inside an object whose frames are fumi's own (a plugin library).
void addOwnObject(const void* address_inside);

// Return addresses of the current thread's frames, innermost user frame first (fumi's own
// frames trimmed), at most `depth`. Cheap (no symbols): taken where a check may report later
// from another thread (the CUDA checker), resolved only if it does.
std::vector<const void*> captureFrames(int depth);
// "#i address in function at file:line" for each frame.
std::vector<std::string> symbolize(const std::vector<const void*>& frames);

// Symbolised frames of the current thread, innermost user frame first, at most `depth`.
std::vector<std::string> captureStack(int depth);

}  // namespace fumi
