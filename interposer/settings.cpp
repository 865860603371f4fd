// settings.cpp — reads the environment variables listed in settings.def.
#include "settings.h"

#include <cstdlib>

namespace fumi {

Settings readSettings() {
  Settings s;
#define FUMI_SETTING(member, env, def, desc)                 \
  if (const char* v = std::getenv(#env); v && *v) s.member = v;
#include "settings.def"
#undef FUMI_SETTING
  return s;
}

const SettingInfo* settingTable() {
  static const SettingInfo kTable[] = {
#define FUMI_SETTING(member, env, def, desc) {#env, def, desc},
#include "settings.def"
#undef FUMI_SETTING
      {nullptr, nullptr, nullptr}};
  return kTable;
}

}  // namespace fumi
