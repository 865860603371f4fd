// stack.cpp — symbolised native stacks, fumi's own frames trimmed.
#include "stack.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdint>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#define BOOST_STACKTRACE_USE_BACKTRACE
#include <boost/stacktrace.hpp>

namespace fumi {
namespace {

// Where fumi's own objects (libfumi, its plugins, the adapter) lie: their loaded segments.
// Looked up by address range, not dladdr: dladdr scans the symbol table of the object an
// address is in, and the first frame past fumi's is a big library's (0.6 ms in libtorch_cpu,
// on every sampled call).
struct Span {
  uintptr_t lo, hi;
};
std::mutex g_mu;
std::vector<Span>& ownSpans() {  // guarded by g_mu
  static std::vector<Span> spans;
  return spans;
}

struct FindSpans {
  uintptr_t address;
  std::vector<Span> spans;
};

int spansOf(struct dl_phdr_info* info, size_t, void* data) {
  auto* f = static_cast<FindSpans*>(data);
  std::vector<Span> spans;
  bool inside = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    const uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
    spans.push_back({lo, lo + ph.p_memsz});
    inside = inside || (f->address >= lo && f->address < lo + ph.p_memsz);
  }
  if (!inside) return 0;
  f->spans = std::move(spans);
  return 1;
}

void addSpansLocked(const void* address_inside) {
  FindSpans f{reinterpret_cast<uintptr_t>(address_inside), {}};
  dl_iterate_phdr(spansOf, &f);
  ownSpans().insert(ownSpans().end(), f.spans.begin(), f.spans.end());
}

bool isOwn(const void* address) {
  const auto a = reinterpret_cast<uintptr_t>(address);
  std::lock_guard<std::mutex> lock(g_mu);
  static bool self = false;
  if (!self) {
    addSpansLocked(reinterpret_cast<const void*>(&captureFrames));
    self = true;
  }
  for (const Span& s : ownSpans())
    if (a >= s.lo && a < s.hi) return true;
  return false;
}

}  // namespace

void addOwnObject(const void* address_inside) {
  std::lock_guard<std::mutex> lock(g_mu);
  addSpansLocked(address_inside);
}

std::vector<const void*> captureFrames(int depth) {
  std::vector<const void*> frames;
  if (depth <= 0) return frames;
  // fumi's own frames come first (a plugin, the engine, the adapter: a dozen or two): no need
  // to unwind a deep Python stack whole.
  constexpr int kOwnFramesMax = 32;
  boost::stacktrace::stacktrace st(0, static_cast<std::size_t>(depth + kOwnFramesMax));
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

namespace {

// " in function at file:line" (or " (object)") of a return address: libbacktrace reads the
// object's debug information for each, milliseconds a frame, so a job whose op violates on
// every call spent 16 ms a violation here (1000 violating bf16 matmuls: 0.5 s plain, 16.5 s).
// Addresses repeat from step to step: each is resolved once and kept (at most kMaxSymbols).
constexpr size_t kMaxSymbols = 1 << 16;

std::string describeAddress(const void* address) {
  const boost::stacktrace::frame f(address);
  std::ostringstream text;
  const std::string name = f.name();
  if (!name.empty()) text << " in " << name;
  const std::string file = f.source_file();
  if (!file.empty()) {
    text << " at " << file << ":" << f.source_line();
  } else {
    Dl_info info{};
    if (dladdr(address, &info) && info.dli_fname) text << " (" << info.dli_fname << ")";
  }
  return text.str();
}

std::string symbolOf(const void* address) {
  static std::mutex mu;
  static auto* known = new std::unordered_map<const void*, std::string>;  // immortal: at exit
  {
    std::lock_guard<std::mutex> lock(mu);
    const auto it = known->find(address);
    if (it != known->end()) return it->second;
  }
  std::string text = describeAddress(address);
  std::lock_guard<std::mutex> lock(mu);
  if (known->size() >= kMaxSymbols) known->clear();
  known->emplace(address, text);
  return text;
}

}  // namespace

std::vector<std::string> symbolize(const std::vector<const void*>& addresses) {
  std::vector<std::string> frames;
  for (const void* address : addresses) {
    std::ostringstream line;
    line << "#" << frames.size() << " " << address << symbolOf(address);
    frames.push_back(line.str());
  }
  return frames;
}

std::vector<std::string> captureStack(int depth) { return symbolize(captureFrames(depth)); }

}  // namespace fumi
