// cuda_graph.cpp — a cuDNN backend-graph program for fumi's CUDA tests: convolutions built as
// one-operation graphs the way cudnn-frontend builds them (tensors with UIDs, an operation, an
// operation graph, engine configs from heuristics or an engine chosen by index, an execution
// plan, a variant pack per execution), one line per execution: the case name and a hash of the
// output's bytes (runs with and without libfumi compare bit for bit).
//
// Built against the real cuDNN 9 headers and linked against the REAL libcudnn.so.9; without a
// GPU the tests preload the simulated device's stand-ins. A convolution descriptor is destroyed
// as soon as its operation is finalized (cudnn-frontend's, under PyTorch 2.x: before the graph
// exists), every other descriptor but the plan as soon as the plan is finalized, and the plan
// and the variant pack right after Execute returns, before the stream ran: fumi must keep what
// it needs.
// Scenarios (argv[1]):
//   sweep    forward, backward data, backward filter x f32, f16, bf16, f64 x NCHW/NHWC x
//            engine 0 chosen by index / the heuristics' first config, beta 0; plus beta 1/2.
//            Operands hold multiples of 1/2 in [-1, 1]: every result is exact in every type.
//   tf32     a forward f32 convolution on inputs 1 + 2^-11 + 2^-13 on engine 1 (tensor cores,
//            TF32), then engine 0 (FMA).
//   fault    the three directions, f32, engine 0, C = 3 and K = 5 (FUMI_SIMCUDNN_FAULTS=wrong:3x5).
//   fused    a conv -> relu graph with a virtual intermediate (not modelled by fumi).
//   capture  a forward convolution executed on a capturing stream (then the graph launched),
//            and one recorded with cudnnBackendPopulateCudaGraph and launched.
//   ops      graphs of other operations, each executed once, every output printed: conv ->
//            add bias (broadcast) -> relu with virtual intermediates; a batched matmul (f32 and
//            f16); matmul -> gelu; x * scale (broadcast) -> sum over the last dimension; a
//            layer norm (training: y, mean, inverse variance; epsilon by value), its backward
//            (dx, dscale, dbias), a batch norm (training), and an SDPA forward (f16 and f32;
//            grouped-query attention, o and stats, the scale by value).
//   faultmm  a batched 2 x 8 x 4 x 16 f32 matmul (FUMI_SIMCUDNN_FAULTS=wrongmm:8x4x16).
//   faultsdpa the f32 SDPA forward of `ops`, S_q = 5 and S_kv = 6
//            (FUMI_SIMCUDNN_FAULTS=wrongsdpa:5x6).
//   autotune what an autotuner does: engines 0 and 1 each executed 3 times on one variant pack
//            (then destroyed), the winner executed once on a pack of its own; then one plan
//            executed 10 times on one reused pack.
//   unsettled one plan executed 3 times on one variant pack that the program never destroys
//            (nor the plan): the pack has not settled when the process exits.
#include <cuda_runtime_api.h>

#include "cudnn_test.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace {

using devtest::Elem;
using devtest::elemOf;
using devtest::printHash;
using devtest::typeName;
using Desc = cudnnBackendDescriptor_t;

Desc make(cudnnBackendDescriptorType_t t) {
  Desc d = nullptr;
  CHECK_DNN(cudnnBackendCreateDescriptor(t, &d));
  return d;
}
template <class T>
void set(Desc d, cudnnBackendAttributeName_t n, cudnnBackendAttributeType_t t, const T* v,
         int64_t count = 1) {
  CHECK_DNN(cudnnBackendSetAttribute(d, n, t, count, v));
}
void setDesc(Desc d, cudnnBackendAttributeName_t n, Desc v) {
  set(d, n, CUDNN_TYPE_BACKEND_DESCRIPTOR, &v);
}

enum class Dir { kFwd, kBwdData, kBwdFilter };
const char* dirName(Dir d) {
  return d == Dir::kFwd ? "conv_fwd" : d == Dir::kBwdData ? "conv_bwd_data" : "conv_bwd_filter";
}

struct Case {
  Dir dir = Dir::kFwd;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  bool nhwc = false;
  int engine = 0;  // -1: the heuristics' first config
  int n = 2, c = 4, k = 4, hw = 5, r = 3;
  double beta = 0;
  double (*x_value)(size_t) = [](size_t i) {
    return static_cast<double>(static_cast<int>((i * 7 + 3) % 5) - 2) / 2.0;
  };
  bool relu = false;  // a conv -> relu graph (forward)

  std::string name() const {
    return std::string(dirName(dir)) + " " + typeName(type) + (nhwc ? " nhwc" : " nchw") +
           (engine < 0 ? " heur" : " engine" + std::to_string(engine)) +
           (beta != 0 ? " beta" : "") + (relu ? " relu" : "");
  }
};

// dims and strides of an N x C x H x W tensor (NCHW or NHWC strides).
void shape(int n, int c, int h, int w, bool nhwc, int64_t* dims, int64_t* strides) {
  dims[0] = n;
  dims[1] = c;
  dims[2] = h;
  dims[3] = w;
  if (nhwc) {
    strides[1] = 1;
    strides[3] = c;
    strides[2] = static_cast<int64_t>(c) * w;
    strides[0] = static_cast<int64_t>(c) * w * h;
  } else {
    strides[3] = 1;
    strides[2] = w;
    strides[1] = static_cast<int64_t>(w) * h;
    strides[0] = static_cast<int64_t>(w) * h * c;
  }
}

Desc tensor(int64_t uid, cudnnDataType_t t, const int64_t* dims, const int64_t* strides,
            bool is_virtual = false) {
  Desc d = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t align = 16;
  set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &t);
  set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims, 4);
  set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides, 4);
  set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid);
  set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &align);
  if (is_virtual) {
    const bool v = true;
    set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, &v);
  }
  CHECK_DNN(cudnnBackendFinalize(d));
  return d;
}

// UIDs the way PyTorch picks them ('x', 'w', 'y'): roles come from the operation, not these.
constexpr int64_t kX = 'x', kW = 'w', kY = 'y', kRelu = 'r';

struct Built {
  Desc plan = nullptr;
  int64_t workspace = 0;
};

// The plan of one case; every other descriptor destroyed before returning.
Built build(cudnnHandle_t h, const Case& cs) {
  std::vector<Desc> garbage;
  const int out = cs.hw + 2 - cs.r + 1;  // padding 1, stride 1
  int64_t xd[4], xs[4], wd[4], ws[4], yd[4], ys[4];
  shape(cs.n, cs.c, cs.hw, cs.hw, cs.nhwc, xd, xs);
  shape(cs.k, cs.c, cs.r, cs.r, cs.nhwc, wd, ws);
  shape(cs.n, cs.k, out, out, cs.nhwc, yd, ys);
  Desc x = tensor(kX, cs.type, xd, xs), w = tensor(kW, cs.type, wd, ws);
  Desc y = tensor(cs.relu ? kRelu + 1 : kY, cs.type, yd, ys, cs.relu);
  garbage.insert(garbage.end(), {x, w, y});

  Desc conv = make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnDataType_t comp = cs.type == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t spatial = 2, pad[2] = {1, 1}, one[2] = {1, 1};
  set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &comp);
  set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, &mode);
  set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, &spatial);
  set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, pad, 2);
  set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, pad, 2);
  set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, one, 2);
  set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, one, 2);
  CHECK_DNN(cudnnBackendFinalize(conv));

  const bool f64 = cs.type == CUDNN_DATA_DOUBLE;
  const double alpha = 1, beta = cs.beta;
  const float falpha = 1, fbeta = static_cast<float>(cs.beta);
  const cudnnBackendAttributeType_t st = f64 ? CUDNN_TYPE_DOUBLE : CUDNN_TYPE_FLOAT;
  const void* pa = f64 ? static_cast<const void*>(&alpha) : &falpha;
  const void* pb = f64 ? static_cast<const void*>(&beta) : &fbeta;
  Desc op = nullptr;
  switch (cs.dir) {
    case Dir::kFwd:
      op = make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
      setDesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, x);
      setDesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w);
      setDesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, y);
      setDesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv);
      CHECK_DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, st, 1, pa));
      CHECK_DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, st, 1, pb));
      break;
    case Dir::kBwdData:  // dx = x's tensor, dy = y's
      op = make(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR);
      setDesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, x);
      setDesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, w);
      setDesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, y);
      setDesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, conv);
      CHECK_DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, st, 1, pa));
      CHECK_DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, st, 1, pb));
      break;
    case Dir::kBwdFilter:
      op = make(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR);
      setDesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, x);
      setDesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, w);
      setDesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, y);
      setDesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, conv);
      CHECK_DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, st, 1, pa));
      CHECK_DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, st, 1, pb));
      break;
  }
  CHECK_DNN(cudnnBackendFinalize(op));
  CHECK_DNN(cudnnBackendDestroyDescriptor(conv));  // the operation holds a copy
  garbage.push_back(op);
  std::vector<Desc> ops = {op};
  if (cs.relu) {  // relu(virtual conv output) -> y
    Desc out_t = tensor(kY, cs.type, yd, ys);
    Desc pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    const cudnnPointwiseMode_t pm = CUDNN_POINTWISE_RELU_FWD;
    set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, &pm);
    set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &comp);
    CHECK_DNN(cudnnBackendFinalize(pw));
    Desc relu = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    setDesc(relu, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
    setDesc(relu, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, y);
    setDesc(relu, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, out_t);
    CHECK_DNN(cudnnBackendFinalize(relu));
    ops.push_back(relu);
    garbage.insert(garbage.end(), {out_t, pw, relu});
  }
  Desc graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &h);
  set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ops.data(),
      static_cast<int64_t>(ops.size()));
  CHECK_DNN(cudnnBackendFinalize(graph));
  garbage.push_back(graph);

  Desc cfg = make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  garbage.push_back(cfg);
  if (cs.engine >= 0) {
    Desc engine = make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    const int64_t index = cs.engine;
    setDesc(engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, graph);
    set(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, &index);
    CHECK_DNN(cudnnBackendFinalize(engine));
    setDesc(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, engine);
    CHECK_DNN(cudnnBackendFinalize(cfg));
    garbage.push_back(engine);
  } else {  // heuristics fill configs the program created
    Desc heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    const cudnnBackendHeurMode_t hm = CUDNN_HEUR_MODE_INSTANT;
    setDesc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
    set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &hm);
    CHECK_DNN(cudnnBackendFinalize(heur));
    Desc spare = make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    Desc cfgs[2] = {cfg, spare};
    int64_t count = 0;
    CHECK_DNN(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 2, &count, cfgs));
    if (count < 1) {
      std::fprintf(stderr, "no engine config\n");
      std::exit(4);
    }
    garbage.insert(garbage.end(), {heur, spare});
  }
  Built b;
  b.plan = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  set(b.plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &h);
  setDesc(b.plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
  CHECK_DNN(cudnnBackendFinalize(b.plan));
  int64_t n = 0;
  CHECK_DNN(cudnnBackendGetAttribute(b.plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                     CUDNN_TYPE_INT64, 1, &n, &b.workspace));
  for (Desc d : garbage) CHECK_DNN(cudnnBackendDestroyDescriptor(d));
  return b;
}

struct Operands {
  void *x, *w, *y, *ws = nullptr;
  size_t xb, wb, yb;
};

Operands operands(const Case& cs, int64_t workspace) {
  const int out = cs.hw + 2 - cs.r + 1;
  const size_t e = devtest::bytesOf(elemOf(cs.type));
  const size_t xn = static_cast<size_t>(cs.n) * cs.c * cs.hw * cs.hw;
  const size_t wn = static_cast<size_t>(cs.k) * cs.c * cs.r * cs.r;
  const size_t yn = static_cast<size_t>(cs.n) * cs.k * out * out;
  auto halfs = [](int salt) {
    return [salt](size_t i) {
      return static_cast<double>(static_cast<int>((i * 7 + static_cast<size_t>(salt) * 3) % 5) - 2) / 2.0;
    };
  };
  Operands o;
  o.x = devtest::upload(elemOf(cs.type), xn, cs.x_value);
  o.w = devtest::upload(elemOf(cs.type), wn, halfs(2));
  o.y = devtest::upload(elemOf(cs.type), yn, halfs(3));
  o.xb = xn * e;
  o.wb = wn * e;
  o.yb = yn * e;
  if (workspace > 0) CHECK_CUDA(cudaMalloc(&o.ws, static_cast<size_t>(workspace)));
  return o;
}

Desc variantPack(const Operands& o) {
  Desc pack = make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const int64_t uids[3] = {kX, kW, kY};
  void* ptrs[3] = {o.x, o.w, o.y};
  set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids, 3);
  set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, ptrs, 3);
  set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &o.ws);
  CHECK_DNN(cudnnBackendFinalize(pack));
  return pack;
}

void printOutput(const Case& cs, const Operands& o, const std::string& suffix = "") {
  const void* out = cs.dir == Dir::kFwd ? o.y : cs.dir == Dir::kBwdData ? o.x : o.w;
  const size_t bytes = cs.dir == Dir::kFwd ? o.yb : cs.dir == Dir::kBwdData ? o.xb : o.wb;
  printHash(cs.name() + suffix, out, bytes);
}

void release(Operands& o) {
  for (void* p : {o.x, o.w, o.y, o.ws})
    if (p) CHECK_CUDA(cudaFree(p));
}

// Build, execute once, destroy plan and pack at once, print.
void run(cudnnHandle_t h, const Case& cs) {
  Built b = build(h, cs);
  Operands o = operands(cs, b.workspace);
  Desc pack = variantPack(o);
  const cudnnStatus_t st = cudnnBackendExecute(h, b.plan, pack);
  CHECK_DNN(cudnnBackendDestroyDescriptor(pack));
  CHECK_DNN(cudnnBackendDestroyDescriptor(b.plan));
  if (st != CUDNN_STATUS_SUCCESS)
    std::printf("%s status %d\n", cs.name().c_str(), static_cast<int>(st));
  else
    printOutput(cs, o);
  release(o);
}

int sweep() {
  cudnnHandle_t h;
  CHECK_DNN(cudnnCreate(&h));
  for (Dir d : {Dir::kFwd, Dir::kBwdData, Dir::kBwdFilter})
    for (cudnnDataType_t t :
         {CUDNN_DATA_FLOAT, CUDNN_DATA_HALF, CUDNN_DATA_BFLOAT16, CUDNN_DATA_DOUBLE})
      for (bool nhwc : {false, true})
        for (int engine : {0, -1}) {
          Case cs;
          cs.dir = d;
          cs.type = t;
          cs.nhwc = nhwc;
          cs.engine = engine;
          run(h, cs);
        }
  for (Dir d : {Dir::kFwd, Dir::kBwdData, Dir::kBwdFilter}) {
    Case cs;
    cs.dir = d;
    cs.beta = 0.5;
    run(h, cs);
  }
  CHECK_DNN(cudnnDestroy(h));
  return 0;
}

int tf32() {
  cudnnHandle_t h;
  CHECK_DNN(cudnnCreate(&h));
  for (int engine : {1, 0}) {
    Case cs;
    cs.engine = engine;
    cs.x_value = [](size_t) { return 1.0 + 0x1p-11 + 0x1p-13; };
    run(h, cs);
  }
  CHECK_DNN(cudnnDestroy(h));
  return 0;
}

int fault() {
  cudnnHandle_t h;
  CHECK_DNN(cudnnCreate(&h));
  for (Dir d : {Dir::kFwd, Dir::kBwdData, Dir::kBwdFilter}) {
    Case cs;
    cs.dir = d;
    cs.c = 3;
    cs.k = 5;
    run(h, cs);
  }
  CHECK_DNN(cudnnDestroy(h));
  return 0;
}

int fused() {
  cudnnHandle_t h;
  CHECK_DNN(cudnnCreate(&h));
  Case cs;
  cs.relu = true;
  run(h, cs);
  CHECK_DNN(cudnnDestroy(h));
  return 0;
}

// ---- graphs of other operations (scenarios ops, faultmm) ---------------------------------------

// A packed tensor of any rank.
Desc tensorN(int64_t uid, cudnnDataType_t t, std::vector<int64_t> dims, bool is_virtual = false,
             bool by_value = false) {
  Desc d = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  std::vector<int64_t> strides(dims.size());
  int64_t s = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = s;
    s *= dims[i];
  }
  const int64_t align = 16;
  set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &t);
  set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims.data(), static_cast<int64_t>(dims.size()));
  set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides.data(), static_cast<int64_t>(dims.size()));
  set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid);
  set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &align);
  const bool yes = true;
  if (is_virtual) set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, &yes);
  if (by_value) set(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, &yes);
  CHECK_DNN(cudnnBackendFinalize(d));
  return d;
}

// The descriptors of one graph under construction, destroyed together once its plan exists.
struct GraphBuilder {
  std::vector<Desc> keep, ops;
  Desc t(int64_t uid, cudnnDataType_t type, std::vector<int64_t> dims, bool v = false, bool bv = false) {
    keep.push_back(tensorN(uid, type, std::move(dims), v, bv));
    return keep.back();
  }
  Desc finish(Desc op) {
    CHECK_DNN(cudnnBackendFinalize(op));
    keep.push_back(op);
    ops.push_back(op);
    return op;
  }
  void pointwise(cudnnPointwiseMode_t mode, Desc x, Desc b, Desc y) {
    Desc pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, &mode);
    set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &prec);
    CHECK_DNN(cudnnBackendFinalize(pw));
    keep.push_back(pw);
    Desc op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
    setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b) setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    finish(op);
  }
  void matmul(Desc a, Desc b, Desc c) {
    Desc mm = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &comp);
    CHECK_DNN(cudnnBackendFinalize(mm));
    keep.push_back(mm);
    Desc op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    setDesc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    setDesc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    setDesc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    setDesc(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
    finish(op);
  }
  void reduction(cudnnReduceTensorOp_t kind, Desc x, Desc y) {
    Desc red = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    set(red, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, &kind);
    set(red, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &comp);
    CHECK_DNN(cudnnBackendFinalize(red));
    keep.push_back(red);
    Desc op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    setDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    setDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    setDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, red);
    finish(op);
  }
  // The plan of the graph (the heuristics' first config); every other descriptor destroyed.
  Built plan(cudnnHandle_t h) {
    Desc graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &h);
    set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ops.data(),
        static_cast<int64_t>(ops.size()));
    CHECK_DNN(cudnnBackendFinalize(graph));
    Desc heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    const cudnnBackendHeurMode_t hm = CUDNN_HEUR_MODE_INSTANT;
    setDesc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
    set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &hm);
    CHECK_DNN(cudnnBackendFinalize(heur));
    Desc cfg = make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    int64_t count = 0;
    CHECK_DNN(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count, &cfg));
    Built b;
    b.plan = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    set(b.plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &h);
    setDesc(b.plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
    CHECK_DNN(cudnnBackendFinalize(b.plan));
    int64_t n = 0;
    CHECK_DNN(cudnnBackendGetAttribute(b.plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                       CUDNN_TYPE_INT64, 1, &n, &b.workspace));
    for (Desc d : keep) CHECK_DNN(cudnnBackendDestroyDescriptor(d));
    for (Desc d : {graph, heur, cfg}) CHECK_DNN(cudnnBackendDestroyDescriptor(d));
    return b;
  }
};

// A non-virtual operand of a graph run: its UID, type, element count, device buffer, and
// whether to print it after the run.
struct Port {
  int64_t uid;
  cudnnDataType_t type;
  size_t count;
  bool print;
  void* dev = nullptr;
};

// Executes `b` once on fresh operands (multiples of 1/4 in [-1, 1]; by-value scalars as
// given), prints every printed port, destroys the plan.
void runGraph(cudnnHandle_t h, const std::string& name, Built b, std::vector<Port> ports,
              std::vector<std::pair<int64_t, float>> scalars = {}) {
  std::vector<int64_t> uids;
  std::vector<void*> ptrs;
  int salt = 0;
  for (Port& p : ports) {
    ++salt;
    p.dev = devtest::upload(elemOf(p.type), p.count, [salt](size_t i) {
      return static_cast<double>(static_cast<int>((i * 5 + static_cast<size_t>(salt) * 3) % 9) - 4) / 4.0;
    });
    uids.push_back(p.uid);
    ptrs.push_back(p.dev);
  }
  for (auto& s : scalars) {
    uids.push_back(s.first);
    ptrs.push_back(&s.second);
  }
  void* ws = nullptr;
  if (b.workspace > 0) CHECK_CUDA(cudaMalloc(&ws, static_cast<size_t>(b.workspace)));
  Desc pack = make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids.data(), static_cast<int64_t>(uids.size()));
  set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, ptrs.data(), static_cast<int64_t>(ptrs.size()));
  set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &ws);
  CHECK_DNN(cudnnBackendFinalize(pack));
  CHECK_DNN(cudnnBackendExecute(h, b.plan, pack));
  CHECK_DNN(cudnnBackendDestroyDescriptor(pack));
  CHECK_DNN(cudnnBackendDestroyDescriptor(b.plan));
  for (const Port& p : ports)
    if (p.print)
      printHash(name + " " + std::to_string(p.uid), p.dev, p.count * devtest::bytesOf(elemOf(p.type)));
  for (const Port& p : ports) CHECK_CUDA(cudaFree(p.dev));
  if (ws) CHECK_CUDA(cudaFree(ws));
}

int64_t countOf(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

void batchedMatmul(cudnnHandle_t h, cudnnDataType_t t, const std::string& name) {
  GraphBuilder g;
  g.matmul(g.t(1, t, {2, 8, 16}), g.t(2, t, {2, 16, 4}), g.t(3, t, {2, 8, 4}));
  runGraph(h, name, g.plan(h), {{1, t, 256, false}, {2, t, 128, false}, {3, t, 64, true}});
}

// SDPA forward: q [2,4,5,8], k [2,2,6,8], v [2,2,6,4] (two query heads per key/value head),
// o [2,4,5,4] and stats [2,4,5,1] (FLOAT), the scale 1/2 by value.
void sdpa(cudnnHandle_t h, cudnnDataType_t t, const std::string& name) {
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  GraphBuilder g;
  Desc op = make(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR);
  setDesc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, g.t(1, t, {2, 4, 5, 8}));
  setDesc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, g.t(2, t, {2, 2, 6, 8}));
  setDesc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, g.t(3, t, {2, 2, 6, 4}));
  setDesc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, g.t(4, t, {2, 4, 5, 4}));
  setDesc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, g.t(5, f32, {1, 1, 1, 1}, false, true));
  setDesc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, g.t(6, f32, {2, 4, 5, 1}));
  g.finish(op);
  runGraph(h, name, g.plan(h),
           {{1, t, 320, false}, {2, t, 192, false}, {3, t, 96, false}, {4, t, 160, true},
            {6, f32, 40, true}},
           {{5, 0.5f}});
}

int ops() {
  cudnnHandle_t h;
  CHECK_DNN(cudnnCreate(&h));
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  {  // conv -> add bias -> relu
    GraphBuilder g;
    int64_t xd[4], xs[4], wd[4], ws[4];
    shape(2, 4, 5, 5, false, xd, xs);
    shape(4, 4, 3, 3, false, wd, ws);
    Case cs;
    Desc x = tensor(kX, f32, xd, xs), w = tensor(kW, f32, wd, ws);
    Desc acc = tensor(100, f32, xd, xs, true);
    g.keep.insert(g.keep.end(), {x, w, acc});
    Desc conv = make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t spatial = 2, pad[2] = {1, 1}, one[2] = {1, 1};
    set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &f32);
    set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, &mode);
    set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, &spatial);
    set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, pad, 2);
    set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, pad, 2);
    set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, one, 2);
    set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, one, 2);
    CHECK_DNN(cudnnBackendFinalize(conv));
    g.keep.push_back(conv);
    Desc op = make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
    const float alpha = 1, beta = 0;
    setDesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, x);
    setDesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w);
    setDesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, acc);
    setDesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv);
    set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, &alpha);
    set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, &beta);
    g.finish(op);
    Desc sum = g.t(101, f32, {2, 4, 5, 5}, true);
    g.pointwise(CUDNN_POINTWISE_ADD, acc, g.t('b', f32, {1, 4, 1, 1}), sum);
    g.pointwise(CUDNN_POINTWISE_RELU_FWD, sum, nullptr, g.t(kY, f32, {2, 4, 5, 5}));
    runGraph(h, "conv_bias_relu", g.plan(h),
             {{kX, f32, 200, false}, {kW, f32, 144, false}, {'b', f32, 4, false}, {kY, f32, 200, true}});
  }
  batchedMatmul(h, f32, "matmul f32");
  batchedMatmul(h, CUDNN_DATA_HALF, "matmul f16");
  {  // matmul -> gelu
    GraphBuilder g;
    Desc c = g.t(3, f32, {1, 8, 4}, true);
    g.matmul(g.t(1, f32, {1, 8, 16}), g.t(2, f32, {1, 16, 4}), c);
    g.pointwise(CUDNN_POINTWISE_GELU_FWD, c, nullptr, g.t(4, f32, {1, 8, 4}));
    runGraph(h, "matmul_gelu", g.plan(h), {{1, f32, 128, false}, {2, f32, 64, false}, {4, f32, 32, true}});
  }
  {  // x * scale -> sum over the last dimension
    GraphBuilder g;
    Desc prod = g.t(3, f32, {1, 6, 10}, true);
    g.pointwise(CUDNN_POINTWISE_MUL, g.t(1, f32, {1, 6, 10}), g.t(2, f32, {1, 1, 10}), prod);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, prod, g.t(4, f32, {1, 6, 1}));
    runGraph(h, "scale_sum", g.plan(h), {{1, f32, 60, false}, {2, f32, 10, false}, {4, f32, 6, true}});
  }
  for (cudnnBackendNormMode_t mode : {CUDNN_LAYER_NORM, CUDNN_BATCH_NORM}) {  // training
    const bool layer = mode == CUDNN_LAYER_NORM;
    const std::vector<int64_t> stats = layer ? std::vector<int64_t>{4, 1, 1, 1}
                                             : std::vector<int64_t>{1, 8, 1, 1};
    GraphBuilder g;
    Desc op = make(CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR);
    const cudnnBackendNormFwdPhase_t phase = CUDNN_NORM_FWD_TRAINING;
    set(op, CUDNN_ATTR_OPERATION_NORM_FWD_MODE, CUDNN_TYPE_NORM_MODE, &mode);
    set(op, CUDNN_ATTR_OPERATION_NORM_FWD_PHASE, CUDNN_TYPE_NORM_FWD_PHASE, &phase);
    setDesc(op, CUDNN_ATTR_OPERATION_NORM_FWD_XDESC, g.t(1, f32, {4, 8, 1, 1}));
    setDesc(op, CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC, g.t(2, f32, {1, 8, 1, 1}));
    setDesc(op, CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC, g.t(3, f32, {1, 8, 1, 1}));
    setDesc(op, CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC, g.t(4, f32, {1, 1, 1, 1}, false, true));
    setDesc(op, CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC, g.t(5, f32, stats));
    setDesc(op, CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC, g.t(6, f32, stats));
    setDesc(op, CUDNN_ATTR_OPERATION_NORM_FWD_YDESC, g.t(7, f32, {4, 8, 1, 1}));
    g.finish(op);
    const size_t n = static_cast<size_t>(countOf(stats));
    runGraph(h, layer ? "layer_norm" : "batch_norm", g.plan(h),
             {{1, f32, 32, false}, {2, f32, 8, false}, {3, f32, 8, false}, {5, f32, n, true},
              {6, f32, n, true}, {7, f32, 32, true}},
             {{4, 1e-5f}});
  }
  {  // layer norm, backward (the statistics as given: inverse variances of 1 + i/4)
    GraphBuilder g;
    Desc op = make(CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR);
    const cudnnBackendNormMode_t mode = CUDNN_LAYER_NORM;
    set(op, CUDNN_ATTR_OPERATION_NORM_BWD_MODE, CUDNN_TYPE_NORM_MODE, &mode);
    setDesc(op, CUDNN_ATTR_OPERATION_NORM_BWD_XDESC, g.t(1, f32, {4, 8, 1, 1}));
    setDesc(op, CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC, g.t(2, f32, {4, 8, 1, 1}));
    setDesc(op, CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC, g.t(3, f32, {1, 8, 1, 1}));
    setDesc(op, CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC, g.t(4, f32, {4, 1, 1, 1}));
    setDesc(op, CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC, g.t(5, f32, {4, 1, 1, 1}));
    setDesc(op, CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC, g.t(6, f32, {4, 8, 1, 1}));
    setDesc(op, CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC, g.t(7, f32, {1, 8, 1, 1}));
    setDesc(op, CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC, g.t(8, f32, {1, 8, 1, 1}));
    g.finish(op);
    runGraph(h, "layer_norm_bwd", g.plan(h),
             {{1, f32, 32, false}, {2, f32, 32, false}, {3, f32, 8, false}, {4, f32, 4, false},
              {5, f32, 4, false}, {6, f32, 32, true}, {7, f32, 8, true}, {8, f32, 8, true}});
  }
  sdpa(h, CUDNN_DATA_HALF, "sdpa f16");
  sdpa(h, f32, "sdpa f32");
  CHECK_DNN(cudnnDestroy(h));
  return 0;
}

int faultsdpa() {
  cudnnHandle_t h;
  CHECK_DNN(cudnnCreate(&h));
  sdpa(h, CUDNN_DATA_FLOAT, "sdpa f32");
  CHECK_DNN(cudnnDestroy(h));
  return 0;
}

int faultmm() {
  cudnnHandle_t h;
  CHECK_DNN(cudnnCreate(&h));
  batchedMatmul(h, CUDNN_DATA_FLOAT, "matmul f32");
  CHECK_DNN(cudnnDestroy(h));
  return 0;
}

int autotune() {
  cudnnHandle_t h;
  CHECK_DNN(cudnnCreate(&h));
  Case cs;
  Case tc = cs;
  tc.engine = 1;
  Built fma = build(h, cs), tensor = build(h, tc);
  Operands o = operands(cs, std::max(fma.workspace, tensor.workspace));
  Desc pack = variantPack(o);
  for (Desc plan : {fma.plan, tensor.plan})
    for (int i = 0; i < 3; ++i) CHECK_DNN(cudnnBackendExecute(h, plan, pack));
  CHECK_CUDA(cudaDeviceSynchronize());
  CHECK_DNN(cudnnBackendDestroyDescriptor(pack));
  pack = variantPack(o);  // the winner, on the program's own pack
  CHECK_DNN(cudnnBackendExecute(h, fma.plan, pack));
  CHECK_DNN(cudnnBackendDestroyDescriptor(pack));
  printOutput(cs, o, " winner");
  pack = variantPack(o);
  for (int i = 0; i < 10; ++i) CHECK_DNN(cudnnBackendExecute(h, fma.plan, pack));
  printOutput(cs, o, " reused pack");
  CHECK_DNN(cudnnBackendDestroyDescriptor(pack));
  for (Desc plan : {fma.plan, tensor.plan}) CHECK_DNN(cudnnBackendDestroyDescriptor(plan));
  release(o);
  CHECK_DNN(cudnnDestroy(h));
  return 0;
}

int unsettled() {
  cudnnHandle_t h;
  CHECK_DNN(cudnnCreate(&h));
  Case cs;
  Built fma = build(h, cs);
  Operands o = operands(cs, fma.workspace);
  Desc pack = variantPack(o);
  for (int i = 0; i < 3; ++i) CHECK_DNN(cudnnBackendExecute(h, fma.plan, pack));
  printOutput(cs, o, " unsettled pack");
  return 0;  // the pack, the plan, the operands and the handle are left to the process's end
}

int capture() {
  cudnnHandle_t h;
  CHECK_DNN(cudnnCreate(&h));
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK_DNN(cudnnSetStream(h, s));
  Case cs;
  {  // executed while the stream captures
    Built b = build(h, cs);
    Operands o = operands(cs, b.workspace);
    Desc pack = variantPack(o);
    cudaGraph_t graph;
    CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK_DNN(cudnnBackendExecute(h, b.plan, pack));
    CHECK_CUDA(cudaStreamEndCapture(s, &graph));
    cudaGraphExec_t exec;
    CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    CHECK_CUDA(cudaGraphLaunch(exec, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    printOutput(cs, o, " captured");
    CHECK_CUDA(cudaGraphExecDestroy(exec));
    CHECK_CUDA(cudaGraphDestroy(graph));
    CHECK_DNN(cudnnBackendDestroyDescriptor(pack));
    CHECK_DNN(cudnnBackendDestroyDescriptor(b.plan));
    release(o);
  }
  {  // recorded with cudnnBackendPopulateCudaGraph
    Built b = build(h, cs);
    Operands o = operands(cs, b.workspace);
    Desc pack = variantPack(o);
    cudaGraph_t graph;
    CHECK_CUDA(cudaGraphCreate(&graph, 0));
    const cudnnStatus_t st = cudnnBackendPopulateCudaGraph(h, b.plan, pack, graph);
    if (st == CUDNN_STATUS_SUCCESS) {
      cudaGraphExec_t exec;
      CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
      CHECK_CUDA(cudaGraphLaunch(exec, s));
      CHECK_CUDA(cudaStreamSynchronize(s));
      printOutput(cs, o, " populated");
      CHECK_CUDA(cudaGraphExecDestroy(exec));
    } else {
      std::printf("populate status %d\n", static_cast<int>(st));
    }
    CHECK_CUDA(cudaGraphDestroy(graph));
    CHECK_DNN(cudnnBackendDestroyDescriptor(pack));
    CHECK_DNN(cudnnBackendDestroyDescriptor(b.plan));
    release(o);
  }
  CHECK_DNN(cudnnDestroy(h));
  CHECK_CUDA(cudaStreamDestroy(s));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "sweep";
  if (mode == "sweep") return sweep();
  if (mode == "tf32") return tf32();
  if (mode == "fault") return fault();
  if (mode == "fused") return fused();
  if (mode == "capture") return capture();
  if (mode == "autotune") return autotune();
  if (mode == "unsettled") return unsettled();
  if (mode == "ops") return ops();
  if (mode == "faultmm") return faultmm();
  if (mode == "faultsdpa") return faultsdpa();
  std::fprintf(stderr,
               "usage: %s sweep|tf32|fault|fused|capture|autotune|unsettled|ops|faultmm|"
               "faultsdpa\n",
               argv[0]);
  return 1;
}
