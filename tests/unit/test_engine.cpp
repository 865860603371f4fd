// Engine: sampling arithmetic, compiled per-op decisions (first match, exclusion, size
// bounds), plugin loading (missing, wrong ABI), and isolation of failing plugins and of the
// scratch budget — on a small fake Call (y = 2x) so each behaviour is observable directly.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "call.h"
#include "context.h"
#include "engine.h"
#include "fumi/dtype.hpp"
#include "plugin_loader.h"
#include "report.h"
#include "site.h"

namespace fumi {
namespace {

TEST(Sampling, FirstEveryMax) {
  SampleSpec s;
  s.first = 2;
  s.every = 10;
  std::vector<uint64_t> hits;
  for (uint64_t i = 0; i < 35; ++i)
    if (sampleHit(s, i)) hits.push_back(i);
  EXPECT_EQ(hits, (std::vector<uint64_t>{0, 1, 10, 20, 30}));
  EXPECT_FALSE(sampleHit(SampleSpec{}, 0));  // nothing asked: nothing sampled
}

TEST(Sampling, EveryBeyond32Bits) {
  SampleSpec s;
  s.every = 3;
  EXPECT_TRUE(sampleHit(s, 3ull << 32));
  EXPECT_FALSE(sampleHit(s, (3ull << 32) + 1));
  s.every = (1ull << 33) + 1;
  EXPECT_TRUE(sampleHit(s, 0));
  EXPECT_FALSE(sampleHit(s, 1ull << 33));
  EXPECT_TRUE(sampleHit(s, (1ull << 33) + 1));
}

TEST(Sampling, ProbabilityIsSeededAndCalibrated) {
  SampleSpec s;
  s.probability = 0.1;
  s.seed = 42;
  int hits = 0;
  for (uint64_t i = 0; i < 20000; ++i) hits += sampleHit(s, i);
  EXPECT_NEAR(hits, 2000, 200);
  SampleSpec t = s;
  t.seed = 43;
  int same = 0;
  for (uint64_t i = 0; i < 2000; ++i) same += sampleHit(s, i) == sampleHit(t, i);
  EXPECT_LT(same, 2000);  // another seed, another selection
  s.probability = 1.0;
  EXPECT_TRUE(sampleHit(s, 12345));
}

// y = 2 * x in f32 or f64; `wrong` plants an error in reruns.
class DoubleCall final : public Call {
 public:
  DoubleCall(OpSite& site, std::vector<float>& x, std::vector<float>& y, uint64_t index = 0)
      : Call(site, FUMI_DTYPE_F32, FUMI_DTYPE_F32, static_cast<int64_t>(x.size()), index) {
    const int64_t n = static_cast<int64_t>(x.size());
    addTensor("x", FUMI_ROLE_INPUT, FUMI_DTYPE_F32, FUMI_MEMORY_HOST, {n}, {1}, x.data());
    addTensor("y", FUMI_ROLE_OUTPUT, FUMI_DTYPE_F32, FUMI_MEMORY_HOST, {n}, {1}, y.data());
  }
  int reruns = 0;
  fumi_status rerun(fumi_dtype p, void* const* buf) override {
    ++reruns;
    const fumi_tensor& x = tensors()[0];
    const void* in = buf[0] ? buf[0] : x.data;
    for (int64_t i = 0; i < x.shape[0]; ++i)
      storeFromDouble(buf[1], i, 2 * loadAsDouble(in, i, p), p);
    return FUMI_OK;
  }
};

// y = x_0 + x_1 + ... accumulated in the rerun's precision (f32 like the call, or f64): terms
// that cancel lose their digits however well the sum is done. `k`: the terms the host says it
// sums (0: unknown; -1: x's size).
class SumCall final : public Call {
 public:
  SumCall(OpSite& site, std::vector<float>& x, float& y, int64_t k = -1)
      : Call(site, FUMI_DTYPE_F32, FUMI_DTYPE_F32, static_cast<int64_t>(x.size()), 0) {
    setReductionLength(k < 0 ? static_cast<int64_t>(x.size()) : k);
    addTensor("x", FUMI_ROLE_INPUT, FUMI_DTYPE_F32, FUMI_MEMORY_HOST,
              {static_cast<int64_t>(x.size())}, {1}, x.data());
    addTensor("y", FUMI_ROLE_OUTPUT, FUMI_DTYPE_F32, FUMI_MEMORY_HOST, {1}, {1}, &y);
  }
  fumi_status rerun(fumi_dtype p, void* const* buf) override {
    const fumi_tensor& x = tensors()[0];
    const void* in = buf[0] ? buf[0] : x.data;
    double sum = 0;
    for (int64_t i = 0; i < x.shape[0]; ++i) {
      sum += loadAsDouble(in, i, p);
      if (p == FUMI_DTYPE_F32) sum = static_cast<float>(sum);
    }
    storeFromDouble(buf[1], 0, sum, p);
    return FUMI_OK;
  }
};

// A folder of the test's own under /tmp, removed with everything in it when it goes out of
// scope (declared before the Reporter writing there, so it outlives it).
struct TempDir {
  std::string path = make();
  TempDir() = default;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  static std::string make() {
    char tmpl[] = "/tmp/fumi-unit-XXXXXX";
    return mkdtemp(tmpl);
  }
};

std::vector<std::string> readLines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

struct EngineFixture : ::testing::Test {
  TempDir tmp;
  std::string dir = tmp.path;
  Reporter reporter{ReportSettings{}, dir, "off", "test"};
  void SetUp() override { reporter.open(); }
  std::string events() { return dir + "/events-" + std::to_string(getpid()) + ".jsonl"; }
  std::unique_ptr<Engine> make(const std::string& yaml) {
    PolicyResult r = parsePolicyText(yaml, "t.yaml");
    EXPECT_TRUE(r.ok());
    return std::make_unique<Engine>(*r.policy, reporter,
                                     std::vector<std::string>{FUMI_TEST_PLUGIN_DIR,
                                                              FUMI_BUILTIN_PLUGIN_DIR});
  }
  // One call of `site` checked under `yaml` (its first call, of problem size `size`): the
  // site's statistics after it.
  OpStats checkOnce(const std::string& yaml, OpSite& site, Call& call, int64_t size) {
    auto e = make(yaml);
    e->compileSite(site);
    e->runChecks(call, *site.decision.load()->select(CallFacts{size}, 0));
    return site.statsSnapshot();
  }
};

TEST_F(EngineFixture, FirstMatchingRuleAndExclusion) {
  OpSite site("unit_op_a", "unit", FUMI_DTYPE_F32);
  auto e = make(R"(version: 1
rules:
  - match: { op: unit_op_a, dtype: f64 }
    checks: [ { plugin: determinism } ]
  - match: { op: "unit_op_*", min_size: 100 }
    checks: []
  - match: { op: "unit_*" }
    checks: [ { plugin: nan_inf } ]
)");
  e->compileSite(site);
  OpDecision* d = site.decision.load();
  ASSERT_NE(d, nullptr);
  ASSERT_EQ(d->candidates.size(), 2u);  // the f64 rule cannot match an f32 op
  EXPECT_EQ(d->select(CallFacts{500}, 0), nullptr);  // excluded by the size-bounded empty rule
  RuleSampler* s = d->select(CallFacts{50}, 0);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->rule->checks.at(0).name, "nan_inf");
  EXPECT_EQ(s->matched.load(), 1u);  // two candidates: the rule counts its own matches
}

TEST_F(EngineFixture, SingleRuleSamplesByTheCallIndex) {
  OpSite site("unit_op_g", "unit", FUMI_DTYPE_F32);
  auto e = make(R"(version: 1
rules:
  - match: { op: unit_op_g }
    sample: { every: 10 }
    checks: [ { plugin: nan_inf } ]
)");
  e->compileSite(site);
  OpDecision* d = site.decision.load();
  ASSERT_NE(d, nullptr);
  EXPECT_NE(d->select(CallFacts{1}, 10), nullptr);
  EXPECT_EQ(d->select(CallFacts{1}, 11), nullptr);
  EXPECT_EQ(d->candidates[0]->matched.load(), 0u);  // no shared counter on this path
}

TEST_F(EngineFixture, PerCallDtypeDeviceAndPhase) {
  // A framework op has no static dtype: the dtype condition is decided per call, as are
  // device and phase.
  OpSite site("unit::op_h", "unit", FUMI_DTYPE_UNKNOWN);
  OpSite backward_node("autograd::engine::evaluate_function: UnitBackward0", "unit",
                       FUMI_DTYPE_UNKNOWN);
  auto e = make(R"(version: 1
rules:
  - name: half-on-device
    match: { op: "unit::*", dtype: [f16, bf16], device: "cuda*" }
    sample: { every: 1 }
    checks: [ { plugin: nan_inf } ]
  - name: f32-backward
    match: { op: "unit::*", dtype: f32, phase: backward }
    sample: { every: 1 }
    checks: [ { plugin: determinism } ]
)");
  e->compileSite(site);
  OpDecision* d = site.decision.load();
  ASSERT_NE(d, nullptr);
  ASSERT_EQ(d->candidates.size(), 2u);
  EXPECT_TRUE(d->candidates[0]->per_call);
  auto rule = [&](int64_t size, fumi_dtype dt, const char* device) -> std::string {
    RuleSampler* s = d->select(CallFacts{size, dt, device}, 0);
    return s ? s->rule->rule->name : "";
  };
  EXPECT_EQ(rule(8, FUMI_DTYPE_F16, "cuda:0"), "half-on-device");
  EXPECT_EQ(rule(8, FUMI_DTYPE_F16, "cpu"), "");
  EXPECT_EQ(rule(8, FUMI_DTYPE_F64, "cuda:0"), "");
  EXPECT_EQ(rule(8, FUMI_DTYPE_F32, "cpu"), "");  // not inside a backward node
  pushContext(&backward_node, 0);
  pushContext(&site, 0);
  EXPECT_EQ(std::string(currentPhase()), "backward");
  EXPECT_EQ(rule(8, FUMI_DTYPE_F32, "cpu"), "f32-backward");
  popContext();
  popContext();
  EXPECT_EQ(rule(8, FUMI_DTYPE_F32, "cpu"), "");
}

// The thread's scratch stays between checks that follow each other closely and goes back to the
// system once they come rarely (scratch_arena.h CheckDuty, scratchToKeep).
TEST_F(EngineFixture, ScratchStaysWhileChecksComeOftenAndGoesWhenTheyAreRare) {
  OpSite site("unit_op_scratch", "unit", FUMI_DTYPE_F32);
  auto e = make(R"(version: 1
rules:
  - match: { op: unit_op_scratch }
    sample: { every: 1 }
    checks: [ { plugin: highprec } ]
)");
  e->compileSite(site);
  std::vector<float> x(size_t{3} << 19, 1.5f), y(x.size(), 3.0f);  // fp64 copies: 2 x 12 MiB
  DoubleCall call(site, x, y);
  auto check = [&](uint64_t i) {
    RuleSampler* s = site.decision.load()->select(CallFacts{static_cast<int64_t>(x.size())}, i);
    ASSERT_NE(s, nullptr);
    e->runChecks(call, *s);
  };
  // Back to back: within a second of them the scratch stays from check to check.
  uint64_t index = 0;
  const double started = monotonicSeconds();
  do check(index++);
  while (ScratchArena::local().capacity() <= kIdleScratch && monotonicSeconds() - started < 5);
  EXPECT_GT(ScratchArena::local().capacity(), kIdleScratch);
  EXPECT_GT(index, 1u);  // the thread's first check left it idle
  const double before = monotonicSeconds();
  check(index++);
  const double took = monotonicSeconds() - before;
  EXPECT_GT(ScratchArena::local().capacity(), kIdleScratch);
  // Then 20 checks' time apart, half a second at least (sanitizers and load slow checks down):
  // rare, and it goes back to the system within a few of them.
  int rare = 0;
  while (ScratchArena::local().capacity() > kIdleScratch && rare < 20) {
    usleep(static_cast<useconds_t>(std::max(0.5, 20 * took) * 1e6));
    check(index++);
    ++rare;
  }
  EXPECT_LE(ScratchArena::local().capacity(), kIdleScratch);
  EXPECT_EQ(call.reruns, static_cast<int>(index));
}

TEST_F(EngineFixture, OverheadBudgetSkipsSampledCallsOnceSpent) {
  OpSite site("unit_op_i", "unit", FUMI_DTYPE_F32);
  auto e = make(R"(version: 1
overhead_budget: 0.01
rules:
  - match: { op: unit_op_i }
    sample: { every: 1 }
    checks: [ { plugin: nan_inf } ]
)");
  e->compileSite(site);
  OpDecision* d = site.decision.load();
  ASSERT_NE(d, nullptr);
  std::vector<float> x{1, 2}, y{2, 4};
  DoubleCall call(site, x, y);
  RuleSampler* s = d->select(CallFacts{2}, 0);
  ASSERT_NE(s, nullptr);  // nothing spent yet
  e->runChecks(call, *s);
  EXPECT_NE(d->select(CallFacts{2}, 1), nullptr);  // microseconds of 1% of >= 10 s: fine
  CheckBudget budget(0.01);
  EXPECT_FALSE(budget.spent());
  budget.charge(0.05);  // 1% of the 10 s minimum window is 0.1 s
  EXPECT_FALSE(budget.spent());
  budget.charge(0.06);
  EXPECT_TRUE(budget.spent());
  OpDecision limited(site, budget);
  limited.candidates.push_back(std::make_unique<RuleSampler>());
  limited.candidates[0]->rule = d->candidates[0]->rule;
  const uint64_t skipped = site.statsSnapshot().skipped;
  EXPECT_EQ(limited.select(CallFacts{2}, 0), nullptr);  // sampled, but the budget is spent
  EXPECT_EQ(site.statsSnapshot().skipped, skipped + 1);
  // ... and says why in the summary (ops[].not_checked)
  const std::map<std::string, uint64_t> why = {
      {"the overhead budget was spent (overhead_budget)", 1}};
  EXPECT_EQ(site.statsSnapshot().not_checked, why);
  EXPECT_EQ(limited.candidates[0]->checked.load(), 0u);  // took no max_checks slot
  // `first: N` calls are checked whatever the budget; later ones are not.
  OpSite first_site("unit_op_j", "unit", FUMI_DTYPE_F32);
  auto f = make(R"(version: 1
rules:
  - match: { op: unit_op_j }
    sample: { first: 2, every: 1 }
    checks: [ { plugin: nan_inf } ]
)");
  f->compileSite(first_site);
  OpDecision first_limited(first_site, budget);
  first_limited.candidates.push_back(std::make_unique<RuleSampler>());
  first_limited.candidates[0]->rule = first_site.decision.load()->candidates[0]->rule;
  EXPECT_NE(first_limited.select(CallFacts{2}, 0), nullptr);
  EXPECT_NE(first_limited.select(CallFacts{2}, 1), nullptr);
  EXPECT_EQ(first_limited.select(CallFacts{2}, 2), nullptr);
  CheckBudget unlimited(0);
  unlimited.charge(1e6);
  EXPECT_FALSE(unlimited.spent());
}

// Each check keeps its share of the overhead budget (1/n of it for n named checks): reruns that
// overspent it cannot stop a cheap check; a call none of whose checks is within its share is
// skipped; a check's `first:` calls run whatever the budget.
TEST_F(EngineFixture, OverheadBudgetKeepsEachChecksShare) {
  OpSite site("unit_op_share", "unit", FUMI_DTYPE_F32);
  auto e = make(R"(version: 1
overhead_budget: 0.01
rules:
  - match: { op: unit_op_share }
    sample: { every: 1 }
    checks: [ { plugin: highprec }, { plugin: nan_inf } ]
)");
  e->compileSite(site);
  CheckBudget& budget = e->budget();
  const size_t highprec = budget.checkId("highprec"), nan_inf = budget.checkId("nan_inf");
  ASSERT_NE(highprec, nan_inf);
  EXPECT_EQ(budget.checkId("perturb"), 2u);  // named by no rule: no share
  EXPECT_FALSE(budget.withinShare(2));
  // highprec's reruns took 0.2 s: over the whole budget (1% of the 10 s window) and over its
  // share (half of it); nan_inf took nothing.
  budget.charge(0.2);
  budget.chargeCheck(highprec, 0.2);
  ASSERT_TRUE(budget.spent());
  EXPECT_FALSE(budget.allows(highprec));
  EXPECT_TRUE(budget.allows(nan_inf));
  std::vector<float> x{1, 2}, y{2, 4};
  DoubleCall call(site, x, y);
  RuleSampler* s = site.decision.load()->select(CallFacts{2}, 0);
  ASSERT_NE(s, nullptr);  // nan_inf is within its share
  e->runChecks(call, *s);
  EXPECT_EQ(call.reruns, 0);  // highprec did not run
  OpStats st = site.statsSnapshot();
  EXPECT_EQ(st.checked, 1u);
  EXPECT_EQ(st.checks["nan_inf"].runs, 1u);
  EXPECT_EQ(st.checks["highprec"].budget, 1u);
  EXPECT_EQ(st.checks["highprec"].runs, 0u);
  // nan_inf over its share too: the call is not checked, and the summary says why.
  budget.chargeCheck(nan_inf, 0.06);
  EXPECT_EQ(site.decision.load()->select(CallFacts{2}, 1), nullptr);
  st = site.statsSnapshot();
  EXPECT_EQ(st.skipped, 1u);
  EXPECT_EQ(st.not_checked["the overhead budget was spent (overhead_budget)"], 1u);
  // Time no check is charged with (a framework adapter's copies) is shared by every check: over
  // the whole budget, no check is within its share.
  CheckBudget copies(0.01);
  copies.setChecks({"highprec", "nan_inf"});
  copies.charge(0.04);
  EXPECT_FALSE(copies.spent());
  copies.charge(0.08);  // 0.12 s: over the 0.1 s of the 10 s window, 0.06 each
  EXPECT_TRUE(copies.spent());
  EXPECT_FALSE(copies.withinShare(0));
  EXPECT_FALSE(copies.withinShare(1));
  // `first:` calls, the rule's or a check's own, run over the check's share; later ones do not.
  auto g = make(R"(version: 1
overhead_budget: 0.01
rules:
  - match: { op: unit_op_rule_first }
    sample: { first: 1, every: 1 }
    checks: [ { plugin: highprec } ]
  - match: { op: unit_op_check_first }
    sample: { every: 1 }
    checks: [ { plugin: nan_inf }, { plugin: highprec, sample: { first: 1, every: 1 } } ]
)");
  g->budget().charge(0.2);
  g->budget().chargeCheck(g->budget().checkId("highprec"), 0.2);
  for (const char* op : {"unit_op_rule_first", "unit_op_check_first"}) {
    OpSite first_site(op, "unit", FUMI_DTYPE_F32);
    g->compileSite(first_site);
    DoubleCall first_call(first_site, x, y);
    for (uint64_t i = 0; i < 3; ++i)
      if (RuleSampler* f = first_site.decision.load()->select(CallFacts{2}, i))
        g->runChecks(first_call, *f);
    EXPECT_EQ(first_call.reruns, 1) << op;
    st = first_site.statsSnapshot();
    EXPECT_EQ(st.checks["highprec"].runs, 1u) << op;
    EXPECT_EQ(st.checks["highprec"].budget, op == std::string("unit_op_check_first") ? 2u : 0u)
        << op;  // the rule's first: later calls are refused before any check
  }
}

// A check's cost is predicted from its op's time (Call::opSeconds) times what it cost per second
// of op: on this op, or the geometric mean over the others. A first call's check predicted to
// cost more than the whole budget so far waits for a later call of the op that the budget
// affords (predicted from the call's size); a later call's check runs only if its predicted
// cost fits what is left of the budget or of its share.
TEST_F(EngineFixture, OverheadBudgetDefersAFirstCheckPredictedOverTheWholeBudget) {
  OpSite site("unit_op_costly", "unit", FUMI_DTYPE_F32);
  auto e = make(R"(version: 1
overhead_budget: 0.01
rules:
  - match: { op: unit_op_costly }
    sample: { first: 1, every: 1000 }
    checks: [ { plugin: nan_inf }, { plugin: highprec } ]
)");
  e->compileSite(site);
  CheckBudget& budget = e->budget();
  const size_t highprec = budget.checkId("highprec");
  EXPECT_EQ(budget.predict(highprec, 0, 0.05), 0.0);  // nothing learnt yet: unknown
  budget.learnCost(highprec, 4);
  budget.learnCost(highprec, 16);  // on other ops: their geometric mean is 8
  EXPECT_NEAR(budget.predict(highprec, 0, 0.05), 0.4, 1e-12);
  EXPECT_NEAR(budget.predict(highprec, 2, 0.05), 0.1, 1e-12);  // this op's own, when known
  EXPECT_EQ(budget.predict(highprec, 0, 0), 0.0);  // the op's time unknown (a device op)
  OpDecision* d = site.decision.load();
  std::vector<float> x(1000, 1.5f), y(1000, 3.0f);
  DoubleCall big(site, x, y);
  big.setOpSeconds(0.05);  // highprec predicted 0.4 s: over 1% of the 10 s window
  RuleSampler* s = d->select(CallFacts{1000}, 0);
  ASSERT_NE(s, nullptr);
  e->runChecks(big, *s);
  EXPECT_EQ(big.reruns, 0);
  OpStats st = site.statsSnapshot();
  EXPECT_EQ(st.checked, 1u);  // nan_inf ran
  EXPECT_EQ(st.checks["nan_inf"].runs, 1u);
  EXPECT_EQ(st.checks["highprec"].runs, 0u);
  EXPECT_EQ(st.checks["highprec"].budget, 1u);
  EXPECT_EQ(s->owed.load(), 1u);
  // A call as large is not taken for it; one a tenth its size is (0.04 s predicted), and pays.
  EXPECT_EQ(d->select(CallFacts{1000}, 1), nullptr);
  RuleSampler* t = d->select(CallFacts{100}, 2);
  ASSERT_EQ(t, s);
  std::vector<float> xs(100, 1.5f), ys(100, 3.0f);
  DoubleCall small(site, xs, ys, 2);
  small.setOpSeconds(0.005);
  e->runChecks(small, *t);
  EXPECT_EQ(small.reruns, 1);
  EXPECT_EQ(s->owed.load(), 0u);
  EXPECT_EQ(site.statsSnapshot().checks["highprec"].runs, 1u);
  EXPECT_EQ(d->select(CallFacts{100}, 3), nullptr);  // paid: the rule's sampling again
  EXPECT_GT(s->check_ratio[1].load(), 0.0);  // learnt on this op (0.005 s >= kMinOpSeconds)
  EXPECT_GT(s->check_ratio[0].load(), 0.0);  // nan_inf's, from the first call
  // Later calls: a check runs if its predicted cost fits the budget, or its share.
  CheckBudget b(0.01);
  b.setChecks({"highprec", "nan_inf"});
  EXPECT_TRUE(b.allows(0, 0.09));  // within the 0.1 s of the 10 s window
  EXPECT_FALSE(b.allows(0, 0.2));  // within neither the budget nor highprec's 0.05 s share
  b.charge(0.06);
  b.chargeCheck(1, 0.06);
  EXPECT_TRUE(b.allows(0, 0.045));  // over the budget's rest, within its own share
  EXPECT_FALSE(b.allows(0, 0.055));
  EXPECT_FALSE(b.allows(1, 0.045));  // nan_inf: over the rest, and its share spent
  EXPECT_TRUE(b.affordsFirst(0.1));  // a first call: whatever is left, up to the whole budget
  EXPECT_FALSE(b.affordsFirst(0.11));
  CheckBudget unlimited(0);
  unlimited.setChecks({"highprec"});
  unlimited.learnCost(0, 100);
  EXPECT_EQ(unlimited.predict(0, 0, 10), 0.0);
  EXPECT_TRUE(unlimited.affordsFirst(1e9));
  EXPECT_TRUE(unlimited.allows(0, 1e9));
}

// Each metric keeps the largest value / tolerance over its calls (the summary's of_tolerance).
TEST(OpSiteMetrics, LargestShareOfTheTolerance) {
  OpSite site("unit_op_tol", "unit", FUMI_DTYPE_F32);
  site.recordMetric("highprec.normwise_rel", FUMI_KIND_ERROR, 3e-4, false, false, 1e-3);
  site.recordMetric("highprec.normwise_rel", FUMI_KIND_ERROR, 5e-4, false, false, 2e-3);
  site.recordMetric("highprec.normwise_rel", FUMI_KIND_ERROR, 1e-2, false);  // no tolerance
  const MetricStats m = site.statsSnapshot().metrics.at("highprec.normwise_rel");
  EXPECT_DOUBLE_EQ(m.of_tolerance, 0.3);  // 3e-4 of 1e-3, not the largest value's 0.25
  EXPECT_DOUBLE_EQ(m.max, 1e-2);
  site.recordMetric("nan_inf.nonfinite", FUMI_KIND_ERROR, 0, false, false, 0);
  EXPECT_TRUE(std::isnan(site.statsSnapshot().metrics.at("nan_inf.nonfinite").of_tolerance));
}

// A verdict that left every output out as rounding noise judged nothing: counted, its figure
// kept apart (noise_max), out of the count, the maximum and the worst; one that left some out
// and judged the rest stays in the distribution and is counted too.
TEST(OpSiteMetrics, RoundingNoiseKeptApartFromTheJudgedFigures) {
  OpSite site("unit_op_noise", "unit", FUMI_DTYPE_F32);
  site.recordMetric("perturb.fumi_ratio", FUMI_KIND_SENSITIVITY, 0.02, false, false, 0.1);
  site.recordMetric("perturb.fumi_ratio", FUMI_KIND_SENSITIVITY, 54.7, false, false, NAN, true);
  site.recordMetric("perturb.fumi_ratio", FUMI_KIND_SENSITIVITY, 9.0, false, false, NAN, true);
  site.recordMetric("perturb.fumi_ratio", FUMI_KIND_SENSITIVITY, 0.05, false, false, 0.1, true);
  const OpStats s = site.statsSnapshot();
  const MetricStats& m = s.metrics.at("perturb.fumi_ratio");
  EXPECT_EQ(m.count, 2u);
  EXPECT_EQ(m.noise, 3u);
  EXPECT_DOUBLE_EQ(m.max, 0.05);
  EXPECT_DOUBLE_EQ(m.noise_max, 54.7);
  EXPECT_DOUBLE_EQ(m.of_tolerance, 0.5);
  EXPECT_DOUBLE_EQ(s.worst.at("perturb.fumi_ratio"), 0.05);
  EXPECT_LT(m.quantile(1.0), 0.06);  // binned: approximate, and no 54.7 in the bins
}

TEST_F(EngineFixture, UnconditionalExclusionKeepsTheFastPath) {
  OpSite site("unit_op_b", "unit", FUMI_DTYPE_F32);
  auto e = make(R"(version: 1
rules:
  - match: { op: unit_op_b }
    checks: []
  - match: { op: "*" }
    checks: [ { plugin: nan_inf } ]
)");
  e->compileSite(site);
  EXPECT_EQ(site.decision.load(), nullptr);
}

TEST_F(EngineFixture, ExhaustedDecisionFallsBackToTheFastPath) {
  OpSite site("unit_op_f", "unit", FUMI_DTYPE_F32);
  auto e = make(R"(version: 1
rules:
  - match: { op: unit_op_f, max_size: 10 }
    sample: { every: 1, max_checks: 2 }
    checks: [ { plugin: nan_inf } ]
  - match: { op: unit_op_f }
    sample: { every: 1, max_checks: 1 }
    checks: [ { plugin: nan_inf } ]
)");
  e->compileSite(site);
  OpDecision* d = site.decision.load();
  ASSERT_NE(d, nullptr);
  EXPECT_NE(d->select(CallFacts{100}, 0), nullptr);  // second rule: its only check
  EXPECT_EQ(d->select(CallFacts{100}, 0), nullptr);
  EXPECT_EQ(site.decision.load(), d);  // the first rule can still check small calls
  EXPECT_NE(d->select(CallFacts{5}, 0), nullptr);
  EXPECT_NE(d->select(CallFacts{5}, 0), nullptr);
  EXPECT_EQ(site.decision.load(), nullptr);  // nothing can be checked any more
  e->resetSamplingAfterFork();
  EXPECT_EQ(site.decision.load(), d);  // a forked child samples afresh
  EXPECT_NE(d->select(CallFacts{100}, 0), nullptr);
}

TEST_F(EngineFixture, ThrowingPluginDisabledOnceOthersContinue) {
  OpSite site("unit_op_c", "unit", FUMI_DTYPE_F32);
  auto e = make(R"(version: 1
rules:
  - match: { op: unit_op_c }
    checks: [ { plugin: throwing }, { plugin: determinism } ]
)");
  e->compileSite(site);
  std::vector<float> x{1, 2, 3}, y{2, 4, 6};
  for (int i = 0; i < 3; ++i) {
    DoubleCall call(site, x, y);
    RuleSampler* s = site.decision.load()->select(CallFacts{3}, 0);
    ASSERT_NE(s, nullptr);
    e->runChecks(call, *s);
    EXPECT_EQ(call.reruns, 1);  // determinism still reran
  }
  EXPECT_EQ((std::vector<float>{2, 4, 6}), y);  // the call's own output untouched
  int errors = 0;
  for (const auto& l : readLines(events()))
    if (l.find("\"event\":\"error\"") != std::string::npos) {
      ++errors;
      EXPECT_NE(l.find("planted failure"), std::string::npos) << l;
    }
  EXPECT_EQ(errors, 1);
  OpStats st = site.statsSnapshot();
  EXPECT_EQ(st.checked, 3u);
  EXPECT_EQ(st.violations, 0u);
  EXPECT_EQ(st.worst.at("determinism.mismatches"), 0.0);
}

// A check's own sample picks among the calls its rule picked (numbered per op), with its own
// max_checks; a call whose every check sampled itself out is neither checked nor skipped.
TEST_F(EngineFixture, ChecksSampleThemselvesWithinTheirRule) {
  OpSite site("unit_op_s", "unit", FUMI_DTYPE_F32);
  auto e = make(R"(version: 1
rules:
  - match: { op: unit_op_s }
    sample: { every: 1 }
    checks:
      - { plugin: determinism }
      - { plugin: highprec, sample: { every: 3, max_checks: 2 } }
)");
  e->compileSite(site);
  std::vector<float> x{1, 2, 3}, y{2, 4, 6};
  std::vector<int> reruns;
  for (uint64_t i = 0; i < 9; ++i) {
    DoubleCall call(site, x, y, i);
    e->runChecks(call, *site.decision.load()->select(CallFacts{3}, i));
    reruns.push_back(call.reruns);
  }
  // determinism on every call; highprec on calls 0 and 3 (6 is past its max_checks)
  EXPECT_EQ(reruns, (std::vector<int>{2, 1, 1, 2, 1, 1, 1, 1, 1}));
  EXPECT_EQ(site.statsSnapshot().checked, 9u);

  OpSite lone("unit_op_t", "unit", FUMI_DTYPE_F32);
  auto e2 = make(R"(version: 1
rules:
  - match: { op: unit_op_t }
    checks: [ { plugin: highprec, sample: { every: 2 } } ]
)");
  e2->compileSite(lone);
  for (uint64_t i = 0; i < 4; ++i) {
    DoubleCall call(lone, x, y, i);
    e2->runChecks(call, *lone.decision.load()->select(CallFacts{3}, i));
    EXPECT_EQ(call.reruns, i % 2 == 0 ? 1 : 0);
  }
  const OpStats st = lone.statsSnapshot();
  EXPECT_EQ(st.checked, 2u);
  EXPECT_EQ(st.skipped, 0u);

  // Under a rule sampling every 2nd call, a check sampling every 2nd of those: calls 0 and 4.
  OpSite nested("unit_op_u", "unit", FUMI_DTYPE_F32);
  auto e3 = make(R"(version: 1
rules:
  - match: { op: unit_op_u }
    sample: { every: 2 }
    checks: [ { plugin: determinism }, { plugin: highprec, sample: { every: 2 } } ]
)");
  e3->compileSite(nested);
  std::vector<int> highprec_on;
  for (uint64_t i = 0; i < 8; ++i) {
    DoubleCall call(nested, x, y, i);
    RuleSampler* s = nested.decision.load()->select(CallFacts{3}, i);
    if (!s) continue;
    e3->runChecks(call, *s);
    if (call.reruns == 2) highprec_on.push_back(static_cast<int>(i));
  }
  EXPECT_EQ(highprec_on, (std::vector<int>{0, 4}));
}

// y = 2 * x like DoubleCall, with its tensors in `memory`. FUMI_MEMORY_DEVICE is a fake device:
// host blocks behind addresses with kTag set (non-canonical: dereferencing one faults), reached
// only through the Call's device virtuals, which count what crosses. The element-wise
// primitives are Call's defaults: staged through the host.
class FakeDeviceCall : public Call {
 public:
  static constexpr uintptr_t kTag = uintptr_t{1} << 62;
  FakeDeviceCall(OpSite& site, std::vector<float>& x, std::vector<float>& y, fumi_memory memory)
      : Call(site, FUMI_DTYPE_F32, FUMI_DTYPE_F32, static_cast<int64_t>(x.size()), 0),
        memory_(memory) {
    const int64_t n = static_cast<int64_t>(x.size());
    addTensor("x", FUMI_ROLE_INPUT, FUMI_DTYPE_F32, memory, {n}, {1}, address(x.data()));
    addTensor("y", FUMI_ROLE_OUTPUT, FUMI_DTYPE_F32, memory, {n}, {1}, address(y.data()));
  }
  fumi_status rerun(fumi_dtype p, void* const* buf) override {
    const fumi_tensor& x = tensors()[0];
    const void* in = host(buf[0] ? buf[0] : x.data);
    for (int64_t i = 0; i < x.shape[0]; ++i)
      storeFromDouble(host(buf[1]), i, 2 * loadAsDouble(in, i, p), p);
    return FUMI_OK;
  }
  void* allocDevice(size_t bytes) override {
    blocks_.emplace_back(bytes);
    ++live;
    return address(blocks_.back().data());
  }
  void releaseDevice(void*) override { --live; }
  bool toHost(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, host(src), bytes);
    to_host += bytes;
    return true;
  }
  bool toDevice(void* dst, const void* src, size_t bytes) override {
    std::memcpy(host(dst), src, bytes);
    return true;
  }
  int live = 0;          // device blocks not released
  size_t to_host = 0;    // bytes copied from the device

 private:
  void* address(void* p) const {
    return memory_ == FUMI_MEMORY_HOST
               ? p
               : reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) | kTag);
  }
  void* host(const void* p) const {
    return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) & ~kTag);
  }
  fumi_memory memory_;
  std::deque<std::vector<unsigned char>> blocks_;
};

// Device tensors reach fumi's checks only through their Call: scratch from allocDevice (all of
// it released), data through toHost/toDevice; the verdicts are the host tensors' exactly.
TEST_F(EngineFixture, DeviceTensorsGoThroughTheCallsDeviceMemory) {
  const char* yaml = R"(version: 1
rules:
  - match: { op: unit_op_mem }
    checks: [ { plugin: perturb }, { plugin: highprec }, { plugin: nan_inf },
              { plugin: determinism } ]
)";
  std::vector<float> x(37), y(37);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = i % 5 == 0 ? 0.0f : 1.0f / static_cast<float>(i + 1);
    y[i] = 2 * x[i];
  }
  y[7] *= 1.001f;  // an error for highprec to find
  std::map<std::string, double> worst[2];
  for (fumi_memory memory : {FUMI_MEMORY_HOST, FUMI_MEMORY_DEVICE}) {
    OpSite site("unit_op_mem", "unit", FUMI_DTYPE_F32);  // one name: the same noise
    FakeDeviceCall call(site, x, y, memory);
    const OpStats st = checkOnce(yaml, site, call, 37);
    EXPECT_EQ(st.checked, 1u);
    EXPECT_EQ(call.live, 0);
    if (memory == FUMI_MEMORY_HOST) EXPECT_EQ(call.to_host, 0u);
    else EXPECT_GT(call.to_host, 0u);  // staged: the default primitives copy
    worst[memory] = st.worst;
  }
  EXPECT_GT(worst[FUMI_MEMORY_HOST].at("highprec.normwise_rel"), 1e-5);
  EXPECT_EQ(worst[FUMI_MEMORY_HOST].count("perturb.fumi_ratio"), 1u);
  EXPECT_EQ(worst[FUMI_MEMORY_DEVICE], worst[FUMI_MEMORY_HOST]);
}

// A call's own output is scanned once for all its checks (Call::keepScan): two nan_inf checks
// (as nan_inf after checksum's contraction, which scans the output in the same pass) read the
// output once, and say the same.
class ScanCountingCall final : public FakeDeviceCall {
 public:
  using FakeDeviceCall::FakeDeviceCall;
  fumi_status scanDevice(int32_t index, const void* buffer, fumi_dtype dtype,
                         fumi_scan* out) override {
    ++scans[index];
    return Call::scanDevice(index, buffer, dtype, out);
  }
  std::map<int32_t, int> scans;
};

TEST_F(EngineFixture, OwnOutputScannedOnceForAllChecks) {
  const char* yaml = R"(version: 1
rules:
  - match: { op: unit_op_scan }
    checks: [ { plugin: nan_inf }, { plugin: nan_inf, tolerance: 1 } ]
)";
  std::vector<float> x(16, 1.0f), y(16, 2.0f);
  y[3] = std::numeric_limits<float>::infinity();
  OpSite site("unit_op_scan", "unit", FUMI_DTYPE_F32);
  ScanCountingCall call(site, x, y, FUMI_MEMORY_DEVICE);
  const OpStats st = checkOnce(yaml, site, call, 16);
  EXPECT_EQ(st.checked, 1u);
  EXPECT_EQ(call.scans[1], 1);  // the output: once, where each check read it before
  EXPECT_EQ(call.scans[0], 1);  // the input, read to explain the Inf: once as well
  EXPECT_EQ(st.worst.at("nan_inf.nonfinite"), 1.0);
  EXPECT_EQ(st.violations, 1u);  // the first check's (tolerance 0); the second allows one
}

// A device whose maps leave their count for later where the plugin allows it
// (FUMI_MAP_CHANGED_LATER): stored when the host settles (engine.h, deferUntilSettled), as fumi's
// kernels do; `fail_rerun` makes the check return before any comparison.
class DeferringCall final : public FakeDeviceCall {
 public:
  using FakeDeviceCall::FakeDeviceCall;
  fumi_status mapDevice(int32_t index, const void* src, fumi_dtype src_dtype, void* dst,
                        fumi_dtype dst_dtype, const fumi_map_spec& spec,
                        uint64_t* changed) override {
    uint64_t count = 0;
    const fumi_status st = Call::mapDevice(index, src, src_dtype, dst, dst_dtype, spec,
                                           changed ? &count : nullptr);
    if (!changed || !(spec.flags & FUMI_MAP_CHANGED_LATER)) {
      if (changed) *changed = count;
      return st;
    }
    *changed = ~uint64_t{0};  // not yet: a plugin reading it now reads garbage
    deferUntilSettled([this, changed, count](bool write) {
      if (write) *changed = count;
      ++(write ? stored : dropped);
    });
    return st;
  }
  fumi_status rerun(fumi_dtype p, void* const* buf) override {
    return fail_rerun ? FUMI_ERROR : FakeDeviceCall::rerun(p, buf);
  }
  bool fail_rerun = false;
  int stored = 0, dropped = 0;  // deferred counts stored, and dropped when the check returned
};

// perturb asks for its counts later: each is stored before perturb reads it (the same
// perturbed fraction as counted at once), and one whose check returns first (the rerun failed)
// is dropped, never stored into the gone check's memory.
TEST_F(EngineFixture, DeferredMapCountsAreStoredBeforeTheyAreReadAndDroppedAfter) {
  PolicyResult policy = parsePolicyText(R"(version: 1
rules:
  - match: { op: unit_op_later }
    checks: [ { plugin: perturb, trials: 2 } ]
)", "t.yaml");
  ASSERT_TRUE(policy.ok());
  ReportSettings all;
  all.all_checks = true;  // passing checks' events too: their perturbed_fraction
  TempDir out_tmp;
  const std::string& out = out_tmp.path;
  Reporter rep{all, out, "off", "test"};
  rep.open();
  Engine e(*policy.policy, rep, {FUMI_TEST_PLUGIN_DIR, FUMI_BUILTIN_PLUGIN_DIR});
  std::vector<float> x(37), y(37);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = 1.0f / static_cast<float>(i + 1);
    y[i] = 2 * x[i];
  }
  std::vector<double> fractions;
  for (bool defer : {false, true}) {
    OpSite site("unit_op_later", "unit", FUMI_DTYPE_F32);  // one name: the same noise
    e.compileSite(site);
    std::unique_ptr<FakeDeviceCall> call =
        defer ? std::make_unique<DeferringCall>(site, x, y, FUMI_MEMORY_DEVICE)
              : std::make_unique<FakeDeviceCall>(site, x, y, FUMI_MEMORY_DEVICE);
    e.runChecks(*call, *site.decision.load()->select(CallFacts{37}, 0));
    if (defer) {
      const auto& d = static_cast<const DeferringCall&>(*call);
      EXPECT_EQ(d.stored, 2);  // one input, two trials
      EXPECT_EQ(d.dropped, 0);
    }
  }
  for (const std::string& line :
       readLines(out + "/events-" + std::to_string(getpid()) + ".jsonl")) {
    const auto ev = nlohmann::json::parse(line);
    if (ev["event"] == "check") fractions.push_back(ev["extra"]["perturbed_fraction"]);
  }
  ASSERT_EQ(fractions.size(), 2u);
  EXPECT_GT(fractions[0], 0.3);
  EXPECT_EQ(fractions[1], fractions[0]);  // stored before perturb read them

  OpSite site("unit_op_later", "unit", FUMI_DTYPE_F32);
  e.compileSite(site);
  DeferringCall call(site, x, y, FUMI_MEMORY_DEVICE);
  call.fail_rerun = true;
  e.runChecks(call, *site.decision.load()->select(CallFacts{37}, 0));
  EXPECT_EQ(call.stored, 0);
  EXPECT_EQ(call.dropped, 1);
  settleDeferred(true);  // nothing left over for the thread's next check
  EXPECT_EQ(call.stored, 0);
}

TEST_F(EngineFixture, ScratchBudgetSkipsInsteadOfFailing) {
  OpSite site("unit_op_d", "unit", FUMI_DTYPE_F32);
  auto e = make(R"(version: 1
scratch_budget: 16
rules:
  - match: { op: unit_op_d }
    checks: [ { plugin: highprec } ]
)");
  e->compileSite(site);
  std::vector<float> x(64, 1.0f), y(64, 2.0f);
  DoubleCall call(site, x, y);
  e->runChecks(call, *site.decision.load()->select(CallFacts{64}, 0));
  EXPECT_EQ(call.reruns, 0);
  OpStats st = site.statsSnapshot();
  EXPECT_EQ(st.checked, 0u);
  EXPECT_EQ(st.skipped, 1u);
  // The check's own counts say why (the summary's ops[].checks).
  const CheckCounts& c = st.checks.at("highprec");
  EXPECT_EQ(c.runs, 0u);
  EXPECT_EQ(c.skipped(), 1u);
  EXPECT_EQ(c.no_scratch, 1u);
  EXPECT_EQ(c.unsupported + c.failed, 0u);
}

// A check that cannot judge a call is counted as such on its own (ops[].checks), beside the
// checks that ran: the call is checked, and not skipped, as one check judged it.
TEST_F(EngineFixture, EachCheckCountsWhatItDeclined) {
  OpSite site("unit_op_k", "unit", FUMI_DTYPE_F32);
  auto e = make(R"(version: 1
rules:
  - match: { op: unit_op_k }
    checks: [ { plugin: reference }, { plugin: highprec } ]
)");
  e->compileSite(site);
  std::vector<float> x(16, 1.0f), y(16, 2.0f);
  for (uint64_t i = 0; i < 3; ++i) {
    DoubleCall call(site, x, y, i);  // no reference() of its own: `reference` declines
    e->runChecks(call, *site.decision.load()->select(CallFacts{16}, i));
  }
  const OpStats st = site.statsSnapshot();
  EXPECT_EQ(st.checked, 3u);
  EXPECT_EQ(st.skipped, 0u);
  const CheckCounts& ref = st.checks.at("reference");
  EXPECT_EQ(ref.runs, 0u);
  EXPECT_EQ(ref.skipped(), 3u);
  EXPECT_EQ(ref.unsupported, 3u);
  const CheckCounts& hp = st.checks.at("highprec");
  EXPECT_EQ(hp.runs, 3u);
  EXPECT_EQ(hp.skipped(), 0u);
}

TEST_F(EngineFixture, PlantedWrongResultIsAViolation) {
  OpSite site("unit_op_e", "unit", FUMI_DTYPE_F32);
  auto e = make(R"(version: 1
rules:
  - match: { op: unit_op_e }
    checks: [ { plugin: highprec, tolerance: 1e-6 } ]
)");
  e->compileSite(site);
  std::vector<float> x{1, 2, 3, 4}, y{2, 4, 6, 8.5f};  // last element wrong
  DoubleCall call(site, x, y);
  e->runChecks(call, *site.decision.load()->select(CallFacts{4}, 0));
  OpStats st = site.statsSnapshot();
  EXPECT_EQ(st.violations, 1u);
  EXPECT_GT(st.worst.at("highprec.normwise_rel"), 0.03);
}

// The policy's `tolerances:` table for the check's kind applies to entries without their own
// tolerance, at the call's precision; an entry's own tolerance wins.
TEST_F(EngineFixture, KindTolerancesReplaceTheDtypeTable) {
  std::vector<float> x{1, 2, 3, 4}, y{2, 4, 6, 8.5f};  // normwise error ~0.045
  auto violations = [&](const char* yaml) {
    OpSite site("unit_op_kind", "unit", FUMI_DTYPE_F32);
    auto e = make(yaml);
    e->compileSite(site);
    DoubleCall call(site, x, y);
    e->runChecks(call, *site.decision.load()->select(CallFacts{4}, 0));
    return site.statsSnapshot().violations;
  };
  const char* base = R"(version: 1
rules:
  - match: { op: unit_op_kind }
    checks: [ { plugin: highprec %s } ]
tolerances: { error: %s }
)";
  char yaml[512];
  std::snprintf(yaml, sizeof yaml, base, "", "{ f32: 0.5, bf16: 1e-9 }");
  EXPECT_EQ(violations(yaml), 0u);  // f32 entry of the table: 0.5
  std::snprintf(yaml, sizeof yaml, base, "", "{ bf16: 0.5 }");
  EXPECT_EQ(violations(yaml), 1u);  // no f32 entry: the dtype table's 1e-4
  std::snprintf(yaml, sizeof yaml, base, ", tolerance: 1e-6", "0.5");
  EXPECT_EQ(violations(yaml), 1u);  // the entry's own tolerance wins
  std::snprintf(yaml, sizeof yaml, base, "", "fumi");
  EXPECT_EQ(violations(yaml), 1u);
}

// perturb findings are sensitivity, highprec's errors; both land in the summary's per-op
// distributions and on events as "kind".
TEST_F(EngineFixture, EventsAndStatsCarryTheKindOfFinding) {
  OpSite site("unit_op_kinds", "unit", FUMI_DTYPE_F32);
  auto e = make(R"(version: 1
rules:
  - match: { op: unit_op_kinds }
    checks: [ { plugin: highprec, tolerance: 1e-6 }, { plugin: perturb, trials: 1, tolerance: 0 } ]
)");
  e->compileSite(site);
  std::vector<float> x{1, 2, 3, 4}, y{2, 4, 6, 8.5f};
  DoubleCall call(site, x, y);
  e->runChecks(call, *site.decision.load()->select(CallFacts{4}, 0));
  const OpStats st = site.statsSnapshot();
  EXPECT_EQ(st.metrics.at("highprec.normwise_rel").kind, FUMI_KIND_ERROR);
  EXPECT_EQ(st.metrics.at("perturb.fumi_ratio").kind, FUMI_KIND_SENSITIVITY);
  EXPECT_EQ(st.metrics.at("perturb.fumi_ratio").count, 1u);
  std::map<std::string, std::string> kinds;
  for (const std::string& line : readLines(events())) {
    const auto ev = nlohmann::json::parse(line);
    if (ev["event"] == "violation") kinds[ev["check"]] = ev["kind"];
  }
  EXPECT_EQ(kinds["highprec"], "error");
  EXPECT_EQ(kinds["perturb"], "sensitivity");
}

// A result off by more than its error tolerance only because its terms cancel (within the
// tolerance had its k terms cancelled no further than random signs do: its error against their
// magnitudes times sqrt(k)) is judged as a cancellation: data below the policy's bound (a
// near-zero value head keeps 3 digits: batch 14), a violation of kind cancellation above it (a
// result left with no digit); a kernel's error stays an error, and so does any where fumi does
// not know k.
TEST_F(EngineFixture, CancellingTermsJudgedAgainstTheCancellationBound) {
  struct Outcome {
    OpStats stats;
    std::vector<nlohmann::json> violations;
  };
  // `offset` is added to the f32 sum the call returns (0: as f32 sums).
  auto judge = [&](std::vector<float> x, const std::string& tolerances, int64_t k = -1,
                   float offset = 0, const std::string& check = "{ plugin: highprec }") {
    OpSite site("unit_op_sum", "unit", FUMI_DTYPE_F32);
    auto e = make("version: 1\nrules:\n  - match: { op: unit_op_sum }\n"
                  "    checks: [ " + check + " ]\n" + tolerances);
    e->compileSite(site);
    float y = 0;
    SumCall call(site, x, y, k);
    EXPECT_EQ(call.rerun(FUMI_DTYPE_F32, std::vector<void*>{nullptr, &y}.data()), FUMI_OK);
    y += offset;
    e->runChecks(call, *site.decision.load()->select(CallFacts{3}, 0));
    Outcome o{site.statsSnapshot(), {}};
    for (const std::string& line : readLines(events())) {
      const auto ev = nlohmann::json::parse(line);
      if (ev["event"] == "violation" && ev["op"] == "unit_op_sum") o.violations.push_back(ev);
    }
    std::remove(events().c_str());
    reporter.open();
    return o;
  };
  // 1e4 + 0.2503 - 1e4 in f32 keeps 0.25 (an ulp of 1e4 is 2^-10): relative error 1.2e-3, over
  // f32's 1e-4, and 1.5e-8 of the terms.
  Outcome kept3 = judge({1e4f, 0.2503f, -1e4f}, "");
  EXPECT_EQ(kept3.stats.violations, 0u);
  EXPECT_TRUE(kept3.violations.empty());
  EXPECT_EQ(kept3.stats.metrics.count("highprec.normwise_rel"), 0u);
  const MetricStats& data = kept3.stats.metrics.at("highprec.cancelled_rel");
  EXPECT_EQ(data.kind, FUMI_KIND_CANCELLATION);
  EXPECT_EQ(data.count, 1u);
  EXPECT_NEAR(kept3.stats.worst.at("highprec.cancelled_rel"), 1.2e-3, 1e-4);
  // A bound of 0 raises every such call, as a cancellation, with the figures that explain it.
  Outcome raised = judge({1e4f, 0.2503f, -1e4f}, "tolerances: { cancellation: 0 }\n");
  ASSERT_EQ(raised.violations.size(), 1u);
  const nlohmann::json& v = raised.violations[0];
  EXPECT_EQ(v["kind"], "cancellation");
  EXPECT_EQ(v["metric"], "cancelled_rel");
  EXPECT_DOUBLE_EQ(v["tolerance"].get<double>(), 1e-4);  // never below the error tolerance
  EXPECT_DOUBLE_EQ(v["extra"]["error_tolerance"].get<double>(), 1e-4);
  EXPECT_NEAR(v["extra"]["cancellation"].get<double>(), 2e4 / 0.2503, 2e3);
  EXPECT_LT(v["extra"]["error_of_terms"].get<double>(), 1e-7);
  // 1e4 + 0.0025 - 1e4 keeps 3 * 2^-10 = 0.00293: 17% off, past the default bound of 0.1.
  Outcome lost = judge({1e4f, 0.0025f, -1e4f}, "");
  ASSERT_EQ(lost.violations.size(), 1u);
  EXPECT_EQ(lost.violations[0]["kind"], "cancellation");
  EXPECT_DOUBLE_EQ(lost.violations[0]["tolerance"].get<double>(), 0.1);
  EXPECT_GT(lost.violations[0]["value"].get<double>(), 0.15);
  EXPECT_EQ(lost.stats.metrics.at("highprec.cancelled_rel").violations, 1u);
  // Without the count of terms, the error stays an error.
  Outcome unknown = judge({1e4f, 0.2503f, -1e4f}, "", 0);
  ASSERT_EQ(unknown.violations.size(), 1u);
  EXPECT_EQ(unknown.violations[0]["kind"], "error");
  // Off by 1 in 2e4 of the terms' magnitudes: within 1e-4 of them, but summing 10^4 terms that
  // cancel as random signs do (100-fold) it would be 5e-3 off: the op's error.
  Outcome sloppy = judge({1e4f, 0.2503f, -1e4f}, "", 10000, 1.0f);
  ASSERT_EQ(sloppy.violations.size(), 1u);
  EXPECT_EQ(sloppy.violations[0]["kind"], "error");
  EXPECT_LT(sloppy.violations[0]["extra"]["error_of_terms"].get<double>(), 1e-4);
  // A tolerance in ULPs is not a relative one: no terms to compare it with, an error.
  Outcome ulps = judge({1e4f, 0.2503f, -1e4f}, "", -1, 0,
                       "{ plugin: highprec, metric: ulp, tolerance: 0.5 }");
  ASSERT_EQ(ulps.violations.size(), 1u);
  EXPECT_EQ(ulps.violations[0]["kind"], "error");
  EXPECT_FALSE(ulps.violations[0]["extra"].contains("error_of_terms"));
  // Terms that do not cancel: a wrong sum is the op's error.
  OpSite site("unit_op_sum_wrong", "unit", FUMI_DTYPE_F32);
  auto e = make("version: 1\nrules:\n  - match: { op: unit_op_sum_wrong }\n"
                "    checks: [ { plugin: highprec } ]\n");
  e->compileSite(site);
  std::vector<float> x{1, 2, 3};
  float y = 6.5f;
  SumCall call(site, x, y);
  e->runChecks(call, *site.decision.load()->select(CallFacts{3}, 0));
  const OpStats st = site.statsSnapshot();
  EXPECT_EQ(st.violations, 1u);
  EXPECT_EQ(st.metrics.at("highprec.normwise_rel").kind, FUMI_KIND_ERROR);
  EXPECT_EQ(st.metrics.count("highprec.cancelled_rel"), 0u);
}

// A plugin built for ABI 1 is still loaded and gets a host API marked 1 (its own check of the
// version would refuse anything else), whose entry points serve it.
TEST_F(EngineFixture, ServesPluginsBuiltForAbi1) {
  OpSite site("unit_op_abi1", "unit", FUMI_DTYPE_F32);
  auto e = make(R"(version: 1
rules:
  - match: { op: unit_op_abi1 }
    checks: [ { plugin: abi1 } ]
)");
  e->compileSite(site);
  std::vector<float> x{1, 2, 3, 4}, y{2, 4, 6, -9};
  DoubleCall call(site, x, y);
  e->runChecks(call, *site.decision.load()->select(CallFacts{4}, 0));
  const OpStats st = site.statsSnapshot();
  ASSERT_EQ(st.metrics.count("abi1.absmax"), 1u);
  EXPECT_EQ(st.metrics.at("abi1.absmax").count, 1u);
  EXPECT_EQ(st.metrics.at("abi1.absmax").max, 9.0);
}

// nan_inf: non-finite outputs from non-finite inputs are counted, not raised; from finite
// inputs they are violations ("appeared").
TEST_F(EngineFixture, NanInfCountsPropagatedAndRaisesAppeared) {
  const float inf = std::numeric_limits<float>::infinity();
  auto run = [&](std::vector<float> x, std::vector<float> y) {
    OpSite site("unit_op_nan", "unit", FUMI_DTYPE_F32);
    auto e = make(R"(version: 1
nan_origin: false
rules:
  - match: { op: unit_op_nan }
    checks: [ { plugin: nan_inf } ]
)");
    e->compileSite(site);
    DoubleCall call(site, x, y);
    e->runChecks(call, *site.decision.load()->select(CallFacts{2}, 0));
    return site.statsSnapshot();
  };
  OpStats propagated = run({1, inf}, {2, inf});
  EXPECT_EQ(propagated.violations, 0u);
  EXPECT_EQ(propagated.nonfinite_propagated, 1u);
  OpStats appeared = run({1, 2}, {2, inf});
  EXPECT_EQ(appeared.violations, 1u);
  EXPECT_EQ(appeared.nonfinite_propagated, 0u);
  OpStats nan_from_inf = run({1, inf}, {2, std::nanf("")});
  EXPECT_EQ(nan_from_inf.violations, 1u);
}

TEST(MetricStats, QuantilesWithinABinOfTheTruth) {
  MetricStats m;
  for (int i = 1; i <= 1000; ++i) m.add(i * 1e-6, i > 990);
  EXPECT_EQ(m.count, 1000u);
  EXPECT_EQ(m.violations, 10u);
  EXPECT_DOUBLE_EQ(m.max, 1e-3);
  EXPECT_NEAR(m.quantile(0.5), 5e-4, 5e-4 * 0.1);
  EXPECT_NEAR(m.quantile(0.99), 9.9e-4, 9.9e-4 * 0.1);
  EXPECT_LE(m.quantile(1.0), m.max);
  MetricStats zeros;
  zeros.add(0, false);
  zeros.add(std::nan(""), true);
  EXPECT_EQ(zeros.quantile(0.5), 0.0);
  EXPECT_EQ(zeros.nan, 1u);
}

TEST(PluginLoader, MissingWrongAbiAndBuiltins) {
  const std::vector<std::string> dirs{FUMI_TEST_PLUGIN_DIR, FUMI_BUILTIN_PLUGIN_DIR};
  PluginLibrary missing = loadPlugin("nosuch", dirs);
  EXPECT_EQ(missing.plugin, nullptr);
  EXPECT_NE(missing.error.find("plugin 'nosuch' not found"), std::string::npos);
  EXPECT_NE(missing.error.find(FUMI_TEST_PLUGIN_DIR), std::string::npos);
  PluginLibrary wrong = loadPlugin("wrongabi", dirs);
  EXPECT_EQ(wrong.plugin, nullptr);
  EXPECT_NE(wrong.error.find("speaks plugin ABI " + std::to_string(FUMI_PLUGIN_ABI_VERSION + 41)),
            std::string::npos)
      << wrong.error;
  EXPECT_EQ(loadPlugin("../nan_inf", dirs).plugin, nullptr);  // names are not paths
  PluginLibrary ok = loadPlugin("perturb", dirs);
  ASSERT_NE(ok.plugin, nullptr) << ok.error;
  EXPECT_EQ(ok.abi_version, FUMI_PLUGIN_ABI_VERSION);
  std::vector<std::string> names;
  for (const auto& p : discoverPlugins({FUMI_BUILTIN_PLUGIN_DIR})) {
    EXPECT_TRUE(p.error.empty()) << p.error;
    names.push_back(p.name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"checksum", "determinism", "highprec", "nan_inf",
                                            "perturb", "reference"}));
}

}  // namespace
}  // namespace fumi
