// device_launch.h — fumi's own kernels (device_kernels.h) run on the checker's stream, for the
// checks of CUDA library calls: checksum's projections, the NaN/Inf scan, the comparison of
// outputs and the conversion of inputs for a wider rerun, over strided views of device memory,
// with only the results copied to the host. The module (a fatbin nvcc built
// into libfumi) is loaded through the driver API (libcuda.so.1, opened at run time, never
// linked) on the checker thread's first use. FUMI_UNSUPPORTED wherever the kernels are not
// there (a build without nvcc, no driver, FUMI_DEVICE_KERNELS=0, a failed load or launch: said
// once) or do not apply: the caller then copies the tensors to the host, as before.
#pragma once

#include <cstdint>

#include "adapter_api.h"
#include "fumi/plugin.h"

namespace fumi::cuda {

class Checker;

// fumi_adapter_call.contract's semantics: `count` host vectors contracted along `dim` of
// `view` (device memory, strides >= 0), the result in host memory in project's layout.
fumi_status deviceContract(Checker& ck, const fumi_tensor& view, int32_t dim, int32_t count,
                           const double* vectors, double* out);
// fumi_adapter_call.convolve's semantics (fumi_device_conv, in fp64): the device operand read
// where it lives, the host operand copied to the device, the result copied to conv.out.
fumi_status deviceConvolve(Checker& ck, const fumi_device_conv& conv);
// scanTensor's result for t's elements in `data` (device memory laid out like t) of `dtype`;
// FUMI_UNSUPPORTED also where the squares could leave fp64's range (the host's scaled pass).
fumi_status deviceScan(Checker& ck, const fumi_tensor& t, const void* data, fumi_dtype dtype,
                       fumi_scan* out);

// mapTensor's (COPY, ABS, PERTURB: highprec's widened inputs, perturb's perturbed ones), bit
// for bit: dst laid out like t.
fumi_status deviceMap(Checker& ck, const fumi_tensor& t, const void* src, fumi_dtype src_dtype,
                      void* dst, fumi_dtype dst_dtype, const fumi_map_spec& spec,
                      uint64_t* changed);
// compareTensor's result (metrics.h's two passes, on the device) for a and b (device memory
// laid out like t, of their dtypes): only the passes' partial results come back.
fumi_status deviceCompare(Checker& ck, const fumi_tensor& t, const void* a, fumi_dtype a_dtype,
                          const void* b, fumi_dtype b_dtype, const fumi_compare_spec& spec,
                          fumi_comparison* out);

}  // namespace fumi::cuda
