// engine.h — the compiled policy and check execution.
//
// compilePolicy() turns the Policy into one OpDecision per op site: the rules whose static
// conditions (op glob, backend, dtype) match that op, in order. The hot path only reaches
// select() for ops that some rule can check. runChecks() executes a rule's checks on a decoded
// Call through the plugin host API, isolating plugin failures.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "adapter_api.h"
#include "context.h"
#include "fumi/plugin.h"
#include "plugin_loader.h"
#include "policy.h"
#include "runtime.h"
#include "scratch_arena.h"
#include "site.h"

namespace fumi {

class Call;
class Reporter;

// One loaded plugin, shared by every check entry that names it.
struct PluginSlot {
  PluginLibrary lib;
  std::atomic<bool> disabled{false};
};

// One `checks:` entry of one rule, instantiated.
struct CheckInstance {
  const CheckSpec* spec = nullptr;
  PluginSlot* slot = nullptr;
  void* instance = nullptr;
  std::string name;  // plugin name, as reported
  fumi_kind kind = FUMI_KIND_ERROR;  // what its findings mean (fumi_plugin.kind)
  size_t budget_id = 0;  // its share of the overhead budget (CheckBudget::checkId(name))
};

struct RuleRuntime {
  const Rule* rule = nullptr;
  std::vector<CheckInstance> checks;
};

// What select() needs to know about one call. Conditions the op site already fixes (name,
// backend, a static dtype) were decided when the policy was compiled; the rest per call.
struct CallFacts {
  int64_t size = 0;                      // problem size (MatchSpec::min_size)
  fumi_dtype dtype = FUMI_DTYPE_UNKNOWN;  // the call's dtype, for sites without a static one
  const char* device = "cpu";
  fumi_dtype autocast = FUMI_DTYPE_UNKNOWN;  // the autocast region's dtype; UNKNOWN: none
  // The engine's numerical notes (engine_notes.h names), comma-separated; nullptr or "": none.
  const char* notes = nullptr;
};

// Per (rule, op) sampling state.
struct RuleSampler {
  RuleRuntime* rule = nullptr;
  // The rule has conditions only a call can answer (size, dtype of a dtype-less site, phase,
  // device); otherwise every call of the op matches it.
  bool per_call = false;
  std::atomic<uint64_t> matched{0};
  std::atomic<uint64_t> checked{0};
  std::atomic<bool> exhausted{false};
  // Per check of the rule with its own `sample:`: the calls of this op the rule sampled so far
  // (the check's sampling index) and those the check took (for its max_checks).
  std::unique_ptr<std::atomic<uint64_t>[]> check_seen, check_taken;
  // Per check: the most it cost on this op per second of the op's own time (0: not measured;
  // CheckBudget::predict), and the first-call checks it deferred for their predicted cost and
  // still owes (CheckBudget::affordsFirst). `owed` is their sum, which select() reads on the
  // calls the rule does not sample; `last_op_s` the op's own time on its last sampled call
  // whose time is known, of problem size `last_size` (CallFacts::size): select() predicts a
  // call's time from its size in proportion.
  std::unique_ptr<std::atomic<double>[]> check_ratio;
  std::unique_ptr<std::atomic<uint32_t>[]> check_owed;
  std::atomic<uint32_t> owed{0};
  std::atomic<double> last_op_s{0};
  std::atomic<int64_t> last_size{0};
};

// The policy's overhead_budget: checks may take at most `fraction` of the wall time since the
// engine started, counted over at least kMinWindow so that a job's first checks can run. Each
// check (by name: checksum, highprec, ...) is also charged on its own, and keeps a share of
// 1/n of the budget (n: the checks the policy names) however much the others spent: a check
// may run while the budget is not spent, or while it is within its share (its own time, plus
// its part of the time no check is charged with: an adapter's copies). So reruns that
// overspend (a few large calls) cannot stop the cheap checks, and while one check is over its
// share the others together can pass the budget by their shares at most. A sampled call none
// of whose checks may run is not checked (counted as skipped). The clock is read only for
// sampled calls.
//
// A check's cost is predicted from its op's own time (Call::opSeconds), times the seconds the
// check took per second of op on the calls it checked before: on this op (the most), or on
// other ops while it has not checked this one (the geometric mean), learnt from ops of at least
// kMinOpSeconds (below, a check's fixed costs are most of it). A later call's check runs only
// if its predicted cost fits what is left (of the budget, or of its share). A first call's
// check runs whatever is left, unless it alone is predicted to cost more than the whole budget
// so far: it then waits for a later call of the op, the first one the budget affords (a
// 9x9 convolution's f64 backward on the CPU took 20 s, 40x the op: a 3% budget affords it
// after 11 minutes of run).
class CheckBudget {
 public:
  static constexpr double kMinWindow = 10.0;  // seconds
  static constexpr double kMinOpSeconds = 1e-3;
  explicit CheckBudget(double fraction);
  // The checks sharing the budget, before any call (Engine::instantiate).
  void setChecks(std::vector<std::string> names);
  // A check's index in setChecks' names; names.size() for a name not there (within no share).
  size_t checkId(const std::string& name) const;
  bool spent() const;
  bool withinShare(size_t id, double predicted = 0) const;
  // Whether check `id`, predicted to take `predicted` seconds (0: unknown), may run on a call
  // past its first ones.
  bool allows(size_t id, double predicted = 0) const;
  // Whether a first call's check predicted to take `predicted` seconds may run.
  bool affordsFirst(double predicted) const;
  // Check `id`'s predicted seconds on a call whose op took `op_seconds` (0: unknown), given the
  // most it cost per second of op on this op so far (`op_ratio`, 0: none); 0 when unknown.
  double predict(size_t id, double op_ratio, double op_seconds) const;
  // Check `id` took `ratio` seconds per second of an op of at least kMinOpSeconds.
  void learnCost(size_t id, double ratio);
  // The budget so far (fraction x the run's time, at least kMinWindow), for messages.
  double allowedSeconds() const;
  // The whole time of a call's checks, or an adapter's work around them (apiAccount).
  void charge(double seconds);
  void chargeCheck(size_t id, double seconds);  // one check's own part of what charge() counted
  double fraction() const { return fraction_; }
  // In a fork child: its budget is a fraction of its own run, from the fork, with nothing used
  // (a child of a parent that had spent its budget checked nothing), and nothing learnt: its
  // checks' costs are measured in the child (the parent's were taken on other loads, other
  // thread counts, before copy-on-write), as in any new process; until then a check's cost is
  // unknown and it runs while the budget is not spent.
  void restartAfterFork();

 private:
  // spent() and withinShare() against a budget of `allowed` seconds (allowedSeconds()).
  bool spentOf(double allowed) const;
  bool withinShareOf(size_t id, double predicted, double allowed) const;

  const double fraction_;  // 0: unlimited
  double started_;
  mutable std::atomic<bool> said_{false};  // the "budget reached" warning, once per process
  std::atomic<int64_t> used_ns_{0};
  std::atomic<int64_t> checks_ns_{0};  // the part of used_ns_ charged to a check (chargeCheck)
  std::vector<std::string> names_;
  std::unique_ptr<std::atomic<int64_t>[]> check_used_ns_;
  // Per check: the sum of the logs of its cost ratios (learnCost) and their count.
  std::unique_ptr<std::atomic<double>[]> log_ratio_sum_;
  std::unique_ptr<std::atomic<uint64_t>[]> ratios_;
};

class OpDecision {
 public:
  OpDecision(OpSite& site, CheckBudget& budget) : site_(site), budget_(budget) {}
  // The sampler of the first rule matching this call, if that rule checks it. `call_index` is
  // the call's index among all calls of the op (OpSite::onCall).
  RuleSampler* select(const CallFacts& call, uint64_t call_index);
  std::vector<std::unique_ptr<RuleSampler>> candidates;

 private:
  // A candidate reached its max_checks. Once every candidate that checks anything has, no call
  // of this op can be checked again: the site goes back to the no-decision fast path.
  void exhausted(RuleSampler& s);
  // Whether a check of `s` owes a first call's check that the budget affords on a call of
  // problem size `size`.
  bool affordsOwed(const RuleSampler& s, int64_t size) const;

  OpSite& site_;
  CheckBudget& budget_;
  std::atomic<size_t> exhausted_{0};
  size_t checking_ = 0;  // candidates with checks (set by compileSite)
  // One candidate without per-call conditions: every call of the op reaches it, so its match index is
  // the call index and the shared `matched` counter is not needed.
  bool single_ = false;
  friend class Engine;
};

// A device kernel a call launched, as a profiling interface (CUPTI: cuda/kernels.h) saw it.
struct KernelRecord {
  std::string name;       // as the profiler reports it (mangled for C++ kernels)
  uint64_t start_ns = 0;  // the profiler's clock; 0: unknown
  uint64_t end_ns = 0;
};

// Where a call came from, taken on the calling thread when its checks run later on another
// thread (the CUDA checker): reports then name the program's stacks and framework ops, not the
// checker's. Native frames stay unsymbolised until a violation needs them.
struct CallOrigin {
  std::vector<const void*> frames;
  std::vector<std::string> python_stack;
  std::vector<ContextEntry> context;
  const char* phase = "";
  std::vector<KernelRecord> kernels;  // what the call launched, in launch order, when recorded
};

// Device memory for the host API (alloc/gather/scatter of FUMI_MEMORY_DEVICE operands), set by
// the CUDA backend once it runs; checks of device calls run on its checker thread.
struct DeviceMemory {
  void* (*alloc)(size_t bytes);  // nullptr when none is left
  void (*release)(void* p);
  bool (*toHost)(void* dst, const void* src, size_t bytes);
  bool (*toDevice)(void* dst, const void* src, size_t bytes);
  // The backend's own kernels (the semantics of Call::contractDevice, scanDevice,
  // compareDevice, mapDevice and convolveDevice), or FUMI_UNSUPPORTED where it has none for the case: the work
  // is then done on host copies.
  fumi_status (*contract)(const fumi_tensor& view, int32_t dim, int32_t count,
                          const double* vectors, double* out);
  fumi_status (*scan)(const fumi_tensor& t, const void* data, fumi_dtype dtype, fumi_scan* out);
  fumi_status (*compare)(const fumi_tensor& t, const void* a, fumi_dtype a_dtype, const void* b,
                         fumi_dtype b_dtype, const fumi_compare_spec& spec, fumi_comparison* out);
  fumi_status (*map)(const fumi_tensor& t, const void* src, fumi_dtype src_dtype, void* dst,
                     fumi_dtype dst_dtype, const fumi_map_spec& spec, uint64_t* changed);
  fumi_status (*convolve)(const fumi_device_conv& conv);  // Call::convolveDevice
};
void setDeviceMemory(const DeviceMemory* ops);

// Work a primitive left queued on a device, whose result it stores later (a map's count under
// FUMI_MAP_CHANGED_LATER, plugin.h): finish(write) waits for it and, where `write`, stores the
// result where the plugin asked. This thread's list, run and emptied by settleDeferred: with
// write after the check's next compare, scan, project or contract (the host API's), without
// when the check returns (its pointers are gone then).
void deferUntilSettled(std::function<void(bool write)> finish);
void settleDeferred(bool write);

// Tensor t's logical elements read from `buffer` holding `dtype` (nullptr: its own data in its
// own dtype), host or device memory, as dense fp64 in `out`: row-major, or in the tensor's
// memory order (the host API's gather and gather_in). Device memory is read through `call`
// (Call::toHost), or the CUDA runtime's where call is nullptr.
fumi_status gatherTensor(const fumi_tensor& t, const void* buffer, fumi_dtype dtype, double* out,
                         fumi_order order = FUMI_ORDER_LOGICAL, Call* call = nullptr);
// Host view of t's elements in `buffer` holding *dtype (nullptr: its own data, *dtype becoming
// its own): the buffer itself in host memory, else a copy in `stage` (scratch_arena.h) read
// through `call` (nullptr: the CUDA runtime's). nullptr when the dtype has no storage or the
// memory cannot be read.
const void* tensorHostData(const fumi_tensor& t, const void* buffer, fumi_dtype* dtype,
                           Stage& stage, Call* call);
// Tensor t's own elements as `out_dtype` (f64 or f32: exact for every narrower dtype) in `out`
// at the element strides `strides`: a dense layout of its shape in any dimension order
// (channels-last for the convolution projection).
fumi_status gatherTensorAt(const fumi_tensor& t, void* out, fumi_dtype out_dtype,
                           const int64_t* strides);

// A violation found by the host itself (not by a plugin's verdict on a Call: a NaN origin, a
// precision cost over its bound) for `site`'s call `index`, on the calling thread: records the
// metric as violated and writes a `violation` event with the calling thread's phase and
// stacks, plus the fields of `more` (its `python_stack`, where it has one, taken already by the
// caller on this thread: not taken again). `past_phase`: the call ran earlier, in that phase (a NaN
// origin found looking back): no stacks, as the calling thread's are not the call's.
void reportHostViolation(OpSite& site, uint64_t index, const std::string& check, fumi_kind kind,
                         const std::string& metric, double value, double tolerance,
                         const nlohmann::json& more, const char* past_phase = nullptr);

// Pure sampling arithmetic (unit-tested): is the `index`-th matching call checked?
bool sampleHit(const SampleSpec& s, uint64_t index);

class Engine {
 public:
  Engine(Policy policy, Reporter& reporter, std::vector<std::string> plugin_dirs);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Compile decisions for every registered site (and later for interned ones).
  void compileAll();
  void compileSite(OpSite& site);

  // Run the checks of `sampler`'s rule on `call` (the original call already ran). `origin`:
  // the call's stacks and context when the checks run away from the calling thread. Returns
  // whether a check of kind error was violated.
  bool runChecks(Call& call, RuleSampler& sampler, const CallOrigin* origin = nullptr);
  // The calling thread's stacks and framework context, for a check that runs later.
  CallOrigin captureOrigin(const OpSite& site, uint64_t call_index) const;

  const Policy& policy() const { return policy_; }
  CheckBudget& budget() { return budget_; }
  // Whether some rule with a working check can match ops of `backend`.
  bool checksBackend(const char* backend) const;

  // In a forked child: sampling starts afresh (first N, max_checks) like in any new process,
  // and so do the checks' learnt costs (CheckBudget::restartAfterFork).
  void resetSamplingAfterFork();

 private:
  void instantiate();
  // A first call's check of `sampler`'s check j, predicted to cost more than the budget so
  // far, is left for a later call (RuleSampler::check_owed), and said.
  void deferFirstCheck(Call& call, RuleSampler& sampler, size_t j, double predicted);
  // Check j of `sampler` took `ratio` seconds per second of its op.
  void learnCost(RuleSampler& sampler, size_t j, double ratio);
  PluginSlot* pluginFor(const std::string& name, const SourceLoc& loc);

  Policy policy_;
  CheckBudget budget_;
  Reporter& reporter_;
  std::vector<std::string> plugin_dirs_;
  std::vector<std::unique_ptr<PluginSlot>> plugins_;
  std::vector<std::unique_ptr<RuleRuntime>> rules_;
  std::vector<std::unique_ptr<OpDecision>> decisions_;  // guarded by compile_mu_
  std::mutex compile_mu_;  // sites are interned (and compiled) from any thread
};

// The engine of the running process (null until init succeeded).
Engine* engine();

// Build the Call of a sampled call (`build` returns a unique_ptr to it) and run the sampler's
// checks on it. Nothing escapes: a failure inside fumi is an internal error, the program goes on.
// Returns whether a check of kind error was violated.
template <class Build>
bool checkSafely(OpSite& site, RuleSampler& sampler, Build&& build) {
  InsideScope inside;
  try {
    auto call = build();
    return engine()->runChecks(*call, sampler);
  } catch (const std::exception& e) {
    internalError(site.name, e.what());
  } catch (...) {
    internalError(site.name, "unknown exception");
  }
  return false;
}

}  // namespace fumi
