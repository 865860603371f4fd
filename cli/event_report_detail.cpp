// event_report_detail.cpp — helpers shared by the renderings of a Report (event_report_detail.h).
#include "event_report_detail.h"

#include "nan_makers.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace fumi::report::detail {

using nlohmann::json;

std::string plural(uint64_t n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

std::string opName(const std::string& op, const std::string& backend) {
  return op + " (" + (backend.empty() ? "-" : backend) + ")";
}

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

std::string joinArgv(const std::vector<std::string>& argv, size_t max_len) {
  std::string s;
  for (const std::string& a : argv) {
    if (!s.empty()) s += ' ';
    s += a;
  }
  if (s.size() > max_len) s = s.substr(0, max_len - 3) + "...";
  return s;
}

std::string worstText(const OpStats& op) {
  std::string s;
  for (const auto& [k, v] : op.worst) {
    if (!s.empty()) s += "  ";
    s += k + "=" + formatValue(v);
    // How close the op came to its tolerance, which differs per call where it grows with the
    // terms summed: the largest value / tolerance over the calls (not necessarily the worst's).
    const auto m = op.metrics.find(k);
    if (m != op.metrics.end() && m->second.of_tolerance && std::isfinite(*m->second.of_tolerance)) {
      const double percent = *m->second.of_tolerance * 100;
      char buf[32];
      std::snprintf(buf, sizeof buf, percent >= 10 ? " (%.0f%% of tol)" : " (%.2g%% of tol)",
                    percent);
      s += buf;
    }
  }
  return s.empty() ? "-" : s;
}

std::map<std::string, uint64_t> violationsByKind(const Report& report) {
  std::map<std::string, uint64_t> n;
  for (const OpStats& s : report.ops) {
    for (const auto& [kind, kv] : s.by_kind) n[kind] += kv.violations;
  }
  return n;
}

std::vector<std::string> kindOrder(const std::map<std::string, uint64_t>& by_kind) {
  auto rank = [](const std::string& k) {
    return k == kKindError ? 0 : k == kKindCancellation ? 1 : k == kKindSensitivity ? 2 : 3;
  };
  std::vector<std::string> kinds;
  for (const auto& kv : by_kind) kinds.push_back(kv.first);
  std::stable_sort(kinds.begin(), kinds.end(),
                   [&](const std::string& a, const std::string& b) { return rank(a) < rank(b); });
  return kinds;
}

std::string kindHeading(const std::string& kind) {
  if (kind == kKindError) return "Errors (results off by more than their tolerance):";
  if (kind == kKindSensitivity) {
    return "Sensitivity above its bound (outputs move far when inputs move by their rounding):";
  }
  if (kind == kKindCancellation) {
    return "Cancellation above its bound (results whose inputs cancel so far that hardly a digit "
           "is left, though the op computed them as well as its precision allows):";
  }
  return "Violations of kind " + kind + ":";
}

std::vector<std::pair<const OpStats*, const KindViolations*>> opsWithKind(const Report& report,
                                                                          const std::string& kind) {
  std::vector<std::pair<const OpStats*, const KindViolations*>> ops;
  for (const OpStats& s : report.ops) {
    auto it = s.by_kind.find(kind);
    if (it != s.by_kind.end() && it->second.violations > 0) ops.emplace_back(&s, &it->second);
  }
  std::stable_sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) {
    return a.second->violations > b.second->violations;
  });
  return ops;
}

std::string describeViolation(const ViolationInfo& v) {
  std::string s = "pid " + std::to_string(v.pid);
  if (v.call_index) s += ", call " + std::to_string(*v.call_index);
  s += ", " + metricKey(v.check, v.metric) + " = " + (v.value ? formatValue(*v.value) : "?");
  if (v.tolerance) s += " > " + formatValue(*v.tolerance);
  if (!v.rule.empty()) s += ", rule " + v.rule;
  if (!v.dtype.empty()) s += ", " + v.dtype;
  if (!v.forward_call.empty()) s += ", the gradient of " + v.forward_call + " (its line)";
  return s;
}

std::string sentinelText(const json& sentinel) {
  if (!sentinel.is_object() || !sentinel.contains("op") || !sentinel["op"].is_string()) return "";
  std::string s = sentinel["op"].get<std::string>();
  if (sentinel.contains("call_index") && sentinel["call_index"].is_number_integer()) {
    s += " #" + std::to_string(sentinel["call_index"].get<int64_t>());
  }
  std::vector<std::string> stack;
  if (const auto py = sentinel.find("python_stack"); py != sentinel.end() && py->is_array())
    for (const json& f : *py)
      if (f.is_string()) stack.push_back(f.get<std::string>());
  if (std::string at = userFrame(stack); !at.empty()) s += " at " + at;
  return s;
}

std::string cancellationText(const ViolationInfo& v) {
  if (!v.extra.is_object()) return std::string();
  const auto c = v.extra.find("cancellation"), e = v.extra.find("error_of_terms");
  if (c == v.extra.end() || e == v.extra.end() || !c->is_number() || !e->is_number())
    return std::string();
  const double cancel = c->get<double>(), error = e->get<double>();
  if (!(cancel >= 10)) return std::string();
  std::string s = "its terms cancel " + formatValue(cancel) +
                  "-fold; against their magnitudes the error is " + formatValue(error);
  // A cancellation verdict: the op kept its error tolerance (its event's extra) against them.
  const auto t = v.extra.find("error_tolerance");
  if (v.kind == kKindCancellation && t != v.extra.end() && t->is_number())
    s += " (the op kept its error tolerance " + formatValue(t->get<double>()) +
         " against them: the inputs lost the digits)";
  return s;
}

std::string originText(const NanOrigin& o) {
  const ViolationInfo& v = o.violation;
  std::string s = opName(o.op, o.backend) + " pid " + std::to_string(v.pid);
  if (v.call_index) s += ", call " + std::to_string(*v.call_index);
  if (std::string at = userFrame(v.python_stack); !at.empty()) s += " at " + at;
  s += ": " + (v.detail.empty()                ? std::string("appeared")
               : v.detail == "nonfinite_scalar" ? std::string("made of a non-finite scalar "
                                                              "argument (a Python number, a "
                                                              "learning rate or a scale of inf "
                                                              "or NaN)")
                                                : v.detail);
  if (v.extra.is_object() && v.extra.contains("nan") && v.extra.contains("inf") &&
      v.extra["nan"].is_number() && v.extra["inf"].is_number()) {
    // Counts, written as integers by the search and as numbers by a nan_inf check.
    const auto count = [](const nlohmann::json& n) {
      return std::to_string(static_cast<uint64_t>(n.get<double>()));
    };
    // A holder's counts are what it held, not what the op named made (batches 23, 30: a log's
    // -inf read as "0 Inf" beside the holder's NaN).
    s += " (";
    if (!v.held_by.empty())
      s += v.held_by +
           (v.held_by_phase == "backward" && !v.backward() ? " in the backward pass" : "") +
           " held ";
    s += count(v.extra["nan"]) + " NaN, " + count(v.extra["inf"]) + " Inf)";
  }
  // A backward op's origin is a gradient formula's: the node says whose (a forward op that
  // already made them, log(0), shows up as its node's division by 0).
  if (!v.autograd_node.empty()) s += " in the backward pass, inside " + v.autograd_node;
  else if (v.backward()) s += " in the backward pass";
  if (!v.forward_call.empty()) s += ", the gradient of " + v.forward_call + " (its line)";
  if (!o.inf_of.empty())
    s += " (from Inf: the origin " + o.inf_of + " made Inf in this step: likely its spread)";
  if (!o.gradient_of.empty())
    s += " (the step whose forward pass made the origin " + o.gradient_of +
         ": likely its gradient, which that one explains)";
  else if (o.after_forward_sentinel)
    s += " (after the sentinel had seen non-finite values in this step's forward pass: those "
         "were made before it, by an op not found; this is likely their gradient's)";
  if (v.looked_back) {
    s += "; found looking back from the sentinel";
    // Its line comes from the frames kept when it ran (its Python place), else from a later
    // call that made them again; older runs, or a Python fumi does not read, have neither.
    s += v.stack_call_index ? " (its stacks are its call " + std::to_string(*v.stack_call_index) +
                                  "'s, which made them again)"
         : !v.python_stack.empty() ? " (the op had returned: its Python frames kept when it ran, "
                                     "no native stack)"
                                   : " (the op had returned: no stack of its own)";
    // The ops between finite inputs and the holder's results, whose own results were gone
    // (nan_makers.h): with `held_by`, this one is the likeliest maker; else the values appeared
    // in one of them or in this one.
    if (!v.through.empty()) {
      const bool from_inf = v.detail == "nan_from_inf";
      std::vector<std::string> chain = v.through;
      chain.push_back(v.held_by.empty() ? o.op + " (this call)" : v.held_by);
      std::vector<uint64_t> hops = v.through_hops;
      if (!hops.empty()) hops.push_back(0);
      std::vector<std::string> phases = v.through_phases;
      if (!phases.empty()) phases.push_back(v.held_by.empty() ? v.phase : v.held_by_phase);
      const std::vector<size_t> likely =
          likelyMakers(chain, hops, phases, from_inf, v.positive_inf);
      if (!v.held_by.empty()) {
        s += ": the holder got them through ";
        for (size_t i = 0; i < v.through.size(); ++i) s += (i ? ", " : "") + v.through[i];
        s += ", whose results were gone; this one ";
        s += from_inf    ? "the first to compute with the Inf"
             : v.by_zero ? "the one dividing by an exact 0"
             : v.out_of_domain
                 ? "the one whose input lay outside its domain (a mean of nothing, "
                   "a log or root of a negative, an exp past its overflow)"
             : restrictedDomain(o.op) ? "the likeliest whose domain or range allows it"
                                      : "the nearest that computes (no op between has a "
                                        "restricted domain, and the holder makes no NaN or Inf "
                                        "of finite values: an overflow)";
        // A forward op named for a gradient's NaN: its results are gone, so whether it made
        // them or its gradient did of what it returned (sqrt's backward divides by its 0) is
        // not known (batch 28: a sqrt of 0 read as having made the NaN itself).
        if (!from_inf && v.phase == "forward" && v.held_by_phase != "forward")
          s += ", in its forward call or in its gradient";
        const std::string self =
            o.op + " #" + (v.call_index ? std::to_string(*v.call_index) : std::string("?"));
        std::string others;
        for (size_t i : likely)
          if (chain[i] != self) others += (others.empty() ? "" : ", ") + chain[i];
        if (!others.empty()) s += " (also possible: " + others + ")";
      } else {
        s += from_inf ? ": NaN made from Inf by " : ": made from finite inputs by ";
        for (const std::string& t : v.through) s += t + ", ";
        s += "then this call (the results in between no longer held: one of them made them";
        if (!likely.empty() && !(likely.size() == 1 && likely[0] == chain.size() - 1)) {
          s += likely.size() == 1 ? "; likely " : "; likely one of ";
          for (size_t i = 0; i < likely.size(); ++i) s += (i ? ", " : "") + chain[likely[i]];
          s += from_inf ? ", the first to compute with the Inf"
               : !restrictedDomain(chain[likely[0]]) ? ", that compute (an overflow)"
               : likely.size() == 1                  ? ", whose domain or range allows it"
                                                     : ", whose domains or ranges allow it";
          if (!from_inf && likely.size() > 1) s += ", likeliest first";
        }
        s += ")";
      }
    }
  }
  if (std::string sent = sentinelText(v.sentinel); !sent.empty()) s += "; sentinel " + sent;
  return s;
}

std::string notFoundText(const NanSearch& n) {
  std::string s = "NaN search: origin not found";
  if (!n.message.empty()) s += " (" + n.message + ")";
  if (std::string sent = sentinelText(n.sentinel); !sent.empty()) s += "; sentinel " + sent;
  return s;
}

std::vector<const NanSearch*> searchesNotFound(const Report& report) {
  std::vector<const NanSearch*> not_found;
  for (const NanSearch& n : report.nan_searches) {
    if (n.result != "found") not_found.push_back(&n);
  }
  return not_found;
}

std::string opCountsText(const Report& report, uint64_t OpStats::*count) {
  std::string text;
  for (const OpStats& s : report.ops) {
    if (!(s.*count)) continue;
    text += (text.empty() ? "" : ", ") + s.op + " (" + plural(s.*count, "call") + ")";
  }
  return text;
}

std::string reasonsText(const Report& report,
                        std::map<std::string, uint64_t> OpStats::*reasons) {
  std::string text;
  for (const OpStats& s : report.ops)
    for (const auto& [why, n] : s.*reasons)
      text += (text.empty() ? "" : ", ") + s.op + " (" + why + ": " + plural(n, "call") + ")";
  return text;
}

std::string noiseText(const Report& report) {
  std::string text;
  for (const OpStats& s : report.ops)
    for (const auto& [key, m] : s.metrics)
      if (m.noise)
        text += (text.empty() ? "" : ", ") + s.op + " (" + key + ": " + plural(m.noise, "call") +
                (m.noise_max ? ", up to " + formatValue(*m.noise_max) : "") + ")";
  return text;
}

namespace {

std::optional<Sensitivity> mostSensitiveMetric(const OpStats& s) {
  std::optional<Sensitivity> best;
  auto consider = [&](const std::string& key, const MetricSummary* m, std::optional<double> v) {
    if (!v || *v == 0) return;  // nothing measured, or inputs that moved nothing
    if (!best || worse(*v, best->max)) best = Sensitivity{&s, key, m, *v};
  };
  auto worstOf = [&](const std::string& key) -> std::optional<double> {
    auto it = s.worst.find(key);
    return it == s.worst.end() ? std::nullopt : std::optional<double>(it->second);
  };
  for (const auto& [key, m] : s.metrics) {
    if (m.kind == kKindSensitivity) consider(key, &m, m.max ? m.max : worstOf(key));
  }
  for (const auto& [key, w] : s.worst) {
    if (!s.metrics.count(key) && defaultKind(checkOfKey(key)) == kKindSensitivity) {
      consider(key, nullptr, w);
    }
  }
  return best;
}

}  // namespace

std::vector<Sensitivity> mostSensitive(const Report& report, size_t limit) {
  std::vector<Sensitivity> sens;
  for (const OpStats& s : report.ops) {
    if (auto m = mostSensitiveMetric(s)) sens.push_back(*m);
  }
  std::stable_sort(sens.begin(), sens.end(),
                   [](const Sensitivity& a, const Sensitivity& b) { return worse(a.max, b.max); });
  if (sens.size() > limit) sens.resize(limit);
  return sens;
}

bool onlyCounted(const OpStats& s) { return s.checked == 0 && s.violations == 0; }

}  // namespace fumi::report::detail
