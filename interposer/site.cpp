// site.cpp — the registry of op sites and their slow-path statistics.
#include "site.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "context.h"
#include "loss_scaling.h"
#include "report.h"
#include "runtime.h"
#include "settings.h"

namespace fumi {
__thread ThreadCounts* t_counts __attribute__((tls_model("initial-exec"))) = nullptr;

namespace {
std::atomic<OpSite*> g_head{nullptr};
std::atomic<uint32_t> g_next_slot{0};

// FUMI_FIRST_CALL_INDEX: the index of every op's first call (0 unless a replay sets it). Read
// once, when the first site is made (hook sites are made while the library loads).
uint64_t firstCallIndex() {
  static const uint64_t first = [] {
    const std::string text = readSettings().first_call_index;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
    return end && *end == '\0' && !text.empty() && text[0] != '-' ? uint64_t{v} : uint64_t{0};
  }();
  return first;
}
std::atomic<ThreadCounts*> g_counts_head{nullptr};

void pushSite(OpSite* s) {
  OpSite* head = g_head.load(std::memory_order_relaxed);
  do {
    s->next = head;
  } while (!g_head.compare_exchange_weak(head, s, std::memory_order_release,
                                         std::memory_order_relaxed));
}
}  // namespace

ThreadCounts* registerThreadCounts() {
  auto* t = new ThreadCounts();
  ThreadCounts* head = g_counts_head.load(std::memory_order_relaxed);
  do {
    t->next = head;
  } while (!g_counts_head.compare_exchange_weak(head, t, std::memory_order_release,
                                                std::memory_order_relaxed));
  t_counts = t;
  return t;
}

uint64_t OpSite::totalCalls() const {
  uint64_t total = calls.load(std::memory_order_relaxed) - firstCallIndex();
  if (slot < kMaxCountedSites)
    for (ThreadCounts* t = g_counts_head.load(std::memory_order_acquire); t; t = t->next)
      total += t->n[slot].load(std::memory_order_relaxed);
  return total;
}

void OpSite::resetCounts() {
  calls.store(firstCallIndex());
  if (slot < kMaxCountedSites)
    for (ThreadCounts* t = g_counts_head.load(std::memory_order_acquire); t; t = t->next)
      t->n[slot].store(0);
}

OpSite::OpSite(const char* op_name, const char* backend_name, fumi_dtype op_dtype)
    : calls(firstCallIndex()),
      name(op_name),
      scaler_marker(static_cast<uint8_t>(scalerMarkerOf(op_name))),
      phase_marker(phaseMarkerOf(op_name)),
      backend(backend_name),
      dtype(op_dtype),
      slot(g_next_slot.fetch_add(1)) {
  pushSite(this);
}

OpSite* firstSite() { return g_head.load(std::memory_order_acquire); }

OpSite& internSite(const std::string& name, const char* backend, fumi_dtype dtype,
                   bool* created) {
  // Never destroyed: the exit summary (a library destructor) runs after static objects are
  // gone and still reads the sites' names.
  static auto* mu = new std::mutex;
  static auto* sites = new std::unordered_map<std::string, OpSite*>;
  static auto* names = new std::deque<std::string>;  // stable storage for site names
  std::lock_guard<std::mutex> lock(*mu);
  auto it = sites->find(name);
  if (created) *created = it == sites->end();
  if (it != sites->end()) return *it->second;
  names->push_back(name);
  auto* site = new OpSite(names->back().c_str(), backend, dtype);
  sites->emplace(name, site);
  return *site;
}

void OpSite::addStats(uint64_t checked_delta, uint64_t skipped_delta, double seconds) {
  const InsideLock<std::mutex> lock(stats_mu);
  stats.checked += checked_delta;
  stats.skipped += skipped_delta;
  stats.check_seconds += seconds;
}

void OpSite::addAdapterSeconds(double seconds) {
  const InsideLock<std::mutex> lock(stats_mu);
  stats.adapter_seconds += seconds;
}

void OpSite::addReportSeconds(double seconds) {
  const InsideLock<std::mutex> lock(stats_mu);
  stats.report_seconds += seconds;
}

// Why is said once per op and reason at info level (the summary has only the count), every
// time at debug level; its first line only (an exception's message may go on with a C++
// backtrace).
void OpSite::countSkipped(const char* why) {
  const InsideScope inside;  // hooks count skips outside their checks: see InsideLock
  std::string reason(why ? why : "unknown");
  reason = reason.substr(0, reason.find('\n'));
  {
    const InsideLock<std::mutex> lock(stats_mu);
    ++stats.skipped;
    auto it = stats.not_checked.find(reason);
    if (it == stats.not_checked.end() && stats.not_checked.size() >= kMaxNotCheckedReasons)
      it = stats.not_checked.emplace(kOtherReasons, 0).first;
    else if (it == stats.not_checked.end())
      it = stats.not_checked.emplace(reason, 0).first;
    ++it->second;
  }
  if (!why) return;
  static constexpr size_t kMaxReasons = 4096;  // past it, every reason at debug level
  static std::mutex mu;
  static auto* said = new std::set<std::pair<const OpSite*, std::string>>;  // immortal: at exit
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (said->size() < kMaxReasons) first = said->emplace(this, reason).second;
  }
  if (first || logEnabled(FUMI_LOG_DEBUG))  // the line is built only to be written
    logMessage(first ? FUMI_LOG_INFO : FUMI_LOG_DEBUG,
               std::string(name) + ": not checked: " + reason +
                   (first ? " (said once per op and reason)" : ""));
}

// Counts one more violation of `key` in `counts`: true while within `cap`; the first one past
// it logs that the rest go to `rest` only.
bool OpSite::withinCap(std::map<std::string, uint64_t> OpStats::*counts, const std::string& key,
                       int cap_setting, const char* rest) {
  uint64_t n;
  {
    const InsideLock<std::mutex> lock(stats_mu);
    n = ++(stats.*counts)[key];
  }
  const uint64_t cap = static_cast<uint64_t>(std::max(cap_setting, 0));
  if (n == cap + 1)
    logMessage(FUMI_LOG_WARN, std::string(name) + " " + key + ": more than " +
                                  std::to_string(cap) + " violations; the rest are in " + rest);
  return n <= cap;
}

bool OpSite::logsViolation(const std::string& key) {
  const Reporter* rep = activeReporter();
  return rep && withinCap(&OpStats::log_lines, key, rep->settings().log_violations,
                          "the events file and the summary only (report.log_violations)");
}

bool OpSite::writesViolationEvent(const std::string& key, int cap) {
  return withinCap(&OpStats::event_lines, key, cap,
                   "the summary's counts only (report.violation_events)");
}

void OpSite::addHeldViolation(const std::string& key) {
  const InsideLock<std::mutex> lock(stats_mu);
  ++stats.violations;
  ++stats.metrics[key].violations;
}

void OpSite::addHandledOverflow() {
  const InsideLock<std::mutex> lock(stats_mu);
  ++stats.handled_overflow;
}

void OpSite::retractAutotuning(uint64_t n) {
  calls.fetch_sub(n, std::memory_order_relaxed);
  const InsideLock<std::mutex> lock(stats_mu);
  stats.autotuning += n;
}

void OpSite::recordCheck(const std::string& check, fumi_status status, bool violated,
                         double seconds) {
  const InsideLock<std::mutex> lock(stats_mu);
  CheckCounts& c = stats.checks[check];
  switch (status) {
    case FUMI_OK: ++c.runs; break;
    case FUMI_SKIPPED:
    case FUMI_UNSUPPORTED: ++c.unsupported; break;
    case FUMI_NO_SCRATCH: ++c.no_scratch; break;
    default: ++c.failed; break;
  }
  c.violations += violated ? 1 : 0;
  c.seconds += seconds;
}

void OpSite::recordCheckOverBudget(const std::string& check) {
  const InsideLock<std::mutex> lock(stats_mu);
  ++stats.checks[check].budget;
}

void MetricStats::add(double value, bool violated, double tolerance) {
  ++count;
  violations += violated ? 1 : 0;
  if (std::isnan(value)) {
    ++nan;
    return;
  }
  if (tolerance > 0 && std::isfinite(tolerance)) {
    const double ratio = value / tolerance;
    if (std::isnan(of_tolerance) || ratio > of_tolerance) of_tolerance = ratio;
  }
  max = std::max(max, value);
  if (bins.empty()) bins.assign(kBins, 0);
  int bin = 0;
  if (value > 0) {
    // log2 of the value in quarter octaves, from the exponent and the top mantissa bits.
    const double b = std::floor(std::log2(value) * kOctaveBins) - kMinExp * kOctaveBins;
    bin = static_cast<int>(std::clamp(b, 0.0, static_cast<double>(kBins - 1)));
  }
  ++bins[static_cast<size_t>(bin)];
}

double MetricStats::quantile(double q) const {
  const uint64_t finite = count - nan;
  if (finite == 0 || bins.empty()) return 0;
  // The smallest bin whose cumulative count reaches q of the values (nearest rank).
  const uint64_t rank = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * finite)));
  uint64_t seen = 0;
  for (int b = 0; b < kBins; ++b) {
    seen += bins[static_cast<size_t>(b)];
    if (seen < rank) continue;
    if (b == 0) return 0;  // zeros and values below 2^-64
    const double mid = std::exp2((b + 0.5) / kOctaveBins + kMinExp);
    return std::min(mid, max);  // never above the exact maximum
  }
  return max;
}

void OpSite::recordMetric(const std::string& key, fumi_kind kind, double value, bool violated,
                          bool counted_nonfinite, double tolerance, bool noise) {
  const InsideLock<std::mutex> lock(stats_mu);
  if (violated) ++stats.violations;
  if (counted_nonfinite) ++stats.nonfinite_propagated;
  MetricStats& m = stats.metrics[key];
  m.kind = kind;
  m.noise += noise ? 1 : 0;
  if (noise && std::isnan(tolerance)) {  // nothing judged: its figure apart
    if (!(value <= m.noise_max)) m.noise_max = value;
    return;
  }
  auto [it, inserted] = stats.worst.emplace(key, value);
  // NaN counts as worst: a metric that could not be computed is not a good sign.
  if (!inserted && (value > it->second || std::isnan(value))) it->second = value;
  m.add(value, violated, tolerance);
}

OpStats OpSite::statsSnapshot() {
  const InsideLock<std::mutex> lock(stats_mu);
  return stats;
}

}  // namespace fumi
