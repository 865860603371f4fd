// cuda_norm.cpp — a cuDNN program for fumi's CUDA tests: the legacy batch-normalisation entry
// points fumi hooks, called the way frameworks call them, one line per output printed: the
// case name and a hash of the output's bytes (runs with and without libfumi compare bit for
// bit).
//
// Built against the real cuDNN 9 and CUDA 13 headers and linked against the REAL libcudnn.so.9
// and libcudart; without a GPU the tests preload the simulated device's stand-ins. Every call's
// descriptors are destroyed right after it returns, before its stream has run.
// Scenarios (argv[1]):
//   sweep   f32, f16, bf16, f64 x spatial, per-activation and spatial-persistent modes x NCHW
//           and NHWC x forward training (plain and Ex, running statistics updated in place),
//           forward inference and backward (plain and Ex, with the saved statistics); blend
//           factors 1/0, plus one case with beta = beta_param = 1/2; and a forward Ex with
//           bnOps BN_ACTIVATION (not modelled: counted skipped).
//   plain   the sweep without the Ex entry points.
//   offset  a spatial f32 forward training whose channels hold values around 4096 with a
//           spread of 1/64 (a variance computed as E[x^2] - E[x]^2 in f32 loses it all).
#include <cuda_runtime_api.h>

#include "cudnn_test.h"

#include <cstdio>
#include <string>
#include <vector>

namespace {

using devtest::Elem;
using devtest::elemOf;
using devtest::printHash;
using devtest::typeName;

const char* modeName(cudnnBatchNormMode_t m) {
  return m == CUDNN_BATCHNORM_SPATIAL ? "spatial"
         : m == CUDNN_BATCHNORM_PER_ACTIVATION ? "per_activation" : "persistent";
}

// One batch-norm layer: x N x C x H x W in NCHW or NHWC, parameters 1 x C x 1 x 1 (spatial
// modes) or 1 x C x H x W (per activation), float (double for f64 data).
struct Bn {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL;
  bool nhwc = false, ex = false;
  int n = 3, c = 4, h = 5, w = 6;
  double beta = 0;  // data and parameter blend factors (alpha is 1)
  double (*x_value)(size_t) = [](size_t i) {
    return static_cast<double>((i * 37) % 23) / 8.0 - 1.25 + static_cast<double>(i % 4);
  };

  size_t count() const { return static_cast<size_t>(n) * c * h * w; }
  size_t params() const {
    return mode == CUDNN_BATCHNORM_PER_ACTIVATION ? static_cast<size_t>(c) * h * w
                                                  : static_cast<size_t>(c);
  }
  cudnnDataType_t paramType() const {
    return type == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  }
  std::string name(const char* entry) const {
    return std::string(entry) + (ex ? "Ex " : " ") + typeName(type) + " " + modeName(mode) +
           (nhwc ? " nhwc" : " nchw") + (beta != 0 ? " beta" : "");
  }
};

struct Buffers {
  void *x, *y, *dy, *dx, *scale, *bias, *run_mean, *run_var, *save_mean, *save_inv, *dscale,
      *dbias, *reserve = nullptr;
  size_t reserve_bytes = 0;
};

void* fill(cudnnDataType_t t, size_t n, int salt) {
  return devtest::upload(elemOf(t), n, [salt](size_t i) {
    return static_cast<double>(static_cast<int>((i * 5 + static_cast<size_t>(salt) * 3) % 9) - 4) /
           4.0;
  });
}

// Forward training, forward inference and backward of one layer; prints every output.
void run(cudnnHandle_t hd, const Bn& b) {
  cudnnTensorDescriptor_t xd, pd;
  CHECK_DNN(cudnnCreateTensorDescriptor(&xd));
  CHECK_DNN(cudnnCreateTensorDescriptor(&pd));
  CHECK_DNN(cudnnSetTensor4dDescriptor(xd, b.nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                       b.type, b.n, b.c, b.h, b.w));
  CHECK_DNN(cudnnDeriveBNTensorDescriptor(pd, xd, b.mode));
  const cudnnDataType_t pt = b.paramType();
  const size_t np = b.params();
  Buffers m{};
  m.x = devtest::upload(elemOf(b.type), b.count(), b.x_value);
  m.y = fill(b.type, b.count(), 1);
  m.dy = fill(b.type, b.count(), 2);
  m.dx = fill(b.type, b.count(), 3);
  m.scale = devtest::upload(elemOf(pt), np, [](size_t i) { return 0.5 + 0.25 * (i % 3); });
  m.bias = devtest::upload(elemOf(pt), np, [](size_t i) { return 0.125 * (i % 5); });
  m.run_mean = fill(pt, np, 4);
  m.run_var = devtest::upload(elemOf(pt), np, [](size_t i) { return 1.0 + 0.5 * (i % 2); });
  m.save_mean = fill(pt, np, 5);
  m.save_inv = fill(pt, np, 6);
  m.dscale = fill(pt, np, 7);
  m.dbias = fill(pt, np, 8);
  const double one = 1, blend = b.beta, eps = 1e-5, factor = 0.25;
  const float fone = 1, fblend = static_cast<float>(blend);
  const bool f64 = b.type == CUDNN_DATA_DOUBLE;
  const void* alpha = f64 ? static_cast<const void*>(&one) : &fone;
  const void* beta = f64 ? static_cast<const void*>(&blend) : &fblend;
  const cudnnBatchNormOps_t ops = CUDNN_BATCHNORM_OPS_BN;
  const size_t data_bytes = b.count() * devtest::bytesOf(elemOf(b.type));
  const size_t param_bytes = np * devtest::bytesOf(elemOf(pt));

  void* ws = nullptr;
  size_t ws_bytes = 0;
  if (b.ex) {
    CHECK_DNN(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
        hd, b.mode, ops, xd, nullptr, xd, pd, nullptr, &ws_bytes));
    CHECK_DNN(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(hd, b.mode, ops, nullptr, xd,
                                                                   &m.reserve_bytes));
    if (ws_bytes) CHECK_CUDA(cudaMalloc(&ws, ws_bytes));
    CHECK_CUDA(cudaMalloc(&m.reserve, m.reserve_bytes ? m.reserve_bytes : 1));
    CHECK_DNN(cudnnBatchNormalizationForwardTrainingEx(
        hd, b.mode, ops, alpha, beta, xd, m.x, nullptr, nullptr, xd, m.y, pd, m.scale, m.bias,
        factor, m.run_mean, m.run_var, eps, m.save_mean, m.save_inv, nullptr, ws, ws_bytes,
        m.reserve, m.reserve_bytes));
  } else {
    CHECK_DNN(cudnnBatchNormalizationForwardTraining(hd, b.mode, alpha, beta, xd, m.x, xd, m.y,
                                                     pd, m.scale, m.bias, factor, m.run_mean,
                                                     m.run_var, eps, m.save_mean, m.save_inv));
  }
  const std::string fwd = b.name("cudnnBatchNormalizationForwardTraining");
  printHash(fwd + " y", m.y, data_bytes);
  printHash(fwd + " running_mean", m.run_mean, param_bytes);
  printHash(fwd + " running_var", m.run_var, param_bytes);
  printHash(fwd + " save_mean", m.save_mean, param_bytes);
  printHash(fwd + " save_inv_var", m.save_inv, param_bytes);

  if (!b.ex) {
    CHECK_DNN(cudnnBatchNormalizationForwardInference(hd, b.mode, alpha, beta, xd, m.x, xd, m.y,
                                                      pd, m.scale, m.bias, m.run_mean, m.run_var,
                                                      eps));
    printHash(b.name("cudnnBatchNormalizationForwardInference") + " y", m.y, data_bytes);
  }

  if (b.ex) {
    if (ws) CHECK_CUDA(cudaFree(ws));
    ws = nullptr;
    CHECK_DNN(cudnnGetBatchNormalizationBackwardExWorkspaceSize(
        hd, b.mode, ops, xd, nullptr, xd, nullptr, xd, pd, nullptr, &ws_bytes));
    if (ws_bytes) CHECK_CUDA(cudaMalloc(&ws, ws_bytes));
    CHECK_DNN(cudnnBatchNormalizationBackwardEx(
        hd, b.mode, ops, alpha, beta, alpha, beta, xd, m.x, nullptr, nullptr, xd, m.dy, nullptr,
        nullptr, xd, m.dx, pd, m.scale, m.bias, m.dscale, m.dbias, eps, m.save_mean, m.save_inv,
        nullptr, ws, ws_bytes, m.reserve, m.reserve_bytes));
  } else {
    CHECK_DNN(cudnnBatchNormalizationBackward(hd, b.mode, alpha, beta, alpha, beta, xd, m.x, xd,
                                              m.dy, xd, m.dx, pd, m.scale, m.dscale, m.dbias, eps,
                                              m.save_mean, m.save_inv));
  }
  const std::string bwd = b.name("cudnnBatchNormalizationBackward");
  printHash(bwd + " dx", m.dx, data_bytes);
  printHash(bwd + " dscale", m.dscale, param_bytes);
  printHash(bwd + " dbias", m.dbias, param_bytes);

  CHECK_DNN(cudnnDestroyTensorDescriptor(xd));
  CHECK_DNN(cudnnDestroyTensorDescriptor(pd));
  for (void* p : {m.x, m.y, m.dy, m.dx, m.scale, m.bias, m.run_mean, m.run_var, m.save_mean,
                  m.save_inv, m.dscale, m.dbias, m.reserve, ws})
    if (p) CHECK_CUDA(cudaFree(p));
}

int sweep(bool with_ex) {
  cudnnHandle_t h;
  CHECK_DNN(cudnnCreate(&h));
  for (cudnnDataType_t t :
       {CUDNN_DATA_FLOAT, CUDNN_DATA_HALF, CUDNN_DATA_BFLOAT16, CUDNN_DATA_DOUBLE})
    for (cudnnBatchNormMode_t mode : {CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_PER_ACTIVATION,
                                      CUDNN_BATCHNORM_SPATIAL_PERSISTENT})
      for (bool nhwc : {false, true})
        for (bool ex : {false, true}) {
          if (ex && (!with_ex || mode == CUDNN_BATCHNORM_PER_ACTIVATION)) continue;
          Bn b;
          b.type = t;
          b.mode = mode;
          b.nhwc = nhwc;
          b.ex = ex;
          run(h, b);
        }
  Bn blended;
  blended.beta = 0.5;
  run(h, blended);
  if (with_ex) {  // bnOps with an activation: fumi does not model it
    cudnnTensorDescriptor_t xd, pd;
    cudnnActivationDescriptor_t ad;
    CHECK_DNN(cudnnCreateTensorDescriptor(&xd));
    CHECK_DNN(cudnnCreateTensorDescriptor(&pd));
    CHECK_DNN(cudnnCreateActivationDescriptor(&ad));
    CHECK_DNN(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 3, 4, 4));
    CHECK_DNN(cudnnDeriveBNTensorDescriptor(pd, xd, CUDNN_BATCHNORM_SPATIAL));
    CHECK_DNN(cudnnSetActivationDescriptor(ad, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0));
    void* x = fill(CUDNN_DATA_FLOAT, 96, 1);
    void* y = fill(CUDNN_DATA_FLOAT, 96, 2);
    void* sb = fill(CUDNN_DATA_FLOAT, 3, 3);
    const float one = 1, zero = 0;
    const cudnnStatus_t st = cudnnBatchNormalizationForwardTrainingEx(
        h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN_ACTIVATION, &one, &zero, xd, x,
        nullptr, nullptr, xd, y, pd, sb, sb, 1.0, nullptr, nullptr, 1e-5, nullptr, nullptr, ad,
        nullptr, 0, nullptr, 0);
    if (st == CUDNN_STATUS_SUCCESS)
      printHash("cudnnBatchNormalizationForwardTrainingEx relu y", y, 96 * 4);
    else
      std::printf("cudnnBatchNormalizationForwardTrainingEx relu status %d\n", static_cast<int>(st));
    CHECK_DNN(cudnnDestroyTensorDescriptor(xd));
    CHECK_DNN(cudnnDestroyTensorDescriptor(pd));
    CHECK_DNN(cudnnDestroyActivationDescriptor(ad));
    for (void* p : {x, y, sb}) CHECK_CUDA(cudaFree(p));
  }
  CHECK_DNN(cudnnDestroy(h));
  return 0;
}

int offset() {
  cudnnHandle_t h;
  CHECK_DNN(cudnnCreate(&h));
  Bn b;
  b.x_value = [](size_t i) { return 4096.0 + static_cast<double>(i % 7) / 64.0; };
  run(h, b);
  CHECK_DNN(cudnnDestroy(h));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "sweep";
  if (mode == "sweep") return sweep(true);
  if (mode == "plain") return sweep(false);
  if (mode == "offset") return offset();
  std::fprintf(stderr, "usage: %s sweep|plain|offset\n", argv[0]);
  return 1;
}
