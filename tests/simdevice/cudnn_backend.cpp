// cudnn_backend.cpp — the cuDNN stand-in's backend (graph) API, in libcudnn.so.9 beside the
// legacy API of cudnn.cpp (tests only; cudnn_common.h holds what the two share).
//
// Emulated, with the real signatures (cudnn_graph.h) and the documented statuses:
//  - cudnnBackendCreateDescriptor / DestroyDescriptor / Finalize / SetAttribute /
//    GetAttribute / Execute / PopulateCudaGraph. cudnnBackendInitialize (deprecated) and
//    cudnnBackendUpdateCudaGraph are CUDNN_STATUS_NOT_SUPPORTED. Statuses: an unknown or
//    destroyed descriptor, a bad count or value: CUDNN_STATUS_BAD_PARAM; the wrong attribute
//    type: CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE; a null array: BAD_PARAM_NULL_POINTER; a
//    descriptor of the wrong kind as a value: BAD_PARAM_DESCRIPTOR_TYPE, or not finalized:
//    BAD_PARAM_NOT_FINALIZED; setting a finalized descriptor or reading one not finalized:
//    CUDNN_STATUS_NOT_INITIALIZED (as documented); descriptor types and values the stand-in
//    does not emulate: CUDNN_STATUS_NOT_SUPPORTED (or a NOT_SUPPORTED_* sub-code).
//  - descriptors: TENSOR (DATA_TYPE, DIMENSIONS, STRIDES, UNIQUE_ID, BYTE_ALIGNMENT,
//    IS_VIRTUAL, IS_BY_VALUE; VECTOR_COUNT 1, REORDERING_MODE NONE), CONVOLUTION (COMP_TYPE,
//    CONV_MODE, SPATIAL_DIMS 1-3, DILATIONS, FILTER_STRIDES, PRE_/POST_PADDINGS), MATMUL
//    (COMP_TYPE), POINTWISE (MODE, MATH_PREC, NAN_PROPAGATION, RELU clips and slope, ELU alpha,
//    softplus/swish beta, AXIS), REDUCTION (OPERATOR, COMP_TYPE), the operations below,
//    OPERATIONGRAPH (OPS, HANDLE; ENGINE_GLOBAL_COUNT), ENGINEHEUR (OPERATION_GRAPH, MODE;
//    RESULTS fill caller-created ENGINECFG descriptors), ENGINECFG (ENGINE, KNOB_CHOICES),
//    ENGINE (OPERATION_GRAPH, GLOBAL_INDEX; NUMERICAL_NOTE, BEHAVIOR_NOTE, KNOB_INFO (none)),
//    KNOB_CHOICE (accepted, ignored), EXECUTION_PLAN (HANDLE, ENGINE_CONFIG; WORKSPACE_SIZE),
//    VARIANT_PACK (UNIQUE_IDS, DATA_POINTERS, WORKSPACE, INTERMEDIATES (ignored)). Descriptor
//    getters that take descriptors (RESULTS, ENGINE, ENGINE_CONFIG, ...) fill the caller's.
//  - operations: convolution forward / backward data / backward filter (ALPHA, BETA as FLOAT
//    or DOUBLE; groups from the channel counts, asymmetric padding), matmul (rank 3: batch,
//    rows, columns, any strides; a batch of 1 broadcasts), pointwise (ADD SUB MUL DIV MAX MIN
//    POW ADD_SQUARE, IDENTITY NEG ABS EXP LOG SQRT RSQRT RECIPROCAL, RELU/TANH/SIGMOID/ELU/
//    GELU/SOFTPLUS/SWISH forward, RELU/TANH/SIGMOID backward; ALPHA1/ALPHA2 scale the inputs;
//    numpy-style broadcasting over dimensions of 1), reduction (ADD MUL MIN MAX AMAX AVG NORM1
//    NORM2 over the dimensions where the output has 1), norm forward (BATCH_NORM, LAYER_NORM;
//    TRAINING: statistics from x, optional MEAN/INV_VARIANCE outputs, batch-norm running
//    statistics with EXP_AVG_FACTOR; INFERENCE: batch norm takes MEAN/INV_VARIANCE as inputs,
//    layer norm normalises with its own statistics) and norm backward (DX, DSCALE, DBIAS from
//    X, DY, SCALE, MEAN, INV_VARIANCE). Statistics are per group of x elements that map to one
//    element of the statistics shape: batch norm's is the scale's shape (1,C,1,..), layer
//    norm's its complement (N,1,1,..), as cudnn-frontend builds them. SDPA forward (Q
//    [B,H,S_q,D], K [B,H_k,S_kv,D], V [B,H_v,S_kv,D_v], O [B,H,S_q,D_v]; optional SCALE, one
//    element (by value or not; 1 when absent), and STATS [B,H,S_q,1]): O = softmax(SCALE·QKᵀ)V
//    over the kv axis, STATS the row's log-sum-exp (natural log, max + log Σ exp(s − max)), as
//    cudnn-frontend documents them; H a multiple of H_k and H_v (grouped-query attention: query
//    head h reads key head h / (H/H_k)). Block masks, paged K/V and sequence lengths are
//    CUDNN_STATUS_NOT_SUPPORTED at the operation's Finalize. Data f16, bf16, f32 and f64 (the
//    real library has f16/bf16/fp8 only; the wider types let highprec clones plan).
//  - finalize validates like the real library (shapes, types, UIDs, one producer per tensor,
//    virtual tensors produced and consumed inside the graph, multi-op graphs connected through
//    virtual tensors) and snapshots by value: destroying op, tensor, graph or engine
//    descriptors after a plan is finalized does not affect it.
//  - engines (ENGINE_GLOBAL_COUNT 3; every engine has the behaviour note
//    SUPPORTS_CUDA_GRAPH_NATIVE_API). For graphs with a convolution, matmul or SDPA, by the
//    data type of the first one's inputs (SDPA: Q's): engine 0, FMA: plain float (double for
//    DOUBLE) accumulation, no numerical notes; engine 1 (not for DOUBLE): note TENSOR_CORE,
//    FLOAT data rounded to TF32 first (unless NVIDIA_TF32_OVERRIDE=0), float accumulation;
//    engine 2 (HALF and BFLOAT16 only): notes TENSOR_CORE and REDUCED_PRECISION_REDUCTION,
//    accumulation in fp16 / bf16 (a rounding per multiply-add); SDPA's arithmetic is the same
//    on every engine (below). Other graphs: engine 0 only. An ENGINE with
//    an index the graph has no engine for does not finalize (NOT_SUPPORTED). Heuristics:
//    INSTANT, HEUR_A and HEUR_B return engines 1, 0, 2 (those that apply, in this order);
//    FALLBACK returns 0, 1, 2. Knob choices are accepted and change nothing.
//  - workspace: the sum of the graph's virtual tensors' sizes (each rounded up to 256 bytes);
//    Execute requires a device-accessible workspace when it is not 0 (the stand-in keeps the
//    intermediates in host memory of its own all the same).
//  - cudnnBackendExecute: checks the variant pack (every non-virtual UID present with a
//    device-accessible pointer aligned to the tensor's BYTE_ALIGNMENT; by-value tensors: a
//    host pointer to one element of the tensor's type, read at call time), then enqueues ONE
//    "kernel" (sim_cudnn_graph_eng<E>_<type>_kernel) on the handle's stream that evaluates the
//    ops in dependency order. Virtual tensors live in host memory inside that work item, in
//    their declared type (rounded to it between ops); non-virtual outputs are rounded once to
//    their type. On a capturing stream the work is captured; cudnnBackendPopulateCudaGraph
//    appends it to a graph as a kernel node (cudaFumiSimGraphAddKernelNode, sim_tool.h).
//  - arithmetic: convolutions run sim_conv.h's kernel exactly as the legacy calls do (same
//    sums, the same result for the same precision choices: engine 0 = CUDNN_FMA_MATH, engine
//    1 = the default math); COMP_TYPE HALF on HALF data accumulates in float (fp16 only under
//    the fault accum16), as in the legacy API. Matmuls run the same kernel as a 1x1
//    convolution per batch (k summed in order, products and sums in the accumulator type, one
//    rounding), which is sim_gemm.h's element arithmetic. Pointwise ops compute in MATH_PREC
//    (each input and result rounded to it; transcendental functions from double). Reductions
//    accumulate in COMP_TYPE in logical order. Norms compute in double, like the legacy batch
//    norm. SDPA computes in double on every engine (sequential sums, the row maximum
//    subtracted before exp), O and STATS rounded once to their types.
//  - planted faults (FUMI_SIMCUDNN_FAULTS, cudnn_common.h): wrong:CxK, accum16 and nondet hit
//    graph convolutions as they hit legacy ones (nondet: forward convolutions, one call
//    counter shared with the legacy API, decided at Execute); wrongmm:MxNxK multiplies the
//    results of matmuls of that size by 1 + 2^-7 before the rounding, wrongsdpa:SqxSkv the O of
//    SDPA forwards with S_q queries and S_kv keys (STATS untouched).
// Not emulated: other descriptor types and operations (resample, concat, RNG, SDPA backward,
// ...), SDPA masks, dropout, paging and sequence lengths, int/fp8 data, vectorised or
// reordered tensors, dynamic shapes, JSON serialisation, kernel caches, device properties,
// cudnnBackendUpdateCudaGraph, tensor-core summation order.
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "cudnn_common.h"
#include "sim.h"
#include "sim_conv.h"
#include "sim_gemm.h"
#include "sim_tool.h"

namespace {

using namespace sim::dnn;
using sim::conv::Tensor;
using sim::gemm::DType;

constexpr uint32_t kBackendMagic = 0x436e4264;  // "CnBd"
constexpr int kMaxRank = CUDNN_DIM_MAX;
constexpr int64_t kEngineCount = 3;
constexpr int64_t kWorkspaceAlign = 256;

// --- attribute values in and out --------------------------------------------------------

// A SetAttribute argument.
struct In {
  cudnnBackendAttributeType_t type;
  int64_t count;
  const void* data;

  template <typename T>
  T at(int64_t i) const {
    T v;
    std::memcpy(&v, static_cast<const unsigned char*>(data) + i * static_cast<int64_t>(sizeof(T)),
                sizeof v);
    return v;
  }
};

cudnnStatus_t expect(const In& in, cudnnBackendAttributeType_t type, int64_t lo, int64_t hi) {
  if (in.type != type) return CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE;
  if (in.count < lo || in.count > hi) return CUDNN_STATUS_BAD_PARAM;
  return CUDNN_STATUS_SUCCESS;
}

// One scalar of an enum-like attribute type.
template <typename T>
cudnnStatus_t scalar(const In& in, cudnnBackendAttributeType_t type, T* out) {
  const cudnnStatus_t st = expect(in, type, 1, 1);
  if (st == CUDNN_STATUS_SUCCESS) *out = in.at<T>(0);
  return st;
}

// ALPHA/BETA-like host values: FLOAT or DOUBLE.
cudnnStatus_t realScalar(const In& in, double* out) {
  if (in.type == CUDNN_TYPE_FLOAT) {
    if (in.count != 1) return CUDNN_STATUS_BAD_PARAM;
    *out = in.at<float>(0);
    return CUDNN_STATUS_SUCCESS;
  }
  if (in.type == CUDNN_TYPE_DOUBLE) {
    if (in.count != 1) return CUDNN_STATUS_BAD_PARAM;
    *out = in.at<double>(0);
    return CUDNN_STATUS_SUCCESS;
  }
  return CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE;
}

// A GetAttribute destination: *count gets the attribute's element count, data the first
// min(count, requested) elements (either may be null).
struct Out {
  cudnnBackendAttributeType_t type;
  int64_t requested;
  int64_t* count;
  void* data;
};

template <typename T>
cudnnStatus_t put(const Out& o, cudnnBackendAttributeType_t type, const T* values, int64_t n) {
  if (o.type != type) return CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE;
  if (o.count) *o.count = n;
  if (o.data && n > 0)
    std::memcpy(o.data, values, sizeof(T) * static_cast<size_t>(std::min(n, o.requested)));
  return CUDNN_STATUS_SUCCESS;
}

template <typename T>
cudnnStatus_t put1(const Out& o, cudnnBackendAttributeType_t type, T value) {
  return put(o, type, &value, 1);
}

// --- descriptors ----------------------------------------------------------------------------

struct Desc {
  uint32_t magic = kBackendMagic;
  const cudnnBackendDescriptorType_t kind;
  bool finalized = false;

  explicit Desc(cudnnBackendDescriptorType_t k) : kind(k) {}
  virtual ~Desc() { magic = 0; }
  // Called before finalize only.
  virtual cudnnStatus_t set(cudnnBackendAttributeName_t name, const In& in) = 0;
  virtual cudnnStatus_t finalize() = 0;
  // Called after finalize only.
  virtual cudnnStatus_t get(cudnnBackendAttributeName_t, const Out&) const {
    return CUDNN_STATUS_BAD_PARAM;
  }
};

// Live descriptors: a destroyed or made-up pointer is a BAD_PARAM, not a crash.
std::mutex& registryMutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::unordered_set<Desc*>& registry() {
  static auto* r = new std::unordered_set<Desc*>;
  return *r;
}

Desc* lookup(const void* p) {
  std::lock_guard<std::mutex> lk(registryMutex());
  auto it = registry().find(static_cast<Desc*>(const_cast<void*>(p)));
  return it == registry().end() ? nullptr : *it;
}

// A finalized descriptor of type D given as a descriptor-valued attribute.
template <typename D>
cudnnStatus_t descValue(const void* handle, cudnnBackendDescriptorType_t kind, const D** out) {
  Desc* d = lookup(handle);
  if (!d) return CUDNN_STATUS_BAD_PARAM;
  if (d->kind != kind) return CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE;
  if (!d->finalized) return CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED;
  *out = static_cast<const D*>(d);
  return CUDNN_STATUS_SUCCESS;
}

template <typename D>
cudnnStatus_t descAttr(const In& in, cudnnBackendDescriptorType_t kind, const D** out) {
  const cudnnStatus_t st = expect(in, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  return descValue(in.at<cudnnBackendDescriptor_t>(0), kind, out);
}

// Fills caller-created descriptors of type D (a getter like ENGINEHEUR_RESULTS): assign(d, i)
// for the first min(n, requested); each filled one is finalized.
template <typename D, typename F>
cudnnStatus_t fillDescs(const Out& o, cudnnBackendDescriptorType_t kind, int64_t n, F assign) {
  if (o.type != CUDNN_TYPE_BACKEND_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE;
  if (o.count) *o.count = n;
  if (!o.data) return CUDNN_STATUS_SUCCESS;
  auto* arr = static_cast<cudnnBackendDescriptor_t*>(o.data);
  for (int64_t i = 0; i < std::min(n, o.requested); ++i) {
    Desc* d = lookup(arr[i]);
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    if (d->kind != kind) return CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE;
    assign(static_cast<D*>(d), i);
    d->finalized = true;
  }
  return CUDNN_STATUS_SUCCESS;
}

// --- tensors ------------------------------------------------------------------------------

struct TensorVal {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int nbDims = 0;
  int64_t dim[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};
  int64_t uid = 0;
  int64_t alignment = 0;
  bool isVirtual = false;
  bool byValue = false;

  int64_t count() const {
    int64_t n = 1;
    for (int i = 0; i < nbDims; ++i) n *= dim[i];
    return n;
  }
  // Bytes covered by the strides.
  int64_t bytes() const {
    int64_t last = 0;
    for (int i = 0; i < nbDims; ++i) last += (dim[i] - 1) * stride[i];
    return (last + 1) * static_cast<int64_t>(elementSize(type));
  }
  bool sameShape(const TensorVal& o) const {
    if (nbDims != o.nbDims) return false;
    for (int i = 0; i < nbDims; ++i)
      if (dim[i] != o.dim[i]) return false;
    return true;
  }
  // Same tensor (what one UID must always describe).
  bool same(const TensorVal& o) const {
    if (!sameShape(o) || type != o.type || isVirtual != o.isVirtual || byValue != o.byValue)
      return false;
    for (int i = 0; i < nbDims; ++i)
      if (stride[i] != o.stride[i]) return false;
    return true;
  }
  DType dtype() const {
    DType t = DType::F32;
    floatingType(type, &t);
    return t;
  }
};

struct TensorDesc : Desc {
  TensorVal v;
  bool typeSet = false, uidSet = false, alignSet = false;
  int stridesCount = 0;

  TensorDesc() : Desc(CUDNN_BACKEND_TENSOR_DESCRIPTOR) {}

  cudnnStatus_t set(cudnnBackendAttributeName_t name, const In& in) override {
    cudnnStatus_t st;
    switch (name) {
      case CUDNN_ATTR_TENSOR_DATA_TYPE:
        if ((st = scalar(in, CUDNN_TYPE_DATA_TYPE, &v.type)) != CUDNN_STATUS_SUCCESS) return st;
        if (!validDataType(v.type)) return CUDNN_STATUS_BAD_PARAM;
        typeSet = true;
        return st;
      case CUDNN_ATTR_TENSOR_DIMENSIONS:
      case CUDNN_ATTR_TENSOR_STRIDES: {
        if ((st = expect(in, CUDNN_TYPE_INT64, 1, kMaxRank)) != CUDNN_STATUS_SUCCESS) return st;
        const bool dims = name == CUDNN_ATTR_TENSOR_DIMENSIONS;
        for (int i = 0; i < kMaxRank; ++i)
          (dims ? v.dim : v.stride)[i] = i < in.count ? in.at<int64_t>(i) : 0;
        if (dims)
          v.nbDims = static_cast<int>(in.count);
        else
          stridesCount = static_cast<int>(in.count);
        return st;
      }
      case CUDNN_ATTR_TENSOR_UNIQUE_ID:
        if ((st = scalar(in, CUDNN_TYPE_INT64, &v.uid)) != CUDNN_STATUS_SUCCESS) return st;
        uidSet = true;
        return st;
      case CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT:
        if ((st = scalar(in, CUDNN_TYPE_INT64, &v.alignment)) != CUDNN_STATUS_SUCCESS) return st;
        alignSet = true;
        return st;
      case CUDNN_ATTR_TENSOR_IS_VIRTUAL:
        return scalar(in, CUDNN_TYPE_BOOLEAN, &v.isVirtual);
      case CUDNN_ATTR_TENSOR_IS_BY_VALUE:
        return scalar(in, CUDNN_TYPE_BOOLEAN, &v.byValue);
      case CUDNN_ATTR_TENSOR_VECTOR_COUNT: {
        int64_t n = 0;
        if ((st = scalar(in, CUDNN_TYPE_INT64, &n)) != CUDNN_STATUS_SUCCESS) return st;
        return n == 1 ? st : CUDNN_STATUS_NOT_SUPPORTED;
      }
      case CUDNN_ATTR_TENSOR_VECTORIZED_DIMENSION: {
        int64_t n = 0;
        return scalar(in, CUDNN_TYPE_INT64, &n);  // meaningless with a vector count of 1
      }
      case CUDNN_ATTR_TENSOR_REORDERING_MODE: {
        cudnnBackendTensorReordering_t m = CUDNN_TENSOR_REORDERING_NONE;
        if ((st = scalar(in, CUDNN_TYPE_TENSOR_REORDERING_MODE, &m)) != CUDNN_STATUS_SUCCESS)
          return st;
        return m == CUDNN_TENSOR_REORDERING_NONE ? st : CUDNN_STATUS_NOT_SUPPORTED;
      }
      default:
        return CUDNN_STATUS_BAD_PARAM;
    }
  }

  cudnnStatus_t finalize() override {
    if (!typeSet || !uidSet || !alignSet || v.nbDims == 0 || stridesCount != v.nbDims)
      return CUDNN_STATUS_BAD_PARAM;
    if (v.alignment <= 0 || (v.alignment & (v.alignment - 1)) != 0) return CUDNN_STATUS_BAD_PARAM;
    if (v.isVirtual && v.byValue) return CUDNN_STATUS_BAD_PARAM;
    for (int i = 0; i < v.nbDims; ++i) {
      if (v.dim[i] <= 0) return CUDNN_STATUS_BAD_PARAM;
      if (v.stride[i] <= 0) return CUDNN_STATUS_NOT_SUPPORTED_LAYOUT;
    }
    if (elementSize(v.type) == 0) return CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE;
    if (v.byValue && v.count() != 1) return CUDNN_STATUS_BAD_PARAM;
    return CUDNN_STATUS_SUCCESS;
  }

  cudnnStatus_t get(cudnnBackendAttributeName_t name, const Out& o) const override {
    switch (name) {
      case CUDNN_ATTR_TENSOR_DATA_TYPE:
        return put1(o, CUDNN_TYPE_DATA_TYPE, v.type);
      case CUDNN_ATTR_TENSOR_DIMENSIONS:
        return put(o, CUDNN_TYPE_INT64, v.dim, v.nbDims);
      case CUDNN_ATTR_TENSOR_STRIDES:
        return put(o, CUDNN_TYPE_INT64, v.stride, v.nbDims);
      case CUDNN_ATTR_TENSOR_UNIQUE_ID:
        return put1(o, CUDNN_TYPE_INT64, v.uid);
      case CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT:
        return put1(o, CUDNN_TYPE_INT64, v.alignment);
      case CUDNN_ATTR_TENSOR_IS_VIRTUAL:
        return put1(o, CUDNN_TYPE_BOOLEAN, v.isVirtual);
      case CUDNN_ATTR_TENSOR_IS_BY_VALUE:
        return put1(o, CUDNN_TYPE_BOOLEAN, v.byValue);
      default:
        return CUDNN_STATUS_BAD_PARAM;
    }
  }
};

// --- operation parameters: convolution, matmul, pointwise, reduction ------------------------

constexpr int kMaxSpatial = kMaxRank - 2;

struct ConvVal {
  cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  int64_t spatial = 0;
  int64_t dil[kMaxSpatial] = {}, stride[kMaxSpatial] = {}, pre[kMaxSpatial] = {},
          post[kMaxSpatial] = {};
};

struct ConvDesc : Desc {
  ConvVal v;
  bool compSet = false, modeSet = false;
  int64_t counts[4] = {};  // DILATIONS, FILTER_STRIDES, PRE_PADDINGS, POST_PADDINGS

  ConvDesc() : Desc(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR) {}

  int64_t* array(cudnnBackendAttributeName_t name, int* which) {
    switch (name) {
      case CUDNN_ATTR_CONVOLUTION_DILATIONS:
        *which = 0;
        return v.dil;
      case CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES:
        *which = 1;
        return v.stride;
      case CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS:
        *which = 2;
        return v.pre;
      case CUDNN_ATTR_CONVOLUTION_POST_PADDINGS:
        *which = 3;
        return v.post;
      default:
        return nullptr;
    }
  }

  cudnnStatus_t set(cudnnBackendAttributeName_t name, const In& in) override {
    cudnnStatus_t st;
    switch (name) {
      case CUDNN_ATTR_CONVOLUTION_COMP_TYPE:
        if ((st = scalar(in, CUDNN_TYPE_DATA_TYPE, &v.comp)) != CUDNN_STATUS_SUCCESS) return st;
        if (!validDataType(v.comp)) return CUDNN_STATUS_BAD_PARAM;
        compSet = true;
        return st;
      case CUDNN_ATTR_CONVOLUTION_CONV_MODE:
        if ((st = scalar(in, CUDNN_TYPE_CONVOLUTION_MODE, &v.mode)) != CUDNN_STATUS_SUCCESS)
          return st;
        if (v.mode != CUDNN_CONVOLUTION && v.mode != CUDNN_CROSS_CORRELATION)
          return CUDNN_STATUS_BAD_PARAM;
        modeSet = true;
        return st;
      case CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS:
        return scalar(in, CUDNN_TYPE_INT64, &v.spatial);
      default: {
        int which = 0;
        int64_t* a = array(name, &which);
        if (!a) return CUDNN_STATUS_BAD_PARAM;
        if ((st = expect(in, CUDNN_TYPE_INT64, 1, kMaxSpatial)) != CUDNN_STATUS_SUCCESS) return st;
        for (int64_t i = 0; i < in.count; ++i) a[i] = in.at<int64_t>(i);
        counts[which] = in.count;
        return st;
      }
    }
  }

  cudnnStatus_t finalize() override {
    if (!compSet || !modeSet || v.spatial <= 0 || v.spatial > kMaxSpatial)
      return CUDNN_STATUS_BAD_PARAM;
    for (int64_t c : counts)
      if (c != v.spatial) return CUDNN_STATUS_BAD_PARAM;
    for (int64_t i = 0; i < v.spatial; ++i)
      if (v.dil[i] <= 0 || v.stride[i] <= 0 || v.pre[i] < 0 || v.post[i] < 0)
        return CUDNN_STATUS_BAD_PARAM;
    if (v.spatial > 3) return CUDNN_STATUS_NOT_SUPPORTED_SHAPE;
    return CUDNN_STATUS_SUCCESS;
  }

  cudnnStatus_t get(cudnnBackendAttributeName_t name, const Out& o) const override {
    switch (name) {
      case CUDNN_ATTR_CONVOLUTION_COMP_TYPE:
        return put1(o, CUDNN_TYPE_DATA_TYPE, v.comp);
      case CUDNN_ATTR_CONVOLUTION_CONV_MODE:
        return put1(o, CUDNN_TYPE_CONVOLUTION_MODE, v.mode);
      case CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS:
        return put1(o, CUDNN_TYPE_INT64, v.spatial);
      case CUDNN_ATTR_CONVOLUTION_DILATIONS:
        return put(o, CUDNN_TYPE_INT64, v.dil, v.spatial);
      case CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES:
        return put(o, CUDNN_TYPE_INT64, v.stride, v.spatial);
      case CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS:
        return put(o, CUDNN_TYPE_INT64, v.pre, v.spatial);
      case CUDNN_ATTR_CONVOLUTION_POST_PADDINGS:
        return put(o, CUDNN_TYPE_INT64, v.post, v.spatial);
      default:
        return CUDNN_STATUS_BAD_PARAM;
    }
  }
};

struct MatmulDesc : Desc {
  cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  bool compSet = false;

  MatmulDesc() : Desc(CUDNN_BACKEND_MATMUL_DESCRIPTOR) {}
  cudnnStatus_t set(cudnnBackendAttributeName_t name, const In& in) override {
    if (name == CUDNN_ATTR_MATMUL_PADDING_VALUE) return CUDNN_STATUS_SUCCESS;  // unused
    if (name != CUDNN_ATTR_MATMUL_COMP_TYPE) return CUDNN_STATUS_BAD_PARAM;
    const cudnnStatus_t st = scalar(in, CUDNN_TYPE_DATA_TYPE, &comp);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    if (!validDataType(comp)) return CUDNN_STATUS_BAD_PARAM;
    compSet = true;
    return st;
  }
  cudnnStatus_t finalize() override {
    return compSet ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
  }
  cudnnStatus_t get(cudnnBackendAttributeName_t name, const Out& o) const override {
    if (name != CUDNN_ATTR_MATMUL_COMP_TYPE) return CUDNN_STATUS_BAD_PARAM;
    return put1(o, CUDNN_TYPE_DATA_TYPE, comp);
  }
};

struct PointwiseVal {
  cudnnPointwiseMode_t mode = CUDNN_POINTWISE_IDENTITY;
  cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  double lowerClip = 0, upperClip = std::numeric_limits<double>::infinity(), slope = 0;
  double eluAlpha = 1, softplusBeta = 1, swishBeta = 1;
};

struct PointwiseDesc : Desc {
  PointwiseVal v;
  bool modeSet = false;

  PointwiseDesc() : Desc(CUDNN_BACKEND_POINTWISE_DESCRIPTOR) {}
  cudnnStatus_t set(cudnnBackendAttributeName_t name, const In& in) override {
    cudnnStatus_t st;
    switch (name) {
      case CUDNN_ATTR_POINTWISE_MODE:
        if ((st = scalar(in, CUDNN_TYPE_POINTWISE_MODE, &v.mode)) == CUDNN_STATUS_SUCCESS)
          modeSet = true;
        return st;
      case CUDNN_ATTR_POINTWISE_MATH_PREC:
        if ((st = scalar(in, CUDNN_TYPE_DATA_TYPE, &v.prec)) != CUDNN_STATUS_SUCCESS) return st;
        return validDataType(v.prec) ? st : CUDNN_STATUS_BAD_PARAM;
      case CUDNN_ATTR_POINTWISE_NAN_PROPAGATION: {
        cudnnNanPropagation_t propagate;  // NaN passes through every op here either way
        return scalar(in, CUDNN_TYPE_NAN_PROPOGATION, &propagate);
      }
      case CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP:
        return scalar(in, CUDNN_TYPE_DOUBLE, &v.lowerClip);
      case CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP:
        return scalar(in, CUDNN_TYPE_DOUBLE, &v.upperClip);
      case CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE:
        return scalar(in, CUDNN_TYPE_DOUBLE, &v.slope);
      case CUDNN_ATTR_POINTWISE_ELU_ALPHA:
        return scalar(in, CUDNN_TYPE_DOUBLE, &v.eluAlpha);
      case CUDNN_ATTR_POINTWISE_SOFTPLUS_BETA:
        return scalar(in, CUDNN_TYPE_DOUBLE, &v.softplusBeta);
      case CUDNN_ATTR_POINTWISE_SWISH_BETA:
        return scalar(in, CUDNN_TYPE_DOUBLE, &v.swishBeta);
      case CUDNN_ATTR_POINTWISE_AXIS: {
        int64_t axis;  // only GEN_INDEX uses it, which is not emulated
        return scalar(in, CUDNN_TYPE_INT64, &axis);
      }
      default:
        return CUDNN_STATUS_BAD_PARAM;
    }
  }
  cudnnStatus_t finalize() override {
    return modeSet ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
  }
  cudnnStatus_t get(cudnnBackendAttributeName_t name, const Out& o) const override {
    switch (name) {
      case CUDNN_ATTR_POINTWISE_MODE:
        return put1(o, CUDNN_TYPE_POINTWISE_MODE, v.mode);
      case CUDNN_ATTR_POINTWISE_MATH_PREC:
        return put1(o, CUDNN_TYPE_DATA_TYPE, v.prec);
      default:
        return CUDNN_STATUS_BAD_PARAM;
    }
  }
};

struct ReductionVal {
  cudnnReduceTensorOp_t op = CUDNN_REDUCE_TENSOR_ADD;
  cudnnDataType_t comp = CUDNN_DATA_FLOAT;
};

struct ReductionDesc : Desc {
  ReductionVal v;
  bool opSet = false;

  ReductionDesc() : Desc(CUDNN_BACKEND_REDUCTION_DESCRIPTOR) {}
  cudnnStatus_t set(cudnnBackendAttributeName_t name, const In& in) override {
    cudnnStatus_t st;
    switch (name) {
      case CUDNN_ATTR_REDUCTION_OPERATOR:
        if ((st = scalar(in, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, &v.op)) == CUDNN_STATUS_SUCCESS)
          opSet = true;
        return st;
      case CUDNN_ATTR_REDUCTION_COMP_TYPE:
        if ((st = scalar(in, CUDNN_TYPE_DATA_TYPE, &v.comp)) != CUDNN_STATUS_SUCCESS) return st;
        return validDataType(v.comp) ? st : CUDNN_STATUS_BAD_PARAM;
      case CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC: {
        bool det;  // every reduction here is deterministic
        return scalar(in, CUDNN_TYPE_BOOLEAN, &det);
      }
      default:
        return CUDNN_STATUS_BAD_PARAM;
    }
  }
  cudnnStatus_t finalize() override {
    return opSet ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
  }
};

// --- operations -------------------------------------------------------------------------------

// Operation kinds (the descriptor types) and the tensors each takes, by attribute name.
bool isOperation(cudnnBackendDescriptorType_t t) {
  switch (t) {
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR:
      return true;
    default:
      return false;
  }
}

bool isTensorAttribute(cudnnBackendDescriptorType_t kind, int name) {
  switch (kind) {
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
      return name >= CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W &&
             name <= CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
      return name >= CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W &&
             name <= CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR:
      return name >= CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW &&
             name <= CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY;
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
      return name >= CUDNN_ATTR_OPERATION_MATMUL_ADESC && name <= CUDNN_ATTR_OPERATION_MATMUL_CDESC;
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
      return name == CUDNN_ATTR_OPERATION_POINTWISE_XDESC ||
             name == CUDNN_ATTR_OPERATION_POINTWISE_BDESC ||
             name == CUDNN_ATTR_OPERATION_POINTWISE_YDESC ||
             name == CUDNN_ATTR_OPERATION_POINTWISE_DXDESC ||
             name == CUDNN_ATTR_OPERATION_POINTWISE_DYDESC ||
             name == CUDNN_ATTR_OPERATION_POINTWISE_TDESC;
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR:
      return name == CUDNN_ATTR_OPERATION_REDUCTION_XDESC ||
             name == CUDNN_ATTR_OPERATION_REDUCTION_YDESC;
    case CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR:
      return name >= CUDNN_ATTR_OPERATION_NORM_FWD_XDESC &&
             name <= CUDNN_ATTR_OPERATION_NORM_FWD_YDESC;
    case CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR:
      return name >= CUDNN_ATTR_OPERATION_NORM_BWD_XDESC &&
             name <= CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC;
    case CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR:  // every attribute is a tensor
      return name >= CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC &&
             name <= CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_KVDESC;
    default:
      return false;
  }
}

struct OpVal {
  cudnnBackendDescriptorType_t kind = CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR;
  std::map<int, TensorVal> tensors;  // by attribute name
  double alpha = 1, beta = 0, alpha2 = 1;
  ConvVal conv;
  cudnnDataType_t mmComp = CUDNN_DATA_FLOAT;
  PointwiseVal pw;
  ReductionVal red;
  cudnnBackendNormMode_t normMode = CUDNN_BATCH_NORM;
  cudnnBackendNormFwdPhase_t phase = CUDNN_NORM_FWD_TRAINING;
  bool convSet = false, mmSet = false, pwSet = false, redSet = false, modeSet = false,
       phaseSet = false;
  // Set by finalize: the tensors read and written (attribute names), and for norms the shape
  // of the statistics.
  std::vector<int> inputs, outputs;
  TensorVal stats;

  const TensorVal* t(int name) const {
    auto it = tensors.find(name);
    return it == tensors.end() ? nullptr : &it->second;
  }
  bool has(int name) const { return tensors.count(name) != 0; }
};

cudnnStatus_t finalizeOp(OpVal& op);

struct OpDesc : Desc {
  OpVal v;

  explicit OpDesc(cudnnBackendDescriptorType_t k) : Desc(k) { v.kind = k; }

  cudnnStatus_t set(cudnnBackendAttributeName_t name, const In& in) override {
    cudnnStatus_t st;
    if (isTensorAttribute(kind, name)) {
      const TensorDesc* t = nullptr;
      if ((st = descAttr(in, CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t)) != CUDNN_STATUS_SUCCESS)
        return st;
      v.tensors[name] = t->v;
      return st;
    }
    switch (name) {
      case CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA:
      case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA:
      case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA:
      case CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA:
      case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA:
      case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA: {
        if (!isConv()) return CUDNN_STATUS_BAD_PARAM;
        const bool isAlpha = name == CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA ||
                             name == CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA ||
                             name == CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA;
        return realScalar(in, isAlpha ? &v.alpha : &v.beta);
      }
      case CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC:
      case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC:
      case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC: {
        if (!isConv()) return CUDNN_STATUS_BAD_PARAM;
        const ConvDesc* c = nullptr;
        if ((st = descAttr(in, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &c)) != CUDNN_STATUS_SUCCESS)
          return st;
        v.conv = c->v;
        v.convSet = true;
        return st;
      }
      case CUDNN_ATTR_OPERATION_MATMUL_DESC: {
        if (kind != CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
        const MatmulDesc* m = nullptr;
        if ((st = descAttr(in, CUDNN_BACKEND_MATMUL_DESCRIPTOR, &m)) != CUDNN_STATUS_SUCCESS)
          return st;
        v.mmComp = m->comp;
        v.mmSet = true;
        return st;
      }
      case CUDNN_ATTR_OPERATION_MATMUL_IRREGULARLY_STRIDED_BATCH_COUNT: {
        int64_t n;  // batches are regular here
        return kind == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR ? scalar(in, CUDNN_TYPE_INT64, &n)
                                                                 : CUDNN_STATUS_BAD_PARAM;
      }
      case CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR: {
        if (kind != CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
        const PointwiseDesc* p = nullptr;
        if ((st = descAttr(in, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &p)) != CUDNN_STATUS_SUCCESS)
          return st;
        v.pw = p->v;
        v.pwSet = true;
        return st;
      }
      case CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1:
      case CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2:
        if (kind != CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
        return realScalar(in, name == CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1 ? &v.alpha : &v.alpha2);
      case CUDNN_ATTR_OPERATION_REDUCTION_DESC: {
        if (kind != CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
        const ReductionDesc* r = nullptr;
        if ((st = descAttr(in, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, &r)) != CUDNN_STATUS_SUCCESS)
          return st;
        v.red = r->v;
        v.redSet = true;
        return st;
      }
      case CUDNN_ATTR_OPERATION_NORM_FWD_MODE:
      case CUDNN_ATTR_OPERATION_NORM_BWD_MODE:
        if ((name == CUDNN_ATTR_OPERATION_NORM_FWD_MODE) !=
                (kind == CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR) ||
            !isNorm())
          return CUDNN_STATUS_BAD_PARAM;
        if ((st = scalar(in, CUDNN_TYPE_NORM_MODE, &v.normMode)) == CUDNN_STATUS_SUCCESS)
          v.modeSet = true;
        return st;
      case CUDNN_ATTR_OPERATION_NORM_FWD_PHASE:
        if (kind != CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
        if ((st = scalar(in, CUDNN_TYPE_NORM_FWD_PHASE, &v.phase)) == CUDNN_STATUS_SUCCESS)
          v.phaseSet = true;
        return st;
      case CUDNN_ATTR_OPERATION_NORM_FWD_PEER_STAT_DESCS:
      case CUDNN_ATTR_OPERATION_NORM_BWD_PEER_STAT_DESCS:
        if (!isNorm()) return CUDNN_STATUS_BAD_PARAM;
        if ((st = expect(in, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, 64)) != CUDNN_STATUS_SUCCESS)
          return st;
        return in.count == 0 ? st : CUDNN_STATUS_NOT_SUPPORTED;  // no multi-GPU statistics
      default:
        return CUDNN_STATUS_BAD_PARAM;
    }
  }

  cudnnStatus_t finalize() override { return finalizeOp(v); }

  bool isConv() const {
    return kind == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR ||
           kind == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR ||
           kind == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR;
  }
  bool isNorm() const {
    return kind == CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR ||
           kind == CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR;
  }
};

// --- operation validation ------------------------------------------------------------------

// The three convolution tensors in forward roles (x image, w filter, y output) by direction.
struct ConvRoles {
  int x, w, y, out;
};
ConvRoles convRoles(cudnnBackendDescriptorType_t kind) {
  switch (kind) {
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
      return {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX};
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR:
      return {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW};
    default:
      return {
          CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
          CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y};
  }
}

bool floating(const TensorVal* t) {
  DType d;
  return t && floatingType(t->type, &d);
}

// dims of `in` broadcast to `out`: same rank, each dimension equal or 1.
bool broadcastable(const TensorVal& in, const TensorVal& out) {
  if (in.nbDims != out.nbDims) return false;
  for (int i = 0; i < in.nbDims; ++i)
    if (in.dim[i] != out.dim[i] && in.dim[i] != 1) return false;
  return true;
}

// The accumulation a contraction (convolution, matmul) may use on `data`.
cudnnStatus_t contractionTypes(DType data, cudnnDataType_t comp) {
  if (data == DType::F64)
    return comp == CUDNN_DATA_DOUBLE ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE;
  if (comp == CUDNN_DATA_FLOAT) return CUDNN_STATUS_SUCCESS;
  if (comp == CUDNN_DATA_HALF && data == DType::F16) return CUDNN_STATUS_SUCCESS;
  return CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE;
}

cudnnStatus_t finalizeConv(OpVal& op) {
  const ConvRoles r = convRoles(op.kind);
  const TensorVal *x = op.t(r.x), *w = op.t(r.w), *y = op.t(r.y);
  if (!op.convSet || !x || !w || !y) return CUDNN_STATUS_BAD_PARAM;
  const ConvVal& c = op.conv;
  const int nb = x->nbDims;
  if (w->nbDims != nb || y->nbDims != nb || nb != c.spatial + 2) return CUDNN_STATUS_BAD_PARAM;
  const int64_t C = x->dim[1], Cg = w->dim[1], K = w->dim[0];
  if (C % Cg != 0) return CUDNN_STATUS_BAD_PARAM;
  const int64_t groups = C / Cg;
  if (K % groups != 0 || y->dim[0] != x->dim[0] || y->dim[1] != K) return CUDNN_STATUS_BAD_PARAM;
  for (int i = 0; i < c.spatial; ++i) {
    const int64_t effective = (w->dim[2 + i] - 1) * c.dil[i] + 1;
    const int64_t padded = x->dim[2 + i] + c.pre[i] + c.post[i];
    if (effective > padded || y->dim[2 + i] != (padded - effective) / c.stride[i] + 1)
      return CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
  }
  const int in1 =
      op.kind == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR ? r.y : r.x;
  const int in2 =
      op.kind == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR ? r.y : r.w;
  const TensorVal *a = op.t(in1), *b = op.t(in2), *out = op.t(r.out);
  if (!floating(a) || !floating(out) || a->type != b->type)
    return CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE;
  const cudnnStatus_t st = contractionTypes(a->dtype(), c.comp);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  op.inputs = {in1, in2};
  op.outputs = {r.out};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalizeMatmul(OpVal& op) {
  const TensorVal *a = op.t(CUDNN_ATTR_OPERATION_MATMUL_ADESC),
                  *b = op.t(CUDNN_ATTR_OPERATION_MATMUL_BDESC),
                  *c = op.t(CUDNN_ATTR_OPERATION_MATMUL_CDESC);
  if (!op.mmSet || !a || !b || !c) return CUDNN_STATUS_BAD_PARAM;
  if (a->nbDims != b->nbDims || a->nbDims != c->nbDims) return CUDNN_STATUS_BAD_PARAM;
  if (a->nbDims != 3) return CUDNN_STATUS_NOT_SUPPORTED_SHAPE;  // one batch dimension
  const int64_t batch = c->dim[0];
  if (a->dim[1] != c->dim[1] || b->dim[2] != c->dim[2] || a->dim[2] != b->dim[1] ||
      (a->dim[0] != batch && a->dim[0] != 1) || (b->dim[0] != batch && b->dim[0] != 1))
    return CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
  if (!floating(a) || !floating(c) || a->type != b->type)
    return CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE;
  const cudnnStatus_t st = contractionTypes(a->dtype(), op.mmComp);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  op.inputs = {CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_ATTR_OPERATION_MATMUL_BDESC};
  op.outputs = {CUDNN_ATTR_OPERATION_MATMUL_CDESC};
  return CUDNN_STATUS_SUCCESS;
}

enum class PwArity { Unary, Binary, Backward, Unsupported };

PwArity arity(cudnnPointwiseMode_t m) {
  switch (m) {
    case CUDNN_POINTWISE_ADD:
    case CUDNN_POINTWISE_ADD_SQUARE:
    case CUDNN_POINTWISE_SUB:
    case CUDNN_POINTWISE_MUL:
    case CUDNN_POINTWISE_DIV:
    case CUDNN_POINTWISE_MAX:
    case CUDNN_POINTWISE_MIN:
    case CUDNN_POINTWISE_POW:
      return PwArity::Binary;
    case CUDNN_POINTWISE_IDENTITY:
    case CUDNN_POINTWISE_NEG:
    case CUDNN_POINTWISE_ABS:
    case CUDNN_POINTWISE_EXP:
    case CUDNN_POINTWISE_LOG:
    case CUDNN_POINTWISE_SQRT:
    case CUDNN_POINTWISE_RSQRT:
    case CUDNN_POINTWISE_RECIPROCAL:
    case CUDNN_POINTWISE_RELU_FWD:
    case CUDNN_POINTWISE_TANH_FWD:
    case CUDNN_POINTWISE_SIGMOID_FWD:
    case CUDNN_POINTWISE_ELU_FWD:
    case CUDNN_POINTWISE_GELU_FWD:
    case CUDNN_POINTWISE_SOFTPLUS_FWD:
    case CUDNN_POINTWISE_SWISH_FWD:
      return PwArity::Unary;
    case CUDNN_POINTWISE_RELU_BWD:
    case CUDNN_POINTWISE_TANH_BWD:
    case CUDNN_POINTWISE_SIGMOID_BWD:
      return PwArity::Backward;
    default:
      return PwArity::Unsupported;
  }
}

cudnnStatus_t finalizePointwise(OpVal& op) {
  if (!op.pwSet) return CUDNN_STATUS_BAD_PARAM;
  DType prec;
  if (!floatingType(op.pw.prec, &prec)) return CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE;
  if (op.has(CUDNN_ATTR_OPERATION_POINTWISE_TDESC)) return CUDNN_STATUS_NOT_SUPPORTED;
  int in1 = CUDNN_ATTR_OPERATION_POINTWISE_XDESC, in2 = 0,
      out = CUDNN_ATTR_OPERATION_POINTWISE_YDESC;
  switch (arity(op.pw.mode)) {
    case PwArity::Unary:
      break;
    case PwArity::Binary:
      in2 = CUDNN_ATTR_OPERATION_POINTWISE_BDESC;
      break;
    case PwArity::Backward:
      in2 = CUDNN_ATTR_OPERATION_POINTWISE_DYDESC;
      out = CUDNN_ATTR_OPERATION_POINTWISE_DXDESC;
      break;
    case PwArity::Unsupported:
      return CUDNN_STATUS_NOT_SUPPORTED;
  }
  const TensorVal *x = op.t(in1), *b = in2 ? op.t(in2) : nullptr, *y = op.t(out);
  if (!x || !y || (in2 && !b)) return CUDNN_STATUS_BAD_PARAM;
  if (!broadcastable(*x, *y) || (b && !broadcastable(*b, *y)))
    return CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
  if (!floating(x) || !floating(y) || (b && !floating(b)))
    return CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE;
  op.inputs = {in1};
  if (in2) op.inputs.push_back(in2);
  op.outputs = {out};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalizeReduction(OpVal& op) {
  const TensorVal *x = op.t(CUDNN_ATTR_OPERATION_REDUCTION_XDESC),
                  *y = op.t(CUDNN_ATTR_OPERATION_REDUCTION_YDESC);
  if (!op.redSet || !x || !y) return CUDNN_STATUS_BAD_PARAM;
  if (!broadcastable(*y, *x)) return CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
  if (!floating(x) || !floating(y)) return CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE;
  if (op.red.comp != CUDNN_DATA_FLOAT && op.red.comp != CUDNN_DATA_DOUBLE)
    return CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE;
  switch (op.red.op) {
    case CUDNN_REDUCE_TENSOR_ADD:
    case CUDNN_REDUCE_TENSOR_MUL:
    case CUDNN_REDUCE_TENSOR_MIN:
    case CUDNN_REDUCE_TENSOR_MAX:
    case CUDNN_REDUCE_TENSOR_AMAX:
    case CUDNN_REDUCE_TENSOR_AVG:
    case CUDNN_REDUCE_TENSOR_NORM1:
    case CUDNN_REDUCE_TENSOR_NORM2:
      break;
    default:
      return CUDNN_STATUS_NOT_SUPPORTED;
  }
  op.inputs = {CUDNN_ATTR_OPERATION_REDUCTION_XDESC};
  op.outputs = {CUDNN_ATTR_OPERATION_REDUCTION_YDESC};
  return CUDNN_STATUS_SUCCESS;
}

// The statistics shape of a norm over x with this scale: batch norm: the scale's (per channel);
// layer norm: its complement (per sample).
TensorVal statsShape(cudnnBackendNormMode_t mode, const TensorVal& x, const TensorVal& scale) {
  TensorVal s = scale;
  s.type = CUDNN_DATA_FLOAT;
  int64_t acc = 1;
  for (int i = x.nbDims - 1; i >= 0; --i) {
    s.dim[i] = mode == CUDNN_BATCH_NORM ? scale.dim[i] : (scale.dim[i] == 1 ? x.dim[i] : 1);
    s.stride[i] = acc;
    acc *= s.dim[i];
  }
  return s;
}

cudnnStatus_t finalizeNorm(OpVal& op) {
  const bool fwd = op.kind == CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR;
  if (!op.modeSet || (fwd && !op.phaseSet)) return CUDNN_STATUS_BAD_PARAM;
  if (op.normMode != CUDNN_BATCH_NORM && op.normMode != CUDNN_LAYER_NORM)
    return CUDNN_STATUS_NOT_SUPPORTED;
  const bool bn = op.normMode == CUDNN_BATCH_NORM;
  const int X = fwd ? CUDNN_ATTR_OPERATION_NORM_FWD_XDESC : CUDNN_ATTR_OPERATION_NORM_BWD_XDESC;
  const int SCALE =
      fwd ? CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC : CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC;
  const int MEAN =
      fwd ? CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC : CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC;
  const int INV = fwd ? CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC
                      : CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC;
  const int EPS =
      fwd ? CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC : CUDNN_ATTR_OPERATION_NORM_BWD_EPSILON_DESC;
  const TensorVal *x = op.t(X), *scale = op.t(SCALE);
  if (!x || !scale) return CUDNN_STATUS_BAD_PARAM;
  if (x->nbDims < 3) return CUDNN_STATUS_NOT_SUPPORTED_SHAPE;
  if (!broadcastable(*scale, *x)) return CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
  op.stats = statsShape(op.normMode, *x, *scale);
  for (auto& kv : op.tensors)
    if (!floating(&kv.second)) return CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE;
  auto statsLike = [&](int name) {
    const TensorVal* t = op.t(name);
    return !t || t->sameShape(op.stats);
  };
  auto scalarLike = [&](int name) {
    const TensorVal* t = op.t(name);
    return !t || t->count() == 1;
  };
  op.inputs = {X, SCALE};
  op.outputs.clear();
  if (fwd) {
    const int BIAS = CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC,
              Y = CUDNN_ATTR_OPERATION_NORM_FWD_YDESC;
    const TensorVal *bias = op.t(BIAS), *y = op.t(Y);
    if (!bias || !y || !y->sameShape(*x) || !bias->sameShape(*scale)) return CUDNN_STATUS_BAD_PARAM;
    op.inputs.push_back(BIAS);
    op.outputs.push_back(Y);
    if (!statsLike(MEAN) || !statsLike(INV) || !scalarLike(EPS)) return CUDNN_STATUS_BAD_PARAM;
    const bool training = op.phase == CUDNN_NORM_FWD_TRAINING;
    if (bn && !training) {  // statistics given
      if (!op.has(MEAN) || !op.has(INV)) return CUDNN_STATUS_BAD_PARAM;
      op.inputs.push_back(MEAN);
      op.inputs.push_back(INV);
    } else {  // statistics computed
      if (!op.has(EPS)) return CUDNN_STATUS_BAD_PARAM;
      op.inputs.push_back(EPS);
      if (op.has(MEAN)) op.outputs.push_back(MEAN);
      if (op.has(INV)) op.outputs.push_back(INV);
    }
    const int running[] = {CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC,
                           CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC,
                           CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC,
                           CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC,
                           CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC};
    int given = 0;
    for (int name : running) given += op.has(name) ? 1 : 0;
    if (given != 0) {  // batch-norm training only, all five
      if (given != 5 || !bn || !training) return CUDNN_STATUS_BAD_PARAM;
      if (!scalarLike(running[0])) return CUDNN_STATUS_BAD_PARAM;
      for (int i = 1; i < 5; ++i)
        if (!statsLike(running[i])) return CUDNN_STATUS_BAD_PARAM;
      op.inputs.insert(op.inputs.end(), {running[0], running[1], running[2]});
      op.outputs.insert(op.outputs.end(), {running[3], running[4]});
    }
  } else {
    const int DY = CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC, DX = CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC,
              DS = CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC,
              DB = CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC;
    const TensorVal *dy = op.t(DY), *dx = op.t(DX), *ds = op.t(DS), *db = op.t(DB);
    if (!dy || !dx || !ds || !db || !op.has(MEAN) || !op.has(INV)) return CUDNN_STATUS_BAD_PARAM;
    if (!dy->sameShape(*x) || !dx->sameShape(*x) || !ds->sameShape(*scale) ||
        !db->sameShape(*scale) || !statsLike(MEAN) || !statsLike(INV) || !scalarLike(EPS))
      return CUDNN_STATUS_BAD_PARAM;
    op.inputs.insert(op.inputs.end(), {DY, MEAN, INV});
    if (op.has(EPS)) op.inputs.push_back(EPS);  // the saved statistics make it unnecessary
    op.outputs = {DX, DS, DB};
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalizeSdpa(OpVal& op) {
  const int Q = CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, K = CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC,
            V = CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, O = CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC,
            STATS = CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC,
            SCALE = CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC;
  const TensorVal *q = op.t(Q), *k = op.t(K), *v = op.t(V), *o = op.t(O), *stats = op.t(STATS),
                  *scale = op.t(SCALE);
  if (!q || !k || !v || !o) return CUDNN_STATUS_BAD_PARAM;
  for (int name : {CUDNN_ATTR_OPERATION_SDPA_FWD_BLOCK_MASK_DESC,
                   CUDNN_ATTR_OPERATION_SDPA_FWD_PAGE_TABLE_KDESC,
                   CUDNN_ATTR_OPERATION_SDPA_FWD_PAGE_TABLE_VDESC,
                   CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_QDESC,
                   CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_KVDESC})
    if (op.has(name)) return CUDNN_STATUS_NOT_SUPPORTED;
  for (const TensorVal* t : {q, k, v, o})
    if (t->nbDims != 4) return CUDNN_STATUS_BAD_PARAM;
  if (stats && stats->nbDims != 4) return CUDNN_STATUS_BAD_PARAM;
  const int64_t B = q->dim[0], H = q->dim[1], Sq = q->dim[2], D = q->dim[3];
  const int64_t Hk = k->dim[1], Skv = k->dim[2], Hv = v->dim[1], Dv = v->dim[3];
  if (k->dim[0] != B || k->dim[3] != D || v->dim[0] != B || v->dim[2] != Skv || H % Hk != 0 ||
      H % Hv != 0 || o->dim[0] != B || o->dim[1] != H || o->dim[2] != Sq || o->dim[3] != Dv)
    return CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
  if (stats && (stats->dim[0] != B || stats->dim[1] != H || stats->dim[2] != Sq ||
                stats->dim[3] != 1))
    return CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
  if (scale && scale->count() != 1) return CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH;
  if (!floating(q) || !floating(o) || k->type != q->type || v->type != q->type ||
      (stats && !floating(stats)) || (scale && !floating(scale)))
    return CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE;
  op.inputs = {Q, K, V};
  if (scale) op.inputs.push_back(SCALE);
  op.outputs = {O};
  if (stats) op.outputs.push_back(STATS);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalizeOp(OpVal& op) {
  cudnnStatus_t st;
  switch (op.kind) {
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
      st = finalizeMatmul(op);
      break;
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
      st = finalizePointwise(op);
      break;
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR:
      st = finalizeReduction(op);
      break;
    case CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR:
      st = finalizeNorm(op);
      break;
    case CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR:
      st = finalizeSdpa(op);
      break;
    default:
      st = finalizeConv(op);
      break;
  }
  if (st != CUDNN_STATUS_SUCCESS) return st;
  // Tensors of this op that are neither read nor written are a mistake (e.g. a BDESC on a
  // unary pointwise op); by-value tensors are host scalars, never written.
  for (const auto& kv : op.tensors)
    if (std::find(op.inputs.begin(), op.inputs.end(), kv.first) == op.inputs.end() &&
        std::find(op.outputs.begin(), op.outputs.end(), kv.first) == op.outputs.end())
      return CUDNN_STATUS_BAD_PARAM;
  for (int name : op.outputs)
    if (op.t(name)->byValue) return CUDNN_STATUS_BAD_PARAM;
  return CUDNN_STATUS_SUCCESS;
}

// Convolutions, matmuls and SDPA (whose inputs[0] is Q): what picks a graph's engines.
bool isContraction(const OpVal& op) {
  return op.kind != CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR &&
         op.kind != CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR &&
         op.kind != CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR &&
         op.kind != CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR;
}

// --- operation graphs -------------------------------------------------------------------------

struct GraphVal {
  std::vector<OpVal> ops;          // in dependency order
  std::vector<TensorVal> tensors;  // every UID once
  std::vector<int64_t> engines;    // the engines that run it
  DType data = DType::F32;         // inputs of the first convolution / matmul / SDPA
  int64_t workspace = 0;           // bytes
};

struct GraphDesc : Desc {
  std::vector<OpVal> ops;
  cudnnHandle_t handle = nullptr;
  std::shared_ptr<const GraphVal> value;

  GraphDesc() : Desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR) {}

  cudnnStatus_t set(cudnnBackendAttributeName_t name, const In& in) override {
    cudnnStatus_t st;
    switch (name) {
      case CUDNN_ATTR_OPERATIONGRAPH_HANDLE:
        if ((st = scalar(in, CUDNN_TYPE_HANDLE, &handle)) != CUDNN_STATUS_SUCCESS) return st;
        return validHandle(handle) ? st : CUDNN_STATUS_BAD_PARAM;
      case CUDNN_ATTR_OPERATIONGRAPH_OPS: {
        if ((st = expect(in, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1 << 16)) != CUDNN_STATUS_SUCCESS)
          return st;
        std::vector<OpVal> list;
        for (int64_t i = 0; i < in.count; ++i) {
          Desc* d = lookup(in.at<cudnnBackendDescriptor_t>(i));
          if (!d) return CUDNN_STATUS_BAD_PARAM;
          if (!isOperation(d->kind)) return CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE;
          if (!d->finalized) return CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED;
          list.push_back(static_cast<OpDesc*>(d)->v);
        }
        ops = std::move(list);
        return st;
      }
      case CUDNN_ATTR_OPERATIONGRAPH_IS_DYNAMIC_SHAPE_ENABLED: {
        bool dynamic = false;
        if ((st = scalar(in, CUDNN_TYPE_BOOLEAN, &dynamic)) != CUDNN_STATUS_SUCCESS) return st;
        return dynamic ? CUDNN_STATUS_NOT_SUPPORTED : st;
      }
      default:
        return CUDNN_STATUS_BAD_PARAM;
    }
  }

  cudnnStatus_t finalize() override;

  cudnnStatus_t get(cudnnBackendAttributeName_t name, const Out& o) const override {
    switch (name) {
      case CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT:
        return put1(o, CUDNN_TYPE_INT64, kEngineCount);
      case CUDNN_ATTR_OPERATIONGRAPH_HANDLE:
        return put1(o, CUDNN_TYPE_HANDLE, handle);
      default:
        return CUDNN_STATUS_BAD_PARAM;
    }
  }
};

cudnnStatus_t GraphDesc::finalize() {
  if (ops.empty()) return CUDNN_STATUS_BAD_PARAM;
  auto g = std::make_shared<GraphVal>();
  // Every UID names one tensor; each tensor has at most one producer.
  std::map<int64_t, TensorVal> byUid;
  std::map<int64_t, size_t> producer;
  std::map<int64_t, std::vector<size_t>> consumers;
  for (size_t i = 0; i < ops.size(); ++i) {
    for (const auto& kv : ops[i].tensors) {
      auto it = byUid.find(kv.second.uid);
      if (it == byUid.end())
        byUid.emplace(kv.second.uid, kv.second);
      else if (!it->second.same(kv.second))
        return CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES;  // two tensors, one UID
    }
    for (int name : ops[i].outputs) {
      const int64_t uid = ops[i].t(name)->uid;
      if (producer.count(uid)) return CUDNN_STATUS_BAD_PARAM;
      producer[uid] = i;
    }
    for (int name : ops[i].inputs) consumers[ops[i].t(name)->uid].push_back(i);
  }
  for (const auto& kv : byUid) {
    const TensorVal& t = kv.second;
    if (t.isVirtual && !producer.count(t.uid)) return CUDNN_STATUS_BAD_PARAM;  // never written
    if (t.isVirtual && !consumers.count(t.uid) && ops.size() > 1)
      return CUDNN_STATUS_BAD_PARAM;  // a dead intermediate
    if (t.isVirtual)
      g->workspace += (t.bytes() + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
    g->tensors.push_back(t);
  }
  if (ops.size() == 1) g->workspace = 0;  // nothing intermediate (a virtual output is dropped)
  // Connected through virtual tensors (union-find over the ops).
  std::vector<size_t> parent(ops.size());
  std::iota(parent.begin(), parent.end(), size_t{0});
  auto root = [&](size_t a) {
    while (parent[a] != a) a = parent[a] = parent[parent[a]];
    return a;
  };
  for (const auto& kv : consumers)
    if (producer.count(kv.first) && byUid[kv.first].isVirtual)
      for (size_t c : kv.second) parent[root(c)] = root(producer[kv.first]);
  for (size_t i = 1; i < ops.size(); ++i)
    if (root(i) != root(0)) return CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN;
  // Dependency order (Kahn, stable): an op after the producers of what it reads.
  std::vector<bool> done(ops.size(), false);
  for (size_t placed = 0; placed < ops.size(); ++placed) {
    size_t pick = ops.size();
    for (size_t i = 0; i < ops.size() && pick == ops.size(); ++i) {
      if (done[i]) continue;
      bool ready = true;
      for (int name : ops[i].inputs) {
        auto p = producer.find(ops[i].t(name)->uid);
        if (p != producer.end() && p->second != i && !done[p->second]) ready = false;
        if (p != producer.end() && p->second == i) return CUDNN_STATUS_BAD_PARAM;  // in place
      }
      if (ready) pick = i;
    }
    if (pick == ops.size()) return CUDNN_STATUS_BAD_PARAM;  // a cycle
    done[pick] = true;
    g->ops.push_back(ops[pick]);
  }
  // Engines: by the first contraction's data type.
  g->engines = {0};
  for (const OpVal& op : g->ops) {
    if (!isContraction(op)) continue;
    g->data = op.t(op.inputs[0])->dtype();
    if (g->data != DType::F64) g->engines.push_back(1);
    if (g->data == DType::F16 || g->data == DType::BF16) g->engines.push_back(2);
    break;
  }
  value = std::move(g);
  return CUDNN_STATUS_SUCCESS;
}

// --- engines, heuristics, configurations, plans ---------------------------------------------

struct EngineVal {
  std::shared_ptr<const GraphVal> graph;
  int64_t index = -1;
};

std::vector<cudnnBackendNumericalNote_t> numericalNotes(int64_t engine) {
  switch (engine) {
    case 1:
      return {CUDNN_NUMERICAL_NOTE_TENSOR_CORE};
    case 2:
      return {CUDNN_NUMERICAL_NOTE_TENSOR_CORE, CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION};
    default:
      return {};
  }
}

struct EngineDesc : Desc {
  EngineVal v;
  bool indexSet = false;

  EngineDesc() : Desc(CUDNN_BACKEND_ENGINE_DESCRIPTOR) {}
  cudnnStatus_t set(cudnnBackendAttributeName_t name, const In& in) override;
  cudnnStatus_t finalize() override {
    if (!v.graph || !indexSet) return CUDNN_STATUS_BAD_PARAM;
    if (v.index < 0 || v.index >= kEngineCount) return CUDNN_STATUS_BAD_PARAM;
    const auto& e = v.graph->engines;
    if (std::find(e.begin(), e.end(), v.index) == e.end()) return CUDNN_STATUS_NOT_SUPPORTED;
    return CUDNN_STATUS_SUCCESS;
  }
  cudnnStatus_t get(cudnnBackendAttributeName_t name, const Out& o) const override;
};

cudnnStatus_t EngineDesc::set(cudnnBackendAttributeName_t name, const In& in) {
  cudnnStatus_t st;
  switch (name) {
    case CUDNN_ATTR_ENGINE_OPERATION_GRAPH: {
      const GraphDesc* g = nullptr;
      if ((st = descAttr(in, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g)) != CUDNN_STATUS_SUCCESS)
        return st;
      v.graph = g->value;
      return st;
    }
    case CUDNN_ATTR_ENGINE_GLOBAL_INDEX:
      if ((st = scalar(in, CUDNN_TYPE_INT64, &v.index)) == CUDNN_STATUS_SUCCESS) indexSet = true;
      return st;
    case CUDNN_ATTR_ENGINE_SM_COUNT_TARGET: {
      int32_t sms;  // one simulated device size fits all
      return scalar(in, CUDNN_TYPE_INT32, &sms);
    }
    default:
      return CUDNN_STATUS_BAD_PARAM;
  }
}

struct KnobChoiceDesc : Desc {
  cudnnBackendKnobType_t type = CUDNN_KNOB_TYPE_COUNTS;
  int64_t value = 0;

  KnobChoiceDesc() : Desc(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR) {}
  cudnnStatus_t set(cudnnBackendAttributeName_t name, const In& in) override {
    if (name == CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE) return scalar(in, CUDNN_TYPE_KNOB_TYPE, &type);
    if (name == CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE) return scalar(in, CUDNN_TYPE_INT64, &value);
    return CUDNN_STATUS_BAD_PARAM;
  }
  cudnnStatus_t finalize() override {
    return type < CUDNN_KNOB_TYPE_COUNTS ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
  }
  cudnnStatus_t get(cudnnBackendAttributeName_t name, const Out& o) const override {
    if (name == CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE) return put1(o, CUDNN_TYPE_KNOB_TYPE, type);
    if (name == CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE) return put1(o, CUDNN_TYPE_INT64, value);
    return CUDNN_STATUS_BAD_PARAM;
  }
};

struct ConfigVal {
  EngineVal engine;
  std::vector<std::pair<cudnnBackendKnobType_t, int64_t>> knobs;  // accepted, no effect
};

// Fills a caller-created descriptor from a value (descriptor-valued getters).
void assignEngine(EngineDesc* d, const EngineVal& v) {
  d->v = v;
  d->indexSet = true;
}

struct EngineCfgDesc : Desc {
  ConfigVal v;

  EngineCfgDesc() : Desc(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR) {}
  cudnnStatus_t set(cudnnBackendAttributeName_t name, const In& in) override {
    cudnnStatus_t st;
    switch (name) {
      case CUDNN_ATTR_ENGINECFG_ENGINE: {
        const EngineDesc* e = nullptr;
        if ((st = descAttr(in, CUDNN_BACKEND_ENGINE_DESCRIPTOR, &e)) != CUDNN_STATUS_SUCCESS)
          return st;
        v.engine = e->v;
        return st;
      }
      case CUDNN_ATTR_ENGINECFG_KNOB_CHOICES: {
        if ((st = expect(in, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, CUDNN_KNOB_TYPE_COUNTS)) !=
            CUDNN_STATUS_SUCCESS)
          return st;
        v.knobs.clear();
        for (int64_t i = 0; i < in.count; ++i) {
          const KnobChoiceDesc* k = nullptr;
          if ((st = descValue(in.at<cudnnBackendDescriptor_t>(i),
                              CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &k)) != CUDNN_STATUS_SUCCESS)
            return st;
          v.knobs.emplace_back(k->type, k->value);
        }
        return st;
      }
      default:
        return CUDNN_STATUS_BAD_PARAM;
    }
  }
  cudnnStatus_t finalize() override {
    return v.engine.graph ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
  }
  cudnnStatus_t get(cudnnBackendAttributeName_t name, const Out& o) const override {
    switch (name) {
      case CUDNN_ATTR_ENGINECFG_ENGINE:
        return fillDescs<EngineDesc>(o, CUDNN_BACKEND_ENGINE_DESCRIPTOR, 1,
                                     [&](EngineDesc* d, int64_t) { assignEngine(d, v.engine); });
      case CUDNN_ATTR_ENGINECFG_KNOB_CHOICES:
        return fillDescs<KnobChoiceDesc>(o, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR,
                                         static_cast<int64_t>(v.knobs.size()),
                                         [&](KnobChoiceDesc* d, int64_t i) {
                                           d->type = v.knobs[static_cast<size_t>(i)].first;
                                           d->value = v.knobs[static_cast<size_t>(i)].second;
                                         });
      case CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE:
        return put1(o, CUDNN_TYPE_INT64, v.engine.graph->workspace);
      default:
        return CUDNN_STATUS_BAD_PARAM;
    }
  }
};

cudnnStatus_t EngineDesc::get(cudnnBackendAttributeName_t name, const Out& o) const {
  switch (name) {
    case CUDNN_ATTR_ENGINE_GLOBAL_INDEX:
      return put1(o, CUDNN_TYPE_INT64, v.index);
    case CUDNN_ATTR_ENGINE_NUMERICAL_NOTE: {
      const auto notes = numericalNotes(v.index);
      return put(o, CUDNN_TYPE_NUMERICAL_NOTE, notes.data(), static_cast<int64_t>(notes.size()));
    }
    case CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE:
      return put1(o, CUDNN_TYPE_BEHAVIOR_NOTE, CUDNN_BEHAVIOR_NOTE_SUPPORTS_CUDA_GRAPH_NATIVE_API);
    case CUDNN_ATTR_ENGINE_KNOB_INFO:
      return fillDescs<Desc>(o, CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR, 0, [](Desc*, int64_t) {});
    case CUDNN_ATTR_ENGINE_LAYOUT_INFO:
      return fillDescs<Desc>(o, CUDNN_BACKEND_LAYOUT_INFO_DESCRIPTOR, 0, [](Desc*, int64_t) {});
    case CUDNN_ATTR_ENGINE_OPERATION_GRAPH:
      return fillDescs<GraphDesc>(o, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, 1,
                                  [&](GraphDesc* d, int64_t) {
                                    d->ops = v.graph->ops;
                                    d->value = v.graph;
                                  });
    default:
      return CUDNN_STATUS_BAD_PARAM;
  }
}

struct HeurDesc : Desc {
  std::shared_ptr<const GraphVal> graph;
  cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_INSTANT;
  bool modeSet = false;
  std::vector<int64_t> results;

  HeurDesc() : Desc(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR) {}
  cudnnStatus_t set(cudnnBackendAttributeName_t name, const In& in) override {
    cudnnStatus_t st;
    switch (name) {
      case CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH: {
        const GraphDesc* g = nullptr;
        if ((st = descAttr(in, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g)) !=
            CUDNN_STATUS_SUCCESS)
          return st;
        graph = g->value;
        return st;
      }
      case CUDNN_ATTR_ENGINEHEUR_MODE:
        if ((st = scalar(in, CUDNN_TYPE_HEUR_MODE, &mode)) != CUDNN_STATUS_SUCCESS) return st;
        if (mode < CUDNN_HEUR_MODE_INSTANT || mode >= CUDNN_HEUR_MODES_COUNT)
          return CUDNN_STATUS_BAD_PARAM;
        modeSet = true;
        return st;
      case CUDNN_ATTR_ENGINEHEUR_SM_COUNT_TARGET: {
        int32_t sms;
        return scalar(in, CUDNN_TYPE_INT32, &sms);
      }
      default:
        return CUDNN_STATUS_BAD_PARAM;
    }
  }
  cudnnStatus_t finalize() override {
    if (!graph || !modeSet) return CUDNN_STATUS_BAD_PARAM;
    // A deterministic order: tensor cores first, reduced precision last; FALLBACK: FMA first.
    const std::vector<int64_t> order = mode == CUDNN_HEUR_MODE_FALLBACK
                                           ? std::vector<int64_t>{0, 1, 2}
                                           : std::vector<int64_t>{1, 0, 2};
    results.clear();
    for (int64_t e : order)
      if (std::find(graph->engines.begin(), graph->engines.end(), e) != graph->engines.end())
        results.push_back(e);
    return CUDNN_STATUS_SUCCESS;
  }
  cudnnStatus_t get(cudnnBackendAttributeName_t name, const Out& o) const override {
    if (name != CUDNN_ATTR_ENGINEHEUR_RESULTS) return CUDNN_STATUS_BAD_PARAM;
    return fillDescs<EngineCfgDesc>(o, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR,
                                    static_cast<int64_t>(results.size()),
                                    [&](EngineCfgDesc* d, int64_t i) {
                                      d->v = ConfigVal{};
                                      d->v.engine.graph = graph;
                                      d->v.engine.index = results[static_cast<size_t>(i)];
                                    });
  }
};

struct PlanDesc : Desc {
  ConfigVal cfg;
  cudnnHandle_t handle = nullptr;

  PlanDesc() : Desc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) {}
  cudnnStatus_t set(cudnnBackendAttributeName_t name, const In& in) override {
    cudnnStatus_t st;
    switch (name) {
      case CUDNN_ATTR_EXECUTION_PLAN_HANDLE:
        if ((st = scalar(in, CUDNN_TYPE_HANDLE, &handle)) != CUDNN_STATUS_SUCCESS) return st;
        return validHandle(handle) ? st : CUDNN_STATUS_BAD_PARAM;
      case CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG: {
        const EngineCfgDesc* c = nullptr;
        if ((st = descAttr(in, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &c)) != CUDNN_STATUS_SUCCESS)
          return st;
        cfg = c->v;
        return st;
      }
      default:
        return CUDNN_STATUS_BAD_PARAM;
    }
  }
  cudnnStatus_t finalize() override {
    return cfg.engine.graph ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
  }
  cudnnStatus_t get(cudnnBackendAttributeName_t name, const Out& o) const override {
    switch (name) {
      case CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE:
        return put1(o, CUDNN_TYPE_INT64, cfg.engine.graph->workspace);
      case CUDNN_ATTR_EXECUTION_PLAN_HANDLE:
        return put1(o, CUDNN_TYPE_HANDLE, handle);
      case CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG:
        return fillDescs<EngineCfgDesc>(o, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, 1,
                                        [&](EngineCfgDesc* d, int64_t) { d->v = cfg; });
      default:
        return CUDNN_STATUS_BAD_PARAM;
    }
  }
};

struct VariantPackDesc : Desc {
  std::vector<int64_t> uids;
  std::vector<void*> ptrs;
  void* workspace = nullptr;

  VariantPackDesc() : Desc(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR) {}
  cudnnStatus_t set(cudnnBackendAttributeName_t name, const In& in) override {
    cudnnStatus_t st;
    switch (name) {
      case CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS:
        if ((st = expect(in, CUDNN_TYPE_INT64, 0, 1 << 20)) != CUDNN_STATUS_SUCCESS) return st;
        uids.clear();
        for (int64_t i = 0; i < in.count; ++i) uids.push_back(in.at<int64_t>(i));
        return st;
      case CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS:
        if ((st = expect(in, CUDNN_TYPE_VOID_PTR, 0, 1 << 20)) != CUDNN_STATUS_SUCCESS) return st;
        ptrs.clear();
        for (int64_t i = 0; i < in.count; ++i) ptrs.push_back(in.at<void*>(i));
        return st;
      case CUDNN_ATTR_VARIANT_PACK_WORKSPACE:
        return scalar(in, CUDNN_TYPE_VOID_PTR, &workspace);
      case CUDNN_ATTR_VARIANT_PACK_INTERMEDIATES:  // no engine computes intermediates here
        return expect(in, CUDNN_TYPE_VOID_PTR, 0, 1 << 20);
      default:
        return CUDNN_STATUS_BAD_PARAM;
    }
  }
  cudnnStatus_t finalize() override {
    if (uids.size() != ptrs.size()) return CUDNN_STATUS_BAD_PARAM;
    std::vector<int64_t> sorted = uids;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      return CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES;
    return CUDNN_STATUS_SUCCESS;
  }
  cudnnStatus_t get(cudnnBackendAttributeName_t name, const Out& o) const override {
    switch (name) {
      case CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS:
        return put(o, CUDNN_TYPE_INT64, uids.data(), static_cast<int64_t>(uids.size()));
      case CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS:
        return put(o, CUDNN_TYPE_VOID_PTR, ptrs.data(), static_cast<int64_t>(ptrs.size()));
      case CUDNN_ATTR_VARIANT_PACK_WORKSPACE:
        return put1(o, CUDNN_TYPE_VOID_PTR, workspace);
      default:
        return CUDNN_STATUS_BAD_PARAM;
    }
  }
};

Desc* create(cudnnBackendDescriptorType_t type) {
  switch (type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
      return new TensorDesc;
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR:
      return new ConvDesc;
    case CUDNN_BACKEND_MATMUL_DESCRIPTOR:
      return new MatmulDesc;
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR:
      return new PointwiseDesc;
    case CUDNN_BACKEND_REDUCTION_DESCRIPTOR:
      return new ReductionDesc;
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
      return new GraphDesc;
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
      return new EngineDesc;
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
      return new EngineCfgDesc;
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
      return new HeurDesc;
    case CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR:
      return new KnobChoiceDesc;
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
      return new PlanDesc;
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
      return new VariantPackDesc;
    default:
      return isOperation(type) ? new OpDesc(type) : nullptr;
  }
}

// --- execution ----------------------------------------------------------------------------------

// One Execute's bindings, captured by value into the work item (a graph may replay it).
struct Run {
  std::shared_ptr<const GraphVal> graph;
  int64_t engine = 0;
  std::map<int64_t, const void*> ptr;                     // non-virtual UID -> device pointer
  std::map<int64_t, std::vector<unsigned char>> byValue;  // UID -> the host scalar's bytes
  std::vector<bool> bump;                                 // per op: nondet fault
};

// The tensors of one evaluation: device memory, host copies of by-value scalars, and host
// temporaries (in their declared types) for virtual tensors.
struct Env {
  const Run& run;
  std::map<int64_t, std::vector<unsigned char>> temps;

  explicit Env(const Run& r) : run(r) {
    for (const TensorVal& t : r.graph->tensors)
      if (t.isVirtual) temps[t.uid].assign(static_cast<size_t>(t.bytes()), 0);
  }
  Tensor view(const OpVal& op, int name) {
    const TensorVal& t = *op.t(name);
    Tensor v;
    v.type = t.dtype();
    v.nbDims = t.nbDims;
    for (int i = 0; i < t.nbDims; ++i) {
      v.dim[i] = t.dim[i];
      v.stride[i] = t.stride[i];
    }
    if (t.isVirtual)
      v.data = temps.at(t.uid).data();
    else if (t.byValue)
      v.data = run.byValue.at(t.uid).data();
    else
      v.data = run.ptr.at(t.uid);
    return v;
  }
  std::vector<double> read(const OpVal& op, int name) { return sim::conv::gather(view(op, name)); }
  void write(const OpVal& op, int name, const std::vector<double>& v) {
    sim::conv::scatter(view(op, name), v);
  }
};

// For each logical element of `out`, the logical index of the element of `in` (dims equal or
// 1) broadcast to it.
std::vector<size_t> broadcastMap(const TensorVal& out, const TensorVal& in) {
  std::vector<size_t> map(static_cast<size_t>(out.count()));
  int64_t inStride[kMaxRank];
  int64_t acc = 1;
  for (int i = in.nbDims - 1; i >= 0; --i) {
    inStride[i] = in.dim[i] == 1 ? 0 : acc;
    acc *= in.dim[i];
  }
  for (int64_t l = 0; l < out.count(); ++l) {
    int64_t rest = l, idx = 0;
    for (int i = out.nbDims - 1; i >= 0; --i) {
      idx += (rest % out.dim[i]) * inStride[i];
      rest /= out.dim[i];
    }
    map[static_cast<size_t>(l)] = static_cast<size_t>(idx);
  }
  return map;
}

// The accumulation and input rounding of a contraction on engine `engine`.
void contractionPrecision(int64_t engine, DType data, cudnnDataType_t comp,
                          sim::conv::ConvProblem* p) {
  using sim::conv::Accum;
  p->tf32 = false;
  if (data == DType::F64) {
    p->accum = Accum::F64;
  } else if (engine == 2 && (data == DType::F16 || data == DType::BF16)) {
    p->accum = data == DType::F16 ? Accum::F16 : Accum::BF16;
  } else {
    p->accum =
        comp == CUDNN_DATA_HALF && data == DType::F16 && faults().accum16 ? Accum::F16 : Accum::F32;
    p->tf32 = engine >= 1 && data == DType::F32 && !tf32Disabled();
  }
}

void runConv(const OpVal& op, Env& env, bool bump) {
  sim::conv::ConvProblem p;
  const ConvRoles r = convRoles(op.kind);
  p.dir = op.kind == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR
              ? sim::conv::Direction::BackwardData
          : op.kind == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR
              ? sim::conv::Direction::BackwardFilter
              : sim::conv::Direction::Forward;
  const ConvVal& c = op.conv;
  p.spatial = static_cast<int>(c.spatial);
  for (int i = 0; i < p.spatial; ++i) {
    p.pad[i] = c.pre[i];
    p.stride[i] = c.stride[i];
    p.dil[i] = c.dil[i];
  }
  p.flip = c.mode == CUDNN_CONVOLUTION;
  p.x = env.view(op, r.x);
  p.w = env.view(op, r.w);
  p.y = env.view(op, r.y);
  p.groups = p.x.dim[1] / p.w.dim[1];
  contractionPrecision(env.run.engine, op.t(op.inputs[0])->dtype(), c.comp, &p);
  p.alpha = op.alpha;
  p.beta = op.beta;
  const Faults& f = faults();
  if (f.wrong && f.wrongC == p.x.dim[1] && f.wrongK == p.w.dim[0]) p.scale = kWrongScale;
  p.bump = bump;
  sim::conv::execute(p);
}

// A matmul is, per batch, a 1x1 convolution over one spatial dimension: image [1, K, M] (A's
// columns as channels), filter [N, K, 1] (B's columns as output channels), output [1, N, M].
void runMatmul(const OpVal& op, Env& env) {
  const Tensor a = env.view(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC);
  const Tensor b = env.view(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC);
  const Tensor c = env.view(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC);
  const int64_t batch = c.dim[0], M = c.dim[1], N = c.dim[2], K = a.dim[2];
  sim::conv::ConvProblem p;
  p.dir = sim::conv::Direction::Forward;
  p.spatial = 1;
  contractionPrecision(env.run.engine, a.type, op.mmComp, &p);
  const Faults& f = faults();
  if (f.wrongMatmul && f.mmM == M && f.mmN == N && f.mmK == K) p.scale = kWrongScale;
  auto at = [](const Tensor& t, int64_t batchIndex) {
    const int64_t off = t.dim[0] == 1 ? 0 : batchIndex * t.stride[0];
    return reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(t.data) +
                                         static_cast<uintptr_t>(off) *
                                             sim::gemm::dtypeSize(t.type));
  };
  auto make = [](const Tensor& t, int64_t d1, int64_t s1, int64_t d2, int64_t s2, int64_t d0,
                 int64_t s0) {
    Tensor v;
    v.type = t.type;
    v.nbDims = 3;
    v.dim[0] = d0;
    v.stride[0] = s0;
    v.dim[1] = d1;
    v.stride[1] = s1;
    v.dim[2] = d2;
    v.stride[2] = s2;
    return v;
  };
  for (int64_t i = 0; i < batch; ++i) {
    p.x = make(a, K, a.stride[2], M, a.stride[1], 1, 0);
    p.w = make(b, K, b.stride[1], 1, 1, N, b.stride[2]);
    p.y = make(c, N, c.stride[2], M, c.stride[1], 1, 0);
    p.x.data = at(a, i);
    p.w.data = at(b, i);
    p.y.data = at(c, i);
    sim::conv::execute(p);
  }
}

double pointwise(const PointwiseVal& pw, double x, double b) {
  const double kSqrt2 = std::sqrt(2.0);
  switch (pw.mode) {
    case CUDNN_POINTWISE_ADD:
      return x + b;
    case CUDNN_POINTWISE_ADD_SQUARE:
      return x + b * b;
    case CUDNN_POINTWISE_SUB:
      return x - b;
    case CUDNN_POINTWISE_MUL:
      return x * b;
    case CUDNN_POINTWISE_DIV:
      return x / b;
    case CUDNN_POINTWISE_MAX:
      return std::isnan(x) || std::isnan(b) ? x + b : std::max(x, b);
    case CUDNN_POINTWISE_MIN:
      return std::isnan(x) || std::isnan(b) ? x + b : std::min(x, b);
    case CUDNN_POINTWISE_POW:
      return std::pow(x, b);
    case CUDNN_POINTWISE_IDENTITY:
      return x;
    case CUDNN_POINTWISE_NEG:
      return -x;
    case CUDNN_POINTWISE_ABS:
      return std::fabs(x);
    case CUDNN_POINTWISE_EXP:
      return std::exp(x);
    case CUDNN_POINTWISE_LOG:
      return std::log(x);
    case CUDNN_POINTWISE_SQRT:
      return std::sqrt(x);
    case CUDNN_POINTWISE_RSQRT:
      return 1 / std::sqrt(x);
    case CUDNN_POINTWISE_RECIPROCAL:
      return 1 / x;
    case CUDNN_POINTWISE_RELU_FWD:  // NaN passes through
      if (x > pw.upperClip) return pw.upperClip;
      if (x < pw.lowerClip) return pw.lowerClip + pw.slope * (x - pw.lowerClip);
      return x;
    case CUDNN_POINTWISE_TANH_FWD:
      return std::tanh(x);
    case CUDNN_POINTWISE_SIGMOID_FWD:
      return 1 / (1 + std::exp(-x));
    case CUDNN_POINTWISE_ELU_FWD:
      return x > 0 ? x : pw.eluAlpha * std::expm1(x);
    case CUDNN_POINTWISE_GELU_FWD:
      return 0.5 * x * (1 + std::erf(x / kSqrt2));
    case CUDNN_POINTWISE_SOFTPLUS_FWD:
      return std::log1p(std::exp(pw.softplusBeta * x)) / pw.softplusBeta;
    case CUDNN_POINTWISE_SWISH_FWD:
      return x / (1 + std::exp(-pw.swishBeta * x));
    // Backward: x is the forward input, b the incoming gradient.
    case CUDNN_POINTWISE_RELU_BWD:
      if (x > pw.lowerClip && x < pw.upperClip) return b;
      return x <= pw.lowerClip ? pw.slope * b : 0.0;
    case CUDNN_POINTWISE_TANH_BWD: {
      const double t = std::tanh(x);
      return b * (1 - t * t);
    }
    case CUDNN_POINTWISE_SIGMOID_BWD: {
      const double s = 1 / (1 + std::exp(-x));
      return b * s * (1 - s);
    }
    default:
      return std::numeric_limits<double>::quiet_NaN();  // not accepted by finalize
  }
}

// Inputs, scaled inputs and the result are rounded to MATH_PREC; the store rounds to Y's type.
void runPointwise(const OpVal& op, Env& env) {
  DType prec = DType::F32;
  floatingType(op.pw.prec, &prec);
  auto R = [prec](double v) { return sim::gemm::roundToType(v, prec); };
  const int out = op.outputs[0];
  const TensorVal& y = *op.t(out);
  const std::vector<double> x = env.read(op, op.inputs[0]);
  const std::vector<size_t> xm = broadcastMap(y, *op.t(op.inputs[0]));
  std::vector<double> b;
  std::vector<size_t> bm;
  if (op.inputs.size() > 1) {
    b = env.read(op, op.inputs[1]);
    bm = broadcastMap(y, *op.t(op.inputs[1]));
  }
  const double a1 = R(op.alpha), a2 = R(op.alpha2);
  std::vector<double> result(static_cast<size_t>(y.count()));
  for (size_t l = 0; l < result.size(); ++l) {
    const double xv = R(a1 * R(x[xm[l]]));
    const double bv = b.empty() ? 0.0 : R(a2 * R(b[bm[l]]));
    result[l] = R(pointwise(op.pw, xv, bv));
  }
  env.write(op, out, result);
}

// Sequential in x's logical order, in COMP_TYPE (float or double).
void runReduction(const OpVal& op, Env& env) {
  const TensorVal& xt = *op.t(CUDNN_ATTR_OPERATION_REDUCTION_XDESC);
  const TensorVal& yt = *op.t(CUDNN_ATTR_OPERATION_REDUCTION_YDESC);
  const std::vector<double> x = env.read(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC);
  const std::vector<size_t> ym = broadcastMap(xt, yt);
  const bool f32 = op.red.comp == CUDNN_DATA_FLOAT;
  auto R = [f32](double v) { return f32 ? static_cast<double>(static_cast<float>(v)) : v; };
  const cudnnReduceTensorOp_t k = op.red.op;
  const double init = k == CUDNN_REDUCE_TENSOR_MUL   ? 1.0
                      : k == CUDNN_REDUCE_TENSOR_MIN ? std::numeric_limits<double>::infinity()
                      : k == CUDNN_REDUCE_TENSOR_MAX ? -std::numeric_limits<double>::infinity()
                                                     : 0.0;
  std::vector<double> acc(static_cast<size_t>(yt.count()), init);
  for (size_t l = 0; l < x.size(); ++l) {
    double& a = acc[ym[l]];
    const double v = R(x[l]);
    switch (k) {
      case CUDNN_REDUCE_TENSOR_MUL:
        a = R(a * v);
        break;
      case CUDNN_REDUCE_TENSOR_MIN:
        a = std::isnan(v) || v < a ? v : a;
        break;
      case CUDNN_REDUCE_TENSOR_MAX:
        a = std::isnan(v) || v > a ? v : a;
        break;
      case CUDNN_REDUCE_TENSOR_AMAX:
        a = std::isnan(v) || std::fabs(v) > a ? std::fabs(v) : a;
        break;
      case CUDNN_REDUCE_TENSOR_NORM1:
        a = R(a + std::fabs(v));
        break;
      case CUDNN_REDUCE_TENSOR_NORM2:
        a = R(a + R(v * v));
        break;
      default:
        a = R(a + v);
        break;  // ADD, AVG
    }
  }
  const double per = static_cast<double>(xt.count() / yt.count());
  for (double& a : acc) {
    if (k == CUDNN_REDUCE_TENSOR_AVG) a = R(a / per);
    if (k == CUDNN_REDUCE_TENSOR_NORM2) a = R(std::sqrt(a));
  }
  env.write(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, acc);
}

// Norms in double: statistics per group (the elements of x mapping to one element of the
// statistics shape), scale and bias per element of their own shape.
void runNormForward(const OpVal& op, Env& env) {
  const TensorVal& xt = *op.t(CUDNN_ATTR_OPERATION_NORM_FWD_XDESC);
  const std::vector<double> x = env.read(op, CUDNN_ATTR_OPERATION_NORM_FWD_XDESC);
  const std::vector<double> scale = env.read(op, CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC);
  const std::vector<double> bias = env.read(op, CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC);
  const std::vector<size_t> g = broadcastMap(xt, op.stats);
  const std::vector<size_t> pm = broadcastMap(xt, *op.t(CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC));
  const size_t G = static_cast<size_t>(op.stats.count());
  const double M = static_cast<double>(xt.count()) / static_cast<double>(G);
  std::vector<double> mean(G, 0.0), var(G, 0.0), inv(G, 0.0);
  const bool given = op.normMode == CUDNN_BATCH_NORM && op.phase == CUDNN_NORM_FWD_INFERENCE;
  if (given) {
    mean = env.read(op, CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC);
    inv = env.read(op, CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC);
  } else {
    const double eps = env.read(op, CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC)[0];
    for (size_t l = 0; l < x.size(); ++l) mean[g[l]] += x[l];
    for (double& m : mean) m /= M;
    for (size_t l = 0; l < x.size(); ++l) {
      const double d = x[l] - mean[g[l]];
      var[g[l]] += d * d;
    }
    for (size_t j = 0; j < G; ++j) {
      var[j] /= M;
      inv[j] = 1.0 / std::sqrt(var[j] + eps);
    }
  }
  std::vector<double> y(x.size());
  for (size_t l = 0; l < x.size(); ++l)
    y[l] = scale[pm[l]] * (x[l] - mean[g[l]]) * inv[g[l]] + bias[pm[l]];
  env.write(op, CUDNN_ATTR_OPERATION_NORM_FWD_YDESC, y);
  if (given) return;
  if (op.has(CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC))
    env.write(op, CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC, mean);
  if (op.has(CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC))
    env.write(op, CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC, inv);
  if (op.has(CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC)) {  // running statistics
    const double f = env.read(op, CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC)[0];
    std::vector<double> m = env.read(op, CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC);
    std::vector<double> v = env.read(op, CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC);
    const double unbias = M > 1 ? M / (M - 1) : 1.0;  // the running variance is unbiased
    for (size_t j = 0; j < G; ++j) {
      m[j] = (1 - f) * m[j] + f * mean[j];
      v[j] = (1 - f) * v[j] + f * var[j] * unbias;
    }
    env.write(op, CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC, m);
    env.write(op, CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC, v);
  }
}

void runNormBackward(const OpVal& op, Env& env) {
  const TensorVal& xt = *op.t(CUDNN_ATTR_OPERATION_NORM_BWD_XDESC);
  const TensorVal& st = *op.t(CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC);
  const std::vector<double> x = env.read(op, CUDNN_ATTR_OPERATION_NORM_BWD_XDESC);
  const std::vector<double> dy = env.read(op, CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC);
  const std::vector<double> scale = env.read(op, CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC);
  const std::vector<double> mean = env.read(op, CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC);
  const std::vector<double> inv = env.read(op, CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC);
  const std::vector<size_t> g = broadcastMap(xt, op.stats);
  const std::vector<size_t> pm = broadcastMap(xt, st);
  const size_t G = static_cast<size_t>(op.stats.count());
  const double M = static_cast<double>(xt.count()) / static_cast<double>(G);
  std::vector<double> ds(static_cast<size_t>(st.count()), 0.0), db(ds.size(), 0.0);
  std::vector<double> s1(G, 0.0), s2(G, 0.0), xhat(x.size());
  for (size_t l = 0; l < x.size(); ++l) {
    xhat[l] = (x[l] - mean[g[l]]) * inv[g[l]];
    ds[pm[l]] += dy[l] * xhat[l];
    db[pm[l]] += dy[l];
    const double dxhat = dy[l] * scale[pm[l]];
    s1[g[l]] += dxhat;
    s2[g[l]] += dxhat * xhat[l];
  }
  std::vector<double> dx(x.size());
  for (size_t l = 0; l < x.size(); ++l)
    dx[l] = inv[g[l]] * (dy[l] * scale[pm[l]] - s1[g[l]] / M - xhat[l] * s2[g[l]] / M);
  env.write(op, CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC, dx);
  env.write(op, CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC, ds);
  env.write(op, CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC, db);
}

// SDPA forward in double, per (batch, head, query row): s = SCALE·q·kᵀ over the kv axis, p =
// exp(s − max s), O = Σ p·v / Σ p, STATS = max s + log Σ p. Query head h reads key head
// h / (H/H_k) and value head h / (H/H_v). O and STATS are rounded once, at the store.
void runSdpa(const OpVal& op, Env& env) {
  const int Q = CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, K = CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC,
            V = CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC,
            SCALE = CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC,
            STATS = CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC;
  const TensorVal &qt = *op.t(Q), &kt = *op.t(K), &vt = *op.t(V);
  const int64_t B = qt.dim[0], H = qt.dim[1], Sq = qt.dim[2], D = qt.dim[3];
  const int64_t Hk = kt.dim[1], Skv = kt.dim[2], Hv = vt.dim[1], Dv = vt.dim[3];
  const std::vector<double> q = env.read(op, Q), k = env.read(op, K), v = env.read(op, V);
  const double scale = op.has(SCALE) ? env.read(op, SCALE)[0] : 1.0;
  const Faults& f = faults();
  const double wrong = f.wrongSdpa && f.sdpaSq == Sq && f.sdpaSkv == Skv ? kWrongScale : 1.0;
  std::vector<double> o(static_cast<size_t>(B * H * Sq * Dv));
  std::vector<double> stats(static_cast<size_t>(B * H * Sq)), p(static_cast<size_t>(Skv));
  auto at = [](const std::vector<double>& t, int64_t i) { return t[static_cast<size_t>(i)]; };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kRows = (b * Hk + h / (H / Hk)) * Skv, vRows = (b * Hv + h / (H / Hv)) * Skv;
      for (int64_t i = 0; i < Sq; ++i) {
        const int64_t row = (b * H + h) * Sq + i;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < Skv; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += at(q, row * D + d) * at(k, (kRows + j) * D + d);
          p[static_cast<size_t>(j)] = scale * dot;
          mx = std::max(mx, scale * dot);
        }
        double z = 0;
        for (double& e : p) z += e = std::exp(e - mx);
        for (int64_t e = 0; e < Dv; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < Skv; ++j)
            acc += p[static_cast<size_t>(j)] * at(v, (vRows + j) * Dv + e);
          o[static_cast<size_t>(row * Dv + e)] = acc / z * wrong;
        }
        stats[static_cast<size_t>(row)] = mx + std::log(z);
      }
    }
  env.write(op, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, o);
  if (op.has(STATS)) env.write(op, STATS, stats);
}

// The work item: every op in dependency order. Called on the stream only.
void evaluate(const Run& run) {
  Env env(run);
  const auto& ops = run.graph->ops;
  for (size_t i = 0; i < ops.size(); ++i) {
    const OpVal& op = ops[i];
    switch (op.kind) {
      case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
        runMatmul(op, env);
        break;
      case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
        runPointwise(op, env);
        break;
      case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR:
        runReduction(op, env);
        break;
      case CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR:
        runNormForward(op, env);
        break;
      case CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR:
        runNormBackward(op, env);
        break;
      case CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR:
        runSdpa(op, env);
        break;
      default:
        runConv(op, env, run.bump[i]);
        break;
    }
  }
}

// sim_cudnn_graph_eng<E>_<type>_kernel; the names live as long as the process.
const char* graphKernelName(int64_t engine, DType t) {
  static std::string* names = [] {
    auto* n = new std::string[kEngineCount * 4];
    const DType types[] = {DType::F64, DType::F32, DType::F16, DType::BF16};
    for (int e = 0; e < kEngineCount; ++e)
      for (int d = 0; d < 4; ++d)
        n[e * 4 + d] =
            "sim_cudnn_graph_eng" + std::to_string(e) + "_" + typeName(types[d]) + "_kernel";
    return n;
  }();
  return names[engine * 4 + static_cast<int>(t)].c_str();
}

// Validates an Execute / PopulateCudaGraph call and binds the variant pack.
cudnnStatus_t bind(cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
                   cudnnBackendDescriptor_t pack, Run* run) {
  if (!validHandle(handle)) return CUDNN_STATUS_BAD_PARAM;
  const PlanDesc* p = nullptr;
  const VariantPackDesc* vp = nullptr;
  cudnnStatus_t st = descValue(plan, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  if ((st = descValue(pack, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp)) != CUDNN_STATUS_SUCCESS)
    return st;
  run->graph = p->cfg.engine.graph;
  run->engine = p->cfg.engine.index;
  const GraphVal& g = *run->graph;
  for (const TensorVal& t : g.tensors) {
    if (t.isVirtual) continue;
    auto it = std::find(vp->uids.begin(), vp->uids.end(), t.uid);
    if (it == vp->uids.end()) return CUDNN_STATUS_BAD_PARAM;  // a tensor without data
    const void* ptr = vp->ptrs[static_cast<size_t>(it - vp->uids.begin())];
    if (!ptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    if (t.byValue) {  // a host scalar, read now
      if (sim::isDevicePointer(ptr)) return CUDNN_STATUS_BAD_PARAM;
      const auto* bytes = static_cast<const unsigned char*>(ptr);
      run->byValue[t.uid].assign(bytes, bytes + elementSize(t.type));
      continue;
    }
    if (!deviceAccessible(ptr)) return CUDNN_STATUS_BAD_PARAM;
    if (reinterpret_cast<uintptr_t>(sim::hostAddress(ptr)) % static_cast<uintptr_t>(t.alignment))
      return CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER;
    run->ptr[t.uid] = ptr;
  }
  if (g.workspace > 0 && !deviceAccessible(vp->workspace)) return CUDNN_STATUS_BAD_PARAM;
  return CUDNN_STATUS_SUCCESS;
}

// The planted nondet fault: decided per forward convolution at call time.
void decideBumps(Run* run) {
  for (const OpVal& op : run->graph->ops)
    run->bump.push_back(op.kind == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR &&
                        faults().nondet && (nondetCounter().fetch_add(1) & 1) != 0);
}

}  // namespace

extern "C" {

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t descriptorType,
                                           cudnnBackendDescriptor_t* descriptor) {
  return guarded([&] {
    if (!descriptor) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    Desc* d = create(descriptorType);
    if (!d) return CUDNN_STATUS_NOT_SUPPORTED;
    std::lock_guard<std::mutex> lk(registryMutex());
    registry().insert(d);
    *descriptor = d;
    return CUDNN_STATUS_SUCCESS;
  });
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor) {
  return guarded([&] {
    Desc* d = nullptr;
    {
      std::lock_guard<std::mutex> lk(registryMutex());
      auto it = registry().find(static_cast<Desc*>(descriptor));
      if (it == registry().end()) return CUDNN_STATUS_BAD_PARAM;
      d = *it;
      registry().erase(it);
    }
    delete d;  // finalized values that others hold are theirs (snapshots, shared graphs)
    return CUDNN_STATUS_SUCCESS;
  });
}

// Deprecated in cuDNN 9 (descriptors are initialised at creation).
cudnnStatus_t cudnnBackendInitialize(cudnnBackendDescriptor_t descriptor) {
  (void)descriptor;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor) {
  return guarded([&] {
    Desc* d = lookup(descriptor);
    if (!d || d->finalized) return CUDNN_STATUS_BAD_PARAM;
    const cudnnStatus_t st = d->finalize();
    if (st == CUDNN_STATUS_SUCCESS) d->finalized = true;
    return st;
  });
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor,
                                       cudnnBackendAttributeName_t attributeName,
                                       cudnnBackendAttributeType_t attributeType,
                                       int64_t elementCount, const void* arrayOfElements) {
  return guarded([&] {
    Desc* d = lookup(descriptor);
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    if (d->finalized) return CUDNN_STATUS_NOT_INITIALIZED;
    if (elementCount < 0) return CUDNN_STATUS_BAD_PARAM;
    if (elementCount > 0 && !arrayOfElements) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    return d->set(attributeName, In{attributeType, elementCount, arrayOfElements});
  });
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor,
                                       cudnnBackendAttributeName_t attributeName,
                                       cudnnBackendAttributeType_t attributeType,
                                       int64_t requestedElementCount, int64_t* elementCount,
                                       void* arrayOfElements) {
  return guarded([&] {
    const Desc* d = lookup(descriptor);
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    if (!d->finalized) return CUDNN_STATUS_NOT_INITIALIZED;
    if (requestedElementCount < 0) return CUDNN_STATUS_BAD_PARAM;
    if (!elementCount && !arrayOfElements) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    return d->get(attributeName,
                  Out{attributeType, requestedElementCount, elementCount, arrayOfElements});
  });
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t executionPlan,
                                  cudnnBackendDescriptor_t variantPack) {
  return guarded([&] {
    auto run = std::make_shared<Run>();
    const cudnnStatus_t st = bind(handle, executionPlan, variantPack, run.get());
    if (st != CUDNN_STATUS_SUCCESS) return st;
    decideBumps(run.get());
    return launch(handle->stream, graphKernelName(run->engine, run->graph->data),
                  [run] { evaluate(*run); });
  });
}

cudnnStatus_t cudnnBackendPopulateCudaGraph(cudnnHandle_t handle,
                                            cudnnBackendDescriptor_t executionPlan,
                                            cudnnBackendDescriptor_t variantPack,
                                            cudaGraph_t graph) {
  return guarded([&] {
    auto run = std::make_shared<Run>();
    const cudnnStatus_t st = bind(handle, executionPlan, variantPack, run.get());
    if (st != CUDNN_STATUS_SUCCESS) return st;
    decideBumps(run.get());
    // Owned by the graph (and its instantiations) from now on: never freed, as captured work.
    auto* task = new Task{[run] { evaluate(*run); }, false};
    if (cudaFumiSimGraphAddKernelNode(graph, graphKernelName(run->engine, run->graph->data),
                                      runTask, task) != cudaSuccess) {
      delete task;
      return CUDNN_STATUS_BAD_PARAM;
    }
    return CUDNN_STATUS_SUCCESS;
  });
}

cudnnStatus_t cudnnBackendUpdateCudaGraph(cudnnHandle_t handle,
                                          cudnnBackendDescriptor_t executionPlan,
                                          cudnnBackendDescriptor_t variantPack, cudaGraph_t graph) {
  (void)handle;
  (void)executionPlan;
  (void)variantPack;
  (void)graph;
  return CUDNN_STATUS_NOT_SUPPORTED;
}

}  // extern "C"
