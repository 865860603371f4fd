// loader.cpp — fumi's dlopen wrapper: lets libfumi notice libraries loaded at run time (the
// PyTorch adapter attaches when libtorch_cpu appears) without changing how the loader treats
// the call. glibc resolves a bare library name against the RUNPATH/RPATH of the object that
// called dlopen, found from dlopen's return address; a plain wrapper would make libfumi that
// caller (cuDNN 9 dlopens its sub-libraries relative to its own RUNPATH). So the real dlopen is
// called with a return address inside the real caller's object (loader_thunk.S).
#include "loader.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>

#include "fumi/plugin.h"
#include "resolve.h"

extern "C" void* fumi_call_with_return_address(const char* file, int mode, void* fn,
                                               const void* ret);
// The same thunk for dlsym(handle, name): both arguments pass through in their registers.
extern "C" void* fumi_dlsym_with_return_address(void* handle, const char* name, void* fn,
                                                const void* ret)
    __asm__("fumi_call_with_return_address");

namespace fumi {
namespace {

using DlopenFn = void* (*)(const char*, int);

std::atomic<void*> g_real_dlopen{nullptr};

DlopenFn realDlopen() {
  void* p = g_real_dlopen.load(std::memory_order_acquire);
  if (!p) p = resolveRealOrDie("dlopen", g_real_dlopen);
  return reinterpret_cast<DlopenFn>(p);
}

struct GadgetSearch {
  const unsigned char* caller;
  const void* gadget = nullptr;
};

// Find a byte 0xC3 (`ret`) in the executable segment that contains the caller's address.
int findGadget(struct dl_phdr_info* info, size_t, void* data) {
  auto* s = static_cast<GadgetSearch*>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
    auto* start = reinterpret_cast<const unsigned char*>(info->dlpi_addr + ph.p_vaddr);
    const unsigned char* end = start + ph.p_memsz;
    if (s->caller < start || s->caller >= end) continue;
    if (const void* ret = std::memchr(start, 0xC3, ph.p_filesz < ph.p_memsz ? ph.p_filesz
                                                                            : ph.p_memsz)) {
      s->gadget = ret;
    }
    return 1;
  }
  return 0;
}

// A `ret` inside the object containing `caller`, cached per object (dlopen is not hot, but a
// program may call it thousands of times).
const void* gadgetFor(const void* caller) {
  Dl_info info{};
  if (!dladdr(caller, &info) || !info.dli_fbase) return nullptr;
  static std::mutex mu;
  static const void* bases[64];
  static const void* gadgets[64];
  static int count = 0;
  std::lock_guard<std::mutex> lock(mu);
  for (int i = 0; i < count; ++i)
    if (bases[i] == info.dli_fbase) return gadgets[i];
  GadgetSearch s{static_cast<const unsigned char*>(caller)};
  dl_iterate_phdr(findGadget, &s);
  if (count < 64) {
    bases[count] = info.dli_fbase;
    gadgets[count++] = s.gadget;
  }
  return s.gadget;
}

using DlsymFn = void* (*)(void*, const char*);

// libc's dlsym, found with dlvsym: looking it up with dlsym would call fumi's own wrapper.
DlsymFn realDlsym() {
  static const DlsymFn fn = [] {
    void* p = nullptr;
    for (const char* version : {"GLIBC_2.34", "GLIBC_2.2.5"})
      if (!p) p = dlvsym(RTLD_NEXT, "dlsym", version);
    return reinterpret_cast<DlsymFn>(p);
  }();
  return fn;
}

// libfumi's own definition of `name` (a hook or a wrapper it exports), or nullptr.
void* ownDefinition(const char* name) {
  static void* self = [] {
    Dl_info info{};
    dladdr(reinterpret_cast<const void*>(&realDlsym), &info);
    return info.dli_fname ? realDlopen()(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD) : nullptr;
  }();
  if (!self) return nullptr;
  void* p = realDlsym()(self, name);  // searches libfumi, then its dependencies
  return inSelf(p) ? p : nullptr;
}

}  // namespace

void* dlsymAsCaller(void* handle, const char* name, const void* caller) {
#if defined(__x86_64__)
  if (const void* gadget = gadgetFor(caller))
    return fumi_dlsym_with_return_address(handle, name, reinterpret_cast<void*>(realDlsym()),
                                          gadget);
#endif
  return realDlsym()(handle, name);
}

void* interposeLookup(void* handle, const char* name, void* found, const void* caller) {
  // RTLD_DEFAULT and RTLD_NEXT already follow the search order that puts libfumi first;
  // libfumi's own lookups (resolveReal) must get the real functions.
  if (!found || !name || handle == RTLD_DEFAULT || handle == RTLD_NEXT || inSelf(caller))
    return found;
  void* ours = ownDefinition(name);
  if (!ours || ours == found) return found;
  // fumi's hook forwards to resolveReal(name): hand it out only when that is the very
  // function the program asked for (not another copy of the library, loaded privately).
  return resolveReal(name) == found ? ours : found;
}

void* dlopenAsCaller(const char* file, int mode, const void* caller) {
#if defined(__x86_64__)
  if (const void* gadget = gadgetFor(caller))
    return fumi_call_with_return_address(file, mode, reinterpret_cast<void*>(realDlopen()),
                                         gadget);
#endif
  return realDlopen()(file, mode);  // no gadget: the loader sees libfumi as the caller
}

}  // namespace fumi

namespace {
// dlopen calls in progress on this thread: library constructors may dlopen too (libGLdispatch
// does, while torch's dependencies initialise); only the outermost call may act on what was
// loaded, once every constructor has run.
__thread int t_dlopen_depth __attribute__((tls_model("initial-exec"))) = 0;
}  // namespace

// dlsym(handle, name) on a library handle bypasses symbol interposition: a program (or cuDNN's
// Python frontend) that dlopens libcublas/libcudnn/libblas itself would call the real functions.
// For names fumi hooks, the wrapper hands out fumi's hook instead (interposeLookup).
extern "C" FUMI_EXPORT void* dlsym(void* handle, const char* name) {
  const void* caller = __builtin_return_address(0);
  return fumi::interposeLookup(handle, name, fumi::dlsymAsCaller(handle, name, caller), caller);
}

extern "C" FUMI_EXPORT void* dlopen(const char* file, int mode) {
  ++t_dlopen_depth;
  void* handle = fumi::dlopenAsCaller(file, mode, __builtin_return_address(0));
  if (--t_dlopen_depth == 0 && handle) fumi::onLibraryLoaded();
  return handle;
}
