// prometheus.cpp — the Prometheus textfile writer (prometheus.h).
#include "prometheus.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>

#include "plugin_loader.h"

namespace fumi {

namespace {

// Labels as (name, value) pairs, in the order written.
using Labels = std::vector<std::pair<const char*, std::string>>;

class Exposition {
 public:
  explicit Exposition(std::string rank) : rank_(std::move(rank)) {}

  // One metric family: its HELP and TYPE lines, then every sample `emit` adds. A family with
  // no samples writes nothing.
  void family(const char* name, const char* type, const char* help,
              const std::function<void()>& emit) {
    samples_.clear();
    emit();
    if (samples_.empty()) return;
    out_ += std::string("# HELP ") + name + " " + help + "\n";
    out_ += std::string("# TYPE ") + name + " " + type + "\n";
    for (const std::string& s : samples_) out_ += name + s;
  }

  void sample(Labels labels, double value) {
    if (!std::isfinite(value)) return;
    labels.emplace_back("rank", rank_);
    std::string line = "{";
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i) line += ",";
      line += std::string(labels[i].first) + "=\"" + prometheusEscape(labels[i].second) + "\"";
    }
    char num[40];
    if (value == std::floor(value) && std::fabs(value) < 1e15) {
      std::snprintf(num, sizeof num, "%.0f", value);
    } else {
      for (int digits = 15; digits <= 17; ++digits) {  // the shortest that reads back exactly
        std::snprintf(num, sizeof num, "%.*g", digits, value);
        if (std::strtod(num, nullptr) == value) break;
      }
    }
    samples_.push_back(line + "} " + num + "\n");
  }

  std::string take() { return std::move(out_); }

 private:
  std::string rank_;
  std::string out_;
  std::vector<std::string> samples_;
};

}  // namespace

std::string prometheusEscape(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string prometheusText(const std::vector<SiteState>& sites, std::optional<int64_t> rank,
                           double elapsed, std::time_t now) {
  Exposition x(rank ? std::to_string(*rank) : std::string());
  auto perOp = [&](const char* name, const char* type, const char* help,
                   uint64_t (*value)(const SiteState&)) {
    x.family(name, type, help, [&] {
      for (const SiteState& s : sites)
        x.sample({{"op", s.op}, {"backend", s.backend}}, static_cast<double>(value(s)));
    });
  };
  auto perCheck = [&](const char* name, const char* type, const char* help,
                      double (*value)(const CheckCounts&)) {
    x.family(name, type, help, [&] {
      for (const SiteState& s : sites)
        for (const auto& [check, c] : s.stats.checks)
          x.sample({{"op", s.op}, {"backend", s.backend}, {"check", check}}, value(c));
    });
  };
  perOp("fumi_calls_total", "counter", "Calls of the op intercepted by fumi.",
        [](const SiteState& s) { return s.calls; });
  perOp("fumi_calls_checked_total", "counter", "Calls of the op that ran at least one check.",
        [](const SiteState& s) { return s.stats.checked; });
  perOp("fumi_calls_skipped_total", "counter",
        "Calls of the op that were sampled but could not be checked.",
        [](const SiteState& s) { return s.stats.skipped; });
  perOp("fumi_nonfinite_propagated_total", "counter",
        "Checked calls whose NaN/Inf outputs came with their inputs (counted, not raised).",
        [](const SiteState& s) { return s.stats.nonfinite_propagated; });
  perOp("fumi_handled_overflow_total", "counter",
        "NaN/Inf of the backward pass that a loss scaler handled (counted, not raised).",
        [](const SiteState& s) { return s.stats.handled_overflow; });
  perCheck("fumi_checks_total", "counter", "Checks of the op that ran to a verdict.",
           [](const CheckCounts& c) { return static_cast<double>(c.runs); });
  perCheck("fumi_checks_skipped_total", "counter",
           "Checks of the op that were skipped (unsupported call, no scratch, plugin failure).",
           [](const CheckCounts& c) { return static_cast<double>(c.skipped()); });
  perCheck("fumi_violations_total", "counter", "Checks of the op whose verdict was a violation.",
           [](const CheckCounts& c) { return static_cast<double>(c.violations); });
  perCheck("fumi_check_seconds_total", "counter", "Wall seconds spent in the op's checks.",
           [](const CheckCounts& c) { return c.seconds; });
  x.family("fumi_metric_worst", "gauge",
           "Worst (largest) value of a check metric over the op's checked calls.", [&] {
             for (const SiteState& s : sites)
               for (const auto& [key, m] : s.stats.metrics) {
                 const size_t dot = key.find('.');
                 x.sample({{"op", s.op},
                           {"backend", s.backend},
                           {"check", key.substr(0, dot)},
                           {"metric", dot == std::string::npos ? key : key.substr(dot + 1)},
                           {"kind", kindName(m.kind)}},
                          m.max);
               }
           });
  double check_s = 0;
  for (const SiteState& s : sites) check_s += s.stats.check_seconds;
  x.family("fumi_overhead_ratio", "gauge",
           "Seconds spent in checks per wall second of the process since fumi started.",
           [&] { x.sample({}, elapsed > 0 ? check_s / elapsed : 0); });
  x.family("fumi_elapsed_seconds", "gauge", "Wall seconds since fumi started in the process.",
           [&] { x.sample({}, elapsed); });
  x.family("fumi_last_update_timestamp_seconds", "gauge",
           "Unix time at which fumi last rewrote this file.",
           [&] { x.sample({}, static_cast<double>(now)); });
  return x.take();
}

std::string prometheusPath(const std::string& pattern, std::optional<int64_t> rank, pid_t pid) {
  auto replaceAll = [](std::string s, const std::string& from, const std::string& to) {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
      s.replace(at, from.size(), to);
    return s;
  };
  const bool names_rank = pattern.find("{rank}") != std::string::npos;
  std::string path = replaceAll(pattern, "{rank}", rank ? std::to_string(*rank) : "none");
  path = replaceAll(path, "{pid}", std::to_string(pid));
  if (names_rank || !rank) return path;
  const size_t slash = path.rfind('/');
  const size_t dot = path.rfind('.');
  const size_t at = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1)
                        ? dot
                        : path.size();
  return path.insert(at, "-rank" + std::to_string(*rank));
}

bool writeFileAtomically(const std::string& path, const std::string& text, std::string* why) {
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *why = tmp + ": " + std::strerror(errno);
    return false;
  }
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *why = tmp + ": " + std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return false;
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    *why = path + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace fumi
