"""Helpers shared by fumi's integration tests: run a real program with or without libfumi
preloaded, and read the JSON Lines events it left (schema: docs/report-schema.md)."""
import atexit
import glob
import json
import os
import shutil
import subprocess
import tempfile
import textwrap

BUILD = os.environ.get("FUMI_BUILD", os.path.join(os.path.dirname(__file__), "../../build"))
LIBFUMI = os.path.join(BUILD, "lib", "libfumi.so")
FUMI = os.path.join(BUILD, "bin", "fumi")
BLAS_DEMO = os.environ.get("BLAS_DEMO", os.path.join(BUILD, "bin", "blas_demo"))
SOURCE = os.environ.get("FUMI_SOURCE", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                    "..", ".."))
TEST_PLUGIN_DIR = os.environ.get("FUMI_TEST_PLUGIN_DIR", os.path.join(BUILD, "tests", "plugins"))


def isolate_tmp():
    """Every temporary file and folder this test process makes, and the programs it runs make
    (TMPDIR), goes under one folder of its own, removed when it exits (FUMI_KEEP_TEST_TMP=1
    keeps it, and its path is printed, to read a failing test's output)."""
    root = tempfile.mkdtemp(prefix="fumi-tests-")
    tempfile.tempdir = root
    os.environ["TMPDIR"] = root
    if os.environ.get("FUMI_KEEP_TEST_TMP"):
        print("fumi tests: temporary files kept in", root)
    else:
        atexit.register(shutil.rmtree, root, True)


isolate_tmp()


class Run:
    def __init__(self, proc, out_dir):
        self.rc = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.dir = out_dir
        self.events = read_events(out_dir) if out_dir else []

    def of(self, kind):
        return [e for e in self.events if e.get("event") == kind]

    def op(self, name):
        """The summary entry of op `name` (the one process's summary)."""
        for s in self.of("summary"):
            for o in s["ops"]:
                if o["op"] == name:
                    return o
        return None


def read_events(out_dir):
    events = []
    for path in sorted(glob.glob(os.path.join(out_dir, "events-*.jsonl"))):
        with open(path) as f:
            events.extend(json.loads(line) for line in f if line.strip())
    return events


def write_policy(text):
    fd, path = tempfile.mkstemp(suffix=".yaml", prefix="fumi-policy-")
    with os.fdopen(fd, "w") as f:
        f.write(textwrap.dedent(text))
    return path


def preload_env(policy=None, preload=True, env=None):
    """(environment, output directory) for a program run under LD_PRELOAD=libfumi.so with
    `policy` (YAML text; None: the embedded default); without preload, a clean environment."""
    full_env = dict(os.environ)
    for k in ("LD_PRELOAD", "FUMI_POLICY", "FUMI_OUT", "FUMI_ON_ERROR", "FUMI_DISABLE",
              "FUMI_PROMETHEUS"):
        full_env.pop(k, None)
    out_dir = None
    if preload:
        out_dir = tempfile.mkdtemp(prefix="fumi-out-")
        full_env["LD_PRELOAD"] = LIBFUMI
        full_env["FUMI_OUT"] = out_dir
        full_env["FUMI_PLUGIN_PATH"] = TEST_PLUGIN_DIR
        if policy is not None:
            full_env["FUMI_POLICY"] = write_policy(policy)
    full_env.update(env or {})
    return full_env, out_dir


def run(cmd, policy=None, preload=True, env=None, timeout=600):
    """Run `cmd`; with preload, under LD_PRELOAD=libfumi.so with `policy` (YAML text)."""
    full_env, out_dir = preload_env(policy, preload, env)
    proc = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout)
    return Run(proc, out_dir)
