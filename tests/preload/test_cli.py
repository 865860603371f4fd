"""The `fumi` CLI end to end: run (env, exit codes, summary), report, policy check, plugins."""
import json
import os
import subprocess
import tempfile
import unittest

from fumitest import BLAS_DEMO, FUMI, SOURCE, write_policy

with open(os.path.join(SOURCE, "config", "examples", "minimal.yaml")) as _f:
    ILL_POLICY = _f.read()


def fumi(*args, **kw):
    env = dict(os.environ)
    for k in ("LD_PRELOAD", "FUMI_POLICY", "FUMI_OUT"):
        env.pop(k, None)
    return subprocess.run([FUMI, *args], capture_output=True, text=True, timeout=300, env=env,
                          **kw)


class Run(unittest.TestCase):
    def test_run_then_report(self):
        out = tempfile.mkdtemp(prefix="fumi-cli-")
        policy = write_policy(ILL_POLICY)
        plain = subprocess.run([BLAS_DEMO, "ill"], capture_output=True, text=True)
        r = fumi("run", "--policy", policy, "--out", out, "--", BLAS_DEMO, "ill")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, plain.stdout)
        self.assertIn("2 violations", r.stderr)
        text = fumi("report", out)
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn("sgemm_", text.stdout)
        self.assertIn("blas_demo.c", text.stdout)  # first violation's stack
        # Findings (errors with their first stack) come before the table of checked ops.
        self.assertLess(text.stdout.index("Findings:"), text.stdout.index("Errors (the op computed"))
        self.assertLess(text.stdout.index("blas_demo.c"), text.stdout.index("Checked ops:"))
        js = fumi("report", out, "--format", "json")
        doc = json.loads(js.stdout)
        op = next(o for o in doc["ops"] if o["op"] == "sgemm_")
        self.assertEqual(op["calls"], 1)
        self.assertEqual(op["violations"], 2)
        self.assertGreater(op["worst"]["highprec.normwise_rel"], 0.5)

    def test_exit_code_kept(self):
        out = tempfile.mkdtemp(prefix="fumi-cli-")
        self.assertEqual(fumi("run", "--out", out, "--", "sh", "-c", "exit 7").returncode, 7)
        self.assertEqual(fumi("run", "--out", out, "--", "/nonexistent/prog").returncode, 127)

    def test_bad_policy_refused_before_running(self):
        out = tempfile.mkdtemp(prefix="fumi-cli-")
        marker = os.path.join(out, "ran")
        policy = write_policy("version: 1\nrules:\n  - match: { op: sgemm_ }\n")
        r = fumi("run", "--policy", policy, "--out", out, "--", "touch", marker)
        self.assertEqual(r.returncode, 2)
        self.assertRegex(r.stderr, r"\.yaml:3:5: error: rule 'rule\[0\]' is missing 'checks'")
        self.assertFalse(os.path.exists(marker))

    def test_children_report_separately(self):
        out = tempfile.mkdtemp(prefix="fumi-cli-")
        policy = write_policy(ILL_POLICY)
        r = fumi("run", "--policy", policy, "--out", out, "--", "sh", "-c",
                 f"{BLAS_DEMO} ill >/dev/null; {BLAS_DEMO} well >/dev/null")
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(fumi("report", out, "--format", "json").stdout)
        self.assertEqual(len([p for p in doc["processes"]]), 2)
        op = next(o for o in doc["ops"] if o["op"] == "sgemm_")
        self.assertEqual(op["calls"], 2)
        self.assertEqual(op["checked"], 2)


class Commands(unittest.TestCase):
    def test_report_without_events(self):
        self.assertEqual(fumi("report", tempfile.mkdtemp()).returncode, 1)

    def test_report_collapses_ops_only_counted_and_all_lists_them(self):
        out = tempfile.mkdtemp(prefix="fumi-cli-")
        ops = [{"op": "aten::mm", "backend": "torch", "calls": 4, "checked": 4, "skipped": 0,
                "violations": 0, "worst": {}},
               {"op": "aten::view", "backend": "torch", "calls": 30, "checked": 0, "skipped": 0,
                "violations": 0, "worst": {}}]
        with open(os.path.join(out, "events-42.jsonl"), "w") as f:
            f.write(json.dumps({"event": "start", "pid": 42, "argv": ["x"]}) + "\n")
            f.write(json.dumps({"event": "summary", "pid": 42, "elapsed_s": 1, "ops": ops}) + "\n")
        short = fumi("report", out)
        self.assertEqual(short.returncode, 0, short.stderr)
        self.assertIn("Findings: no violations", short.stdout)
        self.assertIn("1 other op only counted (30 calls); --all lists them", short.stdout)
        self.assertNotIn("aten::view", short.stdout)
        full = fumi("report", out, "--all")
        self.assertEqual(full.returncode, 0, full.stderr)
        self.assertIn("aten::view", full.stdout)
        self.assertNotIn("only counted", full.stdout)
        doc = json.loads(fumi("report", out, "--format", "json").stdout)
        self.assertEqual([o["op"] for o in doc["ops"]], ["aten::mm", "aten::view"])
        self.assertEqual(doc["nan_origins"], [])

    def test_policy_check(self):
        good = write_policy(ILL_POLICY)
        r = fumi("policy", "check", good)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("ok (1 rules)", r.stdout + r.stderr)
        bad = write_policy("version: 1\nrules:\n  - match: { op: sgemm_ }\n    checks: 3\n")
        r = fumi("policy", "check", bad)
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stderr, r"\.yaml:4:13: error: 'checks' must be a list")

    def test_default_policy_printed_and_valid(self):
        text = fumi("policy", "default").stdout
        self.assertIn("version: 1", text)
        path = write_policy(text)
        self.assertEqual(fumi("policy", "check", path).returncode, 0)

    def test_plugins_and_env(self):
        r = fumi("plugins")
        self.assertEqual(r.returncode, 0)
        for name in ("perturb", "highprec", "nan_inf", "determinism"):
            self.assertIn(name, r.stdout)
        env = fumi("env").stdout
        for var in ("FUMI_POLICY", "FUMI_OUT", "FUMI_LOG_LEVEL", "FUMI_PLUGIN_PATH", "FUMI_DISABLE"):
            self.assertIn(var, env)


if __name__ == "__main__":
    unittest.main()
