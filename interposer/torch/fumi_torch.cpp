// fumi_torch.cpp — the PyTorch adapter: a RecordFunction observer (FUNCTION scope: every aten
// op, forward, backward and optimizer) that counts each op under its aten name and keeps the
// thread's framework-op context, so BLAS calls report the aten op that made them.
// Loaded by libfumi only (interposer/adapter.cpp); talks to it through adapter_api.h.
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <unordered_map>

#include <ATen/record_function.h>

#include "adapter_api.h"

namespace {

const fumi_adapter_api* g_api = nullptr;

struct CachedSite {
  void* site;
  std::string name;
};

// name() of an op dispatched through the dispatcher points into its schema and is stable; other
// RecordFunctions own their name string, whose address may be reused: the cache is keyed by
// address and confirmed by content.
void* siteFor(const char* name) {
  thread_local std::unordered_map<const char*, CachedSite> cache;
  auto it = cache.find(name);
  if (it != cache.end() && it->second.name == name) return it->second.site;
  void* site = g_api->intern_op(name, "torch");
  cache[name] = CachedSite{site, name};
  return site;
}

std::unique_ptr<at::ObserverContext> onStart(const at::RecordFunction& fn) {
  void* site = siteFor(fn.name());
  g_api->count_call(site);
  g_api->push_context(site);
  return nullptr;
}

void onEnd(const at::RecordFunction&, at::ObserverContext*) { g_api->pop_context(); }

}  // namespace

extern "C" __attribute__((visibility("default"))) int fumi_torch_attach(
    const fumi_adapter_api* api, char* err, size_t err_len) {
  if (!api || api->abi_version != FUMI_ADAPTER_ABI_VERSION ||
      api->struct_size < sizeof(fumi_adapter_api)) {
    std::snprintf(err, err_len, "adapter API version mismatch");
    return 1;
  }
  g_api = api;
  try {
    at::addGlobalCallback(
        at::RecordFunctionCallback(onStart, onEnd).scopes({at::RecordScope::FUNCTION}));
  } catch (const std::exception& e) {
    std::snprintf(err, err_len, "cannot register the RecordFunction observer: %s", e.what());
    return 1;
  }
  return 0;
}
