"""`cmake --install` gives a working fumi: install the build tree into a temporary prefix, run
jobs with <prefix>/bin/fumi (BLAS and, where the adapter is built, PyTorch), then build the
out-of-tree example plugin (examples/plugin) against the installed CMake package and run it."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "preload"))
from fumitest import BLAS_DEMO, BUILD, SOURCE, read_events, write_policy  # noqa: E402

CMAKE = os.environ.get("FUMI_CMAKE", "cmake")
PYTHON = "/usr/bin/python3"
TORCH_ADAPTER_BUILT = os.path.exists(os.path.join(BUILD, "lib", "fumi", "libfumi_torch.so"))
BUILTIN_PLUGINS = ("perturb", "highprec", "nan_inf", "determinism", "reference", "checksum")
# blas_demo well: one sgemm_ of 32x40 by 40x24, inputs in [0.5, 1): outputs in about [10, 40].
WELL_OUTPUTS = 32 * 24


def sh(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)


def clean_env():
    """This environment less fumi's variables (ctest sets several) and any CMake prefix path."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("FUMI_") and k not in ("LD_PRELOAD", "CMAKE_PREFIX_PATH")}


class Installed(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="fumi-install-")
        cls.prefix = os.path.join(cls.tmp, "prefix")
        r = sh([CMAKE, "--install", BUILD, "--prefix", cls.prefix])
        if r.returncode != 0:
            raise AssertionError("cmake --install failed:\n" + r.stdout + r.stderr)
        cls.fumi = os.path.join(cls.prefix, "bin", "fumi")
        # The example plugin, configured against the installed package only.
        cls.example = os.path.join(cls.tmp, "absmax")
        cls.example_log = ""
        for cmd in ([CMAKE, "-S", os.path.join(SOURCE, "examples", "plugin"), "-B", cls.example,
                     "-DCMAKE_PREFIX_PATH=" + cls.prefix],
                    [CMAKE, "--build", cls.example]):
            r = sh(cmd, env=clean_env())
            cls.example_log += r.stdout + r.stderr
            if r.returncode != 0:
                cls.example = None
                break

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_fumi(self, *cmd, policy=None):
        out = tempfile.mkdtemp(prefix="out-", dir=self.tmp)
        args = [self.fumi, "run", "--out", out]
        if policy is not None:
            args += ["--policy", write_policy(policy)]
        r = sh(args + ["--", *cmd], env=clean_env())
        self.assertEqual(r.returncode, 0, r.stderr)
        return r, read_events(out)

    @staticmethod
    def ops(events):
        return {(o["op"], o.get("backend")): o for e in events if e["event"] == "summary"
                for o in e["ops"]}

    def test_layout(self):
        p = self.prefix
        expected = ["bin/fumi", "lib/libfumi.so", "include/fumi/plugin.h",
                    "include/fumi/dtype.hpp", "include/fumi/dtypes.def",
                    "include/fumi/plugin_host.h", "include/fumi/metrics.h",
                    "include/fumi/counter_draw.h",
                    "lib/cmake/fumi/fumiConfig.cmake", "lib/cmake/fumi/fumiConfigVersion.cmake",
                    "lib/cmake/fumi/fumiTargets.cmake", "lib/cmake/fumi/fumiPlugin.cmake",
                    "lib/cmake/fumi/fumi_plugin.map"]
        expected += ["lib/fumi/plugins/libfumi_%s.so" % n for n in BUILTIN_PLUGINS]
        if TORCH_ADAPTER_BUILT:
            expected.append("lib/fumi/libfumi_torch.so")  # where libfumi looks (adapter.cpp)
        for rel in expected:
            self.assertTrue(os.path.isfile(os.path.join(p, rel)), rel)
        # Only the built-in plugins: the tests' misbehaving plugins stay in the build tree.
        self.assertEqual(sorted(os.listdir(os.path.join(p, "lib", "fumi", "plugins"))),
                         sorted("libfumi_%s.so" % n for n in BUILTIN_PLUGINS))
        # The CLI finds the installed libfumi and plugins, not the build tree's.
        r = sh([self.fumi, "plugins"], env=clean_env())
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(os.path.join(p, "lib", "fumi", "plugins"), r.stdout)
        self.assertNotIn(BUILD, r.stdout)

    def test_run_blas(self):
        plain = sh([BLAS_DEMO, "well"])
        r, events = self.run_fumi(BLAS_DEMO, "well")
        self.assertEqual(r.stdout, plain.stdout)  # results unchanged
        self.assertEqual(self.ops(events)[("sgemm_", "blas")]["calls"], 1)
        r, _ = self.run_fumi("sh", "-c", 'echo "$LD_PRELOAD"')
        self.assertEqual(r.stdout.strip(), os.path.join(self.prefix, "lib", "libfumi.so"))

    @unittest.skipUnless(TORCH_ADAPTER_BUILT, "the PyTorch adapter is not built")
    def test_run_torch(self):
        # The adapter attaches from <prefix>/lib/fumi: aten ops are counted, and the mapped
        # libfumi_torch.so is the installed one.
        script = textwrap.dedent("""
            import torch
            a = torch.full((16, 16), 0.5)
            for _ in range(3):
                b = torch.mm(a, a)
            print(b[0, 0].item())
            print("\\n".join(sorted({l.split()[-1] for l in open("/proc/self/maps")
                                     if "libfumi" in l})))
            """)
        policy = """\
            version: 1
            rules:
              - match: { op: aten::mm }
                sample: { every: 1 }
                checks:
                  - { plugin: nan_inf }
            """
        r, events = self.run_fumi(PYTHON, "-c", script, policy=policy)
        ops = self.ops(events)
        self.assertIn(("aten::mm", "torch"), ops, "the PyTorch adapter did not attach")
        mm = ops[("aten::mm", "torch")]
        self.assertEqual(mm["calls"], 3)
        self.assertEqual(mm["checked"], 3)
        mapped = r.stdout.split("\n")[1:]
        self.assertIn(os.path.join(self.prefix, "lib", "fumi", "libfumi_torch.so"), mapped)
        self.assertIn(os.path.join(self.prefix, "lib", "libfumi.so"), mapped)

    def absmax_policy(self, limit, ops='"sgemm_"'):
        return """\
            version: 1
            plugin_dirs: [%s]
            rules:
              - match: { op: %s }
                sample: { every: 1 }
                checks:
                  - { plugin: absmax, limit: %s }
            """ % (json.dumps(self.example), ops, limit)

    def test_example_plugin_built_against_package(self):
        self.assertIsNotNone(self.example, self.example_log)
        lib = os.path.join(self.example, "libfumi_absmax.so")
        self.assertTrue(os.path.isfile(lib), self.example_log)
        # fumi_add_plugin's version script: the entry point is the only export.
        nm = sh(["nm", "-D", "--defined-only", lib])
        self.assertEqual(nm.returncode, 0, nm.stderr)
        self.assertEqual([line.split()[-1] for line in nm.stdout.splitlines()],
                         ["fumi_plugin_entry"])
        r = sh([self.fumi, "plugins", "--dir", self.example], env=clean_env())
        self.assertEqual(r.returncode, 0, r.stderr)
        # Built against the installed header: the plugin speaks the ABI that header defines.
        with open(os.path.join(self.prefix, "include", "fumi", "plugin.h")) as f:
            abi = re.search(r"#define FUMI_PLUGIN_ABI_VERSION (\d+)u", f.read()).group(1)
        self.assertRegex(r.stdout, r"absmax\s+" + abi + r"\s+" + lib)

    def test_example_plugin_checks_calls(self):
        self.assertIsNotNone(self.example, self.example_log)
        # Every output of blas_demo well is over 1: one violation counting all of them.
        _, events = self.run_fumi(BLAS_DEMO, "well", policy=self.absmax_policy(1.0))
        violations = [e for e in events if e["event"] == "violation"]
        self.assertEqual(len(violations), 1, events)
        v = violations[0]
        self.assertEqual((v["op"], v["check"], v["metric"]), ("sgemm_", "absmax", "absmax"))
        self.assertEqual(v["tolerance"], 1.0)
        self.assertEqual(v["extra"]["over_limit"], WELL_OUTPUTS)
        self.assertTrue(10 < v["value"] < 40, v)
        # Under a limit above every output: checked, within the limit.
        _, events = self.run_fumi(BLAS_DEMO, "well", policy=self.absmax_policy(1000))
        sgemm = self.ops(events)[("sgemm_", "blas")]
        self.assertEqual((sgemm["checked"], sgemm["violations"]), (1, 0))
        self.assertEqual(sgemm["worst"]["absmax.absmax"], v["value"])
        # A bad parameter: the plugin's create refuses it, the entry is dropped.
        _, events = self.run_fumi(BLAS_DEMO, "well", policy=self.absmax_policy(-1))
        errors = [e["message"] for e in events if e["event"] == "error"]
        self.assertEqual(len(errors), 1, events)
        self.assertIn("parameter 'limit' of plugin 'absmax' must be in", errors[0])
        self.assertEqual(self.ops(events)[("sgemm_", "blas")]["checked"], 0)

    @unittest.skipUnless(TORCH_ADAPTER_BUILT, "the PyTorch adapter is not built")
    def test_example_plugin_on_torch_ops(self):
        self.assertIsNotNone(self.example, self.example_log)
        script = "import torch\nx = torch.full((8, 8), 100.0)\ntorch.mm(x, x)\n"
        _, events = self.run_fumi(PYTHON, "-c", script,
                                  policy=self.absmax_policy(65504, ops="aten::mm"))
        v = [e for e in events if e["event"] == "violation"]
        self.assertEqual(len(v), 1, events)
        self.assertEqual((v[0]["op"], v[0]["backend"], v[0]["check"]),
                         ("aten::mm", "torch", "absmax"))
        self.assertEqual(v[0]["value"], 8 * 100.0 * 100.0)


if __name__ == "__main__":
    unittest.main()
