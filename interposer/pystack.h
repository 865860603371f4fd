// pystack.h — the Python stack of the calling thread, for violations in Python programs.
// libfumi has no libpython dependency: the CPython API is looked up in the process at run time
// and the stack is empty where there is no (initialised, 3.9+) Python.
#pragma once

#include <string>
#include <vector>

#include "adapter_api.h"

namespace fumi {

// "file:line in function" frames, innermost first, the program's own frames before those of
// installed packages and the standard library; at most `depth`.
std::vector<std::string> capturePythonStack(int depth);

// Whether a frame of capturePythonStack is the program's own (not an installed package's or
// the standard library's).
bool programFrame(const std::string& frame);

// Where the calling thread runs in the program's Python code, cheaply (fumi_py_place): for
// every op a look-back keeps, so that an origin found among them has its line. Reads the
// thread's frames where CPython keeps them, without the GIL (the thread's own frames, which
// only it changes; libfumi built against CPython 3.11's headers and run under 3.11, else
// nothing). The code objects are kept alive for the process: the first time one is seen, the
// GIL is taken to hold a reference to it and to read its file name (at most 4096).
void capturePythonPlace(fumi_py_place& out);
// Its "file:line in function" frames, as capturePythonStack's (takes the GIL).
std::vector<std::string> resolvePythonPlace(const fumi_py_place& place);

// The framework adapter's TorchScript frames of the calling thread (adapter_api.h
// set_script_frames): capturePythonStack and capturePythonPlace put them first.
void setScriptFrames(const char* (*frames)());

}  // namespace fumi
