// api.cpp — the few fumi_* functions libfumi exports besides the hooks.
#include "fumi/plugin.h"

extern "C" {

// Version of the loaded libfumi, e.g. for an adapter library to check what it talks to.
FUMI_EXPORT const char* fumi_version(void) { return FUMI_VERSION; }

// Plugin ABI version this libfumi speaks.
FUMI_EXPORT uint32_t fumi_plugin_abi_version(void) { return FUMI_PLUGIN_ABI_VERSION; }

}
