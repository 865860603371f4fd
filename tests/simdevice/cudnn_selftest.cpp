// cudnn_selftest — one cuDNN call (or a small set of checks) from the command line, linked
// against the REAL libcudnn.so.9 and libcudart.so.13; test_simcudnn.py runs it on the
// simulated device (the stand-ins preloaded) and compares with PyTorch.
//
//   cudnn_selftest op=<op> [key=value ...]
// op: fwd, bwdd, bwdf, biasact, bn_train, bn_infer, bn_bwd (one computation), hostptr (host
// and pinned pointers), badparam (documented error statuses), descs (descriptor getters);
// the backend (graph) API: gconv (dir=fwd|bwdd|bwdf, engine, capture, populate, destroy),
// gfused (conv + bias + relu), gmatmul, gnorm (kind=ln|bn phase=train|infer|bwd), gsdpa (SDPA
// forward), gapi (statuses, engines and notes).
// keys: dtype=f32|f64|f16|bf16  compute=f32|f64|f16  math=default|tensor|conversion|fma
//   layout=nchw|nhwc|strided (x, y, z)  flayout=nchw|nhwc (filter)  n c k d h w t r s (d, t:
//   input/filter depth, 0 = 2-D)  pad stride dil (one value or per dim, "1,0")  groups
//   mode=conv|xcorr  alpha beta alpha2  algo  calls  act=relu|identity  nanprior=0|1
//   bnmode=spatial|per_act|persistent  eps factor  saved=0|1  ex=0|1 (the Ex forms)  seed
// Output (stdout), logical (N, C, spatial) order, values as C hex floats:
//   S <name> <status>                 a call's status
//   T <name> <dims,...> : <v> <v> ... a tensor's values (inputs as stored, then outputs)
//   G <name> <0|1>                    whether the gaps between strided elements are intact
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <unistd.h>
#include <string>
#include <vector>

namespace {

std::map<std::string, std::string> g_args;

std::string arg(const std::string& k, const std::string& def) {
  auto it = g_args.find(k);
  return it == g_args.end() ? def : it->second;
}
int iarg(const std::string& k, int def) { return std::atoi(arg(k, std::to_string(def)).c_str()); }
double darg(const std::string& k, double def) {
  const std::string v = arg(k, "");
  return v.empty() ? def : std::strtod(v.c_str(), nullptr);
}
std::vector<int> listArg(const std::string& k, int def, int n) {
  std::vector<int> out;
  std::string v = arg(k, std::to_string(def));
  size_t pos = 0;
  while (pos <= v.size() && static_cast<int>(out.size()) < n) {
    size_t e = v.find(',', pos);
    if (e == std::string::npos) e = v.size();
    out.push_back(std::atoi(v.substr(pos, e - pos).c_str()));
    pos = e + 1;
  }
  while (static_cast<int>(out.size()) < n) out.push_back(out.back());
  return out;
}

#define CUDA_CHECK(x)                                                                   \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                     \
    }                                                                                   \
  } while (0)

#define DNN_CHECK(x)                                                                    \
  do {                                                                                  \
    cudnnStatus_t s_ = (x);                                                             \
    if (s_ != CUDNN_STATUS_SUCCESS) {                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudnnGetErrorString(s_)); \
      std::exit(3);                                                                     \
    }                                                                                   \
  } while (0)

// --- element types ------------------------------------------------------------------------

enum class T { F64, F32, F16, BF16 };

T typeOf(const std::string& s) {
  if (s == "f64") return T::F64;
  if (s == "f16") return T::F16;
  if (s == "bf16") return T::BF16;
  return T::F32;
}
size_t sizeOf(T t) { return t == T::F64 ? 8 : t == T::F32 ? 4 : 2; }
cudnnDataType_t cudnnType(T t) {
  switch (t) {
    case T::F64: return CUDNN_DATA_DOUBLE;
    case T::F32: return CUDNN_DATA_FLOAT;
    case T::F16: return CUDNN_DATA_HALF;
    case T::BF16: return CUDNN_DATA_BFLOAT16;
  }
  return CUDNN_DATA_FLOAT;
}

// fp16 bits of a value (round to nearest even; finite values in range) and back.
uint16_t toHalf(double v) {
  uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  double a = std::fabs(v);
  if (std::isnan(v)) return 0x7e00;
  if (a == 0) return sign;
  int e;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  int exp = e - 1;    // a = 1.x * 2^exp
  if (exp < -14) exp = -14;
  const double q = std::ldexp(1.0, exp - 10);
  double m = std::nearbyint(a / q);  // current rounding mode: to nearest even
  if (m >= 2048) {
    m /= 2;
    ++exp;
  }
  if (exp > 15) return static_cast<uint16_t>(sign | 0x7c00);
  const int mant = static_cast<int>(m);
  if (mant < 1024) return static_cast<uint16_t>(sign | mant);  // subnormal
  return static_cast<uint16_t>(sign | ((exp + 15) << 10) | (mant - 1024));
}
double fromHalf(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double s = (h & 0x8000) ? -1 : 1;
  if (e == 0) return s * std::ldexp(m, -24);
  if (e == 31) return m ? NAN : s * INFINITY;
  return s * std::ldexp(1024 + m, e - 25);
}
uint16_t toBf16(double v) {  // values given are exact in bf16 (or NaN)
  const float f = static_cast<float>(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}
double fromBf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void storeAs(unsigned char* p, T t, double v) {
  switch (t) {
    case T::F64: std::memcpy(p, &v, 8); break;
    case T::F32: { const float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
    case T::F16: { const uint16_t h = toHalf(v); std::memcpy(p, &h, 2); break; }
    case T::BF16: { const uint16_t h = toBf16(v); std::memcpy(p, &h, 2); break; }
  }
}
double loadAs(const unsigned char* p, T t) {
  switch (t) {
    case T::F64: { double v; std::memcpy(&v, p, 8); return v; }
    case T::F32: { float v; std::memcpy(&v, p, 4); return v; }
    case T::F16: { uint16_t h; std::memcpy(&h, p, 2); return fromHalf(h); }
    case T::BF16: { uint16_t h; std::memcpy(&h, p, 2); return fromBf16(h); }
  }
  return 0;
}

// Deterministic values exactly representable in t, in about [-1, 1).
uint64_t g_state = 0x9e3779b97f4a7c15ull;
uint64_t next() {
  g_state ^= g_state << 13;
  g_state ^= g_state >> 7;
  g_state ^= g_state << 17;
  return g_state;
}
double value(T t) {
  switch (t) {
    case T::F64: return std::ldexp(static_cast<double>(next() >> 11), -52) - 1;  // 53 bits
    case T::F32: return std::ldexp(static_cast<double>(next() >> 40), -23) - 1;  // 24 bits
    case T::F16: return std::ldexp(static_cast<double>(static_cast<int>(next() % 2047) - 1023), -10);
    case T::BF16: return std::ldexp(static_cast<double>(static_cast<int>(next() % 511) - 255), -8);
  }
  return 0;
}

// --- tensors ------------------------------------------------------------------------------

// A tensor in logical order (N, C, spatial...) with its physical strides, on host and device.
struct Tensor {
  std::string name;
  T type = T::F32;
  std::vector<int> dims, strides;
  size_t extent = 0;  // elements covered by the strides
  std::vector<unsigned char> host;
  void* dev = nullptr;

  size_t count() const {
    size_t n = 1;
    for (int d : dims) n *= static_cast<size_t>(d);
    return n;
  }
  size_t offset(size_t l) const {
    size_t off = 0;
    for (int i = static_cast<int>(dims.size()) - 1; i >= 0; --i) {
      off += (l % static_cast<size_t>(dims[i])) * static_cast<size_t>(strides[i]);
      l /= static_cast<size_t>(dims[i]);
    }
    return off;
  }
  double get(size_t l) const { return loadAs(host.data() + offset(l) * sizeOf(type), type); }
  void set(size_t l, double v) { storeAs(host.data() + offset(l) * sizeOf(type), type, v); }
};

// Strides of logical dims in a layout: nchw (packed), nhwc (channel innermost), strided (nchw
// order with gaps between every element and at the end of every row, channel and image).
std::vector<int> stridesFor(const std::vector<int>& dims, const std::string& layout) {
  const int nb = static_cast<int>(dims.size());
  std::vector<int> s(static_cast<size_t>(nb));
  if (layout == "nhwc") {
    int acc = 1;
    s[1] = 1;
    acc = dims[1];
    for (int i = nb - 1; i >= 2; --i) {
      s[static_cast<size_t>(i)] = acc;
      acc *= dims[static_cast<size_t>(i)];
    }
    s[0] = acc;
  } else if (layout == "strided") {
    int acc = 2;
    for (int i = nb - 1; i >= 0; --i) {
      s[static_cast<size_t>(i)] = acc;
      acc = acc * dims[static_cast<size_t>(i)] + 3;
    }
  } else {
    int acc = 1;
    for (int i = nb - 1; i >= 0; --i) {
      s[static_cast<size_t>(i)] = acc;
      acc *= dims[static_cast<size_t>(i)];
    }
  }
  return s;
}

const unsigned char kGapByte = 0x5a;

Tensor make(const std::string& name, T type, const std::vector<int>& dims,
            const std::string& layout) {
  Tensor t;
  t.name = name;
  t.type = type;
  t.dims = dims;
  t.strides = stridesFor(dims, layout);
  size_t last = 0;
  for (size_t i = 0; i < dims.size(); ++i)
    last += static_cast<size_t>(dims[i] - 1) * static_cast<size_t>(t.strides[i]);
  t.extent = last + 1;
  t.host.assign(t.extent * sizeOf(type), kGapByte);
  CUDA_CHECK(cudaMalloc(&t.dev, t.host.size()));
  return t;
}

void fill(Tensor& t, double offset = 0) {
  for (size_t l = 0; l < t.count(); ++l) t.set(l, value(t.type) + offset);
}
void fillConst(Tensor& t, double v) {
  for (size_t l = 0; l < t.count(); ++l) t.set(l, v);
}
// ordered=1: a host function on the stream holds back the inputs' copies until the program has
// asked whether the call is still pending (release()); a fixed sleep lost that race on a
// loaded machine. Bounded, so a stream that never runs it cannot hang the test.
std::atomic<bool> g_release{false};
void holdStream(cudaStream_t stream) {
  g_release.store(false);
  CUDA_CHECK(cudaLaunchHostFunc(
      stream,
      [](void*) {
        for (int ms = 0; ms < 30000 && !g_release.load(); ++ms) usleep(1000);
      },
      nullptr));
}
void release() { g_release.store(true); }

void upload(const Tensor& t) {
  CUDA_CHECK(cudaMemcpy(t.dev, t.host.data(), t.host.size(), cudaMemcpyHostToDevice));
}
void download(Tensor& t, cudaStream_t s) {
  CUDA_CHECK(cudaMemcpyAsync(t.host.data(), t.dev, t.host.size(), cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
}

void print(const Tensor& t, const std::string& name) {
  std::printf("T %s ", name.c_str());
  for (size_t i = 0; i < t.dims.size(); ++i) std::printf("%s%d", i ? "," : "", t.dims[i]);
  std::printf(" :");
  for (size_t l = 0; l < t.count(); ++l) std::printf(" %a", t.get(l));
  std::printf("\n");
}

// Whether every byte outside the tensor's elements still holds the gap pattern.
void printGaps(const Tensor& t) {
  std::vector<bool> used(t.extent, false);
  for (size_t l = 0; l < t.count(); ++l) used[t.offset(l)] = true;
  bool intact = true;
  const size_t es = sizeOf(t.type);
  for (size_t e = 0; e < t.extent; ++e)
    if (!used[e])
      for (size_t b = 0; b < es; ++b) intact = intact && t.host[e * es + b] == kGapByte;
  std::printf("G %s %d\n", t.name.c_str(), intact ? 1 : 0);
}

cudnnTensorDescriptor_t tensorDesc(const Tensor& t, const std::string& layout) {
  cudnnTensorDescriptor_t d;
  DNN_CHECK(cudnnCreateTensorDescriptor(&d));
  const int nb = static_cast<int>(t.dims.size());
  const cudnnDataType_t dt = cudnnType(t.type);
  if (nb == 4 && layout != "strided") {
    DNN_CHECK(cudnnSetTensor4dDescriptor(
        d, layout == "nhwc" ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, dt, t.dims[0], t.dims[1],
        t.dims[2], t.dims[3]));
  } else if (nb == 4) {
    DNN_CHECK(cudnnSetTensor4dDescriptorEx(d, dt, t.dims[0], t.dims[1], t.dims[2], t.dims[3],
                                           t.strides[0], t.strides[1], t.strides[2],
                                           t.strides[3]));
  } else if (layout != "strided") {
    DNN_CHECK(cudnnSetTensorNdDescriptorEx(
        d, layout == "nhwc" ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, dt, nb, t.dims.data()));
  } else {
    DNN_CHECK(cudnnSetTensorNdDescriptor(d, dt, nb, t.dims.data(), t.strides.data()));
  }
  // The descriptor must describe exactly the strides the program uses.
  int nbOut = 0;
  cudnnDataType_t dtOut;
  std::vector<int> dimOut(8), strideOut(8);
  DNN_CHECK(cudnnGetTensorNdDescriptor(d, 8, &dtOut, &nbOut, dimOut.data(), strideOut.data()));
  for (int i = 0; i < nb; ++i)
    if (dimOut[static_cast<size_t>(i)] != t.dims[static_cast<size_t>(i)] ||
        strideOut[static_cast<size_t>(i)] != t.strides[static_cast<size_t>(i)] || dtOut != dt ||
        nbOut != nb) {
      std::fprintf(stderr, "descriptor of %s disagrees\n", t.name.c_str());
      std::exit(4);
    }
  return d;
}

cudnnFilterDescriptor_t filterDesc(const Tensor& t, const std::string& layout) {
  cudnnFilterDescriptor_t d;
  DNN_CHECK(cudnnCreateFilterDescriptor(&d));
  const cudnnTensorFormat_t f = layout == "nhwc" ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  if (t.dims.size() == 4)
    DNN_CHECK(cudnnSetFilter4dDescriptor(d, cudnnType(t.type), f, t.dims[0], t.dims[1],
                                         t.dims[2], t.dims[3]));
  else
    DNN_CHECK(cudnnSetFilterNdDescriptor(d, cudnnType(t.type), f,
                                         static_cast<int>(t.dims.size()), t.dims.data()));
  return d;
}

struct Scalars {
  double f64[2];
  float f32[2];
  const void* ptr(T t, int i) const {
    return t == T::F64 ? static_cast<const void*>(&f64[i]) : static_cast<const void*>(&f32[i]);
  }
};
Scalars scalars(double a, double b) {
  return Scalars{{a, b}, {static_cast<float>(a), static_cast<float>(b)}};
}

cudnnDataType_t computeType(const std::string& s, T data) {
  if (s == "f64") return CUDNN_DATA_DOUBLE;
  if (s == "f16") return CUDNN_DATA_HALF;
  if (s == "f32") return CUDNN_DATA_FLOAT;
  return data == T::F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
}

cudnnMathType_t mathType(const std::string& s) {
  if (s == "tensor") return CUDNN_TENSOR_OP_MATH;
  if (s == "conversion") return CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
  if (s == "fma") return CUDNN_FMA_MATH;
  return CUDNN_DEFAULT_MATH;
}

// --- convolutions -------------------------------------------------------------------------

int runConv(const std::string& op) {
  const T dt = typeOf(arg("dtype", "f32"));
  const std::string layout = arg("layout", "nchw"), flayout = arg("flayout", "nchw");
  const int n = iarg("n", 2), c = iarg("c", 4), k = iarg("k", 6), g = iarg("groups", 1);
  const int d = iarg("d", 0), h = iarg("h", 5), w = iarg("w", 6);
  const int t = iarg("t", 1), r = iarg("r", 3), s = iarg("s", 3);
  const bool is3d = d > 0;
  const int sp = is3d ? 3 : 2;
  const std::vector<int> pad = listArg("pad", 0, sp), stride = listArg("stride", 1, sp),
                         dil = listArg("dil", 1, sp);
  const int calls = iarg("calls", 1);
  const double alpha = darg("alpha", 1), beta = darg("beta", 0), alpha2 = darg("alpha2", 0);
  g_state ^= static_cast<uint64_t>(iarg("seed", 0)) * 0x2545f4914f6cdd1dull;

  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  cudnnHandle_t handle;
  DNN_CHECK(cudnnCreate(&handle));
  DNN_CHECK(cudnnSetStream(handle, stream));

  std::vector<int> xd = {n, c}, wd = {k, c / g};
  if (is3d) {
    xd.push_back(d);
    wd.push_back(t);
  }
  xd.push_back(h);
  xd.push_back(w);
  wd.push_back(r);
  wd.push_back(s);
  Tensor x = make("x", dt, xd, layout);
  Tensor wt = make("w", dt, wd, flayout);
  cudnnTensorDescriptor_t xDesc = tensorDesc(x, layout);
  cudnnFilterDescriptor_t wDesc = filterDesc(wt, flayout);

  cudnnConvolutionDescriptor_t conv;
  DNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
  const cudnnConvolutionMode_t mode =
      arg("mode", "xcorr") == "conv" ? CUDNN_CONVOLUTION : CUDNN_CROSS_CORRELATION;
  const cudnnDataType_t ct = computeType(arg("compute", ""), dt);
  if (!is3d)
    DNN_CHECK(cudnnSetConvolution2dDescriptor(conv, pad[0], pad[1], stride[0], stride[1], dil[0],
                                              dil[1], mode, ct));
  else
    DNN_CHECK(cudnnSetConvolutionNdDescriptor(conv, 3, pad.data(), stride.data(), dil.data(),
                                              mode, ct));
  DNN_CHECK(cudnnSetConvolutionGroupCount(conv, g));
  DNN_CHECK(cudnnSetConvolutionMathType(conv, mathType(arg("math", "default"))));

  std::vector<int> yd(static_cast<size_t>(sp + 2));
  if (!is3d) {
    DNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv, xDesc, wDesc, &yd[0], &yd[1], &yd[2],
                                                    &yd[3]));
  } else {
    DNN_CHECK(cudnnGetConvolutionNdForwardOutputDim(conv, xDesc, wDesc, sp + 2, yd.data()));
  }
  Tensor y = make("y", dt, yd, layout);
  cudnnTensorDescriptor_t yDesc = tensorDesc(y, layout);

  // Inputs and the prior content of the output (blended with beta).
  const bool nanPrior = iarg("nanprior", 0) != 0;
  Tensor* out = op == "bwdd" ? &x : op == "bwdf" ? &wt : &y;
  fill(x);
  fill(wt);
  fill(y);
  if (nanPrior) fillConst(*out, NAN);
  Tensor z = make("z", dt, yd, layout), bias = make("bias", dt, {1, k, 1, 1}, "nchw");
  if (is3d) bias = make("bias", dt, {1, k, 1, 1, 1}, "nchw");
  fill(z);
  fill(bias);
  print(x, op == "bwdd" ? "dx_prior" : "x");
  print(wt, op == "bwdf" ? "dw_prior" : "w");
  print(y, op == "bwdd" || op == "bwdf" ? "dy" : "y_prior");
  // ordered=1: the device starts with zeros in the inputs; the real ones arrive by
  // cudaMemcpyAsync behind a slow host function on the stream, before each call. Only a call
  // that runs in stream order (not on the calling thread) sees them.
  const bool ordered = iarg("ordered", 0) != 0;
  std::vector<Tensor*> inputs;
  for (Tensor* in : {&x, &wt, &y})
    if (in != out) inputs.push_back(in);
  upload(x);
  upload(wt);
  upload(y);
  if (ordered)
    for (Tensor* in : inputs) CUDA_CHECK(cudaMemset(in->dev, 0, in->host.size()));

  const Scalars sc = scalars(alpha, op == "biasact" ? alpha2 : beta);
  const int algo = iarg("algo", op == "biasact" ? 1 : 0);
  size_t ws = 123;
  void* workspace = nullptr;
  if (op == "fwd" || op == "biasact")
    DNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(handle, xDesc, wDesc, conv, yDesc,
                                                      static_cast<cudnnConvolutionFwdAlgo_t>(algo), &ws));
  else if (op == "bwdd")
    DNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(
        handle, wDesc, yDesc, conv, xDesc, static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), &ws));
  else
    DNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
        handle, xDesc, yDesc, conv, wDesc, static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
        &ws));
  if (ws) CUDA_CHECK(cudaMalloc(&workspace, ws));
  std::printf("S workspace %zu\n", ws);

  cudnnTensorDescriptor_t zDesc = nullptr, bDesc = nullptr;
  cudnnActivationDescriptor_t act = nullptr;
  if (op == "biasact") {
    print(z, "z");
    print(bias, "bias");
    upload(z);
    upload(bias);
    zDesc = tensorDesc(z, layout);
    bDesc = tensorDesc(bias, "nchw");
    DNN_CHECK(cudnnCreateActivationDescriptor(&act));
    DNN_CHECK(cudnnSetActivationDescriptor(
        act, arg("act", "relu") == "identity" ? CUDNN_ACTIVATION_IDENTITY : CUDNN_ACTIVATION_RELU,
        CUDNN_NOT_PROPAGATE_NAN, 0.0));
  }

  const std::vector<unsigned char> priorBytes = out->host;
  for (int call = 0; call < calls; ++call) {
    out->host = priorBytes;  // every call from the same prior output
    upload(*out);
    if (ordered) {
      holdStream(stream);
      for (Tensor* in : inputs)
        CUDA_CHECK(cudaMemcpyAsync(in->dev, in->host.data(), in->host.size(),
                                   cudaMemcpyHostToDevice, stream));
    }
    cudnnStatus_t st;
    if (op == "fwd")
      st = cudnnConvolutionForward(handle, sc.ptr(dt, 0), xDesc, x.dev, wDesc, wt.dev, conv,
                                   static_cast<cudnnConvolutionFwdAlgo_t>(algo), workspace, ws,
                                   sc.ptr(dt, 1), yDesc, y.dev);
    else if (op == "bwdd")
      st = cudnnConvolutionBackwardData(handle, sc.ptr(dt, 0), wDesc, wt.dev, yDesc, y.dev, conv,
                                        static_cast<cudnnConvolutionBwdDataAlgo_t>(algo),
                                        workspace, ws, sc.ptr(dt, 1), xDesc, x.dev);
    else if (op == "bwdf")
      st = cudnnConvolutionBackwardFilter(handle, sc.ptr(dt, 0), xDesc, x.dev, yDesc, y.dev, conv,
                                          static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
                                          workspace, ws, sc.ptr(dt, 1), wDesc, wt.dev);
    else
      st = cudnnConvolutionBiasActivationForward(
          handle, sc.ptr(dt, 0), xDesc, x.dev, wDesc, wt.dev, conv,
          static_cast<cudnnConvolutionFwdAlgo_t>(algo), workspace, ws, sc.ptr(dt, 1), zDesc,
          z.dev, bDesc, bias.dev, act, yDesc, y.dev);
    std::printf("S call%d %d\n", call, static_cast<int>(st));
    if (ordered) {
      std::printf("S pending%d %d\n", call, cudaStreamQuery(stream) == cudaErrorNotReady);
      release();
    }
    download(*out, stream);
    print(*out, "out" + std::to_string(call));
    printGaps(*out);
  }
  cudnnDestroyConvolutionDescriptor(conv);
  cudnnDestroyTensorDescriptor(xDesc);
  cudnnDestroyTensorDescriptor(yDesc);
  cudnnDestroyFilterDescriptor(wDesc);
  if (act) cudnnDestroyActivationDescriptor(act);
  if (zDesc) cudnnDestroyTensorDescriptor(zDesc);
  if (bDesc) cudnnDestroyTensorDescriptor(bDesc);
  DNN_CHECK(cudnnDestroy(handle));
  return 0;
}

// --- batch normalisation ------------------------------------------------------------------

int runBn(const std::string& op) {
  const T dt = typeOf(arg("dtype", "f32"));
  const T pt = dt == T::F64 ? T::F64 : T::F32;
  const std::string layout = arg("layout", "nchw");
  const int n = iarg("n", 3), c = iarg("c", 4), d = iarg("d", 0), h = iarg("h", 3),
            w = iarg("w", 4);
  const std::string bm = arg("bnmode", "spatial");
  const cudnnBatchNormMode_t mode = bm == "per_act"      ? CUDNN_BATCHNORM_PER_ACTIVATION
                                    : bm == "persistent" ? CUDNN_BATCHNORM_SPATIAL_PERSISTENT
                                                         : CUDNN_BATCHNORM_SPATIAL;
  const double eps = darg("eps", 1e-5), factor = darg("factor", 0.1);
  const double alpha = darg("alpha", 1), beta = darg("beta", 0);
  g_state ^= static_cast<uint64_t>(iarg("seed", 0)) * 0x2545f4914f6cdd1dull;

  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  cudnnHandle_t handle;
  DNN_CHECK(cudnnCreate(&handle));
  DNN_CHECK(cudnnSetStream(handle, stream));

  std::vector<int> xd = {n, c};
  if (d > 0) xd.push_back(d);
  xd.push_back(h);
  xd.push_back(w);
  Tensor x = make("x", dt, xd, layout), y = make("y", dt, xd, layout);
  cudnnTensorDescriptor_t xDesc = tensorDesc(x, layout), yDesc = tensorDesc(y, layout);
  cudnnTensorDescriptor_t pDesc;
  DNN_CHECK(cudnnCreateTensorDescriptor(&pDesc));
  DNN_CHECK(cudnnDeriveBNTensorDescriptor(pDesc, xDesc, mode));
  int pnb = 0;
  cudnnDataType_t pdt;
  std::vector<int> pdims(8), pstr(8);
  DNN_CHECK(cudnnGetTensorNdDescriptor(pDesc, 8, &pdt, &pnb, pdims.data(), pstr.data()));
  pdims.resize(static_cast<size_t>(pnb));
  std::printf("S derived_type %d\n", static_cast<int>(pdt));
  auto param = [&](const char* name) { return make(name, pt, pdims, "nchw"); };
  Tensor scale = param("scale"), bias = param("bias"), m1 = param("mean"), v1 = param("var"),
         m2 = param("save_mean"), v2 = param("save_inv");
  fill(x, 0.25);
  fill(y);
  fill(scale, 1.0);
  fill(bias);
  fill(m1);
  fill(v1, 1.5);
  fillConst(m2, 0);
  fillConst(v2, 0);
  print(x, "x");
  print(y, op == "bn_bwd" ? "dy" : "y_prior");
  print(scale, "scale");
  print(bias, "bias");
  print(m1, "mean_in");
  print(v1, "var_in");
  for (Tensor* t : {&x, &y, &scale, &bias, &m1, &v1, &m2, &v2}) upload(*t);
  const Scalars sc = scalars(alpha, beta);
  // ordered=1: x reaches the device by cudaMemcpyAsync behind a slow host function (runConv).
  // Launched right before the calls: synchronous copies and allocations after it would wait
  // for the held stream (legacy default-stream semantics).
  const bool ordered = iarg("ordered", 0) != 0;
  auto holdInputs = [&] {
    if (!ordered) return;
    CUDA_CHECK(cudaMemset(x.dev, 0, x.host.size()));
    holdStream(stream);
    CUDA_CHECK(cudaMemcpyAsync(x.dev, x.host.data(), x.host.size(), cudaMemcpyHostToDevice,
                               stream));
  };
  auto pending = [&] {
    if (!ordered) return;
    std::printf("S pending0 %d\n", cudaStreamQuery(stream) == cudaErrorNotReady);
    release();
  };
  // ex=1: the Ex forms with CUDNN_BATCHNORM_OPS_BN (sizes queried first; the fused activation
  // form's status reported as ex_activation).
  const bool ex = iarg("ex", 0) != 0;
  size_t exWs = 1, exReserve = 1;
  if (ex) {
    if (op == "bn_bwd")
      DNN_CHECK(cudnnGetBatchNormalizationBackwardExWorkspaceSize(
          handle, mode, CUDNN_BATCHNORM_OPS_BN, xDesc, yDesc, yDesc, nullptr, xDesc, pDesc,
          nullptr, &exWs));
    else
      DNN_CHECK(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
          handle, mode, CUDNN_BATCHNORM_OPS_BN, xDesc, nullptr, yDesc, pDesc, nullptr, &exWs));
    DNN_CHECK(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
        handle, mode, CUDNN_BATCHNORM_OPS_BN, nullptr, xDesc, &exReserve));
    std::printf("S ex_sizes %zu %zu\n", exWs, exReserve);
    size_t unused = 0;
    std::printf("S ex_activation %d\n",
                static_cast<int>(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
                    handle, mode, CUDNN_BATCHNORM_OPS_BN_ACTIVATION, nullptr, xDesc, &unused)));
  }
  cudnnStatus_t st;
  if (op == "bn_train") {
    holdInputs();
    if (ex)
      st = cudnnBatchNormalizationForwardTrainingEx(
          handle, mode, CUDNN_BATCHNORM_OPS_BN, sc.ptr(dt, 0), sc.ptr(dt, 1), xDesc, x.dev,
          nullptr, nullptr, yDesc, y.dev, pDesc, scale.dev, bias.dev, factor, m1.dev, v1.dev, eps,
          m2.dev, v2.dev, nullptr, nullptr, 0, nullptr, 0);
    else
      st = cudnnBatchNormalizationForwardTraining(handle, mode, sc.ptr(dt, 0), sc.ptr(dt, 1),
                                                  xDesc, x.dev, yDesc, y.dev, pDesc, scale.dev,
                                                  bias.dev, factor, m1.dev, v1.dev, eps, m2.dev,
                                                  v2.dev);
    std::printf("S call0 %d\n", static_cast<int>(st));
    pending();
    for (Tensor* t : {&y, &m1, &v1, &m2, &v2}) download(*t, stream);
    print(y, "out0");
    printGaps(y);
    print(m1, "running_mean");
    print(v1, "running_var");
    print(m2, "save_mean");
    print(v2, "save_inv");
  } else if (op == "bn_infer") {
    holdInputs();
    st = cudnnBatchNormalizationForwardInference(handle, mode, sc.ptr(dt, 0), sc.ptr(dt, 1),
                                                 xDesc, x.dev, yDesc, y.dev, pDesc, scale.dev,
                                                 bias.dev, m1.dev, v1.dev, eps);
    std::printf("S call0 %d\n", static_cast<int>(st));
    pending();
    download(y, stream);
    print(y, "out0");
    printGaps(y);
  } else {
    // dx, dscale, dbias with priors blended by beta; saved statistics from a training call.
    Tensor dx = make("dx", dt, xd, layout), ds = param("dscale"), db = param("dbias");
    fill(dx);
    fill(ds);
    fill(db);
    print(dx, "dx_prior");
    print(ds, "dscale_prior");
    print(db, "dbias_prior");
    for (Tensor* t : {&dx, &ds, &db}) upload(*t);
    cudnnTensorDescriptor_t dxDesc = tensorDesc(dx, layout);
    const bool saved = iarg("saved", 1) != 0;
    Tensor scratch = make("scratch", dt, xd, layout);
    holdInputs();
    if (saved) {
      DNN_CHECK(cudnnBatchNormalizationForwardTraining(
          handle, mode, sc.ptr(dt, 0), sc.ptr(dt, 1), xDesc, x.dev, xDesc, scratch.dev, pDesc,
          scale.dev, bias.dev, factor, nullptr, nullptr, eps, m2.dev, v2.dev));
    }
    const Scalars sp = scalars(darg("alphap", alpha), darg("betap", beta));
    if (ex)
      st = cudnnBatchNormalizationBackwardEx(
          handle, mode, CUDNN_BATCHNORM_OPS_BN, sc.ptr(dt, 0), sc.ptr(dt, 1), sp.ptr(dt, 0),
          sp.ptr(dt, 1), xDesc, x.dev, nullptr, nullptr, yDesc, y.dev, nullptr, nullptr, dxDesc,
          dx.dev, pDesc, scale.dev, bias.dev, ds.dev, db.dev, eps, saved ? m2.dev : nullptr,
          saved ? v2.dev : nullptr, nullptr, nullptr, 0, nullptr, 0);
    else
      st = cudnnBatchNormalizationBackward(handle, mode, sc.ptr(dt, 0), sc.ptr(dt, 1),
                                           sp.ptr(dt, 0), sp.ptr(dt, 1), xDesc, x.dev, yDesc,
                                           y.dev, dxDesc, dx.dev, pDesc, scale.dev, ds.dev,
                                           db.dev, eps, saved ? m2.dev : nullptr,
                                           saved ? v2.dev : nullptr);
    std::printf("S call0 %d\n", static_cast<int>(st));
    pending();
    for (Tensor* t : {&dx, &ds, &db}) download(*t, stream);
    print(dx, "out0");
    printGaps(dx);
    print(ds, "dscale");
    print(db, "dbias");
  }
  DNN_CHECK(cudnnDestroy(handle));
  return 0;
}

// --- host pointers, bad parameters, getters ------------------------------------------------

struct Setup {
  cudnnHandle_t handle;
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  void *dx, *dw, *dy;
};

// x 1x2x4x4, w 3x2x3x3, y 1x3x2x2 (f32, cross-correlation, no padding).
Setup setup() {
  Setup s;
  DNN_CHECK(cudnnCreate(&s.handle));
  DNN_CHECK(cudnnCreateTensorDescriptor(&s.x));
  DNN_CHECK(cudnnCreateTensorDescriptor(&s.y));
  DNN_CHECK(cudnnCreateFilterDescriptor(&s.w));
  DNN_CHECK(cudnnCreateConvolutionDescriptor(&s.conv));
  DNN_CHECK(cudnnSetTensor4dDescriptor(s.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 2, 4, 4));
  DNN_CHECK(cudnnSetTensor4dDescriptor(s.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 3, 2, 2));
  DNN_CHECK(cudnnSetFilter4dDescriptor(s.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 3, 2, 3, 3));
  DNN_CHECK(cudnnSetConvolution2dDescriptor(s.conv, 0, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT));
  CUDA_CHECK(cudaMalloc(&s.dx, 32 * 4));
  CUDA_CHECK(cudaMalloc(&s.dw, 54 * 4));
  CUDA_CHECK(cudaMalloc(&s.dy, 12 * 4));
  CUDA_CHECK(cudaMemset(s.dx, 0, 32 * 4));
  CUDA_CHECK(cudaMemset(s.dw, 0, 54 * 4));
  return s;
}

int runHostPtr() {
  Setup s = setup();
  const float one = 1, zero = 0;
  std::vector<float> hostX(32, 1.0f);
  cudnnStatus_t st = cudnnConvolutionForward(s.handle, &one, s.x, hostX.data(), s.w, s.dw,
                                             s.conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                             nullptr, 0, &zero, s.y, s.dy);
  std::printf("S host_x %d\n", static_cast<int>(st));
  std::vector<float> hostY(12, 0.0f);
  st = cudnnConvolutionForward(s.handle, &one, s.x, s.dx, s.w, s.dw, s.conv,
                               CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, s.y,
                               hostY.data());
  std::printf("S host_y %d\n", static_cast<int>(st));
  float* pinned = nullptr;
  CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&pinned), 32 * 4));
  for (int i = 0; i < 32; ++i) pinned[i] = 1.0f;
  std::vector<float> w(54, 0.5f);
  CUDA_CHECK(cudaMemcpy(s.dw, w.data(), w.size() * 4, cudaMemcpyHostToDevice));
  st = cudnnConvolutionForward(s.handle, &one, s.x, pinned, s.w, s.dw, s.conv,
                               CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, s.y,
                               s.dy);
  std::printf("S pinned_x %d\n", static_cast<int>(st));
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> out(12);
  CUDA_CHECK(cudaMemcpy(out.data(), s.dy, 48, cudaMemcpyDeviceToHost));
  std::printf("S pinned_y0 %d\n", static_cast<int>(out[0]));  // 2*9*0.5 = 9
  return 0;
}

int runBadParam() {
  Setup s = setup();
  const float one = 1, zero = 0;
  auto fwd = [&](cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w,
                 cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t y, int algo,
                 const void* alpha) {
    return cudnnConvolutionForward(s.handle, alpha, x, s.dx, w, s.dw, conv,
                                   static_cast<cudnnConvolutionFwdAlgo_t>(algo), nullptr, 0,
                                   &zero, y, s.dy);
  };
  auto report = [](const char* name, cudnnStatus_t st) {
    std::printf("S %s %d\n", name, static_cast<int>(st));
  };
  cudnnTensorDescriptor_t t;
  DNN_CHECK(cudnnCreateTensorDescriptor(&t));
  report("set4d_negative", cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, -2, 3, 3));
  report("set4d_bad_format", cudnnSetTensor4dDescriptor(t, static_cast<cudnnTensorFormat_t>(9), CUDNN_DATA_FLOAT, 1, 2, 3, 3));
  const int dims9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  report("setnd_9dims", cudnnSetTensorNdDescriptor(t, CUDNN_DATA_FLOAT, 9, dims9, dims9));
  cudnnConvolutionDescriptor_t conv;
  DNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
  report("conv_stride0", cudnnSetConvolution2dDescriptor(conv, 0, 0, 0, 1, 1, 1, CUDNN_CONVOLUTION, CUDNN_DATA_FLOAT));
  report("conv_pad_negative", cudnnSetConvolution2dDescriptor(conv, -1, 0, 1, 1, 1, 1, CUDNN_CONVOLUTION, CUDNN_DATA_FLOAT));
  report("groups0", cudnnSetConvolutionGroupCount(conv, 0));
  report("math_bad", cudnnSetConvolutionMathType(conv, static_cast<cudnnMathType_t>(7)));
  report("fwd_ok", fwd(s.x, s.w, s.conv, s.y, 0, &one));
  report("fwd_algo_bad", fwd(s.x, s.w, s.conv, s.y, 99, &one));
  report("fwd_alpha_null", fwd(s.x, s.w, s.conv, s.y, 0, nullptr));
  // Channel mismatch: filter with C = 3 against x with C = 2.
  cudnnFilterDescriptor_t w3;
  DNN_CHECK(cudnnCreateFilterDescriptor(&w3));
  DNN_CHECK(cudnnSetFilter4dDescriptor(w3, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 3, 3, 3, 3));
  report("fwd_channels", fwd(s.x, w3, s.conv, s.y, 0, &one));
  // Output spatial size wrong (1x3x3x3 instead of 1x3x2x2).
  cudnnTensorDescriptor_t y3;
  DNN_CHECK(cudnnCreateTensorDescriptor(&y3));
  DNN_CHECK(cudnnSetTensor4dDescriptor(y3, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 3, 3, 3));
  report("fwd_out_dims", fwd(s.x, s.w, s.conv, y3, 0, &one));
  // f32 data with HALF compute.
  cudnnConvolutionDescriptor_t half;
  DNN_CHECK(cudnnCreateConvolutionDescriptor(&half));
  DNN_CHECK(cudnnSetConvolution2dDescriptor(half, 0, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_HALF));
  report("fwd_compute_half", fwd(s.x, s.w, half, s.y, 0, &one));
  // Mixed data types.
  cudnnTensorDescriptor_t yd;
  DNN_CHECK(cudnnCreateTensorDescriptor(&yd));
  DNN_CHECK(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_DOUBLE, 1, 3, 2, 2));
  report("fwd_mixed_types", fwd(s.x, s.w, s.conv, yd, 0, &one));
  // Filter larger than the padded input.
  cudnnFilterDescriptor_t big;
  DNN_CHECK(cudnnCreateFilterDescriptor(&big));
  DNN_CHECK(cudnnSetFilter4dDescriptor(big, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 3, 2, 5, 5));
  int on, oc, oh, ow;
  report("outdim_filter_too_big", cudnnGetConvolution2dForwardOutputDim(s.conv, s.x, big, &on, &oc, &oh, &ow));
  // Bias-activation: IDENTITY needs IMPLICIT_PRECOMP_GEMM; SIGMOID is not supported.
  cudnnActivationDescriptor_t act;
  DNN_CHECK(cudnnCreateActivationDescriptor(&act));
  cudnnTensorDescriptor_t b;
  DNN_CHECK(cudnnCreateTensorDescriptor(&b));
  DNN_CHECK(cudnnSetTensor4dDescriptor(b, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 3, 1, 1));
  void* dbias;
  CUDA_CHECK(cudaMalloc(&dbias, 12));
  auto biasAct = [&](cudnnActivationMode_t m, int algo) {
    DNN_CHECK(cudnnSetActivationDescriptor(act, m, CUDNN_NOT_PROPAGATE_NAN, 0.0));
    return cudnnConvolutionBiasActivationForward(
        s.handle, &one, s.x, s.dx, s.w, s.dw, s.conv, static_cast<cudnnConvolutionFwdAlgo_t>(algo),
        nullptr, 0, &zero, s.y, s.dy, b, dbias, act, s.y, s.dy);
  };
  report("biasact_relu_algo0", biasAct(CUDNN_ACTIVATION_RELU, 0));
  report("biasact_identity_algo0", biasAct(CUDNN_ACTIVATION_IDENTITY, 0));
  report("biasact_identity_algo1", biasAct(CUDNN_ACTIVATION_IDENTITY, 1));
  report("biasact_sigmoid", biasAct(CUDNN_ACTIVATION_SIGMOID, 1));
  // Batch norm: negative epsilon, a bad mode.
  cudnnTensorDescriptor_t p;
  DNN_CHECK(cudnnCreateTensorDescriptor(&p));
  report("bn_derive_bad_mode", cudnnDeriveBNTensorDescriptor(p, s.x, static_cast<cudnnBatchNormMode_t>(5)));
  DNN_CHECK(cudnnDeriveBNTensorDescriptor(p, s.x, CUDNN_BATCHNORM_SPATIAL));
  void* prm;
  CUDA_CHECK(cudaMalloc(&prm, 64));
  report("bn_eps_negative", cudnnBatchNormalizationForwardInference(
      s.handle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, s.x, s.dx, s.x, s.dx, p, prm, prm, prm, prm, -1.0));
  report("bn_infer_ok", cudnnBatchNormalizationForwardInference(
      s.handle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, s.x, s.dx, s.x, s.dx, p, prm, prm, prm, prm, 1e-5));
  report("bn_save_half_null", cudnnBatchNormalizationForwardTraining(
      s.handle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, s.x, s.dx, s.x, s.dx, p, prm, prm, 0.1, nullptr, nullptr, 1e-5, prm, nullptr));
  report("handle_null", cudnnSetStream(nullptr, nullptr));
  std::printf("S error_string_%s 0\n", cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM));
  CUDA_CHECK(cudaDeviceSynchronize());
  return 0;
}

int runDescs() {
  std::printf("S version %zu\n", cudnnGetVersion());
  cudnnTensorDescriptor_t t;
  DNN_CHECK(cudnnCreateTensorDescriptor(&t));
  DNN_CHECK(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, 2, 3, 4, 5));
  cudnnDataType_t dt;
  int v[8];
  DNN_CHECK(cudnnGetTensor4dDescriptor(t, &dt, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]));
  std::printf("S nhwc4d %d %d,%d,%d,%d %d,%d,%d,%d\n", dt, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
  size_t bytes;
  DNN_CHECK(cudnnGetTensorSizeInBytes(t, &bytes));
  std::printf("S nhwc4d_bytes %zu\n", bytes);
  const int d5[5] = {2, 3, 4, 5, 6};
  DNN_CHECK(cudnnSetTensorNdDescriptorEx(t, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, 5, d5));
  int nb, dims[8], str[8];
  DNN_CHECK(cudnnGetTensorNdDescriptor(t, 8, &dt, &nb, dims, str));
  std::printf("S ndhwc %d %d %d,%d,%d,%d,%d %d,%d,%d,%d,%d\n", dt, nb, dims[0], dims[1], dims[2],
              dims[3], dims[4], str[0], str[1], str[2], str[3], str[4]);
  const int sx[4] = {100, 20, 5, 1}, dx[4] = {2, 3, 4, 4};
  DNN_CHECK(cudnnSetTensorNdDescriptor(t, CUDNN_DATA_DOUBLE, 4, dx, sx));
  DNN_CHECK(cudnnGetTensorSizeInBytes(t, &bytes));
  std::printf("S strided_bytes %zu\n", bytes);  // (1*100 + 2*20 + 3*5 + 3 + 1) * 8
  cudnnFilterDescriptor_t f;
  DNN_CHECK(cudnnCreateFilterDescriptor(&f));
  DNN_CHECK(cudnnSetFilter4dDescriptor(f, CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_NHWC, 8, 3, 5, 7));
  cudnnTensorFormat_t fmt;
  DNN_CHECK(cudnnGetFilter4dDescriptor(f, &dt, &fmt, &v[0], &v[1], &v[2], &v[3]));
  std::printf("S filter4d %d %d %d,%d,%d,%d\n", dt, fmt, v[0], v[1], v[2], v[3]);
  const int f5[5] = {4, 2, 3, 3, 3};
  DNN_CHECK(cudnnSetFilterNdDescriptor(f, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 5, f5));
  DNN_CHECK(cudnnGetFilterNdDescriptor(f, 8, &dt, &fmt, &nb, dims));
  std::printf("S filternd %d %d %d %d,%d,%d,%d,%d\n", dt, fmt, nb, dims[0], dims[1], dims[2], dims[3], dims[4]);
  cudnnConvolutionDescriptor_t c;
  DNN_CHECK(cudnnCreateConvolutionDescriptor(&c));
  int g;
  cudnnMathType_t m;
  DNN_CHECK(cudnnGetConvolutionGroupCount(c, &g));
  DNN_CHECK(cudnnGetConvolutionMathType(c, &m));
  std::printf("S conv_defaults %d %d\n", g, m);
  DNN_CHECK(cudnnSetConvolution2dDescriptor(c, 1, 2, 3, 4, 5, 6, CUDNN_CONVOLUTION, CUDNN_DATA_HALF));
  cudnnConvolutionMode_t mode;
  DNN_CHECK(cudnnGetConvolution2dDescriptor(c, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &mode, &dt));
  std::printf("S conv2d %d,%d,%d,%d,%d,%d %d %d\n", v[0], v[1], v[2], v[3], v[4], v[5], mode, dt);
  const int pad[3] = {1, 0, 2}, st[3] = {1, 2, 1}, dl[3] = {2, 1, 1};
  DNN_CHECK(cudnnSetConvolutionNdDescriptor(c, 3, pad, st, dl, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  int len, p2[3], s2[3], d2[3];
  DNN_CHECK(cudnnGetConvolutionNdDescriptor(c, 3, &len, p2, s2, d2, &mode, &dt));
  std::printf("S convnd %d %d,%d,%d %d,%d,%d %d,%d,%d %d %d\n", len, p2[0], p2[1], p2[2], s2[0],
              s2[1], s2[2], d2[0], d2[1], d2[2], mode, dt);
  DNN_CHECK(cudnnSetConvolutionGroupCount(c, 2));
  DNN_CHECK(cudnnSetConvolutionMathType(c, CUDNN_FMA_MATH));
  DNN_CHECK(cudnnGetConvolutionGroupCount(c, &g));
  DNN_CHECK(cudnnGetConvolutionMathType(c, &m));
  std::printf("S conv_set %d %d\n", g, m);
  // Output dims of x 2x4x7x9x11 with w 4x2x3x3x3 under the Nd descriptor above.
  const int x5[5] = {2, 4, 7, 9, 11};
  DNN_CHECK(cudnnSetTensorNdDescriptorEx(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 5, x5));
  int o[5];
  DNN_CHECK(cudnnGetConvolutionNdForwardOutputDim(c, t, f, 5, o));
  std::printf("S outdim %d,%d,%d,%d,%d\n", o[0], o[1], o[2], o[3], o[4]);
  cudnnActivationDescriptor_t a;
  DNN_CHECK(cudnnCreateActivationDescriptor(&a));
  DNN_CHECK(cudnnSetActivationDescriptor(a, CUDNN_ACTIVATION_IDENTITY, CUDNN_PROPAGATE_NAN, 2.5));
  cudnnActivationMode_t am;
  cudnnNanPropagation_t np;
  double coef;
  DNN_CHECK(cudnnGetActivationDescriptor(a, &am, &np, &coef));
  std::printf("S activation %d %d %g\n", am, np, coef);
  cudnnHandle_t h;
  DNN_CHECK(cudnnCreate(&h));
  cudaStream_t s0, s1;
  CUDA_CHECK(cudaStreamCreate(&s0));
  DNN_CHECK(cudnnGetStream(h, &s1));
  std::printf("S default_stream %d\n", s1 == nullptr ? 1 : 0);
  DNN_CHECK(cudnnSetStream(h, s0));
  DNN_CHECK(cudnnGetStream(h, &s1));
  std::printf("S set_stream %d\n", s1 == s0 ? 1 : 0);
  DNN_CHECK(cudnnDestroy(h));
  return 0;
}

// --- the backend (graph) API -----------------------------------------------------------------
// Graphs are built the way cudnn-frontend builds them: tensors with UIDs, operations, an
// operation graph, heuristics filling engine configs, a plan, a variant pack, Execute. Unless
// destroy=0, every descriptor but the plan is destroyed once the plan is finalized (as the
// frontend does), so every run also checks that the plan holds what it needs.

std::vector<cudnnBackendDescriptor_t> g_scratch;  // destroyed after the plan is finalized

cudnnBackendDescriptor_t bcreate(cudnnBackendDescriptorType_t type) {
  cudnnBackendDescriptor_t d;
  DNN_CHECK(cudnnBackendCreateDescriptor(type, &d));
  g_scratch.push_back(d);
  return d;
}
void bset(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
          cudnnBackendAttributeType_t type, int64_t count, const void* values) {
  DNN_CHECK(cudnnBackendSetAttribute(d, name, type, count, values));
}
template <typename V>
void bset1(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
           cudnnBackendAttributeType_t type, V value) {
  bset(d, name, type, 1, &value);
}
void bdesc(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
           cudnnBackendDescriptor_t value) {
  bset(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value);
}
void destroyScratch() {
  for (cudnnBackendDescriptor_t d : g_scratch) DNN_CHECK(cudnnBackendDestroyDescriptor(d));
  g_scratch.clear();
}

std::vector<int64_t> packedStrides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size());
  int64_t acc = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    s[i] = acc;
    acc *= dims[i];
  }
  return s;
}

cudnnBackendDescriptor_t btensorSpec(cudnnDataType_t type, const std::vector<int64_t>& dims,
                                     const std::vector<int64_t>& strides, int64_t uid,
                                     bool isVirtual = false, bool byValue = false) {
  cudnnBackendDescriptor_t d = bcreate(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  bset1(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, type);
  bset(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, static_cast<int64_t>(dims.size()),
       dims.data());
  bset(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, static_cast<int64_t>(strides.size()),
       strides.data());
  bset1(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, uid);
  bset1(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, int64_t{16});
  if (isVirtual) bset1(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, true);
  if (byValue) bset1(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, true);
  DNN_CHECK(cudnnBackendFinalize(d));
  return d;
}

std::vector<int64_t> i64(const std::vector<int>& v) {
  return std::vector<int64_t>(v.begin(), v.end());
}

cudnnBackendDescriptor_t btensor(const Tensor& t, int64_t uid) {
  return btensorSpec(cudnnType(t.type), i64(t.dims), i64(t.strides), uid);
}

// A scalar passed by value (a host pointer in the variant pack).
cudnnBackendDescriptor_t bscalar(int nbDims, int64_t uid) {
  const std::vector<int64_t> ones(static_cast<size_t>(nbDims), 1);
  return btensorSpec(CUDNN_DATA_FLOAT, ones, ones, uid, false, true);
}

cudnnBackendDescriptor_t bpointwise(cudnnPointwiseMode_t mode, cudnnDataType_t prec) {
  cudnnBackendDescriptor_t d = bcreate(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  bset1(d, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, mode);
  bset1(d, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, prec);
  DNN_CHECK(cudnnBackendFinalize(d));
  return d;
}

cudnnBackendDescriptor_t bpointwiseOp(cudnnBackendDescriptor_t pw, cudnnBackendDescriptor_t x,
                                      cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y) {
  cudnnBackendDescriptor_t d = bcreate(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  bdesc(d, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
  bdesc(d, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
  if (b) bdesc(d, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
  bdesc(d, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
  DNN_CHECK(cudnnBackendFinalize(d));
  return d;
}

cudnnBackendDescriptor_t bopGraph(cudnnHandle_t handle,
                                  const std::vector<cudnnBackendDescriptor_t>& ops) {
  cudnnBackendDescriptor_t g = bcreate(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  bset(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
       static_cast<int64_t>(ops.size()), ops.data());
  bset1(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, handle);
  DNN_CHECK(cudnnBackendFinalize(g));
  return g;
}

std::string joined(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s.empty() ? "-" : s;
}

// The engines the heuristics return for a graph, in order, with their configurations.
std::vector<int64_t> heuristics(cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode,
                                std::vector<cudnnBackendDescriptor_t>* cfgs) {
  cudnnBackendDescriptor_t heur = bcreate(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  bdesc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  bset1(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, mode);
  DNN_CHECK(cudnnBackendFinalize(heur));
  int64_t count = 0;
  DNN_CHECK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
  cfgs->clear();
  for (int64_t i = 0; i < count; ++i) cfgs->push_back(bcreate(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
  int64_t got = 0;
  DNN_CHECK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfgs->data()));
  std::vector<int64_t> order;
  for (cudnnBackendDescriptor_t cfg : *cfgs) {
    cudnnBackendDescriptor_t engine = bcreate(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    int64_t n = 0, index = -1;
    DNN_CHECK(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine));
    DNN_CHECK(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                                       &n, &index));
    order.push_back(index);
  }
  return order;
}

std::vector<int64_t> engineNotes(cudnnBackendDescriptor_t cfg) {
  cudnnBackendDescriptor_t engine = bcreate(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  int64_t n = 0;
  DNN_CHECK(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine));
  DNN_CHECK(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                     CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n,
                                     nullptr));
  std::vector<cudnnBackendNumericalNote_t> notes(static_cast<size_t>(n));
  DNN_CHECK(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                     CUDNN_TYPE_NUMERICAL_NOTE, n, &n, notes.data()));
  return std::vector<int64_t>(notes.begin(), notes.end());
}

struct Plan {
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace = 0;
};

// Graph -> heuristics (heur=instant|a|fallback) -> the config of engine `engine` -> plan.
// Prints the heuristics' engine order, the chosen engine's notes and the workspace size.
Plan buildPlan(cudnnHandle_t handle, const std::vector<cudnnBackendDescriptor_t>& ops,
               int64_t engine) {
  cudnnBackendDescriptor_t graph = bopGraph(handle, ops);
  int64_t count = 0;
  DNN_CHECK(cudnnBackendGetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT,
                                     CUDNN_TYPE_INT64, 1, &count, &count));
  std::printf("S engine_count %lld\n", static_cast<long long>(count));
  const std::string h = arg("heur", "instant");
  const cudnnBackendHeurMode_t mode = h == "fallback" ? CUDNN_HEUR_MODE_FALLBACK
                                      : h == "a"      ? CUDNN_HEUR_MODE_A
                                                      : CUDNN_HEUR_MODE_INSTANT;
  std::vector<cudnnBackendDescriptor_t> cfgs;
  const std::vector<int64_t> order = heuristics(graph, mode, &cfgs);
  std::printf("S engines %s\n", joined(order).c_str());
  const auto it = std::find(order.begin(), order.end(), engine);
  if (it == order.end()) {
    std::fprintf(stderr, "engine %lld not offered\n", static_cast<long long>(engine));
    std::exit(5);
  }
  cudnnBackendDescriptor_t cfg = cfgs[static_cast<size_t>(it - order.begin())];
  std::printf("S notes %s\n", joined(engineNotes(cfg)).c_str());
  Plan p;
  DNN_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p.plan));
  bset1(p.plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, handle);
  bdesc(p.plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
  DNN_CHECK(cudnnBackendFinalize(p.plan));
  DNN_CHECK(cudnnBackendGetAttribute(p.plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                     CUDNN_TYPE_INT64, 1, nullptr, &p.workspace));
  std::printf("S graph_workspace %lld\n", static_cast<long long>(p.workspace));
  if (iarg("destroy", 1)) destroyScratch();
  return p;
}

cudnnBackendDescriptor_t variantPack(const std::vector<int64_t>& uids,
                                     const std::vector<void*>& ptrs, void* workspace) {
  cudnnBackendDescriptor_t pack;
  DNN_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack));
  bset(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
       static_cast<int64_t>(uids.size()), uids.data());
  bset(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
       static_cast<int64_t>(ptrs.size()), ptrs.data());
  bset1(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, workspace);
  DNN_CHECK(cudnnBackendFinalize(pack));
  return pack;
}

// How a graph is run: how=execute (cudnnBackendExecute), capture (Execute while the stream
// captures, then the graph launched), populate (cudnnBackendPopulateCudaGraph into a graph
// from cudaGraphCreate, then launched).
cudnnStatus_t runPlan(cudnnHandle_t handle, cudaStream_t stream, const Plan& p,
                      const std::vector<int64_t>& uids, const std::vector<void*>& ptrs,
                      const std::string& how = "execute") {
  void* ws = nullptr;
  if (p.workspace > 0) CUDA_CHECK(cudaMalloc(&ws, static_cast<size_t>(p.workspace)));
  cudnnBackendDescriptor_t pack = variantPack(uids, ptrs, ws);
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  if (how == "execute") {
    st = cudnnBackendExecute(handle, p.plan, pack);
  } else {
    cudaGraph_t graph = nullptr;
    if (how == "capture") {
      CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
      st = cudnnBackendExecute(handle, p.plan, pack);
      CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    } else {
      CUDA_CHECK(cudaGraphCreate(&graph, 0));
      st = cudnnBackendPopulateCudaGraph(handle, p.plan, pack, graph);
    }
    size_t nodes = 0;
    CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
    std::printf("S %s_nodes %zu\n", how.c_str(), nodes);
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphLaunch(exec, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
  }
  DNN_CHECK(cudnnBackendDestroyDescriptor(pack));
  return st;
}

int64_t uidOf(char c) { return static_cast<int64_t>(c); }

// op=gconv dir=fwd|bwdd|bwdf: one convolution as a graph, on engine `engine`, then the
// legacy call on the same inputs (math FMA for engine 0, DEFAULT otherwise; compute type
// lcompute, default compute) into the same prior output: T out0.. (graph), T legacy.
int runGraphConv() {
  const std::string dir = arg("dir", "fwd");
  const T dt = typeOf(arg("dtype", "f32"));
  const std::string layout = arg("layout", "nchw"), flayout = arg("flayout", "nchw");
  const int n = iarg("n", 2), c = iarg("c", 4), k = iarg("k", 6), g = iarg("groups", 1);
  const int d = iarg("d", 0), h = iarg("h", 5), w = iarg("w", 6);
  const int t = iarg("t", 1), r = iarg("r", 3), s = iarg("s", 3);
  const int64_t engine = iarg("engine", 0);
  const bool is3d = d > 0;
  const int sp = is3d ? 3 : 2;
  const std::vector<int> pad = listArg("pad", 0, sp), stride = listArg("stride", 1, sp),
                         dil = listArg("dil", 1, sp);
  const double alpha = darg("alpha", 1), beta = darg("beta", 0);
  const int calls = iarg("calls", 1);
  g_state ^= static_cast<uint64_t>(iarg("seed", 0)) * 0x2545f4914f6cdd1dull;

  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  cudnnHandle_t handle;
  DNN_CHECK(cudnnCreate(&handle));
  DNN_CHECK(cudnnSetStream(handle, stream));

  std::vector<int> xd = {n, c}, wd = {k, c / g};
  if (is3d) {
    xd.push_back(d);
    wd.push_back(t);
  }
  xd.insert(xd.end(), {h, w});
  wd.insert(wd.end(), {r, s});
  Tensor x = make("x", dt, xd, layout), wt = make("w", dt, wd, flayout);
  cudnnTensorDescriptor_t xDesc = tensorDesc(x, layout);
  cudnnFilterDescriptor_t wDesc = filterDesc(wt, flayout);
  cudnnConvolutionDescriptor_t conv;
  DNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
  const cudnnConvolutionMode_t mode =
      arg("mode", "xcorr") == "conv" ? CUDNN_CONVOLUTION : CUDNN_CROSS_CORRELATION;
  const cudnnDataType_t ct = computeType(arg("compute", ""), dt);
  const cudnnDataType_t lct = computeType(arg("lcompute", arg("compute", "")), dt);
  DNN_CHECK(
      cudnnSetConvolutionNdDescriptor(conv, sp, pad.data(), stride.data(), dil.data(), mode, lct));
  DNN_CHECK(cudnnSetConvolutionGroupCount(conv, g));
  DNN_CHECK(cudnnSetConvolutionMathType(conv, engine == 0 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH));
  std::vector<int> yd(static_cast<size_t>(sp + 2));
  DNN_CHECK(cudnnGetConvolutionNdForwardOutputDim(conv, xDesc, wDesc, sp + 2, yd.data()));
  Tensor y = make("y", dt, yd, layout);
  cudnnTensorDescriptor_t yDesc = tensorDesc(y, layout);

  Tensor* out = dir == "bwdd" ? &x : dir == "bwdf" ? &wt : &y;
  fill(x);
  fill(wt);
  fill(y);
  print(x, dir == "bwdd" ? "dx_prior" : "x");
  print(wt, dir == "bwdf" ? "dw_prior" : "w");
  print(y, dir == "fwd" ? "y_prior" : "dy");
  for (Tensor* in : {&x, &wt, &y}) upload(*in);

  // The graph: tensors x (UID 'x'), w ('w'), y ('y'), one convolution operation.
  cudnnBackendDescriptor_t bx = btensor(x, uidOf('x')), bw = btensor(wt, uidOf('w')),
                           by = btensor(y, uidOf('y'));
  cudnnBackendDescriptor_t cd = bcreate(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const int64_t spatial = sp;
  bset1(cd, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, ct);
  bset1(cd, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, mode);
  bset1(cd, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, spatial);
  bset(cd, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, sp, i64(dil).data());
  bset(cd, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, sp, i64(stride).data());
  bset(cd, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, sp, i64(pad).data());
  bset(cd, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, sp, i64(pad).data());
  DNN_CHECK(cudnnBackendFinalize(cd));
  cudnnBackendDescriptor_t op;
  const bool dbl = arg("scalars", dt == T::F64 ? "double" : "float") == "double";
  auto scalarAttr = [&](cudnnBackendAttributeName_t name, double v) {
    if (dbl)
      bset1(op, name, CUDNN_TYPE_DOUBLE, v);
    else
      bset1(op, name, CUDNN_TYPE_FLOAT, static_cast<float>(v));
  };
  if (dir == "fwd") {
    op = bcreate(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
    bdesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, bx);
    bdesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, bw);
    bdesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, by);
    bdesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, cd);
    scalarAttr(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, alpha);
    scalarAttr(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, beta);
  } else if (dir == "bwdd") {
    op = bcreate(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR);
    bdesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, bx);
    bdesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, bw);
    bdesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, by);
    bdesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, cd);
    scalarAttr(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, alpha);
    scalarAttr(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, beta);
  } else {
    op = bcreate(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR);
    bdesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, bx);
    bdesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, bw);
    bdesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, by);
    bdesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, cd);
    scalarAttr(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, alpha);
    scalarAttr(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, beta);
  }
  DNN_CHECK(cudnnBackendFinalize(op));
  const Plan plan = buildPlan(handle, {op}, engine);
  const std::vector<int64_t> uids = {uidOf('x'), uidOf('w'), uidOf('y')};
  const std::vector<void*> ptrs = {x.dev, wt.dev, y.dev};

  const std::vector<unsigned char> priorBytes = out->host;
  auto reset = [&] {
    out->host = priorBytes;
    upload(*out);
  };
  // ordered=1: the inputs arrive by cudaMemcpyAsync behind a held stream (runConv).
  const bool ordered = iarg("ordered", 0) != 0;
  std::vector<Tensor*> inputs;
  for (Tensor* in : {&x, &wt, &y})
    if (in != out) inputs.push_back(in);
  for (int call = 0; call < calls; ++call) {
    reset();
    if (ordered) {
      for (Tensor* in : inputs) CUDA_CHECK(cudaMemset(in->dev, 0, in->host.size()));
      holdStream(stream);
      for (Tensor* in : inputs)
        CUDA_CHECK(cudaMemcpyAsync(in->dev, in->host.data(), in->host.size(),
                                   cudaMemcpyHostToDevice, stream));
    }
    const cudnnStatus_t st = runPlan(handle, stream, plan, uids, ptrs);
    std::printf("S call%d %d\n", call, static_cast<int>(st));
    if (ordered) {
      std::printf("S pending%d %d\n", call, cudaStreamQuery(stream) == cudaErrorNotReady);
      release();
    }
    download(*out, stream);
    print(*out, "out" + std::to_string(call));
    printGaps(*out);
  }
  for (const char* how : {"capture", "populate"}) {
    if (!iarg(how, 0)) continue;
    reset();
    const cudnnStatus_t st = runPlan(handle, stream, plan, uids, ptrs, how);
    std::printf("S %s %d\n", how, static_cast<int>(st));
    download(*out, stream);
    print(*out, std::string("out_") + how);
  }
  // The legacy call on the same inputs and prior output.
  reset();
  const Scalars sc = scalars(alpha, beta);
  cudnnStatus_t st;
  if (dir == "fwd")
    st = cudnnConvolutionForward(handle, sc.ptr(dt, 0), xDesc, x.dev, wDesc, wt.dev, conv,
                                 CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0,
                                 sc.ptr(dt, 1), yDesc, y.dev);
  else if (dir == "bwdd")
    st = cudnnConvolutionBackwardData(handle, sc.ptr(dt, 0), wDesc, wt.dev, yDesc, y.dev, conv,
                                      CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, nullptr, 0, sc.ptr(dt, 1),
                                      xDesc, x.dev);
  else
    st = cudnnConvolutionBackwardFilter(handle, sc.ptr(dt, 0), xDesc, x.dev, yDesc, y.dev, conv,
                                        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, nullptr, 0,
                                        sc.ptr(dt, 1), wDesc, wt.dev);
  std::printf("S legacy %d\n", static_cast<int>(st));
  download(*out, stream);
  print(*out, "legacy");
  DNN_CHECK(cudnnBackendDestroyDescriptor(plan.plan));
  DNN_CHECK(cudnnDestroy(handle));
  return 0;
}

// op=gfused: y = relu(conv(x, w) + bias) as three ops joined by two virtual tensors (FLOAT, or
// DOUBLE for f64 data), and the legacy cudnnConvolutionBiasActivationForward (RELU, alpha2 0)
// on the same inputs: T out0 (graph), T legacy.
int runGraphFused() {
  const T dt = typeOf(arg("dtype", "f32"));
  const std::string layout = arg("layout", "nchw");
  const int n = iarg("n", 2), c = iarg("c", 3), k = iarg("k", 4), h = iarg("h", 5),
            w = iarg("w", 5);
  const int pad = iarg("pad", 1);
  const int64_t engine = iarg("engine", 0);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  cudnnHandle_t handle;
  DNN_CHECK(cudnnCreate(&handle));
  DNN_CHECK(cudnnSetStream(handle, stream));
  Tensor x = make("x", dt, {n, c, h, w}, layout), wt = make("w", dt, {k, c, 3, 3}, "nchw");
  Tensor y = make("y", dt, {n, k, h + 2 * pad - 2, w + 2 * pad - 2}, layout);
  Tensor bias = make("bias", dt, {1, k, 1, 1}, "nchw");
  fill(x);
  fill(wt);
  fill(bias);
  fillConst(y, 0);
  print(x, "x");
  print(wt, "w");
  print(bias, "bias");
  for (Tensor* t : {&x, &wt, &y, &bias}) upload(*t);
  const cudnnDataType_t inter = dt == T::F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t bx = btensor(x, uidOf('x')), bw = btensor(wt, uidOf('w')),
                           by = btensor(y, uidOf('y')), bb = btensor(bias, uidOf('b'));
  const std::vector<int64_t> yd = i64(y.dims);
  cudnnBackendDescriptor_t t1 = btensorSpec(inter, yd, i64(y.strides), 1001, true);
  cudnnBackendDescriptor_t t2 = btensorSpec(inter, yd, i64(y.strides), 1002, true);
  cudnnBackendDescriptor_t cd = bcreate(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const std::vector<int64_t> ones = {1, 1}, pads = {pad, pad};
  bset1(cd, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, inter);
  bset1(cd, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, CUDNN_CROSS_CORRELATION);
  bset1(cd, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, int64_t{2});
  bset(cd, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, ones.data());
  bset(cd, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, ones.data());
  bset(cd, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pads.data());
  bset(cd, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pads.data());
  DNN_CHECK(cudnnBackendFinalize(cd));
  cudnnBackendDescriptor_t conv = bcreate(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  bdesc(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, bx);
  bdesc(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, bw);
  bdesc(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, t1);
  bdesc(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, cd);
  bset1(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1.0f);
  bset1(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 0.0f);
  DNN_CHECK(cudnnBackendFinalize(conv));
  cudnnBackendDescriptor_t add = bpointwiseOp(bpointwise(CUDNN_POINTWISE_ADD, inter), t1, bb, t2);
  cudnnBackendDescriptor_t relu =
      bpointwiseOp(bpointwise(CUDNN_POINTWISE_RELU_FWD, inter), t2, nullptr, by);
  // Listed out of order: the graph orders them by their tensors.
  const Plan plan = buildPlan(handle, {relu, conv, add}, engine);
  const cudnnStatus_t st =
      runPlan(handle, stream, plan, {uidOf('x'), uidOf('w'), uidOf('b'), uidOf('y')},
              {x.dev, wt.dev, bias.dev, y.dev});
  std::printf("S call0 %d\n", static_cast<int>(st));
  download(y, stream);
  print(y, "out0");
  // Legacy: RELU with IMPLICIT_PRECOMP_GEMM, alpha2 0 (z unused).
  cudnnTensorDescriptor_t xDesc = tensorDesc(x, layout), yDesc = tensorDesc(y, layout),
                          bDesc = tensorDesc(bias, "nchw");
  cudnnFilterDescriptor_t wDesc = filterDesc(wt, "nchw");
  cudnnConvolutionDescriptor_t cdesc;
  DNN_CHECK(cudnnCreateConvolutionDescriptor(&cdesc));
  DNN_CHECK(
      cudnnSetConvolution2dDescriptor(cdesc, pad, pad, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, inter));
  DNN_CHECK(cudnnSetConvolutionMathType(cdesc, engine == 0 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH));
  cudnnActivationDescriptor_t act;
  DNN_CHECK(cudnnCreateActivationDescriptor(&act));
  DNN_CHECK(cudnnSetActivationDescriptor(act, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
  const Scalars sc = scalars(1, 0);
  fillConst(y, 0);
  upload(y);
  std::printf("S legacy %d\n",
              static_cast<int>(cudnnConvolutionBiasActivationForward(
                  handle, sc.ptr(dt, 0), xDesc, x.dev, wDesc, wt.dev, cdesc,
                  CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, nullptr, 0, sc.ptr(dt, 1),
                  yDesc, y.dev, bDesc, bias.dev, act, yDesc, y.dev)));
  download(y, stream);
  print(y, "legacy");
  DNN_CHECK(cudnnDestroy(handle));
  return 0;
}

// A tensor with explicit strides (graph tests).
Tensor makeStrided(const std::string& name, T type, const std::vector<int>& dims,
                   const std::vector<int>& strides) {
  Tensor t = make(name, type, dims, "nchw");
  t.strides = strides;
  size_t last = 0;
  for (size_t i = 0; i < dims.size(); ++i)
    last += static_cast<size_t>(dims[i] - 1) * static_cast<size_t>(strides[i]);
  t.extent = last + 1;
  t.host.assign(t.extent * sizeOf(type), kGapByte);
  CUDA_CHECK(cudaFree(t.dev));
  CUDA_CHECK(cudaMalloc(&t.dev, t.host.size()));
  return t;
}

// op=gmatmul: C[b] = A[b] x B[b or 0] (batch b, m, n, k; bbatch 1 broadcasts B; atrans=1
// stores A column-major), computed on engine `engine`: T a, T b, T out0.
int runGraphMatmul() {
  const T dt = typeOf(arg("dtype", "f32"));
  const int batch = iarg("batch", 3), m = iarg("m", 4), n = iarg("n", 5), k = iarg("k", 6);
  const int bb = iarg("bbatch", batch);
  const int64_t engine = iarg("engine", 0);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  cudnnHandle_t handle;
  DNN_CHECK(cudnnCreate(&handle));
  DNN_CHECK(cudnnSetStream(handle, stream));
  Tensor a = iarg("atrans", 0) ? makeStrided("a", dt, {batch, m, k}, {m * k, 1, m})
                               : makeStrided("a", dt, {batch, m, k}, {m * k, k, 1});
  Tensor b = makeStrided("b", dt, {bb, k, n}, {k * n, n, 1});
  const T ct = arg("ctype", "") == "f32" ? T::F32 : dt;
  Tensor cm = makeStrided("c", ct, {batch, m, n}, {m * n, n, 1});
  fill(a);
  fill(b);
  fillConst(cm, 0);
  print(a, "a");
  print(b, "b");
  for (Tensor* t : {&a, &b, &cm}) upload(*t);
  cudnnBackendDescriptor_t md = bcreate(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  bset1(md, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE,
        dt == T::F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT);
  DNN_CHECK(cudnnBackendFinalize(md));
  cudnnBackendDescriptor_t op = bcreate(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  bdesc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, btensor(a, uidOf('a')));
  bdesc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, btensor(b, uidOf('b')));
  bdesc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, btensor(cm, uidOf('c')));
  bdesc(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, md);
  DNN_CHECK(cudnnBackendFinalize(op));
  const Plan plan = buildPlan(handle, {op}, engine);
  const cudnnStatus_t st =
      runPlan(handle, stream, plan, {uidOf('a'), uidOf('b'), uidOf('c')}, {a.dev, b.dev, cm.dev});
  std::printf("S call0 %d\n", static_cast<int>(st));
  download(cm, stream);
  print(cm, "out0");
  printGaps(cm);
  DNN_CHECK(cudnnDestroy(handle));
  return 0;
}

// op=gnorm kind=ln|bn phase=train|infer|bwd: one norm operation (statistics and parameters
// FLOAT, epsilon and the running-average factor by value): prints the inputs and outputs.
int runGraphNorm() {
  const T dt = typeOf(arg("dtype", "f32"));
  const std::string kind = arg("kind", "ln"), phase = arg("phase", "train");
  const bool bn = kind == "bn";
  const int n = iarg("n", 3), c = iarg("c", 4), h = iarg("h", 3), w = iarg("w", 5);
  const float eps = static_cast<float>(darg("eps", 1e-5)),
              factor = static_cast<float>(darg("factor", 0.1));
  const std::string layout = arg("layout", "nchw");
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  cudnnHandle_t handle;
  DNN_CHECK(cudnnCreate(&handle));
  DNN_CHECK(cudnnSetStream(handle, stream));
  const std::vector<int> xd = {n, c, h, w};
  const std::vector<int> pd = bn ? std::vector<int>{1, c, 1, 1} : std::vector<int>{1, c, h, w};
  const std::vector<int> sd = bn ? std::vector<int>{1, c, 1, 1} : std::vector<int>{n, 1, 1, 1};
  Tensor x = make("x", dt, xd, layout), y = make("y", dt, xd, layout);
  Tensor scale = make("scale", T::F32, pd, "nchw"), bias = make("bias", T::F32, pd, "nchw");
  Tensor mean = make("mean", T::F32, sd, "nchw"), inv = make("inv", T::F32, sd, "nchw");
  Tensor rm = make("rm", T::F32, sd, "nchw"), rv = make("rv", T::F32, sd, "nchw");
  Tensor rmo = make("rmo", T::F32, sd, "nchw"), rvo = make("rvo", T::F32, sd, "nchw");
  Tensor dy = make("dy", dt, xd, layout), ds = make("ds", T::F32, pd, "nchw"),
         db = make("db", T::F32, pd, "nchw");
  fill(x, 0.25);
  fill(scale, 1.0);
  fill(bias);
  fill(dy);
  fill(rm);
  fill(rv, 1.5);
  fillConst(y, 0);
  if (phase == "infer" && bn) {
    fill(mean);
    fill(inv, 1.5);
  } else if (phase == "bwd") {  // saved statistics of x, as a training pass stores them
    const size_t groups = mean.count(), per = x.count() / groups;
    std::vector<double> s(groups, 0), q(groups, 0);
    auto group = [&](size_t l) {
      return bn ? (l / static_cast<size_t>(h * w)) % static_cast<size_t>(c) : l / per;
    };
    for (size_t l = 0; l < x.count(); ++l) s[group(l)] += x.get(l);
    for (size_t l = 0; l < x.count(); ++l) {
      const double d0 = x.get(l) - s[group(l)] / static_cast<double>(per);
      q[group(l)] += d0 * d0;
    }
    for (size_t j = 0; j < groups; ++j) {
      mean.set(j, s[j] / static_cast<double>(per));
      inv.set(j, 1 / std::sqrt(q[j] / static_cast<double>(per) + eps));
    }
  }
  print(x, "x");
  print(scale, "scale");
  print(bias, "bias");
  print(dy, "dy");
  print(rm, "rm");
  print(rv, "rv");
  print(mean, "mean_in");
  print(inv, "inv_in");
  for (Tensor* t : {&x, &y, &scale, &bias, &mean, &inv, &rm, &rv, &rmo, &rvo, &dy, &ds, &db})
    upload(*t);
  std::vector<int64_t> uids;
  std::vector<void*> ptrs;
  float epsHost = eps, factorHost = factor;
  auto tensor = [&](const Tensor& t, char uid) {
    uids.push_back(uidOf(uid));
    ptrs.push_back(t.dev);
    return btensor(t, uidOf(uid));
  };
  const cudnnBackendNormMode_t mode = bn ? CUDNN_BATCH_NORM : CUDNN_LAYER_NORM;
  cudnnBackendDescriptor_t op;
  if (phase != "bwd") {
    op = bcreate(CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR);
    const cudnnBackendNormFwdPhase_t ph =
        phase == "train" ? CUDNN_NORM_FWD_TRAINING : CUDNN_NORM_FWD_INFERENCE;
    bset1(op, CUDNN_ATTR_OPERATION_NORM_FWD_MODE, CUDNN_TYPE_NORM_MODE, mode);
    bset1(op, CUDNN_ATTR_OPERATION_NORM_FWD_PHASE, CUDNN_TYPE_NORM_FWD_PHASE, ph);
    bdesc(op, CUDNN_ATTR_OPERATION_NORM_FWD_XDESC, tensor(x, 'x'));
    bdesc(op, CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC, tensor(scale, 's'));
    bdesc(op, CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC, tensor(bias, 'b'));
    bdesc(op, CUDNN_ATTR_OPERATION_NORM_FWD_YDESC, tensor(y, 'y'));
    if (phase == "train" || !bn) {
      bdesc(op, CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC, bscalar(4, uidOf('e')));
      uids.push_back(uidOf('e'));
      ptrs.push_back(&epsHost);
    }
    if (phase == "train" || bn) {
      bdesc(op, CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC, tensor(mean, 'm'));
      bdesc(op, CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC, tensor(inv, 'v'));
    }
    if (phase == "train" && bn) {
      bdesc(op, CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC, bscalar(4, uidOf('f')));
      uids.push_back(uidOf('f'));
      ptrs.push_back(&factorHost);
      bdesc(op, CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC, tensor(rm, '1'));
      bdesc(op, CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC, tensor(rv, '2'));
      bdesc(op, CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC, tensor(rmo, '3'));
      bdesc(op, CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC, tensor(rvo, '4'));
    }
  } else {
    op = bcreate(CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR);
    bset1(op, CUDNN_ATTR_OPERATION_NORM_BWD_MODE, CUDNN_TYPE_NORM_MODE, mode);
    bdesc(op, CUDNN_ATTR_OPERATION_NORM_BWD_XDESC, tensor(x, 'x'));
    bdesc(op, CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC, tensor(dy, 'd'));
    bdesc(op, CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC, tensor(scale, 's'));
    bdesc(op, CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC, tensor(mean, 'm'));
    bdesc(op, CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC, tensor(inv, 'v'));
    bdesc(op, CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC, tensor(y, 'y'));
    bdesc(op, CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC, tensor(ds, 'S'));
    bdesc(op, CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC, tensor(db, 'B'));
  }
  DNN_CHECK(cudnnBackendFinalize(op));
  const Plan plan = buildPlan(handle, {op}, 0);
  epsHost = eps;  // by-value scalars are read at Execute
  const cudnnStatus_t st = runPlan(handle, stream, plan, uids, ptrs);
  std::printf("S call0 %d\n", static_cast<int>(st));
  for (Tensor* t : {&y, &mean, &inv, &rmo, &rvo, &ds, &db}) download(*t, stream);
  print(y, phase == "bwd" ? "dx" : "out0");
  printGaps(y);
  if (phase == "train") {
    print(mean, "mean");
    print(inv, "inv");
  }
  if (phase == "train" && bn) {
    print(rmo, "running_mean");
    print(rvo, "running_var");
  }
  if (phase == "bwd") {
    print(ds, "dscale");
    print(db, "dbias");
  }
  DNN_CHECK(cudnnDestroy(handle));
  return 0;
}

// op=gsdpa: one SDPA forward, q [b,h,sq,d], k [b,hk,skv,d], v [b,hv,skv,dv] and o [b,h,sq,dv]
// of dtype in `layout`, stats [b,h,sq,1] FLOAT (stats=1), the scale (default 1/sqrt(d)) a
// FLOAT by value, on engine `engine`: S sdpa_finalize, then T q, k, v, out0 (o), stats.
// extra=mask|pagek|pagev|seqq|seqkv also sets that operand (an INT32 tensor); an operation
// that does not finalize is not run.
int runGraphSdpa() {
  const T dt = typeOf(arg("dtype", "f16"));
  const int b = iarg("b", 2), h = iarg("h", 4), hk = iarg("hk", h), hv = iarg("hv", hk);
  const int sq = iarg("sq", 5), skv = iarg("skv", 7), d = iarg("d", 8), dv = iarg("dv", d);
  float scale = static_cast<float>(darg("scale", 1 / std::sqrt(static_cast<double>(d))));
  const std::string layout = arg("layout", "nchw"), extra = arg("extra", "");
  const bool withStats = iarg("stats", 1) != 0;
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  cudnnHandle_t handle;
  DNN_CHECK(cudnnCreate(&handle));
  DNN_CHECK(cudnnSetStream(handle, stream));
  Tensor q = make("q", dt, {b, h, sq, d}, layout), k = make("k", dt, {b, hk, skv, d}, layout);
  Tensor v = make("v", dt, {b, hv, skv, dv}, layout), o = make("o", dt, {b, h, sq, dv}, layout);
  Tensor stats = make("stats", T::F32, {b, h, sq, 1}, "nchw");
  fill(q);
  fill(k);
  fill(v);
  fillConst(o, 0);
  fillConst(stats, 0);
  print(q, "q");
  print(k, "k");
  print(v, "v");
  for (Tensor* t : {&q, &k, &v, &o, &stats}) upload(*t);
  std::vector<int64_t> uids = {uidOf('q'), uidOf('k'), uidOf('v'), uidOf('o'), uidOf('a')};
  std::vector<void*> ptrs = {q.dev, k.dev, v.dev, o.dev, &scale};
  cudnnBackendDescriptor_t op = bcreate(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR);
  bdesc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, btensor(q, uidOf('q')));
  bdesc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, btensor(k, uidOf('k')));
  bdesc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, btensor(v, uidOf('v')));
  bdesc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, btensor(o, uidOf('o')));
  bdesc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, bscalar(4, uidOf('a')));
  if (withStats) {
    bdesc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, btensor(stats, uidOf('s')));
    uids.push_back(uidOf('s'));
    ptrs.push_back(stats.dev);
  }
  const std::map<std::string, cudnnBackendAttributeName_t> extras = {
      {"mask", CUDNN_ATTR_OPERATION_SDPA_FWD_BLOCK_MASK_DESC},
      {"pagek", CUDNN_ATTR_OPERATION_SDPA_FWD_PAGE_TABLE_KDESC},
      {"pagev", CUDNN_ATTR_OPERATION_SDPA_FWD_PAGE_TABLE_VDESC},
      {"seqq", CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_QDESC},
      {"seqkv", CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_KVDESC}};
  if (extras.count(extra))
    bdesc(op, extras.at(extra),
          btensorSpec(CUDNN_DATA_INT32, {b, 1, 1, 1}, {1, 1, 1, 1}, uidOf('x')));
  const cudnnStatus_t fin = cudnnBackendFinalize(op);
  std::printf("S sdpa_finalize %d\n", static_cast<int>(fin));
  if (fin == CUDNN_STATUS_SUCCESS) {
    const Plan plan = buildPlan(handle, {op}, iarg("engine", 0));
    const cudnnStatus_t st = runPlan(handle, stream, plan, uids, ptrs);
    std::printf("S call0 %d\n", static_cast<int>(st));
    download(o, stream);
    download(stats, stream);
    print(o, "out0");
    printGaps(o);
    if (withStats) print(stats, "stats");
  }
  destroyScratch();
  DNN_CHECK(cudnnDestroy(handle));
  return 0;
}

// op=gapi: statuses and getters of the backend API: S <name> <status or value>.
int runGraphApi() {
  auto report = [](const char* name, cudnnStatus_t st) {
    std::printf("S %s %d\n", name, static_cast<int>(st));
  };
  cudnnHandle_t handle;
  DNN_CHECK(cudnnCreate(&handle));
  cudnnBackendDescriptor_t d = nullptr;
  report("create_unknown",
         cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR, &d));
  report("create_null", cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, nullptr));
  // A tensor, attribute by attribute.
  cudnnBackendDescriptor_t t;
  DNN_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t));
  report("initialize", cudnnBackendInitialize(t));
  const int32_t i32 = 5;
  const int64_t two[2] = {5, 6}, dims[4] = {1, 2, 3, 4}, strides[4] = {24, 12, 4, 1}, uid = 77,
                align = 16;
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  report("set_wrong_type",
         cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT32, 1, &i32));
  report("set_wrong_count",
         cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 2, two));
  report("set_null",
         cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, nullptr));
  report("set_foreign_attr", cudnnBackendSetAttribute(t, CUDNN_ATTR_CONVOLUTION_COMP_TYPE,
                                                      CUDNN_TYPE_DATA_TYPE, 1, &f32));
  int64_t n = -1, got[4] = {0, 0, 0, 0};
  report("get_before_finalize",
         cudnnBackendGetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &n, got));
  report("finalize_incomplete", cudnnBackendFinalize(t));
  bset1(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, f32);
  bset(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
  bset(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
  bset1(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, uid);
  bset1(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, align);
  report("finalize_ok", cudnnBackendFinalize(t));
  report("finalize_twice", cudnnBackendFinalize(t));
  report("set_after_finalize",
         cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  DNN_CHECK(
      cudnnBackendGetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 0, &n, nullptr));
  std::printf("S dims_count %lld\n", static_cast<long long>(n));
  DNN_CHECK(
      cudnnBackendGetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 2, &n, got));
  std::printf("S dims_partial %lld %lld,%lld,%lld\n", static_cast<long long>(n),
              static_cast<long long>(got[0]), static_cast<long long>(got[1]),
              static_cast<long long>(got[2]));
  int64_t uidOut = 0;
  DNN_CHECK(cudnnBackendGetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, nullptr,
                                     &uidOut));
  std::printf("S uid %lld\n", static_cast<long long>(uidOut));
  report("get_wrong_type",
         cudnnBackendGetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_FLOAT, 1, &n, got));
  report("get_null", cudnnBackendGetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1,
                                              nullptr, nullptr));
  DNN_CHECK(cudnnBackendDestroyDescriptor(t));
  report("destroy_twice", cudnnBackendDestroyDescriptor(t));
  report("use_destroyed",
         cudnnBackendGetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &n, got));

  // A convolution: x 1x4x5x5, w 4x4x3x3, y 1x4x3x3, of a data type.
  auto convGraph = [&](cudnnDataType_t type, int yh, cudnnBackendDescriptor_t* opOut) {
    const std::vector<int64_t> xd = {1, 4, 5, 5}, wd = {4, 4, 3, 3}, yd = {1, 4, yh, 3};
    cudnnBackendDescriptor_t bx = btensorSpec(type, xd, packedStrides(xd), uidOf('x'));
    cudnnBackendDescriptor_t bw = btensorSpec(type, wd, packedStrides(wd), uidOf('w'));
    cudnnBackendDescriptor_t by = btensorSpec(type, yd, packedStrides(yd), uidOf('y'));
    cudnnBackendDescriptor_t cd = bcreate(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    const std::vector<int64_t> ones = {1, 1}, zeros = {0, 0};
    bset1(cd, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
    bset1(cd, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE,
          CUDNN_CROSS_CORRELATION);
    bset1(cd, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, int64_t{2});
    bset(cd, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, ones.data());
    bset(cd, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, ones.data());
    bset(cd, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, zeros.data());
    bset(cd, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, zeros.data());
    DNN_CHECK(cudnnBackendFinalize(cd));
    cudnnBackendDescriptor_t op = bcreate(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
    bdesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, bx);
    bdesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, bw);
    bdesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, by);
    bdesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, cd);
    bset1(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1.0f);
    bset1(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 0.0f);
    *opOut = op;
    return cudnnBackendFinalize(op);
  };
  cudnnBackendDescriptor_t op16, op32, bad;
  report("conv_bad_shape", convGraph(CUDNN_DATA_FLOAT, 4, &bad));
  report("conv_f16", convGraph(CUDNN_DATA_HALF, 3, &op16));
  report("conv_f32", convGraph(CUDNN_DATA_FLOAT, 3, &op32));
  // A tensor attribute given a tensor that is not finalized, or a descriptor of another kind.
  cudnnBackendDescriptor_t raw = bcreate(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  cudnnBackendDescriptor_t op = bcreate(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  report("op_unfinalized_tensor",
         cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw));
  report("op_wrong_descriptor",
         cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op32));
  report("op_alpha_int",
         cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                                  CUDNN_TYPE_INT64, 1, &uid));

  // Engines, heuristics and notes.
  cudnnBackendDescriptor_t g16 = bopGraph(handle, {op16}), g32 = bopGraph(handle, {op32});
  DNN_CHECK(cudnnBackendGetAttribute(g16, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT,
                                     CUDNN_TYPE_INT64, 1, &n, &n));
  std::printf("S engine_count %lld\n", static_cast<long long>(n));
  std::vector<cudnnBackendDescriptor_t> cfgs;
  std::printf("S f16_instant %s\n",
              joined(heuristics(g16, CUDNN_HEUR_MODE_INSTANT, &cfgs)).c_str());
  for (size_t i = 0; i < cfgs.size(); ++i) {
    cudnnBackendDescriptor_t e = bcreate(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    DNN_CHECK(cudnnBackendGetAttribute(cfgs[i], CUDNN_ATTR_ENGINECFG_ENGINE,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e));
    int64_t index = -1;
    DNN_CHECK(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                                       &index));
    cudnnBackendBehaviorNote_t behavior[4];
    DNN_CHECK(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                       4, &n, behavior));
    std::printf("S notes_eng%lld %s behavior %lld:%d\n", static_cast<long long>(index),
                joined(engineNotes(cfgs[i])).c_str(), static_cast<long long>(n),
                static_cast<int>(behavior[0]));
    DNN_CHECK(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_KNOB_INFO,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, nullptr));
    std::printf("S knob_info_eng%lld %lld\n", static_cast<long long>(index),
                static_cast<long long>(n));
  }
  std::printf("S f16_fallback %s\n",
              joined(heuristics(g16, CUDNN_HEUR_MODE_FALLBACK, &cfgs)).c_str());
  std::printf("S f32_heur_a %s\n", joined(heuristics(g32, CUDNN_HEUR_MODE_A, &cfgs)).c_str());
  auto engineFinalize = [&](cudnnBackendDescriptor_t graph, int64_t index) {
    cudnnBackendDescriptor_t e = bcreate(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    bdesc(e, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, graph);
    bset1(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, index);
    return cudnnBackendFinalize(e);
  };
  report("engine2_f32", engineFinalize(g32, 2));
  report("engine2_f16", engineFinalize(g16, 2));
  report("engine_out_of_range", engineFinalize(g32, 7));
  // An engine config made by hand, with a knob choice; the plan hands its config back.
  cudnnBackendDescriptor_t e0 = bcreate(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  bdesc(e0, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, g32);
  bset1(e0, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, int64_t{0});
  DNN_CHECK(cudnnBackendFinalize(e0));
  cudnnBackendDescriptor_t knob = bcreate(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
  bset1(knob, CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, CUDNN_KNOB_TYPE_SPLIT_K_BUF);
  bset1(knob, CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, int64_t{2});
  DNN_CHECK(cudnnBackendFinalize(knob));
  cudnnBackendDescriptor_t cfg = bcreate(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  bdesc(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, e0);
  bset(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &knob);
  DNN_CHECK(cudnnBackendFinalize(cfg));
  Plan plan;
  DNN_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan.plan));
  report("get_plan_unfinalized",
         cudnnBackendGetAttribute(plan.plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                  CUDNN_TYPE_INT64, 1, &n, &n));
  bdesc(plan.plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
  DNN_CHECK(cudnnBackendFinalize(plan.plan));
  cudnnBackendDescriptor_t cfgBack = bcreate(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  DNN_CHECK(cudnnBackendGetAttribute(plan.plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &cfgBack));
  cudnnBackendDescriptor_t knobs[4];
  for (auto& k : knobs) k = bcreate(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
  DNN_CHECK(cudnnBackendGetAttribute(cfgBack, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 4, &n, knobs));
  int64_t kv = 0;
  DNN_CHECK(cudnnBackendGetAttribute(knobs[0], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64,
                                     1, nullptr, &kv));
  std::printf("S plan_knobs %lld %lld\n", static_cast<long long>(n), static_cast<long long>(kv));
  std::printf("S plan_notes %s\n", joined(engineNotes(cfgBack)).c_str());

  // Execute: the variant pack is checked.
  float *x, *w, *y;
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&x), 100 * 4));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&w), 144 * 4));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&y), 36 * 4));
  std::vector<float> hostX(100, 1.0f);
  const std::vector<int64_t> uids = {uidOf('x'), uidOf('w'), uidOf('y')};
  auto exec = [&](const std::vector<int64_t>& u, const std::vector<void*>& p) {
    cudnnBackendDescriptor_t pack = variantPack(u, p, nullptr);
    const cudnnStatus_t st = cudnnBackendExecute(handle, plan.plan, pack);
    DNN_CHECK(cudnnBackendDestroyDescriptor(pack));
    return st;
  };
  report("exec_ok", exec(uids, {x, w, y}));
  report("exec_missing_uid", exec({uidOf('x'), uidOf('w')}, {x, w}));
  report("exec_host_pointer", exec(uids, {hostX.data(), w, y}));
  report("exec_misaligned", exec(uids, {x + 1, w, y}));
  cudnnBackendDescriptor_t open;
  DNN_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &open));
  report("exec_pack_unfinalized", cudnnBackendExecute(handle, plan.plan, open));
  report("update_cuda_graph", cudnnBackendUpdateCudaGraph(handle, plan.plan, open, nullptr));

  // Graph-level validation.
  const std::vector<int64_t> vd = {1, 4, 3, 3};
  cudnnBackendDescriptor_t vy = btensorSpec(CUDNN_DATA_FLOAT, vd, packedStrides(vd), uidOf('y'));
  cudnnBackendDescriptor_t vt = btensorSpec(CUDNN_DATA_FLOAT, vd, packedStrides(vd), 900, true);
  cudnnBackendDescriptor_t vz = btensorSpec(CUDNN_DATA_FLOAT, vd, packedStrides(vd), uidOf('z'));
  cudnnBackendDescriptor_t relu = bpointwise(CUDNN_POINTWISE_RELU_FWD, CUDNN_DATA_FLOAT);
  auto graphStatus = [&](const std::vector<cudnnBackendDescriptor_t>& ops) {
    cudnnBackendDescriptor_t g = bcreate(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    bset(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
         static_cast<int64_t>(ops.size()), ops.data());
    return cudnnBackendFinalize(g);
  };
  report("graph_virtual_unproduced", graphStatus({bpointwiseOp(relu, vt, nullptr, vz)}));
  report("graph_disconnected", graphStatus({op32, bpointwiseOp(relu, vy, nullptr, vz)}));
  const std::vector<int64_t> other = {1, 4, 2, 2};
  cudnnBackendDescriptor_t yOther =
      btensorSpec(CUDNN_DATA_FLOAT, other, packedStrides(other), uidOf('y'));
  cudnnBackendDescriptor_t zOther = btensorSpec(CUDNN_DATA_FLOAT, other, packedStrides(other), 901);
  report("graph_duplicate_uid", graphStatus({op32, bpointwiseOp(relu, yOther, nullptr, zOther)}));
  // conv -> virtual -> relu: a workspace is needed.
  cudnnBackendDescriptor_t conv2 = nullptr;
  {
    const std::vector<int64_t> xd = {1, 4, 5, 5}, wd = {4, 4, 3, 3};
    cudnnBackendDescriptor_t cd = bcreate(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    const std::vector<int64_t> ones = {1, 1}, zeros = {0, 0};
    bset1(cd, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
    bset1(cd, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE,
          CUDNN_CROSS_CORRELATION);
    bset1(cd, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, int64_t{2});
    bset(cd, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, ones.data());
    bset(cd, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, ones.data());
    bset(cd, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, zeros.data());
    bset(cd, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, zeros.data());
    DNN_CHECK(cudnnBackendFinalize(cd));
    conv2 = bcreate(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
    bdesc(conv2, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
          btensorSpec(CUDNN_DATA_FLOAT, xd, packedStrides(xd), uidOf('x')));
    bdesc(conv2, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
          btensorSpec(CUDNN_DATA_FLOAT, wd, packedStrides(wd), uidOf('w')));
    bdesc(conv2, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, vt);
    bdesc(conv2, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, cd);
    DNN_CHECK(cudnnBackendFinalize(conv2));
  }
  cudnnBackendDescriptor_t g2 = bopGraph(handle, {conv2, bpointwiseOp(relu, vt, nullptr, vz)});
  std::vector<cudnnBackendDescriptor_t> cfgs2;
  heuristics(g2, CUDNN_HEUR_MODE_INSTANT, &cfgs2);
  Plan p2;
  DNN_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p2.plan));
  bdesc(p2.plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfgs2[0]);
  DNN_CHECK(cudnnBackendFinalize(p2.plan));
  DNN_CHECK(cudnnBackendGetAttribute(p2.plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                     CUDNN_TYPE_INT64, 1, nullptr, &p2.workspace));
  std::printf("S fused_workspace %lld\n", static_cast<long long>(p2.workspace));
  {
    cudnnBackendDescriptor_t pack =
        variantPack({uidOf('x'), uidOf('w'), uidOf('z')}, {x, w, y}, nullptr);
    report("exec_no_workspace", cudnnBackendExecute(handle, p2.plan, pack));
  }
  report("exec_with_workspace",
         runPlan(handle, nullptr, p2, {uidOf('x'), uidOf('w'), uidOf('z')}, {x, w, y}));
  CUDA_CHECK(cudaDeviceSynchronize());
  destroyScratch();
  DNN_CHECK(cudnnDestroy(handle));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    if (eq != std::string::npos) g_args[a.substr(0, eq)] = a.substr(eq + 1);
  }
  const std::string op = arg("op", "fwd");
  int rc;
  if (op == "fwd" || op == "bwdd" || op == "bwdf" || op == "biasact")
    rc = runConv(op);
  else if (op == "bn_train" || op == "bn_infer" || op == "bn_bwd")
    rc = runBn(op);
  else if (op == "hostptr")
    rc = runHostPtr();
  else if (op == "badparam")
    rc = runBadParam();
  else if (op == "descs")
    rc = runDescs();
  else if (op == "gconv")
    rc = runGraphConv();
  else if (op == "gfused")
    rc = runGraphFused();
  else if (op == "gmatmul")
    rc = runGraphMatmul();
  else if (op == "gnorm")
    rc = runGraphNorm();
  else if (op == "gsdpa")
    rc = runGraphSdpa();
  else if (op == "gapi")
    rc = runGraphApi();
  else {
    std::fprintf(stderr, "unknown op %s\n", op.c_str());
    return 1;
  }
  std::fflush(stdout);
  return rc;
}
