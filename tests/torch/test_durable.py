"""Nothing lost when a job ends early (issue 11): snapshot events on SIGTERM/SIGINT/SIGHUP with
the program's own handlers kept, periodic snapshots surviving kill -9, the state before exec(),
the Prometheus textfile, and a real torch.distributed job (torchrun, gloo, 2 ranks) under
`fumi run`, including its preemption by SIGTERM."""
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "preload"))
from fumitest import FUMI, preload_env, read_events, write_policy  # noqa: E402

PYTHON = "/usr/bin/python3"
HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "durable_job.py")
DIST = os.path.join(HERE, "dist_train.py")

# Every addmm checked, so that checks and counts both move; snapshots twice a second.
POLICY = """
version: 1
report: { snapshot_every: 0.5 }
rules:
  - match: { op: aten::addmm }
    sample: { every: 1 }
    checks: [ { plugin: highprec } ]
"""


def read(path):
    with open(path) as f:
        return f.read()


def report_json(out_dir):
    r = subprocess.run([FUMI, "report", out_dir, "--format", "json"], capture_output=True,
                       text=True, check=True)
    return json.loads(r.stdout)


def op_of(report, name):
    return next(o for o in report["ops"] if o["op"] == name)


class Job:
    """durable_job.py MODE under libfumi, started and waited for until it printed "ready"."""

    def __init__(self, test, mode, policy=POLICY, env=None, preexec_fn=None):
        full_env, self.dir = preload_env(policy, env=env)
        self.proc = subprocess.Popen([PYTHON, JOB, mode], env=full_env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, preexec_fn=preexec_fn)
        line = self.proc.stdout.readline()
        test.assertEqual(line.strip(), "ready", self.proc.stderr.read() if not line else line)

    def signal_and_wait(self, sig, after=1.0):
        time.sleep(after)
        self.proc.send_signal(sig)
        return self.wait()

    def wait(self):
        self.stdout, self.stderr = self.proc.communicate(timeout=120)
        self.rc = self.proc.returncode
        self.events = read_events(self.dir)
        return self

    def of(self, kind):
        return [e for e in self.events if e["event"] == kind]


class Signals(unittest.TestCase):
    def test_sigterm_default_dies_of_it_with_a_snapshot(self):
        j = Job(self, "plain").signal_and_wait(signal.SIGTERM)
        self.assertEqual(j.rc, -signal.SIGTERM, j.stderr)  # died of the signal, as without fumi
        self.assertEqual(j.of("summary"), [])
        snaps = [e for e in j.of("snapshot") if e["reason"] == "SIGTERM"]
        self.assertEqual(len(snaps), 1)
        last = snaps[0]
        self.assertGreater(last["totals"]["calls"], 100)
        addmm = next(o for o in last["ops"] if o["op"] == "aten::addmm")
        self.assertGreater(addmm["checked"], 0)
        rep = report_json(j.dir)
        proc = rep["processes"][0]
        self.assertEqual(proc["ended"], "SIGTERM")
        self.assertFalse(proc["incomplete"])
        self.assertEqual(op_of(rep, "aten::addmm")["calls"], addmm["calls"])
        self.assertEqual(op_of(rep, "aten::addmm")["checked"], addmm["checked"])
        text = subprocess.run([FUMI, "report", j.dir], capture_output=True, text=True).stdout
        self.assertIn("SIGTERM", text)

    def test_a_crash_dies_of_its_signal_with_a_snapshot(self):
        # A process crashing (a fault in an extension, an abort in C++ code) died with the counts
        # since its last periodic snapshot: a short job's report said "0 calls intercepted".
        # Snapshots off but for signals: the crash's is the only one.
        policy = POLICY.replace("snapshot_every: 0.5", "snapshot_every: 0")
        for mode, sig in (("segfault", signal.SIGSEGV), ("abort", signal.SIGABRT),
                          ("faulthandler", signal.SIGSEGV)):
            j = Job(self, mode, policy=policy).wait()
            self.assertEqual(j.rc, -sig, (mode, j.stderr))  # died of it, as without fumi
            self.assertEqual(j.of("summary"), [])
            [snap] = j.of("snapshot")
            self.assertEqual(snap["reason"], sig.name, mode)
            addmm = next(o for o in snap["ops"] if o["op"] == "aten::addmm")
            self.assertEqual(addmm["calls"], 12, mode)  # 6 steps, 2 layers
            rep = report_json(j.dir)
            self.assertEqual(rep["processes"][0]["ended"], sig.name)
            self.assertEqual(op_of(rep, "aten::addmm")["calls"], 12)
            if mode == "faulthandler":  # the program's handler ran: its traceback, then the end
                self.assertIn("Segmentation fault", j.stderr)
                self.assertIn("durable_job.py", j.stderr)

    def test_program_handler_still_runs(self):
        j = Job(self, "handler").signal_and_wait(signal.SIGTERM)
        self.assertEqual(j.rc, 3, j.stderr)
        self.assertIn(f"handled {int(signal.SIGTERM)}", j.stdout)
        self.assertEqual([e["reason"] for e in j.of("snapshot") if e["reason"] != "periodic"],
                         ["SIGTERM"])
        self.assertEqual(len(j.of("summary")), 1)  # it went on to exit normally
        self.assertEqual(report_json(j.dir)["processes"][0]["ended"], "exit")

    def test_sigint_raises_keyboard_interrupt(self):
        j = Job(self, "interrupt").signal_and_wait(signal.SIGINT)
        self.assertEqual(j.rc, 4, j.stderr)
        self.assertIn("interrupted", j.stdout)
        self.assertIn("SIGINT", [e["reason"] for e in j.of("snapshot")])
        self.assertEqual(len(j.of("summary")), 1)

    def test_sighup_default_dies_of_it(self):
        j = Job(self, "plain").signal_and_wait(signal.SIGHUP)
        self.assertEqual(j.rc, -signal.SIGHUP, j.stderr)
        self.assertEqual(report_json(j.dir)["processes"][0]["ended"], "SIGHUP")

    def test_ignored_sighup_stays_ignored(self):
        # Ignored by the program itself after fumi started, and ignored before it (nohup).
        for preexec in (None, lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN)):
            j = Job(self, "nohup", preexec_fn=preexec).signal_and_wait(signal.SIGHUP, after=0.5)
            self.assertEqual(j.rc, 0, j.stderr)
            self.assertEqual(len(j.of("summary")), 1)
            self.assertNotIn("SIGHUP", [e["reason"] for e in j.of("snapshot")])

    def test_kill9_loses_at_most_one_interval(self):
        j = Job(self, "plain").signal_and_wait(signal.SIGKILL, after=2.0)
        self.assertEqual(j.rc, -signal.SIGKILL)
        snaps = j.of("snapshot")
        self.assertGreaterEqual(len(snaps), 2)
        self.assertTrue(all(e["reason"] == "periodic" for e in snaps))
        self.assertEqual([e["seq"] for e in snaps], list(range(1, len(snaps) + 1)))
        last = snaps[-1]
        # Written twice a second: the last one is at most ~one interval before the kill.
        self.assertGreater(last["elapsed_s"], 1.0)
        rep = report_json(j.dir)
        self.assertEqual(rep["processes"][0]["ended"], "killed")
        self.assertTrue(rep["processes"][0]["incomplete"])
        self.assertEqual(rep["totals"]["calls"], last["totals"]["calls"])
        self.assertEqual(rep["totals"]["checked"], last["totals"]["checked"])

    def test_exec_keeps_the_first_image(self):
        full_env, out = preload_env(POLICY)
        r = subprocess.run([PYTHON, JOB, "exec"], env=full_env, capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("second image 64.0", r.stdout)
        events = read_events(out)
        self.assertEqual([e["event"] for e in events if e["event"] in ("start", "summary")]
                         + [e["reason"] for e in events if e["event"] == "snapshot"
                            and e["reason"] != "periodic"],
                         ["start", "start", "summary", "exec"])
        rep = report_json(out)
        self.assertEqual([p["ended"] for p in rep["processes"]], ["exec", "exit"])
        self.assertEqual(len({p["pid"] for p in rep["processes"]}), 1)
        self.assertGreaterEqual(op_of(rep, "aten::addmm")["checked"], 6 * 2)  # 6 steps, 2 each


class Prometheus(unittest.TestCase):
    def test_textfile_rewritten_and_valid(self):
        prom_dir = tempfile.mkdtemp(prefix="fumi-prom-")
        path = os.path.join(prom_dir, "fumi.prom")
        j = Job(self, "plain", env={"FUMI_PROMETHEUS": path})
        deadline = time.time() + 30
        while not os.path.exists(path) and time.time() < deadline:
            time.sleep(0.1)
        self.assertTrue(os.path.exists(path))
        first = read(path)
        time.sleep(1.5)
        self.assertNotEqual(read(path), first)  # rewritten at the next snapshots
        j.signal_and_wait(signal.SIGTERM)
        self.assertEqual(os.listdir(prom_dir), ["fumi.prom"])  # no temporary file left behind
        text = read(path)
        families = {f.name: f for f in text_string_to_metric_families(text)}
        for name, kind in (("fumi_calls", "counter"), ("fumi_checks", "counter"),
                           ("fumi_violations", "counter"), ("fumi_check_seconds", "counter"),
                           ("fumi_metric_worst", "gauge"), ("fumi_overhead_ratio", "gauge")):
            self.assertIn(name, families)
            self.assertEqual(families[name].type, kind, name)
        # The file's counts are the final (SIGTERM) snapshot's.
        snap = [e for e in j.of("snapshot") if e["reason"] == "SIGTERM"][0]
        calls = {s.labels["op"]: s.value for s in families["fumi_calls"].samples
                 if s.name == "fumi_calls_total"}
        for o in snap["ops"]:
            self.assertEqual(calls[o["op"]], o["calls"], o["op"])
        checks = [s for s in families["fumi_checks"].samples if s.name == "fumi_checks_total"]
        self.assertEqual({(s.labels["op"], s.labels["check"]) for s in checks},
                         {("aten::addmm", "highprec")})
        addmm = next(o for o in snap["ops"] if o["op"] == "aten::addmm")
        self.assertEqual(checks[0].value, addmm["checked"])
        for fam in families.values():
            for s in fam.samples:
                self.assertEqual(s.labels.get("rank"), "")  # no launcher rank
                self.assertEqual(s.value, s.value)  # no NaN sample
        ratio = families["fumi_overhead_ratio"].samples[0].value
        self.assertGreater(ratio, 0)
        self.assertLess(ratio, 1)


def torchrun(out_dir, policy, steps, log_dir):
    return [FUMI, "run", "--out", out_dir, "--policy", write_policy(policy), "--",
            PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
            # torch 1.13's torchrun cannot parse its default "0" on Python 3.11: tee stdout.
            "--redirects", "1", "--tee", "1", "--log_dir", log_dir, DIST, str(steps)]


RANK1_ONLY = POLICY.replace("{ op: aten::addmm }", "{ op: aten::addmm, rank: [1] }")


class Distributed(unittest.TestCase):
    def test_two_ranks_merged_and_selected(self):
        out = tempfile.mkdtemp(prefix="fumi-dist-")
        r = subprocess.run(torchrun(out, RANK1_ONLY, 6, tempfile.mkdtemp()),
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout[-2000:] + r.stderr[-2000:])
        names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(out, "events-*")))
        self.assertEqual([n.split("-")[1] for n in names if "rank" in n], ["rank0", "rank1"])
        for e in read_events(out):
            if e["event"] == "start" and "rank" in e:
                self.assertEqual(e["world_size"], 2)
                self.assertEqual(e["rank_from"], "RANK")
        rep = report_json(out)
        self.assertEqual([x["rank"] for x in rep["ranks"]], [0, 1])
        for x in rep["ranks"]:
            self.assertEqual(x["processes"], 1)
            self.assertEqual(x["incomplete_processes"], 0)
            self.assertGreater(x["calls"], 100)
        self.assertEqual(rep["ranks"][0]["checked"], 0)  # the rule selects rank 1 only
        self.assertEqual(rep["ranks"][1]["checked"], 6 * 2)
        addmm = op_of(rep, "aten::addmm")
        self.assertEqual(addmm["calls"], 2 * 6 * 2)  # both ranks' calls merged
        self.assertEqual(addmm["checked"], 6 * 2)
        self.assertEqual(rep["totals"]["processes"], 3)  # the agent and the two ranks
        text = subprocess.run([FUMI, "report", out], capture_output=True, text=True).stdout
        self.assertIn("Ranks:", text)

    def test_preempted_job_loses_nothing(self):
        out = tempfile.mkdtemp(prefix="fumi-dist-")
        p = subprocess.Popen(torchrun(out, POLICY, 0, tempfile.mkdtemp()),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in p.stdout:
            if "ready" in line:
                break
        time.sleep(1.5)
        p.send_signal(signal.SIGTERM)  # `fumi run` passes it to torchrun, which stops the ranks
        p.communicate(timeout=120)
        rep = report_json(out)
        ranked = [x for x in rep["processes"] if x["rank"] is not None]
        self.assertEqual(sorted(x["rank"] for x in ranked), [0, 1])
        for x in ranked:
            self.assertEqual(x["ended"], "SIGTERM", x)
            self.assertFalse(x["incomplete"])
        for x in rep["ranks"]:
            self.assertGreater(x["checked"], 0)


if __name__ == "__main__":
    unittest.main()
