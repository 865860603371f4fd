// event_report.h — reading libfumi's JSON Lines event files and aggregating them per (op, backend).
// Pure functions on file contents (or a directory): no process is run, nothing is written.
// The event schema and the aggregation rules are documented in docs/report-schema.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace fumi::report {

// One event file: its path (used in messages) and its whole contents.
struct EventFile {
  std::string path;
  std::string contents;
};

// A line that could not be used: not JSON, not an object, no "event", or a field of the wrong
// type. The line is skipped; everything else in the file is still used.
struct MalformedLine {
  std::string file;
  int line = 0;  // 1-based
  std::string message;
  std::string str() const;  // "file:line: message"
};

// An `error` event written by libfumi (a plugin failure, a bad policy entry, ...).
struct ErrorEvent {
  int64_t pid = 0;
  std::string where;
  std::string location;
  std::string message;
  std::string file;  // event file and line it was read from
  int line = 0;
};

// One process as seen in the event files: from a `start` event (or the first event of a pid)
// up to its `summary`. A process with no summary (killed, or exec'd away) is `incomplete`: its
// counts are derived from its violation/check events and are lower bounds.
struct ProcessInfo {
  int64_t pid = 0;
  int64_t ppid = 0;
  std::vector<std::string> argv;
  std::string policy;
  std::string fumi_version;
  std::string start_time;
  std::string file;
  bool has_start = false;
  bool incomplete = true;  // no summary seen
  std::optional<double> elapsed_s;
};

// The violation chosen to illustrate an op: the earliest by event time (processing order breaks
// ties and orders events without a time).
struct ViolationInfo {
  int64_t pid = 0;
  std::optional<uint64_t> call_index;
  std::string check;
  std::string metric;
  std::optional<double> value;
  std::optional<double> tolerance;
  std::string rule;
  std::string dtype;
  std::string detail;
  std::string time;
  nlohmann::json shape;  // as written (object of name -> dims), null when absent
  nlohmann::json extra;  // as written, null when absent
  nlohmann::json kernels;  // as written (array of {name, duration_ns}), null when absent
  std::vector<std::string> stack;
  std::string file;
  int line = 0;
};

struct OpStats {
  std::string op;
  std::string backend;
  uint64_t calls = 0;
  uint64_t checked = 0;
  uint64_t skipped = 0;
  uint64_t violations = 0;
  // "check.metric" -> worst (largest) value seen; NaN counts as worse than any number.
  std::map<std::string, double> worst;
  std::optional<ViolationInfo> first_violation;
  bool incomplete = false;  // some counts come from a process without a summary
};

struct Totals {
  uint64_t calls = 0;
  uint64_t checked = 0;
  uint64_t skipped = 0;
  uint64_t violations = 0;
};

struct Report {
  std::vector<ProcessInfo> processes;  // files in pid order, then order of appearance
  std::vector<OpStats> ops;            // most violations first, then most calls, then name
  std::vector<ErrorEvent> errors;
  std::vector<MalformedLine> malformed;
  Totals totals() const;
  size_t incompleteCount() const;
};

// Aggregate the events of `files` (in the given order; readDirectory sorts them by pid).
Report aggregate(const std::vector<EventFile>& files);

// Paths of DIR/events-*.jsonl (regular files), sorted by the pid in the name, then by name.
// Empty when DIR does not exist or holds none.
std::vector<std::string> findEventFiles(const std::string& dir);

// Read every file of findEventFiles(dir) and aggregate them. A file that cannot be read is
// reported in `malformed` with line 0. `nfiles` (optional) receives the number of event files.
Report readDirectory(const std::string& dir, size_t* nfiles = nullptr);

// "events-123.jsonl" -> 123; nullopt for any other name. Accepts a path.
std::optional<int64_t> pidFromFileName(const std::string& path);

// The key of a metric in OpStats::worst: "check.metric" ("highprec.normwise_rel").
std::string metricKey(const std::string& check, const std::string& metric);

// Renderings (event_report_format.cpp).
nlohmann::json toJson(const Report& report);
// The `fumi report` text: processes, an aligned table of ops, first violations with up to
// `stack_frames` frames each, error events, malformed lines.
std::string formatText(const Report& report, size_t stack_frames = 5);
// The few lines `fumi run` prints after the child ended (top `top_ops` ops by violations).
std::string formatRunSummary(const Report& report, const std::string& dir, size_t top_ops = 5);
// A metric value as the text renderings show it ("0.5", "1.2e-07", "nan", "inf").
std::string formatValue(double v);

}  // namespace fumi::report
