// report.h — the per-process output: JSON Lines events (docs/report-schema.md), the text log
// (spdlog, private logger), and the exit summary.
#pragma once

#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "policy.h"

namespace spdlog {
class logger;
namespace sinks {
class sink;
}
}  // namespace spdlog

namespace fumi {

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

  // Held across fork() so the child never inherits it locked (see runtime.cpp).
  void lockForFork() { mu_.lock(); }
  void unlockAfterFork() { mu_.unlock(); }
  void summary();  // summary event over every op site

  spdlog::logger& log() { return *logger_; }
  const std::string& dir() const { return dir_; }
  const ReportSettings& settings() const { return settings_; }

 private:
  void diagnostic(const char* kind, const std::string& where, const std::string& location,
                  const std::string& message);
  void makeLogger(std::shared_ptr<spdlog::sinks::sink> file_sink);

  ReportSettings settings_;
  std::string dir_;
  std::string policy_source_;
  std::mutex mu_;
  std::FILE* events_ = nullptr;
  std::shared_ptr<spdlog::logger> logger_;
  int level_;  // spdlog::level::level_enum
  double start_time_ = 0;
};

// The reporter of the running process (null before init or when fumi is disabled).
Reporter* activeReporter();
// A line in the active reporter's log at a fumi_log_level (plugins and adapters log this way).
void logMessage(int fumi_level, const std::string& text);

// UTC timestamp, ISO 8601 with milliseconds.
std::string isoNow();
double monotonicSeconds();

}  // namespace fumi
