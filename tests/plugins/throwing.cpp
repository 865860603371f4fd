// A test plugin whose check throws: fumi must disable it and keep the program's results.
#include <stdexcept>

#include "fumi/plugin.h"

namespace {
void* create(const fumi_host_api*, const fumi_params*, char*, size_t) {
  static int instance;
  return &instance;
}
fumi_status check(void*, fumi_call*) { throw std::runtime_error("planted failure in check"); }
void destroy(void*) {}
const fumi_plugin kPlugin = {FUMI_PLUGIN_ABI_VERSION, sizeof(fumi_plugin), "throwing",
                             "throws from check (test)", create, check, destroy,
                             FUMI_KIND_ERROR};
}  // namespace

extern "C" FUMI_EXPORT const fumi_plugin* fumi_plugin_entry(void) { return &kPlugin; }
