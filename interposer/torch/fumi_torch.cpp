// fumi_torch.cpp — the PyTorch adapter: a RecordFunction observer (FUNCTION scope: every aten
// op, forward, backward and optimizer; USER_SCOPE: ranges such as "Optimizer.step#SGD.step") that counts each op under its aten name and keeps the
// thread's framework-op context, so BLAS calls report the aten op that made them.
// Loaded by libfumi only (interposer/adapter.cpp); talks to it through adapter_api.h.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>

#include <ATen/record_function.h>

#include "adapter_api.h"

namespace {

const fumi_adapter_api* g_api = nullptr;

// Op name -> libfumi site, looked up on every op. An open-addressing table keyed by the name's
// content (FNV-1a): RecordFunctions named by a string own that string, so its address changes
// from call to call, while the set of distinct names is small. Slots are written once, under
// the mutex, and read without it; a hit allocates nothing.
constexpr size_t kSlots = 4096;  // distinct op names in a process are in the hundreds
struct Slot {
  std::atomic<const char*> name{nullptr};  // owned copy; published after `site`
  void* site = nullptr;
};
Slot g_slots[kSlots];
std::mutex g_insert_mu;

void* siteFor(const char* name) {
  uint64_t h = 1469598103934665603ull;
  for (const char* p = name; *p; ++p) h = (h ^ static_cast<unsigned char>(*p)) * 1099511628211ull;
  for (size_t probe = 0, i = h % kSlots; probe < kSlots; ++probe, i = (i + 1) % kSlots) {
    const char* held = g_slots[i].name.load(std::memory_order_acquire);
    if (held == nullptr) {
      std::lock_guard<std::mutex> lock(g_insert_mu);
      if (g_slots[i].name.load(std::memory_order_relaxed) != nullptr) {
        --probe;  // another thread filled this slot meanwhile: look at it again
        i = (i + kSlots - 1) % kSlots;
        continue;
      }
      g_slots[i].site = g_api->intern_op(name, "torch");
      g_slots[i].name.store(strdup(name), std::memory_order_release);
      return g_slots[i].site;
    }
    if (std::strcmp(held, name) == 0) return g_slots[i].site;
  }
  return g_api->intern_op(name, "torch");  // table full: slow but correct
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
        at::RecordFunctionCallback(onStart, onEnd)
            .scopes({at::RecordScope::FUNCTION, at::RecordScope::USER_SCOPE}));
  } catch (const std::exception& e) {
    std::snprintf(err, err_len, "cannot register the RecordFunction observer: %s", e.what());
    return 1;
  }
  return 0;
}
