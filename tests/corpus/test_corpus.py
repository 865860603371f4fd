"""The calibration corpus as a unittest (ctest: corpus).

RunnerTest checks run_corpus.py itself on synthetic input (policy transformation, judging).
CorpusTest runs every corpus program once under fumi (run_corpus.main, -j 2) and has one test
method per program: healthy programs must give no violation, planted ones a violation of the
expected op and check at their planted line. FUMI_BUILD names the build (ctest sets it).
"""
import json
import os
import re
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "preload"))
import fumitest  # noqa: E402,F401  (temporary files under one folder, removed at exit)
import run_corpus  # noqa: E402


class RunnerTest(unittest.TestCase):
    def test_default_policy_becomes_every_call(self):
        path = os.path.join(run_corpus.HERE, os.pardir, os.pardir, "config", "default_policy.yaml")
        with open(path) as f:
            original = f.read()
        text, replaced = run_corpus.every_call_policy(original)
        n_rules = len(re.findall(r"^  - ", original, re.M))
        self.assertGreater(n_rules, 0)
        self.assertEqual(replaced, n_rules, "every rule of the default policy has its own sample:")
        samples = re.findall(r"^\s*sample:\s*(.*)$", text, re.M)
        self.assertEqual(samples, ["{ every: 1 }"] * n_rules)
        code = "\n".join(run_corpus._split_comment(l)[0] for l in text.splitlines())
        for key in ("max_checks", "probability", "first:", "seed:"):
            self.assertNotIn(key, code)
        self.assertIsNone(re.search(r"^overhead_budget\s*:", text, re.M))
        try:
            import yaml
        except ImportError:
            yaml = None
        if yaml is not None:   # a parser's view, where python3-yaml is installed
            before, after = yaml.safe_load(original), yaml.safe_load(text)
            self.assertEqual([r["sample"] for r in after["rules"]], [{"every": 1}] * n_rules)
            self.assertNotIn("overhead_budget", after)
            for r in before["rules"]:
                r.pop("sample")
            for r in after["rules"]:
                r.pop("sample")
            before.pop("overhead_budget", None)
            self.assertEqual(before, after)
        # Everything but the sample lines and the budget is kept as it is.
        kept = [l for l in original.splitlines()
                if not re.match(r"^\s*sample:|^overhead_budget", l)]
        self.assertEqual(kept, [l for l in text.splitlines()
                                if not re.match(r"^\s*sample:|^# overhead_budget removed", l)])

    def test_transformation_forms(self):
        src = "\n".join([
            "version: 1",
            "overhead_budget: 0.05   # comment",
            "tolerances:",
            "  sensitivity: { f32: 1e-2 }",
            "  future_key: [1, 2]",
            "defaults:",
            "  sample:",
            "    first: 2",
            "    # a comment inside",
            "    max_checks: 5",
            "  action: log",
            "rules:",
            "  - { name: a, match: { op: x }, sample: { first: 1, max_checks: 3 }, checks: [] }",
            "  - name: b",
            "    sample: {first: 1,",
            "             probability: 0.5}",
            "    checks: []",
            "  - name: c   # sample: { first: 9 } in a comment stays",
            "    checks: []",
        ])
        text, replaced = run_corpus.every_call_policy(src)
        self.assertEqual(replaced, 3)
        self.assertIn("  sample: { every: 1 }\n  action: log", text)
        self.assertIn("sample: { every: 1 }, checks: [] }", text)
        self.assertIn("    sample: { every: 1 }\n    checks: []", text)
        self.assertIn("# sample: { first: 9 } in a comment stays", text)
        self.assertIn("tolerances:\n  sensitivity: { f32: 1e-2 }\n  future_key: [1, 2]", text)
        for gone in ("first: 2", "max_checks", "probability", "overhead_budget: 0.05"):
            self.assertNotIn(gone, text)
        with_rule = run_corpus.add_rules(text, ["{ name: z, match: { op: y }, checks: [] }"])
        self.assertRegex(with_rule, r"rules:\n.*\n  - \{ name: z, .*\}\n  - \{ name: a,")

    def test_judge(self):
        prog = run_corpus.Program(os.path.join(run_corpus.HERE, "planted_log0.py"))
        self.assertEqual(prog.expect_ops, ["aten::log"])
        line = prog.planted_line
        with open(prog.path) as f:
            self.assertIn("# FUMI-PLANTED", f.read().splitlines()[line - 1])
        summary = {"event": "summary", "ops": [{"op": "aten::log", "checked": 3}]}

        def violation(op, check, where):
            return {"event": "violation", "op": op, "check": check, "metric": "nonfinite",
                    "value": 4, "tolerance": 0, "detail": "appeared",
                    "python_stack": ["/x/%s in main" % where]}
        good = violation("aten::log", "nan_inf", "planted_log0.py:%d" % line)
        self.assertEqual(run_corpus.judge(prog, [good, summary], 0, 0, "")["verdict"], "PASS")
        for bad in (violation("aten::log", "nan_inf", "planted_log0.py:%d" % (line + 1)),
                    violation("aten::log", "nan_inf", "planted_log0.py:%d0" % line),
                    violation("aten::log", "nan_inf", "other.py:%d" % line),
                    violation("aten::mul", "nan_inf", "planted_log0.py:%d" % line),
                    violation("aten::log", "highprec", "planted_log0.py:%d" % line)):
            self.assertEqual(run_corpus.judge(prog, [bad, summary], 0, 0, "")["verdict"], "FAIL",
                             bad)
        self.assertEqual(run_corpus.judge(prog, [good], 0, 0, "")["verdict"], "FAIL")  # no summary
        self.assertEqual(run_corpus.judge(prog, [good, summary], 0, 1, "")["verdict"], "FAIL")
        healthy = run_corpus.Program(os.path.join(run_corpus.HERE, "healthy_mlp_nll.py"))
        self.assertEqual(run_corpus.judge(healthy, [summary], 0, 0, "")["verdict"], "PASS")
        self.assertEqual(run_corpus.judge(healthy, [good, summary], 0, 0, "")["verdict"], "FAIL")
        nothing = {"event": "summary", "ops": [{"op": "aten::log", "checked": 0}]}
        self.assertEqual(run_corpus.judge(healthy, [nothing], 0, 0, "")["verdict"], "FAIL")
        self.assertTrue(run_corpus.op_matches("aten::div.Tensor", ["aten::div"]))
        self.assertFalse(run_corpus.op_matches("aten::divide", ["aten::div"]))
        self.assertFalse(run_corpus.op_matches("aten::div", ["aten::div.Tensor"]))


class CorpusTest(unittest.TestCase):
    results = None

    @classmethod
    def setUpClass(cls):
        work = tempfile.mkdtemp(prefix="fumi-corpus-test-")
        try:
            out = os.path.join(work, "results.json")
            cls.exit = run_corpus.main(["-j", os.environ.get("CORPUS_JOBS", "2"), "--json", out])
            with open(out) as f:
                cls.results = {r["program"]: r for r in json.load(f)["results"]}
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def check_program(self, name):
        self.assertIn(name, self.results, "run_corpus did not run %s" % name)
        r = self.results[name]
        detail = "; ".join(r["reasons"]) + "".join(
            "\n  %dx %s %s %s=%s tol=%s %r at %s" % (g["count"], g["op"], g["check"], g["metric"],
                                                    g["first_value"], g["tolerance"], g["detail"],
                                                    g["python"])
            for g in r["violation_groups"][:6])
        self.assertGreater(r["checked"], 0)
        if r["kind"] == "healthy":
            self.assertEqual(r["violations"], 0, detail)
        else:
            self.assertGreater(r["matching"], 0, detail)
        self.assertEqual(r["verdict"], "PASS", detail)

    def test_exit_status(self):
        self.assertEqual(self.exit, 0 if all(r["verdict"] == "PASS"
                                             for r in self.results.values()) else 1)


def _add_program_tests():
    for prog in run_corpus.discover([]):
        name = "test_" + prog.name[:-3]
        setattr(CorpusTest, name, lambda self, n=prog.name: self.check_program(n))


_add_program_tests()

if __name__ == "__main__":
    unittest.main()
