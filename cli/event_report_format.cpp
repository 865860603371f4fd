// event_report_format.cpp — renderings of an aggregated Report: the JSON document of
// `fumi report --format json`, the text of `fumi report`, and the summary of `fumi run`.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "event_report.h"

namespace fumi::report {

using nlohmann::json;

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
  j["file"] = v.file;
  j["line"] = v.line;
  return j;
}

// "name (12.3 us), name2" from an event's `kernels` (entries of other shapes are skipped).
std::string kernelList(const json& kernels) {
  std::string s;
  for (const json& k : kernels) {
    if (!k.is_object() || !k.contains("name") || !k["name"].is_string()) continue;
    if (!s.empty()) s += ", ";
    s += k["name"].get<std::string>();
    if (k.contains("duration_ns") && k["duration_ns"].is_number())
      s += " (" + formatValue(k["duration_ns"].get<double>() / 1000) + " us)";
  }
  return s;
}

std::string joinArgv(const std::vector<std::string>& argv, size_t max_len = 60) {
  std::string s;
  for (const std::string& a : argv) {
    if (!s.empty()) s += ' ';
    s += a;
  }
  if (s.size() > max_len) s = s.substr(0, max_len - 3) + "...";
  return s;
}

std::string worstText(const std::map<std::string, double>& worst) {
  std::string s;
  for (const auto& [k, v] : worst) {
    if (!s.empty()) s += "  ";
    s += k + "=" + formatValue(v);
  }
  return s.empty() ? "-" : s;
}

std::string padRight(const std::string& s, size_t w) {
  return s.size() >= w ? s : s + std::string(w - s.size(), ' ');
}
std::string padLeft(const std::string& s, size_t w) {
  return s.size() >= w ? s : std::string(w - s.size(), ' ') + s;
}

}  // namespace

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
    pj["elapsed_s"] = optNumberJson(p.elapsed_s);
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
    ops.push_back(std::move(oj));
  }
  j["ops"] = std::move(ops);

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
                 {"error_events", report.errors.size()},
                 {"malformed_lines", report.malformed.size()}};
  return j;
}

std::string formatText(const Report& report, size_t stack_frames) {
  std::ostringstream out;
  const size_t nincomplete = report.incompleteCount();
  out << "Processes: " << report.processes.size();
  if (nincomplete) out << " (" << nincomplete << " incomplete: no summary, counts are lower bounds)";
  out << "\n";
  for (const ProcessInfo& p : report.processes) {
    out << "  pid " << padRight(std::to_string(p.pid), 8);
    if (p.incomplete) {
      out << padRight("incomplete", 11);
    } else if (p.elapsed_s) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.2f s", *p.elapsed_s);
      out << padRight(buf, 11);
    } else {
      out << padRight("", 11);
    }
    out << (p.argv.empty() ? std::string("?") : joinArgv(p.argv)) << "\n";
  }
  out << "\n";

  if (report.ops.empty()) {
    out << "No intercepted calls recorded.\n";
  } else {
    const std::vector<std::string> head = {"OP", "BACKEND", "CALLS", "CHECKED", "SKIPPED",
                                           "VIOLATIONS", "WORST"};
    std::vector<std::vector<std::string>> rows;
    for (const OpStats& s : report.ops) {
      rows.push_back({s.op + (s.incomplete ? "*" : ""), s.backend.empty() ? "-" : s.backend,
                      std::to_string(s.calls), std::to_string(s.checked),
                      std::to_string(s.skipped), std::to_string(s.violations),
                      worstText(s.worst)});
    }
    std::vector<size_t> width(head.size());
    for (size_t c = 0; c < head.size(); ++c) {
      width[c] = head[c].size();
      for (const auto& r : rows) width[c] = std::max(width[c], r[c].size());
    }
    auto emit = [&](const std::vector<std::string>& r) {
      std::string line;
      for (size_t c = 0; c < r.size(); ++c) {
        const bool numeric = c >= 2 && c <= 5;
        if (c) line += "  ";
        if (c + 1 == r.size()) {
          line += r[c];
        } else {
          line += numeric ? padLeft(r[c], width[c]) : padRight(r[c], width[c]);
        }
      }
      out << line << "\n";
    };
    emit(head);
    for (const auto& r : rows) emit(r);
    Totals t = report.totals();
    out << "Total: " << t.calls << " calls, " << t.checked << " checked, " << t.skipped
        << " skipped, " << t.violations << (t.violations == 1 ? " violation\n" : " violations\n");
    if (std::any_of(report.ops.begin(), report.ops.end(),
                    [](const OpStats& s) { return s.incomplete; })) {
      out << "(* includes counts derived from events of incomplete processes)\n";
    }
  }

  bool any_violation = false;
  for (const OpStats& s : report.ops) {
    if (!s.first_violation) continue;
    if (!any_violation) out << "\nFirst violations:\n";
    any_violation = true;
    const ViolationInfo& v = *s.first_violation;
    out << "  " << s.op << " (" << (s.backend.empty() ? "-" : s.backend) << "): pid " << v.pid;
    if (v.call_index) out << ", call " << *v.call_index;
    out << ", " << metricKey(v.check, v.metric) << " = " << (v.value ? formatValue(*v.value) : "?");
    if (v.tolerance) out << " > " << formatValue(*v.tolerance);
    if (!v.rule.empty()) out << ", rule " << v.rule;
    if (!v.dtype.empty()) out << ", " << v.dtype;
    out << "\n";
    if (!v.detail.empty()) out << "      " << v.detail << "\n";
    if (v.kernels.is_array() && !v.kernels.empty()) out << "      kernels: " << kernelList(v.kernels) << "\n";
    for (size_t i = 0; i < v.stack.size() && i < stack_frames; ++i) {
      out << "      " << v.stack[i] << "\n";
    }
    if (v.stack.size() > stack_frames) {
      out << "      ... " << (v.stack.size() - stack_frames) << " more frames (--format json)\n";
    }
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
      << " violation" << (t.violations == 1 ? "" : "s") << "\n";
  size_t shown = 0;
  for (const OpStats& s : report.ops) {
    if (s.violations == 0 || shown >= top_ops) break;
    if (shown == 0) out << "fumi: top ops by violations:\n";
    ++shown;
    out << "  " << s.op << " (" << (s.backend.empty() ? "-" : s.backend) << "): " << s.violations
        << " violation" << (s.violations == 1 ? "" : "s") << " in " << s.checked << " checked of "
        << s.calls << " calls; worst " << worstText(s.worst) << "\n";
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
