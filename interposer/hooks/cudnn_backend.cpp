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
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
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

using cuda::countSkipped;

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

// One SetAttribute, kept raw. `bytes` is empty when the type's element size is unknown.
struct Attr {
  cudnnBackendAttributeType_t type{};
  int64_t count = 0;
  std::vector<unsigned char> bytes;

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
// plan discards the held check and takes every execution of the pack out of the op's calls.
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
  void* graph = nullptr;
  std::shared_ptr<PlanModel> plan;  // EXECUTION_PLAN, once finalized
  std::unique_ptr<PackUse> use;     // VARIANT_PACK, once executed

  const Attr* attr(cudnnBackendAttributeName_t name) const {
    auto it = attrs.find(static_cast<int>(name));
    return it == attrs.end() ? nullptr : &it->second;
  }
  void* descriptor(cudnnBackendAttributeName_t name, int64_t i = 0) const {
    const Attr* a = attr(name);
    return a ? a->descriptor(i) : nullptr;
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

struct PlanModel {
  std::shared_ptr<PlanLife> life;
  const char* unmodelled = nullptr;  // why executions are not checked; nullptr: modelled
  std::string ops;                   // the graph's operations, "conv_fwd+pointwise"
  ConvOp conv;
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
  std::unordered_map<void*, Shadow> shadows;

  Shadow* find(void* d) {
    auto it = shadows.find(d);
    return it == shadows.end() ? nullptr : &it->second;
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

const char* opName(cudnnBackendDescriptorType_t t) {
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
    default: return "op";
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
const char* convModel(Registry& reg, const Shadow& op, PlanModel& m) {
  ConvAttrs a{};
  if (!convAttrs(op.type, &m.conv.dir, &a)) return "operation not modelled";
  const Attr* alpha = op.attr(a.alpha);
  const Attr* beta = op.attr(a.beta);
  if ((alpha && !alpha->scalar(&m.conv.alpha)) || (beta && !beta->scalar(&m.conv.beta)))
    return "scalars not readable";
  const Shadow* conv = reg.find(op.descriptor(a.conv));
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
    const Shadow* t = reg.find(op.descriptor(roles[i]));
    TensorModel tm;
    if (!t || !tensorModel(*t, uids[i], &tm)) return "tensors not readable";
    if (tm.is_virtual || tm.by_value) return "virtual or by-value convolution operands";
    m.tensors[*uids[i]] = tm;
  }
  return nullptr;
}

// The operation graph behind an engine config (set by the program, or derived by cuDNN).
void* graphOf(Registry& reg, void* cfg) {
  const Shadow* c = reg.find(cfg);
  if (!c) return nullptr;
  if (const Shadow* e = reg.find(c->descriptor(CUDNN_ATTR_ENGINECFG_ENGINE))) {
    if (void* g = e->descriptor(CUDNN_ATTR_ENGINE_OPERATION_GRAPH)) return g;
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

// The model of a plan being finalized (the registry locked by the caller).
std::shared_ptr<PlanModel> buildPlan(Registry& reg, void* plan, const Shadow& s) {
  auto m = std::make_shared<PlanModel>();
  m->life = std::make_shared<PlanLife>(plan);
  const Shadow* graph = reg.find(graphOf(reg, s.descriptor(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG)));
  const Attr* ops = graph ? graph->attr(CUDNN_ATTR_OPERATIONGRAPH_OPS) : nullptr;
  if (!ops) {
    m->unmodelled = "operation graph unknown (plan built from a serialized form or before fumi)";
    return m;
  }
  std::vector<const Shadow*> list;
  for (int64_t i = 0; i < ops->count; ++i) {
    const Shadow* op = reg.find(ops->descriptor(i));
    if (!op) {
      m->unmodelled = "operation unknown";
      return m;
    }
    list.push_back(op);
    m->ops += (m->ops.empty() ? "" : "+") + std::string(opName(op->type));
  }
  if (list.size() != 1) {
    m->unmodelled = "graph of several operations not modelled";
    return m;
  }
  m->unmodelled = convModel(reg, *list[0], *m);
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
  Shadow s;
  s.type = type;
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
    if (it->second.plan) life = it->second.plan->life;
    if (it->second.use) settled = std::move(it->second.use->held);
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
  void* graph = nullptr;
  if (name == CUDNN_ATTR_ENGINEHEUR_RESULTS)
    graph = s->descriptor(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
  else if (name == CUDNN_ATTR_ENGINECFG_ENGINE || name == CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG)
    graph = s->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR
                ? graphOf(reg, s->descriptor(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG))
                : graphOf(reg, d);
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
    m = buildPlan(reg, d, *s);
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
    FilterDims packed = *w;
    packed.format = f;
    int64_t n = 1;
    if (f == CUDNN_TENSOR_NCHW) {
      for (int i = w->nd - 1; i >= 0; --i) {
        packed.strides[i] = n;
        n *= w->dims[i];
      }
    } else {
      packed.strides[1] = 1;
      n = w->dims[1];
      for (int i = w->nd - 1; i >= 2; --i) {
        packed.strides[i] = n;
        n *= w->dims[i];
      }
      packed.strides[0] = n;
    }
    if (std::equal(packed.strides, packed.strides + w->nd, w->strides)) {
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

// The plan executed on a rerun's pointers, with fumi's handle and a variant pack of its own.
fumi_status executePlan(const std::shared_ptr<PlanLife>& life, const ConvOp& c,
                        int64_t workspace, Checker& ck, const ConvRerun& r) {
  const CudnnApi* api = cuda::cudnnApi();
  if (!api || !api->cudnnBackendCreateDescriptor || !api->cudnnBackendExecute)
    return FUMI_UNSUPPORTED;
  void* ws = workspace > 0 ? ck.scratch(static_cast<size_t>(workspace)) : nullptr;
  if (workspace > 0 && !ws) return FUMI_NO_SCRATCH;
  const bool fwd = c.dir == Direction::kForward, bwd_data = c.dir == Direction::kBackwardData;
  const int64_t uids[3] = {c.x, c.w, c.y};
  void* ptrs[3] = {bwd_data ? r.out : const_cast<void*>(r.xp),
                   c.dir == Direction::kBackwardFilter ? r.out : const_cast<void*>(r.wp),
                   fwd ? r.out : const_cast<void*>(r.yp)};
  cudnnBackendDescriptor_t pack = nullptr;
  cudnnStatus_t st = api->cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
  if (st == CUDNN_STATUS_SUCCESS)
    st = api->cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                       3, uids);
  if (st == CUDNN_STATUS_SUCCESS)
    st = api->cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                       CUDNN_TYPE_VOID_PTR, 3, ptrs);
  if (st == CUDNN_STATUS_SUCCESS)
    st = api->cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                                       CUDNN_TYPE_VOID_PTR, 1, &ws);
  if (st == CUDNN_STATUS_SUCCESS) st = api->cudnnBackendFinalize(pack);
  if (st == CUDNN_STATUS_SUCCESS) st = api->cudnnBackendExecute(r.handle, life->plan, pack);
  ck.api().cudaStreamSynchronize(ck.stream());  // before the workspace goes
  if (pack) api->cudnnBackendDestroyDescriptor(pack);
  if (ws) ck.give(ws);
  return rerunStatus(st);
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

// Takes the check of an execution on an unsettled pack (true), to submit when it settles.
bool holdUntilSettled(void* pack, std::unique_ptr<cuda::PendingCheck>& check) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  Shadow* s = reg.find(pack);
  if (!s || !s->use || s->use->settled || s->use->autotuning || s->use->held) return false;
  s->use->held = std::move(check);
  return true;
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
  if (!why && !readPack(pack, &ptrs, &workspace)) why = "variant pack unknown";
  if (!why) why = convProblem(*m, ptrs, &p, &legacy);
  if (!why) {
    InsideScope inside;
    if (api->cudnnGetStream(h, &p.stream) != CUDNN_STATUS_SUCCESS) why = "handle unreadable";
  }
  if (why) {
    countSkipped(cs.site, why);
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
                     [pack](std::unique_ptr<cuda::PendingCheck>& c) {
                       return holdUntilSettled(pack, c);
                     });
}

// Recording into a CUDA graph runs nothing: never checked.
template <class Real>
cudnnStatus_t backendPopulateGraph(const CallSite& cs, Real real, cudnnHandle_t h, void* plan,
                                   void* pack, cudaGraph_t graph) {
  if (cs.decision.select(CallFacts{1, FUMI_DTYPE_UNKNOWN, "cuda"}, cs.call_index))
    countSkipped(cs.site, "recorded into a CUDA graph (never checked)");
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
