// report.h — the per-process output: JSON Lines events (docs/report-schema.md), the text log
// (spdlog, private logger), and the exit summary.
#pragma once

#include <algorithm>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "policy.h"
#include "site.h"

namespace spdlog {
class logger;
namespace sinks {
class sink;
}
}  // namespace spdlog

namespace fumi {

// One op site's summary state at one moment (sites with calls only).
struct SiteState {
  std::string op;
  std::string backend;
  uint64_t calls = 0;
  OpStats stats;
};
std::vector<SiteState> collectSiteStates();

// The least time between two periodic snapshot events of a process `age` seconds old:
// report.snapshot_every, or a sixtieth of its age where that is longer. Each snapshot is the
// whole per-op state (15-21 KB for a training job's 90 ops): one a minute added 1 MB an hour to
// the events file for as long as a job ran (210 MB a week), where this writes about 370 in a
// week (60 in the first hour, then 60 per e-fold of the age). A process killed without warning
// loses the counts of at most that long (a sixtieth of its life); its violations are events of
// their own, written as they happen.
constexpr double kSnapshotsPerAge = 60;
inline double snapshotSpacing(double every, double age) {
  return std::max(every, age / kSnapshotsPerAge);
}
// Whether a periodic tick (every `every` seconds) at `age` writes its event, the last state
// event `since` seconds before: half a tick of slack, as ticks drift by a snapshot's time.
inline bool periodicSnapshotDue(double every, double since, double age) {
  return since >= snapshotSpacing(every, age) - every / 2;
}

class Reporter {
 public:
  Reporter(const ReportSettings& settings, std::string out_dir, std::string log_level,
           std::string policy_source);
  ~Reporter();
  Reporter(const Reporter&) = delete;
  Reporter& operator=(const Reporter&) = delete;

  // Create the directory, open events-<pid>.jsonl, write the start event.
  void open();
  // After fork(): the child writes its own file.
  void reopenInChild();

  void event(nlohmann::json ev);  // adds pid/time, writes one line
  void error(const std::string& where, const std::string& location, const std::string& message) {
    diagnostic("error", where, location, message);
  }
  void warning(const std::string& where, const std::string& location, const std::string& message) {
    diagnostic("warning", where, location, message);
  }

  // Held across fork() so the child never inherits them locked (see runtime.cpp).
  void lockForFork() {
    state_mu_.lock();
    mu_.lock();
  }
  void unlockAfterFork() {
    mu_.unlock();
    state_mu_.unlock();
  }
  // The summary state of every op site: `summary` at the end of the process image, `snapshot`
  // (with why: "periodic", a signal's name, "exec") while it runs. Each also rewrites the
  // Prometheus file. A periodic one (every report.snapshot_every seconds) rewrites the
  // Prometheus file when a count changed since it was last written, and writes its event only
  // when a count changed since the last state event and snapshotSpacing has passed since it;
  // `snapshot` returns whether the event was written.
  void summary();
  bool snapshot(const char* reason);

  spdlog::logger& log() { return *logger_; }
  const std::string& dir() const { return dir_; }
  const ReportSettings& settings() const { return settings_; }

 private:
  void diagnostic(const char* kind, const std::string& where, const std::string& location,
                  const std::string& message);
  void makeLogger(std::shared_ptr<spdlog::sinks::sink> file_sink);
  struct StateTotals {
    bool written = false;
    uint64_t calls = 0, checked = 0, violations = 0;
  };
  // Writes a state event (a periodic one as `snapshot` says); returns its totals.
  StateTotals writeState(const char* type, const char* reason, bool periodic);
  void writePrometheus(const std::vector<SiteState>& sites, double elapsed);

  ReportSettings settings_;
  std::string dir_;
  std::string policy_source_;
  std::mutex mu_;        // the events file
  std::mutex state_mu_;  // one state event at a time (taken before mu_)
  uint64_t state_seq_ = 0;
  uint64_t last_fingerprint_ = 0;  // calls + checked + skipped of the last state event
  uint64_t prometheus_fingerprint_ = 0;  // ... of the last Prometheus file written
  double last_state_elapsed_ = 0;  // seconds since start at the last state event
  std::string prometheus_path_;    // "" : no Prometheus file
  std::FILE* events_ = nullptr;
  std::shared_ptr<spdlog::logger> logger_;
  int level_;  // spdlog::level::level_enum
  double start_time_ = 0;
};

// The reporter of the running process (null before init or when fumi is disabled).
Reporter* activeReporter();
// A line in the active reporter's log at a fumi_log_level (plugins and adapters log this way).
void logMessage(int fumi_level, const std::string& text);
// Whether a line at `fumi_level` would be written (to build a frequent line only then).
bool logEnabled(int fumi_level);

// UTC timestamp, ISO 8601 with milliseconds.
std::string isoNow();
double monotonicSeconds();

}  // namespace fumi
