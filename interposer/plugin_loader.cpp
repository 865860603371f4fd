// plugin_loader.cpp — locate libfumi_<name>.so in the plugin directories and check its ABI.
#include "plugin_loader.h"

#include <dirent.h>
#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <set>
#include <sstream>

namespace fumi {
namespace {

bool fileExists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Open `path` and validate its entry point; fills everything but `name` on success.
PluginLibrary openPlugin(const std::string& path) {
  PluginLibrary lib;
  lib.path = path;
  // RTLD_LOCAL: plugins must not leak symbols into the host program's namespace.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* e = dlerror();
    lib.error = std::string("cannot load ") + path + ": " + (e ? e : "unknown error");
    return lib;
  }
  auto entry = reinterpret_cast<fumi_plugin_entry_fn>(dlsym(handle, FUMI_PLUGIN_ENTRY_SYMBOL));
  if (!entry) {
    lib.error = path + " has no " FUMI_PLUGIN_ENTRY_SYMBOL " entry point";
    return lib;
  }
  const fumi_plugin* p = nullptr;
  try {
    p = entry();
  } catch (...) {
    lib.error = path + ": " FUMI_PLUGIN_ENTRY_SYMBOL " threw an exception";
    return lib;
  }
  if (!p) {
    lib.error = path + ": " FUMI_PLUGIN_ENTRY_SYMBOL " returned NULL";
    return lib;
  }
  lib.abi_version = p->abi_version;
  if (p->abi_version < FUMI_PLUGIN_ABI_OLDEST || p->abi_version > FUMI_PLUGIN_ABI_VERSION) {
    std::ostringstream s;
    s << path << " speaks plugin ABI " << p->abi_version << ", this fumi speaks "
      << FUMI_PLUGIN_ABI_OLDEST << " to " << FUMI_PLUGIN_ABI_VERSION;
    lib.error = s.str();
    return lib;
  }
  if (p->struct_size < offsetof(fumi_plugin, kind) || !p->create || !p->check || !p->name) {
    lib.error = path + ": incomplete fumi_plugin (struct_size or entry points missing)";
    return lib;
  }
  lib.name = p->name;
  lib.description = p->description ? p->description : "";
  lib.plugin = p;
  return lib;
}

}  // namespace

fumi_kind pluginKind(const fumi_plugin& p) {
  if (p.struct_size < offsetof(fumi_plugin, kind) + sizeof(p.kind)) return FUMI_KIND_ERROR;
  return p.kind == FUMI_KIND_SENSITIVITY ? FUMI_KIND_SENSITIVITY : FUMI_KIND_ERROR;
}

const char* kindName(fumi_kind kind) {
  switch (kind) {
    case FUMI_KIND_SENSITIVITY: return "sensitivity";
    case FUMI_KIND_PRECISION_COST: return "precision_cost";
    case FUMI_KIND_CANCELLATION: return "cancellation";
    default: return "error";
  }
}

std::string pluginFileName(const std::string& name) { return "libfumi_" + name + ".so"; }

PluginLibrary loadPlugin(const std::string& name, const std::vector<std::string>& dirs) {
  const bool valid_name = !name.empty() && name.find('/') == std::string::npos;
  for (const std::string& dir : dirs) {
    if (!valid_name) break;
    const std::string path = dir + "/" + pluginFileName(name);
    if (!fileExists(path)) continue;
    PluginLibrary lib = openPlugin(path);
    if (lib.plugin && lib.name != name) {
      lib.error = path + " declares itself as plugin '" + lib.name + "', not '" + name + "'";
      lib.plugin = nullptr;
    }
    lib.name = name;
    return lib;
  }
  PluginLibrary missing;
  missing.name = name;
  std::string searched;
  for (const std::string& d : dirs) searched += (searched.empty() ? "" : ":") + d;
  missing.error = "plugin '" + name + "' not found (looked for " + pluginFileName(name) +
                  " in " + (searched.empty() ? "no directories" : searched) + ")";
  return missing;
}

std::vector<PluginLibrary> discoverPlugins(const std::vector<std::string>& dirs) {
  std::vector<PluginLibrary> out;
  std::set<std::string> seen;
  for (const std::string& dir : dirs) {
    DIR* d = ::opendir(dir.c_str());
    if (!d) continue;
    std::vector<std::string> files;
    while (dirent* e = ::readdir(d)) {
      const std::string f = e->d_name;
      if (f.rfind("libfumi_", 0) == 0 && f.size() > 11 && f.compare(f.size() - 3, 3, ".so") == 0)
        files.push_back(f);
    }
    ::closedir(d);
    std::sort(files.begin(), files.end());
    for (const std::string& f : files) {
      const std::string name = f.substr(8, f.size() - 11);
      if (!seen.insert(name).second) continue;
      PluginLibrary lib = openPlugin(dir + "/" + f);
      if (lib.name.empty()) lib.name = name;
      out.push_back(std::move(lib));
    }
  }
  return out;
}

std::vector<std::string> pluginSearchPath(const std::vector<std::string>& policy_dirs,
                                          const std::string& builtin_dir) {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("FUMI_PLUGIN_PATH")) {
    std::stringstream ss(env);
    std::string item;
    while (std::getline(ss, item, ':'))
      if (!item.empty()) dirs.push_back(item);
  }
  dirs.insert(dirs.end(), policy_dirs.begin(), policy_dirs.end());
  if (!builtin_dir.empty()) dirs.push_back(builtin_dir);
  return dirs;
}

}  // namespace fumi
