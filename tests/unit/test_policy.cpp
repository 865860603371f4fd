// Policy parsing: valid policies, the embedded default, warnings for unknown keys and
// operators, and a corpus of malformed files (tests/policies/bad/*.yaml), each declaring the
// file:line:col and message it must produce in its first line: "# expect: L:C message".
#include <dirent.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "policy.h"

namespace fumi {
namespace {

bool hasDiagnostic(const PolicyResult& r, Diagnostic::Severity sev, const std::string& text) {
  for (const auto& d : r.diagnostics)
    if (d.severity == sev && d.message.find(text) != std::string::npos) return true;
  return false;
}

TEST(Policy, TolerancesPerKindAndPrecision) {
  const PolicyResult r = parsePolicyText(R"(version: 1
rules: []
tolerances:
  sensitivity: { f32: 1e-2, bf16: 0.25 }
  error: 1e-3
nan_origin: { steps: 3, max_ops: 500 }
)", "t.yaml");
  ASSERT_TRUE(r.ok()) << (r.diagnostics.empty() ? "" : r.diagnostics[0].str());
  const Policy& p = *r.policy;
  const KindTolerances& sens = p.kind_tolerances[FUMI_KIND_SENSITIVITY];
  EXPECT_DOUBLE_EQ(sens[FUMI_DTYPE_F32], 1e-2);
  EXPECT_DOUBLE_EQ(sens[FUMI_DTYPE_BF16], 0.25);
  EXPECT_DOUBLE_EQ(sens[FUMI_DTYPE_F64], 2e-11);  // a map sets what it names, over the default
  for (double t : p.kind_tolerances[FUMI_KIND_ERROR]) EXPECT_DOUBLE_EQ(t, 1e-3);
  // Every policy has the calibrated sensitivity bounds (FuMi's error table, f32 1e-4 and bf16
  // 1e-2, flagged 113 of 115 healthy bf16 GEMMs of a nanoGPT run); `fumi` asks for that table.
  const PolicyResult plain = parsePolicyText("version: 1\nrules: []\n", "t.yaml");
  ASSERT_TRUE(plain.ok());
  const KindTolerances& dflt = plain.policy->kind_tolerances[FUMI_KIND_SENSITIVITY];
  EXPECT_DOUBLE_EQ(dflt[FUMI_DTYPE_F32], 0.1);
  EXPECT_DOUBLE_EQ(dflt[FUMI_DTYPE_BF16], 1.0);
  EXPECT_DOUBLE_EQ(dflt[FUMI_DTYPE_F16], 1.0);
  EXPECT_DOUBLE_EQ(dflt[FUMI_DTYPE_TF32], 0.08);
  EXPECT_DOUBLE_EQ(dflt[FUMI_DTYPE_F64], 2e-11);
  for (double t : plain.policy->kind_tolerances[FUMI_KIND_ERROR]) EXPECT_TRUE(std::isnan(t));
  const PolicyResult table =
      parsePolicyText("version: 1\nrules: []\ntolerances: { sensitivity: fumi }\n", "t.yaml");
  ASSERT_TRUE(table.ok());
  for (double t : table.policy->kind_tolerances[FUMI_KIND_SENSITIVITY]) EXPECT_TRUE(std::isnan(t));
  EXPECT_TRUE(p.nan_origin.enabled);
  EXPECT_EQ(p.nan_origin.steps, 3);
  EXPECT_EQ(p.nan_origin.max_ops, 500);
  const PolicyResult off = parsePolicyText("version: 1\nrules: []\nnan_origin: false\n", "t.yaml");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off.policy->nan_origin.enabled);
  // look_back: auto unless said; true, false; anything else is an error at its line.
  using LookBack = NanOriginSettings::LookBack;
  EXPECT_EQ(p.nan_origin.look_back, LookBack::kAuto);
  for (const auto& [text, want] : {std::pair<const char*, LookBack>{"true", LookBack::kOn},
                                   {"no", LookBack::kOff},
                                   {"auto", LookBack::kAuto}}) {
    const PolicyResult set = parsePolicyText(
        std::string("version: 1\nrules: []\nnan_origin: { look_back: ") + text + " }\n", "t.yaml");
    ASSERT_TRUE(set.ok()) << text;
    EXPECT_EQ(set.policy->nan_origin.look_back, want) << text;
  }
  const PolicyResult bad =
      parsePolicyText("version: 1\nrules: []\nnan_origin: { look_back: 4096 }\n", "t.yaml");
  ASSERT_FALSE(bad.ok());
  const std::string why = bad.diagnostics[0].str();
  EXPECT_NE(why.find("t.yaml:3"), std::string::npos) << why;
  EXPECT_NE(why.find("look_back (or auto)"), std::string::npos) << why;
}

TEST(Policy, ErrorToleranceModels) {
  auto model = [](const char* value) {
    const PolicyResult r = parsePolicyText(
        std::string("version: 1\nrules: []\ntolerances:\n  error: ") + value + "\n", "t.yaml");
    EXPECT_TRUE(r.ok()) << (r.diagnostics.empty() ? "" : r.diagnostics[0].str());
    return r.ok() ? r.policy->error_model : FUMI_TOLERANCE_TABLE;
  };
  EXPECT_EQ(model("precision"), FUMI_TOLERANCE_PRECISION);
  EXPECT_EQ(model("\"precision\""), FUMI_TOLERANCE_PRECISION);
  EXPECT_EQ(model("fumi"), FUMI_TOLERANCE_TABLE);
  EXPECT_EQ(model("max"), FUMI_TOLERANCE_MAX);
  const PolicyResult none = parsePolicyText("version: 1\nrules: []\n", "t.yaml");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none.policy->error_model, FUMI_TOLERANCE_MAX);  // the default
  // A misspelt model names the choices, at its location.
  const PolicyResult bad =
      parsePolicyText("version: 1\nrules: []\ntolerances: { error: precisoin }\n", "t.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.diagnostics.at(0).str().rfind("t.yaml:3:22: error: 'error' must be a number, "
                                              "'fumi', 'precision', 'max' or a map",
                                              0),
            0u)
      << bad.diagnostics.at(0).str();
}

// The cancellation bound: 0.1 at every precision unless the policy sets it (a number, or a map
// over the default); it has no FuMi table to fall back to, so `fumi` is refused at its location.
TEST(Policy, CancellationBounds) {
  const PolicyResult plain = parsePolicyText("version: 1\nrules: []\n", "t.yaml");
  ASSERT_TRUE(plain.ok());
  for (fumi_dtype d : {FUMI_DTYPE_F64, FUMI_DTYPE_F32, FUMI_DTYPE_TF32, FUMI_DTYPE_BF16})
    EXPECT_DOUBLE_EQ(plain.policy->cancellation_bounds[d], 0.1);
  const PolicyResult set = parsePolicyText(
      "version: 1\nrules: []\ntolerances: { cancellation: { f32: 1e-3 } }\n", "t.yaml");
  ASSERT_TRUE(set.ok());
  EXPECT_DOUBLE_EQ(set.policy->cancellation_bounds[FUMI_DTYPE_F32], 1e-3);
  EXPECT_DOUBLE_EQ(set.policy->cancellation_bounds[FUMI_DTYPE_BF16], 0.1);
  const PolicyResult all =
      parsePolicyText("version: 1\nrules: []\ntolerances: { cancellation: 0 }\n", "t.yaml");
  ASSERT_TRUE(all.ok());
  EXPECT_DOUBLE_EQ(all.policy->cancellation_bounds[FUMI_DTYPE_F64], 0.0);
  for (const char* bad : {"fumi", "max", "-1"}) {
    const PolicyResult r = parsePolicyText(
        std::string("version: 1\nrules: []\ntolerances: { cancellation: ") + bad + " }\n",
        "t.yaml");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.diagnostics.at(0).str().rfind("t.yaml:3:29: error: ", 0), 0u)
        << r.diagnostics.at(0).str();
  }
}

TEST(Policy, DefaultPolicyRaisesSensitivityOnlyFarAboveErrors) {
  const PolicyResult r = parsePolicyText(embeddedDefaultPolicy(), "<embedded default>");
  ASSERT_TRUE(r.ok());
  const KindTolerances& sens = r.policy->kind_tolerances[FUMI_KIND_SENSITIVITY];
  // At least 100x FuMi's error table (f32 1e-4, bf16 1e-2) wherever it is set.
  EXPECT_GE(sens[FUMI_DTYPE_F32], 100 * 1e-4);
  EXPECT_GE(sens[FUMI_DTYPE_BF16], 10 * 1e-2);
  EXPECT_TRUE(std::isnan(r.policy->kind_tolerances[FUMI_KIND_ERROR][FUMI_DTYPE_F32]));
  EXPECT_TRUE(r.policy->nan_origin.enabled);
}

TEST(Policy, MinimalPolicyFromTheIssue) {
  const std::string path = std::string(FUMI_EXAMPLES_DIR) + "/minimal.yaml";
  const PolicyResult r = parsePolicyFile(path);
  ASSERT_TRUE(r.ok()) << (r.diagnostics.empty() ? "" : r.diagnostics[0].str());
  EXPECT_TRUE(r.diagnostics.empty());
  const Policy& p = *r.policy;
  ASSERT_EQ(p.rules.size(), 1u);
  const Rule& rule = p.rules[0];
  EXPECT_EQ(rule.name, "rule[0]");
  EXPECT_EQ(rule.match.ops, std::vector<std::string>{"sgemm*"});
  EXPECT_EQ(rule.sample.every, 1u);
  ASSERT_EQ(rule.checks.size(), 2u);
  EXPECT_EQ(rule.checks[0].plugin, "highprec");
  EXPECT_DOUBLE_EQ(rule.checks[0].tolerance, 1e-5);
  EXPECT_TRUE(std::isnan(rule.checks[1].tolerance));
  ASSERT_EQ(rule.checks[1].params.size(), 1u);
  EXPECT_EQ(rule.checks[1].params[0].first, "trials");
  EXPECT_EQ(rule.checks[1].params[0].second, "4");
  EXPECT_EQ(rule.checks[1].loc.line, 9);
  EXPECT_EQ(rule.checks[1].loc.col, 9);
}

TEST(Policy, EveryKey) {
  const PolicyResult r = parsePolicyText(R"(version: 1
on_error: abort
scratch_budget: 64MiB
overhead_budget: 0.02
plugin_dirs: [/opt/a, /opt/b]
report: { dir: out, stack_depth: 8, log_level: debug, all_checks: true, log_violations: 4,
          violation_events: 7 }
defaults:
  sample: { first: 2, every: 50 }
  action: dump
rules:
  - name: big
    match: { op: "*gemm*", backend: blas, dtype: [f32, f64], min_size: 10, max_size: 1000 }
    sample: { probability: 0.25, seed: 9, max_checks: 3 }
    action: abort
    checks: [ { plugin: nan_inf }, { plugin: perturb, inputs: [A, B] } ]
  - match: { op: sgemv_, dtype: f32 }
    checks: []
  - match: { op: ["aten::addmm", "aten::*mm"], phase: [forward, backward], device: "cuda*" }
    checks: []
)",
                                         "all.yaml");
  ASSERT_TRUE(r.ok());
  const Policy& p = *r.policy;
  EXPECT_EQ(p.on_error, OnError::kAbort);
  EXPECT_EQ(p.scratch_budget, 64ull << 20);
  EXPECT_DOUBLE_EQ(p.overhead_budget, 0.02);
  EXPECT_EQ(p.plugin_dirs, (std::vector<std::string>{"/opt/a", "/opt/b"}));
  EXPECT_EQ(p.report.dir, "out");
  EXPECT_EQ(p.report.stack_depth, 8);
  EXPECT_EQ(p.report.log_violations, 4);
  EXPECT_EQ(p.report.violation_events, 7);
  EXPECT_EQ(p.report.log_level, "debug");
  EXPECT_TRUE(p.report.all_checks);
  const Rule& big = p.rules[0];
  EXPECT_EQ(big.name, "big");
  EXPECT_EQ(big.match.dtypes, (std::vector<fumi_dtype>{FUMI_DTYPE_F32, FUMI_DTYPE_F64}));
  EXPECT_EQ(big.match.min_size, 10);
  EXPECT_EQ(big.match.max_size, 1000);
  EXPECT_DOUBLE_EQ(big.sample.probability, 0.25);
  EXPECT_EQ(big.sample.seed, 9u);
  EXPECT_EQ(big.sample.max_checks, 3u);
  EXPECT_EQ(big.sample.every, 0u);  // a rule's own sample replaces the defaults entirely
  EXPECT_EQ(big.action, Action::kAbort);
  EXPECT_EQ(big.checks[1].params[0].second, "A,B");
  const Rule& second = p.rules[1];
  EXPECT_EQ(second.sample.first, 2u);  // defaults apply
  EXPECT_EQ(second.sample.every, 50u);
  EXPECT_EQ(second.action, Action::kDump);
  EXPECT_TRUE(second.checks.empty());
  EXPECT_TRUE(second.match.phases.empty());
  EXPECT_EQ(second.match.device, "*");
  const Rule& third = p.rules[2];
  EXPECT_EQ(third.match.phases, (std::vector<std::string>{"forward", "backward"}));
  EXPECT_EQ(third.match.device, "cuda*");
  EXPECT_EQ(third.match.ops, (std::vector<std::string>{"aten::addmm", "aten::*mm"}));
}

TEST(Policy, UnknownKeysWarnWithLocation) {
  const PolicyResult r = parsePolicyText(R"(version: 1
colour: blue
rules:
  - match: { op: sgemm_, flavour: x }
    checks: []
)",
                                         "w.yaml");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.diagnostics.size(), 2u);
  EXPECT_EQ(r.diagnostics[0].str().rfind("w.yaml:2:1: warning: unknown key 'colour'", 0), 0u)
      << r.diagnostics[0].str();
  EXPECT_NE(r.diagnostics[1].str().find("w.yaml:4:26: warning: unknown key 'flavour'"),
            std::string::npos)
      << r.diagnostics[1].str();
}

TEST(Policy, UnknownOperatorWarns) {
  const PolicyResult r = parsePolicyText(
      "version: 1\nrules:\n  - match: { op: sgem }\n    checks: []\n"
      "  - match: { op: \"aten::addmm\" }\n    checks: []\n",
      "ops.yaml");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.diagnostics.size(), 1u);  // aten:: ops are known only at run time: no warning
  EXPECT_EQ(r.diagnostics[0].loc.line, 3);
  EXPECT_TRUE(hasDiagnostic(r, Diagnostic::Severity::kWarning, "'sgem' matches no operator"));
}

TEST(Policy, EmbeddedDefaultIsValidAndChecksGemm) {
  const PolicyResult r = parsePolicyText(embeddedDefaultPolicy(), "<embedded default>");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.diagnostics.empty());
  bool gemm = false;
  for (const Rule& rule : r.policy->rules)
    for (const std::string& op : rule.match.ops)
      gemm = gemm || (op.find("gemm") != std::string::npos && !rule.checks.empty());
  EXPECT_TRUE(gemm);
}

// The shipped production policy is valid, checks every BLAS GEMM with checksum and samples the
// rerunning checks by themselves.
TEST(Policy, ProductionPolicyChecksEveryGemmAndSamplesReruns) {
  const PolicyResult r = parsePolicyFile(std::string(FUMI_CONFIG_DIR) + "/production.yaml");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.diagnostics.empty());
  const Rule* gemm = nullptr;
  for (const Rule& rule : r.policy->rules)
    if (rule.name == "blas-gemm-gemv") gemm = &rule;
  ASSERT_NE(gemm, nullptr);
  EXPECT_EQ(gemm->sample.every, 1u);
  ASSERT_EQ(gemm->checks.size(), 4u);
  EXPECT_EQ(gemm->checks[0].plugin, "checksum");
  EXPECT_FALSE(gemm->checks[0].has_sample);
  EXPECT_EQ(gemm->checks[2].plugin, "highprec");
  EXPECT_TRUE(gemm->checks[2].has_sample);
  EXPECT_EQ(gemm->checks[2].sample.every, 100u);
  EXPECT_GT(r.policy->overhead_budget, 0.0);
}

TEST(Policy, MissingFileIsAnError) {
  const PolicyResult r = parsePolicyFile("/nonexistent/p.yaml");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.diagnostics.at(0).str(), "/nonexistent/p.yaml: error: cannot read the policy file");
}

struct BadCase {
  std::string file;
  int line = 0, col = 0;
  std::string message;
};

std::vector<BadCase> badCorpus() {
  std::vector<BadCase> cases;
  const std::string dir = std::string(FUMI_TEST_POLICY_DIR) + "/bad";
  DIR* d = opendir(dir.c_str());
  if (!d) return cases;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() < 6 || name.compare(name.size() - 5, 5, ".yaml") != 0) continue;
    BadCase c;
    c.file = dir + "/" + name;
    std::ifstream in(c.file);
    std::string first;
    std::getline(in, first);
    char msg[256] = "";
    if (std::sscanf(first.c_str(), "# expect: %d:%d %255[^\n]", &c.line, &c.col, msg) == 3)
      c.message = msg;
    cases.push_back(c);
  }
  closedir(d);
  return cases;
}

TEST(Policy, MalformedCorpus) {
  const auto cases = badCorpus();
  ASSERT_GE(cases.size(), 15u);
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.file);
    ASSERT_FALSE(c.message.empty()) << "corpus file lacks '# expect: L:C message'";
    const PolicyResult r = parsePolicyFile(c.file);
    EXPECT_FALSE(r.ok());
    bool found = false;
    std::string all;
    for (const auto& d : r.diagnostics) {
      all += d.str() + "\n";
      found = found || (d.severity == Diagnostic::Severity::kError && d.loc.file == c.file &&
                        d.loc.line == c.line && d.loc.col == c.col &&
                        d.message.find(c.message) != std::string::npos);
    }
    EXPECT_TRUE(found) << "expected " << c.line << ":" << c.col << " " << c.message << "\ngot:\n"
                       << all;
  }
}

}  // namespace
}  // namespace fumi
