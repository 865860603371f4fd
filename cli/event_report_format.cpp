// event_report_format.cpp — renderings of an aggregated Report: the JSON document of
// `fumi report --format json`, the text of `fumi report`, and the summary of `fumi run`.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "event_report.h"
#include "event_report_detail.h"

namespace fumi::report {

using nlohmann::json;
using namespace detail;

namespace {

json numberJson(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

json optNumberJson(const std::optional<double>& v) { return v ? numberJson(*v) : json(nullptr); }

json violationJson(const ViolationInfo& v) {
  json j = json::object();
  j["pid"] = v.pid;
  j["call_index"] = v.call_index ? json(*v.call_index) : json(nullptr);
  j["check"] = v.check;
  j["kind"] = v.kind;
  j["metric"] = v.metric;
  j["value"] = optNumberJson(v.value);
  j["tolerance"] = optNumberJson(v.tolerance);
  j["rule"] = v.rule;
  j["dtype"] = v.dtype;
  j["shape"] = v.shape;
  j["extra"] = v.extra;
  j["kernels"] = v.kernels;
  j["detail"] = v.detail;
  j["time"] = v.time;
  j["stack"] = v.stack;
  j["python_stack"] = v.python_stack;
  j["origin"] = v.origin;
  j["spread_of"] = v.spread_of.empty() ? nlohmann::json(nullptr) : nlohmann::json(v.spread_of);
  j["sentinel"] = v.sentinel;
  j["autograd_node"] = v.autograd_node;
  j["phase"] = v.phase;
  j["looked_back"] = v.looked_back;
  j["through"] = v.through;
  j["through_hops"] = v.through_hops;
  j["through_phases"] = v.through_phases;
  j["held_by"] = v.held_by.empty() ? json(nullptr)
                                   : json{{"call", v.held_by}, {"phase", v.held_by_phase}};
  j["stack_call_index"] = v.stack_call_index ? json(*v.stack_call_index) : json(nullptr);
  j["optimizer_step"] = v.optimizer_step ? json(*v.optimizer_step) : json(nullptr);
  j["file"] = v.file;
  j["line"] = v.line;
  return j;
}

std::string padRight(const std::string& s, size_t w) {
  return s.size() >= w ? s : s + std::string(w - s.size(), ' ');
}
std::string padLeft(const std::string& s, size_t w) {
  return s.size() >= w ? s : std::string(w - s.size(), ' ') + s;
}

// An aligned table; the last column is left unpadded (it may be long).
void formatTable(std::ostream& out, const std::vector<std::string>& head,
                 const std::vector<std::vector<std::string>>& rows,
                 const std::vector<bool>& numeric, const std::string& indent) {
  std::vector<size_t> width(head.size());
  for (size_t c = 0; c < head.size(); ++c) {
    width[c] = head[c].size();
    for (const auto& r : rows) width[c] = std::max(width[c], r[c].size());
  }
  auto emit = [&](const std::vector<std::string>& r) {
    std::string line = indent;
    for (size_t c = 0; c < r.size(); ++c) {
      if (c) line += "  ";
      if (c + 1 == r.size()) {
        line += r[c];
      } else {
        line += numeric[c] ? padLeft(r[c], width[c]) : padRight(r[c], width[c]);
      }
    }
    out << line << "\n";
  };
  emit(head);
  for (const auto& r : rows) emit(r);
}

// The first frames of a violation's stack, the Python one when there is one.
void formatStack(std::ostream& out, const ViolationInfo& v, size_t frames,
                 const std::string& indent) {
  const std::vector<std::string>& stack = v.python_stack.empty() ? v.stack : v.python_stack;
  for (size_t i = 0; i < stack.size() && i < frames; ++i) out << indent << stack[i] << "\n";
  if (stack.size() > frames) {
    out << indent << "... " << (stack.size() - frames) << " more frames (--format json)\n";
  }
}

void formatFindings(std::ostream& out, const Report& report, const TextOptions& options) {
  const auto kinds = violationsByKind(report);
  const std::vector<const NanSearch*> not_found = searchesNotFound(report);
  if (kinds.empty() && report.nan_origins.empty() && not_found.empty()) {
    out << "\nFindings: no violations\n";
  } else {
    out << "\nFindings:\n";
    for (const NanOrigin& o : report.nan_origins) {
      out << "  NaN/Inf origin: " << originText(o) << "\n";
      if (o.violation.python_stack.empty())
        formatStack(out, o.violation, options.stack_frames, "      ");
    }
    for (const NanSearch* n : not_found) out << "  " << notFoundText(*n) << "\n";
    for (const std::string& kind : kindOrder(kinds)) {
      out << "  " << kindHeading(kind) << "\n";
      for (const auto& [s, kv] : opsWithKind(report, kind)) {
        out << "    " << opName(s->op, s->backend) << ": " << plural(kv->violations, "violation");
        if (!kv->first) {
          out << "\n";
          continue;
        }
        const ViolationInfo& v = *kv->first;
        out << "; first: " << describeViolation(v) << "\n";
        if (v.origin) {
          out << "        (the NaN/Inf origin above)\n";
          continue;
        }
        if (!v.spread_of.empty()) out << "        (" << v.spread_of << ")\n";
        if (!v.detail.empty()) out << "        " << v.detail << "\n";
        if (const std::string c = cancellationText(v); !c.empty()) out << "        " << c << "\n";
        if (v.kernels.is_array() && !v.kernels.empty()) {
          out << "        kernels: " << kernelList(v.kernels) << "\n";
        }
        formatStack(out, v, options.stack_frames, "        ");
      }
    }
  }
  if (const std::string passed = opCountsText(report, &OpStats::nonfinite_propagated);
      !passed.empty()) {
    out << "  NaN/Inf passed along from inputs (counted, not violations): " << passed << "\n";
  }
  if (const std::string handled = opCountsText(report, &OpStats::handled_overflow);
      !handled.empty()) {
    out << "  Backward-pass overflow handled by the loss scaler (counted, not violations): "
        << handled << "\n";
  }
  if (const std::string declined = reasonsText(report, &OpStats::declined); !declined.empty())
    out << "  Calls a check skipped (by check and reason; docs/report-schema.md): " << declined
        << "\n";
  if (const std::string why = reasonsText(report, &OpStats::not_checked); !why.empty())
    out << "  Sampled calls not checked (skipped before any check ran): " << why << "\n";
  if (const std::string noise = noiseText(report); !noise.empty())
    out << "  Outputs left out as rounding noise of their terms (not raised; docs/detection.md): "
        << noise << "\n";

  const std::vector<Sensitivity> sens = mostSensitive(report, options.most_sensitive);
  if (sens.empty()) return;
  out << "\nMost sensitive ops (data, not alarms: how far outputs move when inputs move by their\n"
         "rounding, FuMi's lower bound of the max relative error; median and p99 approximate):\n";
  auto opt = [](const std::optional<double>& v) { return v ? formatValue(*v) : std::string("-"); };
  std::vector<std::vector<std::string>> rows;
  for (const Sensitivity& x : sens) {
    const MetricSummary* m = x.metric;
    rows.push_back({x.op->op, x.op->backend.empty() ? "-" : x.op->backend, x.key,
                    m ? std::to_string(m->count) : "-", m ? opt(m->median) : "-",
                    m ? opt(m->p99) : "-", formatValue(x.max)});
  }
  formatTable(out, {"OP", "BACKEND", "METRIC", "COUNT", "MEDIAN", "P99", "MAX"}, rows,
              {false, false, false, true, true, true, true}, "  ");
}

// The metrics of one data kind (precision_cost, cancellation), worst first, under `intro`.
void formatKindData(std::ostream& out, const Report& report, const std::string& kind,
                    const char* intro) {
  std::vector<std::pair<const OpStats*, const std::pair<const std::string, MetricSummary>*>> rows_in;
  for (const OpStats& s : report.ops)
    for (const auto& entry : s.metrics)
      if (entry.second.kind == kind && entry.second.count > 0) rows_in.emplace_back(&s, &entry);
  if (rows_in.empty()) return;
  auto maxOf = [](const auto& r) { return r.second->second.max.value_or(0.0); };
  std::stable_sort(rows_in.begin(), rows_in.end(),
                   [&](const auto& a, const auto& b) { return worse(maxOf(a), maxOf(b)); });
  out << "\n" << intro;
  auto opt = [](const std::optional<double>& v) { return v ? formatValue(*v) : std::string("-"); };
  std::vector<std::vector<std::string>> rows;
  for (const auto& [op, entry] : rows_in) {
    const MetricSummary& m = entry->second;
    rows.push_back({op->op, op->backend.empty() ? "-" : op->backend, entry->first,
                    std::to_string(m.count), opt(m.median), opt(m.p99), opt(m.max),
                    std::to_string(m.violations)});
  }
  formatTable(out, {"OP", "BACKEND", "METRIC", "COUNT", "MEDIAN", "P99", "MAX", "VIOLATIONS"},
              rows, {false, false, false, true, true, true, true, true}, "  ");
}

// The data tables of the host-judged kinds: what low precision cost each op (autocast's cost,
// gradient underflow: which ops should stay in f32), then the results whose inputs cancel.
void formatHostData(std::ostream& out, const Report& report) {
  formatKindData(out, report, kKindPrecisionCost,
                 "Precision cost under autocast (data: each op in its autocast dtype against the "
                 "same op\non the f32 values before the cast, normwise; the worst are the ones to "
                 "keep in f32;\ngradient.underflow: the share of an f16/bf16 backward output "
                 "flushed below its\ndtype's smallest normal):\n");
  formatKindData(out, report, kKindCancellation,
                 "Results whose inputs cancel (data: relative errors of results off by more than "
                 "their\nerror tolerance only because their terms cancel, the op as accurate as "
                 "its precision\nallows against them; a violation above the cancellation bound, "
                 "docs/policy.md):\n");
}

// One row per launcher rank (a distributed job).
void formatRanks(std::ostream& out, const Report& report) {
  if (report.ranks.empty()) return;
  std::vector<std::vector<std::string>> rows;
  for (const RankTotals& r : report.ranks)
    rows.push_back({std::to_string(r.rank), std::to_string(r.processes),
                    std::to_string(r.incomplete), std::to_string(r.calls),
                    std::to_string(r.checked), std::to_string(r.violations)});
  out << "\nRanks:\n";
  formatTable(out, {"RANK", "PROCESSES", "INCOMPLETE", "CALLS", "CHECKED", "VIOLATIONS"}, rows,
              {true, true, true, true, true, true}, "  ");
}

// The table of checked ops (all ops with --all), then one line for the ops only counted.
void formatOpsTable(std::ostream& out, const Report& report, const TextOptions& options) {
  if (report.ops.empty()) {
    out << "\nNo intercepted calls recorded.\n";
    return;
  }
  std::vector<std::vector<std::string>> rows;
  uint64_t counted_ops = 0, counted_calls = 0;
  bool any_incomplete = false;
  const bool ranked = report.ranks.size() > 1;  // a distributed job: which rank is worst
  for (const OpStats& s : report.ops) {
    if (onlyCounted(s) && !options.all) {
      ++counted_ops;
      counted_calls += s.calls;
      continue;
    }
    any_incomplete |= s.incomplete;
    rows.push_back({s.op + (s.incomplete ? "*" : ""), s.backend.empty() ? "-" : s.backend,
                    std::to_string(s.calls), std::to_string(s.checked), std::to_string(s.skipped),
                    std::to_string(s.violations), worstText(s)});
    if (ranked) {
      const auto r = s.worstRank();
      rows.back().insert(rows.back().begin() + 6, r ? std::to_string(*r) : "-");
    }
  }
  out << "\n" << (options.all ? "Ops:" : "Checked ops:") << "\n";
  if (rows.empty()) {
    out << "  none\n";
  } else if (ranked) {
    formatTable(out,
                {"OP", "BACKEND", "CALLS", "CHECKED", "SKIPPED", "VIOLATIONS", "WORST RANK",
                 "WORST"},
                rows, {false, false, true, true, true, true, true, false}, "  ");
  } else {
    formatTable(out, {"OP", "BACKEND", "CALLS", "CHECKED", "SKIPPED", "VIOLATIONS", "WORST"}, rows,
                {false, false, true, true, true, true, false}, "  ");
  }
  if (any_incomplete) out << "  (* includes counts derived from events of incomplete processes)\n";
  if (counted_ops) {
    out << "  " << counted_ops << " other op" << (counted_ops == 1 ? "" : "s") << " only counted ("
        << plural(counted_calls, "call") << "); --all lists them\n";
  }
}

}  // namespace

std::string userFrame(const std::vector<std::string>& python_stack) {
  // Frames of an installed torch (or a fumi package) say where the op was dispatched, not
  // which line of the program asked for it.
  auto framework = [](const std::string& frame) {
    const std::string file = frame.substr(0, frame.find(':'));
    for (const char* pkg : {"packages/torch/", "packages/fumi"}) {
      if (file.find(pkg) != std::string::npos) return true;
    }
    return file.rfind("torch/", 0) == 0 || file.rfind("<frozen", 0) == 0;
  };
  for (const std::string& f : python_stack) {
    if (!framework(f)) return f;
  }
  return python_stack.empty() ? std::string() : python_stack.front();
}

std::string formatValue(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

json toJson(const Report& report) {
  json j = json::object();
  json procs = json::array();
  for (const ProcessInfo& p : report.processes) {
    json pj = json::object();
    pj["pid"] = p.pid;
    pj["ppid"] = p.ppid;
    pj["argv"] = p.argv;
    pj["policy"] = p.policy;
    pj["fumi_version"] = p.fumi_version;
    pj["start_time"] = p.start_time;
    pj["file"] = p.file;
    pj["incomplete"] = p.incomplete;
    pj["ended"] = p.ended;
    pj["rank"] = p.rank ? json(*p.rank) : json(nullptr);
    pj["elapsed_s"] = optNumberJson(p.elapsed_s);
    json timeline = json::array();
    for (const TimelinePoint& t : p.timeline)
      timeline.push_back({{"elapsed_s", t.elapsed_s},
                          {"calls", t.calls},
                          {"checked", t.checked},
                          {"skipped", t.skipped},
                          {"violations", t.violations},
                          {"reason", t.reason}});
    pj["timeline"] = std::move(timeline);
    procs.push_back(std::move(pj));
  }
  j["processes"] = std::move(procs);

  json ops = json::array();
  for (const OpStats& s : report.ops) {
    json oj = json::object();
    oj["op"] = s.op;
    oj["backend"] = s.backend;
    oj["calls"] = s.calls;
    oj["checked"] = s.checked;
    oj["skipped"] = s.skipped;
    oj["violations"] = s.violations;
    oj["incomplete"] = s.incomplete;
    json w = json::object();
    for (const auto& [k, v] : s.worst) w[k] = numberJson(v);
    oj["worst"] = std::move(w);
    oj["first_violation"] = s.first_violation ? violationJson(*s.first_violation) : json(nullptr);
    json kinds = json::object(), firsts = json::object();
    for (const auto& [kind, kv] : s.by_kind) {
      kinds[kind] = kv.violations;
      if (kv.first) firsts[kind] = violationJson(*kv.first);
    }
    oj["violations_by_kind"] = std::move(kinds);
    oj["first_violation_by_kind"] = std::move(firsts);
    json metrics = json::object();
    for (const auto& [k, m] : s.metrics) {
      metrics[k] = {{"kind", m.kind},
                    {"count", m.count},
                    {"violations", m.violations},
                    {"median", optNumberJson(m.median)},
                    {"p99", optNumberJson(m.p99)},
                    {"max", optNumberJson(m.max)},
                    {"of_tolerance", optNumberJson(m.of_tolerance)},
                    {"noise", m.noise},
                    {"noise_max", optNumberJson(m.noise_max)}};
    }
    oj["metrics"] = std::move(metrics);
    oj["nonfinite_propagated"] = s.nonfinite_propagated;
    oj["handled_overflow"] = s.handled_overflow;
    oj["declined"] = s.declined;
    oj["not_checked"] = s.not_checked;
    const auto worst_rank = s.worstRank();
    oj["worst_rank"] = worst_rank ? json(*worst_rank) : json(nullptr);
    json rank_violations = json::object();
    for (const auto& [rank, n] : s.rank_violations) rank_violations[std::to_string(rank)] = n;
    oj["rank_violations"] = std::move(rank_violations);
    ops.push_back(std::move(oj));
  }
  j["ops"] = std::move(ops);
  json ranks = json::array();
  for (const RankTotals& r : report.ranks)
    ranks.push_back({{"rank", r.rank},
                     {"processes", r.processes},
                     {"incomplete_processes", r.incomplete},
                     {"calls", r.calls},
                     {"checked", r.checked},
                     {"violations", r.violations}});
  j["ranks"] = std::move(ranks);

  json origins = json::array();
  for (const NanOrigin& o : report.nan_origins) {
    json oj = violationJson(o.violation);
    oj["op"] = o.op;
    oj["backend"] = o.backend;
    oj["gradient_of"] = o.gradient_of.empty() ? json(nullptr) : json(o.gradient_of);
    oj["after_forward_sentinel"] = o.after_forward_sentinel;
    oj["inf_of"] = o.inf_of.empty() ? json(nullptr) : json(o.inf_of);
    origins.push_back(std::move(oj));
  }
  j["nan_origins"] = std::move(origins);
  json searches = json::array();
  for (const NanSearch& n : report.nan_searches) {
    searches.push_back({{"pid", n.pid},
                        {"result", n.result},
                        {"message", n.message},
                        {"sentinel", n.sentinel},
                        {"file", n.file},
                        {"line", n.line}});
  }
  j["nan_searches"] = std::move(searches);

  json errors = json::array();
  for (const ErrorEvent& e : report.errors) {
    errors.push_back({{"kind", "event"},
                      {"pid", e.pid},
                      {"where", e.where},
                      {"location", e.location},
                      {"message", e.message},
                      {"file", e.file},
                      {"line", e.line}});
  }
  for (const MalformedLine& m : report.malformed) {
    errors.push_back({{"kind", "malformed"},
                      {"file", m.file},
                      {"line", m.line},
                      {"message", m.message}});
  }
  j["errors"] = std::move(errors);

  Totals t = report.totals();
  j["totals"] = {{"processes", report.processes.size()},
                 {"incomplete_processes", report.incompleteCount()},
                 {"calls", t.calls},
                 {"checked", t.checked},
                 {"skipped", t.skipped},
                 {"violations", t.violations},
                 {"violations_by_kind", violationsByKind(report)},
                 {"nan_origins", report.nan_origins.size()},
                 {"error_events", report.errors.size()},
                 {"malformed_lines", report.malformed.size()}};
  return j;
}

namespace {
// For a headline: NaN/Inf seen whose origin no search found (batch 25: runs ending with every
// weight NaN closed with "0 violations"); empty where none.
std::string unknownNanText(const Report& report) {
  const std::vector<const NanSearch*> not_found = searchesNotFound(report);
  const size_t n = not_found.size();
  if (!n) return "";
  // Begun after an origin was reported (a copy of the weights it spread into, read epochs
  // later: batch 35's SWA model): said so, not left to read as a second unknown cause.
  const size_t after = static_cast<size_t>(std::count_if(
      not_found.begin(), not_found.end(), [](const NanSearch* s) { return !s->after_origin.empty(); }));
  std::string text = "; NaN/Inf seen, origin not found (" + std::to_string(n) +
                     (n == 1 ? " search" : " searches");
  if (after == n) text += n == 1 ? ", after the origin reported: maybe its spread"
                                 : ", all after the origin reported: maybe its spread";
  else if (after) text += ", " + std::to_string(after) + " after the origin reported";
  return text + ")";
}
}  // namespace

std::string formatText(const Report& report, const TextOptions& options) {
  std::ostringstream out;
  const Totals t = report.totals();
  const size_t nprocs = report.processes.size(), nincomplete = report.incompleteCount();
  out << nprocs << " process" << (nprocs == 1 ? "" : "es") << ", " << t.calls << " calls, "
      << t.checked << " checked";
  if (t.skipped) out << " (" << t.skipped << " skipped)";
  out << ", " << plural(t.violations, "violation");
  const auto kinds = violationsByKind(report);
  if (!kinds.empty()) {
    std::string split;
    for (const std::string& kind : kindOrder(kinds)) {
      split += (split.empty() ? "" : ", ") + std::to_string(kinds.at(kind)) + " " + kind;
    }
    // NaN/Inf checks' violations that fumi ties to an origin reported (its spread, its
    // gradient): one defect read as a dozen errors (batch 37's deep Kalman filter: an exp
    // overflow, then "12 violations (12 error)", 11 of them GEMMs reading its Inf).
    uint64_t tied = 0;
    for (const OpStats& s : report.ops) {
      if (!s.first_violation || s.first_violation->spread_of.empty()) continue;
      const auto m = s.metrics.find("nan_inf.nonfinite");
      tied += m != s.metrics.end() ? m->second.violations : s.violations;
    }
    if (tied) split += "; " + std::to_string(tied) + " the spread or gradient of a NaN/Inf origin";
    out << " (" << split << ")";
  }
  out << unknownNanText(report) << "\n";
  if (nincomplete)
    out << "(" << nincomplete
        << " incomplete: killed without a final summary, counts are lower bounds)\n";

  formatFindings(out, report, options);
  formatHostData(out, report);
  formatOpsTable(out, report, options);
  formatRanks(out, report);

  out << "\nProcesses:\n";
  for (const ProcessInfo& p : report.processes) {
    out << "  pid " << padRight(std::to_string(p.pid), 8);
    if (!report.ranks.empty()) out << padRight(p.rank ? "rank " + std::to_string(*p.rank) : "", 9);
    std::string when;
    if (p.elapsed_s) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.2f s", *p.elapsed_s);
      when = buf;
    }
    // How it ended, when not by a normal exit: the counts are those of its last snapshot.
    if (p.ended == "killed") when += (when.empty() ? "" : " ") + std::string("killed, last snapshot");
    else if (p.ended.empty()) when = "incomplete";
    else if (p.ended != "exit") when += (when.empty() ? "" : " ") + p.ended;
    out << padRight(when, 11) << " "
        << (p.argv.empty() ? std::string("?") : joinArgv(p.argv)) << "\n";
  }

  if (!report.errors.empty()) {
    out << "\nErrors reported by libfumi:\n";
    for (const ErrorEvent& e : report.errors) {
      out << "  pid " << e.pid;
      if (!e.where.empty()) out << " [" << e.where << "]";
      if (!e.location.empty()) out << " " << e.location << ":";
      out << " " << e.message << "\n";
    }
  }
  if (!report.malformed.empty()) {
    out << "\nMalformed lines skipped: " << report.malformed.size() << "\n";
    for (const MalformedLine& m : report.malformed) out << "  " << m.str() << "\n";
  }
  return out.str();
}

std::string formatRunSummary(const Report& report, const std::string& dir, size_t top_ops) {
  std::ostringstream out;
  Totals t = report.totals();
  const size_t nincomplete = report.incompleteCount();
  out << "fumi: " << report.processes.size() << " process" << (report.processes.size() == 1 ? "" : "es");
  if (nincomplete) out << " (" << nincomplete << " incomplete)";
  out << ", " << t.calls << " calls intercepted, " << t.checked << " checked, " << t.violations
      << " violation" << (t.violations == 1 ? "" : "s") << unknownNanText(report) << "\n";
  size_t shown = 0;
  for (const OpStats& s : report.ops) {
    if (s.violations == 0 || shown >= top_ops) break;
    if (shown == 0) out << "fumi: top ops by violations:\n";
    ++shown;
    out << "  " << s.op << " (" << (s.backend.empty() ? "-" : s.backend) << "): " << s.violations
        << " violation" << (s.violations == 1 ? "" : "s") << " in " << s.checked << " checked of "
        << s.calls << " calls; worst " << worstText(s) << "\n";
  }
  // Checks that could not run on checked calls, by check and reason: "160 checked, 0
  // violations" read as verified where highprec could judge 2 of them (batch 17: f64, no wider
  // dtype on the CPU).
  std::map<std::string, uint64_t> declined;
  for (const OpStats& s : report.ops)
    for (const auto& [reason, calls] : s.declined) declined[reason] += calls;
  if (!declined.empty()) {
    out << "fumi: checks that did not run on checked calls:";
    const char* sep = " ";
    for (const auto& [reason, calls] : declined) {
      out << sep << reason << " (" << plural(calls, "call") << ")";
      sep = ", ";
    }
    out << "\n";
  }
  for (const NanOrigin& o : report.nan_origins)
    out << "fumi: NaN/Inf origin: " << originText(o) << "\n";
  for (const NanSearch& n : report.nan_searches) {
    if (n.result != "found") out << "fumi: " << notFoundText(n) << "\n";
  }
  if (!report.errors.empty()) {
    out << "fumi: " << report.errors.size() << " error event" << (report.errors.size() == 1 ? "" : "s")
        << " (see fumi report)\n";
  }
  if (!report.malformed.empty()) {
    out << "fumi: " << report.malformed.size() << " malformed event line"
        << (report.malformed.size() == 1 ? "" : "s") << " skipped\n";
  }
  out << "fumi: events in " << dir << " (details: fumi report " << dir << ")\n";
  return out.str();
}

}  // namespace fumi::report
