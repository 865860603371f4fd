// paths.h — where the CLI finds libfumi.so and the built-in plugins: relative to its own
// executable, in the build tree and in an installation alike (bin/fumi, lib/libfumi.so,
// lib/fumi/plugins/).
#pragma once

#include <string>

namespace fumi::cli {

// The running executable (from /proc/self/exe); empty when it cannot be read.
std::string exePath();
// Directory of the running executable; "." when it cannot be read.
std::string exeDir();
// <exe_dir>/../lib/libfumi.so, normalized.
std::string libfumiPath();
// <exe_dir>/../lib/fumi/plugins, normalized.
std::string builtinPluginDir();
// `path` made absolute against the current directory and normalized (need not exist).
std::string absolutePath(const std::string& path);

}  // namespace fumi::cli
