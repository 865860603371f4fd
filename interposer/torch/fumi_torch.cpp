// fumi_torch.cpp — the PyTorch adapter. A RecordFunction observer (FUNCTION scope: every aten
// op, forward, backward and optimizer; USER_SCOPE: ranges such as "Optimizer.step#SGD.step";
// TORCHSCRIPT_FUNCTION: only whether the thread runs TorchScript, for scriptFrames) counts each
// op under its aten name and keeps the thread's framework-op context, so BLAS calls report the
// aten op that made them. When the policy samples an op call, the observer copies its
// inputs before the op runs, and after it ran hands libfumi a description whose rerun() calls
// the op again through the dispatcher on fresh copies (checks: perturb, highprec, determinism...).
// Loaded by libfumi only (interposer/adapter.cpp); talks to it through adapter_api.h; every
// torch-version difference is in torch_compat.h.
#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <iterator>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/MapAllocator.h>
#include <c10/core/CPUAllocator.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include "adapter_api.h"
#include "fumi/dtype.hpp"
#include "metrics.h"
#include "torch_compat.h"
#include "torch_version.h"
#include "wide_conv.h"
#include "wide_ops.h"

// This module's thread-locals, reached from one computed base per function: local-dynamic, where
// the default (global-dynamic, for a library loaded by dlopen) calls __tls_get_addr for each
// variable read (about 14 calls an op in the end callback alone). Never for other modules'
// (c10's dispatch-key set: the linker refuses).
#define FUMI_LOCAL_TLS [[gnu::tls_model("local-dynamic")]] thread_local

namespace {

const fumi_adapter_api* g_api = nullptr;

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
const char kBackend[] = "torch";

// ---- op name -> libfumi site ----------------------------------------------------------------

// Looked up on every op. Sites are named as users know ops: "aten::add.Tensor" (name.overload;
// "aten::addmm" for the unnamed overload), or the range's name ("Optimizer.step#SGD.step").
//
// Two open-addressing tables, written once per slot under the mutex and read without it:
//   by address  For dispatcher ops fn.name() points into the op's schema, which lives as long as
//               the process, one per overload: the address identifies the overload without
//               copying its OperatorName. The slot keeps the text it saw, compared on every hit,
//               so a recycled address of some other string never matches.
//   by content  (FNV-1a) Every name: ranges named by a string own it, so its address changes
//               from call to call, while the set of distinct names is small.
constexpr size_t kSlots = 4096;  // distinct op names in a process are in the hundreds
struct Slot {
  std::atomic<const char*> key{nullptr};  // published after the other fields
  const char* text = nullptr;             // owned copy of the key's text
  void* site = nullptr;
  bool view = false;  // by address: the op returns views of its inputs (torch_compat::returnsView)
  bool writes = false;  // by address: its schema writes an argument (writesArgument)
  bool opaque = false;  // by address: the ops it runs inside are not observed (unobservedInside)
};
Slot g_by_address[kSlots];
Slot g_by_content[kSlots];
std::mutex g_insert_mu;

size_t hashAddress(const char* p) {
  return static_cast<size_t>((reinterpret_cast<uintptr_t>(p) >> 3) * 0x9e3779b97f4a7c15ull >> 20);
}

size_t hashText(const char* p) {
  uint64_t h = 1469598103934665603ull;
  for (; *p; ++p) h = (h ^ static_cast<unsigned char>(*p)) * 1099511628211ull;
  return static_cast<size_t>(h);
}

// The slot of `table` for `key` (compared by address or by text), or a free one to fill; null
// when the table is full.
Slot* probe(Slot* table, const char* key, const char* text, size_t hash) {
  for (size_t n = 0, i = hash % kSlots; n < kSlots; ++n, i = (i + 1) % kSlots) {
    const char* held = table[i].key.load(std::memory_order_acquire);
    if (held == nullptr) return &table[i];
    if (table == g_by_address ? held == key && std::strcmp(table[i].text, text) == 0
                              : std::strcmp(held, text) == 0)
      return &table[i];
  }
  return nullptr;
}

void* siteNamed(const std::string& name) {
  Slot* slot = probe(g_by_content, nullptr, name.c_str(), hashText(name.c_str()));
  if (slot && slot->key.load(std::memory_order_acquire)) return slot->site;
  std::lock_guard<std::mutex> lock(g_insert_mu);
  slot = probe(g_by_content, nullptr, name.c_str(), hashText(name.c_str()));  // again, locked
  if (!slot) return g_api->intern_op(name.c_str(), kBackend);  // table full: slow but correct
  if (!slot->key.load(std::memory_order_relaxed)) {
    slot->site = g_api->intern_op(name.c_str(), kBackend);
    slot->text = strdup(name.c_str());
    slot->key.store(slot->text, std::memory_order_release);
  }
  return slot->site;
}

// "aten::add.Tensor"; "aten::addmm" for the unnamed overload.
std::string displayName(const c10::OperatorName& op) {
  return op.overload_name.empty() ? op.name : op.name + "." + op.overload_name;
}

// Which of torch's TF32 settings governs the op on a CUDA device: convolutions and RNNs run
// through cuDNN (cudnn.allow_tf32 / fp32_precision of "conv" and "rnn"), matmuls through cuBLAS
// (matmul precision). Composite ops count with the op they are made of (linear -> addmm).
fumi::torch_compat::Tf32Family tf32Family(const std::string& name) {
  using F = fumi::torch_compat::Tf32Family;
  auto starts = [&](const char* p) { return name.rfind(p, 0) == 0; };
  if (starts("aten::conv") || starts("aten::_conv") || starts("aten::cudnn_conv")) return F::kConv;
  if (starts("aten::_cudnn_rnn") || name == "aten::lstm" || name == "aten::gru" ||
      name == "aten::rnn_tanh" || name == "aten::rnn_relu")
    return F::kRnn;
  static const std::set<std::string> matmuls = {
      "aten::mm",      "aten::bmm",       "aten::addmm",     "aten::baddbmm",
      "aten::addbmm",  "aten::matmul",    "aten::linear",    "aten::_addmm_activation",
      "aten::einsum",  "aten::tensordot", "aten::bilinear",  "aten::linalg_multi_dot",
      "aten::chain_matmul", "aten::_trilinear"};
  return matmuls.count(name) ? F::kMatmul : F::kNone;
}

// Does the op compute no values: it only returns views of its inputs (as_strided, select, t,
// expand, ...) or only changes their metadata in place (as_strided_, unsqueeze_, resize_, ...)?
// Looked up once per overload, when its slot is filled.
// So does set_: it points a tensor at memory that holds values already (a storage, another
// tensor's), computing none. `copy.deepcopy` of a tensor wraps its storage with set_ (batch 37's
// deep Kalman filter: a NaN in the data, kept as set_'s result, read as made of nothing by
// set_, and the RNN's first matmul named its origin).
bool returnsView(const c10::OperatorName& name) {
  if (name.name == "aten::set_") return true;
  const auto op = c10::Dispatcher::singleton().findOp(name);
  return op && (fumi::torch_compat::returnsView(op->schema()) ||
                fumi::torch_compat::changesOnlyMetadata(*op));
}

// Whether the ops an op runs inside are left unobserved (onStart): torch 1.13's CPU bmm and
// baddbmm take their matrices one at a time, each through select, as_strided and resolve_conj
// (views, dispatched and observed like any op) around one sgemm_, which libfumi's BLAS hook still
// sees: batch 32's Swin Transformer, whose window attention multiplies thousands of 16x16
// matrices, made 4.6 M of its 5.5 M intercepted calls there, 1.4-1.9x plain. mm and addmm run
// three resolve_conj, addmm an expand and the copy_ of its bias into the result too (batch 33's
// graph U-Net: 31% of its 3.6 M calls inside mm, addmm and linear's addmm). Nothing inside
// computes values of its own (views are neither checked nor kept for looking back; the bias's
// copy is the op's own work, which it returns).
bool unobservedInside(const c10::OperatorName& name) {
  static const char* const kOps[] = {"aten::bmm", "aten::baddbmm", "aten::baddbmm_",
                                     "aten::mm",  "aten::addmm",   "aten::addmm_"};
  return std::any_of(std::begin(kOps), std::end(kOps),
                     [&name](const char* op) { return name.name == op; });
}

// Whether the op's schema writes an argument (Tensor(a!): in-place, out=). Such an op may run
// its kernel on a proxy of an output (a structured kernel's out= or in-place form, where the
// output's strides differ from those it computes: torch.linalg.lu's lu_unpack_out) that it
// deletes outright as it returns (c10::ExclusivelyOwned: no weak reference is honoured), so the
// ops it runs inside are not kept for looking back (a weak reference to the proxy crashed the
// process: batch 27).
bool writesArgument(const c10::OperatorName& name) {
  const auto op = c10::Dispatcher::singleton().findOp(name);
  if (!op) return false;
  for (const c10::Argument& a : op->schema().arguments())
    if (a.alias_info() && a.alias_info()->isWrite()) return true;
  return false;
}

// Whether an op running around the calling one writes an argument, or is an operator, not a
// range (below).
bool insideWriter(size_t skip = 0);
bool insideOperator(size_t skip = 0);

// What siteFor tells of an op (all false for ranges).
struct SiteFacts {
  bool view = false;    // it returns views of its inputs
  bool writes = false;  // it writes an argument
  bool op = false;      // an operator, not a range
  bool opaque = false;  // the ops it runs inside are not observed (unobservedInside)
};

// The op's site, and its facts.
void* siteFor(const at::RecordFunction& fn, SiteFacts& facts) {
  const char* name = fumi::torch_compat::opName(fn);
  Slot* slot = probe(g_by_address, name, name, hashAddress(name));
  if (slot && slot->key.load(std::memory_order_acquire)) {
    facts = {slot->view, slot->writes, true, slot->opaque};  // only operators have slots by address
    return slot->site;
  }
  const auto op = fn.operator_name();
  if (!op) return siteNamed(name);  // a range: its name's address is not stable
  void* site = siteNamed(displayName(*op));
  facts = {returnsView(*op), writesArgument(*op), true, unobservedInside(*op)};
  std::lock_guard<std::mutex> lock(g_insert_mu);
  slot = probe(g_by_address, name, name, hashAddress(name));
  if (slot && !slot->key.load(std::memory_order_relaxed)) {
    slot->site = site;
    slot->view = facts.view;
    slot->writes = facts.writes;
    slot->opaque = facts.opaque;
    slot->text = strdup(name);
    slot->key.store(name, std::memory_order_release);
  }
  return site;
}

// ---- dtypes and tensor walks ----------------------------------------------------------------

fumi_dtype toFumi(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Double: return FUMI_DTYPE_F64;
    case c10::ScalarType::Float: return FUMI_DTYPE_F32;
    case c10::ScalarType::Half: return FUMI_DTYPE_F16;
    case c10::ScalarType::BFloat16: return FUMI_DTYPE_BF16;
    default: return FUMI_DTYPE_UNKNOWN;
  }
}

c10::ScalarType fromFumi(fumi_dtype d) {
  switch (d) {
    case FUMI_DTYPE_F64: return c10::ScalarType::Double;
    case FUMI_DTYPE_F16: return c10::ScalarType::Half;
    case FUMI_DTYPE_BF16: return c10::ScalarType::BFloat16;
    default: return c10::ScalarType::Float;  // f32, and tf32 (a math mode, stored as f32)
  }
}

// The autocast dtype of the calling thread's region for ops on `device`; UNKNOWN outside one.
fumi_dtype autocastFor(const std::string& device) {
  c10::DeviceType type = c10::DeviceType::CPU;
  if (device.rfind("cuda", 0) == 0) type = c10::DeviceType::CUDA;
  else if (device != "cpu") return FUMI_DTYPE_UNKNOWN;
  c10::ScalarType dtype{};
  return fumi::torch_compat::autocastDtype(type, &dtype) ? toFumi(dtype) : FUMI_DTYPE_UNKNOWN;
}

// A tensor whose elements fumi can read: strided, over a storage, not nested. Sparse and
// mkldnn tensors are not strided, nested ones have no sizes to read; functorch's transforms
// (vmap's batched tensors, grad's wrappers) and other wrapper subclasses have no storage and no
// data pointer (asking throws, and a c10::Error builds a symbolised backtrace: thousands of
// them made a vmap job 70x slower).
// The op their transform runs underneath, on the physical tensors, is observed in its turn.
bool readable(const at::Tensor& t) {
  return t.layout() == c10::kStrided && t.has_storage() && !fumi::torch_compat::nested(t);
}

// PyTorch's name of an integer or boolean dtype (a dumped auxiliary tensor's, for replay.py);
// null for the others.
const char* auxDtypeName(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Long: return "int64";
    case c10::ScalarType::Int: return "int32";
    case c10::ScalarType::Short: return "int16";
    case c10::ScalarType::Char: return "int8";
    case c10::ScalarType::Byte: return "uint8";
    case c10::ScalarType::Bool: return "bool";
    default: return nullptr;
  }
}

// What a tensor fumi does not read is, for the reason a call with one goes unchecked; null for
// a wrapper without storage (its transform's physical op is observed instead).
const char* unreadKind(const at::Tensor& t) {
  switch (t.layout()) {
    case c10::kStrided: return fumi::torch_compat::nested(t) ? "nested" : nullptr;
    case c10::kSparse: return "sparse COO";
    case c10::kSparseCsr: return "sparse CSR";
    case c10::kMkldnn: return "mkldnn";
    default: return "non-strided";
  }
}

// Complex tensors (complex64 and complex128: torch.fft's, a complex einsum's) are described to
// libfumi as their real views (view_as_real: a trailing dimension of 2, the real and imaginary
// parts), so that every check reads, perturbs, widens and compares them part by part; reruns
// view the checks' buffers as complex again (complexOf). complex32 is not read.
bool complexChecked(c10::ScalarType t) {
  return t == c10::ScalarType::ComplexFloat || t == c10::ScalarType::ComplexDouble;
}

// The dtype fumi reads t's elements in: its own, or a checked complex type's parts'.
fumi_dtype partDtype(const at::Tensor& t) {
  const c10::ScalarType s = t.scalar_type();
  return toFumi(complexChecked(s) ? c10::toRealValueType(s) : s);
}

// Whether t holds values a check compares: floating, or complex of a checked type.
bool checkedValues(const at::Tensor& t) {
  return at::isFloatingType(t.scalar_type()) || complexChecked(t.scalar_type());
}

// A tensor of `type`, `sizes` and `strides` at byte `offset` of `storage`, on any device (built
// here: a backend need not register the view ops).
at::Tensor viewAt(const c10::Storage& storage, size_t offset, c10::ScalarType type,
                  c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  const caffe2::TypeMeta meta = c10::scalarTypeToTypeMeta(type);
  if (offset % meta.itemsize() != 0) throw std::runtime_error("a misaligned device buffer");
  at::Tensor v = at::detail::make_tensor<c10::TensorImpl>(
      c10::Storage(storage),
      c10::DispatchKeySet(c10::computeDispatchKey(type, c10::kStrided, storage.device())), meta);
  v.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides);
  v.unsafeGetTensorImpl()->set_storage_offset(static_cast<int64_t>(offset / meta.itemsize()));
  return v;
}

// The view of t's memory as `type` with its innermost dimension of 2 (real views) added, or
// taken away: view_as_real and view_as_complex, which torch registers for its own backends
// only (a PrivateUse1 device has neither).
at::Tensor reinterpretParts(const at::Tensor& t, c10::ScalarType type, bool add) {
  std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().end());
  std::vector<int64_t> strides(t.strides().begin(), t.strides().end());
  if (add) {
    for (int64_t& s : strides) s *= 2;
    sizes.push_back(2);
    strides.push_back(1);
  } else {
    if (sizes.empty() || sizes.back() != 2 || strides.back() != 1)
      throw std::runtime_error("not the real view of a complex tensor");
    sizes.pop_back();
    strides.pop_back();
    for (int64_t& s : strides) {
      if (s % 2 != 0) throw std::runtime_error("not the real view of a complex tensor");
      s /= 2;
    }
  }
  return viewAt(t.storage(), static_cast<size_t>(t.storage_offset()) * t.element_size(), type,
                sizes, strides);
}

// t as libfumi sees it: a checked complex tensor's real view (conjugate and negative views
// resolved first: their memory holds other values), any other tensor as it is.
at::Tensor realView(const at::Tensor& t) {
  if (!t.defined() || !complexChecked(t.scalar_type())) return t;
  const at::Tensor c = t.resolve_conj().resolve_neg();
  return reinterpretParts(c, c10::toRealValueType(c.scalar_type()), /*add=*/true);
}

// A buffer laid out like a real view, as the complex tensor it stands for when `complex`.
at::Tensor complexOf(const at::Tensor& real, bool complex) {
  return complex ? reinterpretParts(real, c10::toComplexType(real.scalar_type()), /*add=*/false)
                 : real;
}

// The dtype a rerun in `wide` (a real type) gives t: `wide`, or its complex type for complex t.
c10::ScalarType widened(const at::Tensor& t, c10::ScalarType wide) {
  return complexChecked(t.scalar_type()) ? c10::toComplexType(wide) : wide;
}

// A tensor fumi can describe: readable, defined, floating or complex of a checked type.
bool describable(const at::Tensor& t) {
  return t.defined() && readable(t) && partDtype(t) != FUMI_DTYPE_UNKNOWN;
}

// Calls f(tensor, label_suffix) for every defined tensor held by `v` (a Tensor, a Tensor[] or a
// Tensor?[]), in order. Returns a copy of `v` with each tensor replaced by what f returns.
template <class F>
c10::IValue mapTensors(const c10::IValue& v, F&& f) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    return t.defined() ? c10::IValue(f(t, -1)) : v;
  }
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    const c10::List<at::Tensor> in = v.toTensorList();
    out.reserve(in.size());
    for (size_t k = 0; k < in.size(); ++k) {
      const at::Tensor t = in.get(k);
      out.push_back(t.defined() ? f(t, static_cast<int>(k)) : t);
    }
    return out;
  }
  if (v.isList()) {  // e.g. Tensor?[] of index ops
    const c10::List<c10::IValue> in = v.toList();
    c10::impl::GenericList out(in.elementType());
    out.reserve(in.size());
    for (size_t k = 0; k < in.size(); ++k) {
      const c10::IValue e = in.get(k);
      out.push_back(e.isTensor() && e.toTensor().defined()
                        ? c10::IValue(f(e.toTensor(), static_cast<int>(k)))
                        : e);
    }
    return out;
  }
  return v;
}

// Calls f(tensor, label_suffix) for the same tensors as mapTensors, building nothing: this walk
// runs for every call of an op some rule names, sampled or not.
template <class F>
void forEachTensor(const c10::IValue& v, F&& f) {
  if (v.isTensor()) {
    if (v.toTensor().defined()) f(v.toTensor(), -1);
  } else if (v.isTensorList()) {
    const c10::List<at::Tensor> in = v.toTensorList();
    for (size_t k = 0; k < in.size(); ++k) {
      const at::Tensor t = in.get(k);
      if (t.defined()) f(t, static_cast<int>(k));
    }
  } else if (v.isList()) {
    const c10::List<c10::IValue> in = v.toList();
    for (size_t k = 0; k < in.size(); ++k) {
      const c10::IValue e = in.get(k);
      if (e.isTensor() && e.toTensor().defined()) f(e.toTensor(), static_cast<int>(k));
    }
  }
}

// What sampling needs to know about a call, read from its inputs without copying anything.
struct Facts {
  fumi_dtype dtype = FUMI_DTYPE_UNKNOWN;  // of the first floating input
  int64_t size = 0;                       // elements of the largest floating input
  int64_t any_size = 0;                   // elements of the largest readable input, any dtype
  std::string device = "cpu";
  bool dense = true;    // every tensor input is readable (strided, with a storage)
  bool complex = false; // a complex input (torch.fft's, a complex einsum's)
  const char* layout = nullptr;  // an input's kind fumi does not read (sparse, mkldnn, nested)
};

template <class Inputs>
Facts factsOf(const Inputs& inputs) {
  Facts f;
  for (size_t i = 0; i < inputs.size(); ++i)
    forEachTensor(inputs[i], [&](const at::Tensor& t, int) {
      if (!readable(t)) {
        f.dense = false;  // not checked: for a layout fumi does not read, a rule may ask why
        if (const char* kind = unreadKind(t)) {
          f.layout = kind;
          if (f.dtype == FUMI_DTYPE_UNKNOWN && at::isFloatingType(t.scalar_type()))
            f.dtype = toFumi(t.scalar_type());
          // A nested tensor's elements: its buffer's (its numel may throw).
          const int64_t n = t.layout() != c10::kStrided ? t.numel()
                            : t.has_storage() ? static_cast<int64_t>(t.storage().nbytes()) /
                                                    static_cast<int64_t>(t.element_size())
                                              : 0;
          f.size = std::max<int64_t>(f.size, n);
          if (!t.device().is_cpu()) f.device = t.device().str();
        }
        return;
      }
      f.any_size = std::max<int64_t>(f.any_size, t.numel());
      if (t.is_complex()) {
        f.complex = true;
        f.size = std::max<int64_t>(f.size, t.numel());
        if (!t.device().is_cpu()) f.device = t.device().str();
      }
      if (!describable(t)) return;
      if (f.dtype == FUMI_DTYPE_UNKNOWN) {
        f.dtype = partDtype(t);
        if (!t.device().is_cpu()) f.device = t.device().str();
      }
      f.size = std::max<int64_t>(f.size, t.numel());
    });
  return f;
}

// fumi's own tensor work never reaches this observer, autograd, or the program's RNG stream.
class QuietScope {
 public:
  QuietScope() : fumi_was_(g_api->quiet(1)) {}
  ~QuietScope() { g_api->quiet(fumi_was_); }
  QuietScope(const QuietScope&) = delete;
  QuietScope& operator=(const QuietScope&) = delete;

 private:
  int fumi_was_;  // libfumi's own hooks pass library calls through (adapter_api.h quiet)
  at::DisableRecordFunctionGuard no_observers_;
  c10::InferenceMode no_autograd_;
};

// Whether the calling thread holds the CPU generator's mutex: torch's Dirichlet sampler
// (_s_dirichlet_cpu) calls at::sum while it holds it, and a rerun of that sum locking it again
// deadlocked the program (batch 19). std::mutex is not recursive: a try_lock fails, and glibc
// records the holder's thread id in the mutex.
bool cpuGeneratorHeldHere() {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::mutex& m = gen.mutex();
  if (m.try_lock()) {
    m.unlock();
    return false;
  }
  return m.native_handle()->__data.__owner == static_cast<int>(syscall(SYS_gettid));
}

// Ops not marked random may still draw numbers: the CPU generator's state is put back after
// each rerun. (Another thread drawing meanwhile would see its draws repeated; randomised ops,
// the ones that draw, are never rerun — torch_compat::randomised.) Throws where the calling
// thread holds the generator (an op a sampler runs inside its draw; such calls are not sampled,
// this is the last guard against the deadlock).
class CpuRngGuard {
 public:
  CpuRngGuard() : gen_(at::detail::getDefaultCPUGenerator()) {
    if (cpuGeneratorHeldHere())
      throw std::runtime_error("the op runs inside a random op holding the CPU generator");
    std::lock_guard<std::mutex> lock(gen_.mutex());
    state_ = gen_.get_state();
  }
  ~CpuRngGuard() {
    try {
      std::lock_guard<std::mutex> lock(gen_.mutex());
      gen_.set_state(state_);
    } catch (...) {
    }
  }
  CpuRngGuard(const CpuRngGuard&) = delete;
  CpuRngGuard& operator=(const CpuRngGuard&) = delete;

 private:
  at::Generator gen_;
  at::Tensor state_;
};

// ---- one sampled call -----------------------------------------------------------------------

// Reruns that fail (an op without a kernel for the wider dtype, e.g. oneDNN convolution in f64),
// and checks the adapter could not run, are logged once per op and kind ("rerun in Double",
// "CPU reference", "torch adapter: its check"); the check counts as skipped.
void noteFailureOnce(const char* op, const std::string& rerun, const char* what,
                      const char* then = "such checks are skipped",
                      fumi_log_level level = FUMI_LOG_INFO) {
  static std::mutex mu;
  static auto* seen = new std::set<std::pair<std::string, std::string>>;  // immortal: used at exit
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!seen->emplace(op, rerun).second) return;
  }
  // The first line: a c10::Error's message goes on with a C++ backtrace.
  std::string first_line(what);
  first_line = first_line.substr(0, first_line.find('\n'));
  g_api->log(level,
             (std::string(op) + ": " + rerun + " failed (" + first_line + "); " + then).c_str());
}

// ---- error attribution: generated vs amplified --------------------------------------------
//
// A checked call whose wider rerun ran (highprec) leaves its reference outputs here, keyed by
// the identity of the values it produced (storage, offset, shape, strides, version counter: an
// in-place change later makes a different key). When a later call of the same step violates an
// error check and one of its inputs is such an output, the call is rerun in the wider precision
// once more with those inputs replaced by their producers' references:
//   generated  its output against its own wider rerun on the inputs it got (highprec's figure)
//   amplified  its wider rerun on the inputs it got against the one on the producers'
//              references: the error already in its inputs, carried through the op
// (normwise relative errors; docs/detection.md). Cleared at each optimizer step; bounded; an
// entry goes as soon as its output has.

struct TensorKey {
  const void* storage = nullptr;
  int64_t offset = 0;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  uint32_t version = 0;

  static TensorKey of(const at::Tensor& t) {
    TensorKey k;
    // Inference tensors (torch.inference_mode) keep no version counter: no key, no attribution.
    if (!t.defined() || !t.has_storage() || t.is_inference()) return k;
    k.storage = t.storage().data();
    k.offset = t.storage_offset();
    k.sizes = t.sizes().vec();
    k.strides = t.strides().vec();
    k.version = t._version();
    return k;
  }
  bool operator==(const TensorKey& o) const {
    return storage && storage == o.storage && offset == o.offset && sizes == o.sizes &&
           strides == o.strides && version == o.version;
  }
};

struct Produced {
  TensorKey key;
  std::string op;
  uint64_t index = 0;
  at::Tensor reference;  // the producer's wider rerun of this output
  // The output itself, weakly: while it lives no later tensor can have an equal key, and once
  // it is gone the entry is stale. A strong reference would keep the program's tensor alive
  // (memory) and change what autograd does with it: AccumulateGrad takes a fresh gradient over
  // only when nothing else holds it, and copied every checked backward op's gradient instead.
  c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> output{
      c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>()};
  uint64_t bytes() const { return reference.nbytes(); }
};

class Producers {
 public:
  static constexpr size_t kMaxEntries = 64;
  static constexpr uint64_t kMaxBytes = 64ull << 20;

  void add(Produced p) {
    std::lock_guard<std::mutex> lock(mu_);
    // References of outputs the program has dropped can match nothing any more: they go first
    // (a job without torch.optim never clears the list at an optimizer step).
    for (auto it = entries_.begin(); it != entries_.end();)
      if (it->output.expired()) {
        bytes_ -= it->bytes();
        it = entries_.erase(it);
      } else {
        ++it;
      }
    bytes_ += p.bytes();
    entries_.push_back(std::move(p));
    while (!entries_.empty() && (entries_.size() > kMaxEntries || bytes_ > kMaxBytes)) {
      bytes_ -= entries_.front().bytes();
      entries_.pop_front();
    }
  }
  bool find(const TensorKey& key, Produced* out) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = entries_.rbegin(); it != entries_.rend(); ++it)
      if (it->key == key && !it->output.expired()) {
        *out = *it;
        return true;
      }
    return false;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.clear();
    bytes_ = 0;
  }

 private:
  std::mutex mu_;
  std::deque<Produced> entries_;
  uint64_t bytes_ = 0;
};

Producers& producers() {
  static auto* p = new Producers;  // immortal: tensors must not be freed after torch is gone
  return *p;
}

// Scalars computed where the tensors live, brought to the host in one copy (as doubles:
// counts below 2^53 are exact).
std::vector<double> scalars(const std::vector<at::Tensor>& values) {
  std::vector<at::Tensor> parts;
  for (const at::Tensor& v : values) parts.push_back(v.to(at::kDouble).reshape({1}));
  const at::Tensor host = at::cat(parts).cpu();
  const double* p = host.data_ptr<double>();
  return std::vector<double>(p, p + host.numel());
}

// The sum of all elements (a one-element tensor) by the reduction over every dimension.
at::Tensor total(const at::Tensor& t) {
  std::vector<int64_t> dims(static_cast<size_t>(t.dim()));
  for (int64_t d = 0; d < t.dim(); ++d) dims[static_cast<size_t>(d)] = d;
  return t.sum(dims);
}

// t's shape and strides (in elements) as a fumi_tensor's, its other fields zero; false for more
// than FUMI_MAX_DIMS dimensions.
bool layoutOf(const at::Tensor& t, fumi_tensor* d) {
  if (t.dim() > FUMI_MAX_DIMS) return false;
  *d = fumi_tensor{};
  d->struct_size = sizeof *d;
  d->ndim = static_cast<int32_t>(t.dim());
  for (int64_t k = 0; k < t.dim(); ++k) {
    d->shape[k] = t.size(k);
    d->strides[k] = t.stride(k);
  }
  return true;
}

// ||x - y|| / ||y|| by the host's comparison loops (adapter ABI 9: in the tensors' own dtypes,
// no fp64 copies) where both are CPU tensors laid out alike (the program's output and its wider
// rerun, as a rule) and every pair is finite; NaN otherwise.
double hostNormwiseRel(const at::Tensor& x, const at::Tensor& y) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (!x.device().is_cpu() || !y.device().is_cpu() || x.layout() != at::kStrided ||
      y.layout() != at::kStrided || x.sizes() != y.sizes() || x.strides() != y.strides() ||
      !x.has_storage() || !y.has_storage())
    return nan;
  fumi_tensor t;
  if (!layoutOf(x, &t)) return nan;
  const fumi_compare_spec spec =
      fumi::metrics::compareSpec(0.0, 0.0, FUMI_DTYPE_UNKNOWN, 0.0, FUMI_COMPARE_NORMS);
  fumi_comparison c{};
  c.struct_size = sizeof c;
  if (g_api->compare(&t, x.data_ptr(), toFumi(x.scalar_type()), y.data_ptr(),
                     toFumi(y.scalar_type()), &spec, &c) != FUMI_OK)
    return nan;
  return c.nonfinite == 0 ? c.normwise : nan;
}

// ||a - b|| / ||b|| in f64 (0 when both are zero), computed on a's device.
double normwiseRel(const at::Tensor& a, const at::Tensor& b) {
  const double host = hostNormwiseRel(realView(a), realView(b));
  if (!std::isnan(host)) return host;
  const at::Tensor x = realView(a).to(at::kDouble), y = realView(b).to(a.device(), at::kDouble);
  const std::vector<double> norms = scalars({(x - y).norm(), y.norm()});
  const double diff = norms[0], ref = norms[1];
  return ref > 0 ? diff / ref : (diff > 0 ? INFINITY : 0.0);
}

// ---- the element-wise primitives on a device (adapter_api.h, ABI 5) -------------------------
//
// plugin.h's map, compare and scan for device tensors, as ATen ops on the tensors' own device in
// fp64: only scalars come back to the host (one copy per pass). The formulas are metrics.h's
// (its passes' structs and the work between them are shared); per element the arithmetic is the
// host's — IEEE fp64, one op per operation, so no contraction — so maxima, counts and perturbed
// inputs are the host's bits, while sums (the norms) are reduced in another order and may
// differ in their last bits.

namespace md = fumi::metrics::detail;
using fumi::metrics::Rng;

// A uint64 constant as the int64 word torch computes with (it has no uint64; int64 arithmetic
// wraps like uint64's).
int64_t word(uint64_t v) {
  int64_t w;
  std::memcpy(&w, &v, sizeof w);
  return w;
}

// x >> s of uint64 words held in int64: the arithmetic shift with the copied sign bits cleared.
at::Tensor shiftRight(const at::Tensor& x, int s) {
  return at::bitwise_and(x.__rshift__(s), word(~uint64_t{0} >> s));
}

// uint32 words held in int64 tensors: the low 32 bits of an int64 product are those of the
// uint32 product (aten's int64 multiply wraps).
at::Tensor low32(const at::Tensor& x) { return at::bitwise_and(x, int64_t{0xffffffff}); }

// counter_draw.h's noiseMix on uint32 words held in int64.
at::Tensor noiseMix(at::Tensor z) {
  z = low32(at::bitwise_xor(z, z.__rshift__(16)).mul(int64_t{fumi::metrics::kNoiseMix1}));
  z = low32(at::bitwise_xor(z, z.__rshift__(15)).mul(int64_t{fumi::metrics::kNoiseMix2}));
  return at::bitwise_xor(z, z.__rshift__(16));
}

// Draws first + j of perturb's noise stream `seed` (Rng::uniformSymAt) for each element of a
// tensor of `shape` on `device`, j = sum_d i_d * order[d] (its position in FUMI_ORDER_STORAGE).
at::Tensor noise(c10::IntArrayRef shape, const int64_t* order, uint64_t seed, uint64_t first,
                 c10::Device device) {
  const auto words = at::TensorOptions().dtype(at::kLong);
  // The positions along every dimension, i * order[d], in one host vector: one copy to the
  // device (a pageable copy waits for the device's queue), where views of it broadcast.
  int64_t total = 0;
  for (const int64_t n : shape) total += n;
  at::Tensor steps = at::empty({total}, words);
  int64_t* step = steps.data_ptr<int64_t>();
  for (size_t d = 0; d < shape.size(); ++d)
    for (int64_t i = 0; i < shape[d]; ++i) *step++ = i * order[d];
  const at::Tensor on_device = steps.to(device);
  at::Tensor j = at::zeros(shape, words.device(device));
  int64_t offset = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    std::vector<int64_t> along(shape.size(), 1);
    along[d] = shape[d];
    j = j + on_device.narrow(0, offset, shape[d]).view(along);
    offset += shape[d];
  }
  // noiseDraw(noiseBase(seed, i), low half of i) for i = first + j.
  const at::Tensor i = j + word(first);
  const int64_t key = fumi::metrics::noiseBase(seed, 0);
  at::Tensor z = low32(low32(i).mul(int64_t{fumi::metrics::kNoiseStep})
                           .add(shiftRight(i, 32).mul(int64_t{fumi::metrics::kNoiseHigh}))
                           .add(key));
  z = noiseMix(z);
  // As int32: the words from 2^31 up are negative.
  z = z.sub(z.__rshift__(31).mul(int64_t{1} << 32));
  return z.to(at::kDouble).mul(0x1.0p-31);
}

fumi_status deviceMap(const at::Tensor& src, at::Tensor dst, const int64_t* order,
                      const fumi_map_spec& spec, uint64_t* changed) {
  // A destination with broadcast dimensions (the host's last write wins): left to the host.
  if (at::has_internal_overlap(dst) == at::MemOverlap::Yes) return FUMI_UNSUPPORTED;
  const at::Tensor x = src.to(at::kDouble);
  at::Tensor y;
  switch (spec.kind) {
    case FUMI_MAP_COPY: y = x; break;
    case FUMI_MAP_ABS: y = x.abs(); break;
    case FUMI_MAP_PERTURB: {
      // x + x * (shift * u), zeros kept as they are (their sign too), and Inf and NaN.
      const at::Tensor u = noise(x.sizes(), order, spec.seed, spec.first, x.device());
      y = at::where(at::bitwise_and(x != 0, at::isfinite(x)), x + x * (u * spec.shift), x);
      break;
    }
    default: return FUMI_UNSUPPORTED;
  }
  dst.copy_(y);
  if (changed)  // stored values whose fp64 bits are not the source's
    *changed = static_cast<uint64_t>(
        scalars({total(dst.to(at::kDouble).view(at::kLong) != x.view(at::kLong))})[0]);
  return FUMI_OK;
}

// The largest ULP error of a against b over the finite pairs (metrics.h, comparePass2's ulp).
at::Tensor worstUlp(const at::Tensor& a, const at::Tensor& b, const at::Tensor& finite,
                    const md::CompareScales& k, const at::Tensor& zero) {
  const at::Tensor raw = at::bitwise_and(b.view(at::kLong).__rshift__(52), 0x7ff) - 1023;
  const at::Tensor e = raw.clamp_min(k.emin) - k.p;
  const at::Tensor tiny = e < -1022;  // a subnormal unit: both sides scaled by 2^64
  const at::Tensor ulp =
      (at::where(tiny, e + 64, e) + 1023).mul(int64_t{1} << 52).view(at::kDouble);
  const at::Tensor du = (a - b).abs();
  return at::where(finite, at::where(tiny, du * 0x1.0p64, du) / ulp, zero).max();
}

fumi_status deviceCompare(const at::Tensor& ya, const at::Tensor& yb,
                          const fumi_compare_spec& spec, fumi_comparison* out) {
  const at::Tensor a = ya.to(at::kDouble), b = yb.to(a.device(), at::kDouble);
  const at::Tensor zero = at::zeros({}, a.options());
  const at::Tensor finite = at::bitwise_and(at::isfinite(a), at::isfinite(b));
  // Non-finite pairs read as zeros: every term and maximum then leaves them out, as the
  // host's masks do.
  const at::Tensor az = at::where(finite, a, zero), bz = at::where(finite, b, zero);
  const double n = static_cast<double>(a.numel());
  const bool underflow = spec.underflow_below > 0;
  const double below = spec.underflow_below;
  const std::vector<double> v = scalars(
      {total(finite), total(a.view(at::kLong) != b.view(at::kLong)),
       (az * 0.5 + bz * 0.5).abs().max(), az.abs().max(), bz.abs().max(), (az - bz).abs().max(),
       underflow ? total(at::bitwise_and(at::bitwise_and(b != 0, b.abs() < below), a.abs() < below))
                 : zero});
  md::ComparePass1 p1;
  p1.nonfinite = static_cast<size_t>(n - v[0]);
  p1.mismatches = static_cast<size_t>(v[1]);
  p1.max_half_sum = v[2];
  p1.max_y = v[3];
  p1.max_ref = v[4];
  p1.max_diff = v[5];
  // The second pass, for the fields the spec asks for (the others are NaN, as the host's).
  const md::CompareScales k = md::compareScales(p1, spec);
  md::ComparePass2 p2;
  if (k.any()) {
    const at::Tensor as = az * k.f, bs = bz * k.f;
    const at::Tensor diff = (as - bs).abs();
    std::vector<at::Tensor> parts(7, zero);
    if (k.ratio) {
      const at::Tensor sum = (as + bs).abs(), r = diff / sum;
      const at::Tensor ok_sum = at::bitwise_and(finite, sum > 0.0);
      parts[0] = at::where(at::bitwise_and(ok_sum, sum > k.ratio_threshold), r, zero).max();
      parts[1] = at::where(ok_sum, r, zero).max();
    }
    if (k.norms) {
      const at::Tensor d = az * k.s_diff - bz * k.s_diff, rr = bz * k.s_ref, yy = az * k.s_y;
      parts[2] = total(d * d);
      parts[3] = total(rr * rr);
      parts[4] = total(yy * yy);
    }
    if (k.rel) {
      const at::Tensor m = bs.abs();
      const at::Tensor kept =
          at::bitwise_and(at::bitwise_and(finite, m > k.rel_threshold), m > 0.0);
      parts[5] = at::where(kept, diff / m, zero).max();
    }
    if (k.ulp) parts[6] = worstUlp(az, bz, finite, k, zero);
    const std::vector<double> w = scalars(parts);
    p2 = md::ComparePass2{w[0], w[1], w[2], w[3], w[4], w[5], w[6]};
  }
  *out = md::compareResult(p1, p2, k);
  if (underflow) out->underflow = static_cast<uint64_t>(v[6]);
  return FUMI_OK;
}

fumi_status deviceScan(const at::Tensor& t, fumi_scan* out) {
  const at::Tensor x = t.to(at::kDouble);
  const at::Tensor finite = at::isfinite(x);
  const at::Tensor xz = at::where(finite, x, at::zeros({}, x.options()));
  const std::vector<double> v =
      scalars({total(at::isnan(x)), total(finite), xz.abs().max(), total(xz * xz)});
  fumi_scan s{};
  s.struct_size = sizeof s;
  s.nan = static_cast<uint64_t>(v[0]);
  s.inf = static_cast<uint64_t>(static_cast<double>(x.numel()) - v[1] - v[0]);
  s.max_abs = v[2];
  if (md::squaresInRange(s.max_abs)) {
    s.norm = std::sqrt(v[3]);
  } else {  // squares beyond fp64's range: summed scaled by a power of two (metrics.h)
    const int e = md::scaleExponent(s.max_abs);
    const at::Tensor q = xz * md::pow2(-e);
    s.norm = std::ldexp(std::sqrt(scalars({total(q * q)})[0]), e);
  }
  *out = s;
  return FUMI_OK;
}

// fumi_adapter_call.contract (ABI 6) on x, a view of device memory: x in fp64 read as
// outer x len x inner around `dim`, each vector multiplied in along `dim` and summed away —
// element-wise products and a reduction, not the device's GEMM, so that a wrong GEMM kernel
// cannot hide in the check of its own output — and the results copied to the host in one piece.
fumi_status deviceContract(const at::Tensor& x, int32_t dim, int32_t count, const double* vectors,
                           double* out) {
  if (dim < 0 || dim >= x.dim() || count < 1) return FUMI_UNSUPPORTED;
  const int64_t len = x.size(dim);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  if (outer * len * inner == 0) return FUMI_UNSUPPORTED;  // nothing to move: left to the host
  const at::Tensor x3 = x.to(at::kDouble).reshape({outer, len, inner});
  const at::Tensor v =
      at::from_blob(const_cast<double*>(vectors), {count, len},
                    at::TensorOptions().dtype(at::kDouble))
          .to(x.device());
  std::vector<at::Tensor> parts;
  for (int32_t s = 0; s < count; ++s)
    parts.push_back((x3 * v.select(0, s).view({1, len, 1})).sum({1}, /*keepdim=*/true));
  at::from_blob(out, {outer, count, inner}, at::TensorOptions().dtype(at::kDouble))
      .copy_(at::cat(parts, 1));
  return FUMI_OK;
}

// fumi_adapter_call.convolve (ABI 6): the device operand (a view of device memory) and the host
// one copied to its device, the convolution in fp64 there (fp64 is never autocast), the result
// copied to c.out.
fumi_status deviceConvolve(const at::Tensor& device_operand, const fumi_device_conv& c) {
  const int64_t sp = c.spatial;
  if (sp < 1 || sp > 3 || c.host.ndim != sp + 2 || c.out_ndim != sp + 2 ||
      device_operand.dim() != sp + 2)
    return FUMI_UNSUPPORTED;
  const at::Tensor a = device_operand.to(at::kDouble);
  const at::Tensor b = at::from_blob(c.host.data, c10::IntArrayRef(c.host.shape, c.host.ndim),
                                     at::TensorOptions().dtype(at::kDouble))
                           .to(a.device());
  const std::vector<int64_t> stride(c.stride, c.stride + sp), pad(c.padding, c.padding + sp),
      dilation(c.dilation, c.dilation + sp), shape(c.out_shape, c.out_shape + c.out_ndim);
  std::vector<int64_t> output_padding(static_cast<size_t>(sp), 0);
  at::Tensor r;
  switch (c.direction) {
    case FUMI_CONV_FORWARD:
      r = at::convolution(a, b, c10::nullopt, stride, pad, dilation, /*transposed=*/false,
                          output_padding, /*groups=*/1);
      break;
    case FUMI_CONV_BACKWARD_DATA:
      // The transposed convolution, with the output padding that gives dx its extent.
      for (int64_t d = 0; d < sp; ++d) {
        const int64_t extent = (a.size(d + 2) - 1) * stride[d] - 2 * pad[d] +
                               dilation[d] * (b.size(d + 2) - 1) + 1;
        output_padding[d] = shape[d + 2] - extent;
        if (output_padding[d] < 0 || output_padding[d] >= std::max(stride[d], dilation[d]))
          return FUMI_UNSUPPORTED;
      }
      r = at::convolution(a, b, c10::nullopt, stride, pad, dilation, /*transposed=*/true,
                          output_padding, /*groups=*/1);
      break;
    case FUMI_CONV_BACKWARD_FILTER: {
      const at::Tensor filter = at::zeros(shape, a.options());  // its extent only
      r = std::get<1>(at::convolution_backward(b, a, filter, c10::nullopt, stride, pad, dilation,
                                               /*transposed=*/false, output_padding,
                                               /*groups=*/1, {false, true, false}));
      break;
    }
    default: return FUMI_UNSUPPORTED;
  }
  if (r.sizes() != c10::IntArrayRef(shape)) return FUMI_UNSUPPORTED;
  at::from_blob(c.out, shape, at::TensorOptions().dtype(at::kDouble)).copy_(r);
  return FUMI_OK;
}

// Whether an op may write argument `a`: its schema says so (Tensor(a!): in-place, out=), or it is
// one of the batch-norm family's running statistics, which native_batch_norm and its relatives
// update in place without an annotation.
bool writtenArgument(const c10::Argument& a) {
  if (a.alias_info() && a.alias_info()->isWrite()) return true;
  return a.name() == "running_mean" || a.name() == "running_var";
}

// Whether `t` lives in memory shared between processes (share_memory_(), tensors received
// through torch.multiprocessing: Hogwild training shares its weights so), which another
// process may write while an op reads it: storage of ATen's map allocators (the
// file_descriptor strategy) or of libshm's (file_system).
bool sharedStorage(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage() || !t.device().is_cpu()) return false;
  const at::DataPtr& p = t.storage().data_ptr();
  // Most tensors come from the CPU allocator: one comparison of their deleter.
  static const c10::DeleterFnPtr plain = [] {
    const at::DataPtr probe = c10::GetCPUAllocator()->allocate(1);
    return probe.get_deleter();
  }();
  const c10::DeleterFnPtr deleter = p.get_deleter();
  if (deleter == plain) return false;
  if (at::MapAllocator::fromDataPtr(p) || at::RefcountedMapAllocator::fromDataPtr(p)) return true;
  // Other owners (numpy arrays, from_blob): which library the deleter is in, remembered for the
  // last few seen (dladdr costs about a microsecond).
  FUMI_LOCAL_TLS std::pair<c10::DeleterFnPtr, bool> seen[4] = {};
  FUMI_LOCAL_TLS size_t next = 0;
  for (const auto& [d, shm] : seen)
    if (d == deleter) return shm;
  Dl_info info{};
  const bool shm = deleter && dladdr(reinterpret_cast<void*>(deleter), &info) && info.dli_fname &&
                   std::strstr(info.dli_fname, "libshm") != nullptr;
  seen[next++ % 4] = {deleter, shm};
  return shm;
}

// Whether t lies in one of `memory` (the same storage, whatever the view).
bool liesIn(const std::vector<c10::Storage>& memory, const at::Tensor& t) {
  if (memory.empty() || !t.has_storage()) return false;
  for (const c10::Storage& s : memory)
    if (s.is_alias_of(t.storage())) return true;
  return false;
}

// The memory of the arguments an op may write (writtenArgument): an input over it reads, in a
// rerun, what the op wrote (mul(x, y, out=x); x.narrow(...).mul_(2) dispatched as
// mul.out(self, 2, out=self)), so it is copied before the op runs like them.
class WrittenMemory {
 public:
  template <class Inputs>
  WrittenMemory(const c10::OperatorHandle& op, const Inputs& inputs) {
    const auto& args = op.schema().arguments();
    for (size_t i = 0; i < inputs.size() && i < args.size(); ++i)
      if (writtenArgument(args[i]))
        forEachTensor(inputs[i], [&](const at::Tensor& t, int) {
          if (t.has_storage()) storages_.push_back(t.storage());
        });
  }
  bool covers(const at::Tensor& t) const { return liesIn(storages_, t); }

 private:
  std::vector<c10::Storage> storages_;
};

// Whether a call draws dropout masks inside an op its schema does not tag as random (the RNNs'
// dropout between layers: lstm, gru, rnn_tanh, rnn_relu): a float argument `dropout` or
// `dropout_p` above 0, with `train` (where the op has one) true and `num_layers` (where it has
// one) above 1. Its wider rerun draws other masks: highprec saw 0.1 on a healthy 2-layer LSTM
// (pytorch/examples' word_language_model).
template <class Inputs>
bool drawsDropout(const c10::OperatorHandle& op, const Inputs& inputs) {
  const auto& args = op.schema().arguments();
  bool dropout = false, train = true, layers = true;
  for (size_t i = 0; i < args.size() && i < inputs.size(); ++i) {
    const std::string& name = args[i].name();
    const c10::IValue& v = inputs[i];
    if ((name == "dropout" || name == "dropout_p") && v.isDouble()) dropout = v.toDouble() > 0;
    if (name == "train" && v.isBool()) train = v.toBool();
    if (name == "num_layers" && v.isInt()) layers = v.toInt() > 1;
  }
  return dropout && train && layers;
}

// The names of the statistics a normalisation saves for its backward (its returns are unnamed),
// as the checks know them (plugin_host.h savedMean: judged against the terms they average);
// empty for any other output.
std::string savedStatistic(const std::string& op, size_t output) {
  static const std::set<std::string> kNorms = {"aten::native_layer_norm",
                                               "aten::native_group_norm",
                                               "aten::native_batch_norm"};
  if (output == 0 || output > 2 || kNorms.count(op) == 0) return std::string();
  return output == 1 ? "save_mean" : op == "aten::native_batch_norm" ? "save_invstd" : "save_rstd";
}

// Outputs that the inputs do not determine: a singular or eigenvector is defined up to its
// sign (a phase, complex) and, within a repeated value, up to a rotation of the subspace, so a
// wider or perturbed rerun may return another with no error at all (batch 9: an f64 rerun of a
// healthy linalg_svd flipped 2 of 20 vector pairs, and highprec read 0.63). The values
// (singular values, eigenvalues: sorted, so unique) are compared; the vectors are not listed.
bool ambiguousOutput(const std::string& op, const std::string& ret) {
  static const std::set<std::string> kOps = {"aten::linalg_svd", "aten::_linalg_svd",
                                             "aten::svd",        "aten::linalg_eigh",
                                             "aten::_linalg_eigh", "aten::symeig"};
  return (ret == "U" || ret == "V" || ret == "Vh" || ret == "eigenvectors") && kOps.count(op) > 0;
}

// Outputs that are an op's workspace for its backward, not results, with parts the op never
// writes: _ctc_loss's log_alpha (output 1), the alpha lattice, log 0 = -inf off the paths and
// uninitialised memory beyond each sequence's input and target lengths (an every-call rule read
// highprec 1.6e35 and reported an Inf "origin" on a healthy CRNN; batch 16). Neither listed for
// the checks nor scanned by a NaN search; the loss, output 0, is.
bool workspaceOutput(std::string_view op, size_t index) {
  return index == 1 && (op == "aten::_ctc_loss" || op == "aten::_cudnn_ctc_loss");
}

// Why a rerun of the op measures no precision, or nullptr. Ops that round their result to a
// grid jump where an input crosses a step (floor division, remainders, histograms, fake
// quantization: a wider rerun puts a quotient of 63.9999983 below 64 where the f32 call rounded
// it up, a one-ulp perturbation moves an element across a bin edge), so highprec and perturb
// measured where the rounding falls (batch 7: histc, div with rounding_mode floor, QAT's fake
// quantizers). Quantized kernels (int8 weights packed for fbgemm, dynamic quantization of their
// input) have no wider form, and their input quantization jumps likewise.
template <class Inputs>
const c10::IValue* argumentNamed(const c10::OperatorHandle& op, const Inputs& inputs,
                                 const char* name) {
  const auto& args = op.schema().arguments();
  for (size_t i = 0; i < args.size() && i < inputs.size(); ++i)
    if (args[i].name() == name) return &inputs[i];
  return nullptr;
}

template <class Inputs>
const char* noPrecisionToMeasure(const c10::OperatorHandle& op, const Inputs& inputs) {
  static const std::set<std::string> kRounding = {
      "aten::round", "aten::floor", "aten::ceil", "aten::trunc", "aten::fix", "aten::frac",
      "aten::sign", "aten::sgn", "aten::floor_divide", "aten::remainder", "aten::fmod",
      "aten::histc", "aten::histogram", "aten::bucketize", "aten::searchsorted"};
  std::string name = op.schema().name();
  if (!name.empty() && name.back() == '_') name.pop_back();  // the in-place form
  bool rounds = kRounding.count(name) > 0 || name.find("fake_quant") != std::string::npos ||
                name.rfind("aten::quantize_per_", 0) == 0;
  if (const c10::IValue* mode = argumentNamed(op, inputs, "rounding_mode"))
    rounds = rounds || mode->isString();  // div
  if (rounds)
    return "it rounds its result to a grid (a rerun measures where the rounding falls, not "
           "precision)";
  // index_put_ without accumulate (x[idx] = v) writes values where the indices say: nothing
  // rounds, and where an index repeats, which value stays is the kernel's order.
  if (name == "aten::index_put" || name == "aten::_index_put_impl")
    if (const c10::IValue* a = argumentNamed(op, inputs, "accumulate");
        a && a->isBool() && !a->toBool())
      return "it writes values where its indices say (accumulate=False: nothing rounds, and at "
             "a repeated index a rerun may keep another value)";
  // grid_sample's nearest mode picks a pixel by rounding its coordinates: a grid sampling at
  // half the input's resolution lands on ties (2j + 0.5), where a rerun picks the other pixel.
  if (name.rfind("aten::grid_sampler", 0) == 0)
    if (const c10::IValue* m = argumentNamed(op, inputs, "interpolation_mode");
        m && m->isInt() && m->toInt() == 1)
      return "it picks the nearest pixel by rounding its coordinates (a rerun measures where "
             "the rounding falls, not precision)";
  // A general matrix's eigenvalues come out of LAPACK's geev in no defined order, and its
  // eigenvectors up to a phase: a wider rerun may list them otherwise.
  static const std::set<std::string> kUnordered = {"aten::linalg_eig", "aten::linalg_eigvals",
                                                   "aten::eig", "aten::_linalg_eig"};
  if (kUnordered.count(name) > 0)
    return "its eigenvalues come in no defined order (a wider rerun may list them otherwise)";
  // LU and LDL factorizations pivot by comparing magnitudes: at a tie or near one (integer
  // matrices have them) a perturbed or wider rerun picks another row and the factors jump
  // (perturb read 370 on a healthy lu_factor). A solve through them is continuous and checked
  // as the op the program called (linalg_solve, lu_solve).
  static const std::set<std::string> kPivoting = {
      "aten::linalg_lu_factor", "aten::linalg_lu_factor_ex", "aten::linalg_lu", "aten::lu",
      "aten::_lu_with_info",    "aten::linalg_ldl_factor",   "aten::linalg_ldl_factor_ex"};
  if (kPivoting.count(name) > 0)
    return "it pivots by comparing magnitudes (a rerun measures where the pivots fall, not "
           "precision)";
  if (name.rfind("quantized::", 0) == 0 || name.rfind("aten::quantized_", 0) == 0 ||
      name.rfind("aten::fbgemm_", 0) == 0 || name.find("_byte_rowwise") != std::string::npos ||
      name.find("_4bit_rowwise") != std::string::npos)
    return "a quantized kernel (int8 weights, quantized inputs: no wider rerun)";
  return nullptr;
}

// The bytes of the tensors a check copies before the op runs (writtenArgument, WrittenMemory,
// sharedStorage).
template <class Inputs>
uint64_t copiedBytes(const c10::OperatorHandle& op, const Inputs& inputs,
                     const WrittenMemory& written_memory) {
  const auto& args = op.schema().arguments();
  uint64_t bytes = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const bool written = i < args.size() && writtenArgument(args[i]);
    forEachTensor(inputs[i], [&](const at::Tensor& t, int) {
      if (written || written_memory.covers(t) || sharedStorage(t)) bytes += t.nbytes();
    });
  }
  return bytes;
}

class CapturedCall final : public at::ObserverContext {
 public:
  CapturedCall(void* site, void* token, uint64_t index, const c10::OperatorHandle& op,
               const Facts& facts, fumi_dtype autocast, bool view)
      : site_(site), token_(token), index_(index), op_(op), facts_(facts), autocast_(autocast),
        view_(view) {}

  // Before the op runs: copies of the tensor inputs the op may write (writtenArgument), of
  // those over their memory (WrittenMemory) and of those in shared memory (sharedStorage:
  // another process may write them); the others are kept as they are. The check runs when the
  // op returns, on this thread, before the program can touch them again, and reruns never
  // write them.
  template <class Inputs>
  void capture(const Inputs& inputs, const WrittenMemory& written_memory) {
    QuietScope quiet;
    const auto& args = op_.schema().arguments();
    inputs_.reserve(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const bool written = i < args.size() && writtenArgument(args[i]);
      inputs_.push_back(mapTensors(inputs[i], [&](const at::Tensor& t, int) {
        input_keys_.push_back(TensorKey::of(t));
        if (view_ && t.has_storage()) input_memory_.push_back(t.storage());
        const bool shared = !written && sharedStorage(t);
        written_.push_back(written);
        if (!written && !shared && !written_memory.covers(t)) return t;
        at::Tensor copy = t.clone(at::MemoryFormat::Preserve);
        if (shared) shared_.emplace_back(t, copy);
        return copy;
      }));
    }
  }

  // After the op ran: describe it to libfumi and let the policy's checks run. An input in
  // shared memory that no longer equals its copy was written by another process while the op
  // ran: what the op read is unknown, and the call is not checked.
  void check(const std::vector<c10::IValue>& outputs) {
    const double op_seconds = secondsSince(op_started);
    // An op that may return views (to, reshape, contiguous copy when they must) and did: it
    // computed no values, and its outputs are memory a kernel may not have written yet (fft
    // views its fresh results as real before filling them: nan_inf saw stale bytes there).
    if (view_ && returnedViews(outputs)) {
      g_api->skip(site_, token_, "it returned views of its inputs (it computed no values)");
      return;
    }
    for (const auto& [program, copy] : shared_) {
      QuietScope quiet;
      if (!at::equal(program, copy)) {
        g_api->skip(site_, token_,
                    "an input in shared memory changed while the op ran (another process "
                    "writes it, as Hogwild training does)");
        return;
      }
    }
    {
      QuietScope quiet;
      staleCasts();
      describe(outputs);
    }
    // Complex tensors are described as real views: the host's readings of the op's shapes
    // (a GEMM's reduction length, checksum's projections) do not apply to them.
    if (std::find(complex_.begin(), complex_.end(), true) != complex_.end())
      args_.emplace_back("complex", "1");
    fumi_adapter_call c{};
    c.struct_size = sizeof(c);
    c.op_seconds = op_seconds;
    c.dtype = facts_.dtype;
    c.size = facts_.size;
    c.ntensors = static_cast<int32_t>(tensors_.size());
    c.tensors = tensors_.data();
    std::vector<const char*> names, values;
    for (const auto& [n, v] : args_) {
      names.push_back(n.c_str());
      values.push_back(v.c_str());
    }
    c.nargs = static_cast<int32_t>(args_.size());
    c.arg_names = names.data();
    c.arg_values = values.data();
    c.rerun = &CapturedCall::rerunThunk;
    c.self = this;
    c.reference = &CapturedCall::referenceThunk;
    c.autocast = autocast_;
    cast_by_autocast_ = castByAutocast();
    c.compute = narrowestOutput(cast_by_autocast_ ? autocast_
                                : tf32Math()      ? FUMI_DTYPE_TF32
                                                  : facts_.dtype);
    c.alloc_device = &CapturedCall::allocThunk;
    c.release_device = &CapturedCall::releaseThunk;
    c.to_host = &CapturedCall::toHostThunk;
    c.to_device = &CapturedCall::toDeviceThunk;
    c.map = &CapturedCall::mapThunk;
    c.compare = &CapturedCall::compareThunk;
    c.scan = &CapturedCall::scanThunk;
    c.contract = &CapturedCall::contractThunk;
    c.convolve = &CapturedCall::convolveThunk;
    c.cuda_stream = &CapturedCall::cudaStreamThunk;
    c.write_aux = &CapturedCall::writeAuxThunk;
    const Clock::time_point checks_started = Clock::now();
    const bool violated = g_api->check(site_, token_, index_, &c) != 0;
    in_checks_s_ = secondsSince(checks_started);
    if (wide_.empty()) return;  // no wider rerun: nothing to attribute or to offer
    QuietScope quiet;
    CpuRngGuard rng;
    if (cast_by_autocast_) precisionCost();
    if (violated) attribute();
    offerOutputs(outputs);
  }

  // Autocast's own call of this op inside it (the op on its cast inputs, which runs outside the
  // region): the tensors the kernel got, in walk order, for staleCasts().
  template <class Inputs>
  void autocastCalled(const Inputs& inner) {
    autocast_gave_.clear();
    for (const c10::IValue& v : inner)
      forEachTensor(v, [&](const at::Tensor& t, int) { autocast_gave_.push_back(t); });
  }

  // fumi's own time on this call outside libfumi's checks: before_s, and `after` (check() of
  // this class, whole) less the time libfumi's checks took in it.
  void account(double after) const {
    g_api->account(site_, before_s + std::max(0.0, after - in_checks_s_));
  }

  double before_s = 0;  // seconds from the sampling decision to the op: the copies it took
  Clock::time_point op_started;  // after those copies: the op's own time runs from here

 private:
  // `compute`, or the dtype of an output narrower than it: a result stored in a narrower type
  // than the call's first floating input holds its rounding (smooth_l1_loss_backward of an f32
  // gradient and a bf16 self gives a bf16 grad_input: judged at f32, its rounding alone was a
  // violation of f32's tolerance).
  fumi_dtype narrowestOutput(fumi_dtype compute) const {
    const fumi::DtypeInfo* narrowest = fumi::dtypeInfo(compute);
    for (const fumi_tensor& t : tensors_) {
      const fumi::DtypeInfo* d = fumi::dtypeInfo(t.dtype);
      if (t.role == FUMI_ROLE_OUTPUT && d && narrowest &&
          d->mantissa_bits < narrowest->mantissa_bits) {
        narrowest = d;
        compute = t.dtype;
      }
    }
    return compute;
  }

  // Whether every output tensor lies in the memory of an input (the program's: inputs_ holds
  // copies of some, DataLoader batches in shared memory among them).
  bool returnedViews(const std::vector<c10::IValue>& outputs) const {
    bool all = true, any = false;
    for (const c10::IValue& v : outputs)
      forEachTensor(v, [&](const at::Tensor& t, int) {
        any = true;
        all = all && liesIn(input_memory_, t);
      });
    return any && all;
  }

  void describe(const std::vector<c10::IValue>& outputs) {
    args_.emplace_back("device", facts_.device);
    const c10::FunctionSchema& schema = op_.schema();
    const auto& args = schema.arguments();
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const std::string name = i < args.size() ? args[i].name() : "arg" + std::to_string(i);
      // Scalars and lists of numbers (stride, padding, output_mask) as text; lists that may
      // hold tensors are walked below.
      const bool numbers = inputs_[i].isIntList() || inputs_[i].isDoubleList() ||
                           inputs_[i].isBoolList();
      // An optional tensor passed as an undefined one (nll_loss_backward's weight) is None.
      const bool none = inputs_[i].isTensor() && !inputs_[i].toTensor().defined();
      if (numbers || none ||
          (!inputs_[i].isTensor() && !inputs_[i].isTensorList() && !inputs_[i].isList())) {
        std::ostringstream text;
        if (none)
          text << "None";
        else
          text << inputs_[i];
        // "device" names where the call ran; an argument of that name (to(), factories: where
        // the result goes) is "device_arg".
        args_.emplace_back(name == "device" ? "device_arg" : name, text.str());
        continue;
      }
      forEachTensor(inputs_[i], [&](const at::Tensor& t, int k) {
        const int slot = add(t, label(name, k), FUMI_ROLE_INPUT);
        input_slots_.push_back(slot);
        if (slot < 0 && readable(t) && auxDtypeName(t.scalar_type()))
          aux_.emplace_back(label(name, k), t);  // for a dump: writeAuxThunk
      });
    }
    const auto& rets = schema.returns();
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::string name = i < rets.size() ? rets[i].name() : std::string();
      if (name.empty()) name = savedStatistic(schema.name(), i);
      if (name.empty()) name = outputs.size() == 1 ? "out" : "out" + std::to_string(i);
      const bool unlisted = ambiguousOutput(schema.name(), name) ||
                            workspaceOutput(schema.name(), i);
      forEachTensor(outputs[i], [&](const at::Tensor& t, int k) {
        output_slots_.push_back(unlisted ? -1 : add(t, label(name, k), FUMI_ROLE_OUTPUT));
      });
    }
  }

  static std::string label(const std::string& name, int k) {
    return k < 0 ? name : name + "[" + std::to_string(k) + "]";
  }

  // Lists `t` for fumi when it is describable; returns its index there, or -1. A device tensor
  // is described where it lives (FUMI_MEMORY_DEVICE, its own memory): checks reach it through
  // the device primitives below, and nothing is copied to the host unless one asks.
  int add(const at::Tensor& original, std::string name, fumi_role role) {
    if (!describable(original)) return -1;
    const at::Tensor t = realView(original);
    fumi_tensor d;
    if (!layoutOf(t, &d)) return -1;
    const bool device = !t.device().is_cpu();
    if (device && !t.has_storage()) return -1;
    if (device && !device_) device_ = t.device();
    complex_.push_back(complexChecked(original.scalar_type()));
    held_.push_back(t);
    names_.push_back(std::move(name));
    d.name = names_.back().c_str();
    d.dtype = toFumi(t.scalar_type());
    d.memory = device ? FUMI_MEMORY_DEVICE : FUMI_MEMORY_HOST;
    d.role = role;
    d.data = t.data_ptr();
    tensors_.push_back(d);
    return static_cast<int>(tensors_.size()) - 1;
  }

  // A tensor over fumi scratch laid out like tensor k: a rerun buffer for `precision`, which
  // holds `precision`, or at the call's own dtype tensor k's own dtype (plugin.h). A real view,
  // as libfumi sees tensor k.
  at::Tensor scratchTensor(int k, void* buffer, fumi_dtype precision) const {
    const fumi_tensor& d = tensors_[static_cast<size_t>(k)];
    return bufferView(k, buffer, precision == facts_.dtype ? d.dtype : precision);
  }

  // A tensor over `buffer` laid out like tensor k, holding `dtype`, in k's memory: host memory
  // (fumi's scratch arena), or device memory of this call (scratch or a described tensor).
  at::Tensor bufferView(int k, const void* buffer, fumi_dtype dtype) const {
    const fumi_tensor& d = tensors_[static_cast<size_t>(k)];
    const c10::IntArrayRef sizes(d.shape, d.ndim), strides(d.strides, d.ndim);
    if (d.memory == FUMI_MEMORY_HOST)
      return at::from_blob(const_cast<void*>(buffer), sizes, strides,
                           at::TensorOptions().dtype(fromFumi(dtype)));
    c10::Storage storage;
    size_t offset = 0;
    if (!locate(buffer, &storage, &offset))
      throw std::runtime_error("a buffer that is no device memory of the call");
    return viewAt(storage, offset, fromFumi(dtype), sizes, strides);
  }

  // The device storage holding `p` and p's byte offset in it: fumi's scratch, or the memory of
  // a described tensor. False for any other address.
  bool locate(const void* p, c10::Storage* storage, size_t* offset) const {
    const auto at = reinterpret_cast<uintptr_t>(p);
    const auto holds = [&](const at::Tensor& t) {
      if (!t.defined() || t.device().is_cpu() || !t.has_storage()) return false;
      const auto base = reinterpret_cast<uintptr_t>(t.storage().data());
      if (at < base || at >= base + t.storage().nbytes()) return false;
      *storage = t.storage();
      *offset = at - base;
      return true;
    };
    for (const at::Tensor& t : scratch_)
      if (holds(t)) return true;
    for (const at::Tensor& t : held_)
      if (holds(t)) return true;
    return false;
  }

  // ---- device memory and the element-wise primitives (fumi_adapter_call, ABI 5) ----------

  static CapturedCall& callOf(void* self) { return *static_cast<CapturedCall*>(self); }

  // Scratch on the call's device, kept until libfumi releases it (or the check ends). Whole
  // words, so that a view of any dtype fits.
  static void* allocThunk(void* self, size_t bytes) {
    CapturedCall& c = callOf(self);
    if (!c.device_) return nullptr;
    try {
      QuietScope quiet;
      const auto words = static_cast<int64_t>((bytes + 7) / 8 * 8);
      c.scratch_.push_back(
          at::empty({words}, at::TensorOptions().dtype(at::kByte).device(*c.device_)));
      return c.scratch_.back().data_ptr();
    } catch (const std::exception&) {
      return nullptr;  // out of device memory: the check is skipped (no scratch)
    }
  }

  static void releaseThunk(void* self, void* p) {
    auto& scratch = callOf(self).scratch_;
    for (auto it = scratch.begin(); it != scratch.end(); ++it)
      if (it->data_ptr() == p) {
        scratch.erase(it);
        return;
      }
  }

  // Copies between host memory and this call's device memory.
  static int copyThunk(void* self, void* host, const void* device, size_t bytes, bool to_host) {
    if (bytes == 0) return 1;
    try {
      QuietScope quiet;
      c10::Storage storage;
      size_t offset = 0;
      if (!callOf(self).locate(device, &storage, &offset) || offset + bytes > storage.nbytes())
        return 0;
      const auto n = static_cast<int64_t>(bytes);
      const at::Tensor on_device = viewAt(storage, offset, at::kByte, {n}, {1});
      const at::Tensor on_host = at::from_blob(host, {n}, at::TensorOptions().dtype(at::kByte));
      if (to_host) on_host.copy_(on_device);
      else on_device.copy_(on_host);
      return 1;
    } catch (const std::exception&) {
      return 0;
    }
  }
  static int toHostThunk(void* self, void* dst, const void* src, size_t bytes) {
    return copyThunk(self, dst, src, bytes, /*to_host=*/true);
  }
  static int toDeviceThunk(void* self, void* dst, const void* src, size_t bytes) {
    return copyThunk(self, const_cast<void*>(src), dst, bytes, /*to_host=*/false);
  }

  // Runs one primitive on tensor k's device; FUMI_UNSUPPORTED (libfumi then stages it through
  // the host) for an empty tensor or when the device lacks an op the primitive needs.
  template <class F>
  fumi_status onDevice(int32_t k, const char* what, F&& f) {
    const fumi_tensor& d = tensors_[static_cast<size_t>(k)];
    int64_t n = 1;
    for (int32_t i = 0; i < d.ndim; ++i) n *= d.shape[i];
    if (d.memory == FUMI_MEMORY_HOST || n == 0) return FUMI_UNSUPPORTED;
    return guarded(what, std::forward<F>(f));
  }
  template <class F>
  fumi_status guarded(const char* what, F&& f) {
    try {
      QuietScope quiet;
      return f();
    } catch (const std::exception& e) {
      noteFailureOnce(op_.schema().name().c_str(), std::string("device ") + what, e.what(),
                       "it is staged through the host");
      return FUMI_UNSUPPORTED;
    }
  }

  static fumi_status mapThunk(void* self, int32_t k, const int64_t* order, const void* src,
                              fumi_dtype src_dtype, void* dst, fumi_dtype dst_dtype,
                              const fumi_map_spec* spec, uint64_t* changed) {
    CapturedCall& c = callOf(self);
    return c.onDevice(k, "map", [&] {
      return deviceMap(c.bufferView(k, src, src_dtype), c.bufferView(k, dst, dst_dtype), order,
                       *spec, changed);
    });
  }

  static fumi_status compareThunk(void* self, int32_t k, const void* a, fumi_dtype a_dtype,
                                  const void* b, fumi_dtype b_dtype,
                                  const fumi_compare_spec* spec, fumi_comparison* out) {
    CapturedCall& c = callOf(self);
    return c.onDevice(k, "compare", [&] {
      return deviceCompare(c.bufferView(k, a, a_dtype), c.bufferView(k, b, b_dtype), *spec, out);
    });
  }

  static fumi_status scanThunk(void* self, int32_t k, const void* buffer, fumi_dtype dtype,
                               fumi_scan* out) {
    CapturedCall& c = callOf(self);
    return c.onDevice(k, "scan", [&] { return deviceScan(c.bufferView(k, buffer, dtype), out); });
  }

  // The integer and boolean inputs, for a dump: aux<k>.bin in `dir`, contiguous host copies.
  static const char* writeAuxThunk(void* self, const char* dir) {
    CapturedCall& c = callOf(self);
    if (c.aux_.empty() || !dir) return nullptr;
    try {
      QuietScope quiet;
      std::ostringstream json;
      json << "[";
      for (size_t k = 0; k < c.aux_.size(); ++k) {
        const at::Tensor t = c.aux_[k].second.contiguous().cpu();
        const std::string file = "aux" + std::to_string(k) + ".bin";
        FILE* f = std::fopen((std::string(dir) + "/" + file).c_str(), "wb");
        if (!f) return nullptr;
        const size_t bytes = t.nbytes();
        const bool written = bytes == 0 || std::fwrite(t.data_ptr(), 1, bytes, f) == bytes;
        if (std::fclose(f) != 0 || !written) return nullptr;
        json << (k ? ", " : "") << "{\"name\": \"" << c.aux_[k].first << "\", \"dtype\": \""
             << auxDtypeName(t.scalar_type()) << "\", \"file\": \"" << file << "\", \"shape\": [";
        for (int64_t d = 0; d < t.dim(); ++d) json << (d ? ", " : "") << t.size(d);
        json << "], \"strides\": [";
        for (int64_t d = 0; d < t.dim(); ++d) json << (d ? ", " : "") << t.stride(d);
        json << "]}";
      }
      json << "]";
      c.aux_json_ = json.str();
      return c.aux_json_.c_str();
    } catch (const std::exception& e) {
      noteFailureOnce(c.op_.schema().name().c_str(), "writing its integer tensors for a dump",
                      e.what(), "its dumps lack them");
      return nullptr;
    }
  }

  // fumi_adapter_call.cuda_stream (ABI 10): the current stream of the call's CUDA device, where
  // that device is the thread's current one (libfumi's kernels run in the current context).
  static int cudaStreamThunk(void* self, void** stream) {
    const CapturedCall& c = callOf(self);
    if (!c.device_ || !c.device_->is_cuda()) return 0;
    try {
      return fumi::torch_compat::currentCudaStream(*c.device_, stream) ? 1 : 0;
    } catch (const std::exception&) {
      return 0;
    }
  }

  // A tensor over a view of this call's device memory (contract's and convolve's), or an
  // undefined one where the view is not inside one of its storages or not a plain strided one.
  at::Tensor deviceView(const fumi_tensor& view) const {
    c10::Storage storage;
    size_t offset = 0;
    if (view.ndim < 1 || view.ndim > FUMI_MAX_DIMS || !locate(view.data, &storage, &offset))
      return at::Tensor();
    int64_t last = 0;  // the view's last element, which must lie in the storage too
    for (int32_t d = 0; d < view.ndim; ++d) {
      if (view.strides[d] < 0 || view.shape[d] < 1) return at::Tensor();
      last += (view.shape[d] - 1) * view.strides[d];
    }
    const auto item = static_cast<int64_t>(c10::elementSize(fromFumi(view.dtype)));
    if (static_cast<int64_t>(offset) + (last + 1) * item > static_cast<int64_t>(storage.nbytes()))
      return at::Tensor();
    return viewAt(storage, offset, fromFumi(view.dtype), c10::IntArrayRef(view.shape, view.ndim),
                  c10::IntArrayRef(view.strides, view.ndim));
  }

  static fumi_status contractThunk(void* self, const fumi_tensor* view, int32_t dim,
                                   int32_t count, const double* vectors, double* out) {
    CapturedCall& c = callOf(self);
    return c.guarded("contract", [&] {
      const at::Tensor x = view ? c.deviceView(*view) : at::Tensor();
      return x.defined() ? deviceContract(x, dim, count, vectors, out) : FUMI_UNSUPPORTED;
    });
  }

  static fumi_status convolveThunk(void* self, const fumi_device_conv* conv) {
    CapturedCall& c = callOf(self);
    return c.guarded("convolve", [&] {
      const at::Tensor x = conv ? c.deviceView(conv->device) : at::Tensor();
      return x.defined() ? deviceConvolve(x, *conv) : FUMI_UNSUPPORTED;
    });
  }

  // fn(slot, k, result) for each output tensor of a rerun's `stack` that fumi lists (k: its
  // index in tensors_), after checking that the outputs match the call's in number and shape.
  template <class F>
  void forEachOutput(const torch::jit::Stack& stack, F&& fn) const {
    std::vector<at::Tensor> results;
    for (const c10::IValue& v : stack)
      forEachTensor(v, [&](const at::Tensor& r, int) { results.push_back(r); });
    bool match = results.size() == output_slots_.size();
    for (size_t s = 0; match && s < results.size(); ++s) {
      const int k = output_slots_[s];
      const fumi_tensor* d = k < 0 ? nullptr : &tensors_[static_cast<size_t>(k)];
      match = !d || realView(results[s]).sizes() == c10::IntArrayRef(d->shape, d->ndim);
    }
    if (!match) throw std::runtime_error("the rerun's outputs differ in number or shape");
    for (size_t s = 0; s < results.size(); ++s)
      if (output_slots_[s] >= 0) fn(s, output_slots_[s], results[s]);
  }

  // The op on the widened arguments of `stack`: fumi's own fp64 convolution where it applies
  // (wide_conv.h: aten's is one small GEMM per image), the op's kernel otherwise.
  void callWide(torch::jit::Stack& stack) const {
    if (!fumi::wide_conv::run(op_, stack) && !fumi::wide_ops::run(op_, stack))
      op_.callBoxed(&stack);
  }

  // A dtype argument (sum's and mean's `dtype=`) naming the call's own dtype is widened with
  // the tensors: left as it was, it made the "wider" rerun compute in the call's precision (a
  // reference equal to the call), or fail against a widened out= tensor (sum.IntList_out, as
  // functorch's batching rules call it). One naming another dtype stays: a cast (to(), which
  // makes that dtype by definition) or a reduction asked to compute in it.
  void widenDtypeArguments(torch::jit::Stack& stack, c10::ScalarType wide) const {
    const auto& args = op_.schema().arguments();
    for (size_t i = 0; i < stack.size() && i < args.size(); ++i) {
      c10::TypePtr type = args[i].real_type();  // type() says int: how the stack holds it
      if (const auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
      if (type->kind() != c10::TypeKind::ScalarTypeType || !stack[i].isInt()) continue;
      if (toFumi(static_cast<c10::ScalarType>(stack[i].toInt())) == facts_.dtype)
        stack[i] = static_cast<int64_t>(wide);
    }
  }

  static fumi_status rerunThunk(void* self, fumi_dtype precision, void* const* buffers) {
    return static_cast<CapturedCall*>(self)->rerun(precision, buffers);
  }

  fumi_status rerun(fumi_dtype precision, void* const* buffers) {
    const c10::ScalarType wide = fromFumi(precision);
    const bool own_dtype = precision == facts_.dtype;
    try {
      QuietScope quiet;
      CpuRngGuard rng;
      // A wider rerun must stay wide: autocast would cast its f32 inputs back down (own-dtype
      // reruns keep autocast, which is how the call ran).
      c10::optional<c10::impl::ExcludeDispatchKeyGuard> no_autocast;
      if (!own_dtype) no_autocast.emplace(c10::autocast_dispatch_keyset);
      // Inputs the op may write (in-place, out=, batch-norm running statistics) get fresh
      // copies every time: the captured ones must stay as they were. The others go in as they
      // are (the program's tensor, or the plugin's buffer) when device and dtype fit.
      size_t slot = 0;
      std::vector<c10::Storage> from_buffers;  // inputs passed as the plugin's buffers
      torch::jit::Stack stack;
      stack.reserve(inputs_.size());
      for (const c10::IValue& v : inputs_)
        stack.push_back(mapTensors(v, [&](const at::Tensor& t, int) {
          const bool written = written_[slot];
          const int k = input_slots_[slot++];
          if (k < 0) return written ? t.clone(at::MemoryFormat::Preserve) : t;
          // At the call's own precision each tensor keeps its dtype; a wider rerun widens all.
          const c10::ScalarType dtype = own_dtype ? t.scalar_type() : widened(t, wide);
          at::Tensor src = buffers[k] ? complexOf(scratchTensor(k, buffers[k], precision),
                                                  complex_[static_cast<size_t>(k)])
                                      : t;
          if (!own_dtype) src = asAutocastGave(t, src);
          else if (buffers[k] && slot == 1) src = keepTiedRows(t, src);
          if (!written && src.device() == t.device() && src.scalar_type() == dtype) {
            if (buffers[k] && src.has_storage()) from_buffers.push_back(src.storage());
            return src;
          }
          return src.to(t.device(), dtype, /*non_blocking=*/false, /*copy=*/true);
        }));
      if (own_dtype) {
        op_.callBoxed(&stack);
      } else {
        widenDtypeArguments(stack, wide);
        callWide(stack);
      }
      // The first wider rerun is the reference (highprec's); later ones run on other inputs
      // (highprec's rerun on |x| to size the terms).
      const bool keep = !own_dtype && wide_.empty();
      if (keep) {
        wide_.assign(output_slots_.size(), at::Tensor());
        wide_dtype_ = wide;
      }
      forEachOutput(stack, [&](size_t s, int k, const at::Tensor& r) {
        scratchTensor(k, buffers[k], precision).copy_(realView(r));
        if (!keep) return;
        // Kept past the check: a result over a plugin's buffer (an op that returned its input,
        // to() with nothing to convert) would outlive the scratch it lies in.
        wide_[s] = liesIn(from_buffers, r) ? r.clone() : r;
      });
      return FUMI_OK;
    } catch (const std::exception& e) {
      noteFailureOnce(op_.schema().name().c_str(),
                       std::string("rerun in ") + c10::toString(wide), e.what());
      return FUMI_UNSUPPORTED;
    }
  }

  // softmax (log_softmax) of a row whose finite values are all equal is exact whatever they
  // are: a row masked entirely with a finite constant (-1e9, -finfo.max: a padding query, every
  // key masked). A rerun on perturbed inputs broke the tie (a last-bit step of -1e9 is 64) and
  // its row went from uniform to one-hot: perturb 1.0 on healthy jobs (batch 20, reformer's
  // autopadded queries, under the default policy). Such rows keep their values in a rerun on
  // `perturbed` inputs: values computed alike carry the same rounding, and computed values tie
  // across a whole row only so. Other ops and rows are perturbed as they are.
  at::Tensor keepTiedRows(const at::Tensor& self, const at::Tensor& perturbed) {
    if (!tied_known_) {
      tied_known_ = true;
      const std::string& name = op_.schema().name();
      if ((name != "aten::_softmax" && name != "aten::_log_softmax") || inputs_.size() < 2 ||
          !inputs_[1].isInt() || self.dim() == 0 || self.numel() == 0)
        return perturbed;
      const int64_t dim = c10::maybe_wrap_dim(inputs_[1].toInt(), self.dim());
      const at::Tensor other = self.isfinite().logical_not();
      const double inf = std::numeric_limits<double>::infinity();
      const at::Tensor tied = self.masked_fill(other, inf).amin(dim, /*keepdim=*/true) ==
                              self.masked_fill(other, -inf).amax(dim, /*keepdim=*/true);
      if (tied.any().item<bool>()) tied_rows_ = tied;
    }
    return tied_rows_.defined() ? at::where(tied_rows_, self.to(perturbed.scalar_type()), perturbed)
                                : perturbed;
  }

  // An f32 call on a CUDA device that torch lets compute in TF32 (f32 convolutions by default):
  // judged at that precision, as a cuBLAS call in TF32 math mode is.
  bool tf32Math() const {
    return facts_.dtype == FUMI_DTYPE_F32 && device_ && device_->is_cuda() &&
           fumi::torch_compat::allowsTF32(tf32Family(op_.operator_name().name));
  }

  // Autocast casts a leaf tensor (a parameter) once per region and keeps the cast for the
  // region's later calls. A parameter updated in place inside the region (the optimizer's step
  // under the same autocast as the forward, as RL agents' whole update often is) keeps its old
  // cast: later calls run on values one or more steps old (batch 16: TD3's actor update read
  // the critic's previous weights). fumi had rerun such a call from the current values and
  // blamed the kernel for the difference (7% on TD3). An input whose cast the kernel got
  // (autocastCalled) is not the cast of its value now is reported, `autocast.stale_cast`
  // (kind error: the program computed with other values than it holds; the figure: how far the
  // cast the kernel got is from the current one, normwise), and the checks then start from
  // the values the kernel got.
  void staleCasts() {
    if (autocast_ == FUMI_DTYPE_UNKNOWN || autocast_gave_.empty()) return;
    const at::ScalarType low = fromFumi(autocast_);
    const auto& args = op_.schema().arguments();
    std::string stale;
    int count = 0;
    double worst = 0;
    size_t w = 0;
    for (size_t i = 0; i < inputs_.size(); ++i)
      inputs_[i] = mapTensors(inputs_[i], [&](const at::Tensor& t, int) {
        const size_t me = w++;
        if (me >= autocast_gave_.size()) return t;
        const at::Tensor& got = autocast_gave_[me];
        if (!got.defined() || got.scalar_type() != low || t.scalar_type() != at::kFloat ||
            got.device() != t.device() || !got.sizes().equals(t.sizes()))
          return t;
        const at::Tensor now = t.to(low);
        // Bit for bit (16-bit dtypes): a NaN weight is no stale one.
        if (at::equal(now.view(at::kShort), got.view(at::kShort))) return t;
        worst = std::max(worst, normwiseRel(got, now));
        ++count;
        stale += std::string(stale.empty() ? "" : ", ") + "`" +
                 (i < args.size() ? args[i].name() : std::to_string(i)) + "`";
        return got.to(at::kFloat);
      });
    autocast_gave_.clear();
    if (stale.empty()) return;
    const std::string detail =
        "the op ran on autocast's cached cast of " + stale + ", made before " +
        (count > 1 ? "they" : "it") +
        " changed in place inside the same autocast region (an optimizer step under autocast "
        "does this): it computed with older values than the program holds";
    g_api->report(site_, index_, "autocast.stale_cast", FUMI_KIND_ERROR, worst, 0.0,
                  detail.c_str());
  }

  // Whether autocast cast this call down, so that it computed in the autocast dtype: it casts
  // f32 inputs of the ops on its list down, and such a call's outputs come out in that dtype
  // (recorded at the autocast level, the call's inputs are the values before the cast). An op
  // autocast has no kernel for runs on its inputs as they are, in the region or not (batch 14:
  // batch norm's backward, bf16 gradients and f32 statistics, was judged against a reference
  // on statistics rounded to bf16, and raised highprec under the default policy).
  bool castByAutocast() const {
    if (autocast_ == FUMI_DTYPE_UNKNOWN) return false;
    if (!fumi::torch_compat::autocastKernel(op_, device_ ? device_->type() : c10::DeviceType::CPU))
      return false;
    bool wide_in = false, cast_out = false;
    for (const fumi_tensor& t : tensors_) {
      wide_in = wide_in || (t.role == FUMI_ROLE_INPUT && (t.dtype == FUMI_DTYPE_F32 ||
                                                           t.dtype == FUMI_DTYPE_F64));
      cast_out = cast_out || (t.role == FUMI_ROLE_OUTPUT && t.dtype == autocast_);
    }
    return wide_in && cast_out;
  }

  // `value` (input `original`, or what a check made of it) as autocast handed it to the kernel:
  // rounded to the autocast dtype where autocast casts it (a call it cast down: every floating
  // tensor but fp64 ones). Wider reruns and the reference start from these values, so that
  // their verdicts judge the kernel; what the cast itself cost is precisionCost()'s.
  at::Tensor asAutocastGave(const at::Tensor& original, const at::Tensor& value) const {
    if (!cast_by_autocast_ || !at::isFloatingType(original.scalar_type()) ||
        original.scalar_type() == at::kDouble)
      return value;
    return value.to(fromFumi(autocast_)).to(value.scalar_type());
  }

  // The call's op in the wider precision of the first wider rerun, on its inputs as `source`
  // (t, walk index) gives them (exclusive of autocast, which would cast them down): the
  // outputs by slot.
  template <class F>
  std::vector<at::Tensor> wideOn(F&& source) const {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    size_t w = 0;
    torch::jit::Stack stack;
    for (const c10::IValue& v : inputs_)
      stack.push_back(mapTensors(v, [&](const at::Tensor& t, int) {
        const at::Tensor src = source(t, w++);
        if (!checkedValues(t)) return t.clone(at::MemoryFormat::Preserve);
        return src.to(t.device(), widened(t, wide_dtype_), /*non_blocking=*/false, /*copy=*/true);
      }));
    callWide(stack);
    std::vector<at::Tensor> outs(output_slots_.size());
    forEachOutput(stack, [&](size_t s, int, const at::Tensor& r) { outs[s] = r; });
    return outs;
  }

  // What autocast cost this call: its outputs against the same op on the values before the
  // cast, in the wider precision (the checks' reruns start from the cast values instead).
  // Data for the summary's per-op table, a violation only above autocast.bound.
  void precisionCost() {
    try {
      const std::vector<at::Tensor> exact = wideOn([](const at::Tensor& t, size_t) { return t; });
      double cost = 0;
      for (size_t s = 0; s < exact.size(); ++s)
        if (exact[s].defined() && output_slots_[s] >= 0)
          cost = std::max(cost, normwiseRel(held_[static_cast<size_t>(output_slots_[s])], exact[s]));
      g_api->record_metric(site_, index_, "autocast.normwise", FUMI_KIND_PRECISION_COST, cost,
                           g_api->autocast_bound());
    } catch (const std::exception& e) {
      noteFailureOnce(op_.schema().name().c_str(), "rerun on the values before autocast's cast",
                       e.what());
    }
  }

  // This call violated an error check: how much of its error came with its inputs?
  void attribute() {
    try {
      std::vector<Produced> fed(input_keys_.size());
      std::vector<bool> has(input_keys_.size(), false);
      bool any = false;
      for (size_t w = 0; w < input_keys_.size(); ++w) {
        has[w] = producers().find(input_keys_[w], &fed[w]);
        any = any || has[w];
      }
      if (!any) return;
      // The inputs the producers fed: the values their outputs had when offered (equal keys:
      // the same version), so each producer's error is measured here, only when asked for.
      std::vector<at::Tensor> fed_in;
      for (const c10::IValue& v : inputs_)
        forEachTensor(v, [&](const at::Tensor& t, int) { fed_in.push_back(t); });
      const std::vector<at::Tensor> fed_out = wideOn([&](const at::Tensor& t, size_t me) {
        return asAutocastGave(t, has[me] ? fed[me].reference : t);
      });
      double generated = 0, amplified = 0;
      for (size_t s = 0; s < fed_out.size(); ++s) {
        if (!wide_[s].defined() || !fed_out[s].defined() || output_slots_[s] < 0) continue;
        const at::Tensor& got = held_[static_cast<size_t>(output_slots_[s])];
        generated = std::max(generated, normwiseRel(got, wide_[s]));
        amplified = std::max(amplified, normwiseRel(wide_[s], fed_out[s]));
      }
      std::ostringstream fields;
      fields.precision(6);
      fields << "{\"generated\":" << generated << ",\"amplified\":" << amplified
             << ",\"precision\":\"" << fumi::dtypeName(toFumi(wide_dtype_)) << "\",\"inputs\":[";
      bool first = true;
      for (size_t i = 0; i < fed.size(); ++i) {
        if (!has[i]) continue;
        fields << (first ? "" : ",") << "{\"producer\":{\"op\":\"" << fed[i].op
               << "\",\"call_index\":" << fed[i].index
               << "},\"input_error\":"
               << (i < fed_in.size() ? normwiseRel(fed_in[i], fed[i].reference) : NAN)
               << "}";
        first = false;
      }
      fields << "]}";
      g_api->attribution(site_, index_, fields.str().c_str());
    } catch (const std::exception& e) {
      noteFailureOnce(op_.schema().name().c_str(), "attribution rerun", e.what());
    }
  }

  // Outputs with a wider reference, for the attribution of later calls in this step (not inside
  // an op writing an argument: a proxy it deletes outright is held by nothing, insideWriter).
  void offerOutputs(const std::vector<c10::IValue>& outputs) {
    if (insideWriter()) return;
    size_t s = 0;
    const std::string op = displayName(op_.schema().operator_name());
    for (const c10::IValue& v : outputs)
      forEachTensor(v, [&](const at::Tensor& t, int) {
        const size_t me = s++;
        if (me >= wide_.size() || !wide_[me].defined() || output_slots_[me] < 0) return;
        Produced p;
        p.key = TensorKey::of(t);
        p.op = op;
        p.index = index_;
        p.reference = wide_[me];
        p.output = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>(
            t.getIntrusivePtr());
        producers().add(std::move(p));
      });
  }

  static fumi_status referenceThunk(void* self, int32_t index, double* out) {
    return static_cast<CapturedCall*>(self)->reference(index, out);
  }

  // Output tensor k as the CPU kernel computes it in f64 on CPU copies of the inputs: for an
  // op that ran on a device, an implementation independent of the device's (for a CPU op it
  // is the kernel that ran: none). Computed for every output on the first request.
  fumi_status reference(int32_t k, double* out) {
    if (facts_.device == "cpu") return FUMI_UNSUPPORTED;
    if (!reference_tried_) {
      reference_tried_ = true;
      computeReference();
    }
    for (size_t s = 0; s < output_slots_.size() && s < reference_.size(); ++s) {
      if (output_slots_[s] != k || !reference_[s].defined()) continue;
      const at::Tensor& r = reference_[s];
      std::memcpy(out, r.data_ptr<double>(), static_cast<size_t>(r.numel()) * sizeof(double));
      return FUMI_OK;
    }
    return FUMI_UNSUPPORTED;
  }

  void computeReference() {
    try {
      QuietScope quiet;
      CpuRngGuard rng;
      torch::jit::Stack stack;
      stack.reserve(inputs_.size());
      for (const c10::IValue& v : inputs_) {
        if (v.isDevice()) {  // an op creating tensors on its device: on the CPU here
          stack.emplace_back(c10::Device(c10::kCPU));
          continue;
        }
        stack.push_back(mapTensors(v, [&](const at::Tensor& t, int) {
          return asAutocastGave(t, t).to(
              at::kCPU, checkedValues(t) ? widened(t, at::kDouble) : t.scalar_type(),
              /*non_blocking=*/false, /*copy=*/true);
        }));
      }
      op_.callBoxed(&stack);
      std::vector<at::Tensor> refs(output_slots_.size());
      forEachOutput(stack, [&](size_t s, int, const at::Tensor& r) {
        refs[s] = realView(r.to(at::kCPU, widened(r, at::kDouble))).contiguous();
      });
      reference_ = std::move(refs);
    } catch (const std::exception& e) {
      noteFailureOnce(op_.schema().name().c_str(), "CPU reference", e.what());
    }
  }

  double in_checks_s_ = 0;  // wall seconds of libfumi's check() of this call
  void* site_;
  void* token_;
  uint64_t index_;
  c10::OperatorHandle op_;
  Facts facts_;
  fumi_dtype autocast_;  // the autocast region's dtype (UNKNOWN: none)
  bool view_;            // the op may return views of its inputs (returnsView)
  std::vector<c10::Storage> input_memory_;  // of the program's inputs, when view_
  bool cast_by_autocast_ = false;  // castByAutocast(), set when the check starts
  std::vector<at::Tensor> autocast_gave_;  // autocastCalled()
  std::vector<c10::IValue> inputs_;   // the inputs; copies taken before the op ran of those
                                      // it may write
  std::vector<bool> written_;         // per tensor of inputs_, in walk order: the op writes it
  std::vector<std::pair<at::Tensor, at::Tensor>> shared_;  // inputs in shared memory, copies
  std::vector<int> input_slots_;      // per tensor of inputs_, in walk order: index in tensors_
  std::vector<int> output_slots_;     // per tensor of the outputs, likewise
  std::vector<fumi_tensor> tensors_;  // what libfumi sees
  std::deque<std::string> names_;     // storage of tensors_[i].name
  std::vector<at::Tensor> held_;      // tensors_[i] itself: keeps its data alive
  std::vector<bool> complex_;         // per tensors_[i]: the real view of a complex tensor
  c10::optional<c10::Device> device_;  // where the device tensors live (none: a CPU call)
  std::vector<at::Tensor> scratch_;    // device scratch libfumi holds (allocThunk)
  std::vector<std::pair<std::string, std::string>> args_;
  // Integer and boolean inputs (labelled), which tensors_ leaves out; and their description
  // for the dump that wrote them (writeAuxThunk).
  std::vector<std::pair<std::string, at::Tensor>> aux_;
  std::string aux_json_;
  std::vector<TensorKey> input_keys_;  // per tensor of inputs_ (walk order): the originals'
  std::vector<at::Tensor> wide_;        // per output slot: the first wider rerun's result
  bool tied_known_ = false;             // keepTiedRows: tied_rows_ worked out
  at::Tensor tied_rows_;                // its rows to keep (undefined: none)
  c10::ScalarType wide_dtype_ = c10::ScalarType::Double;
  bool reference_tried_ = false;
  std::vector<at::Tensor> reference_;  // per output slot: the CPU f64 result (contiguous)
};

// Ops whose outputs are not a function of their inputs' values: fresh uninitialised memory
// (empty, empty_like, ...) or storage manipulation. No schema tag says so; this list does.
bool undefinedOutput(const std::string& op) {
  static const char* const kOps[] = {"aten::empty_like", "aten::empty_strided", "aten::new_empty",
                                     "aten::new_empty_strided", "aten::resize_",
                                     "aten::resize_as_", "aten::set_", "aten::empty"};
  for (const char* k : kOps)
    if (op == k) return true;
  return false;
}

// ---- NaN/Inf origin search (interposer/nan_search.h) -----------------------------------------

struct NonFinite {
  uint64_t nan = 0;
  uint64_t inf = 0;
  bool any() const { return nan + inf > 0; }
  void add(const NonFinite& o) {
    nan += o.nan;
    inf += o.inf;
  }
};

// The calls this thread reported as NaN/Inf origins (the latest kKnownOrigins): a look-back
// reaching one through results that are gone is that origin's spread, not values made from
// finite inputs (two overflowing exps' gradients, 0 * inf, reported at the first `mul`; a later
// sentinel's look-back named the sum that reduced it to a parameter's gradient a second origin).
struct KnownOrigin {
  void* site = nullptr;
  uint64_t index = 0;
  NonFinite out;
};
FUMI_LOCAL_TLS std::vector<KnownOrigin> t_known_origins;
constexpr size_t kKnownOrigins = 64;

const KnownOrigin* knownOrigin(const void* site, uint64_t index) {
  for (const KnownOrigin& k : t_known_origins)
    if (k.site == site && k.index == index) return &k;
  return nullptr;
}

// Keeps call `index` of op `site`, reported as an origin holding `out`, known.
void noteOrigin(void* site, uint64_t index, const NonFinite& out) {
  if (t_known_origins.size() >= kKnownOrigins) t_known_origins.erase(t_known_origins.begin());
  t_known_origins.push_back(KnownOrigin{site, index, out});
}

// The sequence numbers of the autograd nodes this thread runs (their BACKWARD_FUNCTION ranges,
// a second observer's, without inputs), innermost last: a kept op of the backward pass notes its
// node's (forwardOf), an origin found at its call tells its node's forward call.
FUMI_LOCAL_TLS std::vector<int64_t> t_node_seqs;
int64_t currentNode() { return t_node_seqs.empty() ? -1 : t_node_seqs.back(); }
// For each of them, whether it is a sqrt's gradient (SqrtBackward0: its division's divisor is
// read for an exact 0 as the division begins, InputNote::noteZeroDivisor).
FUMI_LOCAL_TLS std::vector<uint8_t> t_node_sqrt;

// The forward call that made autograd node `node`, where the thread still keeps it (below).
bool forwardCallOf(int64_t node, fumi_past_call& out);

// Reports call `index` of op `site` as a NaN/Inf origin (nan_origin) and keeps it known; one of
// the backward pass running in autograd node `node` with the forward call that made the node,
// where kept (its line is the one the program wrote: its own Python frames are backward()'s).
void reportOriginCall(void* site, uint64_t index, const char* detail, const NonFinite& out,
                      int64_t node = currentNode()) {
  noteOrigin(site, index, out);
  fumi_past_call forward{};
  if (forwardCallOf(node, forward))
    g_api->nan_origin_forward(site, index, detail, out.nan, out.inf, &forward);
  else
    g_api->nan_origin(site, index, detail, out.nan, out.inf);
}

// Whether any of n values of a floating type, read as unsigned integers U, has every exponent bit
// (kExponent) set: NaN or Inf. Blocks of a fixed count, which the compiler vectorises: 21 GB/s
// where the count below converts each value and reads 3.5 (an optimizer's state scanned every
// eighth step cost an Adam job 30% until the common case, nothing to count, took this path).
template <class U, U kExponent>
bool anyNonFinite(const void* data, int64_t n) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  constexpr int64_t kBlock = 64;
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    U hit = 0;
    for (int64_t j = 0; j < kBlock; ++j) {
      U u;
      std::memcpy(&u, bytes + (i + j) * static_cast<int64_t>(sizeof(U)), sizeof(U));
      hit |= static_cast<U>((u & kExponent) == kExponent);
    }
    if (hit) return true;
  }
  for (; i < n; ++i) {
    U u;
    std::memcpy(&u, bytes + i * static_cast<int64_t>(sizeof(U)), sizeof(U));
    if ((u & kExponent) == kExponent) return true;
  }
  return false;
}

// Their NaN and Inf counts: every exponent bit set, with a mantissa (NaN) or without (Inf). One
// pass of integer operations the compiler vectorises: tensors full of NaN, read by every op of
// a job whose weights had gone NaN, cost a text classifier 10% of its time when each value was
// converted and classified (batch 27).
template <class U, U kExponent, U kMantissa>
NonFinite countNonFinite(const void* data, int64_t n) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint64_t nonfinite = 0, nan = 0;
  for (int64_t i = 0; i < n; ++i) {
    U u;
    std::memcpy(&u, bytes + i * static_cast<int64_t>(sizeof(U)), sizeof(U));
    const uint64_t bad = (u & kExponent) == kExponent ? 1 : 0;
    nonfinite += bad;
    nan += bad & ((u & kMantissa) != 0 ? 1 : 0);
  }
  return {nan, nonfinite - nan};
}

// The two above for each floating type: U, its exponent and its mantissa bits.
template <class T>
struct FloatBits;
template <>
struct FloatBits<float> {
  using U = uint32_t;
  static constexpr U kExponent = 0x7f800000u, kMantissa = 0x007fffffu;
};
template <>
struct FloatBits<double> {
  using U = uint64_t;
  static constexpr U kExponent = 0x7ff0000000000000ull, kMantissa = 0x000fffffffffffffull;
};
template <>
struct FloatBits<c10::Half> {
  using U = uint16_t;
  static constexpr U kExponent = 0x7c00u, kMantissa = 0x03ffu;
};
template <>
struct FloatBits<c10::BFloat16> {
  using U = uint16_t;
  static constexpr U kExponent = 0x7f80u, kMantissa = 0x007fu;
};

template <class T>
bool anyNonFinite(const T* p, int64_t n) {
  using B = FloatBits<T>;
  return anyNonFinite<typename B::U, B::kExponent>(p, n);
}

template <class T>
NonFinite scanRaw(const T* p, int64_t n) {
  using B = FloatBits<T>;
  if (!anyNonFinite(p, n)) return {};
  return countNonFinite<typename B::U, B::kExponent, B::kMantissa>(p, n);
}

// A sparse tensor's stored values, a strided tensor (undefined where they cannot be had).
at::Tensor sparseValues(const at::Tensor& t) {
  try {
    QuietScope quiet;
    at::Tensor values = t.is_sparse() ? t._values() : t.values();
    return values.layout() == c10::kStrided ? values : at::Tensor();
  } catch (...) {
    return {};
  }
}

// NaN and Inf counts of a floating tensor (a complex one's parts: a NaN carried by an FFT's
// spectrum had gone unseen, and the inverse FFT was named its origin, batch 20): a plain loop
// over contiguous CPU memory, ATen reductions elsewhere (device memory, strided views). A
// complex tensor's memory is read as it is: conjugate and negative views hold the same NaN and
// Inf (resolving them is an op, which the sentinel would observe and scan in turn).
NonFinite scanTensor(const at::Tensor& t) {
  if (!t.defined() || t.numel() == 0) return {};
  // A sparse tensor's stored values (an EmbeddingBag's sparse gradient: a NaN in it was taken
  // for finite, and clip_grad_norm_'s norm of it named the origin, batch 27).
  if (t.is_sparse() || t.is_sparse_csr()) return scanTensor(sparseValues(t));
  if (!readable(t)) return {};
  if (complexChecked(t.scalar_type()))
    return scanTensor(reinterpretParts(t, c10::toRealValueType(t.scalar_type()), /*add=*/true));
  if (!at::isFloatingType(t.scalar_type())) return {};
  if (t.device().is_cpu() && t.is_contiguous()) {
    switch (t.scalar_type()) {
      case c10::ScalarType::Float: return scanRaw(t.data_ptr<float>(), t.numel());
      case c10::ScalarType::Double: return scanRaw(t.data_ptr<double>(), t.numel());
      case c10::ScalarType::Half: return scanRaw(t.data_ptr<c10::Half>(), t.numel());
      case c10::ScalarType::BFloat16: return scanRaw(t.data_ptr<c10::BFloat16>(), t.numel());
      default: break;
    }
  }
  QuietScope quiet;
  return {static_cast<uint64_t>(at::isnan(t).sum().item<int64_t>()),
          static_cast<uint64_t>(at::isinf(t).sum().item<int64_t>())};
}

// Non-finite values in a list of IValues: tensors (and lists of them), and floating scalar
// arguments (masked_fill(mask, -inf) and full(-inf) make -inf from a non-finite scalar).
template <class Values>
NonFinite scanValues(const Values& values, size_t* first_bad = nullptr) {
  NonFinite total;
  for (size_t i = 0; i < values.size(); ++i) {
    const c10::IValue& v = values[i];
    NonFinite here;
    if (v.isDouble()) {
      const double d = v.toDouble();
      here.nan = std::isnan(d) ? 1 : 0;
      here.inf = std::isinf(d) ? 1 : 0;
    } else {
      forEachTensor(v, [&](const at::Tensor& t, int) { here.add(scanTensor(t)); });
    }
    if (here.any() && first_bad && !total.any()) *first_bad = i;
    total.add(here);
  }
  return total;
}

bool g_sentinels = false;  // the policy wants NaN/Inf origins found (nan_origin.enabled)

// nan_origin.look_back (adapter_api.h nan_look_back): 0 off, 1 on, 2 auto. Keeping an op costs
// it a few tenths of a microsecond to a microsecond (the tensors' weak references, their
// versions, the ring's bookkeeping; 0.25 µs on a GRU loop, 0.3 on a loop of 8-element ops,
// about 1 µs on batch 37's VRNN, whose ops take more tensors): auto keeps them while this
// thread runs at most kLookBackRate ops a second and keeping them takes at most kKeepShare of
// its time (the rate times what keeping an op cost it over the last window, timed on one op in
// kCostEvery). Batch 23's programs ran 17 000 (a face-recognition CNN) to 220 000 (a
// segmentation network on small crops) ops a second on a 2-core VM; at the 10 000 this was
// before, none kept its ops, and one-off NaN their first step's backward or forward pass made
// went unfound (a conformer's look_back: true cost it 0–14%). With the rate alone, batch 37's
// VRNN (a GRU over 28 steps, 340 000 calls a second plain, fewer under fumi) kept its ops, at
// 9% of its time as measured here (1.61x plain against 1.28x without them); at 5%, batch 38's
// Siamese network (58 000 ops a second, 5% measured) lost its ring and a one-off 0/0.
int g_look_back = 0;
constexpr double kLookBackRate = 200000;
constexpr double kKeepShare = 0.08;
constexpr uint32_t kCostEvery = 64;

// What one part of keeping an op costs (its inputs' note as it begins, its record as it
// returns), timed on one kept op in kCostEvery, for look_back: auto only.
struct KeepCost {
  uint32_t seen = 0;  // kept ops
  double sum = 0;     // seconds timed in the window
  uint32_t timed = 0;
  double cost = 0;  // seconds an op, as last measured
  // Runs `part`, timing it where this op is the one in kCostEvery.
  template <class F>
  void run(F&& part) {
    if (g_look_back != 2 || ++seen % kCostEvery != 0) return part();
    const Clock::time_point began = Clock::now();
    part();
    sum += secondsSince(began);
    ++timed;
  }
  // The window ends: the cost over it, where it was timed.
  void close() {
    if (timed) cost = sum / timed;
    sum = 0;
    timed = 0;
  }
};

struct OpRate {
  uint32_t ops = 0;
  Clock::time_point since = Clock::now();
  double rate = 0;  // ops a second over the last window
  bool keep = true;
  KeepCost begin, end;  // keeping an op: its two parts
  double keepCost() const { return begin.cost + end.cost; }
};
FUMI_LOCAL_TLS OpRate t_rate;

// Whether to keep the op that has just returned (counted towards the rate).
bool keepingPast() {
  if (g_look_back != 2) return g_look_back == 1;
  // The rate over windows of at least 1024 ops and 0.2 s: a burst of small ops between two
  // convolutions is not the thread's rate (batch 23's DeepLabV3+ ran 220 000 ops a second over
  // 1024-op windows, 30 000 over its run, and keeping them cost it nothing measurable).
  constexpr uint32_t kWindow = 1024;
  constexpr double kWindowSeconds = 0.2;
  if (++t_rate.ops % kWindow == 0) {
    const Clock::time_point now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - t_rate.since).count();
    if (seconds >= kWindowSeconds) {
      t_rate.rate = t_rate.ops / seconds;
      t_rate.begin.close();
      t_rate.end.close();
      t_rate.keep = t_rate.rate <= kLookBackRate && t_rate.rate * t_rate.keepCost() <= kKeepShare;
      t_rate.ops = 0;
      t_rate.since = now;
    }
  }
  return t_rate.keep;
}

// Whether the ops now running are being kept (what their inputs' notes need to say).
bool pastKept() { return g_look_back == 1 || (g_look_back == 2 && t_rate.keep); }

// Whether a one-element CPU tensor holds exactly 0 (read in place): of a floating dtype, or an
// integer count (SWA's n_averaged, a 0-d long tensor, divided by at its first update: batch 35).
bool isZero(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case c10::ScalarType::Long: return *static_cast<const int64_t*>(t.data_ptr()) == 0;
    case c10::ScalarType::Int: return *static_cast<const int32_t*>(t.data_ptr()) == 0;
    case c10::ScalarType::Float: return *static_cast<const float*>(t.data_ptr()) == 0.0f;
    case c10::ScalarType::Double: return *static_cast<const double*>(t.data_ptr()) == 0.0;
    case c10::ScalarType::Half:
      return static_cast<float>(*static_cast<const c10::Half*>(t.data_ptr())) == 0.0f;
    case c10::ScalarType::BFloat16:
      return static_cast<float>(*static_cast<const c10::BFloat16*>(t.data_ptr())) == 0.0f;
    default: return false;
  }
}

// A tensor as an op saw it, held weakly (its memory goes when the program drops it), with its
// version then (in-place writes bump it) and its storage (views of it share that). An input of
// one element on the CPU (a Python number wrapped for the op, a loss) is read at once: such
// tensors are mostly gone by the time anyone asks. `past`: the op is kept for looking back;
// otherwise the note holds the tensor and nothing more (version unknown).
class TensorNote {
 public:
  // kNaN: NaN, maybe Inf too; kZero: finite and exactly 0 (a divisor; of many elements: one
  // of them, holdsZero); kEmpty: no elements
  enum class Element : uint8_t { kUnread, kFinite, kNaN, kInf, kZero, kEmpty };
  TensorNote(const at::Tensor& t, bool input, bool past) : weak_(t.getIntrusivePtr()) {
    if (!past) return;
    version_ = t.is_inference() ? -1 : t._version();
    // a sparse tensor's memory is its values' (detach() and `.grad` share them)
    at::Tensor values;
    if (t.is_sparse() || t.is_sparse_csr()) values = sparseValues(t);
    const at::Tensor& memory = values.defined() ? values : t;
    storage_ = memory.has_storage() ? memory.storage().unsafeGetStorageImpl() : nullptr;
    data_ = storage_ ? memory.storage().data() : nullptr;
    if (!input && storage_) memory_ = memory.storage().getWeakStorageImpl();
    exact_ = !t.is_floating_point() && !t.is_complex();
    number_ = input && t.unsafeGetTensorImpl()->is_wrapped_number();
    if (input && !exact_ && t.is_view()) base_ = t._base().getIntrusivePtr();
    if (input && t.numel() == 1 && t.device().is_cpu() && readable(t)) {
      const NonFinite seen = scanTensor(t);
      element_ = seen.nan ? Element::kNaN
                 : seen.inf ? Element::kInf
                 : isZero(t) ? Element::kZero
                             : Element::kFinite;
    } else if (input && t.numel() == 0) {
      element_ = Element::kEmpty;
    }
  }
  Element element() const { return element_; }
  // The version counter as the op saw it (an output's: as it returned); -1 where not kept.
  int64_t version() const { return version_; }
  // A divisor of many elements read as holding an exact 0 (InputNote::noteZeroDivisor).
  void holdsZero() { element_ = Element::kZero; }
  // Integers or booleans (indices, targets, masks): no NaN or Inf, whatever became of them.
  bool exact() const { return exact_; }
  // A Python number the op got wrapped as a tensor (`x - math.inf`).
  bool number() const { return number_; }
  // The tensor while it is alive, whatever it holds now; undefined once it is gone.
  at::Tensor live() const { return at::Tensor(weak_.lock()); }
  // The tensor while it is alive and holds what the op saw (no in-place write since; an
  // inference tensor's writes are not counted: never); undefined otherwise.
  // Over the same memory too: a parameter whose `.data` was assigned since keeps its version
  // and holds other values (batch 36: Adam's update of an embedding renormalised through
  // `.data =` read as holding the renormalisation's NaN).
  at::Tensor asSeen() const {
    if (version_ < 0) return {};
    at::Tensor t = live();
    return t.defined() && t._version() == version_ &&
                   (!storage_ || t.is_sparse() || t.is_sparse_csr() || over(t))
               ? t
               : at::Tensor();
  }
  // For a view: its base, while alive and written in place by nothing since (a view shares its
  // base's version counter); undefined otherwise. What the view was of, once the view is gone
  // (`buf[ts, None]` indexes an unsqueezed view of the buffer, gone as `index` returns).
  at::Tensor unchangedBase() const {
    if (version_ < 0) return {};
    at::Tensor base(base_.lock());
    return base.defined() && base._version() == version_ ? base : at::Tensor();
  }
  // Lets go of a tensor the program has dropped, keeping what identifies its memory: a held
  // TensorImpl, empty as it is, keeps its heap chunk between the freed buffers around it (4096
  // ops' worth raised a language model's peak memory by 40–120 MB).
  void dropIfGone() {
    if (storage_ && weak_.expired()) weak_ = {};
    if (base_.expired()) base_ = {};
    if (memory_.expired()) memory_ = {};
  }
  // An output whose tensor is gone while its memory lives on in another the program holds (a
  // result assigned to a parameter's `.data`, a view of it kept): that memory is this very one,
  // not another at the same addresses (the storage object is held weakly: never reused).
  bool outlived() const { return weak_.expired() && !memory_.expired(); }
  // Whether `other` is this very tensor (a sparse one's values may be new after an in-place op).
  bool sameTensor(const TensorNote& other) const {
    return weak_._unsafe_get_target() == other.weak_._unsafe_get_target();
  }
  // Whether it is the tensor `impl` (held weakly elsewhere, so never an address reused).
  bool sameTarget(const c10::TensorImpl* impl) const { return weak_._unsafe_get_target() == impl; }
  // Whether `live`, this tensor or another, is over this memory now (a tensor whose `.data` was
  // assigned since is over other memory).
  bool over(const at::Tensor& live) const {
    return storage_ && live.has_storage() && !live.is_sparse() &&
           live.storage().unsafeGetStorageImpl() == storage_ && live.storage().data() == data_;
  }
  // What identifies its memory, for an index (sharesMemory decides).
  const void* memoryKey() const {
    return storage_ ? storage_ : static_cast<const void*>(weak_._unsafe_get_target());
  }
  // Whether `other` is this tensor or a view of the same memory. Memory is known by its storage
  // object's address and its data's: the allocator reuses a freed storage object's address, and
  // an LSTM's output, stacked where its input projection's storage object had been, read as
  // that projection returned (batch 20's LSTM); both reused at once is rarer.
  bool sharesMemory(const TensorNote& other) const {
    return storage_ ? storage_ == other.storage_ && data_ == other.data_
                    : weak_._unsafe_get_target() == other.weak_._unsafe_get_target();
  }

 private:
  c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> weak_;
  // an input view's base (unchangedBase)
  c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> base_{
      c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>()};
  // an output's storage (outlived)
  c10::weak_intrusive_ptr<c10::StorageImpl> memory_{c10::intrusive_ptr<c10::StorageImpl>()};
  int64_t version_ = -1;
  const void* storage_ = nullptr;  // an identity only: never read through
  const void* data_ = nullptr;     // likewise
  Element element_ = Element::kUnread;
  bool exact_ = false;
  bool number_ = false;
};

// Batch norm in training mode updates its running statistics in place without a word in its
// schema (torch 1.13: `Tensor? running_mean`, no `(a!)`) or its version counter, and neither its
// results nor its backward's read them there. Not inputs of what they return: a batch mean's
// overflow the kernel wrote into them read as NaN the op had got ("nan_from_inf"), and a
// look-back passed over the op that made it (batch 24, a BN-LSTM); the next step's forward
// writing NaN into them made the backward of the step before seem to have got it, and looking
// back over that step ended there (a DANN-like job with a batch-norm feature extractor). The
// index of running_mean (running_var follows it) where `inputs` say training mode, else -1.
template <class Values>
int runningStatsIndex(const char* op, const Values& inputs) {
  struct Stats {
    const char* op;
    int mean;   // running_mean's index
    int train;  // the training flag's, -1: always training
  };
  static const Stats kOps[] = {
      {"aten::native_batch_norm", 3, 5},           {"aten::batch_norm", 3, 5},
      {"aten::_batch_norm_impl_index", 3, 5},      {"aten::instance_norm", 3, 5},
      {"aten::cudnn_batch_norm", 3, 5},            {"aten::miopen_batch_norm", 3, 5},
      {"aten::_native_batch_norm_legit", 3, 5},    {"aten::native_batch_norm_backward", 3, 7},
      {"aten::batch_norm_backward", 3, 7},         {"aten::_batch_norm_impl_index_backward", 4, 8},
      {"aten::cudnn_batch_norm_backward", 3, -1},  {"aten::miopen_batch_norm_backward", 3, -1}};
  if (!op || inputs.size() < 5 || !std::strstr(op, "norm")) return -1;  // most ops, at once
  for (const Stats& s : kOps) {
    if (std::strcmp(op, s.op) != 0) continue;
    if (inputs.size() <= static_cast<size_t>(std::max(s.mean + 1, s.train))) return -1;
    if (s.train >= 0 && (!inputs[s.train].isBool() || !inputs[s.train].toBool())) return -1;
    return s.mean;
  }
  return -1;
}

// What the sentinel may need of an op's inputs once the op has returned. RecordFunction's
// inputs are valid only inside the start callback: an unboxed call's arguments are boxed into a
// temporary array for it and destroyed as soon as it returns (reading them at the end read
// freed memory: a segmentation fault, now and then, at the first NaN of a job). The tensors are
// held weakly: a strong reference would raise their use counts while the op runs, which
// autograd reads (AccumulateGrad takes a gradient over only when nothing else holds it).
class InputNote {
 public:
  InputNote() = default;
  // `op`: the op's name, for the running statistics it neither reads nor returns
  // (runningStatsIndex), left out.
  template <class Values>
  explicit InputNote(const Values& inputs, bool past = false, const char* op = nullptr)
      : recorded_(!inputs.empty()) {
    const int stats = runningStatsIndex(op, inputs);
    for (size_t i = 0; i < inputs.size(); ++i) {
      const c10::IValue& v = inputs[i];
      if (stats >= 0 && (i == static_cast<size_t>(stats) || i == static_cast<size_t>(stats) + 1)) {
        if (past)
          forEachTensor(v, [&](const at::Tensor& t, int) {
            written_.emplace_back(t, false, true);
          });
        continue;
      }
      if (i == 0) first_tensor_ = v.isTensor();
      if (v.isDouble()) {
        const double d = v.toDouble();
        nonfinite_scalar_ = nonfinite_scalar_ || !std::isfinite(d);
        nan_scalar_ = nan_scalar_ || std::isnan(d);
        scalar_above_one_ = scalar_above_one_ || std::fabs(d) > 1;
        fractional_scalar_ = fractional_scalar_ || (std::isfinite(d) && d != std::floor(d));
        negative_scalar_ = negative_scalar_ || d < 0;
      }
      forEachTensor(v, [&](const at::Tensor& t, int) { tensors_.emplace_back(t, true, past); });
    }
  }
  bool recorded() const { return recorded_; }  // the op had inputs
  bool nonfiniteScalar() const { return nonfinite_scalar_; }  // a floating scalar not finite
  bool nanScalar() const { return nan_scalar_; }              // a floating scalar NaN
  bool scalarAboveOne() const { return scalar_above_one_; }  // |a floating scalar| > 1
  bool fractionalScalar() const { return fractional_scalar_; }  // a floating scalar not whole
  bool negativeScalar() const { return negative_scalar_; }      // a floating scalar below 0
  bool firstTensor() const { return first_tensor_; }  // the first argument a tensor
  // f(tensor) for each input tensor; false when one of them is gone (the op held its last
  // reference and dropped it), whose values are then unknown.
  template <class F>
  bool forEachLive(F&& f) const {
    bool all = true;
    for (const TensorNote& note : tensors_) {
      const at::Tensor t = note.live();
      if (t.defined()) f(t);
      else all = false;
    }
    return all;
  }
  const c10::SmallVector<TensorNote, 4>& tensors() const { return tensors_; }
  // A division's divisor (its second tensor, `divisor`), contiguous f32 or f64, holding an exact
  // 0 as the division begins: noted so (dividesByZero). Read with a plain loop, no op.
  void noteZeroDivisor(const at::Tensor& divisor) {
    if (tensors_.size() < 2 || !divisor.defined() || !divisor.is_contiguous() ||
        !divisor.device().is_cpu() || !readable(divisor))
      return;
    const auto any_zero = [&divisor](auto zero) {
      const auto* v = static_cast<const decltype(zero)*>(divisor.data_ptr());
      bool found = false;
      for (int64_t i = 0, n = divisor.numel(); i < n; ++i) found |= v[i] == zero;
      return found;
    };
    if ((divisor.scalar_type() == at::kFloat && any_zero(0.0f)) ||
        (divisor.scalar_type() == at::kDouble && any_zero(0.0)))
      tensors_[1].holdsZero();
  }
  // The running statistics it writes without a version bump (for the ring: recordPast).
  std::vector<TensorNote> takeWritten() { return std::move(written_); }
  void dropGone() {
    for (TensorNote& t : tensors_) t.dropIfGone();
  }

 private:
  bool recorded_ = false, nonfinite_scalar_ = false, nan_scalar_ = false,
       scalar_above_one_ = false, fractional_scalar_ = false, negative_scalar_ = false,
       first_tensor_ = false;
  c10::SmallVector<TensorNote, 4> tensors_;  // with their versions before the op ran
  std::vector<TensorNote> written_;          // its running statistics, kept ops only
};

// ---- the observer ---------------------------------------------------------------------------

// What the observer keeps between an op's start and end, when there is anything to keep: a
// sampled call's copies, and during a NaN search what the inputs held before the op ran (an
// in-place op overwrites them).
class OpObservation final : public at::ObserverContext {
 public:
  OpObservation(void* site, uint64_t index) : site_(site), index_(index) {}
  std::unique_ptr<CapturedCall> checked;
  bool searching = false;
  NonFinite inputs_bad;
  std::string bad_input;  // name of the first non-finite input
  bool uninitialised = false;  // its outputs are fresh memory (empty_like): whatever they hold
  bool scaling = false;  // a multiplication by a one-element factor above 1 (a loss scale)

  void* site() const { return site_; }
  uint64_t index() const { return index_; }

 private:
  void* site_;
  uint64_t index_;
};

// The schema name of argument `i` of the op `fn` runs ("arg<i>" when unknown).
std::string argName(const at::RecordFunction& fn, size_t i) {
  const auto name = fn.operator_name();
  if (name)
    if (const auto op = c10::Dispatcher::singleton().findOp(*name))
      if (i < op->schema().arguments().size()) return op->schema().arguments()[i].name();
  return "arg" + std::to_string(i);
}

// Loss scaling's forward step: a multiplication of the loss by the scale (a Python float, or
// GradScaler's one-element tensor) above 1; or the scale's own cast to the loss's dtype (a
// Python float scale doubled past f32's range, 2^128, is Inf in f32: fairseq's dynamic scaler
// in a job that never overflows otherwise; batch 24 raised it).
bool scalesUp(const char* op, const InputNote& inputs) {
  const bool cast = std::strcmp(op, "aten::_to_copy") == 0 || std::strcmp(op, "aten::copy_") == 0;
  if (std::strncmp(op, "aten::mul", 9) != 0 && !cast) return false;
  // a cast: of a Python float's 0-dim double tensor only (an f64 metric's own overflow is not)
  bool scaling = !cast && inputs.scalarAboveOne();
  inputs.forEachLive([&](const at::Tensor& t) {
    if (t.numel() == 1 && t.is_floating_point() && t.device().is_cpu() && readable(t) &&
        (!cast || (t.dim() == 0 && t.scalar_type() == at::kDouble)))
      scaling = scaling || std::fabs(t.item<double>()) > 1;
  });
  return scaling;
}

// During a search, before the op runs: are its inputs finite?
void probeInputs(const at::RecordFunction& fn, OpObservation& obs) {
  obs.searching = true;
  obs.uninitialised = undefinedOutput(fumi::torch_compat::opName(fn));
  if (obs.uninitialised) return;
  const auto inputs = fumi::torch_compat::inputsOf(fn);
  size_t first_bad = 0;
  obs.inputs_bad = scanValues(inputs, &first_bad);
  if (obs.inputs_bad.any()) obs.bad_input = argName(fn, first_bad);
  obs.scaling = scalesUp(fumi::torch_compat::opName(fn), InputNote(inputs));
}

// The detail of an origin, where non-finite outputs `out` appeared from finite inputs: an
// overflow of the scaled loss (one element, Inf only, from a multiplication by a factor above 1)
// is the loss scaler's to handle (loss_scaling.h): "scaled_overflow"; else "appeared".
// `scalar`: every output has one element.
const char* originDetail(bool scalar, const NonFinite& out, bool scaling) {
  return scaling && scalar && out.nan == 0 ? "scaled_overflow" : "appeared";
}
const char* originDetail(const std::vector<c10::IValue>& outputs, const NonFinite& out,
                         bool scaling) {
  bool scalar = true;
  for (const c10::IValue& v : outputs)
    forEachTensor(v, [&](const at::Tensor& t, int) { scalar = scalar && t.numel() == 1; });
  return originDetail(scalar, out, scaling);
}

// Reports the op as where non-finite outputs `out` appeared from finite inputs.
void reportOrigin(void* site, uint64_t index, const std::vector<c10::IValue>& outputs,
                  const NonFinite& out, bool scaling) {
  reportOriginCall(site, index, originDetail(outputs, out, scaling), out);
}

// Whether `op` is the in-place form (`add_`): it writes into its first argument.
bool inPlaceOp(const char* op) {
  const size_t n = std::strlen(op);
  return n > 1 && op[n - 1] == '_';
}

// An origin the search found in the backward pass, held back until an op reads its results: a
// backward formula may make NaN in a temporary and remove it at once (torch 1.13's NormBackward1
// divides by the norm, 0/0 at rows whose norm is 0, then masked_fill_(norm == 0, 0): a program
// whose rows of zeros it normalises makes them every step, and a search begun by a NaN elsewhere
// named that division an origin beside the true one, batch 21; `norm == 0` runs between; a
// `where` choosing the other side does the same out of place). The first op reading them
// decides as it returns: what it leaves (its results; written in place, theirs) holding no
// NaN/Inf, they went no further and are dropped; else reported. Reported too after kPendingOps
// ops that do not read them, or as the op or autograd node it ran in ends (its context is the
// origin's: LogBackward0's 1/0, not the next node's). The backward pass runs on one Python line
// (`loss.backward()`): its stack is the same a few ops later.
struct PendingOrigin {
  void* site = nullptr;  // none held back
  uint64_t index = 0;
  const char* detail = "";
  NonFinite out;
  // Its results (held weakly: autograd reads use counts).
  std::vector<c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>> outputs;
  void* reader = nullptr;  // the first op reading them, once it began
  uint64_t reader_index = 0;
  bool in_place = false;   // it writes into them
  int waited = 0;  // ops begun since, none reading them
  size_t depth = 0;  // the ops running (t_running) as it returned
  int64_t node = -1;  // the autograd node it ran in (currentNode)
};
FUMI_LOCAL_TLS PendingOrigin t_pending;
constexpr int kPendingOps = 16;

void reportPending() {
  if (!t_pending.site) return;
  const PendingOrigin p = std::move(t_pending);
  t_pending = PendingOrigin{};
  reportOriginCall(p.site, p.index, p.detail, p.out, p.node);
}

// Op `site` call `index` begins: if it reads the held-back origin's results, it is the one that
// decides. Views compute nothing: they wait.
void pendingAtStart(const at::RecordFunction& fn, void* site, uint64_t index, bool view) {
  if (!t_pending.site || t_pending.reader || view || !site) return;
  std::vector<at::Tensor> held;
  for (const auto& weak : t_pending.outputs)
    if (at::Tensor o(weak.lock()); o.defined() && o.has_storage()) held.push_back(std::move(o));
  const auto reads = [&held](const at::Tensor& t) {
    return t.has_storage() && std::any_of(held.begin(), held.end(), [&](const at::Tensor& o) {
             return t.is_alias_of(o);
           });
  };
  const auto inputs = fumi::torch_compat::inputsOf(fn);
  bool read = false;
  for (const c10::IValue& v : inputs)
    forEachTensor(v, [&](const at::Tensor& t, int) { read = read || reads(t); });
  if (!read) {
    if (++t_pending.waited > kPendingOps) reportPending();
    return;
  }
  t_pending.reader = site;
  t_pending.reader_index = index;
  t_pending.in_place = inPlaceOp(fumi::torch_compat::opName(fn)) && inputs[0].isTensor() &&
                       reads(inputs[0].toTensor());
}

// The search found an origin: reported, or held back in the backward pass (PendingOrigin).
// `depth`: the ops running around it.
void searchFound(size_t depth, const OpObservation& obs, const char* detail,
                 const NonFinite& out, const std::vector<c10::IValue>& outputs) {
  const char* phase = g_api->phase();
  // inside an op writing an argument its results may be a proxy, not to be held (insideWriter)
  if (!phase || std::strcmp(phase, "backward") != 0 || insideWriter()) {
    reportOriginCall(obs.site(), obs.index(), detail, out);
    return;
  }
  reportPending();
  t_pending.site = obs.site();
  t_pending.index = obs.index();
  t_pending.detail = detail;
  t_pending.out = out;
  t_pending.depth = depth;
  t_pending.node = currentNode();
  for (const c10::IValue& v : outputs)
    forEachTensor(v, [&](const at::Tensor& t, int) {
      if (scanTensor(t).any()) t_pending.outputs.emplace_back(t.getIntrusivePtr());
    });
}

FUMI_LOCAL_TLS uint64_t t_optimizer_steps = 0;  // the Optimizer.step calls this thread began

// The optimizer steps this thread had begun when a sentinel or a search last saw non-finite
// values, and before that step (UINT64_MAX: never): lookBack looks over the step before only
// where that one saw none (a NaN made in its backward pass, spread by its update; not NaN held
// all along).
FUMI_LOCAL_TLS uint64_t t_nonfinite_step = UINT64_MAX, t_nonfinite_step_before = UINT64_MAX;
void sawNonFinite() {
  if (t_nonfinite_step == t_optimizer_steps) return;
  t_nonfinite_step_before = t_nonfinite_step;
  t_nonfinite_step = t_optimizer_steps;
}

// After the op ran, during a search: an origin, a propagation, or nothing. `depth`: the ops
// running around it.
void searchOutputs(const char* op, const std::vector<c10::IValue>& all, const OpObservation& obs,
                   size_t depth) {
  if (obs.uninitialised || !g_api->nan_search_op()) return;
  // The results: the workspace outputs not scanned (None in their place).
  std::vector<c10::IValue> results;
  if (all.size() > 1 && workspaceOutput(op, 1)) {
    results = all;
    results[1] = c10::IValue();
  }
  const std::vector<c10::IValue>& outputs = results.empty() ? all : results;
  const NonFinite out = scanValues(outputs);
  if (!out.any()) return;
  sawNonFinite();
  if (!obs.inputs_bad.any()) {
    searchFound(depth, obs, originDetail(outputs, out, obs.scaling), out, outputs);
  } else if (obs.inputs_bad.nan == 0 && out.nan > 0) {
    searchFound(depth, obs, "nan_from_inf", out, outputs);
  } else {
    g_api->nan_propagated(obs.site(), obs.bad_input.c_str());
  }
}

// Where a watched op's non-finite output came from, judged from the inputs it did not write
// (outputs written in place hold their new values when it returns):
//   kConstants     only the program's constants hold non-finite values: floating scalar
//                  arguments and 0-dim tensors (`x != inf`, torch.isfinite, print() of a tensor, a
//                  -inf mask value). Not a NaN any op made: no search.
//   kFiniteInputs  every input is finite and none is written in place: this op made them (the
//                  origin, known at once: a one-off NaN, say 0/0 in a metric, never recurs for a
//                  search to find).
//   kUnknown       a non-finite input tensor, an input written in place, or no inputs recorded:
//                  a search follows them back.
enum class NonFiniteSource { kConstants, kFiniteInputs, kUnknown };

NonFiniteSource nonFiniteSource(const InputNote& inputs,
                                const std::vector<c10::IValue>& outputs) {
  // Tensors without storage (sparse: is_alias_of throws, and c10's error takes a backtrace,
  // symbolised: a text classifier whose sparse gradients had gone NaN ran 4.8x slower than
  // plain, batch 27) alias only themselves.
  const auto aliasesOutput = [&](const at::Tensor& t) {
    bool alias = false;
    for (const c10::IValue& o : outputs)
      forEachTensor(o, [&](const at::Tensor& out, int) {
        alias = alias || (t.has_storage() && out.has_storage()
                              ? t.is_alias_of(out)
                              : t.unsafeGetTensorImpl() == out.unsafeGetTensorImpl());
      });
    return alias;
  };
  bool constants = inputs.nonfiniteScalar(), tensors = false, written = !inputs.recorded();
  const bool all_live = inputs.forEachLive([&](const at::Tensor& t) {
    if (tensors) return;
    if (aliasesOutput(t)) {
      written = true;
      return;
    }
    if (scanTensor(t).any()) (t.dim() == 0 ? constants : tensors) = true;
  });
  // An input the op dropped: what it held is unknown, as for one written in place.
  written = written || !all_live;
  if (tensors) return NonFiniteSource::kUnknown;
  if (constants) return NonFiniteSource::kConstants;
  return written ? NonFiniteSource::kUnknown : NonFiniteSource::kFiniteInputs;
}

// Sentinel, on every op that computes its outputs: a single-element CPU output (a loss, a norm,
// a count) that is not finite. Costs a few loads per output; larger outputs are left to sampled
// nan_inf checks. Ops returning views of their inputs (as_strided, select, expand, ...) or
// changing only their metadata in place (as_strided_, unsqueeze_, resize_, ...) compute nothing
// and are not watched, nor scanned during a search: kernels take views of the fresh,
// uninitialised memory they are about to write, or restride it in place (a reduction restrides
// its empty one-element result with as_strided before filling it; max.dim its results with
// unsqueeze_), and whatever bytes such memory held from its last use — a NaN pattern now and
// then — would start a search for a NaN no op made. The op that writes the memory is watched
// when it returns. `found_inside`: an op this one called has been reported as the origin
// (einsum's bmm made the Inf that einsum returns from finite operands), or was the sentinel of a
// search that found it looking back (nll_loss_forward, inside nll_loss inside cross_entropy):
// what this one returns is that finding's, not an origin or a sentinel of its own. True when
// this call reports an origin.
bool watchOutputs(const char* op, const InputNote& inputs, const std::vector<c10::IValue>& outputs,
                  void* site, uint64_t index, bool found_inside) {
  for (const c10::IValue& v : outputs) {
    if (!v.isTensor()) continue;
    const at::Tensor& t = v.toTensor();
    if (!t.defined() || t.numel() != 1 || !t.device().is_cpu()) continue;
    if (!scanTensor(t).any() || undefinedOutput(op)) continue;
    const NonFiniteSource source = nonFiniteSource(inputs, outputs);
    if (source != NonFiniteSource::kConstants) sawNonFinite();
    switch (source) {
      case NonFiniteSource::kConstants: break;
      case NonFiniteSource::kFiniteInputs:
        if (found_inside) break;
        reportOrigin(site, index, outputs, scanValues(outputs), scalesUp(op, inputs));
        return true;
      case NonFiniteSource::kUnknown:
        if (!found_inside) g_api->nonfinite_seen(site, index);
        break;
    }
    return false;
  }
  return false;
}

// ---- looking back from a sentinel (nan_search.h, "look back") ------------------------------

// An op this thread ran: its inputs as they were before it ran, its outputs as it returned them.
struct PastOp {
  fumi_past_call call{};
  uint64_t step = 0;  // t_optimizer_steps when it ran (call.steps_ago is set from it when told)
  const char* op = "";  // the schema's name (the dispatcher keeps it)
  InputNote inputs;
  c10::SmallVector<TensorNote, 2> outputs;
  // Its outputs are what an op it ran inside returned: that op's kernel went on writing them
  // without the dispatcher (no version bump: a backward's at::zeros gradient buffer filled by
  // the caller's loop), so what they hold now is the caller's work.
  bool superseded = false;
  // It ran inside another operator (a kernel's own op: the sigmoid_ a GRU runs on its gates),
  // not called by the program.
  bool nested = false;
  // Which outputs (bit i: outputs[i], the first 64) are that op's: the others (batch norm's
  // saved mean and inverse deviation, which its caller does not return and its backward reads)
  // still hold this op's work.
  uint64_t superseded_outputs = 0;
  // The outermost op that returns its results: where a look-back lists this one, the call the
  // program made (batch_norm, not the _batch_norm_impl_index inside it; both were listed).
  struct {
    void* site = nullptr;
    uint64_t index = 0;
  } caller;
  // Which outputs (bit i: outputs[i]) it wrote without a version bump: batch norm's running
  // statistics (runningStatsIndex), what earlier ops left in that memory then gone unseen.
  uint64_t silent_outputs = 0;
  // RecordFunction's sequence number of the call (that of the autograd node a forward call
  // makes), and in the backward pass that of the node it ran in (-1: none; forwardOf).
  int64_t seq = -1, node_seq = -1;
  // Marks its outputs of `t`'s memory as the caller's, `by`, which returns `t` (the callers
  // return in turn, the outermost last).
  void supersede(const TensorNote& t, const fumi_past_call& by) {
    superseded = true;
    caller.site = by.site;
    caller.index = by.index;
    for (size_t i = 0; i < outputs.size() && i < 64; ++i)
      if (outputs[i].sharesMemory(t)) superseded_outputs |= uint64_t{1} << i;
  }
  // Whether what it wrote into `t`'s memory is its caller's work (supersede).
  bool supersededFor(const TensorNote& t) const {
    for (size_t i = 0; i < outputs.size() && i < 64; ++i)
      if ((superseded_outputs >> i & 1) && outputs[i].sharesMemory(t)) return true;
    return false;
  }
  // An op writing in place into part of its input's memory (x[i] = v: copy_ into a select
  // view): where it wrote, read back through a tensor still holding that memory once the view
  // itself is gone. Set for in-place ops only (null otherwise: most ops, and a kept op is moved
  // into the ring, its bytes read there by every sweep).
  struct Region {
    int64_t offset = 0;  // in elements of dtype
    c10::SmallVector<int64_t, 4> sizes, strides;
    at::ScalarType dtype = at::ScalarType::Undefined;
    bool whole = false;  // it wrote every element of the memory
  };
  std::unique_ptr<Region> region;
  bool wroteWhole() const { return region && region->whole; }
  bool wrote(const TensorNote& t) const {
    for (const TensorNote& o : outputs)
      if (o.sharesMemory(t)) return true;
    return false;
  }
  // Whether its output of the memory `t` is in is gone while that memory lives on (outlived).
  bool outlivedBy(const TensorNote& t) const {
    for (const TensorNote& o : outputs)
      if (o.sharesMemory(t)) return o.outlived();
    return false;
  }
  // Its output of the memory `t` is in, while it holds what the op left there; else undefined.
  at::Tensor heldOutput(const TensorNote& t) const {
    for (const TensorNote& o : outputs)
      if (o.sharesMemory(t)) return o.asSeen();
    return {};
  }
  // What the op wrote, read through `holder` (a tensor of the same memory), or undefined where
  // that memory does not cover it.
  at::Tensor written(const at::Tensor& holder) const {
    if (!region || !holder.has_storage() || holder.scalar_type() != region->dtype) return {};
    for (size_t d = 0; d < region->sizes.size(); ++d)
      if (region->sizes[d] == 0 || region->strides[d] < 0) return {};
    const int64_t have =
        static_cast<int64_t>(holder.storage().nbytes() / holder.element_size());
    if (span().second >= have) return {};
    return holder.as_strided(region->sizes, region->strides, region->offset);
  }
  // The element span [first, last] it wrote (offsets in the memory); empty for no region.
  std::pair<int64_t, int64_t> span() const {
    if (!region) return {-1, -1};
    int64_t last = region->offset;
    for (size_t d = 0; d < region->sizes.size(); ++d)
      last += std::max<int64_t>(region->sizes[d] - 1, 0) * std::max<int64_t>(region->strides[d], 0);
    return {region->offset, last};
  }
};

// The last ops this thread ran, oldest first: a forward pass of a few thousand ops, whose
// tensors are held weakly (what is gone stays gone; what autograd or the program holds can be
// read back when a sentinel fires). It holds 4096 ops, more where a training step runs more
// (up to kMaxCapacity, about 500 bytes an op): a bidirectional GRU over 150 time steps ran
// 9000 a step, and a NaN made at the step's start was out of reach when its loss showed it
// (batch 19).
class PastOps {
 public:
  static constexpr size_t kCapacity = 4096, kMaxCapacity = 32768;
  static constexpr size_t kLag = 64, kSweep = 8;
  static_assert(kMaxCapacity % kCapacity == 0 &&
                ((kMaxCapacity / kCapacity) & (kMaxCapacity / kCapacity - 1)) == 0);
  void push(PastOp&& op) {
    if (ops_.size() < capacity_) ops_.push_back(std::move(op));
    else ops_[next_] = std::move(op);
    next_ = (next_ + 1) % capacity_;
    ++pushed_;
    // The op kLag back lets go of the tensors the program has dropped since, and kSweep more
    // in turn over the whole ring those it dropped later (activations freed by the backward
    // pass): a TensorImpl kept, empty as it is, pins its heap chunk between the freed buffers
    // around it (a 9x9 convolution network's peak memory went from 830 to 1400 MB).
    if (ops_.size() > kLag) {
      dropGone(at(ops_.size() - 1 - kLag));
      for (size_t i = 0; i < kSweep; ++i) dropGone(at(sweep_++ % ops_.size()));
    }
  }
  // An optimizer step begins: the ring grows to hold the last step's ops and a quarter more.
  void markStep() {
    const uint64_t wanted = sinceStep() + sinceStep() / 4;
    if (wanted > capacity_ && capacity_ < kMaxCapacity) {
      size_t grown = capacity_;  // powers of two from kCapacity: never past kMaxCapacity
      while (grown < wanted && grown < kMaxCapacity) grown *= 2;
      std::vector<PastOp> oldest_first;
      oldest_first.reserve(grown);
      for (size_t i = 0; i < ops_.size(); ++i) oldest_first.push_back(std::move(at(i)));
      ops_ = std::move(oldest_first);
      capacity_ = grown;
      next_ = ops_.size() % capacity_;
    }
    prev_step_ = step_;
    step_ = pushed_;
  }
  uint64_t pushed() const { return pushed_; }
  // The ops since the last optimizer step began, and whether the ring still holds them all.
  uint64_t sinceStep() const { return pushed_ - step_; }
  bool holdsStep() const { return sinceStep() <= ops_.size(); }
  // `outer` returns: the ops recorded since `since` (those it ran) whose outputs it returns are
  // superseded by it — back to the op that made that memory (its inputs do not hold it: not a
  // view, not an in-place write). An op before that wrote other memory the allocator gave the
  // same addresses: an LSTM's input projection, freed inside it, whose storage object and data
  // the stacked output got both (now and then: the input weights' gradient, 0 · inf, read as
  // made from unknown values, and the origin was not found).
  void supersede(uint64_t since, const PastOp& outer) {
    const uint64_t inside = std::min<uint64_t>(pushed_ - since, ops_.size());
    const size_t first = ops_.size() - static_cast<size_t>(inside);
    for (const TensorNote& o : outer.outputs)
      for (size_t i = ops_.size(); i-- > first;) {
        PastOp& op = at(i);
        if (!op.wrote(o)) continue;
        op.supersede(o, outer.call);
        const auto& in = op.inputs.tensors();
        const auto holds = [&o](const TensorNote& t) { return t.sharesMemory(o); };
        if (std::none_of(in.begin(), in.end(), holds)) break;  // made it
      }
  }
  size_t size() const { return ops_.size(); }
  // The first op of the last optimizer step, or the oldest recorded: where a search looks back
  // from (what came before ran with other parameters, whose values are that step's work).
  size_t stepStart() const { return startOf(step_); }
  // The first op of the step before (its optimizer step's ops, then its training step's), or
  // the oldest recorded.
  size_t previousStepStart() const { return startOf(prev_step_); }
  const PastOp& operator[](size_t i) const { return ops_[slot(i)]; }

 private:
  PastOp& at(size_t i) { return ops_[slot(i)]; }
  size_t startOf(uint64_t pushed_then) const {
    const uint64_t since = pushed_ - pushed_then;
    return since >= ops_.size() ? 0 : ops_.size() - static_cast<size_t>(since);
  }
  static void dropGone(PastOp& op) {
    op.inputs.dropGone();
    for (TensorNote& o : op.outputs) o.dropIfGone();
  }
  // Where the i-th oldest op is.
  size_t slot(size_t i) const { return ops_.size() < capacity_ ? i : (next_ + i) % capacity_; }

  std::vector<PastOp> ops_;
  size_t capacity_ = kCapacity;
  size_t next_ = 0;    // where the next op goes: the oldest, once full
  size_t sweep_ = 0;   // the next op (i-th oldest, modulo the size) the sweep looks at
  uint64_t pushed_ = 0, step_ = 0, prev_step_ = 0;
};
// This thread's ring. It lets go of its tensors when a thread ends, but never at the process's
// exit (the main thread's end): by then the interpreter has torn down the tensors it owned,
// and releasing the last weak references to them crashed a job's exit (a linear-algebra demo,
// after every decomposition had returned).
class PastOpsOfThread {
 public:
  PastOps& get() { return *ops_; }
  ~PastOpsOfThread() {
    if (static_cast<pid_t>(syscall(SYS_gettid)) != getpid()) delete ops_;
  }

 private:
  PastOps* ops_ = new PastOps;
};
FUMI_LOCAL_TLS PastOpsOfThread t_past_of_thread;
PastOps& pastOps() { return t_past_of_thread.get(); }

bool isOptimizerPhase(const char* phase) { return phase && std::strcmp(phase, "optimizer") == 0; }

// What one look-back reads again and again: the ops since the step began that wrote each memory,
// and what the tensors still held hold (every op holding the values has its provenance
// followed, and each reads the same weights).
class LookBackMemo {
 public:
  // `start`: the first op it reads (the step's, or the step before's: lookBack).
  LookBackMemo(const PastOps& past, size_t start) : past_(past), start_(start) {
    for (size_t k = start; k < past.size(); ++k)
      for (size_t n = 0; n < past[k].outputs.size(); ++n) {
        const TensorNote& o = past[k].outputs[n];
        std::vector<size_t>& w = writers_[o.memoryKey()];
        if (w.empty() || w.back() != k) w.push_back(k);
        if (n < 64 && (past[k].silent_outputs >> n & 1)) silent_[o.memoryKey()].push_back(k);
      }
  }
  // Whether an op after op `i` wrote `t`'s memory without a version bump (batch norm's running
  // statistics): what op `i` saw or left there is gone, its version unchanged as it is (a NaN
  // batch's mean written into them read as made by their reset's zero_, batch 32).
  // `self`: op `i` read `t`, and its own silent write counts (an in-place op inside a kernel
  // that bumps no version reads as having read what it wrote).
  bool rewrittenSilently(const TensorNote& t, size_t i, bool self = false) const {
    const auto it = silent_.find(t.memoryKey());
    if (it == silent_.end()) return false;
    for (auto k = self ? std::lower_bound(it->second.begin(), it->second.end(), i)
                       : std::upper_bound(it->second.begin(), it->second.end(), i);
         k != it->second.end(); ++k)
      if (past_[*k].wrote(t)) return true;
    return false;
  }
  // The last op before op `j` since the step began that wrote `t`'s memory, where that is not
  // its caller's work (superseded), or npos.
  size_t lastWriter(const TensorNote& t, size_t j) const {
    size_t last = npos;
    writersBefore(t, j, [&](size_t k) {
      if (past_[k].supersededFor(t)) return true;
      last = k;
      return false;
    });
    return last;
  }
  // The ops before op `j` since the step began that wrote `t`'s memory, latest first.
  template <class F>
  void writersBefore(const TensorNote& t, size_t j, F&& f) const {
    const auto it = writers_.find(t.memoryKey());
    if (it == writers_.end()) return;
    const std::vector<size_t>& w = it->second;
    for (auto k = std::lower_bound(w.begin(), w.end(), j); k != w.begin();) {
      --k;
      if (past_[*k].wrote(t) && !f(*k)) return;
    }
  }
  // scanTensor(t), once for each tensor held unchanged.
  NonFinite scan(const at::Tensor& t) {
    const Scanned now{t.is_inference() ? -1 : t._version(),
                      t.has_storage() ? t.data_ptr() : nullptr, t.numel()};
    auto [it, added] = scans_.try_emplace(t.unsafeGetTensorImpl(), now, NonFinite{});
    if (added || !(it->second.first == now)) it->second = {now, scanTensor(t)};
    return it->second.second;
  }
  // Whether `t`'s memory, which no op before op `j` wrote, was next written by an optimizer
  // step or never since (a parameter the step before read, updated since; the data).
  bool unwrittenBefore(const TensorNote& t, size_t j) const {
    const auto it = writers_.find(t.memoryKey());
    if (it == writers_.end()) return true;
    const auto k = std::upper_bound(it->second.begin(), it->second.end(), j);
    for (auto w = k; w != it->second.end(); ++w)
      if (past_[*w].wrote(t)) return isOptimizerPhase(past_[*w].call.phase);
    return true;
  }
  // What `t`'s memory held when op `j` read it through a tensor gone since, where no op of the
  // step wrote it before `j` and a tensor the ring saw over it then is over it still (a
  // parameter read through its `.data`: an EMA's `q.data * m`, q written by a copy_ after it;
  // alive throughout, it kept that memory from being freed and its addresses from being given
  // to another): what it holds now where no op wrote it since either; else, where sentinels saw
  // nothing non-finite in the step before (`start_finite`: the program ran on those values
  // then), finite. Nothing where it is known no better (memory from outside the ops: data from
  // numpy, gone with its tensor; a parameter whose `.data` was assigned since).
  std::optional<NonFinite> heldAtStart(const TensorNote& t, size_t j) {
    if (!sharers_built_) {
      sharers_built_ = true;
      for (size_t k = 0; k < past_.size(); ++k) {
        const auto keep = [this, k](const TensorNote& n) {
          if (sharers_.count(n.memoryKey())) return;
          if (at::Tensor live = n.live(); live.defined() && n.over(live) && readable(live))
            sharers_.emplace(n.memoryKey(), Sharer{n, std::move(live), k, std::nullopt});
        };
        for (const TensorNote& n : past_[k].inputs.tensors()) keep(n);
        for (const TensorNote& n : past_[k].outputs) keep(n);
      }
    }
    const auto it = sharers_.find(t.memoryKey());
    if (it == sharers_.end() || it->second.seen > j || !it->second.note.sharesMemory(t))
      return std::nullopt;
    const auto w = writers_.find(t.memoryKey());
    const bool written_since = w != writers_.end() && std::any_of(
        std::upper_bound(w->second.begin(), w->second.end(), j), w->second.end(),
        [&](size_t k) { return past_[k].wrote(t); });
    if (written_since) return start_finite ? std::optional<NonFinite>(NonFinite{}) : std::nullopt;
    Sharer& sharer = it->second;
    if (!sharer.scanned) {  // the whole memory, once per look-back (a flat buffer of parameters)
      const at::Tensor& live = sharer.live;
      const int64_t n = static_cast<int64_t>(live.storage().nbytes() / live.element_size());
      sharer.scanned = scanTensor(viewAt(live.storage(), 0, live.scalar_type(), {n}, {1}));
    }
    return sharer.scanned;
  }
  size_t start() const { return start_; }
  static constexpr size_t npos = static_cast<size_t>(-1);
  // Sentinels saw nothing non-finite in the step before this one (heldAtStart).
  bool start_finite = false;
  size_t follows = 0;  // ops followed back, by every provenance of this look-back
  // Over the step before: the optimizer's inputs no op of the range wrote before them (its state
  // as that step began) are taken as finite, as parameters and data are (traceInputs).
  bool state_finite = false;

 private:
  struct Scanned {
    int64_t version;
    const void* data;
    int64_t numel;
    bool operator==(const Scanned& o) const {
      return version == o.version && data == o.data && numel == o.numel;
    }
  };
  const PastOps& past_;
  size_t start_;
  std::unordered_map<const void*, std::vector<size_t>> writers_;
  std::unordered_map<const void*, std::vector<size_t>> silent_;  // rewrittenSilently's writers
  std::unordered_map<const void*, std::pair<Scanned, NonFinite>> scans_;
  // per memory, the first tensor of the ring alive over it still (heldAtStart), built on first
  // use: its note, the tensor, the op that saw it
  struct Sharer {
    TensorNote note;
    at::Tensor live;
    size_t seen;
    std::optional<NonFinite> scanned = std::nullopt;  // what its memory holds now
  };
  std::unordered_map<const void*, Sharer> sharers_;
  bool sharers_built_ = false;
};

// Where the inputs of past op `j` came from: what those still held as they were hold, and for
// the others the ops that made them, followed back (their results dropped or overwritten since).
struct Provenance {
  NonFinite bad;                // non-finite values in inputs still held as they were
  bool held = false;            // some of `bad` in input tensors (the rest: the program's constants)
  uint64_t constant_inf = 0;    // of `bad`'s Inf, the program's constants (a mask's -inf)
  // Of `bad`, what Python numbers wrapped as tensors held (`loss - np.log(0) * d`), and the
  // first op that read one.
  NonFinite numbers;
  size_t number_reader = SIZE_MAX;
  bool unknown = false;         // an input neither so held nor made by an op still recorded
  std::vector<size_t> through;  // the ops followed back, nearest first
  // The ops (the first, or ones followed back) that got non-finite values from memory still
  // held or from the program's constants: where NaN from Inf was made, if not after them.
  std::vector<size_t> readers;
  // By position in the ring, for the ops followed: the op whose input it made (the first: none).
  std::vector<size_t> from;
  size_t next = 0;  // the next op in `through` whose inputs to follow
  std::vector<bool> overwritten;  // for each op in `through`: traceInputs' `overwritten`
  // An op reported as an origin before (knownOrigin) that made an input, its results gone:
  // its values, counted in `bad`, are that origin's.
  size_t known = LookBackMemo::npos;
  LookBackMemo* memo = nullptr;
  // The ops a message lists: the nearest followed.
  static constexpr size_t kListed = 16;
  // Whether following more changes nothing: NaN came in, or the values' making is unknown and
  // the ops a message lists are known (a planted sqrt a few ops behind data from numpy, gone:
  // the first unknown input had ended the walk before it).
  bool settled() const { return bad.nan > 0 || (unknown && through.size() >= kListed); }
};
// The ops one provenance follows back at most: a step's backward pass reaches the gradient
// buffers' in-place accumulation, whose inputs go back through the whole recurrence of an LSTM
// (batch 20: 16 did not reach the weight gradient's 0 * inf, and the search ended unknown); a
// batch collated from items that each took a dozen ops (a Dataset's transforms) holds
// thousands (batch 38: 128 items of 12 ops, and a division by 0 in one item's `__getitem__`
// out of reach of 512, the conv reading the batch named "nan_from_inf"). A ring's worth.
constexpr size_t kMaxThrough = 4096;
// And all of one look-back's (a job whose forward pass holds a mask's -inf in every attention
// op follows each one back).
constexpr size_t kMaxFollows = 65536;

// Op `k` made (or wrote) an input of op `j`: its inputs are followed in turn, once, nearest
// first; false when that would go past kMaxThrough (the provenance is then unknown).
bool follow(const PastOps& past, size_t k, size_t j, Provenance& p, bool overwritten) {
  if (p.from.size() < past.size()) p.from.resize(past.size(), LookBackMemo::npos);
  if (p.from[k] != LookBackMemo::npos) return true;
  if (const KnownOrigin* o = knownOrigin(past[k].call.site, past[k].call.index)) {
    if (p.known == LookBackMemo::npos) p.known = k;
    p.bad.add(o->out);
    p.held = true;
    return true;
  }
  if (p.through.size() >= kMaxThrough || p.memo->follows >= kMaxFollows) {
    p.unknown = true;
    return false;
  }
  ++p.memo->follows;
  p.from[k] = j;
  p.through.push_back(k);
  p.overwritten.push_back(overwritten);
  return true;
}

// Whether in-place op `op` replaces every element of what it writes (its first argument): what
// that held before is then none of its result's making. Others (add_, masked_fill_,
// index_put_) keep some or all of it.
bool overwrites(const char* op) {
  return std::strcmp(op, "aten::copy_") == 0 || std::strcmp(op, "aten::fill_") == 0 ||
         std::strcmp(op, "aten::zero_") == 0;
}

// An input still held as op `j` saw it, holding non-finite values `seen`: values written into
// part of its memory by in-place ops since the step began (buf[i] = log(w): copy_ into a select
// view, whose result is gone) are those ops' work, followed back through their other inputs —
// when the parts they wrote, none overlapped by a later write, hold every non-finite value it
// holds. False otherwise (the input passed them along, at least in part). The op that made the
// memory (an output of its own, not written in place) ends the walk: memory is known by its
// StorageImpl's address, which a later allocation may reuse once the storage is freed, and an
// optimizer's in-place write into a temporary freed before the step's data was cloned into the
// same address read as a write into that data (batch 20: a flow's planted NaN, never found).
// Whether every non-finite value `t` holds lies where the kept ops `writes`, all the program's
// own calls, wrote (read on a copy of its memory with those parts zeroed): their parts may reach
// past `t` (a column written whole, a slice of rows read: batch 38's tabular preprocessing,
// `X[:, 4] = log(x) / 7`, then `X[i:i + 256]`, and the counts of the two differ). Not writes a
// kernel made inside an op, nor for a reader inside one (batch 19's GRU reading its initial
// state, NaN written into part of it: the GRU, which returns the values, is their holder, not
// the sigmoid_ on its gates). Memory of over 2^26 elements is not copied.
bool nonFiniteOnlyWhereWritten(const PastOps& past, const std::vector<size_t>& writes,
                               const at::Tensor& t) {
  if (!t.has_storage() || t.element_size() == 0) return false;
  for (size_t k : writes)
    if (past[k].nested) return false;
  const int64_t n = static_cast<int64_t>(t.storage().nbytes() / t.element_size());
  if (n <= 0 || n > (int64_t{1} << 26)) return false;
  const at::Tensor flat = t.as_strided({n}, {1}, 0).clone();
  for (size_t k : writes) {
    at::Tensor part = past[k].written(flat);
    if (!part.defined()) return false;
    part.zero_();
  }
  return !scanTensor(flat.as_strided(t.sizes(), t.strides(), t.storage_offset())).any();
}

bool traceWrittenInto(const PastOps& past, size_t j, const TensorNote& in, const at::Tensor& t,
                      const NonFinite& seen, Provenance& p) {
  std::vector<size_t> wrote;  // latest first, to the op that made it
  p.memo->writersBefore(in, j, [&](size_t k) {
    wrote.push_back(k);
    return past[k].region != nullptr;
  });
  std::vector<size_t> writes;
  NonFinite held;
  for (size_t i = 0; i < wrote.size(); ++i) {
    const PastOp& w = past[wrote[i]];
    if (!w.region) break;  // made it
    if (w.superseded) continue;
    const at::Tensor region = w.written(t);
    if (!region.defined()) continue;
    const NonFinite part = scanTensor(region);
    if (!part.any()) continue;
    const auto [first, last] = w.span();
    for (size_t l = 0; l < i; ++l) {  // a later in-place write into the same elements
      const PastOp& later = past[wrote[l]];
      if (!later.region) continue;
      const auto [f, e] = later.span();
      if (f <= last && first <= e) return false;
    }
    held.add(part);
    writes.push_back(wrote[i]);
  }
  if (writes.empty() || ((held.nan != seen.nan || held.inf != seen.inf) &&
                         (past[j].nested || !nonFiniteOnlyWhereWritten(past, writes, t))))
    return false;
  for (size_t k : writes) {
    if (p.settled() || !follow(past, k, j, p, overwrites(past[k].op))) break;
  }
  return true;
}

// `overwritten`: op `j` replaced every element of its first argument (traceWrittenInto), whose
// values before are none of its result's making: not followed.
void traceInputs(const PastOps& past, size_t j, Provenance& p, bool overwritten = false) {
  const PastOp& op = past[j];
  const auto read = [&p, j](const NonFinite& got, bool held) {
    if (!got.any()) return;
    p.bad.add(got);
    p.held = p.held || held;
    if (p.readers.empty() || p.readers.back() != j) p.readers.push_back(j);
  };
  // the program's constants (-inf masks)
  if (op.inputs.nonfiniteScalar()) {
    read(NonFinite{op.inputs.nanScalar() ? 1u : 0u, op.inputs.nanScalar() ? 0u : 1u}, false);
    if (!op.inputs.nanScalar()) ++p.constant_inf;
  }
  for (const TensorNote& in : op.inputs.tensors()) {
    // Inf alone does not end it: NaN from Inf needs to know no NaN came in as well.
    if (p.settled()) return;
    if (overwritten && &in == &op.inputs.tensors()[0]) continue;
    // An embedding's indices, a loss's targets: gone with their batch (gradient accumulation
    // replaces it each micro-step), they were no unknown source of NaN (batch 25's nanoGPT).
    if (in.exact()) continue;
    // A Python number not finite: the program's constant, not memory (no op made it).
    if (in.number() && (in.element() == TensorNote::Element::kNaN ||
                        in.element() == TensorNote::Element::kInf)) {
      const NonFinite got{in.element() == TensorNote::Element::kNaN ? 1u : 0u,
                          in.element() == TensorNote::Element::kInf ? 1u : 0u};
      read(got, false);
      p.numbers.add(got);
      if (p.number_reader == SIZE_MAX) p.number_reader = j;
      continue;
    }
    // An input held as the op saw it, else one read as it was when the op ran.
    at::Tensor t = p.memo->rewrittenSilently(in, j, true) ? at::Tensor() : in.asSeen();
    if (!t.defined() && in.element() != TensorNote::Element::kUnread) {
      read(NonFinite{in.element() == TensorNote::Element::kNaN ? 1u : 0u,
                     in.element() == TensorNote::Element::kInf ? 1u : 0u},
           true);
      continue;
    }
    // Else the op that last wrote its memory since the step began (what the step began with is
    // the last step's: its own gradients' buffers, zeroed, written into every step since).
    size_t k = LookBackMemo::npos;
    if (!t.defined()) {
      k = p.memo->lastWriter(in, j);
      // Its memory as that op left it, still held: what this op read (a parameter read through
      // a transposed view, the view gone; batch 20's LSTM, whose search ended unknown there).
      if (k != LookBackMemo::npos && !p.memo->rewrittenSilently(in, k)) t = past[k].heldOutput(in);
    }
    if (t.defined()) {
      const NonFinite seen = p.memo->scan(t);
      if (seen.any() && traceWrittenInto(past, j, in, t, seen, p)) continue;
      // Memory an op of the step made, its result gone, held now by the tensor read (a quotient
      // assigned to an EMA's `q.data`: batch 32's BYOL, its one-off division by 0 named at the
      // batch_norm reading q, or "there when the step began"): what it holds is that op's.
      if (seen.any() && k == LookBackMemo::npos) {
        const size_t w = p.memo->lastWriter(in, j);
        if (w != LookBackMemo::npos && !past[w].region && past[w].outlivedBy(in) &&
            !p.memo->rewrittenSilently(in, w)) {
          if (!follow(past, w, j, p, false)) return;
          continue;
        }
      }
      read(seen, true);
      continue;
    }
    if (k == LookBackMemo::npos) {
      // A view of memory no op of the step wrote, the view gone, its base unchanged and finite:
      // so was what the op read (batch 25's DDPM: its schedule, made before the loop, indexed as
      // buf[ts, None, None, None] had been an unknown source, the 0/0 beside it "not found").
      if (const at::Tensor base = in.unchangedBase(); base.defined() && !p.memo->scan(base).any())
        continue;
      // Looking back over the step before (lookBack): a parameter the optimizer updated since,
      // read as that step began, or memory no op since wrote (the data, a slice of it gone), is
      // taken as finite: nothing non-finite was seen in that step, and the values came in
      // through the update after it.
      if (p.memo->start() < past.stepStart() &&
          (!isOptimizerPhase(op.call.phase) || p.memo->state_finite) &&
          p.memo->unwrittenBefore(in, j))
        continue;
      // Over this step: memory no op of it wrote before, still held (heldAtStart); not for the
      // optimizer's reads (gradients the step before's backward pass made: looked for there).
      if (p.memo->start() == past.stepStart() && !isOptimizerPhase(op.call.phase) &&
          !in.exact())
        if (const std::optional<NonFinite> was = p.memo->heldAtStart(in, j)) {
          read(*was, true);
          continue;
        }
      p.unknown = true;  // made before the step's ops recorded, or its memory came from outside
    } else if (undefinedOutput(past[k].op)) {
      // fresh memory the op wrote (an out= argument): nothing of its own to follow
    } else if (!follow(past, k, j, p, overwrites(past[k].op) && past[k].wroteWhole())) {
      return;
    }
  }
}

// Where the inputs of past op `i` came from, followed back breadth first: the ops nearest it
// first, so that the Inf a weight gradient's 0 * inf read is reached before the accumulator's
// chain through an LSTM's recurrence (batch 20).
Provenance provenance(const PastOps& past, size_t i, LookBackMemo& memo) {
  Provenance p;
  p.memo = &memo;
  traceInputs(past, i, p);
  while (p.next < p.through.size() && !p.settled()) {
    const size_t k = p.next++;
    traceInputs(past, p.through[k], p, p.overwritten[k]);
  }
  return p;
}

// Whether kept op `e` divided by an exact 0: a division whose divisor, read as it ran, was 0 (one
// element: a Python number wrapped for it, a temperature) or held a 0 (a sqrt's gradient).
bool dividesByZero(const PastOp& e) {
  const auto& in = e.inputs.tensors();
  return std::strncmp(e.op, "aten::div", 9) == 0 && in.size() >= 2 &&
         in[1].element() == TensorNote::Element::kZero;
}

// Where restricted-domain ops' inputs lie outside their domain (domainFault).
enum class DomainTest {
  kNegative, kNonPositive, kBelowMinusOne, kAboveOne, kEmpty, kOverflows,
  kPole,     // 0 and the negative integers: -Inf at 0, NaN below (digamma)
  kPoleInf,  // 0 and the negative integers: +Inf (lgamma)
  kZero,     // an exact 0: +Inf (a negative power)
};

// The non-finite values an op with domain test `test` makes of finite input `t`, counted as NaN
// or Inf by where the input lay.
NonFinite domainTest(DomainTest test, const at::Tensor& t) {
  const auto count = [](const at::Tensor& m) { return static_cast<uint64_t>(m.sum().item<int64_t>()); };
  switch (test) {
    case DomainTest::kNegative: return {count(t < 0), 0};
    case DomainTest::kNonPositive: return {count(t < 0), count(t == 0)};
    case DomainTest::kBelowMinusOne: return {count(t < -1), count(t == -1)};
    case DomainTest::kAboveOne: return {count(t.abs() > 1), 0};
    case DomainTest::kOverflows: {  // past the log of the dtype's largest value
      const double largest = t.scalar_type() == at::kDouble  ? std::numeric_limits<double>::max()
                             : t.scalar_type() == at::kHalf  ? 65504.0
                                                             : std::numeric_limits<float>::max();
      return {0, count(t > std::log(largest))};
    }
    case DomainTest::kPole: return {count((t < 0).logical_and(t == t.floor())), count(t == 0)};
    case DomainTest::kPoleInf: return {0, count((t <= 0).logical_and(t == t.floor()))};
    case DomainTest::kZero: return {0, count(t == 0)};
    case DomainTest::kEmpty: break;
  }
  return {};
}

// What kept op `e` made of its input, still held as it read it and finite, where that lies outside
// the op's domain: the non-finite values it made for certain (a later op may have dropped them);
// none otherwise. Restricted-domain ops on their first argument, by their schema names (`e.op`);
// a power's by its scalar exponent (a fractional one of a negative base, a negative one of 0).
NonFinite domainFault(const PastOp& e) {
  struct Domain {
    const char* op;
    DomainTest test;
    bool fractional = false;  // only with a scalar exponent not whole (a power)
    bool negative = false;    // only with a negative scalar exponent (a power)
  };
  using T = DomainTest;
  static const Domain kDomains[] = {
      {"aten::sqrt", T::kNegative},          {"aten::rsqrt", T::kNonPositive},
      {"aten::log", T::kNonPositive},        {"aten::log2", T::kNonPositive},
      {"aten::log10", T::kNonPositive},      {"aten::log1p", T::kBelowMinusOne},
      {"aten::acos", T::kAboveOne},          {"aten::asin", T::kAboveOne},
      {"aten::pow", T::kNegative, true},     {"aten::pow", T::kZero, false, true},
      {"aten::mean", T::kEmpty},             {"aten::exp", T::kOverflows},
      {"aten::digamma", T::kPole},           {"aten::lgamma", T::kPoleInf}};
  const auto& in = e.inputs.tensors();
  // on the first argument: a power of a scalar base (pow.Scalar) tests no exponent so
  if (in.empty() || !e.inputs.firstTensor()) return {};
  NonFinite made;
  at::Tensor t;  // the input, read once
  bool read = false;
  for (const Domain& d : kDomains) {
    if (std::strcmp(e.op, d.op) != 0 || (d.fractional && !e.inputs.fractionalScalar()) ||
        (d.negative && !e.inputs.negativeScalar()))
      continue;
    // a mean of nothing, 0/0: told by what it read (the selection is gone once it returns)
    if (d.test == T::kEmpty) {
      if (in[0].element() == TensorNote::Element::kEmpty) made.add({1, 0});
      continue;
    }
    if (!read) {
      read = true;
      t = in[0].asSeen();
      if (t.defined() && (!t.is_floating_point() || !readable(t) || t.numel() == 0 ||
                          scanTensor(t).any()))
        t = at::Tensor();
    }
    if (t.defined()) made.add(domainTest(d.test, t));
  }
  return made;
}

bool outsideDomain(const PastOp& e) { return domainFault(e).any(); }

// For kept op `i` of the backward pass, the forward call whose autograd node it ran in, where the
// ring still holds it (from the step before on): the last forward op before it with the node's
// sequence number (ops after the one making a node see the next number; an op's callers see its
// own and return after it). Its Python frames become the call's: a backward op's are the
// backward() call's, and the line the program wrote is the forward one (batch 34: a
// `where`-guarded log's gradient 0/0 named at the backward() line).
// The ring's last forward op before position `before` (from the step before on) made by
// autograd node `node`: its position, or npos.
size_t forwardCallAt(const PastOps& past, int64_t node, size_t before) {
  if (node < 0) return LookBackMemo::npos;
  for (size_t k = before; k-- > past.previousStepStart();)
    if (past[k].node_seq < 0 && past[k].seq == node) return k;
  return LookBackMemo::npos;
}

// Whether kept op `k` made non-finite values of finite ones for certain: it divided by an exact
// 0, or its input lay outside its domain.
bool certainMaker(const PastOp& e) { return dividesByZero(e) || outsideDomain(e); }

void forwardOf(const PastOps& past, size_t i, fumi_past_call& call) {
  const size_t k = forwardCallAt(past, past[i].node_seq, i);
  if (k == LookBackMemo::npos) return;
  const PastOp& f = past[k];
  call.forward_site = f.call.site;
  call.forward_index = f.call.index;
  if (f.call.place.code[0]) {
    const void* in_node = call.place.node;
    call.place = f.call.place;
    call.place.node = in_node;
  }
}

bool forwardCallOf(int64_t node, fumi_past_call& out) {
  if (node < 0 || !pastKept()) return false;
  const PastOps& past = pastOps();
  const size_t k = forwardCallAt(past, node, past.size());
  if (k == LookBackMemo::npos) return false;
  out = past[k].call;
  return true;
}

// adapter_api.h set_forward_probe: the forward call of the node the thread runs in now.
int forwardProbe(fumi_past_call* out) {
  try {
    return out && forwardCallOf(currentNode(), *out) ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

// Kept op `i`'s call as nan_looked_back tells it: how many optimizer steps ago it ran, whether
// it divided by an exact 0, whether its held input lies outside its domain (inside lookBack: the
// tensor reads are fumi's own), and in the backward pass the forward call it is the gradient of.
fumi_past_call pastCall(const PastOps& past, size_t i) {
  const PastOp& e = past[i];
  fumi_past_call c = e.call;
  forwardOf(past, i, c);
  c.by_zero = dividesByZero(e) ? 1 : 0;
  c.out_of_domain = outsideDomain(e) ? 1 : 0;
  c.steps_ago = static_cast<uint32_t>(std::min<uint64_t>(t_optimizer_steps - e.step, UINT32_MAX));
  return c;
}

// Of the step's kept ops, the first that read them from memory another process shares (a
// DataLoader worker's batch: batch 27's per-image standardisation made 0/0 of a blank image in
// the worker, and the search said "in the parameters or the data"): a sentence saying so, else
// empty. A NaN made in another process is searched for there, by its own sentinels.
std::string sharedSource(const PastOps& past) {
  for (size_t i = past.stepStart(); i < past.size(); ++i)
    for (const TensorNote& in : past[i].inputs.tensors()) {
      const at::Tensor t = in.asSeen();
      if (t.defined() && sharedStorage(t) && scanTensor(t).any())
        return std::string("; ") + past[i].op + " read them from memory shared with another " +
               "process (a DataLoader worker's batch): they were made there, where the worker's "
               "own checks would find them";
    }
  return {};
}

// A sentinel has just started a search: the earliest op since the last optimizer step began
// whose outputs, still held as it returned them, hold NaN/Inf made from finite inputs
// (directly, or through ops whose results are gone or overwritten) is the origin, reported at
// once. Ops passing along values their inputs or the program's constants held (-inf masks) are
// passed over. Without an origin, the earliest op seen holding values whose inputs are unknown
// is the search's to mention. True when it found the origin. `dry`: whether it would, reporting
// nothing.
bool lookBack(bool dry = false) {
  if (g_look_back == 2 && !t_rate.keep) {
    if (dry) return false;
    const std::string why =
        "not done: this thread ran " + std::to_string(static_cast<int64_t>(t_rate.rate)) +
        " ops a second, where keeping them costs more than it may (" +
        std::to_string(static_cast<int>(
            std::lround(100 * t_rate.rate * t_rate.keepCost()))) +
        "% of its time, at most " + std::to_string(static_cast<int>(100 * kKeepShare)) +
        "% and " + std::to_string(static_cast<int64_t>(kLookBackRate)) +
        " ops a second; nan_origin.look_back: true keeps them)";
    g_api->nan_looked_back(nullptr, nullptr, 0, 0, nullptr, 0, why.c_str());
    return false;
  }
  // Its reads (as_strided, item) are fumi's: not the program's ops, counted or checked, nor
  // looked back from (a checked call's look-back before its check, every call checked: each
  // as_strided's own look-back, endlessly).
  const QuietScope quiet;
  const PastOps& past = pastOps();
  // What one pass over the ops saw, where it found no origin.
  struct Seen {
    const fumi_past_call* unknown = nullptr;
    size_t unknown_index = 0;  // its place in the ring
    std::vector<fumi_past_call> unknown_through;  // the ops it was followed back through
    // The earliest op holding them that got them in its input tensors (ops that made them from
    // the program's constants, a -inf mask, are passed over: deliberate, and most jobs hold
    // one), one that got NaN first: a mask's -inf, passed along by the ops after it, is no
    // NaN's.
    const fumi_past_call* passed = nullptr;
    const fumi_past_call* passed_inf = nullptr;
    size_t passed_index = 0, passed_inf_index = 0;
  };
  // The calls a provenance went through that may have made the values, in the order they ran:
  // for NaN from Inf, those from the nearest op that got the Inf to op `i`; else all it followed
  // (up to kMaxThrough: libfumi picks the likeliest maker among them and lists the nearest; a
  // forward sqrt whose NaN a `where` dropped, its gradient NaN, lies 5 ops behind 16 nearer
  // backward ones: batch 23).
  const auto ranThrough = [&past](const Provenance& p, size_t i, bool from_inf) {
    std::vector<size_t> order;
    if (from_inf && !p.readers.empty())
      for (size_t k = p.readers.front(); k != i && order.size() < kMaxThrough; k = p.from[k])
        order.push_back(k);
    else
      order = p.through;
    std::sort(order.begin(), order.end());
    std::vector<fumi_past_call> calls;
    for (size_t k : order) {
      fumi_past_call c = pastCall(past, k);
      if (past[k].superseded && past[k].caller.site) {  // told as its caller, once
        c.site = past[k].caller.site;
        c.index = past[k].caller.index;
      }
      for (size_t j = k; j != i; j = p.from[j]) ++c.hops;
      const auto same = std::find_if(calls.begin(), calls.end(), [&c](const fumi_past_call& o) {
        return o.site == c.site && o.index == c.index;
      });
      if (same == calls.end()) calls.push_back(c);
      else same->hops = std::min(same->hops, c.hops);
    }
    return calls;
  };
  // Reports kept op `i` as the origin (or, with `through`, as the holder of what the likeliest
  // of those made: libfumi's choice), holding `out`.
  const auto tell = [&past](size_t i, const char* detail, const NonFinite& out,
                            const std::vector<fumi_past_call>& through) {
    fumi_past_call call = pastCall(past, i);
    for (const TensorNote& o : past[i].outputs)
      if (const at::Tensor t = o.asSeen(); t.defined() && t.is_floating_point() && readable(t))
        call.positive_inf = call.positive_inf || at::isposinf(t).any().item<bool>();
    g_api->nan_looked_back(&call, detail, out.nan, out.inf, through.data(), through.size(),
                           nullptr);
    noteOrigin(past[i].call.site, past[i].call.index, out);
  };
  // What kept op `i`'s outputs hold now, where still as it returned them (not rewritten since).
  const auto heldNow = [&past](size_t i, const LookBackMemo& memo) {
    NonFinite out;
    for (const TensorNote& o : past[i].outputs)
      if (const at::Tensor t = o.asSeen(); t.defined() && !memo.rewrittenSilently(o, i))
        out.add(scanTensor(t));
    return out;
  };
  // Where holder `i`'s values came through ops whose results are gone (the maker a guess among
  // them), the first op of the step before it that made non-finite values for certain, of an op
  // among them, its own results gone too, where that is not one of them (those libfumi weighs:
  // the first division by 0, a call outside its domain); else npos. The evidential loss's
  // `digamma` of a 0 on one line, its results all gone, `digamma`s on the next line held:
  // batch 35 named the later line's, of a finite input.
  const auto earlierMaker = [&past, &heldNow](size_t i, const Provenance& p,
                                              const LookBackMemo& memo) {
    if (p.through.empty()) return LookBackMemo::npos;
    const auto inChain = [&](const char* op) {
      return std::strcmp(op, past[i].op) == 0 ||
             std::any_of(p.through.begin(), p.through.end(),
                         [&](size_t k) { return std::strcmp(op, past[k].op) == 0; });
    };
    for (size_t k = memo.start(); k < i; ++k) {
      const PastOp& e = past[k];
      if (e.superseded || !inChain(e.op)) continue;
      if (heldNow(k, memo).any() || !certainMaker(e)) continue;
      return k < p.from.size() && p.from[k] != LookBackMemo::npos ? LookBackMemo::npos : k;
    }
    return LookBackMemo::npos;
  };
  // The ops from memo.start() on, in the order they ran: what lookBack returns where one held
  // values made from finite ones (or their spread), else nothing, `seen` what it passed over.
  const auto pass = [&](LookBackMemo& memo, Seen& seen) -> std::optional<bool> {
    for (size_t i = memo.start(); i < past.size(); ++i) {
      const PastOp& e = past[i];
      if (e.superseded || undefinedOutput(e.op)) continue;
      const NonFinite out = heldNow(i, memo);
      if (!out.any()) continue;
      const Provenance p = provenance(past, i, memo);
      if (p.known != LookBackMemo::npos) {  // the spread of an origin reported before: no search
        if (dry) return false;
        g_api->nan_looked_back(&past[p.known].call, "spread", 0, 0, nullptr, 0, nullptr);
        return true;
      }
      // A mask's -inf the program wrote (masked_fill's constant) followed back to from a
      // gradient or an update: a softmax took it to 0 in a forward pass whose loss no sentinel
      // saw non-finite (a fully masked row's NaN shows there). No NaN from Inf, the values
      // made of finite ones (batch 25: a transformer's causal mask named for its cosine
      // head's 0/0 in the backward pass).
      const bool mask_only = p.bad.nan == 0 && p.bad.inf > 0 && p.bad.inf == p.constant_inf &&
                             e.call.phase && (std::strcmp(e.call.phase, "backward") == 0 ||
                                              isOptimizerPhase(e.call.phase));
      // NaN from inputs, or through ops whose results are gone, that held Inf and no NaN (a
      // softmax over a row masked_fill set to -inf: batch 18 saw it passed over when the mask's
      // result was gone, and the NaN named later at an optimizer's 0 * inf).
      const bool nan_from_inf =
          p.bad.nan == 0 && p.bad.inf > 0 && out.nan > 0 && !p.unknown && !mask_only;
      // A division by an exact 0 among the ops its values came through (or the holder itself)
      // made non-finite values whatever its dividend held: where some input is unknown (an
      // EMA's `q.data * m`, q's memory replaced by `.data =` since), it is still their maker.
      const bool by_zero =
          p.unknown && !p.bad.any() &&
          (dividesByZero(e) || std::any_of(p.through.begin(), p.through.end(),
                                           [&past](size_t k) { return dividesByZero(past[k]); }));
      // Made of a Python number that is not finite (a loss's `- np.log(k) * d` with k = 0: every
      // loss -inf; batch 36 searched and blamed the parameters or the data): the op that took
      // it in, made of a non-finite scalar argument.
      if (p.numbers.any() && p.bad.nan == p.numbers.nan && p.bad.inf == p.numbers.inf &&
          !p.unknown && !mask_only) {
        if (dry) return true;
        const size_t k = p.number_reader;
        tell(k, "nonfinite_scalar", k == i ? out : heldNow(k, memo), {});
        return true;
      }
      if (((!p.bad.any() || mask_only) && !p.unknown) || nan_from_inf || by_zero) {
        if (dry) return true;
        if (const size_t k = nan_from_inf ? LookBackMemo::npos : earlierMaker(i, p, memo);
            k != LookBackMemo::npos) {
          tell(k, "appeared", domainFault(past[k]), {});
          return true;
        }
        // A loss scale's overflow found looking back is one as at its call.
        bool scalar = true;
        for (const TensorNote& o : e.outputs) scalar = scalar && o.asSeen().numel() == 1;
        tell(i,
             nan_from_inf ? "nan_from_inf"
                          : originDetail(scalar, out,
                                         p.through.empty() && scalesUp(e.op, e.inputs)),
             out, ranThrough(p, i, nan_from_inf));
        return true;
      }
      if (p.unknown && !p.bad.any() && !seen.unknown) {
        seen.unknown = &e.call;
        seen.unknown_index = i;
        seen.unknown_through = ranThrough(p, i, false);
      }
      if (p.held && p.bad.nan > 0 && out.nan > 0 && !seen.passed) {
        seen.passed = &e.call;
        seen.passed_index = i;
      }
      if (p.held && !seen.passed_inf) {
        seen.passed_inf = &e.call;
        seen.passed_inf_index = i;
      }
    }
    return std::nullopt;
  };
  const uint64_t seen_before =
      t_nonfinite_step == t_optimizer_steps ? t_nonfinite_step_before : t_nonfinite_step;
  Seen seen;
  {
    LookBackMemo memo(past, past.stepStart());
    memo.start_finite = t_optimizer_steps > 0 && (seen_before == UINT64_MAX ||
                                                  seen_before + 1 < t_optimizer_steps);
    if (const std::optional<bool> found = pass(memo, seen)) return *found;
  }
  // They came in through the optimizer step that began this step: an update by gradients
  // holding them, made in the step before's backward pass, where no sentinel saw them (a sqrt's
  // gradient at 0; the NaN of a sqrt a `where` did not select, its gradient NaN; batch 23,
  // whose searches began at the next loss). Looked for over the step before, its parameters as
  // they were then (LookBackMemo::unwrittenBefore), where it saw nothing non-finite.
  const fumi_past_call* via =
      seen.unknown ? seen.unknown : seen.passed ? seen.passed : seen.passed_inf;
  const size_t via_index = seen.unknown  ? seen.unknown_index
                           : seen.passed ? seen.passed_index
                                         : seen.passed_inf_index;
  size_t before_start = past.previousStepStart();  // after that optimizer step's own ops
  while (before_start < past.stepStart() && isOptimizerPhase(past[before_start].call.phase))
    ++before_start;
  if (via && isOptimizerPhase(via->phase) && before_start < past.stepStart() &&
      (seen_before == UINT64_MAX || seen_before + 1 < t_optimizer_steps)) {
    {
      LookBackMemo memo(past, before_start);
      Seen before;
      if (const std::optional<bool> found = pass(memo, before)) return *found;
    }
    // Nothing of the step before holds them now: the ops that made them returned temporaries,
    // long gone, and the gradients the update read were zeroed since (zero_grad's zero_, in
    // place) or hold what that step's accumulation wrote (a custom Function's backward dividing
    // by a zero norm; batch 24's DANN and VQ-VAE: "origin not found"). The update that read them
    // is followed back through the memory's writers of the step before, the optimizer's own
    // state as the step before began taken as finite too: where every path ends in finite
    // values, the likeliest maker among the ops followed is the origin (libfumi's choice), the
    // update its holder. Only where the values reached the program past the update (a sentinel
    // outside the optimizer step): state the optimizer watch sees holding Inf since a step not
    // watched (m / inf = 0: the parameters stay finite) is not taken for finite.
    if (!isOptimizerPhase(g_api->phase())) {
      LookBackMemo memo(past, before_start);
      memo.state_finite = true;
      const size_t u = via_index;
      const Provenance p = provenance(past, u, memo);
      if (!p.bad.any() && !p.unknown && p.known == LookBackMemo::npos && !p.through.empty()) {
        if (dry) return true;
        tell(u, "appeared", heldNow(u, memo), ranThrough(p, u, false));
        return true;
      }
    }
  }
  if (dry) return false;
  // In the parameters or the optimizer's state as the step began (read by its update, or by ops
  // that got them in their inputs: a discriminator stepped every other iteration, its weights
  // read by the next forward pass), as they were in the step before: an origin reported before
  // reached them (libfumi's to know), or one never found.
  const bool at_start = via && (isOptimizerPhase(via->phase) || !seen.unknown);
  const char* carried =
      at_start && seen_before != UINT64_MAX && seen_before + 1 == t_optimizer_steps ? "carried"
                                                                                     : nullptr;
  const fumi_past_call* unknown = seen.unknown;
  const std::vector<fumi_past_call>& unknown_through = seen.unknown_through;
  const fumi_past_call* passed = seen.passed;
  const fumi_past_call* passed_inf = seen.passed_inf;
  // The step's first ops out of the ring (its first step, before it grew; a step past
  // kMaxCapacity): the origin may have been among them.
  const std::string lost =
      past.holdsStep() ? std::string()
                       : "the first " + std::to_string(past.sinceStep() - past.size()) +
                             " of the " + std::to_string(past.sinceStep()) +
                             " ops since the last optimizer step were no longer kept (the "
                             "origin may be among them)";
  if (unknown)
    g_api->nan_looked_back(
        unknown, carried, 0, 0, unknown_through.data(), unknown_through.size(),
        ("its inputs no longer held as it saw them" + (lost.empty() ? "" : "; " + lost))
            .c_str());
  else if (!lost.empty())
    g_api->nan_looked_back(nullptr, nullptr, 0, 0, nullptr, 0,
                           ("no op kept since made them from finite inputs, but " + lost).c_str());
  else if (passed || passed_inf)  // batch 20: a job that died of its NaN: not a word from it
    g_api->nan_looked_back(passed ? passed : passed_inf, carried, 0, 0, nullptr, 0,
                           ("which got them in its inputs: they were there when the step began "
                            "(in the parameters or the data), or written where fumi does not see "
                            "(.data, from_numpy, a kernel's own buffer)" +
                            sharedSource(past))
                               .c_str());
  return false;
}

// AccumulateGrad (its node runs only where a parameter's gradient is written: autograd.grad's
// captured inputs enter its range but not it) tells libfumi's loss scaling.
std::unique_ptr<at::ObserverContext> onNodeStart(const at::RecordFunction& fn) {
  t_node_seqs.push_back(fn.seqNr());
  const char* name = fumi::torch_compat::opName(fn);
  t_node_sqrt.push_back(std::strcmp(name, "SqrtBackward0") == 0);
  if (std::strcmp(name, "torch::autograd::AccumulateGrad") == 0) g_api->gradient_accumulated();
  return nullptr;
}
void onNodeEnd(const at::RecordFunction&, at::ObserverContext*) {
  if (!t_node_seqs.empty()) t_node_seqs.pop_back();
  if (!t_node_sqrt.empty()) t_node_sqrt.pop_back();
}

// Records the op that has just returned, for lookBack.
// `since`: pastOps().pushed() when the op began (what it ran is recorded after that); `seq`: its
// RecordFunction's sequence number (forwardOf).
void recordPast(const char* op, void* site, uint64_t index, InputNote&& inputs,
                const std::vector<c10::IValue>& outputs, uint64_t since, int64_t seq) {
  PastOp past;
  past.call = fumi_past_call{site, index, g_api->phase(), 0, 0, {}, 0, 0, nullptr, 0, 0};
  past.seq = seq;
  past.node_seq = t_node_seqs.empty() ? -1 : t_node_seqs.back();
  past.step = t_optimizer_steps;
  past.op = op;
  past.inputs = std::move(inputs);
  for (size_t i = 0; i < outputs.size(); ++i)
    if (i != 1 || !workspaceOutput(op, 1))
      forEachTensor(outputs[i],
                    [&](const at::Tensor& t, int) { past.outputs.emplace_back(t, false, true); });
  if (past.outputs.empty()) return;
  // An in-place write (its one output is memory an input brought): where it wrote.
  if (outputs.size() == 1 && outputs[0].isTensor()) {
    const at::Tensor& t = outputs[0].toTensor();
    const bool sparse = t.is_sparse() || t.is_sparse_csr();
    bool in_place = false;
    for (const TensorNote& in : past.inputs.tensors())
      in_place = in_place || in.sharesMemory(past.outputs[0]) ||
                 (sparse && in.sameTensor(past.outputs[0]));
    // Written with no version bump: an in-place op inside a kernel below autograd
    // (binary_cross_entropy_with_logits builds `1 - target` in place and multiplies it by the
    // logits in place, its versions unchanged; the `sub_` before that `mul_` read as holding
    // the NaN it wrote: batch 36, an embedding's NaN row named at the loss's `sub_`).
    // Only ops named in place (`mul_`): others return an input itself or a view of it (a
    // `contiguous` of a contiguous tensor), writing nothing.
    const size_t len = std::strlen(op);
    if (len > 0 && op[len - 1] == '_')
      for (const TensorNote& in : past.inputs.tensors())
        if (in.sharesMemory(past.outputs[0]) && in.version() >= 0 &&
            in.version() == past.outputs[0].version()) {
          past.silent_outputs |= 1;
          break;
        }
    if (in_place && sparse && overwrites(op)) {
      // a sparse tensor overwritten whole (zero_grad's zero_ of an embedding's sparse gradient:
      // what it held before is no source of what it holds now); no strided region to read
      past.region = std::make_unique<PastOp::Region>();
      past.region->whole = true;
    } else if (in_place && t.has_storage() && !t.is_inference()) {
      past.region = std::make_unique<PastOp::Region>();
      past.region->offset = t.storage_offset();
      past.region->sizes.assign(t.sizes().begin(), t.sizes().end());
      past.region->strides.assign(t.strides().begin(), t.strides().end());
      past.region->dtype = t.scalar_type();
      past.region->whole = t.is_non_overlapping_and_dense() &&
                          t.numel() * static_cast<int64_t>(t.element_size()) ==
                              static_cast<int64_t>(t.storage().nbytes());
    }
  }
  // Batch norm's running statistics, written too (after the in-place test: not what it returns).
  for (TensorNote& w : past.inputs.takeWritten()) {
    if (past.outputs.size() < 64) past.silent_outputs |= uint64_t{1} << past.outputs.size();
    past.outputs.push_back(std::move(w));
  }
  past.nested = insideOperator();  // (the op returning is off the stack already)
  g_api->python_place(&past.call.place);  // where it ran: its line, should it be an origin
  PastOps& ring = pastOps();
  if (ring.pushed() != since) ring.supersede(since, past);
  ring.push(std::move(past));
}

// The ops running on this thread, innermost last: the sentinel names the op.
struct Running {
  void* site;
  uint64_t index;
  bool view;  // returns views of its inputs: neither watched nor scanned
  InputNote inputs;  // what watchOutputs reads of the inputs (none for views)
  uint64_t past_mark = 0;     // pastOps().pushed() when it began
  // A search ran when it began, or one begun inside it was looked back for already.
  bool searching = false;
  bool found_inside = false;  // an op it called was (or led to) a reported NaN/Inf origin
  bool state_watch = false;   // an optimizer's in-place write, watched (watchState)
  NonFinite state_before;     // what its first argument held before it
};
FUMI_LOCAL_TLS std::vector<Running> t_running;

// An optimizer's state holding Inf stops a layer for good and no NaN need follow: AdaBelief's
// second moment overflowed on one gradient 1e38 too large, every later step of that layer was
// m / inf = 0, and the loss stayed finite (batch 21). So every kStateEvery-th optimizer step of
// a thread, from its first, the in-place writes of the optimizer (its state and the parameters)
// are scanned before and after: Inf/NaN they make from finite values is an origin, at the
// optimizer's line; values already there start a search (made within the steps before), once
// for each op (an Inf in a moment stays: each watched step would see it again).
// Two reads of what each write touches, every eighth step (policy.md: within noise on resnet18
// with Adam).
constexpr uint64_t kStateEvery = 8;
FUMI_LOCAL_TLS std::vector<void*> t_state_seen;  // ops whose state started a search

// Whether in-place op `fn` in the optimizer's phase is one to watch (above), and if so what its
// first argument holds now, before it runs. Not one a kernel runs inside an op: Adamax's
// `torch.amax(norm_buf, 0, out=exp_inf)` fills its output with the reduction's identity, -inf,
// before reducing into it (batch 38: every Adamax job's first step, an "origin" made of a
// non-finite scalar).
bool watchesState(const at::RecordFunction& fn, NonFinite& before) {
  if (t_optimizer_steps == 0 || (t_optimizer_steps - 1) % kStateEvery != 0) return false;
  if (!inPlaceOp(fumi::torch_compat::opName(fn)) || insideOperator(1)) return false;
  const char* phase = g_api->phase();
  if (!phase || std::strcmp(phase, "optimizer") != 0) return false;
  const auto inputs = fumi::torch_compat::inputsOf(fn);
  if (inputs.empty()) return false;
  bool floating = false;
  forEachTensor(inputs[0], [&](const at::Tensor& t, int) {
    if (!t.is_floating_point() || !t.device().is_cpu() || !readable(t)) return;
    floating = true;
    before.add(scanTensor(t));
  });
  return floating;
}

// A watched optimizer write has returned: true when it made Inf/NaN from finite values (an
// origin, reported); values it got, or from inputs no longer there, start a search. Its other
// inputs (the gradient) it did not write: read as they are now.
bool watchState(const Running& op, const std::vector<c10::IValue>& outputs) {
  const NonFinite out = scanValues(outputs);
  if (!out.any()) return false;
  bool got = op.state_before.any();
  const auto& tensors = op.inputs.tensors();
  for (size_t i = 1; i < tensors.size() && !got; ++i) {
    const at::Tensor t = tensors[i].live();
    got = !t.defined() || scanTensor(t).any();
  }
  // Finite tensors and a scalar argument of inf or NaN (a learning rate of inf: a schedule's
  // 1/sqrt(0) at the first step, batch 35): made here, of that scalar, not "got".
  if (!got && op.inputs.nonfiniteScalar()) {
    reportOriginCall(op.site, op.index, "nonfinite_scalar", out);
    return true;
  }
  if (got) {
    if (std::find(t_state_seen.begin(), t_state_seen.end(), op.site) == t_state_seen.end()) {
      t_state_seen.push_back(op.site);
      g_api->nonfinite_seen(op.site, op.index);
    }
    return false;
  }
  reportOrigin(op.site, op.index, outputs, out, false);
  return true;
}

// Op `site` call `index` has returned with `outputs`: the first op reading the held-back
// origin's results decides it; another op's end while that one is not running (it failed)
// reports it.
void pendingAtEnd(void* site, uint64_t index, const std::vector<c10::IValue>& outputs) {
  if (!t_pending.site) return;
  if (t_running.size() < t_pending.depth) return reportPending();  // what it ran in ends
  if (!t_pending.reader) return;
  if (site == t_pending.reader && index == t_pending.reader_index) {
    NonFinite left;
    if (t_pending.in_place) {
      for (const auto& weak : t_pending.outputs)
        if (const at::Tensor o(weak.lock()); o.defined()) left.add(scanTensor(o));
    } else {
      left = scanValues(outputs);
    }
    if (left.any()) reportPending();
    else t_pending = PendingOrigin{};
    return;
  }
  for (const Running& r : t_running)
    if (r.site == t_pending.reader && r.index == t_pending.reader_index)
      return;  // an op inside the reader
  reportPending();
}

bool g_capture = false;  // the policy checks torch ops: the callback receives inputs/outputs

// The operator calls running on this thread with their inputs recorded, innermost last: each
// one's site and whether a rule may check it (for its implementation steps: callerChecksIt),
// and whether it reads an input in shared memory, for libfumi's probe (adapter_api.h
// set_shared_probe). The RecordFunction is only a key: a call whose end this thread never sees
// (a range ended elsewhere) is dropped when a call below it ends.
struct SharedEntry {
  const at::RecordFunction* fn;
  void* site;
  bool checkable;
  bool shared;
  SiteFacts facts;
};
FUMI_LOCAL_TLS std::vector<SharedEntry> t_shared;

// Whether an op running around the calling one (the `skip` innermost calls left out: the op
// itself, as it begins) has `fact`.
bool runningAround(bool SiteFacts::*fact, size_t skip) {
  for (size_t i = 0; i + skip < t_shared.size(); ++i)
    if (t_shared[i].facts.*fact) return true;
  return false;
}

// One that writes an argument: what the ops inside it see may be a proxy of its output it
// deletes outright (writesArgument), held by nothing past its return.
bool insideWriter(size_t skip) { return runningAround(&SiteFacts::writes, skip); }

// An operator, not a range: a kernel's own ops run inside one.
bool insideOperator(size_t skip) { return runningAround(&SiteFacts::op, skip); }

// The operator (not a range) the calling one runs inside, or null (the op itself on top).
const SharedEntry* enclosingOp() {
  for (size_t i = t_shared.size(); i-- > 1;)
    if (t_shared[i - 1].facts.op) return &t_shared[i - 1];
  return nullptr;
}

void pushShared(const at::RecordFunction& fn, void* site, bool checkable, const SiteFacts& facts) {
  bool shared = false;  // ranges (autograd nodes, optimizer steps) have no inputs
  for (const c10::IValue& v : fumi::torch_compat::inputsOf(fn))
    forEachTensor(v, [&](const at::Tensor& t, int) { shared = shared || sharedStorage(t); });
  // Calls whose ends this thread never sees, with no call below them to end, would stay: a
  // stack this deep holds them, and the oldest go.
  if (t_shared.size() >= 4096) t_shared.erase(t_shared.begin(), t_shared.begin() + 2048);
  t_shared.push_back(SharedEntry{&fn, site, checkable, shared, facts});
}

void popShared(const at::RecordFunction& fn) {
  for (size_t i = t_shared.size(); i-- > 0;)
    if (t_shared[i].fn == &fn) {
      t_shared.resize(i);
      return;
    }
}

int readsSharedMemory() {
  for (const SharedEntry& e : t_shared)
    if (e.shared) return 1;
  return 0;
}
// Ops that are another op's implementation step, with that op: called by it, a call is the same
// call (a rule naming both would sample it twice), left to its caller where a rule may check
// that; called on its own (a traced model's graph calls aten::_convolution directly), it is
// checked as itself.
constexpr std::pair<const char*, const char*> kImplementationOf[] = {
    {"aten::_convolution", "aten::convolution"}};

// The caller's name when the call on top of this thread's stack (`site`) is the implementation
// step of a caller some rule may check, else null.
const char* callerChecksIt(void* site) {
  constexpr size_t kCount = std::size(kImplementationOf);
  static const std::array<std::pair<void*, void*>, kCount> sites = [] {
    std::array<std::pair<void*, void*>, kCount> out{};
    for (size_t i = 0; i < kCount; ++i)
      out[i] = {siteNamed(kImplementationOf[i].first), siteNamed(kImplementationOf[i].second)};
    return out;
  }();
  if (t_shared.size() < 2 || t_shared.back().site != site) return nullptr;
  const SharedEntry& caller = t_shared[t_shared.size() - 2];
  if (!caller.checkable) return nullptr;
  for (size_t i = 0; i < kCount; ++i)
    if (sites[i].first == site && sites[i].second == caller.site)
      return kImplementationOf[i].second;
  return nullptr;
}

// Calls nested inside a call being checked are part of the same computation (linear -> addmm):
// only the outermost sampled call is checked. `t_checked_op`: why the nested ones were not.
FUMI_LOCAL_TLS int t_checked_depth = 0;
FUMI_LOCAL_TLS std::string t_checked_op;
FUMI_LOCAL_TLS bool t_checked_autocast = false;  // the outermost one ran under autocast
FUMI_LOCAL_TLS CapturedCall* t_checked_call = nullptr;  // the outermost one

// `view`: the op may return views of its inputs (returnsView; CapturedCall::check).
std::unique_ptr<CapturedCall> maybeCapture(const at::RecordFunction& fn, void* site,
                                           uint64_t index, bool view) {
  const auto name = fn.operator_name();
  if (!name) return nullptr;  // a range (autograd node, optimizer step), not an operator
  const auto inputs = fumi::torch_compat::inputsOf(fn);
  const Facts facts = factsOf(inputs);
  const fumi_dtype autocast = autocastFor(facts.device);
  // Calls a rule selects but fumi does not check are sampled like any call, so that the report
  // says why (an every-call rule showed sums and means neither checked nor skipped).
  const auto skipSampled = [&](fumi_dtype dtype, int64_t size, const std::string& why) {
    if (void* token = g_api->sample(site, index, size, dtype, facts.device.c_str(), autocast))
      g_api->skip(site, token, why.c_str());
    return nullptr;
  };
  if (const char* caller = callerChecksIt(site)) {
    // Never sampled (its own `first:` calls are then the ones it makes on its own); counted
    // skipped where its caller is being checked, so that an every-call rule accounts for every
    // call, and passed over otherwise (an eager job's every convolution would read "skipped").
    if (t_checked_depth > 0)
      g_api->skip(site, nullptr, (std::string("the implementation step of a checked call of ") +
                                  caller + " (checked as that call)")
                                     .c_str());
    return nullptr;
  }
  if (t_checked_depth > 0) {
    const int64_t size = std::max(facts.size, facts.any_size);
    if (t_checked_autocast && name->name == t_checked_op) {
      // Autocast's own call of the op on the cast inputs, which no rule selects (it runs outside
      // the autocast region): the user's one call shows as two, so it says which (batch 11:
      // every autocast op read "2 calls, 1 checked, 0 skipped").
      g_api->skip(site, nullptr, "autocast's call of the op on its cast inputs (checked as "
                                 "the call around it)");
      if (t_checked_call) t_checked_call->autocastCalled(inputs);
      return nullptr;
    }
    return skipSampled(facts.dtype, size,
                       "inside a checked call of " + t_checked_op + " (checked as part of it)");
  }
  // Inside an op writing an argument, or writing one itself inside another op: its tensors may be
  // a structured kernel's outputs or their proxies, which that kernel deletes outright as it
  // returns (c10::ExclusivelyOwned): torch.linalg.lu's lu_unpack.out, rerun by highprec, crashed
  // the process (batch 28). Checked as the op the program called.
  if (!t_shared.empty() && (insideWriter(1) || t_shared.back().facts.writes)) {
    if (const SharedEntry* outer = enclosingOp())
      return skipSampled(facts.dtype, std::max(facts.size, facts.any_size),
                         std::string("runs inside ") + fumi::torch_compat::opName(*outer->fn) +
                             " on tensors that op may delete as it returns (a structured "
                             "kernel's outputs)");
  }
  if (!facts.dense) {
    // A wrapper without storage (functorch's transforms): the op it runs underneath, on the
    // physical tensors, is observed in its turn. A layout fumi does not read is sampled like
    // any call, so that a rule that selects it says why it went unchecked (an every-call rule
    // on mm had checked a GCN's dense products only, silently: its adjacency is sparse).
    if (!facts.layout) return nullptr;
    return skipSampled(facts.dtype, facts.size,
                       std::string(facts.layout) + " tensors (fumi reads strided ones)");
  }
  if (facts.dtype == FUMI_DTYPE_UNKNOWN) {
    // complex32 (an every-call rule on bmm had checked a fifth of an FNO's calls, silently),
    // or integer and boolean tensors only (a boolean sum: nothing rounds).
    if (facts.complex)
      return skipSampled(FUMI_DTYPE_UNKNOWN, facts.size,
                         "complex32 tensors (fumi reads complex64 and complex128)");
    return skipSampled(FUMI_DTYPE_UNKNOWN, facts.any_size,
                       "no floating-point operand (integers or booleans: nothing rounds)");
  }
  void* token =
      g_api->sample(site, index, facts.size, facts.dtype, facts.device.c_str(), autocast);
  if (!token) return nullptr;
  const Clock::time_point sampled = Clock::now();
  try {
    const auto op = c10::Dispatcher::singleton().findOp(*name);
    if (!op) {
      g_api->skip(site, token, "not found in the dispatcher");
      return nullptr;
    }
    if (fumi::torch_compat::randomised(*op)) {
      g_api->skip(site, token, "random op (a rerun cannot reproduce it)");
      return nullptr;
    }
    if (cpuGeneratorHeldHere()) {
      g_api->skip(site, token,
                  "it runs inside a random op that holds the random generator (a step of that "
                  "op's draw)");
      return nullptr;
    }
    if (drawsDropout(*op, inputs)) {
      g_api->skip(site, token, "it draws dropout masks (a rerun cannot reproduce them)");
      return nullptr;
    }
    if (const char* why = noPrecisionToMeasure(*op, inputs)) {
      g_api->skip(site, token, why);
      return nullptr;
    }
    if (undefinedOutput(name->name)) {
      g_api->skip(site, token, "its output is uninitialised memory or an alias");
      return nullptr;
    }
    if (fumi::torch_compat::changesOnlyMetadata(*op)) {
      g_api->skip(site, token, "it changes only its input's metadata (it computes no values)");
      return nullptr;
    }
    const WrittenMemory written_memory(*op, inputs);
    if (copiedBytes(*op, inputs, written_memory) > g_api->scratch_budget()) {
      g_api->skip(site, token, "copies of the inputs it writes would exceed the scratch budget");
      return nullptr;
    }
    auto captured =
        std::make_unique<CapturedCall>(site, token, index, *op, facts, autocast, view);
    captured->capture(inputs, written_memory);
    captured->before_s = secondsSince(sampled);
    captured->op_started = Clock::now();
    if (t_checked_depth++ == 0) {
      t_checked_op = name->name;
      t_checked_autocast = autocast != FUMI_DTYPE_UNKNOWN;
      t_checked_call = captured.get();
    }
    return captured;
  } catch (const std::exception& e) {
    g_api->skip(site, token, e.what());
    return nullptr;
  }
}

// The TorchScript functions this thread runs (their TORCHSCRIPT_FUNCTION ranges).
FUMI_LOCAL_TLS int t_script_depth = 0;

// Where the calling thread runs in TorchScript code (libfumi's set_script_frames): an op a
// scripted function runs has no Python frame of its own, its innermost Python frame is the line
// calling the function (batch 31: WaveGlow's `@torch.jit.script` gate, a `sqrt` placed at its
// caller). The interpreter's call stack (what the profiler's with_stack reads), innermost first,
// each frame with a file (an autodiff graph's nodes have none); its text interned for the
// process, each thread's keyed by the frames' sources and offsets (a line of scripted code run).
const char* scriptFrames() {
  if (t_script_depth <= 0) return nullptr;
  try {
    const std::vector<torch::jit::StackEntry> entries = torch::jit::currentCallstack();
    FUMI_LOCAL_TLS std::string key;  // reused: no allocation once a thread has run a place
    key.clear();
    for (const torch::jit::StackEntry& e : entries) {
      const void* source = e.range.source().get();
      const size_t start = e.range.start();
      key.append(reinterpret_cast<const char*>(&source), sizeof source);
      key.append(reinterpret_cast<const char*>(&start), sizeof start);
    }
    if (key.empty()) return nullptr;
    FUMI_LOCAL_TLS std::unordered_map<std::string, const char*> seen;  // this thread's, no lock
    if (auto found = seen.find(key); found != seen.end()) return found->second;
    std::string text;
    for (const torch::jit::StackEntry& e : entries) {
      const auto where = e.range.file_line_col();
      if (!where) continue;
      text += (text.empty() ? "" : "\n") + std::get<0>(*where) + ":" +
              std::to_string(std::get<1>(*where)) + " in " + e.filename + " (TorchScript)";
    }
    static auto* mutex = new std::mutex;  // never destroyed: threads may run at exit
    static auto* interned = new std::set<std::string>;
    if (seen.size() >= 65536) return nullptr;  // a bound, not reached in practice
    const char* kept = nullptr;
    if (!text.empty()) {
      std::lock_guard<std::mutex> lock(*mutex);
      kept = interned->insert(std::move(text)).first->c_str();
    }
    seen.emplace(key, kept);
    return kept;
  } catch (...) {
    return nullptr;
  }
}

// Whether every tensor argument of the op is a plain strided tensor with storage, its inputs
// boxed: not a functorch wrapper (vmap's batched tensors, grad's: their batching rules run the
// product underneath on the physical tensors, which are checked there), nor a sparse or opaque
// one, whose products run other kernels inside.
bool plainOperands(const at::RecordFunction& fn) {
  const auto inputs = fumi::torch_compat::inputsOf(fn);
  bool plain = !inputs.empty();
  for (const c10::IValue& v : inputs)
    forEachTensor(v, [&plain](const at::Tensor& t, int) {
      plain = plain && t.layout() == at::kStrided && t.has_storage();
    });
  return plain;
}

// Whether this thread's RecordFunction was turned off by onStart for an op whose inner ops are
// not observed (unobservedInside), to be turned on again as that op ends: nothing inside it is
// observed, so the next end this thread sees is its own. Not while a thread-local observer (the
// profiler) is on: the program's own profile keeps them; nor for other than plain operands.
FUMI_LOCAL_TLS bool t_unobserved = false;

// Nothing may escape into the op: an exception from an observer would fail the program's call.
// The context push happens whatever fails (a null site is an unnamed entry), so that onEnd's
// pop always pairs with it.
std::unique_ptr<at::ObserverContext> onStart(const at::RecordFunction& fn) {
  if (fn.scope() == at::RecordScope::TORCHSCRIPT_FUNCTION) {
    ++t_script_depth;
    return nullptr;
  }
  void* site = nullptr;
  SiteFacts facts;
  try {
    site = siteFor(fn, facts);
  } catch (...) {
  }
  if (facts.opaque && !t_unobserved && !at::hasThreadLocalCallbacks() && plainOperands(fn)) {
    at::enableRecordFunction(false);
    t_unobserved = true;
  }
  const bool view = facts.view;
  int checkable = 0;
  const uint64_t index = g_api->count_call(site, &checkable);
  try {
    pendingAtStart(fn, site, index, view);
  } catch (...) {
  }
  g_api->push_context(site, index);
  if (!g_sentinels && !g_capture) return nullptr;
  try {
    pushShared(fn, site, checkable != 0, facts);
    // Whether a search runs as the op begins (read once: its Running entry and its probe).
    const bool searching = g_sentinels && g_api->nan_search() != 0;
    if (g_sentinels) {
      const auto inputs = fumi::torch_compat::inputsOf(fn);
      const auto note = [&] {
        t_running.push_back(Running{site, index, view,
                                    view ? InputNote()
                                         : InputNote(inputs, pastKept(),
                                                     fumi::torch_compat::opName(fn)),
                                    pastOps().pushed(), searching, false, false, {}});
      };
      if (!view && pastKept()) t_rate.begin.run(note);
      else note();
      Running& running = t_running.back();
      running.state_watch = !view && !searching && watchesState(fn, running.state_before);
      // a sqrt's gradient dividing by twice its result: an exact 0 there divides by 0 (batch
      // 36: a pair distance of a self-loop edge; the sqrt's result gone by the look-back)
      if (!view && !t_node_sqrt.empty() && t_node_sqrt.back() && inputs.size() >= 2 &&
          inputs[1].isTensor() && pastKept() &&
          std::strncmp(fumi::torch_compat::opName(fn), "aten::div", 9) == 0)
        running.inputs.noteZeroDivisor(inputs[1].toTensor());
    }
    // A training step begins: a running search counts it, attribution starts afresh.
    if (std::strncmp(fumi::torch_compat::opName(fn), "Optimizer.step", 14) == 0) {
      g_api->optimizer_step();
      producers().clear();
      ++t_optimizer_steps;
      if (g_sentinels) pastOps().markStep();
    }
    if (!g_sentinels && !checkable) return nullptr;
    std::unique_ptr<OpObservation> obs;
    if (checkable && g_capture)
      if (auto captured = maybeCapture(fn, site, index, view)) {
        obs = std::make_unique<OpObservation>(site, index);
        obs->checked = std::move(captured);
      }
    if (searching && !view) {
      if (!obs) obs = std::make_unique<OpObservation>(site, index);
      probeInputs(fn, *obs);
    }
    return obs;
  } catch (...) {
    return nullptr;
  }
}

// Call `index` of `site` is a sentinel where looking back finds an origin among the kept ops.
// False where it found none.
bool lookBackFrom(void* site, uint64_t index) {
  if (!lookBack(true)) return false;
  g_api->nonfinite_seen(site, index);
  if (g_api->nan_search()) lookBack();
  return true;
}

// Looks back from call `index` of `site` (lookBackFrom), at most once an optimizer step and only
// while the thread keeps its ops; false where it did not or found nothing. For an op raising an
// exception: the program may die of it with no sentinel having seen the NaN that caused it
// (batch 20's spline flow: every row NaN, a selection of the rows in range left empty,
// torch.min of nothing raised six ops after the NaN). Where looking back finds an origin, the
// raising op is its sentinel and it is reported before the exception reaches the program; else
// nothing is said (most exceptions have nothing to do with NaN). And for the program's own
// NaN checks (programCheck).
FUMI_LOCAL_TLS uint64_t t_raised_step = UINT64_MAX;
bool lookBackOnce(void* site, uint64_t index) {
  if (!pastKept() || !site || g_api->nan_search() || t_raised_step == t_optimizer_steps)
    return false;
  t_raised_step = t_optimizer_steps;
  return lookBackFrom(site, index);
}

// libfumi asks (adapter_api.h set_look_back_probe): a library call inside the op this thread
// runs made NaN of Inf in its inputs; the Inf's maker is looked for first, as lookBackBeforeCheck
// does for a checked op's, the op its sentinel.
int lookBackProbe() {
  if (!g_sentinels || t_running.empty() || !pastKept() || g_api->nan_search()) return 0;
  const Running& op = t_running.back();
  if (op.view || !op.site) return 0;
  return lookBackFrom(op.site, op.index) ? 1 : 0;
}

// The program's own check for NaN/Inf seeing some: `torch.isnan(x).any()` (isinf, isposinf,
// isneginf) true, `torch.isfinite(x).all()` false, or the same through a logical_not or
// bitwise_not of the mask. RealNVP's guard, `if torch.isnan(exp_s).any(): raise` (batch 36),
// killed the job before any one-element result held the NaN of a 0/0 the default policy did not
// sample: "no violations". Looked back from as an op raising is (lookBackOnce): where the kept ops
// show an origin it is reported, the check (`aten::any` at the program's line) its sentinel; else
// nothing is said (data with missing values the program masks). Where such looks find nothing
// kFruitlessChecks times on a thread, it stops looking (a job checking data that holds NaN on
// every step).
struct NanMask {
  c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> mask{
      c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>()};
  bool finite = false;  // true where the values are finite (isfinite's), not where they are not
};
FUMI_LOCAL_TLS NanMask* t_nan_mask = nullptr;  // the thread's last mask made (owned)
FUMI_LOCAL_TLS int t_fruitless_checks = 0;
constexpr int kFruitlessChecks = 8;

// Op `op` has returned `outputs`, its inputs `inputs`: a mask made, or a mask reduced to its
// verdict (above).
void programCheck(const char* op, void* site, uint64_t index, const InputNote& inputs,
                  const std::vector<c10::IValue>& outputs) {
  if (std::strncmp(op, "aten::", 6) != 0) return;
  const char* verb = op + 6;
  if (verb[0] != 'i' && verb[0] != 'a' && verb[0] != 'l' && verb[0] != 'b') return;  // most ops
  if (outputs.size() != 1 || !outputs[0].isTensor()) return;
  const at::Tensor& out = outputs[0].toTensor();
  if (!out.defined() || out.scalar_type() != at::kBool) return;
  const bool finite = std::strcmp(verb, "isfinite") == 0;
  const auto ofMask = [&inputs]() {
    return t_nan_mask && !inputs.tensors().empty() &&
           inputs.tensors()[0].sameTarget(t_nan_mask->mask._unsafe_get_target());
  };
  if (finite || std::strcmp(verb, "isnan") == 0 || std::strcmp(verb, "isinf") == 0 ||
      std::strcmp(verb, "isposinf") == 0 || std::strcmp(verb, "isneginf") == 0 ||
      ((std::strcmp(verb, "logical_not") == 0 || std::strcmp(verb, "bitwise_not") == 0) &&
       ofMask())) {
    const bool flipped = (verb[0] == 'l' || verb[0] == 'b') ? !t_nan_mask->finite : finite;
    if (!t_nan_mask) t_nan_mask = new NanMask;  // (one per thread, for the process)
    t_nan_mask->mask = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>(
        out.getIntrusivePtr());
    t_nan_mask->finite = flipped;
    return;
  }
  const bool any = std::strncmp(verb, "any", 3) == 0 && (verb[3] == '\0' || verb[3] == '.');
  const bool all = std::strncmp(verb, "all", 3) == 0 && (verb[3] == '\0' || verb[3] == '.');
  if ((!any && !all) || out.numel() != 1 || !out.device().is_cpu() || !readable(out) ||
      !ofMask() || t_fruitless_checks >= kFruitlessChecks || !pastKept() ||
      g_api->nan_search() || t_raised_step == t_optimizer_steps)
    return;
  // non-finite values seen: any of "is not finite" true, all of "is finite" false (the other
  // pairs are vacuous over no elements)
  if (any == t_nan_mask->finite) return;
  const bool verdict = *static_cast<const bool*>(out.data_ptr());
  if (verdict == any && !lookBackOnce(site, index)) ++t_fruitless_checks;
}

// A checked call whose outputs hold NaN and inputs Inf but no NaN, before its check: a nan_inf
// check claims NaN it made of Inf ("nan_from_inf") as the origin, and the Inf's maker, found
// looking back later, was listed after it as a second one (batch 31: KD at a temperature of 0,
// the softmax of a division's Inf first). Where the thread keeps its ops, the maker is looked for
// first, this call its sentinel: found, the check's NaN is its spread. In the forward pass only:
// the backward pass's findings wait for the loss scaler's verdict (a scaled loss's overflow, by
// design, is no origin).
// `inputs`: the op's (RecordFunction's are gone once it returns).
void lookBackBeforeCheck(void* site, uint64_t index, const std::vector<c10::IValue>& outputs,
                         const InputNote& inputs) {
  const char* phase = g_api->phase();
  if (!g_sentinels || !site || !pastKept() || g_api->nan_search() || !phase ||
      std::strcmp(phase, "forward") != 0 || scanValues(outputs).nan == 0)
    return;
  NonFinite in;
  inputs.forEachLive([&in](const at::Tensor& t) {
    if (readable(t)) in.add(scanTensor(t));
  });
  if (in.nan == 0 && in.inf > 0) lookBackFrom(site, index);
}

// An in-place write into a parameter outside the optimizer's step, while libfumi holds NaN/Inf
// findings of the backward pass for the loss scaler's verdict: what it leaves non-finite came of
// the gradients (SAM's ascent step, p += rho * g / |g|, before the zero_grad that a scaler's
// skip would be: batch 25 counted the gradient's NaN "handled by the loss scaler", 0
// violations, every weight NaN).
void parameterWritten(const char* op, void* site, uint64_t index,
                      const std::vector<c10::IValue>& outputs) {
  if (outputs.size() != 1 || !outputs[0].isTensor() || !inPlaceOp(op)) return;
  const at::Tensor& t = outputs[0].toTensor();
  if (!t.defined() || !t.requires_grad() || !t.is_leaf() || !t.is_floating_point() ||
      isOptimizerPhase(g_api->phase()) || !g_api->held_findings() || !readable(t))
    return;
  if (scanTensor(t).any()) g_api->nonfinite_parameter(site, index);
}

void onEnd(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  if (fn.scope() == at::RecordScope::TORCHSCRIPT_FUNCTION) {
    if (t_script_depth > 0) --t_script_depth;  // (a forked task may end on another thread)
    return;
  }
  if (t_unobserved) {
    at::enableRecordFunction(true);
    t_unobserved = false;
  }
  auto* obs = static_cast<OpObservation*>(ctx);
  if (g_sentinels || g_capture) popShared(fn);
  if (obs && obs->checked) {
    if (--t_checked_depth == 0) t_checked_call = nullptr;
    const Clock::time_point started = Clock::now();
    try {
      if (g_sentinels && !t_running.empty())
        lookBackBeforeCheck(obs->site(), obs->index(), fumi::torch_compat::outputsOf(fn),
                            t_running.back().inputs);
      obs->checked->check(fumi::torch_compat::outputsOf(fn));
    } catch (const std::exception& e) {  // once per op, without c10's backtrace
      noteFailureOnce(fumi::torch_compat::opName(fn), "torch adapter: its check", e.what(),
                       "its checks are skipped", FUMI_LOG_ERROR);
    } catch (...) {
    }
    obs->checked->account(secondsSince(started));
  }
  if (g_sentinels && !t_running.empty()) {
    Running op = std::move(t_running.back());
    t_running.pop_back();
    if (op.view) {
      g_api->pop_context();
      return;
    }
    try {
      const char* name = fumi::torch_compat::opName(fn);
      const auto& outputs = fumi::torch_compat::outputsOf(fn);
      if (std::uncaught_exceptions() > 0) lookBackOnce(op.site, op.index);
      programCheck(name, op.site, op.index, op.inputs, outputs);
      pendingAtEnd(op.site, op.index, outputs);
      parameterWritten(name, op.site, op.index, outputs);
      if (obs && obs->searching) searchOutputs(name, outputs, *obs, t_running.size());
      else if (op.state_watch && watchState(op, outputs))
        for (Running& outer : t_running) outer.found_inside = true;
      else if (!outputs.empty() &&
               watchOutputs(name, op.inputs, outputs, op.site, op.index, op.found_inside))
        for (Running& outer : t_running) outer.found_inside = true;
      if (keepingPast() && !insideWriter())
        t_rate.end.run([&] {
          recordPast(name, op.site, op.index, std::move(op.inputs), outputs, op.past_mark,
                     fn.seqNr());
        });
      // A sentinel has started a search while this op ran: its own (watchOutputs, a nan_inf
      // check), or a library call's inside it (sgemm_'s nan_inf under aten::mm). Once it found
      // the origin, the ops around it are not to look back again; otherwise each looks back as
      // it returns, its result then held (a nan_inf check of an addmm inside aten::gru found
      // nothing there, while the gru's own result, made from a NaN written into its initial
      // state, was the origin: batch 19).
      if (!op.searching && g_api->nan_search()) {
        const bool found = lookBack();
        for (Running& outer : t_running) {
          outer.searching = outer.searching || found;
          outer.found_inside = outer.found_inside || found;
        }
      }
    } catch (...) {
    }
  }
  g_api->pop_context();
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int fumi_torch_attach(
    const fumi_adapter_api* api, char* err, size_t err_len) {
  if (!api || api->abi_version != FUMI_ADAPTER_ABI_VERSION ||
      api->struct_size < sizeof(fumi_adapter_api)) {
    std::snprintf(err, err_len, "adapter API version mismatch");
    return 1;
  }
  // The torch this process runs must be the one the adapter was built against: another's
  // classes (RecordFunction, IValue) may differ in layout, and reading them would crash.
  Dl_info where{};
  if (dladdr(reinterpret_cast<const void*>(&at::addGlobalCallback), &where) && where.dli_fname) {
    const fumi::torch_version::Version running =
        fumi::torch_version::ofLibrary(where.dli_fname);
    if (running.known() &&
        (running.major != TORCH_VERSION_MAJOR || running.minor != TORCH_VERSION_MINOR)) {
      std::snprintf(err, err_len,
                    "built against torch %d.%d, but this process runs torch %s (%s): torch ops "
                    "are not checked (library calls still are); rebuild fumi against this torch",
                    TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, running.str().c_str(),
                    where.dli_fname);
      return 1;
    }
  }
  g_api = api;
  // Inputs and outputs cost every op a copy of its argument list: ask for them only when some
  // rule can check torch ops.
  g_capture = api->backend_checked(kBackend) != 0;
  g_sentinels = api->nan_sentinels() != 0;
  g_look_back = g_sentinels ? api->nan_look_back() : 0;
  if (g_capture || g_sentinels) {
    api->set_shared_probe(&readsSharedMemory);
    api->set_script_frames(&scriptFrames);
    api->set_forward_probe(&forwardProbe);
    api->set_look_back_probe(&lookBackProbe);
  }
  try {
    if (g_sentinels || g_capture)
      at::addGlobalCallback(at::RecordFunctionCallback(onNodeStart, onNodeEnd)
                                .scopes({at::RecordScope::BACKWARD_FUNCTION}));
    at::addGlobalCallback(at::RecordFunctionCallback(onStart, onEnd)
                              .needsInputs(g_capture || g_sentinels)
                              .needsOutputs(g_capture || g_sentinels)
                              .scopes({at::RecordScope::FUNCTION, at::RecordScope::USER_SCOPE,
                                       at::RecordScope::TORCHSCRIPT_FUNCTION}));
  } catch (const std::exception& e) {
    std::snprintf(err, err_len, "cannot register the RecordFunction observer: %s", e.what());
    return 1;
  }
  return 0;
}
