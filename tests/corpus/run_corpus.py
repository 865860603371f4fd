#!/usr/bin/env python3
"""Run fumi's calibration corpus (tests/corpus) and judge each program.

Every program runs under `fumi run` with the default policy transformed so that every call the
default rules match is checked (each rule's `sample:` becomes `{ every: 1 }`, no max_checks; no
overhead budget). Healthy programs (healthy_*.py) pass with zero `violation` events; planted
programs (planted_*.py) pass when a violation of the expected op and check names the line
marked `# FUMI-PLANTED` in its python_stack. The expectation is the header line
`# corpus-expect: op=<op>[,<op>...] check=<plugin>`.

Usage: run_corpus.py [-j N] [--markdown FILE] [--json FILE] [--autocast bf16] [--keep DIR]
                     [--policy-out FILE] [PROGRAM ...]
Environment: FUMI_BUILD (build directory, default ../../build from this file),
CORPUS_PYTHON (interpreter of the programs, default /usr/bin/python3).
Exit status: 0 when every program passes, 1 when any fails, 2 on a setup error.
"""
import argparse
import concurrent.futures
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PLANTED_MARK = "# FUMI-PLANTED"
EXPECT_RE = re.compile(r"^#\s*corpus-expect:\s*op=(\S+)\s+check=(\S+)\s*$")
EXTRA_RULE_RE = re.compile(r"^#\s*corpus-extra-rule:\s*(\{.*\})\s*$")
PROGRAM_TIMEOUT_S = 300

# The GEMM family (matrix products and convolutions) and the checks that rerun or project it.
GEMM_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul",
            "aten::linear", "aten::mv", "aten::addmv", "aten::conv1d", "aten::conv2d",
            "aten::conv3d", "aten::convolution", "aten::_convolution",
            "aten::convolution_backward"}
GEMM_CHECKS = {"highprec", "checksum", "reference"}
# A bf16 matrix product by this torch on this CPU against its exact value (fp64 of the same
# bf16 operands): about 2e-3 where the kernel accumulates in fp32 (oneDNN's bf16 path, on
# CPUs with AVX-512), about 2e-2 where it adds every product into its bf16 result (torch
# 1.13's own loop, on CPUs without: measured on an AMD EPYC with AVX2 only, 2026-11-26).
BF16_GEMM_PROBE = """
import torch
g = torch.Generator().manual_seed(0)
a = torch.randn(512, 384, generator=g).bfloat16()
b = torch.randn(384, 256, generator=g).bfloat16()
exact = a.double() @ b.double()
print(((torch.mm(a, b).double() - exact).norm() / exact.norm()).item())
"""
# Above the default policy's bf16 tolerance: fumi flags every such product, rightly.
LOSSY_BF16_GEMM = 1e-2


def bf16_gemm_error(python):
    """BF16_GEMM_PROBE's figure in `python` (None where it does not run)."""
    proc = subprocess.run([python, "-c", BF16_GEMM_PROBE], env=child_env(None),
                          capture_output=True, text=True, timeout=120)
    try:
        return float(proc.stdout.split()[-1])
    except (ValueError, IndexError):
        return None

# Environment that would change how the programs allocate or thread, or override the policy:
# the corpus runs with none of it.
_DROP_ENV_PREFIXES = ("MALLOC_", "FUMI_", "PYTORCH_", "KMP_", "GOMP_")
_DROP_ENV = {"OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GLIBC_TUNABLES",
             "LD_PRELOAD", "OMP_PROC_BIND", "OMP_PLACES", "OMP_DYNAMIC", "MKL_DYNAMIC",
             "GOTO_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"}


# --------------------------------------------------------------------------------------------
# Policy transformation


def _split_comment(line):
    """(code, comment) of a YAML line: the comment starts at a '#' outside quotes that begins
    the line or follows whitespace."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i], line[i:]
    return line, ""


_FLOW_SAMPLE_RE = re.compile(r"(\bsample\s*:\s*)\{[^{}]*\}")
_BLOCK_SAMPLE_RE = re.compile(r"^(\s*(?:-\s+)?)sample\s*:\s*(\{[^}]*)?\s*$")
_OVERHEAD_RE = re.compile(r"^overhead_budget\s*:")
EVERY_CALL = "{ every: 1 }"


def every_call_policy(text):
    """The policy text with every `sample:` (rules and defaults) replaced by `{ every: 1 }` and
    the top-level overhead_budget removed (fumi reads no budget as unlimited; 0 is not a valid
    value). Everything else, comments and unknown sections included, is kept as it is.
    Returns (new_text, number_of_samples_replaced)."""
    lines = text.splitlines()
    out = []
    replaced = 0
    i = 0
    while i < len(lines):
        line = lines[i]
        code, comment = _split_comment(line)
        if _OVERHEAD_RE.match(code):
            out.append("# overhead_budget removed by run_corpus.py (no budget: every call checked)"
                       + ("  " + comment if comment else ""))
            i += 1
            continue
        # Flow mappings on one line, possibly inside a flow-style rule.
        code, n = _FLOW_SAMPLE_RE.subn(lambda m: m.group(1) + EVERY_CALL, code)
        replaced += n
        m = _BLOCK_SAMPLE_RE.match(code)
        if n == 0 and m:
            key_indent = len(m.group(1))
            out.append(m.group(1) + "sample: " + EVERY_CALL + ("  " + comment if comment else ""))
            replaced += 1
            i += 1
            if m.group(2):
                # A flow mapping spread over several lines: drop through its closing brace.
                depth = m.group(2).count("{")
                while i < len(lines) and depth > 0:
                    c, _ = _split_comment(lines[i])
                    depth += c.count("{") - c.count("}")
                    i += 1
            else:
                # A block mapping: drop the lines indented deeper than the key (and blank or
                # comment-only lines among them).
                while i < len(lines):
                    c, _ = _split_comment(lines[i])
                    if c.strip() == "":
                        i += 1
                        continue
                    if len(c) - len(c.lstrip()) > key_indent:
                        i += 1
                        continue
                    break
            continue
        out.append(code + comment)
        i += 1
    return "\n".join(out) + "\n", replaced


_RULES_RE = re.compile(r"^rules\s*:\s*$")


def add_rules(text, rules):
    """Insert flow-style rules as the first entries of the top-level block list `rules:`."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if _RULES_RE.match(_split_comment(line)[0]):
            lines[i + 1:i + 1] = ["  # added by run_corpus.py (corpus-extra-rule)"] + \
                ["  - " + r for r in rules]
            return "\n".join(lines) + "\n"
    raise SystemExit("run_corpus: no block-style top-level 'rules:' to add rules to")


def write_policy(build, path, extra_rules=(), error_tolerances=None):
    src = os.path.join(os.path.dirname(os.path.dirname(HERE)), "config", "default_policy.yaml")
    with open(src) as f:
        text, replaced = every_call_policy(f.read())
    if replaced == 0:
        raise SystemExit("run_corpus: no sample: found in %s" % src)
    if error_tolerances:  # `tolerances: { error: X }` in place of the default's own
        text = re.sub(r"(?m)^  error:.*\n", "", text)
        text, n = re.subn(r"(?m)^tolerances:\n", "tolerances:\n  error: %s\n" % error_tolerances,
                          text)
        if n != 1:
            raise SystemExit("run_corpus: no block-style top-level 'tolerances:' in %s" % src)
    if extra_rules:
        text = add_rules(text, list(extra_rules))
    header = ("# Generated by tests/corpus/run_corpus.py from config/default_policy.yaml:\n"
              "# every sample: is { every: 1 }, no overhead budget.\n")
    with open(path, "w") as f:
        f.write(header + text)
    fumi = os.path.join(build, "bin", "fumi")
    chk = subprocess.run([fumi, "policy", "check", path], capture_output=True, text=True)
    if chk.returncode != 0:
        raise SystemExit("run_corpus: the generated policy %s does not validate:\n%s%s"
                         % (path, chk.stdout, chk.stderr))
    return path


# --------------------------------------------------------------------------------------------
# Programs


class Program:
    def __init__(self, path):
        self.path = os.path.abspath(path)
        self.name = os.path.basename(path)
        self.kind = "planted" if self.name.startswith("planted_") else "healthy"
        self.expect_ops, self.expect_check, self.planted_line = [], None, None
        self.extra_rules = []
        with open(self.path) as f:
            lines = f.read().splitlines()
        for no, line in enumerate(lines, 1):
            m = EXPECT_RE.match(line.strip())
            if m:
                self.expect_ops = m.group(1).split(",")
                self.expect_check = m.group(2)
            m = EXTRA_RULE_RE.match(line.strip())
            if m:
                self.extra_rules.append(m.group(1))
            code, comment = _split_comment(line)
            if comment.strip() == PLANTED_MARK and code.strip():
                if self.planted_line is not None:
                    raise SystemExit("%s: more than one %s line" % (self.name, PLANTED_MARK))
                self.planted_line = no
        if self.kind == "planted" and (not self.expect_ops or self.planted_line is None):
            raise SystemExit("%s: a planted program needs a '# corpus-expect: op=... check=...' "
                             "header and one line marked %s" % (self.name, PLANTED_MARK))

    def expected(self):
        if self.kind == "healthy":
            return "0 violations"
        return "%s %s @ line %d" % ("|".join(self.expect_ops), self.expect_check,
                                     self.planted_line)


def discover(names):
    if not names:
        paths = sorted(glob.glob(os.path.join(HERE, "healthy_*.py"))) + \
            sorted(glob.glob(os.path.join(HERE, "planted_*.py")))
    else:
        paths = []
        for n in names:
            p = n if os.path.exists(n) else os.path.join(HERE, n)
            if not p.endswith(".py") and not os.path.exists(p):
                p += ".py"
            if not os.path.exists(p):
                raise SystemExit("run_corpus: no program %s" % n)
            paths.append(p)
    return [Program(p) for p in paths]


def child_env(autocast):
    env = {k: v for k, v in os.environ.items()
           if k not in _DROP_ENV and not k.startswith(_DROP_ENV_PREFIXES)}
    env.pop("CORPUS_AUTOCAST", None)
    if autocast:
        env["CORPUS_AUTOCAST"] = autocast
    return env


def read_events(out_dir):
    events, malformed = [], 0
    for path in sorted(glob.glob(os.path.join(out_dir, "events-*.jsonl"))):
        with open(path, errors="replace") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    events.append(json.loads(line))
                except ValueError:
                    malformed += 1
    return events, malformed


def op_matches(op, expected):
    """An expected op named without overload answers to every overload, as in a policy's
    match: aten::div matches aten::div and aten::div.Tensor; aten::div.Tensor only itself."""
    op = op or ""
    return any(op == e or ("." not in e and op.startswith(e + ".")) for e in expected)


def names_line(stack, program, line):
    pat = re.compile(r"(^|[/\s\"'(])" + re.escape(program.name) + r"\"?[:,]\s*(line\s*)?"
                     + str(line) + r"(?!\d)")
    return any(pat.search(str(frame)) for frame in stack or [])


def run_one(program, build, policy, python, autocast, keep_dir, lossy_gemm=False):
    out_dir = tempfile.mkdtemp(prefix="fumi-corpus-%s-" % program.name[:-3])
    cmd = [os.path.join(build, "bin", "fumi"), "run", "--policy", policy, "--out", out_dir,
           "--", python, program.path]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=HERE, env=child_env(autocast), capture_output=True,
                              text=True, errors="replace", timeout=PROGRAM_TIMEOUT_S)
        rc, output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        rc = "timeout"
        output = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) \
            else (e.stdout or "")
    wall = time.monotonic() - t0
    events, malformed = read_events(out_dir)
    res = judge(program, events, malformed, rc, output, lossy_gemm)
    res["wall_s"] = wall
    if keep_dir:
        dest = os.path.join(keep_dir, program.name[:-3])
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(out_dir, dest)
        res["out_dir"] = dest
    shutil.rmtree(out_dir, ignore_errors=True)
    return res


def with_origin_stack(v, events):
    """A NaN origin found looking back has no stacks of its own: as `fumi report` does, it takes
    those of its op's `nan_origin_stack` event in the same process (the op making them again)."""
    if not v.get("looked_back") or v.get("python_stack"):
        return v
    for e in events:
        if (e.get("event") == "nan_origin_stack" and e.get("pid") == v.get("pid")
                and e.get("op") == v.get("op")):
            return dict(v, python_stack=e.get("python_stack", []), stack=e.get("stack", []))
    return v


def judge(program, events, malformed, rc, output, lossy_gemm=False):
    """lossy_gemm: this platform's bf16 GEMM kernels lose precision (BF16_GEMM_PROBE): a
    healthy program's violations of them under bf16 autocast are true findings about the
    platform, counted apart (platform_findings), not as false alarms."""
    violations = [with_origin_stack(v, events)
                  for v in events if v.get("event") == "violation"]
    platform = [v for v in violations
                if lossy_gemm and program.kind == "healthy" and v.get("op") in GEMM_OPS
                and v.get("check") in GEMM_CHECKS and "bf16" in (v.get("dtype"), v.get("compute"))]
    violations = [v for v in violations if v not in platform]
    summaries = [e for e in events if e.get("event") == "summary"]
    errors = [e for e in events if e.get("event") == "error"]
    checked = sum(int(op.get("checked", 0)) for s in summaries for op in s.get("ops", []))
    calls = sum(int(op.get("calls", 0)) for s in summaries for op in s.get("ops", []))
    propagated = sum(int(op.get("nonfinite_propagated", 0))
                     for s in summaries for op in s.get("ops", []))
    reasons = []
    if rc != 0:
        reasons.append("exit status %s" % rc)
    if not summaries:
        reasons.append("no summary event")
    if summaries and checked == 0:
        reasons.append("no call was checked")
    if malformed:
        reasons.append("%d malformed event lines" % malformed)
    # A program that counts the optimizer steps its loss scaler skipped ("skipped steps: N")
    # must find the same count in the summary's handled-overflow steps.
    skipped = re.search(r"^skipped steps: (\d+)$", output or "", re.M)
    if skipped and summaries:
        got = (summaries[-1].get("loss_scaling") or {}).get("overflow_steps")
        if got != int(skipped.group(1)):
            reasons.append("summary loss_scaling.overflow_steps %s, the program skipped %s steps"
                           % (got, skipped.group(1)))
    matching = []
    if program.kind == "healthy":
        if violations:
            reasons.append("%d violations on a healthy program" % len(violations))
    else:
        matching = [v for v in violations
                    if op_matches(v.get("op"), program.expect_ops)
                    and v.get("check") == program.expect_check
                    and names_line(v.get("python_stack"), program, program.planted_line)]
        if not matching:
            reasons.append("no %s violation of %s naming %s:%d"
                           % (program.expect_check, "|".join(program.expect_ops), program.name,
                              program.planted_line))
    return {
        "program": program.name, "kind": program.kind, "expected": program.expected(),
        "checked": checked, "calls": calls, "violations": len(violations),
        "platform_findings": len(platform),
        "matching": len(matching), "errors": len(errors), "nonfinite_propagated": propagated,
        "verdict": "FAIL" if reasons else "PASS", "reasons": reasons,
        "violation_groups": group_violations(violations, program),
        "error_messages": sorted({str(e.get("message", e))[:200] for e in errors}),
        "exit": rc, "output_tail": output[-3000:] if reasons else "",
    }


def _py_site(stack, program):
    for frame in stack or []:
        if program.name in str(frame):
            return str(frame).strip()
    return (stack or [""])[0] if stack else ""


def group_violations(violations, program):
    groups = {}
    for v in violations:
        key = (v.get("op"), v.get("check"), v.get("metric"), v.get("detail"),
               v.get("tolerance"), bool(v.get("origin")))
        g = groups.get(key)
        value = v.get("value")
        if g is None:
            g = groups[key] = {"op": key[0], "check": key[1], "metric": key[2], "detail": key[3],
                               "tolerance": key[4], "origin": key[5], "kind": v.get("kind"),
                               "dtype": v.get("dtype"), "count": 0, "first_value": value,
                               "max_value": value,
                               "python": _py_site(v.get("python_stack"), program)}
        g["count"] += 1
        if isinstance(value, (int, float)) and (not isinstance(g["max_value"], (int, float))
                                               or value > g["max_value"]):
            g["max_value"] = value
    return sorted(groups.values(), key=lambda g: -g["count"])


# --------------------------------------------------------------------------------------------
# Output


def fmt_num(x):
    if isinstance(x, float):
        return "%.3g" % x
    return str(x)


def table_rows(results):
    rows = []
    for r in results:
        rows.append([r["program"], r["kind"], str(r["checked"]), str(r["violations"]),
                     r["expected"], "%.1f" % r["wall_s"], r["verdict"]])
    return rows


HEADER = ["program", "kind", "checked", "violations", "expected", "time_s", "verdict"]


def print_table(results, autocast):
    rows = table_rows(results)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADER)]
    print("fumi calibration corpus (%s, every call checked)" % (autocast or "f32"))
    print("  ".join(h.ljust(w) for h, w in zip(HEADER, widths)))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    for r in results:
        if r["verdict"] == "PASS":
            continue
        print("\n%s FAILED: %s" % (r["program"], "; ".join(r["reasons"])))
        for g in r["violation_groups"][:8]:
            print("  %dx %s %s %s=%s tol=%s detail=%r%s at %s"
                  % (g["count"], g["op"], g["check"], g["metric"], fmt_num(g["first_value"]),
                     fmt_num(g["tolerance"]), g["detail"], " (origin)" if g["origin"] else "",
                     g["python"]))
        for m in r["error_messages"][:3]:
            print("  error event: %s" % m)
        if r["output_tail"] and (r["exit"] != 0 or not r["violation_groups"]):
            print("  output tail:\n    " + "\n    ".join(r["output_tail"].splitlines()[-15:]))


def rates(results):
    healthy = [r for r in results if r["kind"] == "healthy"]
    planted = [r for r in results if r["kind"] == "planted"]
    checked = sum(r["checked"] for r in healthy)
    false_alarms = sum(r["violations"] for r in healthy)
    platform = sum(r.get("platform_findings", 0) for r in healthy)
    detected = sum(1 for r in planted if r["matching"] > 0)
    return {"healthy_checked": checked, "healthy_violations": false_alarms,
            "platform_findings": platform,
            "false_alarm_rate": (false_alarms / checked) if checked else None,
            "planted": len(planted), "planted_detected": detected,
            "detection_rate": (detected / len(planted)) if planted else None}


def write_markdown(path, results, autocast):
    rt = rates(results)
    lines = ["# fumi calibration corpus (%s, every call checked)" % (autocast or "f32"), "",
             "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for row in table_rows(results):
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    lines.append("")
    far = rt["false_alarm_rate"]
    lines.append("- false-alarm rate: %d violations on healthy programs / %d checked calls = %s"
                 % (rt["healthy_violations"], rt["healthy_checked"],
                    "n/a" if far is None else "%.4g" % far))
    dr = rt["detection_rate"]
    lines.append("- detection rate: %d planted flagged / %d planted = %s"
                 % (rt["planted_detected"], rt["planted"], "n/a" if dr is None else "%.3g" % dr))
    for r in results:
        if not r["violation_groups"] and r["verdict"] == "PASS":
            continue
        lines += ["", "## %s (%s)" % (r["program"], r["verdict"])]
        if r["reasons"]:
            lines.append("")
            lines.append("Fails: " + "; ".join(r["reasons"]))
        if r["violation_groups"]:
            lines += ["", "| count | op | check | metric | first value | max value | tolerance | "
                      "detail | origin | python |", "|---|---|---|---|---|---|---|---|---|---|"]
            for g in r["violation_groups"]:
                lines.append("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    g["count"], g["op"], g["check"], g["metric"], fmt_num(g["first_value"]),
                    fmt_num(g["max_value"]), fmt_num(g["tolerance"]),
                    str(g["detail"]).replace("|", "\\|"), "yes" if g["origin"] else "",
                    g["python"].replace("|", "\\|")))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("programs", nargs="*", help="programs to run (default: all)")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--markdown", metavar="FILE")
    ap.add_argument("--json", metavar="FILE", help="write the raw per-program results")
    ap.add_argument("--autocast", choices=["bf16"], help="run the forward passes under autocast")
    ap.add_argument("--keep", metavar="DIR", help="keep each program's fumi output under DIR")
    ap.add_argument("--policy-out", metavar="FILE", help="also write the generated policy here")
    ap.add_argument("--error-tolerances", metavar="MODEL",
                    help="the policy's `tolerances: { error: MODEL }` (precision, fumi, a number)")
    args = ap.parse_args(argv)

    build = os.path.abspath(os.environ.get("FUMI_BUILD")
                            or os.path.join(HERE, os.pardir, os.pardir, "build"))
    if not os.access(os.path.join(build, "bin", "fumi"), os.X_OK):
        print("run_corpus: no fumi in %s/bin (set FUMI_BUILD)" % build, file=sys.stderr)
        return 2
    python = os.environ.get("CORPUS_PYTHON", "/usr/bin/python3")
    programs = discover(args.programs)
    lossy_gemm = False
    if args.autocast == "bf16":
        err = bf16_gemm_error(python)
        lossy_gemm = err is not None and err > LOSSY_BF16_GEMM
        if lossy_gemm:
            print("platform: this torch's bf16 matrix product loses %.1e (normwise, 512x384x256;"
                  " about 2e-3 with fp32 accumulation): its kernel adds products into bf16. fumi"
                  " flags such calls, rightly; on healthy programs they are counted as platform"
                  " findings, not false alarms.\n" % err)
    work = tempfile.mkdtemp(prefix="fumi-corpus-")
    try:
        policy = write_policy(build, os.path.join(work, "every_call.yaml"),
                              error_tolerances=args.error_tolerances)
        if args.policy_out:
            shutil.copyfile(policy, args.policy_out)
        policies = {p.name: write_policy(build, os.path.join(work, p.name[:-3] + ".yaml"),
                                         p.extra_rules, args.error_tolerances)
                    if p.extra_rules else policy
                    for p in programs}
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            futures = [pool.submit(run_one, p, build, policies[p.name], python, args.autocast,
                                   args.keep, lossy_gemm)
                       for p in programs]
            results = [f.result() for f in futures]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_table(results, args.autocast)
    rt = rates(results)
    print("\nfalse alarms: %d violations / %d checked calls on healthy programs; "
          "detected: %d / %d planted" % (rt["healthy_violations"], rt["healthy_checked"],
                                         rt["planted_detected"], rt["planted"]))
    if rt["platform_findings"]:
        print("platform findings (this platform's lossy bf16 GEMM kernels): %d violations"
              % rt["platform_findings"])
    if args.markdown:
        write_markdown(args.markdown, results, args.autocast)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"mode": args.autocast or "f32", "results": results, "rates": rt}, f,
                      indent=1)
    return 1 if any(r["verdict"] != "PASS" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
