// policy.cpp — YAML policy parser. Every problem becomes a Diagnostic with file:line:col;
// unknown keys warn (a newer policy still runs on an older fumi), bad values are errors.
// The key reference is docs/policy.md; keep the two in step.
#include "policy.h"

#include <fnmatch.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "engine_notes.h"
#include "fumi/dtype.hpp"
#include "settings.h"

namespace fumi {

std::string SourceLoc::str() const {
  std::ostringstream s;
  s << file;
  if (line > 0) s << ":" << line << ":" << col;
  return s.str();
}

std::string Diagnostic::str() const {
  return loc.str() + (severity == Severity::kError ? ": error: " : ": warning: ") + message;
}

namespace {

class Parser {
 public:
  explicit Parser(std::string file) : file_(std::move(file)) {}

  SourceLoc loc(const YAML::Node& n) const {
    const YAML::Mark m = n.Mark();
    if (m.is_null()) return {file_, 0, 0};
    return {file_, m.line + 1, m.column + 1};
  }
  void error(const YAML::Node& n, const std::string& msg) { add(Diagnostic::Severity::kError, loc(n), msg); }
  void warn(const YAML::Node& n, const std::string& msg) { add(Diagnostic::Severity::kWarning, loc(n), msg); }
  void add(Diagnostic::Severity s, SourceLoc l, const std::string& msg) {
    diags_.push_back({s, std::move(l), msg});
  }
  bool failed() const {
    for (const auto& d : diags_)
      if (d.severity == Diagnostic::Severity::kError) return true;
    return false;
  }
  std::vector<Diagnostic>& diagnostics() { return diags_; }

  // Iterate a mapping, warning about keys outside `known`.
  template <class F>
  bool forMap(const YAML::Node& n, const char* what, std::initializer_list<const char*> known,
              F&& f) {
    if (!n.IsMap()) {
      error(n, std::string(what) + " must be a mapping");
      return false;
    }
    for (auto it = n.begin(); it != n.end(); ++it) {
      const std::string key = it->first.Scalar();
      bool ok = false;
      for (const char* k : known) ok = ok || key == k;
      if (!ok) {
        std::string list;
        for (const char* k : known) list += std::string(list.empty() ? "" : ", ") + k;
        warn(it->first, "unknown key '" + key + "' in " + what + " (known: " + list + "); ignored");
        continue;
      }
      f(key, it->second);
    }
    return true;
  }

  bool scalar(const YAML::Node& n, const std::string& key, std::string* out) {
    if (!n.IsScalar()) {
      error(n, "'" + key + "' must be a scalar");
      return false;
    }
    *out = n.Scalar();
    return true;
  }

  bool number(const YAML::Node& n, const std::string& key, double* out) {
    std::string s;
    if (!scalar(n, key, &s)) return false;
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || std::isnan(v)) {
      error(n, "'" + key + "' must be a number, got '" + s + "'");
      return false;
    }
    *out = v;
    return true;
  }

  bool integer(const YAML::Node& n, const std::string& key, int64_t min, int64_t* out) {
    std::string s;
    if (!scalar(n, key, &s)) return false;
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || errno == ERANGE) {
      error(n, "'" + key + "' must be an integer, got '" + s + "'");
      return false;
    }
    if (v < min) {
      error(n, "'" + key + "' must be >= " + std::to_string(min) + ", got " + s);
      return false;
    }
    *out = v;
    return true;
  }

  bool boolean(const YAML::Node& n, const std::string& key, bool* out) {
    std::string s;
    if (!scalar(n, key, &s)) return false;
    if (s == "true" || s == "yes" || s == "on") *out = true;
    else if (s == "false" || s == "no" || s == "off") *out = false;
    else {
      error(n, "'" + key + "' must be true or false, got '" + s + "'");
      return false;
    }
    return true;
  }

  // Sizes: an integer number of bytes, or with a unit: 512KiB, 64MiB, 2GiB (also KB/MB/GB).
  bool bytes(const YAML::Node& n, const std::string& key, uint64_t* out) {
    std::string s;
    if (!scalar(n, key, &s)) return false;
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    std::string unit(end);
    while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
    double mult = 0;
    if (unit.empty() || unit == "B") mult = 1;
    else if (unit == "KiB" || unit == "KB" || unit == "K") mult = 1024.0;
    else if (unit == "MiB" || unit == "MB" || unit == "M") mult = 1024.0 * 1024;
    else if (unit == "GiB" || unit == "GB" || unit == "G") mult = 1024.0 * 1024 * 1024;
    if (end == s.c_str() || mult == 0 || !(v >= 0)) {
      error(n, "'" + key + "' must be a size such as 268435456, 64MiB or 1GiB, got '" + s + "'");
      return false;
    }
    *out = static_cast<uint64_t>(v * mult);
    return true;
  }

  template <class E>
  bool choice(const YAML::Node& n, const std::string& key,
              std::initializer_list<std::pair<const char*, E>> options, E* out) {
    std::string s;
    if (!scalar(n, key, &s)) return false;
    std::string list;
    for (const auto& [name, value] : options) {
      if (s == name) {
        *out = value;
        return true;
      }
      list += std::string(list.empty() ? "" : ", ") + name;
    }
    error(n, "'" + key + "' must be one of " + list + ", got '" + s + "'");
    return false;
  }

  void sample(const YAML::Node& n, SampleSpec* s) {
    forMap(n, "sample", {"first", "every", "probability", "seed", "max_checks"},
           [&](const std::string& key, const YAML::Node& v) {
             int64_t i = 0;
             if (key == "first" && integer(v, key, 0, &i)) s->first = static_cast<uint64_t>(i);
             if (key == "every" && integer(v, key, 0, &i)) s->every = static_cast<uint64_t>(i);
             if (key == "seed" && integer(v, key, 0, &i)) s->seed = static_cast<uint64_t>(i);
             if (key == "max_checks" && integer(v, key, 0, &i))
               s->max_checks = static_cast<uint64_t>(i);
             if (key == "probability") {
               double p = 0;
               if (number(v, key, &p)) {
                 if (p < 0 || p > 1) error(v, "'probability' must be within [0, 1]");
                 else s->probability = p;
               }
             }
           });
    if (n.IsMap() && s->first == 0 && s->every == 0 && s->probability == 0)
      warn(n, "sample selects no call (give first, every or probability): nothing will be checked");
  }

  // A key that takes one value or a list of them.
  template <class F>
  static void oneOrMany(const YAML::Node& n, F&& one) {
    if (n.IsSequence()) {
      for (const auto& v : n) one(v);
    } else {
      one(n);
    }
  }

  // A dtype named by the scalar `v` ("f32"); an error when it names none.
  bool dtypeOf(const YAML::Node& v, const std::string& s, fumi_dtype* out) {
    *out = dtypeNamed(s.c_str());
    if (*out != FUMI_DTYPE_UNKNOWN) return true;
    error(v, "unknown dtype '" + s + "' (known: f64, f32, f16, bf16, tf32)");
    return false;
  }

  void dtypes(const YAML::Node& n, std::vector<fumi_dtype>* out) {
    auto one = [&](const YAML::Node& v) {
      std::string s;
      fumi_dtype d = FUMI_DTYPE_UNKNOWN;
      if (scalar(v, "dtype", &s) && dtypeOf(v, s, &d)) out->push_back(d);
    };
    oneOrMany(n, one);
  }

  // `<section>: { bound: X }`, X in [0, max] (autocast's precision cost, underflow's fraction).
  void bound(const YAML::Node& n, const std::string& section, double max, double* out) {
    forMap(n, section.c_str(), {"bound"}, [&](const std::string& key, const YAML::Node& v) {
      double b = 0;
      if (key != "bound" || !number(v, key, &b)) return;
      if (b < 0 || b > max)
        error(v, "'bound' must be >= 0" + std::string(std::isinf(max) ? "" : " and <= 1"));
      else
        *out = b;
    });
  }

  // `nan_origin: { enabled, steps, max_ops, max_searches, look_back }`, or `nan_origin: false`.
  void nanOrigin(const YAML::Node& n, NanOriginSettings* o) {
    if (n.IsScalar()) {
      boolean(n, "nan_origin", &o->enabled);
      return;
    }
    using LookBack = NanOriginSettings::LookBack;
    forMap(n, "nan_origin", {"enabled", "steps", "max_ops", "max_searches", "look_back"},
           [&](const std::string& key, const YAML::Node& v) {
             if (key == "enabled") boolean(v, key, &o->enabled);
             if (key == "steps") integer(v, key, 0, &o->steps);
             if (key == "max_ops") integer(v, key, 1, &o->max_ops);
             if (key == "max_searches") integer(v, key, 0, &o->max_searches);
             bool on = false;
             if (key == "look_back" && v.IsScalar() && v.Scalar() == "auto")
               o->look_back = LookBack::kAuto;
             else if (key == "look_back" && boolean(v, key + " (or auto)", &on))
               o->look_back = on ? LookBack::kOn : LookBack::kOff;
           });
  }

  // `loss_scaling: { enabled, max_consecutive }`, or `loss_scaling: false`.
  void lossScaling(const YAML::Node& n, LossScalingSettings* o) {
    if (n.IsScalar()) {
      boolean(n, "loss_scaling", &o->enabled);
      return;
    }
    forMap(n, "loss_scaling", {"enabled", "max_consecutive"},
           [&](const std::string& key, const YAML::Node& v) {
             if (key == "enabled") boolean(v, key, &o->enabled);
             if (key == "max_consecutive") integer(v, key, 1, &o->max_consecutive);
           });
  }

  // `tolerances: { error: T, sensitivity: T, cancellation: T }`, T a number (every precision),
  // `fumi` (error, sensitivity: each check's own default, FuMi's dtype table), `precision`
  // (error only: derived per call from its precision and shape), `max` (error only, the
  // default: the larger of the two where the shape is known) or a map of dtype -> number
  // (sensitivity, cancellation: over their defaults).
  void tolerances(const YAML::Node& n, Policy* p) {
    forMap(n, "tolerances", {"error", "sensitivity", "cancellation"},
           [&](const std::string& key, const YAML::Node& v) {
             const bool error_kind = key == "error";
             const bool cancellation = key == "cancellation";
             KindTolerances& t =
                 cancellation ? p->cancellation_bounds
                              : p->kind_tolerances[error_kind ? FUMI_KIND_ERROR
                                                              : FUMI_KIND_SENSITIVITY];
             double x = 0;
             const std::string expected = "'" + key + "' must be a number" +
                                          (cancellation ? "" : ", 'fumi'") +
                                          (error_kind ? ", 'precision', 'max'" : "") +
                                          " or a map of dtype to number";
             if (v.IsScalar() && v.Scalar() == "fumi" && !cancellation) {
               if (error_kind) p->error_model = FUMI_TOLERANCE_TABLE;
               else t = unsetTolerances();
               return;
             }
             if (v.IsScalar() && (v.Scalar() == "precision" || v.Scalar() == "max")) {
               if (error_kind)
                 p->error_model =
                     v.Scalar() == "max" ? FUMI_TOLERANCE_MAX : FUMI_TOLERANCE_PRECISION;
               else error(v, "'" + v.Scalar() + "' derives error tolerances only; '" + key +
                             "' takes a number" + (cancellation ? "" : ", 'fumi'") +
                             " or a map of dtype to number");
               return;
             }
             if (v.IsScalar()) {
               char* end = nullptr;
               const std::string& text = v.Scalar();
               std::strtod(text.c_str(), &end);
               if (text.empty() || *end != '\0') {  // a misspelt name, not a bad number
                 error(v, expected + ", got '" + text + "'");
                 return;
               }
               if (!number(v, key, &x)) return;
               if (x < 0) error(v, "tolerance must be >= 0");
               else t.fill(x);
               return;
             }
             if (!v.IsMap()) {
               error(v, expected);
               return;
             }
             for (auto it = v.begin(); it != v.end(); ++it) {
               std::string name;
               fumi_dtype d = FUMI_DTYPE_UNKNOWN;
               if (!scalar(it->first, "dtype", &name) || !dtypeOf(it->first, name, &d)) continue;
               if (!number(it->second, name, &x)) continue;
               if (x < 0) error(it->second, "tolerance must be >= 0");
               else t[static_cast<size_t>(d)] = x;
             }
           });
  }

  void phases(const YAML::Node& n, std::vector<std::string>* out) {
    auto one = [&](const YAML::Node& v) {
      std::string s;
      if (!scalar(v, "phase", &s)) return;
      if (s == "forward" || s == "backward" || s == "optimizer")
        out->push_back(s);
      else
        error(v, "unknown phase '" + s + "' (known: forward, backward, optimizer)");
    };
    oneOrMany(n, one);
  }

  void match(const YAML::Node& n, MatchSpec* m) {
    forMap(n, "match",
           {"op", "backend", "dtype", "min_size", "max_size", "phase", "device", "autocast",
            "rank", "note"},
           [&](const std::string& key, const YAML::Node& v) {
             if (key == "op") opGlobs(v, &m->ops);
             if (key == "backend") scalar(v, key, &m->backend);
             if (key == "dtype") dtypes(v, &m->dtypes);
             if (key == "phase") phases(v, &m->phases);
             if (key == "device") scalar(v, key, &m->device);
             if (key == "autocast")
               oneOrMany(v, [&](const YAML::Node& a) {
                 std::string name;
                 fumi_dtype d = FUMI_DTYPE_UNKNOWN;
                 if (!scalar(a, "autocast", &name)) return;
                 if (name == "none" || dtypeOf(a, name, &d)) m->autocast.push_back(d);
               });
             if (key == "rank") ranks(v, &m->ranks);
             if (key == "note")
               oneOrMany(v, [&](const YAML::Node& a) {
                 std::string name;
                 if (!scalar(a, "note", &name)) return;
                 if (name == "none" || isEngineNote(name.c_str()))
                   m->notes.push_back(name);
                 else
                   error(a, "unknown note '" + name + "' (known: " + engineNoteList() + ", none)");
               });
             if (key == "min_size") integer(v, key, 0, &m->min_size);
             if (key == "max_size") integer(v, key, 0, &m->max_size);
           });
    if (m->min_size > m->max_size) error(n, "'min_size' is larger than 'max_size'");
  }

  // `rank: 0`, `rank: [0, 8, "16-31"]`: single ranks and inclusive ranges.
  void ranks(const YAML::Node& n, std::vector<std::pair<int64_t, int64_t>>* out) {
    oneOrMany(n, [&](const YAML::Node& v) {
      std::string s;
      if (!scalar(v, "rank", &s)) return;
      const size_t dash = s.find('-', 1);
      auto parse = [&](const std::string& t, int64_t* r) {
        char* end = nullptr;
        errno = 0;
        const long long x = std::strtoll(t.c_str(), &end, 10);
        if (t.empty() || *end != '\0' || errno != 0 || x < 0) {
          error(v, "rank '" + s + "' is not a rank (0, 1, ...) or a range such as '8-15'");
          return false;
        }
        *r = x;
        return true;
      };
      int64_t lo = 0, hi = 0;
      if (dash == std::string::npos) {
        if (parse(s, &lo)) out->emplace_back(lo, lo);
      } else if (parse(s.substr(0, dash), &lo) && parse(s.substr(dash + 1), &hi)) {
        if (lo > hi) error(v, "rank range '" + s + "' is empty");
        else out->emplace_back(lo, hi);
      }
    });
  }

  void opGlobs(const YAML::Node& n, std::vector<std::string>* out) {
    out->clear();
    oneOrMany(n, [&](const YAML::Node& v) {
      std::string glob;
      if (!scalar(v, "op", &glob)) return;
      checkOpGlob(v, glob);
      out->push_back(glob);
    });
    if (out->empty()) error(n, "'op' needs at least one pattern");
  }

  void checkOpGlob(const YAML::Node& n, const std::string& glob) {
    if (glob.find("::") != std::string::npos) return;  // framework op (aten::...): known at run time
    for (const std::string& op : knownOpNames())
      if (fnmatch(glob.c_str(), op.c_str(), 0) == 0) return;
    warn(n, "op pattern '" + glob + "' matches no operator fumi intercepts; this rule will never apply");
  }

  void check(const YAML::Node& n, CheckSpec* c) {
    c->loc = loc(n);
    if (!n.IsMap()) {
      error(n, "each check must be a mapping such as { plugin: highprec, tolerance: 1e-5 }");
      return;
    }
    for (auto it = n.begin(); it != n.end(); ++it) {
      const std::string key = it->first.Scalar();
      // A copy (a Node is a handle): `it->second` lives in the iterator's proxy, a temporary.
      const YAML::Node v = it->second;
      if (key == "plugin") {
        scalar(v, key, &c->plugin);
      } else if (key == "tolerance") {
        double t = 0;
        if (number(v, key, &t)) {
          if (t < 0) error(v, "'tolerance' must be >= 0");
          else c->tolerance = t;
        }
      } else if (key == "sample") {
        c->has_sample = true;
        sample(v, &c->sample);
      } else if (v.IsScalar()) {
        c->params.emplace_back(key, v.Scalar());  // validated by the plugin's create()
      } else if (v.IsSequence()) {
        std::string joined;
        for (const auto& item : v) {
          if (!item.IsScalar()) {
            error(item, "parameter '" + key + "' must be a scalar or a list of scalars");
            break;
          }
          joined += (joined.empty() ? "" : ",") + item.Scalar();
        }
        c->params.emplace_back(key, joined);
      } else {
        error(v, "parameter '" + key + "' must be a scalar or a list of scalars");
      }
    }
    if (c->plugin.empty()) error(n, "check is missing 'plugin'");
  }

  void rule(const YAML::Node& n, size_t index, const SampleSpec& def_sample, Action def_action,
            Rule* r) {
    r->loc = loc(n);
    r->name = "rule[" + std::to_string(index) + "]";
    r->sample = def_sample;
    r->action = def_action;
    bool has_match = false, has_checks = false;
    forMap(n, "rule", {"name", "match", "sample", "checks", "action"},
           [&](const std::string& key, const YAML::Node& v) {
             if (key == "name") scalar(v, key, &r->name);
             if (key == "match") {
               has_match = true;
               match(v, &r->match);
             }
             if (key == "sample") {
               r->sample = SampleSpec{};
               sample(v, &r->sample);
             }
             if (key == "action") actionOf(v, &r->action);
             if (key == "checks") {
               has_checks = true;
               if (v.IsNull()) return;  // `checks:` with nothing: an exclusion rule
               if (!v.IsSequence()) {
                 error(v, "'checks' must be a list");
                 return;
               }
               for (const auto& c : v) {
                 r->checks.emplace_back();
                 check(c, &r->checks.back());
               }
             }
           });
    if (n.IsMap() && !has_match) error(n, "rule '" + r->name + "' is missing 'match'");
    if (n.IsMap() && !has_checks)
      error(n, "rule '" + r->name + "' is missing 'checks' (use 'checks: []' to exclude calls)");
  }

  void actionOf(const YAML::Node& v, Action* a) {
    choice<Action>(v, "action",
                   {{"log", Action::kLog}, {"dump", Action::kDump}, {"abort", Action::kAbort}}, a);
  }

  void report(const YAML::Node& n, ReportSettings* r) {
    forMap(n, "report",
           {"dir", "stack_depth", "log_level", "all_checks", "snapshot_every", "prometheus",
            "log_violations", "violation_events"},
           [&](const std::string& key, const YAML::Node& v) {
             int64_t i = 0;
             if (key == "dir") scalar(v, key, &r->dir);
             if (key == "prometheus") scalar(v, key, &r->prometheus);
             if (key == "snapshot_every") {
               double every = 0;
               if (number(v, key, &every)) {
                 if (every < 0) error(v, "'snapshot_every' must be >= 0 seconds (0: off)");
                 else r->snapshot_every = every;
               }
             }
             if (key == "stack_depth" && integer(v, key, 0, &i)) r->stack_depth = static_cast<int>(i);
             if (key == "log_violations" && integer(v, key, 0, &i))
               r->log_violations = static_cast<int>(std::min<int64_t>(i, INT32_MAX));
             if (key == "violation_events" && integer(v, key, 0, &i))
               r->violation_events = static_cast<int>(std::min<int64_t>(i, INT32_MAX));
             if (key == "all_checks") boolean(v, key, &r->all_checks);
             if (key == "log_level") {
               std::string lvl;
               choice<std::string>(v, key,
                                   {{"debug", "debug"}, {"info", "info"}, {"warn", "warn"},
                                    {"error", "error"}, {"off", "off"}},
                                   &lvl);
               if (!lvl.empty()) r->log_level = lvl;
             }
           });
  }

  void policy(const YAML::Node& root, Policy* p) {
    if (!root.IsDefined() || root.IsNull()) {
      add(Diagnostic::Severity::kError, {file_, 1, 1},
          "policy is empty: expected a mapping with 'version' and 'rules'");
      return;
    }
    SampleSpec def_sample;
    def_sample.every = 1;
    Action def_action = Action::kLog;
    bool has_version = false;
    YAML::Node rules;
    forMap(root, "policy",
           {"version", "rules", "defaults", "report", "plugin_dirs", "scratch_budget",
            "overhead_budget", "on_error", "tolerances", "nan_origin", "autocast", "underflow",
            "loss_scaling", "malloc_thresholds"},
           [&](const std::string& key, const YAML::Node& v) {
             if (key == "version") {
               int64_t ver = 0;
               has_version = true;
               if (integer(v, key, 1, &ver) && ver != 1)
                 error(v, "unsupported policy version " + std::to_string(ver) + " (this fumi reads version 1)");
             }
             if (key == "rules") rules = v;
             if (key == "report") report(v, &p->report);
             if (key == "tolerances") tolerances(v, p);
             if (key == "nan_origin") nanOrigin(v, &p->nan_origin);
             if (key == "loss_scaling") lossScaling(v, &p->loss_scaling);
             if (key == "malloc_thresholds")
               choice<bool>(v, key, {{"pin", true}, {"leave", false}}, &p->pin_malloc_thresholds);
             if (key == "autocast") bound(v, key, /*max=*/INFINITY, &p->autocast_bound);
             if (key == "underflow") bound(v, key, /*max=*/1, &p->underflow_bound);
             if (key == "scratch_budget") bytes(v, key, &p->scratch_budget);
             if (key == "overhead_budget") {
               double b = 0;
               if (number(v, key, &b)) {
                 if (b <= 0 || b > 1) error(v, "'overhead_budget' must be within (0, 1]");
                 else p->overhead_budget = b;
               }
             }
             if (key == "on_error")
               choice<OnError>(v, key, {{"continue", OnError::kContinue}, {"abort", OnError::kAbort}},
                               &p->on_error);
             if (key == "plugin_dirs") {
               if (!v.IsSequence()) error(v, "'plugin_dirs' must be a list of directories");
               else
                 for (const auto& d : v) {
                   std::string s;
                   if (scalar(d, key, &s)) p->plugin_dirs.push_back(s);
                 }
             }
             if (key == "defaults")
               forMap(v, "defaults", {"sample", "action"},
                      [&](const std::string& k2, const YAML::Node& v2) {
                        if (k2 == "sample") {
                          def_sample = SampleSpec{};
                          sample(v2, &def_sample);
                        }
                        if (k2 == "action") actionOf(v2, &def_action);
                      });
           });
    if (!root.IsMap()) return;
    if (!has_version) error(root, "missing 'version: 1'");
    if (!rules) {
      error(root, "missing 'rules'");
      return;
    }
    if (!rules.IsSequence()) {
      error(rules, "'rules' must be a list");
      return;
    }
    // Rules are read after `defaults` so the defaults apply whatever the key order.
    size_t index = 0;
    for (const auto& r : rules) {
      p->rules.emplace_back();
      rule(r, index++, def_sample, def_action, &p->rules.back());
    }
  }

 private:
  std::string file_;
  std::vector<Diagnostic> diags_;
};

}  // namespace

PolicyResult parsePolicyText(const std::string& text, const std::string& source_name) {
  PolicyResult result;
  Parser parser(source_name);
  Policy policy;
  policy.source = source_name;
  try {
    const YAML::Node root = YAML::Load(text);
    parser.policy(root, &policy);
  } catch (const YAML::Exception& e) {
    parser.add(Diagnostic::Severity::kError,
               {source_name, e.mark.is_null() ? 0 : e.mark.line + 1,
                e.mark.is_null() ? 0 : e.mark.column + 1},
               "invalid YAML: " + e.msg);
  }
  if (!parser.failed()) result.policy = std::move(policy);
  result.diagnostics = std::move(parser.diagnostics());
  return result;
}

PolicyResult parsePolicyFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    PolicyResult r;
    // Filled field by field: a braced temporary here trips GCC 12's -Wmaybe-uninitialized
    // in Release builds (a false positive in the temporary string's destructor).
    Diagnostic d;
    d.severity = Diagnostic::Severity::kError;
    d.loc.file = path;
    d.message = "cannot read the policy file";
    r.diagnostics.push_back(std::move(d));
    return r;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return parsePolicyText(ss.str(), path);
}

PolicyResult loadConfiguredPolicy() {
  const Settings s = readSettings();
  if (!s.policy.empty()) return parsePolicyFile(s.policy);
  return parsePolicyText(embeddedDefaultPolicy(), "<embedded default>");
}

}  // namespace fumi
