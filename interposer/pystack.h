// pystack.h — the Python stack of the calling thread, for violations in Python programs.
// libfumi has no libpython dependency: the CPython API is looked up in the process at run time
// and the stack is empty where there is no (initialised, 3.9+) Python.
#pragma once

#include <string>
#include <vector>

namespace fumi {

// "file:line in function" frames, innermost first, the program's own frames before those of
// installed packages and the standard library; at most `depth`.
std::vector<std::string> capturePythonStack(int depth);

}  // namespace fumi
