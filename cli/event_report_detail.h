// event_report_detail.h — helpers shared by the renderings of a Report (the text and JSON of
// event_report_format.cpp, the HTML of event_report_html.cpp): how a violation, an origin, an op
// are described and which findings are listed. Not part of the report library's interface.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "event_report.h"

namespace fumi::report::detail {

// "3 violations", "1 violation".
std::string plural(uint64_t n, const char* word);

// "sgemm_ (blas)"; "-" for no backend.
std::string opName(const std::string& op, const std::string& backend);

// "name (12.3 us), name2" from an event's `kernels` (entries of other shapes are skipped).
std::string kernelList(const nlohmann::json& kernels);

// The argv joined by spaces, cut to `max_len` characters ("..." at the end) when longer.
std::string joinArgv(const std::vector<std::string>& argv, size_t max_len = 60);

// "highprec.normwise_rel=0.5 (62% of tol)  perturb.fumi_ratio=0.01 (0.1% of tol)": each
// metric's worst value and the largest value / tolerance over its calls; "-" when empty.
std::string worstText(const OpStats& op);

// Violations per kind over all ops.
std::map<std::string, uint64_t> violationsByKind(const Report& report);

// Kinds in the order a person reads them: errors, then sensitivity, then any newer kind by name.
std::vector<std::string> kindOrder(const std::map<std::string, uint64_t>& by_kind);

// The heading of a kind's findings ("Errors (results off by more than their tolerance):").
std::string kindHeading(const std::string& kind);

// The ops with violations of `kind`, most violations first.
std::vector<std::pair<const OpStats*, const KindViolations*>> opsWithKind(const Report& report,
                                                                          const std::string& kind);

// "pid 1, call 7, highprec.normwise_rel = 0.5 > 1e-05, rule gemms, f32"
std::string describeViolation(const ViolationInfo& v);

// "aten::mse_loss #14" from a {"op", "call_index"} object; empty when it is not one.
std::string sentinelText(const nlohmann::json& sentinel);

// For a check's violation whose terms cancel (its extras `cancellation` and `error_of_terms`, at
// least 10-fold): how far, the error against the terms' magnitudes, and, for a finding of kind
// cancellation, that the op kept its error tolerance (the extra `error_tolerance`) against them.
// Empty otherwise.
std::string cancellationText(const ViolationInfo& v);

// One line for a NaN origin: where, what, and which op's output started the search.
std::string originText(const NanOrigin& o);

// "NaN search: origin not found (...); sentinel ..." for a search that did not find it.
std::string notFoundText(const NanSearch& n);

// The NaN searches whose result is not "found".
std::vector<const NanSearch*> searchesNotFound(const Report& report);

// "aten::log (3 calls), ..." over the ops whose `count` (nonfinite_propagated: NaN/Inf that came
// with their inputs; handled_overflow: a loss scaler handled it) is not zero; empty for none.
std::string opCountsText(const Report& report, uint64_t OpStats::*count);
// "op (reason: N calls), ..." over the ops' counts by reason (OpStats::declined: "check
// reason"; OpStats::not_checked: fumi's reason); empty when there are none.
std::string reasonsText(const Report& report, std::map<std::string, uint64_t> OpStats::*reasons);

// "aten::sum.dim_IntList (perturb.fumi_ratio: 12 calls), ...": the verdicts not raised that
// left outputs out as rounding noise of their terms (the metrics' noise), by op and metric.
std::string noiseText(const Report& report);

// An op's largest sensitivity: a metric of kind sensitivity (older files: a `worst` entry of a
// sensitivity check), valued by its maximum.
struct Sensitivity {
  const OpStats* op = nullptr;
  std::string key;
  const MetricSummary* metric = nullptr;  // null for a `worst` entry alone
  double max = 0;
};

// The `limit` most sensitive ops, most sensitive first.
std::vector<Sensitivity> mostSensitive(const Report& report, size_t limit);

// Whether an op was only counted: never checked, no violation.
bool onlyCounted(const OpStats& s);

}  // namespace fumi::report::detail
