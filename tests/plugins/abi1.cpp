// A test plugin built the way an ABI-1 plugin was (abi_version 1, fumi_host_api as ABI 1 knew
// it): fumi must still load it, hand it a host API marked 1, and serve its gather and report.
// It reports the largest |output| as metric "absmax".
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <vector>

#include "fumi/plugin.h"

namespace {
const fumi_host_api* g_host = nullptr;

void* create(const fumi_host_api* host, const fumi_params*, char* err, size_t err_len) {
  if (!host || host->abi_version != 1 ||
      host->struct_size < offsetof(fumi_host_api, reference)) {
    std::snprintf(err, err_len, "abi1: expected a host API marked 1");
    return nullptr;
  }
  g_host = host;
  static int instance;
  return &instance;
}

fumi_status check(void*, fumi_call* call) {
  const fumi_call_info* info = g_host->call_info(call);
  double absmax = 0.0;
  for (int32_t i = 0; i < info->ntensors; ++i) {
    if (info->tensors[i].role != FUMI_ROLE_OUTPUT) continue;
    std::vector<double> v(static_cast<size_t>(g_host->numel(call, i)));
    if (g_host->gather(call, i, nullptr, info->tensors[i].dtype, v.data()) != FUMI_OK)
      return FUMI_ERROR;
    for (double x : v) absmax = std::fmax(absmax, std::fabs(x));
  }
  fumi_verdict v{};
  v.struct_size = sizeof v;
  v.metric = "absmax";
  v.value = absmax;
  v.tolerance = INFINITY;
  g_host->report(call, &v);
  return FUMI_OK;
}

void destroy(void*) {}
const fumi_plugin kPlugin = {1u, sizeof(fumi_plugin), "abi1", "an ABI-1 plugin (test)",
                             create, check, destroy, FUMI_KIND_ERROR};
}  // namespace

extern "C" FUMI_EXPORT const fumi_plugin* fumi_plugin_entry(void) { return &kPlugin; }
