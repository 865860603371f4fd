// cuda_conv.cpp — a cuDNN program for fumi's CUDA tests: it calls the legacy convolution entry
// points fumi hooks, the way frameworks do, and prints one line per call: the case name and a
// hash of the output bytes (so runs with and without libfumi can be compared bit for bit).
//
// Built against the real cuDNN 9 and CUDA 13 headers and linked against the REAL libcudnn.so.9
// and libcudart; on machines without a GPU the tests preload the simulated device's stand-ins
// (tests/simdevice), on a GPU it runs as is. Every call's descriptors are destroyed right after
// the call returns, before its stream has run: fumi must keep what it needs by value.
// Scenarios (argv[1]):
//   sweep    forward, backward data and backward filter x f32 (default and FMA math), f64,
//            f16 (f32 and f16 compute), bf16 x NCHW, NHWC and padded-strided tensors, 2-D and
//            3-D, groups, padding, stride, dilation, convolution and cross-correlation, beta 0
//            and 1/2, plus the fused bias-activation forward. Operands hold multiples of 1/2 in
//            [-1, 1] and every sum stays below 64, so every result is exact in every type and a
//            correct rerun matches to the last bit.
//   tf32     a forward f32 convolution on inputs 1 + 2^-11 + 2^-13 (not representable in TF32)
//            under CUDNN_DEFAULT_MATH (TF32), then CUDNN_FMA_MATH (plain fp32).
//   accum16  a forward f16 convolution of 4096 products of 1 per output with HALF compute, then
//            with FLOAT compute (plant fp16 accumulation with FUMI_SIMCUDNN_FAULTS=accum16).
//   fault    forward, backward data and backward filter (f32, FMA math) with C = 3 input and
//            K = 5 output channels (plant faults for those with FUMI_SIMCUDNN_FAULTS=wrong:3x5).
//   large    forward, backward data and backward filter (f32, FMA math) of 4 images of 64
//            channels, 16 x 16, into 64 channels by 3 x 3 filters; then a forward true
//            convolution, NHWC, 2 groups, beta 1/2 (checks whose operands stay on the device;
//            plant faults with FUMI_SIMCUDNN_FAULTS=wrong:64x64).
//   nondet   the same forward convolution three times (FUMI_SIMCUDNN_FAULTS=nondet).
//   capture  a forward convolution on one stream, then one recorded into a CUDA graph (global
//            capture mode) on another and the graph launched; prints the simulator's
//            capture-violation count.
//   errors   a forward convolution with a bad algo (the library's status must come back
//            unchanged) and a cudaGetLastError probe.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include "cudnn_test.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using devtest::sizeOf;
using devtest::typeName;
using devtest::upload;

// Multiples of 1/2 in [-1, 1] (a fixed pattern per operand `salt`).
double half(size_t i, int salt) {
  return static_cast<double>(static_cast<int>((i * 7 + static_cast<size_t>(salt) * 3) % 5) - 2) /
         2.0;
}

using devtest::printHash;

enum class Dir { kFwd, kBwdData, kBwdFilter, kBiasAct };
enum class Layout { kNchw, kNhwc, kStrided };

const char* dirName(Dir d) {
  switch (d) {
    case Dir::kFwd: return "cudnnConvolutionForward";
    case Dir::kBwdData: return "cudnnConvolutionBackwardData";
    case Dir::kBwdFilter: return "cudnnConvolutionBackwardFilter";
    case Dir::kBiasAct: return "cudnnConvolutionBiasActivationForward";
  }
  return "?";
}
const char* layoutName(Layout l) {
  return l == Layout::kNchw ? "nchw" : l == Layout::kNhwc ? "nhwc" : "strided";
}

// One convolution: x N x C x in, w K x C/groups x filter, y N x K x out.
struct Conv {
  Dir dir = Dir::kFwd;
  cudnnDataType_t type = CUDNN_DATA_FLOAT, compute = CUDNN_DATA_FLOAT;
  cudnnMathType_t math = CUDNN_FMA_MATH;
  Layout layout = Layout::kNchw;
  int n = 2, c = 4, k = 4, groups = 1, spatial = 2;
  int in[3] = {5, 5, 5}, filter[3] = {3, 3, 3};
  int pad[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, dil[3] = {1, 1, 1};
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  double alpha = 1, beta = 0;
  int algo = 0;
  double (*x_value)(size_t) = [](size_t i) { return half(i, 1); };
  double (*w_value)(size_t) = [](size_t i) { return half(i, 2); };

  int nd() const { return spatial + 2; }
  int out(int d) const {
    return (in[d] + 2 * pad[d] - ((filter[d] - 1) * dil[d] + 1)) / stride[d] + 1;
  }
  // dims and strides of an N x channels x spatial tensor in the case's layout.
  void tensorShape(int channels, const int* sp, int* dims, int* strides) const {
    dims[0] = n;
    dims[1] = channels;
    for (int i = 0; i < spatial; ++i) dims[i + 2] = sp[i];
    const int last = nd() - 1;
    if (layout == Layout::kNhwc) {
      strides[1] = 1;
      int packed = channels;
      for (int i = last; i >= 2; --i) {
        strides[i] = packed;
        packed *= dims[i];
      }
      strides[0] = packed;
      return;
    }
    // NCHW, packed or with gaps after every row, plane, channel and image.
    const int gap = layout == Layout::kStrided ? 1 : 0;
    int packed = 1;
    for (int i = last; i >= 0; --i) {
      strides[i] = packed;
      packed = packed * dims[i] + (i < last ? gap * (last - i + 1) : gap);
    }
  }
  std::string name() const {
    std::string s = std::string(dirName(dir)) + " " + typeName(type) + "/" + typeName(compute) +
                    (math == CUDNN_FMA_MATH ? " fma" : " default") + " " + layoutName(layout) +
                    " " + std::to_string(spatial) + "d g" + std::to_string(groups) + " s" +
                    std::to_string(stride[0]) + " d" + std::to_string(dil[0]) +
                    (mode == CUDNN_CONVOLUTION ? " conv" : " xcorr");
    return s + (beta != 0 ? " beta" : "");
  }
};

size_t spanOf(int nd, const int* dims, const int* strides) {
  size_t last = 0;
  for (int i = 0; i < nd; ++i) last += static_cast<size_t>(dims[i] - 1) * static_cast<size_t>(strides[i]);
  return last + 1;
}

// Runs one convolution on `h` and prints its output's hash (status when not successful).
cudnnStatus_t run(cudnnHandle_t h, const Conv& cv, const std::string& label = "") {
  const int nd = cv.nd();
  int xdims[5], xstr[5], ydims[5], ystr[5], wdims[5];
  int outsp[3];
  for (int i = 0; i < cv.spatial; ++i) outsp[i] = cv.out(i);
  cv.tensorShape(cv.c, cv.in, xdims, xstr);
  cv.tensorShape(cv.k, outsp, ydims, ystr);
  wdims[0] = cv.k;
  wdims[1] = cv.c / cv.groups;
  for (int i = 0; i < cv.spatial; ++i) wdims[i + 2] = cv.filter[i];
  size_t wnumel = 1;
  for (int i = 0; i < nd; ++i) wnumel *= static_cast<size_t>(wdims[i]);
  const size_t xspan = spanOf(nd, xdims, xstr), yspan = spanOf(nd, ydims, ystr);

  cudnnTensorDescriptor_t xd, yd, zd, bd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  cudnnActivationDescriptor_t ad;
  CHECK_DNN(cudnnCreateTensorDescriptor(&xd));
  CHECK_DNN(cudnnCreateTensorDescriptor(&yd));
  CHECK_DNN(cudnnCreateTensorDescriptor(&zd));
  CHECK_DNN(cudnnCreateTensorDescriptor(&bd));
  CHECK_DNN(cudnnCreateFilterDescriptor(&wd));
  CHECK_DNN(cudnnCreateConvolutionDescriptor(&cd));
  CHECK_DNN(cudnnCreateActivationDescriptor(&ad));
  CHECK_DNN(cudnnSetTensorNdDescriptor(xd, cv.type, nd, xdims, xstr));
  CHECK_DNN(cudnnSetTensorNdDescriptor(yd, cv.type, nd, ydims, ystr));
  CHECK_DNN(cudnnSetTensorNdDescriptor(zd, cv.type, nd, ydims, ystr));
  int bdims[5] = {1, cv.k, 1, 1, 1}, bstr[5] = {cv.k, 1, 1, 1, 1};
  CHECK_DNN(cudnnSetTensorNdDescriptor(bd, cv.type, nd, bdims, bstr));
  CHECK_DNN(cudnnSetFilterNdDescriptor(
      wd, cv.type, cv.layout == Layout::kNhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, nd, wdims));
  CHECK_DNN(cudnnSetConvolutionNdDescriptor(cd, cv.spatial, cv.pad, cv.stride, cv.dil, cv.mode,
                                            cv.compute));
  CHECK_DNN(cudnnSetConvolutionGroupCount(cd, cv.groups));
  CHECK_DNN(cudnnSetConvolutionMathType(cd, cv.math));
  CHECK_DNN(cudnnSetActivationDescriptor(ad, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0));

  void* x = upload(cv.type, xspan, cv.x_value);
  void* w = upload(cv.type, wnumel, cv.w_value);
  void* y = upload(cv.type, yspan, [](size_t i) { return half(i, 3); });
  void* z = upload(cv.type, yspan, [](size_t i) { return half(i, 4); });
  void* bias = upload(cv.type, static_cast<size_t>(cv.k), [](size_t i) { return half(i, 0); });
  const double da = cv.alpha, db = cv.beta;
  const float fa = static_cast<float>(da), fb = static_cast<float>(db);
  const bool f64 = cv.type == CUDNN_DATA_DOUBLE;
  const void* alpha = f64 ? static_cast<const void*>(&da) : &fa;
  const void* beta = f64 ? static_cast<const void*>(&db) : &fb;
  void* out = nullptr;
  size_t out_bytes = 0;
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  switch (cv.dir) {
    case Dir::kFwd:
      st = cudnnConvolutionForward(h, alpha, xd, x, wd, w, cd,
                                   static_cast<cudnnConvolutionFwdAlgo_t>(cv.algo), nullptr, 0,
                                   beta, yd, y);
      out = y;
      out_bytes = yspan * sizeOf(cv.type);
      break;
    case Dir::kBwdData:  // dy: the y buffer's values; dx: x's buffer, read with beta
      st = cudnnConvolutionBackwardData(h, alpha, wd, w, yd, z, cd,
                                        static_cast<cudnnConvolutionBwdDataAlgo_t>(cv.algo),
                                        nullptr, 0, beta, xd, x);
      out = x;
      out_bytes = xspan * sizeOf(cv.type);
      break;
    case Dir::kBwdFilter:
      st = cudnnConvolutionBackwardFilter(h, alpha, xd, x, yd, z, cd,
                                          static_cast<cudnnConvolutionBwdFilterAlgo_t>(cv.algo),
                                          nullptr, 0, beta, wd, w);
      out = w;
      out_bytes = wnumel * sizeOf(cv.type);
      break;
    case Dir::kBiasAct:  // alpha2 = beta, z aliasing y (in place, as frameworks fuse residuals)
      st = cudnnConvolutionBiasActivationForward(
          h, alpha, xd, x, wd, w, cd, static_cast<cudnnConvolutionFwdAlgo_t>(cv.algo), nullptr, 0,
          beta, yd, y, bd, bias, ad, yd, y);
      out = y;
      out_bytes = yspan * sizeOf(cv.type);
      break;
  }
  // The program's descriptors go right away: fumi's asynchronous check must not need them.
  cudnnDestroyTensorDescriptor(xd);
  cudnnDestroyTensorDescriptor(yd);
  cudnnDestroyTensorDescriptor(zd);
  cudnnDestroyTensorDescriptor(bd);
  cudnnDestroyFilterDescriptor(wd);
  cudnnDestroyConvolutionDescriptor(cd);
  cudnnDestroyActivationDescriptor(ad);
  const std::string name = label.empty() ? cv.name() : label;
  if (st == CUDNN_STATUS_SUCCESS)
    printHash(name, out, out_bytes);
  else
    std::printf("%s status %d\n", name.c_str(), static_cast<int>(st));
  for (void* p : {x, w, y, z, bias}) CHECK_CUDA(cudaFree(p));
  return st;
}

struct Config {
  cudnnDataType_t type, compute;
  cudnnMathType_t math;
};

int sweep() {
  cudnnHandle_t h;
  CHECK_DNN(cudnnCreate(&h));
  const Config configs[] = {
      {CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH},
      {CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH},
      {CUDNN_DATA_DOUBLE, CUDNN_DATA_DOUBLE, CUDNN_DEFAULT_MATH},
      {CUDNN_DATA_HALF, CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH},
      {CUDNN_DATA_HALF, CUDNN_DATA_HALF, CUDNN_TENSOR_OP_MATH},
      {CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH},
  };
  int v = 0;
  for (const Config& cfg : configs) {
    for (Layout layout : {Layout::kNchw, Layout::kNhwc, Layout::kStrided}) {
      for (Dir dir : {Dir::kFwd, Dir::kBwdData, Dir::kBwdFilter}) {
        Conv cv;
        cv.dir = dir;
        cv.type = cfg.type;
        cv.compute = cfg.compute;
        cv.math = cfg.math;
        cv.layout = layout;
        const int q = v + v / 4;  // varies each direction's parameters from block to block
        cv.groups = q % 2 ? 2 : 1;
        cv.stride[0] = cv.stride[1] = q % 3 == 2 ? 2 : 1;
        cv.dil[0] = cv.dil[1] = q % 3 == 1 ? 2 : 1;
        cv.pad[1] = q % 4 == 1 ? 0 : 1;
        cv.mode = q % 2 == 0 ? CUDNN_CONVOLUTION : CUDNN_CROSS_CORRELATION;
        cv.beta = (q / 2) % 3 == 1 ? 0.5 : 0;
        cv.algo = q % 2;
        run(h, cv);
        ++v;
      }
      // 3-D: 1 x 2 x 4^3 input, 3^3 filter.
      Conv cv3;
      cv3.dir = static_cast<Dir>(v % 3);
      cv3.type = cfg.type;
      cv3.compute = cfg.compute;
      cv3.math = cfg.math;
      cv3.layout = layout;
      cv3.spatial = 3;
      cv3.n = 1;
      cv3.c = cv3.k = 2;
      cv3.in[0] = cv3.in[1] = cv3.in[2] = 4;
      cv3.mode = v % 2 == 0 ? CUDNN_CONVOLUTION : CUDNN_CROSS_CORRELATION;
      run(h, cv3);
      ++v;
    }
    // The fused form: relu(conv(x) + z/2 + bias), z aliasing y.
    Conv fused;
    fused.dir = Dir::kBiasAct;
    fused.type = cfg.type;
    fused.compute = cfg.compute;
    fused.math = cfg.math;
    fused.beta = 0.5;
    fused.algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
    run(h, fused);
  }
  cudnnDestroy(h);
  return 0;
}

int tf32() {
  cudnnHandle_t h;
  CHECK_DNN(cudnnCreate(&h));
  for (cudnnMathType_t math : {CUDNN_DEFAULT_MATH, CUDNN_FMA_MATH}) {
    Conv cv;
    cv.math = math;
    cv.x_value = [](size_t) { return 1 + 1.0 / 2048 + 1.0 / 8192; };
    cv.w_value = cv.x_value;
    run(h, cv);
  }
  cudnnDestroy(h);
  return 0;
}

int accum16() {
  cudnnHandle_t h;
  CHECK_DNN(cudnnCreate(&h));
  for (cudnnDataType_t compute : {CUDNN_DATA_HALF, CUDNN_DATA_FLOAT}) {
    Conv cv;  // 64 channels x 8 x 8 taps: 4096 products of 1 per output
    cv.type = CUDNN_DATA_HALF;
    cv.compute = compute;
    cv.n = 1;
    cv.c = 64;
    cv.k = 2;
    cv.in[0] = cv.in[1] = cv.filter[0] = cv.filter[1] = 8;
    cv.pad[0] = cv.pad[1] = 0;
    cv.x_value = [](size_t) { return 1.0; };
    cv.w_value = cv.x_value;
    run(h, cv);
  }
  cudnnDestroy(h);
  return 0;
}

int fault() {
  cudnnHandle_t h;
  CHECK_DNN(cudnnCreate(&h));
  for (Dir dir : {Dir::kFwd, Dir::kBwdData, Dir::kBwdFilter}) {
    Conv cv;
    cv.dir = dir;
    cv.c = 3;
    cv.k = 5;
    run(h, cv);
  }
  cudnnDestroy(h);
  return 0;
}

int large() {
  cudnnHandle_t h;
  CHECK_DNN(cudnnCreate(&h));
  Conv cv;
  cv.n = 4;
  cv.c = cv.k = 64;
  cv.in[0] = cv.in[1] = 16;
  for (Dir dir : {Dir::kFwd, Dir::kBwdData, Dir::kBwdFilter}) {
    cv.dir = dir;
    run(h, cv);
  }
  cv.dir = Dir::kFwd;
  cv.mode = CUDNN_CONVOLUTION;
  cv.layout = Layout::kNhwc;
  cv.groups = 2;
  cv.beta = 0.5;
  run(h, cv);
  cudnnDestroy(h);
  return 0;
}

int nondet() {
  cudnnHandle_t h;
  CHECK_DNN(cudnnCreate(&h));
  for (int i = 0; i < 3; ++i) run(h, Conv{});
  cudnnDestroy(h);
  return 0;
}

// Global-mode capture on one stream while the same thread runs a checked convolution on
// another: fumi's work for that check must not break the capture, and the convolution recorded
// into the graph must not be checked (nothing may be issued on a capturing stream).
int capture() {
  cudnnHandle_t free_h, captured_h;
  CHECK_DNN(cudnnCreate(&free_h));
  CHECK_DNN(cudnnCreate(&captured_h));
  cudaStream_t free_s, captured_s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&free_s, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithFlags(&captured_s, cudaStreamNonBlocking));
  CHECK_DNN(cudnnSetStream(free_h, free_s));
  CHECK_DNN(cudnnSetStream(captured_h, captured_s));
  run(free_h, Conv{}, "uncaptured cudnnConvolutionForward");

  // The captured call's operands are set up before the capture begins.
  Conv cv;
  int xdims[4], xstr[4], ydims[4], ystr[4], wdims[4] = {cv.k, cv.c, 3, 3}, outsp[2] = {5, 5};
  cv.tensorShape(cv.c, cv.in, xdims, xstr);
  cv.tensorShape(cv.k, outsp, ydims, ystr);
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  CHECK_DNN(cudnnCreateTensorDescriptor(&xd));
  CHECK_DNN(cudnnCreateTensorDescriptor(&yd));
  CHECK_DNN(cudnnCreateFilterDescriptor(&wd));
  CHECK_DNN(cudnnCreateConvolutionDescriptor(&cd));
  CHECK_DNN(cudnnSetTensorNdDescriptor(xd, CUDNN_DATA_FLOAT, 4, xdims, xstr));
  CHECK_DNN(cudnnSetTensorNdDescriptor(yd, CUDNN_DATA_FLOAT, 4, ydims, ystr));
  CHECK_DNN(cudnnSetFilterNdDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, wdims));
  CHECK_DNN(cudnnSetConvolutionNdDescriptor(cd, 2, cv.pad, cv.stride, cv.dil, cv.mode,
                                            CUDNN_DATA_FLOAT));
  CHECK_DNN(cudnnSetConvolutionMathType(cd, CUDNN_FMA_MATH));
  const size_t xs = spanOf(4, xdims, xstr), ys = spanOf(4, ydims, ystr);
  void* x = upload(CUDNN_DATA_FLOAT, xs, cv.x_value);
  void* w = upload(CUDNN_DATA_FLOAT, 36 * 4, cv.w_value);
  void* y = upload(CUDNN_DATA_FLOAT, ys, [](size_t) { return 0.0; });
  const float one = 1, zero = 0;
  cudaGraph_t graph;
  CHECK_CUDA(cudaStreamBeginCapture(captured_s, cudaStreamCaptureModeGlobal));
  CHECK_DNN(cudnnConvolutionForward(captured_h, &one, xd, x, wd, w, cd,
                                    CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero,
                                    yd, y));
  CHECK_CUDA(cudaStreamEndCapture(captured_s, &graph));
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  CHECK_CUDA(cudaGraphLaunch(exec, captured_s));
  CHECK_CUDA(cudaStreamSynchronize(captured_s));
  printHash("captured cudnnConvolutionForward", y, ys * 4);
  using ViolationsFn = int (*)();
  if (auto fn = reinterpret_cast<ViolationsFn>(dlsym(RTLD_DEFAULT, "cudaFumiSimCaptureViolations")))
    std::printf("capture violations %d\n", fn());
  cudnnDestroyTensorDescriptor(xd);
  cudnnDestroyTensorDescriptor(yd);
  cudnnDestroyFilterDescriptor(wd);
  cudnnDestroyConvolutionDescriptor(cd);
  cudnnDestroy(free_h);
  cudnnDestroy(captured_h);
  return 0;
}

int errors() {
  cudnnHandle_t h;
  CHECK_DNN(cudnnCreate(&h));
  Conv bad;
  bad.algo = 1000;  // not an algo: CUDNN_STATUS_BAD_PARAM
  run(h, bad, "bad algo");
  run(h, Conv{}, "good call");
  std::printf("last error after a checked call %d\n", static_cast<int>(cudaGetLastError()));
  cudnnDestroy(h);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "sweep";
  if (mode == "sweep") return sweep();
  if (mode == "tf32") return tf32();
  if (mode == "accum16") return accum16();
  if (mode == "fault") return fault();
  if (mode == "large") return large();
  if (mode == "nondet") return nondet();
  if (mode == "capture") return capture();
  if (mode == "errors") return errors();
  std::fprintf(stderr, "usage: %s sweep|tf32|accum16|fault|large|nondet|capture|errors\n", argv[0]);
  return 64;
}
