"""The `fumi` CLI end to end: run (env, exit codes, summary), report, policy check, plugins."""
import html.parser
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


def run_ill_then_well(test):
    """`fumi run` of blas_demo ill (2 violations: an error, a sensitivity) then well, two
    processes under the minimal policy; returns the output directory."""
    out = tempfile.mkdtemp(prefix="fumi-cli-")
    r = fumi("run", "--policy", write_policy(ILL_POLICY), "--out", out, "--", "sh", "-c",
             f"{BLAS_DEMO} ill >/dev/null; {BLAS_DEMO} well >/dev/null")
    test.assertEqual(r.returncode, 0, r.stderr)
    return out


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
        self.assertLess(text.stdout.index("Findings:"),
                        text.stdout.index("Cancellation above its bound"))
        self.assertLess(text.stdout.index("blas_demo.c"), text.stdout.index("Checked ops:"))
        js = fumi("report", out, "--format", "json")
        doc = json.loads(js.stdout)
        op = next(o for o in doc["ops"] if o["op"] == "sgemm_")
        self.assertEqual(op["calls"], 1)
        self.assertEqual(op["violations"], 2)
        self.assertGreater(op["worst"]["highprec.cancelled_rel"], 0.5)

    def test_second_run_into_one_directory_replaces_the_first(self):
        # The first run's events and process logs go; its dumped cases stay (the user's).
        out = tempfile.mkdtemp(prefix="fumi-cli-")
        cases = os.path.join(out, "cases", "kept")
        os.makedirs(cases)
        for argv in (["sh", "-c", f"{BLAS_DEMO} well >/dev/null; {BLAS_DEMO} well >/dev/null"],
                     [BLAS_DEMO, "well"]):
            r = fumi("run", "--out", out, "--", *argv)
            self.assertEqual(r.returncode, 0, r.stderr)
        names = os.listdir(out)
        events = [n for n in names if n.startswith("events-")]
        logs = [n for n in names if n.startswith("fumi-") and n.endswith(".log")]
        self.assertEqual(len(events), 1, names)
        self.assertEqual(logs, ["fumi-" + events[0][len("events-"):-len(".jsonl")] + ".log"])
        self.assertTrue(os.path.isdir(cases))
        self.assertIn("fumi: 1 process,", r.stderr)

    def test_processes_left_running_are_waited_for(self):
        # The command ends while a process it started still runs (multiprocessing's resource
        # tracker ends a moment after its parent): its summary is read, not "incomplete".
        out = tempfile.mkdtemp(prefix="fumi-cli-")
        # The lingering process has written its first events before the command goes on.
        r = fumi("run", "--out", out, "--", "sh", "-c",
                 f"{BLAS_DEMO} linger 1500 >/dev/null & "
                 f"until ls {out}/events-*.jsonl >/dev/null 2>&1; do sleep 0.05; done; "
                 f"{BLAS_DEMO} loop 2 >/dev/null")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("fumi: 2 processes, 3 calls intercepted", r.stderr)
        self.assertNotIn("incomplete", r.stderr)

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
        out = run_ill_then_well(self)
        doc = json.loads(fumi("report", out, "--format", "json").stdout)
        self.assertEqual(len([p for p in doc["processes"]]), 2)
        op = next(o for o in doc["ops"] if o["op"] == "sgemm_")
        self.assertEqual(op["calls"], 2)
        self.assertEqual(op["checked"], 2)


# Elements without an end tag in HTML.
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


class PageParser(html.parser.HTMLParser):
    """Checks that every element is closed in order, collects the text (references decoded),
    the external references, and the <svg> elements with their class."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.open = []
        self.errors = []
        self.text = []
        self.external = []
        self.svgs = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for name in ("src", "href", "xlink:href", "data"):
            v = (a.get(name) or "").strip().lower()
            if v and not v.startswith("#"):
                self.external.append((tag, name, v))
        if tag == "svg":
            self.svgs.append(a.get("class", ""))
        if tag not in VOID:
            self.open.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.open.pop()

    def handle_endtag(self, tag):
        if not self.open or self.open[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.open[-1:] or 'nothing'} at {self.getpos()}")
            if tag in self.open:
                while self.open.pop() != tag:
                    pass
        else:
            self.open.pop()

    def handle_data(self, data):
        self.text.append(data)


class HtmlReport(unittest.TestCase):
    def test_html_report_of_a_job_with_violations(self):
        out = run_ill_then_well(self)
        page = fumi("report", out, "--format", "html")
        self.assertEqual(page.returncode, 0, page.stderr)
        doc = json.loads(fumi("report", out, "--format", "json").stdout)

        p = PageParser()
        p.feed(page.stdout)
        p.close()
        self.assertEqual(p.errors, [])
        self.assertEqual(p.open, [], "elements left open")
        self.assertEqual(p.external, [])  # self-contained: nothing fetched
        low = page.stdout.lower()
        for bad in ("<script src", "<link", "@import", "url(", "http://", "https://"):
            self.assertNotIn(bad, low)
        self.assertTrue(page.stdout.startswith("<!DOCTYPE html>"))
        self.assertIn("timeline", p.svgs)
        text = "".join(p.text)

        # Every violating op with its first violation of each kind and that violation's stacks.
        violating = [o for o in doc["ops"] if o["violations"] > 0]
        self.assertTrue(violating)
        for op in violating:
            self.assertIn(op["op"], text)
            self.assertTrue(op["first_violation_by_kind"], op["op"])
            for kind, v in op["first_violation_by_kind"].items():
                frames = v["stack"] + v["python_stack"]
                self.assertTrue(frames, (op["op"], kind))
                for frame in frames:
                    self.assertIn(frame, text)
        self.assertIn("blas_demo.c", text)
        # Both processes, with how they ended; the timeline points are in the JSON too.
        self.assertEqual(len(doc["processes"]), 2)
        for proc in doc["processes"]:
            self.assertIn(str(proc["pid"]), text)
            self.assertEqual(proc["ended"], "exit")
            self.assertEqual(proc["timeline"][-1]["reason"], "exit")
            self.assertEqual(proc["timeline"][-1]["checked"], 1)
        self.assertEqual(sum(p["timeline"][-1]["violations"] for p in doc["processes"]),
                         doc["totals"]["violations"])

    def test_html_escapes_event_text(self):
        out = tempfile.mkdtemp(prefix="fumi-cli-")
        op = '<img src=x onerror="alert(1)">&'
        with open(os.path.join(out, "events-42.jsonl"), "w") as f:
            start = {"event": "start", "pid": 42, "argv": ["<marquee>x</marquee>"]}
            f.write(json.dumps(start) + "\n")
            f.write(json.dumps({"event": "violation", "pid": 42, "op": op, "check": "highprec",
                                "metric": "normwise_rel", "value": 0.5, "tolerance": 1e-5,
                                "stack": ["#0 f<int>() at a.c:1"],
                                "python_stack": ["t.py:3 in <module>"]}) + "\n")
        page = fumi("report", out, "--format", "html")
        self.assertEqual(page.returncode, 0, page.stderr)
        self.assertNotIn("<img", page.stdout)
        self.assertNotIn("<marquee", page.stdout)
        p = PageParser()
        p.feed(page.stdout)
        p.close()
        self.assertEqual((p.errors, p.open, p.external), ([], [], []))
        text = "".join(p.text)
        for s in (op, "<marquee>x</marquee>", "#0 f<int>() at a.c:1", "t.py:3 in <module>"):
            self.assertIn(s, text)


class Commands(unittest.TestCase):
    def test_run_of_a_program_making_no_intercepted_call(self):
        # libfumi is loaded (a dynamic program) but writes nothing until a call it intercepts:
        # the summary does not claim it was not loaded (batch 9: a launcher process).
        out = tempfile.mkdtemp(prefix="fumi-cli-")
        r = fumi("run", "--out", out, "--", "sh", "-c", "grep -c libfumi /proc/$$/maps")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertGreater(int(r.stdout), 0)  # mapped
        self.assertIn("no process made a call fumi intercepts", r.stderr)
        self.assertIn("or libfumi was not loaded", r.stderr)

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
