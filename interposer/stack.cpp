// stack.cpp — symbolised native stacks, fumi's own frames trimmed.
#include "stack.h"

#include <dlfcn.h>

#include <mutex>
#include <sstream>
#include <vector>

#define BOOST_STACKTRACE_USE_BACKTRACE
#include <boost/stacktrace.hpp>

#include "resolve.h"

namespace fumi {
namespace {

std::mutex g_mu;
std::vector<const void*>& ownBases() {
  static std::vector<const void*> bases;
  return bases;
}

const void* objectBase(const void* address) {
  Dl_info info{};
  if (dladdr(address, &info) == 0) return nullptr;
  return info.dli_fbase;
}

bool isOwn(const void* address) {
  const void* base = objectBase(address);
  if (!base) return false;
  if (base == selfBase()) return true;
  std::lock_guard<std::mutex> lock(g_mu);
  for (const void* b : ownBases())
    if (b == base) return true;
  return false;
}

}  // namespace

void addOwnObject(const void* address_inside) {
  const void* base = objectBase(address_inside);
  if (!base) return;
  std::lock_guard<std::mutex> lock(g_mu);
  ownBases().push_back(base);
}

std::vector<const void*> captureFrames(int depth) {
  std::vector<const void*> frames;
  if (depth <= 0) return frames;
  boost::stacktrace::stacktrace st;
  bool in_user = false;
  for (const boost::stacktrace::frame& f : st) {
    // Frames up to and including the hook wrapper belong to fumi; the caller's start after.
    if (!in_user) {
      if (isOwn(f.address())) continue;
      in_user = true;
    }
    frames.push_back(f.address());
    if (static_cast<int>(frames.size()) >= depth) break;
  }
  return frames;
}

std::vector<std::string> symbolize(const std::vector<const void*>& addresses) {
  std::vector<std::string> frames;
  for (const void* address : addresses) {
    const boost::stacktrace::frame f(address);
    std::ostringstream line;
    line << "#" << frames.size() << " " << f.address();
    const std::string name = f.name();
    if (!name.empty()) line << " in " << name;
    const std::string file = f.source_file();
    if (!file.empty()) line << " at " << file << ":" << f.source_line();
    else {
      Dl_info info{};
      if (dladdr(f.address(), &info) && info.dli_fname) line << " (" << info.dli_fname << ")";
    }
    frames.push_back(line.str());
  }
  return frames;
}

std::vector<std::string> captureStack(int depth) { return symbolize(captureFrames(depth)); }

}  // namespace fumi
