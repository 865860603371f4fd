// A test plugin that sends its own thread SIGTERM from inside its third check: a signal that
// arrives while the program is inside fumi (tests/preload, Signals).
#include <csignal>

#include "fumi/plugin.h"

namespace {
int g_checks = 0;
void* create(const fumi_host_api*, const fumi_params*, char*, size_t) { return &g_checks; }
fumi_status check(void*, fumi_call*) {
  if (++g_checks == 3) std::raise(SIGTERM);
  return FUMI_OK;
}
void destroy(void*) {}
const fumi_plugin kPlugin = {FUMI_PLUGIN_ABI_VERSION, sizeof(fumi_plugin), "signalling",
                             "raises SIGTERM in its third check (test)", create, check, destroy,
                             FUMI_KIND_ERROR};
}  // namespace

extern "C" FUMI_EXPORT const fumi_plugin* fumi_plugin_entry(void) { return &kPlugin; }
