"""Preload integration tests: real programs on real OpenBLAS under LD_PRELOAD=libfumi.so."""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from fumitest import BLAS_DEMO, FUMI, LIBFUMI, SOURCE, read_events, run, write_policy

CHECK_ALL = """
version: 1
report: { all_checks: true }
rules:
  - match: { op: "*" }
    sample: { every: 1 }
    checks:
      - { plugin: highprec, tolerance: 1e-5 }
      - { plugin: perturb, trials: 4 }
      - { plugin: nan_inf }
      - { plugin: determinism }
      - { plugin: reference }
"""


class IllConditioned(unittest.TestCase):
    def test_flagged_by_highprec_and_perturb_results_unchanged(self):
        plain = run([BLAS_DEMO, "ill"], preload=False)
        r = run([BLAS_DEMO, "ill"], policy=CHECK_ALL)
        self.assertEqual(r.rc, 0, r.stderr)
        self.assertEqual(plain.stdout, r.stdout)  # bit-identical results
        flagged = {(v["op"], v["check"]) for v in r.of("violation")}
        self.assertIn(("sgemm_", "highprec"), flagged)
        self.assertIn(("sgemm_", "perturb"), flagged)
        self.assertNotIn(("sgemm_", "determinism"), flagged)
        self.assertIn(("sgemm_", "reference"), flagged)  # fumi's own fp64 GEMM agrees
        hp = next(v for v in r.of("violation") if v["check"] == "highprec")
        self.assertGreater(hp["value"], 0.5)  # computed 0 where the exact result is 1
        self.assertEqual(hp["dtype"], "f32")
        self.assertEqual(hp["shape"]["A"], [8, 3])
        self.assertEqual(hp["shape"]["C"], [8, 8])
        self.assertEqual(hp["args"], {"layout": "col", "transa": "N", "transb": "N", "alpha": "1",
                                      "beta": "0", "lda": "8", "ldb": "3", "ldc": "8"})
        self.assertEqual(hp["pid"], r.of("start")[0]["pid"])

    def test_violation_stack_names_the_calling_line(self):
        r = run([BLAS_DEMO, "ill"], policy=CHECK_ALL)
        stack = r.of("violation")[0]["stack"]
        self.assertTrue(stack, "violation has no stack")
        self.assertIn("blas_demo.c", stack[0])  # fumi's own frames trimmed: the caller first
        self.assertTrue(any(" in ill" in f for f in stack[:2]), stack)
        self.assertFalse(any("fumi::" in f for f in stack), stack)
        self.assertNotIn("python_stack", r.of("violation")[0])  # no Python in this process

    def test_summary_counts(self):
        r = run([BLAS_DEMO, "ill"], policy=CHECK_ALL)
        op = r.op("sgemm_")
        self.assertEqual(op["calls"], 1)
        self.assertEqual(op["checked"], 1)
        self.assertGreaterEqual(op["violations"], 2)
        # Exact 1, computed 0: terms that cancel, summed as well as f32 allows (within CHECK_ALL's
        # 1e-5 against their magnitudes), yet no digit left: a cancellation over its bound.
        self.assertGreater(op["worst"]["highprec.cancelled_rel"], 0.5)
        self.assertNotIn("highprec.normwise_rel", op["worst"])
        # The value against the bound it was judged by (the default, 0.1).
        highprec = op["metrics"]["highprec.cancelled_rel"]
        self.assertEqual((highprec["kind"], highprec["violations"]), ("cancellation", 1))
        self.assertAlmostEqual(highprec["of_tolerance"], highprec["max"] / 0.1,
                               delta=1e-9 * highprec["of_tolerance"])
        [v] = [v for v in r.of("violation") if v["check"] == "highprec"]
        self.assertEqual(v["extra"]["error_tolerance"], 1e-5)
        self.assertLess(v["extra"]["error_of_terms"], 1e-7)


class WellConditioned(unittest.TestCase):
    def test_not_flagged(self):
        plain = run([BLAS_DEMO, "well"], preload=False)
        r = run([BLAS_DEMO, "well"], policy=CHECK_ALL)
        self.assertEqual(plain.stdout, r.stdout)
        self.assertEqual(r.of("violation"), [])
        self.assertEqual(r.op("sgemm_")["checked"], 1)
        checks = {c["check"] for c in r.of("check")}
        self.assertEqual(checks, {"highprec", "perturb", "nan_inf", "determinism", "reference"})


SVD_AND_PRODUCT = '''
import numpy as np
rng = np.random.default_rng(0)
a = rng.standard_normal((300, 200))
s = np.linalg.svd(a, compute_uv=False)  # LAPACK dgesdd: dgebrd_ updates with dgemm_
c = a @ rng.standard_normal((200, 100))  # the program's own product: cblas_dgemm
print(f"{s[0]:.17g} {c[0, 0]:.17g}")
'''


class LapackInternals(unittest.TestCase):
    def test_products_lapack_makes_are_steps_not_results(self):
        # The trailing updates of a bidiagonal reduction cancel by construction; their
        # sensitivity said nothing about the singular values the program got (batch 17: a
        # PINN's numpy 2-norm, exact to 17 digits, raised dgemm_ sensitivity violations from
        # inside dgesdd_). They are counted skipped, saying which routine made them; the
        # program's own product is checked.
        cmd = ["/usr/bin/python3", "-c", SVD_AND_PRODUCT]
        policy = """
            version: 1
            rules:
              - match: { backend: blas, op: "*gemm*" }
                sample: { every: 1 }
                checks: [ { plugin: nan_inf }, { plugin: perturb, trials: 1 } ]
            """
        plain = run(cmd, preload=False)
        r = run(cmd, policy=policy)
        self.assertEqual(r.rc, 0, r.stderr)
        self.assertEqual(r.stdout, plain.stdout)
        dgemm = r.op("dgemm_")
        self.assertGreater(dgemm["calls"], 0)
        self.assertEqual(dgemm["checked"], 0)
        self.assertEqual(list(dgemm["not_checked"]),
                         ["made by LAPACK's dgebrd_ (a step of its factorisation, not a result "
                          "of the program's)"])
        self.assertEqual(dgemm["skipped"], dgemm["calls"])
        self.assertEqual(r.op("cblas_dgemm")["checked"], 1)


class Layouts(unittest.TestCase):
    """Every entry point, transpose, padded leading dimension, beta != 0 and negative increment:
    a wrong decode would make the rerun differ from the original (highprec, determinism)."""

    def test_every_layout_decoded_exactly(self):
        plain = run([BLAS_DEMO, "layouts"], preload=False)
        r = run([BLAS_DEMO, "layouts"], policy=CHECK_ALL)
        self.assertEqual(r.rc, 0, r.stderr)
        self.assertEqual(plain.stdout, r.stdout)
        self.assertEqual(r.of("violation"), [], r.of("violation")[:2])
        self.assertEqual(r.of("error"), [])
        expected_calls = {"sgemm_": 4, "dgemm_": 4, "cblas_sgemm": 8, "cblas_dgemm": 8,
                          "sgemv_": 2, "dgemv_": 2}
        for op, n in expected_calls.items():
            self.assertEqual(r.op(op)["calls"], n, op)
            self.assertEqual(r.op(op)["checked"], n, op)
        for c in r.of("check"):
            if c["check"] == "highprec" and c["dtype"] == "f32":
                self.assertLess(c["value"], 1e-6, c)
            if c["check"] == "determinism":
                self.assertEqual(c["value"], 0, c)
            if c["check"] == "reference":  # fumi's own GEMM/GEMV decodes every layout alike
                self.assertLess(c["value"], 1e-6 if c["dtype"] == "f32" else 1e-14, c)
        references = [c["op"] for c in r.of("check") if c["check"] == "reference"]
        self.assertEqual(len(references), sum(expected_calls.values()))
        # f64 calls have no higher precision through BLAS: highprec skips them.
        self.assertFalse([c for c in r.of("check")
                          if c["check"] == "highprec" and c["dtype"] == "f64"])


class Sampling(unittest.TestCase):
    def test_first_and_every(self):
        r = run([BLAS_DEMO, "loop", "100"], policy="""
            version: 1
            rules:
              - match: { op: sgemm_ }
                sample: { first: 2, every: 10 }
                checks: [ { plugin: nan_inf } ]
            """)
        op = r.op("sgemm_")
        self.assertEqual(op["calls"], 100)
        self.assertEqual(op["checked"], 11)  # 0, 1, 10, 20, ..., 90

    def test_max_checks_and_exclusion_rule(self):
        exclusion = """
            version: 1
            rules:
              - match: { op: sgemm_, %s }
                checks: []
              - match: { op: sgemm_ }
                checks: [ { plugin: nan_inf } ]
            """
        # The loop's calls are 8x8x8 = 512 multiply-adds: the first rule takes them and checks nothing.
        r = run([BLAS_DEMO, "loop", "50"], policy=exclusion % "min_size: 100")
        self.assertEqual(r.op("sgemm_")["checked"], 0)
        r = run([BLAS_DEMO, "loop", "50"], policy=exclusion % "max_size: 100")
        self.assertEqual(r.op("sgemm_")["checked"], 50)
        r = run([BLAS_DEMO, "loop", "50"], policy="""
            version: 1
            rules:
              - match: { op: sgemm_ }
                sample: { every: 1, max_checks: 7 }
                checks: [ { plugin: nan_inf } ]
            """)
        self.assertEqual(r.op("sgemm_")["checked"], 7)

    def test_probability_is_reproducible(self):
        policy = """
            version: 1
            rules:
              - match: { op: sgemm_ }
                sample: { probability: 0.3, seed: 7 }
                checks: [ { plugin: nan_inf } ]
            """
        a = run([BLAS_DEMO, "loop", "200"], policy=policy).op("sgemm_")["checked"]
        b = run([BLAS_DEMO, "loop", "200"], policy=policy).op("sgemm_")["checked"]
        self.assertEqual(a, b)
        self.assertTrue(30 <= a <= 90, a)


class FailOpen(unittest.TestCase):
    def test_malformed_policy_runs_unchecked_with_location(self):
        plain = run([BLAS_DEMO, "ill"], preload=False)
        r = run([BLAS_DEMO, "ill"], policy="version: 1\nrules:\n  - match: { op: [\n")
        self.assertEqual(r.rc, 0)
        self.assertEqual(plain.stdout, r.stdout)
        self.assertRegex(r.stderr, r"fumi-policy-\w+\.yaml:\d+:\d+: error")
        self.assertIn("runs unchecked", r.stderr)

    def test_on_error_abort_fails_fast(self):
        r = run([BLAS_DEMO, "ill"], policy="version: 1\nrules: 5\n", env={"FUMI_ON_ERROR": "abort"})
        self.assertEqual(r.rc, -signal.SIGABRT)
        self.assertIn("'rules' must be a list", r.stderr)

    def test_missing_plugin_reported_once_other_checks_run(self):
        r = run([BLAS_DEMO, "ill"], policy="""
            version: 1
            rules:
              - match: { op: sgemm_ }
                checks:
                  - { plugin: nosuchplugin }
                  - { plugin: highprec }
            """)
        self.assertEqual(r.rc, 0)
        errors = r.of("error")
        self.assertEqual(len(errors), 1)
        self.assertIn("nosuchplugin", errors[0]["message"])
        self.assertRegex(errors[0]["location"], r"\.yaml:6:\d+$")
        self.assertTrue(any(v["check"] == "highprec" for v in r.of("violation")))

    def test_throwing_and_failing_plugins_disabled_program_unchanged(self):
        plain = run([BLAS_DEMO, "loop", "5"], preload=False)
        r = run([BLAS_DEMO, "loop", "5"], policy="""
            version: 1
            rules:
              - match: { op: sgemm_ }
                checks:
                  - { plugin: throwing }
                  - { plugin: failing }
                  - { plugin: nan_inf }
            """)
        self.assertEqual(r.rc, 0, r.stderr)
        self.assertEqual(plain.stdout, r.stdout)
        errors = r.of("error")
        self.assertEqual(sorted(e["where"] for e in errors), ["plugin failing", "plugin throwing"])
        self.assertTrue(any("planted failure" in e["message"] for e in errors))
        self.assertEqual(r.op("sgemm_")["checked"], 5)  # nan_inf still ran every time

    def test_plugin_rejecting_parameters_and_wrong_abi(self):
        r = run([BLAS_DEMO, "loop", "2"], policy="""
            version: 1
            rules:
              - match: { op: sgemm_ }
                checks:
                  - { plugin: failing, reject: 1 }
                  - { plugin: wrongabi }
                  - { plugin: nan_inf, bogus: 3 }
            """)
        self.assertEqual(r.rc, 0)
        msgs = " | ".join(e["message"] for e in r.of("error"))
        self.assertIn("refusing", msgs)
        self.assertIn("ABI", msgs)
        self.assertIn("bogus", msgs)

    def test_kill_switch(self):
        r = run([BLAS_DEMO, "ill"], policy=CHECK_ALL, env={"FUMI_DISABLE": "1"})
        self.assertEqual(r.events, [])


class Events(unittest.TestCase):
    def test_call_index_and_passing_checks(self):
        r = run([BLAS_DEMO, "loop", "20"], policy="""
            version: 1
            report: { all_checks: true }
            rules:
              - match: { op: sgemm_ }
                sample: { every: 5 }
                checks: [ { plugin: nan_inf } ]
            """)
        self.assertEqual([c["call_index"] for c in r.of("check")], [0, 5, 10, 15])

    def test_empty_problems_counted_skipped_with_their_reason(self):
        # m, n or k = 0 (LAPACK makes such calls inside numpy's svd): nothing to check, and the
        # summary says why instead of showing calls neither checked nor skipped (batch 12).
        plain = run([BLAS_DEMO, "empty"], preload=False)
        r = run([BLAS_DEMO, "empty"], policy=CHECK_ALL)
        self.assertEqual(r.rc, 0, r.stderr)
        self.assertEqual(plain.stdout, r.stdout)
        why = "an empty product (m, n or k is 0)"
        sgemm, dgemv = r.op("sgemm_"), r.op("dgemv_")
        self.assertEqual((sgemm["calls"], sgemm["checked"], sgemm["skipped"]), (3, 1, 2))
        self.assertEqual(sgemm["not_checked"], {why: 2})
        self.assertEqual((dgemv["calls"], dgemv["checked"], dgemv["skipped"]), (1, 0, 1))
        self.assertEqual(dgemv["not_checked"], {why: 1})

    def test_overflow_appears_and_non_finite_metrics_are_strings(self):
        r = run([BLAS_DEMO, "overflow"], policy=CHECK_ALL)
        self.assertEqual(r.rc, 0, r.stderr)
        nan_inf = [v for v in r.of("violation") if v["check"] == "nan_inf"]
        self.assertEqual(len(nan_inf), 1)
        self.assertEqual(nan_inf[0]["detail"], "appeared")
        self.assertEqual(nan_inf[0]["value"], 16)
        # From finite inputs: the call is the origin, on its own event (batch 13: a search
        # began, found nothing more and said "origin not found" under this violation).
        self.assertIs(nan_inf[0].get("origin"), True)
        self.assertEqual(nan_inf[0]["sentinel"], {"op": "sgemm_", "call_index": 0})
        self.assertEqual([e for e in r.of("nan_search") if e.get("result") == "not_found"], [])
        listing = subprocess.run([FUMI, "report", r.dir], capture_output=True, text=True)
        self.assertIn("NaN/Inf origin: sgemm_ (blas)", listing.stdout)
        self.assertIn("appeared (0 NaN, 16 Inf)", listing.stdout)
        self.assertNotIn("origin not found", listing.stdout)
        values = [v["value"] for v in r.of("violation") + r.of("check")]
        self.assertNotIn(None, values)

    def test_policy_warnings_are_warning_events(self):
        r = run([BLAS_DEMO, "well"], policy="""
            version: 1
            flavour: vanilla
            rules:
              - match: { op: sgemm_ }
                checks: [ { plugin: nan_inf } ]
            """)
        self.assertEqual(r.of("error"), [])
        warnings = r.of("warning")
        self.assertEqual(len(warnings), 1)
        self.assertIn("unknown key 'flavour'", warnings[0]["message"])
        self.assertRegex(warnings[0]["location"], r":3:1$")


class Processes(unittest.TestCase):
    def test_exec_keeps_the_earlier_image_events(self):
        r = run([BLAS_DEMO, "exec"], policy=CHECK_ALL)
        self.assertEqual(r.rc, 0, r.stderr)
        self.assertEqual(len(r.of("start")), 2)
        self.assertEqual(len({e["pid"] for e in r.of("start")}), 1)  # exec keeps the pid
        # exec() runs no destructors: only the new image writes a summary. The old image's
        # violations are in the file already (events are written as they happen).
        self.assertEqual(len(r.of("summary")), 1)
        self.assertTrue(r.of("violation"))  # from the exec'd "ill" image

    def test_threads_counted_exactly(self):
        r = run([BLAS_DEMO, "threads", "4", "250"], policy="""
            version: 1
            rules:
              - match: { op: sgemm_ }
                sample: { every: 10 }
                checks: [ { plugin: nan_inf }, { plugin: determinism } ]
            """)
        self.assertEqual(r.rc, 0, r.stderr)
        op = r.op("sgemm_")
        self.assertEqual(op["calls"], 1000)
        self.assertEqual(op["checked"], 100)
        self.assertEqual(op["violations"], 0)

    def test_threads_counted_exactly_after_the_policy_is_exhausted(self):
        # After max_checks the op goes back to the no-decision path, counted per thread.
        r = run([BLAS_DEMO, "threads", "4", "250"], policy="""
            version: 1
            rules:
              - match: { op: sgemm_ }
                sample: { every: 1, max_checks: 5 }
                checks: [ { plugin: nan_inf } ]
            """)
        op = r.op("sgemm_")
        self.assertEqual(op["calls"], 1000)
        self.assertEqual(op["checked"], 5)
        r = run([BLAS_DEMO, "threads", "3", "100"], policy="""
            version: 1
            rules:
              - match: { op: dgemm_ }
                checks: [ { plugin: nan_inf } ]
            """)
        self.assertEqual(r.op("sgemm_")["calls"], 300)

    def test_forked_child_reports_separately(self):
        for mode in ("fork", "fork_exit"):  # the child ends with exit() / with _exit()
            with self.subTest(mode=mode):
                plain = run([BLAS_DEMO, mode], preload=False)
                r = run([BLAS_DEMO, mode], policy=CHECK_ALL)
                self.assertEqual(r.rc, 0, r.stderr)
                self.assertEqual(plain.stdout, r.stdout)
                pids = {e["pid"] for e in r.of("summary")}
                self.assertEqual(len(pids), 2)
                starts = {e["pid"] for e in r.of("start")}
                self.assertEqual(starts, pids)
                violators = {v["pid"] for v in r.of("violation")}
                self.assertEqual(len(violators), 1)  # only the child ran the ill-conditioned call
                for s in r.of("summary"):
                    self.assertEqual(s["ops"][0]["calls"], 1, s)  # no inherited counts

    def test_forked_child_has_a_budget_of_its_own(self):
        # The overhead budget is a share of the process's own run: a fork child does not
        # inherit a parent's spent budget (a pool worker of a parent past its budget checked
        # nothing), nor the costs its checks had there: the parent's one check spends the
        # budget at once; the child's first call is checked all the same (its cost unknown in
        # the child, as in any new process), and finds the ill-conditioned product. With
        # "fork_big" the parent's product takes milliseconds, so the check's cost per second
        # of op is learnt there (the small one's is only under load, or with OpenBLAS's setup
        # in its first call: the child skipped its check, the budget spent by its prediction).
        for mode in ("fork", "fork_big"):
            r = run([BLAS_DEMO, mode], policy="""
                version: 1
                overhead_budget: 1e-9
                rules:
                  - match: { op: sgemm_ }
                    sample: { every: 1 }
                    checks: [ { plugin: highprec, tolerance: 1e-5 } ]
                """)
            self.assertEqual(r.rc, 0, r.stderr)
            parent = r.of("start")[0]["pid"]
            by_pid = {s["pid"]: s["ops"][0] for s in r.of("summary")}
            self.assertEqual(len(by_pid), 2, mode)
            for pid, op in by_pid.items():
                self.assertEqual((op["calls"], op["checked"]), (1, 1), (mode, pid, op))
            self.assertEqual([v["pid"] != parent for v in r.of("violation")], [True], mode)

    def test_forked_child_ended_by_sigterm_leaves_its_snapshot(self):
        # A fork child (a multiprocessing pool worker) has a snapshot thread of its own: ended by
        # SIGTERM, it writes its counts before dying of the signal (batch 10: pool workers'
        # data was lost, and they were reported incomplete).
        plain = run([BLAS_DEMO, "fork_term"], preload=False)
        r = run([BLAS_DEMO, "fork_term"], policy=CHECK_ALL)
        self.assertEqual(r.rc, 0, r.stderr)
        self.assertEqual(plain.stdout, r.stdout)
        self.assertIn("child ended by SIGTERM", r.stdout)
        parent = r.of("start")[0]["pid"]
        snaps = [e for e in r.of("snapshot") if e["pid"] != parent]
        self.assertEqual([e["reason"] for e in snaps], ["SIGTERM"], r.events)
        self.assertEqual(snaps[0]["totals"]["calls"], 3)
        self.assertEqual(snaps[0]["totals"]["checked"], 3)
        self.assertEqual([e["pid"] for e in r.of("summary")], [parent])
        listing = subprocess.run([FUMI, "report", r.dir], capture_output=True, text=True)
        self.assertNotIn("incomplete", listing.stdout)

    def test_vfork_child_exit_leaves_the_parent_alone(self):
        # The vfork child's _exit runs on the parent's memory: fumi must not write a summary
        # or change any state there.
        plain = run([BLAS_DEMO, "vfork"], preload=False)
        r = run([BLAS_DEMO, "vfork"], policy=CHECK_ALL)
        self.assertEqual(r.rc, 0, r.stderr)
        self.assertEqual(plain.stdout, r.stdout)
        summaries = r.of("summary")
        self.assertEqual(len(summaries), 1)
        self.assertEqual(summaries[0]["pid"], r.of("start")[0]["pid"])
        # Both of the parent's calls, the one after the child's _exit included, were checked.
        self.assertEqual(summaries[0]["ops"][0]["calls"], 2)
        self.assertEqual(summaries[0]["ops"][0]["checked"], 2)

    def test_library_in_local_dlopen_scope(self):
        cmd = [os.environ["LOCAL_SCOPE"], os.environ["BLAS_USER"]]
        plain = run(cmd, preload=False)
        r = run(cmd, policy=CHECK_ALL)
        self.assertEqual(r.rc, 0, r.stderr)
        self.assertEqual(plain.stdout, r.stdout)
        self.assertTrue(any(v["check"] == "highprec" for v in r.of("violation")))

    def test_function_looked_up_with_dlsym_on_a_library_handle(self):
        # dlopen("libblas.so.3") + dlsym(handle, "sgemm_") bypasses symbol interposition;
        # fumi's dlsym hands out its hook, which forwards to that same sgemm_.
        cmd = [os.environ["LOCAL_SCOPE"], "libblas.so.3", "sgemm"]
        plain = run(cmd, preload=False)
        self.assertEqual(plain.rc, 0, plain.stderr)
        self.assertTrue(plain.stdout.startswith("sgemm "))
        r = run(cmd, policy=CHECK_ALL)
        self.assertEqual(r.rc, 0, r.stderr)
        self.assertEqual(plain.stdout, r.stdout)
        sgemm = r.op("sgemm_")
        self.assertIsNotNone(sgemm, r.events)
        self.assertEqual((sgemm["calls"], sgemm["checked"]), (1, 1))
        # Symbols fumi does not hook come back as they are.
        py = run(["/usr/bin/python3", "-c",
                  "import ctypes; l = ctypes.CDLL('libm.so.6'); l.cos.restype = ctypes.c_double;"
                  "l.cos.argtypes = [ctypes.c_double]; print(l.cos(0.0))"], policy=CHECK_ALL)
        self.assertEqual((py.rc, py.stdout), (0, "1.0\n"), py.stderr)


class Signals(unittest.TestCase):
    """A signal that arrives while the program's thread is inside fumi (the signalling test
    plugin raises SIGTERM in its third check) is handled when the thread leaves fumi: the
    snapshot is written, then the program's own disposition happens outside fumi."""
    POLICY = """
        version: 1
        report: { snapshot_every: 0 }
        rules:
          - match: { op: sgemm_ }
            checks:
              - { plugin: signalling }
        """

    def test_program_handler_runs_outside_fumi(self):
        r = run([BLAS_DEMO, "sigterm", "exit"], policy=self.POLICY)
        # The handler ran once the third call had returned into the program's code, and its
        # exit() wrote fumi's summary (inside fumi, exit would have skipped it).
        self.assertEqual(r.rc, 3, r.stderr)
        self.assertEqual(r.stdout, "call 1\ncall 2\nSIGTERM after 2 calls\n")
        self.assertEqual([e["reason"] for e in r.of("snapshot")], ["SIGTERM"])
        self.assertEqual((r.op("sgemm_")["calls"], r.op("sgemm_")["checked"]), (3, 3))

    def test_default_disposition_dies_of_it_after_the_snapshot(self):
        r = run([BLAS_DEMO, "sigterm", "default"], policy=self.POLICY)
        self.assertEqual(r.rc, -signal.SIGTERM, r.stderr)
        self.assertEqual(r.stdout, "call 1\ncall 2\n")
        snaps = r.of("snapshot")
        self.assertEqual([e["reason"] for e in snaps], ["SIGTERM"])
        self.assertEqual(snaps[0]["totals"]["checked"], 3)

    def test_a_thread_stuck_inside_fumi_still_dies_of_it(self):
        """Batch 19 F2: a check that never returned (a rerun deadlocked) kept SIGTERM deferred
        for good, and the job outlived `timeout` by ten minutes. A deferred signal is handled
        after 5 s however long its thread stays inside fumi: snapshot, then the program's
        disposition."""
        started = time.monotonic()
        r = run([BLAS_DEMO, "sigterm", "default"], timeout=60, policy=self.POLICY.replace(
            "{ plugin: signalling }", "{ plugin: signalling, hang: true }"))
        took = time.monotonic() - started
        self.assertEqual(r.rc, -signal.SIGTERM, r.stderr)
        self.assertEqual(r.stdout, "call 1\ncall 2\n")
        self.assertIn("SIGTERM waited 5 s for thread", r.stderr)
        self.assertEqual([e["reason"] for e in r.of("snapshot")], ["SIGTERM"])
        self.assertGreater(took, 5)
        self.assertLess(took, 30)


class Actions(unittest.TestCase):
    def test_abort_on_violation(self):
        r = run([BLAS_DEMO, "ill"], policy="""
            version: 1
            rules:
              - match: { op: sgemm_ }
                action: abort
                checks: [ { plugin: highprec } ]
            """)
        self.assertEqual(r.rc, -signal.SIGABRT)
        self.assertEqual(len(r.of("violation")), 1)

    def violating_loop(self, report):
        """blas_demo's 12 sgemm_ calls, every one violating (a tolerance below any rounding),
        under the report settings `report`."""
        r = run([BLAS_DEMO, "loop", "12"], policy="""
            version: 1
            report: { %s }
            rules:
              - match: { op: sgemm_ }
                sample: { every: 1 }
                checks: [ { plugin: highprec, tolerance: 1e-30 } ]
            """ % report)
        self.assertEqual(r.rc, 0, r.stderr)
        return r

    def test_text_log_keeps_the_first_violations_of_each_metric(self):
        # All 12 are events, the text log has report.log_violations lines of them and one line
        # saying where the rest went.
        r = self.violating_loop("log_violations: 3")
        self.assertEqual(len(r.of("violation")), 12)
        self.assertEqual(r.op("sgemm_")["violations"], 12)
        lines = [l for l in r.stderr.splitlines() if "violation: sgemm_" in l]
        self.assertEqual(len(lines), 3, r.stderr)
        self.assertIn("#0 highprec.normwise_rel", lines[0])
        more = [l for l in r.stderr.splitlines() if "more than 3 violations" in l]
        self.assertEqual(len(more), 1, r.stderr)
        self.assertIn("sgemm_ highprec.normwise_rel", more[0])

    def test_violation_events_capped_per_metric_counted_in_full(self):
        # A job violating on every call writes report.violation_events events per op and
        # metric (no stacks past them), and the summary still counts every violation.
        r = self.violating_loop("violation_events: 5")
        events = r.of("violation")
        self.assertEqual([e["call_index"] for e in events], [0, 1, 2, 3, 4])
        self.assertTrue(all(e["stack"] for e in events))
        self.assertEqual(r.op("sgemm_")["violations"], 12)
        more = [l for l in r.stderr.splitlines() if "more than 5 violations" in l]
        self.assertEqual(len(more), 1, r.stderr)
        self.assertIn("summary's counts only (report.violation_events)", more[0])

    def test_dump_writes_case(self):
        r = run([BLAS_DEMO, "ill"], policy="""
            version: 1
            rules:
              - match: { op: sgemm_ }
                action: dump
                checks: [ { plugin: highprec } ]
            """)
        cases = os.listdir(os.path.join(r.dir, "cases"))
        self.assertEqual(len(cases), 1)
        case = os.path.join(r.dir, "cases", cases[0])
        with open(os.path.join(case, "call.json")) as f:
            desc = json.load(f)
        self.assertEqual(desc["args"]["transa"], "N")
        self.assertEqual([t["name"] for t in desc["tensors"]], ["A", "B", "C"])
        # A is 8x3 fp32 with lda 8: 24 floats.
        self.assertEqual(os.path.getsize(os.path.join(case, "t0.bin")), 8 * 3 * 4)



CHECKSUM = """
version: 1
report: { all_checks: true }
rules:
  - match: { op: "*gemm*" }
    sample: { every: 1 }
    checks:
      - { plugin: checksum }
      - { plugin: reference }
"""


class CorruptShim:
    """Builds corrupt_blas.c (a planted silent corruption: preloaded after libfumi, it multiplies
    one element of C by 4 on the calls FUMI_TEST_CORRUPT names) for the class's tests."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="fumi-corrupt-")
        cls.shim = os.path.join(cls.tmp, "libcorrupt_blas.so")
        src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corrupt_blas.c")
        subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", cls.shim, src, "-ldl"], check=True)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)


class Checksum(CorruptShim, unittest.TestCase):
    """The checksum check on real OpenBLAS: a planted silent corruption (CorruptShim) is flagged
    on exactly the corrupted calls, agreeing with the reference check; correct calls are not."""

    def run_demo(self, corrupt, with_fumi):
        env = {"FUMI_TEST_CORRUPT": corrupt,
               "LD_PRELOAD": (LIBFUMI + ":" if with_fumi else "") + self.shim}
        return run([BLAS_DEMO, "checksum"], policy=CHECKSUM if with_fumi else None,
                   preload=with_fumi, env=env)

    def test_planted_corruption_flagged_results_unchanged(self):
        corrupt = "sgemm_:1,dgemm_:2"
        plain = self.run_demo(corrupt, with_fumi=False)
        r = self.run_demo(corrupt, with_fumi=True)
        self.assertEqual(r.rc, 0, r.stderr)
        self.assertEqual(plain.stdout, r.stdout)  # bit-identical, corruption included
        self.assertEqual(r.of("error"), [])
        flagged = {(v["op"], v["call_index"], v["check"]) for v in r.of("violation")}
        self.assertEqual(flagged, {("sgemm_", 1, "checksum"), ("sgemm_", 1, "reference"),
                                   ("dgemm_", 2, "checksum"), ("dgemm_", 2, "reference")})
        checks = [c for c in r.of("check") + r.of("violation") if c["check"] == "checksum"]
        self.assertEqual(len(checks), 6)
        reference = {(c["op"], c["call_index"]): c["value"]
                     for c in r.of("check") + r.of("violation") if c["check"] == "reference"}
        for c in checks:
            ref = reference[(c["op"], c["call_index"])]
            if c["event"] == "violation":
                # One element times 4 in 48x36: the estimate within 2x of the reference's figure,
                # and it points at the element (row 24, column 18).
                self.assertGreater(c["value"], ref / 2, c)
                self.assertLess(c["value"], ref * 2, c)
                self.assertEqual(c["extra"]["worst_row"], 24, c)
                self.assertEqual(c["extra"]["worst_col"], 18, c)
                self.assertEqual(c["extra"]["samples"], 16, c)
            else:
                self.assertLess(c["value"], 1e-6 if c["dtype"] == "f32" else 1e-15, c)
                # sgemm_'s rounding is seen, not hidden. The fp64 data have 25 significant bits:
                # dgemm_'s sums of 40 products are exact, and so is the compensated estimate.
                if c["dtype"] == "f32":
                    self.assertGreater(c["value"], 0, c)
                else:
                    self.assertEqual(c["value"], 0, c)

    def test_correct_calls_not_flagged(self):
        plain = run([BLAS_DEMO, "checksum"], preload=False)
        r = run([BLAS_DEMO, "checksum"], policy=CHECKSUM)
        self.assertEqual(plain.stdout, r.stdout)
        self.assertEqual(r.of("violation"), [])
        self.assertEqual(r.op("sgemm_")["checked"], 3)
        self.assertEqual(r.op("dgemm_")["checked"], 3)
        self.assertLess(r.op("sgemm_")["worst"]["checksum.normwise_rel"], 1e-6)

    def test_production_policy_checks_every_call(self):
        """config/production.yaml checks every GEMM with checksum and the rerunning checks only
        on the calls they sample: a healthy run raises nothing with every call checked; with every
        call corrupted (reruns too, so a rerun agrees with the corrupted result) checksum flags
        each one; the output is bit-identical either way."""
        with open(os.path.join(SOURCE, "config", "production.yaml")) as f:
            production = f.read()
        healthy = run([BLAS_DEMO, "checksum"], policy=production)
        self.assertEqual(healthy.rc, 0, healthy.stderr)
        self.assertEqual(healthy.of("violation"), [])
        self.assertEqual(healthy.of("error"), [])
        for op in ("sgemm_", "dgemm_"):
            self.assertEqual(healthy.op(op)["checked"], healthy.op(op)["calls"], healthy.op(op))
            self.assertLess(healthy.op(op)["worst"]["checksum.normwise_rel"], 1e-6)
        plain = self.run_demo("*", with_fumi=False)
        r = run([BLAS_DEMO, "checksum"], policy=production,
                env={"FUMI_TEST_CORRUPT": "*", "LD_PRELOAD": LIBFUMI + ":" + self.shim})
        self.assertEqual(r.rc, 0, r.stderr)
        self.assertEqual(plain.stdout, r.stdout)
        by_checksum = {(v["op"], v["call_index"]) for v in r.of("violation")
                       if v["check"] == "checksum"}
        self.assertEqual(by_checksum, {(op, i) for op in ("sgemm_", "dgemm_") for i in range(3)})

    def test_bad_parameter_rejected_with_message(self):
        r = run([BLAS_DEMO, "well"], policy="""
            version: 1
            rules:
              - match: { op: sgemm_ }
                checks: [ { plugin: checksum, vectors: 0 } ]
        """)
        self.assertEqual(r.rc, 0, r.stderr)
        messages = [e["message"] for e in r.of("error")]
        self.assertTrue(any("parameter 'vectors' of plugin 'checksum' must be in [1, 64]" in m
                            for m in messages), messages)

if __name__ == "__main__":
    unittest.main()


class Replay(CorruptShim, unittest.TestCase):
    """`fumi replay CASE` runs a call a `dump` rule recorded again alone, under the check that
    flagged it. A violation of the BLAS itself comes back, with a bit-identical output, for
    every entry point, transpose, layout, leading dimension and beta; a corruption of the
    program's run does not (the output differs in the corrupted element, the check passes);
    cases it cannot replay are refused, saying why."""

    def dump(self, argv, op, check, env=None):
        r = run(argv, policy=f"""
            version: 1
            rules:
              - match: {{ op: "{op}" }}
                sample: {{ every: 1 }}
                action: dump
                checks: [ {check} ]
            """, env=env)
        self.assertEqual(r.rc, 0, r.stderr)
        cases = os.path.join(r.dir, "cases")
        return r, sorted(os.path.join(cases, c) for c in os.listdir(cases))

    def replay(self, case):
        return subprocess.run([FUMI, "replay", case], capture_output=True, text=True,
                              timeout=300)

    def replayed_worst(self, case, op, key):
        summary = [e for e in read_events(os.path.join(case, "replay"))
                   if e["event"] == "summary"]
        self.assertEqual(len(summary), 1)
        return next(o for o in summary[0]["ops"] if o["op"] == op)["worst"][key]

    def reproduced(self, case, recorded, key):
        """Replays `case`: its violation comes back with the figure the program recorded
        (recorded[(op, call index)] for the summary's `key`) and a bit-identical output.
        Returns the replay's output and the case's call.json."""
        p = self.replay(case)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("violation — reproduced", p.stdout)
        self.assertIn("output:   bit-identical to the recorded one (", p.stdout)
        with open(os.path.join(case, "call.json")) as f:
            desc = json.load(f)
        self.assertEqual(self.replayed_worst(case, desc["op"], key),
                         recorded[(desc["op"], desc["call_index"])])
        return p.stdout, desc

    def dump_findings(self, op, check):
        """blas_demo's layouts with every call of `op` dumped: the cases, and the recorded
        figures by (op, call index)."""
        r, cases = self.dump([BLAS_DEMO, "layouts"], op, check)
        return cases, {(v["op"], v["call_index"]): v["value"] for v in r.of("violation")}

    def test_blas_findings_reproduced_in_every_layout(self):
        # highprec (deterministic): the same figure as recorded, on 12 calls of sgemm_ and
        # cblas_sgemm (both transposes, row- and column-major, ld 11 > m, beta 0.5).
        cases, recorded = self.dump_findings("*sgemm*", "{ plugin: highprec, tolerance: 1e-300 }")
        self.assertEqual(len(cases), 12)
        ops = set()
        for case in cases:
            out, desc = self.reproduced(case, recorded, "highprec.normwise_rel")
            self.assertIn("output:   bit-identical to the recorded one (35 elements)", out)
            ops.add(desc["op"])
        self.assertEqual(ops, {"sgemm_", "cblas_sgemm"})
        # fp64 calls under checksum: its vectors are drawn from the call index, which the replay
        # keeps (calls #0 to #5 of each op), so the figures are the recorded ones too.
        cases, recorded = self.dump_findings("*dgemm*", "{ plugin: checksum, tolerance: 1e-300 }")
        self.assertEqual(len(cases), 12)
        for case in cases:
            self.reproduced(case, recorded, "checksum.normwise_rel")
        self.assertGreater(max(i for _, i in recorded), 0)

    def test_gemv_findings_reproduced(self):
        # Both transposes, x with increment 2, y with increment -1 and beta != 0 (y read too).
        cases, recorded = self.dump_findings("sgemv_", "{ plugin: highprec, tolerance: 1e-300 }")
        self.assertEqual(len(cases), 2)
        lengths = set()
        for case in cases:
            out, _ = self.reproduced(case, recorded, "highprec.normwise_rel")
            lengths |= set(re.findall(r"output:   bit-identical to the recorded one \((\d+) "
                                      r"elements\)", out))
        self.assertEqual(lengths, {"7", "5"})  # y of op(A) 7 x 5 (N) and 5 x 7 (T)
        cases, recorded = self.dump_findings("dgemv_", "{ plugin: checksum, tolerance: 1e-300 }")
        self.assertEqual(len(cases), 2)
        for case in cases:
            self.reproduced(case, recorded, "checksum.normwise_rel")

    def test_perturb_finding_reproduced_with_its_figure(self):
        # The program's only call has index 0, as the replay's: perturb draws the same noise.
        r, cases = self.dump([BLAS_DEMO, "ill"], "sgemm_", "{ plugin: perturb, trials: 2 }")
        recorded = [v["value"] for v in r.of("violation") if v["metric"] == "fumi_ratio"]
        self.assertEqual(len(recorded), 1)
        p = self.replay(cases[0])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("perturb.fumi_ratio", p.stdout)
        self.assertEqual(self.replayed_worst(cases[0], "sgemm_", "perturb.fumi_ratio"),
                         recorded[0])

    def test_corruption_of_the_recorded_run_not_reproduced(self):
        r, cases = self.dump([BLAS_DEMO, "checksum"], "sgemm_", "{ plugin: checksum }",
                             env={"FUMI_TEST_CORRUPT": "sgemm_:1",
                                  "LD_PRELOAD": LIBFUMI + ":" + self.shim})
        self.assertEqual([(v["op"], v["call_index"]) for v in r.of("violation")], [("sgemm_", 1)])
        self.assertEqual(len(cases), 1)
        p = self.replay(cases[0])
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("within tolerance — not reproduced", p.stdout)
        self.assertIn("differs from the recorded one in 1 of 1728 elements", p.stdout)
        self.assertLess(self.replayed_worst(cases[0], "sgemm_", "checksum.normwise_rel"), 1e-6)

    def test_cases_it_cannot_replay_refused_with_a_reason(self):
        tmp = tempfile.mkdtemp(prefix="fumi-replay-")
        try:
            p = self.replay(tmp)  # no call.json
            self.assertEqual(p.returncode, 2)
            self.assertIn("cannot read " + os.path.join(tmp, "call.json"), p.stderr)
            with open(os.path.join(tmp, "call.json"), "w") as f:
                json.dump({"op": "cublasSgemm_v2", "backend": "cublas", "check": "highprec",
                           "metric": "normwise_rel", "tensors": []}, f)
            p = self.replay(tmp)
            self.assertEqual(p.returncode, 2)
            self.assertIn("cublasSgemm_v2 (cublas) cases cannot be replayed yet", p.stderr)
            with open(os.path.join(tmp, "call.json"), "w") as f:
                f.write("{ not json")
            p = self.replay(tmp)
            self.assertEqual(p.returncode, 2)
            self.assertIn(os.path.join(tmp, "call.json") + ":", p.stderr)
            # A real case, edited: a leading dimension its operand's file does not have (BLAS
            # would read past it), then an operand file gone.
            _, cases = self.dump([BLAS_DEMO, "ill"], "sgemm_", "{ plugin: highprec }")
            case = os.path.join(tmp, "case")
            shutil.copytree(cases[0], case)
            self.assertEqual(self.replay(case).returncode, 0)
            with open(os.path.join(case, "call.json")) as f:
                desc = json.load(f)
            desc["args"]["lda"] = "100"
            with open(os.path.join(case, "call.json"), "w") as f:
                json.dump(desc, f)
            p = self.replay(case)
            self.assertEqual(p.returncode, 2)
            self.assertIn("A's strides do not match its leading dimension", p.stderr)
            desc["args"]["lda"] = "8"
            with open(os.path.join(case, "call.json"), "w") as f:
                json.dump(desc, f)
            os.remove(os.path.join(case, "t1.bin"))
            p = self.replay(case)
            self.assertEqual(p.returncode, 2)
            self.assertIn("cannot read " + os.path.join(case, "t1.bin"), p.stderr)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
