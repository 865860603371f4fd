// device_kernels.cu — the __global__ entry points of fumi's own kernels (device_kernels.h has
// the bodies and says what each computes). Built by nvcc into a fatbin that libfumi embeds and
// loads through the driver API (device_launch.cpp); libfumi itself is never linked to CUDA.
#include "device_kernels.h"

using namespace fumi::cuda::kern;

namespace {
__device__ int64_t threadIndex() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
}  // namespace

extern "C" __global__ void fumi_contract_partial(ContractParams p) {
  contractPartialBody(p, threadIndex(), blockIdx.y);
}
extern "C" __global__ void fumi_contract_reduce(ContractParams p) {
  contractReduceBody(p, threadIndex());
}
extern "C" __global__ void fumi_reduce_partial(ReduceParams p) {
  reducePartialBody(p, threadIndex());
}
extern "C" __global__ void fumi_reduce_combine(ReduceParams p) {
  reduceCombineBody(p, threadIndex());
}
extern "C" __global__ void fumi_conv_partial(ConvParams p) {
  convPartialBody(p, threadIndex(), blockIdx.y);
}
extern "C" __global__ void fumi_conv_reduce(ConvParams p) { convReduceBody(p, threadIndex()); }
