// event_report.cpp — event file reader and per-(op, backend) aggregation; see event_report.h and
// docs/report-schema.md for the rules implemented here.
#include "event_report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <tuple>

namespace fumi::report {

using nlohmann::json;

namespace {

// ---------------------------------------------------------------------------------------------
// Typed field access. A field that is absent or null reads as "not given"; a field of the wrong
// type makes the whole line malformed (FieldError carries the message).

struct FieldError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void badField(const char* key, const char* expected) {
  throw FieldError(std::string("field \"") + key + "\": expected " + expected);
}

const json* field(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<std::string> getString(const json& obj, const char* key) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) badField(key, "a string");
  return v->get<std::string>();
}

std::optional<int64_t> getInt(const json& obj, const char* key) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) badField(key, "an integer");
    return static_cast<int64_t>(u);
  }
  if (!v->is_number_integer()) badField(key, "an integer");
  return v->get<int64_t>();
}

std::optional<uint64_t> getCount(const json& obj, const char* key) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (v->is_number_unsigned()) return v->get<uint64_t>();
  if (v->is_number_integer() && v->get<int64_t>() >= 0) {
    return static_cast<uint64_t>(v->get<int64_t>());
  }
  badField(key, "a non-negative integer");
}

std::optional<bool> getBool(const json& obj, const char* key) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) badField(key, "true or false");
  return v->get<bool>();
}

const json* getObject(const json& obj, const char* key) {
  const json* v = field(obj, key);
  if (v && !v->is_object()) badField(key, "an object");
  return v;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A number, or one of the strings a writer may use for non-finite values.
std::optional<double> numberValue(const json& v, const char* key) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    std::string s = lower(v.get<std::string>());
    if (s == "nan" || s == "-nan" || s == "+nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf" || s == "+inf" || s == "infinity" || s == "+infinity") {
      return std::numeric_limits<double>::infinity();
    }
    if (s == "-inf" || s == "-infinity") return -std::numeric_limits<double>::infinity();
  }
  badField(key, "a number");
}

std::optional<double> getNumber(const json& obj, const char* key) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  return numberValue(*v, key);
}

std::vector<std::string> getStringArray(const json& obj, const char* key) {
  std::vector<std::string> out;
  const json* v = field(obj, key);
  if (!v) return out;
  if (!v->is_array()) badField(key, "an array of strings");
  for (const json& e : *v) {
    if (!e.is_string()) badField(key, "an array of strings");
    out.push_back(e.get<std::string>());
  }
  return out;
}

void mergeWorst(std::map<std::string, double>& worst, const std::string& key, double v) {
  auto [it, inserted] = worst.emplace(key, v);
  if (!inserted && worse(v, it->second)) it->second = v;
}

// ---------------------------------------------------------------------------------------------
// Aggregation state.

using OpKey = std::pair<std::string, std::string>;  // (op, backend)

struct SummaryCounts {
  uint64_t calls = 0, checked = 0, skipped = 0, violations = 0;
};

// Counts reconstructed from check/violation events, for processes without a summary.
struct DerivedCounts {
  std::set<uint64_t> checked_calls;  // distinct call_index values seen
  uint64_t unindexed_checks = 0;     // events without call_index (each counted as one call)
  uint64_t violations = 0;
  std::optional<uint64_t> max_index;
};

struct SegmentOp {
  std::optional<SummaryCounts> summary;
  DerivedCounts derived;
};

struct SummaryEvent;

struct Segment {
  ProcessInfo info;
  bool has_content = false;  // any start/check/violation/summary attributed to it
  bool has_summary = false;
  std::map<OpKey, SegmentOp> ops;
  std::shared_ptr<SummaryEvent> snapshot;  // the latest snapshot (used when no summary came)
  std::string snapshot_reason;
};

// Ordering key for choosing the first violation: events with a time come first, by time
// ("...:00Z" is compared as "...:00" so that "...:00.5Z" sorts after it), then processing order.
struct FirstKey {
  bool no_time = true;
  std::string time;
  uint64_t seq = 0;
  bool operator<(const FirstKey& o) const {
    return std::tie(no_time, time, seq) < std::tie(o.no_time, o.time, o.seq);
  }
};

FirstKey firstKey(const std::string& time, uint64_t seq) {
  FirstKey k;
  k.no_time = time.empty();
  k.time = time;
  if (!k.time.empty() && (k.time.back() == 'Z' || k.time.back() == 'z')) k.time.pop_back();
  k.seq = seq;
  return k;
}

struct KindAcc {
  uint64_t violations = 0;
  std::optional<ViolationInfo> first;
  FirstKey first_key;
};

struct MetricAcc {
  MetricSummary m;
  uint64_t quantile_count = 0;  // count of the process whose median/p99 m holds
  bool has_quantiles = false;
};

struct GlobalOp {
  std::map<std::string, double> worst;
  std::map<std::string, KindAcc> kinds;
  std::map<std::string, MetricAcc> metrics;
  uint64_t nonfinite_propagated = 0;
  uint64_t handled_overflow = 0;
  std::map<std::string, uint64_t> declined;
  std::map<std::string, uint64_t> not_checked;
};

// A parsed check/violation event.
struct CheckEvent {
  OpKey key;
  ViolationInfo info;
};

CheckEvent parseCheckEvent(const json& obj, bool violation) {
  CheckEvent ev;
  auto op = getString(obj, "op");
  if (!op || op->empty()) throw FieldError("field \"op\": missing");
  ev.key.first = *op;
  ev.key.second = getString(obj, "backend").value_or("");
  ViolationInfo& v = ev.info;
  if (auto ci = getCount(obj, "call_index")) v.call_index = *ci;
  v.check = getString(obj, "check").value_or("");
  v.kind = getString(obj, "kind").value_or(defaultKind(v.check));
  v.metric = getString(obj, "metric").value_or("");
  v.value = getNumber(obj, "value");
  v.tolerance = getNumber(obj, "tolerance");
  v.rule = getString(obj, "rule").value_or("");
  v.dtype = getString(obj, "dtype").value_or("");
  v.detail = getString(obj, "detail").value_or("");
  v.time = getString(obj, "time").value_or("");
  if (const json* s = field(obj, "shape")) {
    if (!s->is_object()) badField("shape", "an object");
    v.shape = *s;
  }
  if (const json* e = field(obj, "extra")) {
    if (!e->is_object()) badField("extra", "an object");
    v.extra = *e;
  }
  if (const json* k = field(obj, "kernels")) {
    if (!k->is_array()) badField("kernels", "an array");
    v.kernels = *k;
  }
  if (violation) {
    v.stack = getStringArray(obj, "stack");
    v.python_stack = getStringArray(obj, "python_stack");
    v.origin = getBool(obj, "origin").value_or(false);
    v.spread_of = getString(obj, "spread_of").value_or("");
    if (const json* s = getObject(obj, "sentinel")) v.sentinel = *s;
    v.looked_back = getBool(obj, "looked_back").value_or(false);
    static const std::string kNode = "autograd::engine::evaluate_function: ";
    for (const std::string& around : getStringArray(obj, "context"))
      if (around.rfind(kNode, 0) == 0) v.autograd_node = around.substr(kNode.size());
    v.forward_call = getString(obj, "forward_call").value_or("");
    v.out_of_domain = getBool(obj, "out_of_domain").value_or(false);
    v.positive_inf = getBool(obj, "positive_inf").value_or(false);
    v.by_zero = getBool(obj, "by_zero").value_or(false);
    if (const json* p = field(obj, "phase"); p && p->is_string()) v.phase = p->get<std::string>();
    v.through = getStringArray(obj, "through");
    if (const json* h = field(obj, "through_hops"); h && h->is_array() &&
                                                    h->size() == v.through.size()) {
      for (const json& n : *h) {
        if (!n.is_number_unsigned()) badField("through_hops", "an array of non-negative integers");
        v.through_hops.push_back(n.get<uint64_t>());
      }
    }
    if (std::vector<std::string> p = getStringArray(obj, "through_phases");
        p.size() == v.through.size())
      v.through_phases = std::move(p);
    v.optimizer_step = getCount(obj, "optimizer_step");
    if (const json* h = getObject(obj, "held_by")) {
      const auto text = [h](const char* key) {
        const json* f = field(*h, key);
        return f && f->is_string() ? f->get<std::string>() : std::string();
      };
      v.held_by = text("call");
      v.held_by_phase = text("phase");
    }
  }
  return ev;
}

struct SummaryOpEvent {
  OpKey key;
  SummaryCounts counts;
  std::vector<std::pair<std::string, double>> worst;
  std::vector<std::pair<std::string, MetricSummary>> metrics;
  uint64_t nonfinite_propagated = 0;
  uint64_t handled_overflow = 0;
  std::vector<std::pair<std::string, uint64_t>> declined;  // "check reason" -> calls
  std::vector<std::pair<std::string, uint64_t>> not_checked;  // fumi's reason -> calls
};

MetricSummary parseMetric(const std::string& key, const json& m) {
  if (!m.is_object()) badField("metrics", "an object of objects");
  MetricSummary s;
  s.kind = getString(m, "kind").value_or(defaultKind(checkOfKey(key)));
  s.count = getCount(m, "count").value_or(0);
  s.violations = getCount(m, "violations").value_or(0);
  s.median = getNumber(m, "median");
  s.p99 = getNumber(m, "p99");
  s.max = getNumber(m, "max");
  s.of_tolerance = getNumber(m, "of_tolerance");
  s.noise = getCount(m, "noise").value_or(0);
  s.noise_max = getNumber(m, "noise_max");
  return s;
}

struct SummaryEvent {
  std::optional<double> elapsed_s;
  std::vector<SummaryOpEvent> ops;
};

// The counts of a summary or of the snapshot a process ended with.
template <typename To>
void addCounts(To& to, const SummaryCounts& c) {
  to.calls += c.calls;
  to.checked += c.checked;
  to.skipped += c.skipped;
  to.violations += c.violations;
}

SummaryEvent parseSummaryEvent(const json& obj) {
  SummaryEvent ev;
  ev.elapsed_s = getNumber(obj, "elapsed_s");
  const json* ops = field(obj, "ops");
  if (!ops) return ev;
  if (!ops->is_array()) badField("ops", "an array");
  for (const json& o : *ops) {
    if (!o.is_object()) badField("ops", "an array of objects");
    SummaryOpEvent so;
    auto op = getString(o, "op");
    if (!op || op->empty()) throw FieldError("field \"ops[].op\": missing");
    so.key.first = *op;
    so.key.second = getString(o, "backend").value_or("");
    so.counts.calls = getCount(o, "calls").value_or(0);
    so.counts.checked = getCount(o, "checked").value_or(0);
    so.counts.skipped = getCount(o, "skipped").value_or(0);
    so.counts.violations = getCount(o, "violations").value_or(0);
    if (const json* w = field(o, "worst")) {
      if (!w->is_object()) badField("worst", "an object");
      for (auto it = w->begin(); it != w->end(); ++it) {
        if (it->is_null()) continue;
        auto v = numberValue(*it, "worst");
        so.worst.emplace_back(it.key(), *v);
      }
    }
    if (const json* m = getObject(o, "metrics")) {
      for (auto it = m->begin(); it != m->end(); ++it) {
        so.metrics.emplace_back(it.key(), parseMetric(it.key(), *it));
      }
    }
    so.nonfinite_propagated = getCount(o, "nonfinite_propagated").value_or(0);
    so.handled_overflow = getCount(o, "handled_overflow").value_or(0);
    if (const json* checks = getObject(o, "checks")) {
      for (auto it = checks->begin(); it != checks->end(); ++it) {
        if (!it->is_object()) badField("checks", "an object of objects");
        // skipped_<field> -> how the report names the reason
        for (const auto& [field, reason] : {std::pair{"unsupported", "unsupported"},
                                            std::pair{"no_scratch", "no_scratch"},
                                            std::pair{"failed", "failed"},
                                            std::pair{"budget", "over budget"}}) {
          const std::string field_name = std::string("skipped_") + field;
          if (const uint64_t n = getCount(*it, field_name.c_str()).value_or(0))
            so.declined.emplace_back(it.key() + " " + reason, n);
        }
      }
    }
    if (const json* why = getObject(o, "not_checked")) {
      for (auto it = why->begin(); it != why->end(); ++it)
        if (const uint64_t n = getCount(*why, it.key().c_str()).value_or(0))
          so.not_checked.emplace_back(it.key(), n);
    }
    ev.ops.push_back(std::move(so));
  }
  return ev;
}

// The timeline point of a snapshot or summary: its `totals` at its `elapsed_s`; none in files
// written before totals existed.
std::optional<TimelinePoint> parseTimelinePoint(const json& obj, std::string reason) {
  const json* totals = getObject(obj, "totals");
  const std::optional<double> elapsed = getNumber(obj, "elapsed_s");
  if (!totals || !elapsed || !std::isfinite(*elapsed)) return std::nullopt;
  TimelinePoint p;
  p.elapsed_s = *elapsed;
  p.calls = getCount(*totals, "calls").value_or(0);
  p.checked = getCount(*totals, "checked").value_or(0);
  p.skipped = getCount(*totals, "skipped").value_or(0);
  p.violations = getCount(*totals, "violations").value_or(0);
  p.reason = std::move(reason);
  return p;
}

// Counts and violations add up, the maximum is the largest; quantiles do not add up, so the
// median and p99 are those of the process with the most values.
void mergeMetric(MetricAcc& acc, const MetricSummary& m) {
  if (acc.m.kind.empty()) acc.m.kind = m.kind;
  acc.m.count += m.count;
  acc.m.violations += m.violations;
  acc.m.noise += m.noise;
  if (m.noise_max && !(acc.m.noise_max >= *m.noise_max)) acc.m.noise_max = m.noise_max;
  if (m.max && (!acc.m.max || worse(*m.max, *acc.m.max))) acc.m.max = m.max;
  if (m.of_tolerance && (!acc.m.of_tolerance || *m.of_tolerance > *acc.m.of_tolerance))
    acc.m.of_tolerance = m.of_tolerance;
  if ((m.median || m.p99) && (!acc.has_quantiles || m.count > acc.quantile_count)) {
    acc.m.median = m.median;
    acc.m.p99 = m.p99;
    acc.quantile_count = m.count;
    acc.has_quantiles = true;
  }
}

class Aggregator {
 public:
  void addFile(const EventFile& file) {
    std::optional<int64_t> file_pid = pidFromFileName(file.path);
    std::map<int64_t, size_t> current;  // pid -> index of its current segment in segments_
    std::istringstream in(file.contents);
    std::string text;
    int lineno = 0;
    while (std::getline(in, text)) {
      ++lineno;
      while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
      size_t b = 0;
      while (b < text.size() && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
      if (b == text.size()) continue;
      try {
        addLine(file.path, lineno, std::string_view(text).substr(b), file_pid, current);
      } catch (const FieldError& e) {
        malformed(file.path, lineno, e.what());
      } catch (const json::exception& e) {
        malformed(file.path, lineno, e.what());
      }
    }
  }

  void addUnreadable(const std::string& path, const std::string& why) {
    report_.malformed.push_back(MalformedLine{path, 0, why});
  }

  Report finish() {
    attachOriginStacks();
    linkInfOrigins();
    linkGradientOrigins();
    std::map<int64_t, RankTotals> ranks;
    // Snapshots first: their metrics join the global ones below.
    for (Segment& seg : segments_)
      if (!seg.has_summary && seg.snapshot) {
        applyState(seg, *seg.snapshot);
        seg.info.ended = isSignalOrExec(seg.snapshot_reason) ? seg.snapshot_reason : "killed";
      }
    std::map<OpKey, OpStats> stats;
    for (auto& [key, g] : global_) {
      OpStats& s = stats[key];
      s.op = key.first;
      s.backend = key.second;
      s.worst = g.worst;
      const FirstKey* first_key = nullptr;
      for (auto& [kind, acc] : g.kinds) {
        s.by_kind[kind] = KindViolations{acc.violations, acc.first};
        if (acc.first && (!first_key || acc.first_key < *first_key)) {
          first_key = &acc.first_key;
          s.first_violation = acc.first;
        }
      }
      for (auto& [k, acc] : g.metrics) s.metrics[k] = acc.m;
      // Violation events are capped (report.violation_events per op and metric); the
      // summaries' metrics count every violation of their kind (batch 13: "21597 violations
      // (1001 error, 1000 sensitivity)" where the metrics held 16792 and 4805).
      std::map<std::string, uint64_t> counted;
      for (const auto& [k, m] : s.metrics) counted[m.kind] += m.violations;
      for (const auto& [kind, n] : counted)
        if (n > 0) s.by_kind[kind].violations = std::max(s.by_kind[kind].violations, n);
      s.nonfinite_propagated = g.nonfinite_propagated;
      s.handled_overflow = g.handled_overflow;
      s.declined = g.declined;
      s.not_checked = g.not_checked;
    }
    for (Segment& seg : segments_) {
      seg.info.incomplete = seg.info.ended.empty() || seg.info.ended == "killed";
      for (auto& [key, so] : seg.ops) {
        OpStats& s = stats[key];
        s.op = key.first;
        s.backend = key.second;
        const DerivedCounts& d = so.derived;
        SummaryCounts derived;
        derived.checked = d.checked_calls.size() + d.unindexed_checks;
        derived.calls = std::max(d.max_index ? *d.max_index + 1 : 0, derived.checked);
        derived.violations = d.violations;
        SummaryCounts c = so.summary.value_or(SummaryCounts{});
        if (!seg.has_summary) {
          c.calls = std::max(c.calls, derived.calls);
          c.checked = std::max(c.checked, derived.checked);
          c.violations = std::max(c.violations, derived.violations);
        }
        addCounts(s, c);
        s.incomplete = s.incomplete || seg.info.incomplete;
        if (seg.info.rank && c.violations) s.rank_violations[*seg.info.rank] += c.violations;
        if (seg.info.rank) {
          RankTotals& r = ranks[*seg.info.rank];
          r.calls += c.calls;
          r.checked += c.checked;
          r.violations += c.violations;
        }
      }
      if (seg.info.rank) {
        RankTotals& r = ranks[*seg.info.rank];
        r.rank = *seg.info.rank;
        ++r.processes;
        r.incomplete += seg.info.incomplete ? 1 : 0;
      }
      report_.processes.push_back(seg.info);
    }
    for (auto& [rank, r] : ranks) report_.ranks.push_back(r);
    for (auto& [key, s] : stats) report_.ops.push_back(std::move(s));
    std::stable_sort(report_.ops.begin(), report_.ops.end(), [](const OpStats& a, const OpStats& b) {
      // Violations first, then ops that were checked at all, then by calls: observed-only ops
      // (e.g. every aten op of a torch job) go below the ones fumi measured.
      if (a.violations != b.violations) return a.violations > b.violations;
      if ((a.checked > 0) != (b.checked > 0)) return a.checked > 0;
      if (a.calls != b.calls) return a.calls > b.calls;
      return std::tie(a.op, a.backend) < std::tie(b.op, b.backend);
    });
    return std::move(report_);
  }

 private:
  void malformed(const std::string& file, int line, const std::string& message) {
    report_.malformed.push_back(MalformedLine{file, line, message});
  }

  // The counts and metrics of a summary (or of the snapshot a process ended with).
  void applyState(Segment& seg, const SummaryEvent& ev) {
    seg.info.elapsed_s = ev.elapsed_s;
    for (const SummaryOpEvent& so : ev.ops) {
      SegmentOp& sop = seg.ops[so.key];
      if (!sop.summary) sop.summary = SummaryCounts{};
      addCounts(*sop.summary, so.counts);
      GlobalOp& g = global_[so.key];
      for (auto& [k, v] : so.worst) mergeWorst(g.worst, k, v);
      for (auto& [k, m] : so.metrics) mergeMetric(g.metrics[k], m);
      g.nonfinite_propagated += so.nonfinite_propagated;
      g.handled_overflow += so.handled_overflow;
      for (const auto& [k, n] : so.declined) g.declined[k] += n;
      for (const auto& [k, n] : so.not_checked) g.not_checked[k] += n;
    }
  }

  static bool isSignalOrExec(const std::string& reason) {
    return reason == "exec" || reason.rfind("SIG", 0) == 0;
  }

  Segment& newSegment(const std::string& file, int64_t pid, std::map<int64_t, size_t>& current) {
    segments_.emplace_back();
    Segment& seg = segments_.back();
    seg.info.pid = pid;
    seg.info.file = file;
    current[pid] = segments_.size() - 1;
    return seg;
  }

  Segment& segmentFor(const std::string& file, int64_t pid, std::map<int64_t, size_t>& current) {
    auto it = current.find(pid);
    if (it != current.end()) return segments_[it->second];
    return newSegment(file, pid, current);
  }

  void addLine(const std::string& file, int lineno, std::string_view text,
               std::optional<int64_t> file_pid, std::map<int64_t, size_t>& current) {
    json obj = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (obj.is_discarded()) throw FieldError("not valid JSON");
    if (!obj.is_object()) throw FieldError("not a JSON object");
    auto event = getString(obj, "event");
    if (!event) throw FieldError("no \"event\" field");
    const std::string& type = *event;
    if (type != "start" && type != "violation" && type != "check" && type != "summary" &&
        type != "snapshot" && type != "error" && type != "nan_search" &&
        type != "nan_origin_stack") {
      return;  // unknown event type: ignored (forward compatibility)
    }
    const uint64_t seq = ++seq_;
    int64_t pid = getInt(obj, "pid").value_or(file_pid.value_or(0));
    const std::optional<int64_t> rank = getInt(obj, "rank") ? getInt(obj, "rank")
                                                             : rankFromFileName(file);

    if (type == "error") {
      ErrorEvent e;
      e.pid = pid;
      e.where = getString(obj, "where").value_or("");
      e.location = getString(obj, "location").value_or("");
      e.message = getString(obj, "message").value_or("");
      e.file = file;
      e.line = lineno;
      report_.errors.push_back(std::move(e));
      return;
    }

    if (type == "nan_search") {
      NanSearch n;
      n.pid = pid;
      n.result = getString(obj, "result").value_or("");
      n.message = getString(obj, "message").value_or("");
      n.after_origin = getString(obj, "after_origin").value_or("");
      if (const json* s = getObject(obj, "sentinel")) n.sentinel = *s;
      n.file = file;
      n.line = lineno;
      report_.nan_searches.push_back(std::move(n));
      return;
    }

    if (type == "nan_origin_stack") {
      ViolationInfo stacks;
      stacks.pid = pid;
      stacks.call_index = getCount(obj, "call_index");
      stacks.stack = getStringArray(obj, "stack");
      stacks.python_stack = getStringArray(obj, "python_stack");
      origin_stacks_.push_back({getString(obj, "op").value_or(""), std::move(stacks)});
      return;
    }

    if (type == "start") {
      ProcessInfo info;
      info.pid = pid;
      info.ppid = getInt(obj, "ppid").value_or(0);
      info.argv = getStringArray(obj, "argv");
      info.policy = getString(obj, "policy").value_or("");
      info.fumi_version = getString(obj, "fumi_version").value_or("");
      info.start_time = getString(obj, "time").value_or("");
      info.file = file;
      info.rank = rank;
      info.has_start = true;
      // A second start for the same pid (exec into another program that also loads libfumi)
      // begins a new process record.
      auto it = current.find(pid);
      Segment& seg = (it == current.end() || segments_[it->second].has_content)
                         ? newSegment(file, pid, current)
                         : segments_[it->second];
      seg.info = std::move(info);
      seg.has_content = true;
      return;
    }

    if (type == "summary" || type == "snapshot") {
      auto ev = std::make_shared<SummaryEvent>(parseSummaryEvent(obj));
      const std::string reason =
          type == "snapshot" ? getString(obj, "reason").value_or("periodic") : "exit";
      const std::optional<TimelinePoint> point = parseTimelinePoint(obj, reason);
      auto it = current.find(pid);
      Segment* seg = nullptr;
      if (it == current.end() || segments_[it->second].has_summary) {
        // A snapshot after its process's summary (written while it ended) adds nothing.
        if (type == "snapshot" && it != current.end()) return;
        seg = &newSegment(file, pid, current);
      } else {
        seg = &segments_[it->second];
      }
      seg->has_content = true;
      if (!seg->info.rank) seg->info.rank = rank;
      if (point) seg->info.timeline.push_back(*point);
      if (type == "snapshot") {
        seg->snapshot = std::move(ev);
        seg->snapshot_reason = reason;
        return;
      }
      seg->has_summary = true;
      seg->snapshot.reset();
      seg->info.ended = "exit";
      applyState(*seg, *ev);
      return;
    }

    // check / violation
    const bool violation = type == "violation";
    CheckEvent ev = parseCheckEvent(obj, violation);
    ev.info.pid = pid;
    ev.info.file = file;
    ev.info.line = lineno;
    Segment& seg = segmentFor(file, pid, current);
    seg.has_content = true;
    if (!seg.info.rank) seg.info.rank = rank;
    DerivedCounts& d = seg.ops[ev.key].derived;
    if (ev.info.call_index) {
      d.checked_calls.insert(*ev.info.call_index);
      d.max_index = std::max(d.max_index.value_or(0), *ev.info.call_index);
    } else {
      ++d.unindexed_checks;
    }
    GlobalOp& g = global_[ev.key];
    if (ev.info.value) mergeWorst(g.worst, metricKey(ev.info.check, ev.info.metric), *ev.info.value);
    if (violation) {
      ++d.violations;
      if (ev.info.origin)
        report_.nan_origins.push_back({ev.key.first, ev.key.second, ev.info, {}, false, {}});
      KindAcc& acc = g.kinds[ev.info.kind];
      ++acc.violations;
      FirstKey k = firstKey(ev.info.time, seq);
      if (!acc.first || k < acc.first_key) {
        acc.first = std::move(ev.info);
        acc.first_key = k;
      }
    }
  }

  // The stacks of origins found looking back, by op (nan_origin_stack events); the call index
  // and stacks in a ViolationInfo.
  std::vector<std::pair<std::string, ViolationInfo>> origin_stacks_;

  // Each origin found looking back takes the stacks of its op's next call that made them.
  void attachOriginStacks() {
    for (auto& [op, stacks] : origin_stacks_)
      for (NanOrigin& o : report_.nan_origins) {
        ViolationInfo& v = o.violation;
        if (o.op != op || v.pid != stacks.pid || !v.looked_back || v.stack_call_index) continue;
        v.stack = stacks.stack;
        v.python_stack = stacks.python_stack;
        v.stack_call_index = stacks.call_index.value_or(0);
        break;
      }
  }

  // NaN from Inf is the spread of an Inf: where an op of the same process and optimizer step made
  // Inf from finite values (in the same pass, or the forward pass before a backward one), that
  // op is listed first, and this one is said to be likely its spread. The NaN is often reported
  // first: a sampled check saw it at its call, the Inf's maker found later, looking back.
  void linkInfOrigins() {
    auto& all = report_.nan_origins;
    const auto count = [](const ViolationInfo& v, const char* key) {
      return v.extra.is_object() && v.extra.contains(key) && v.extra[key].is_number()
                 ? v.extra[key].get<double>()
                 : 0.0;
    };
    for (size_t n = 0; n < all.size(); ++n) {
      const ViolationInfo& nan = all[n].violation;
      if (nan.detail != "nan_from_inf" || !nan.optimizer_step) continue;
      for (size_t i = 0; i < all.size(); ++i) {
        const ViolationInfo& inf = all[i].violation;
        if (i == n || inf.pid != nan.pid || inf.optimizer_step != nan.optimizer_step ||
            !(inf.detail.empty() || inf.detail == "appeared") || !(count(inf, "inf") > 0) ||
            (inf.backward() && !nan.backward()))
          continue;
        all[n].inf_of = all[i].op + (inf.call_index ? " #" + std::to_string(*inf.call_index) : "");
        if (i > n) std::rotate(all.begin() + n, all.begin() + i, all.begin() + i + 1);
        break;
      }
    }
  }

  // One defect often makes two origins: its forward op's (log(0): -inf) and, in the same
  // step's backward pass, its gradient's (the division by that 0): the second says so.
  void linkGradientOrigins() {
    auto& all = report_.nan_origins;
    for (size_t b = 0; b < all.size(); ++b) {
      const ViolationInfo& back = all[b].violation;
      if (!back.backward() || !back.optimizer_step) continue;
      const nlohmann::json& s = back.sentinel;
      all[b].after_forward_sentinel =
          !back.looked_back && s.is_object() && s.value("phase", std::string()) == "forward" &&
          s.contains("optimizer_step") && s["optimizer_step"] == *back.optimizer_step;
      for (size_t f = 0; f < b; ++f) {
        const ViolationInfo& fwd = all[f].violation;
        if (fwd.pid != back.pid || fwd.backward() ||
            fwd.optimizer_step != back.optimizer_step)
          continue;
        all[b].gradient_of =
            all[f].op + (fwd.call_index ? " #" + std::to_string(*fwd.call_index) : "");
        break;
      }
    }
  }

  std::vector<Segment> segments_;  // referred to by index while reading (it grows)
  std::map<OpKey, GlobalOp> global_;
  Report report_;
  uint64_t seq_ = 0;
};

}  // namespace

bool worse(double a, double b) {
  if (std::isnan(a)) return !std::isnan(b);
  if (std::isnan(b)) return false;
  return a > b;
}

std::string defaultKind(const std::string& check) {
  return check == "perturb" ? kKindSensitivity : kKindError;
}

std::string checkOfKey(const std::string& key) { return key.substr(0, key.find('.')); }

std::string metricKey(const std::string& check, const std::string& metric) {
  if (check.empty()) return metric.empty() ? std::string("?") : metric;
  if (metric.empty()) return check;
  return check + "." + metric;
}

std::string MalformedLine::str() const {
  if (line > 0) return file + ":" + std::to_string(line) + ": " + message;
  return file + ": " + message;
}

Totals Report::totals() const {
  Totals t;
  for (const OpStats& s : ops) {
    t.calls += s.calls;
    t.checked += s.checked;
    t.skipped += s.skipped;
    t.violations += s.violations;
  }
  return t;
}

size_t Report::incompleteCount() const {
  return static_cast<size_t>(std::count_if(processes.begin(), processes.end(),
                                           [](const ProcessInfo& p) { return p.incomplete; }));
}

Report aggregate(const std::vector<EventFile>& files) {
  Aggregator agg;
  for (const EventFile& f : files) agg.addFile(f);
  return agg.finish();
}

namespace {
std::optional<int64_t> digitsValue(const std::string& digits) {
  if (digits.empty() || digits.size() > 18) return std::nullopt;
  int64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

// "events-[rank<R>-]<pid>.jsonl" -> (rank, pid); nullopt for any other name.
std::optional<std::pair<std::optional<int64_t>, int64_t>> parseEventFileName(
    const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  static const std::string kPrefix = "events-", kSuffix = ".jsonl", kRank = "rank";
  if (name.size() <= kPrefix.size() + kSuffix.size()) return std::nullopt;
  if (name.compare(0, kPrefix.size(), kPrefix) != 0) return std::nullopt;
  if (name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) return std::nullopt;
  std::string middle = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  std::optional<int64_t> rank;
  if (middle.compare(0, kRank.size(), kRank) == 0) {
    const size_t dash = middle.find('-');
    if (dash == std::string::npos) return std::nullopt;
    rank = digitsValue(middle.substr(kRank.size(), dash - kRank.size()));
    if (!rank) return std::nullopt;
    middle = middle.substr(dash + 1);
  }
  std::optional<int64_t> pid = digitsValue(middle);
  if (!pid) return std::nullopt;
  return std::make_pair(rank, *pid);
}
}  // namespace

std::optional<int64_t> pidFromFileName(const std::string& path) {
  auto parsed = parseEventFileName(path);
  if (!parsed) return std::nullopt;
  return parsed->second;
}

std::optional<int64_t> rankFromFileName(const std::string& path) {
  auto parsed = parseEventFileName(path);
  if (!parsed) return std::nullopt;
  return parsed->first;
}

std::optional<int64_t> OpStats::worstRank() const {
  std::optional<int64_t> best;
  uint64_t most = 0;
  for (const auto& [rank, n] : rank_violations)
    if (n > most) {
      most = n;
      best = rank;
    }
  return best;
}

std::vector<std::string> findEventFiles(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, std::string>> found;  // (name, path)
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  if (ec) return {};
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    std::string name = it->path().filename().string();
    if (name.size() < 13 || name.rfind("events-", 0) != 0 ||
        name.compare(name.size() - 6, 6, ".jsonl") != 0) {
      continue;
    }
    std::error_code sec;
    if (!it->is_regular_file(sec)) continue;
    found.emplace_back(name, it->path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    auto pa = parseEventFileName(a.first), pb = parseEventFileName(b.first);
    // Names with a pid first, by rank (none first), then pid; then the rest by name.
    if (pa.has_value() != pb.has_value()) return pa.has_value();
    if (pa && *pa != *pb) return *pa < *pb;
    return a.first < b.first;
  });
  std::vector<std::string> paths;
  for (auto& f : found) paths.push_back(std::move(f.second));
  return paths;
}

Report readDirectory(const std::string& dir, size_t* nfiles) {
  std::vector<std::string> paths = findEventFiles(dir);
  if (nfiles) *nfiles = paths.size();
  Aggregator agg;
  for (const std::string& p : paths) {
    std::ifstream in(p, std::ios::binary);
    if (!in) {
      agg.addUnreadable(p, "cannot read file");
      continue;
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    agg.addFile(EventFile{p, ss.str()});
  }
  return agg.finish();
}

}  // namespace fumi::report
