// A test plugin that sends its own thread SIGTERM from inside its third check: a signal that
// arrives while the program is inside fumi (tests/preload, Signals). With `hang: true` that
// check then never returns (a check stuck inside fumi).
#include <unistd.h>

#include <csignal>
#include <cstring>

#include "fumi/plugin.h"

namespace {
int g_checks = 0;
bool g_hang = false;
void* create(const fumi_host_api*, const fumi_params* params, char*, size_t) {
  for (int i = 0; i < params->count; ++i)
    if (std::strcmp(params->items[i].key, "hang") == 0)
      g_hang = std::strcmp(params->items[i].value, "true") == 0;
  return &g_checks;
}
fumi_status check(void*, fumi_call*) {
  if (++g_checks == 3) {
    std::raise(SIGTERM);
    while (g_hang) pause();
  }
  return FUMI_OK;
}
void destroy(void*) {}
const fumi_plugin kPlugin = {FUMI_PLUGIN_ABI_VERSION, sizeof(fumi_plugin), "signalling",
                             "raises SIGTERM in its third check (test)", create, check, destroy,
                             FUMI_KIND_ERROR};
}  // namespace

extern "C" FUMI_EXPORT const fumi_plugin* fumi_plugin_entry(void) { return &kPlugin; }
