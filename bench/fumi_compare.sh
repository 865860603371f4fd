#!/usr/bin/env bash
# bench/fumi_compare.sh — fumi against FuMi's own Python wrappers doing the same work on one job
# (issue 13 item 5, issue 15): the forward calls of the seven functional ops FuMi wraps on
# resnet18 (conv2d, batch_norm, relu, max_pool2d, adaptive_avg_pool2d, linear, cross_entropy:
# 61 calls a step), every call checked, one perturbed rerun or one f64 rerun. Prints a markdown
# table: median step, added ms per step, checked calls per step, added ms per checked call and
# each tool's own time per checked call (its clock in the process: fumi's check_s + adapter_s,
# the wrappers' time besides the op); then fumi's over FuMi's, added and own, within each round
# (a round runs every mode once, in turn, so the machine's drift between rounds cancels).
# Not a test: it never fails on a slow number, it reports it.
# Then, where the simulated torch device is built (tests/torch/simdevice), one more table: the
# bytes a check of a device op copies from the device to the host (tests/torch/device_ops.py
# prims, every call of its GEMMs and element-wise ops checked by perturb, highprec, nan_inf and
# determinism; gemms and convs, their GEMM-family and convolution calls checked by checksum;
# the simulator's meter with fumi minus without).
#
#   baseline        no LD_PRELOAD
#   fumi perturb    libfumi, a policy checking those aten ops (phase forward, every call) with
#                   `perturb`, trials 1 (every floating input perturbed: weights too)
#   fumi perturb first  the same with `inputs: [first]`: the first floating argument only, as
#                   FuMi's wrappers perturb (the same work)
#   fumi highprec   the same with `highprec`
#   FuMi perturb    no libfumi; bench/fumi_emulate.py's add_noise wrappers (torch ops)
#   FuMi f64        no libfumi; its improve_precision wrappers
#   floor rerun     no libfumi; the same calls rerun on their own arguments and nothing else:
#                   what any perturbation check costs at least (the "above the floor" column
#                   subtracts it)
#   floor rerun64   no libfumi; the calls rerun on .double() copies and nothing else: the floor
#                   of an f64 check
#
# Usage: bench/fumi_compare.sh [--quick] [--threads T] [--pin-cpu] [--pin-malloc] [--no-build]
#                              [--device cuda]
#   --quick       1 round, fewer steps (a smoke run)
#   --rounds R    R rounds (default 3)
#   --device cuda the job on the GPU (a machine with one, and an adapter built against its
#                 torch: docs/cuda.md); then one more table: the bytes copied device→host per
#                 checked call (torch.profiler's CUDA records of two steps, each mode against
#                 the baseline), where fumi's checks should move scalars, not tensors
#   --threads T   torch.set_num_threads(T) (default 0: PyTorch's choice, as users run)
#   --pin-cpu     one thread on one CPU (the last), as the issues' pinned figures: every mode
#                 under taskset, torch at one thread, OMP_NUM_THREADS=1 and
#                 OPENBLAS_NUM_THREADS=1 (with PyTorch's threads, ATen's OpenMP workers and
#                 OpenBLAS's own threads share the cores, and the rounds swing by 2-3x)
#   --pin-malloc  glibc's malloc thresholds pinned in every mode (bench/torch.sh's tunables):
#                 libfumi pins them itself when it attaches to torch, so unpinned, the plain and
#                 emulated modes pay glibc's trim-and-refault cycle that fumi's modes do not
# Environment: FUMI_BUILD_DIR, PYTHON (as bench/torch.sh). Described in docs/benchmarks.md.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
QUICK=0 THREADS=0 BUILD_IT=1 PIN_MALLOC=0 PIN_CPU= DEVICE=cpu ROUNDS_ASKED=
while (($#)); do
  case $1 in
    --quick) QUICK=1 ;;
    --threads) THREADS=${2:?--threads needs a value}; shift ;;
    --no-build) BUILD_IT=0 ;;
    --pin-malloc) PIN_MALLOC=1 ;;
    --pin-cpu) PIN_CPU=$(($(nproc) - 1)) THREADS=1 ;;
    --device) DEVICE=${2:?--device needs a value}; shift ;;
    --rounds) ROUNDS_ASKED=${2:?--rounds needs a value}; shift ;;
    -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "fumi_compare.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
if [[ $QUICK == 1 ]]; then ROUNDS=1 WARMUP=2 STEPS=4; else ROUNDS=3 WARMUP=2 STEPS=8; fi
ROUNDS=${ROUNDS_ASKED:-$ROUNDS}
if [[ $BUILD_IT == 1 ]]; then
  [[ -f $BUILD/CMakeCache.txt ]] || cmake -S "$ROOT" -B "$BUILD" >&2
  cmake --build "$BUILD" -j"$(nproc)" --target fumi fumi_perturb fumi_highprec fumi_nan_inf \
    fumi_determinism fumi_simtorch >&2
fi
LIBFUMI=$BUILD/lib/libfumi.so
[[ -f $BUILD/lib/fumi/libfumi_torch.so ]] ||
  { echo "fumi_compare.sh: the PyTorch adapter is not built" >&2; exit 2; }
bench_setup fumi_compare.sh

declare -A CHECK_OF=([perturb]="perturb, trials: 1"
                     [perturb_first]="perturb, trials: 1, inputs: [first]" [highprec]="highprec")
for name in "${!CHECK_OF[@]}"; do
  check=${CHECK_OF[$name]}
  cat >"$TMP/$name.yaml" <<EOF
version: 1
report: { log_level: warn }
rules:
  - name: fumi-wraps
    match:
      op: [aten::conv2d, aten::batch_norm, aten::relu_, aten::relu, aten::max_pool2d,
           aten::adaptive_avg_pool2d, aten::linear, aten::cross_entropy_loss]
      phase: forward
    sample: { every: 1 }
    checks: [ { plugin: $check, tolerance: 1e9 } ]
EOF
done

MODES=(baseline floor_rerun floor_rerun64 fumi_perturb fumi_perturb_first fumi_highprec fumipy_perturb
       fumipy_f64)
run_mode() {  # run_mode MODE ROUND [torch_step.py options...]
  local mode=$1 round=$2 out=$TMP/out-$1-$2
  shift 2
  local -a env=(env) extra=() pin=()
  [[ $PIN_MALLOC == 1 ]] &&
    env+=(GLIBC_TUNABLES="$MALLOC_TUNABLES")
  if [[ -n $PIN_CPU ]]; then
    env+=(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1)
    pin=(taskset -c "$PIN_CPU")
  fi
  case $mode in
    fumi_perturb) env+=(LD_PRELOAD="$LIBFUMI" FUMI_OUT="$out" FUMI_POLICY="$TMP/perturb.yaml") ;;
    fumi_perturb_first)
      env+=(LD_PRELOAD="$LIBFUMI" FUMI_OUT="$out" FUMI_POLICY="$TMP/perturb_first.yaml") ;;
    fumi_highprec) env+=(LD_PRELOAD="$LIBFUMI" FUMI_OUT="$out" FUMI_POLICY="$TMP/highprec.yaml") ;;
    fumipy_perturb) extra=(--emulate perturb) ;;
    fumipy_f64) extra=(--emulate f64) ;;
    floor_rerun) extra=(--emulate rerun) ;;
    floor_rerun64) extra=(--emulate rerun64) ;;
  esac
  "${env[@]}" "${pin[@]}" "$PYTHON" "$ROOT/bench/torch_step.py" --model resnet18 --steps "$STEPS" \
    --warmup "$WARMUP" --threads "$THREADS" --device "$DEVICE" "${extra[@]}" "$@" \
    >"$TMP/steps-$mode-$round" 2>>"$TMP/stderr-$mode" ||
    { tail -n 20 "$TMP/stderr-$mode" >&2; exit 1; }
}

bench_machine
for ((round = 1; round <= ROUNDS; ++round)); do
  for mode in "${MODES[@]}"; do
    echo "fumi_compare.sh: round $round/$ROUNDS: $mode" >&2
    run_mode "$mode" "$round"
  done
done
read -r load_end _ </proc/loadavg
# On a device, the bytes copied device→host per checked call: each mode once more, its two
# timed steps under torch.profiler (torch_step.py --count-copies), against the baseline's.
COPY_MODES=()
[[ $DEVICE == cpu ]] ||
  COPY_MODES=(baseline fumi_perturb fumi_perturb_first fumi_highprec fumipy_perturb fumipy_f64)
for mode in "${COPY_MODES[@]}"; do
  echo "fumi_compare.sh: device→host copies: $mode" >&2
  STEPS=2 WARMUP=1 run_mode "$mode" copies --count-copies
done

echo "## fumi and FuMi's wrappers, the same checks on resnet18 (bench/fumi_compare.sh)"
echo
gpu=
[[ $DEVICE == cpu ]] ||
  gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo "?") ($DEVICE; the job's tensors there), "
echo "Machine: $gpu${cpu:-unknown CPU}, $(nproc) CPUs; build type ${BUILD_TYPE:-?}; load average ${load1} at start, ${load_end} at the end$(bench_busy && echo ' (**busy: times inflated**)'); $([[ -n $PIN_CPU ]] && echo "one thread pinned to CPU $PIN_CPU (--pin-cpu: torch, OpenMP and OpenBLAS at one thread); ")$([[ $PIN_MALLOC == 1 ]] && echo 'malloc thresholds pinned in every mode (--pin-malloc)' || echo "glibc's own malloc thresholds, as users run")."
echo
"$PYTHON" - "$TMP" "$ROUNDS" "$WARMUP" "$STEPS" "$THREADS" "${MODES[*]}" "${COPY_MODES[*]}" \
  <<'EOF'
import glob, json, statistics, sys

tmp, rounds, warmup, steps, threads, modes, copy_modes = sys.argv[1:8]
rounds, warmup, steps = int(rounds), int(warmup), int(steps)
modes, copy_modes = modes.split(), copy_modes.split()


def record(m, r):
    """Run r of mode m (its torch_step.py lines and fumi's summary): the timed steps' seconds,
    every step's loss, the calls checked and the tool's own seconds on them (None where the
    run counted none: no emulation, no fumi), and torch.profiler's (device→host copies,
    bytes) (None without --count-copies)."""
    timed, losses, checked, own, d2h = [], [], None, None, None
    for line in open(f"{tmp}/steps-{m}-{r}"):
        f = line.split()
        if f and f[0] == "step":
            losses.append(f[6])
            if f[2] == "timed":
                timed.append(float(f[4]))
        elif f and f[0] == "emulated_checks":
            checked = int(f[1])
        elif f and f[0] == "emulated_own_s":
            own = float(f[1])
        elif f and f[0] == "d2h_copies":
            d2h = (int(f[1]), int(f[3]))
    for path in glob.glob(f"{tmp}/out-{m}-{r}/events-*.jsonl"):
        last = None
        for line in open(path):
            e = json.loads(line) if line.strip() else {}
            if e.get("event") == "summary":
                last = e
        if last:
            checked = sum(o["checked"] for o in last["ops"])
            own = sum(o["check_s"] + o.get("adapter_s", 0.0) for o in last["ops"])
    return timed, losses, checked, own, d2h


label = {
    "baseline": "baseline: no LD_PRELOAD",
    "fumi_perturb": "fumi `perturb` (trials 1)",
    "fumi_perturb_first": "fumi `perturb` (trials 1, `inputs: [first]`: FuMi's input)",
    "fumi_highprec": "fumi `highprec`",
    "fumipy_perturb": "FuMi add_noise (emulated, torch ops)",
    "fumipy_f64": "FuMi improve_precision (emulated, torch ops)",
    "floor_rerun": "floor of perturb: the op rerun alone (torch, no noise, no comparison)",
    "floor_rerun64": "floor of highprec: inputs .double() and the op rerun alone",
}
floor_of = {"fumi_perturb": "floor_rerun", "fumi_perturb_first": "floor_rerun",
            "fumipy_perturb": "floor_rerun",
            "fumi_highprec": "floor_rerun64", "fumipy_f64": "floor_rerun64"}
timed, losses, checks, check_s, own_round = {}, {}, {}, {}, {}
for m in modes:
    timed[m], losses[m], per_step, secs, own_round[m] = [], [], [], [], []
    for r in range(1, rounds + 1):
        run_timed, run_losses, checked, own, _ = record(m, r)
        timed[m] += run_timed
        losses[m].append(run_losses)
        if checked is not None:
            per_step.append(checked / (warmup + steps))
            if own is not None:
                secs.append(own)
                own_round[m].append(own / checked if checked else None)
    checks[m] = statistics.fmean(per_step) if per_step else 0.0
    check_s[m] = statistics.fmean(secs) / (warmup + steps) if secs else None
med = {m: statistics.median(timed[m]) for m in modes}
base = med["baseline"]
thread_text = "PyTorch's default thread count" if threads == "0" else f"{threads} thread(s)"
print(f"resnet18(num_classes=10), SGD momentum 0.9, batch 8 of random 3×64×64 images, "
      f"{thread_text}; {rounds} round(s) of the modes in turn, {warmup} warm-up and {steps} "
      f"timed steps each; median of the {rounds * steps} pooled timed steps. Checked calls per "
      f"step: fumi's summary (all steps) or the emulation's count. Added ms per checked call = "
      f"(mode − baseline) / checked calls per step. Own time per checked call: what the tool "
      f"itself spent on the checked calls besides the op, measured in the process — fumi's "
      f"summary (check_s + adapter_s: checks, copies before the op, the adapter's work after), "
      f"the emulated wrappers' own clock (preparing the rerun's arguments, the rerun, the "
      f"comparison); not moved by the step-to-step spread of the unchecked work.")
print()
print("| mode | median step ms | × baseline | checked calls per step | added ms per checked call | above the floor (ms) | own time per checked call (ms) | losses vs baseline |")
print("|---|---:|---:|---:|---:|---:|---:|---|")
for m in modes:
    same = "reference" if m == "baseline" else (
        "identical" if losses[m] == losses["baseline"] else "**DIFFERENT**")
    added = (1000 * (med[m] - base) / checks[m]) if checks[m] else None
    per_call = f"{added:.2f}" if added is not None else "—"
    floor = floor_of.get(m)
    above = (f"{added - 1000 * (med[floor] - base) / checks[floor]:.2f}"
             if added is not None and floor in med and checks[floor] else "—")
    in_checks = (f"{1000 * check_s[m] / checks[m]:.2f}" if check_s[m] and checks[m] else "—")
    print(f"| {label[m]} | {1000 * med[m]:.1f} | {med[m] / base:.2f} | "
          f"{checks[m]:.1f} | {per_call} | {above} | {in_checks} | {same} |")

# Within one round every mode runs once, in turn: the ratio of fumi's added time per checked
# call to FuMi's, round by round, is not moved by the machine drifting between rounds.
pairs = [("fumi_highprec", "fumipy_f64"), ("fumi_perturb_first", "fumipy_perturb"),
         ("fumi_perturb", "fumipy_perturb")]
if rounds > 1 and all(a in modes and b in modes and checks[a] and checks[b] for a, b in pairs):
    def added(m, r):
        def round_median(mode):
            return statistics.median(timed[mode][(r - 1) * steps:r * steps])
        return (round_median(m) - round_median("baseline")) / checks[m]
    print()
    print("fumi's added time per checked call over FuMi's, within each round:")
    print()
    print("| fumi mode / FuMi's | " + " | ".join(f"round {r}" for r in range(1, rounds + 1)) +
          " | median |")
    print("|---|" + "---:|" * (rounds + 1))
    for a, b in pairs:
        ratios = [added(a, r) / added(b, r) if added(b, r) > 0 else float("nan")
                  for r in range(1, rounds + 1)]
        print(f"| {label[a]} / {label[b]} | " + " | ".join(f"{x:.2f}" for x in ratios) +
              f" | {statistics.median(ratios):.2f} |")
    print()
    print("fumi's own time per checked call over FuMi's wrappers', within each round (each "
          "tool's clock in the process: the step-to-step spread of the unchecked work is not "
          "in it):")
    print()
    print("| fumi mode / FuMi's | " + " | ".join(f"round {r}" for r in range(1, rounds + 1)) +
          " | median |")
    print("|---|" + "---:|" * (rounds + 1))
    for a, b in pairs:
        ratios = [x / y if x and y else float("nan") for x, y in zip(own_round[a], own_round[b])]
        print(f"| {label[a]} / {label[b]} | " + " | ".join(f"{x:.2f}" for x in ratios) +
              f" | {statistics.median(ratios):.2f} |")

if copy_modes:
    copy_steps, copy_warmup = 2, 1
    print()
    print("## Bytes device→host per checked call (torch.profiler's CUDA records, two steps)")
    print()
    print(f"The timed steps of one more run of each mode ({copy_warmup} warm-up, {copy_steps} "
          f"timed) under torch.profiler; its gpu_memcpy DtoH records against the baseline's "
          f"(the program's own loss.item() among them).")
    print()
    print("| mode | checked calls | device→host copies added | bytes added "
          "| bytes per checked call |")
    print("|---|---:|---:|---:|---:|")
    base_n, base_b = record("baseline", "copies")[4]
    for m in copy_modes[1:]:
        _, _, checked, _, (n, b) = record(m, "copies")
        calls = (checked or 0) * copy_steps / (copy_warmup + copy_steps)
        per = f"{(b - base_b) / calls:.0f}" if calls else "—"
        print(f"| {m} | {calls:.0f} | {n - base_n} | {b - base_b} | {per} |")
EOF

SIMTORCH=$BUILD/tests/torch/simdevice/libfumi_simtorch.so
[[ -f $SIMTORCH ]] || exit 0
cat >"$TMP/device.yaml" <<EOF
version: 1
report: { all_checks: true, log_level: warn }
rules:
  - match: { op: [aten::mm, aten::add.Tensor, aten::mul.Tensor] }
    sample: { every: 1 }
    checks: [ { plugin: perturb }, { plugin: highprec }, { plugin: nan_inf },
              { plugin: determinism } ]
EOF
cat >"$TMP/device-checksum.yaml" <<EOF
version: 1
report: { all_checks: true, log_level: warn }
rules:
  - match: { op: [aten::mm, aten::addmm, aten::bmm, aten::baddbmm, aten::mv, aten::addmv,
                  aten::convolution, aten::convolution_backward] }
    sample: { every: 1 }
    checks: [ { plugin: checksum } ]
EOF
device_ops() {  # device_ops PROGRAM LOG [VAR=value...]: a device_ops.py program on the device
  local program=$1 log=$2
  shift 2
  env FUMI_SIMTORCH="$SIMTORCH" "$@" "$PYTHON" "$ROOT/tests/torch/device_ops.py" "$program" \
    >/dev/null 2>"$log" || { tail -n 20 "$log" >&2; exit 1; }
}
for program in prims gemms convs; do
  policy=$TMP/device-checksum.yaml
  [[ $program == prims ]] && policy=$TMP/device.yaml
  device_ops "$program" "$TMP/device-$program-plain.log"
  device_ops "$program" "$TMP/device-$program-fumi.log" LD_PRELOAD="$LIBFUMI" \
    FUMI_OUT="$TMP/out-device-$program" FUMI_POLICY="$policy"
done
echo
"$PYTHON" - "$TMP" <<'EOF'
import glob, json, math, sys

tmp = sys.argv[1]
ITEM = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2}


def moved(log):
    return next(int(line.split()[1]) for line in open(log) if line.startswith("bytes_to_host "))


print("## Bytes device→host per check of a device op (simulated torch device)")
print()
print("tests/torch/device_ops.py on privateuseone:0, every call checked. prims: a GEMM with "
      "24 KiB operands, f16, bf16 and f64 element-wise ops, strided views, zeros, NaN/Inf; "
      "aten::mm, add.Tensor and mul.Tensor checked by perturb, highprec, nan_inf and "
      "determinism. gemms (mm, addmm, bmm, baddbmm, mv, addmv; f32, bf16) and convs (three "
      "convolutions with their backward: groups, stride, padding, dilation, bias, 1-d) checked "
      "by checksum. The last column is what copying the checked calls' tensors would move.")
print()
print("| program | device checks | bytes device→host added by fumi | per check "
      "| tensors' bytes per check |")
print("|---|---:|---:|---:|---:|")
for program, checks_of in (("prims", "perturb, highprec, nan_inf, determinism"),
                           ("gemms", "checksum"), ("convs", "checksum")):
    checks = tensors = 0
    for path in glob.glob(f"{tmp}/out-device-{program}/events-*.jsonl"):
        for line in open(path):
            e = json.loads(line) if line.strip() else {}
            if e.get("event") in ("check", "violation") and e["args"].get("device") != "cpu":
                checks += 1
                tensors += sum(ITEM.get(e["dtype"], 4) * math.prod(s)
                               for s in e["shape"].values())
    extra = (moved(f"{tmp}/device-{program}-fumi.log") -
             moved(f"{tmp}/device-{program}-plain.log"))
    print(f"| {program} ({checks_of}) | {checks} | {extra} | {extra / checks:.0f} | "
          f"{tensors / checks:.0f} |" if checks else f"| {program} | 0 | — | — | — |")
EOF
