// cudnn_backend.cpp — the cuDNN backend graph API (table in cudnn_backend.def).
//
// Bookkeeping: every descriptor the program creates gets a shadow (its type at Create, every
// successful SetAttribute kept raw — type, count, bytes — including attributes this header
// version does not name; dropped at Destroy). Descriptors cuDNN fills itself are linked to the
// operation graph they came from: engine configs returned by heuristics (ENGINEHEUR_RESULTS)
// and engines read out of a config (ENGINECFG_ENGINE). When an execution plan is finalized,
// fumi follows plan -> engine config -> engine -> operation graph -> operations -> tensors and
// keeps the result by value (PlanModel), with the engine's numerical notes, global index and
// the plan's workspace size read from cuDNN; the program may destroy every other descriptor
// afterwards.
//
// cudnnBackendExecute is an op. A sampled execution of a plan fumi models — one convolution
// (forward, backward data, backward filter) — is decoded into the legacy model (ConvProblem,
// cudnn_conv.h), its operands found in the variant pack by the UIDs the operation's attributes
// give each role (a variant pack's UIDs say nothing about roles), and checked like a legacy
// call: reruns at the call's own precision execute the same plan (kept alive while checks
// need it: a plan the program destroys meanwhile is destroyed after its last check), wider
// reruns go through the legacy entry point with a deterministic algo, and `reference` is
// fumi's host convolution. Other graphs run unchecked, counted skipped with the reason.
// cudnnBackendPopulateCudaGraph is an op that is never checked (it records work into a CUDA
// graph; nothing runs). docs/cuda.md describes the rules.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "call.h"
#include "cuda/checker.h"
#include "cuda/device_call.h"
#include "engine.h"
#include "engine_notes.h"
#include "hook.h"
#include "hooks/cudnn_common.h"
#include "hooks/cudnn_conv.h"
#include "reference.h"
#include "report.h"

namespace fumi::hooks {

// The real functions and op sites first.
#define FUMI_PASS_HOOK(name, ret, params, args) std::atomic<void*> g_real_##name{nullptr};
#define FUMI_HOOK FUMI_HOOK_STATE
#include "cudnn_backend.def"
#undef FUMI_HOOK
#undef FUMI_PASS_HOOK

namespace {


// ---- shadows ---------------------------------------------------------------------------------

// Bytes per element of an attribute type; 0 for types this header version does not name.
size_t elementBytes(cudnnBackendAttributeType_t t) {
  switch (t) {
    case CUDNN_TYPE_HANDLE: return sizeof(cudnnHandle_t);
    case CUDNN_TYPE_DATA_TYPE: return sizeof(cudnnDataType_t);
    case CUDNN_TYPE_BOOLEAN: return sizeof(bool);
    case CUDNN_TYPE_INT64: return sizeof(int64_t);
    case CUDNN_TYPE_FLOAT: return sizeof(float);
    case CUDNN_TYPE_DOUBLE: return sizeof(double);
    case CUDNN_TYPE_VOID_PTR: return sizeof(void*);
    case CUDNN_TYPE_CONVOLUTION_MODE: return sizeof(cudnnConvolutionMode_t);
    case CUDNN_TYPE_HEUR_MODE: return sizeof(cudnnBackendHeurMode_t);
    case CUDNN_TYPE_KNOB_TYPE: return sizeof(cudnnBackendKnobType_t);
    case CUDNN_TYPE_NUMERICAL_NOTE: return sizeof(cudnnBackendNumericalNote_t);
    case CUDNN_TYPE_LAYOUT_TYPE: return sizeof(cudnnBackendLayoutType_t);
    case CUDNN_TYPE_ATTRIB_NAME: return sizeof(cudnnBackendAttributeName_t);
    case CUDNN_TYPE_POINTWISE_MODE: return sizeof(cudnnPointwiseMode_t);
    case CUDNN_TYPE_BACKEND_DESCRIPTOR: return sizeof(cudnnBackendDescriptor_t);
    case CUDNN_TYPE_GENSTATS_MODE: return sizeof(cudnnGenStatsMode_t);
    case CUDNN_TYPE_BN_FINALIZE_STATS_MODE: return sizeof(cudnnBnFinalizeStatsMode_t);
    case CUDNN_TYPE_REDUCTION_OPERATOR_TYPE: return sizeof(cudnnReduceTensorOp_t);
    case CUDNN_TYPE_BEHAVIOR_NOTE: return sizeof(cudnnBackendBehaviorNote_t);
    case CUDNN_TYPE_TENSOR_REORDERING_MODE: return sizeof(cudnnBackendTensorReordering_t);
    case CUDNN_TYPE_RESAMPLE_MODE: return sizeof(cudnnResampleMode_t);
    case CUDNN_TYPE_PADDING_MODE: return sizeof(cudnnPaddingMode_t);
    case CUDNN_TYPE_INT32: return sizeof(int32_t);
    case CUDNN_TYPE_CHAR: return sizeof(char);
    case CUDNN_TYPE_SIGNAL_MODE: return sizeof(cudnnSignalMode_t);
    case CUDNN_TYPE_FRACTION: return sizeof(cudnnFraction_t);
    case CUDNN_TYPE_NORM_MODE: return sizeof(cudnnBackendNormMode_t);
    case CUDNN_TYPE_NORM_FWD_PHASE: return sizeof(cudnnBackendNormFwdPhase_t);
    case CUDNN_TYPE_RNG_DISTRIBUTION: return sizeof(cudnnRngDistribution_t);
    default: return 0;
  }
}

struct Shadow;

// One SetAttribute, kept raw. `bytes` is empty when the type's element size is unknown.
// A descriptor-typed one also holds the shadows its descriptors had when it was set: cuDNN
// copies a finalized descriptor into the one it is set on, and programs destroy the original
// right after (cudnn-frontend's convolution descriptors, under PyTorch 2.x), or cuDNN hands its
// address to a new descriptor.
struct Attr {
  cudnnBackendAttributeType_t type{};
  int64_t count = 0;
  std::vector<unsigned char> bytes;
  std::vector<std::shared_ptr<Shadow>> targets;  // by element; null: unknown to fumi

  template <class T>
  bool read(cudnnBackendAttributeType_t want, int64_t i, T* out) const {
    if (type != want || i >= count || bytes.size() < (static_cast<size_t>(i) + 1) * sizeof(T))
      return false;
    std::memcpy(out, bytes.data() + static_cast<size_t>(i) * sizeof(T), sizeof(T));
    return true;
  }
  void* descriptor(int64_t i = 0) const {
    void* d = nullptr;
    return read(CUDNN_TYPE_BACKEND_DESCRIPTOR, i, &d) ? d : nullptr;
  }
  // The shadow of element i as it was when set; nullptr when unknown.
  const std::shared_ptr<Shadow>& targetRef(int64_t i = 0) const {
    static const std::shared_ptr<Shadow> none;
    return i >= 0 && static_cast<size_t>(i) < targets.size() ? targets[static_cast<size_t>(i)]
                                                             : none;
  }
  Shadow* target(int64_t i = 0) const { return targetRef(i).get(); }
  bool int64s(std::vector<int64_t>* out) const {
    out->resize(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i)
      if (!read(CUDNN_TYPE_INT64, i, &(*out)[static_cast<size_t>(i)])) return false;
    return true;
  }
  // alpha/beta of an operation: FLOAT or DOUBLE.
  bool scalar(double* out) const {
    float f = 0;
    if (read(CUDNN_TYPE_DOUBLE, 0, out)) return true;
    if (!read(CUDNN_TYPE_FLOAT, 0, &f)) return false;
    *out = f;
    return true;
  }
};

struct PlanModel;

// How a variant pack has been executed, to tell a library's autotuning from the program's
// calls: autotuners (cudnn-frontend's time_sorted_plan, PyTorch's cudnn.benchmark) execute
// several candidate plans on one variant pack, then run the winner on a pack of its own.
// Executions of one pack with more than one plan are autotuning: not the program's calls, not
// checked. Until a pack is settled — destroyed, or executed kSettle times with one plan — the
// check of its first sampled execution is held and later executions are not sampled; a second
// plan discards the held check and takes every execution of the pack out of the op's calls. A
// pack still unsettled when the process exits has its held check run then (submitHeldChecks).
struct PackUse {
  static constexpr uint64_t kSettle = 8;
  void* plan = nullptr;  // the first plan executed on it
  uint64_t executions = 0;
  bool autotuning = false, settled = false;
  std::unique_ptr<cuda::PendingCheck> held;
};

struct Shadow {
  cudnnBackendDescriptorType_t type{};
  std::unordered_map<int, Attr> attrs;  // by attribute name
  // ENGINECFG / ENGINE filled by cuDNN: the operation graph it was derived from.
  std::shared_ptr<Shadow> graph;
  std::shared_ptr<PlanModel> plan;  // EXECUTION_PLAN, once finalized
  std::unique_ptr<PackUse> use;     // VARIANT_PACK, once executed

  const Attr* attr(cudnnBackendAttributeName_t name) const {
    auto it = attrs.find(static_cast<int>(name));
    return it == attrs.end() ? nullptr : &it->second;
  }
  // The shadow of the descriptor set as attribute `name` (element i); null when unknown.
  std::shared_ptr<Shadow> childRef(cudnnBackendAttributeName_t name, int64_t i = 0) const {
    const Attr* a = attr(name);
    return a ? a->targetRef(i) : nullptr;
  }
  Shadow* child(cudnnBackendAttributeName_t name, int64_t i = 0) const {
    const Attr* a = attr(name);
    return a ? a->target(i) : nullptr;
  }
};

// ---- the plan model ------------------------------------------------------------------------

// The program's plan, destroyed with cuDNN once neither the program nor a queued check needs
// it (the program's Destroy only marks it when checks still hold it).
struct PlanLife {
  void* plan = nullptr;
  std::atomic<bool> destroy{false};
  explicit PlanLife(void* p) : plan(p) {}
  ~PlanLife();
};

struct TensorModel {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  std::vector<int64_t> dims, strides;
  bool is_virtual = false, by_value = false;
};

struct ConvOp {
  Direction dir = Direction::kForward;
  int64_t x = 0, w = 0, y = 0;  // UIDs: x or dx, w or dw, y or dy, as the direction says
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  std::vector<int64_t> pre, post, stride, dilation;
  double alpha = 1, beta = 0;
};

struct GraphModel;

struct PlanModel : std::enable_shared_from_this<PlanModel> {
  std::shared_ptr<PlanLife> life;
  const char* unmodelled = nullptr;  // why executions are not checked; nullptr: modelled
  std::string ops;                   // the graph's operations, "conv_fwd+pointwise"
  ConvOp conv;                       // one convolution (legacy-like path) ...
  std::shared_ptr<GraphModel> graph; // ... or any other graph fumi models
  std::unordered_map<int64_t, TensorModel> tensors;  // by UID
  std::string notes;                 // engine notes, "tensor_core,winograd"
  int64_t engine = -1;               // the engine's global index (-1: unknown)
  int64_t workspace = 0;             // bytes
  // Sampling facts.
  int64_t size = 1;
  fumi_dtype dtype = FUMI_DTYPE_UNKNOWN;
};

class Registry {
 public:
  std::mutex mu;
  std::unordered_map<void*, std::shared_ptr<Shadow>> shadows;  // the live descriptors

  Shadow* find(void* d) {
    auto it = shadows.find(d);
    return it == shadows.end() ? nullptr : it->second.get();
  }
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: hooks may run during exit
  return *r;
}

// Bumped whenever a shadow goes away or a plan is finalized. A thread's last execution of a
// plan on a settled pack is cached against it, so that executing them again takes no lock.
std::atomic<uint64_t> g_generation{0};
struct ExecCache {
  void* plan = nullptr;
  void* pack = nullptr;
  uint64_t generation = ~uint64_t{0};
  const PlanModel* model = nullptr;  // alive while the generation holds
};
thread_local ExecCache t_exec;

PlanLife::~PlanLife() {
  if (!destroy.load()) return;
  InsideScope inside;  // cuDNN's inner calls are not the program's
  if (const CudnnApi* api = cuda::cudnnApi(); api && api->cudnnBackendDestroyDescriptor)
    api->cudnnBackendDestroyDescriptor(plan);
}

std::string opName(cudnnBackendDescriptorType_t t) {
  switch (t) {
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR: return "conv_fwd";
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR: return "conv_bwd_data";
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR: return "conv_bwd_filter";
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR: return "matmul";
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: return "pointwise";
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: return "reduction";
    case CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR: return "norm_fwd";
    case CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR: return "norm_bwd";
    case CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR: return "sdpa_fwd";
    case CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR: return "sdpa_bwd";
    case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR: return "reshape";
    case CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR: return "rng";
    default: return "op" + std::to_string(static_cast<int>(t));  // the descriptor type
  }
}

// A tensor descriptor's shadow by value; false when it lacks what fumi needs.
bool tensorModel(const Shadow& s, int64_t* uid, TensorModel* t) {
  if (s.type != CUDNN_BACKEND_TENSOR_DESCRIPTOR) return false;
  const Attr* type = s.attr(CUDNN_ATTR_TENSOR_DATA_TYPE);
  const Attr* dims = s.attr(CUDNN_ATTR_TENSOR_DIMENSIONS);
  const Attr* strides = s.attr(CUDNN_ATTR_TENSOR_STRIDES);
  const Attr* id = s.attr(CUDNN_ATTR_TENSOR_UNIQUE_ID);
  if (!type || !dims || !strides || !id || !type->read(CUDNN_TYPE_DATA_TYPE, 0, &t->type) ||
      !dims->int64s(&t->dims) || !strides->int64s(&t->strides) ||
      !id->read(CUDNN_TYPE_INT64, 0, uid) || t->dims.size() != t->strides.size())
    return false;
  if (const Attr* v = s.attr(CUDNN_ATTR_TENSOR_IS_VIRTUAL)) v->read(CUDNN_TYPE_BOOLEAN, 0, &t->is_virtual);
  if (const Attr* v = s.attr(CUDNN_ATTR_TENSOR_IS_BY_VALUE)) v->read(CUDNN_TYPE_BOOLEAN, 0, &t->by_value);
  return true;
}

// Attribute names of one convolution direction.
struct ConvAttrs {
  cudnnBackendAttributeName_t alpha, beta, conv, x, w, y;
};
bool convAttrs(cudnnBackendDescriptorType_t t, Direction* dir, ConvAttrs* a) {
  switch (t) {
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
      *dir = Direction::kForward;
      *a = {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
            CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
            CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y};
      return true;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
      *dir = Direction::kBackwardData;
      *a = {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY};
      return true;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR:
      *dir = Direction::kBackwardFilter;
      *a = {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY};
      return true;
    default: return false;
  }
}

// The convolution operation `op` into `m` (tensors and parameters); nullptr or why not.
const char* convModel(const Shadow& op, PlanModel& m) {
  ConvAttrs a{};
  if (!convAttrs(op.type, &m.conv.dir, &a)) return "operation not modelled";
  const Attr* alpha = op.attr(a.alpha);
  const Attr* beta = op.attr(a.beta);
  if ((alpha && !alpha->scalar(&m.conv.alpha)) || (beta && !beta->scalar(&m.conv.beta)))
    return "scalars not readable";
  const Shadow* conv = op.child(a.conv);
  if (!conv || conv->type != CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR) return "convolution unknown";
  const Attr* comp = conv->attr(CUDNN_ATTR_CONVOLUTION_COMP_TYPE);
  const Attr* mode = conv->attr(CUDNN_ATTR_CONVOLUTION_CONV_MODE);
  const Attr* pre = conv->attr(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS);
  const Attr* post = conv->attr(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS);
  const Attr* stride = conv->attr(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES);
  const Attr* dil = conv->attr(CUDNN_ATTR_CONVOLUTION_DILATIONS);
  if (!comp || !mode || !pre || !post || !stride || !dil ||
      !comp->read(CUDNN_TYPE_DATA_TYPE, 0, &m.conv.compute) ||
      !mode->read(CUDNN_TYPE_CONVOLUTION_MODE, 0, &m.conv.mode) || !pre->int64s(&m.conv.pre) ||
      !post->int64s(&m.conv.post) || !stride->int64s(&m.conv.stride) ||
      !dil->int64s(&m.conv.dilation))
    return "convolution attributes not readable";
  const cudnnBackendAttributeName_t roles[3] = {a.x, a.w, a.y};
  int64_t* uids[3] = {&m.conv.x, &m.conv.w, &m.conv.y};
  for (int i = 0; i < 3; ++i) {
    const Shadow* t = op.child(roles[i]);
    TensorModel tm;
    if (!t || !tensorModel(*t, uids[i], &tm)) return "tensors not readable";
    if (tm.is_virtual || tm.by_value) return "virtual or by-value convolution operands";
    m.tensors[*uids[i]] = tm;
  }
  return nullptr;
}

// The operation graph behind an engine config (set by the program, or derived by cuDNN).
std::shared_ptr<Shadow> graphOf(const Shadow* c) {
  if (!c) return nullptr;
  if (const Shadow* e = c->child(CUDNN_ATTR_ENGINECFG_ENGINE)) {
    if (const Attr* g = e->attr(CUDNN_ATTR_ENGINE_OPERATION_GRAPH); g && g->count > 0)
      return g->targetRef(0);
    if (e->graph) return e->graph;
  }
  return c->graph;
}

// Engine notes, global index and workspace size of a finalized plan, asked of cuDNN.
void engineFacts(void* plan, PlanModel& m) {
  const CudnnApi* api = cuda::cudnnApi();
  if (!api || !api->cudnnBackendGetAttribute || !api->cudnnBackendCreateDescriptor) return;
  int64_t n = 0;
  api->cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                1, &n, &m.workspace);
  cudnnBackendDescriptor_t cfg = nullptr, engine = nullptr;
  if (api->cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg) !=
          CUDNN_STATUS_SUCCESS ||
      api->cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) !=
          CUDNN_STATUS_SUCCESS) {
    if (cfg) api->cudnnBackendDestroyDescriptor(cfg);
    return;
  }
  cudnnBackendNumericalNote_t notes[32];
  int64_t count = 0;
  if (api->cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &cfg) ==
          CUDNN_STATUS_SUCCESS &&
      api->cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine) ==
          CUDNN_STATUS_SUCCESS) {
    api->cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                                  &m.engine);
    if (api->cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                      CUDNN_TYPE_NUMERICAL_NOTE, 32, &count, notes) ==
        CUDNN_STATUS_SUCCESS)
      for (int64_t i = 0; i < std::min<int64_t>(count, 32); ++i) {
        const auto k = static_cast<size_t>(notes[i]);
        const std::string name = k < kEngineNoteCount ? kEngineNoteNames[k]
                                                      : "note_" + std::to_string(k);
        m.notes += (m.notes.empty() ? "" : ",") + name;
      }
  }
  api->cudnnBackendDestroyDescriptor(engine);
  api->cudnnBackendDestroyDescriptor(cfg);
}

bool hasNote(const std::string& notes, const char* note) {
  return ("," + notes + ",").find(std::string(",") + note + ",") != std::string::npos;
}

// ---- graphs fumi models beyond one convolution -------------------------------------------------
//
// Any graph whose operations are all convolutions (beta 0), matmuls, pointwise operations,
// reductions, normalisations or SDPA forwards is kept as a GraphModel: every descriptor
// reachable from the operation graph by value (raw attributes, descriptor references as
// indices), the operations with their operand UIDs by role, and the graph's non-virtual inputs
// and outputs. A check
// reruns the same plan (determinism, perturb), a clone of the graph with every tensor and
// compute type widened (highprec: built once per precision on the checker thread, through
// cuDNN's heuristics), and fumi's host evaluation of the graph in fp64 (reference: convolution,
// matmul, pointwise, reduction, batch and layer normalisation, SDPA forward; virtual tensors
// unrounded).

// A descriptor by value: its attributes but descriptor references, which `refs` holds as
// indices into GraphModel::descs.
struct RawDesc {
  cudnnBackendDescriptorType_t type{};
  std::vector<std::pair<int, Attr>> attrs;
  std::vector<std::pair<int, std::vector<int>>> refs;
  const Attr* attr(cudnnBackendAttributeName_t name) const {
    for (const auto& [n, a] : attrs)
      if (n == static_cast<int>(name)) return &a;
    return nullptr;
  }
  int ref(cudnnBackendAttributeName_t name) const {
    for (const auto& [n, r] : refs)
      if (n == static_cast<int>(name) && !r.empty()) return r[0];
    return -1;
  }
};

// Operand roles: attribute, its name in events, input or output.
struct Role {
  cudnnBackendAttributeName_t attr;
  const char* name;
  bool output;
};

// The roles of each operation type fumi models (a normalisation's mean and inverse variance are
// outputs in training, inputs in inference: GraphModel swaps them). SDPA's block mask, page
// tables and sequence lengths are inputs so that reruns pass them; the host evaluation does not
// model them.
const std::vector<Role>* rolesOf(cudnnBackendDescriptorType_t t) {
  static const std::vector<Role> conv_fwd = {
      {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, "x", false},
      {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, "w", false},
      {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, "y", true}};
  static const std::vector<Role> conv_bwd_data = {
      {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, "w", false},
      {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, "dy", false},
      {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, "dx", true}};
  static const std::vector<Role> conv_bwd_filter = {
      {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, "x", false},
      {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, "dy", false},
      {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, "dw", true}};
  static const std::vector<Role> matmul = {{CUDNN_ATTR_OPERATION_MATMUL_ADESC, "a", false},
                                           {CUDNN_ATTR_OPERATION_MATMUL_BDESC, "b", false},
                                           {CUDNN_ATTR_OPERATION_MATMUL_CDESC, "c", true}};
  static const std::vector<Role> pointwise = {
      {CUDNN_ATTR_OPERATION_POINTWISE_XDESC, "x", false},
      {CUDNN_ATTR_OPERATION_POINTWISE_BDESC, "b", false},
      {CUDNN_ATTR_OPERATION_POINTWISE_TDESC, "t", false},
      {CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, "dy", false},
      {CUDNN_ATTR_OPERATION_POINTWISE_YDESC, "y", true},
      {CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, "dx", true}};
  static const std::vector<Role> reduction = {{CUDNN_ATTR_OPERATION_REDUCTION_XDESC, "x", false},
                                              {CUDNN_ATTR_OPERATION_REDUCTION_YDESC, "y", true}};
  static const std::vector<Role> norm_fwd = {
      {CUDNN_ATTR_OPERATION_NORM_FWD_XDESC, "x", false},
      {CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC, "scale", false},
      {CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC, "bias", false},
      {CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC, "epsilon", false},
      {CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC, "factor", false},
      {CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC, "running_mean", false},
      {CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC, "running_var", false},
      {CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC, "mean", true},
      {CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC, "inv_var", true},
      {CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC, "running_mean", true},
      {CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC, "running_var", true},
      {CUDNN_ATTR_OPERATION_NORM_FWD_YDESC, "y", true}};
  static const std::vector<Role> norm_bwd = {
      {CUDNN_ATTR_OPERATION_NORM_BWD_XDESC, "x", false},
      {CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC, "dy", false},
      {CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC, "scale", false},
      {CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC, "mean", false},
      {CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC, "inv_var", false},
      {CUDNN_ATTR_OPERATION_NORM_BWD_EPSILON_DESC, "epsilon", false},
      {CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC, "dx", true},
      {CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC, "dscale", true},
      {CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC, "dbias", true}};
  static const std::vector<Role> sdpa_fwd = {
      {CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, "q", false},
      {CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, "k", false},
      {CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, "v", false},
      {CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, "scale", false},
      {CUDNN_ATTR_OPERATION_SDPA_FWD_BLOCK_MASK_DESC, "block_mask", false},
      {CUDNN_ATTR_OPERATION_SDPA_FWD_PAGE_TABLE_KDESC, "page_table_k", false},
      {CUDNN_ATTR_OPERATION_SDPA_FWD_PAGE_TABLE_VDESC, "page_table_v", false},
      {CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_QDESC, "seq_len_q", false},
      {CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_KVDESC, "seq_len_kv", false},
      {CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, "o", true},
      {CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, "stats", true}};
  switch (t) {
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR: return &conv_fwd;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR: return &conv_bwd_data;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR: return &conv_bwd_filter;
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR: return &matmul;
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: return &pointwise;
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: return &reduction;
    case CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR: return &norm_fwd;
    case CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR: return &norm_bwd;
    case CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR: return &sdpa_fwd;
    default: return nullptr;
  }
}

struct GraphNode {
  cudnnBackendDescriptorType_t type{};
  int desc = -1;  // its RawDesc
  struct Operand {
    const char* role;
    int64_t uid;
    bool output;
  };
  std::vector<Operand> operands;
};

struct GraphModel {
  std::vector<RawDesc> descs;
  int graph = -1;                 // the operation graph's RawDesc
  std::vector<GraphNode> nodes;   // in dependency order
  struct Port {
    int64_t uid;
    std::string name;  // "<role>" or "<role>.<uid>" when the role repeats
  };
  std::vector<Port> inputs, outputs;      // non-virtual, not by value
  std::vector<int64_t> by_value;          // host scalars, read at call time
  // Wider plans built by highprec reruns (checker thread), by precision; never destroyed.
  std::mutex wide_mu;
  std::unordered_map<int, std::pair<void*, int64_t>> wide;  // precision -> (plan, workspace)
};

// Copies descriptor `d` and everything it references into g.descs; its index, -1 when a
// descriptor is unknown or an attribute cannot be replayed.
int captureDesc(const Shadow* s, GraphModel& g, std::unordered_map<const Shadow*, int>& seen) {
  if (!s) return -1;
  if (auto it = seen.find(s); it != seen.end()) return it->second;
  RawDesc raw;
  raw.type = s->type;
  for (const auto& [name, a] : s->attrs) {
    if (a.type == CUDNN_TYPE_HANDLE) continue;  // a clone gets fumi's handle
    if (a.type != CUDNN_TYPE_BACKEND_DESCRIPTOR) {
      if (a.bytes.empty() && a.count > 0) return -1;
      raw.attrs.emplace_back(name, a);
      continue;
    }
    std::vector<int> r;
    for (int64_t i = 0; i < a.count; ++i) {
      const int child = captureDesc(a.target(i), g, seen);
      if (child < 0) return -1;
      r.push_back(child);
    }
    raw.refs.emplace_back(name, std::move(r));
  }
  g.descs.push_back(std::move(raw));
  const int index = static_cast<int>(g.descs.size()) - 1;
  seen[s] = index;
  return index;
}

// "data type N of <role> not supported", kept for the process (a plan's reason is a C string).
const char* unsupportedType(cudnnDataType_t type, const char* role) {
  static std::mutex mu;
  static auto* said = new std::set<std::string>;  // immortal: read at exit
  std::lock_guard<std::mutex> lock(mu);
  return said->insert("data type " + std::to_string(static_cast<int>(type)) + " of " + role +
                      " not supported")
      .first->c_str();
}

// The graph of `ops` into m.graph; nullptr or why it is not modelled.
const char* graphModel(const Shadow* graph_desc, const std::vector<const Shadow*>& ops,
                       PlanModel& m) {
  auto g = std::make_shared<GraphModel>();
  std::unordered_map<const Shadow*, int> seen;
  g->graph = captureDesc(graph_desc, *g, seen);
  if (g->graph < 0) return "graph attributes not readable";
  std::vector<int> op_descs;  // the operations' RawDescs, in the graph's order
  for (const auto& [name, r] : g->descs[static_cast<size_t>(g->graph)].refs)
    if (name == CUDNN_ATTR_OPERATIONGRAPH_OPS) op_descs = r;
  if (op_descs.size() != ops.size()) return "graph attributes not readable";
  std::unordered_map<int64_t, int> producer;  // uid -> node
  std::vector<GraphNode> nodes;
  for (const Shadow* op : ops) {
    const std::vector<Role>* roles = rolesOf(op->type);
    if (!roles) return "operation not modelled";
    GraphNode n;
    n.type = op->type;
    n.desc = op_descs[nodes.size()];
    bool inference = false;
    if (op->type == CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR) {
      cudnnBackendNormFwdPhase_t phase = CUDNN_NORM_FWD_TRAINING;
      if (const Attr* a = op->attr(CUDNN_ATTR_OPERATION_NORM_FWD_PHASE))
        a->read(CUDNN_TYPE_NORM_FWD_PHASE, 0, &phase);
      inference = phase == CUDNN_NORM_FWD_INFERENCE;
    }
    Direction dir{};
    ConvAttrs ca{};
    if (convAttrs(op->type, &dir, &ca)) {
      double beta = 0;
      if (const Attr* b = op->attr(ca.beta); b && !b->scalar(&beta)) return "scalars not readable";
      if (beta != 0) return "convolution with beta in a graph not modelled";
    }
    for (const Role& r : *roles) {
      const Shadow* t = op->child(r.attr);
      if (!t) continue;  // optional operand not given
      int64_t uid = 0;
      TensorModel tm;
      if (!tensorModel(*t, &uid, &tm)) return "tensors not readable";
      const bool stats = r.attr == CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC ||
                         r.attr == CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC;
      const bool output = r.output && !(stats && inference);
      if (!tm.by_value && dtypeOfCudnn(tm.type) == FUMI_DTYPE_UNKNOWN)
        return unsupportedType(tm.type, r.name);
      if (tm.dims.empty() || tm.dims.size() > FUMI_MAX_DIMS) return "tensor rank not supported";
      m.tensors[uid] = tm;
      n.operands.push_back({r.name, uid, output});
      if (output && producer.count(uid)) return "tensor produced twice";
      if (output) producer[uid] = static_cast<int>(nodes.size());
    }
    nodes.push_back(std::move(n));
  }
  // Dependency order: a node after the producers of its inputs.
  std::vector<int> order, state(nodes.size(), 0);
  std::function<bool(int)> visit = [&](int i) {
    if (state[i] == 2) return true;
    if (state[i] == 1) return false;  // a cycle
    state[i] = 1;
    for (const auto& o : nodes[i].operands)
      if (!o.output)
        if (auto p = producer.find(o.uid); p != producer.end() && !visit(p->second)) return false;
    state[i] = 2;
    order.push_back(i);
    return true;
  };
  for (size_t i = 0; i < nodes.size(); ++i)
    if (!visit(static_cast<int>(i))) return "graph has a cycle";
  for (int i : order) g->nodes.push_back(nodes[static_cast<size_t>(i)]);
  // Ports: non-virtual tensors, named by role (with the UID when a role name repeats).
  std::unordered_map<std::string, int> names;
  std::vector<std::pair<int64_t, std::pair<const char*, bool>>> ports;
  std::unordered_map<int64_t, bool> listed;
  for (const GraphNode& n : g->nodes)
    for (const auto& o : n.operands) {
      const TensorModel& t = m.tensors[o.uid];
      if (t.is_virtual || listed.count(o.uid)) continue;
      if (!o.output && producer.count(o.uid)) continue;  // read after being produced here
      listed[o.uid] = true;
      if (t.by_value) {
        g->by_value.push_back(o.uid);
        continue;
      }
      ports.push_back({o.uid, {o.role, o.output}});
      ++names[o.role];
    }
  for (const auto& [uid, ro] : ports) {
    GraphModel::Port p{uid, names[ro.first] > 1 ? std::string(ro.first) + "." + std::to_string(uid)
                                                : std::string(ro.first)};
    (ro.second ? g->outputs : g->inputs).push_back(std::move(p));
  }
  for (const auto& [uid, t] : m.tensors)
    if (t.is_virtual && !producer.count(uid)) return "virtual tensor without a producer";
  if (g->outputs.empty()) return "graph has no output";
  // Sampling facts: the largest operation's work (SDPA: B·H·S_q·S_kv·D, the products of q·kᵀ).
  for (const GraphNode& n : g->nodes) {
    int64_t work = 1;
    for (const auto& o : n.operands)
      if (o.output) {
        int64_t e = 1;
        for (int64_t d : m.tensors[o.uid].dims) e *= d;
        work = std::max(work, e);
      }
    if (n.type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR)
      for (const auto& o : n.operands)
        if (std::strcmp(o.role, "a") == 0) work *= m.tensors[o.uid].dims.back();
    if (n.type == CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR) {
      int64_t q = 1, kv = 1;
      for (const auto& o : n.operands) {
        const std::vector<int64_t>& d = m.tensors[o.uid].dims;
        if (std::strcmp(o.role, "q") == 0)
          for (int64_t e : d) q *= e;
        if (std::strcmp(o.role, "k") == 0 && d.size() == 4) kv = d[2];
      }
      work = std::max(work, q * kv);
    }
    m.size = std::max(m.size, work);
  }
  m.dtype = dtypeOfCudnn(m.tensors[g->outputs[0].uid].type);
  m.graph = std::move(g);
  return nullptr;
}

// The model of a plan being finalized (the registry locked by the caller).
std::shared_ptr<PlanModel> buildPlan(void* plan, const Shadow& s) {
  auto m = std::make_shared<PlanModel>();
  m->life = std::make_shared<PlanLife>(plan);
  const std::shared_ptr<Shadow> graph = graphOf(s.child(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG));
  const Attr* ops = graph ? graph->attr(CUDNN_ATTR_OPERATIONGRAPH_OPS) : nullptr;
  if (!ops) {
    m->unmodelled = "operation graph unknown (plan built from a serialized form or before fumi)";
    return m;
  }
  std::vector<const Shadow*> list;
  for (int64_t i = 0; i < ops->count; ++i) {
    const Shadow* op = ops->target(i);
    if (!op) {
      m->unmodelled = "operation unknown";
      return m;
    }
    list.push_back(op);
    m->ops += (m->ops.empty() ? "" : "+") + opName(op->type);
  }
  Direction dir{};
  ConvAttrs ca{};
  if (list.size() != 1 || !convAttrs(list[0]->type, &dir, &ca)) {
    m->unmodelled = graphModel(graph.get(), list, *m);
    return m;
  }
  m->unmodelled = convModel(*list[0], *m);
  if (m->unmodelled) return m;
  const TensorModel& y = m->tensors[m->conv.y];
  const TensorModel& w = m->tensors[m->conv.w];
  int64_t macs = 1;
  for (int64_t d : y.dims) macs *= d;
  for (size_t i = 1; i < w.dims.size(); ++i) macs *= w.dims[i];
  m->size = macs;
  m->dtype = dtypeOfCudnn(m->tensors[m->conv.x].type);
  return m;
}

// ---- bookkeeping (every call) ----------------------------------------------------------------

void onCreate(cudnnBackendDescriptorType_t type, void* d) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto s = std::make_shared<Shadow>();
  s->type = type;
  reg.shadows[d] = std::move(s);
}

// The program destroys `d`: true when cuDNN should destroy it now. A plan is handed to its
// PlanLife instead, which destroys it when the last holder (the model, a queued check's rerun)
// lets go — right here when nothing else holds it.
bool onDestroy(void* d) {
  Registry& reg = registry();
  std::shared_ptr<PlanLife> life;  // released after the lock: it may destroy the plan
  std::unique_ptr<cuda::PendingCheck> settled;  // a held check, submitted after the lock
  {
    std::lock_guard<std::mutex> lock(reg.mu);
    g_generation.fetch_add(1, std::memory_order_acq_rel);
    auto it = reg.shadows.find(d);
    if (it == reg.shadows.end()) return true;
    // Descriptors it was set on may keep its shadow: they need only its type and attributes.
    Shadow& s = *it->second;
    if (s.plan) life = s.plan->life;
    if (s.use) settled = std::move(s.use->held);
    s.plan.reset();
    s.use.reset();
    reg.shadows.erase(it);
  }
  if (settled) {
    InsideScope inside;
    if (cuda::Checker* ck = cuda::Checker::get()) ck->submit(std::move(settled));
  }
  if (!life) return true;
  life->destroy = true;
  return false;
}

void onSet(void* d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
           int64_t count, const void* elements) {
  Attr a;
  a.type = type;
  a.count = count;
  const size_t one = elementBytes(type);
  if (one && count > 0 && elements) {
    a.bytes.resize(one * static_cast<size_t>(count));
    std::memcpy(a.bytes.data(), elements, a.bytes.size());
  }
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
    for (int64_t i = 0; i < count; ++i) {
      auto it = reg.shadows.find(a.descriptor(i));
      a.targets.push_back(it == reg.shadows.end() ? nullptr : it->second);
    }
  if (Shadow* s = reg.find(d)) s->attrs[static_cast<int>(name)] = std::move(a);
}

// Links descriptors cuDNN filled to the graph they derive from.
void onGet(void* d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
           int64_t count, const void* elements) {
  if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR || !elements || count <= 0) return;
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  const Shadow* s = reg.find(d);
  if (!s) return;
  std::shared_ptr<Shadow> graph;
  if (name == CUDNN_ATTR_ENGINEHEUR_RESULTS) {
    graph = s->childRef(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
  } else if (name == CUDNN_ATTR_ENGINECFG_ENGINE ||
             name == CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG) {
    graph = s->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR
                ? graphOf(s->child(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG))
                : graphOf(s);
  }
  if (!graph) return;
  auto* out = static_cast<void* const*>(elements);
  for (int64_t i = 0; i < count; ++i)
    if (Shadow* filled = reg.find(out[i])) filled->graph = graph;
}

void onFinalize(void* d) {
  Registry& reg = registry();
  std::shared_ptr<PlanModel> m;
  {
    std::lock_guard<std::mutex> lock(reg.mu);
    Shadow* s = reg.find(d);
    if (!s || s->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) return;
    m = buildPlan(d, *s);
  }
  engineFacts(d, *m);  // cuDNN calls outside the lock
  std::lock_guard<std::mutex> lock(reg.mu);
  g_generation.fetch_add(1, std::memory_order_acq_rel);
  if (Shadow* s = reg.find(d)) s->plan = std::move(m);
}

// {UID: pointer} and the workspace of a variant pack, from its shadow.
bool readPack(void* pack, std::unordered_map<int64_t, void*>* ptrs, void** workspace) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  const Shadow* s = reg.find(pack);
  if (!s) return false;
  const Attr* uids = s->attr(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
  const Attr* data = s->attr(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
  if (!uids || !data || uids->count != data->count) return false;
  for (int64_t i = 0; i < uids->count; ++i) {
    int64_t uid = 0;
    void* p = nullptr;
    if (!uids->read(CUDNN_TYPE_INT64, i, &uid) || !data->read(CUDNN_TYPE_VOID_PTR, i, &p))
      return false;
    (*ptrs)[uid] = p;
  }
  *workspace = nullptr;
  if (const Attr* ws = s->attr(CUDNN_ATTR_VARIANT_PACK_WORKSPACE))
    ws->read(CUDNN_TYPE_VOID_PTR, 0, workspace);
  return true;
}

// ---- execution ---------------------------------------------------------------------------------

// TensorDims of a backend tensor (3 to 5 dims, non-negative strides).
bool toDims(const TensorModel& t, Dims* d) {
  if (t.dims.size() < 3 || t.dims.size() > static_cast<size_t>(kMaxDims)) return false;
  d->type = t.type;
  d->nd = static_cast<int>(t.dims.size());
  for (int i = 0; i < d->nd; ++i) {
    if (t.strides[static_cast<size_t>(i)] < 0 || t.dims[static_cast<size_t>(i)] > INT32_MAX)
      return false;
    d->dims[i] = static_cast<int>(t.dims[static_cast<size_t>(i)]);
    d->strides[i] = t.strides[static_cast<size_t>(i)];
  }
  return true;
}

// Whether a filter's strides are packed KCRS (NCHW) or KRSC (NHWC), as the legacy API needs.
bool filterFormat(FilterDims* w) {
  for (cudnnTensorFormat_t f : {CUDNN_TENSOR_NCHW, CUDNN_TENSOR_NHWC}) {
    int64_t packed[kMaxDims] = {};
    w->pack(f, packed);
    if (std::equal(packed, packed + w->nd, w->strides)) {
      w->format = f;
      return true;
    }
  }
  return false;
}

// The ConvProblem of an execution; nullptr or why not. `legacy`: whether the legacy API can
// rerun it (packed filter, symmetric padding).
const char* convProblem(const PlanModel& m, const std::unordered_map<int64_t, void*>& ptrs,
                        ConvProblem* p, bool* legacy) {
  const ConvOp& c = m.conv;
  auto at = [&](int64_t uid) -> void* {
    auto it = ptrs.find(uid);
    return it == ptrs.end() ? nullptr : it->second;
  };
  void *x = at(c.x), *w = at(c.w), *y = at(c.y);
  if (!x || !w || !y) return "operand missing from the variant pack";
  if (!toDims(m.tensors.at(c.x), &p->x) || !toDims(m.tensors.at(c.w), &p->w) ||
      !toDims(m.tensors.at(c.y), &p->y))
    return "tensors not supported";
  const int sp = p->x.nd - 2;
  if (static_cast<int>(c.pre.size()) != sp || c.post.size() != c.pre.size() ||
      c.stride.size() != c.pre.size() || c.dilation.size() != c.pre.size() || sp > kMaxSpatial)
    return "convolution rank not supported";
  p->dir = c.dir;
  p->algo = -1;
  p->conv.len = sp;
  bool symmetric = true;
  for (int i = 0; i < sp; ++i) {
    const size_t k = static_cast<size_t>(i);
    p->conv.pad[i] = static_cast<int>(c.pre[k]);
    p->conv.stride[i] = static_cast<int>(c.stride[k]);
    p->conv.dilation[i] = static_cast<int>(c.dilation[k]);
    symmetric = symmetric && c.pre[k] == c.post[k];
  }
  p->conv.mode = c.mode;
  p->conv.compute = c.compute;
  // The backend has no math type: a tensor-core engine may round f32 inputs to TF32.
  p->conv.math = hasNote(m.notes, "tensor_core") ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  p->conv.groups = p->w.dims[1] > 0 ? p->x.dims[1] / p->w.dims[1] : 0;
  if (p->conv.groups < 1 || p->w.dims[1] * p->conv.groups != p->x.dims[1] ||
      p->w.dims[0] % p->conv.groups != 0 || p->y.dims[1] != p->w.dims[0] ||
      p->y.dims[0] != p->x.dims[0] || p->w.nd != p->x.nd || p->y.nd != p->x.nd)
    return "tensor shapes inconsistent";
  if (p->x.type != p->w.type || p->x.type != p->y.type || p->dtype() == FUMI_DTYPE_UNKNOWN)
    return "data types not supported";
  if (p->compute() == FUMI_DTYPE_UNKNOWN) return "compute type not supported";
  *legacy = symmetric && filterFormat(&p->w);
  p->xp = x;
  p->wp = w;
  p->yp = y;
  p->out = c.dir == Direction::kForward ? y : c.dir == Direction::kBackwardData ? x : w;
  p->alpha = c.alpha;
  p->beta = c.beta;
  return nullptr;
}

// A convolution plan executed on a rerun's pointers (executeWith, defined below).
fumi_status executeWith(void* plan, const std::vector<int64_t>& uids, std::vector<void*> ptrs,
                        int64_t workspace, Checker& ck, cudnnHandle_t handle);

fumi_status executePlan(const std::shared_ptr<PlanLife>& life, const ConvOp& c,
                        int64_t workspace, Checker& ck, const ConvRerun& r) {
  const bool fwd = c.dir == Direction::kForward, bwd_data = c.dir == Direction::kBackwardData;
  return executeWith(life->plan, {c.x, c.w, c.y},
                     {bwd_data ? r.out : const_cast<void*>(r.xp),
                      c.dir == Direction::kBackwardFilter ? r.out : const_cast<void*>(r.wp),
                      fwd ? r.out : const_cast<void*>(r.yp)},
                     workspace, ck, r.handle);
}

// What an execution of `plan` on `pack` is (PackUse): a call that may be sampled, a call that
// is not (its pack holds a check while unsettled), or an autotuning run (not a call).
// `discard`: a held check autotuning invalidated, with `retract` earlier executions to take
// out of the calls; `settle`: a held check to submit now; `model`: the plan's model;
// `cacheable`: whether executing the plan on the pack again may skip all this (ExecCache).
enum class PackVerdict { kSample, kNoSample, kAutotuning };
PackVerdict onExecute(void* pack, void* plan, std::unique_ptr<cuda::PendingCheck>* discard,
                      uint64_t* retract, std::unique_ptr<cuda::PendingCheck>* settle,
                      std::shared_ptr<const PlanModel>* model, bool* cacheable) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  if (const Shadow* p = reg.find(plan)) *model = p->plan;
  Shadow* s = reg.find(pack);
  if (!s) return PackVerdict::kSample;
  if (!s->use) s->use = std::make_unique<PackUse>();
  PackUse& u = *s->use;
  if (u.autotuning) return PackVerdict::kAutotuning;
  if (!u.plan) u.plan = plan;
  if (!u.settled && u.plan != plan) {
    u.autotuning = true;
    *discard = std::move(u.held);
    *retract = u.executions;
    return PackVerdict::kAutotuning;
  }
  ++u.executions;
  if (!u.settled && u.executions > PackUse::kSettle) {
    u.settled = true;
    *settle = std::move(u.held);
  }
  *cacheable = u.settled && u.plan == plan;
  return u.settled || !u.held ? PackVerdict::kSample : PackVerdict::kNoSample;
}

// At exit (the checker's drain): every pack still unsettled is the program's, executed with one
// plan only; its held check goes into the queue, to run within the exit wait.
void submitHeldChecks() {
  Registry& reg = registry();
  std::vector<std::unique_ptr<cuda::PendingCheck>> held;
  {
    std::lock_guard<std::mutex> lock(reg.mu);
    for (auto& [d, s] : reg.shadows)
      if (s->use && s->use->held) {
        s->use->settled = true;
        held.push_back(std::move(s->use->held));
      }
  }
  InsideScope inside;
  Checker* ck = Checker::get();
  for (auto& c : held)
    if (ck) ck->submit(std::move(c));
}

// Takes the check of an execution on an unsettled pack (true), to submit when it settles (or
// at exit).
bool holdUntilSettled(void* pack, std::unique_ptr<cuda::PendingCheck>& check) {
  static std::once_flag at_exit;
  std::call_once(at_exit, [] { Checker::beforeDrain(submitHeldChecks); });
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  Shadow* s = reg.find(pack);
  if (!s || !s->use || s->use->settled || s->use->autotuning || s->use->held) return false;
  s->use->held = std::move(check);
  return true;
}

// ---- checking a graph ------------------------------------------------------------------------

// Bytes of one element of a tensor type; 0 for types fumi does not move.
size_t typeBytes(cudnnDataType_t t) {
  switch (t) {
    case CUDNN_DATA_DOUBLE: case CUDNN_DATA_INT64: return 8;
    case CUDNN_DATA_FLOAT: case CUDNN_DATA_INT32: return 4;
    case CUDNN_DATA_HALF: case CUDNN_DATA_BFLOAT16: return 2;
    case CUDNN_DATA_INT8: case CUDNN_DATA_UINT8: case CUDNN_DATA_BOOLEAN: return 1;
    default: return 0;
  }
}

// A variant pack of fumi's own for `plan`, executed with fumi's handle on the checker stream,
// with a workspace of `workspace` bytes from the checker's pool.
fumi_status executeWith(void* plan, const std::vector<int64_t>& uids, std::vector<void*> ptrs,
                        int64_t workspace, Checker& ck, cudnnHandle_t handle) {
  const CudnnApi* api = cuda::cudnnApi();
  if (!api || !api->cudnnBackendCreateDescriptor || !api->cudnnBackendExecute)
    return FUMI_UNSUPPORTED;
  void* ws = workspace > 0 ? ck.scratch(static_cast<size_t>(workspace)) : nullptr;
  if (workspace > 0 && !ws) return FUMI_NO_SCRATCH;
  cudnnBackendDescriptor_t pack = nullptr;
  const auto n = static_cast<int64_t>(uids.size());
  cudnnStatus_t st = api->cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
  if (st == CUDNN_STATUS_SUCCESS)
    st = api->cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                       n, uids.data());
  if (st == CUDNN_STATUS_SUCCESS)
    st = api->cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                       CUDNN_TYPE_VOID_PTR, n, ptrs.data());
  if (st == CUDNN_STATUS_SUCCESS)
    st = api->cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                                       CUDNN_TYPE_VOID_PTR, 1, &ws);
  if (st == CUDNN_STATUS_SUCCESS) st = api->cudnnBackendFinalize(pack);
  if (st == CUDNN_STATUS_SUCCESS) st = api->cudnnBackendExecute(handle, plan, pack);
  ck.api().cudaStreamSynchronize(ck.stream());  // before the workspace goes
  if (pack) api->cudnnBackendDestroyDescriptor(pack);
  if (ws) ck.give(ws);
  return rerunStatus(st);
}

// Creates (with cuDNN, on the checker thread) a clone of descriptor i of `g` and what it
// references, tensor and compute types widened to `wide` (by-value tensors keep theirs).
void* cloneDesc(const CudnnApi& api, const GraphModel& g, int i, cudnnDataType_t wide,
                cudnnHandle_t handle, std::vector<void*>& made) {
  if (made[static_cast<size_t>(i)]) return made[static_cast<size_t>(i)];
  const RawDesc& raw = g.descs[static_cast<size_t>(i)];
  std::vector<std::pair<int, std::vector<void*>>> children;
  for (const auto& [name, r] : raw.refs) {
    std::vector<void*> c;
    for (int child : r) {
      void* d = cloneDesc(api, g, child, wide, handle, made);
      if (!d) return nullptr;
      c.push_back(d);
    }
    children.emplace_back(name, std::move(c));
  }
  cudnnBackendDescriptor_t d = nullptr;
  if (api.cudnnBackendCreateDescriptor(raw.type, &d) != CUDNN_STATUS_SUCCESS) return nullptr;
  made[static_cast<size_t>(i)] = d;  // destroyed by the caller, like every other clone
  bool by_value = false;
  if (const Attr* v = raw.attr(CUDNN_ATTR_TENSOR_IS_BY_VALUE)) v->read(CUDNN_TYPE_BOOLEAN, 0, &by_value);
  bool ok = true;
  for (const auto& [name, a] : raw.attrs) {
    const auto n = static_cast<cudnnBackendAttributeName_t>(name);
    const bool type_attr = a.type == CUDNN_TYPE_DATA_TYPE &&
                           ((n == CUDNN_ATTR_TENSOR_DATA_TYPE && !by_value) ||
                            n == CUDNN_ATTR_CONVOLUTION_COMP_TYPE ||
                            n == CUDNN_ATTR_MATMUL_COMP_TYPE || n == CUDNN_ATTR_POINTWISE_MATH_PREC ||
                            n == CUDNN_ATTR_REDUCTION_COMP_TYPE);
    const void* value = type_attr ? static_cast<const void*>(&wide) : a.bytes.data();
    ok = ok && api.cudnnBackendSetAttribute(d, n, a.type, a.count, value) == CUDNN_STATUS_SUCCESS;
  }
  for (auto& [name, c] : children)
    ok = ok && api.cudnnBackendSetAttribute(d, static_cast<cudnnBackendAttributeName_t>(name),
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                            static_cast<int64_t>(c.size()), c.data()) ==
                   CUDNN_STATUS_SUCCESS;
  if (raw.type == CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)
    ok = ok && api.cudnnBackendSetAttribute(d, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE,
                                            1, &handle) == CUDNN_STATUS_SUCCESS;
  return ok && api.cudnnBackendFinalize(d) == CUDNN_STATUS_SUCCESS ? d : nullptr;
}

// A plan for the graph widened to `wide` (the heuristics' first config that finalizes), and
// its workspace; {nullptr, 0} when cuDNN has none.
std::pair<void*, int64_t> widePlan(const GraphModel& g, cudnnDataType_t wide, cudnnHandle_t handle) {
  const CudnnApi* api = cuda::cudnnApi();
  if (!api || !api->cudnnBackendCreateDescriptor || !api->cudnnBackendGetAttribute) return {};
  std::vector<void*> made(g.descs.size(), nullptr);
  void* graph = cloneDesc(*api, g, g.graph, wide, handle, made);
  std::pair<void*, int64_t> result{};
  std::vector<cudnnBackendDescriptor_t> cfgs(8, nullptr);
  cudnnBackendDescriptor_t heur = nullptr;
  if (graph && api->cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur) ==
                   CUDNN_STATUS_SUCCESS) {
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_INSTANT;
    int64_t count = 0;
    for (auto& c : cfgs) api->cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &c);
    if (api->cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph) ==
            CUDNN_STATUS_SUCCESS &&
        api->cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1,
                                      &mode) == CUDNN_STATUS_SUCCESS &&
        api->cudnnBackendFinalize(heur) == CUDNN_STATUS_SUCCESS &&
        api->cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                      static_cast<int64_t>(cfgs.size()), &count,
                                      cfgs.data()) == CUDNN_STATUS_SUCCESS)
      for (int64_t i = 0; i < count && !result.first; ++i) {
        cudnnBackendDescriptor_t plan = nullptr;
        int64_t n = 0;
        if (api->cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) !=
            CUDNN_STATUS_SUCCESS)
          break;
        if (api->cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
                                          CUDNN_TYPE_HANDLE, 1, &handle) == CUDNN_STATUS_SUCCESS &&
            api->cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                          &cfgs[static_cast<size_t>(i)]) == CUDNN_STATUS_SUCCESS &&
            api->cudnnBackendFinalize(plan) == CUDNN_STATUS_SUCCESS &&
            api->cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                          CUDNN_TYPE_INT64, 1, &n, &result.second) ==
                CUDNN_STATUS_SUCCESS)
          result.first = plan;
        else
          api->cudnnBackendDestroyDescriptor(plan);
      }
  }
  for (auto c : cfgs)
    if (c) api->cudnnBackendDestroyDescriptor(c);
  if (heur) api->cudnnBackendDestroyDescriptor(heur);
  for (void* d : made)
    if (d) api->cudnnBackendDestroyDescriptor(d);
  return result;
}

// A dense row-major fp64 array with its dimensions (fumi's host evaluation of a graph).
struct HostTensor {
  std::vector<int64_t> dims;
  std::vector<double> v;
  fumi_tensor view(const char* name) const {
    return hostTensor(name, dims, const_cast<double*>(v.data()));
  }
};

int64_t countOf(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// The element of `in` that broadcasts to output index `l` (row-major over `out`).
int64_t broadcastIndex(const std::vector<int64_t>& in, const std::vector<int64_t>& out, int64_t l) {
  int64_t idx = 0, stride = 1;
  for (size_t k = out.size(); k-- > 0;) {
    const int64_t coord = l % out[k];
    l /= out[k];
    const int64_t d = k < in.size() ? in[k] : 1;
    idx += (d == 1 ? 0 : coord) * stride;
    stride *= d;
  }
  return idx;
}

double pointwise(cudnnPointwiseMode_t mode, double x, double b, double lower, double upper,
                 double slope, bool* ok) {
  switch (mode) {
    case CUDNN_POINTWISE_ADD: return x + b;
    case CUDNN_POINTWISE_SUB: return x - b;
    case CUDNN_POINTWISE_MUL: return x * b;
    case CUDNN_POINTWISE_DIV: return x / b;
    case CUDNN_POINTWISE_MAX: return std::max(x, b);
    case CUDNN_POINTWISE_MIN: return std::min(x, b);
    case CUDNN_POINTWISE_IDENTITY: return x;
    case CUDNN_POINTWISE_NEG: return -x;
    case CUDNN_POINTWISE_ABS: return std::fabs(x);
    case CUDNN_POINTWISE_EXP: return std::exp(x);
    case CUDNN_POINTWISE_LOG: return std::log(x);
    case CUDNN_POINTWISE_SQRT: return std::sqrt(x);
    case CUDNN_POINTWISE_RSQRT: return 1 / std::sqrt(x);
    case CUDNN_POINTWISE_RECIPROCAL: return 1 / x;
    case CUDNN_POINTWISE_RELU_FWD:
      return std::min(upper, x > lower ? x : lower + slope * (x - lower));
    case CUDNN_POINTWISE_TANH_FWD: return std::tanh(x);
    case CUDNN_POINTWISE_SIGMOID_FWD: return 1 / (1 + std::exp(-x));
    case CUDNN_POINTWISE_GELU_FWD: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case CUDNN_POINTWISE_GELU_APPROX_TANH_FWD:
      return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case CUDNN_POINTWISE_RELU_BWD: return x > lower ? b : slope * b;  // x: forward input, b: dy
    case CUDNN_POINTWISE_TANH_BWD: return b * (1 - std::tanh(x) * std::tanh(x));
    case CUDNN_POINTWISE_SIGMOID_BWD: {
      const double s = 1 / (1 + std::exp(-x));
      return b * s * (1 - s);
    }
    default: *ok = false; return 0;
  }
}

bool unaryMode(cudnnPointwiseMode_t mode) {
  return mode == CUDNN_POINTWISE_IDENTITY || mode == CUDNN_POINTWISE_NEG ||
         mode == CUDNN_POINTWISE_ABS || mode == CUDNN_POINTWISE_EXP ||
         mode == CUDNN_POINTWISE_LOG || mode == CUDNN_POINTWISE_SQRT ||
         mode == CUDNN_POINTWISE_RSQRT || mode == CUDNN_POINTWISE_RECIPROCAL ||
         (mode >= CUDNN_POINTWISE_RELU_FWD && mode <= CUDNN_POINTWISE_GELU_APPROX_TANH_FWD);
}

class GraphCall final : public Call {
 public:
  GraphCall(OpSite& site, std::shared_ptr<const PlanModel> m, fumi_dtype dtype, uint64_t index)
      : Call(site, dtype, computeOf(*m, dtype), m->size, index), m_(std::move(m)) {}
  std::vector<int64_t> uids;  // per tensor: its UID
  std::unordered_map<int64_t, std::vector<unsigned char>> scalars;  // by value: UID -> bytes

  fumi_status rerun(fumi_dtype precision, void* const* buf) override {
    Checker* ck = Checker::get();
    const CudnnApi* api = cuda::cudnnApi();
    if (!ck || !api) return FUMI_UNSUPPORTED;
    const cudnnHandle_t handle = checkerCudnn(*ck, *api);
    if (!handle) return FUMI_UNSUPPORTED;
    const bool own = precision == info().dtype;
    void* plan = m_->life->plan;
    int64_t workspace = m_->workspace;
    if (!own) {
      if (precision != FUMI_DTYPE_F32 && precision != FUMI_DTYPE_F64) return FUMI_UNSUPPORTED;
      GraphModel& g = *m_->graph;
      std::lock_guard<std::mutex> lock(g.wide_mu);
      auto it = g.wide.find(static_cast<int>(precision));
      if (it == g.wide.end())
        it = g.wide.emplace(static_cast<int>(precision),
                            widePlan(g, cudnnOfDtype(precision), handle)).first;
      std::tie(plan, workspace) = it->second;
      if (!plan) return FUMI_UNSUPPORTED;
    }
    std::vector<int64_t> ids;
    std::vector<void*> ptrs;
    for (size_t i = 0; i < uids.size(); ++i) {
      ids.push_back(uids[i]);
      ptrs.push_back(buf[i] ? buf[i] : tensors()[i].data);
    }
    for (auto& [uid, bytes] : scalars) {
      ids.push_back(uid);
      ptrs.push_back(bytes.data());
    }
    return executeWith(plan, ids, ptrs, workspace, *ck, handle);
  }

  fumi_status reference(int32_t output, double* out) override {
    if (!evaluated_) {
      evaluated_ = true;
      status_ = evaluate();
    }
    if (status_ != FUMI_OK) return status_;
    auto it = env_.find(uids[static_cast<size_t>(output)]);
    if (it == env_.end()) return FUMI_UNSUPPORTED;
    std::copy(it->second.v.begin(), it->second.v.end(), out);
    return FUMI_OK;
  }

 private:
  static fumi_dtype computeOf(const PlanModel& m, fumi_dtype data) {
    // f16/bf16 graphs compute in f32 unless an engine note says it reduces in lower precision.
    if (data == FUMI_DTYPE_F32 && hasNote(m.notes, "tensor_core")) return FUMI_DTYPE_TF32;
    if ((data == FUMI_DTYPE_F16 || data == FUMI_DTYPE_BF16) &&
        !hasNote(m.notes, "reduced_precision_reduction"))
      return FUMI_DTYPE_F32;
    return data;
  }

  double scalarOf(int64_t uid) const {
    const std::vector<unsigned char>& b = scalars.at(uid);
    const fumi_dtype d = dtypeOfCudnn(m_->tensors.at(uid).type);
    return d == FUMI_DTYPE_UNKNOWN ? 0 : loadAsDouble(b.data(), 0, d);
  }

  // The graph on the host in fp64, every node in dependency order.
  fumi_status evaluate() {
    const GraphModel& g = *m_->graph;
    for (size_t i = 0; i < uids.size(); ++i) {
      const fumi_tensor& t = tensors()[i];
      if (t.role != FUMI_ROLE_INPUT) continue;
      HostTensor h;
      h.dims = m_->tensors.at(uids[i]).dims;
      h.v.resize(static_cast<size_t>(countOf(h.dims)));
      if (gatherTensor(t, nullptr, t.dtype, h.v.data()) != FUMI_OK) return FUMI_UNSUPPORTED;
      env_[uids[i]] = std::move(h);
    }
    for (int64_t uid : g.by_value) {
      HostTensor h;
      h.dims = m_->tensors.at(uid).dims;
      h.v.assign(1, scalarOf(uid));
      env_[uid] = std::move(h);
    }
    for (const GraphNode& n : g.nodes)
      if (fumi_status st = evaluate(g, n); st != FUMI_OK) return st;
    return FUMI_OK;
  }

  const HostTensor* operand(const GraphNode& n, const char* role) const {
    for (const auto& o : n.operands)
      if (!o.output && std::strcmp(o.role, role) == 0) {
        auto it = env_.find(o.uid);
        return it == env_.end() ? nullptr : &it->second;
      }
    return nullptr;
  }

  // The operand `role` of node n: an input's value, or (output) where an output goes.
  const GraphNode::Operand* find(const GraphNode& n, const char* role, bool output) const {
    for (const auto& o : n.operands)
      if (o.output == output && std::strcmp(o.role, role) == 0) return &o;
    return nullptr;
  }

  // Output `role` of node n, when the node has it, gets `v` with dimensions `dims`.
  void store(const GraphNode& n, const char* role, std::vector<int64_t> dims,
             std::vector<double> v) {
    if (const GraphNode::Operand* o = find(n, role, true)) {
      HostTensor h;
      h.dims = std::move(dims);
      h.v = std::move(v);
      env_[o->uid] = std::move(h);
    }
  }

  // Batch and layer normalisation, forward and backward. Statistics run over the dimensions
  // where the mean tensor has size 1 (layer norm: all but N; batch norm: all but C), the
  // parameters broadcast over those where scale has size 1; variances are biased (the running
  // variance of batch-norm training takes the unbiased one, M/(M-1)).
  fumi_status evaluateNorm(const GraphModel& g, const GraphNode& n) {
    const RawDesc& op = g.descs[static_cast<size_t>(n.desc)];
    const bool fwd = n.type == CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR;
    cudnnBackendNormMode_t mode{};
    const Attr* ma = op.attr(fwd ? CUDNN_ATTR_OPERATION_NORM_FWD_MODE : CUDNN_ATTR_OPERATION_NORM_BWD_MODE);
    if (!ma || !ma->read(CUDNN_TYPE_NORM_MODE, 0, &mode) ||
        (mode != CUDNN_LAYER_NORM && mode != CUDNN_BATCH_NORM))
      return FUMI_UNSUPPORTED;
    const HostTensor *x = operand(n, "x"), *scale = operand(n, "scale");
    const GraphNode::Operand* mean_out = find(n, "mean", true);
    const HostTensor* mean_in = operand(n, "mean");
    const HostTensor* inv_in = operand(n, "inv_var");
    if (!x || !scale || (!mean_out && !mean_in)) return FUMI_UNSUPPORTED;
    const std::vector<int64_t> stats_dims =
        mean_in ? mean_in->dims : m_->tensors.at(mean_out->uid).dims;
    const int64_t total = countOf(x->dims), sets = countOf(stats_dims);
    if (sets <= 0 || total % sets != 0) return FUMI_UNSUPPORTED;
    const double count = static_cast<double>(total / sets);
    auto at = [&](const HostTensor& t, int64_t l) {
      return t.v[static_cast<size_t>(broadcastIndex(t.dims, x->dims, l))];
    };
    auto stat = [&](int64_t l) { return static_cast<size_t>(broadcastIndex(stats_dims, x->dims, l)); };
    std::vector<double> mean(static_cast<size_t>(sets)), inv(static_cast<size_t>(sets)),
        var(static_cast<size_t>(sets));
    if (mean_in && inv_in) {
      mean = mean_in->v;
      inv = inv_in->v;
    } else {
      const HostTensor* eps = operand(n, "epsilon");
      std::vector<Compensated> sum(mean.size()), sq(mean.size());
      for (int64_t l = 0; l < total; ++l) sum[stat(l)].add(x->v[static_cast<size_t>(l)], 1.0);
      for (size_t j = 0; j < mean.size(); ++j) mean[j] = sum[j].value() / count;
      for (int64_t l = 0; l < total; ++l) {
        const double d = x->v[static_cast<size_t>(l)] - mean[stat(l)];
        sq[stat(l)].add(d, d);
      }
      for (size_t j = 0; j < mean.size(); ++j) {
        var[j] = sq[j].value() / count;
        inv[j] = 1 / std::sqrt(var[j] + (eps ? eps->v[0] : 0.0));
      }
    }
    std::vector<double> out(static_cast<size_t>(total));
    if (fwd) {
      const HostTensor* bias = operand(n, "bias");
      if (!bias) return FUMI_UNSUPPORTED;
      for (int64_t l = 0; l < total; ++l)
        out[static_cast<size_t>(l)] =
            at(*scale, l) * (x->v[static_cast<size_t>(l)] - mean[stat(l)]) * inv[stat(l)] +
            at(*bias, l);
      store(n, "y", x->dims, std::move(out));
      store(n, "mean", stats_dims, mean);
      store(n, "inv_var", stats_dims, inv);
      const HostTensor* factor = operand(n, "factor");
      for (const char* r : {"running_mean", "running_var"}) {
        const HostTensor* prior = operand(n, r);
        if (!find(n, r, true)) continue;
        if (!prior || !factor || prior->v.size() != mean.size() || mean_in) return FUMI_UNSUPPORTED;
        const double f = factor->v[0], unbias = count > 1 ? count / (count - 1) : 1.0;
        std::vector<double> next(mean.size());
        for (size_t j = 0; j < next.size(); ++j)
          next[j] = (1 - f) * prior->v[j] +
                    f * (std::strcmp(r, "running_mean") == 0 ? mean[j] : var[j] * unbias);
        store(n, r, prior->dims, std::move(next));
      }
      return FUMI_OK;
    }
    const HostTensor* dy = operand(n, "dy");
    if (!dy || dy->dims != x->dims) return FUMI_UNSUPPORTED;
    // Sums over the statistics' sets (for dx) and over the parameters' sets (dscale, dbias).
    const int64_t params = countOf(scale->dims);
    std::vector<Compensated> g_sum(mean.size()), gx_sum(mean.size()), db(static_cast<size_t>(params)),
        ds(static_cast<size_t>(params));
    std::vector<double> xhat(static_cast<size_t>(total));
    for (int64_t l = 0; l < total; ++l) {
      const size_t i = static_cast<size_t>(l), s = stat(l);
      const auto p = static_cast<size_t>(broadcastIndex(scale->dims, x->dims, l));
      xhat[i] = (x->v[i] - mean[s]) * inv[s];
      const double gv = dy->v[i] * scale->v[p];
      g_sum[s].add(gv, 1.0);
      gx_sum[s].add(gv, xhat[i]);
      db[p].add(dy->v[i], 1.0);
      ds[p].add(dy->v[i], xhat[i]);
    }
    for (int64_t l = 0; l < total; ++l) {
      const size_t i = static_cast<size_t>(l), s = stat(l);
      const double gv = dy->v[i] * at(*scale, l);
      out[i] = inv[s] * (gv - g_sum[s].value() / count - xhat[i] * gx_sum[s].value() / count);
    }
    std::vector<double> dbias(db.size()), dscale(ds.size());
    for (size_t j = 0; j < db.size(); ++j) {
      dbias[j] = db[j].value();
      dscale[j] = ds[j].value();
    }
    store(n, "dx", x->dims, std::move(out));
    store(n, "dscale", scale->dims, std::move(dscale));
    store(n, "dbias", scale->dims, std::move(dbias));
    return FUMI_OK;
  }

  // SDPA forward: per (batch, query head, query row) s_j = scale·q·k_j over the kv axis (scale 1
  // when absent), O = Σ exp(s_j − max s)·v_j / Σ exp(s_j − max s), stats = max s + log Σ
  // exp(s_j − max s) (the natural-log log-sum-exp); query head h reads key head h/(H/H_k) and
  // value head h/(H/H_v). The dot products and both sums are compensated. Block masks, paged
  // K/V and sequence lengths are not modelled.
  fumi_status evaluateSdpa(const GraphNode& n) {
    for (const char* r : {"block_mask", "page_table_k", "page_table_v", "seq_len_q", "seq_len_kv"})
      if (find(n, r, false)) return FUMI_UNSUPPORTED;
    const HostTensor *q = operand(n, "q"), *k = operand(n, "k"), *v = operand(n, "v"),
                     *scale = operand(n, "scale");
    if (!q || !k || !v || q->dims.size() != 4 || k->dims.size() != 4 || v->dims.size() != 4 ||
        (scale && scale->v.size() != 1))
      return FUMI_UNSUPPORTED;
    const int64_t B = q->dims[0], H = q->dims[1], Sq = q->dims[2], D = q->dims[3];
    const int64_t Hk = k->dims[1], Skv = k->dims[2], Hv = v->dims[1], Dv = v->dims[3];
    if (k->dims[0] != B || v->dims[0] != B || k->dims[3] != D || v->dims[2] != Skv || Hk <= 0 ||
        Hv <= 0 || H % Hk != 0 || H % Hv != 0 || Skv <= 0)
      return FUMI_UNSUPPORTED;
    const double s = scale ? scale->v[0] : 1.0;
    auto at = [](const HostTensor& t, int64_t i) { return t.v[static_cast<size_t>(i)]; };
    std::vector<double> o(static_cast<size_t>(B * H * Sq * Dv));
    std::vector<double> stats(static_cast<size_t>(B * H * Sq)), p(static_cast<size_t>(Skv));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t k_rows = (b * Hk + h / (H / Hk)) * Skv;
        const int64_t v_rows = (b * Hv + h / (H / Hv)) * Skv;
        for (int64_t i = 0; i < Sq; ++i) {
          const int64_t row = (b * H + h) * Sq + i;
          for (int64_t j = 0; j < Skv; ++j) {
            Compensated dot;
            for (int64_t d = 0; d < D; ++d)
              dot.add(at(*q, row * D + d), at(*k, (k_rows + j) * D + d));
            p[static_cast<size_t>(j)] = s * dot.value();
          }
          const double mx = *std::max_element(p.begin(), p.end());
          Compensated z;
          for (double& e : p) z.add(e = std::exp(e - mx), 1.0);
          for (int64_t e = 0; e < Dv; ++e) {
            Compensated acc;
            for (int64_t j = 0; j < Skv; ++j)
              acc.add(p[static_cast<size_t>(j)], at(*v, (v_rows + j) * Dv + e));
            o[static_cast<size_t>(row * Dv + e)] = acc.value() / z.value();
          }
          stats[static_cast<size_t>(row)] = mx + std::log(z.value());
        }
      }
    store(n, "o", {B, H, Sq, Dv}, std::move(o));
    store(n, "stats", {B, H, Sq, 1}, std::move(stats));
    return FUMI_OK;
  }

  fumi_status evaluate(const GraphModel& g, const GraphNode& n) {
    if (n.type == CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR ||
        n.type == CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR)
      return evaluateNorm(g, n);
    if (n.type == CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR) return evaluateSdpa(n);
    const RawDesc& op = g.descs[static_cast<size_t>(n.desc)];
    int64_t out_uid = -1;
    for (const auto& o : n.operands)
      if (o.output) {
        if (out_uid >= 0) return FUMI_UNSUPPORTED;  // several outputs
        out_uid = o.uid;
      }
    HostTensor out;
    out.dims = m_->tensors.at(out_uid).dims;
    out.v.assign(static_cast<size_t>(countOf(out.dims)), 0.0);
    Direction dir{};
    ConvAttrs ca{};
    if (convAttrs(n.type, &dir, &ca)) {
      const char* names[3] = {dir == Direction::kBackwardData ? "dx" : "x",
                              dir == Direction::kBackwardFilter ? "dw" : "w",
                              dir == Direction::kForward ? "y" : "dy"};
      std::vector<fumi_tensor> ts;
      for (const char* r : names) {
        const HostTensor* t = operand(n, r);
        ts.push_back(t ? t->view(r) : out.view(r));
      }
      const RawDesc& conv = g.descs[static_cast<size_t>(op.ref(ca.conv))];
      std::vector<int64_t> pre, stride, dil;
      cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
      const Attr *p = conv.attr(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS),
                 *s = conv.attr(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES),
                 *d = conv.attr(CUDNN_ATTR_CONVOLUTION_DILATIONS),
                 *mo = conv.attr(CUDNN_ATTR_CONVOLUTION_CONV_MODE);
      if (!p || !s || !d || !mo || !p->int64s(&pre) || !s->int64s(&stride) || !d->int64s(&dil) ||
          !mo->read(CUDNN_TYPE_CONVOLUTION_MODE, 0, &mode) || pre.size() > 3)
        return FUMI_UNSUPPORTED;
      ConvSpec spec;
      spec.direction = dir;
      spec.x = 0;
      spec.w = 1;
      spec.y = 2;
      spec.spatial = static_cast<int>(pre.size());
      spec.groups = static_cast<int>(ts[0].shape[1] / std::max<int64_t>(1, ts[1].shape[1]));
      for (size_t i = 0; i < pre.size(); ++i) {
        spec.pad[i] = static_cast<int>(pre[i]);
        spec.stride[i] = static_cast<int>(stride[i]);
        spec.dilation[i] = static_cast<int>(dil[i]);
      }
      spec.flip = mode == CUDNN_CONVOLUTION;
      if (const Attr* a = op.attr(ca.alpha); a && !a->scalar(&spec.alpha)) return FUMI_UNSUPPORTED;
      const int32_t o = dir == Direction::kForward ? 2 : dir == Direction::kBackwardData ? 0 : 1;
      if (fumi_status st = convReference(ts, spec, o, out.v.data()); st != FUMI_OK) return st;
    } else if (n.type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR) {
      const HostTensor *a = operand(n, "a"), *b = operand(n, "b");
      if (!a || !b || a->dims.size() > 3 || b->dims.size() > 3 || out.dims.size() > 3)
        return FUMI_UNSUPPORTED;
      const std::vector<fumi_tensor> ts = {a->view("a"), b->view("b"), out.view("c")};
      MatmulSpec spec;
      spec.a = 0;
      spec.b = 1;
      spec.d = 2;
      if (fumi_status st = matmulReference(ts, spec, 2, out.v.data()); st != FUMI_OK) return st;
    } else if (n.type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR) {
      const RawDesc& pw = g.descs[static_cast<size_t>(op.ref(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR))];
      cudnnPointwiseMode_t mode{};
      const Attr* m = pw.attr(CUDNN_ATTR_POINTWISE_MODE);
      if (!m || !m->read(CUDNN_TYPE_POINTWISE_MODE, 0, &mode)) return FUMI_UNSUPPORTED;
      for (auto alpha : {CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2}) {
        double v = 1;
        if (const Attr* a = op.attr(alpha); a && (!a->scalar(&v) || v != 1)) return FUMI_UNSUPPORTED;
      }
      double lower = 0, upper = HUGE_VAL, slope = 0;
      for (auto [attr, dst] : {std::pair{CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, &lower},
                               std::pair{CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP, &upper},
                               std::pair{CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE, &slope}})
        if (const Attr* a = pw.attr(attr); a && !a->scalar(dst)) return FUMI_UNSUPPORTED;
      const bool backward = mode >= CUDNN_POINTWISE_RELU_BWD && mode <= CUDNN_POINTWISE_GELU_APPROX_TANH_BWD;
      const HostTensor* x = operand(n, "x");
      const HostTensor* b = operand(n, backward ? "dy" : "b");
      if (!x || (!unaryMode(mode) && !b)) return FUMI_UNSUPPORTED;
      bool ok = true;
      for (int64_t l = 0; l < countOf(out.dims); ++l) {
        const double xv = x->v[static_cast<size_t>(broadcastIndex(x->dims, out.dims, l))];
        const double bv = b ? b->v[static_cast<size_t>(broadcastIndex(b->dims, out.dims, l))] : 0;
        out.v[static_cast<size_t>(l)] = pointwise(mode, xv, bv, lower, upper, slope, &ok);
      }
      if (!ok) return FUMI_UNSUPPORTED;
    } else if (n.type == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR) {
      const RawDesc& red = g.descs[static_cast<size_t>(op.ref(CUDNN_ATTR_OPERATION_REDUCTION_DESC))];
      cudnnReduceTensorOp_t kind{};
      const Attr* k = red.attr(CUDNN_ATTR_REDUCTION_OPERATOR);
      const HostTensor* x = operand(n, "x");
      if (!k || !k->read(CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 0, &kind) || !x ||
          x->dims.size() != out.dims.size())
        return FUMI_UNSUPPORTED;
      std::vector<double> acc(out.v.size(), kind == CUDNN_REDUCE_TENSOR_MUL ? 1.0 : 0.0);
      std::vector<int64_t> counts(out.v.size(), 0);
      for (int64_t l = 0; l < countOf(x->dims); ++l) {
        // The output element l reduces into: its coordinates with reduced dims at 0.
        int64_t rem = l, o = 0, stride = 1;
        for (size_t d = x->dims.size(); d-- > 0;) {
          const int64_t coord = rem % x->dims[d];
          rem /= x->dims[d];
          o += (out.dims[d] == 1 ? 0 : coord) * stride;
          stride *= out.dims[d];
        }
        const double v = x->v[static_cast<size_t>(l)];
        double& a = acc[static_cast<size_t>(o)];
        const bool first = counts[static_cast<size_t>(o)]++ == 0;
        switch (kind) {
          case CUDNN_REDUCE_TENSOR_ADD: case CUDNN_REDUCE_TENSOR_AVG: a += v; break;
          case CUDNN_REDUCE_TENSOR_MUL: a *= v; break;
          case CUDNN_REDUCE_TENSOR_MIN: a = first ? v : std::min(a, v); break;
          case CUDNN_REDUCE_TENSOR_MAX: a = first ? v : std::max(a, v); break;
          case CUDNN_REDUCE_TENSOR_AMAX: a = std::max(a, std::fabs(v)); break;
          case CUDNN_REDUCE_TENSOR_NORM1: a += std::fabs(v); break;
          case CUDNN_REDUCE_TENSOR_NORM2: a += v * v; break;
          default: return FUMI_UNSUPPORTED;
        }
      }
      for (size_t i = 0; i < acc.size(); ++i)
        out.v[i] = kind == CUDNN_REDUCE_TENSOR_AVG ? acc[i] / std::max<int64_t>(1, counts[i])
                   : kind == CUDNN_REDUCE_TENSOR_NORM2 ? std::sqrt(acc[i])
                                                       : acc[i];
    } else {
      return FUMI_UNSUPPORTED;
    }
    env_[out_uid] = std::move(out);
    return FUMI_OK;
  }

  std::shared_ptr<const PlanModel> m_;
  std::unordered_map<int64_t, HostTensor> env_;
  bool evaluated_ = false;
  fumi_status status_ = FUMI_UNSUPPORTED;
};

// The checked path of a modelled graph: every input snapshotted before the call, every output
// after it, by-value scalars read at call time.
template <class Forward>
cudnnStatus_t checkedGraph(const CallSite& cs, RuleSampler* sampler, const PlanModel& m,
                           const std::unordered_map<int64_t, void*>& ptrs, cudaStream_t stream,
                           Forward&& forward,
                           const std::function<bool(std::unique_ptr<cuda::PendingCheck>&)>& hold) {
  const GraphModel& g = *m.graph;
  auto call = std::make_unique<GraphCall>(cs.site, m.shared_from_this(), m.dtype, cs.call_index);
  for (int64_t uid : g.by_value) {
    const void* p = ptrs.at(uid);
    const size_t n = typeBytes(m.tensors.at(uid).type);
    call->scalars[uid].assign(static_cast<const unsigned char*>(p),
                              static_cast<const unsigned char*>(p) + n);
  }
  auto bytesOf = [&](int64_t uid) {
    const TensorModel& t = m.tensors.at(uid);
    return static_cast<size_t>(spanOf(static_cast<int>(t.dims.size()), t.dims.data(),
                                       t.strides.data())) *
           typeBytes(t.type);
  };
  std::vector<void*> in_snap, out_snap;
  auto before = [&](Checker&, cuda::Snapshots& snaps) -> const char* {
    for (const auto& p : g.inputs) in_snap.push_back(snaps.copy(ptrs.at(p.uid), bytesOf(p.uid)));
    return nullptr;
  };
  auto after = [&](cuda::Snapshots& snaps) {
    for (const auto& p : g.outputs) out_snap.push_back(snaps.copy(ptrs.at(p.uid), bytesOf(p.uid)));
    return snaps.ok();
  };
  auto build = [&]() -> std::unique_ptr<Call> {
    auto add = [&](const GraphModel::Port& p, fumi_role role, void* data) {
      const TensorModel& t = m.tensors.at(p.uid);
      fumi_tensor ft{};
      ft.name = p.name.c_str();
      ft.dtype = dtypeOfCudnn(t.type);
      ft.memory = FUMI_MEMORY_DEVICE;
      ft.role = role;
      ft.ndim = static_cast<int32_t>(t.dims.size());
      for (size_t i = 0; i < t.dims.size(); ++i) {
        ft.shape[i] = t.dims[i];
        ft.strides[i] = t.strides[i];
      }
      ft.data = data;
      call->addTensor(ft);
      call->uids.push_back(p.uid);
    };
    for (size_t i = 0; i < g.inputs.size(); ++i) add(g.inputs[i], FUMI_ROLE_INPUT, in_snap[i]);
    for (size_t i = 0; i < g.outputs.size(); ++i) add(g.outputs[i], FUMI_ROLE_OUTPUT, out_snap[i]);
    call->addArg("graph", m.ops);
    call->addArg("engine", std::to_string(m.engine));
    call->addArg("notes", m.notes.empty() ? "none" : m.notes);
    return std::move(call);
  };
  return cuda::checkedDeviceCall(cs, sampler, stream, CUDNN_STATUS_SUCCESS, forward, before,
                                 after, build, hold);
}

template <class Real>
cudnnStatus_t backendExecute(const CallSite& cs, Real real, cudnnHandle_t h, void* plan,
                             void* pack) {
  auto forward = [&] { return forwardReal(real, h, plan, pack); };
  const uint64_t generation = g_generation.load(std::memory_order_acquire);
  std::shared_ptr<const PlanModel> model;  // owned here on the slow path
  const PlanModel* m = nullptr;
  if (t_exec.plan == plan && t_exec.pack == pack && t_exec.generation == generation) {
    m = t_exec.model;
  } else {
    std::unique_ptr<cuda::PendingCheck> discard, settle;
    uint64_t retract = 0;
    bool cacheable = false;
    const PackVerdict v =
        onExecute(pack, plan, &discard, &retract, &settle, &model, &cacheable);
    m = model.get();
    if (cacheable) t_exec = ExecCache{plan, pack, generation, m};
    if (discard || settle) {
      InsideScope inside;
      Checker* ck = Checker::get();
      if (discard) discard->discard = true;
      for (auto* c : {&discard, &settle})
        if (*c && ck) ck->submit(std::move(*c));
    }
    if (v == PackVerdict::kAutotuning) {
      cs.site.retractAutotuning(retract + 1);
      return forward();
    }
    if (v == PackVerdict::kNoSample) return forward();
  }
  CallFacts facts{m ? m->size : 1, m ? m->dtype : FUMI_DTYPE_UNKNOWN, "cuda"};
  facts.notes = m ? m->notes.c_str() : nullptr;
  RuleSampler* sampler = cs.decision.select(facts, cs.call_index);
  if (!sampler) return forward();
  const CudnnApi* api = cuda::cudnnApi();
  const char* why = !api ? "cuDNN functions missing"
                    : !m ? "plan unknown (finalized before libfumi was loaded)"
                         : m->unmodelled;
  ConvProblem p;
  bool legacy = false;
  std::unordered_map<int64_t, void*> ptrs;
  void* workspace = nullptr;
  auto hold = [pack](std::unique_ptr<cuda::PendingCheck>& c) { return holdUntilSettled(pack, c); };
  if (!why && !readPack(pack, &ptrs, &workspace)) why = "variant pack unknown";
  if (!why && m->graph) {
    for (const auto* ports : {&m->graph->inputs, &m->graph->outputs})
      for (const auto& port : *ports)
        if (!ptrs.count(port.uid)) why = "operand missing from the variant pack";
    for (int64_t uid : m->graph->by_value)
      if (!ptrs.count(uid) || !ptrs[uid] || !typeBytes(m->tensors.at(uid).type))
        why = "by-value operand missing or of an unknown type";
    if (!why) {
      InsideScope inside;
      if (api->cudnnGetStream(h, &p.stream) != CUDNN_STATUS_SUCCESS) why = "handle unreadable";
    }
    if (!why) return checkedGraph(cs, sampler, *m, ptrs, p.stream, forward, hold);
  }
  if (!why) why = convProblem(*m, ptrs, &p, &legacy);
  if (!why) {
    InsideScope inside;
    if (api->cudnnGetStream(h, &p.stream) != CUDNN_STATUS_SUCCESS) why = "handle unreadable";
  }
  if (why) {
    // The graph's operations with the reason: which graphs a program runs that fumi does not
    // check (an SDPA, a fused convolution) is what a user asks next.
    cs.site.countSkipped(m && !m->ops.empty() ? (std::string(why) + " (graph " + m->ops + ")").c_str()
                                              : why);
    return forward();
  }
  auto more = [&](DeviceConvCall& call) {
    call.same_plan = [life = m->life, c = m->conv, ws = m->workspace](Checker& ck,
                                                                      const ConvRerun& r) {
      return executePlan(life, c, ws, ck, r);
    };
    call.addArg("graph", m->ops);
    call.addArg("engine", std::to_string(m->engine));
    call.addArg("notes", m->notes.empty() ? "none" : m->notes);
  };
  return checkedConv(cs, sampler, p, forward, legacy ? legacyConvLaunch(p.dir) : nullptr, more,
                     hold);
}

// Recording into a CUDA graph runs nothing: never checked.
template <class Real>
cudnnStatus_t backendPopulateGraph(const CallSite& cs, Real real, cudnnHandle_t h, void* plan,
                                   void* pack, cudaGraph_t graph) {
  if (cs.decision.select(CallFacts{1, FUMI_DTYPE_UNKNOWN, "cuda"}, cs.call_index))
    cs.site.countSkipped("recorded into a CUDA graph (never checked)");
  return forwardReal(real, h, plan, pack, graph);
}

// What a forwarded bookkeeping call answers when no loaded library defines it.
constexpr cudnnStatus_t kNoCudnn = CUDNN_STATUS_NOT_INITIALIZED;

template <class Fn>
Fn realPass(std::atomic<void*>& slot, const char* name) {
  void* p = slot.load(std::memory_order_acquire);
  if (!p && (p = resolveReal(name)) != nullptr) slot.store(p, std::memory_order_release);
  return reinterpret_cast<Fn>(p);
}

}  // namespace

}  // namespace fumi::hooks

// The bookkeeping wrappers: the real call first, then the shadow (only when it succeeded and
// fumi is active on this thread: cuDNN's own inner calls are not the program's).
#define FUMI_REAL_PASS(name) \
  fumi::hooks::realPass<decltype(&::name)>(fumi::hooks::g_real_##name, #name)

extern "C" FUMI_EXPORT cudnnStatus_t cudnnBackendCreateDescriptor(
    cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t* d) {
  auto real = FUMI_REAL_PASS(cudnnBackendCreateDescriptor);
  if (!real) return fumi::hooks::kNoCudnn;
  const cudnnStatus_t st = real(type, d);
  if (st == CUDNN_STATUS_SUCCESS && d && fumi::enter()) fumi::hooks::onCreate(type, *d);
  return st;
}

extern "C" FUMI_EXPORT cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t d) {
  auto real = FUMI_REAL_PASS(cudnnBackendDestroyDescriptor);
  if (!real) return fumi::hooks::kNoCudnn;
  if (fumi::enter() && !fumi::hooks::onDestroy(d)) return CUDNN_STATUS_SUCCESS;
  return real(d);
}

extern "C" FUMI_EXPORT cudnnStatus_t cudnnBackendSetAttribute(
    cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
    cudnnBackendAttributeType_t type, int64_t count, const void* elements) {
  auto real = FUMI_REAL_PASS(cudnnBackendSetAttribute);
  if (!real) return fumi::hooks::kNoCudnn;
  const cudnnStatus_t st = real(d, name, type, count, elements);
  if (st == CUDNN_STATUS_SUCCESS && fumi::enter())
    fumi::hooks::onSet(d, name, type, count, elements);
  return st;
}

extern "C" FUMI_EXPORT cudnnStatus_t cudnnBackendGetAttribute(
    cudnnBackendDescriptor_t const d, cudnnBackendAttributeName_t name,
    cudnnBackendAttributeType_t type, int64_t requested, int64_t* count, void* elements) {
  auto real = FUMI_REAL_PASS(cudnnBackendGetAttribute);
  if (!real) return fumi::hooks::kNoCudnn;
  const cudnnStatus_t st = real(d, name, type, requested, count, elements);
  if (st == CUDNN_STATUS_SUCCESS && fumi::enter())
    fumi::hooks::onGet(d, name, type, count ? std::min(*count, requested) : 0, elements);
  return st;
}

extern "C" FUMI_EXPORT cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t d) {
  auto real = FUMI_REAL_PASS(cudnnBackendFinalize);
  if (!real) return fumi::hooks::kNoCudnn;
  const cudnnStatus_t st = real(d);
  if (st == CUDNN_STATUS_SUCCESS && fumi::enter()) {
    fumi::InsideScope inside;  // fumi's own cuDNN calls (engine notes) pass straight through
    fumi::hooks::onFinalize(d);
  }
  return st;
}

#undef FUMI_REAL_PASS

#define FUMI_PASS_HOOK(...)
#define FUMI_HOOK FUMI_HOOK_WRAPPER
#include "cudnn_backend.def"
#undef FUMI_HOOK
#undef FUMI_PASS_HOOK
