// cudnn_selftest — one cuDNN call (or a small set of checks) from the command line, linked
// against the REAL libcudnn.so.9 and libcudart.so.13; test_simcudnn.py runs it on the
// simulated device (the stand-ins preloaded) and compares with PyTorch.
//
//   cudnn_selftest op=<op> [key=value ...]
// op: fwd, bwdd, bwdf, biasact, bn_train, bn_infer, bn_bwd (one computation), hostptr (host
// and pinned pointers), badparam (documented error statuses), descs (descriptor getters).
// keys: dtype=f32|f64|f16|bf16  compute=f32|f64|f16  math=default|tensor|conversion|fma
//   layout=nchw|nhwc|strided (x, y, z)  flayout=nchw|nhwc (filter)  n c k d h w t r s (d, t:
//   input/filter depth, 0 = 2-D)  pad stride dil (one value or per dim, "1,0")  groups
//   mode=conv|xcorr  alpha beta alpha2  algo  calls  act=relu|identity  nanprior=0|1
//   bnmode=spatial|per_act|persistent  eps factor  saved=0|1  seed
// Output (stdout), logical (N, C, spatial) order, values as C hex floats:
//   S <name> <status>                 a call's status
//   T <name> <dims,...> : <v> <v> ... a tensor's values (inputs as stored, then outputs)
//   G <name> <0|1>                    whether the gaps between strided elements are intact
#include <cuda_runtime_api.h>
#include <cudnn.h>

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
  cudnnStatus_t st;
  if (op == "bn_train") {
    holdInputs();
    st = cudnnBatchNormalizationForwardTraining(handle, mode, sc.ptr(dt, 0), sc.ptr(dt, 1), xDesc,
                                                x.dev, yDesc, y.dev, pDesc, scale.dev, bias.dev,
                                                factor, m1.dev, v1.dev, eps, m2.dev, v2.dev);
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
    st = cudnnBatchNormalizationBackward(handle, mode, sc.ptr(dt, 0), sc.ptr(dt, 1),
                                         sp.ptr(dt, 0), sp.ptr(dt, 1), xDesc, x.dev, yDesc,
                                         y.dev, dxDesc, dx.dev, pDesc, scale.dev, ds.dev, db.dev,
                                         eps, saved ? m2.dev : nullptr, saved ? v2.dev : nullptr);
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
  else {
    std::fprintf(stderr, "unknown op %s\n", op.c_str());
    return 1;
  }
  std::fflush(stdout);
  return rc;
}
