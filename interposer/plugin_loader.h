// plugin_loader.h — finding check plugins by name in the plugin directories and validating
// their ABI. Shared by libfumi (loads what the policy names) and the CLI (`fumi plugins`).
#pragma once

#include <string>
#include <vector>

#include "fumi/plugin.h"

namespace fumi {

struct PluginLibrary {
  std::string name;         // as requested / as declared by the plugin
  std::string path;         // file that was loaded
  std::string description;
  uint32_t abi_version = 0;
  const fumi_plugin* plugin = nullptr;  // null when `error` is set
  std::string error;        // why it cannot be used (missing, bad ABI, no entry point)
};

// What a plugin's findings mean; a plugin built before fumi_plugin.kind existed: error.
fumi_kind pluginKind(const fumi_plugin& p);
// "error" / "sensitivity" / "precision_cost" / "cancellation", as events and reports spell it.
const char* kindName(fumi_kind kind);

// File name of plugin `name` in a plugin directory: libfumi_<name>.so.
std::string pluginFileName(const std::string& name);

// Search `dirs` in order for plugin `name`; the library stays loaded for the process lifetime.
PluginLibrary loadPlugin(const std::string& name, const std::vector<std::string>& dirs);

// Load and describe every libfumi_*.so found in `dirs` (first occurrence of a name wins).
std::vector<PluginLibrary> discoverPlugins(const std::vector<std::string>& dirs);

// FUMI_PLUGIN_PATH entries (colon-separated), then `policy_dirs`, then `builtin_dir`.
std::vector<std::string> pluginSearchPath(const std::vector<std::string>& policy_dirs,
                                          const std::string& builtin_dir);

}  // namespace fumi
