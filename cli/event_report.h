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

// One point of a process's timeline: its totals as of a `snapshot` or its `summary`.
struct TimelinePoint {
  double elapsed_s = 0;  // seconds since the process started (the event's elapsed_s)
  uint64_t calls = 0;
  uint64_t checked = 0;
  uint64_t skipped = 0;
  uint64_t violations = 0;
  std::string reason;  // the snapshot's reason ("periodic", "SIGTERM", "exec"), "exit": summary
};

// One process as seen in the event files: from a `start` event (or the first event of a pid)
// up to its `summary`. A process with no summary (killed, or exec'd away) is `incomplete`: its
// counts are derived from its violation/check events and are lower bounds.
struct ProcessInfo {
  int64_t pid = 0;
  std::optional<int64_t> rank;  // the launcher's rank (events' "rank"), when there was one
  int64_t ppid = 0;
  std::vector<std::string> argv;
  std::string policy;
  std::string fumi_version;
  std::string start_time;
  std::string file;
  bool has_start = false;
  bool incomplete = true;  // neither a summary nor a snapshot taken as the process ended
  // How the process image ended: "exit" (its summary), "exec", "SIGTERM"/"SIGINT"/"SIGHUP"
  // (the snapshot fumi wrote on the signal), "killed" (only periodic snapshots: its counts are
  // those of the last one), "" (nothing: counts derived from its check/violation events).
  std::string ended;
  std::optional<double> elapsed_s;
  // Its totals at each snapshot and at its summary, in the order written (files without
  // `totals` give none).
  std::vector<TimelinePoint> timeline;
};

// One rank's share of a distributed job (processes with that launcher rank).
struct RankTotals {
  int64_t rank = 0;
  size_t processes = 0;
  size_t incomplete = 0;
  uint64_t calls = 0;
  uint64_t checked = 0;
  uint64_t violations = 0;
};

// The two kinds of finding (docs/policy.md): an error means an op's results are off by more than
// their tolerance; a sensitivity is how far its outputs move when its inputs move by their
// rounding (data; an alarm only above a high bound).
inline constexpr const char* kKindError = "error";
inline constexpr const char* kKindSensitivity = "sensitivity";
inline constexpr const char* kKindPrecisionCost = "precision_cost";
inline constexpr const char* kKindCancellation = "cancellation";

// The kind of a finding of `check` when its event or metric does not say (files written before
// kinds existed): perturb measures sensitivity, every other check an error.
std::string defaultKind(const std::string& check);

// The violation chosen to illustrate an op: the earliest by event time (processing order breaks
// ties and orders events without a time).
struct ViolationInfo {
  int64_t pid = 0;
  std::optional<uint64_t> call_index;
  std::string check;
  std::string kind;  // kKindError or kKindSensitivity (defaultKind(check) when not written)
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
  std::vector<std::string> python_stack;  // innermost first, the program's own frames first
  bool origin = false;      // a nan_inf violation where NaN/Inf first appeared (the NaN origin)
  // A nan_inf violation that is an origin's repeat or spread: how ("made in the gradient of the
  // NaN/Inf origin aten::log #1"); empty otherwise.
  std::string spread_of;
  // origin only: {"op", "call_index"} whose output started the search, and its "python_stack"
  // where the origin was found looking back
  nlohmann::json sentinel;
  // The autograd node a backward-pass call ran in ("LogBackward0": the innermost
  // "autograd::engine::evaluate_function: ..." of its `context`), empty otherwise.
  std::string autograd_node;
  // Of the backward pass (a NaN origin, looked back or found at its call, or a check's
  // violation): the forward call whose node that is ("aten::log #1"), whose line its
  // python_stack begins with; empty otherwise.
  std::string forward_call;
  // Found looking back: its held input lay outside its domain (a mean of nothing, a sqrt of a
  // negative): why it was named among calls of its op.
  bool out_of_domain = false;
  // Found looking back: the values' holder held +Inf, which some makers (a log, a root) never
  // make: the likeliest makers are ranked knowing it.
  bool positive_inf = false;
  // Found looking back: it divided by an exact 0 (a one-element divisor of 0, a sqrt's gradient
  // at 0): why it was named among the calls followed.
  bool by_zero = false;
  std::string phase;  // the event's: "forward", "backward", "optimizer"; empty when absent
  // In the backward pass: an autograd node's, or found looking back in that phase (no context).
  bool backward() const { return !autograd_node.empty() || phase == "backward"; }
  bool looked_back = false;          // origin found looking back from the sentinel (no stacks)
  std::vector<std::string> through;  // looked back: the ops it went through ("aten::sub #2")
  // For each of `through`: the fewest ops between it and this call (1: an input's maker); empty
  // in event files written before it was recorded.
  std::vector<uint64_t> through_hops;
  std::vector<std::string> through_phases;  // and the phase each ran in; empty where not recorded
  // looked back: the call holding the values, where this one (an op it got them through, its
  // results gone) is their likeliest maker ("aten::cat #13"), and that call's phase
  std::string held_by, held_by_phase;
  // looked back: the call whose stacks `stack` and `python_stack` are (a `nan_origin_stack`
  // event: the op made them again while the search went on), when there was one
  std::optional<uint64_t> stack_call_index;
  // origin only: the optimizer steps the process had begun when it was reported
  std::optional<uint64_t> optimizer_step;
  std::string file;
  int line = 0;
};

// One `check.metric` of an op, from the summaries' `metrics` (absent in older files).
struct MetricSummary {
  std::string kind;
  uint64_t count = 0;       // summed over processes
  uint64_t violations = 0;  // summed over processes
  // Approximate quantiles of the process with the most values (quantiles do not add up).
  std::optional<double> median;
  std::optional<double> p99;
  std::optional<double> max;  // over processes
  // The largest value / tolerance over the calls (the summary's of_tolerance), over processes.
  std::optional<double> of_tolerance;
  // Verdicts not raised that left outputs out as rounding noise (the summary's noise), summed.
  uint64_t noise = 0;
  // The largest figure of those that left every output out (noise_max), over processes.
  std::optional<double> noise_max;
};

// The violations of one kind of an op, from its violation events.
struct KindViolations {
  uint64_t violations = 0;
  std::optional<ViolationInfo> first;  // earliest, as first_violation
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
  std::map<std::string, KindViolations> by_kind;  // kKindError / kKindSensitivity -> violations
  std::map<std::string, MetricSummary> metrics;   // "check.metric" -> distribution
  uint64_t nonfinite_propagated = 0;  // calls whose NaN/Inf came with their inputs (counted)
  uint64_t handled_overflow = 0;      // backward-pass NaN/Inf a loss scaler handled (counted)
  // "check reason" -> calls that check declined (the summary's ops[].checks skipped_<reason>:
  // "checksum unsupported", "highprec no_scratch", ...)
  std::map<std::string, uint64_t> declined;
  // fumi's reason -> sampled calls skipped before any check (the summary's ops[].not_checked:
  // the overhead budget, an adapter's reason such as sparse tensors)
  std::map<std::string, uint64_t> not_checked;
  bool incomplete = false;            // some counts come from a process without a summary
  std::map<int64_t, uint64_t> rank_violations;  // launcher rank -> violations (ranked processes)
  // The rank with the most violations of this op (the lowest such rank on ties); none when no
  // ranked process raised one.
  std::optional<int64_t> worstRank() const;
};

// A NaN/Inf origin: the op whose output first held NaN/Inf made from finite inputs.
struct NanOrigin {
  std::string op;
  std::string backend;
  ViolationInfo violation;  // origin == true
  // A backward-pass origin in the optimizer step of an earlier forward-pass one of its process
  // (log(0) in the forward pass, then its gradient's division by 0): that origin, "aten::log
  // #46"; empty otherwise.
  std::string gradient_of;
  // Otherwise, a backward-pass origin the search found in the step whose forward pass its
  // sentinel ran in: the values the sentinel saw were made before it, by an op not found (not
  // kept at the thread's op rate), and this one is likely their gradient's (batch 20).
  bool after_forward_sentinel = false;
  // NaN made from Inf (`nan_from_inf`) in the optimizer step and process of an origin that made
  // Inf from finite values, not later in the step's passes: that origin ("aten::div_.Tensor
  // #2"), listed before this one, whose Inf this likely is (MoCo's `logits /= T` with T = 0, its
  // log_softmax's NaN reported first: batch 23); empty otherwise.
  std::string inf_of;
};

// A `nan_search` event: how a search for the NaN origin ended ("found" or "not_found").
struct NanSearch {
  int64_t pid = 0;
  std::string result;
  std::string message;
  nlohmann::json sentinel;  // {"op", "call_index"}, null when absent
  std::string after_origin;  // an origin the process reported before it ("aten::div.Tensor #3")
  std::string file;
  int line = 0;
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
  std::vector<NanOrigin> nan_origins;  // in the order read
  std::vector<NanSearch> nan_searches;
  std::vector<ErrorEvent> errors;
  std::vector<MalformedLine> malformed;
  std::vector<RankTotals> ranks;       // by rank; empty when no process had a launcher rank
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

// "events-123.jsonl" or "events-rank2-123.jsonl" -> 123; nullopt for any other name. Accepts a
// path.
std::optional<int64_t> pidFromFileName(const std::string& path);
// "events-rank2-123.jsonl" -> 2; nullopt for a name without a rank.
std::optional<int64_t> rankFromFileName(const std::string& path);

// The key of a metric in OpStats::worst: "check.metric" ("highprec.normwise_rel").
std::string metricKey(const std::string& check, const std::string& metric);

// Whether metric value a is worse than b: NaN is worse than anything, else larger is worse.
bool worse(double a, double b);

// The check of a metric key: "perturb.fumi_ratio" -> "perturb".
std::string checkOfKey(const std::string& key);

// Renderings (event_report_format.cpp).
nlohmann::json toJson(const Report& report);
struct TextOptions {
  size_t stack_frames = 5;    // frames shown per violation (text; the HTML shows them all)
  size_t most_sensitive = 5;  // ops in the "most sensitive" list
  bool all = false;           // list the ops that were only counted too (`--all`)
};
// The `fumi report` text: a header line; the findings (NaN origins, violations by kind with
// their first stack, the most sensitive ops); the table of checked ops and one line for the
// ops only counted; processes, error events, malformed lines.
std::string formatText(const Report& report, const TextOptions& options = {});
// The `fumi report --format html` page: one self-contained HTML document (inline CSS and SVG,
// no script, nothing fetched) with the header totals, the findings with every op's first
// violation of each kind and its stacks, a timeline of checks and violations, the metric
// distributions, the ops, ranks and processes (event_report_html.cpp). `source` names the
// directory reported in the title.
std::string formatHtml(const Report& report, const TextOptions& options = {},
                       const std::string& source = "");
// The few lines `fumi run` prints after the child ended (top `top_ops` ops by violations).
std::string formatRunSummary(const Report& report, const std::string& dir, size_t top_ops = 5);
// The frame of a Python stack to show a person: the first outside torch's and fumi's own
// packages (the first frame when all are); empty for an empty stack.
std::string userFrame(const std::vector<std::string>& python_stack);
// A metric value as the text renderings show it ("0.5", "1.2e-07", "nan", "inf").
std::string formatValue(double v);

}  // namespace fumi::report
