// device_compare.h — the host's side of comparing two outputs with fumi's kernels: the first
// pass's maxima and counts, the scales and guards metrics.h derives from them, the second
// pass, the comparison (the same fields as compareTensor's, metrics.h's detail:: steps). Host
// code only; `reduce` runs one reduction (device_kernels.h, ReduceParams) and gives its fields:
// the device's launches in libfumi, their grids run on the host in the tests.
#pragma once

#include "device_kernels.h"
#include "fumi/plugin.h"
#include "metrics.h"

namespace fumi::cuda {

template <class Reduce>
fumi_status compareWithKernels(const void* a, fumi_dtype a_dtype, const void* b,
                               fumi_dtype b_dtype, const fumi_compare_spec& spec, Reduce reduce,
                               fumi_comparison* out) {
  namespace kn = kern;
  kn::ReduceParams p;
  p.op = kn::kComparePass1;
  p.a = a;
  p.b = b;
  p.a_dtype = a_dtype;
  p.b_dtype = b_dtype;
  p.max_mask = kn::kPass1Max;
  p.underflow_below = spec.underflow_below;
  double f1[kn::kFields];
  if (!reduce(p, f1)) return FUMI_UNSUPPORTED;
  metrics::detail::ComparePass1 p1;
  p1.nonfinite = static_cast<size_t>(f1[0]);
  p1.mismatches = static_cast<size_t>(f1[1]);
  p1.max_half_sum = f1[3];
  p1.max_y = f1[4];
  p1.max_ref = f1[5];
  p1.max_diff = f1[6];
  const metrics::detail::CompareScales k = metrics::detail::compareScales(p1, spec);
  metrics::detail::ComparePass2 p2;
  if (k.any()) {
    p.op = kn::kComparePass2;
    p.max_mask = kn::kPass2Max;
    const uint32_t want = (k.ratio ? kn::kWantRatio : 0u) | (k.rel ? kn::kWantRel : 0u) |
                          (k.ulp ? kn::kWantUlp : 0u);
    p.k = {want, k.f, k.ratio_threshold, k.rel_threshold, k.s_diff, k.s_ref, k.s_y, k.p, k.emin};
    double f2[kn::kFields];
    if (!reduce(p, f2)) return FUMI_UNSUPPORTED;
    p2 = metrics::detail::ComparePass2{f2[0], f2[1], f2[2], f2[3], f2[4], f2[5], f2[6]};
  }
  *out = metrics::detail::compareResult(p1, p2, k);
  if (spec.underflow_below > 0) out->underflow = static_cast<uint64_t>(f1[2]);
  return FUMI_OK;
}

}  // namespace fumi::cuda
