// resolve.cpp — real-symbol resolution that never returns libfumi's own wrapper.
#include "resolve.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace fumi {

const void* selfBase() {
  static const void* base = [] {
    Dl_info info{};
    dladdr(reinterpret_cast<const void*>(&resolveReal), &info);
    return info.dli_fbase;
  }();
  return base;
}

namespace {
// The loaded segments of the object holding `probe` (fumi's own code).
struct Segments {
  uintptr_t probe;
  uintptr_t begin[8], end[8];
  int n = 0;
};

int collectSegments(struct dl_phdr_info* info, size_t, void* data) {
  auto* s = static_cast<Segments*>(data);
  Segments found{s->probe, {}, {}, 0};
  bool holds = false;
  for (int i = 0; i < info->dlpi_phnum && found.n < 8; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    found.begin[found.n] = info->dlpi_addr + ph.p_vaddr;
    found.end[found.n] = info->dlpi_addr + ph.p_vaddr + ph.p_memsz;
    holds = holds || (s->probe >= found.begin[found.n] && s->probe < found.end[found.n]);
    ++found.n;
  }
  if (!holds) return 0;
  *s = found;
  return 1;
}
}  // namespace

bool inSelf(const void* p) {
  static const Segments self = [] {
    Segments s{reinterpret_cast<uintptr_t>(&resolveReal), {}, {}, 0};
    dl_iterate_phdr(collectSegments, &s);
    return s;
  }();
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (int i = 0; i < self.n; ++i)
    if (a >= self.begin[i] && a < self.end[i]) return true;
  return false;
}

std::string selfDir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&resolveReal), &info) == 0 || !info.dli_fname)
    return {};
  const std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

namespace {

int collectObject(struct dl_phdr_info* info, size_t, void* data) {
  auto* paths = static_cast<std::vector<std::string>*>(data);
  if (info->dlpi_name && info->dlpi_name[0]) paths->emplace_back(info->dlpi_name);
  return 0;
}

}  // namespace

void* resolveReal(const char* name) {
  void* p = dlsym(RTLD_NEXT, name);
  if (p && !inSelf(p)) return p;
  p = dlsym(RTLD_DEFAULT, name);
  if (p && !inSelf(p)) return p;
  // Collect first, dlopen after: no loader calls while dl_iterate_phdr holds its lock.
  std::vector<std::string> paths;
  dl_iterate_phdr(collectObject, &paths);
  for (const std::string& path : paths) {
    void* handle = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (!handle) continue;
    p = dlsym(handle, name);
    dlclose(handle);  // drops only the reference RTLD_NOLOAD added
    if (p && !inSelf(p)) return p;
  }
  return nullptr;
}

void* resolveRealOrDie(const char* name, std::atomic<void*>& slot) {
  void* p = resolveReal(name);
  if (!p) {
    std::fprintf(stderr,
                 "[fumi] fatal: no library in this process defines %s, yet it was called; "
                 "libfumi cannot forward the call\n",
                 name);
    std::abort();
  }
  slot.store(p, std::memory_order_release);
  return p;
}

}  // namespace fumi
