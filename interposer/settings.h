// settings.h — environment variables (table in settings.def).
#pragma once

#include <string>

namespace fumi {

struct Settings {
#define FUMI_SETTING(member, env, def, desc) std::string member = def;
#include "settings.def"
#undef FUMI_SETTING
};

// Read every variable of settings.def from the environment (unset or empty: its default).
Settings readSettings();

struct SettingInfo {
  const char* env;
  const char* default_value;
  const char* description;
};
// The table itself, for `fumi env` and documentation; terminated by {nullptr,...}.
const SettingInfo* settingTable();

}  // namespace fumi
