// cudnn.cpp — the simulated device's libcudnn.so.9 stand-in (tests only).
//
// Compiled against the real cuDNN 9 headers; cudnn.map exports the names under the real
// library's version node (libcudnn.so.9). Test programs linked against the real libcudnn.so.9
// bind to it when it is preloaded (with the cudart stand-in, which it needs).
//
// Emulated (the legacy API, real signatures and documented statuses):
//  - library: cudnnGetVersion, cudnnGetMaxDeviceVersion, cudnnGetCudartVersion,
//    cudnnGetProperty, cudnnGetErrorString, cudnnGetLastErrorString (always empty), the
//    cudnn{Graph,Ops,Cnn,Adv}VersionCheck calls; handles: cudnnCreate, cudnnDestroy,
//    cudnnSetStream, cudnnGetStream (default: the legacy default stream).
//  - tensor descriptors (create/destroy, Set4d with NCHW and NHWC, Set4dEx, SetNd with any
//    strides, SetNdEx with NCHW/NHWC, Get4d, GetNd, GetTensorSizeInBytes), filter descriptors
//    (Set4d/SetNd with NCHW = KCRS or NHWC = KRSC, Get4d/GetNd), convolution descriptors (2d
//    and Nd, group count, math type, forward output dims), activation descriptors, workspace
//    sizes (always 0 bytes), cudnnDeriveBNTensorDescriptor.
//  - compute, enqueued on the handle's stream as one "kernel" each (sim_conv.h does the
//    arithmetic; kernel names sim_cudnn_<op>_<data type>_kernel): cudnnConvolutionForward,
//    cudnnConvolutionBackwardData, cudnnConvolutionBackwardFilter,
//    cudnnConvolutionBiasActivationForward (RELU, or IDENTITY with IMPLICIT_PRECOMP_GEMM only,
//    as documented), cudnnBatchNormalizationForwardTraining / ForwardInference / Backward
//    (PER_ACTIVATION, SPATIAL, SPATIAL_PERSISTENT), and their Ex forms
//    cudnnBatchNormalizationForwardTrainingEx / BackwardEx with CUDNN_BATCHNORM_OPS_BN (the
//    plain forms' code; z, activation, workspace and reserve space unused; BN_ACTIVATION and
//    BN_ADD_ACTIVATION are CUDNN_STATUS_NOT_SUPPORTED) with their workspace / reserve-space
//    size queries (0 bytes).
//  - convolution arithmetic: 1-3 spatial dimensions, padding, stride, dilation, groups, true
//    convolution (filter flipped) or cross-correlation, any non-negative strides. Supported
//    configurations (others CUDNN_STATUS_NOT_SUPPORTED): DOUBLE data + DOUBLE compute (double
//    accumulation), FLOAT + FLOAT, HALF + FLOAT, BFLOAT16 + FLOAT (float accumulation), HALF +
//    HALF (float accumulation then fp16 output, as tensor-core kernels do; fp16 accumulation
//    only under the planted fault accum16). FLOAT data under CUDNN_DEFAULT_MATH,
//    CUDNN_TENSOR_OP_MATH or CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION rounds x, w, dy to TF32 first
//    (cuDNN on Ampere and later; NVIDIA_TF32_OVERRIDE=0 turns it off, as in the real
//    libraries); CUDNN_FMA_MATH is plain fp32. Every algo enum value runs the same arithmetic;
//    values outside the enum are CUDNN_STATUS_BAD_PARAM.
//  - scalars (alpha, beta, ...) are host pointers read at call time: double for DOUBLE data,
//    float otherwise. beta == 0: the output is not read (it may hold NaN).
//  - data pointers must be device-accessible: device memory, or pinned/managed host memory
//    (cudaPointerGetAttributes). Plain host memory is CUDNN_STATUS_BAD_PARAM at call time
//    (on a GPU it would be an illegal address when the kernel runs).
// The backend (graph) API is cudnn_backend.cpp; cudnn_common.h holds what both share (the
// handle, types, device-accessibility, launching, planted faults).
// Not emulated: algorithm search (cudnnFind*/cudnnGet*Algorithm*),
// every other legacy routine (pooling, softmax, tensor ops, RNN, ...), int8/fp8/vectorised
// types and NCHW_VECT_C, reorder types, cudnnDestroy's device synchronisation, the
// callback/logging machinery, tensor-core summation order (sums are sequential in each
// output's accumulator), batch-norm reductions in float (they are computed in double and
// rounded once to each output's type).
//
// Planted faults (detection tests): FUMI_SIMCUDNN_FAULTS, read once, comma-separated (parsed
// in cudnn_common.h; graph convolutions are hit the same way, see cudnn_backend.cpp):
//  - wrong:CxK   every convolution (forward, backward data, backward filter, bias-activation)
//                whose input channels are C and output channels K returns its results times
//                (1 + 2^-7), before the one rounding to the output type, in every precision;
//  - accum16     HALF data with HALF compute accumulates in fp16 (one rounding per
//                multiply-add); FLOAT compute is unaffected;
//  - nondet      cudnnConvolutionForward moves output element 0 (logical index 0) up one ulp
//                on every other call (a process-wide call counter).
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <new>
#include <string>
#include <vector>

#include "cudnn_common.h"
#include "sim.h"
#include "sim_conv.h"
#include "sim_gemm.h"
#include "sim_tool.h"

namespace {

using namespace sim::dnn;  // cudnn_common.h: what the backend API (cudnn_backend.cpp) shares
using sim::conv::Tensor;
using sim::gemm::DType;

constexpr uint32_t kTensorMagic = 0x436e5464;
constexpr uint32_t kFilterMagic = 0x436e4664;
constexpr uint32_t kConvMagic = 0x436e4364;
constexpr uint32_t kActMagic = 0x436e4164;
constexpr int64_t kMaxElements = int64_t{1} << 31;  // "2 Giga-elements"

}  // namespace

struct cudnnTensorStruct {
  uint32_t magic = kTensorMagic;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int nbDims = 0;  // 0: never set
  int dim[CUDNN_DIM_MAX] = {};
  int stride[CUDNN_DIM_MAX] = {};
};

struct cudnnFilterStruct {
  uint32_t magic = kFilterMagic;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW;
  int nbDims = 0;
  int dim[CUDNN_DIM_MAX] = {};  // K, C, spatial...
};

struct cudnnConvolutionStruct {
  uint32_t magic = kConvMagic;
  int arrayLength = 0;  // 0: never set
  int pad[CUDNN_DIM_MAX] = {};
  int stride[CUDNN_DIM_MAX] = {};
  int dilation[CUDNN_DIM_MAX] = {};
  cudnnConvolutionMode_t mode = CUDNN_CONVOLUTION;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  int groups = 1;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

struct cudnnActivationStruct {
  uint32_t magic = kActMagic;
  cudnnActivationMode_t mode = CUDNN_ACTIVATION_RELU;
  cudnnNanPropagation_t nan = CUDNN_NOT_PROPAGATE_NAN;
  double coef = 0;
};

namespace {

template <typename D>
bool valid(const D* d, uint32_t magic) {
  return d && d->magic == magic;
}
bool valid(const cudnnContext* h) { return valid(h, kHandleMagic); }
bool valid(const cudnnTensorStruct* d) { return valid(d, kTensorMagic) && d->nbDims > 0; }
bool valid(const cudnnFilterStruct* d) { return valid(d, kFilterMagic) && d->nbDims > 0; }
bool valid(const cudnnConvolutionStruct* d) { return valid(d, kConvMagic) && d->arrayLength > 0; }
bool valid(const cudnnActivationStruct* d) { return valid(d, kActMagic); }

// --- types --------------------------------------------------------------------------------

// Host scalars: double for DOUBLE data, float otherwise.
double hostScalar(const void* p, DType data) {
  if (data == DType::F64) {
    double v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Packed strides of dims in `format` (NHWC: channel (dim 1) innermost, then spatial in order).
void packedStrides(cudnnTensorFormat_t format, int nbDims, const int* dim, int* stride) {
  if (format == CUDNN_TENSOR_NHWC) {
    int64_t s = 1;
    stride[1] = 1;
    s = dim[1];
    for (int i = nbDims - 1; i >= 2; --i) {
      stride[i] = static_cast<int>(s);
      s *= dim[i];
    }
    stride[0] = static_cast<int>(s);
    return;
  }
  int64_t s = 1;
  for (int i = nbDims - 1; i >= 0; --i) {
    stride[i] = static_cast<int>(s);
    s *= dim[i];
  }
}

bool tooLarge(int nbDims, const int* dim) {
  int64_t n = 1;
  for (int i = 0; i < nbDims; ++i) {
    n *= dim[i];
    if (n > kMaxElements) return true;
  }
  return false;
}

cudnnStatus_t setTensor(cudnnTensorDescriptor_t d, cudnnDataType_t type, int nbDims,
                        const int* dim, const int* stride) {
  if (!valid(d, kTensorMagic) || !dim || !stride) return CUDNN_STATUS_BAD_PARAM;
  if (!validDataType(type)) return CUDNN_STATUS_BAD_PARAM;
  if (nbDims < 3 || nbDims > CUDNN_DIM_MAX) return CUDNN_STATUS_NOT_SUPPORTED;
  for (int i = 0; i < nbDims; ++i)
    if (dim[i] <= 0) return CUDNN_STATUS_BAD_PARAM;
  if (elementSize(type) == 0) return CUDNN_STATUS_NOT_SUPPORTED;
  if (tooLarge(nbDims, dim)) return CUDNN_STATUS_NOT_SUPPORTED;
  d->type = type;
  d->nbDims = nbDims;
  for (int i = 0; i < CUDNN_DIM_MAX; ++i) {
    d->dim[i] = i < nbDims ? dim[i] : 0;
    d->stride[i] = i < nbDims ? stride[i] : 0;
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t setFilter(cudnnFilterDescriptor_t d, cudnnDataType_t type,
                        cudnnTensorFormat_t format, int nbDims, const int* dim) {
  if (!valid(d, kFilterMagic) || !dim) return CUDNN_STATUS_BAD_PARAM;
  if (!validDataType(type)) return CUDNN_STATUS_BAD_PARAM;
  if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC &&
      format != CUDNN_TENSOR_NCHW_VECT_C)
    return CUDNN_STATUS_BAD_PARAM;
  if (nbDims < 3 || nbDims > CUDNN_DIM_MAX) return CUDNN_STATUS_NOT_SUPPORTED;
  for (int i = 0; i < nbDims; ++i)
    if (dim[i] <= 0) return CUDNN_STATUS_BAD_PARAM;
  if (format == CUDNN_TENSOR_NCHW_VECT_C || elementSize(type) == 0)
    return CUDNN_STATUS_NOT_SUPPORTED;
  if (tooLarge(nbDims, dim)) return CUDNN_STATUS_NOT_SUPPORTED;
  d->type = type;
  d->format = format;
  d->nbDims = nbDims;
  for (int i = 0; i < CUDNN_DIM_MAX; ++i) d->dim[i] = i < nbDims ? dim[i] : 0;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t setConvolution(cudnnConvolutionDescriptor_t d, int arrayLength, const int* pad,
                             const int* stride, const int* dilation, int mode, int compute) {
  if (!valid(d, kConvMagic)) return CUDNN_STATUS_BAD_PARAM;
  if (arrayLength <= 0 || !pad || !stride || !dilation) return CUDNN_STATUS_BAD_PARAM;
  if (arrayLength > CUDNN_DIM_MAX - 2) return CUDNN_STATUS_NOT_SUPPORTED;
  if (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION)
    return CUDNN_STATUS_BAD_PARAM;
  if (!validDataType(compute)) return CUDNN_STATUS_BAD_PARAM;
  for (int i = 0; i < arrayLength; ++i)
    if (pad[i] < 0 || stride[i] <= 0 || dilation[i] <= 0) return CUDNN_STATUS_BAD_PARAM;
  d->arrayLength = arrayLength;
  for (int i = 0; i < CUDNN_DIM_MAX; ++i) {
    d->pad[i] = i < arrayLength ? pad[i] : 0;
    d->stride[i] = i < arrayLength ? stride[i] : 0;
    d->dilation[i] = i < arrayLength ? dilation[i] : 0;
  }
  d->mode = static_cast<cudnnConvolutionMode_t>(mode);
  d->compute = static_cast<cudnnDataType_t>(compute);
  return CUDNN_STATUS_SUCCESS;
}

// The filter's logical strides (K, C, spatial...) from its format.
void filterStrides(const cudnnFilterStruct& f, int* stride) {
  packedStrides(f.format, f.nbDims, f.dim, stride);
}

// Output dims of a forward convolution (N, K, spatial...); BAD_PARAM if the shapes disagree.
cudnnStatus_t forwardOutputDims(const cudnnConvolutionStruct& c, const cudnnTensorStruct& x,
                                const cudnnFilterStruct& w, int* out) {
  if (x.nbDims != w.nbDims || x.nbDims != c.arrayLength + 2) return CUDNN_STATUS_BAD_PARAM;
  if (x.dim[1] != w.dim[1] * c.groups) return CUDNN_STATUS_BAD_PARAM;
  if (w.dim[0] % c.groups != 0) return CUDNN_STATUS_BAD_PARAM;
  out[0] = x.dim[0];
  out[1] = w.dim[0];
  for (int i = 0; i < c.arrayLength; ++i) {
    const int64_t effective = static_cast<int64_t>(w.dim[2 + i] - 1) * c.dilation[i] + 1;
    const int64_t padded = static_cast<int64_t>(x.dim[2 + i]) + 2 * int64_t{c.pad[i]};
    if (effective > padded) return CUDNN_STATUS_BAD_PARAM;
    out[2 + i] = static_cast<int>(1 + (padded - effective) / c.stride[i]);
  }
  return CUDNN_STATUS_SUCCESS;
}

// Kernel names live as long as the process.
const char* kernelName(const char* op, DType t) {
  static const char* const kOps[] = {"conv_fwd", "conv_bwd_data", "conv_bwd_filter",
                                     "conv_bias_act", "bn_fwd_training", "bn_fwd_inference",
                                     "bn_bwd"};
  static std::string* names = [] {
    auto* n = new std::string[7 * 4];
    const DType types[] = {DType::F64, DType::F32, DType::F16, DType::BF16};
    for (int o = 0; o < 7; ++o)
      for (int d = 0; d < 4; ++d)
        n[o * 4 + d] = std::string("sim_cudnn_") + kOps[o] + "_" + typeName(types[d]) + "_kernel";
    return n;
  }();
  for (int o = 0; o < 7; ++o)
    if (std::strcmp(op, kOps[o]) == 0) return names[o * 4 + static_cast<int>(t)].c_str();
  return "sim_cudnn_kernel";
}

// --- decoding ----------------------------------------------------------------------------

Tensor view(const cudnnTensorStruct& d, DType t, const void* data) {
  Tensor v;
  v.type = t;
  v.nbDims = d.nbDims;
  for (int i = 0; i < d.nbDims; ++i) {
    v.dim[i] = d.dim[i];
    v.stride[i] = d.stride[i];
  }
  v.data = data;
  return v;
}

Tensor view(const cudnnFilterStruct& f, DType t, const void* data) {
  Tensor v;
  int stride[CUDNN_DIM_MAX] = {};
  filterStrides(f, stride);
  v.type = t;
  v.nbDims = f.nbDims;
  for (int i = 0; i < f.nbDims; ++i) {
    v.dim[i] = f.dim[i];
    v.stride[i] = stride[i];
  }
  v.data = data;
  return v;
}

bool negativeStrides(const cudnnTensorStruct& d) {
  for (int i = 0; i < d.nbDims; ++i)
    if (d.stride[i] < 0) return true;
  return false;
}

enum class Op { Forward, BackwardData, BackwardFilter, BiasActivation };

// Validates a convolution call and decodes it into the kernel's problem. x, w, y are the
// descriptors in forward roles (x input image, w filter, y output image) whichever direction.
cudnnStatus_t decodeConv(Op op, cudnnHandle_t handle, const void* alpha,
                         const cudnnTensorStruct* xd, const void* x, const cudnnFilterStruct* wd,
                         const void* w, const cudnnConvolutionStruct* cd, int algo,
                         const void* beta, const cudnnTensorStruct* yd, const void* y,
                         sim::conv::ConvProblem* p) {
  if (!valid(handle)) return CUDNN_STATUS_BAD_PARAM;
  if (!valid(xd) || !valid(wd) || !valid(cd) || !valid(yd) || !alpha || !beta || !x || !w || !y)
    return CUDNN_STATUS_BAD_PARAM;
  const int algoCount = op == Op::BackwardData
                            ? static_cast<int>(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT)
                        : op == Op::BackwardFilter
                            ? static_cast<int>(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT)
                            : static_cast<int>(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
  if (algo < 0 || algo >= algoCount) return CUDNN_STATUS_BAD_PARAM;
  if (xd->nbDims != yd->nbDims || xd->nbDims != wd->nbDims || xd->nbDims != cd->arrayLength + 2)
    return CUDNN_STATUS_BAD_PARAM;
  if (xd->type != wd->type || xd->type != yd->type) return CUDNN_STATUS_BAD_PARAM;
  int expected[CUDNN_DIM_MAX] = {};
  cudnnStatus_t st = forwardOutputDims(*cd, *xd, *wd, expected);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  if (yd->dim[0] != expected[0] || yd->dim[1] != expected[1]) return CUDNN_STATUS_BAD_PARAM;
  if (xd->nbDims != 4 && xd->nbDims != 5) return CUDNN_STATUS_NOT_SUPPORTED;
  for (int i = 2; i < yd->nbDims; ++i)
    if (yd->dim[i] != expected[i]) return CUDNN_STATUS_NOT_SUPPORTED;
  if (negativeStrides(*xd) || negativeStrides(*yd)) return CUDNN_STATUS_NOT_SUPPORTED;

  DType data;
  if (!floatingType(xd->type, &data)) return CUDNN_STATUS_NOT_SUPPORTED;
  const cudnnDataType_t compute = cd->compute;
  sim::conv::Accum accum;
  if (data == DType::F64 && compute == CUDNN_DATA_DOUBLE)
    accum = sim::conv::Accum::F64;
  else if (data != DType::F64 && compute == CUDNN_DATA_FLOAT)
    accum = sim::conv::Accum::F32;
  else if (data == DType::F16 && compute == CUDNN_DATA_HALF)
    accum = faults().accum16 ? sim::conv::Accum::F16 : sim::conv::Accum::F32;
  else
    return CUDNN_STATUS_NOT_SUPPORTED;

  // Data must be reachable by the device (checked last: everything else is a shape error).
  if (!deviceAccessible(x) || !deviceAccessible(w) || !deviceAccessible(y))
    return CUDNN_STATUS_BAD_PARAM;

  p->dir = op == Op::BackwardData     ? sim::conv::Direction::BackwardData
           : op == Op::BackwardFilter ? sim::conv::Direction::BackwardFilter
                                      : sim::conv::Direction::Forward;
  p->spatial = cd->arrayLength;  // 2 or 3 (4-d or 5-d tensors)
  p->groups = cd->groups;
  for (int i = 0; i < cd->arrayLength; ++i) {
    p->pad[i] = cd->pad[i];
    p->stride[i] = cd->stride[i];
    p->dil[i] = cd->dilation[i];
  }
  p->flip = cd->mode == CUDNN_CONVOLUTION;
  p->accum = accum;
  p->tf32 = data == DType::F32 && cd->math != CUDNN_FMA_MATH && !tf32Disabled();
  p->x = view(*xd, data, x);
  p->w = view(*wd, data, w);
  p->y = view(*yd, data, y);
  p->alpha = hostScalar(alpha, data);
  p->beta = hostScalar(beta, data);
  const Faults& f = faults();
  if (f.wrong && f.wrongC == xd->dim[1] && f.wrongK == wd->dim[0]) p->scale = kWrongScale;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t runConv(Op op, cudnnHandle_t handle, const sim::conv::ConvProblem& p) {
  static const char* const kOps[] = {"conv_fwd", "conv_bwd_data", "conv_bwd_filter",
                                     "conv_bias_act"};
  return launch(handle->stream, kernelName(kOps[static_cast<int>(op)], p.x.type),
                [p] { sim::conv::execute(p); });
}

// The parameter descriptor a batch-norm call expects for x in this mode.
bool bnParamMatches(const cudnnTensorStruct& param, const cudnnTensorStruct& x, int mode) {
  if (param.nbDims != x.nbDims || param.dim[0] != 1 || param.dim[1] != x.dim[1]) return false;
  for (int i = 2; i < x.nbDims; ++i)
    if (param.dim[i] != (mode == CUDNN_BATCHNORM_PER_ACTIVATION ? x.dim[i] : 1)) return false;
  return true;
}

bool validBnMode(int mode) {
  return mode == CUDNN_BATCHNORM_PER_ACTIVATION || mode == CUDNN_BATCHNORM_SPATIAL ||
         mode == CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
}

bool sameShape(const cudnnTensorStruct& a, const cudnnTensorStruct& b) {
  if (a.nbDims != b.nbDims) return false;
  for (int i = 0; i < a.nbDims; ++i)
    if (a.dim[i] != b.dim[i]) return false;
  return true;
}

// Common batch-norm validation: x and y (or dy) shapes and types, the parameter descriptor.
cudnnStatus_t decodeBn(cudnnHandle_t handle, int mode, const cudnnTensorStruct* xd,
                       const cudnnTensorStruct* yd, const cudnnTensorStruct* pd,
                       sim::conv::BnProblem* p, DType* data) {
  if (!valid(handle) || !valid(xd) || !valid(yd) || !valid(pd) || !validBnMode(mode))
    return CUDNN_STATUS_BAD_PARAM;
  if (xd->nbDims != 4 && xd->nbDims != 5) return CUDNN_STATUS_NOT_SUPPORTED;
  if (!sameShape(*xd, *yd) || !bnParamMatches(*pd, *xd, mode)) return CUDNN_STATUS_BAD_PARAM;
  if (!floatingType(xd->type, data)) return CUDNN_STATUS_NOT_SUPPORTED;
  DType ytype, ptype;
  if (!floatingType(yd->type, &ytype) || !floatingType(pd->type, &ptype))
    return CUDNN_STATUS_NOT_SUPPORTED;
  // Parameters: double for double data, float otherwise.
  if (ptype != (*data == DType::F64 ? DType::F64 : DType::F32)) return CUDNN_STATUS_BAD_PARAM;
  if (negativeStrides(*xd) || negativeStrides(*yd) || negativeStrides(*pd))
    return CUDNN_STATUS_NOT_SUPPORTED;
  p->spatial = mode != CUDNN_BATCHNORM_PER_ACTIVATION;
  p->x = view(*xd, *data, nullptr);
  p->y = view(*yd, ytype, nullptr);
  p->param = view(*pd, ptype, nullptr);
  p->onePass = faults().bnvar;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t allAccessible(std::initializer_list<const void*> ptrs) {
  for (const void* q : ptrs)
    if (!deviceAccessible(q)) return CUDNN_STATUS_BAD_PARAM;
  return CUDNN_STATUS_SUCCESS;
}

// The plain and Ex forms of batch-norm training share this (Ex: bnOps BN only).
cudnnStatus_t bnForwardTraining(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void* alpha, const void* beta,
    const cudnnTensorDescriptor_t xDesc, const void* x, const cudnnTensorDescriptor_t yDesc,
    void* y, const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc, const void* bnScale,
    const void* bnBias, double exponentialAverageFactor, void* resultRunningMean,
    void* resultRunningVariance, double epsilon, void* resultSaveMean,
    void* resultSaveInvVariance) {
  return guarded([&] {
    sim::conv::BnProblem p;
    DType data;
    cudnnStatus_t st = decodeBn(handle, mode, xDesc, yDesc, bnScaleBiasMeanVarDesc, &p, &data);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    if (!alpha || !beta || !x || !y || !bnScale || !bnBias || epsilon < CUDNN_BN_MIN_EPSILON)
      return CUDNN_STATUS_BAD_PARAM;
    if (!resultSaveMean != !resultSaveInvVariance) return CUDNN_STATUS_BAD_PARAM;
    if (!resultRunningMean != !resultRunningVariance) return CUDNN_STATUS_BAD_PARAM;
    if ((st = allAccessible({x, y, bnScale, bnBias})) != CUDNN_STATUS_SUCCESS) return st;
    if (resultRunningMean &&
        (st = allAccessible({resultRunningMean, resultRunningVariance})) != CUDNN_STATUS_SUCCESS)
      return st;
    if (resultSaveMean &&
        (st = allAccessible({resultSaveMean, resultSaveInvVariance})) != CUDNN_STATUS_SUCCESS)
      return st;
    p.phase = sim::conv::BnPhase::Training;
    p.x.data = x;
    p.y.data = y;
    p.scale = bnScale;
    p.bias = bnBias;
    p.runningMean = resultRunningMean;
    p.runningVar = resultRunningVariance;
    p.saveMean = resultSaveMean;
    p.saveInvVar = resultSaveInvVariance;
    p.factor = exponentialAverageFactor;
    p.epsilon = epsilon;
    p.alpha = hostScalar(alpha, data);
    p.beta = hostScalar(beta, data);
    return launch(handle->stream, kernelName("bn_fwd_training", data),
                  [p] { sim::conv::execute(p); });
  });
}

cudnnStatus_t bnBackward(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void* alphaDataDiff,
    const void* betaDataDiff, const void* alphaParamDiff, const void* betaParamDiff,
    const cudnnTensorDescriptor_t xDesc, const void* x, const cudnnTensorDescriptor_t dyDesc,
    const void* dy, const cudnnTensorDescriptor_t dxDesc, void* dx,
    const cudnnTensorDescriptor_t dBnScaleBiasDesc, const void* bnScale, void* dBnScaleResult,
    void* dBnBiasResult, double epsilon, const void* savedMean, const void* savedInvVariance) {
  return guarded([&] {
    sim::conv::BnProblem p;
    DType data;
    cudnnStatus_t st = decodeBn(handle, mode, xDesc, dyDesc, dBnScaleBiasDesc, &p, &data);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    if (!valid(dxDesc) || !sameShape(*dxDesc, *xDesc)) return CUDNN_STATUS_BAD_PARAM;
    DType dxType;
    if (!floatingType(dxDesc->type, &dxType)) return CUDNN_STATUS_NOT_SUPPORTED;
    if (negativeStrides(*dxDesc)) return CUDNN_STATUS_NOT_SUPPORTED;
    if (!alphaDataDiff || !betaDataDiff || !alphaParamDiff || !betaParamDiff || !x || !dy ||
        !dx || !bnScale || !dBnScaleResult || !dBnBiasResult || epsilon < CUDNN_BN_MIN_EPSILON)
      return CUDNN_STATUS_BAD_PARAM;
    if (!savedMean != !savedInvVariance) return CUDNN_STATUS_BAD_PARAM;
    if ((st = allAccessible({x, dy, dx, bnScale, dBnScaleResult, dBnBiasResult})) !=
        CUDNN_STATUS_SUCCESS)
      return st;
    if (savedMean && (st = allAccessible({savedMean, savedInvVariance})) != CUDNN_STATUS_SUCCESS)
      return st;
    p.phase = sim::conv::BnPhase::Backward;
    p.x.data = x;
    p.y.data = dy;
    p.dx = view(*dxDesc, dxType, dx);
    p.scale = bnScale;
    p.mean = savedMean;
    p.var = savedInvVariance;
    p.dScale = dBnScaleResult;
    p.dBias = dBnBiasResult;
    p.epsilon = epsilon;
    p.alpha = hostScalar(alphaDataDiff, data);
    p.beta = hostScalar(betaDataDiff, data);
    p.alphaParam = hostScalar(alphaParamDiff, data);
    p.betaParam = hostScalar(betaParamDiff, data);
    return launch(handle->stream, kernelName("bn_bwd", data), [p] { sim::conv::execute(p); });
  });
}

// Ex forms: OPS_BN needs no workspace or reserve space; the fused activation forms are not
// emulated.
cudnnStatus_t bnExSize(cudnnBatchNormOps_t bnOps, size_t* sizeInBytes) {
  switch (bnOps) {
    case CUDNN_BATCHNORM_OPS_BN: *sizeInBytes = 0; return CUDNN_STATUS_SUCCESS;
    case CUDNN_BATCHNORM_OPS_BN_ACTIVATION:
    case CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION: return CUDNN_STATUS_NOT_SUPPORTED;
    default: return CUDNN_STATUS_BAD_PARAM;
  }
}

}  // namespace

extern "C" {

// --- library and handles ----------------------------------------------------------------

size_t cudnnGetVersion(void) { return CUDNN_VERSION; }
size_t cudnnGetMaxDeviceVersion(void) { return 900; }  // an H100 (compute capability 9.0)
size_t cudnnGetCudartVersion(void) { return CUDART_VERSION; }

cudnnStatus_t cudnnGetProperty(libraryPropertyType type, int* value) {
  if (!value) return CUDNN_STATUS_BAD_PARAM;
  switch (type) {
    case MAJOR_VERSION: *value = CUDNN_MAJOR; return CUDNN_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CUDNN_MINOR; return CUDNN_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CUDNN_PATCHLEVEL; return CUDNN_STATUS_SUCCESS;
    default: return CUDNN_STATUS_BAD_PARAM;
  }
}

cudnnStatus_t cudnnGraphVersionCheck(void) { return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnOpsVersionCheck(void) { return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnCnnVersionCheck(void) { return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnAdvVersionCheck(void) { return CUDNN_STATUS_SUCCESS; }

const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (static_cast<int>(status)) {
#define FUMI_SIM_STATUS(s) \
  case s: return #s;
    FUMI_SIM_STATUS(CUDNN_STATUS_SUCCESS)
    FUMI_SIM_STATUS(CUDNN_STATUS_NOT_INITIALIZED)
    FUMI_SIM_STATUS(CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH)
    FUMI_SIM_STATUS(CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH)
    FUMI_SIM_STATUS(CUDNN_STATUS_DEPRECATED)
    FUMI_SIM_STATUS(CUDNN_STATUS_LICENSE_ERROR)
    FUMI_SIM_STATUS(CUDNN_STATUS_RUNTIME_IN_PROGRESS)
    FUMI_SIM_STATUS(CUDNN_STATUS_RUNTIME_FP_OVERFLOW)
    FUMI_SIM_STATUS(CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED)
    FUMI_SIM_STATUS(CUDNN_STATUS_BAD_PARAM)
    FUMI_SIM_STATUS(CUDNN_STATUS_BAD_PARAM_NULL_POINTER)
    FUMI_SIM_STATUS(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER)
    FUMI_SIM_STATUS(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED)
    FUMI_SIM_STATUS(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND)
    FUMI_SIM_STATUS(CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT)
    FUMI_SIM_STATUS(CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH)
    FUMI_SIM_STATUS(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH)
    FUMI_SIM_STATUS(CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES)
    FUMI_SIM_STATUS(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE)
    FUMI_SIM_STATUS(CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH)
    FUMI_SIM_STATUS(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE)
    FUMI_SIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED)
    FUMI_SIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN)
    FUMI_SIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_SHAPE)
    FUMI_SIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE)
    FUMI_SIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT)
    FUMI_SIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER)
    FUMI_SIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART)
    FUMI_SIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH)
    FUMI_SIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING)
    FUMI_SIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE)
    FUMI_SIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT)
    FUMI_SIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_PADDING)
    FUMI_SIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM)
    FUMI_SIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API)
    FUMI_SIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE)
    FUMI_SIM_STATUS(CUDNN_STATUS_INTERNAL_ERROR)
    FUMI_SIM_STATUS(CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED)
    FUMI_SIM_STATUS(CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE)
    FUMI_SIM_STATUS(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED)
    FUMI_SIM_STATUS(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
    FUMI_SIM_STATUS(CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM)
    FUMI_SIM_STATUS(CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED)
    FUMI_SIM_STATUS(CUDNN_STATUS_EXECUTION_FAILED)
    FUMI_SIM_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER)
    FUMI_SIM_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CUBLAS)
    FUMI_SIM_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CUDART)
    FUMI_SIM_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CURAND)
    case 2001: return "CUDNN_STATUS_INVALID_VALUE";
#undef FUMI_SIM_STATUS
    default: return "CUDNN_UNKNOWN_STATUS";
  }
}

void cudnnGetLastErrorString(char* message, size_t max_size) {
  if (message && max_size > 0) message[0] = '\0';
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM;
  auto* h = new (std::nothrow) cudnnContext;
  if (!h) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
  *handle = h;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  if (!valid(handle)) return CUDNN_STATUS_BAD_PARAM;
  handle->magic = 0;
  delete handle;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId) {
  if (!valid(handle)) return CUDNN_STATUS_BAD_PARAM;
  handle->stream = streamId;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t* streamId) {
  if (!valid(handle) || !streamId) return CUDNN_STATUS_BAD_PARAM;
  *streamId = handle->stream;
  return CUDNN_STATUS_SUCCESS;
}

// --- tensor descriptors -------------------------------------------------------------------

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* tensorDesc) {
  if (!tensorDesc) return CUDNN_STATUS_BAD_PARAM;
  *tensorDesc = new (std::nothrow) cudnnTensorStruct;
  return *tensorDesc ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
}

cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t tensorDesc) {
  if (!tensorDesc) return CUDNN_STATUS_SUCCESS;
  if (!valid(tensorDesc, kTensorMagic)) return CUDNN_STATUS_BAD_PARAM;
  tensorDesc->magic = 0;
  delete tensorDesc;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t tensorDesc,
                                         cudnnTensorFormat_t format, cudnnDataType_t dataType,
                                         int n, int c, int h, int w) {
  if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC &&
      format != CUDNN_TENSOR_NCHW_VECT_C)
    return CUDNN_STATUS_BAD_PARAM;
  const int dim[4] = {n, c, h, w};
  for (int d : dim)
    if (d <= 0) return CUDNN_STATUS_BAD_PARAM;
  if (format == CUDNN_TENSOR_NCHW_VECT_C) return CUDNN_STATUS_NOT_SUPPORTED;
  int stride[4];
  packedStrides(format, 4, dim, stride);
  return setTensor(tensorDesc, dataType, 4, dim, stride);
}

cudnnStatus_t cudnnSetTensor4dDescriptorEx(cudnnTensorDescriptor_t tensorDesc,
                                           cudnnDataType_t dataType, int n, int c, int h, int w,
                                           int nStride, int cStride, int hStride, int wStride) {
  const int dim[4] = {n, c, h, w};
  const int stride[4] = {nStride, cStride, hStride, wStride};
  return setTensor(tensorDesc, dataType, 4, dim, stride);
}

cudnnStatus_t cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t tensorDesc,
                                         cudnnDataType_t dataType, int nbDims, const int dimA[],
                                         const int strideA[]) {
  return setTensor(tensorDesc, dataType, nbDims, dimA, strideA);
}

cudnnStatus_t cudnnSetTensorNdDescriptorEx(cudnnTensorDescriptor_t tensorDesc,
                                           cudnnTensorFormat_t format, cudnnDataType_t dataType,
                                           int nbDims, const int dimA[]) {
  if (!dimA) return CUDNN_STATUS_BAD_PARAM;
  if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC &&
      format != CUDNN_TENSOR_NCHW_VECT_C)
    return CUDNN_STATUS_BAD_PARAM;
  if (nbDims < 3 || nbDims > CUDNN_DIM_MAX) return CUDNN_STATUS_NOT_SUPPORTED;
  for (int i = 0; i < nbDims; ++i)
    if (dimA[i] <= 0) return CUDNN_STATUS_BAD_PARAM;
  if (format == CUDNN_TENSOR_NCHW_VECT_C) return CUDNN_STATUS_NOT_SUPPORTED;
  int stride[CUDNN_DIM_MAX];
  packedStrides(format, nbDims, dimA, stride);
  return setTensor(tensorDesc, dataType, nbDims, dimA, stride);
}

cudnnStatus_t cudnnGetTensor4dDescriptor(const cudnnTensorDescriptor_t tensorDesc,
                                         cudnnDataType_t* dataType, int* n, int* c, int* h,
                                         int* w, int* nStride, int* cStride, int* hStride,
                                         int* wStride) {
  if (!valid(tensorDesc) || tensorDesc->nbDims != 4) return CUDNN_STATUS_BAD_PARAM;
  if (!dataType || !n || !c || !h || !w || !nStride || !cStride || !hStride || !wStride)
    return CUDNN_STATUS_BAD_PARAM;
  const cudnnTensorStruct& d = *tensorDesc;
  *dataType = d.type;
  *n = d.dim[0];
  *c = d.dim[1];
  *h = d.dim[2];
  *w = d.dim[3];
  *nStride = d.stride[0];
  *cStride = d.stride[1];
  *hStride = d.stride[2];
  *wStride = d.stride[3];
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetTensorNdDescriptor(const cudnnTensorDescriptor_t tensorDesc,
                                         int nbDimsRequested, cudnnDataType_t* dataType,
                                         int* nbDims, int dimA[], int strideA[]) {
  if (!valid(tensorDesc) || nbDimsRequested < 0 || !dataType || !nbDims)
    return CUDNN_STATUS_BAD_PARAM;
  if (nbDimsRequested > 0 && (!dimA || !strideA)) return CUDNN_STATUS_BAD_PARAM;
  *dataType = tensorDesc->type;
  *nbDims = tensorDesc->nbDims;
  for (int i = 0; i < nbDimsRequested && i < tensorDesc->nbDims; ++i) {
    dimA[i] = tensorDesc->dim[i];
    strideA[i] = tensorDesc->stride[i];
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetTensorSizeInBytes(const cudnnTensorDescriptor_t tensorDesc, size_t* size) {
  if (!valid(tensorDesc) || !size) return CUDNN_STATUS_BAD_PARAM;
  int64_t last = 0;  // offset of the last element (packed or strided)
  for (int i = 0; i < tensorDesc->nbDims; ++i)
    last += static_cast<int64_t>(tensorDesc->dim[i] - 1) * std::abs(tensorDesc->stride[i]);
  *size = static_cast<size_t>(last + 1) * elementSize(tensorDesc->type);
  return CUDNN_STATUS_SUCCESS;
}

// --- filter descriptors -------------------------------------------------------------------

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* filterDesc) {
  if (!filterDesc) return CUDNN_STATUS_BAD_PARAM;
  *filterDesc = new (std::nothrow) cudnnFilterStruct;
  return *filterDesc ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
}

cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t filterDesc) {
  if (!filterDesc) return CUDNN_STATUS_SUCCESS;
  if (!valid(filterDesc, kFilterMagic)) return CUDNN_STATUS_BAD_PARAM;
  filterDesc->magic = 0;
  delete filterDesc;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t filterDesc,
                                         cudnnDataType_t dataType, cudnnTensorFormat_t format,
                                         int k, int c, int h, int w) {
  const int dim[4] = {k, c, h, w};
  return setFilter(filterDesc, dataType, format, 4, dim);
}

cudnnStatus_t cudnnSetFilterNdDescriptor(cudnnFilterDescriptor_t filterDesc,
                                         cudnnDataType_t dataType, cudnnTensorFormat_t format,
                                         int nbDims, const int filterDimA[]) {
  return setFilter(filterDesc, dataType, format, nbDims, filterDimA);
}

cudnnStatus_t cudnnGetFilter4dDescriptor(const cudnnFilterDescriptor_t filterDesc,
                                         cudnnDataType_t* dataType, cudnnTensorFormat_t* format,
                                         int* k, int* c, int* h, int* w) {
  if (!valid(filterDesc) || filterDesc->nbDims != 4) return CUDNN_STATUS_BAD_PARAM;
  if (!dataType || !format || !k || !c || !h || !w) return CUDNN_STATUS_BAD_PARAM;
  *dataType = filterDesc->type;
  *format = filterDesc->format;
  *k = filterDesc->dim[0];
  *c = filterDesc->dim[1];
  *h = filterDesc->dim[2];
  *w = filterDesc->dim[3];
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetFilterNdDescriptor(const cudnnFilterDescriptor_t filterDesc,
                                         int nbDimsRequested, cudnnDataType_t* dataType,
                                         cudnnTensorFormat_t* format, int* nbDims,
                                         int filterDimA[]) {
  if (!valid(filterDesc) || nbDimsRequested < 0 || !dataType || !format || !nbDims)
    return CUDNN_STATUS_BAD_PARAM;
  if (nbDimsRequested > 0 && !filterDimA) return CUDNN_STATUS_BAD_PARAM;
  *dataType = filterDesc->type;
  *format = filterDesc->format;
  *nbDims = filterDesc->nbDims;
  for (int i = 0; i < nbDimsRequested && i < filterDesc->nbDims; ++i)
    filterDimA[i] = filterDesc->dim[i];
  return CUDNN_STATUS_SUCCESS;
}

// --- convolution descriptors --------------------------------------------------------------

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* convDesc) {
  if (!convDesc) return CUDNN_STATUS_BAD_PARAM;
  *convDesc = new (std::nothrow) cudnnConvolutionStruct;
  return *convDesc ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
}

cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t convDesc) {
  if (!convDesc) return CUDNN_STATUS_SUCCESS;
  if (!valid(convDesc, kConvMagic)) return CUDNN_STATUS_BAD_PARAM;
  convDesc->magic = 0;
  delete convDesc;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t convDesc, int pad_h,
                                              int pad_w, int u, int v, int dilation_h,
                                              int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t computeType) {
  const int pad[2] = {pad_h, pad_w}, stride[2] = {u, v}, dil[2] = {dilation_h, dilation_w};
  return setConvolution(convDesc, 2, pad, stride, dil, mode, computeType);
}

cudnnStatus_t cudnnSetConvolutionNdDescriptor(cudnnConvolutionDescriptor_t convDesc,
                                              int arrayLength, const int padA[],
                                              const int filterStrideA[], const int dilationA[],
                                              cudnnConvolutionMode_t mode,
                                              cudnnDataType_t computeType) {
  return setConvolution(convDesc, arrayLength, padA, filterStrideA, dilationA, mode,
                        computeType);
}

cudnnStatus_t cudnnGetConvolution2dDescriptor(const cudnnConvolutionDescriptor_t convDesc,
                                              int* pad_h, int* pad_w, int* u, int* v,
                                              int* dilation_h, int* dilation_w,
                                              cudnnConvolutionMode_t* mode,
                                              cudnnDataType_t* computeType) {
  if (!valid(convDesc) || convDesc->arrayLength != 2) return CUDNN_STATUS_BAD_PARAM;
  if (!pad_h || !pad_w || !u || !v || !dilation_h || !dilation_w || !mode || !computeType)
    return CUDNN_STATUS_BAD_PARAM;
  *pad_h = convDesc->pad[0];
  *pad_w = convDesc->pad[1];
  *u = convDesc->stride[0];
  *v = convDesc->stride[1];
  *dilation_h = convDesc->dilation[0];
  *dilation_w = convDesc->dilation[1];
  *mode = convDesc->mode;
  *computeType = convDesc->compute;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionNdDescriptor(const cudnnConvolutionDescriptor_t convDesc,
                                              int arrayLengthRequested, int* arrayLength,
                                              int padA[], int strideA[], int dilationA[],
                                              cudnnConvolutionMode_t* mode,
                                              cudnnDataType_t* computeType) {
  if (!valid(convDesc) || arrayLengthRequested < 0 || !arrayLength || !mode || !computeType)
    return CUDNN_STATUS_BAD_PARAM;
  if (arrayLengthRequested > CUDNN_DIM_MAX - 2) return CUDNN_STATUS_NOT_SUPPORTED;
  if (arrayLengthRequested > 0 && (!padA || !strideA || !dilationA))
    return CUDNN_STATUS_BAD_PARAM;
  *arrayLength = convDesc->arrayLength;
  for (int i = 0; i < arrayLengthRequested && i < convDesc->arrayLength; ++i) {
    padA[i] = convDesc->pad[i];
    strideA[i] = convDesc->stride[i];
    dilationA[i] = convDesc->dilation[i];
  }
  *mode = convDesc->mode;
  *computeType = convDesc->compute;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t convDesc,
                                            int groupCount) {
  if (!valid(convDesc, kConvMagic) || groupCount <= 0) return CUDNN_STATUS_BAD_PARAM;
  convDesc->groups = groupCount;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionGroupCount(cudnnConvolutionDescriptor_t convDesc,
                                            int* groupCount) {
  if (!valid(convDesc, kConvMagic) || !groupCount) return CUDNN_STATUS_BAD_PARAM;
  *groupCount = convDesc->groups;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc,
                                          cudnnMathType_t mathType) {
  if (!valid(convDesc, kConvMagic)) return CUDNN_STATUS_BAD_PARAM;
  switch (mathType) {
    case CUDNN_DEFAULT_MATH:
    case CUDNN_TENSOR_OP_MATH:
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION:
    case CUDNN_FMA_MATH: convDesc->math = mathType; return CUDNN_STATUS_SUCCESS;
    default: return CUDNN_STATUS_BAD_PARAM;
  }
}

cudnnStatus_t cudnnGetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc,
                                          cudnnMathType_t* mathType) {
  if (!valid(convDesc, kConvMagic) || !mathType) return CUDNN_STATUS_BAD_PARAM;
  *mathType = convDesc->math;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionNdForwardOutputDim(const cudnnConvolutionDescriptor_t convDesc,
                                                    const cudnnTensorDescriptor_t inputTensorDesc,
                                                    const cudnnFilterDescriptor_t filterDesc,
                                                    int nbDims, int tensorOuputDimA[]) {
  if (!valid(convDesc) || !valid(inputTensorDesc) || !valid(filterDesc) || !tensorOuputDimA)
    return CUDNN_STATUS_BAD_PARAM;
  if (nbDims != inputTensorDesc->nbDims) return CUDNN_STATUS_BAD_PARAM;
  int out[CUDNN_DIM_MAX] = {};
  const cudnnStatus_t st = forwardOutputDims(*convDesc, *inputTensorDesc, *filterDesc, out);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  for (int i = 0; i < nbDims; ++i) tensorOuputDimA[i] = out[i];
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t convDesc,
                                                    const cudnnTensorDescriptor_t inputTensorDesc,
                                                    const cudnnFilterDescriptor_t filterDesc,
                                                    int* n, int* c, int* h, int* w) {
  if (!n || !c || !h || !w) return CUDNN_STATUS_BAD_PARAM;
  if (!valid(inputTensorDesc) || inputTensorDesc->nbDims != 4) return CUDNN_STATUS_BAD_PARAM;
  int out[4];
  const cudnnStatus_t st =
      cudnnGetConvolutionNdForwardOutputDim(convDesc, inputTensorDesc, filterDesc, 4, out);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  *n = out[0];
  *c = out[1];
  *h = out[2];
  *w = out[3];
  return CUDNN_STATUS_SUCCESS;
}

// --- workspace sizes: the simulated kernels need none -------------------------------------

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t handle,
                                                      const cudnnTensorDescriptor_t xDesc,
                                                      const cudnnFilterDescriptor_t wDesc,
                                                      const cudnnConvolutionDescriptor_t convDesc,
                                                      const cudnnTensorDescriptor_t yDesc,
                                                      cudnnConvolutionFwdAlgo_t algo,
                                                      size_t* sizeInBytes) {
  if (!valid(handle) || !valid(xDesc) || !valid(wDesc) || !valid(convDesc) || !valid(yDesc) ||
      !sizeInBytes || algo < 0 || algo >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT)
    return CUDNN_STATUS_BAD_PARAM;
  int out[CUDNN_DIM_MAX];
  const cudnnStatus_t st = forwardOutputDims(*convDesc, *xDesc, *wDesc, out);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  *sizeInBytes = 0;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc,
    const cudnnTensorDescriptor_t dyDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t dxDesc, cudnnConvolutionBwdDataAlgo_t algo,
    size_t* sizeInBytes) {
  if (!valid(handle) || !valid(wDesc) || !valid(dyDesc) || !valid(convDesc) || !valid(dxDesc) ||
      !sizeInBytes || algo < 0 || algo >= CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT)
    return CUDNN_STATUS_BAD_PARAM;
  int out[CUDNN_DIM_MAX];
  const cudnnStatus_t st = forwardOutputDims(*convDesc, *dxDesc, *wDesc, out);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  *sizeInBytes = 0;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
    const cudnnTensorDescriptor_t dyDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnFilterDescriptor_t gradDesc, cudnnConvolutionBwdFilterAlgo_t algo,
    size_t* sizeInBytes) {
  if (!valid(handle) || !valid(xDesc) || !valid(dyDesc) || !valid(convDesc) ||
      !valid(gradDesc) || !sizeInBytes || algo < 0 ||
      algo >= CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT)
    return CUDNN_STATUS_BAD_PARAM;
  int out[CUDNN_DIM_MAX];
  const cudnnStatus_t st = forwardOutputDims(*convDesc, *xDesc, *gradDesc, out);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  *sizeInBytes = 0;
  return CUDNN_STATUS_SUCCESS;
}

// --- activation descriptors ---------------------------------------------------------------

cudnnStatus_t cudnnCreateActivationDescriptor(cudnnActivationDescriptor_t* activationDesc) {
  if (!activationDesc) return CUDNN_STATUS_BAD_PARAM;
  *activationDesc = new (std::nothrow) cudnnActivationStruct;
  return *activationDesc ? CUDNN_STATUS_SUCCESS
                         : CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
}

cudnnStatus_t cudnnDestroyActivationDescriptor(cudnnActivationDescriptor_t activationDesc) {
  if (!activationDesc) return CUDNN_STATUS_SUCCESS;
  if (!valid(activationDesc)) return CUDNN_STATUS_BAD_PARAM;
  activationDesc->magic = 0;
  delete activationDesc;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetActivationDescriptor(cudnnActivationDescriptor_t activationDesc,
                                           cudnnActivationMode_t mode,
                                           cudnnNanPropagation_t reluNanOpt, double coef) {
  if (!valid(activationDesc)) return CUDNN_STATUS_BAD_PARAM;
  if (mode < CUDNN_ACTIVATION_SIGMOID || mode > CUDNN_ACTIVATION_SWISH) return CUDNN_STATUS_BAD_PARAM;
  if (reluNanOpt != CUDNN_NOT_PROPAGATE_NAN && reluNanOpt != CUDNN_PROPAGATE_NAN)
    return CUDNN_STATUS_BAD_PARAM;
  activationDesc->mode = mode;
  activationDesc->nan = reluNanOpt;
  activationDesc->coef = coef;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetActivationDescriptor(const cudnnActivationDescriptor_t activationDesc,
                                           cudnnActivationMode_t* mode,
                                           cudnnNanPropagation_t* reluNanOpt, double* coef) {
  if (!valid(activationDesc) || !mode || !reluNanOpt || !coef) return CUDNN_STATUS_BAD_PARAM;
  *mode = activationDesc->mode;
  *reluNanOpt = activationDesc->nan;
  *coef = activationDesc->coef;
  return CUDNN_STATUS_SUCCESS;
}

// --- convolutions -------------------------------------------------------------------------

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha,
                                      const cudnnTensorDescriptor_t xDesc, const void* x,
                                      const cudnnFilterDescriptor_t wDesc, const void* w,
                                      const cudnnConvolutionDescriptor_t convDesc,
                                      cudnnConvolutionFwdAlgo_t algo, void* workSpace,
                                      size_t workSpaceSizeInBytes, const void* beta,
                                      const cudnnTensorDescriptor_t yDesc, void* y) {
  (void)workSpace;
  (void)workSpaceSizeInBytes;
  return guarded([&] {
    sim::conv::ConvProblem p;
    const cudnnStatus_t st = decodeConv(Op::Forward, handle, alpha, xDesc, x, wDesc, w, convDesc,
                                        algo, beta, yDesc, y, &p);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    if (faults().nondet) p.bump = (nondetCounter().fetch_add(1) & 1) != 0;
    return runConv(Op::Forward, handle, p);
  });
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void* alpha,
                                           const cudnnFilterDescriptor_t wDesc, const void* w,
                                           const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                           const cudnnConvolutionDescriptor_t convDesc,
                                           cudnnConvolutionBwdDataAlgo_t algo, void* workSpace,
                                           size_t workSpaceSizeInBytes, const void* beta,
                                           const cudnnTensorDescriptor_t dxDesc, void* dx) {
  (void)workSpace;
  (void)workSpaceSizeInBytes;
  return guarded([&] {
    sim::conv::ConvProblem p;
    const cudnnStatus_t st = decodeConv(Op::BackwardData, handle, alpha, dxDesc, dx, wDesc, w,
                                        convDesc, algo, beta, dyDesc, dy, &p);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    return runConv(Op::BackwardData, handle, p);
  });
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void* alpha,
                                             const cudnnTensorDescriptor_t xDesc, const void* x,
                                             const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                             const cudnnConvolutionDescriptor_t convDesc,
                                             cudnnConvolutionBwdFilterAlgo_t algo,
                                             void* workSpace, size_t workSpaceSizeInBytes,
                                             const void* beta,
                                             const cudnnFilterDescriptor_t dwDesc, void* dw) {
  (void)workSpace;
  (void)workSpaceSizeInBytes;
  return guarded([&] {
    sim::conv::ConvProblem p;
    const cudnnStatus_t st = decodeConv(Op::BackwardFilter, handle, alpha, xDesc, x, dwDesc, dw,
                                        convDesc, algo, beta, dyDesc, dy, &p);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    return runConv(Op::BackwardFilter, handle, p);
  });
}

cudnnStatus_t cudnnConvolutionBiasActivationForward(
    cudnnHandle_t handle, const void* alpha1, const cudnnTensorDescriptor_t xDesc, const void* x,
    const cudnnFilterDescriptor_t wDesc, const void* w,
    const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo,
    void* workSpace, size_t workSpaceSizeInBytes, const void* alpha2,
    const cudnnTensorDescriptor_t zDesc, const void* z, const cudnnTensorDescriptor_t biasDesc,
    const void* bias, const cudnnActivationDescriptor_t activationDesc,
    const cudnnTensorDescriptor_t yDesc, void* y) {
  (void)workSpace;
  (void)workSpaceSizeInBytes;
  return guarded([&] {
    if (!valid(zDesc) || !valid(biasDesc) || !valid(activationDesc) || !alpha2 || !z || !bias)
      return CUDNN_STATUS_BAD_PARAM;
    // alpha2 stands in for beta in the common checks (same type rule, never null here).
    sim::conv::ConvProblem p;
    cudnnStatus_t st = decodeConv(Op::BiasActivation, handle, alpha1, xDesc, x, wDesc, w,
                                  convDesc, algo, alpha2, yDesc, y, &p);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    if (!sameShape(*zDesc, *yDesc) || zDesc->type != yDesc->type) return CUDNN_STATUS_BAD_PARAM;
    if (biasDesc->nbDims != yDesc->nbDims || biasDesc->dim[1] != yDesc->dim[1])
      return CUDNN_STATUS_BAD_PARAM;
    for (int i = 0; i < biasDesc->nbDims; ++i)
      if (i != 1 && biasDesc->dim[i] != 1) return CUDNN_STATUS_BAD_PARAM;
    if (biasDesc->type != yDesc->type) return CUDNN_STATUS_BAD_PARAM;
    if (negativeStrides(*zDesc)) return CUDNN_STATUS_NOT_SUPPORTED;
    const cudnnActivationMode_t mode = activationDesc->mode;
    if (mode != CUDNN_ACTIVATION_RELU && mode != CUDNN_ACTIVATION_IDENTITY)
      return CUDNN_STATUS_NOT_SUPPORTED;
    if (mode == CUDNN_ACTIVATION_IDENTITY && algo != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM)
      return CUDNN_STATUS_NOT_SUPPORTED;
    if ((st = allAccessible({z, bias})) != CUDNN_STATUS_SUCCESS) return st;
    p.fused = true;
    p.alpha2 = p.beta;
    p.beta = 0;
    p.hasZ = true;
    p.z = view(*zDesc, p.y.type, z);
    p.bias = view(*biasDesc, p.y.type, bias);
    p.relu = mode == CUDNN_ACTIVATION_RELU;
    return runConv(Op::BiasActivation, handle, p);
  });
}

// --- batch normalisation ------------------------------------------------------------------

cudnnStatus_t cudnnDeriveBNTensorDescriptor(cudnnTensorDescriptor_t derivedBnDesc,
                                            const cudnnTensorDescriptor_t xDesc,
                                            cudnnBatchNormMode_t mode) {
  if (!valid(derivedBnDesc, kTensorMagic) || !valid(xDesc) || !validBnMode(mode))
    return CUDNN_STATUS_BAD_PARAM;
  if (xDesc->nbDims != 4 && xDesc->nbDims != 5) return CUDNN_STATUS_BAD_PARAM;
  int dim[CUDNN_DIM_MAX], stride[CUDNN_DIM_MAX];
  dim[0] = 1;
  dim[1] = xDesc->dim[1];
  for (int i = 2; i < xDesc->nbDims; ++i)
    dim[i] = mode == CUDNN_BATCHNORM_PER_ACTIVATION ? xDesc->dim[i] : 1;
  packedStrides(CUDNN_TENSOR_NCHW, xDesc->nbDims, dim, stride);
  return setTensor(derivedBnDesc,
                   xDesc->type == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT,
                   xDesc->nbDims, dim, stride);
}

cudnnStatus_t cudnnBatchNormalizationForwardTraining(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void* alpha, const void* beta,
    const cudnnTensorDescriptor_t xDesc, const void* x, const cudnnTensorDescriptor_t yDesc,
    void* y, const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc, const void* bnScale,
    const void* bnBias, double exponentialAverageFactor, void* resultRunningMean,
    void* resultRunningVariance, double epsilon, void* resultSaveMean,
    void* resultSaveInvVariance) {
  return bnForwardTraining(handle, mode, alpha, beta, xDesc, x, yDesc, y, bnScaleBiasMeanVarDesc,
                           bnScale, bnBias, exponentialAverageFactor, resultRunningMean,
                           resultRunningVariance, epsilon, resultSaveMean, resultSaveInvVariance);
}

cudnnStatus_t cudnnBatchNormalizationForwardInference(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void* alpha, const void* beta,
    const cudnnTensorDescriptor_t xDesc, const void* x, const cudnnTensorDescriptor_t yDesc,
    void* y, const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc, const void* bnScale,
    const void* bnBias, const void* estimatedMean, const void* estimatedVariance,
    double epsilon) {
  return guarded([&] {
    sim::conv::BnProblem p;
    DType data;
    cudnnStatus_t st = decodeBn(handle, mode, xDesc, yDesc, bnScaleBiasMeanVarDesc, &p, &data);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    if (!alpha || !beta || !x || !y || !bnScale || !bnBias || !estimatedMean ||
        !estimatedVariance || epsilon < CUDNN_BN_MIN_EPSILON)
      return CUDNN_STATUS_BAD_PARAM;
    if ((st = allAccessible({x, y, bnScale, bnBias, estimatedMean, estimatedVariance})) !=
        CUDNN_STATUS_SUCCESS)
      return st;
    p.phase = sim::conv::BnPhase::Inference;
    p.x.data = x;
    p.y.data = y;
    p.scale = bnScale;
    p.bias = bnBias;
    p.mean = estimatedMean;
    p.var = estimatedVariance;
    p.epsilon = epsilon;
    p.alpha = hostScalar(alpha, data);
    p.beta = hostScalar(beta, data);
    return launch(handle->stream, kernelName("bn_fwd_inference", data),
                  [p] { sim::conv::execute(p); });
  });
}

cudnnStatus_t cudnnBatchNormalizationBackward(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void* alphaDataDiff,
    const void* betaDataDiff, const void* alphaParamDiff, const void* betaParamDiff,
    const cudnnTensorDescriptor_t xDesc, const void* x, const cudnnTensorDescriptor_t dyDesc,
    const void* dy, const cudnnTensorDescriptor_t dxDesc, void* dx,
    const cudnnTensorDescriptor_t dBnScaleBiasDesc, const void* bnScale, void* dBnScaleResult,
    void* dBnBiasResult, double epsilon, const void* savedMean, const void* savedInvVariance) {
  return bnBackward(handle, mode, alphaDataDiff, betaDataDiff, alphaParamDiff, betaParamDiff,
                    xDesc, x, dyDesc, dy, dxDesc, dx, dBnScaleBiasDesc, bnScale, dBnScaleResult,
                    dBnBiasResult, epsilon, savedMean, savedInvVariance);
}

// --- batch normalisation, Ex forms: bnOps CUDNN_BATCHNORM_OPS_BN runs the plain forms' code
// (z, the activation, workspace and reserve space unused); the fused activation forms are
// CUDNN_STATUS_NOT_SUPPORTED. Workspace and reserve space sizes are 0 bytes.

cudnnStatus_t cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t bnOps,
    const cudnnTensorDescriptor_t xDesc, const cudnnTensorDescriptor_t zDesc,
    const cudnnTensorDescriptor_t yDesc, const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc,
    const cudnnActivationDescriptor_t activationDesc, size_t* sizeInBytes) {
  (void)zDesc;
  (void)activationDesc;
  if (!valid(handle) || !validBnMode(mode) || !valid(xDesc) || !valid(yDesc) ||
      !valid(bnScaleBiasMeanVarDesc) || !sizeInBytes)
    return CUDNN_STATUS_BAD_PARAM;
  return bnExSize(bnOps, sizeInBytes);
}

cudnnStatus_t cudnnGetBatchNormalizationBackwardExWorkspaceSize(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t bnOps,
    const cudnnTensorDescriptor_t xDesc, const cudnnTensorDescriptor_t yDesc,
    const cudnnTensorDescriptor_t dyDesc, const cudnnTensorDescriptor_t dzDesc,
    const cudnnTensorDescriptor_t dxDesc, const cudnnTensorDescriptor_t dBnScaleBiasDesc,
    const cudnnActivationDescriptor_t activationDesc, size_t* sizeInBytes) {
  (void)yDesc;
  (void)dzDesc;
  (void)activationDesc;
  if (!valid(handle) || !validBnMode(mode) || !valid(xDesc) || !valid(dyDesc) ||
      !valid(dxDesc) || !valid(dBnScaleBiasDesc) || !sizeInBytes)
    return CUDNN_STATUS_BAD_PARAM;
  return bnExSize(bnOps, sizeInBytes);
}

cudnnStatus_t cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t bnOps,
    const cudnnActivationDescriptor_t activationDesc, const cudnnTensorDescriptor_t xDesc,
    size_t* sizeInBytes) {
  (void)activationDesc;
  if (!valid(handle) || !validBnMode(mode) || !valid(xDesc) || !sizeInBytes)
    return CUDNN_STATUS_BAD_PARAM;
  return bnExSize(bnOps, sizeInBytes);
}

cudnnStatus_t cudnnBatchNormalizationForwardTrainingEx(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t bnOps,
    const void* alpha, const void* beta, const cudnnTensorDescriptor_t xDesc, const void* xData,
    const cudnnTensorDescriptor_t zDesc, const void* zData, const cudnnTensorDescriptor_t yDesc,
    void* yData, const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc, const void* bnScale,
    const void* bnBias, double exponentialAverageFactor, void* resultRunningMean,
    void* resultRunningVariance, double epsilon, void* resultSaveMean,
    void* resultSaveInvVariance, cudnnActivationDescriptor_t activationDesc, void* workspace,
    size_t workSpaceSizeInBytes, void* reserveSpace, size_t reserveSpaceSizeInBytes) {
  (void)zDesc;
  (void)zData;
  (void)activationDesc;
  (void)workspace;
  (void)workSpaceSizeInBytes;
  (void)reserveSpace;
  (void)reserveSpaceSizeInBytes;
  size_t unused;
  const cudnnStatus_t st = bnExSize(bnOps, &unused);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  return bnForwardTraining(handle, mode, alpha, beta, xDesc, xData, yDesc, yData,
                           bnScaleBiasMeanVarDesc, bnScale, bnBias, exponentialAverageFactor,
                           resultRunningMean, resultRunningVariance, epsilon, resultSaveMean,
                           resultSaveInvVariance);
}

cudnnStatus_t cudnnBatchNormalizationBackwardEx(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t bnOps,
    const void* alphaDataDiff, const void* betaDataDiff, const void* alphaParamDiff,
    const void* betaParamDiff, const cudnnTensorDescriptor_t xDesc, const void* xData,
    const cudnnTensorDescriptor_t yDesc, const void* yData, const cudnnTensorDescriptor_t dyDesc,
    const void* dyData, const cudnnTensorDescriptor_t dzDesc, void* dzData,
    const cudnnTensorDescriptor_t dxDesc, void* dxData,
    const cudnnTensorDescriptor_t dBnScaleBiasDesc, const void* bnScaleData,
    const void* bnBiasData, void* dBnScaleData, void* dBnBiasData, double epsilon,
    const void* savedMean, const void* savedInvVariance,
    cudnnActivationDescriptor_t activationDesc, void* workSpace, size_t workSpaceSizeInBytes,
    void* reserveSpace, size_t reserveSpaceSizeInBytes) {
  (void)yDesc;
  (void)yData;
  (void)dzDesc;
  (void)dzData;
  (void)bnBiasData;
  (void)activationDesc;
  (void)workSpace;
  (void)workSpaceSizeInBytes;
  (void)reserveSpace;
  (void)reserveSpaceSizeInBytes;
  size_t unused;
  const cudnnStatus_t st = bnExSize(bnOps, &unused);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  return bnBackward(handle, mode, alphaDataDiff, betaDataDiff, alphaParamDiff, betaParamDiff,
                    xDesc, xData, dyDesc, dyData, dxDesc, dxData, dBnScaleBiasDesc, bnScaleData,
                    dBnScaleData, dBnBiasData, epsilon, savedMean, savedInvVariance);
}

}  // extern "C"
