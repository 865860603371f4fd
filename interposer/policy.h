// policy.h — the YAML policy: what to check, how often, with which plugins, and what to do.
// Parsing produces a Policy plus diagnostics carrying file:line:col; compile.h turns a Policy
// into the per-op decisions used on the hot path. Keys are documented in docs/policy.md.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fumi/plugin.h"

namespace fumi {

struct SourceLoc {
  std::string file;
  int line = 0;  // 1-based; 0 when unknown
  int col = 0;
  std::string str() const;
};

struct Diagnostic {
  enum class Severity { kWarning, kError };
  Severity severity = Severity::kError;
  SourceLoc loc;
  std::string message;
  std::string str() const;  // "file:line:col: error: message"
};

struct SampleSpec {
  uint64_t first = 0;        // check the first N matching calls
  uint64_t every = 0;        // check every Nth matching call (index % N == 0)
  double probability = 0.0;  // check with this probability, decided by hash(seed, index)
  uint64_t seed = 0;
  uint64_t max_checks = std::numeric_limits<uint64_t>::max();
};

struct CheckSpec {
  std::string plugin;
  double tolerance = std::numeric_limits<double>::quiet_NaN();
  // The check's own `sample:`, applied to the calls its rule picked, numbered per op (docs/
  // policy.md, "Sampling per check"); without one it runs on every call the rule picks.
  bool has_sample = false;
  SampleSpec sample;
  std::vector<std::pair<std::string, std::string>> params;
  SourceLoc loc;
};

enum class Action { kLog, kDump, kAbort };
enum class OnError { kContinue, kAbort };

struct MatchSpec {
  std::vector<std::string> ops = {"*"};  // globs over op names (fnmatch); any may match
  std::string backend = "*";  // glob over backend names
  std::vector<fumi_dtype> dtypes;  // empty: any
  int64_t min_size = 0;       // problem size (GEMM: m*n*k; framework ops: see docs/policy.md)
  int64_t max_size = std::numeric_limits<int64_t>::max();
  std::vector<std::string> phases;  // empty: any; else "forward" / "backward" / "optimizer"
  std::string device = "*";         // glob over the call's device ("cpu", "cuda:0")
  // empty: any; else the autocast dtypes whose regions match, FUMI_DTYPE_UNKNOWN for "none"
  // (outside any autocast region)
  std::vector<fumi_dtype> autocast;
  // empty: any; else [first, last] ranges of the ranks whose processes match (a process with
  // no launcher rank is rank 0)
  std::vector<std::pair<int64_t, int64_t>> ranks;
  // empty: any; else the call's engine must carry one of these numerical notes
  // (engine_notes.h; "none": a call without notes)
  std::vector<std::string> notes;
};

// Whether `rank` is one of the match's ranks (any rank when it names none).
inline bool rankSelected(const MatchSpec& m, int64_t rank) {
  if (m.ranks.empty()) return true;
  for (const auto& [lo, hi] : m.ranks)
    if (rank >= lo && rank <= hi) return true;
  return false;
}

struct Rule {
  std::string name;  // `name:` or "rule[<index>]"
  MatchSpec match;
  SampleSpec sample;
  std::vector<CheckSpec> checks;
  Action action = Action::kLog;
  SourceLoc loc;
};

struct ReportSettings {
  std::string dir = "fumi-out";
  int stack_depth = 32;
  std::string log_level = "info";
  bool all_checks = false;  // also write a `check` event for checks that pass
  double snapshot_every = 60;  // seconds between `snapshot` events (0: none but the signal/exec ones)
  std::string prometheus;      // textfile-collector file rewritten at each snapshot ("": none)
  int log_violations = 10;     // text-log lines per op and check.metric (then events file only)
  int violation_events = 1000;  // violation events per op and check.metric (then counts only)
};

// Tolerances per precision (indexed by fumi_dtype) for the checks of one kind of finding;
// NaN: the check's own default.
using KindTolerances = std::array<double, FUMI_TOLERANCE_SLOTS>;
inline KindTolerances unsetTolerances() {
  KindTolerances t;
  t.fill(NAN);
  return t;
}

// Sensitivity bounds of every policy that sets none (`tolerances: { sensitivity: fumi }`: the
// checks' own default, FuMi's error table): a perturb ratio above them is raised. Calibrated on
// healthy public training programs (docs/policy.md, "The sensitivity bounds"): FuMi's error
// table (f32 1e-4, bf16 1e-2) flagged nearly every healthy f32 attention or bf16 GEMM.
inline KindTolerances defaultSensitivity() {
  KindTolerances t = unsetTolerances();
  t[FUMI_DTYPE_F64] = 2e-11;
  t[FUMI_DTYPE_F32] = 0.1;
  t[FUMI_DTYPE_TF32] = 0.08;
  t[FUMI_DTYPE_F16] = 1.0;
  t[FUMI_DTYPE_BF16] = 1.0;
  return t;
}

// Cancellation bounds of every policy that sets none (`tolerances: { cancellation: ... }`): a
// result an error check found off by more than its tolerance only because its inputs cancel
// (the op kept what its precision allows against the magnitudes of its terms) is data, and a
// violation only where its relative error passes the bound: 0.1, the result has at most its
// leading digit left (docs/policy.md, "Cancellation in the data").
inline KindTolerances defaultCancellationBounds() {
  KindTolerances t;
  t.fill(0.1);
  return t;
}

// `nan_origin:` — the sentinel-and-search for where NaN/Inf first appear (nan_search.h).
struct NanOriginSettings {
  bool enabled = true;
  int64_t steps = 2;          // optimizer steps searched past the one the search began in
  int64_t max_ops = 1000000;  // ops scanned per search at most
  int64_t max_searches = 3;   // per process
  // Whether the torch adapter keeps the ops it ran for a sentinel to look back over
  // (nan_search.h): always, never, or while the job's op rate keeps its cost small.
  enum class LookBack { kOff = 0, kOn = 1, kAuto = 2 };
  LookBack look_back = LookBack::kAuto;
};

// `loss_scaling:` — NaN/Inf of the backward pass that a loss scaler handles (loss_scaling.h).
struct LossScalingSettings {
  bool enabled = true;
  int64_t max_consecutive = 30;  // handled overflows in a row before the scale counts as collapsing
};

struct Policy {
  int version = 1;
  std::string source;  // file path or "<embedded default>"
  std::vector<Rule> rules;
  ReportSettings report;
  std::vector<std::string> plugin_dirs;
  uint64_t scratch_budget = 256ull << 20;  // bytes of scratch per check
  // Fraction of the process's wall time that checks may take (0: unlimited); see CheckBudget.
  double overhead_budget = 0;
  OnError on_error = OnError::kContinue;
  NanOriginSettings nan_origin;
  LossScalingSettings loss_scaling;
  // `malloc_thresholds: pin|leave`: in PyTorch processes, fix glibc's mmap and trim thresholds
  // when the adapter attaches (adapter.cpp): its observer otherwise makes glibc trim and
  // re-fault the heap top every step on op-heavy models.
  bool pin_malloc_thresholds = true;
  // `autocast: { bound: X }`: the precision cost of an op under autocast (autocast.normwise)
  // above X is a violation; NaN: measured and summarised only.
  double autocast_bound = NAN;
  // `underflow: { bound: X }`: the fraction of an f16/bf16 backward output flushed below its
  // smallest normal (gradient.underflow) above X is a violation; NaN: measured only.
  double underflow_bound = NAN;
  // `tolerances:` by fumi_kind (error, sensitivity).
  std::array<KindTolerances, 2> kind_tolerances = {unsetTolerances(), defaultSensitivity()};
  // `tolerances: { error: ... }` for error tolerances no number sets: `fumi` FuMi's dtype table,
  // `precision` derived per call from its precision and reduction length, `max` (the default)
  // the larger of the two.
  fumi_tolerance_model error_model = FUMI_TOLERANCE_MAX;
  // `tolerances: { cancellation: ... }`: per precision, the relative error above which a result
  // whose inputs cancel is a violation (of kind cancellation) although the op computed it as
  // well as its precision allows.
  KindTolerances cancellation_bounds = defaultCancellationBounds();
};

struct PolicyResult {
  std::optional<Policy> policy;  // empty when an error was found
  std::vector<Diagnostic> diagnostics;
  bool ok() const { return policy.has_value(); }
};

PolicyResult parsePolicyText(const std::string& text, const std::string& source_name);
PolicyResult parsePolicyFile(const std::string& path);
// The default policy, embedded at build time from config/default_policy.yaml.
const char* embeddedDefaultPolicy();
// The policy named by FUMI_POLICY, or the embedded default when unset.
PolicyResult loadConfiguredPolicy();

// Names of the ops every built-in hook table knows; a rule whose op glob matches none of them
// (and does not name a framework op such as "aten::*") gets a warning.
const std::vector<std::string>& knownOpNames();

}  // namespace fumi
