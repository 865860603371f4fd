// Ranks from launcher environments, rank selection in policies, the snapshot settings, and the
// Prometheus textfile (format, escaping, file names).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <string>

#include "loss_scaling.h"
#include "policy.h"
#include "prometheus.h"
#include "rank.h"
#include "report.h"

namespace fumi {
namespace {

std::map<std::string, std::string>* g_env = nullptr;
const char* fakeGetenv(const char* name) {
  auto it = g_env->find(name);
  return it == g_env->end() ? nullptr : it->second.c_str();
}
RankInfo rankFrom(std::map<std::string, std::string> env) {
  g_env = &env;
  return readRankInfo(fakeGetenv);
}

TEST(Rank, FromEachLauncher) {
  RankInfo r = rankFrom({{"RANK", "3"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "8"}});
  ASSERT_TRUE(r.rank);
  EXPECT_EQ(*r.rank, 3);
  EXPECT_EQ(*r.local_rank, 1);
  EXPECT_EQ(*r.world_size, 8);
  EXPECT_EQ(r.source, "RANK");
  r = rankFrom({{"SLURM_PROCID", "17"}, {"SLURM_NTASKS", "32"}});
  EXPECT_EQ(*r.rank, 17);
  EXPECT_EQ(*r.world_size, 32);
  EXPECT_FALSE(r.local_rank);
  r = rankFrom({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "6"}});
  EXPECT_EQ(*r.rank, 5);
  EXPECT_EQ(r.source, "OMPI_COMM_WORLD_RANK");
  r = rankFrom({{"PMI_RANK", "2"}});
  EXPECT_EQ(*r.rank, 2);
  r = rankFrom({{"PMIX_RANK", "9"}});
  EXPECT_EQ(*r.rank, 9);
}

TEST(Rank, TorchrunWinsOverSlurmAndJunkIsNoRank) {
  // torchrun under Slurm: RANK is the torch rank, SLURM_PROCID the node's task.
  EXPECT_EQ(*rankFrom({{"SLURM_PROCID", "0"}, {"RANK", "12"}}).rank, 12);
  EXPECT_FALSE(rankFrom({}).rank);
  EXPECT_FALSE(rankFrom({{"RANK", ""}}).rank);
  EXPECT_FALSE(rankFrom({{"RANK", "-1"}}).rank);
  EXPECT_FALSE(rankFrom({{"RANK", "two"}}).rank);
  // A junk RANK does not hide a valid Slurm rank.
  EXPECT_EQ(*rankFrom({{"RANK", "x"}, {"SLURM_PROCID", "4"}}).rank, 4);
}

TEST(Rank, PolicySelectsRanksAndRanges) {
  const PolicyResult r = parsePolicyText(R"(version: 1
report: { snapshot_every: 2.5, prometheus: /tmp/fumi.prom }
rules:
  - match: { op: sgemm_, rank: [0, "8-11"] }
    checks: [{ plugin: highprec }]
  - match: { op: dgemm_, rank: 3 }
    checks: [{ plugin: highprec }]
  - match: { op: sgemm_ }
    checks: [{ plugin: highprec }]
)",
                                         "ranks.yaml");
  ASSERT_TRUE(r.ok()) << (r.diagnostics.empty() ? "" : r.diagnostics[0].str());
  EXPECT_DOUBLE_EQ(r.policy->report.snapshot_every, 2.5);
  EXPECT_EQ(r.policy->report.prometheus, "/tmp/fumi.prom");
  const MatchSpec& m = r.policy->rules[0].match;
  for (int64_t rank : {0, 8, 9, 11}) EXPECT_TRUE(rankSelected(m, rank)) << rank;
  for (int64_t rank : {1, 7, 12}) EXPECT_FALSE(rankSelected(m, rank)) << rank;
  EXPECT_TRUE(rankSelected(r.policy->rules[1].match, 3));
  EXPECT_FALSE(rankSelected(r.policy->rules[1].match, 0));
  EXPECT_TRUE(rankSelected(r.policy->rules[2].match, 123456));  // no rank: every rank
}

TEST(Snapshot, DefaultIntervalIsAMinute) {
  const PolicyResult r = parsePolicyText("version: 1\nrules: []\n", "p.yaml");
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r.policy->report.snapshot_every, 60);
  EXPECT_TRUE(r.policy->report.prometheus.empty());
}

// Periodic snapshots thin out as a process ages (each is the whole per-op state): a week-long
// job whose counts change at every tick writes about 370, not one a minute (10 080), and a
// kill loses the counts of at most a sixtieth of the job's age and a tick.
TEST(Snapshot, SpacingGrowsWithTheProcessAge) {
  EXPECT_DOUBLE_EQ(snapshotSpacing(60, 30), 60);
  EXPECT_DOUBLE_EQ(snapshotSpacing(60, 3600), 60);
  EXPECT_DOUBLE_EQ(snapshotSpacing(60, 36000), 600);
  EXPECT_DOUBLE_EQ(snapshotSpacing(0.5, 2), 0.5);  // short runs: every tick, as configured
  int events = 0, first_hour = 0;
  double last = 0, worst_lag = 0;
  for (double t = 60.02; t < 7 * 86400.0; t += 60.02) {  // ticks, each a little late
    worst_lag = std::max(worst_lag, (t - last) - std::max(60.0, t / kSnapshotsPerAge));
    if (!periodicSnapshotDue(60, t - last, t)) continue;
    last = t;
    ++events;
    if (t < 3600) ++first_hour;
  }
  EXPECT_EQ(first_hour, 59);  // every tick of the first hour
  EXPECT_GT(events, 330);
  EXPECT_LT(events, 400);
  EXPECT_LE(worst_lag, 60.02);  // never more than a tick past the spacing
}

TEST(LossScaling, PolicyAndMarkers) {
  PolicyResult r = parsePolicyText("version: 1\nrules: []\n", "p.yaml");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.policy->loss_scaling.enabled);
  EXPECT_EQ(r.policy->loss_scaling.max_consecutive, 30);
  r = parsePolicyText("version: 1\nrules: []\nloss_scaling: { max_consecutive: 5 }\n", "p.yaml");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.policy->loss_scaling.max_consecutive, 5);
  r = parsePolicyText("version: 1\nrules: []\nloss_scaling: false\n", "p.yaml");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.policy->loss_scaling.enabled);
  EXPECT_FALSE(parsePolicyText("version: 1\nrules: []\nloss_scaling: { max_consecutive: 0 }\n",
                               "p.yaml")
                   .ok());
  EXPECT_EQ(scalerMarkerOf("Optimizer.zero_grad#SGD.zero_grad"), ScalerMarker::kZeroGrad);
  EXPECT_EQ(scalerMarkerOf("Optimizer.step#Adam.step"), ScalerMarker::kStep);
  EXPECT_EQ(scalerMarkerOf("aten::_amp_foreach_non_finite_check_and_unscale_"),
            ScalerMarker::kUnscale);
  EXPECT_EQ(scalerMarkerOf("aten::mm"), ScalerMarker::kNone);
  EXPECT_TRUE(parsePolicyText("version: 1\nrules: []\n", "p.yaml").policy->pin_malloc_thresholds);
  EXPECT_FALSE(parsePolicyText("version: 1\nrules: []\nmalloc_thresholds: leave\n", "p.yaml")
                   .policy->pin_malloc_thresholds);
  EXPECT_FALSE(parsePolicyText("version: 1\nrules: []\nmalloc_thresholds: maybe\n", "p.yaml").ok());
  // Without an engine (no policy loaded) nothing is held.
  EXPECT_FALSE(lossScalingHolds("nonfinite", "backward"));
}

TEST(Prometheus, PathsPerRankAndPid) {
  EXPECT_EQ(prometheusPath("/x/fumi.prom", std::nullopt, 42), "/x/fumi.prom");
  EXPECT_EQ(prometheusPath("/x/fumi.prom", 3, 42), "/x/fumi-rank3.prom");
  EXPECT_EQ(prometheusPath("/x.d/fumi", 3, 42), "/x.d/fumi-rank3");
  EXPECT_EQ(prometheusPath("/x/f-{rank}-{pid}.prom", 7, 42), "/x/f-7-42.prom");
  EXPECT_EQ(prometheusPath("/x/f-{rank}.prom", std::nullopt, 42), "/x/f-none.prom");
}

TEST(Prometheus, EscapesLabelValues) {
  EXPECT_EQ(prometheusEscape(R"(a"b\c)"), R"(a\"b\\c)");
  EXPECT_EQ(prometheusEscape("x\ny"), "x\\ny");
}

// Every line is a comment (# HELP / # TYPE) or `name{labels} value`; families are contiguous,
// HELP and TYPE come once before their samples.
TEST(Prometheus, TextFormat) {
  SiteState s;
  s.op = "aten::weird\"op\\";
  s.backend = "torch";
  s.calls = 10;
  s.stats.checked = 4;
  s.stats.skipped = 1;
  s.stats.check_seconds = 0.5;
  CheckCounts& highprec = s.stats.checks["highprec"];
  highprec.runs = 3;
  highprec.unsupported = 1;
  highprec.violations = 2;
  highprec.seconds = 0.25;
  s.stats.metrics["highprec.normwise_rel"].add(1e-3, true);
  s.stats.metrics["nan_inf.nonfinite"].add(std::nan(""), false);  // max stays 0
  SiteState t;
  t.op = "sgemm_";
  t.backend = "blas";
  t.calls = 7;
  const std::string text = prometheusText({s, t}, 2, 10.0, 1700000000);
  std::istringstream in(text);
  std::string line, family;
  std::map<std::string, int> seen_families;
  int samples = 0;
  while (std::getline(in, line)) {
    ASSERT_FALSE(line.empty());
    if (line.rfind("# HELP ", 0) == 0) {
      family = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_EQ(seen_families[family]++, 0) << "family " << family << " twice";
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      EXPECT_EQ(line.substr(7, family.size()), family);
      continue;
    }
    ASSERT_EQ(line.rfind(family + "{", 0), 0u) << line;
    EXPECT_NE(line.find("rank=\"2\"}"), std::string::npos) << line;
    const std::string value = line.substr(line.rfind(' ') + 1);
    EXPECT_EQ(value.find_first_not_of("0123456789.e-+"), std::string::npos) << line;
    ++samples;
  }
  EXPECT_GT(samples, 10);
  EXPECT_NE(text.find("fumi_calls_total{op=\"aten::weird\\\"op\\\\\",backend=\"torch\",rank=\"2\"} 10\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("fumi_calls_total{op=\"sgemm_\",backend=\"blas\",rank=\"2\"} 7\n"),
            std::string::npos);
  EXPECT_NE(text.find("fumi_violations_total{op=\"aten::weird\\\"op\\\\\",backend=\"torch\","
                      "check=\"highprec\",rank=\"2\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("fumi_checks_skipped_total{op=\"aten::weird\\\"op\\\\\",backend=\"torch\","
                      "check=\"highprec\",rank=\"2\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("check=\"highprec\",metric=\"normwise_rel\",kind=\"error\",rank=\"2\"} "
                      "0.001"),
            std::string::npos);
  EXPECT_NE(text.find("fumi_overhead_ratio{rank=\"2\"} 0.05\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE fumi_calls_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE fumi_metric_worst gauge\n"), std::string::npos);
}

}  // namespace
}  // namespace fumi
