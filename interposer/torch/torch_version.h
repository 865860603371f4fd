// torch_version.h — which torch a process runs, read from where its libtorch_cpu lies (no torch
// headers: the adapter compares it with the torch it was built against before attaching, and
// the unit tests test it). Debian names the library libtorch_cpu.so.<major>.<minor>; a pip wheel
// names it libtorch_cpu.so, in <torch>/lib/, beside <torch>/version.py.
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace fumi::torch_version {

struct Version {
  int major = -1, minor = -1;
  bool known() const { return major >= 0 && minor >= 0; }
  std::string str() const { return std::to_string(major) + "." + std::to_string(minor); }
};

// "<major>.<minor>" at the start of `s` (then anything: ".2+cu130", "'"); unknown otherwise.
inline Version parse(const std::string& s) {
  Version v;
  char* end = nullptr;
  const long major = std::strtol(s.c_str(), &end, 10);
  if (end == s.c_str() || *end != '.') return v;
  const char* rest = end + 1;
  const long minor = std::strtol(rest, &end, 10);
  if (end == rest) return v;
  v.major = static_cast<int>(major);
  v.minor = static_cast<int>(minor);
  return v;
}

// ".../libtorch_cpu.so.1.13" -> 1.13; a name without a version after ".so." -> unknown.
inline Version fromSoname(const std::string& path) {
  const std::string key = ".so.";
  const size_t at = path.rfind(key);
  if (at == std::string::npos || path.find('/', at) != std::string::npos) return {};
  return parse(path.substr(at + key.size()));
}

// The text of torch/version.py: `__version__ = '2.11.0+cu130'`.
inline Version fromVersionPy(const std::string& text) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("__version__", 0) != 0) continue;
    const size_t quote = line.find_first_of("'\"");
    if (quote != std::string::npos) return parse(line.substr(quote + 1));
  }
  return {};
}

// The version of the torch whose libtorch_cpu is at `path`: its name's, else version.py's one
// directory above it; unknown when neither says.
inline Version ofLibrary(const std::string& path) {
  if (Version v = fromSoname(path); v.known()) return v;
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {};
  std::ifstream in(path.substr(0, slash) + "/../version.py");
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return fromVersionPy(text.str());
}

}  // namespace fumi::torch_version
