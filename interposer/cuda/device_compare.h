// device_compare.h — the host's side of comparing two outputs with fumi's kernels: the first
// pass's maxima and counts, the second pass with the scales and guards metrics.h derives from
// them (on the device), the comparison (the same fields as compareTensor's, metrics.h's
// detail:: steps). Host code only; `reduce` runs `count` reductions one after the other
// (device_kernels.h, ReduceParams; the later reading the earlier's fields) and gives their
// fields: the device's launches in libfumi, their grids run on the host in the tests.
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
  namespace md = metrics::detail;
  kn::ReduceParams passes[2];
  kn::ReduceParams& p = passes[0];
  p.op = kn::kComparePass1;
  p.a = a;
  p.b = b;
  p.a_dtype = a_dtype;
  p.b_dtype = b_dtype;
  p.max_mask = kn::kPass1Max;
  p.underflow_below = spec.underflow_below;
  // The second pass derives its scales from the first pass's fields on the device (the same
  // function as the host's below): both come back in one copy.
  passes[1] = p;
  passes[1].op = kn::kComparePass2;
  passes[1].max_mask = kn::kPass2Max;
  passes[1].k = md::compareWants(spec);
  const int count = passes[1].k.any() ? 2 : 1;
  double f[2 * kn::kFields];
  if (!reduce(passes, count, f)) return FUMI_UNSUPPORTED;
  md::ComparePass1 p1;
  p1.nonfinite = static_cast<size_t>(f[0]);
  p1.mismatches = static_cast<size_t>(f[1]);
  p1.max_half_sum = f[3];
  p1.max_y = f[4];
  p1.max_ref = f[5];
  p1.max_diff = f[6];
  const md::CompareScales k = md::compareScales(p1, spec);
  md::ComparePass2 p2;
  if (count == 2) {
    const double* f2 = f + kn::kFields;
    p2 = md::ComparePass2{f2[0], f2[1], f2[2], f2[3], f2[4], f2[5], f2[6]};
  }
  *out = md::compareResult(p1, p2, k);
  if (spec.underflow_below > 0) out->underflow = static_cast<uint64_t>(f[2]);
  return FUMI_OK;
}

}  // namespace fumi::cuda
