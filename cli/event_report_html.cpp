// event_report_html.cpp — `fumi report --format html`: the report as one self-contained HTML
// page. Everything is inline (CSS, SVG plots); there is no script and nothing is fetched, so the
// file can be mailed, attached to a ticket or opened offline. Every text that comes from the
// event files (op names, stacks, argv, messages) is escaped.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <string_view>

#include "event_report.h"
#include "event_report_detail.h"

namespace fumi::report {

using nlohmann::json;
using namespace detail;

namespace {

// Text for HTML content and attribute values: the five special characters as references, and
// control characters (which HTML does not allow) as U+FFFD.
std::string esc(std::string_view s) {
  std::string out;
  out.reserve(s.size() + s.size() / 8);
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default: {
        const auto u = static_cast<unsigned char>(c);
        if ((u < 0x20 && c != '\n' && c != '\t' && c != '\r') || u == 0x7f) {
          out += "\xEF\xBF\xBD";
        } else {
          out += c;
        }
      }
    }
  }
  return out;
}

// An op name in a table cell: escaped, breakable only after "::" and "." ("aten::norm.|
// ScalarOpt_dim"), so a narrow column wraps it at its parts, not inside a word (code.op).
std::string opText(const std::string& op) {
  std::string out;
  for (size_t i = 0; i < op.size(); ++i) {
    out += esc(op.substr(i, 1));
    if (op[i] == '.' || (op[i] == ':' && i > 0 && op[i - 1] == ':')) out += "<wbr>";
  }
  return out;
}
std::string opCode(const std::string& op) { return "<code class=\"op\">" + opText(op) + "</code>"; }

// A coordinate in an SVG attribute.
std::string px(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// A count as a tick label: 950, 12.3k, 4.5M.
std::string compactCount(double v) {
  char buf[32];
  if (std::fabs(v) < 10000) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else if (std::fabs(v) < 1e7) {
    std::snprintf(buf, sizeof buf, "%.3gk", v / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.3gM", v / 1e6);
  }
  return buf;
}

std::string optValue(const std::optional<double>& v) { return v ? formatValue(*v) : "-"; }

// 1, 2 or 5 times a power of ten, near range / target.
double niceStep(double range, int target) {
  if (!(range > 0)) return 1;
  const double raw = range / target;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  const double f = raw / mag;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
}

// "2026-11-21T20:00:00.123Z" -> seconds since 1970 (UTC); nullopt when it is not one.
std::optional<double> isoSeconds(const std::string& t) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0;
  double s = 0;
  if (std::sscanf(t.c_str(), "%4d-%2d-%2dT%2d:%2d:%lf", &y, &mo, &d, &h, &mi, &s) != 6) {
    return std::nullopt;
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31) return std::nullopt;
  // Days since 1970-01-01 of a proleptic Gregorian date.
  const int yy = y - (mo <= 2 ? 1 : 0);
  const int era = (yy >= 0 ? yy : yy - 399) / 400;
  const int yoe = yy - era * 400;
  const int doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  const double days = era * 146097.0 + doe - 719468;
  return days * 86400 + h * 3600 + mi * 60 + s;
}

constexpr const char* kStyle = R"css(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
  margin:0;color:#1d2330;background:#f6f7f9}
main{max-width:1200px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:22px;margin:8px 0 2px}
h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d5d9e0;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}
h4{font-size:14px;margin:0 0 4px}
nav{position:sticky;top:0;background:#1d2330;padding:6px 24px;z-index:1}
nav a{color:#dfe6f3;margin-right:16px;text-decoration:none;font-size:13px}
.src{color:#5b6475;margin:0 0 12px;word-break:break-all}
.cards{display:flex;flex-wrap:wrap;gap:10px}
.card{background:#fff;border:1px solid #d5d9e0;border-radius:6px;padding:8px 14px;min-width:110px}
.card b{display:block;font-size:20px}
.card span{color:#5b6475;font-size:12px}
.card.bad b{color:#b42318}
.finding{background:#fff;border:1px solid #d5d9e0;border-left:4px solid #b42318;border-radius:4px;
  padding:8px 12px;margin:8px 0}
.finding.sensitivity{border-left-color:#c26a00}
.finding.cancellation{border-left-color:#0f766e}
.finding.origin{border-left-color:#6b21a8}
.meta{color:#5b6475;font-size:13px;margin:2px 0}
.ok{color:#1a7f37;font-weight:600}
.warn{color:#b42318}
table{border-collapse:collapse;background:#fff;margin:6px 0;font-size:13px}
th,td{border:1px solid #d5d9e0;padding:3px 8px;text-align:left;vertical-align:middle}
th{background:#eef1f5}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.viol td{background:#fff4f2}
pre{background:#f1f3f6;border:1px solid #e1e5eb;padding:6px 8px;margin:4px 0;overflow-x:auto;
  font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;white-space:pre}
pre .user{background:#fff1b8}
code{font:12px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;word-break:break-all}
code.op{word-break:normal}
details{margin:4px 0}
summary{cursor:pointer;color:#2a4d8f}
svg{display:block}
svg text{font:11px system-ui,sans-serif;fill:#3b4252}
.legend{font-size:12px;color:#5b6475}
.sw{display:inline-block;width:10px;height:10px;margin:0 3px 0 10px;vertical-align:-1px}
)css";

// ---------------------------------------------------------------------------------------------
// Header and findings.

void cards(std::ostream& out, const Report& report) {
  const Totals t = report.totals();
  auto card = [&](const std::string& value, const std::string& label, bool bad = false) {
    out << "<div class=\"card" << (bad ? " bad" : "") << "\"><b>" << esc(value) << "</b><span>"
        << esc(label) << "</span></div>\n";
  };
  out << "<div class=\"cards\">\n";
  const size_t incomplete = report.incompleteCount();
  card(std::to_string(report.processes.size()),
       incomplete ? "processes (" + std::to_string(incomplete) + " incomplete)" : "processes",
       incomplete > 0);
  card(std::to_string(t.calls), "calls intercepted");
  card(std::to_string(t.checked), "calls checked");
  if (t.skipped) card(std::to_string(t.skipped), "checks skipped");
  std::string split;
  const auto kinds = violationsByKind(report);
  for (const std::string& kind : kindOrder(kinds)) {
    split += (split.empty() ? "" : ", ") + std::to_string(kinds.at(kind)) + " " + kind;
  }
  card(std::to_string(t.violations), split.empty() ? "violations" : "violations (" + split + ")",
       t.violations > 0);
  if (!report.nan_origins.empty())
    card(std::to_string(report.nan_origins.size()), "NaN/Inf origins", true);
  if (!report.ranks.empty()) card(std::to_string(report.ranks.size()), "ranks");
  if (!report.errors.empty()) card(std::to_string(report.errors.size()), "error events", true);
  if (!report.malformed.empty())
    card(std::to_string(report.malformed.size()), "malformed lines", true);
  out << "</div>\n";
  if (incomplete) {
    out << "<p class=\"meta\">" << incomplete
        << " incomplete: ended without a final summary, their counts are lower bounds.</p>\n";
  }
}

// A stack as a <pre> in a <details>; `mark` is a frame to highlight (the program's own).
void stackBlock(std::ostream& out, const char* title, const std::vector<std::string>& frames,
                const std::string& mark, bool open) {
  if (frames.empty()) return;
  out << "<details" << (open ? " open" : "") << "><summary>" << title << " ("
      << plural(frames.size(), "frame") << ")</summary><pre>";
  bool marked = false;
  for (const std::string& f : frames) {
    if (!marked && !mark.empty() && f == mark) {
      marked = true;
      out << "<span class=\"user\">" << esc(f) << "</span>\n";
    } else {
      out << esc(f) << "\n";
    }
  }
  out << "</pre></details>\n";
}

// The facts of one violation event and its stacks (Python first: it names the program's line).
void violationBody(std::ostream& out, const ViolationInfo& v) {
  out << "<div class=\"meta\">" << esc(describeViolation(v)) << "</div>\n";
  if (!v.detail.empty()) out << "<div>" << esc(v.detail) << "</div>\n";
  if (const std::string c = cancellationText(v); !c.empty())
    out << "<div>" << esc(c) << "</div>\n";
  if (v.kernels.is_array() && !v.kernels.empty())
    out << "<div class=\"meta\">kernels: " << esc(kernelList(v.kernels)) << "</div>\n";
  std::string facts;
  if (v.shape.is_object() && !v.shape.empty()) facts += "shape " + v.shape.dump();
  if (v.extra.is_object() && !v.extra.empty())
    facts += (facts.empty() ? "" : "; ") + v.extra.dump();
  if (!v.time.empty()) facts += (facts.empty() ? "" : "; ") + std::string("at ") + v.time;
  if (!v.file.empty()) facts += (facts.empty() ? "" : "; ") + v.file + ":" + std::to_string(v.line);
  if (!facts.empty()) out << "<div class=\"meta\">" << esc(facts) << "</div>\n";
  if (v.stack.empty() && v.python_stack.empty())
    out << "<div class=\"meta\">(no stack recorded)</div>\n";
  stackBlock(out, "Python stack", v.python_stack, userFrame(v.python_stack), true);
  stackBlock(out, "Native stack", v.stack, "", v.python_stack.empty());
}

std::string rankSplit(const OpStats& s) {
  std::string r;
  for (const auto& [rank, n] : s.rank_violations)
    r += (r.empty() ? "" : ", ") + std::string("rank ") + std::to_string(rank) + ": " +
         std::to_string(n);
  return r;
}

size_t opIndex(const Report& report, const OpStats* s) {
  return static_cast<size_t>(s - report.ops.data());
}

void findings(std::ostream& out, const Report& report, const TextOptions& options) {
  out << "<h2 id=\"findings\">Findings</h2>\n";
  const auto kinds = violationsByKind(report);
  const std::vector<const NanSearch*> not_found = searchesNotFound(report);
  if (kinds.empty() && report.nan_origins.empty() && not_found.empty()) {
    out << "<p class=\"ok\">No violations.</p>\n";
  }
  for (size_t i = 0; i < report.nan_origins.size(); ++i) {
    const NanOrigin& o = report.nan_origins[i];
    out << "<div class=\"finding origin\" id=\"origin-" << i
        << "\"><h4>NaN/Inf origin: " << esc(opName(o.op, o.backend)) << "</h4>\n<div>"
        << esc(originText(o)) << "</div>\n";
    violationBody(out, o.violation);
    out << "</div>\n";
  }
  for (const NanSearch* n : not_found)
    out << "<p class=\"warn\">" << esc(notFoundText(*n)) << "</p>\n";
  const bool ranked = report.ranks.size() > 1;
  std::set<size_t> anchored;  // ops whose first finding carries their anchor
  for (const std::string& kind : kindOrder(kinds)) {
    std::string heading = kindHeading(kind);
    if (!heading.empty() && heading.back() == ':') heading.pop_back();
    out << "<h3>" << esc(heading) << "</h3>\n";
    for (const auto& [s, kv] : opsWithKind(report, kind)) {
      const size_t i = opIndex(report, s);
      out << "<div class=\"finding "
          << (kind == kKindSensitivity || kind == kKindCancellation ? kind : std::string("error"))
          << "\"";
      if (anchored.insert(i).second) out << " id=\"op-" << i << "\"";
      out << "><h4>" << esc(opName(s->op, s->backend)) << ": "
          << esc(plural(kv->violations, "violation")) << "</h4>\n";
      if (ranked && !s->rank_violations.empty()) {
        out << "<div class=\"meta\">worst rank " << *s->worstRank() << " (" << esc(rankSplit(*s))
            << ")</div>\n";
      }
      if (kv->first) {
        const ViolationInfo& v = *kv->first;
        out << "<div class=\"meta\">first of them:</div>\n";
        violationBody(out, v);
        if (v.origin) out << "<div class=\"meta\">(the NaN/Inf origin above)</div>\n";
      }
      out << "</div>\n";
    }
  }
  if (const std::string passed = opCountsText(report, &OpStats::nonfinite_propagated);
      !passed.empty()) {
    out << "<p class=\"meta\">NaN/Inf passed along from inputs (counted, not violations): "
        << esc(passed) << "</p>\n";
  }
  if (const std::string handled = opCountsText(report, &OpStats::handled_overflow);
      !handled.empty()) {
    out << "<p class=\"meta\">Backward-pass overflow handled by the loss scaler (counted, not "
           "violations): "
        << esc(handled) << "</p>\n";
  }
  if (const std::string declined = reasonsText(report, &OpStats::declined); !declined.empty())
    out << "<p class=\"meta\">Calls a check skipped (by check and reason): " << esc(declined)
        << "</p>\n";
  if (const std::string why = reasonsText(report, &OpStats::not_checked); !why.empty())
    out << "<p class=\"meta\">Sampled calls not checked (skipped before any check ran): "
        << esc(why) << "</p>\n";
  if (const std::string noise = noiseText(report); !noise.empty())
    out << "<p class=\"meta\">Outputs left out as rounding noise of their terms (not raised): "
        << esc(noise) << "</p>\n";
  const std::vector<Sensitivity> sens = mostSensitive(report, options.most_sensitive);
  if (sens.empty()) return;
  out << "<h3>Most sensitive ops</h3>\n<p class=\"meta\">Data, not alarms: how far outputs move "
         "when inputs move by their rounding (FuMi's lower bound of the max relative error; "
         "median and p99 approximate).</p>\n<table><tr><th>op</th><th>backend</th><th>metric</th>"
         "<th>count</th><th>median</th><th>p99</th><th>max</th></tr>\n";
  for (const Sensitivity& x : sens) {
    const MetricSummary* m = x.metric;
    out << "<tr><td>" << opCode(x.op->op) << "</td><td>"
        << esc(x.op->backend.empty() ? "-" : x.op->backend) << "</td><td>" << esc(x.key)
        << "</td><td class=\"n\">" << (m ? std::to_string(m->count) : "-")
        << "</td><td class=\"n\">" << (m ? optValue(m->median) : "-") << "</td><td class=\"n\">"
        << (m ? optValue(m->p99) : "-") << "</td><td class=\"n\">" << formatValue(x.max)
        << "</td></tr>\n";
  }
  out << "</table>\n";
}

// ---------------------------------------------------------------------------------------------
// Timeline: the job's cumulative checked calls and violations, from the processes' snapshots and
// summaries placed at their start times (seconds since the first process started).

struct JobPoint {
  double t = 0;
  double checked = 0;
  double violations = 0;
  std::string note;
};

struct Timeline {
  std::vector<JobPoint> points;
  std::vector<std::pair<double, std::string>> marks;  // first violations: time, what
  double t_max = 0;
};

Timeline jobTimeline(const Report& report) {
  Timeline tl;
  std::optional<double> base;
  for (const ProcessInfo& p : report.processes)
    if (auto s = isoSeconds(p.start_time); s && (!base || *s < *base)) base = s;
  struct Step {
    double t;
    size_t proc;
    const TimelinePoint* point;  // null: the process's start (zero counts)
  };
  std::vector<Step> steps;
  for (size_t i = 0; i < report.processes.size(); ++i) {
    const ProcessInfo& p = report.processes[i];
    if (p.timeline.empty()) continue;
    const auto start = isoSeconds(p.start_time);
    const double offset = base && start ? *start - *base : 0;
    steps.push_back({offset, i, nullptr});
    for (const TimelinePoint& tp : p.timeline) steps.push_back({offset + tp.elapsed_s, i, &tp});
  }
  std::stable_sort(steps.begin(), steps.end(),
                   [](const Step& a, const Step& b) { return a.t < b.t; });
  std::vector<std::pair<uint64_t, uint64_t>> now(report.processes.size());  // checked, violations
  uint64_t checked = 0, violations = 0;
  for (const Step& st : steps) {
    auto& cur = now[st.proc];
    const uint64_t c = st.point ? st.point->checked : 0, v = st.point ? st.point->violations : 0;
    checked = checked - cur.first + c;
    violations = violations - cur.second + v;
    cur = {c, v};
    std::string note = "pid " + std::to_string(report.processes[st.proc].pid) + " " +
                       (st.point ? st.point->reason : std::string("start"));
    if (!tl.points.empty() && tl.points.back().t == st.t) {
      tl.points.back().checked = static_cast<double>(checked);
      tl.points.back().violations = static_cast<double>(violations);
      tl.points.back().note += ", " + note;
    } else {
      tl.points.push_back(
          {st.t, static_cast<double>(checked), static_cast<double>(violations), note});
    }
    tl.t_max = std::max(tl.t_max, st.t);
  }
  if (base && !tl.points.empty()) {
    auto mark = [&](const std::string& op, const ViolationInfo& v, const std::string& what) {
      if (auto t = isoSeconds(v.time); t && *t >= *base) {
        tl.marks.emplace_back(*t - *base, what + " " + op + ": " + describeViolation(v));
        tl.t_max = std::max(tl.t_max, *t - *base);
      }
    };
    for (const OpStats& s : report.ops)
      for (const auto& [kind, kv] : s.by_kind)
        if (kv.first && !kv.first->origin) mark(s.op, *kv.first, "first " + kind);
    for (const NanOrigin& o : report.nan_origins) mark(o.op, o.violation, "NaN/Inf origin");
  }
  return tl;
}

// "12 s", "3.5 min", "2 h" for an x tick, in the unit of the whole axis.
std::string timeLabel(double t, double t_max) {
  char buf[32];
  if (t_max >= 7200) {
    std::snprintf(buf, sizeof buf, "%g h", t / 3600);
  } else if (t_max >= 180) {
    std::snprintf(buf, sizeof buf, "%g min", t / 60);
  } else {
    std::snprintf(buf, sizeof buf, "%g s", t);
  }
  return buf;
}

// "0.40 s", "1236 s" for a tooltip.
std::string pointTime(double t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, t < 100 ? "%.2f s" : "%.0f s", t);
  return buf;
}

void timeline(std::ostream& out, const Report& report) {
  out << "<h2 id=\"timeline\">Timeline</h2>\n";
  const Timeline tl = jobTimeline(report);
  if (tl.points.empty()) {
    out << "<p class=\"meta\">No timeline: no snapshot or summary in these event files carries "
           "totals (written by an older libfumi).</p>\n";
    return;
  }
  const double W = 900, left = 70, right = 30, panel = 120, gap = 34, top = 14;
  const double pw = W - left - right;
  const double H = top + 2 * panel + gap + 30;
  double t_max = tl.t_max > 0 ? tl.t_max : 1;
  const double t_step = niceStep(t_max / (t_max >= 7200  ? 3600
                                          : t_max >= 180 ? 60
                                                         : 1),
                                 6) *
                        (t_max >= 7200  ? 3600
                         : t_max >= 180 ? 60
                                        : 1);
  t_max = std::ceil(t_max / t_step - 1e-9) * t_step;
  auto X = [&](double t) { return left + pw * t / t_max; };
  out << "<p class=\"meta\">Cumulative over the job, from each process's snapshots "
         "(<code>report.snapshot_every</code>) and final summary; x: time since the first process "
         "started. Red marks: the first violation of an op (hover for details).</p>\n";
  out << "<svg class=\"timeline\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W
      << " " << H << "\" role=\"img\" aria-label=\"timeline of checks and violations\">\n";
  struct Panel {
    const char* label;
    const char* color;
    double JobPoint::*field;
  };
  const Panel panels[2] = {{"checked calls", "#2a6fdb", &JobPoint::checked},
                           {"violations", "#b42318", &JobPoint::violations}};
  for (int k = 0; k < 2; ++k) {
    const Panel& pn = panels[k];
    const double y0 = top + k * (panel + gap);
    double y_max = 0;
    for (const JobPoint& p : tl.points) y_max = std::max(y_max, p.*pn.field);
    const double y_step = std::max(1.0, niceStep(y_max > 0 ? y_max : 1, 4));
    y_max = std::max(y_step, std::ceil(y_max / y_step - 1e-9) * y_step);
    auto Y = [&](double v) { return y0 + panel - panel * v / y_max; };
    out << "<rect x=\"" << px(left) << "\" y=\"" << px(y0) << "\" width=\"" << px(pw)
        << "\" height=\"" << px(panel) << "\" fill=\"#fff\" stroke=\"#d5d9e0\"/>\n";
    for (double v = 0; v <= y_max + 1e-9; v += y_step) {
      out << "<line x1=\"" << px(left) << "\" x2=\"" << px(left + pw) << "\" y1=\"" << px(Y(v))
          << "\" y2=\"" << px(Y(v)) << "\" stroke=\"#eef1f5\"/><text x=\"" << px(left - 6)
          << "\" y=\"" << px(Y(v) + 4) << "\" text-anchor=\"end\">" << compactCount(v)
          << "</text>\n";
    }
    out << "<text x=\"" << px(left + 6) << "\" y=\"" << px(y0 + 14) << "\" fill=\"" << pn.color
        << "\">" << pn.label << " (cumulative)</text>\n";
    std::string path;
    for (const JobPoint& p : tl.points)
      path += (path.empty() ? "M" : " L") + px(X(p.t)) + " " + px(Y(p.*pn.field));
    out << "<path d=\"" << path << "\" fill=\"none\" stroke=\"" << pn.color
        << "\" stroke-width=\"2\"/>\n";
    if (tl.points.size() <= 400) {
      for (const JobPoint& p : tl.points) {
        out << "<circle cx=\"" << px(X(p.t)) << "\" cy=\"" << px(Y(p.*pn.field))
            << "\" r=\"3\" fill=\"" << pn.color << "\"><title>"
            << esc(pointTime(p.t) + ": " + compactCount(p.*pn.field) + " " + pn.label + " (" +
                   p.note + ")")
            << "</title></circle>\n";
      }
    }
    if (k == 1) {
      for (const auto& [t, what] : tl.marks) {
        const double x = X(t), yb = y0 + panel;
        out << "<path d=\"M" << px(x) << " " << px(yb) << " l-5 9 h10 z\" fill=\"#b42318\"><title>"
            << esc(pointTime(t) + ": " + what) << "</title></path>\n";
      }
    }
  }
  const double yb = top + 2 * panel + gap;
  for (double t = 0; t <= t_max + 1e-9; t += t_step) {
    out << "<text x=\"" << px(X(t)) << "\" y=\"" << px(yb + 24) << "\" text-anchor=\"middle\">"
        << esc(timeLabel(t, t_max)) << "</text>\n";
  }
  out << "</svg>\n";
}

// ---------------------------------------------------------------------------------------------
// Metric distributions: each "check.metric" of an op on one log scale shared by the table.

// The tolerance an op's metric was held to, from its first violations (the policy is not in the
// events otherwise).
std::optional<double> toleranceOf(const OpStats& s, const std::string& key) {
  for (const auto& [kind, kv] : s.by_kind)
    if (kv.first && kv.first->tolerance && metricKey(kv.first->check, kv.first->metric) == key)
      return kv.first->tolerance;
  return std::nullopt;
}

struct LogScale {
  int lo = -8, hi = 0;  // decades
  double width = 320;
  double x(double v) const {
    if (std::isnan(v) || v >= std::pow(10.0, hi)) return width - 4;
    if (!(v > 0)) return 4;
    const double f = (std::log10(v) - lo) / (hi - lo);
    return 4 + (width - 8) * std::clamp(f, 0.0, 1.0);
  }
  int labelEvery() const { return std::max(1, (hi - lo + 7) / 8); }
};

void strip(std::ostream& out, const LogScale& sc, const MetricSummary& m,
           const std::optional<double>& tol) {
  const double H = 24, mid = 12;
  out << "<svg width=\"" << sc.width << "\" height=\"" << H << "\" viewBox=\"0 0 " << sc.width
      << " " << H << "\">";
  for (int d = sc.lo; d <= sc.hi; ++d) {
    const double x = sc.x(std::pow(10.0, d));
    out << "<line x1=\"" << px(x) << "\" x2=\"" << px(x)
        << "\" y1=\"4\" y2=\"20\" stroke=\"#eef1f5\"/>";
  }
  out << "<line x1=\"4\" x2=\"" << px(sc.width - 4) << "\" y1=\"" << mid << "\" y2=\"" << mid
      << "\" stroke=\"#d5d9e0\"/>";
  const std::string color = m.kind == kKindSensitivity     ? "#c26a00"
                            : m.kind == kKindPrecisionCost ? "#6b21a8"
                            : m.kind == kKindCancellation  ? "#0f766e"
                                                           : "#2a6fdb";
  if (m.median && m.p99) {
    const double a = sc.x(*m.median), b = sc.x(*m.p99);
    out << "<rect x=\"" << px(std::min(a, b)) << "\" y=\"" << mid - 4 << "\" width=\""
        << px(std::max(1.0, std::fabs(b - a))) << "\" height=\"8\" fill=\"" << color
        << "\" fill-opacity=\"0.3\"/>";
  }
  if (m.p99 && m.max) {
    out << "<line x1=\"" << px(sc.x(*m.p99)) << "\" x2=\"" << px(sc.x(*m.max)) << "\" y1=\"" << mid
        << "\" y2=\"" << mid << "\" stroke=\"" << color << "\"/>";
  }
  if (tol) {
    const double x = sc.x(*tol);
    out << "<line x1=\"" << px(x) << "\" x2=\"" << px(x)
        << "\" y1=\"1\" y2=\"23\" stroke=\"#b42318\" stroke-dasharray=\"3 2\" stroke-width=\"1.5\">"
        << "<title>tolerance " << formatValue(*tol) << "</title></line>";
  }
  if (m.median) {
    out << "<circle cx=\"" << px(sc.x(*m.median)) << "\" cy=\"" << mid << "\" r=\"4\" fill=\""
        << color << "\"><title>median " << formatValue(*m.median) << "</title></circle>";
  }
  if (m.p99) {
    const double x = sc.x(*m.p99);
    out << "<line x1=\"" << px(x) << "\" x2=\"" << px(x) << "\" y1=\"5\" y2=\"19\" stroke=\""
        << color << "\" stroke-width=\"2\"><title>p99 " << formatValue(*m.p99) << "</title></line>";
  }
  if (m.max) {
    const double x = sc.x(*m.max);
    out << "<path d=\"M" << px(x) << " " << mid - 6 << " l5 6 l-5 6 l-5 -6 z\" fill=\""
        << (m.violations ? "#b42318" : "#3b4252") << "\"><title>max " << formatValue(*m.max)
        << "</title></path>";
  }
  out << "</svg>";
}

void metricDistributions(std::ostream& out, const Report& report) {
  struct Row {
    const OpStats* op;
    const std::string* key;
    const MetricSummary* m;
    std::optional<double> tol;
  };
  std::vector<Row> rows;
  double lo = INFINITY, hi = -INFINITY;
  auto widen = [&](const std::optional<double>& v) {
    if (v && std::isfinite(*v) && *v > 0) {
      lo = std::min(lo, *v);
      hi = std::max(hi, *v);
    }
  };
  for (const OpStats& s : report.ops)
    for (const auto& [key, m] : s.metrics) {
      if (m.count == 0) continue;  // only rounding noise: in the noise line
      rows.push_back({&s, &key, &m, toleranceOf(s, key)});
      widen(m.median);
      widen(m.p99);
      widen(m.max);
      widen(rows.back().tol);
    }
  out << "<h2 id=\"metrics\">Metric distributions</h2>\n";
  if (rows.empty()) {
    out << "<p class=\"meta\">No metric distributions in these event files (only summaries and "
           "snapshots of a recent libfumi carry them).</p>\n";
    return;
  }
  LogScale sc;
  if (lo <= hi) {
    sc.lo = static_cast<int>(std::floor(std::log10(lo)));
    sc.hi = static_cast<int>(std::ceil(std::log10(hi)));
    if (sc.hi <= sc.lo) sc.hi = sc.lo + 1;
  }
  out << "<p class=\"legend\">Log scale shared by all rows. <span class=\"sw\" "
         "style=\"background:#2a6fdb;opacity:.35\"></span>median to p99 "
         "<span class=\"sw\" style=\"background:#2a6fdb;border-radius:5px\"></span>median "
         "<span class=\"sw\" style=\"background:#3b4252\"></span>max (red: the metric had "
         "violations) <span class=\"sw\" style=\"background:#b42318;width:2px\"></span>tolerance "
         "(from the first violation); colour by kind: blue error, orange sensitivity, purple "
         "precision cost, green cancellation. Zero is drawn at the left edge, NaN/Inf and "
         "larger values at the right.</p>\n";
  out << "<table><tr><th>op</th><th>backend</th><th>metric</th><th>kind</th><th>count</th>"
         "<th>violations</th><th>median</th><th>p99</th><th>max</th><th>tolerance</th><th>";
  // The axis: a label every few decades.
  out << "<svg width=\"" << sc.width << "\" height=\"16\" viewBox=\"0 0 " << sc.width << " 16\">";
  for (int d = sc.lo; d <= sc.hi; d += sc.labelEvery()) {
    const double x = sc.x(std::pow(10.0, d));
    out << "<text x=\"" << px(x) << "\" y=\"12\" text-anchor=\""
        << (d == sc.lo                    ? "start"
            : d + sc.labelEvery() > sc.hi ? "end"
                                          : "middle")
        << "\">1e" << d << "</text>";
  }
  out << "</svg></th></tr>\n";
  for (const Row& r : rows) {
    const MetricSummary& m = *r.m;
    out << "<tr" << (m.violations ? " class=\"viol\"" : "") << "><td>" << opCode(r.op->op)
        << "</td><td>" << esc(r.op->backend.empty() ? "-" : r.op->backend) << "</td><td>"
        << esc(*r.key) << "</td><td>" << esc(m.kind) << "</td><td class=\"n\">" << m.count
        << "</td><td class=\"n\">" << m.violations << "</td><td class=\"n\">" << optValue(m.median)
        << "</td><td class=\"n\">" << optValue(m.p99) << "</td><td class=\"n\">" << optValue(m.max)
        << "</td><td class=\"n\">" << optValue(r.tol) << "</td><td>";
    strip(out, sc, m, r.tol);
    out << "</td></tr>\n";
  }
  out << "</table>\n";
}

// ---------------------------------------------------------------------------------------------
// Tables: ops, ranks, processes, errors.

void opRows(std::ostream& out, const Report& report, const std::vector<const OpStats*>& ops,
            bool ranked) {
  out << "<table><tr><th>op</th><th>backend</th><th>calls</th><th>checked</th><th>skipped</th>"
         "<th>violations</th>"
      << (ranked ? "<th>worst rank</th>" : "") << "<th>worst</th></tr>\n";
  for (const OpStats* s : ops) {
    out << "<tr" << (s->violations ? " class=\"viol\"" : "") << "><td><code class=\"op\">";
    if (s->violations && !s->by_kind.empty()) {
      out << "<a href=\"#op-" << opIndex(report, s) << "\">" << opText(s->op) << "</a>";
    } else {
      out << opText(s->op);
    }
    out << (s->incomplete ? "*" : "") << "</code></td><td>"
        << esc(s->backend.empty() ? "-" : s->backend) << "</td><td class=\"n\">" << s->calls
        << "</td><td class=\"n\">" << s->checked << "</td><td class=\"n\">" << s->skipped
        << "</td><td class=\"n\">" << s->violations << "</td>";
    if (ranked) {
      const auto r = s->worstRank();
      out << "<td class=\"n\">" << (r ? std::to_string(*r) : "-") << "</td>";
    }
    out << "<td>" << esc(worstText(*s)) << "</td></tr>\n";
  }
  out << "</table>\n";
}

void opsSection(std::ostream& out, const Report& report, const TextOptions& options) {
  out << "<h2 id=\"ops\">Checked ops</h2>\n";
  if (report.ops.empty()) {
    out << "<p>No intercepted calls recorded.</p>\n";
    return;
  }
  std::vector<const OpStats*> checked, counted;
  uint64_t counted_calls = 0;
  bool any_incomplete = false;
  for (const OpStats& s : report.ops) {
    if (onlyCounted(s)) {
      counted.push_back(&s);
      counted_calls += s.calls;
    } else {
      checked.push_back(&s);
    }
    any_incomplete |= s.incomplete;
  }
  const bool ranked = report.ranks.size() > 1;
  if (checked.empty()) {
    out << "<p>None.</p>\n";
  } else {
    opRows(out, report, checked, ranked);
  }
  if (any_incomplete)
    out << "<p class=\"meta\">* includes counts derived from events of incomplete processes</p>\n";
  if (!counted.empty()) {
    out << "<details" << (options.all ? " open" : "") << "><summary>"
        << plural(counted.size(), "other op") << " only counted, not checked ("
        << plural(counted_calls, "call") << ")</summary>\n";
    opRows(out, report, counted, ranked);
    out << "</details>\n";
  }
}

void ranksSection(std::ostream& out, const Report& report) {
  if (report.ranks.empty()) return;
  out << "<h2 id=\"ranks\">Ranks</h2>\n<table><tr><th>rank</th><th>processes</th>"
         "<th>incomplete</th><th>calls</th><th>checked</th><th>violations</th></tr>\n";
  for (const RankTotals& r : report.ranks) {
    out << "<tr" << (r.violations ? " class=\"viol\"" : "") << "><td class=\"n\">" << r.rank
        << "</td><td class=\"n\">" << r.processes << "</td><td class=\"n\">" << r.incomplete
        << "</td><td class=\"n\">" << r.calls << "</td><td class=\"n\">" << r.checked
        << "</td><td class=\"n\">" << r.violations << "</td></tr>\n";
  }
  out << "</table>\n";
}

std::string endedText(const ProcessInfo& p) {
  if (p.ended == "exit") return "exit";
  if (p.ended == "killed") return "killed (counts of its last snapshot)";
  if (p.ended.empty()) return "incomplete (no summary: counts from its events)";
  return p.ended + " (counts of the snapshot it wrote)";
}

void processesSection(std::ostream& out, const Report& report) {
  out << "<h2 id=\"processes\">Processes</h2>\n<table><tr><th>pid</th>"
      << (report.ranks.empty() ? "" : "<th>rank</th>")
      << "<th>ppid</th><th>ended</th><th>elapsed</th><th>started</th><th>command</th>"
         "<th>policy</th><th>events</th></tr>\n";
  for (const ProcessInfo& p : report.processes) {
    out << "<tr><td class=\"n\">" << p.pid << "</td>";
    if (!report.ranks.empty())
      out << "<td class=\"n\">" << (p.rank ? std::to_string(*p.rank) : "-") << "</td>";
    std::string elapsed = "-";
    if (p.elapsed_s) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.2f s", *p.elapsed_s);
      elapsed = buf;
    }
    out << "<td class=\"n\">" << p.ppid << "</td><td" << (p.incomplete ? " class=\"warn\"" : "")
        << ">" << esc(endedText(p)) << "</td><td class=\"n\">" << elapsed << "</td><td>"
        << esc(p.start_time) << "</td><td><code>"
        << esc(p.argv.empty() ? std::string("?") : joinArgv(p.argv, std::string::npos))
        << "</code></td><td>" << esc(p.policy) << "</td><td><code>" << esc(p.file)
        << "</code></td></tr>\n";
  }
  out << "</table>\n";
}

void errorsSection(std::ostream& out, const Report& report) {
  if (report.errors.empty() && report.malformed.empty()) return;
  out << "<h2 id=\"errors\">Errors</h2>\n";
  if (!report.errors.empty()) {
    out << "<h3>Reported by libfumi</h3>\n<table><tr><th>pid</th><th>where</th><th>location</th>"
           "<th>message</th></tr>\n";
    for (const ErrorEvent& e : report.errors) {
      out << "<tr><td class=\"n\">" << e.pid << "</td><td>" << esc(e.where) << "</td><td>"
          << esc(e.location) << "</td><td>" << esc(e.message) << "</td></tr>\n";
    }
    out << "</table>\n";
  }
  if (!report.malformed.empty()) {
    out << "<h3>Malformed lines skipped</h3>\n<pre>";
    for (const MalformedLine& m : report.malformed) out << esc(m.str()) << "\n";
    out << "</pre>\n";
  }
}

}  // namespace

std::string formatHtml(const Report& report, const TextOptions& options,
                       const std::string& source) {
  std::ostringstream out;
  const std::string title = "fumi report" + (source.empty() ? "" : " — " + source);
  out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>"
      << esc(title) << "</title>\n<style>" << kStyle << "</style>\n</head>\n<body>\n<nav>"
      << "<a href=\"#findings\">Findings</a><a href=\"#timeline\">Timeline</a>"
         "<a href=\"#metrics\">Metrics</a><a href=\"#ops\">Ops</a>"
      << (report.ranks.empty() ? "" : "<a href=\"#ranks\">Ranks</a>")
      << "<a href=\"#processes\">Processes</a>"
      << (report.errors.empty() && report.malformed.empty() ? "" : "<a href=\"#errors\">Errors</a>")
      << "</nav>\n<main>\n<h1>fumi report</h1>\n";
  if (!source.empty()) out << "<p class=\"src\">" << esc(source) << "</p>\n";
  cards(out, report);
  findings(out, report, options);
  timeline(out, report);
  metricDistributions(out, report);
  opsSection(out, report, options);
  ranksSection(out, report);
  processesSection(out, report);
  errorsSection(out, report);
  out << "</main>\n</body>\n</html>\n";
  return out.str();
}

}  // namespace fumi::report
