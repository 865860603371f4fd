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
#include "hooks/cudnn_common.h"
#include "hooks/cudnn_conv.h"
#include "reference.h"
#include "report.h"

namespace fumi::cuda {

namespace {
void fillCudnn(CudnnApi& api, const char*& absent) {
#define FUMI_CUDA_FN(name, ret, params) resolveInto(api.name, #name, absent);
#define FUMI_CUDA_OPTIONAL_FN(name, ret, params) \
  api.name = reinterpret_cast<decltype(api.name)>(resolveReal(#name));
#include "cuda/cudnn_fns.def"
#undef FUMI_CUDA_OPTIONAL_FN
#undef FUMI_CUDA_FN
}
}  // namespace

const CudnnApi* cudnnApi(const char** missing) {
  return resolvedTable<CudnnApi, fillCudnn>(missing);
}

}  // namespace fumi::cuda

namespace fumi::hooks {

// The real functions and op sites first: the rerun launchers below call them.
#define FUMI_HOOK FUMI_HOOK_STATE
#include "cudnn.def"
#undef FUMI_HOOK

// Each legacy entry point called with a rerun's arguments.
Launch launchOf(cudnnConvolutionForward_fn real) {
  return [real](const ConvRerun& r) {
    return real(r.handle, r.alpha, r.x, r.xp, r.w, r.wp, r.conv,
                static_cast<cudnnConvolutionFwdAlgo_t>(r.algo), r.ws, r.ws_bytes, r.beta, r.y,
                r.out);
  };
}
Launch launchOf(cudnnConvolutionBackwardData_fn real) {
  return [real](const ConvRerun& r) {
    return real(r.handle, r.alpha, r.w, r.wp, r.y, r.yp, r.conv,
                static_cast<cudnnConvolutionBwdDataAlgo_t>(r.algo), r.ws, r.ws_bytes, r.beta, r.x,
                r.out);
  };
}
Launch launchOf(cudnnConvolutionBackwardFilter_fn real) {
  return [real](const ConvRerun& r) {
    return real(r.handle, r.alpha, r.x, r.xp, r.y, r.yp, r.conv,
                static_cast<cudnnConvolutionBwdFilterAlgo_t>(r.algo), r.ws, r.ws_bytes, r.beta,
                r.w, r.out);
  };
}
Launch launchOf(cudnnConvolutionBiasActivationForward_fn real) {
  return [real](const ConvRerun& r) {
    return real(r.handle, r.alpha, r.x, r.xp, r.w, r.wp, r.conv,
                static_cast<cudnnConvolutionFwdAlgo_t>(r.algo), r.ws, r.ws_bytes, r.beta, r.z,
                r.zp, r.bias, r.biasp, r.act, r.y, r.out);
  };
}

Launch legacyConvLaunch(Direction dir) {
  switch (dir) {
    case Direction::kForward:
      if (auto real = try_real_cudnnConvolutionForward()) return launchOf(real);
      break;
    case Direction::kBackwardData:
      if (auto real = try_real_cudnnConvolutionBackwardData()) return launchOf(real);
      break;
    case Direction::kBackwardFilter:
      if (auto real = try_real_cudnnConvolutionBackwardFilter()) return launchOf(real);
      break;
  }
  return nullptr;
}

namespace {

using cuda::HostScalars;
using cuda::Snapshots;

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
    cs.site.countSkipped(why);
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
                  launchOf(real));
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
                  launchOf(real));
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
                  launchOf(real));
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
                  launchOf(real));
}

}  // namespace

}  // namespace fumi::hooks

#define FUMI_HOOK FUMI_HOOK_WRAPPER
#include "cudnn.def"
#undef FUMI_HOOK
