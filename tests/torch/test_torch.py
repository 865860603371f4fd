"""PyTorch CPU training under fumi (real Debian python3-torch, /usr/bin/python3): its sgemm_
calls are checked and every loss value is bit-identical with and without fumi."""
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "preload"))
from fumitest import FUMI, read_events, run  # noqa: E402

PYTHON = "/usr/bin/python3"
TRAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                     "train_mlp.py")
STEPS = ["--steps", "30", "--log-every", "1"]


def losses(stdout):
    return [line for line in stdout.splitlines() if line.startswith("step ")]


class TorchTraining(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.baseline = run([PYTHON, TRAIN] + STEPS, preload=False)
        assert cls.baseline.rc == 0, cls.baseline.stderr
        assert len(losses(cls.baseline.stdout)) == 30

    def test_default_policy_through_fumi_run(self):
        out = tempfile.mkdtemp(prefix="fumi-torch-")
        proc = subprocess.run([FUMI, "run", "--out", out, "--", PYTHON, TRAIN] + STEPS,
                              capture_output=True, text=True, timeout=600)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(losses(proc.stdout), losses(self.baseline.stdout))
        summaries = [e for e in read_events(out) if e["event"] == "summary"]
        self.assertEqual(len(summaries), 1)
        sgemm = next(o for o in summaries[0]["ops"] if o["op"] == "sgemm_")
        self.assertGreater(sgemm["calls"], 6 * 30 - 1)  # 3 layers x (fwd + 2 bwd)
        self.assertGreaterEqual(sgemm["checked"], 3)
        self.assertIn("highprec.normwise_rel", sgemm["worst"])

    def test_every_call_checked_losses_identical(self):
        r = run([PYTHON, TRAIN] + STEPS, policy="""
            version: 1
            rules:
              - match: { op: "sgemm_" }
                sample: { every: 1 }
                checks:
                  - { plugin: highprec }
                  - { plugin: perturb, trials: 2 }
                  - { plugin: determinism }
                  - { plugin: nan_inf }
            """)
        self.assertEqual(r.rc, 0, r.stderr)
        self.assertEqual(losses(r.stdout), losses(self.baseline.stdout))
        op = r.op("sgemm_")
        self.assertEqual(op["checked"], op["calls"])
        self.assertEqual(op["worst"]["determinism.mismatches"], 0)
        self.assertLess(op["worst"]["highprec.normwise_rel"], 1e-5)


ILL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ill_matmul.py")
CHECK_SGEMM = """
version: 1
rules:
  - match: { op: sgemm_ }
    sample: { every: 1 }
    checks: [ { plugin: highprec }, { plugin: perturb } ]
"""


RESNET = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train_resnet.py")


class Resnet18(unittest.TestCase):
    def test_resnet18_training_ops_seen_checks_run_losses_identical(self):
        plain = run([PYTHON, RESNET, "3"], preload=False)
        self.assertEqual(plain.rc, 0, plain.stderr)
        r = run([PYTHON, RESNET, "3"], policy="""
            version: 1
            rules:
              - match: { op: "*gemm*" }
                sample: { every: 1 }
                checks: [ { plugin: highprec }, { plugin: determinism } ]
            """)
        self.assertEqual(r.rc, 0, r.stderr)
        self.assertEqual(losses(r.stdout), losses(plain.stdout))
        self.assertEqual(len(losses(r.stdout)), 3)
        ops = {o["op"]: o for s in r.of("summary") for o in s["ops"]}
        for op in ("aten::convolution", "aten::batch_norm", "aten::addmm",
                   "aten::convolution_backward"):
            self.assertIn(op, ops)
        self.assertTrue(any(op.startswith("Optimizer.step") for op in ops))
        self.assertGreater(ops["sgemm_"]["checked"], 0)  # the fc layer's GEMMs
        self.assertEqual(ops["sgemm_"]["worst"]["determinism.mismatches"], 0)


class TorchAdapter(unittest.TestCase):
    def test_aten_ops_observed_forward_backward_optimizer(self):
        r = run([PYTHON, TRAIN] + STEPS, policy=CHECK_SGEMM)
        self.assertEqual(r.rc, 0, r.stderr)
        self.assertEqual(losses(r.stdout), losses(self.__class__.baseline.stdout))
        torch_ops = {o["op"]: o for s in r.of("summary") for o in s["ops"]
                     if o["backend"] == "torch"}
        self.assertGreaterEqual(torch_ops["aten::addmm"]["calls"], 3 * 30)  # forward linear
        self.assertIn("aten::mm", torch_ops)  # backward of linear
        self.assertIn("aten::add_", torch_ops)  # SGD update
        self.assertTrue(any(op.startswith("Optimizer.step") for op in torch_ops), torch_ops)

    def test_phase_of_blas_calls(self):
        r = run([PYTHON, TRAIN, "--steps", "3"], policy="""
            version: 1
            report: { all_checks: true }
            rules:
              - match: { op: sgemm_ }
                sample: { every: 1 }
                checks: [ { plugin: nan_inf } ]
            """)
        self.assertEqual(r.rc, 0, r.stderr)
        phases = {}
        for c in r.of("check"):
            phases.setdefault(c["phase"], set()).add(c["context"][-1])
        self.assertIn("aten::addmm", phases["forward"])  # nn.Linear forward
        self.assertIn("aten::mm", phases["backward"])  # its gradients

    @classmethod
    def setUpClass(cls):
        cls.baseline = run([PYTHON, TRAIN] + STEPS, preload=False)

    def test_blas_violation_names_the_aten_op(self):
        plain = run([PYTHON, ILL, "ill"], preload=False)
        r = run([PYTHON, ILL, "ill"], policy=CHECK_SGEMM)
        self.assertEqual(r.rc, 0, r.stderr)
        self.assertEqual(r.stdout, plain.stdout)
        violations = r.of("violation")
        self.assertEqual({v["check"] for v in violations}, {"highprec", "perturb"})
        with open(ILL) as f:
            line = next(i for i, text in enumerate(f, 1) if "the ill-conditioned line" in text)
        for v in violations:
            self.assertEqual(v["op"], "sgemm_")
            self.assertEqual(v["context"][-1], "aten::mm")
            # The Python stack names the script's line, taken although torch released the GIL.
            self.assertEqual(v["python_stack"][0], f"{ILL}:{line} in main")
            self.assertTrue(v["python_stack"][1].endswith("in <module>"))

    def test_well_conditioned_torch_matmul_not_flagged(self):
        r = run([PYTHON, ILL, "well"], policy=CHECK_SGEMM)
        self.assertEqual(r.rc, 0, r.stderr)
        self.assertEqual(r.of("violation"), [])
        self.assertEqual(r.op("sgemm_")["checked"], 1)

    def test_adapter_loaded_only_with_torch(self):
        probe = "import sys; {imp}; print('libfumi_torch' in open('/proc/self/maps').read())"
        without = run([PYTHON, "-c", probe.format(imp="import json")], policy=CHECK_SGEMM)
        self.assertEqual(without.stdout.strip(), "False", without.stderr)
        with_torch = run([PYTHON, "-c", probe.format(imp="import torch")], policy=CHECK_SGEMM)
        self.assertEqual(with_torch.stdout.strip(), "True", with_torch.stderr)


if __name__ == "__main__":
    unittest.main()
