// cudnn_norm.cpp — cuDNN legacy batch-normalisation hooks (table in cudnn_norm.def): forward
// training (plain and Ex), forward inference, backward (plain and Ex).
//
// A sampled call is decoded like a convolution (cudnn.cpp): its descriptors read with cuDNN's
// getters into one canonical problem (BnProblem: x N x C x spatial, y or dy like x, the shared
// parameter descriptor 1 x C x 1... or 1 x C x spatial..., mode, epsilon, average factor,
// scalars), operands snapshotted on the handle's stream (inputs before the call — including the
// running statistics the call updates in place and any output read through beta — outputs
// after), and the check queued for the checker thread. Reruns there use fumi's own handle and
// descriptors rebuilt from the decoded values: the same entry point at the call's precision
// (determinism, perturb), and wider data (f32 or f64 everywhere, parameters included) for
// highprec. The Ex forms are modelled for bnOps CUDNN_BATCHNORM_OPS_BN (the plain computation;
// the activation and add variants are counted skipped); their reruns get their own workspace
// and reserve space, and a wider rerun of BackwardEx runs the plain Backward (the forward's
// reserve space only fits the call's own types). `reference` is fumi's own host fp64 batch
// norm (reference.h, normReference).
#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "call.h"
#include "cuda/checker.h"
#include "cuda/device_call.h"
#include "engine.h"
#include "hook.h"
#include "hooks/cudnn_common.h"
#include "reference.h"
#include "report.h"

namespace fumi::hooks {

// The real functions and op sites first: BackwardEx's wider rerun calls the plain Backward.
#define FUMI_HOOK FUMI_HOOK_STATE
#include "cudnn_norm.def"
#undef FUMI_HOOK

namespace {

using cuda::HostScalars;
using cuda::Snapshots;
using Phase = NormSpec::Phase;

const char* modeName(cudnnBatchNormMode_t m) {
  switch (m) {
    case CUDNN_BATCHNORM_PER_ACTIVATION: return "per_activation";
    case CUDNN_BATCHNORM_SPATIAL: return "spatial";
    case CUDNN_BATCHNORM_SPATIAL_PERSISTENT: return "spatial_persistent";
    default: return "?";
  }
}

const char* phaseName(Phase p) {
  return p == Phase::kTraining ? "training" : p == Phase::kInference ? "inference" : "backward";
}

// ---- the canonical problem ---------------------------------------------------------------------

struct BnProblem {
  Phase phase = Phase::kTraining;
  bool ex = false;  // the Ex entry points (bnOps BN)
  cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL;
  TensorDims x, y, dx, param;  // y is dy for kBackward; dx for kBackward only
  cudaStream_t stream = nullptr;
  // Inputs.
  const void *xp = nullptr, *yp = nullptr;  // yp: dy (kBackward)
  const void *scalep = nullptr, *biasp = nullptr;
  const void *meanp = nullptr, *varp = nullptr;  // estimated (inference), saved (backward)
  const void* reservep = nullptr;                // BackwardEx: the forward's reserve space
  size_t reserve_bytes = 0;
  // Outputs (in-place running statistics are outputs with their prior value as an input).
  void *out = nullptr;  // y (forward) or dx (backward)
  void *run_mean = nullptr, *run_var = nullptr, *save_mean = nullptr, *save_inv = nullptr;
  void *dscale = nullptr, *dbias = nullptr;
  double factor = 1, epsilon = 0;
  double alpha = 1, beta = 0, alpha_param = 1, beta_param = 0;

  fumi_dtype dtype() const { return dtypeOfCudnn(x.type); }
  // cuDNN normalises f16/bf16/f32 data in f32 (the parameter type), f64 data in f64.
  fumi_dtype compute() const { return dtypeOfCudnn(param.type); }
  bool spatial() const { return mode != CUDNN_BATCHNORM_PER_ACTIVATION; }
  const Dims& output() const { return phase == Phase::kBackward ? static_cast<const Dims&>(dx) : y; }

  // Reads the descriptors (dxd: kBackward only); nullptr, or why the call is not modelled.
  const char* decode(const CudnnApi& api, cudnnHandle_t h, cudnnTensorDescriptor_t xd,
                     cudnnTensorDescriptor_t yd, cudnnTensorDescriptor_t pd,
                     cudnnTensorDescriptor_t dxd) {
    if (!x.read(api, xd) || !y.read(api, yd) || !param.read(api, pd) ||
        (phase == Phase::kBackward && !dx.read(api, dxd)))
      return "descriptors not supported";
    if (api.cudnnGetStream(h, &stream) != CUDNN_STATUS_SUCCESS) return "handle unreadable";
    if (mode != CUDNN_BATCHNORM_PER_ACTIVATION && mode != CUDNN_BATCHNORM_SPATIAL &&
        mode != CUDNN_BATCHNORM_SPATIAL_PERSISTENT)
      return "mode not supported";
    if (dtype() == FUMI_DTYPE_UNKNOWN || y.type != x.type ||
        (phase == Phase::kBackward && dx.type != x.type) ||
        param.type != (x.type == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT))
      return "data types not supported";
    auto sameDims = [&](const Dims& a) {
      return a.nd == x.nd && std::equal(a.dims, a.dims + a.nd, x.dims);
    };
    if (!sameDims(y) || (phase == Phase::kBackward && !sameDims(dx)) || param.nd != x.nd ||
        param.dims[0] != 1 || param.dims[1] != x.dims[1])
      return "descriptor shapes inconsistent";
    for (int i = 2; i < x.nd; ++i)
      if (param.dims[i] != (spatial() ? 1 : x.dims[i])) return "descriptor shapes inconsistent";
    return nullptr;
  }
};

// ---- rerun -----------------------------------------------------------------------------------

// One rerun's arguments: descriptors rebuilt in the rerun's types, its buffers, host scalars.
struct BnRerun {
  bool own = true;  // at the call's own precision
  cudnnHandle_t handle = nullptr;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, dx = nullptr, param = nullptr;
  const void *xp = nullptr, *yp = nullptr, *scalep = nullptr, *biasp = nullptr;
  const void *meanp = nullptr, *varp = nullptr;
  void *out = nullptr, *run_mean = nullptr, *run_var = nullptr, *save_mean = nullptr,
       *save_inv = nullptr, *dscale = nullptr, *dbias = nullptr;
  void *ws = nullptr, *reserve = nullptr;
  size_t ws_bytes = 0, reserve_bytes = 0;
  unsigned char alpha[8] = {}, beta[8] = {}, alpha_param[8] = {}, beta_param[8] = {};
};
using BnLaunch = std::function<cudnnStatus_t(const BnRerun&)>;
// Workspace and reserve-space sizes of an Ex rerun (false: cuDNN does not say).
using BnScratchSizes = std::function<bool(const CudnnApi&, BnRerun&)>;

class DeviceBnCall final : public Call {
 public:
  DeviceBnCall(OpSite& site, const BnProblem& p, uint64_t index)
      : Call(site, p.dtype(), p.compute(), p.x.numel(), index), p_(p) {
    spec_.phase = p.phase;
    spec_.spatial = p.spatial();
    spec_.epsilon = p.epsilon;
    spec_.factor = p.factor;
    spec_.alpha = p.alpha;
    spec_.beta = p.beta;
    spec_.alpha_param = p.alpha_param;
    spec_.beta_param = p.beta_param;
  }
  NormSpec& spec() { return spec_; }
  BnLaunch launch;
  BnScratchSizes scratch_sizes;      // Ex forms only
  const void* reserve = nullptr;     // BackwardEx: the snapshot of the forward's reserve space

  fumi_status rerun(fumi_dtype precision, void* const* buf) override {
    Checker* ck = Checker::get();
    const CudnnApi* api = cuda::cudnnApi();
    if (!ck || !api) return FUMI_UNSUPPORTED;
    BnRerun r;
    r.own = precision == info().dtype;
    if (!r.own && precision != FUMI_DTYPE_F32 && precision != FUMI_DTYPE_F64)
      return FUMI_UNSUPPORTED;
    // At the call's own precision every buffer holds its tensor's own type (plugin.h); a wider
    // rerun holds every tensor, parameters included, in `precision`.
    const cudnnDataType_t as = r.own ? p_.x.type : cudnnOfDtype(precision);
    const cudnnDataType_t pas = r.own ? p_.param.type : as;
    r.handle = checkerCudnn(*ck, *api);
    if (!r.handle) return FUMI_UNSUPPORTED;
    r.x = p_.x.create(*api, as);
    r.y = p_.y.create(*api, as);
    r.param = p_.param.create(*api, pas);
    if (p_.phase == Phase::kBackward) r.dx = p_.dx.create(*api, as);
    struct Destroy {
      const CudnnApi& api;
      BnRerun& r;
      ~Destroy() {
        for (auto* t : {r.x, r.y, r.dx, r.param})
          if (t) api.cudnnDestroyTensorDescriptor(t);
      }
    } destroy{*api, r};
    if (!r.x || !r.y || !r.param || (p_.phase == Phase::kBackward && !r.dx))
      return FUMI_UNSUPPORTED;
    auto in = [&](int i) -> const void* {
      return i < 0 ? nullptr : buf[i] ? buf[i] : tensors()[static_cast<size_t>(i)].data;
    };
    auto out = [&](int i) -> void* { return i < 0 ? nullptr : buf[i]; };
    // An output that starts from its value before the call (beta != 0, running statistics).
    auto prime = [&](int o, int prior, const Dims& d, cudnnDataType_t t) {
      if (o < 0 || prior < 0) return true;
      const size_t bytes = static_cast<size_t>(d.span()) *
                           static_cast<size_t>(dtypeBytes(dtypeOfCudnn(t)));
      return ck->copy(buf[o], in(prior), bytes, cudaMemcpyDeviceToDevice);
    };
    const NormSpec& s = spec_;
    r.xp = in(s.x);
    r.yp = in(p_.phase == Phase::kBackward ? s.y : -1);
    r.scalep = in(s.scale);
    r.biasp = in(s.bias);
    r.meanp = in(s.mean);
    r.varp = in(s.var);
    r.out = out(p_.phase == Phase::kBackward ? s.dx : s.y);
    r.run_mean = out(s.running_mean);
    r.run_var = out(s.running_var);
    r.save_mean = out(s.save_mean);
    r.save_inv = out(s.save_inv);
    r.dscale = out(s.dscale);
    r.dbias = out(s.dbias);
    if (!prime(s.y, s.y_in, p_.y, as) || !prime(s.dx, s.dx_in, p_.dx, as) ||
        !prime(s.running_mean, s.running_mean_in, p_.param, pas) ||
        !prime(s.running_var, s.running_var_in, p_.param, pas) ||
        !prime(s.dscale, s.dscale_in, p_.param, pas) || !prime(s.dbias, s.dbias_in, p_.param, pas))
      return FUMI_ERROR;
    const fumi_dtype scale = scaleOf(as);
    const HostScalars data(p_.alpha, p_.beta, scale), params(p_.alpha_param, p_.beta_param, scale);
    std::copy(data.alpha, data.alpha + 8, r.alpha);
    std::copy(data.beta, data.beta + 8, r.beta);
    std::copy(params.alpha, params.alpha + 8, r.alpha_param);
    std::copy(params.beta, params.beta + 8, r.beta_param);
    if (scratch_sizes && !scratch_sizes(*api, r)) return FUMI_UNSUPPORTED;
    r.ws = r.ws_bytes ? ck->scratch(r.ws_bytes) : nullptr;
    // BackwardEx reads the forward's reserve space (its snapshot, at the call's own types);
    // a forward Ex writes its own.
    const bool reads_reserve = p_.phase == Phase::kBackward;
    if (reads_reserve) {
      r.reserve = r.own ? const_cast<void*>(reserve) : nullptr;
      r.reserve_bytes = r.own && reserve ? p_.reserve_bytes : 0;
    } else if (r.reserve_bytes) {
      r.reserve = ck->scratch(r.reserve_bytes);
    }
    const bool no_scratch = (r.ws_bytes && !r.ws) ||
                            (!reads_reserve && r.reserve_bytes && !r.reserve);
    const cudnnStatus_t st = no_scratch ? CUDNN_STATUS_ALLOC_FAILED : launch(r);
    ck->api().cudaStreamSynchronize(ck->stream());  // before scratch and descriptors go
    if (r.ws) ck->give(r.ws);
    if (r.reserve && !reads_reserve) ck->give(r.reserve);
    return no_scratch ? FUMI_NO_SCRATCH : rerunStatus(st);
  }

  fumi_status reference(int32_t output, double* out) override {
    return normReference(tensors(), spec_, output, out);
  }

 private:
  BnProblem p_;
  NormSpec spec_;
};

// ---- sampling and the checked path -----------------------------------------------------------

// The policy's sampling decision from x's descriptor (one getter call); descriptors that cannot
// be read are decided with unknown facts, so that a sampled call still counts as skipped.
RuleSampler* selectBn(const CallSite& cs, const CudnnApi* api, cudnnTensorDescriptor_t xd) {
  TensorDims x;
  bool read = false;
  if (api) {
    InsideScope inside;
    read = x.read(*api, xd);
  }
  if (read && x.numel() <= 0) return nullptr;
  return cs.decision.select(
      CallFacts{read ? x.numel() : 1, read ? dtypeOfCudnn(x.type) : FUMI_DTYPE_UNKNOWN, "cuda"},
      cs.call_index);
}

template <class Forward>
cudnnStatus_t checkedBn(const CallSite& cs, RuleSampler* sampler, const BnProblem& p,
                        Forward&& forward, BnLaunch launch, BnScratchSizes sizes) {
  auto call = std::make_unique<DeviceBnCall>(cs.site, p, cs.call_index);
  call->launch = std::move(launch);
  call->scratch_sizes = std::move(sizes);
  const bool bwd = p.phase == Phase::kBackward, training = p.phase == Phase::kTraining;
  const size_t pbytes = p.param.bytes();
  struct Snap {
    void *x = nullptr, *y = nullptr, *scale = nullptr, *bias = nullptr, *mean = nullptr,
         *var = nullptr, *run_mean_in = nullptr, *run_var_in = nullptr, *out_in = nullptr,
         *dscale_in = nullptr, *dbias_in = nullptr, *reserve = nullptr;
    void *out = nullptr, *run_mean = nullptr, *run_var = nullptr, *save_mean = nullptr,
         *save_inv = nullptr, *dscale = nullptr, *dbias = nullptr;
  } s;
  auto before = [&](Checker&, Snapshots& snaps) -> const char* {
    s.x = snaps.copy(p.xp, p.x.bytes());
    s.scale = snaps.copy(p.scalep, pbytes);
    if (bwd) s.y = snaps.copy(p.yp, p.y.bytes());
    if (!bwd) s.bias = snaps.copy(p.biasp, pbytes);
    if (p.meanp) s.mean = snaps.copy(p.meanp, pbytes);
    if (p.varp) s.var = snaps.copy(p.varp, pbytes);
    if (p.run_mean) {
      s.run_mean_in = snaps.copy(p.run_mean, pbytes);
      s.run_var_in = snaps.copy(p.run_var, pbytes);
    }
    if (p.beta != 0) s.out_in = snaps.copy(p.out, p.output().bytes());
    if (bwd && p.beta_param != 0) {
      s.dscale_in = snaps.copy(p.dscale, pbytes);
      s.dbias_in = snaps.copy(p.dbias, pbytes);
    }
    if (p.reservep && p.reserve_bytes) s.reserve = snaps.copy(p.reservep, p.reserve_bytes);
    return nullptr;
  };
  auto after = [&](Snapshots& snaps) {
    s.out = snaps.copy(p.out, p.output().bytes());
    if (p.run_mean) {
      s.run_mean = snaps.copy(p.run_mean, pbytes);
      s.run_var = snaps.copy(p.run_var, pbytes);
    }
    if (p.save_mean) {
      s.save_mean = snaps.copy(p.save_mean, pbytes);
      s.save_inv = snaps.copy(p.save_inv, pbytes);
    }
    if (bwd) {
      s.dscale = snaps.copy(p.dscale, pbytes);
      s.dbias = snaps.copy(p.dbias, pbytes);
    }
    return snaps.ok();
  };
  auto build = [&]() -> std::unique_ptr<Call> {
    NormSpec& n = call->spec();
    auto add = [&](const Dims& d, const char* name, fumi_role role, void* data) {
      return data ? call->addTensor(d.tensor(name, role, data)) : -1;
    };
    const Dims& pd = p.param;
    n.x = add(p.x, "x", FUMI_ROLE_INPUT, s.x);
    if (bwd) n.y = add(p.y, "dy", FUMI_ROLE_INPUT, s.y);
    n.scale = add(pd, "scale", FUMI_ROLE_INPUT, s.scale);
    n.bias = add(pd, "bias", FUMI_ROLE_INPUT, s.bias);
    n.mean = add(pd, bwd ? "saved_mean" : "estimated_mean", FUMI_ROLE_INPUT, s.mean);
    n.var = add(pd, bwd ? "saved_inv_var" : "estimated_var", FUMI_ROLE_INPUT, s.var);
    n.running_mean_in = add(pd, "running_mean", FUMI_ROLE_INPUT, s.run_mean_in);
    n.running_var_in = add(pd, "running_var", FUMI_ROLE_INPUT, s.run_var_in);
    (bwd ? n.dx_in : n.y_in) = add(p.output(), bwd ? "dx" : "y", FUMI_ROLE_INPUT, s.out_in);
    n.dscale_in = add(pd, "dscale", FUMI_ROLE_INPUT, s.dscale_in);
    n.dbias_in = add(pd, "dbias", FUMI_ROLE_INPUT, s.dbias_in);
    (bwd ? n.dx : n.y) = add(p.output(), bwd ? "dx" : "y", FUMI_ROLE_OUTPUT, s.out);
    n.running_mean = add(pd, "running_mean", FUMI_ROLE_OUTPUT, s.run_mean);
    n.running_var = add(pd, "running_var", FUMI_ROLE_OUTPUT, s.run_var);
    n.save_mean = add(pd, "save_mean", FUMI_ROLE_OUTPUT, s.save_mean);
    n.save_inv = add(pd, "save_inv_var", FUMI_ROLE_OUTPUT, s.save_inv);
    n.dscale = add(pd, "dscale", FUMI_ROLE_OUTPUT, s.dscale);
    n.dbias = add(pd, "dbias", FUMI_ROLE_OUTPUT, s.dbias);
    call->reserve = s.reserve;
    call->addArg("phase", phaseName(p.phase));
    call->addArg("mode", modeName(p.mode));
    call->addArg("n", std::to_string(p.x.dims[0]));
    call->addArg("c", std::to_string(p.x.dims[1]));
    call->addArg("layout", p.x.layout());
    call->addArg("epsilon", formatScalar(p.epsilon));
    if (training) call->addArg("factor", formatScalar(p.factor));
    call->addArg("alpha", formatScalar(p.alpha));
    call->addArg("beta", formatScalar(p.beta));
    if (bwd) {
      call->addArg("alpha_param", formatScalar(p.alpha_param));
      call->addArg("beta_param", formatScalar(p.beta_param));
    }
    if (p.ex) call->addArg("bn_ops", "bn");
    return std::move(call);
  };
  return cuda::checkedDeviceCall(cs, sampler, p.stream, CUDNN_STATUS_SUCCESS, forward, before,
                                 after, build);
}

// What every batch-norm hook does: sample from x; for a sampled call decode the descriptors
// and the scalars and run the checked path. A call fumi does not model (`unmodelled`, or
// descriptors it cannot read) runs unchecked, counted skipped. `p` arrives with the phase,
// mode, pointers, epsilon and factor set.
template <class Forward>
cudnnStatus_t bnHook(const CallSite& cs, BnProblem& p, cudnnHandle_t h, cudnnTensorDescriptor_t xd,
                     cudnnTensorDescriptor_t yd, cudnnTensorDescriptor_t pd,
                     cudnnTensorDescriptor_t dxd, const void* const scalars[4],
                     const char* unmodelled, Forward&& forward, BnLaunch launch,
                     BnScratchSizes sizes = nullptr) {
  const CudnnApi* api = cuda::cudnnApi();
  RuleSampler* sampler = selectBn(cs, api, xd);
  if (!sampler) return forward();
  const char* why = unmodelled ? unmodelled : api ? nullptr : "cuDNN functions missing";
  if (!why) {
    InsideScope inside;
    why = p.decode(*api, h, xd, yd, pd, dxd);
  }
  if (!why && (!scalars[0] || !scalars[1])) why = "scalars missing";
  if (why) {
    cs.site.countSkipped(why);
    return forward();
  }
  const fumi_dtype scale = scaleOf(p.x.type);
  p.alpha = loadAsDouble(scalars[0], 0, scale);
  p.beta = loadAsDouble(scalars[1], 0, scale);
  if (scalars[2] && scalars[3]) {
    p.alpha_param = loadAsDouble(scalars[2], 0, scale);
    p.beta_param = loadAsDouble(scalars[3], 0, scale);
  }
  return checkedBn(cs, sampler, p, forward, std::move(launch), std::move(sizes));
}

// The bnOps an Ex form is modelled for; nullptr, or why not.
const char* exOps(cudnnBatchNormOps_t ops) {
  return ops == CUDNN_BATCHNORM_OPS_BN ? nullptr
                                       : "bnOps with activation or add not modelled";
}

BnProblem forwardProblem(Phase phase, cudnnBatchNormMode_t mode, const void* x, void* y,
                         const void* scale, const void* bias, double epsilon) {
  BnProblem p;
  p.phase = phase;
  p.mode = mode;
  p.xp = x;
  p.out = y;
  p.scalep = scale;
  p.biasp = bias;
  p.epsilon = epsilon;
  return p;
}

// Forward training (plain and Ex): the running statistics updated in place and the saved
// statistics, each pair optional as a whole.
BnProblem trainingProblem(cudnnBatchNormMode_t mode, const void* x, void* y, const void* scale,
                          const void* bias, double factor, void* run_mean, void* run_var,
                          double epsilon, void* save_mean, void* save_inv) {
  BnProblem p = forwardProblem(Phase::kTraining, mode, x, y, scale, bias, epsilon);
  p.factor = factor;
  p.run_mean = run_mean;
  p.run_var = run_var;
  p.save_mean = save_mean;
  p.save_inv = save_inv;
  return p;
}

const char* trainingUnmodelled(const BnProblem& p) {
  return !p.run_mean != !p.run_var || !p.save_mean != !p.save_inv ? "optional outputs unpaired"
                                                                  : nullptr;
}

template <class Real>
cudnnStatus_t bnForwardTraining(const CallSite& cs, Real real, cudnnHandle_t h,
                                cudnnBatchNormMode_t mode, const void* alpha, const void* beta,
                                cudnnTensorDescriptor_t xd, const void* x,
                                cudnnTensorDescriptor_t yd, void* y, cudnnTensorDescriptor_t pd,
                                const void* scale, const void* bias, double factor,
                                void* run_mean, void* run_var, double epsilon, void* save_mean,
                                void* save_inv) {
  auto forward = [&] {
    return forwardReal(real, h, mode, alpha, beta, xd, x, yd, y, pd, scale, bias, factor,
                       run_mean, run_var, epsilon, save_mean, save_inv);
  };
  BnProblem p = trainingProblem(mode, x, y, scale, bias, factor, run_mean, run_var, epsilon,
                                save_mean, save_inv);
  const void* scalars[4] = {alpha, beta, nullptr, nullptr};
  return bnHook(cs, p, h, xd, yd, pd, nullptr, scalars, trainingUnmodelled(p), forward,
                [real, mode, factor, epsilon](const BnRerun& r) {
                  return real(r.handle, mode, r.alpha, r.beta, r.x, r.xp, r.y, r.out, r.param,
                              r.scalep, r.biasp, factor, r.run_mean, r.run_var, epsilon,
                              r.save_mean, r.save_inv);
                });
}

template <class Real>
cudnnStatus_t bnForwardTrainingEx(const CallSite& cs, Real real, cudnnHandle_t h,
                                  cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops,
                                  const void* alpha, const void* beta,
                                  cudnnTensorDescriptor_t xd, const void* x,
                                  cudnnTensorDescriptor_t zd, const void* z,
                                  cudnnTensorDescriptor_t yd, void* y, cudnnTensorDescriptor_t pd,
                                  const void* scale, const void* bias, double factor,
                                  void* run_mean, void* run_var, double epsilon, void* save_mean,
                                  void* save_inv, cudnnActivationDescriptor_t ad, void* ws,
                                  size_t ws_bytes, void* reserve, size_t reserve_bytes) {
  auto forward = [&] {
    return forwardReal(real, h, mode, ops, alpha, beta, xd, x, zd, z, yd, y, pd, scale, bias,
                       factor, run_mean, run_var, epsilon, save_mean, save_inv, ad, ws, ws_bytes,
                       reserve, reserve_bytes);
  };
  BnProblem p = trainingProblem(mode, x, y, scale, bias, factor, run_mean, run_var, epsilon,
                                save_mean, save_inv);
  p.ex = true;
  const void* scalars[4] = {alpha, beta, nullptr, nullptr};
  const char* why = exOps(ops);
  if (!why) why = trainingUnmodelled(p);
  return bnHook(
      cs, p, h, xd, yd, pd, nullptr, scalars, why, forward,
      [real, mode, ops, factor, epsilon](const BnRerun& r) {
        return real(r.handle, mode, ops, r.alpha, r.beta, r.x, r.xp, nullptr, nullptr, r.y, r.out,
                    r.param, r.scalep, r.biasp, factor, r.run_mean, r.run_var, epsilon,
                    r.save_mean, r.save_inv, nullptr, r.ws, r.ws_bytes, r.reserve,
                    r.reserve_bytes);
      },
      [mode, ops](const CudnnApi& api, BnRerun& r) {
        return api.cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize &&
               api.cudnnGetBatchNormalizationTrainingExReserveSpaceSize &&
               api.cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
                   r.handle, mode, ops, r.x, nullptr, r.y, r.param, nullptr, &r.ws_bytes) ==
                   CUDNN_STATUS_SUCCESS &&
               api.cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
                   r.handle, mode, ops, nullptr, r.x, &r.reserve_bytes) == CUDNN_STATUS_SUCCESS;
      });
}

template <class Real>
cudnnStatus_t bnForwardInference(const CallSite& cs, Real real, cudnnHandle_t h,
                                 cudnnBatchNormMode_t mode, const void* alpha, const void* beta,
                                 cudnnTensorDescriptor_t xd, const void* x,
                                 cudnnTensorDescriptor_t yd, void* y, cudnnTensorDescriptor_t pd,
                                 const void* scale, const void* bias, const void* est_mean,
                                 const void* est_var, double epsilon) {
  auto forward = [&] {
    return forwardReal(real, h, mode, alpha, beta, xd, x, yd, y, pd, scale, bias, est_mean,
                       est_var, epsilon);
  };
  BnProblem p = forwardProblem(Phase::kInference, mode, x, y, scale, bias, epsilon);
  p.meanp = est_mean;
  p.varp = est_var;
  const void* scalars[4] = {alpha, beta, nullptr, nullptr};
  const char* why = !est_mean || !est_var ? "estimated statistics missing" : nullptr;
  return bnHook(cs, p, h, xd, yd, pd, nullptr, scalars, why, forward,
                [real, mode, epsilon](const BnRerun& r) {
                  return real(r.handle, mode, r.alpha, r.beta, r.x, r.xp, r.y, r.out, r.param,
                              r.scalep, r.biasp, r.meanp, r.varp, epsilon);
                });
}

BnProblem backwardProblem(cudnnBatchNormMode_t mode, const void* x, const void* dy, void* dx,
                          const void* scale, void* dscale, void* dbias, double epsilon,
                          const void* saved_mean, const void* saved_inv) {
  BnProblem p;
  p.phase = Phase::kBackward;
  p.mode = mode;
  p.xp = x;
  p.yp = dy;
  p.out = dx;
  p.scalep = scale;
  p.dscale = dscale;
  p.dbias = dbias;
  p.epsilon = epsilon;
  p.meanp = saved_mean;
  p.varp = saved_inv;
  return p;
}

// Backward (plain and Ex): the saved statistics are optional as a pair; the parameter
// gradients' blend factors are required.
const char* backwardUnmodelled(const BnProblem& p, const void* alpha_param,
                               const void* beta_param) {
  return !p.meanp != !p.varp              ? "saved statistics unpaired"
         : !alpha_param || !beta_param ? "scalars missing"
                                       : nullptr;
}

template <class Real>
cudnnStatus_t bnBackward(const CallSite& cs, Real real, cudnnHandle_t h, cudnnBatchNormMode_t mode,
                         const void* alpha_data, const void* beta_data, const void* alpha_param,
                         const void* beta_param, cudnnTensorDescriptor_t xd, const void* x,
                         cudnnTensorDescriptor_t dyd, const void* dy, cudnnTensorDescriptor_t dxd,
                         void* dx, cudnnTensorDescriptor_t pd, const void* scale, void* dscale,
                         void* dbias, double epsilon, const void* saved_mean,
                         const void* saved_inv) {
  auto forward = [&] {
    return forwardReal(real, h, mode, alpha_data, beta_data, alpha_param, beta_param, xd, x, dyd,
                       dy, dxd, dx, pd, scale, dscale, dbias, epsilon, saved_mean, saved_inv);
  };
  BnProblem p =
      backwardProblem(mode, x, dy, dx, scale, dscale, dbias, epsilon, saved_mean, saved_inv);
  const void* scalars[4] = {alpha_data, beta_data, alpha_param, beta_param};
  const char* why = backwardUnmodelled(p, alpha_param, beta_param);
  return bnHook(cs, p, h, xd, dyd, pd, dxd, scalars, why, forward,
                [real, mode, epsilon](const BnRerun& r) {
                  return real(r.handle, mode, r.alpha, r.beta, r.alpha_param, r.beta_param, r.x,
                              r.xp, r.y, r.yp, r.dx, r.out, r.param, r.scalep, r.dscale, r.dbias,
                              epsilon, r.meanp, r.varp);
                });
}

template <class Real>
cudnnStatus_t bnBackwardEx(const CallSite& cs, Real real, cudnnHandle_t h,
                           cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops,
                           const void* alpha_data, const void* beta_data, const void* alpha_param,
                           const void* beta_param, cudnnTensorDescriptor_t xd, const void* x,
                           cudnnTensorDescriptor_t yd, const void* y, cudnnTensorDescriptor_t dyd,
                           const void* dy, cudnnTensorDescriptor_t dzd, void* dz,
                           cudnnTensorDescriptor_t dxd, void* dx, cudnnTensorDescriptor_t pd,
                           const void* scale, const void* bias, void* dscale, void* dbias,
                           double epsilon, const void* saved_mean, const void* saved_inv,
                           cudnnActivationDescriptor_t ad, void* ws, size_t ws_bytes,
                           void* reserve, size_t reserve_bytes) {
  auto forward = [&] {
    return forwardReal(real, h, mode, ops, alpha_data, beta_data, alpha_param, beta_param, xd, x,
                       yd, y, dyd, dy, dzd, dz, dxd, dx, pd, scale, bias, dscale, dbias, epsilon,
                       saved_mean, saved_inv, ad, ws, ws_bytes, reserve, reserve_bytes);
  };
  BnProblem p =
      backwardProblem(mode, x, dy, dx, scale, dscale, dbias, epsilon, saved_mean, saved_inv);
  p.ex = true;
  p.reservep = reserve;
  p.reserve_bytes = reserve ? reserve_bytes : 0;
  const void* scalars[4] = {alpha_data, beta_data, alpha_param, beta_param};
  const char* why = exOps(ops);
  if (!why) why = backwardUnmodelled(p, alpha_param, beta_param);
  // A wider rerun runs the plain Backward: the reserve space holds the call's own types.
  auto plain = try_real_cudnnBatchNormalizationBackward();
  return bnHook(
      cs, p, h, xd, dyd, pd, dxd, scalars, why, forward,
      [real, plain, mode, ops, epsilon](const BnRerun& r) {
        if (!r.own)
          return plain ? plain(r.handle, mode, r.alpha, r.beta, r.alpha_param, r.beta_param, r.x,
                               r.xp, r.y, r.yp, r.dx, r.out, r.param, r.scalep, r.dscale, r.dbias,
                               epsilon, r.meanp, r.varp)
                       : CUDNN_STATUS_NOT_SUPPORTED;
        return real(r.handle, mode, ops, r.alpha, r.beta, r.alpha_param, r.beta_param, r.x, r.xp,
                    nullptr, nullptr, r.y, r.yp, nullptr, nullptr, r.dx, r.out, r.param, r.scalep,
                    nullptr, r.dscale, r.dbias, epsilon, r.meanp, r.varp, nullptr, r.ws,
                    r.ws_bytes, r.reserve, r.reserve_bytes);
      },
      [mode, ops](const CudnnApi& api, BnRerun& r) {
        if (!r.own) return true;
        return api.cudnnGetBatchNormalizationBackwardExWorkspaceSize &&
               api.cudnnGetBatchNormalizationBackwardExWorkspaceSize(
                   r.handle, mode, ops, r.x, nullptr, r.y, nullptr, r.dx, r.param, nullptr,
                   &r.ws_bytes) == CUDNN_STATUS_SUCCESS;
      });
}

}  // namespace

}  // namespace fumi::hooks

#define FUMI_HOOK FUMI_HOOK_WRAPPER
#include "cudnn_norm.def"
#undef FUMI_HOOK
