// adapter.cpp — loading framework adapters when their framework appears in the process.
// libfumi never links torch: after each dlopen it looks for libtorch_cpu among the loaded
// objects and, the first time it is there, loads libfumi_torch.so (built against that torch)
// from <dir of libfumi>/fumi/ and hands it the adapter API. Processes without torch pay one
// scan of the loaded-object list per dlopen and load nothing.
#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

#include "adapter_api.h"
#include "context.h"
#include "loader.h"
#include "resolve.h"
#include "runtime.h"
#include "settings.h"
#include "site.h"

namespace fumi {
namespace {

void* apiInternOp(const char* name, const char* backend) {
  if (!name || !backend) return nullptr;
  return &internSite(name, backend, FUMI_DTYPE_UNKNOWN);
}

void apiCountCall(void* site) {
  uint64_t index;
  if (site) static_cast<OpSite*>(site)->onCall(index);
}

void apiPush(void* site) { pushContext(static_cast<OpSite*>(site)); }
void apiPop() { popContext(); }

const fumi_adapter_api kAdapterApi = {FUMI_ADAPTER_ABI_VERSION, sizeof(fumi_adapter_api),
                                      apiInternOp, apiCountCall, apiPush, apiPop};

int findTorch(struct dl_phdr_info* info, size_t, void* found) {
  if (info->dlpi_name && std::strstr(info->dlpi_name, "/libtorch_cpu.so")) {
    *static_cast<bool*>(found) = true;
    return 1;
  }
  return 0;
}

std::string adapterPath() {
  const std::string dir = selfDir();
  return dir.empty() ? dir : dir + "/fumi/libfumi_torch.so";
}

std::atomic<bool> g_torch_attached{false};

}  // namespace

void onLibraryLoaded() {
  if (g_torch_attached.load(std::memory_order_acquire) || t_inside_fumi) return;
  bool torch = false;
  dl_iterate_phdr(findTorch, &torch);
  if (!torch || g_torch_attached.exchange(true)) return;
  // Torch ops may run long before the first BLAS call: initialise now.
  if (!enter()) return;  // disabled, or the policy failed
  InsideScope inside;
  const std::string path = adapterPath();
  void* handle = dlopenAsCaller(path.c_str(), RTLD_NOW | RTLD_LOCAL,
                                reinterpret_cast<const void*>(&onLibraryLoaded));
  if (!handle) {
    const char* e = dlerror();
    internalError("torch adapter", (std::string("cannot load ") + path + ": " +
                                    (e ? e : "unknown error"))
                                       .c_str());
    return;
  }
  auto attach = reinterpret_cast<fumi_adapter_attach_fn>(dlsym(handle, FUMI_TORCH_ATTACH_SYMBOL));
  char err[256] = "";
  if (!attach) {
    internalError("torch adapter", (path + " has no " FUMI_TORCH_ATTACH_SYMBOL).c_str());
  } else if (attach(&kAdapterApi, err, sizeof err) != 0) {
    internalError("torch adapter", err[0] ? err : "attach failed");
  }
}

}  // namespace fumi
