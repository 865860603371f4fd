// cudnn.cpp — cuDNN legacy convolution hooks (table in cudnn.def): forward, backward data,
// backward filter and the fused bias-activation forward.
//
// A sampled call is decoded from its descriptors (read with cuDNN's own getters, resolved at
// run time: cuda/cudnn_fns.def) into one canonical problem (ConvProblem: x N x C x spatial,
// w K x C/groups x filter spatial, y N x K x output spatial, through each tensor's strides;
// padding, stride, dilation, groups, convolution or cross-correlation, types, compute type, math
// type, algo, scalars). Its operands are snapshotted on the handle's stream into the checker's
// pool (inputs before the call, the output after it; cuda/device_call.h), and the check is
// queued for the checker thread. Reruns run there with fumi's own cuDNN handle (on the checker's
// stream) and descriptors rebuilt from the decoded values, since the program may destroy or
// change its own right after the call: the same entry point, algo and math type at the call's
// precision (determinism, perturb), or wider data and compute with FMA math and a deterministic
// algo (highprec). `reference` is fumi's own host convolution (reference.h).
// docs/cuda.md describes what is decoded and what is skipped.
#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <spdlog/fmt/fmt.h>

#include "call.h"
#include "cuda/checker.h"
#include "cuda/cudnn_fns.h"
#include "cuda/device_call.h"
#include "engine.h"
#include "fumi/dtype.hpp"
#include "hook.h"
#include "reference.h"
#include "report.h"

namespace fumi::cuda {

namespace {
void fillCudnn(CudnnApi& api, const char*& absent) {
#define FUMI_CUDA_FN(name, ret, params) resolveInto(api.name, #name, absent);
#include "cuda/cudnn_fns.def"
#undef FUMI_CUDA_FN
}
}  // namespace

const CudnnApi* cudnnApi(const char** missing) {
  return resolvedTable<CudnnApi, fillCudnn>(missing);
}

}  // namespace fumi::cuda

namespace fumi::hooks {

namespace {

using cuda::Checker;
using cuda::countSkipped;
using cuda::CudnnApi;
using cuda::HostScalars;
using cuda::Snapshots;
using Direction = ConvSpec::Direction;

constexpr int kMaxDims = 5;     // N, C and up to 3 spatial dimensions
constexpr int kMaxSpatial = 3;

// ---- types -----------------------------------------------------------------------------------

fumi_dtype dtypeOfCudnn(cudnnDataType_t t) {
  switch (t) {
    case CUDNN_DATA_DOUBLE: return FUMI_DTYPE_F64;
    case CUDNN_DATA_FLOAT: return FUMI_DTYPE_F32;
    case CUDNN_DATA_HALF: return FUMI_DTYPE_F16;
    case CUDNN_DATA_BFLOAT16: return FUMI_DTYPE_BF16;
    default: return FUMI_DTYPE_UNKNOWN;
  }
}

cudnnDataType_t cudnnOfDtype(fumi_dtype d) {
  return d == FUMI_DTYPE_F64 ? CUDNN_DATA_DOUBLE : d == FUMI_DTYPE_F16 ? CUDNN_DATA_HALF
                                               : d == FUMI_DTYPE_BF16 ? CUDNN_DATA_BFLOAT16
                                                                      : CUDNN_DATA_FLOAT;
}

// The precision the convolution really multiplies in. FLOAT data under any math type but
// FMA may run on TF32 tensor cores (cuDNN's default on Ampere and later).
fumi_dtype computePrecision(cudnnDataType_t data, cudnnDataType_t compute, cudnnMathType_t math) {
  switch (compute) {
    case CUDNN_DATA_DOUBLE: return FUMI_DTYPE_F64;
    case CUDNN_DATA_HALF: return FUMI_DTYPE_F16;
    case CUDNN_DATA_BFLOAT16: return FUMI_DTYPE_BF16;
    case CUDNN_DATA_FLOAT:
      return data == CUDNN_DATA_FLOAT && math != CUDNN_FMA_MATH ? FUMI_DTYPE_TF32 : FUMI_DTYPE_F32;
    default: return FUMI_DTYPE_UNKNOWN;
  }
}

const char* mathName(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH: return "default";
    case CUDNN_TENSOR_OP_MATH: return "tensor_op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor_op_allow_conversion";
    case CUDNN_FMA_MATH: return "fma";
    default: return "?";
  }
}

// alpha/beta (host pointers): double for DOUBLE data, float otherwise.
fumi_dtype scaleOf(cudnnDataType_t data) {
  return data == CUDNN_DATA_DOUBLE ? FUMI_DTYPE_F64 : FUMI_DTYPE_F32;
}

std::string joined(const int* v, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

// ---- descriptors, kept by value ----------------------------------------------------------------

// Elements from the lowest to the highest address + 1 of dims/strides (non-negative strides).
int64_t spanOf(int nd, const int* dims, const int64_t* strides) {
  int64_t last = 0;
  for (int i = 0; i < nd; ++i) {
    if (dims[i] <= 0) return 0;
    last += (dims[i] - 1) * strides[i];
  }
  return last + 1;
}

// A tensor or filter as fumi keeps it: logical dims (N, C, spatial... or K, C/g, spatial...)
// and element strides.
struct Dims {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int nd = 0;
  int dims[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
  int64_t span() const { return spanOf(nd, dims, strides); }
  size_t bytes() const {
    return static_cast<size_t>(span()) * static_cast<size_t>(dtypeBytes(dtypeOfCudnn(type)));
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < nd; ++i) n *= dims[i];
    return n;
  }
  // "nchw" or "nhwc" when packed that way, else "strided".
  const char* layout() const {
    int64_t packed = 1;
    bool nchw = true;
    for (int i = nd - 1; i >= 0; --i) {
      nchw = nchw && strides[i] == packed;
      packed *= dims[i];
    }
    if (nchw) return "nchw";
    bool nhwc = strides[1] == 1;
    packed = dims[1];
    for (int i = nd - 1; i >= 2; --i) {
      nhwc = nhwc && strides[i] == packed;
      packed *= dims[i];
    }
    return nhwc && strides[0] == packed ? "nhwc" : "strided";
  }
  fumi_tensor tensor(const char* name, fumi_role role, void* data) const {
    fumi_tensor t{};
    t.name = name;
    t.dtype = dtypeOfCudnn(type);
    t.memory = FUMI_MEMORY_DEVICE;
    t.role = role;
    t.ndim = nd;
    for (int i = 0; i < nd; ++i) {
      t.shape[i] = dims[i];
      t.strides[i] = strides[i];
    }
    t.data = data;
    return t;
  }
};

struct TensorDims : Dims {
  bool read(const CudnnApi& api, cudnnTensorDescriptor_t d) {
    int st[8] = {}, dm[8] = {};
    if (!d || api.cudnnGetTensorNdDescriptor(d, 8, &type, &nd, dm, st) != CUDNN_STATUS_SUCCESS ||
        nd < 3 || nd > kMaxDims)
      return false;
    for (int i = 0; i < nd; ++i) {
      if (st[i] < 0) return false;
      dims[i] = dm[i];
      strides[i] = st[i];
    }
    return true;
  }
  // A descriptor like this one holding `as`; nullptr on failure.
  cudnnTensorDescriptor_t create(const CudnnApi& api, cudnnDataType_t as) const {
    cudnnTensorDescriptor_t d = nullptr;
    int st[kMaxDims];
    for (int i = 0; i < nd; ++i) st[i] = static_cast<int>(strides[i]);
    if (api.cudnnCreateTensorDescriptor(&d) != CUDNN_STATUS_SUCCESS) return nullptr;
    if (api.cudnnSetTensorNdDescriptor(d, as, nd, dims, st) != CUDNN_STATUS_SUCCESS) {
      api.cudnnDestroyTensorDescriptor(d);
      return nullptr;
    }
    return d;
  }
};

// Filters are packed: KCRS (format NCHW) or KRSC (NHWC); dims are K, C/groups, spatial....
struct FilterDims : Dims {
  cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW;
  bool read(const CudnnApi& api, cudnnFilterDescriptor_t d) {
    int dm[8] = {};
    if (!d ||
        api.cudnnGetFilterNdDescriptor(d, 8, &type, &format, &nd, dm) != CUDNN_STATUS_SUCCESS ||
        nd < 3 || nd > kMaxDims ||
        (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC))
      return false;
    std::copy(dm, dm + nd, dims);
    int64_t packed = 1;
    if (format == CUDNN_TENSOR_NCHW) {
      for (int i = nd - 1; i >= 0; --i) {
        strides[i] = packed;
        packed *= dims[i];
      }
    } else {
      strides[1] = 1;
      packed = dims[1];
      for (int i = nd - 1; i >= 2; --i) {
        strides[i] = packed;
        packed *= dims[i];
      }
      strides[0] = packed;
    }
    return true;
  }
  cudnnFilterDescriptor_t create(const CudnnApi& api, cudnnDataType_t as) const {
    cudnnFilterDescriptor_t d = nullptr;
    if (api.cudnnCreateFilterDescriptor(&d) != CUDNN_STATUS_SUCCESS) return nullptr;
    if (api.cudnnSetFilterNdDescriptor(d, as, format, nd, dims) != CUDNN_STATUS_SUCCESS) {
      api.cudnnDestroyFilterDescriptor(d);
      return nullptr;
    }
    return d;
  }
};

struct ConvDesc {
  int len = 0;
  int pad[6] = {}, stride[6] = {}, dilation[6] = {};
  cudnnConvolutionMode_t mode = CUDNN_CONVOLUTION;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  int groups = 1;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  bool read(const CudnnApi& api, cudnnConvolutionDescriptor_t d) {
    return d &&
           api.cudnnGetConvolutionNdDescriptor(d, 6, &len, pad, stride, dilation, &mode,
                                               &compute) == CUDNN_STATUS_SUCCESS &&
           api.cudnnGetConvolutionGroupCount(d, &groups) == CUDNN_STATUS_SUCCESS &&
           api.cudnnGetConvolutionMathType(d, &math) == CUDNN_STATUS_SUCCESS && len >= 1 &&
           len <= kMaxSpatial && groups >= 1;
  }
  cudnnConvolutionDescriptor_t create(const CudnnApi& api, cudnnDataType_t as,
                                      cudnnMathType_t m) const {
    cudnnConvolutionDescriptor_t d = nullptr;
    if (api.cudnnCreateConvolutionDescriptor(&d) != CUDNN_STATUS_SUCCESS) return nullptr;
    if (api.cudnnSetConvolutionNdDescriptor(d, len, pad, stride, dilation, mode, as) !=
            CUDNN_STATUS_SUCCESS ||
        api.cudnnSetConvolutionGroupCount(d, groups) != CUDNN_STATUS_SUCCESS ||
        api.cudnnSetConvolutionMathType(d, m) != CUDNN_STATUS_SUCCESS) {
      api.cudnnDestroyConvolutionDescriptor(d);
      return nullptr;
    }
    return d;
  }
};

struct ActDesc {
  cudnnActivationMode_t mode = CUDNN_ACTIVATION_IDENTITY;
  cudnnNanPropagation_t nan = CUDNN_NOT_PROPAGATE_NAN;
  double coef = 0;
  bool read(const CudnnApi& api, cudnnActivationDescriptor_t d) {
    return d && api.cudnnGetActivationDescriptor(d, &mode, &nan, &coef) == CUDNN_STATUS_SUCCESS &&
           (mode == CUDNN_ACTIVATION_RELU || mode == CUDNN_ACTIVATION_IDENTITY);
  }
  cudnnActivationDescriptor_t create(const CudnnApi& api) const {
    cudnnActivationDescriptor_t d = nullptr;
    if (api.cudnnCreateActivationDescriptor(&d) != CUDNN_STATUS_SUCCESS) return nullptr;
    if (api.cudnnSetActivationDescriptor(d, mode, nan, coef) != CUDNN_STATUS_SUCCESS) {
      api.cudnnDestroyActivationDescriptor(d);
      return nullptr;
    }
    return d;
  }
};

// ---- the canonical problem ---------------------------------------------------------------------

struct ConvProblem {
  Direction dir = Direction::kForward;
  bool fused = false;  // cudnnConvolutionBiasActivationForward
  TensorDims x, y, z, bias;  // y is dy and x is dx for the backward directions
  FilterDims w;
  ConvDesc conv;
  ActDesc act;
  int algo = 0;
  cudaStream_t stream = nullptr;
  const void *xp = nullptr, *wp = nullptr, *yp = nullptr, *zp = nullptr, *biasp = nullptr;
  void* out = nullptr;  // the output's pointer (x, w or y as the direction says)
  double alpha = 1, beta = 0, alpha2 = 0;

  fumi_dtype dtype() const { return dtypeOfCudnn(x.type); }
  fumi_dtype compute() const { return computePrecision(x.type, conv.compute, conv.math); }
  int spatial() const { return x.nd - 2; }
  int64_t size() const {  // multiply-adds: N * K * output spatial * C/groups * filter spatial
    return y.numel() * (w.numel() / std::max(1, w.dims[0]));
  }
  // The output's dims.
  const Dims& output() const {
    return dir == Direction::kForward ? static_cast<const Dims&>(y)
           : dir == Direction::kBackwardData ? static_cast<const Dims&>(x)
                                             : static_cast<const Dims&>(w);
  }
  bool readsPrior() const { return !fused && beta != 0; }

  // Reads the descriptors; nullptr, or why the call is not modelled.
  const char* decode(const CudnnApi& api, cudnnHandle_t h, cudnnTensorDescriptor_t xd,
                     cudnnFilterDescriptor_t wd, cudnnConvolutionDescriptor_t cd,
                     cudnnTensorDescriptor_t yd) {
    if (!x.read(api, xd) || !w.read(api, wd) || !y.read(api, yd) || !conv.read(api, cd))
      return "descriptors not supported";
    if (api.cudnnGetStream(h, &stream) != CUDNN_STATUS_SUCCESS) return "handle unreadable";
    if (x.type != w.type || x.type != y.type || dtype() == FUMI_DTYPE_UNKNOWN)
      return "data types not supported";
    if (compute() == FUMI_DTYPE_UNKNOWN) return "compute type not supported";
    if (conv.len != spatial() || w.nd != x.nd || y.nd != x.nd || y.dims[0] != x.dims[0] ||
        y.dims[1] != w.dims[0] || w.dims[1] * conv.groups != x.dims[1] ||
        w.dims[0] % conv.groups != 0)
      return "descriptor shapes inconsistent";
    return nullptr;
  }
  ConvSpec spec() const {
    ConvSpec s;
    s.direction = dir;
    s.spatial = spatial();
    s.groups = conv.groups;
    for (int i = 0; i < spatial(); ++i) {
      s.pad[i] = conv.pad[i];
      s.stride[i] = conv.stride[i];
      s.dilation[i] = conv.dilation[i];
    }
    s.flip = conv.mode == CUDNN_CONVOLUTION;
    s.alpha = alpha;
    s.beta = fused ? 0 : beta;
    s.alpha2 = fused ? alpha2 : 0;
    s.act = fused && act.mode == CUDNN_ACTIVATION_RELU ? ConvSpec::Act::kRelu : ConvSpec::Act::kNone;
    return s;
  }
};

// ---- rerun -----------------------------------------------------------------------------------

// One rerun's arguments: descriptors rebuilt in the rerun's types, its buffers, host scalars.
struct ConvRerun {
  cudnnHandle_t handle = nullptr;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, z = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnActivationDescriptor_t act = nullptr;
  const void *xp = nullptr, *wp = nullptr, *yp = nullptr, *zp = nullptr, *biasp = nullptr;
  void* out = nullptr;
  int algo = 0;
  void* ws = nullptr;
  size_t ws_bytes = 0;
  const void* alpha = nullptr;
  const void* beta = nullptr;   // beta of the plain forms, alpha2 of the fused one
};
// The intercepted entry point called with a rerun's arguments.
using Launch = std::function<cudnnStatus_t(const ConvRerun&)>;

// Descriptors of one rerun, destroyed with it.
struct RerunDescriptors {
  const CudnnApi& api;
  ConvRerun& r;
  RerunDescriptors(const CudnnApi& a, ConvRerun& rerun) : api(a), r(rerun) {}
  ~RerunDescriptors() {
    for (auto* t : {r.x, r.y, r.z, r.bias})
      if (t) api.cudnnDestroyTensorDescriptor(t);
    if (r.w) api.cudnnDestroyFilterDescriptor(r.w);
    if (r.conv) api.cudnnDestroyConvolutionDescriptor(r.conv);
    if (r.act) api.cudnnDestroyActivationDescriptor(r.act);
  }
  RerunDescriptors(const RerunDescriptors&) = delete;
  RerunDescriptors& operator=(const RerunDescriptors&) = delete;
};

// fumi's own cuDNN handle (checker thread only), bound to the checker's stream.
cudnnHandle_t checkerCudnn(Checker& ck, const CudnnApi& api) {
  return cuda::checkerHandle<cudnnHandle_t>([&](cudnnHandle_t* h) {
    return api.cudnnCreate(h) == CUDNN_STATUS_SUCCESS &&
           api.cudnnSetStream(*h, ck.stream()) == CUDNN_STATUS_SUCCESS;
  });
}

size_t workspaceBytes(const CudnnApi& api, Direction dir, const ConvRerun& r) {
  size_t bytes = 0;
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  switch (dir) {
    case Direction::kForward:
      st = api.cudnnGetConvolutionForwardWorkspaceSize(
          r.handle, r.x, r.w, r.conv, r.y, static_cast<cudnnConvolutionFwdAlgo_t>(r.algo), &bytes);
      break;
    case Direction::kBackwardData:
      st = api.cudnnGetConvolutionBackwardDataWorkspaceSize(
          r.handle, r.w, r.y, r.conv, r.x, static_cast<cudnnConvolutionBwdDataAlgo_t>(r.algo),
          &bytes);
      break;
    case Direction::kBackwardFilter:
      st = api.cudnnGetConvolutionBackwardFilterWorkspaceSize(
          r.handle, r.x, r.y, r.conv, r.w, static_cast<cudnnConvolutionBwdFilterAlgo_t>(r.algo),
          &bytes);
      break;
  }
  return st == CUDNN_STATUS_SUCCESS ? bytes : 0;
}

// A deterministic algo of the direction, for the wider rerun (the fused forward with identity
// activation takes IMPLICIT_PRECOMP_GEMM only).
int deterministicAlgo(const ConvProblem& p) {
  switch (p.dir) {
    case Direction::kForward:
      return p.fused && p.act.mode == CUDNN_ACTIVATION_IDENTITY
                 ? CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM
                 : CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    case Direction::kBackwardData: return CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
    case Direction::kBackwardFilter: return CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  }
  return 0;
}

class DeviceConvCall final : public Call {
 public:
  DeviceConvCall(OpSite& site, const ConvProblem& p, uint64_t index)
      : Call(site, p.dtype(), p.compute(), p.size(), index), p_(p), spec_(p.spec()) {}
  ConvSpec& spec() { return spec_; }
  Launch launch;

  fumi_status rerun(fumi_dtype precision, void* const* buf) override {
    Checker* ck = Checker::get();
    const CudnnApi* api = cuda::cudnnApi();
    if (!ck || !api) return FUMI_UNSUPPORTED;
    // At the call's own precision every buffer holds its tensor's own type (plugin.h); a wider
    // rerun computes in its data type with FMA math (no TF32) and a deterministic algo.
    const bool own = precision == info().dtype;
    if (!own && precision != FUMI_DTYPE_F32 && precision != FUMI_DTYPE_F64) return FUMI_UNSUPPORTED;
    const cudnnDataType_t as = own ? p_.x.type : cudnnOfDtype(precision);
    ConvRerun r;
    RerunDescriptors keep(*api, r);
    r.handle = checkerCudnn(*ck, *api);
    if (!r.handle) return FUMI_UNSUPPORTED;
    r.x = p_.x.create(*api, as);
    r.y = p_.y.create(*api, as);
    r.w = p_.w.create(*api, as);
    r.conv = p_.conv.create(*api, own ? p_.conv.compute : as, own ? p_.conv.math : CUDNN_FMA_MATH);
    if (!r.x || !r.y || !r.w || !r.conv) return FUMI_UNSUPPORTED;
    if (p_.fused) {
      r.z = p_.z.create(*api, as);
      r.bias = p_.bias.create(*api, as);
      r.act = p_.act.create(*api);
      if (!r.z || !r.bias || !r.act) return FUMI_UNSUPPORTED;
    }
    r.xp = pick(buf, spec_.x);
    r.wp = pick(buf, spec_.w);
    r.yp = pick(buf, spec_.y);
    const int out = p_.dir == Direction::kForward        ? spec_.y
                    : p_.dir == Direction::kBackwardData ? spec_.x
                                                         : spec_.w;
    r.out = buf[out];
    // alpha2 == 0: z is not read; the output buffer stands in (z may alias y).
    r.zp = spec_.z >= 0 ? pick(buf, spec_.z) : r.out;
    r.biasp = spec_.bias >= 0 ? pick(buf, spec_.bias) : nullptr;
    if (spec_.prior >= 0) {  // beta != 0: the output starts from its value before the call
      const fumi_dtype held = own ? info().dtype : precision;
      const size_t bytes =
          static_cast<size_t>(p_.output().span()) * static_cast<size_t>(dtypeBytes(held));
      if (!ck->copy(r.out, pick(buf, spec_.prior), bytes, cudaMemcpyDeviceToDevice))
        return FUMI_ERROR;
    }
    r.algo = own ? p_.algo : deterministicAlgo(p_);
    r.ws_bytes = workspaceBytes(*api, p_.dir, r);
    r.ws = r.ws_bytes ? ck->scratch(r.ws_bytes) : nullptr;
    if (r.ws_bytes && !r.ws) return FUMI_NO_SCRATCH;
    const fumi_dtype scale = scaleOf(as);
    const HostScalars s(p_.alpha, p_.fused ? p_.alpha2 : p_.beta, scale);
    r.alpha = s.alpha;
    r.beta = s.beta;
    const cudnnStatus_t st = launch(r);
    ck->api().cudaStreamSynchronize(ck->stream());  // before the workspace and descriptors go
    if (r.ws) ck->give(r.ws);
    if (st == CUDNN_STATUS_SUCCESS) return FUMI_OK;
    // A configuration cuDNN does not run (a wider type for this algo or layout): not checked.
    return st == CUDNN_STATUS_NOT_SUPPORTED || st == CUDNN_STATUS_BAD_PARAM ? FUMI_UNSUPPORTED
                                                                           : FUMI_ERROR;
  }

  fumi_status reference(int32_t output, double* out) override {
    return convReference(tensors(), spec_, output, out);
  }

 private:
  const void* pick(void* const* buf, int i) const {
    return buf[i] ? buf[i] : tensors()[static_cast<size_t>(i)].data;
  }
  ConvProblem p_;
  ConvSpec spec_;
};

// ---- sampling and the checked path -----------------------------------------------------------

// The policy's sampling decision from the output-side tensor (y or dy: N, K, output spatial,
// the data type) and the filter (C/groups, filter spatial): two getter calls, so that the full
// decode is paid only by sampled calls. Descriptors that cannot be read are decided with
// unknown facts, so that a sampled call still counts as skipped.
RuleSampler* selectConv(const CallSite& cs, const CudnnApi* api, cudnnTensorDescriptor_t yd,
                        cudnnFilterDescriptor_t wd) {
  TensorDims y;
  FilterDims w;
  bool read = false;
  if (api) {
    InsideScope inside;
    read = y.read(*api, yd) && w.read(*api, wd);
  }
  const int64_t size = read ? y.numel() * (w.numel() / std::max(1, w.dims[0])) : 1;
  const fumi_dtype dtype = read ? dtypeOfCudnn(y.type) : FUMI_DTYPE_UNKNOWN;
  if (read && size <= 0) return nullptr;
  return cs.decision.select(CallFacts{size, dtype, "cuda"}, cs.call_index);
}

// The common path of every convolution hook, once the call is sampled and decoded.
template <class Forward>
cudnnStatus_t checkedConv(const CallSite& cs, RuleSampler* sampler, ConvProblem& p,
                          Forward&& forward, Launch launch) {
  auto call = std::make_unique<DeviceConvCall>(cs.site, p, cs.call_index);
  call->launch = std::move(launch);
  const bool dx_out = p.dir == Direction::kBackwardData, dw_out = p.dir == Direction::kBackwardFilter,
             y_out = p.dir == Direction::kForward;
  void *sx = nullptr, *sw = nullptr, *sy = nullptr, *sprior = nullptr, *sz = nullptr,
       *sbias = nullptr, *sout = nullptr;
  const Dims& out = p.output();
  auto before = [&](Checker&, Snapshots& snaps) -> const char* {
    if (!dx_out) sx = snaps.copy(p.xp, p.x.bytes());
    if (!dw_out) sw = snaps.copy(p.wp, p.w.bytes());
    if (!y_out) sy = snaps.copy(p.yp, p.y.bytes());
    if (p.readsPrior()) sprior = snaps.copy(p.out, out.bytes());
    if (p.fused && p.alpha2 != 0) sz = snaps.copy(p.zp, p.z.bytes());
    if (p.fused) sbias = snaps.copy(p.biasp, p.bias.bytes());
    return nullptr;
  };
  auto after = [&](Snapshots& snaps) { return (sout = snaps.copy(p.out, out.bytes())) != nullptr; };
  auto build = [&]() -> std::unique_ptr<Call> {
    const bool fwd = p.dir == Direction::kForward;
    const char* yname = fwd ? "y" : "dy";
    const char* xname = dx_out ? "dx" : "x";
    const char* wname = dw_out ? "dw" : "w";
    const char* out_name = y_out ? yname : dx_out ? xname : wname;
    ConvSpec& s = call->spec();
    if (sx) s.x = call->addTensor(p.x.tensor(xname, FUMI_ROLE_INPUT, sx));
    if (sw) s.w = call->addTensor(p.w.tensor(wname, FUMI_ROLE_INPUT, sw));
    if (sy) s.y = call->addTensor(p.y.tensor(yname, FUMI_ROLE_INPUT, sy));
    if (sprior) s.prior = call->addTensor(out.tensor(out_name, FUMI_ROLE_INPUT, sprior));
    if (sz) s.z = call->addTensor(p.z.tensor("z", FUMI_ROLE_INPUT, sz));
    if (sbias) s.bias = call->addTensor(p.bias.tensor("bias", FUMI_ROLE_INPUT, sbias));
    const int o = call->addTensor(out.tensor(out_name, FUMI_ROLE_OUTPUT, sout));
    (y_out ? s.y : dx_out ? s.x : s.w) = o;
    const int sp = p.spatial();
    call->addArg("n", std::to_string(p.x.dims[0]));
    call->addArg("c", std::to_string(p.x.dims[1]));
    call->addArg("k", std::to_string(p.w.dims[0]));
    call->addArg("groups", std::to_string(p.conv.groups));
    call->addArg("pad", joined(p.conv.pad, sp));
    call->addArg("stride", joined(p.conv.stride, sp));
    call->addArg("dilation", joined(p.conv.dilation, sp));
    call->addArg("mode", p.conv.mode == CUDNN_CONVOLUTION ? "convolution" : "cross_correlation");
    call->addArg("layout", p.x.layout());
    call->addArg("filter_format", p.w.format == CUDNN_TENSOR_NHWC ? "nhwc" : "nchw");
    call->addArg("compute", dtypeName(p.compute()));
    call->addArg("compute_type", dtypeName(dtypeOfCudnn(p.conv.compute)));
    call->addArg("math_mode", mathName(p.conv.math));
    call->addArg("algo", std::to_string(p.algo));
    call->addArg("alpha", cuda::formatScalar(p.alpha));
    if (p.fused) {
      call->addArg("alpha2", cuda::formatScalar(p.alpha2));
      call->addArg("activation", p.act.mode == CUDNN_ACTIVATION_RELU ? "relu" : "identity");
    } else {
      call->addArg("beta", cuda::formatScalar(p.beta));
    }
    return std::move(call);
  };
  return cuda::checkedDeviceCall(cs, sampler, p.stream, CUDNN_STATUS_SUCCESS, forward, before,
                                 after, build);
}

// What every convolution hook does: decide sampling from the output-side tensor (y or dy) and
// the filter; for a sampled call decode the descriptors (`more` reads what one entry point
// adds) and run the checked path. A call fumi does not model runs unchecked, counted skipped.
// `p` arrives with the direction, algo and data pointers set.
template <class Forward, class More>
cudnnStatus_t convHook(const CallSite& cs, ConvProblem& p, cudnnHandle_t h,
                       cudnnTensorDescriptor_t xd, cudnnFilterDescriptor_t wd,
                       cudnnConvolutionDescriptor_t cd, cudnnTensorDescriptor_t yd,
                       const void* alpha, const void* beta, Forward&& forward, More&& more,
                       Launch launch) {
  const CudnnApi* api = cuda::cudnnApi();
  RuleSampler* sampler = selectConv(cs, api, yd, wd);
  if (!sampler) return forward();
  const char* why = api ? nullptr : "cuDNN functions missing";
  if (!why) {
    InsideScope inside;
    why = p.decode(*api, h, xd, wd, cd, yd);
    if (!why) why = more(*api);
  }
  if (why) {
    countSkipped(cs.site, why);
    return forward();
  }
  const fumi_dtype scale = scaleOf(p.x.type);
  p.alpha = loadAsDouble(alpha, 0, scale);
  (p.fused ? p.alpha2 : p.beta) = loadAsDouble(beta, 0, scale);
  return checkedConv(cs, sampler, p, forward, std::move(launch));
}

const char* nothingMore(const CudnnApi&) { return nullptr; }

ConvProblem problem(Direction dir, int algo, const void* x, const void* w, const void* y,
                    void* out) {
  ConvProblem p;
  p.dir = dir;
  p.algo = algo;
  p.xp = x;
  p.wp = w;
  p.yp = y;
  p.out = out;
  return p;
}

template <class Real>
cudnnStatus_t convForward(const CallSite& cs, Real real, cudnnHandle_t h, const void* alpha,
                          cudnnTensorDescriptor_t xd, const void* x, cudnnFilterDescriptor_t wd,
                          const void* w, cudnnConvolutionDescriptor_t cd,
                          cudnnConvolutionFwdAlgo_t algo, void* ws, size_t ws_bytes,
                          const void* beta, cudnnTensorDescriptor_t yd, void* y) {
  auto forward = [&] {
    return forwardReal(real, h, alpha, xd, x, wd, w, cd, algo, ws, ws_bytes, beta, yd, y);
  };
  ConvProblem p = problem(Direction::kForward, algo, x, w, nullptr, y);
  return convHook(cs, p, h, xd, wd, cd, yd, alpha, beta, forward, nothingMore,
                  [real](const ConvRerun& r) {
                    return real(r.handle, r.alpha, r.x, r.xp, r.w, r.wp, r.conv,
                                static_cast<cudnnConvolutionFwdAlgo_t>(r.algo), r.ws, r.ws_bytes,
                                r.beta, r.y, r.out);
                  });
}

template <class Real>
cudnnStatus_t convBackwardData(const CallSite& cs, Real real, cudnnHandle_t h, const void* alpha,
                               cudnnFilterDescriptor_t wd, const void* w,
                               cudnnTensorDescriptor_t dyd, const void* dy,
                               cudnnConvolutionDescriptor_t cd, cudnnConvolutionBwdDataAlgo_t algo,
                               void* ws, size_t ws_bytes, const void* beta,
                               cudnnTensorDescriptor_t dxd, void* dx) {
  auto forward = [&] {
    return forwardReal(real, h, alpha, wd, w, dyd, dy, cd, algo, ws, ws_bytes, beta, dxd, dx);
  };
  ConvProblem p = problem(Direction::kBackwardData, algo, nullptr, w, dy, dx);
  return convHook(cs, p, h, dxd, wd, cd, dyd, alpha, beta, forward, nothingMore,
                  [real](const ConvRerun& r) {
                    return real(r.handle, r.alpha, r.w, r.wp, r.y, r.yp, r.conv,
                                static_cast<cudnnConvolutionBwdDataAlgo_t>(r.algo), r.ws,
                                r.ws_bytes, r.beta, r.x, r.out);
                  });
}

template <class Real>
cudnnStatus_t convBackwardFilter(const CallSite& cs, Real real, cudnnHandle_t h,
                                 const void* alpha, cudnnTensorDescriptor_t xd, const void* x,
                                 cudnnTensorDescriptor_t dyd, const void* dy,
                                 cudnnConvolutionDescriptor_t cd,
                                 cudnnConvolutionBwdFilterAlgo_t algo, void* ws, size_t ws_bytes,
                                 const void* beta, cudnnFilterDescriptor_t dwd, void* dw) {
  auto forward = [&] {
    return forwardReal(real, h, alpha, xd, x, dyd, dy, cd, algo, ws, ws_bytes, beta, dwd, dw);
  };
  ConvProblem p = problem(Direction::kBackwardFilter, algo, x, nullptr, dy, dw);
  return convHook(cs, p, h, xd, dwd, cd, dyd, alpha, beta, forward, nothingMore,
                  [real](const ConvRerun& r) {
                    return real(r.handle, r.alpha, r.x, r.xp, r.y, r.yp, r.conv,
                                static_cast<cudnnConvolutionBwdFilterAlgo_t>(r.algo), r.ws,
                                r.ws_bytes, r.beta, r.w, r.out);
                  });
}

// y = act(alpha1 * conv(x, w) + alpha2 * z + bias): z may alias y, so it is snapshotted
// before the call like any input.
template <class Real>
cudnnStatus_t convBiasActivation(const CallSite& cs, Real real, cudnnHandle_t h,
                                 const void* alpha1, cudnnTensorDescriptor_t xd, const void* x,
                                 cudnnFilterDescriptor_t wd, const void* w,
                                 cudnnConvolutionDescriptor_t cd, cudnnConvolutionFwdAlgo_t algo,
                                 void* ws, size_t ws_bytes, const void* alpha2,
                                 cudnnTensorDescriptor_t zd, const void* z,
                                 cudnnTensorDescriptor_t bd, const void* bias,
                                 cudnnActivationDescriptor_t ad, cudnnTensorDescriptor_t yd,
                                 void* y) {
  auto forward = [&] {
    return forwardReal(real, h, alpha1, xd, x, wd, w, cd, algo, ws, ws_bytes, alpha2, zd, z, bd,
                       bias, ad, yd, y);
  };
  ConvProblem p = problem(Direction::kForward, algo, x, w, nullptr, y);
  p.fused = true;
  p.zp = z;
  p.biasp = bias;
  auto more = [&](const CudnnApi& api) -> const char* {
    if (!p.z.read(api, zd) || !p.bias.read(api, bd) || !p.act.read(api, ad))
      return "descriptors not supported";
    if (p.z.type != p.x.type || p.bias.type != p.x.type || p.z.nd != p.y.nd ||
        !std::equal(p.z.dims, p.z.dims + p.z.nd, p.y.dims) || p.bias.numel() != p.y.dims[1])
      return "descriptor shapes inconsistent";
    return nullptr;
  };
  return convHook(cs, p, h, xd, wd, cd, yd, alpha1, alpha2, forward, more,
                  [real](const ConvRerun& r) {
                    return real(r.handle, r.alpha, r.x, r.xp, r.w, r.wp, r.conv,
                                static_cast<cudnnConvolutionFwdAlgo_t>(r.algo), r.ws, r.ws_bytes,
                                r.beta, r.z, r.zp, r.bias, r.biasp, r.act, r.y, r.out);
                  });
}

}  // namespace

#define FUMI_HOOK FUMI_HOOK_STATE
#include "cudnn.def"
#undef FUMI_HOOK

}  // namespace fumi::hooks

#define FUMI_HOOK FUMI_HOOK_WRAPPER
#include "cudnn.def"
#undef FUMI_HOOK
