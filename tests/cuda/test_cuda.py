"""CUDA backend tests: cuda_gemm (linked against the real CUDA 13 libraries), cuda_conv and
cuda_norm, cuda_graph (linked against the real cuDNN 9) under libfumi.

Everything runs on the simulated device (tests/simdevice: stand-ins preloaded after libfumi).
Class OnGpu runs the same program on the real libraries and needs a GPU: ctest runs it as its
own test `cuda_gpu` (label gpu), which reports "skipped" (exit 77) on machines without one."""
import collections
import ctypes
import math
import os
import re
import signal
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "preload"))
from fumitest import FUMI, LIBFUMI, preload_env, read_events, run  # noqa: E402

CUDA_GEMM = os.environ.get("CUDA_GEMM", "")
SIM = [p for p in os.environ.get("FUMI_SIM_PRELOAD", "").split(":") if p]
SIM_CUPTI = os.environ.get("FUMI_SIM_CUPTI", "")  # the CUPTI stand-in (libcupti.so.13)
CUDA_CONV = os.environ.get("CUDA_CONV", "")
CUDA_NORM = os.environ.get("CUDA_NORM", "")
CUDA_GRAPH = os.environ.get("CUDA_GRAPH", "")
SIM_CUDNN = os.environ.get("FUMI_SIM_CUDNN", "")  # the cuDNN stand-in (libcudnn.so.9)


def gpu_present():
    """A driver that initialises and at least one device."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        count = ctypes.c_int(0)
        return cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(count)) == 0 \
            and count.value > 0
    except OSError:
        return False


def every_call(*checks):
    """A policy checking every cuBLAS/cuBLASLt call with `checks`, passing checks reported."""
    return ("version: 1\nreport: { all_checks: true }\nrules:\n"
            "  - match: { op: \"cublas*\" }\n    sample: { every: 1 }\n    checks:\n"
            + "".join(f"      - {c}\n" for c in checks))


CHECKS = ["{ plugin: highprec, tolerance: 1e-4 }", "{ plugin: determinism }",
          "{ plugin: nan_inf }", "{ plugin: reference, tolerance: 1e-4 }"]
HIGHPREC = every_call(*CHECKS)
# perturb's ratio on fp16-accumulated GEMMs is large by nature: the sweep only wants it run.
CHECK_ALL = every_call(*CHECKS, "{ plugin: perturb, trials: 2, tolerance: 1 }")


def cuda(mode, policy=None, preload=True, env=None, gpu=False, cupti=False):
    """cuda_gemm MODE on the simulated device (or the real libraries: gpu), with or without
    libfumi; cupti: with the simulated device's CUPTI too."""
    full_env = dict(env or {})
    if not gpu:
        sim = SIM + ([SIM_CUPTI] if cupti else [])
        full_env["LD_PRELOAD"] = ":".join(([LIBFUMI] if preload else []) + sim)
    r = run([CUDA_GEMM, mode], policy=policy, preload=preload, env=full_env)
    if r.rc != 0:
        raise AssertionError(f"cuda_gemm {mode} failed ({r.rc}): {r.stderr[-3000:]}")
    return r


def lines(stdout):
    return [l for l in stdout.splitlines() if l.strip()]


def ran(stdout):
    """The output lines of calls the library ran: cuda_gemm prints "not supported" for those it
    declined (an H200's cuBLASLt, and so the simulated one, declines bias epilogues on
    row-major layouts), which fumi passes through unchecked."""
    return [l for l in lines(stdout) if not l.endswith("not supported")]


def assert_checksum_agrees_with_reference(test, r, ops):
    """In run r, exactly `ops` flagged, each by checksum and reference, within 2x of each other."""
    by = collections.defaultdict(dict)
    for v in r.of("violation"):
        by[v["op"]][v["check"]] = v["value"]
    test.assertEqual(set(by), ops)
    for op, checks in by.items():
        test.assertEqual(set(checks), {"checksum", "reference"}, op)
        test.assertLess(abs(math.log2(checks["checksum"] / checks["reference"])), 1, op)


def assert_checksum_quiet(test, r, at_least):
    """In run r, no violation and at least `at_least` checksum checks, each below 1e-12 (the
    programs' sweeps have exact results). Returns those checks."""
    test.assertEqual(r.of("violation"), [])
    ran = [c for c in r.of("check") if c["check"] == "checksum"]
    test.assertGreater(len(ran), at_least)
    for c in ran:
        test.assertLess(c["value"], 1e-12, c)
    return ran


@unittest.skipUnless(CUDA_GEMM, "cuda_gemm not built (no CUDA toolkit)")
class Sweep(unittest.TestCase):
    """Every hooked entry point, every transpose pair, every data type, leading dimensions and
    batch strides with gaps, pointer arrays, cuBLASLt orders/epilogues/batches."""

    @classmethod
    def setUpClass(cls):
        cls.plain = cuda("sweep", preload=False)
        # A queue deep enough for every call: each one is checked, asynchronously.
        cls.fumi = cuda("sweep", policy=CHECK_ALL, env={"FUMI_CUDA_QUEUE": "1024"})

    def test_results_bit_identical(self):
        self.assertEqual(lines(self.plain.stdout), lines(self.fumi.stdout))
        self.assertGreater(len(lines(self.plain.stdout)), 200)

    def test_every_entry_point_checked_every_call(self):
        hooked = ["cublasSgemm_v2", "cublasSgemm_v2_64", "cublasDgemm_v2", "cublasDgemm_v2_64",
                  "cublasHgemm", "cublasHgemm_64", "cublasGemmEx", "cublasGemmEx_64",
                  "cublasSgemmStridedBatched", "cublasSgemmStridedBatched_64",
                  "cublasDgemmStridedBatched", "cublasDgemmStridedBatched_64",
                  "cublasGemmStridedBatchedEx", "cublasGemmStridedBatchedEx_64",
                  "cublasGemmBatchedEx", "cublasGemmBatchedEx_64", "cublasLtMatmul"]
        printed = collections.Counter(l.split()[0] for l in lines(self.plain.stdout))
        checkable = collections.Counter(l.split()[0] for l in ran(self.plain.stdout))
        for op in hooked:
            with self.subTest(op=op):
                s = self.fumi.op(op)
                self.assertIsNotNone(s, f"{op} not seen")
                self.assertEqual(s["calls"], printed[op])
                self.assertEqual(s["checked"], checkable[op])
                # A call the library declined was sampled but has nothing to check.
                self.assertEqual(s["skipped"], printed[op] - checkable[op])

    def test_reruns_reproduce_the_call_exactly(self):
        # The operands make every result exact, so a correctly decoded rerun (own precision or
        # wider) matches to the last bit; gelu is the one inexact epilogue.
        checks = self.fumi.of("check")
        self.assertEqual(self.fumi.of("violation"), [])
        by = collections.defaultdict(list)
        for c in checks:
            by[c["check"]].append(c)
        self.assertEqual({"highprec", "determinism", "nan_inf", "perturb", "reference"}, set(by))
        for c in by["determinism"]:
            self.assertEqual(c["value"], 0, c)
        for c in by["highprec"] + by["reference"]:
            bound = 1e-6 if c["args"].get("epilogue") == "gelu" else 0
            self.assertLessEqual(c["value"], bound, c)
        self.assertEqual(len(by["reference"]), len(ran(self.plain.stdout)))

    def test_inner_cublaslt_calls_are_not_counted(self):
        # The simulated libcublas (like the real one) runs GEMMs through cublasLtMatmul: those
        # inner calls belong to the outer call and are neither counted nor checked.
        printed = collections.Counter(l.split()[0] for l in lines(self.plain.stdout))
        self.assertEqual(self.fumi.op("cublasLtMatmul")["calls"], printed["cublasLtMatmul"])

    def test_events_decode_the_call(self):
        ev = next(c for c in self.fumi.of("check")
                  if c["op"] == "cublasGemmStridedBatchedEx" and c["check"] == "highprec"
                  and c["args"]["transa"] == "T" and c["dtype"] == "bf16")
        self.assertEqual(ev["backend"], "cublas")
        self.assertEqual(ev["shape"]["A"], [3, 6, 8])
        self.assertEqual(ev["shape"]["B"], [3, 8, 5])
        self.assertEqual(ev["args"]["lda"], "10")
        self.assertEqual(ev["args"]["batch"], "3")
        self.assertEqual(ev["args"]["pointer_mode"], "host")
        self.assertEqual(ev["args"]["beta"], "0.5")
        lt = next(c for c in self.fumi.of("check")
                  if c["op"] == "cublasLtMatmul" and c["args"]["order"] == "col"
                  and c["args"]["epilogue"] == "relu_bias")
        self.assertIn("bias", lt["shape"])

    def test_what_hardware_declines_is_declined_and_passed_through(self):
        # Bias epilogues on row-major layouts: NOT_SUPPORTED on an H200, and so on the simulated
        # device; the program sees the library's status through fumi, and nothing is checked.
        declined = sorted(set(lines(self.plain.stdout)) - set(ran(self.plain.stdout)))
        self.assertEqual(len(declined), 8)
        self.assertTrue(all(" row ep4 " in l or " row ep6 " in l for l in declined), declined)
        self.assertEqual(sorted(set(lines(self.fumi.stdout)) - set(ran(self.fumi.stdout))),
                         declined)


@unittest.skipUnless(CUDA_GEMM, "cuda_gemm not built (no CUDA toolkit)")
class ExitOrder(unittest.TestCase):
    """main returns with sampled checks still queued: fumi finishes them before any exit
    handler runs. The libraries tear themselves down in exit handlers, some registered after
    fumi's own; an H200 run crashed in cuBLASLt when checks ran after that (2026-11-26). The
    simulated device's stand-in for the teardown ends the process if a GEMM follows it."""

    def test_queued_checks_finish_before_the_libraries_exit_handlers(self):
        r = cuda("exit", policy=HIGHPREC, env={"FUMI_CUDA_QUEUE": "1024"})
        self.assertNotIn("after the library's exit-time teardown", r.stderr)
        self.assertEqual(r.op("cublasSgemm_v2")["checked"], 12)
        self.assertEqual(len([c for c in r.of("check") if c["check"] == "highprec"]), 12)

    def test_checks_still_queued_after_the_exit_wait_are_dropped(self):
        # Slow checks (perturb, 400 reruns each: tenths of a second) and no wait at exit: the
        # one running finishes, the rest are dropped and counted, and the exit stays orderly.
        slow = every_call("{ plugin: perturb, trials: 400, tolerance: 1e9 }")
        r = cuda("exit", policy=slow, env={"FUMI_CUDA_QUEUE": "1024", "FUMI_EXIT_WAIT": "0"})
        self.assertNotIn("after the library's exit-time teardown", r.stderr)
        m = re.search(r"exit: (\d+) queued CUDA check\(s\) dropped, not done after 0 s", r.stderr)
        self.assertIsNotNone(m, r.stderr[-2000:])
        op = r.op("cublasSgemm_v2")
        self.assertGreaterEqual(int(m.group(1)), 1)
        self.assertEqual(op["skipped"], int(m.group(1)))
        self.assertEqual(op["checked"] + op["skipped"], 12)
        self.assertEqual(len(r.of("check")), op["checked"])
        # The default wait lets them all finish.
        r = cuda("exit", policy=every_call("{ plugin: perturb, trials: 40, tolerance: 1e9 }"),
                 env={"FUMI_CUDA_QUEUE": "1024"})
        self.assertNotIn("dropped", r.stderr)
        self.assertEqual(r.op("cublasSgemm_v2")["checked"], 12)

    def test_sigterm_while_checks_drain_at_exit_ends_the_job(self):
        # Seconds of queued checks at exit, and the job's SIGTERM meanwhile: fumi's wait for
        # the queue takes the signal at once (a snapshot, then death by SIGTERM) instead of
        # finishing the checks first, as a signal inside fumi otherwise waits for.
        full_env, out = preload_env(every_call("{ plugin: perturb, trials: 400, tolerance: 1e9 }"),
                                    env={"FUMI_CUDA_QUEUE": "1024"})
        full_env["LD_PRELOAD"] = ":".join([LIBFUMI] + SIM)
        p = subprocess.Popen([CUDA_GEMM, "exit"], env=full_env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        try:
            p.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
        self.assertIsNone(p.returncode, "the checks were meant to take seconds")
        p.send_signal(signal.SIGTERM)
        _, stderr = p.communicate(timeout=60)
        self.assertEqual(p.returncode, -signal.SIGTERM, stderr[-2000:])
        snaps = [e for e in read_events(out) if e.get("event") == "snapshot"]
        self.assertEqual([e["reason"] for e in snaps], ["SIGTERM"], stderr[-2000:])
        self.assertLess(snaps[0]["totals"]["checked"], 12)  # not waited out


@unittest.skipUnless(CUDA_GEMM, "cuda_gemm not built (no CUDA toolkit)")
class Precision(unittest.TestCase):
    def test_tf32_flagged_at_fp32_tolerance_plain_fp32_passes(self):
        r = cuda("tf32", policy=HIGHPREC)
        self.assertEqual(lines(cuda("tf32", preload=False).stdout), lines(r.stdout))
        hp = [c for c in r.of("check") + r.of("violation") if c["check"] == "highprec"]
        self.assertEqual(len(hp), 2)
        default, tf32 = sorted(hp, key=lambda c: c["call_index"])
        self.assertEqual(default["args"]["math_mode"], "default")
        self.assertEqual(default["value"], 0)
        self.assertEqual(default["event"], "check")
        self.assertEqual(tf32["args"]["math_mode"], "tf32")
        self.assertEqual(tf32["event"], "violation")
        self.assertAlmostEqual(tf32["value"], 3 / 8192, delta=1e-5)

    def test_fp16_accumulation_flagged_fp32_accumulation_quiet(self):
        for model in ("fumi", "precision"):  # f16 table: 1e-3; derived: 2u + 5 sqrt(k) 2^-24
            with self.subTest(model=model):
                policy = every_call("{ plugin: highprec }") + f"tolerances: {{ error: {model} }}\n"
                r = cuda("accum16", policy=policy)
                self.assertEqual(lines(cuda("accum16", preload=False).stdout), lines(r.stdout))
                hp = sorted([c for c in r.of("check") + r.of("violation")
                             if c["check"] == "highprec"], key=lambda c: c["call_index"])
                self.assertEqual(len(hp), 2)
                half, single = hp
                self.assertEqual(half["event"], "violation")  # summed in fp16: low bits lost
                self.assertGreater(half["value"], 1e-2)
                self.assertEqual(single["event"], "check", single)  # summed in fp32: quiet
                self.assertLess(single["value"], 1e-3)
                if model == "precision":  # f16 output, k from the call, f32 accumulation
                    k = int(half["args"]["k"])
                    tau = 2 * 2.0 ** -11 + 5 * k ** 0.5 * 2.0 ** -24
                    for c in (half, single):
                        self.assertAlmostEqual(c["tolerance"], tau, delta=tau * 1e-9)
                else:
                    self.assertEqual(half["tolerance"], 1e-3)

    def test_planted_wrong_result_flagged(self):
        env = {"FUMI_SIM_FAULTS": "wrong:f32:7x6x5,wrong:f32:9x3x4"}
        r = cuda("fault", policy=HIGHPREC, env=env)
        self.assertEqual(lines(cuda("fault", preload=False, env=env).stdout), lines(r.stdout))
        flagged = {(v["op"], v["check"]) for v in r.of("violation")}
        self.assertEqual(flagged, {("cublasSgemm_v2", "highprec"), ("cublasLtMatmul", "highprec"),
                                   ("cublasSgemm_v2", "reference"), ("cublasLtMatmul", "reference")})
        for v in r.of("violation"):
            self.assertGreater(v["value"], 1e-2)
            self.assertTrue(v["stack"], v)
            self.assertIn("cuda_gemm.cpp", v["stack"][0])  # the program's frame, not fumi's

    def test_checksum_flags_what_reference_flags(self):
        # checksum's projections of cuBLAS and cuBLASLt calls (the operands copied to the host
        # in their own type and contracted in place) find the planted fault where fumi's host
        # GEMM does, within 2x of its figure; on the sweep's exact results they find nothing.
        env = {"FUMI_SIM_FAULTS": "wrong:f32:7x6x5,wrong:f32:9x3x4"}
        policy = every_call("{ plugin: checksum }", "{ plugin: reference, tolerance: 1e-4 }")
        r = cuda("fault", policy=policy, env=env)
        assert_checksum_agrees_with_reference(self, r, {"cublasSgemm_v2", "cublasLtMatmul"})
        sweep = cuda("sweep", policy=every_call("{ plugin: checksum }"),
                     env={"FUMI_CUDA_QUEUE": "1024"})
        ran = assert_checksum_quiet(self, sweep, 150)
        self.assertEqual({c["dtype"] for c in ran}, {"f64", "f32", "f16", "bf16"})

    def test_wrong_in_every_precision_caught_by_reference_only(self):
        # A kernel wrong the same way in fp32 and fp64: the wider rerun agrees with it, fumi's own
        # host implementation does not.
        env = {"FUMI_SIM_FAULTS": "wrong:f32:7x6x5,wrong:f64:7x6x5"}
        r = cuda("fault", policy=HIGHPREC, env=env)
        flagged = {(v["op"], v["check"]) for v in r.of("violation")}
        self.assertEqual(flagged, {("cublasSgemm_v2", "reference")})
        hp = next(c for c in r.of("check") if c["check"] == "highprec"
                  and c["op"] == "cublasSgemm_v2")
        self.assertLess(hp["value"], 1e-6)

    def test_nan_injection_reported_as_appeared(self):
        env = {"FUMI_SIM_FAULTS": "nan:f32:7x6x5"}
        r = cuda("fault", policy=HIGHPREC, env=env)
        nan = [v for v in r.of("violation") if v["check"] == "nan_inf"]
        self.assertEqual(len(nan), 1)
        self.assertEqual(nan[0]["op"], "cublasSgemm_v2")
        self.assertEqual(nan[0]["detail"], "appeared")

    def test_nondeterminism_flagged(self):
        env = {"FUMI_SIM_FAULTS": "nondet:f32:9x3x4"}
        r = cuda("fault", policy=HIGHPREC, env=env)
        det = [v for v in r.of("violation") if v["check"] == "determinism"]
        self.assertEqual([v["op"] for v in det], ["cublasLtMatmul"])

    def test_device_pointer_mode_scalars(self):
        r = cuda("device-scalars", policy=HIGHPREC)
        self.assertEqual(lines(cuda("device-scalars", preload=False).stdout), lines(r.stdout))
        self.assertEqual(r.of("violation"), [])
        hp = [c for c in r.of("check") if c["check"] == "highprec"]
        self.assertEqual(sorted(c["op"] for c in hp), ["cublasLtMatmul", "cublasSgemm_v2"])
        ref = [c for c in r.of("check") if c["check"] == "reference"]
        self.assertEqual(len(ref), 2)  # the host reference read the scalars from the device
        for c in hp + ref:
            self.assertEqual(c["value"], 0)
        self.assertEqual(r.op("cublasSgemm_v2")["checked"], 1)


def bytes_to_host(r):
    """What run r copied from device to host memory (the simulated runtime's meter)."""
    return int(re.search(r"^sim_bytes_to_host (\d+)$", r.stderr, re.M).group(1))


@unittest.skipUnless(CUDA_GEMM, "cuda_gemm not built (no CUDA toolkit)")
class DeviceKernels(unittest.TestCase):
    """checksum's projections and the NaN/Inf scans of cuBLAS calls run by fumi's own kernels
    (interposer/cuda/device_kernels.h) through the driver stand-in: the verdicts of the host
    copies, with only the projections and four scalars a scan moved to the host."""

    POLICY = every_call("{ plugin: checksum, vectors: 2 }", "{ plugin: nan_inf }")

    def large(self, policy=POLICY, sim=None, **env):
        full = {"FUMI_SIM_METER": "1", "FUMI_LOG_LEVEL": "info", **env}
        if sim is None:
            return cuda("large", policy=policy, env=full)
        full["LD_PRELOAD"] = ":".join([LIBFUMI] + sim)
        r = run([CUDA_GEMM, "large"], policy=policy, env=full)
        self.assertEqual(r.rc, 0, r.stderr[-3000:])
        return r

    def test_projections_move_their_results_not_the_operands(self):
        plain = cuda("large", preload=False, env={"FUMI_SIM_METER": "1"})
        device = self.large()
        host = self.large(FUMI_DEVICE_KERNELS="0")
        for r in (device, host):
            self.assertEqual(lines(plain.stdout), lines(r.stdout))
        self.assertIn("device kernels loaded", device.stderr)
        self.assertNotIn("device kernels loaded", host.stderr)
        moved = {name: bytes_to_host(r) - bytes_to_host(plain)
                 for name, r in (("device", device), ("host", host))}
        # Staged, each call's A, B, C and D come to the host (4 x 256 x 258 fp32, twice). On
        # the device: per call 8 projections of 256 x 2 fp64 (A, B and C on each side, D's
        # two sides) and the scans' results (64 bytes each), a tenth of A.
        self.assertGreater(moved["host"], 2 * 4 * 256 * 256 * 4)
        self.assertLessEqual(moved["device"], 2 * (8 * 256 * 2 * 8 + 2 * 64))
        self.assertLess(moved["device"], moved["host"] / 10)
        for r in (device, host):
            assert_checksum_quiet(self, r, 1)
            self.assertEqual(len([c for c in r.of("check") if c["check"] == "nan_inf"]), 2)
        got = sorted(c["value"] for c in device.of("check") if c["check"] == "checksum")
        want = sorted(c["value"] for c in host.of("check") if c["check"] == "checksum")
        self.assertEqual(len(got), 2)
        for g, w in zip(got, want):
            self.assertLess(abs(g - w), 1e-15)

    def test_reruns_converted_and_compared_on_the_device(self):
        # highprec's inputs widened on the device and its fp64 rerun compared there, perturb's
        # inputs perturbed there (the host's draws: the same perturbed bits), as determinism's
        # rerun: the host copies' figures (perturb's, a maximum, bit for bit), a fraction of
        # the bytes.
        policy = every_call("{ plugin: highprec, tolerance: 1e-4 }", "{ plugin: determinism }",
                            "{ plugin: perturb, trials: 2, tolerance: 1 }")
        plain = cuda("large", preload=False, env={"FUMI_SIM_METER": "1"})
        device = self.large(policy)
        host = self.large(policy, FUMI_DEVICE_KERNELS="0")
        moved = {name: bytes_to_host(r) - bytes_to_host(plain)
                 for name, r in (("device", device), ("host", host))}
        # Staged: A, B and C to the host and back widened or perturbed, D and the reruns' Ds
        # to the host (over 3 MB a call); on the device, each map's and pass's 64 bytes.
        self.assertGreater(moved["host"], 2 * 3000000)
        self.assertLessEqual(moved["device"], 2 * 24 * 64)
        for r in (device, host):
            self.assertEqual(lines(plain.stdout), lines(r.stdout))
            self.assertEqual(r.of("violation"), [])
        checks = {name: sorted((c["check"], c["value"]) for c in r.of("check"))
                  for name, r in (("device", device), ("host", host))}
        self.assertEqual([c for c, _ in checks["device"]],
                         ["determinism"] * 2 + ["highprec"] * 2 + ["perturb"] * 2)
        for (check, got), (_, want) in zip(checks["device"], checks["host"]):
            if check == "perturb":
                self.assertGreater(got, 0)  # the noise moved the results
                self.assertEqual(got, want)
            else:
                self.assertAlmostEqual(got, want, delta=1e-12 * abs(want), msg=check)
        # The elements the noise moved: on the device, counted there and stored after the
        # comparisons came back (perturb asks for FUMI_MAP_CHANGED_LATER); the host's count.
        fractions = {name: sorted(c["extra"]["perturbed_fraction"] for c in r.of("check")
                                  if c["check"] == "perturb")
                     for name, r in (("device", device), ("host", host))}
        self.assertEqual(fractions["device"], fractions["host"])
        for f in fractions["device"]:
            self.assertGreater(f, 0.3)

    def test_planted_faults_found_on_the_device(self):
        # A wrong element, then a NaN, in each 256^3 result: the device's projections flag
        # the wrong one within 2x of fumi's host GEMM; its scan finds the NaN.
        policy = every_call("{ plugin: checksum }", "{ plugin: reference, tolerance: 1e-4 }")
        r = self.large(policy, FUMI_SIM_FAULTS="wrong:f32:256x256x256")
        self.assertIn("device kernels loaded", r.stderr)
        flagged = collections.Counter((v["op"], v["check"]) for v in r.of("violation"))
        self.assertEqual(flagged, {("cublasSgemm_v2", "checksum"): 2,
                                   ("cublasSgemm_v2", "reference"): 2})
        assert_checksum_agrees_with_reference(self, r, {"cublasSgemm_v2"})
        r = self.large(FUMI_SIM_FAULTS="nan:f32:256x256x256")
        nan = [v for v in r.of("violation") if v["check"] == "nan_inf"]
        self.assertEqual([v["detail"] for v in nan], ["appeared", "appeared"])

    def test_without_a_driver_the_host_copies_serve(self):
        # No libcuda.so.1 in the process (the stand-in left out; this machine has no driver):
        # said once, and the checks read host copies with the same verdicts.
        sim = [p for p in SIM if not os.path.basename(p).startswith("libcuda.")]
        r = self.large(sim=sim)
        self.assertIn("device kernels are off (libcuda.so.1 not loadable)", r.stderr)
        assert_checksum_quiet(self, r, 1)
        self.assertEqual(len([c for c in r.of("check") if c["check"] == "nan_inf"]), 2)


@unittest.skipUnless(CUDA_GEMM, "cuda_gemm not built (no CUDA toolkit)")
class Safety(unittest.TestCase):
    def test_capture_issues_nothing_and_counts_skipped(self):
        r = cuda("capture", policy=HIGHPREC)
        self.assertEqual(lines(cuda("capture", preload=False).stdout), lines(r.stdout))
        self.assertIn("capture violations 0", r.stdout)
        s = r.op("cublasSgemm_v2")
        self.assertEqual(s["calls"], 2)
        self.assertEqual(s["checked"], 1)  # the call on the stream that was not capturing
        self.assertEqual(s["skipped"], 1)

    def test_errors_pass_through(self):
        r = cuda("errors", policy=HIGHPREC)
        self.assertEqual(lines(cuda("errors", preload=False).stdout), lines(r.stdout))
        self.assertIn("invalid lda status 7", r.stdout)  # CUBLAS_STATUS_INVALID_VALUE
        self.assertIn("unsupported epilogue status 15", r.stdout)  # CUBLAS_STATUS_NOT_SUPPORTED
        self.assertIn("last error after a checked call 0", r.stdout)
        self.assertEqual(r.op("cublasSgemm_v2")["checked"], 1)
        lt = r.op("cublasLtMatmul")  # sampled, its descriptors not modelled: skipped
        self.assertEqual((lt["calls"], lt["checked"], lt["skipped"]), (1, 0, 1))

    def test_declined_call_keeps_its_pool_blocks_until_its_copies_ran(self):
        # A call that fails after fumi queued its snapshot copies (on a stream held back by
        # the program) must not hand its blocks to the next checks before those copies ran:
        # they would overwrite the snapshots of a matmul checked on another stream, whose
        # check then flags a correct call (determinism 4096 ulps, checksum 1.3, when the
        # blocks went back at once).
        policy = every_call("{ plugin: determinism }", "{ plugin: checksum }")
        r = cuda("poolrace", policy=policy)
        self.assertEqual(lines(cuda("poolrace", preload=False).stdout), lines(r.stdout))
        self.assertEqual(r.of("violation"), [])
        lt = r.op("cublasLtMatmul")
        self.assertEqual((lt["calls"], lt["checked"], lt["skipped"]), (2, 1, 1))
        self.assertEqual(r.op("cublasSgemm_v2")["checked"], 2)

    def test_sync_mode_same_verdicts(self):
        env = {"FUMI_SIM_FAULTS": "wrong:f32:7x6x5", "FUMI_CUDA_MODE": "sync"}
        r = cuda("fault", policy=HIGHPREC, env=env)
        self.assertEqual({v["op"] for v in r.of("violation")}, {"cublasSgemm_v2"})

    def test_full_queue_skips_calls_and_keeps_results(self):
        r = cuda("sweep", policy=HIGHPREC, env={"FUMI_CUDA_QUEUE": "1"})
        self.assertEqual(lines(cuda("sweep", preload=False).stdout), lines(r.stdout))
        ops = [o for s in r.of("summary") for o in s["ops"]]
        self.assertGreater(sum(o["skipped"] for o in ops), 0)
        self.assertGreater(sum(o["checked"] for o in ops), 0)
        for o in ops:
            self.assertEqual(o["checked"] + o["skipped"], o["calls"], o)
        self.assertEqual(r.of("violation"), [])

    def test_scratch_budget_too_small_skips_and_keeps_results(self):
        policy = HIGHPREC.replace("rules:", "scratch_budget: 512\nrules:")
        r = cuda("sweep", policy=policy)
        self.assertEqual(lines(cuda("sweep", preload=False).stdout), lines(r.stdout))
        s = r.op("cublasGemmStridedBatchedEx")
        self.assertGreater(s["skipped"], 0)
        self.assertEqual(r.of("violation"), [])


# ---- cuDNN (cuda_conv) -------------------------------------------------------------------------

CONV_OPS = ["cudnnConvolutionForward", "cudnnConvolutionBackwardData",
            "cudnnConvolutionBackwardFilter", "cudnnConvolutionBiasActivationForward"]


def every_conv(*checks, rule=""):
    """A policy checking every cuDNN convolution with `checks`, passing checks reported."""
    return ("version: 1\nreport: { all_checks: true }\nrules:\n"
            f"  - match: {{ op: \"cudnn*\" {rule}}}\n    sample: {{ every: 1 }}\n    checks:\n"
            + "".join(f"      - {c}\n" for c in checks))


CONV_CHECKS = every_conv(*CHECKS)
CONV_ALL = every_conv(*CHECKS, "{ plugin: perturb, trials: 2, tolerance: 1 }")


def cudnn_program(program, mode, policy=None, preload=True, env=None, gpu=False):
    """A cuDNN test program (cuda_conv, cuda_norm, cuda_graph) running MODE on the simulated
    device (or the real libraries: gpu), with or without libfumi."""
    full_env = dict(env or {})
    if not gpu:
        full_env["LD_PRELOAD"] = ":".join(([LIBFUMI] if preload else []) + SIM + [SIM_CUDNN])
    r = run([program, mode], policy=policy, preload=preload, env=full_env)
    if r.rc != 0:
        name = os.path.basename(program)
        raise AssertionError(f"{name} {mode} failed ({r.rc}): {r.stderr[-3000:]}")
    return r


def conv(mode, **kw):
    return cudnn_program(CUDA_CONV, mode, **kw)


def checks_of(r, check):
    return sorted([c for c in r.of("check") + r.of("violation") if c["check"] == check],
                  key=lambda c: (c["op"], c["call_index"]))


@unittest.skipUnless(CUDA_CONV and SIM_CUDNN, "cuda_conv or the cuDNN stand-in not built")
class ConvSweep(unittest.TestCase):
    """Forward, backward data, backward filter and the fused forward x f32 (TF32 and FMA math),
    f64, f16 (f32 and f16 compute), bf16 x NCHW/NHWC/strided, 2-D and 3-D, groups, padding,
    stride, dilation, convolution and cross-correlation, beta 0 and 1/2; descriptors destroyed
    as soon as each call returns."""

    @classmethod
    def setUpClass(cls):
        cls.plain = conv("sweep", preload=False)
        cls.fumi = conv("sweep", policy=CONV_ALL, env={"FUMI_CUDA_QUEUE": "1024"})

    def test_results_bit_identical(self):
        self.assertEqual(lines(self.plain.stdout), lines(self.fumi.stdout))
        self.assertGreater(len(lines(self.plain.stdout)), 70)
        self.assertFalse([l for l in lines(self.plain.stdout) if " status " in l])

    def test_every_entry_point_checked_every_call(self):
        printed = collections.Counter(l.split()[0] for l in lines(self.plain.stdout))
        for op in CONV_OPS:
            with self.subTest(op=op):
                s = self.fumi.op(op)
                self.assertIsNotNone(s, f"{op} not seen")
                self.assertGreater(printed[op], 0)
                self.assertEqual((s["calls"], s["checked"], s["skipped"]),
                                 (printed[op], printed[op], 0))

    def test_reruns_reproduce_the_call_exactly(self):
        # Every result is exact, so each rerun (own precision, wider, host fp64) matches it.
        self.assertEqual(self.fumi.of("violation"), [])
        by = collections.defaultdict(list)
        for c in self.fumi.of("check"):
            by[c["check"]].append(c)
        self.assertEqual({"highprec", "determinism", "nan_inf", "perturb", "reference"}, set(by))
        n = len(lines(self.plain.stdout))
        self.assertEqual(len(by["reference"]), n)
        self.assertEqual(len(by["determinism"]), n)
        for c in by["determinism"] + by["highprec"] + by["reference"]:
            self.assertEqual(c["value"], 0, c)
        # highprec has nothing wider than f64; every other call got its wider rerun.
        self.assertEqual(len(by["highprec"]),
                         len([l for l in lines(self.plain.stdout) if " f64/" not in l]))
        self.assertEqual({c["backend"] for c in self.fumi.of("check")}, {"cudnn"})

    def test_events_decode_the_call(self):
        ev = [c for c in self.fumi.of("check") if c["check"] == "reference"]
        bwdf = next(c for c in ev if c["op"] == "cudnnConvolutionBackwardFilter"
                    and c["args"]["layout"] == "nhwc" and c["dtype"] == "f32"
                    and c["args"]["math_mode"] == "default" and c["shape"]["x"][1] == 4)
        self.assertEqual(bwdf["args"]["filter_format"], "nhwc")
        self.assertEqual(bwdf["args"]["compute"], "tf32")  # f32 data, default math
        self.assertEqual(bwdf["shape"]["dw"], [4, 4 // int(bwdf["args"]["groups"]), 3, 3])
        self.assertEqual(bwdf["shape"]["x"], [2, 4, 5, 5])
        self.assertIn("dy", bwdf["shape"])
        fma = next(c for c in ev if c["args"]["math_mode"] == "fma")
        self.assertEqual(fma["args"]["compute"], "f32")
        strided = [c for c in ev if c["args"]["layout"] == "strided"]
        self.assertTrue(strided)
        three_d = [c for c in ev if len(c["shape"].get("x", c["shape"].get("dx", []))) == 5]
        self.assertTrue(three_d)
        self.assertEqual(set(c["args"]["groups"] for c in ev), {"1", "2"})
        self.assertEqual(set(c["args"]["mode"] for c in ev), {"convolution", "cross_correlation"})
        self.assertIn("1,1", {c["args"]["dilation"] for c in ev})
        self.assertIn("2,2", {c["args"]["dilation"] for c in ev})
        self.assertIn("0.5", {c["args"].get("beta") for c in ev})
        fused = next(c for c in ev if c["op"] == "cudnnConvolutionBiasActivationForward")
        self.assertEqual(fused["args"]["activation"], "relu")
        self.assertEqual(fused["args"]["alpha2"], "0.5")
        self.assertEqual(fused["args"]["algo"], "1")  # IMPLICIT_PRECOMP_GEMM
        self.assertIn("bias", fused["shape"])
        self.assertIn("z", fused["shape"])
        half = {c["args"]["compute"] for c in ev if c["dtype"] == "f16"}
        self.assertEqual(half, {"f16", "f32"})


@unittest.skipUnless(CUDA_CONV and SIM_CUDNN, "cuda_conv or the cuDNN stand-in not built")
class ConvPrecision(unittest.TestCase):
    def test_tf32_flagged_fma_quiet(self):
        r = conv("tf32", policy=CONV_CHECKS)
        self.assertEqual(lines(conv("tf32", preload=False).stdout), lines(r.stdout))
        hp = checks_of(r, "highprec")
        self.assertEqual(len(hp), 2)
        tf32, fma = hp
        self.assertEqual((tf32["args"]["math_mode"], tf32["args"]["compute"]), ("default", "tf32"))
        self.assertEqual(tf32["event"], "violation")
        self.assertGreater(tf32["value"], 1e-4)
        self.assertEqual(fma["args"]["math_mode"], "fma")
        self.assertEqual(fma["event"], "check", fma)
        self.assertLess(fma["value"], 1e-6)

    def test_fp16_accumulation_flagged_fp32_accumulation_quiet(self):
        env = {"FUMI_SIMCUDNN_FAULTS": "accum16"}
        for model in ("fumi", "precision"):  # f16 table: 1e-3; derived from C/groups * filter
            with self.subTest(model=model):
                policy = (every_conv("{ plugin: highprec }")
                          + f"tolerances: {{ error: {model} }}\n")
                r = conv("accum16", policy=policy, env=env)
                self.assertEqual(lines(conv("accum16", preload=False, env=env).stdout),
                                 lines(r.stdout))
                hp = checks_of(r, "highprec")
                self.assertEqual(len(hp), 2)
                half, single = hp
                self.assertEqual(half["args"]["compute"], "f16")
                self.assertEqual(half["event"], "violation")  # 4096 ones in fp16 stop at 2048
                self.assertGreater(half["value"], 0.1)
                self.assertEqual(single["args"]["compute"], "f32")
                self.assertEqual(single["event"], "check", single)
                self.assertEqual(single["value"], 0)
                if model == "precision":  # k known from the descriptors: not the table's
                    self.assertNotEqual(half["tolerance"], 1e-3)
                    self.assertLess(half["tolerance"], 2e-3)

    def test_wrong_in_every_precision_caught_by_reference_only(self):
        # Wrong the same way in f32 and f64: the wider rerun agrees with the call, fumi's own
        # host convolution does not, in every direction.
        env = {"FUMI_SIMCUDNN_FAULTS": "wrong:3x5"}
        r = conv("fault", policy=CONV_CHECKS, env=env)
        planted = lines(conv("fault", preload=False, env=env).stdout)
        self.assertEqual(planted, lines(r.stdout))
        # The calls whose results the fault changed (the stand-in plants it in forward and
        # backward filter at least) are flagged by `reference`, and only those.
        clean = lines(conv("fault", preload=False).stdout)
        wrong = {a.split()[0] for a, b in zip(planted, clean) if a != b}
        self.assertGreaterEqual(wrong, {"cudnnConvolutionForward", "cudnnConvolutionBackwardFilter"})
        flagged = {(v["op"], v["check"]) for v in r.of("violation")}
        self.assertEqual(flagged, {(op, "reference") for op in wrong})
        for v in r.of("violation"):
            self.assertAlmostEqual(v["value"], 2 ** -7, delta=2e-3)
            self.assertTrue(v["stack"], v)
            self.assertIn("cuda_conv.cpp", v["stack"][0])  # the program's frame, not fumi's
        for c in checks_of(r, "highprec"):
            self.assertLess(c["value"], 1e-6, c)

    def test_checksum_flags_what_reference_flags(self):
        # The checksum's projections over channels (one single-channel convolution per vector)
        # find the planted fault where fumi's full host convolution does, within 2x of its
        # figure; the backward-data output of this case is all zeros and stays unflagged.
        env = {"FUMI_SIMCUDNN_FAULTS": "wrong:3x5"}
        policy = every_conv("{ plugin: checksum }", "{ plugin: reference, tolerance: 1e-4 }")
        r = conv("fault", policy=policy, env=env)
        assert_checksum_agrees_with_reference(
            self, r, {"cudnnConvolutionForward", "cudnnConvolutionBackwardFilter"})
        sweep = conv("sweep", policy=every_conv("{ plugin: checksum }"),
                     env={"FUMI_CUDA_QUEUE": "1024"})
        assert_checksum_quiet(self, sweep, 40)

    def test_correct_results_not_flagged_without_fault(self):
        r = conv("fault", policy=CONV_CHECKS)
        self.assertEqual(r.of("violation"), [])
        self.assertEqual(len(checks_of(r, "reference")), 3)

    def test_nondeterminism_flagged(self):
        # The fault bumps every other forward call of the process, fumi's reruns included:
        # sync mode and determinism alone make the order of calls fixed, so the first call and
        # its rerun always differ.
        policy = every_conv("{ plugin: determinism }")
        env = {"FUMI_SIMCUDNN_FAULTS": "nondet", "FUMI_CUDA_MODE": "sync"}
        r = conv("nondet", policy=policy, env=env)
        det = [v for v in r.of("violation") if v["check"] == "determinism"]
        self.assertIn(0, [v["call_index"] for v in det])
        self.assertEqual({v["op"] for v in det}, {"cudnnConvolutionForward"})
        quiet = conv("nondet", policy=policy, env={"FUMI_CUDA_MODE": "sync"})
        self.assertEqual(quiet.of("violation"), [])
        self.assertEqual(len(quiet.of("check")), 3)


@unittest.skipUnless(CUDA_CONV and SIM_CUDNN, "cuda_conv or the cuDNN stand-in not built")
class ConvDeviceKernels(unittest.TestCase):
    """checksum's projections of cuDNN convolutions on the device (fumi's convolution kernel
    and contractions: the filter, or dy, summed against the vectors there, then one fp64
    convolution with a channel per vector), against the host copies' figures."""

    def large(self, policy, **env):
        return conv("large", policy=policy,
                    env={"FUMI_SIM_METER": "1", "FUMI_LOG_LEVEL": "info", **env})

    def test_projections_stay_on_the_device(self):
        policy = every_conv("{ plugin: checksum, vectors: 2 }", "{ plugin: nan_inf }")
        plain = conv("large", preload=False, env={"FUMI_SIM_METER": "1"})
        device = self.large(policy)
        host = self.large(policy, FUMI_DEVICE_KERNELS="0")
        self.assertIn("device kernels loaded", device.stderr)
        moved = {name: bytes_to_host(r) - bytes_to_host(plain)
                 for name, r in (("device", device), ("host", host))}
        # Staged, every operand and output comes to the host (four calls, 256 KiB outputs and
        # activations; an output once for both checks: checksum's pass scans it for nan_inf);
        # on the device, the projections (a few KiB a vector) and 64 bytes a scan.
        self.assertGreater(moved["host"], 4 * 2 * 256 * 1024)
        self.assertLess(moved["device"], moved["host"] / 6)
        for r in (device, host):
            self.assertEqual(lines(plain.stdout), lines(r.stdout))
            ran = assert_checksum_quiet(self, r, 3)
            self.assertEqual(sorted(c["op"] for c in ran),
                             ["cudnnConvolutionBackwardData", "cudnnConvolutionBackwardFilter",
                              "cudnnConvolutionForward", "cudnnConvolutionForward"])

    def test_planted_faults_found_on_the_device(self):
        # A wrong element in every direction and in the NHWC true convolution with beta and
        # groups: the device's projections flag each where fumi's host convolution does, with
        # the host copies' figures.
        policy = every_conv("{ plugin: checksum }", "{ plugin: reference, tolerance: 1e-4 }")
        env = {"FUMI_SIMCUDNN_FAULTS": "wrong:64x64"}
        device = self.large(policy, **env)
        host = self.large(policy, FUMI_DEVICE_KERNELS="0", **env)
        self.assertIn("device kernels loaded", device.stderr)
        assert_checksum_agrees_with_reference(
            self, device, {"cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                           "cudnnConvolutionBackwardFilter"})
        figures = {name: sorted((v["op"], v["call_index"], v["value"])
                                for v in r.of("violation") if v["check"] == "checksum")
                   for name, r in (("device", device), ("host", host))}
        self.assertEqual(len(figures["device"]), 4)
        for (op, i, got), (op2, i2, want) in zip(figures["device"], figures["host"]):
            self.assertEqual((op, i), (op2, i2))
            self.assertAlmostEqual(got, want, delta=1e-9 * want)


@unittest.skipUnless(CUDA_CONV and SIM_CUDNN, "cuda_conv or the cuDNN stand-in not built")
class ConvSafety(unittest.TestCase):
    def test_capture_issues_nothing_and_counts_skipped(self):
        r = conv("capture", policy=CONV_CHECKS)
        self.assertEqual(lines(conv("capture", preload=False).stdout), lines(r.stdout))
        self.assertIn("capture violations 0", r.stdout)
        s = r.op("cudnnConvolutionForward")
        self.assertEqual((s["calls"], s["checked"], s["skipped"]), (2, 1, 1))

    def test_unsampled_calls_pass_straight_through(self):
        r = conv("sweep", policy=every_conv("{ plugin: highprec }", rule=", min_size: 1000000000 "))
        self.assertEqual(lines(conv("sweep", preload=False).stdout), lines(r.stdout))
        printed = collections.Counter(l.split()[0] for l in lines(r.stdout))
        for op in CONV_OPS:
            s = r.op(op)
            self.assertEqual((s["calls"], s["checked"], s["skipped"]), (printed[op], 0, 0))
        self.assertEqual(r.of("check") + r.of("violation"), [])

    def test_errors_pass_through(self):
        r = conv("errors", policy=CONV_CHECKS)
        self.assertEqual(lines(conv("errors", preload=False).stdout), lines(r.stdout))
        self.assertRegex(r.stdout, r"bad algo status 2\d\d\d")  # CUDNN_STATUS_BAD_PARAM(_*)
        self.assertIn("last error after a checked call 0", r.stdout)
        s = r.op("cudnnConvolutionForward")
        self.assertEqual((s["calls"], s["checked"], s["skipped"]), (2, 1, 1))


# ---- cuDNN batch normalisation (cuda_norm) ---------------------------------------------------

BN_OPS = ["cudnnBatchNormalizationForwardTraining", "cudnnBatchNormalizationForwardTrainingEx",
          "cudnnBatchNormalizationForwardInference", "cudnnBatchNormalizationBackward",
          "cudnnBatchNormalizationBackwardEx"]
# Default (per-dtype) tolerances: batch norm results are rounded once to their type. perturb's
# sensitivity of a batch norm over few values is large by nature: the sweep only wants it run.
BN_CHECKS = ["{ plugin: highprec }", "{ plugin: determinism }", "{ plugin: nan_inf }",
             "{ plugin: reference }"]
BN_ALL = every_conv(*BN_CHECKS, "{ plugin: perturb, trials: 2, tolerance: 1e9 }")
# Graphs: default tolerances too (an SDPA output is rounded once to its type).
GRAPH_ALL = every_conv(*BN_CHECKS, "{ plugin: perturb, trials: 2, tolerance: 1 }")


def norm(mode, **kw):
    return cudnn_program(CUDA_NORM, mode, **kw)


@unittest.skipUnless(CUDA_NORM and SIM_CUDNN, "cuda_norm or the cuDNN stand-in not built")
class BatchNorm(unittest.TestCase):
    """Forward training (plain and Ex), inference and backward (plain and Ex) x f32, f16, bf16,
    f64 x spatial, per-activation, persistent x NCHW/NHWC, running statistics updated in place;
    descriptors destroyed as soon as each call returns."""

    @classmethod
    def setUpClass(cls):
        cls.plain = norm("sweep", preload=False)
        cls.fumi = norm("sweep", policy=BN_ALL, env={"FUMI_CUDA_QUEUE": "1024"})

    def calls(self):
        """{op: calls the program made}, from the printed lines (one per output)."""
        seen = collections.defaultdict(set)
        for l in lines(self.plain.stdout):
            words = l.split()
            if words[1] == "relu":
                continue
            case = " ".join(words[1:5]) if words[4] == "beta" else " ".join(words[1:4])
            seen[words[0]].add(case)
        return {op: len(cases) for op, cases in seen.items()}

    def test_results_bit_identical(self):
        self.assertEqual(lines(self.plain.stdout), lines(self.fumi.stdout))
        self.assertGreater(len(lines(self.plain.stdout)), 150)
        self.assertFalse([l for l in lines(self.plain.stdout)
                          if " status " in l and " relu " not in l])

    def test_every_entry_point_checked_every_call(self):
        calls = self.calls()
        for op in BN_OPS:
            with self.subTest(op=op):
                s = self.fumi.op(op)
                self.assertIsNotNone(s, f"{op} not seen")
                made = calls[op] + (1 if op == "cudnnBatchNormalizationForwardTrainingEx" else 0)
                skipped = 1 if op == "cudnnBatchNormalizationForwardTrainingEx" else 0
                self.assertEqual((s["calls"], s["checked"], s["skipped"]),
                                 (made, made - skipped, skipped))

    def test_no_false_alarm_and_reruns_reproduce(self):
        self.assertEqual(self.fumi.of("violation"), [])
        by = collections.defaultdict(list)
        for c in self.fumi.of("check"):
            by[c["check"]].append(c)
        self.assertEqual({"highprec", "determinism", "nan_inf", "perturb", "reference"}, set(by))
        checked = sum(self.fumi.op(op)["checked"] for op in BN_OPS)
        self.assertEqual(len(by["reference"]), checked)
        self.assertEqual(len(by["determinism"]), checked)
        for c in by["determinism"]:
            self.assertEqual(c["value"], 0, c)
        # highprec: every call but f64 ones got a wider rerun; reference within its dtype's
        # rounding (results are rounded once from exact statistics).
        self.assertEqual(len(by["highprec"]), len([c for c in by["reference"] if c["dtype"] != "f64"]))
        unit = {"f64": 2 ** -53, "f32": 2 ** -24, "f16": 2 ** -11, "bf16": 2 ** -8}
        for c in by["highprec"] + by["reference"]:
            self.assertLess(c["value"], 4 * unit[c["dtype"]], c)

    def test_events_decode_the_call(self):
        ev = [c for c in self.fumi.of("check") if c["check"] == "reference"]
        fwd = next(c for c in ev if c["op"] == "cudnnBatchNormalizationForwardTraining"
                   and c["dtype"] == "f16" and c["args"]["mode"] == "spatial"
                   and c["args"]["layout"] == "nhwc")
        self.assertEqual(fwd["compute"], "f32")
        self.assertEqual(fwd["args"]["phase"], "training")
        self.assertEqual(fwd["args"]["factor"], "0.25")
        self.assertEqual(fwd["shape"]["x"], [3, 4, 5, 6])
        self.assertEqual(fwd["shape"]["scale"], [1, 4, 1, 1])
        for name in ("y", "running_mean", "running_var", "save_mean", "save_inv_var"):
            self.assertIn(name, fwd["shape"])
        act = next(c for c in ev if c["args"]["mode"] == "per_activation")
        self.assertEqual(act["shape"]["scale"], [1, 4, 5, 6])
        bwd = next(c for c in ev if c["op"] == "cudnnBatchNormalizationBackwardEx")
        self.assertEqual(bwd["args"]["bn_ops"], "bn")
        for name in ("dx", "dscale", "dbias", "dy", "saved_mean", "saved_inv_var"):
            self.assertIn(name, bwd["shape"])
        self.assertIn("0.5", {c["args"]["beta"] for c in ev})
        self.assertEqual({c["args"]["mode"] for c in ev},
                         {"spatial", "per_activation", "spatial_persistent"})

    def test_unsampled_calls_pass_straight_through(self):
        r = norm("sweep", policy=every_conv("{ plugin: highprec }", rule=", min_size: 1000000000 "))
        self.assertEqual(lines(self.plain.stdout), lines(r.stdout))
        for op in BN_OPS:
            s = r.op(op)
            self.assertEqual((s["checked"], s["skipped"]), (0, 0))
        self.assertEqual(r.of("check") + r.of("violation"), [])


@unittest.skipUnless(CUDA_NORM and SIM_CUDNN, "cuda_norm or the cuDNN stand-in not built")
class BatchNormPrecision(unittest.TestCase):
    def test_cancelling_variance_flagged_by_highprec_and_reference(self):
        # Channels of values around 4096 with a spread of 1/64: a variance computed as
        # E[x^2] - E[x]^2 in f32 (the planted fault) loses it all. The f64 rerun (the same
        # one-pass formula in f64) and fumi's two-pass host batch norm both disagree with the
        # call; inference and backward, computed right from the statistics they are given, pass.
        policy = every_conv("{ plugin: highprec }", "{ plugin: reference }")
        env = {"FUMI_SIMCUDNN_FAULTS": "bnvar"}
        r = norm("offset", policy=policy, env=env)
        self.assertEqual(lines(norm("offset", preload=False, env=env).stdout), lines(r.stdout))
        flagged = {(v["op"], v["check"]) for v in r.of("violation")}
        self.assertEqual(flagged, {("cudnnBatchNormalizationForwardTraining", c)
                                   for c in ("highprec", "reference")})
        for v in r.of("violation"):
            self.assertGreater(v["value"], 1e-2, v)
        quiet = norm("offset", policy=policy)
        self.assertEqual(quiet.of("violation"), [])
        self.assertEqual(len(checks_of(quiet, "reference")), 3)


# ---- cuDNN backend graph API (cuda_graph) ----------------------------------------------------

EXECUTE = "cudnnBackendExecute"


def graph(mode, **kw):
    return cudnn_program(CUDA_GRAPH, mode, **kw)


@unittest.skipUnless(CUDA_GRAPH and SIM_CUDNN, "cuda_graph or the cuDNN stand-in not built")
class GraphConv(unittest.TestCase):
    """One-operation convolution graphs (forward, backward data, backward filter) x f32, f16,
    bf16, f64 x NCHW/NHWC x an engine chosen by index / the heuristics' first config; every
    descriptor but the plan destroyed once the plan is finalized, the plan and the variant pack
    right after cudnnBackendExecute returns."""

    @classmethod
    def setUpClass(cls):
        cls.plain = graph("sweep", preload=False)
        cls.fumi = graph("sweep", policy=CONV_ALL, env={"FUMI_CUDA_QUEUE": "1024"})

    def test_results_bit_identical(self):
        self.assertEqual(lines(self.plain.stdout), lines(self.fumi.stdout))
        self.assertEqual(len(lines(self.plain.stdout)), 51)
        self.assertFalse([l for l in lines(self.plain.stdout) if " status " in l])

    def test_every_execution_checked(self):
        s = self.fumi.op(EXECUTE)
        self.assertEqual((s["calls"], s["checked"], s["skipped"]), (51, 51, 0))

    def test_reruns_reproduce_the_call_exactly(self):
        # Every result is exact: the same plan rerun, the wider legacy rerun and fumi's host
        # convolution all match it, though the program destroyed the plan at once.
        self.assertEqual(self.fumi.of("violation"), [])
        by = collections.defaultdict(list)
        for c in self.fumi.of("check"):
            by[c["check"]].append(c)
        self.assertEqual({"highprec", "determinism", "nan_inf", "perturb", "reference"}, set(by))
        self.assertEqual(len(by["determinism"]), 51)
        self.assertEqual(len(by["reference"]), 51)
        for c in by["determinism"] + by["highprec"] + by["reference"]:
            self.assertEqual(c["value"], 0, c)
        self.assertEqual(len(by["highprec"]),
                         len([l for l in lines(self.plain.stdout) if " f64 " not in l]))

    def test_events_decode_the_call(self):
        ev = [c for c in self.fumi.of("check") if c["check"] == "reference"]
        self.assertEqual({c["args"]["graph"] for c in ev},
                         {"conv_fwd", "conv_bwd_data", "conv_bwd_filter"})
        bwd_data = next(c for c in ev if c["args"]["graph"] == "conv_bwd_data"
                        and c["args"]["layout"] == "nhwc")
        self.assertEqual(set(bwd_data["shape"]), {"dx", "w", "dy"})  # roles from the operation
        self.assertEqual(bwd_data["args"]["filter_format"], "nhwc")
        bwd_filter = next(c for c in ev if c["args"]["graph"] == "conv_bwd_filter")
        self.assertEqual(set(bwd_filter["shape"]), {"x", "dw", "dy"})
        self.assertTrue(all("algo" not in c["args"] for c in ev))
        self.assertEqual({c["args"]["engine"] for c in ev if c["args"]["notes"] == "none"}, {"0"})
        self.assertIn("0.5", {c["args"]["beta"] for c in ev})
        half = next(c for c in ev if c["dtype"] == "f16")
        self.assertEqual(half["compute"], "f32")


@unittest.skipUnless(CUDA_GRAPH and SIM_CUDNN, "cuda_graph or the cuDNN stand-in not built")
class GraphPrecision(unittest.TestCase):
    def test_tensor_core_engine_flagged_fma_engine_quiet(self):
        # Asked for f32's accuracy (2e-5; the FMA engine measures 0), the TF32 engine is an error.
        strict = every_conv("{ plugin: highprec, tolerance: 2e-5 }")
        r = graph("tf32", policy=strict)
        self.assertEqual(lines(graph("tf32", preload=False).stdout), lines(r.stdout))
        hp = checks_of(r, "highprec")
        self.assertEqual(len(hp), 2)
        tc, fma = hp
        self.assertEqual((tc["args"]["engine"], tc["compute"]), ("1", "tf32"))
        self.assertIn("tensor_core", tc["args"]["notes"].split(","))
        self.assertEqual((tc["event"], tc["kind"]), ("violation", "error"))
        self.assertGreater(tc["value"], 1e-4)
        self.assertEqual((fma["args"]["engine"], fma["args"]["notes"]), ("0", "none"))
        self.assertEqual(fma["event"], "check", fma)
        self.assertEqual(fma["value"], 0)
        # At 1e-4 it is a cancellation (policy.md): its 36-term sums cancel 24-fold, 4 times as
        # far as random signs do, and against their magnitudes its error (1.5e-5) would keep
        # 1e-4 had they not; 3.7e-4 off, it keeps 3 digits: data, under the 0.1 bound.
        [tc] = [c for c in checks_of(graph("tf32", policy=CONV_CHECKS), "highprec")
                if c["args"]["engine"] == "1"]
        self.assertEqual((tc["event"], tc["kind"], tc["metric"]),
                         ("check", "cancellation", "cancelled_rel"))
        self.assertGreater(tc["extra"]["cancellation"], 3 * 6)  # sqrt(36) = 6: random signs
        self.assertLessEqual(tc["extra"]["error_of_terms"] * 6, 1e-4)

    def test_policy_matches_engine_notes(self):
        rule = ', note: [tensor_core] '
        r = graph("tf32", policy=every_conv("{ plugin: highprec }", rule=rule))
        self.assertEqual(r.op(EXECUTE)["checked"], 1)
        self.assertEqual([c["args"]["engine"] for c in checks_of(r, "highprec")], ["1"])
        r = graph("tf32", policy=every_conv("{ plugin: highprec }", rule=", note: none "))
        self.assertEqual([c["args"]["engine"] for c in checks_of(r, "highprec")], ["0"])

    def test_unknown_note_is_a_policy_error(self):
        r = run([CUDA_GRAPH, "tf32"], policy=every_conv("{ plugin: highprec }",
                                                        rule=", note: [tensorcore] "),
                env={"LD_PRELOAD": ":".join([LIBFUMI] + SIM + [SIM_CUDNN])})
        self.assertEqual(r.rc, 0)  # the program runs on, unchanged
        self.assertIn("unknown note 'tensorcore'", r.stderr)
        self.assertIn("tensor_core", r.stderr)

    def test_planted_wrong_result_caught_by_reference(self):
        env = {"FUMI_SIMCUDNN_FAULTS": "wrong:3x5"}
        r = graph("fault", policy=CONV_CHECKS, env=env)
        planted = lines(graph("fault", preload=False, env=env).stdout)
        self.assertEqual(planted, lines(r.stdout))
        clean = lines(graph("fault", preload=False).stdout)
        wrong = {a.split()[0] for a, b in zip(planted, clean) if a != b}
        self.assertGreaterEqual(wrong, {"conv_fwd", "conv_bwd_filter"})
        flagged = {(v["args"]["graph"], v["check"]) for v in r.of("violation")}
        self.assertEqual(flagged, {(g, "reference") for g in wrong})
        for v in r.of("violation"):
            self.assertAlmostEqual(v["value"], 2 ** -7, delta=2e-3)
            self.assertIn("cuda_graph.cpp", v["stack"][0])
        self.assertEqual(r.of("violation"), [v for v in r.of("violation") if v["check"] == "reference"])
        quiet = graph("fault", policy=CONV_CHECKS)
        self.assertEqual(quiet.of("violation"), [])


@unittest.skipUnless(CUDA_GRAPH and SIM_CUDNN, "cuda_graph or the cuDNN stand-in not built")
class GraphOps(unittest.TestCase):
    """Graphs of other operations: conv -> add bias -> relu, batched matmul (f32, f16),
    matmul -> gelu, scale -> sum, layer and batch norm (training, a by-value epsilon), layer
    norm backward, SDPA forward (f16, f32; grouped-query attention, o and stats)."""

    @classmethod
    def setUpClass(cls):
        cls.plain = graph("ops", preload=False)
        # A queue deep enough for every call: each one is checked, asynchronously.
        cls.fumi = graph("ops", policy=GRAPH_ALL, env={"FUMI_CUDA_QUEUE": "1024"})

    def test_results_bit_identical_every_graph_checked(self):
        self.assertEqual(lines(self.plain.stdout), lines(self.fumi.stdout))
        s = self.fumi.op(EXECUTE)
        self.assertEqual((s["calls"], s["checked"], s["skipped"]), (10, 10, 0))
        self.assertEqual(self.fumi.of("violation"), [])

    def test_every_rerun_and_the_host_evaluation_agree(self):
        graphs = {c["args"]["graph"] for c in checks_of(self.fumi, "determinism")}
        self.assertEqual(graphs, {"conv_fwd+pointwise+pointwise", "matmul", "matmul+pointwise",
                                  "pointwise+reduction", "norm_fwd", "norm_bwd", "sdpa_fwd"})
        for c in checks_of(self.fumi, "determinism"):
            self.assertEqual(c["value"], 0, c)
        # highprec runs a clone of each graph with wider types (f16 -> f32, f32 -> f64); fumi
        # evaluates every one of these graphs on the host. Every result but SDPA's is exact; an
        # SDPA output is rounded once to its type: f16 within a few units of 2^-11.
        self.assertEqual(len(checks_of(self.fumi, "highprec")), 10)
        self.assertEqual(len(checks_of(self.fumi, "reference")), 10)
        sdpa = {"f16": 0, "f32": 0}
        for c in checks_of(self.fumi, "highprec") + checks_of(self.fumi, "reference"):
            if c["args"]["graph"] == "sdpa_fwd" and c["dtype"] == "f16":
                sdpa["f16"] += 1
                self.assertLess(c["value"], 4 * 2 ** -11, c)
                self.assertGreater(c["value"], 0, c)  # not exact: exp and a division
            else:
                sdpa["f32"] += c["args"]["graph"] == "sdpa_fwd"
                self.assertLess(c["value"], 1e-6, c)
        self.assertEqual(sdpa, {"f16": 2, "f32": 2})

    def test_operands_named_by_role(self):
        shapes = {c["args"]["graph"]: c["shape"] for c in checks_of(self.fumi, "determinism")}
        self.assertEqual(set(shapes["conv_fwd+pointwise+pointwise"]), {"x", "w", "b", "y"})
        self.assertEqual(shapes["conv_fwd+pointwise+pointwise"]["b"], [1, 4, 1, 1])
        self.assertEqual(set(shapes["norm_fwd"]), {"x", "scale", "bias", "mean", "inv_var", "y"})
        self.assertEqual(set(shapes["norm_bwd"]),
                         {"x", "dy", "scale", "mean", "inv_var", "dx", "dscale", "dbias"})
        self.assertEqual(shapes["matmul"]["a"], [2, 8, 16])
        # The scale goes by value: not an operand.
        self.assertEqual(set(shapes["sdpa_fwd"]), {"q", "k", "v", "o", "stats"})
        self.assertEqual((shapes["sdpa_fwd"]["k"], shapes["sdpa_fwd"]["stats"]),
                         ([2, 2, 6, 8], [2, 4, 5, 1]))

    def test_planted_matmul_fault_caught_by_reference(self):
        env = {"FUMI_SIMCUDNN_FAULTS": "wrongmm:8x4x16"}
        r = graph("faultmm", policy=CONV_CHECKS, env=env)
        self.assertEqual(lines(graph("faultmm", preload=False, env=env).stdout), lines(r.stdout))
        [v] = r.of("violation")
        self.assertEqual((v["check"], v["args"]["graph"]), ("reference", "matmul"))
        self.assertAlmostEqual(v["value"], 2 ** -7, delta=2e-3)
        self.assertEqual(graph("faultmm", policy=CONV_CHECKS).of("violation"), [])

    def test_planted_sdpa_fault_caught_by_reference_not_highprec(self):
        # O times 1 + 2^-7 in every precision: the widened clone is as wrong, fumi's host
        # evaluation is not (stats are untouched; o's error is reported).
        env = {"FUMI_SIMCUDNN_FAULTS": "wrongsdpa:5x6"}
        r = graph("faultsdpa", policy=CONV_CHECKS, env=env)
        self.assertEqual(lines(graph("faultsdpa", preload=False, env=env).stdout), lines(r.stdout))
        [v] = r.of("violation")
        self.assertEqual((v["check"], v["args"]["graph"]), ("reference", "sdpa_fwd"))
        self.assertAlmostEqual(v["value"], 2 ** -7, delta=1e-5)
        [h] = checks_of(r, "highprec")
        self.assertLess(h["value"], 1e-6, h)
        self.assertEqual(graph("faultsdpa", policy=CONV_CHECKS).of("violation"), [])


@unittest.skipUnless(CUDA_GRAPH and SIM_CUDNN, "cuda_graph or the cuDNN stand-in not built")
class GraphSafety(unittest.TestCase):
    def test_fused_convolution_graph_checked(self):
        # conv -> relu through a virtual tensor: the same plan, a widened clone of the graph
        # and fumi's host evaluation all reproduce the exact result.
        r = graph("fused", policy=CONV_CHECKS)
        self.assertEqual(lines(graph("fused", preload=False).stdout), lines(r.stdout))
        s = r.op(EXECUTE)
        self.assertEqual((s["calls"], s["checked"], s["skipped"]), (1, 1, 0))
        for check in ("highprec", "determinism", "reference"):
            [c] = checks_of(r, check)
            self.assertEqual((c["value"], c["args"]["graph"]), (0, "conv_fwd+pointwise"), c)

    def test_autotuning_runs_not_counted_nor_checked(self):
        # Two candidate plans on one variant pack (3 runs each) are autotuning; the winner on a
        # pack of its own is the program's call; a pack reused 10 times with one plan settles
        # after 8 runs: its first run's check (held until then) and runs 9 and 10 are checked.
        r = graph("autotune", policy=CONV_CHECKS)
        self.assertEqual(lines(graph("autotune", preload=False).stdout), lines(r.stdout))
        s = r.op(EXECUTE)
        self.assertEqual((s["calls"], s["checked"], s["skipped"]), (11, 4, 0))
        summary = next(o for o in r.of("summary")[-1]["ops"] if o["op"] == EXECUTE)
        self.assertEqual(summary["autotuning"], 6)
        self.assertEqual(sorted({c["call_index"] for c in checks_of(r, "reference")}), [0, 1, 9, 10])
        self.assertEqual(r.of("violation"), [])

    def test_check_held_on_an_unsettled_pack_runs_at_exit(self):
        # One plan, three executions of a pack the program never destroys: the pack has not
        # settled (8 executions) when the process exits, and its first execution's held check
        # runs then, within the exit wait.
        r = graph("unsettled", policy=CONV_CHECKS)
        self.assertEqual(lines(graph("unsettled", preload=False).stdout), lines(r.stdout))
        s = r.op(EXECUTE)
        self.assertEqual((s["calls"], s["checked"], s["skipped"]), (3, 1, 0))
        self.assertEqual([c["call_index"] for c in checks_of(r, "reference")], [0])
        self.assertEqual(r.of("violation"), [])

    def test_capture_and_populated_graphs_never_checked(self):
        r = graph("capture", policy=CONV_CHECKS, env={"FUMI_LOG_LEVEL": "debug"})
        self.assertEqual(lines(graph("capture", preload=False).stdout), lines(r.stdout))
        self.assertEqual(len(lines(r.stdout)), 2)
        for op in (EXECUTE, "cudnnBackendPopulateCudaGraph"):
            s = r.op(op)
            self.assertEqual((s["calls"], s["checked"], s["skipped"]), (1, 0, 1), op)
        self.assertIn("stream is capturing a graph", r.stderr)
        self.assertEqual(r.of("check") + r.of("violation"), [])


TORCH_CUDNN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_cudnn.py")


def torch_importable():
    return subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0


@unittest.skipUnless(SIM_CUDNN and torch_importable(), "the cuDNN stand-in or torch missing")
class CudnnInsideTorchOp(unittest.TestCase):
    def test_violation_names_the_operator_and_python_lines(self):
        # fumitest::conv (a torch operator) runs cudnnConvolutionForward through ctypes; the
        # planted fault makes `reference` flag it. The finding names the operator it ran in
        # and the Python lines of the cuDNN call and of the operator call.
        env = {"FUMI_SIMCUDNN_FAULTS": "wrong:3x3",
               "LD_PRELOAD": ":".join([LIBFUMI] + SIM + [SIM_CUDNN])}
        plain_env = dict(env, LD_PRELOAD=":".join(SIM + [SIM_CUDNN]))
        plain = run([sys.executable, TORCH_CUDNN], preload=False, env=plain_env)
        r = run([sys.executable, TORCH_CUDNN], policy=CONV_CHECKS, env=env)
        self.assertEqual(r.rc, 0, r.stderr)
        self.assertEqual(plain.stdout, r.stdout)
        with open(TORCH_CUDNN) as f:
            text = f.read().splitlines()
        cudnn_line = next(i for i, t in enumerate(text, 1) if "# the cuDNN call" in t)
        op_line = next(i for i, t in enumerate(text, 1) if "# the operator call" in t)
        [v] = r.of("violation")
        self.assertEqual((v["op"], v["check"]), ("cudnnConvolutionForward", "reference"))
        self.assertEqual(v["context"][-1], "fumitest::conv")
        self.assertEqual(v["phase"], "forward")
        self.assertEqual(v["python_stack"][0], f"{TORCH_CUDNN}:{cudnn_line} in conv_impl")
        self.assertIn(f"{TORCH_CUDNN}:{op_line} in main", v["python_stack"])


KERNEL_NAME = re.compile(r"sim_gemm_(f64|f32|f16|bf16)_(f64|f32|f16|bf16)_"
                         r"(f64|f32|tf32|f16fast|bf16fast|f16)_kernel")
NAN_INF = every_call("{ plugin: nan_inf }")


@unittest.skipUnless(CUDA_GEMM and SIM_CUPTI, "cuda_gemm or the CUPTI stand-in not built")
class KernelRecords(unittest.TestCase):
    """CUPTI: checked calls report the kernels they launched, fumi yields CUPTI to the
    program's own profiler, and nothing depends on it (the other classes run without CUPTI)."""

    def test_every_checked_call_names_its_kernel(self):
        # The simulated libraries launch one kernel per GEMM, named after its types and math,
        # from inside cublasLtMatmul for the cuBLAS entry points: the outer call gets it.
        plain = cuda("sweep", preload=False, cupti=True)
        r = cuda("sweep", policy=NAN_INF, env={"FUMI_CUDA_QUEUE": "1024"}, cupti=True)
        self.assertEqual(lines(plain.stdout), lines(r.stdout))
        checks = r.of("check")
        self.assertEqual(len(checks), len(ran(plain.stdout)))
        for c in checks:
            with self.subTest(op=c["op"], call=c["call_index"]):
                self.assertEqual(len(c.get("kernels", [])), 1, c)
                k = c["kernels"][0]
                m = KERNEL_NAME.fullmatch(k["name"])
                self.assertIsNotNone(m, k)
                self.assertEqual(m.group(1), c["dtype"])
                self.assertIsInstance(k["duration_ns"], int)
                self.assertGreaterEqual(k["duration_ns"], 0)
        self.assertIn("kernel records on", r.stderr)

    def test_kernel_shows_the_math_mode_async_and_sync(self):
        for mode in ("async", "sync"):
            with self.subTest(mode=mode):
                r = cuda("tf32", policy=NAN_INF, env={"FUMI_CUDA_MODE": mode}, cupti=True)
                names = {c["call_index"]: [k["name"] for k in c["kernels"]]
                         for c in r.of("check")}
                self.assertEqual(names, {0: ["sim_gemm_f32_f32_f32_kernel"],
                                         1: ["sim_gemm_f32_f32_tf32_kernel"]})

    def test_violation_carries_the_kernels(self):
        r = cuda("fault", policy=HIGHPREC, env={"FUMI_SIM_FAULTS": "wrong:f32:7x6x5"},
                 cupti=True)
        v = [v for v in r.of("violation") if v["check"] == "highprec"]
        self.assertEqual([x["op"] for x in v], ["cublasSgemm_v2"])
        self.assertEqual([k["name"] for k in v[0]["kernels"]], ["sim_gemm_f32_f32_f32_kernel"])
        text = subprocess.run([FUMI, "report", r.dir], capture_output=True, text=True,
                              check=True).stdout
        self.assertIn("kernels: sim_gemm_f32_f32_f32_kernel (", text)

    def test_program_starting_a_profiler_takes_cupti_from_fumi(self):
        # cuda_gemm profiler: 3 GEMMs, then its own cuptiSubscribe_v2 (fumi holds CUPTI's one
        # subscriber by then), 3 more GEMMs.
        plain = cuda("profiler", preload=False, cupti=True)
        r = cuda("profiler", policy=NAN_INF, cupti=True)
        self.assertEqual(lines(plain.stdout), lines(r.stdout))
        self.assertIn("subscribe 0", r.stdout)  # CUPTI_SUCCESS: fumi let go first
        self.assertIn("profiled launches 3", r.stdout)  # the program sees its own launches
        kernels = {c["call_index"]: len(c.get("kernels", [])) for c in r.of("check")}
        self.assertEqual(kernels, {0: 1, 1: 1, 2: 1, 3: 0, 4: 0, 5: 0})
        self.assertIn("the program uses CUPTI itself (cuptiSubscribe_v2)", r.stderr)

    def test_existing_profiler_keeps_cupti(self):
        # A profiler subscribed before fumi's first checked call (as Nsight Systems does).
        r = cuda("profiler", policy=NAN_INF, cupti=True,
                 env={"FUMI_SIM_CUPTI_SUBSCRIBER": "nsys"})
        self.assertIn("subscribe 39", r.stdout)  # MULTIPLE_SUBSCRIBERS: the profiler's, not fumi's
        self.assertEqual(len(r.of("check")), 6)
        self.assertFalse([c for c in r.of("check") if "kernels" in c])
        self.assertIn("another CUPTI subscriber (a profiler) is active", r.stderr)

    def test_switched_off(self):
        r = cuda("tf32", policy=NAN_INF, env={"FUMI_CUPTI": "0"}, cupti=True)
        self.assertEqual(len(r.of("check")), 2)
        self.assertFalse([c for c in r.of("check") if "kernels" in c])
        self.assertNotIn("kernel records on", r.stderr)

    def test_without_cupti_no_kernel_records(self):
        # No stand-in: the real libcupti.so.13 where the loader finds one (it fails without a
        # driver), else none at all. Either way fumi says why and checks as usual.
        r = cuda("tf32", policy=NAN_INF)
        self.assertEqual(len(r.of("check")), 2)
        self.assertFalse([c for c in r.of("check") if "kernels" in c])
        self.assertIn("kernel records off: ", r.stderr)


def on_device_and_host(test, program, mode, policy):
    """MODE of `program` (cuda or conv) on the GPU under POLICY with fumi's kernels and with
    host copies: the kernels loaded, the program's output the same. Returns both runs."""
    env = {"FUMI_LOG_LEVEL": "info"}
    device = program(mode, policy=policy, env=env, gpu=True)
    host = program(mode, policy=policy, env={**env, "FUMI_DEVICE_KERNELS": "0"}, gpu=True)
    test.assertIn("device kernels loaded", device.stderr)
    test.assertEqual(lines(device.stdout), lines(host.stdout))
    return device, host


@unittest.skipUnless(CUDA_GEMM, "cuda_gemm not built (no CUDA toolkit)")
class OnGpu(unittest.TestCase):
    """The real libraries on real hardware: results unchanged, every call checked, exact data
    reproduced by every rerun, TF32 flagged, a capture left intact."""

    @classmethod
    def setUpClass(cls):
        # Read when the tests run, not when the module loads: `--gpu` sets it after import.
        if os.environ.get("FUMI_TEST_GPU") != "1":
            raise unittest.SkipTest("needs a GPU: run as ctest cuda_gpu")

    def test_sweep(self):
        plain = cuda("sweep", preload=False, gpu=True)
        r = cuda("sweep", policy=CHECK_ALL, env={"FUMI_CUDA_QUEUE": "1024"}, gpu=True)
        self.assertEqual(lines(plain.stdout), lines(r.stdout))
        self.assertEqual(r.of("violation"), [])
        ops = [o for s in r.of("summary") for o in s["ops"]]
        self.assertEqual(sum(o["checked"] for o in ops), len(ran(plain.stdout)))

    def test_device_kernels(self):
        # fumi's own kernels on the hardware: loaded, and the projections, scans, conversions
        # and comparisons of the 256^3 GEMMs agree with the host copies' (exact data).
        policy = every_call("{ plugin: checksum }", "{ plugin: nan_inf }",
                            "{ plugin: highprec, tolerance: 1e-4 }", "{ plugin: determinism }",
                            "{ plugin: perturb, trials: 2, tolerance: 1 }")
        device, host = on_device_and_host(self, cuda, "large", policy)
        for r in (device, host):
            assert_checksum_quiet(self, r, 1)
        got, want = (sorted((c["check"], c["value"]) for c in r.of("check"))
                     for r in (device, host))
        self.assertEqual([c for c, _ in got], [c for c, _ in want])
        self.assertEqual(len(got), 10)
        for (check, g), (_, w) in zip(got, want):
            # perturb's reruns take the same perturbed bits on the device as from the host
            self.assertAlmostEqual(g, w, delta=1e-12 + 1e-9 * abs(w), msg=check)
        sweep = cuda("sweep", policy=policy, env={"FUMI_CUDA_QUEUE": "1024"}, gpu=True)
        self.assertNotIn("device kernels are off", sweep.stderr)
        assert_checksum_quiet(self, sweep, 150)

    def test_device_convolutions(self):
        # fumi's convolution kernel on the hardware: checksum's projections of the real cuDNN's
        # convolutions (every direction, a true NHWC one with groups and beta) on the device
        # agree with the host copies' and raise nothing (exact data).
        if not CUDA_CONV:
            self.skipTest("cuda_conv not built")
        policy = every_conv("{ plugin: checksum }", "{ plugin: nan_inf }")
        for r in on_device_and_host(self, conv, "large", policy):
            self.assertEqual(len(assert_checksum_quiet(self, r, 3)), 4)

    def test_tf32(self):
        r = cuda("tf32", policy=HIGHPREC, gpu=True)
        flagged = [v["args"]["math_mode"] for v in r.of("violation") if v["check"] == "highprec"]
        self.assertEqual(flagged, ["tf32"])

    def test_kernel_records(self):
        r = cuda("sweep", policy=NAN_INF, env={"FUMI_CUDA_QUEUE": "1024"}, gpu=True)
        if "kernel records on" not in r.stderr:
            self.skipTest("no CUPTI here: " + r.stderr[-500:])
        for c in r.of("check"):
            self.assertTrue(c.get("kernels"), c)
            for k in c["kernels"]:
                self.assertTrue(k["name"], k)
                self.assertGreater(k.get("duration_ns", 0), 0, k)

    def test_profiler_takes_cupti_from_fumi(self):
        r = cuda("profiler", policy=NAN_INF, gpu=True)
        if "no libcupti" in r.stdout:
            self.skipTest(r.stdout)
        self.assertIn("subscribe 0", r.stdout)
        later = [c for c in r.of("check") if c["call_index"] >= 3]
        self.assertEqual(len(later), 3)
        self.assertFalse([c for c in later if "kernels" in c])

    def test_capture(self):
        r = cuda("capture", policy=HIGHPREC, gpu=True)
        self.assertEqual(lines(cuda("capture", preload=False, gpu=True).stdout), lines(r.stdout))
        self.assertEqual(r.op("cublasSgemm_v2")["skipped"], 1)

    # cuDNN (written for hardware, never run there yet: docs/cuda.md).
    def cudnn_unchanged_and_checked(self, program, policy):
        if not program:
            self.skipTest("cuDNN test programs not built")
        plain = cudnn_program(program, "sweep", preload=False, gpu=True)
        r = cudnn_program(program, "sweep", policy=policy, env={"FUMI_CUDA_QUEUE": "1024"},
                          gpu=True)
        self.assertEqual(lines(plain.stdout), lines(r.stdout))
        self.assertEqual(r.of("violation"), [])
        ops = [o for s in r.of("summary") for o in s["ops"]]
        self.assertGreater(sum(o["checked"] for o in ops), 0)
        return r

    def test_cudnn_legacy_convolutions(self):
        self.cudnn_unchanged_and_checked(CUDA_CONV, CONV_ALL)

    def test_cudnn_batch_norm(self):
        self.cudnn_unchanged_and_checked(CUDA_NORM, BN_ALL)

    def test_cudnn_backend_graphs(self):
        r = self.cudnn_unchanged_and_checked(CUDA_GRAPH, CONV_ALL)
        self.assertTrue(all(c["args"]["notes"] for c in r.of("check")))


@unittest.skipUnless(CUDA_GEMM, "cuda_gemm not built (no CUDA toolkit)")
class DefaultPolicy(unittest.TestCase):
    """The embedded default policy (what `fumi run` uses without --policy) samples the GPU
    libraries' calls as it does CPU BLAS: each op's first three, then one in a hundred."""

    def sampled(self, r, plain, ops):
        """Results as without fumi, no violation on exact results, and each op in `ops` with
        its first calls checked (up to 3) and nothing skipped. The ops' summary entries."""
        self.assertEqual(lines(plain.stdout), lines(r.stdout))
        self.assertEqual(r.of("violation"), [])
        seen = {}
        for op in ops:
            s = r.op(op)
            self.assertIsNotNone(s, f"{op} not seen")
            self.assertGreaterEqual(s["calls"], 1, op)
            self.assertEqual(s["checked"] + s["skipped"], min(3, s["calls"]) + max(
                0, (s["calls"] - 1) // 100), op)
            seen[op] = s
        return seen

    def test_cublas_calls_checked(self):
        r = cuda("sweep", env={"FUMI_CUDA_QUEUE": "1024"})
        seen = self.sampled(r, cuda("sweep", preload=False),
                            ["cublasSgemm_v2", "cublasDgemm_v2", "cublasHgemm", "cublasGemmEx",
                             "cublasGemmStridedBatchedEx", "cublasLtMatmul"])
        self.assertEqual(seen["cublasSgemm_v2"]["skipped"], 0)
        ran = {c["check"] for c in r.of("check") if c["op"] == "cublasSgemm_v2"}
        self.assertEqual(ran, set(), "passing checks are not written by the default policy")
        checks = seen["cublasSgemm_v2"]["checks"]
        self.assertEqual(set(checks), {"nan_inf", "highprec", "perturb"})
        self.assertTrue(all(c["runs"] == 3 for c in checks.values()), checks)

    def test_wrong_cublas_result_flagged(self):
        env = {"FUMI_SIM_FAULTS": "wrong:f32:7x6x5,wrong:f32:9x3x4"}
        r = cuda("fault", env=env)
        self.assertEqual(lines(cuda("fault", preload=False, env=env).stdout), lines(r.stdout))
        flagged = {(v["op"], v["check"]) for v in r.of("violation")}
        self.assertEqual(flagged, {("cublasSgemm_v2", "highprec"), ("cublasLtMatmul", "highprec")})

    @unittest.skipUnless(CUDA_CONV and SIM_CUDNN, "cuda_conv or the cuDNN stand-in not built")
    def test_cudnn_calls_checked(self):
        r = conv("sweep", env={"FUMI_CUDA_QUEUE": "1024"})
        self.sampled(r, conv("sweep", preload=False), CONV_OPS)

    @unittest.skipUnless(CUDA_CONV and SIM_CUDNN, "cuda_conv or the cuDNN stand-in not built")
    def test_fp16_accumulating_convolution_flagged(self):
        env = {"FUMI_SIMCUDNN_FAULTS": "accum16"}
        r = conv("accum16", env=env)
        self.assertEqual(lines(conv("accum16", preload=False, env=env).stdout), lines(r.stdout))
        flagged = [(v["op"], v["check"], v["args"]["compute"]) for v in r.of("violation")]
        self.assertEqual(flagged, [("cudnnConvolutionForward", "highprec", "f16")])


if __name__ == "__main__":
    if sys.argv[1:] == ["--gpu"]:  # ctest cuda_gpu
        if not (CUDA_GEMM and gpu_present()):
            print("no GPU here: skipped")
            sys.exit(77)
        os.environ["FUMI_TEST_GPU"] = "1"
        sys.argv[1:] = ["-v", "OnGpu"]
    unittest.main()
