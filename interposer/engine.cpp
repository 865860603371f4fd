// engine.cpp — compiled policy decisions, the plugin host API, and check execution.
#include "engine.h"

#include <fnmatch.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "call.h"
#include "context.h"
#include "metrics.h"
#include "contract.h"
#include "nan_search.h"
#include "pystack.h"
#include "fumi/dtype.hpp"
#include "loss_scaling.h"
#include "rank.h"
#include "scratch_arena.h"
#include "elementwise.h"
#include "framework_projection.h"
#include "tensor_copy.h"
#include "report.h"
#include "runtime.h"
#include "site.h"
#include "stack.h"

// The opaque handle plugins receive: one check of one call.
struct fumi_call {
  fumi::Call* call;
  fumi::Reporter* reporter;
  const fumi::Rule* rule;
  fumi::CheckInstance* check;
  uint64_t budget;
  const fumi::Policy* policy;  // the engine's running the check
  const fumi::CallOrigin* origin;
  uint64_t used = 0;
  // Device scratch to release; host scratch is the thread's arena above `arena_mark`.
  std::vector<void*> device_allocations;
  fumi::ScratchArena::Mark arena_mark = fumi::ScratchArena::local().mark();
  bool violated = false;
  // The scratch the check had when a request was refused, with that request: what it needed at
  // least (the budget's warning says so). 0: none refused.
  uint64_t needed = 0;
};

namespace fumi {
namespace {

bool globMatch(const std::string& pattern, const char* text) {
  return fnmatch(pattern.c_str(), text, 0) == 0;
}

bool dtypeMatch(const MatchSpec& m, fumi_dtype dtype) {
  if (m.dtypes.empty()) return true;
  for (fumi_dtype d : m.dtypes)
    if (d == dtype) return true;
  return false;
}

// The conditions an op site decides once. A site without a static dtype (framework ops run
// in any dtype) leaves the dtype to perCallMatch.
bool staticMatch(const MatchSpec& m, const OpSite& site) {
  if (!globMatch(m.backend, site.backend)) return false;
  if (!rankSelected(m, rankInfo().rank.value_or(0))) return false;  // the rank is the process's
  // A framework op's overload ("aten::add.Tensor") also answers to its bare name.
  const char* ns = std::strstr(site.name, "::");
  const char* dot = ns ? std::strchr(ns, '.') : nullptr;
  const std::string bare = dot ? std::string(site.name, dot) : std::string();
  bool named = false;
  for (const std::string& glob : m.ops)
    named = named || globMatch(glob, site.name) || (dot && globMatch(glob, bare.c_str()));
  if (!named) return false;
  return site.dtype == FUMI_DTYPE_UNKNOWN || dtypeMatch(m, site.dtype);
}

bool hasPerCallConditions(const MatchSpec& m, const OpSite& site) {
  return m.min_size > 0 || m.max_size != std::numeric_limits<int64_t>::max() ||
         (site.dtype == FUMI_DTYPE_UNKNOWN && !m.dtypes.empty()) || !m.phases.empty() ||
         m.device != "*" || !m.autocast.empty() || !m.notes.empty();
}

// Whether a call with engine notes `notes` ("a,b", nullptr: none) carries one of the match's.
bool notesMatch(const MatchSpec& m, const char* notes) {
  if (m.notes.empty()) return true;
  const std::string have = std::string(",") + (notes ? notes : "") + ",";
  for (const std::string& n : m.notes)
    if (n == "none" ? have == ",," : have.find("," + n + ",") != std::string::npos) return true;
  return false;
}

bool perCallMatch(const MatchSpec& m, const OpSite& site, const CallFacts& f) {
  if (f.size < m.min_size || f.size > m.max_size) return false;
  if (site.dtype == FUMI_DTYPE_UNKNOWN && !dtypeMatch(m, f.dtype)) return false;
  if (m.device != "*" && !globMatch(m.device, f.device ? f.device : "")) return false;
  if (!m.autocast.empty() &&
      std::find(m.autocast.begin(), m.autocast.end(), f.autocast) == m.autocast.end())
    return false;
  if (!notesMatch(m, f.notes)) return false;
  if (!m.phases.empty()) {
    const char* phase = currentPhase();
    bool any = false;
    for (const std::string& p : m.phases) any = any || p == phase;
    if (!any) return false;
  }
  return true;
}

// splitmix64: a stateless hash of (seed, index) so probability sampling is reproducible and
// needs no shared RNG state between threads.
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::string locationOf(const SourceLoc& loc) { return loc.line ? loc.str() : std::string(); }

// ---- host API -------------------------------------------------------------------------------

const fumi_call_info* hostCallInfo(fumi_call* c) { return &c->call->info(); }

std::atomic<const DeviceMemory*> g_device{nullptr};

void* hostAlloc(fumi_call* c, size_t bytes, fumi_memory memory) {
  if (bytes > c->budget - c->used) {
    if (!c->needed) c->needed = c->used + bytes;
    return nullptr;
  }
  void* p = nullptr;
  if (memory == FUMI_MEMORY_HOST) {
    p = ScratchArena::local().take(bytes);
  } else {
    p = c->call->allocDevice(bytes ? bytes : 1);
    if (p) c->device_allocations.push_back(p);
  }
  if (!p) return nullptr;
  c->used += bytes;
  return p;
}

void releaseAllocations(fumi_call& c) {
  for (void* p : c.device_allocations) c.call->releaseDevice(p);
  c.device_allocations.clear();
  // What a check within the scratch budget used stays for the next one (no fresh pages).
  ScratchArena::local().rewind(c.arena_mark, static_cast<size_t>(c.budget));
}

// Host view of `bytes` at `buffer` in `memory`: the buffer itself, or a copy of device memory
// in `stage`, read through `call`'s device (nullptr: the CUDA runtime's, for code that reads a
// tensor outside a Call). nullptr when device memory cannot be read.
const void* readable(Call* call, const void* buffer, fumi_memory memory, size_t bytes,
                     Stage& stage) {
  if (memory == FUMI_MEMORY_HOST) return buffer;
  chargeScratch(bytes);  // inside a reference or a projection: their budget
  void* host = stage.take(bytes);
  if (!host) return nullptr;
  const DeviceMemory* dev = g_device.load();
  const bool read =
      call ? call->toHost(host, buffer, bytes) : dev && dev->toHost(host, buffer, bytes);
  return read ? host : nullptr;
}

}  // namespace

namespace {

// The dense side of a gather or scatter: strides of `t`'s elements in `order`.
void orderStrides(const fumi_tensor& t, fumi_order order, int64_t* strides) {
  if (order == FUMI_ORDER_STORAGE) storageStrides(t.ndim, t.shape, t.strides, strides);
  else denseStrides(t.ndim, t.shape, strides);
}

}  // namespace

// A buffer laid out like t: `buffer` holding *dtype, or (buffer nullptr) t's own data, *dtype
// becoming its own. nullptr when the dtype has no storage.
const void* resolveBuffer(const fumi_tensor& t, const void* buffer, fumi_dtype* dtype) {
  if (!buffer) {
    buffer = t.data;
    *dtype = t.dtype;
  }
  if (dtypeBytes(*dtype) == 0) return nullptr;
  // An empty tensor may own no memory (eval-mode batch norm's saved statistics): nothing is
  // read there, but a null source would decline the whole call.
  static const double kNothing = 0;
  return buffer == nullptr && tensorNumel(t) == 0 ? &kNothing : buffer;
}

const void* tensorHostData(const fumi_tensor& t, const void* buffer, fumi_dtype* dtype,
                           Stage& stage, Call* call) {
  buffer = resolveBuffer(t, buffer, dtype);
  if (!buffer) return nullptr;
  return readable(call, buffer, t.memory,
                  static_cast<size_t>(tensorSpan(t)) * dtypeBytes(*dtype), stage);
}

namespace {

fumi_status gatherStrided(const fumi_tensor& t, const void* buffer, fumi_dtype dtype, void* out,
                          fumi_dtype out_dtype, const int64_t* strides, Call* call) {
  Stage stage;
  const void* src = tensorHostData(t, buffer, &dtype, stage, call);
  if (!src) return FUMI_UNSUPPORTED;
  if (!copyElements(t.ndim, t.shape, src, dtype, ElementLayout{t.strides, tensorBase(t)}, out,
                    out_dtype, ElementLayout{strides, 0}))
    return FUMI_UNSUPPORTED;
  return FUMI_OK;
}

}  // namespace

fumi_status gatherTensor(const fumi_tensor& t, const void* buffer, fumi_dtype dtype,
                         double* out, fumi_order order, Call* call) {
  int64_t dense[FUMI_MAX_DIMS];
  orderStrides(t, order, dense);
  return gatherStrided(t, buffer, dtype, out, FUMI_DTYPE_F64, dense, call);
}

fumi_status gatherTensorAt(const fumi_tensor& t, void* out, fumi_dtype out_dtype,
                           const int64_t* strides) {
  return gatherStrided(t, nullptr, t.dtype, out, out_dtype, strides, nullptr);
}

namespace {

bool validIndex(fumi_call* c, int32_t i) {
  return i >= 0 && static_cast<size_t>(i) < c->call->tensors().size();
}

void* hostAllocLike(fumi_call* c, int32_t index, fumi_dtype dtype) {
  if (!validIndex(c, index) || dtypeBytes(dtype) == 0) return nullptr;
  const fumi_tensor& t = c->call->tensors()[index];
  return hostAlloc(c, static_cast<size_t>(tensorSpan(t)) * dtypeBytes(dtype), t.memory);
}

int64_t hostNumel(fumi_call* c, int32_t index) {
  return validIndex(c, index) ? tensorNumel(c->call->tensors()[index]) : -1;
}

fumi_status hostGatherIn(fumi_call* c, int32_t index, const void* buffer, fumi_dtype dtype,
                         double* out, fumi_order order) {
  if (!validIndex(c, index) || !out ||
      (order != FUMI_ORDER_LOGICAL && order != FUMI_ORDER_STORAGE))
    return FUMI_ERROR;
  return gatherTensor(c->call->tensors()[index], buffer, dtype, out, order, c->call);
}

fumi_status hostGather(fumi_call* c, int32_t index, const void* buffer, fumi_dtype dtype,
                       double* out) {
  return hostGatherIn(c, index, buffer, dtype, out, FUMI_ORDER_LOGICAL);
}

// The host's own work for a plugin (a reference evaluation, a projection), within what the
// check's scratch budget has left for its copies (ScratchLimit); nothing may unwind into the
// plugin that called.
template <class Work>
fumi_status budgetedHostWork(fumi_call* c, Work&& work) {
  InsideScope inside;
  ScratchLimit limit(static_cast<size_t>(c->budget - c->used));
  try {
    return work();
  } catch (const NoScratch& e) {
    if (!c->needed) c->needed = c->used + limit.charged() + e.asked;
    return FUMI_NO_SCRATCH;  // the operands' copies do not fit in the scratch budget
  } catch (const std::exception&) {
    return FUMI_UNSUPPORTED;  // out of memory
  }
}

fumi_status hostReference(fumi_call* c, int32_t index, double* out) {
  if (!validIndex(c, index) || !out) return FUMI_ERROR;
  return budgetedHostWork(c, [&] { return c->call->reference(index, out); });
}

}  // namespace

// Writes `buffer` (laid out like t, holding `dtype`) through write(host pointer) -> fumi_status:
// in place in host memory; for device memory the whole span is built on the host (gaps zero:
// scratch buffers hold nothing else), then copied through the call's device (a copy that fails
// leaves the check unsupported: a device's trouble is no plugin error).
template <class Write>
fumi_status writeLike(Call& call, const fumi_tensor& t, void* buffer, fumi_dtype dtype,
                      Write&& write) {
  if (dtypeBytes(dtype) == 0) return FUMI_UNSUPPORTED;
  if (t.memory == FUMI_MEMORY_HOST) return write(buffer);
  const size_t bytes = static_cast<size_t>(tensorSpan(t)) * static_cast<size_t>(dtypeBytes(dtype));
  Stage stage;
  void* host = stage.take(bytes);
  if (!host) return FUMI_UNSUPPORTED;
  if (tensorSpan(t) != tensorNumel(t)) std::memset(host, 0, bytes);  // the gaps
  const fumi_status st = write(host);
  if (st != FUMI_OK) return st;
  return call.toDevice(buffer, host, bytes) ? FUMI_OK : FUMI_UNSUPPORTED;
}

namespace {

// A map of a device buffer staged: its source copied to the host, the host primitive run
// there (keeping an index column: mapKeepingIndexColumn), the result copied back.
fumi_status stagedMap(Call& call, const fumi_tensor& t, const void* src, fumi_dtype src_dtype,
                      void* dst, fumi_dtype dst_dtype, const fumi_map_spec& spec,
                      uint64_t* changed, bool keep_index) {
  Stage stage;
  const void* from = tensorHostData(t, src, &src_dtype, stage, &call);
  if (!from) return FUMI_UNSUPPORTED;
  return writeLike(call, t, dst, dst_dtype, [&](void* to) {
    return keep_index ? mapKeepingIndexColumn(t, from, src_dtype, to, dst_dtype, spec, changed)
                      : mapTensor(t, from, src_dtype, to, dst_dtype, spec, changed);
  });
}

}  // namespace

// ---- Call's device memory and element-wise work, as fumi's own hooks have them --------------

void* Call::allocDevice(size_t bytes) {
  const DeviceMemory* dev = g_device.load();
  return dev ? dev->alloc(bytes) : nullptr;
}

void Call::releaseDevice(void* p) {
  if (const DeviceMemory* dev = g_device.load()) dev->release(p);
}

bool Call::toHost(void* dst, const void* src, size_t bytes) {
  const DeviceMemory* dev = g_device.load();
  return dev && dev->toHost(dst, src, bytes);
}

bool Call::toDevice(void* dst, const void* src, size_t bytes) {
  const DeviceMemory* dev = g_device.load();
  return dev && dev->toDevice(dst, src, bytes);
}

// The backend's kernel where it has one, else staged: the buffers copied to the host, the host
// primitive run there, a result copied back.
fumi_status Call::mapDevice(int32_t index, const void* src, fumi_dtype src_dtype, void* dst,
                            fumi_dtype dst_dtype, const fumi_map_spec& spec, uint64_t* changed) {
  const fumi_tensor& t = tensors_[static_cast<size_t>(index)];
  if (const DeviceMemory* dev = g_device.load(); dev && dev->map) {
    fumi_dtype ds = src_dtype;
    const void* s = resolveBuffer(t, src, &ds);
    if (s && dev->map(t, s, ds, dst, dst_dtype, spec, changed) == FUMI_OK) return FUMI_OK;
  }
  return stagedMap(*this, t, src, src_dtype, dst, dst_dtype, spec, changed, false);
}

// The backend's kernel where it has one (only the passes' partial results come back), else
// staged.
fumi_status Call::compareDevice(int32_t index, const void* a, fumi_dtype a_dtype, const void* b,
                                fumi_dtype b_dtype, const fumi_compare_spec& spec,
                                fumi_comparison* out) {
  const fumi_tensor& t = tensors_[static_cast<size_t>(index)];
  if (const DeviceMemory* dev = g_device.load(); dev && dev->compare) {
    fumi_dtype da = a_dtype, db = b_dtype;
    const void* sa = resolveBuffer(t, a, &da);
    const void* sb = resolveBuffer(t, b, &db);
    if (sa && sb && dev->compare(t, sa, da, sb, db, spec, out) == FUMI_OK) return FUMI_OK;
  }
  Stage stage_a, stage_b;
  const void* ha = tensorHostData(t, a, &a_dtype, stage_a, this);
  const void* hb = tensorHostData(t, b, &b_dtype, stage_b, this);
  if (!ha || !hb) return FUMI_UNSUPPORTED;
  return compareTensor(t, ha, a_dtype, hb, b_dtype, spec, out);
}

fumi_status Call::contractDevice(const fumi_tensor& view, int32_t dim, int32_t count,
                                 const double* vectors, double* out) {
  const DeviceMemory* dev = g_device.load();
  return dev && dev->contract ? dev->contract(view, dim, count, vectors, out) : FUMI_UNSUPPORTED;
}

fumi_status Call::convolveDevice(const fumi_device_conv& conv) {
  const DeviceMemory* dev = g_device.load();
  return dev && dev->convolve ? dev->convolve(conv) : FUMI_UNSUPPORTED;
}

// The backend's kernel where it has one (only partial results come back), else staged.
fumi_status Call::scanDevice(int32_t index, const void* buffer, fumi_dtype dtype,
                             fumi_scan* out) {
  const fumi_tensor& t = tensors_[static_cast<size_t>(index)];
  if (const DeviceMemory* dev = g_device.load(); dev && dev->scan) {
    fumi_dtype dt = dtype;
    const void* src = resolveBuffer(t, buffer, &dt);
    if (src && dev->scan(t, src, dt, out) == FUMI_OK) return FUMI_OK;
  }
  Stage stage;
  const void* h = tensorHostData(t, buffer, &dtype, stage, this);
  if (!h) return FUMI_UNSUPPORTED;
  return scanTensor(t, h, dtype, out);
}

namespace {

fumi_status hostScatterIn(fumi_call* c, int32_t index, const double* in, void* buffer,
                          fumi_dtype dtype, fumi_order order) {
  if (!validIndex(c, index) || !in || !buffer ||
      (order != FUMI_ORDER_LOGICAL && order != FUMI_ORDER_STORAGE))
    return FUMI_ERROR;
  const fumi_tensor& t = c->call->tensors()[index];
  return writeLike(*c->call, t, buffer, dtype, [&](void* dst) {
    int64_t dense[FUMI_MAX_DIMS];
    orderStrides(t, order, dense);
    copyElements(t.ndim, t.shape, in, FUMI_DTYPE_F64, ElementLayout{dense, 0}, dst, dtype,
                 ElementLayout{t.strides, tensorBase(t)});
    return FUMI_OK;
  });
}

// project and contract for several sets of vectors (fumi_host_api.project_sides,
// contract_sides), each side checked as one project or contract call.
bool validSides(int32_t n, const fumi_side* sides, const fumi_tensor& t) {
  if (n < 1 || !sides) return false;
  for (int32_t i = 0; i < n; ++i) {
    const fumi_side& s = sides[i];
    if (s.struct_size < sizeof(fumi_side) || !s.vectors || !s.out || s.count < 1 || s.dim < 0 ||
        s.dim >= t.ndim)
      return false;
  }
  return true;
}

// A plugin's struct as this host knows it: the fields its `struct_size` covers, the rest zero
// (appended after the plugin was built).
template <class T>
T covered(const T& in) {
  T s{};
  std::memcpy(&s, &in, std::min<size_t>(in.struct_size, sizeof s));
  return s;
}

// Settles what earlier primitives of the check left on a device (deferUntilSettled) when the
// host API call it lives in returns.
struct SettleOnReturn {
  ~SettleOnReturn() { settleDeferred(true); }
};

fumi_status hostProjectSides(fumi_call* c, int32_t index, int32_t n, const fumi_side* sides) {
  const SettleOnReturn settle;
  if (!validIndex(c, index)) return FUMI_ERROR;
  const fumi_tensor& t = c->call->tensors()[static_cast<size_t>(index)];
  if (t.role != FUMI_ROLE_OUTPUT || !validSides(n, sides, t)) return FUMI_ERROR;
  std::vector<Projection> ps;
  ps.reserve(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i)
    ps.push_back(Projection{sides[i].dim, sides[i].count, sides[i].vectors, sides[i].out,
                            sides[i].out_lo});
  return budgetedHostWork(c, [&] { return c->call->project(index, ps); });
}

fumi_status hostContractSides(fumi_call* c, int32_t index, const void* buffer, fumi_dtype dtype,
                              int32_t n, const fumi_side* sides, fumi_scan* scan) {
  const SettleOnReturn settle;
  if (!validIndex(c, index) || (scan && scan->struct_size < sizeof(fumi_scan))) return FUMI_ERROR;
  const fumi_tensor& t = c->call->tensors()[static_cast<size_t>(index)];
  if (!validSides(n, sides, t)) return FUMI_ERROR;
  // The call's own data: a scan kept from another check is not made again, and one made here
  // is kept (hostScan).
  const bool own = buffer == nullptr;
  if (scan && own && c->call->keptScan(index, scan)) scan = nullptr;
  const auto done = [&](fumi_status st) {
    if (st == FUMI_OK && scan && own) c->call->keepScan(index, *scan);
    return st;
  };
  if (t.memory != FUMI_MEMORY_HOST) {  // contracted and scanned where it lives, if it can be
    Call& call = *c->call;
    fumi_dtype dt = dtype;
    const void* src = resolveBuffer(t, buffer, &dt);
    const DeviceContract device = [&call](const fumi_tensor& view, int32_t dim, int32_t count,
                                          const double* vectors, double* out) {
      return call.contractDevice(view, dim, count, vectors, out);
    };
    if (src && contractSidesOnDevice(t, src, dt, n, sides, device))
      return done(scan ? call.scanDevice(index, src, dt, scan) : FUMI_OK);
  }
  Stage stage;
  const void* src = tensorHostData(t, buffer, &dtype, stage, c->call);
  if (!src) return FUMI_UNSUPPORTED;
  return done(contractSides(t, src, dtype, n, sides, scan) ? FUMI_OK : FUMI_UNSUPPORTED);
}

// project and contract: one set of vectors.
fumi_status hostProject(fumi_call* c, int32_t index, int32_t dim, int32_t count,
                        const double* vectors, double* out, double* out_lo) {
  const fumi_side side{sizeof(fumi_side), dim, count, vectors, out, out_lo};
  return hostProjectSides(c, index, 1, &side);
}

fumi_status hostContract(fumi_call* c, int32_t index, const void* buffer, fumi_dtype dtype,
                         int32_t dim, int32_t count, const double* vectors, double* out) {
  const fumi_side side{sizeof(fumi_side), dim, count, vectors, out, nullptr};
  return hostContractSides(c, index, buffer, dtype, 1, &side, nullptr);
}

// The element-wise primitives (ABI 2): host buffers in place; device buffers through the
// call (Call::mapDevice ...: its device's own work, or staged through the host).
fumi_status hostMap(fumi_call* c, int32_t index, const void* src, fumi_dtype src_dtype, void* dst,
                    fumi_dtype dst_dtype, const fumi_map_spec* spec, uint64_t* changed) {
  // `flags` was appended: ABI 2 plugins built before it pass the shorter struct.
  if (!validIndex(c, index) || !dst || !spec ||
      spec->struct_size < offsetof(fumi_map_spec, flags))
    return FUMI_ERROR;
  fumi_map_spec s = covered(*spec);
  const std::vector<fumi_tensor>& tensors = c->call->tensors();
  const fumi_tensor& t = tensors[static_cast<size_t>(index)];
  src = resolveBuffer(t, src, &src_dtype);
  if (!src || dtypeBytes(dst_dtype) == 0) return FUMI_UNSUPPORTED;
  // Indices stored as floating values are never perturbed (a device's own map perturbs every
  // element: such a tensor, a few boxes, is staged through the host).
  const bool keep_index = s.kind == FUMI_MAP_PERTURB &&
                          frameworkIndexColumn(c->call->info().op, tensors, index);
  if (t.memory != FUMI_MEMORY_HOST)
    return keep_index
               ? stagedMap(*c->call, t, src, src_dtype, dst, dst_dtype, s, changed, true)
               : c->call->mapDevice(index, src, src_dtype, dst, dst_dtype, s, changed);
  if (keep_index)
    return mapKeepingIndexColumn(t, src, src_dtype, dst, dst_dtype, s, changed);
  if (s.kind == FUMI_MAP_ABS) {  // the terms' magnitudes: op-specific for some ops
    const TermsMap terms =
        frameworkTermsMap(c->call->info().op, tensors, c->call->args(), index);
    if (terms.role == TermsMap::kKeep) s.kind = FUMI_MAP_COPY;
    if (terms.role == TermsMap::kNegAbs)
      return mapNegatedAbs(t, src, src_dtype, dst, dst_dtype, changed);
    if (terms.role == TermsMap::kCentred) {
      const fumi_tensor& mean = tensors[static_cast<size_t>(terms.mean)];
      std::vector<double> means(static_cast<size_t>(tensorNumel(mean)));
      if (const fumi_status st = gatherTensor(mean, nullptr, mean.dtype, means.data(),
                                              FUMI_ORDER_LOGICAL, c->call);
          st != FUMI_OK)
        return st;
      return mapCentred(t, src, src_dtype, dst, dst_dtype, means.data(),
                        static_cast<int64_t>(means.size()), terms.centring, changed);
    }
  }
  return mapTensor(t, src, src_dtype, dst, dst_dtype, s, changed);
}

fumi_status hostCompare(fumi_call* c, int32_t index, const void* a, fumi_dtype a_dtype,
                        const void* b, fumi_dtype b_dtype, const fumi_compare_spec* spec,
                        fumi_comparison* out) {
  const SettleOnReturn settle;
  // `underflow_below` and `underflow` were appended: ABI 2 plugins built before them pass the
  // shorter structs; read and write only what they cover.
  if (!validIndex(c, index) || !spec || !out ||
      spec->struct_size < offsetof(fumi_compare_spec, underflow_below) ||
      out->struct_size < offsetof(fumi_comparison, underflow))
    return FUMI_ERROR;
  const fumi_compare_spec s = covered(*spec);
  const fumi_tensor& t = c->call->tensors()[static_cast<size_t>(index)];
  a = resolveBuffer(t, a, &a_dtype);
  b = resolveBuffer(t, b, &b_dtype);
  if (!a || !b) return FUMI_UNSUPPORTED;
  fumi_comparison result{};
  const fumi_status st = t.memory != FUMI_MEMORY_HOST
                             ? c->call->compareDevice(index, a, a_dtype, b, b_dtype, s, &result)
                             : compareTensor(t, a, a_dtype, b, b_dtype, s, &result);
  if (st != FUMI_OK) return st;
  const uint32_t size = out->struct_size;
  std::memcpy(out, &result, std::min<size_t>(size, sizeof result));
  out->struct_size = size;
  return FUMI_OK;
}

fumi_status hostScan(fumi_call* c, int32_t index, const void* buffer, fumi_dtype dtype,
                     fumi_scan* out) {
  const SettleOnReturn settle;
  if (!validIndex(c, index) || !out || out->struct_size < sizeof(fumi_scan)) return FUMI_ERROR;
  const fumi_tensor& t = c->call->tensors()[static_cast<size_t>(index)];
  const bool own = buffer == nullptr;  // the call's own data: kept for its other checks
  if (own && c->call->keptScan(index, out)) return FUMI_OK;
  buffer = resolveBuffer(t, buffer, &dtype);
  if (!buffer) return FUMI_UNSUPPORTED;
  const fumi_status st = t.memory != FUMI_MEMORY_HOST
                             ? c->call->scanDevice(index, buffer, dtype, out)
                             : scanTensor(t, buffer, dtype, out);
  if (own && st == FUMI_OK) c->call->keepScan(index, *out);
  return st;
}

fumi_status hostScatter(fumi_call* c, int32_t index, const double* in, void* buffer,
                        fumi_dtype dtype) {
  return hostScatterIn(c, index, in, buffer, dtype, FUMI_ORDER_LOGICAL);
}

fumi_status hostRerun(fumi_call* c, fumi_dtype precision, void* const* buffers) {
  if (!buffers) return FUMI_ERROR;
  const auto& ts = c->call->tensors();
  for (size_t i = 0; i < ts.size(); ++i) {
    if (ts[i].role == FUMI_ROLE_OUTPUT && !buffers[i]) return FUMI_ERROR;
    if (!buffers[i] && precision != c->call->info().dtype) return FUMI_ERROR;
  }
  InsideScope inside;  // the rerun goes straight to the real library
  return c->call->rerun(precision, buffers);
}

nlohmann::json shapesOf(Call& call) {
  nlohmann::json shapes = nlohmann::json::object();
  for (const fumi_tensor& t : call.tensors()) {
    // An in/out operand appears twice; the output's shape is the one users think of.
    if (shapes.contains(t.name) && t.role == FUMI_ROLE_INPUT) continue;
    shapes[t.name] = std::vector<int64_t>(t.shape, t.shape + t.ndim);
  }
  return shapes;
}

void dumpCase(fumi_call* c, const std::string& dir, const nlohmann::json& ev);

// JSON has no Inf/NaN: write them as the strings "inf", "-inf", "nan".
nlohmann::json number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

// Does a verdict of `struct_size` bytes (an older plugin's may be shorter) hold `field`?
#define FUMI_VERDICT_HAS(v, field) \
  ((v)->struct_size >= offsetof(fumi_verdict, field) + sizeof((v)->field))

// The verdict's extra metric `name`, or nullptr when it has none.
const double* extraMetric(const fumi_verdict* v, const char* name) {
  if (!FUMI_VERDICT_HAS(v, extra)) return nullptr;
  for (int i = 0; i < v->nextra && i < FUMI_MAX_EXTRA_METRICS; ++i)
    if (v->extra[i].name && std::strcmp(v->extra[i].name, name) == 0) return &v->extra[i].value;
  return nullptr;
}

// The verdict's extra metric `name`, or 0 when it has none.
double extraValue(const fumi_verdict* v, const char* name) {
  const double* x = extraMetric(v, name);
  return x ? *x : 0;
}

// Gradient underflow: the fraction of an f16/bf16 output of the backward pass that its dtype
// flushed below its smallest normal (highprec's extra `underflow`), what loss scaling exists
// for. Summarised per op as `gradient.underflow`; a violation only above the policy's
// `underflow: { bound: X }` (the policy the call is checked under).
void recordUnderflow(OpSite& site, uint64_t index, const Policy& policy, const fumi_verdict* v,
                     const char* phase) {
  const double* fraction = extraMetric(v, "underflow");
  if (!fraction || std::strcmp(phase, "backward") != 0) return;
  const double bound = policy.underflow_bound;
  if (std::isnan(bound) || *fraction <= bound)
    site.recordMetric("gradient.underflow", FUMI_KIND_PRECISION_COST, *fraction,
                      /*violated=*/false, /*counted_nonfinite=*/false, bound);
  else
    reportHostViolation(site, index, "gradient", FUMI_KIND_PRECISION_COST, "underflow",
                        *fraction, bound, nlohmann::json::object());
}

// Cancellation in the data (docs/policy.md, "Cancellation in the data"): an error check's
// violation whose result would have been within its tolerance had its k terms cancelled no
// further than k random signs do (the extra `error_of_terms`, its error against the terms'
// magnitudes, times sqrt(k) within the tolerance) is off because its inputs cancel, not because
// of the op. It is judged again, as kind cancellation: its relative figure, as metric
// `cancelled_rel`, against the policy's bound for the call's precision (never below the error
// tolerance, which its event keeps as the extra `error_tolerance`). Near-zero value heads of
// healthy RL jobs, whose outputs keep 3–4 digits, raised errors (batches 13, 14); a result left
// with no digit is still raised. Without k (an op whose terms fumi does not count) the verdict
// stays as it is. Whether `v` is such a verdict; then *out is the new one.
bool cancellationVerdict(Call& call, const Policy& policy, const fumi_verdict& v,
                         fumi_verdict* out) {
  const double* error_of_terms = extraMetric(&v, "error_of_terms");
  const int64_t k = call.info().reduction_length;
  if (!v.violated || !error_of_terms || k < 1 ||
      !(*error_of_terms * std::sqrt(static_cast<double>(k)) <= v.tolerance))
    return false;
  const fumi_dtype precision = metrics::narrowerPrecision(call.info().dtype, call.info().compute);
  const auto slot = static_cast<size_t>(precision);
  const KindTolerances& bounds = policy.cancellation_bounds;
  const double bound = slot < bounds.size() ? bounds[slot] : NAN;
  if (std::isnan(bound)) return false;
  *out = fumi_verdict{};
  std::memcpy(out, &v, std::min<size_t>(v.struct_size, sizeof *out));
  out->struct_size = sizeof *out;
  out->metric = "cancelled_rel";
  out->tolerance = std::max(bound, v.tolerance);
  out->violated = !(v.value <= out->tolerance);
  return true;
}

// Framework ops running on the thread of a call: a BLAS call made by aten::addmm says so, an
// op in the backward pass names its autograd node's range, and `parent` names the innermost
// one's call so both views of the computation can be joined.
void addContext(nlohmann::json& ev, const std::vector<ContextEntry>& ctx) {
  if (ctx.empty()) return;
  nlohmann::json names = nlohmann::json::array();
  for (const ContextEntry& e : ctx) names.push_back(e.site->name);
  ev["context"] = std::move(names);
  ev["parent"] = {{"op", ctx.back().site->name}, {"call_index", ctx.back().call_index}};
}

namespace {
// Seconds this thread spent reporting violations (their stacks, a NaN origin's claim, the
// event): runChecks takes them out of what a check costs and the overhead budget is charged.
// A report is the finding itself, bounded by report.violation_events per op and metric, and
// the first stack a process symbolises reads its libraries' debug information (0.3 s with
// libtorch): charged to the check that found it, it kept that check (nan_inf, the cheapest)
// over its share of the budget for minutes of run (batch 23, F11).
thread_local double t_report_seconds = 0;

struct ReportTime {
  const double started = monotonicSeconds();
  ~ReportTime() { t_report_seconds += monotonicSeconds() - started; }
};
}  // namespace

void hostReport(fumi_call* c, const fumi_verdict* reported) {
  if (!reported || !FUMI_VERDICT_HAS(reported, violated)) return;
  Call& call = *c->call;
  fumi_verdict rejudged;
  const bool cancelled = c->check->kind == FUMI_KIND_ERROR &&
                         cancellationVerdict(call, *c->policy, *reported, &rejudged);
  const fumi_verdict* v = cancelled ? &rejudged : reported;
  std::optional<ReportTime> timing;
  if (v->violated) timing.emplace();
  const std::string check = c->check->name;
  const std::string metric = v->metric ? v->metric : "value";
  const fumi_kind kind = cancelled ? FUMI_KIND_CANCELLATION : c->check->kind;
  // A non-finite output that came in through the inputs: counted, not raised (nan_inf).
  const bool counted_nonfinite = metric == "nonfinite" && v->value > 0 && !v->violated;
  const CallOrigin* origin = c->origin;
  const char* phase = origin ? origin->phase : currentPhase();
  // NaN/Inf of the backward pass waits for what the loss scaler does (loss_scaling.h).
  const bool held = v->violated && lossScalingHolds(metric, phase);
  // Outputs left out as rounding noise of their terms: counted. A call whose figure is over the
  // tolerance and not raised (every output was noise) was not judged against it.
  const bool noise = !v->violated && extraValue(v, "noise_outputs") > 0;
  call.site().recordMetric(check + "." + metric, kind, v->value, v->violated && !held,
                           counted_nonfinite,
                           noise && !(v->value <= v->tolerance) ? NAN : v->tolerance, noise);
  recordUnderflow(call.site(), call.info().call_index, *c->policy, v, phase);
  // NaN anywhere, or Inf raised as a violation, is a sentinel: look for the op where it first
  // appeared. Inf that is only passed along (a mask's -inf through baddbmm) is not. Made from
  // finite inputs ("appeared", "nan_from_inf"), the call is its own origin, claimed with its
  // event below: a search waited for the values to appear again, and a job where they did not
  // said "origin not found" under the violation that had seen them appear (batch 13).
  const bool nonfinite_seen =
      metric == "nonfinite" && v->value > 0 && (v->violated || extraValue(v, "nan") > 0);
  const char* how = FUMI_VERDICT_HAS(v, detail) && v->detail ? v->detail : "";
  const bool appeared = std::strcmp(how, "appeared") == 0 || std::strcmp(how, "nan_from_inf") == 0;
  const bool own_origin = nonfinite_seen && v->violated && !held && appeared;
  // Held, it is claimed when raised (loss_scaling.h), and no search looks for it meanwhile: one
  // looked back from it at once found it again, a second violation of the same call (batch 25).
  if (nonfinite_seen && !own_origin && !(held && appeared))
    nanSentinel(&call.site(), call.info().call_index);
  Reporter& rep = *c->reporter;
  if (!v->violated && !rep.settings().all_checks) return;

  nlohmann::json ev;
  ev["event"] = v->violated ? "violation" : "check";
  ev["op"] = call.info().op;
  ev["backend"] = call.info().backend;
  ev["check"] = check;
  ev["kind"] = kindName(kind);
  ev["metric"] = metric;
  ev["value"] = number(v->value);
  ev["tolerance"] = number(v->tolerance);
  ev["dtype"] = dtypeName(call.info().dtype);
  ev["compute"] = dtypeName(call.info().compute);
  if (call.autocast() != FUMI_DTYPE_UNKNOWN) ev["autocast"] = dtypeName(call.autocast());
  ev["shape"] = shapesOf(call);
  nlohmann::json args = nlohmann::json::object();
  for (const auto& [name, value] : call.args()) args[name] = value;
  ev["args"] = std::move(args);
  ev["call_index"] = call.info().call_index;
  if (*phase) {
    addContext(ev, origin ? origin->context
                          : currentContext(&call.site(), call.info().call_index));
    ev["phase"] = phase;
  }
  if (origin && !origin->kernels.empty()) {
    nlohmann::json kernels = nlohmann::json::array();
    for (const KernelRecord& k : origin->kernels) {
      nlohmann::json o{{"name", k.name}};
      if (k.start_ns && k.end_ns >= k.start_ns) o["duration_ns"] = k.end_ns - k.start_ns;
      kernels.push_back(std::move(o));
    }
    ev["kernels"] = std::move(kernels);
  }
  ev["rule"] = c->rule->name;
  nlohmann::json extra = nlohmann::json::object();
  if (FUMI_VERDICT_HAS(v, extra))
    for (int i = 0; i < v->nextra && i < FUMI_MAX_EXTRA_METRICS; ++i)
      if (v->extra[i].name) extra[v->extra[i].name] = number(v->extra[i].value);
  if (cancelled) extra["error_tolerance"] = number(reported->tolerance);
  ev["extra"] = extra;
  if (FUMI_VERDICT_HAS(v, detail) && v->detail) ev["detail"] = v->detail;
  if (v->violated) {
    c->violated = !held;  // a held finding is no violation (yet): no abort, no attribution
    // Past report.violation_events of this op and metric: counted in the summary (above), no
    // event, no stacks, no dump — a job violating on every call writes a bounded file.
    if (!held &&
        !call.site().writesViolationEvent(check + "." + metric, rep.settings().violation_events)) {
      if (own_origin) nanSentinel(&call.site(), call.info().call_index);  // no event to claim
      return;
    }
    // A check run behind the call (origin) has the frames taken at the call: none are taken on
    // the checker thread.
    std::vector<std::string> py =
        origin ? origin->python_stack : capturePythonStack(rep.settings().stack_depth);
    // A backward op's frames are the backward() call's: the line the program wrote is its
    // forward call's, where the adapter knows it (a gradient losing precision, a NaN origin).
    std::string forward;
    if (!origin && std::strcmp(phase, "backward") == 0) forwardCallNow(py, forward);
    if (!forward.empty()) ev["forward_call"] = forward;
    // NaN this call made of Inf in its inputs, in the forward pass, inside a framework op on
    // this thread: the Inf's maker is looked for first (the adapter's ops kept), and where it
    // is found this NaN is its spread (batch 37: an exp overflow, then sgemm_ adding +inf and
    // -inf, claimed first as a second origin).
    if (own_origin && !origin && std::strcmp(how, "nan_from_inf") == 0 &&
        std::strcmp(phase, "forward") == 0)
      lookBackNow();
    if (own_origin) {
      if (nlohmann::json fields =
              nanOriginEventFields(&call.site(), call.info().call_index, how, py, phase);
          !fields.is_null())
        ev.update(fields);
    }
    ev["action"] = c->rule->action == Action::kAbort  ? "abort"
                   : c->rule->action == Action::kDump ? "dump"
                                                      : "log";
    ev["stack"] = origin ? symbolize(origin->frames) : captureStack(rep.settings().stack_depth);
    if (!py.empty()) ev["python_stack"] = std::move(py);
    if (held) {
      holdViolation(call.site(), check + "." + metric, std::move(ev));
      return;
    }
    if (call.site().logsViolation(check + "." + metric))
      rep.log().warn("violation: {} #{} {}.{} = {:.3g} > {:.3g} (dtype {}, rule {})",
                     call.info().op, call.info().call_index, check, metric, v->value,
                     v->tolerance, dtypeName(call.info().dtype), c->rule->name);
    if (c->rule->action == Action::kDump) dumpCase(c, rep.dir(), ev);
  }
  rep.event(std::move(ev));
}

void hostLog(fumi_log_level level, const char* message) {
  if (message) logMessage(level, std::string("plugin: ") + message);
}

const fumi_host_api kHostApi = {
    FUMI_PLUGIN_ABI_VERSION, sizeof(fumi_host_api), hostCallInfo, hostAlloc, hostAllocLike,
    hostNumel,               hostGather,            hostScatter,  hostRerun, hostReport,
    hostLog,                 hostReference,         hostProject,  hostGatherIn,
    hostScatterIn,           hostContract,          hostMap,      hostCompare,
    hostScan,                hostProjectSides,      hostContractSides};

// What a plugin built for ABI 1 gets: the same table marked 1 (its glue checks the version;
// it reads only the fields its struct_size knew).
const fumi_host_api kHostApiV1 = [] {
  fumi_host_api api = kHostApi;
  api.abi_version = 1;
  return api;
}();

// Writes the call's description and raw operands: DIR/cases/<pid>-<op>-<index>/.
void dumpCase(fumi_call* c, const std::string& dir, const nlohmann::json& ev) {
  Call& call = *c->call;
  const std::string cases = dir + "/cases";
  const std::string path = cases + "/" + std::to_string(getpid()) + "-" + call.info().op + "-" +
                           std::to_string(call.info().call_index);
  ::mkdir(cases.c_str(), 0755);
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return;
  nlohmann::json desc = ev;
  desc.erase("stack");
  // The program's executable: a PyTorch case is replayed with the same interpreter.
  std::error_code ec;
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (!ec) desc["executable"] = exe;
  // The check's parameters (trials, vectors ...): a replay runs the check as it ran here.
  nlohmann::json params = nlohmann::json::object();
  if (c->check && c->check->spec)
    for (const auto& [key, value] : c->check->spec->params) params[key] = value;
  desc["check_params"] = std::move(params);
  // A framework op's integer and boolean tensors (indices, targets), which checks never see.
  if (const std::string aux = call.writeAux(path); !aux.empty()) {
    nlohmann::json parsed = nlohmann::json::parse(aux, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_array() && !parsed.empty()) desc["aux_tensors"] = std::move(parsed);
  }
  desc["tensors"] = nlohmann::json::array();
  for (size_t i = 0; i < call.tensors().size(); ++i) {
    const fumi_tensor& t = call.tensors()[i];
    const std::string file = "t" + std::to_string(i) + ".bin";
    desc["tensors"].push_back({{"name", t.name},
                               {"role", t.role == FUMI_ROLE_INPUT ? "input" : "output"},
                               {"dtype", dtypeName(t.dtype)},
                               {"shape", std::vector<int64_t>(t.shape, t.shape + t.ndim)},
                               {"strides", std::vector<int64_t>(t.strides, t.strides + t.ndim)},
                               {"file", file}});
    const size_t bytes = static_cast<size_t>(tensorSpan(t)) * dtypeBytes(t.dtype);
    Stage stage;
    const void* data = readable(&call, t.data, t.memory, bytes, stage);
    if (!data) continue;
    std::ofstream out(path + "/" + file, std::ios::binary);
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  }
  std::ofstream(path + "/call.json") << desc.dump(2) << "\n";
}

}  // namespace

void reportHostViolation(OpSite& site, uint64_t index, const std::string& check, fumi_kind kind,
                         const std::string& metric, double value, double tolerance,
                         const nlohmann::json& more, const char* past_phase) {
  const char* phase = past_phase ? past_phase : currentPhase();
  // A finding whose loss scaling is settled (`loss_scaling` in `more`) is not held.
  const bool held = !(more.is_object() && more.contains("loss_scaling")) &&
                    lossScalingHolds(metric, phase,
                                     more.is_object() ? more.value("detail", std::string())
                                                      : std::string());
  site.recordMetric(check + "." + metric, kind, value, /*violated=*/!held,
                    /*counted_nonfinite=*/false, tolerance);
  Reporter* rep = activeReporter();
  if (!rep) return;
  InsideScope inside;
  nlohmann::json ev = more.is_object() ? more : nlohmann::json::object();
  ev["event"] = "violation";
  ev["op"] = site.name;
  ev["backend"] = site.backend;
  ev["check"] = check;
  ev["kind"] = kindName(kind);
  ev["metric"] = metric;
  ev["value"] = number(value);
  ev["tolerance"] = number(tolerance);
  ev["call_index"] = index;
  if (*phase) ev["phase"] = phase;
  if (*phase && !past_phase) addContext(ev, currentContext(&site, index));
  const int depth = rep->settings().stack_depth;
  if (!past_phase) {
    ev["stack"] = captureStack(depth);
    if (!ev.contains("python_stack"))  // a NaN origin's, taken for its claim
      if (auto py = capturePythonStack(depth); !py.empty()) ev["python_stack"] = std::move(py);
  }
  if (held) {
    holdViolation(site, check + "." + metric, std::move(ev));
    return;
  }
  if (site.logsViolation(check + "." + metric))
    rep->log().warn("violation: {} #{} {}.{} = {:.3g} > {:.3g}", site.name, index, check, metric,
                    value, tolerance);
  rep->event(std::move(ev));
}

// ---- sampling and decisions -----------------------------------------------------------------

bool sampleHit(const SampleSpec& s, uint64_t index) {
  if (index < s.first) return true;
  if (s.every) {
    // 32-bit division is several times cheaper than 64-bit on x86; indices rarely need more.
    const bool hit = (index | s.every) >> 32
                         ? index % s.every == 0
                         : static_cast<uint32_t>(index) % static_cast<uint32_t>(s.every) == 0;
    if (hit) return true;
  }
  if (s.probability > 0) {
    if (s.probability >= 1) return true;
    const double u = static_cast<double>(mix64(s.seed ^ mix64(index)) >> 11) * 0x1.0p-53;
    return u < s.probability;
  }
  return false;
}

namespace {
// Why a sampled call was skipped when none of its checks could run for the budget.
constexpr const char* kOverBudget = "the overhead budget was spent (overhead_budget)";
// ... and when one of its first calls' checks was left for a later call for its predicted cost.
constexpr const char* kDeferred =
    "its check would cost more than the whole overhead budget so far (a later call takes it)";
}  // namespace

CheckBudget::CheckBudget(double fraction) : fraction_(fraction), started_(monotonicSeconds()) {}

void CheckBudget::setChecks(std::vector<std::string> names) {
  names_ = std::move(names);
  check_used_ns_ = std::make_unique<std::atomic<int64_t>[]>(names_.size());
  log_ratio_sum_ = std::make_unique<std::atomic<double>[]>(names_.size());
  ratios_ = std::make_unique<std::atomic<uint64_t>[]>(names_.size());
}

size_t CheckBudget::checkId(const std::string& name) const {
  return static_cast<size_t>(std::find(names_.begin(), names_.end(), name) - names_.begin());
}

double CheckBudget::allowedSeconds() const {
  return fraction_ * std::max(monotonicSeconds() - started_, kMinWindow);
}

bool CheckBudget::spent() const { return fraction_ > 0 && spentOf(allowedSeconds()); }

bool CheckBudget::spentOf(double allowed) const {
  if (static_cast<double>(used_ns_.load(std::memory_order_relaxed)) * 1e-9 <= allowed)
    return false;
  if (!said_.exchange(true))
    logMessage(FUMI_LOG_WARN,
               fmt::format("overhead budget reached (checks took more than {:g}% of the run so "
                           "far): until they are back under it, a check runs only while it is "
                           "within its share (1/{} of the budget) and a sampled call none of "
                           "whose checks is within its share is skipped",
                           fraction_ * 100, std::max<size_t>(names_.size(), 1)));
  return true;
}

bool CheckBudget::withinShare(size_t id, double predicted) const {
  return fraction_ <= 0 || withinShareOf(id, predicted, allowedSeconds());
}

bool CheckBudget::withinShareOf(size_t id, double predicted, double allowed) const {
  if (id >= names_.size()) return false;
  // Time no check is charged with (an adapter's copies, the bookkeeping around the checks) is
  // shared by all: the shares still add up to the whole budget.
  const double n = static_cast<double>(names_.size());
  const int64_t unattributed = std::max<int64_t>(
      used_ns_.load(std::memory_order_relaxed) - checks_ns_.load(std::memory_order_relaxed), 0);
  const double mine = static_cast<double>(check_used_ns_[id].load(std::memory_order_relaxed)) +
                      static_cast<double>(unattributed) / n;
  return mine * 1e-9 + predicted <= allowed / n;
}

bool CheckBudget::allows(size_t id, double predicted) const {
  if (fraction_ <= 0) return true;
  const double allowed = allowedSeconds();  // one clock read for the three tests
  if (!spentOf(allowed) &&
      static_cast<double>(used_ns_.load(std::memory_order_relaxed)) * 1e-9 + predicted <= allowed)
    return true;
  return withinShareOf(id, predicted, allowed);
}

bool CheckBudget::affordsFirst(double predicted) const {
  return fraction_ <= 0 || predicted <= allowedSeconds();
}

double CheckBudget::predict(size_t id, double op_ratio, double op_seconds) const {
  if (fraction_ <= 0 || !(op_seconds > 0)) return 0;
  if (op_ratio > 0) return op_ratio * op_seconds;
  if (id >= names_.size()) return 0;
  const uint64_t n = ratios_[id].load(std::memory_order_relaxed);
  if (!n) return 0;
  return std::exp(log_ratio_sum_[id].load(std::memory_order_relaxed) / static_cast<double>(n)) *
         op_seconds;
}

void CheckBudget::learnCost(size_t id, double ratio) {
  if (id >= names_.size() || !(ratio > 0) || !std::isfinite(ratio)) return;
  const double l = std::log(ratio);
  double sum = log_ratio_sum_[id].load(std::memory_order_relaxed);
  while (!log_ratio_sum_[id].compare_exchange_weak(sum, sum + l, std::memory_order_relaxed)) {
  }
  ratios_[id].fetch_add(1, std::memory_order_relaxed);
}

void CheckBudget::restartAfterFork() {
  started_ = monotonicSeconds();
  used_ns_.store(0);
  checks_ns_.store(0);
  for (size_t i = 0; i < names_.size(); ++i) {
    check_used_ns_[i].store(0);
    log_ratio_sum_[i].store(0);
    ratios_[i].store(0);
  }
  said_.store(false);
}

void CheckBudget::charge(double seconds) {
  used_ns_.fetch_add(static_cast<int64_t>(seconds * 1e9), std::memory_order_relaxed);
}

void CheckBudget::chargeCheck(size_t id, double seconds) {
  if (id >= names_.size()) return;
  const auto ns = static_cast<int64_t>(seconds * 1e9);
  check_used_ns_[id].fetch_add(ns, std::memory_order_relaxed);
  checks_ns_.fetch_add(ns, std::memory_order_relaxed);
}

RuleSampler* OpDecision::select(const CallFacts& call, uint64_t call_index) {
  for (auto& cand : candidates) {
    if (cand->per_call && !perCallMatch(cand->rule->rule->match, site_, call)) continue;
    // First matching rule decides, even when it checks nothing (an exclusion rule).
    if (cand->rule->checks.empty()) return nullptr;
    const uint64_t index =
        single_ ? call_index : cand->matched.fetch_add(1, std::memory_order_relaxed);
    // A call the rule does not sample is taken for a first call's check deferred for its cost
    // once the budget affords it, as predicted from the op's last sampled call (runChecks
    // decides on this call's own time).
    const bool hit = sampleHit(cand->rule->rule->sample, index);
    const bool owed =
        !hit && cand->owed.load(std::memory_order_relaxed) && affordsOwed(*cand, call.size);
    if (!hit && !owed) return nullptr;
    // `first: N` calls are checked whatever the budget (N per op: a bounded cost, and the
    // coverage a run is guaranteed) unless one alone would cost more than the budget so far;
    // they are charged like any other check. Later calls while the budget is spent only if one
    // of their checks is within its share (runChecks).
    if (!owed && index >= cand->rule->rule->sample.first && budget_.spent() &&
        std::none_of(cand->rule->checks.begin(), cand->rule->checks.end(),
                     [&](const CheckInstance& ci) { return budget_.withinShare(ci.budget_id); })) {
      site_.countSkipped(kOverBudget);
      return nullptr;
    }
    // Take one of max_checks; past the cap the counter only grows, which is harmless.
    const uint64_t max = cand->rule->rule->sample.max_checks;
    const uint64_t taken = cand->checked.fetch_add(1, std::memory_order_relaxed);
    if (taken + 1 >= max) exhausted(*cand);
    if (taken >= max) return nullptr;
    return cand.get();
  }
  return nullptr;
}

bool OpDecision::affordsOwed(const RuleSampler& s, int64_t size) const {
  const int64_t last_size = s.last_size.load(std::memory_order_relaxed);
  const double scale =
      last_size > 0 ? static_cast<double>(size) / static_cast<double>(last_size) : 1.0;
  const double op_s = s.last_op_s.load(std::memory_order_relaxed) * scale;
  for (size_t j = 0; j < s.rule->checks.size(); ++j)
    if (s.check_owed[j].load(std::memory_order_relaxed) &&
        budget_.affordsFirst(budget_.predict(s.rule->checks[j].budget_id,
                                             s.check_ratio[j].load(std::memory_order_relaxed),
                                             op_s)))
      return true;
  return false;
}

void OpDecision::exhausted(RuleSampler& s) {
  if (s.exhausted.exchange(true)) return;
  if (exhausted_.fetch_add(1) + 1 < checking_) return;
  // Safe to drop: a null decision only skips select(), and no candidate can check any more.
  // The OpDecision itself stays alive (owned by the engine) for threads still inside select().
  OpDecision* self = this;
  site_.decision.compare_exchange_strong(self, nullptr);
}

Engine::Engine(Policy policy, Reporter& reporter, std::vector<std::string> plugin_dirs)
    : policy_(std::move(policy)),
      budget_(policy_.overhead_budget),
      reporter_(reporter),
      plugin_dirs_(std::move(plugin_dirs)) {
  instantiate();
}

Engine::~Engine() {
  for (auto& r : rules_)
    for (auto& ci : r->checks)
      if (ci.instance && ci.slot->lib.plugin->destroy) {
        try {
          ci.slot->lib.plugin->destroy(ci.instance);
        } catch (...) {
        }
      }
}

PluginSlot* Engine::pluginFor(const std::string& name, const SourceLoc& loc) {
  for (auto& p : plugins_)
    if (p->lib.name == name) return p->lib.plugin ? p.get() : nullptr;
  auto slot = std::make_unique<PluginSlot>();
  slot->lib = loadPlugin(name, plugin_dirs_);
  PluginSlot* result = nullptr;
  if (slot->lib.plugin) {
    addOwnObject(reinterpret_cast<const void*>(slot->lib.plugin->check));
    result = slot.get();
  } else {
    // Reported once per plugin name; every check entry naming it is skipped.
    reporter_.error("plugin " + name, locationOf(loc), slot->lib.error);
    internalError(("plugin " + name).c_str(), slot->lib.error.c_str());
  }
  slot->lib.name = name;
  plugins_.push_back(std::move(slot));
  return result;
}

void Engine::instantiate() {
  for (const Rule& rule : policy_.rules) {
    auto rr = std::make_unique<RuleRuntime>();
    rr->rule = &rule;
    for (const CheckSpec& spec : rule.checks) {
      PluginSlot* slot = pluginFor(spec.plugin, spec.loc);
      if (!slot) continue;
      std::vector<fumi_param> items;
      for (const auto& [k, v] : spec.params) items.push_back({k.c_str(), v.c_str()});
      fumi_params params{};
      params.struct_size = sizeof(params);
      params.count = static_cast<int32_t>(items.size());
      params.items = items.data();
      params.tolerance = spec.tolerance;
      params.seed = mix64(std::hash<std::string>{}(rule.name + "/" + spec.plugin));
      const fumi_kind kind = pluginKind(*slot->lib.plugin);
      params.kind_tolerances = policy_.kind_tolerances[kind].data();
      params.error_model = kind == FUMI_KIND_ERROR ? policy_.error_model : FUMI_TOLERANCE_TABLE;
      char err[512] = "";
      void* inst = nullptr;
      try {
        const fumi_host_api* host =
            slot->lib.abi_version == FUMI_PLUGIN_ABI_VERSION ? &kHostApi : &kHostApiV1;
        inst = slot->lib.plugin->create(host, &params, err, sizeof err);
      } catch (const std::exception& e) {
        std::snprintf(err, sizeof err, "create threw: %s", e.what());
      } catch (...) {
        std::snprintf(err, sizeof err, "create threw an exception");
      }
      if (!inst) {
        const std::string msg = err[0] ? err : "plugin rejected its parameters";
        reporter_.error("plugin " + spec.plugin, locationOf(spec.loc), msg);
        internalError(("plugin " + spec.plugin).c_str(), msg.c_str());
        continue;
      }
      rr->checks.push_back({&spec, slot, inst, spec.plugin, kind});
    }
    rules_.push_back(std::move(rr));
  }
  // The overhead budget's shares: one per check the policy names.
  std::vector<std::string> names;
  for (const auto& rr : rules_)
    for (const CheckInstance& ci : rr->checks)
      if (std::find(names.begin(), names.end(), ci.name) == names.end()) names.push_back(ci.name);
  budget_.setChecks(names);
  for (auto& rr : rules_)
    for (CheckInstance& ci : rr->checks) ci.budget_id = budget_.checkId(ci.name);
}

void Engine::compileAll() {
  for (OpSite* s = firstSite(); s; s = s->next) compileSite(*s);
}

void Engine::compileSite(OpSite& site) {
  std::lock_guard<std::mutex> lock(compile_mu_);
  auto dec = std::make_unique<OpDecision>(site, budget_);
  bool any_checks = false;
  for (auto& rr : rules_) {
    if (!staticMatch(rr->rule->match, site)) continue;
    auto sampler = std::make_unique<RuleSampler>();
    sampler->rule = rr.get();
    sampler->check_seen = std::make_unique<std::atomic<uint64_t>[]>(rr->checks.size());
    sampler->check_taken = std::make_unique<std::atomic<uint64_t>[]>(rr->checks.size());
    sampler->check_ratio = std::make_unique<std::atomic<double>[]>(rr->checks.size());
    sampler->check_owed = std::make_unique<std::atomic<uint32_t>[]>(rr->checks.size());
    any_checks = any_checks || !rr->checks.empty();
    if (!rr->checks.empty()) ++dec->checking_;
    sampler->per_call = hasPerCallConditions(rr->rule->match, site);
    const bool always = !sampler->per_call;
    dec->candidates.push_back(std::move(sampler));
    if (always) break;  // later rules can never be reached for this op
  }
  if (!any_checks) return;  // fast path stays: decision == nullptr
  dec->single_ = dec->candidates.size() == 1 && !dec->candidates[0]->per_call;
  site.decision.store(dec.get(), std::memory_order_release);
  decisions_.push_back(std::move(dec));
}

bool Engine::checksBackend(const char* backend) const {
  for (const auto& rr : rules_)
    if (!rr->checks.empty() && globMatch(rr->rule->match.backend, backend)) return true;
  return false;
}

void Engine::resetSamplingAfterFork() {
  std::lock_guard<std::mutex> lock(compile_mu_);
  for (auto& d : decisions_) {
    for (auto& cand : d->candidates) {
      cand->matched.store(0);
      cand->checked.store(0);
      cand->exhausted.store(false);
      for (size_t j = 0; j < cand->rule->checks.size(); ++j) {
        cand->check_seen[j].store(0);
        cand->check_taken[j].store(0);
        cand->check_owed[j].store(0);
        cand->check_ratio[j].store(0);
      }
      cand->owed.store(0);
      cand->last_op_s.store(0);
      cand->last_size.store(0);
    }
    d->exhausted_.store(0);
    d->site_.decision.store(d.get());  // an exhausted parent's child starts afresh
  }
}

void setDeviceMemory(const DeviceMemory* ops) { g_device.store(ops); }

namespace {
thread_local std::vector<std::function<void(bool)>> t_deferred;
}  // namespace

void deferUntilSettled(std::function<void(bool write)> finish) {
  t_deferred.push_back(std::move(finish));
}

void settleDeferred(bool write) {
  if (t_deferred.empty()) return;
  std::vector<std::function<void(bool)>> due;
  due.swap(t_deferred);
  for (const auto& finish : due) finish(write);
}

CallOrigin Engine::captureOrigin(const OpSite& site, uint64_t call_index) const {
  InsideScope inside;
  const int depth = reporter_.settings().stack_depth;
  CallOrigin o;
  o.frames = captureFrames(depth);
  o.python_stack = capturePythonStack(depth);
  o.phase = currentPhase();
  if (*o.phase) o.context = currentContext(&site, call_index);
  return o;
}

namespace {
// Takes one from a positive count (another thread may have taken the last).
bool takeOne(std::atomic<uint32_t>& n) {
  uint32_t v = n.load(std::memory_order_relaxed);
  while (v && !n.compare_exchange_weak(v, v - 1, std::memory_order_relaxed)) {
  }
  return v != 0;
}
}  // namespace

void Engine::deferFirstCheck(Call& call, RuleSampler& sampler, size_t j, double predicted) {
  sampler.check_owed[j].fetch_add(1, std::memory_order_relaxed);
  sampler.owed.fetch_add(1, std::memory_order_relaxed);
  const double allowed = budget_.allowedSeconds();
  logMessage(FUMI_LOG_INFO,
             fmt::format("{}: {}'s check of call {} (one of its first) is predicted to take "
                         "{:.2g} s ({:.3g} s of op), more than the overhead budget allows so far "
                         "({:.2g} s: {:g}% of {:.0f} s): a later call of the op takes it once the "
                         "budget affords it",
                         call.site().name, sampler.rule->checks[j].name,
                         call.info().call_index, predicted, call.opSeconds(), allowed,
                         budget_.fraction() * 100, allowed / budget_.fraction()));
}

void Engine::learnCost(RuleSampler& sampler, size_t j, double ratio) {
  std::atomic<double>& most = sampler.check_ratio[j];
  double r = most.load(std::memory_order_relaxed);
  while (ratio > r && !most.compare_exchange_weak(r, ratio, std::memory_order_relaxed)) {
  }
  budget_.learnCost(sampler.rule->checks[j].budget_id, ratio);
}

bool Engine::runChecks(Call& call, RuleSampler& sampler, const CallOrigin* origin) {
  InsideScope inside;
  const double started = monotonicSeconds();
  const Rule& rule = *sampler.rule->rule;
  // Where the call was made, not where it is checked (a checker thread has no framework ops).
  call.setPhase(origin ? origin->phase : currentPhase());
  uint64_t checked = 0, attempted = 0, over_budget = 0, deferred = 0;
  bool violated = false, error_violated = false;
  const double reported_before = t_report_seconds;
  const double op_s = call.opSeconds();
  if (op_s > 0) {
    sampler.last_op_s.store(op_s, std::memory_order_relaxed);
    sampler.last_size.store(call.size(), std::memory_order_relaxed);
  }
  for (size_t j = 0; j < sampler.rule->checks.size(); ++j) {
    CheckInstance& ci = sampler.rule->checks[j];
    if (ci.slot->disabled.load(std::memory_order_relaxed)) continue;
    // A check with its own sample runs on the calls it picks among those the rule picked,
    // numbered 0, 1, 2, ... per op, and on those that pay a first call's check it deferred.
    const uint64_t seen = sampler.check_seen[j].fetch_add(1, std::memory_order_relaxed);
    const bool owes = sampler.check_owed[j].load(std::memory_order_relaxed) > 0;
    if (ci.spec->has_sample) {
      if (!owes && !sampleHit(ci.spec->sample, seen)) continue;
      if (sampler.check_taken[j].fetch_add(1, std::memory_order_relaxed) >=
          ci.spec->sample.max_checks)
        continue;
    }
    // Its first calls (the rule's `first:`, or its own) run whatever the budget has left
    // unless one alone is predicted to cost more than the budget so far (then a later call
    // runs it, once the budget affords it); later ones while their predicted cost fits the
    // budget or this check's share (CheckBudget).
    const uint64_t first = ci.spec->has_sample ? ci.spec->sample.first : rule.sample.first;
    const double predicted =
        budget_.predict(ci.budget_id, sampler.check_ratio[j].load(std::memory_order_relaxed), op_s);
    if (seen < first || owes) {
      if (!budget_.affordsFirst(predicted)) {
        if (seen < first) deferFirstCheck(call, sampler, j, predicted);
        call.site().recordCheckOverBudget(ci.name);
        ++deferred;
        continue;
      }
      if (seen >= first && takeOne(sampler.check_owed[j])) takeOne(sampler.owed);
    } else if (!budget_.allows(ci.budget_id, predicted)) {
      call.site().recordCheckOverBudget(ci.name);
      ++over_budget;
      continue;
    }
    ++attempted;
    fumi_call handle{&call,   &reporter_, &rule, &ci, policy_.scratch_budget,
                     &policy_, origin,     0,     {},  ScratchArena::local().mark(),
                     false};
    const double check_started = monotonicSeconds();
    const double report_started = t_report_seconds;
    fumi_status st = FUMI_ERROR;
    std::string what;
    try {
      st = ci.slot->lib.plugin->check(ci.instance, &handle);
    } catch (const std::exception& e) {
      what = std::string("threw: ") + e.what();
    } catch (...) {
      what = "threw an unknown exception";
    }
    settleDeferred(false);  // results the check did not wait for: its pointers are gone
    releaseAllocations(handle);
    violated = violated || handle.violated;
    error_violated = error_violated || (handle.violated && ci.kind == FUMI_KIND_ERROR);
    switch (st) {
      case FUMI_OK: ++checked; break;
      case FUMI_SKIPPED:
      case FUMI_UNSUPPORTED: break;
      case FUMI_NO_SCRATCH: {
        static std::atomic<bool> warned{false};
        if (!warned.exchange(true))
          reporter_.log().warn(
              "scratch budget of {} bytes too small for {} (check {}{}); such checks are "
              "skipped (raise scratch_budget to check them)",
              policy_.scratch_budget, call.info().op, ci.name,
              handle.needed ? fmt::format(": it asked for at least {:.0f} MiB",
                                          std::ceil(static_cast<double>(handle.needed) / (1 << 20)))
                            : std::string());
        break;
      }
      default: {
        if (what.empty()) what = "returned an error";
        const std::string msg = "check on " + std::string(call.info().op) + " " + what +
                                "; plugin disabled for the rest of the run";
        if (!ci.slot->disabled.exchange(true)) {
          reporter_.error("plugin " + ci.name, locationOf(ci.spec->loc), msg);
          internalError(("plugin " + ci.name).c_str(), msg.c_str());
        }
      }
    }
    const double check_seconds = std::max(
        monotonicSeconds() - check_started - (t_report_seconds - report_started), 0.0);
    call.site().recordCheck(ci.name, st, handle.violated, check_seconds);
    budget_.chargeCheck(ci.budget_id, check_seconds);
    if (st == FUMI_OK && op_s >= CheckBudget::kMinOpSeconds)
      learnCost(sampler, j, check_seconds / op_s);
  }
  const double ended = monotonicSeconds();
  const double reported = t_report_seconds - reported_before;
  if (reported > 0) call.site().addReportSeconds(reported);
  const double seconds = std::max(ended - started - reported, 0.0);
  budget_.charge(seconds);
  if (!attempted && (over_budget || deferred))
    call.site().countSkipped(over_budget ? kOverBudget : kDeferred);
  // Scratch stays for the next checks only while they come often (scratch_arena.h).
  thread_local CheckDuty duty;
  ScratchArena::local().trim(scratchToKeep(duty.checked(started, ended),
                                           static_cast<size_t>(policy_.scratch_budget)));
  // A call whose every check sampled itself out was not checked, nor skipped.
  call.site().addStats(checked ? 1 : 0, !checked && attempted ? 1 : 0, seconds);
  if (violated && rule.action == Action::kAbort) {
    reporter_.log().critical("rule '{}' says abort on violation: aborting", rule.name);
    reporter_.summary();
    std::abort();
  }
  return error_violated;
}

}  // namespace fumi
