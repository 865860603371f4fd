// A test plugin that rejects a parameter value and otherwise returns FUMI_ERROR from check.
#include <cstdio>
#include <cstring>

#include "fumi/plugin.h"

namespace {
void* create(const fumi_host_api*, const fumi_params* params, char* err, size_t err_len) {
  for (int i = 0; i < params->count; ++i)
    if (std::strcmp(params->items[i].key, "reject") == 0) {
      std::snprintf(err, err_len, "parameter 'reject' given: refusing (test)");
      return nullptr;
    }
  static int instance;
  return &instance;
}
fumi_status check(void*, fumi_call*) { return FUMI_ERROR; }
void destroy(void*) {}
const fumi_plugin kPlugin = {FUMI_PLUGIN_ABI_VERSION, sizeof(fumi_plugin), "failing",
                             "returns FUMI_ERROR (test)", create, check, destroy,
                             FUMI_KIND_ERROR};
}  // namespace

extern "C" FUMI_EXPORT const fumi_plugin* fumi_plugin_entry(void) { return &kPlugin; }
