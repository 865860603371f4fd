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

std::string selfDir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&resolveReal), &info) == 0 || !info.dli_fname)
    return {};
  const std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

namespace {

bool isSelf(void* p) {
  Dl_info info{};
  return dladdr(p, &info) != 0 && info.dli_fbase == selfBase();
}

int collectObject(struct dl_phdr_info* info, size_t, void* data) {
  auto* paths = static_cast<std::vector<std::string>*>(data);
  if (info->dlpi_name && info->dlpi_name[0]) paths->emplace_back(info->dlpi_name);
  return 0;
}

}  // namespace

void* resolveReal(const char* name) {
  void* p = dlsym(RTLD_NEXT, name);
  if (p && !isSelf(p)) return p;
  p = dlsym(RTLD_DEFAULT, name);
  if (p && !isSelf(p)) return p;
  // Collect first, dlopen after: no loader calls while dl_iterate_phdr holds its lock.
  std::vector<std::string> paths;
  dl_iterate_phdr(collectObject, &paths);
  for (const std::string& path : paths) {
    void* handle = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (!handle) continue;
    p = dlsym(handle, name);
    dlclose(handle);  // drops only the reference RTLD_NOLOAD added
    if (p && !isSelf(p)) return p;
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
