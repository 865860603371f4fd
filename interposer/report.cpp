// report.cpp — JSON Lines events, private spdlog logger, exit summary.
#include "report.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "loss_scaling.h"
#include "plugin_loader.h"
#include "prometheus.h"
#include "rank.h"
#include "runtime.h"
#include "site.h"

namespace fumi {

std::string isoNow() {
  using namespace std::chrono;
  const auto now = system_clock::now();
  const std::time_t t = system_clock::to_time_t(now);
  const long ms = static_cast<long>(duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  return buf;
}

double monotonicSeconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

namespace {

void makeDirs(const std::string& path) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos == path.size() || path[pos] == '/') ::mkdir(path.substr(0, pos).c_str(), 0755);
  }
}

std::vector<std::string> processArgv() {
  std::vector<std::string> argv;
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string arg;
  while (std::getline(in, arg, '\0')) argv.push_back(arg);
  return argv;
}

}  // namespace

Reporter::Reporter(const ReportSettings& settings, std::string out_dir, std::string log_level,
                   std::string policy_source)
    : settings_(settings),
      dir_(std::move(out_dir)),
      policy_source_(std::move(policy_source)),
      level_(spdlog::level::from_str(log_level)) {
  makeLogger(nullptr);
}

Reporter::~Reporter() {
  if (events_) std::fclose(events_);
}

// A private logger, never registered in spdlog's registry: the host may use spdlog too.
void Reporter::makeLogger(std::shared_ptr<spdlog::sinks::sink> file_sink) {
  auto err_sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  err_sink->set_pattern("[fumi] [%l] %v");
  std::vector<spdlog::sink_ptr> sinks{err_sink};
  if (file_sink) {
    file_sink->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
    sinks.push_back(std::move(file_sink));
  }
  logger_ = std::make_shared<spdlog::logger>("fumi", sinks.begin(), sinks.end());
  logger_->set_level(static_cast<spdlog::level::level_enum>(level_));
  logger_->flush_on(spdlog::level::warn);
}

// "1234", or "rank3-1234" in a distributed launch: file names sort by rank, then pid.
std::string processTag() {
  const std::string pid = std::to_string(::getpid());
  const RankInfo& r = rankInfo();
  return r.rank ? "rank" + std::to_string(*r.rank) + "-" + pid : pid;
}

void Reporter::open() {
  makeDirs(dir_);
  const std::string pid = processTag();
  const std::string path = dir_ + "/events-" + pid + ".jsonl";
  // Append: a process that exec()s keeps its pid, and its new image must not erase the old
  // image's events (`fumi run` clears the directory of earlier runs).
  events_ = std::fopen(path.c_str(), "a");
  if (!events_)
    logger_->error("cannot write {}: {}; events go nowhere", path, std::strerror(errno));
  try {
    makeLogger(std::make_shared<spdlog::sinks::basic_file_sink_mt>(dir_ + "/fumi-" + pid + ".log",
                                                                   /*truncate=*/true));
  } catch (const spdlog::spdlog_ex& e) {
    logger_->error("cannot open the log file in {}: {}", dir_, e.what());
  }
  start_time_ = monotonicSeconds();
  last_fingerprint_ = 0;
  if (!settings_.prometheus.empty())
    prometheus_path_ = prometheusPath(settings_.prometheus, rankInfo().rank, ::getpid());
  nlohmann::json ev;
  ev["event"] = "start";
  ev["ppid"] = ::getppid();
  if (const RankInfo& r = rankInfo(); r.rank) {
    ev["rank_from"] = r.source;
    if (r.local_rank) ev["local_rank"] = *r.local_rank;
    if (r.world_size) ev["world_size"] = *r.world_size;
  }
  ev["argv"] = processArgv();
  ev["policy"] = policy_source_;
  ev["fumi_version"] = FUMI_VERSION;
  event(std::move(ev));
}

void Reporter::reopenInChild() {
  if (events_) std::fclose(events_);
  events_ = nullptr;
  open();
  // The parent owns the Prometheus file; a fork child's counts are in its events file.
  prometheus_path_.clear();
}

void Reporter::event(nlohmann::json ev) {
  ev["pid"] = ::getpid();
  if (const RankInfo& r = rankInfo(); r.rank) ev["rank"] = *r.rank;
  ev["time"] = isoNow();
  const std::string line = ev.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const InsideLock<std::mutex> lock(mu_);
  if (!events_) return;
  std::fwrite(line.data(), 1, line.size(), events_);
  std::fputc('\n', events_);
  std::fflush(events_);  // events are rare (violations, errors): keep them even on a crash
}

void Reporter::diagnostic(const char* kind, const std::string& where,
                          const std::string& location, const std::string& message) {
  nlohmann::json ev;
  ev["event"] = kind;
  ev["where"] = where;
  if (!location.empty()) ev["location"] = location;
  ev["message"] = message;
  event(std::move(ev));
}

std::vector<SiteState> collectSiteStates() {
  std::vector<SiteState> out;
  for (OpSite* s = firstSite(); s; s = s->next) {
    const uint64_t calls = s->totalCalls();
    if (calls == 0) continue;
    out.push_back({s->name, s->backend, calls, s->statsSnapshot()});
  }
  return out;
}

Reporter::StateTotals Reporter::writeState(const char* type, const char* reason,
                                           bool periodic) {
  const InsideLock<std::mutex> lock(state_mu_);
  const std::vector<SiteState> sites = collectSiteStates();
  uint64_t calls = 0, checked = 0, skipped = 0, violations = 0;
  double check_s = 0;
  for (const SiteState& s : sites) {
    calls += s.calls;
    checked += s.stats.checked;
    skipped += s.stats.skipped;
    violations += s.stats.violations;
    check_s += s.stats.check_seconds;
  }
  const uint64_t fingerprint = calls + checked + skipped;
  const double elapsed = monotonicSeconds() - start_time_;
  if (periodic) {
    if (fingerprint != prometheus_fingerprint_) {
      prometheus_fingerprint_ = fingerprint;
      writePrometheus(sites, elapsed);
    }
    if (fingerprint == last_fingerprint_ ||
        !periodicSnapshotDue(settings_.snapshot_every, elapsed - last_state_elapsed_, elapsed))
      return {false, calls, checked, violations};
  }
  last_fingerprint_ = fingerprint;
  last_state_elapsed_ = elapsed;

  nlohmann::json ops = nlohmann::json::array();
  for (const SiteState& s : sites) {
    const OpStats& st = s.stats;
    ops.push_back({{"op", s.op},
                   {"backend", s.backend},
                   {"calls", s.calls},
                   {"checked", st.checked},
                   {"skipped", st.skipped},
                   {"violations", st.violations},
                   {"check_s", st.check_seconds},
                   {"worst", st.worst}});
    nlohmann::json metrics = nlohmann::json::object();
    for (const auto& [key, m] : st.metrics) {
      metrics[key] = {{"kind", kindName(m.kind)}, {"count", m.count},
                      {"violations", m.violations}, {"median", m.quantile(0.5)},
                      {"p99", m.quantile(0.99)},    {"max", m.max}};
      if (!std::isnan(m.of_tolerance)) metrics[key]["of_tolerance"] = m.of_tolerance;
      if (m.noise) metrics[key]["noise"] = m.noise;
      if (!std::isnan(m.noise_max)) metrics[key]["noise_max"] = m.noise_max;
    }
    if (!metrics.empty()) ops.back()["metrics"] = std::move(metrics);
    nlohmann::json checks = nlohmann::json::object();
    for (const auto& [name, c] : st.checks) {
      nlohmann::json one = {{"runs", c.runs}, {"skipped", c.skipped()},
                            {"violations", c.violations}, {"check_s", c.seconds}};
      for (const auto& [why, n] : {std::pair{"unsupported", c.unsupported},
                                   std::pair{"no_scratch", c.no_scratch},
                                   std::pair{"failed", c.failed},
                                   std::pair{"budget", c.budget}})
        if (n) one["skipped_" + std::string(why)] = n;
      checks[name] = std::move(one);
    }
    if (!checks.empty()) ops.back()["checks"] = std::move(checks);
    if (!st.not_checked.empty()) ops.back()["not_checked"] = st.not_checked;
    if (st.nonfinite_propagated) ops.back()["nonfinite_propagated"] = st.nonfinite_propagated;
    if (st.handled_overflow) ops.back()["handled_overflow"] = st.handled_overflow;
    if (st.autotuning) ops.back()["autotuning"] = st.autotuning;
    if (st.adapter_seconds > 0) ops.back()["adapter_s"] = st.adapter_seconds;
    if (st.report_seconds > 0) ops.back()["report_s"] = st.report_seconds;
  }
  nlohmann::json ev;
  ev["event"] = type;
  if (reason) ev["reason"] = reason;
  ev["seq"] = ++state_seq_;
  ev["elapsed_s"] = elapsed;
  ev["totals"] = {{"calls", calls},           {"checked", checked}, {"skipped", skipped},
                  {"violations", violations}, {"check_s", check_s}};
  ev["ops"] = std::move(ops);
  if (nlohmann::json ls = lossScalingSummary(); !ls.is_null()) ev["loss_scaling"] = std::move(ls);
  event(std::move(ev));
  if (!periodic) {
    prometheus_fingerprint_ = fingerprint;
    writePrometheus(sites, elapsed);
  }
  return {true, calls, checked, violations};
}

void Reporter::writePrometheus(const std::vector<SiteState>& sites, double elapsed) {
  if (prometheus_path_.empty()) return;
  std::string why;
  if (!writeFileAtomically(prometheus_path_,
                           prometheusText(sites, rankInfo().rank, elapsed, ::time(nullptr)),
                           &why)) {
    logger_->error("cannot write the Prometheus file {}: {}; no more tries", prometheus_path_,
                   why);
    prometheus_path_.clear();
  }
}

void Reporter::summary() {
  const StateTotals t = writeState("summary", nullptr, false);
  logger_->info("{} calls intercepted, {} checked, {} violations; events in {}", t.calls,
                t.checked, t.violations, dir_);
  logger_->flush();
}

bool Reporter::snapshot(const char* reason) {
  return writeState("snapshot", reason, std::strcmp(reason, "periodic") == 0).written;
}

namespace {
spdlog::level::level_enum spdlogLevel(int fumi_level) {
  return fumi_level >= FUMI_LOG_ERROR  ? spdlog::level::err
         : fumi_level == FUMI_LOG_WARN ? spdlog::level::warn
         : fumi_level == FUMI_LOG_INFO ? spdlog::level::info
                                       : spdlog::level::debug;
}
}  // namespace

void logMessage(int fumi_level, const std::string& text) {
  if (Reporter* r = activeReporter()) r->log().log(spdlogLevel(fumi_level), "{}", text);
}

bool logEnabled(int fumi_level) {
  Reporter* r = activeReporter();
  return r && r->log().should_log(spdlogLevel(fumi_level));
}

}  // namespace fumi
