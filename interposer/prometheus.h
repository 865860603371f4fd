// prometheus.h — the summary state as a Prometheus text-format file (node_exporter's textfile
// collector reads it), rewritten atomically at each snapshot. Metric names and labels:
// docs/report-schema.md#prometheus.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "report.h"

namespace fumi {

// Text exposition format 0.0.4 of `sites`: counters of calls, checks, skips, violations and
// check seconds per op (and check), the worst value of each metric, and the overhead fraction
// (check seconds / `elapsed` wall seconds). `rank` labels every sample ("" outside a
// distributed launch). Metric values that are NaN or infinite are left out.
std::string prometheusText(const std::vector<SiteState>& sites, std::optional<int64_t> rank,
                           double elapsed, std::time_t now);

// A label value with \, " and newline escaped.
std::string prometheusEscape(const std::string& value);

// The file for this process: `{rank}` and `{pid}` in `pattern` are replaced; without
// `{rank}`, a process with a launcher rank writes NAME-rank<R>.prom (the rank inserted before
// the extension), so the ranks of one node never overwrite each other's file.
std::string prometheusPath(const std::string& pattern, std::optional<int64_t> rank, pid_t pid);

// Write `text` to a temporary file beside `path`, then rename it over `path`: a reader never
// sees half a file. False, with *why, when it could not.
bool writeFileAtomically(const std::string& path, const std::string& text, std::string* why);

}  // namespace fumi
