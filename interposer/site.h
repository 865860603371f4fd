// site.h — one OpSite per intercepted operation (one per hook-table row; framework adapters
// intern more at run time). It holds the counters and the compiled policy decision that the
// hot path reads: a relaxed counter increment plus one acquire load decide "not sampled".
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "fumi/plugin.h"

namespace fumi {

class OpDecision;

// Calls of ops that no rule can check are counted per thread: a shared atomic counter costs
// tens of nanoseconds per call once two threads call the same op. Each thread owns one block
// (a slot per static site), created on its first such call and never freed.
constexpr uint32_t kMaxCountedSites = 64;
struct ThreadCounts {
  std::atomic<uint64_t> n[kMaxCountedSites] = {};
  ThreadCounts* next = nullptr;
};
extern __thread ThreadCounts* t_counts;
ThreadCounts* registerThreadCounts();

// The distribution of one check metric over an op's checked calls: count, violations, exact
// maximum, and a log histogram for the median and p99 (4 bins per octave over [2^-64, 2^32):
// a quantile is read as its bin's geometric middle, within 9% of the true value; zeros and
// values below the range fall in bin 0, values above in the last).
struct MetricStats {
  static constexpr int kOctaveBins = 4;
  static constexpr int kMinExp = -64;
  static constexpr int kBins = (32 - kMinExp) * kOctaveBins;
  fumi_kind kind = FUMI_KIND_ERROR;
  uint64_t count = 0;
  uint64_t violations = 0;
  uint64_t nan = 0;  // metrics that could not be computed (NaN): in count, not in the bins
  double max = 0;
  // The largest value / tolerance over the calls judged against a tolerance (NaN: none): how
  // close the op came to a violation where tolerances differ per call (policy.md).
  double of_tolerance = NAN;
  // Verdicts not raised that left outputs out as rounding noise of their terms (noise_outputs).
  uint64_t noise = 0;
  // The largest figure of those with every output left out (not judged against a tolerance:
  // kept out of count, max and the quantiles, where the figures of rounding noise, 54 for a
  // sum's perturbation, had read as the op's sensitivity; batch 16). NaN: none.
  double noise_max = NAN;
  std::vector<uint32_t> bins;  // kBins, allocated on the first value

  void add(double value, bool violated, double tolerance = NAN);
  // The q-quantile (0 < q <= 1) of the finite values; 0 when there are none.
  double quantile(double q) const;
};

// One check of an op: how often it ran to a verdict, was skipped, raised; its wall time. The
// skips by what the check answered: it cannot judge this call (FUMI_UNSUPPORTED, FUMI_SKIPPED:
// a dtype, layout or op it does not cover, an unusable estimate), the scratch budget was too
// small (FUMI_NO_SCRATCH), or it failed (an error: the plugin is disabled); or it was not
// started: the overhead budget was spent and this check was over its share (CheckBudget).
struct CheckCounts {
  uint64_t runs = 0;
  uint64_t unsupported = 0;
  uint64_t no_scratch = 0;
  uint64_t failed = 0;
  uint64_t budget = 0;
  uint64_t violations = 0;
  double seconds = 0;
  uint64_t skipped() const { return unsupported + no_scratch + failed + budget; }
};

struct OpStats {
  uint64_t checked = 0;
  uint64_t skipped = 0;
  uint64_t violations = 0;
  uint64_t nonfinite_propagated = 0;  // nan_inf findings counted, not raised (propagated)
  uint64_t handled_overflow = 0;  // backward-pass NaN/Inf a loss scaler handled (loss_scaling.h)
  uint64_t autotuning = 0;  // executions found to be a library's autotuning: not in the calls
  double check_seconds = 0;  // wall time spent running checks (reruns included)
  // Wall time a framework adapter spent on the sampled calls outside their checks (copies taken
  // before the op ran, describing it, work after the checks): fumi's cost is both.
  double adapter_seconds = 0;
  // Wall time spent reporting this op's violations (stacks, events): not in check_seconds, nor
  // charged to the overhead budget (Engine::runChecks).
  double report_seconds = 0;
  std::map<std::string, double> worst;  // "check.metric" -> largest value seen
  std::map<std::string, MetricStats> metrics;  // "check.metric" -> its distribution
  std::map<std::string, CheckCounts> checks;   // check name -> its runs
  // Why sampled calls were skipped before any check ran (countSkipped: the overhead budget, an
  // adapter's reason such as sparse tensors) -> how many; past kMaxNotCheckedReasons distinct
  // reasons, the rest count under kOtherReasons.
  std::map<std::string, uint64_t> not_checked;
  // "check.metric" -> violations offered to the text log (report.log_violations) and to the
  // events file (report.violation_events); apart from `metrics`, which the summary writes out.
  std::map<std::string, uint64_t> log_lines, event_lines;
};

struct OpSite {
  OpSite(const char* op_name, const char* backend_name, fumi_dtype op_dtype);
  OpSite(const OpSite&) = delete;
  OpSite& operator=(const OpSite&) = delete;

  // Hot path: no locks, no allocation, and for ops no rule can check no shared write.
  // With a decision, `index` receives the call's 0-based index among all calls of this op:
  // a decision exists from init until it is exhausted, so those calls are the op's first ones.
  OpDecision* onCall(uint64_t& index) {
    OpDecision* d = decision.load(std::memory_order_acquire);
    if (__builtin_expect(d == nullptr, 1) && slot < kMaxCountedSites) {
      ThreadCounts* t = t_counts;
      if (__builtin_expect(t == nullptr, 0)) t = registerThreadCounts();
      std::atomic<uint64_t>& c = t->n[slot];
      c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);  // owner only
      return nullptr;
    }
    index = calls.fetch_add(1, std::memory_order_relaxed);
    return d;
  }

  // Framework ops: every call gets its index, so library-level calls made inside it can name
  // it (context.h). Framework ops are microseconds each; the shared counter is noise there.
  OpDecision* onIndexedCall(uint64_t& index) {
    index = calls.fetch_add(1, std::memory_order_relaxed);
    return decision.load(std::memory_order_acquire);
  }

  // Calls so far: the shared counter plus every thread's block.
  uint64_t totalCalls() const;
  // After fork(): the child starts counting from zero.
  void resetCounts();

  // Hot fields on cache lines of their own: `calls` is written by every call of every thread;
  // `decision` is read by every call and written once (or when the policy is exhausted).
  alignas(64) std::atomic<uint64_t> calls{0};
  alignas(64) std::atomic<OpDecision*> decision{nullptr};
  alignas(64) const char* name;
  uint8_t scaler_marker = 0;  // ScalerMarker of this range or op (loss_scaling.h)
  uint8_t phase_marker = 0;   // the phase it begins (context.h phaseMarkerOf)
  const char* backend;
  fumi_dtype dtype;
  uint32_t slot;  // index in ThreadCounts (>= kMaxCountedSites: counted in `calls` only)
  OpSite* next = nullptr;  // registry list

  std::mutex stats_mu;
  OpStats stats;  // guarded by stats_mu (slow path only)

  void addStats(uint64_t checked, uint64_t skipped, double check_seconds = 0);
  void addAdapterSeconds(double seconds);
  void addReportSeconds(double seconds);
  // A sampled call that will not be checked: counted skipped, by reason (the summary's
  // ops[].not_checked); why is logged (info once per op and reason, debug every time).
  void countSkipped(const char* why);
  static constexpr size_t kMaxNotCheckedReasons = 16;
  static constexpr const char* kOtherReasons = "other reasons";
  void recordCheck(const std::string& check, fumi_status status, bool violated, double seconds);
  void recordCheckOverBudget(const std::string& check);
  // A held NaN/Inf finding (recorded as not violated) turned out a violation / was handled.
  void addHeldViolation(const std::string& key);
  // Counts a violation of `key` ("check.metric") for the text log: true for the first
  // report.log_violations of them (the caller writes its line); the next one writes a line
  // saying the rest are in the events file only.
  bool logsViolation(const std::string& key);
  // The same for the events file (`cap`: the reporter's report.violation_events): false past
  // the cap, whose first crossing logs a line saying the rest are counted in the summary only.
  bool writesViolationEvent(const std::string& key, int cap);
  void addHandledOverflow();
  // `n` calls already counted turned out to be autotuning runs, not the program's calls.
  void retractAutotuning(uint64_t n);
  // `tolerance`: what the value was judged against (NaN: nothing), for MetricStats::of_tolerance.
  // `noise`: a verdict not raised that left outputs out as rounding noise of their terms; with
  // a NaN `tolerance`, every output (nothing judged): then only counted, and its figure goes to
  // MetricStats::noise_max.
  void recordMetric(const std::string& key, fumi_kind kind, double value, bool violated,
                    bool counted_nonfinite = false, double tolerance = NAN, bool noise = false);
  OpStats statsSnapshot();

 private:
  bool withinCap(std::map<std::string, uint64_t> OpStats::*counts, const std::string& key,
                 int cap_setting, const char* rest);
};

// All sites: static ones register at load time, interned ones when first seen.
OpSite* firstSite();
// A site for an op known only at run time (e.g. "aten::addmm"); created once, never freed.
// *created says whether this call created it.
OpSite& internSite(const std::string& name, const char* backend, fumi_dtype dtype,
                   bool* created = nullptr);

}  // namespace fumi
