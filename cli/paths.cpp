// paths.cpp — locations relative to the fumi executable.
#include "paths.h"

#include <filesystem>
#include <system_error>

namespace fumi::cli {

namespace fs = std::filesystem;

std::string exePath() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.string();
}

std::string exeDir() {
  const std::string exe = exePath();
  return exe.empty() ? "." : fs::path(exe).parent_path().string();
}

std::string libfumiPath() {
  return (fs::path(exeDir()) / ".." / "lib" / "libfumi.so").lexically_normal().string();
}

std::string builtinPluginDir() {
  return (fs::path(exeDir()) / ".." / "lib" / "fumi" / "plugins").lexically_normal().string();
}

std::string absolutePath(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  if (ec) return path;
  p = p.lexically_normal();
  // "dir/" normalizes to "dir/"; drop the trailing separator for nicer messages.
  std::string s = p.string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

}  // namespace fumi::cli
