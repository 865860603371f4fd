// test_report.cpp — the event reader and aggregation behind `fumi report` (cli/event_report.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "event_report.h"

namespace {

using fumi::report::aggregate;
using fumi::report::EventFile;
using fumi::report::OpStats;
using fumi::report::Report;

const OpStats* findOp(const Report& r, const std::string& op, const std::string& backend) {
  for (const OpStats& s : r.ops) {
    if (s.op == op && s.backend == backend) return &s;
  }
  return nullptr;
}

std::string startLine(int pid, const std::string& time = "2026-11-21T20:00:00Z") {
  return R"({"event":"start","pid":)" + std::to_string(pid) +
         R"(,"ppid":1,"time":")" + time +
         R"(","argv":["python3","x.py"],"policy":"<embedded default>","fumi_version":"0.1.0"})";
}

std::string violationLine(int pid, const std::string& op, int call_index, double value,
                          const std::string& time = "2026-11-21T20:00:01Z",
                          const std::string& first_frame = "#0 0x1 in main at /src/x.c:12") {
  return R"({"event":"violation","op":")" + op +
         R"(","backend":"blas","check":"highprec","metric":"normwise_rel","value":)" +
         std::to_string(value) + R"(,"tolerance":1e-5,"dtype":"f32","shape":{"A":[64,32]},)" +
         R"("call_index":)" + std::to_string(call_index) + R"(,"pid":)" + std::to_string(pid) +
         R"(,"rule":"gemms","extra":{"max_rel":1.0},"detail":"d","stack":[")" + first_frame +
         R"(","#1 0x2 in _start"],"time":")" + time + R"("})";
}

std::string checkLine(int pid, const std::string& op, int call_index, double value) {
  return R"({"event":"check","op":")" + op +
         R"(","backend":"blas","check":"highprec","metric":"normwise_rel","value":)" +
         std::to_string(value) + R"(,"tolerance":1e-5,"call_index":)" +
         std::to_string(call_index) + R"(,"pid":)" + std::to_string(pid) + "}";
}

// `ops_json` may be written over several source lines; the event itself is one line.
std::string summaryLine(int pid, std::string ops_json) {
  ops_json.erase(std::remove(ops_json.begin(), ops_json.end(), '\n'), ops_json.end());
  return R"({"event":"summary","pid":)" + std::to_string(pid) + R"(,"elapsed_s":1.5,"ops":)" +
         ops_json + "}";
}

std::string lines(const std::vector<std::string>& ls) {
  std::string s;
  for (const std::string& l : ls) s += l + "\n";
  return s;
}

// The event file of process `pid` that started and ended with a summary of `ops_json`.
EventFile summaryFile(int pid, const std::string& ops_json) {
  return EventFile{"out/events-" + std::to_string(pid) + ".jsonl",
                   lines({startLine(pid), summaryLine(pid, ops_json)})};
}

// The summary's per-check counts (ops[].checks): the calls each check skipped (could not judge,
// or over its share of the overhead budget), by reason, summed over processes, in the text report and its JSON.
TEST(Report, CallsAChecksDeclinedByReason) {
  const std::string checks = R"("checks":{"checksum":{"runs":5,"skipped":3,
    "skipped_unsupported":3,"violations":0,"check_s":0.1},"highprec":{"runs":8,"skipped":0,
    "violations":0,"check_s":0.2}})";
  EventFile a{"out/events-100.jsonl",
              lines({startLine(100), summaryLine(100, R"([{"op":"sgemm_","backend":"blas",
                "calls":8,"checked":8,"skipped":0,"violations":0,"worst":{},)" + checks + "}]")})};
  EventFile b{"out/events-200.jsonl",
              lines({startLine(200), summaryLine(200, R"([{"op":"sgemm_","backend":"blas",
                "calls":4,"checked":4,"skipped":0,"violations":0,"worst":{},
                "checks":{"checksum":{"runs":2,"skipped":2,"skipped_no_scratch":2},
                "highprec":{"runs":1,"skipped":7,"skipped_budget":7}}}])")})};
  const Report r = aggregate({a, b});
  const OpStats* s = findOp(r, "sgemm_", "blas");
  ASSERT_NE(s, nullptr);
  const std::map<std::string, uint64_t> want = {{"checksum unsupported", 3},
                                                {"checksum no_scratch", 2},
                                                {"highprec over budget", 7}};
  EXPECT_EQ(s->declined, want);
  const std::string text = fumi::report::formatText(r);
  EXPECT_NE(text.find("Calls a check skipped"), std::string::npos) << text;
  EXPECT_NE(text.find("sgemm_ (checksum no_scratch: 2 calls), sgemm_ (checksum unsupported: 3 "
                      "calls)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("sgemm_ (highprec over budget: 7 calls)"), std::string::npos) << text;
  EXPECT_EQ(fumi::report::toJson(r)["ops"][0]["declined"]["checksum unsupported"], 3);
  EXPECT_NE(fumi::report::formatHtml(r).find("sgemm_ (checksum no_scratch: 2 calls)"),
            std::string::npos);
  // The run's own summary says so in one line, summed over ops ("12 checked, 0 violations"
  // read as verified where a check could judge few of them: batch 17's f64 job).
  const std::string run = fumi::report::formatRunSummary(r, "out");
  EXPECT_NE(run.find("fumi: checks that did not run on checked calls: checksum no_scratch (2 "
                     "calls), checksum unsupported (3 calls), highprec over budget (7 calls)\n"),
            std::string::npos)
      << run;
  // None declined: no such line.
  EventFile c{"out/events-300.jsonl",
              lines({startLine(300), summaryLine(300, R"([{"op":"sgemm_","backend":"blas",
                "calls":1,"checked":1,"skipped":0,"violations":0,"worst":{}}])")})};
  EXPECT_EQ(fumi::report::formatText(aggregate({c})).find("Calls a check skipped"),
            std::string::npos);
  EXPECT_EQ(fumi::report::formatRunSummary(aggregate({c}), "out").find("did not run"),
            std::string::npos);
}

// Verdicts that left outputs out as rounding noise of their terms (the summary's metrics[].noise)
// are counted over processes and named by op and metric, with the largest figure of those that
// judged nothing (noise_max: the calls' own figures, kept out of the distribution; batch 16).
TEST(Report, OutputsLeftOutAsNoiseAreCounted) {
  const auto process = [](int pid, const std::string& noise) {
    return summaryFile(pid, R"([{"op":"aten::sum.dim_IntList","backend":"torch","calls":4,
      "checked":4,"skipped":0,"violations":0,"worst":{"perturb.fumi_ratio":3.5},"metrics":{
      "perturb.fumi_ratio":{"kind":"sensitivity","count":4,"violations":0,"max":3.5,
      "of_tolerance":0.2)" + noise + "}}}]");
  };
  const Report r = aggregate({process(100, R"(,"noise":2,"noise_max":54.7)"),
                              process(200, R"(,"noise":1,"noise_max":9)"), process(300, "")});
  const std::string text = fumi::report::formatText(r);
  EXPECT_NE(text.find("Outputs left out as rounding noise of their terms (not raised; "
                      "docs/detection.md): aten::sum.dim_IntList (perturb.fumi_ratio: 3 calls, "
                      "up to 54.7)"),
            std::string::npos) << text;
  const auto json = fumi::report::toJson(r)["ops"][0]["metrics"]["perturb.fumi_ratio"];
  EXPECT_EQ(json["noise"], 3);
  EXPECT_EQ(json["noise_max"], 54.7);
  EXPECT_NE(fumi::report::formatHtml(r).find(
                "aten::sum.dim_IntList (perturb.fumi_ratio: 3 calls, up to 54.7)"),
            std::string::npos);
  EXPECT_EQ(fumi::report::formatText(aggregate({process(300, "")})).find("rounding noise"),
            std::string::npos);  // none: no such line
}

// How close an op came to its tolerance (the summary's metrics[].of_tolerance: the largest value
// / tolerance over its calls; tolerances grow with the terms summed, so the worst value alone
// does not say): the largest over processes, shown beside the worst value in every format.
TEST(Report, WorstValueShowsItsShareOfTheTolerance) {
  const auto process = [](int pid, const std::string& of_tolerance) {
    return summaryFile(pid, R"([{"op":"aten::norm","backend":"torch","calls":4,"checked":4,
      "skipped":0,"violations":0,"worst":{"highprec.normwise_rel":5.5e-4},"metrics":{
      "highprec.normwise_rel":{"kind":"error","count":2,"violations":0,"max":5.5e-4)" +
                                    of_tolerance + "}}}]");
  };
  const Report r = aggregate({process(100, R"(,"of_tolerance":0.62)"),
                              process(200, R"(,"of_tolerance":0.4)"), process(300, "")});
  const OpStats* s = findOp(r, "aten::norm", "torch");
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->metrics.at("highprec.normwise_rel").of_tolerance);
  EXPECT_DOUBLE_EQ(*s->metrics.at("highprec.normwise_rel").of_tolerance, 0.62);
  const std::string text = fumi::report::formatText(r);
  EXPECT_NE(text.find("highprec.normwise_rel=0.00055 (62% of tol)"), std::string::npos) << text;
  EXPECT_DOUBLE_EQ(
      fumi::report::toJson(r)["ops"][0]["metrics"]["highprec.normwise_rel"]["of_tolerance"], 0.62);
  EXPECT_NE(fumi::report::formatHtml(r).find("(62% of tol)"), std::string::npos);
  // Files without it (older ones): the value alone.
  EXPECT_EQ(fumi::report::formatText(aggregate({process(400, "")})).find("of tol"),
            std::string::npos);
}

// A wider check's violation on terms that cancel says how far they cancel and how large the
// error is against their magnitudes; a cancellation finding, that the inputs lost the digits
// (batch 13: a dopri5 error estimate read as "the op computed its result badly").
TEST(Report, CancellationOfTheTermsIsNamed) {
  const auto file = [](const std::string& extra) {
    std::string v = violationLine(100, "sgemm_", 1, 0.5);
    v.replace(v.find(R"("extra":{"max_rel":1.0})"), 23, R"("extra":{"max_rel":1.0)" + extra + "}");
    return EventFile{"out/events-100.jsonl", lines({startLine(100), v})};
  };
  const std::string inputs =
      fumi::report::formatText(aggregate({file(R"(,"cancellation":1.5e6,"error_of_terms":3e-8)")}));
  // An error (the host found the op to blame): the figures alone.
  EXPECT_NE(inputs.find("its terms cancel 1.5e+06-fold; against their magnitudes the error is "
                        "3e-08\n"),
            std::string::npos) << inputs;
  const std::string small =
      fumi::report::formatText(aggregate({file(R"(,"cancellation":3,"error_of_terms":1e-7)")}));
  EXPECT_EQ(small.find("cancel"), std::string::npos);  // 3-fold: nothing to say
  // A cancellation verdict (kind cancellation, held to the bound) says so under its own heading,
  // against the error tolerance its event keeps; its data are listed apart from the errors.
  std::string c = violationLine(100, "sgemm_", 1, 0.3);
  c.replace(c.find(R"("metric":"normwise_rel")"), 23, R"("metric":"cancelled_rel")");
  c.replace(c.find(R"("tolerance":1e-5)"), 16, R"("tolerance":0.1,"kind":"cancellation")");
  c.replace(c.find(R"("extra":{"max_rel":1.0})"), 23,
            R"("extra":{"cancellation":1e7,"error_of_terms":3e-8,"error_tolerance":1e-4})");
  const Report r = aggregate({EventFile{"out/events-100.jsonl", lines({startLine(100), c})}});
  const std::string text = fumi::report::formatText(r);
  EXPECT_NE(text.find("Cancellation above its bound (results whose inputs cancel"),
            std::string::npos) << text;
  EXPECT_EQ(text.find("Errors (results"), std::string::npos) << text;
  EXPECT_NE(text.find("highprec.cancelled_rel = 0.3 > 0.1"), std::string::npos) << text;
  EXPECT_NE(text.find("the error is 3e-08 (the op kept its error tolerance 0.0001 against them: "
                      "the inputs lost the digits)"),
            std::string::npos) << text;
  const std::string html = fumi::report::formatHtml(r);
  EXPECT_NE(html.find("class=\"finding cancellation\""), std::string::npos);
  EXPECT_NE(html.find("its terms cancel 1e+07-fold"), std::string::npos);
}

// Violation events stop at report.violation_events per op and metric: the count of each kind
// comes from the summaries' metrics, which count every one (batch 13: the header read "1001
// error" of 16792), and from the events where a process left no metrics.
TEST(Report, ViolationsByKindCountedBeyondTheEventCap) {
  EventFile capped{"out/events-100.jsonl",
                   lines({startLine(100), violationLine(100, "sgemm_", 1, 0.5),
                          violationLine(100, "sgemm_", 2, 0.5),
                          summaryLine(100, R"([{"op":"sgemm_","backend":"blas","calls":9,
                            "checked":9,"skipped":0,"violations":7,"worst":{},"metrics":{
                            "highprec.normwise_rel":{"kind":"error","count":9,"violations":5},
                            "perturb.fumi_ratio":{"kind":"sensitivity","count":9,
                            "violations":2}}}])")})};
  EventFile older{"out/events-200.jsonl",
                  lines({startLine(200), violationLine(200, "sgemm_", 3, 0.5),
                         summaryLine(200, R"([{"op":"sgemm_","backend":"blas","calls":4,
                           "checked":4,"skipped":0,"violations":1,"worst":{}}])")})};
  const Report r = aggregate({capped});
  const OpStats* s = findOp(r, "sgemm_", "blas");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->by_kind.at("error").violations, 5u);
  EXPECT_EQ(s->by_kind.at("sensitivity").violations, 2u);
  EXPECT_NE(fumi::report::formatText(r).find("7 violations (5 error, 2 sensitivity)"),
            std::string::npos) << fumi::report::formatText(r);
  EXPECT_EQ(fumi::report::toJson(r)["totals"]["violations_by_kind"]["error"], 5);
  const Report o = aggregate({older});  // no metrics: its event counts
  EXPECT_EQ(findOp(o, "sgemm_", "blas")->by_kind.at("error").violations, 1u);
}

// Sampled calls skipped before any check (the overhead budget, an adapter's reason) are summed
// by reason over processes and named in every format.
TEST(Report, CallsNotCheckedByReason) {
  const auto process = [](int pid, const std::string& why) {
    return summaryFile(pid, R"([{"op":"aten::mm","backend":"torch","calls":9,"checked":1,
      "skipped":8,"violations":0,"worst":{},"not_checked":)" + why + "}]");
  };
  const std::string sparse = "sparse COO tensors (fumi reads strided ones)",
                    budget = "the overhead budget was spent (overhead_budget)";
  const auto counts = [](const std::string& a, int n, const std::string& b, int m) {
    return "{\"" + a + "\":" + std::to_string(n) + (b.empty() ? "" : ",\"" + b + "\":" +
                                                          std::to_string(m)) + "}";
  };
  const Report r = aggregate({process(100, counts(sparse, 6, budget, 2)),
                              process(200, counts(budget, 3, "", 0))});
  const OpStats* s = findOp(r, "aten::mm", "torch");
  ASSERT_NE(s, nullptr);
  const std::map<std::string, uint64_t> want = {{sparse, 6}, {budget, 5}};
  EXPECT_EQ(s->not_checked, want);
  const std::string text = fumi::report::formatText(r);
  EXPECT_NE(text.find("Sampled calls not checked (skipped before any check ran): aten::mm "
                      "(sparse COO tensors (fumi reads strided ones): 6 calls), aten::mm (the "
                      "overhead budget was spent (overhead_budget): 5 calls)"),
            std::string::npos)
      << text;
  EXPECT_EQ(fumi::report::toJson(r)["ops"][0]["not_checked"][sparse], 6);
  EXPECT_NE(fumi::report::formatHtml(r).find("the overhead budget was spent"), std::string::npos);
  EXPECT_EQ(fumi::report::formatText(aggregate({process(300, "{}")})).find("not checked ("),
            std::string::npos);
}

TEST(Report, AggregatesOpsAcrossTwoProcesses) {
  EventFile a{"out/events-100.jsonl",
              lines({startLine(100), violationLine(100, "sgemm_", 7, 0.5),
                     summaryLine(100, R"([{"op":"sgemm_","backend":"blas","calls":100,"checked":10,
                       "skipped":1,"violations":2,"worst":{"highprec.normwise_rel":0.5}},
                       {"op":"dgemm_","backend":"blas","calls":3,"checked":3,"skipped":0,
                       "violations":0,"worst":{}}])")})};
  EventFile b{"out/events-200.jsonl",
              lines({startLine(200),
                     summaryLine(200, R"([{"op":"sgemm_","backend":"blas","calls":50,"checked":5,
                       "skipped":2,"violations":1,"worst":{"highprec.normwise_rel":0.25}}])")})};
  Report r = aggregate({a, b});

  ASSERT_EQ(r.processes.size(), 2u);
  EXPECT_EQ(r.processes[0].pid, 100);
  EXPECT_EQ(r.processes[1].pid, 200);
  EXPECT_FALSE(r.processes[0].incomplete);
  EXPECT_FALSE(r.processes[1].incomplete);
  ASSERT_TRUE(r.processes[0].elapsed_s.has_value());
  EXPECT_DOUBLE_EQ(*r.processes[0].elapsed_s, 1.5);
  EXPECT_TRUE(r.malformed.empty());

  ASSERT_EQ(r.ops.size(), 2u);
  const OpStats* s = findOp(r, "sgemm_", "blas");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->calls, 150u);
  EXPECT_EQ(s->checked, 15u);
  EXPECT_EQ(s->skipped, 3u);
  // Counts come from the summaries; the violation event of pid 100 is not counted again.
  EXPECT_EQ(s->violations, 3u);
  EXPECT_FALSE(s->incomplete);
  // Most violations first.
  EXPECT_EQ(r.ops[0].op, "sgemm_");
  EXPECT_EQ(r.ops[1].op, "dgemm_");
  EXPECT_EQ(r.ops[1].calls, 3u);

  ASSERT_TRUE(s->first_violation.has_value());
  EXPECT_EQ(s->first_violation->pid, 100);
  EXPECT_EQ(s->first_violation->call_index, 7u);
  EXPECT_EQ(s->first_violation->rule, "gemms");
  ASSERT_EQ(s->first_violation->stack.size(), 2u);
  EXPECT_EQ(s->first_violation->stack[0], "#0 0x1 in main at /src/x.c:12");

  fumi::report::Totals t = r.totals();
  EXPECT_EQ(t.calls, 153u);
  EXPECT_EQ(t.violations, 3u);
}

TEST(Report, CheckedOpsBeforeOpsOnlyObserved) {
  EventFile a{"out/events-100.jsonl",
              lines({startLine(100),
                     summaryLine(100, R"([{"op":"aten::add_","backend":"torch","calls":900,
                       "checked":0,"skipped":0,"violations":0,"worst":{}},
                       {"op":"sgemm_","backend":"blas","calls":40,"checked":4,"skipped":0,
                       "violations":0,"worst":{}},
                       {"op":"aten::mm","backend":"torch","calls":20,"checked":0,"skipped":0,
                       "violations":0,"worst":{}}])")})};
  Report r = aggregate({a});
  ASSERT_EQ(r.ops.size(), 3u);
  EXPECT_EQ(r.ops[0].op, "sgemm_");  // checked, though fewer calls
  EXPECT_EQ(r.ops[1].op, "aten::add_");
  EXPECT_EQ(r.ops[2].op, "aten::mm");
}

TEST(Report, ProcessWithoutSummaryIsIncompleteAndCountsComeFromEvents) {
  EventFile complete{"events-10.jsonl",
                     lines({startLine(10),
                            summaryLine(10, R"([{"op":"sgemm_","backend":"blas","calls":20,
                              "checked":2,"skipped":0,"violations":0,"worst":{}}])")})};
  // Killed: a start, two checks of call 5 (one failed), a violation at call 9, no summary.
  EventFile killed{"events-11.jsonl",
                   lines({startLine(11), checkLine(11, "sgemm_", 5, 1e-7),
                          violationLine(11, "sgemm_", 5, 0.125),
                          violationLine(11, "sgemm_", 9, 0.0625)})};
  Report r = aggregate({complete, killed});

  ASSERT_EQ(r.processes.size(), 2u);
  EXPECT_FALSE(r.processes[0].incomplete);
  EXPECT_TRUE(r.processes[1].incomplete);
  EXPECT_EQ(r.processes[1].pid, 11);
  EXPECT_FALSE(r.processes[1].elapsed_s.has_value());
  EXPECT_EQ(r.incompleteCount(), 1u);

  const OpStats* s = findOp(r, "sgemm_", "blas");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->incomplete);
  EXPECT_EQ(s->violations, 2u);          // 0 from the summary + 2 violation events
  EXPECT_EQ(s->checked, 2u + 2u);        // distinct call indices 5 and 9
  EXPECT_EQ(s->calls, 20u + 10u);        // highest call index 9 -> at least 10 calls
  EXPECT_DOUBLE_EQ(s->worst.at("highprec.normwise_rel"), 0.125);

  nlohmann::json j = fumi::report::toJson(r);
  ASSERT_EQ(j["processes"].size(), 2u);
  EXPECT_EQ(j["processes"][1]["pid"], 11);
  EXPECT_EQ(j["processes"][1]["incomplete"], true);
  EXPECT_EQ(j["processes"][0]["incomplete"], false);
  EXPECT_EQ(j["ops"][0]["incomplete"], true);
}

TEST(Report, MalformedLineIsReportedWithItsLineNumberAndSkipped) {
  EventFile f{"dir/events-5.jsonl",
              lines({startLine(5),
                     R"({"event":"violation","op":"sgemm_",)",  // line 2: truncated JSON
                     "",                                         // line 3: blank, ignored
                     R"({"event":"summary","pid":5,"ops":[{"op":"sgemm_","calls":"many"}]})",
                     R"([1,2,3])",                               // line 5: not an object
                     R"({"op":"sgemm_"})",                       // line 6: no event
                     summaryLine(5, R"([{"op":"sgemm_","backend":"blas","calls":4,"checked":1,
                       "skipped":0,"violations":0,"worst":{}}])")})};
  Report r = aggregate({f});

  ASSERT_EQ(r.malformed.size(), 4u);
  EXPECT_EQ(r.malformed[0].file, "dir/events-5.jsonl");
  EXPECT_EQ(r.malformed[0].line, 2);
  EXPECT_EQ(r.malformed[1].line, 4);
  EXPECT_NE(r.malformed[1].message.find("calls"), std::string::npos) << r.malformed[1].message;
  EXPECT_EQ(r.malformed[2].line, 5);
  EXPECT_EQ(r.malformed[3].line, 6);
  EXPECT_EQ(r.malformed[0].str().rfind("dir/events-5.jsonl:2: ", 0), 0u) << r.malformed[0].str();

  // The rest of the file is still used; the bad summary on line 4 contributed nothing.
  ASSERT_EQ(r.processes.size(), 1u);
  EXPECT_FALSE(r.processes[0].incomplete);
  const OpStats* s = findOp(r, "sgemm_", "blas");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->calls, 4u);
  EXPECT_EQ(s->violations, 0u);

  nlohmann::json j = fumi::report::toJson(r);
  ASSERT_EQ(j["errors"].size(), 4u);
  EXPECT_EQ(j["errors"][0]["kind"], "malformed");
  EXPECT_EQ(j["errors"][0]["line"], 2);
}

TEST(Report, UnknownEventsAndFieldsAreIgnored) {
  EventFile f{"events-7.jsonl",
              lines({R"({"event":"start","pid":7,"argv":["a"],"future_field":{"x":[1,2]}})",
                     R"({"event":"heartbeat","pid":"not-a-number","op":42})",
                     R"({"event":"violation","op":"sgemm_","backend":"blas","check":"perturb",)"
                     R"("metric":"fumi_ratio","value":0.01,"call_index":0,"pid":7,"new":true})",
                     R"({"event":"memory","calls":999})",
                     summaryLine(7, R"([{"op":"sgemm_","backend":"blas","calls":1,"checked":1,
                       "skipped":0,"violations":1,"worst":{"perturb.fumi_ratio":0.01},
                       "future":"yes"}])")})};
  Report r = aggregate({f});

  EXPECT_TRUE(r.malformed.empty()) << r.malformed.front().str();
  EXPECT_TRUE(r.errors.empty());
  ASSERT_EQ(r.processes.size(), 1u);
  ASSERT_EQ(r.ops.size(), 1u);
  EXPECT_EQ(r.ops[0].calls, 1u);
  EXPECT_EQ(r.ops[0].violations, 1u);
  ASSERT_EQ(r.processes[0].argv.size(), 1u);
  EXPECT_EQ(r.processes[0].argv[0], "a");
}

TEST(Report, WorstIsTheMaximumOverProcessesAndEvents) {
  EventFile a{"events-1.jsonl",
              lines({startLine(1),
                     summaryLine(1, R"([{"op":"sgemm_","backend":"blas","calls":1,"checked":1,
                       "skipped":0,"violations":1,"worst":{"highprec.normwise_rel":0.5,
                       "perturb.fumi_ratio":0.01}}])")})};
  EventFile b{"events-2.jsonl",
              lines({startLine(2),
                     summaryLine(2, R"([{"op":"sgemm_","backend":"blas","calls":1,"checked":1,
                       "skipped":0,"violations":1,"worst":{"highprec.normwise_rel":0.75,
                       "perturb.fumi_ratio":0.001}}])")})};
  // A process without summary whose event value exceeds both summaries for fumi_ratio.
  EventFile c{"events-3.jsonl",
              lines({startLine(3),
                     R"({"event":"violation","op":"sgemm_","backend":"blas","check":"perturb",)"
                     R"("metric":"fumi_ratio","value":0.02,"call_index":0,"pid":3})"})};
  Report r = aggregate({a, b, c});
  const OpStats* s = findOp(r, "sgemm_", "blas");
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(s->worst.size(), 2u);
  EXPECT_DOUBLE_EQ(s->worst.at("highprec.normwise_rel"), 0.75);
  EXPECT_DOUBLE_EQ(s->worst.at("perturb.fumi_ratio"), 0.02);

  // Order of the files does not matter, and NaN is worse than any number.
  EventFile d{"events-4.jsonl",
              lines({R"({"event":"check","op":"sgemm_","backend":"blas","check":"highprec",)"
                     R"("metric":"normwise_rel","value":"nan","call_index":1,"pid":4})"})};
  Report r2 = aggregate({d, c, b, a});
  const OpStats* s2 = findOp(r2, "sgemm_", "blas");
  ASSERT_NE(s2, nullptr);
  EXPECT_TRUE(std::isnan(s2->worst.at("highprec.normwise_rel")));
  EXPECT_DOUBLE_EQ(s2->worst.at("perturb.fumi_ratio"), 0.02);
  EXPECT_EQ(fumi::report::toJson(r2)["ops"][0]["worst"]["highprec.normwise_rel"], "nan");
}

TEST(Report, FirstViolationIsTheEarliestByTime) {
  EventFile a{"events-1.jsonl",
              lines({startLine(1), violationLine(1, "sgemm_", 4, 0.5, "2026-11-21T20:00:09Z",
                                                 "#0 late")})};
  EventFile b{"events-2.jsonl",
              lines({startLine(2), violationLine(2, "sgemm_", 8, 0.5, "2026-11-21T20:00:03Z",
                                                 "#0 early")})};
  Report r = aggregate({a, b});
  const OpStats* s = findOp(r, "sgemm_", "blas");
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->first_violation.has_value());
  EXPECT_EQ(s->first_violation->pid, 2);
  ASSERT_FALSE(s->first_violation->stack.empty());
  EXPECT_EQ(s->first_violation->stack[0], "#0 early");
  EXPECT_EQ(s->first_violation->shape["A"][0], 64);
}

TEST(Report, SecondStartInOneFileIsANewProcess) {
  // exec() keeps the pid: the first image never wrote its summary.
  EventFile f{"events-9.jsonl",
              lines({startLine(9), violationLine(9, "sgemm_", 0, 0.5), startLine(9),
                     summaryLine(9, R"([{"op":"dgemm_","backend":"blas","calls":2,"checked":2,
                       "skipped":0,"violations":0,"worst":{}}])")})};
  Report r = aggregate({f});
  ASSERT_EQ(r.processes.size(), 2u);
  EXPECT_TRUE(r.processes[0].incomplete);
  EXPECT_FALSE(r.processes[1].incomplete);
  const OpStats* s = findOp(r, "sgemm_", "blas");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->violations, 1u);
  EXPECT_TRUE(s->incomplete);
}

TEST(Report, ErrorEventsAreCollected) {
  EventFile f{"events-3.jsonl",
              lines({startLine(3),
                     R"({"event":"error","pid":3,"where":"plugin highprec","location":"p.yaml:7:9",)"
                     R"("message":"bad tolerance"})"})};
  Report r = aggregate({f});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].where, "plugin highprec");
  EXPECT_EQ(r.errors[0].location, "p.yaml:7:9");
  EXPECT_EQ(r.errors[0].message, "bad tolerance");
  EXPECT_EQ(r.errors[0].line, 2);
  nlohmann::json j = fumi::report::toJson(r);
  ASSERT_EQ(j["errors"].size(), 1u);
  EXPECT_EQ(j["errors"][0]["kind"], "event");
}

TEST(Report, PidFromFileName) {
  EXPECT_EQ(fumi::report::pidFromFileName("/a/b/events-1234.jsonl"), 1234);
  EXPECT_FALSE(fumi::report::pidFromFileName("events-.jsonl").has_value());
  EXPECT_FALSE(fumi::report::pidFromFileName("events-12x.jsonl").has_value());
  EXPECT_FALSE(fumi::report::pidFromFileName("log-12.jsonl").has_value());
}

TEST(Report, ReadDirectorySortsFilesByPidAndIgnoresOtherFiles) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("fumi_test_report_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
  };
  write("events-100.jsonl", lines({startLine(100)}));
  write("events-20.jsonl", lines({startLine(20)}));
  write("events-3.jsonl", lines({startLine(3)}));
  write("fumi.log", "not events\n");
  write("events-4.json", "{not read\n");

  std::vector<std::string> files = fumi::report::findEventFiles(dir.string());
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(fs::path(files[0]).filename(), "events-3.jsonl");
  EXPECT_EQ(fs::path(files[1]).filename(), "events-20.jsonl");
  EXPECT_EQ(fs::path(files[2]).filename(), "events-100.jsonl");

  size_t n = 0;
  Report r = fumi::report::readDirectory(dir.string(), &n);
  EXPECT_EQ(n, 3u);
  ASSERT_EQ(r.processes.size(), 3u);
  EXPECT_EQ(r.processes[0].pid, 3);
  EXPECT_EQ(r.processes[2].pid, 100);
  EXPECT_TRUE(r.malformed.empty());

  fs::remove_all(dir);
  size_t none = 99;
  fumi::report::readDirectory(dir.string(), &none);
  EXPECT_EQ(none, 0u);
}

TEST(Report, TextRenderingShowsTableAndFirstFrames) {
  EventFile f{"events-1.jsonl",
              lines({startLine(1), violationLine(1, "sgemm_", 7, 0.5),
                     summaryLine(1, R"([{"op":"sgemm_","backend":"blas","calls":100,"checked":10,
                       "skipped":0,"violations":2,"worst":{"highprec.normwise_rel":0.5}}])")})};
  Report r = aggregate({f});
  std::string text = fumi::report::formatText(r, {/*stack_frames=*/1});
  EXPECT_NE(text.find("VIOLATIONS"), std::string::npos) << text;
  EXPECT_NE(text.find("highprec.normwise_rel=0.5"), std::string::npos) << text;
  EXPECT_NE(text.find("#0 0x1 in main at /src/x.c:12"), std::string::npos) << text;
  EXPECT_EQ(text.find("#1 0x2 in _start"), std::string::npos) << text;  // only 1 frame asked

  std::string summary = fumi::report::formatRunSummary(r, "/tmp/out");
  EXPECT_NE(summary.find("1 process,"), std::string::npos) << summary;
  EXPECT_NE(summary.find("100 calls intercepted"), std::string::npos) << summary;
  EXPECT_NE(summary.find("2 violations"), std::string::npos) << summary;
  EXPECT_NE(summary.find("/tmp/out"), std::string::npos) << summary;
}

TEST(Report, KernelsOfAViolationAreKeptAndShown) {
  std::string v = violationLine(1, "cublasSgemm_v2", 3, 0.5);
  v.insert(v.size() - 1, R"(,"kernels":[{"name":"sm90_gemm_tf32","duration_ns":12345},)"
                         R"({"name":"splitk_reduce"}])");
  EventFile f{"events-1.jsonl", lines({startLine(1), v})};
  Report r = aggregate({f});
  EXPECT_TRUE(r.malformed.empty());
  const OpStats* s = findOp(r, "cublasSgemm_v2", "blas");
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->first_violation.has_value());
  ASSERT_EQ(s->first_violation->kernels.size(), 2u);
  EXPECT_EQ(s->first_violation->kernels[1]["name"], "splitk_reduce");
  const std::string text = fumi::report::formatText(r, {/*stack_frames=*/1});
  EXPECT_NE(text.find("kernels: sm90_gemm_tf32 (12.35 us), splitk_reduce\n"), std::string::npos)
      << text;
  const nlohmann::json j = fumi::report::toJson(r);
  EXPECT_NE(j.dump().find(R"("kernels":[{"duration_ns":12345,"name":"sm90_gemm_tf32"})"),
            std::string::npos)
      << j.dump();

  std::string bad = violationLine(1, "cublasSgemm_v2", 4, 0.5);
  bad.insert(bad.size() - 1, R"(,"kernels":"k1")");
  Report r2 = aggregate({EventFile{"events-1.jsonl", lines({startLine(1), bad})}});
  ASSERT_EQ(r2.malformed.size(), 1u);
  EXPECT_NE(r2.malformed[0].message.find("kernels"), std::string::npos) << r2.malformed[0].str();
}

// ---------------------------------------------------------------------------------------------
// Kinds of finding, NaN origins, metrics, and the text for people (findings first).

// A violation of `check` with an optional "kind" (omitted when empty) and python stack.
std::string kindViolation(int pid, const std::string& op, const std::string& check,
                          const std::string& kind, double value, int call_index,
                          const std::string& time, const std::string& py_frame) {
  std::string k = kind.empty() ? "" : R"("kind":")" + kind + R"(",)";
  return R"({"event":"violation","op":")" + op + R"(","backend":"torch","check":")" + check +
         R"(",)" + k + R"("metric":"m","value":)" + std::to_string(value) +
         R"(,"tolerance":0.001,"call_index":)" + std::to_string(call_index) + R"(,"pid":)" +
         std::to_string(pid) + R"(,"python_stack":[")" + py_frame +
         R"("],"stack":["#0 native"],"time":")" + time + R"("})";
}

std::string originLine(int pid) {
  return R"({"event":"violation","op":"aten::log","backend":"torch","check":"nan_inf",)"
         R"("kind":"error","metric":"nonfinite","value":3,"tolerance":0,"detail":"appeared",)"
         R"("origin":true,"sentinel":{"op":"aten::mse_loss","call_index":14},"call_index":12,)"
         R"("extra":{"nan":3,"inf":0},"pid":)" +
         std::to_string(pid) +
         R"(,"python_stack":["/usr/lib/python3/dist-packages/torch/nn/functional.py:9 in f",)"
         R"("/src/train.py:42 in loss"],"stack":["#0 at::log"],"time":"2026-11-21T20:00:09Z"})";
}

std::string opEntry(const std::string& op, int calls, int checked, int violations,
                    const std::string& more = "") {
  return R"({"op":")" + op + R"(","backend":"torch","calls":)" + std::to_string(calls) +
         R"(,"checked":)" + std::to_string(checked) + R"(,"skipped":0,"violations":)" +
         std::to_string(violations) + R"(,"worst":{})" + more + "}";
}

std::string sensMetric(double median, double p99, double max, int count = 10, int violations = 0) {
  return R"(,"metrics":{"perturb.fumi_ratio":{"kind":"sensitivity","count":)" +
         std::to_string(count) + R"(,"median":)" + std::to_string(median) + R"(,"p99":)" +
         std::to_string(p99) + R"(,"max":)" + std::to_string(max) + R"(,"violations":)" +
         std::to_string(violations) + "}}";
}

size_t at(const std::string& text, const std::string& what) {
  size_t p = text.find(what);
  EXPECT_NE(p, std::string::npos) << "no '" << what << "' in:\n" << text;
  return p;
}

TEST(ReportFindings, OriginFirstThenErrorsThenSensitivityThenTables) {
  // The sensitivity violation is the earliest event and its op has the most violations: the
  // order of the findings comes from their kind, not from time or counts.
  EventFile f{
      "events-1.jsonl",
      lines({startLine(1),
             kindViolation(1, "aten::bmm", "perturb", "sensitivity", 0.5, 1, "2026-11-21T20:00:01Z",
                           "/src/model.py:7 in attn"),
             kindViolation(1, "aten::bmm", "perturb", "sensitivity", 0.6, 2, "2026-11-21T20:00:02Z",
                           "/src/model.py:7 in attn"),
             kindViolation(1, "aten::addmm", "highprec", "error", 0.01, 3, "2026-11-21T20:00:03Z",
                           "/src/model.py:30 in forward"),
             originLine(1),
             summaryLine(1, "[" + opEntry("aten::bmm", 10, 5, 2, sensMetric(0.01, 0.5, 0.6)) + "," +
                                opEntry("aten::addmm", 10, 5, 1) + "," +
                                opEntry("aten::log", 10, 0, 1) + "]")})};
  Report r = aggregate({f});
  ASSERT_TRUE(r.malformed.empty()) << r.malformed[0].str();
  ASSERT_EQ(r.nan_origins.size(), 1u);
  EXPECT_EQ(r.nan_origins[0].op, "aten::log");
  EXPECT_EQ(r.nan_origins[0].violation.sentinel["op"], "aten::mse_loss");

  const std::string text = fumi::report::formatText(r);
  EXPECT_EQ(
      text.rfind("1 process, 30 calls, 10 checked, 4 violations (2 error, 2 sensitivity)\n", 0), 0u)
      << text;
  // The Python line of the origin skips torch's own frame.
  const size_t origin = at(text,
                           "NaN/Inf origin: aten::log (torch) pid 1, call 12 at "
                           "/src/train.py:42 in loss: appeared (3 NaN, 0 Inf); "
                           "sentinel aten::mse_loss #14\n");
  const size_t errors = at(text, "Errors (results off by more than their tolerance):");
  const size_t addmm = at(text,
                          "aten::addmm (torch): 1 violation; first: pid 1, call 3, "
                          "highprec.m = 0.01 > 0.001");
  const size_t sens = at(text, "Sensitivity above its bound");
  const size_t bmm = at(text,
                        "aten::bmm (torch): 2 violations; first: pid 1, call 1, "
                        "perturb.m = 0.5 > 0.001");
  const size_t most = at(text, "Most sensitive ops (data, not alarms");
  const size_t table = at(text, "Checked ops:");
  EXPECT_LT(origin, errors);
  EXPECT_LT(errors, addmm);
  EXPECT_LT(addmm, sens);
  EXPECT_LT(sens, bmm);
  EXPECT_LT(bmm, most);
  EXPECT_LT(most, table);
  // A violation's stack is its Python stack when it has one; the origin's is not repeated.
  EXPECT_NE(text.find("        /src/model.py:30 in forward\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("#0 native"), std::string::npos) << text;
  EXPECT_NE(text.find("(the NaN/Inf origin above)"), std::string::npos) << text;
  EXPECT_EQ(text.find("no violations"), std::string::npos) << text;

  const std::string run = fumi::report::formatRunSummary(r, "/out");
  EXPECT_NE(run.find("fumi: NaN/Inf origin: aten::log (torch) pid 1, call 12 at /src/train.py:42"),
            std::string::npos)
      << run;
}

// An origin found looking back from its sentinel: no stacks of its own; the ops it went
// through; the sentinel's line; and the stacks of its op's later call (a nan_origin_stack of the
// same process and op) once the op made them again, while another process's are not its.
TEST(ReportFindings, OriginFoundLookingBackTakesTheStacksOfItsNextCall) {
  const std::string origin =
      R"({"event":"violation","op":"aten::sqrt","backend":"torch","check":"nan_inf",)"
      R"("kind":"error","metric":"nonfinite","value":32,"tolerance":0,"detail":"appeared",)"
      R"("origin":true,"looked_back":true,"through":["aten::var.dim #1","aten::sub.Tensor #2"],)"
      R"("sentinel":{"op":"aten::nll_loss_forward","call_index":1,)"
      R"("python_stack":["/usr/lib/python3/dist-packages/torch/nn/functional.py:9 in f",)"
      R"("/src/train.py:66 in step"]},"call_index":1,"extra":{"nan":32,"inf":0},"pid":)";
  const auto stacks = [](int pid) {
    return R"({"event":"nan_origin_stack","op":"aten::sqrt","backend":"torch","call_index":5,)"
           R"("origin_call_index":1,"pid":)" +
           std::to_string(pid) +
           R"(,"python_stack":["/src/model.py:12 in forward"],"stack":["#0 at::sqrt"]})";
  };
  const auto report = [&](const std::vector<std::string>& more) {
    std::vector<std::string> all = {startLine(1), origin + "1}"};
    all.insert(all.end(), more.begin(), more.end());
    all.push_back(summaryLine(1, "[" + opEntry("aten::sqrt", 4, 0, 1) + "]"));
    Report r = aggregate({EventFile{"events-1.jsonl", lines(all)}});
    EXPECT_TRUE(r.malformed.empty()) << r.malformed[0].str();
    return r;
  };
  const auto text = [&](const std::vector<std::string>& more) {
    return fumi::report::formatText(report(more));
  };
  const std::string alone = text({stacks(2)});
  at(alone,
     "NaN/Inf origin: aten::sqrt (torch) pid 1, call 1: appeared (32 NaN, 0 Inf); found looking "
     "back from the sentinel (the op had returned: no stack of its own): made from finite inputs "
     "by aten::var.dim #1, aten::sub.Tensor #2, then this call (the results in between no longer "
     "held: one of them made them); sentinel aten::nll_loss_forward #1 at /src/train.py:66 in "
     "step\n");
  const std::string again = text({stacks(1)});
  at(again,
     "NaN/Inf origin: aten::sqrt (torch) pid 1, call 1 at /src/model.py:12 in forward: appeared "
     "(32 NaN, 0 Inf); found looking back from the sentinel (its stacks are its call 5's, which "
     "made them again): made from finite inputs by aten::var.dim #1");
  // The JSON form says the same (it had neither `looked_back` nor `through`).
  const nlohmann::json found = fumi::report::toJson(report({stacks(1)}))["nan_origins"][0];
  EXPECT_EQ(found["looked_back"], true);
  EXPECT_EQ(found["through"], nlohmann::json({"aten::var.dim #1", "aten::sub.Tensor #2"}));
  EXPECT_EQ(found["stack_call_index"], 5);
  EXPECT_EQ(found["python_stack"], nlohmann::json({"/src/model.py:12 in forward"}));
  EXPECT_TRUE(fumi::report::toJson(report({stacks(2)}))["nan_origins"][0]["stack_call_index"]
                  .is_null());
}

// An origin found looking back whose Python frames were kept when it ran (its Python place,
// ABI 19): its line is those frames', said as such, with no native stack.
TEST(ReportFindings, OriginFoundLookingBackShowsTheFramesKeptWhenItRan) {
  const std::string origin =
      R"({"event":"violation","op":"aten::log","backend":"torch","check":"nan_inf",)"
      R"("kind":"error","metric":"nonfinite","value":4,"tolerance":0,"detail":"appeared",)"
      R"("origin":true,"looked_back":true,"through":[],"phase":"forward",)"
      R"("python_stack":["/src/model.py:40 in forward","/src/train.py:70 in step"],)"
      R"("sentinel":{"op":"aten::sum","call_index":3,"python_stack":["/src/train.py:71 in step"]},)"
      R"("call_index":7,"extra":{"nan":0,"inf":4},"pid":1})";
  const Report r = aggregate({EventFile{
      "events-1.jsonl",
      lines({startLine(1), origin, summaryLine(1, "[" + opEntry("aten::log", 8, 0, 1) + "]")})}});
  ASSERT_TRUE(r.malformed.empty()) << r.malformed[0].str();
  at(fumi::report::formatText(r),
     "NaN/Inf origin: aten::log (torch) pid 1, call 7 at /src/model.py:40 in forward: appeared "
     "(0 NaN, 4 Inf); found looking back from the sentinel (the op had returned: its Python "
     "frames kept when it ran, no native stack); sentinel aten::sum #3 at /src/train.py:71 in "
     "step\n");
}

// A looked-back origin whose chain went through ops whose results were gone names the ops that
// most likely made the values: for values from finite ones, those with a restricted domain or
// that overflow (SSD's box encoding: div, then log of a zero-width box, then the copies; the
// headline op, a subtraction, only held them); for NaN from Inf, the first op that computes with
// the Inf after the fill that put it there (a masked attention row's softmax, not the cat that
// held its result), or without a fill the first that computes after the op that got it (an
// embedding passing on a row holding +inf, then the weight gradient's matrix product: batch 20's
// LSTM). Where the event says how near each ran (`through_hops`), the nearest come first: a
// gradient's 0 * inf in a `mul` reads an exp's overflow, the divisions before it further back;
// where it says in which phase (`through_phases`), a backward holder's forward ops come first.
TEST(ReportFindings, OriginThroughGoneResultsNamesItsLikelyMaker) {
  const auto text = [](const std::string& op, const std::string& detail,
                       const std::string& through, const std::string& hops = "",
                       const std::string& phases = "") {
    const std::string origin =
        R"({"event":"violation","op":")" + op + R"(","backend":"torch","check":"nan_inf",)" +
        R"("kind":"error","metric":"nonfinite","value":1,"tolerance":0,"detail":")" + detail +
        R"(","origin":true,"looked_back":true,"through":)" + through +
        (hops.empty() ? "" : R"(,"through_hops":)" + hops) +
        (phases.empty() ? "" : R"(,"through_phases":)" + phases + R"(,"phase":"backward")") +
        R"(,"sentinel":{"op":"aten::sum","call_index":1},"call_index":1,)"
        R"("extra":{"nan":1,"inf":0},"pid":1})";
    Report r = aggregate({EventFile{
        "events-1.jsonl",
        lines({startLine(1), origin, summaryLine(1, "[" + opEntry(op, 4, 0, 1) + "]")})}});
    EXPECT_TRUE(r.malformed.empty()) << r.malformed[0].str();
    return fumi::report::formatText(r);
  };
  at(text("aten::sub.Tensor", "appeared",
          R"(["aten::div.Tensor #3","aten::log #2","aten::mul.Tensor #3","aten::copy_ #16"])"),
     "then this call (the results in between no longer held: one of them made them; likely one "
     "of aten::log #2, aten::div.Tensor #3, whose domains or ranges allow it, likeliest first); "
     "sentinel");
  at(text("aten::sub.Tensor", "appeared", R"(["aten::log #2","aten::copy_ #16"])"),
     "one of them made them; likely aten::log #2, whose domain or range allows it)");
  at(text("aten::cat", "nan_from_inf",
          R"(["aten::masked_fill.Scalar #0","aten::softmax.int #4","aten::mul.Tensor #36"])"),
     "NaN made from Inf by aten::masked_fill.Scalar #0, aten::softmax.int #4, aten::mul.Tensor "
     "#36, then this call (the results in between no longer held: one of them made them; likely "
     "aten::softmax.int #4, the first to compute with the Inf)");
  at(text("aten::add_.Tensor", "nan_from_inf",
          R"(["aten::embedding #2","aten::clone #7","aten::_unsafe_view #8","aten::mm #73"])"),
     "NaN made from Inf by aten::embedding #2, aten::clone #7, aten::_unsafe_view #8, aten::mm "
     "#73, then this call (the results in between no longer held: one of them made them; likely "
     "aten::mm #73, the first to compute with the Inf)");
  const std::string gates = R"(["aten::div.Tensor #12","aten::exp #2","aten::reciprocal #2",)"
                            R"("aten::div.Scalar #2","aten::mul.Tensor #25"])";
  const std::string likeliest = "then this call (the results in between no longer held: one of "
                                "them made them; likely one of aten::exp #2, aten::div.Tensor "
                                "#12, aten::div.Scalar #2, aten::reciprocal #2, whose domains or "
                                "ranges allow it, likeliest first); sentinel";  // as near: the later
  at(text("aten::mul.Tensor", "appeared", gates, "[2,1,3,3,1]"), likeliest);
  // as near: the exp before the reciprocal, which needs an exact 0 to overflow
  at(text("aten::mul.Tensor", "appeared", gates, "[2,1,1,3,1]"),
     "likely one of aten::exp #2, aten::reciprocal #2, aten::div.Tensor #12, aten::div.Scalar #2, "
     "whose domains or ranges allow it, likeliest first); sentinel");
  // A normalisation's batch statistics overflow (a BN-LSTM's input at FLT_MAX, batch 24): the
  // batch norms, not the gates' sum after them; of the two as near, the later (the input's).
  at(text("aten::sigmoid", "appeared",
          R"(["aten::batch_norm #7191","aten::batch_norm #7192","aten::add.Tensor #29355"])",
          "[2,2,1]"),
     "likely one of aten::batch_norm #7192, aten::batch_norm #7191, whose domains or ranges "
     "allow it, likeliest first); sentinel");
  // written before the hops were: all as near, in the order they ran
  at(text("aten::mul.Tensor", "appeared", gates),
     "likely one of aten::exp #2, aten::div.Tensor #12, aten::reciprocal #2, aten::div.Scalar #2, "
     "whose domains or ranges allow it, likeliest first); sentinel");
  // A backward holder: the forward ops before the backward ones, however near (batch 21's
  // HGCN: a forward exp's overflow, its gradient's 0 * inf divided by a gradient's division).
  const std::string grad = R"(["aten::exp #1","aten::mul.Tensor #5","aten::div.Tensor #7"])";
  at(text("aten::mul.Tensor", "appeared", grad, "[4,2,1]",
          R"(["forward","backward","backward"])"),
     "likely one of aten::exp #1, aten::div.Tensor #7, whose domains or ranges allow it, "
     "likeliest first); sentinel");
  // ... but a forward normalisation after the backward ops, however near: its forward pass ran
  // on values no sentinel saw non-finite (a DANN-like feature extractor's batch norm, the
  // gradient reversal's division by a zero norm behind it).
  at(text("aten::mul.Tensor", "appeared",
          R"(["aten::batch_norm #1","aten::div.Tensor #11","aten::native_batch_norm_backward #1"])",
          "[2,5,1]", R"(["forward","backward","backward"])"),
     "likely one of aten::div.Tensor #11, aten::batch_norm #1, whose domains or ranges allow it, "
     "likeliest first); sentinel");
  // without the phases: the division, though it needs an exact 0 (two ops further)
  at(text("aten::mul.Tensor", "appeared", grad, "[4,2,1]"),
     "likely one of aten::div.Tensor #7, aten::exp #1, whose domains or ranges allow it, "
     "likeliest first); sentinel");
  // as near, counting that: the exp (batch 23's conformer: a silent spectrum's log, then the
  // features' division by 3 holding its -inf)
  at(text("aten::div.Tensor", "appeared", R"(["aten::log #6","aten::add.Tensor #421"])", "[2,1]"),
     "likely one of aten::log #6, aten::div.Tensor (this call), whose domains or ranges allow "
     "it, likeliest first); sentinel");
  // A holder that makes no NaN of finite values, no op of restricted domain before it: the ops
  // that compute, nearest first (batch 23's knowledge-graph score: products overflowing, their
  // sum NaN, held by a `neg`).
  at(text("aten::neg", "appeared",
          R"(["aten::mul.Tensor #212","aten::mul.Tensor #213","aten::add.Tensor #85",)"
          R"("aten::sum.dim_IntList #32","aten::view #9"])",
          "[3,3,2,1,1]"),
     "likely one of aten::sum.dim_IntList #32, aten::add.Tensor #85, aten::mul.Tensor #213, "
     "aten::mul.Tensor #212, that compute (an overflow), likeliest first); sentinel");
  // The op itself the only candidate: nothing more to say.
  const std::string alone = text("aten::sqrt", "appeared", R"(["aten::var.dim #1"])");
  at(alone, "then this call (the results in between no longer held: one of them made them); ");
  EXPECT_EQ(alone.find("likely"), std::string::npos) << alone;
}

// A looked-back origin that is the likeliest maker of values another op held (its results gone)
// says which op held them and what they came through (batch 22: a gradient's `mul` holding the
// NaN of a forward exp's overflow, 0 * inf).
TEST(ReportFindings, OriginHeldByAnotherOpNamesTheHolder) {
  const std::string origin =
      R"({"event":"violation","op":"aten::exp","backend":"torch","check":"nan_inf",)"
      R"("kind":"error","metric":"nonfinite","value":64,"tolerance":0,"detail":"appeared",)"
      R"("origin":true,"looked_back":true,"phase":"forward","call_index":2,)"
      R"("through":["aten::div.Tensor #12","aten::exp #2","aten::reciprocal #2","aten::mul.Tensor #25"],)"
      R"("through_hops":[2,1,3,1],"held_by":{"call":"aten::mul.Tensor #26","phase":"backward"},)"
      R"("sentinel":{"op":"aten::sum","call_index":7},"extra":{"nan":64,"inf":0},"pid":1})";
  Report r = aggregate({EventFile{
      "events-1.jsonl",
      lines({startLine(1), origin, summaryLine(1, "[" + opEntry("aten::exp", 4, 0, 1) + "]")})}});
  ASSERT_TRUE(r.malformed.empty()) << r.malformed[0].str();
  at(fumi::report::formatText(r),
     "NaN/Inf origin: aten::exp (torch) pid 1, call 2: appeared (aten::mul.Tensor #26 in the "
     "backward pass held 64 NaN, 0 Inf); found looking back from the sentinel (the op "
     "had returned: no stack of its own): the holder got them through aten::div.Tensor #12, "
     "aten::exp #2, aten::reciprocal #2, aten::mul.Tensor #25, whose results were gone; this one "
     "the likeliest whose domain or range allows it, in its forward call or in its gradient "
     "(also possible: aten::div.Tensor #12, aten::reciprocal #2); sentinel aten::sum #7");
  const auto json = fumi::report::toJson(r)["nan_origins"][0];
  EXPECT_EQ(json["held_by"]["call"], "aten::mul.Tensor #26");
  EXPECT_EQ(json["through_hops"], nlohmann::json({2, 1, 3, 1}));
}

// A holder holding +Inf (batch 35's Cox loss: an exp's overflow through a mean into a log): the
// other possible makers are ranked as libfumi ranked them, those that make +Inf first; a log
// never does.
TEST(ReportFindings, HeldPositiveInfRanksTheMakersThatMakeIt) {
  const auto text = [](bool positive_inf) {
    const std::string origin =
        std::string(R"({"event":"violation","op":"aten::exp","backend":"torch","check":"nan_inf",)"
                    R"("kind":"error","metric":"nonfinite","value":3,"tolerance":0,)"
                    R"("detail":"appeared","origin":true,"looked_back":true,"phase":"forward",)"
                    R"("call_index":2,"out_of_domain":true,)") +
        (positive_inf ? R"("positive_inf":true,)" : "") +
        R"("through":["aten::exp #2","aten::div.Tensor #4","aten::log #3"],)"
        R"("through_hops":[3,2,1],"held_by":{"call":"aten::neg #5","phase":"forward"},)"
        R"("sentinel":{"op":"aten::sum","call_index":7},"extra":{"nan":0,"inf":3},"pid":1})";
    Report r = aggregate({EventFile{
        "events-1.jsonl",
        lines({startLine(1), origin, summaryLine(1, "[" + opEntry("aten::exp", 4, 0, 1) + "]")})}});
    EXPECT_TRUE(r.malformed.empty());
    return fumi::report::formatText(r);
  };
  at(text(false), "(also possible: aten::log #3, aten::div.Tensor #4)");
  at(text(true), "(also possible: aten::div.Tensor #4, aten::log #3)");
}

// An overflow held by an op that makes no NaN of finite values (batch 23's knowledge-graph
// score: products overflowing, their sum NaN, `logsigmoid(-score)`'s `neg` holding it): the
// origin is the nearest op between that computes, said as such.
TEST(ReportFindings, OverflowHeldByAnExactOpNamesTheNearestThatComputes) {
  const std::string origin =
      R"({"event":"violation","op":"aten::sum.dim_IntList","backend":"torch","check":"nan_inf",)"
      R"("kind":"error","metric":"nonfinite","value":8,"tolerance":0,"detail":"appeared",)"
      R"("origin":true,"looked_back":true,"phase":"forward","call_index":32,)"
      R"("through":["aten::mul.Tensor #212","aten::add.Tensor #85","aten::sum.dim_IntList #32"],)"
      R"("through_hops":[2,1,1],"held_by":{"call":"aten::neg #32","phase":"forward"},)"
      R"("sentinel":{"op":"aten::mean","call_index":7},"extra":{"nan":8,"inf":0},"pid":1})";
  Report r = aggregate({EventFile{
      "events-1.jsonl",
      lines({startLine(1), origin,
             summaryLine(1, "[" + opEntry("aten::sum.dim_IntList", 4, 0, 1) + "]")})}});
  ASSERT_TRUE(r.malformed.empty()) << r.malformed[0].str();
  at(fumi::report::formatText(r),
     "appeared (aten::neg #32 held 8 NaN, 0 Inf); found looking back from the sentinel (the op "
     "had returned: no stack of its own): the holder got them through aten::mul.Tensor #212, "
     "aten::add.Tensor #85, aten::sum.dim_IntList #32, whose results were gone; this one the "
     "nearest that computes (no op between has a restricted domain, and the holder makes no NaN "
     "or Inf of finite values: an overflow) (also possible: aten::add.Tensor #85, "
     "aten::mul.Tensor #212); sentinel aten::mean #7");
}

// An origin in the backward pass names the autograd node it ran in: a forward log(0) shows up as
// LogBackward0's division by 0 (batch 17), which only the native stack said.
TEST(ReportFindings, BackwardOriginNamesItsAutogradNode) {
  const std::string origin =
      R"({"event":"violation","op":"aten::div.Tensor","backend":"torch","check":"nan_inf",)"
      R"("kind":"error","metric":"nonfinite","value":640,"tolerance":0,"detail":"appeared",)"
      R"("origin":true,"sentinel":{"op":"aten::sum.dim_IntList","call_index":7},"call_index":3,)"
      R"("extra":{"nan":90,"inf":550},"phase":"backward","context":["aten::sum.dim_IntList",)"
      R"("autograd::engine::evaluate_function: LogBackward0","LogBackward0"],"pid":1})";
  Report r = aggregate({EventFile{
      "events-1.jsonl",
      lines({startLine(1), origin,
             summaryLine(1, "[" + opEntry("aten::div.Tensor", 4, 0, 1) + "]")})}});
  ASSERT_TRUE(r.malformed.empty()) << r.malformed[0].str();
  at(fumi::report::formatText(r),
     "NaN/Inf origin: aten::div.Tensor (torch) pid 1, call 3: appeared (90 NaN, 550 Inf) in the "
     "backward pass, inside LogBackward0; sentinel aten::sum.dim_IntList #7\n");
  EXPECT_EQ(fumi::report::toJson(r)["nan_origins"][0]["autograd_node"], "LogBackward0");
}

// A backward-pass origin in the optimizer step of an earlier forward-pass one of its process is
// likely that one's gradient (batch 19: log(0), then LogBackward0's division by 0, read as two
// defects); in another step, or another process, it is an origin of its own. One found looking
// back has no context, only its phase (batch 20).
TEST(ReportFindings, BackwardOriginInTheStepOfAForwardOneIsItsGradient) {
  const std::string kNode = R"(,"context":["autograd::engine::evaluate_function: LogBackward0"]})";
  const std::string kPhase = R"(,"phase":"backward","looked_back":true})";
  const auto origin = [](const std::string& op, int call, int step, int pid,
                         const std::string& backward) {
    return R"({"event":"violation","op":")" + op +
           R"(","backend":"torch","check":"nan_inf","kind":"error","metric":"nonfinite",)"
           R"("value":4,"tolerance":0,"detail":"appeared","origin":true,"sentinel":{"op":)"
           R"("aten::sum","call_index":3},"call_index":)" +
           std::to_string(call) + R"(,"optimizer_step":)" + std::to_string(step) +
           R"(,"extra":{"nan":0,"inf":4},"pid":)" + std::to_string(pid) +
           (backward.empty() ? "}" : backward);
  };
  const auto report = [&](int back_step, int back_pid, const std::string& how) {
    return aggregate({EventFile{
        "events-1.jsonl",
        lines({startLine(1), origin("aten::log", 1, 1, 1, ""),
               origin("aten::div.Tensor", 2, back_step, back_pid, how),
               summaryLine(1, "[" + opEntry("aten::log", 4, 0, 1) + "," +
                                  opEntry("aten::div.Tensor", 4, 0, 1) + "]")})}});
  };
  Report same = report(1, 1, kNode);
  ASSERT_TRUE(same.malformed.empty()) << same.malformed[0].str();
  ASSERT_EQ(same.nan_origins.size(), 2u);
  EXPECT_EQ(same.nan_origins[0].gradient_of, "");
  EXPECT_EQ(same.nan_origins[1].gradient_of, "aten::log #1");
  at(fumi::report::formatText(same),
     "inside LogBackward0 (the step whose forward pass made the origin aten::log #1: likely its "
     "gradient, which that one explains); sentinel");
  EXPECT_EQ(fumi::report::toJson(same)["nan_origins"][1]["gradient_of"], "aten::log #1");
  EXPECT_EQ(fumi::report::toJson(same)["nan_origins"][1]["optimizer_step"], 1);
  EXPECT_EQ(report(2, 1, kNode).nan_origins[1].gradient_of, "");  // a later step: its own
  EXPECT_EQ(report(1, 2, kNode).nan_origins[1].gradient_of, "");  // another process
  Report looked = report(1, 1, kPhase);
  EXPECT_EQ(looked.nan_origins[1].gradient_of, "aten::log #1");
  at(fumi::report::formatText(looked),
     "appeared (0 NaN, 4 Inf) in the backward pass (the step whose forward pass made the origin "
     "aten::log #1: likely its gradient, which that one explains); found looking back");
  EXPECT_EQ(fumi::report::toJson(looked)["nan_origins"][1]["phase"], "backward");
  EXPECT_EQ(report(1, 1, R"(,"phase":"forward"})").nan_origins[1].gradient_of, "");
}

// Violations of NaN/Inf checks that fumi ties to an origin (its spread, its gradient) are said
// so in the headline: batch 37's deep Kalman filter read "12 violations (12 error)" for one exp
// overflow, 11 of them GEMMs reading its Inf.
TEST(ReportFindings, HeadlineCountsViolationsTiedToAnOrigin) {
  const auto violation = [](const std::string& op, const std::string& more) {
    return R"({"event":"violation","op":")" + op +
           R"(","backend":"torch","check":"nan_inf","kind":"error","metric":"nonfinite",)"
           R"("value":4,"tolerance":0,"call_index":0,"pid":1,"phase":"forward")" + more + "}";
  };
  const auto metric = [](int violations) {
    return R"(,"metrics":{"nan_inf.nonfinite":{"kind":"error","count":9,"violations":)" +
           std::to_string(violations) + "}}";
  };
  const auto report = [&](const std::string& spread) {
    return aggregate({EventFile{
        "events-1.jsonl",
        lines({startLine(1),
               violation("aten::exp", R"(,"origin":true,"detail":"appeared")"),
               violation("aten::mm", spread),
               summaryLine(1, "[" + opEntry("aten::exp", 9, 0, 1, metric(1)) + "," +
                                  opEntry("aten::mm", 9, 9, 3, metric(3)) + "]")})}});
  };
  const Report tied =
      report(R"(,"spread_of":"made of the values of the NaN/Inf origin aten::exp #0")");
  ASSERT_TRUE(tied.malformed.empty()) << tied.malformed[0].str();
  at(fumi::report::formatText(tied),
     "4 violations (4 error; 3 the spread or gradient of a NaN/Inf origin)\n");
  // A NaN/Inf violation of its own: no such words.
  const std::string text = fumi::report::formatText(report(""));
  at(text, "4 violations (4 error)\n");
  EXPECT_EQ(text.find("spread or gradient"), std::string::npos);
}

// NaN made from Inf, reported at its call by a sampled check, before the op that made the Inf
// was found looking back (MoCo with T = 0: `logits /= T`, then log_softmax; batch 23): the Inf's
// maker is listed first, and the NaN said to be likely its spread.
TEST(ReportFindings, NanFromInfIsListedAfterTheInfOriginOfItsStep) {
  const auto origin = [](const std::string& op, int call, int step, int pid,
                         const std::string& detail, int nan, int inf, const std::string& phase) {
    return R"({"event":"violation","op":")" + op +
           R"(","backend":"torch","check":"nan_inf","kind":"error","metric":"nonfinite",)"
           R"("value":4,"tolerance":0,"detail":")" + detail +
           R"(","origin":true,"call_index":)" + std::to_string(call) +
           R"(,"optimizer_step":)" + std::to_string(step) + R"(,"extra":{"nan":)" +
           std::to_string(nan) + R"(,"inf":)" + std::to_string(inf) + R"(},"pid":)" +
           std::to_string(pid) + R"(,"phase":")" + phase + R"("})";
  };
  const auto report = [&](int inf_step, int inf_pid, const std::string& inf_phase, int inf) {
    return aggregate({EventFile{
        "events-1.jsonl",
        lines({startLine(1), origin("aten::_log_softmax", 0, 0, 1, "nan_from_inf", 4, 0, "forward"),
               origin("aten::div_.Tensor", 2, inf_step, inf_pid, "appeared", 0, inf, inf_phase),
               summaryLine(1, "[" + opEntry("aten::_log_softmax", 4, 0, 1) + "," +
                                  opEntry("aten::div_.Tensor", 4, 0, 1) + "]")})}});
  };
  Report linked = report(0, 1, "forward", 4);
  ASSERT_TRUE(linked.malformed.empty()) << linked.malformed[0].str();
  ASSERT_EQ(linked.nan_origins.size(), 2u);
  EXPECT_EQ(linked.nan_origins[0].op, "aten::div_.Tensor");
  EXPECT_EQ(linked.nan_origins[0].inf_of, "");
  EXPECT_EQ(linked.nan_origins[1].op, "aten::_log_softmax");
  EXPECT_EQ(linked.nan_origins[1].inf_of, "aten::div_.Tensor #2");
  at(fumi::report::formatText(linked),
     "nan_from_inf (4 NaN, 0 Inf) (from Inf: the origin aten::div_.Tensor #2 made Inf in this "
     "step: likely its spread)");
  EXPECT_EQ(fumi::report::toJson(linked)["nan_origins"][1]["inf_of"], "aten::div_.Tensor #2");
  // Not linked: another step, another process, an Inf made only in the backward pass after a
  // forward NaN, an origin that made no Inf.
  for (const Report& r : {report(1, 1, "forward", 4), report(0, 2, "forward", 4),
                          report(0, 1, "backward", 4), report(0, 1, "forward", 0)}) {
    ASSERT_EQ(r.nan_origins.size(), 2u);
    EXPECT_EQ(r.nan_origins[0].op, "aten::_log_softmax");
    EXPECT_EQ(r.nan_origins[0].inf_of, "");
  }
}

// The search's only origin in the backward pass of the step whose forward pass its sentinel ran
// in (look-back off at a high op rate; batch 20): the sentinel's values were made before it, and
// this origin likely their gradient's.
TEST(ReportFindings, BackwardOriginAfterAForwardSentinelSaysSo) {
  const auto report = [](const std::string& sentinel_phase, int sentinel_step) {
    const std::string origin =
        R"({"event":"violation","op":"aten::div.Tensor","backend":"torch","check":"nan_inf",)"
        R"("kind":"error","metric":"nonfinite","value":4,"tolerance":0,"detail":"appeared",)"
        R"("origin":true,"sentinel":{"op":"aten::sum","call_index":3,"phase":")" +
        sentinel_phase + R"(","optimizer_step":)" + std::to_string(sentinel_step) +
        R"(},"call_index":9,"optimizer_step":2,"extra":{"nan":0,"inf":4},"pid":1,"phase":)"
        R"("backward","context":["autograd::engine::evaluate_function: DivBackward0"]})";
    return aggregate({EventFile{
        "events-1.jsonl",
        lines({startLine(1), origin,
               summaryLine(1, "[" + opEntry("aten::div.Tensor", 4, 0, 1) + "]")})}});
  };
  Report after = report("forward", 2);
  ASSERT_TRUE(after.malformed.empty()) << after.malformed[0].str();
  EXPECT_TRUE(after.nan_origins[0].after_forward_sentinel);
  at(fumi::report::formatText(after),
     "inside DivBackward0 (after the sentinel had seen non-finite values in this step's forward "
     "pass: those were made before it, by an op not found; this is likely their gradient's)");
  EXPECT_EQ(fumi::report::toJson(after)["nan_origins"][0]["after_forward_sentinel"], true);
  EXPECT_FALSE(report("forward", 1).nan_origins[0].after_forward_sentinel);   // an earlier step
  EXPECT_FALSE(report("backward", 2).nan_origins[0].after_forward_sentinel);  // not the forward
}

TEST(ReportFindings, PrecisionCostTableWorstFirstAndOnlyWhenMeasured) {
  auto cost = [](double max) {
    return R"(,"metrics":{"autocast.normwise":{"kind":"precision_cost","count":3,"median":)" +
           std::to_string(max / 2) + R"(,"p99":)" + std::to_string(max) + R"(,"max":)" +
           std::to_string(max) + R"(,"violations":0}})";
  };
  EventFile f{"events-1.jsonl",
              lines({startLine(1),
                     summaryLine(1, "[" + opEntry("aten::linear", 10, 3, 0, cost(0.003)) + "," +
                                        opEntry("aten::conv2d", 10, 3, 0, cost(0.02)) + "," +
                                        opEntry("aten::mm", 10, 3, 0, sensMetric(0.01, 0.5, 0.6)) +
                                        "]")})};
  const std::string text = fumi::report::formatText(aggregate({f}));
  const size_t table = at(text, "\nPrecision cost under autocast");
  const size_t conv = at(text, "  aten::conv2d  ");
  const size_t linear = at(text, "  aten::linear  ");
  EXPECT_LT(table, conv);
  EXPECT_LT(conv, linear);  // the costlier op first
  EXPECT_EQ(text.find("aten::mm", table), text.find("aten::mm", at(text, "\nChecked ops:")))
      << text;  // a sensitivity metric is not a precision cost

  EventFile plain{"events-1.jsonl",
                  lines({startLine(1), summaryLine(1, "[" + opEntry("aten::mm", 10, 3, 0) + "]")})};
  EXPECT_EQ(fumi::report::formatText(aggregate({plain})).find("Precision cost"), std::string::npos);
}

TEST(ReportFindings, OpsOnlyCountedCollapseIntoOneLineAndAllListsThem) {
  EventFile f{"events-1.jsonl",
              lines({startLine(1), summaryLine(1, "[" + opEntry("aten::mm", 40, 8, 0) + "," +
                                                      opEntry("aten::add_", 900, 0, 0) + "," +
                                                      opEntry("aten::view", 300, 0, 0) + "]")})};
  Report r = aggregate({f});
  const std::string text = fumi::report::formatText(r);
  EXPECT_NE(text.find("\nChecked ops:\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  aten::mm "), std::string::npos) << text;
  EXPECT_EQ(text.find("aten::add_"), std::string::npos) << text;
  EXPECT_EQ(text.find("aten::view"), std::string::npos) << text;
  EXPECT_NE(text.find("  2 other ops only counted (1200 calls); --all lists them\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("Findings: no violations\n"), std::string::npos) << text;

  fumi::report::TextOptions all;
  all.all = true;
  const std::string full = fumi::report::formatText(r, all);
  EXPECT_NE(full.find("\nOps:\n"), std::string::npos) << full;
  EXPECT_NE(full.find("  aten::add_  torch      900"), std::string::npos) << full;
  EXPECT_NE(full.find("  aten::view "), std::string::npos) << full;
  EXPECT_EQ(full.find("only counted"), std::string::npos) << full;
}

TEST(ReportFindings, OldFilesWithoutKindsOrMetricsStillRead) {
  // Written before kinds, metrics and NaN origins existed.
  EventFile f{"events-1.jsonl",
              lines({startLine(1),
                     kindViolation(1, "aten::mm", "perturb", "", 0.5, 1, "2026-11-21T20:00:01Z",
                                   "/src/a.py:1 in f"),
                     kindViolation(1, "aten::mm", "highprec", "", 0.01, 2, "2026-11-21T20:00:02Z",
                                   "/src/a.py:2 in f"),
                     summaryLine(1, R"([{"op":"aten::mm","backend":"torch","calls":4,"checked":2,
                       "skipped":0,"violations":2,"worst":{"perturb.m":0.5,"highprec.m":0.01}}])")})};
  Report r = aggregate({f});
  ASSERT_TRUE(r.malformed.empty()) << r.malformed[0].str();
  ASSERT_EQ(r.ops.size(), 1u);
  const OpStats& s = r.ops[0];
  EXPECT_TRUE(s.metrics.empty());
  EXPECT_EQ(s.nonfinite_propagated, 0u);
  ASSERT_EQ(s.by_kind.count("sensitivity"), 1u);  // perturb without a kind: sensitivity
  EXPECT_EQ(s.by_kind.at("sensitivity").violations, 1u);
  ASSERT_EQ(s.by_kind.count("error"), 1u);  // every other check: error
  EXPECT_EQ(s.by_kind.at("error").first->check, "highprec");
  ASSERT_TRUE(s.first_violation.has_value());
  EXPECT_EQ(s.first_violation->check, "perturb");  // still the earliest of all kinds
  EXPECT_TRUE(r.nan_origins.empty());

  // The most sensitive list falls back to the worst value of a sensitivity check.
  const std::string text = fumi::report::formatText(r);
  EXPECT_NE(text.find("  aten::mm  torch    perturb.m      -       -    -  0.5\n"),
            std::string::npos)
      << text;
  const nlohmann::json j = fumi::report::toJson(r);
  EXPECT_EQ(j["ops"][0]["first_violation"]["kind"], "sensitivity");
  EXPECT_EQ(j["ops"][0]["violations_by_kind"]["error"], 1);
  EXPECT_TRUE(j["ops"][0]["metrics"].empty());
}

TEST(ReportFindings, MostSensitiveListsTheTopOpsBySensitivityMax) {
  std::string ops = "[";
  for (int i = 1; i <= 7; ++i) {
    if (i > 1) ops += ",";
    ops +=
        opEntry("op" + std::to_string(i), 10, 10, 0, sensMetric(0.001 * i, 0.01 * i, 0.1 * i, i));
  }
  // Large, but an error metric: not a sensitivity.
  ops +=
      "," + opEntry("aten::err", 10, 10, 0,
                    R"(,"metrics":{"highprec.normwise_rel":{"kind":"error","count":3,"max":50}})");
  ops += "]";
  Report r = aggregate({EventFile{"events-1.jsonl", lines({startLine(1), summaryLine(1, ops)})}});
  ASSERT_TRUE(r.malformed.empty()) << r.malformed[0].str();
  const std::string text = fumi::report::formatText(r);
  const size_t most = at(text, "Most sensitive ops");
  const size_t table = at(text, "Checked ops:");
  const std::string list = text.substr(most, table - most);
  EXPECT_NE(list.find("  op7  torch    perturb.fumi_ratio      7   0.007  0.07  0.7\n"),
            std::string::npos)
      << list;
  EXPECT_LT(at(list, "  op7 "), at(list, "  op6 "));
  EXPECT_LT(at(list, "  op4 "), at(list, "  op3 "));
  EXPECT_EQ(list.find("  op2 "), std::string::npos) << list;  // top 5 only
  EXPECT_EQ(list.find("aten::err"), std::string::npos) << list;
}

TEST(ReportFindings, MetricsMergeAcrossProcessesInJson) {
  auto metric = [](int count, double median, double max, int violations) {
    return sensMetric(median, 0.5, max, count, violations) + R"(,"nonfinite_propagated":2)";
  };
  EventFile a{
      "events-1.jsonl",
      lines(
          {startLine(1),
           summaryLine(1, "[" + opEntry("aten::mm", 10, 10, 0, metric(10, 0.25, 0.75, 1)) + "]")})};
  EventFile b{
      "events-2.jsonl",
      lines(
          {startLine(2),
           summaryLine(2, "[" + opEntry("aten::mm", 30, 30, 0, metric(30, 0.125, 0.5, 2)) + "]")})};
  EventFile c{"events-3.jsonl",
              lines({startLine(3), originLine(3),
                     R"({"event":"nan_search","result":"not_found","sentinel":{"op":"aten::sum",)"
                     R"("call_index":5},"message":"no op made NaN/Inf","pid":3})"})};
  Report r = aggregate({a, b, c});
  ASSERT_TRUE(r.malformed.empty()) << r.malformed[0].str();
  const nlohmann::json j = fumi::report::toJson(r);
  const nlohmann::json* mm = nullptr;
  for (const nlohmann::json& o : j["ops"]) {
    if (o["op"] == "aten::mm") mm = &o;
  }
  ASSERT_NE(mm, nullptr);
  const nlohmann::json& m = (*mm)["metrics"]["perturb.fumi_ratio"];
  EXPECT_EQ(m["kind"], "sensitivity");
  EXPECT_EQ(m["count"], 40);      // summed
  EXPECT_EQ(m["violations"], 3);  // summed
  EXPECT_EQ(m["max"], 0.75);      // the largest
  EXPECT_EQ(m["median"], 0.125);  // of the process with the most values
  EXPECT_EQ((*mm)["nonfinite_propagated"], 4);

  ASSERT_EQ(j["nan_origins"].size(), 1u);
  EXPECT_EQ(j["nan_origins"][0]["op"], "aten::log");
  EXPECT_EQ(j["nan_origins"][0]["origin"], true);
  EXPECT_EQ(j["nan_origins"][0]["sentinel"]["call_index"], 14);
  EXPECT_EQ(j["nan_origins"][0]["python_stack"][1], "/src/train.py:42 in loss");
  ASSERT_EQ(j["nan_searches"].size(), 1u);
  EXPECT_EQ(j["nan_searches"][0]["result"], "not_found");
  EXPECT_EQ(j["nan_searches"][0]["sentinel"]["op"], "aten::sum");
  EXPECT_EQ(j["totals"]["nan_origins"], 1);
  EXPECT_EQ(j["totals"]["violations_by_kind"]["error"], 1);

  const std::string text = fumi::report::formatText(r);
  EXPECT_NE(
      text.find("  NaN search: origin not found (no op made NaN/Inf); sentinel aten::sum #5\n"),
      std::string::npos)
      << text;
  // The headlines say so too: a run ending with every weight NaN closed with "0 violations"
  // where no search found the origin (batch 25).
  EXPECT_NE(text.find(" sensitivity); NaN/Inf seen, origin not found (1 search)\n"),
            std::string::npos)
      << text;
  const std::string run = fumi::report::formatRunSummary(r, "out", 3);
  EXPECT_NE(run.find(" checked, 1 violation; NaN/Inf seen, origin not found (1 search)\n"),
            std::string::npos)
      << run;
  EXPECT_NE(
      text.find("NaN/Inf passed along from inputs (counted, not violations): aten::mm (4 calls)"),
      std::string::npos)
      << text;
}

TEST(ReportFindings, SearchesAfterAnOriginSaySo) {
  // Batch 35's SWA model: an origin found, then two searches epochs later whose values were the
  // averaged copy's, where the origin had written them: not a second unknown cause.
  const std::string after =
      R"({"event":"nan_search","result":"not_found","sentinel":{"op":"aten::sum",)"
      R"("call_index":9},"after_origin":"aten::log #1","message":"no op made NaN/Inf","pid":4})";
  const std::string before =
      R"({"event":"nan_search","result":"not_found","sentinel":{"op":"aten::sum",)"
      R"("call_index":2},"message":"no op made NaN/Inf","pid":4})";
  const Report all_after = aggregate({{"events-4.jsonl",
                                       lines({startLine(4), originLine(4), after, after})}});
  EXPECT_NE(fumi::report::formatRunSummary(all_after, "out")
                .find("origin not found (2 searches, all after the origin reported: maybe its "
                      "spread)"),
            std::string::npos)
      << fumi::report::formatRunSummary(all_after, "out");
  const Report mixed = aggregate({{"events-4.jsonl",
                                   lines({startLine(4), before, originLine(4), after})}});
  EXPECT_NE(fumi::report::formatRunSummary(mixed, "out")
                .find("origin not found (2 searches, 1 after the origin reported)"),
            std::string::npos)
      << fumi::report::formatRunSummary(mixed, "out");
}

TEST(ReportFindings, NewFieldsOfTheWrongTypeMakeTheLineMalformed) {
  std::string origin = originLine(1);
  origin.replace(origin.find(R"("origin":true)"), 13, R"("origin":"yes")");
  Report r = aggregate({EventFile{
      "events-1.jsonl",
      lines({startLine(1), origin,
             summaryLine(1, "[" + opEntry("aten::mm", 1, 1, 0, R"(,"metrics":[1])") + "]"),
             R"({"event":"nan_search","result":"not_found","sentinel":"aten::sum"})"})}});
  ASSERT_EQ(r.malformed.size(), 3u);
  EXPECT_NE(r.malformed[0].message.find("origin"), std::string::npos) << r.malformed[0].str();
  EXPECT_NE(r.malformed[1].message.find("metrics"), std::string::npos) << r.malformed[1].str();
  EXPECT_NE(r.malformed[2].message.find("sentinel"), std::string::npos) << r.malformed[2].str();
  EXPECT_TRUE(r.nan_origins.empty());
}

TEST(ReportFindings, UserFrameSkipsTorchsOwnFrames) {
  using fumi::report::userFrame;
  EXPECT_EQ(userFrame({"/x/site-packages/torch/nn/modules/module.py:1 in _call_impl",
                       "/home/me/tests/torch/train.py:5 in main"}),
            "/home/me/tests/torch/train.py:5 in main");
  EXPECT_EQ(userFrame({"/x/dist-packages/torch/a.py:1 in f"}),
            "/x/dist-packages/torch/a.py:1 in f");
  EXPECT_EQ(userFrame({}), "");
}

// ---------------------------------------------------------------------------------------------
// Timeline points (snapshots and summaries with `totals`) and the HTML page.

std::string stateLine(int pid, const std::string& type, double elapsed, int checked, int violations,
                      const std::string& reason = "") {
  return R"({"event":")" + type + R"(","pid":)" + std::to_string(pid) +
         (reason.empty() ? "" : R"(,"reason":")" + reason + R"(")") + R"(,"elapsed_s":)" +
         std::to_string(elapsed) + R"(,"totals":{"calls":)" + std::to_string(checked * 2) +
         R"(,"checked":)" + std::to_string(checked) + R"(,"skipped":0,"violations":)" +
         std::to_string(violations) + R"(,"check_s":0.1},"ops":[)" +
         opEntry("aten::mm", checked * 2, checked, violations) + "]}";
}

// The number of times `what` occurs in `text`.
size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + what.size()))
    ++n;
  return n;
}

TEST(ReportTimeline, SnapshotsAndSummaryGivePointsInOrder) {
  Report r = aggregate({EventFile{
      "events-1.jsonl",
      lines({startLine(1), stateLine(1, "snapshot", 60, 10, 0, "periodic"),
             stateLine(1, "snapshot", 120, 25, 3, "periodic"), stateLine(1, "summary", 130, 30, 4),
             // Written while the process ended, after its summary: adds nothing.
             stateLine(1, "snapshot", 131, 31, 4, "SIGTERM")})}});
  ASSERT_TRUE(r.malformed.empty()) << r.malformed[0].str();
  ASSERT_EQ(r.processes.size(), 1u);
  const auto& tl = r.processes[0].timeline;
  ASSERT_EQ(tl.size(), 3u);
  EXPECT_DOUBLE_EQ(tl[0].elapsed_s, 60);
  EXPECT_EQ(tl[0].checked, 10u);
  EXPECT_EQ(tl[0].calls, 20u);
  EXPECT_EQ(tl[0].reason, "periodic");
  EXPECT_EQ(tl[1].violations, 3u);
  EXPECT_EQ(tl[2].reason, "exit");
  EXPECT_EQ(tl[2].checked, 30u);
  const nlohmann::json j = fumi::report::toJson(r);
  ASSERT_EQ(j["processes"][0]["timeline"].size(), 3u);
  EXPECT_EQ(j["processes"][0]["timeline"][1]["violations"], 3);
  EXPECT_EQ(j["processes"][0]["timeline"][2]["elapsed_s"], 130.0);

  // Files without totals (older libfumi): no points, and the page says so.
  Report old = aggregate(
      {EventFile{"events-2.jsonl",
                 lines({startLine(2), summaryLine(2, "[" + opEntry("aten::mm", 1, 1, 0) + "]")})}});
  EXPECT_TRUE(old.processes[0].timeline.empty());
  EXPECT_NE(fumi::report::formatHtml(old).find("No timeline"), std::string::npos);

  // A totals field of the wrong type makes the line malformed, like any other field.
  Report bad = aggregate({EventFile{
      "events-3.jsonl",
      lines({startLine(3), R"({"event":"snapshot","pid":3,"elapsed_s":1,"totals":[1]})"})}});
  ASSERT_EQ(bad.malformed.size(), 1u);
  EXPECT_NE(bad.malformed[0].message.find("totals"), std::string::npos);
}

TEST(ReportHtml, EveryFirstViolationWithItsStacksAndEverythingEscaped) {
  std::string evil =
      violationLine(1, "x", 3, 0.5, "2026-11-21T20:00:02Z", "#0 0x1 in f<int>() at /src/a&b.c:7");
  evil.replace(evil.find(R"("op":"x")"), 8, R"("op":"<script>alert(\"op\")</script>&co")");
  EventFile f{
      "events-1.jsonl",
      lines(
          {R"({"event":"start","pid":1,"ppid":1,"time":"2026-11-21T20:00:00Z",)"
           R"("argv":["python3","<marquee>train.py</marquee>"]})",
           evil, violationLine(1, "sgemm_", 7, 0.5),
           kindViolation(1, "aten::conv2d", "perturb", "", 9.5, 4, "2026-11-21T20:00:03Z",
                         "/src/train.py:17 in <lambda>"),
           kindViolation(1, "aten::conv2d", "highprec", "", 0.25, 5, "2026-11-21T20:00:04Z",
                         "/src/train.py:18 in step"),
           originLine(1), stateLine(1, "snapshot", 1.5, 4, 2, "periodic"),
           summaryLine(1, "[" + opEntry("aten::mm", 4, 4, 0, sensMetric(1e-6, 1e-4, 0.5)) + "]")})};
  Report r = aggregate({f});
  ASSERT_TRUE(r.malformed.empty()) << r.malformed[0].str();
  const std::string html = fumi::report::formatHtml(r, {}, "/tmp/out<1>");

  // Nothing from the events reaches the page unescaped.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<marquee"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(&quot;op&quot;)&lt;/script&gt;&amp;co"),
            std::string::npos);
  EXPECT_NE(html.find("#0 0x1 in f&lt;int&gt;() at /src/a&amp;b.c:7"), std::string::npos);
  EXPECT_NE(html.find("/src/train.py:17 in &lt;lambda&gt;"), std::string::npos);
  EXPECT_NE(html.find("&lt;marquee&gt;train.py&lt;/marquee&gt;"), std::string::npos);
  EXPECT_NE(html.find("/tmp/out&lt;1&gt;"), std::string::npos);
  // Self-contained: nothing is fetched.
  EXPECT_EQ(html.find("http"), std::string::npos);
  EXPECT_EQ(html.find(" src="), std::string::npos);

  // Every op's first violation of each kind, with its stacks; the NaN origin with its own.
  EXPECT_NE(html.find("#0 0x1 in main at /src/x.c:12"), std::string::npos);  // sgemm_'s native
  EXPECT_NE(html.find("/src/train.py:18 in step"), std::string::npos);       // conv2d's error
  EXPECT_NE(html.find("NaN/Inf origin: aten::log (torch)"), std::string::npos);
  EXPECT_NE(html.find("<span class=\"user\">/src/train.py:42 in loss</span>"), std::string::npos);
  EXPECT_EQ(count(html, "class=\"finding error\""), 4u);        // x, sgemm_, conv2d, log
  EXPECT_EQ(count(html, "class=\"finding sensitivity\""), 1u);  // conv2d
  EXPECT_LT(html.find("Errors (results off"), html.find("Sensitivity above its bound"));

  // The timeline and the metric strip (median, p99, max marks).
  EXPECT_NE(html.find("<svg class=\"timeline\""), std::string::npos);
  EXPECT_NE(html.find("<title>median 1e-06</title>"), std::string::npos);
  EXPECT_NE(html.find("<title>max 0.5</title>"), std::string::npos);
  // Op names in the tables break at their parts only.
  EXPECT_NE(html.find("<code class=\"op\">aten::<wbr>mm</code>"), std::string::npos);

  // Balanced where it matters.
  for (const char* tag : {"div", "table", "tr", "svg", "details", "pre", "h2", "h4"}) {
    EXPECT_EQ(count(html, std::string("<") + tag + ">") + count(html, std::string("<") + tag + " "),
              count(html, std::string("</") + tag + ">"))
        << tag;
  }
}

TEST(ReportHtml, RanksTableAndWorstRankWithTwoRanks) {
  auto rankFile = [](int rank, int pid, int violations) {
    std::string v;
    for (int i = 0; i < violations; ++i) v += violationLine(pid, "sgemm_", i, 0.5) + "\n";
    return EventFile{"events-rank" + std::to_string(rank) + "-" + std::to_string(pid) + ".jsonl",
                     startLine(pid) + "\n" + v};
  };
  Report r = aggregate({rankFile(0, 10, 1), rankFile(1, 11, 3)});
  ASSERT_EQ(r.ranks.size(), 2u);
  const std::string html = fumi::report::formatHtml(r);
  EXPECT_NE(html.find("<h2 id=\"ranks\">Ranks</h2>"), std::string::npos);
  EXPECT_NE(html.find("<th>worst rank</th>"), std::string::npos);
  EXPECT_NE(html.find("worst rank 1 (rank 0: 1, rank 1: 3)"), std::string::npos) << html;
  EXPECT_NE(html.find("incomplete (no summary"), std::string::npos);  // how they ended

  // One rank: no worst-rank column.
  Report one = aggregate({rankFile(0, 10, 1)});
  EXPECT_EQ(fumi::report::formatHtml(one).find("<th>worst rank</th>"), std::string::npos);
}

}  // namespace
