// A test plugin built for a future ABI: fumi must refuse it with a clear message.
#include "fumi/plugin.h"

namespace {
const fumi_plugin kPlugin = {FUMI_PLUGIN_ABI_VERSION + 41, sizeof(fumi_plugin), "wrongabi",
                             "claims another ABI version (test)", nullptr, nullptr, nullptr,
                             FUMI_KIND_ERROR};
}  // namespace

extern "C" FUMI_EXPORT const fumi_plugin* fumi_plugin_entry(void) { return &kPlugin; }
