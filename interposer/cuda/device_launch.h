// device_launch.h — fumi's own kernels (device_kernels.h): checksum's projections, the NaN/Inf
// scan, the comparison of outputs and the conversion of inputs for a wider rerun, over strided
// views of device memory, with only the results copied to the host. They run on an Exec: the
// checker's stream and pool, for the checks of CUDA library calls, or a framework's current
// stream and allocator, for the element-wise primitives of checks of framework ops on CUDA
// tensors (a handful of launches where the framework's own ops take a hundred and more). The
// module (a fatbin nvcc built into libfumi) is loaded through the driver API (libcuda.so.1,
// opened at run time, never linked) into each CUDA context on its first use there.
// FUMI_UNSUPPORTED wherever the kernels are not there (a build without nvcc, no driver,
// FUMI_DEVICE_KERNELS=0, a failed load or launch: said once) or do not apply: the caller then
// takes another way (host copies, the framework's own ops).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>

#include "adapter_api.h"
#include "fumi/plugin.h"

namespace fumi {
class Call;
}

namespace fumi::cuda {

// Where the kernels run: a stream (cudaStream_t), device scratch, and copies that return once
// the copy is done. `ordered`: scratch is reused only in the stream's order (a framework's
// caching allocator on that stream), so work whose results are not read back (a map whose
// count nobody asks for) is left queued there, not waited for.
struct Exec {
  void* stream = nullptr;
  bool ordered = false;
  std::function<void*(size_t)> alloc;
  std::function<void(void*)> release;
  std::function<bool(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind)> copy;
};

// An Exec on `stream` (a framework's current stream on the calling thread's current device;
// nullptr: the legacy default stream) whose scratch is `call`'s device memory (the framework's
// allocator, ordered on that stream) and whose copies wait for that stream. False where the
// runtime's functions are missing or the stream is capturing a graph.
bool streamExec(void* stream, Call& call, Exec* ex);

// fumi_adapter_call.contract's semantics: `count` host vectors contracted along `dim` of
// `view` (device memory, strides >= 0), the result in host memory in project's layout.
fumi_status deviceContract(const Exec& ex, const fumi_tensor& view, int32_t dim, int32_t count,
                           const double* vectors, double* out);
// fumi_adapter_call.convolve's semantics (fumi_device_conv, in fp64): the device operand read
// where it lives, the host operand copied to the device, the result copied to conv.out.
fumi_status deviceConvolve(const Exec& ex, const fumi_device_conv& conv);
// scanTensor's result for t's elements in `data` (device memory laid out like t) of `dtype`;
// FUMI_UNSUPPORTED also where the squares could leave fp64's range (the host's scaled pass).
fumi_status deviceScan(const Exec& ex, const fumi_tensor& t, const void* data, fumi_dtype dtype,
                       fumi_scan* out);

// mapTensor's (COPY, ABS, PERTURB: highprec's widened inputs, perturb's perturbed ones), bit
// for bit: dst laid out like t.
fumi_status deviceMap(const Exec& ex, const fumi_tensor& t, const void* src, fumi_dtype src_dtype,
                      void* dst, fumi_dtype dst_dtype, const fumi_map_spec& spec,
                      uint64_t* changed);
// compareTensor's result (metrics.h's two passes, on the device) for a and b (device memory
// laid out like t, of their dtypes): only the passes' partial results come back.
fumi_status deviceCompare(const Exec& ex, const fumi_tensor& t, const void* a, fumi_dtype a_dtype,
                          const void* b, fumi_dtype b_dtype, const fumi_compare_spec& spec,
                          fumi_comparison* out);

}  // namespace fumi::cuda
