// cudnn_conv.h — the convolution model the cuDNN hooks share: the legacy entry points
// (cudnn.cpp) and backend-graph convolutions (cudnn_backend.cpp) decode into one ConvProblem and
// check it as a DeviceConvCall. Its reruns go through the legacy API with fumi's own handle and
// descriptors rebuilt from the decoded values (a backend plan's own-precision rerun executes
// the plan itself: DeviceConvCall::same_plan).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "call.h"
#include "cuda/device_call.h"
#include "framework_projection.h"
#include "hooks/cudnn_common.h"
#include "reference.h"

namespace fumi::hooks {

using Direction = ConvSpec::Direction;

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
    pack(format, strides);
    return true;
  }
  // The strides of the dims packed as format `f` (NCHW: KCRS; NHWC: KRSC).
  void pack(cudnnTensorFormat_t f, int64_t* out) const {
    int64_t packed = 1;
    if (f == CUDNN_TENSOR_NCHW) {
      for (int i = nd - 1; i >= 0; --i) {
        out[i] = packed;
        packed *= dims[i];
      }
    } else {
      out[1] = 1;
      packed = dims[1];
      for (int i = nd - 1; i >= 2; --i) {
        out[i] = packed;
        packed *= dims[i];
      }
      out[0] = packed;
    }
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
  int algo = 0;  // the legacy algo; -1 for a backend plan (its engine chose)
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
  // The terms each output element sums: forward C/groups * filter spatial; backward data
  // K/groups * filter spatial; backward filter N * output spatial.
  int64_t reductionLength() const {
    const int64_t filter = w.numel(), groups = std::max(1, conv.groups);
    if (dir == Direction::kForward) return filter / std::max(1, w.dims[0]);
    if (dir == Direction::kBackwardData) return filter / (std::max(1, w.dims[1]) * groups);
    return y.numel() / std::max(1, y.dims[1]);
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

inline size_t workspaceBytes(const CudnnApi& api, Direction dir, const ConvRerun& r) {
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
inline int deterministicAlgo(const ConvProblem& p) {
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
  Launch launch;  // the legacy entry point (every rerun of a legacy call, wider backend reruns)
  // A backend plan's own-precision rerun: the plan executed on the rerun's pointers (xp, wp,
  // yp, out) with fumi's handle; it brings its own workspace. Unset for legacy calls.
  std::function<fumi_status(Checker&, const ConvRerun&)> same_plan;

  fumi_status rerun(fumi_dtype precision, void* const* buf) override {
    Checker* ck = Checker::get();
    const CudnnApi* api = cuda::cudnnApi();
    if (!ck || !api) return FUMI_UNSUPPORTED;
    // At the call's own precision every buffer holds its tensor's own type (plugin.h); a wider
    // rerun computes in its data type with FMA math (no TF32) and a deterministic algo.
    const bool own = precision == info().dtype;
    if (!own && precision != FUMI_DTYPE_F32 && precision != FUMI_DTYPE_F64) return FUMI_UNSUPPORTED;
    if (!own && !launch) return FUMI_UNSUPPORTED;
    ConvRerun r;
    RerunDescriptors keep(*api, r);
    r.handle = checkerCudnn(*ck, *api);
    if (!r.handle) return FUMI_UNSUPPORTED;
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
    if (own && same_plan) return same_plan(*ck, r);
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    {
      const cudnnDataType_t as = own ? p_.x.type : cudnnOfDtype(precision);
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
      r.algo = own ? p_.algo : deterministicAlgo(p_);
      r.ws_bytes = workspaceBytes(*api, p_.dir, r);
      r.ws = r.ws_bytes ? ck->scratch(r.ws_bytes) : nullptr;
      if (r.ws_bytes && !r.ws) return FUMI_NO_SCRATCH;
      const fumi_dtype scale = scaleOf(as);
      const cuda::HostScalars s(p_.alpha, p_.fused ? p_.alpha2 : p_.beta, scale);
      r.alpha = s.alpha;
      r.beta = s.beta;
      st = launch(r);
      ck->api().cudaStreamSynchronize(ck->stream());  // before the workspace and descriptors go
      if (r.ws) ck->give(r.ws);
    }
    return rerunStatus(st);
  }

  fumi_status reference(int32_t output, double* out) override {
    return convReference(tensors(), spec_, output, out);
  }
  // On the device with fumi's kernels (the operands stay there; framework_projection.h), else
  // on host copies of the snapshots.
  fumi_status project(int32_t output, const std::vector<Projection>& sides) override {
    DeviceOps device = deviceOpsOf(*this);
    device.on_host = [this] { return &tensors(); };
    return convProjectionOnDevice(tensors(), spec_, output, sides, device);
  }

 private:
  const void* pick(void* const* buf, int i) const {
    return buf[i] ? buf[i] : tensors()[static_cast<size_t>(i)].data;
  }
  ConvProblem p_;
  ConvSpec spec_;
};


// The common path of every convolution call (legacy or backend), once it is sampled and
// decoded: `more` adds what only one API knows to the Call (a backend plan's rerun, engine).
template <class Forward>
cudnnStatus_t checkedConv(const CallSite& cs, RuleSampler* sampler, ConvProblem& p,
                          Forward&& forward, Launch launch,
                          std::function<void(DeviceConvCall&)> more = nullptr,
                          const std::function<bool(std::unique_ptr<cuda::PendingCheck>&)>& hold = {}) {
  auto call = std::make_unique<DeviceConvCall>(cs.site, p, cs.call_index);
  call->launch = std::move(launch);
  const bool dx_out = p.dir == Direction::kBackwardData, dw_out = p.dir == Direction::kBackwardFilter,
             y_out = p.dir == Direction::kForward;
  void *sx = nullptr, *sw = nullptr, *sy = nullptr, *sprior = nullptr, *sz = nullptr,
       *sbias = nullptr, *sout = nullptr;
  const Dims& out = p.output();
  auto before = [&](Checker&, cuda::Snapshots& snaps) -> const char* {
    if (!dx_out) sx = snaps.copy(p.xp, p.x.bytes());
    if (!dw_out) sw = snaps.copy(p.wp, p.w.bytes());
    if (!y_out) sy = snaps.copy(p.yp, p.y.bytes());
    if (p.readsPrior()) sprior = snaps.copy(p.out, out.bytes());
    if (p.fused && p.alpha2 != 0) sz = snaps.copy(p.zp, p.z.bytes());
    if (p.fused) sbias = snaps.copy(p.biasp, p.bias.bytes());
    return nullptr;
  };
  auto after = [&](cuda::Snapshots& snaps) { return (sout = snaps.copy(p.out, out.bytes())) != nullptr; };
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
    call->setReductionLength(p.reductionLength());
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
    if (p.algo >= 0) call->addArg("algo", std::to_string(p.algo));  // legacy calls only
    call->addArg("alpha", formatScalar(p.alpha));
    if (p.fused) {
      call->addArg("alpha2", formatScalar(p.alpha2));
      call->addArg("activation", p.act.mode == CUDNN_ACTIVATION_RELU ? "relu" : "identity");
    } else {
      call->addArg("beta", formatScalar(p.beta));
    }
    if (more) more(*call);
    return std::move(call);
  };
  return cuda::checkedDeviceCall(cs, sampler, p.stream, CUDNN_STATUS_SUCCESS, forward, before,
                                 after, build, hold);
}


// The legacy entry point of a direction as a rerun launcher (defined with the legacy hooks in
// cudnn.cpp); nullptr when the loaded cuDNN lacks it.
Launch legacyConvLaunch(Direction dir);

}  // namespace fumi::hooks
