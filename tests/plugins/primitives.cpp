// A test plugin that reports what the host's element-wise primitives (plugin.h, ABI 2: map,
// compare, scan) compute on every floating tensor of a call, field by field, so that a test can
// set the primitives of one memory against another's on the same data (the torch adapter's
// device primitives against the host's: tests/torch, DevicePrimitives). Per tensor i it reports
//   t<i>.scan     the tensor's scan: nan (value), inf, max_abs, norm
//   t<i>.perturb  map PERTURB into a buffer of the tensor's dtype: elements changed (value),
//                 then that buffer's scan and the buffer against the tensor (compare's fields,
//                 in this and the next verdict)
//   t<i>.compare  (value fumi_ratio) the remaining fields
//   t<i>.abs      map ABS into an f64 buffer, compared with the tensor: mismatches (value)
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>

#include "fumi/plugin.h"

namespace {

const fumi_host_api* g_host = nullptr;

void* create(const fumi_host_api* host, const fumi_params*, char*, size_t) {
  g_host = host;
  static int instance;
  return &instance;
}

struct Verdict {
  fumi_verdict v{};
  std::string metric;
  Verdict(std::string name, double value) : metric(std::move(name)) {
    v.struct_size = sizeof v;
    v.metric = metric.c_str();
    v.value = value;
    v.tolerance = INFINITY;
  }
  Verdict& extra(const char* name, double value) {
    v.extra[v.nextra++] = fumi_metric{name, value};
    return *this;
  }
};

fumi_status check(void*, fumi_call* call) {
  const fumi_call_info* info = g_host->call_info(call);
  for (int32_t i = 0; i < info->ntensors; ++i) {
    const fumi_tensor& t = info->tensors[i];
    if (t.dtype > FUMI_DTYPE_BF16 || g_host->numel(call, i) == 0) continue;
    const std::string name = "t" + std::to_string(i);
    fumi_scan s{};
    s.struct_size = sizeof s;
    if (g_host->scan(call, i, nullptr, t.dtype, &s) != FUMI_OK) return FUMI_UNSUPPORTED;
    Verdict scan(name + ".scan", static_cast<double>(s.nan));
    scan.extra("inf", static_cast<double>(s.inf)).extra("max_abs", s.max_abs);
    scan.extra("norm", s.norm);
    g_host->report(call, &scan.v);

    void* perturbed = g_host->alloc_like(call, i, t.dtype);
    void* magnitude = g_host->alloc_like(call, i, FUMI_DTYPE_F64);
    if (!perturbed || !magnitude) return FUMI_NO_SCRATCH;
    // The count read only after the scan and the comparison below (it may come back with them).
    const fumi_map_spec noise{sizeof(fumi_map_spec), FUMI_MAP_PERTURB, std::ldexp(1.0, -8),
                              0x5eedull + static_cast<uint64_t>(i), 1000, FUMI_MAP_CHANGED_LATER};
    uint64_t changed = 0;
    if (g_host->map(call, i, nullptr, t.dtype, perturbed, t.dtype, &noise, &changed) != FUMI_OK)
      return FUMI_UNSUPPORTED;
    fumi_scan ps{};
    ps.struct_size = sizeof ps;
    fumi_comparison c{};
    c.struct_size = sizeof c;
    const fumi_compare_spec spec{sizeof(fumi_compare_spec), 1e-3, 1e-3, t.dtype,
                                 std::ldexp(1.0, -14), 0};  // metrics 0: every field
    if (g_host->scan(call, i, perturbed, t.dtype, &ps) != FUMI_OK ||
        g_host->compare(call, i, perturbed, t.dtype, nullptr, t.dtype, &spec, &c) != FUMI_OK)
      return FUMI_UNSUPPORTED;
    Verdict p(name + ".perturb", static_cast<double>(changed));
    p.extra("nan", static_cast<double>(ps.nan)).extra("inf", static_cast<double>(ps.inf));
    p.extra("max_abs", ps.max_abs).extra("norm", ps.norm).extra("normwise", c.normwise);
    p.extra("norm_ratio", c.norm_ratio).extra("underflow", static_cast<double>(c.underflow));
    g_host->report(call, &p.v);
    Verdict cmp(name + ".compare", c.fumi_ratio);
    cmp.extra("fumi_ratio_unguarded", c.fumi_ratio_unguarded).extra("max_rel", c.max_rel);
    cmp.extra("ulp", c.ulp).extra("max_abs_diff", c.max_abs_diff);
    cmp.extra("nonfinite", static_cast<double>(c.nonfinite));
    cmp.extra("mismatches", static_cast<double>(c.mismatches));
    g_host->report(call, &cmp.v);

    // As a plugin built before fumi_map_spec.flags passes it.
    const fumi_map_spec abs{offsetof(fumi_map_spec, flags), FUMI_MAP_ABS, 0.0, 0, 0, 0};
    fumi_comparison a{};
    a.struct_size = sizeof a;
    const fumi_compare_spec plain{sizeof(fumi_compare_spec), 0.0, 0.0, FUMI_DTYPE_UNKNOWN, 0.0, 0};
    if (g_host->map(call, i, nullptr, t.dtype, magnitude, FUMI_DTYPE_F64, &abs, nullptr) !=
            FUMI_OK ||
        g_host->compare(call, i, magnitude, FUMI_DTYPE_F64, nullptr, t.dtype, &plain, &a) !=
            FUMI_OK)
      return FUMI_UNSUPPORTED;
    Verdict m(name + ".abs", static_cast<double>(a.mismatches));
    m.extra("max_abs_diff", a.max_abs_diff).extra("nonfinite", static_cast<double>(a.nonfinite));
    g_host->report(call, &m.v);
  }
  return FUMI_OK;
}

void destroy(void*) {}

const fumi_plugin kPlugin = {FUMI_PLUGIN_ABI_VERSION, sizeof(fumi_plugin), "primitives",
                             "reports the element-wise primitives' results field by field (test)",
                             create, check, destroy, FUMI_KIND_ERROR};

}  // namespace

extern "C" FUMI_EXPORT const fumi_plugin* fumi_plugin_entry(void) { return &kPlugin; }
