#!/usr/bin/env bash
# bench/torch.sh — CPU training step time with libfumi attached (issue 3, item 9; issue 11,
# item 4), and one markdown report per model. Not a test: it never fails on a slow number, it
# reports it. Models (bench/torch_step.py --model): resnet18 (few, large ops), lstm (a
# word-level LSTM language model: many small ops, no torch.optim) and transformer (a small
# Transformer language model).
#
#   baseline  no LD_PRELOAD
#   attached  preloaded, a policy with no rules: the PyTorch adapter counts every op, none is
#             selected                                                      (target ≤ 1.03×)
#   default   preloaded, no FUMI_POLICY: the embedded default policy         (target ≤ 1.05×)
#   leaves    the default policy with the torch-compute rule's sample line replaced by
#             `sample: { every: 1 }` and no overhead_budget: every call of the compute leaves
#             checked (no target; the report says where the time goes)
#   abft      as leaves, with the checks checksum (vectors 2) + nan_inf + perturb (trials 1):
#             every compute leaf checked at production cost (issue 13 item 4: target ≤ 3×)
#   production  preloaded, config/production.yaml (the policy teams leave on; no target)
#
# Besides step times, each run reports its process's peak resident set (torch_step.py's
# peak_rss_kb): the table's memory column, the median over the rounds against the baseline's.
#
# For each model the modes alternate (baseline, attached, default, leaves, baseline, ...) for R
# rounds; each run is one process of bench/torch_step.py (W warm-up steps, then N timed steps).
# Per-step times are pooled per mode over the rounds; the figure is the median.
# By default every run is as users run their jobs: glibc's own (dynamic) malloc thresholds and
# PyTorch's default thread count. --pin-malloc pins the thresholds (GLIBC_TUNABLES, below) in
# every mode: a step's time then no longer depends on the largest block freed so far, which
# fumi's check scratch changes.
#
# Usage: bench/torch.sh [--model resnet18|lstm|transformer|all] [--quick] [--no-build]
#                       [--pin-malloc] [--threads T] [--autocast bf16]
#                                                 (all models: ~12 min on 2 idle cores)
#   --model M       the job (default: all three, one after the other)
#   --quick         1 round, fewer steps (a smoke run; numbers are rougher)
#   --no-build      use the build as it is (default: configure if needed, then build libfumi,
#                   the CLI and the check plugins, a no-op when up to date)
#   --pin-malloc    pin glibc's malloc thresholds in every mode (GLIBC_TUNABLES below)
#   --glibc-malloc  glibc's dynamic thresholds: the default now, accepted for old command lines
#   --threads T     torch.set_num_threads(T) in every run (default 0: PyTorch's choice, one
#                   thread per core; 1 is steadier on a shared 2-core machine)
#   --autocast bf16 every mode trains under torch.autocast(cpu, bfloat16) (a bf16 job)
# Environment: FUMI_BUILD_DIR (default: <repo>/build), PYTHON (default: /usr/bin/python3, with
# torch and torchvision). Results are described in docs/benchmarks.md, parts 4 and 4b.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
QUICK=0
BUILD_IT=1
PIN_MALLOC=0
THREADS=0
MODELS=(resnet18 lstm transformer)
AUTOCAST=()
while (($#)); do
  case $1 in
    --autocast) AUTOCAST=(--autocast "${2:?--autocast needs a value}"); shift ;;
    --model)
      case ${2:-} in
        resnet18|lstm|transformer) MODELS=("$2") ;;
        all) ;;
        *) echo "torch.sh: --model resnet18|lstm|transformer|all" >&2; exit 2 ;;
      esac
      shift ;;
    --threads) THREADS=${2:?--threads needs a value}; shift ;;
    --quick) QUICK=1 ;;
    --no-build) BUILD_IT=0 ;;
    --pin-malloc) PIN_MALLOC=1 ;;
    --glibc-malloc) PIN_MALLOC=0 ;;
    -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "torch.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done

if [[ $QUICK == 1 ]]; then ROUNDS=1 WARMUP=2 STEPS=4; else ROUNDS=5 WARMUP=3 STEPS=10; fi
# leaves (every call of the compute leaves checked) is resnet18's breakdown of where check time
# goes; on the language models it takes 15 s and more a step, so they run the other three.
modes_of() {
  if [[ $1 == resnet18 ]]; then echo baseline attached default production leaves abft
  else echo baseline attached default production; fi
}

# ---- build ------------------------------------------------------------------------------------
if [[ $BUILD_IT == 1 ]]; then
  [[ -f $BUILD/CMakeCache.txt ]] || cmake -S "$ROOT" -B "$BUILD" >&2
  # Build output goes to stderr so that stdout is only the tables.
  cmake --build "$BUILD" -j"$(nproc)" --target fumi fumi_cli \
    fumi_nan_inf fumi_highprec fumi_perturb fumi_determinism fumi_checksum >&2
fi
LIBFUMI=$BUILD/lib/libfumi.so
FUMI=$BUILD/bin/fumi
for f in "$LIBFUMI" "$FUMI" "$BUILD/lib/fumi/libfumi_torch.so"; do
  [[ -f $f ]] || { echo "torch.sh: $f is missing (was libtorch found by cmake?)" >&2; exit 2; }
done
"$PYTHON" -c 'import torch, torchvision' 2>/dev/null ||
  { echo "torch.sh: $PYTHON cannot import torch and torchvision (set PYTHON)" >&2; exit 2; }
bench_setup torch.sh

# ---- policies ---------------------------------------------------------------------------------
printf 'version: 1\nreport: { log_level: warn }\nrules: []\n' >"$TMP/attached.yaml"
"$FUMI" policy default >"$TMP/default.yaml"
# leaves: the torch-compute rule's one `sample:` line becomes `sample: { every: 1 }` and the
# overhead_budget line goes (every call is to be checked, whatever it costs); anything else (no
# such rule, no or several sample lines in it) stops the script.
DEFAULT_SAMPLE=$("$PYTHON" - "$TMP/default.yaml" "$TMP/leaves.yaml" "$TMP/abft.yaml" <<'EOF'
import re, sys
lines = open(sys.argv[1]).read().splitlines(keepends=True)
starts = [i for i, l in enumerate(lines) if re.match(r"^\s*- name: torch-compute\s*$", l)]
if len(starts) != 1:
    sys.exit("torch.sh: the default policy has no (or several) rule named torch-compute")
end = next((i for i in range(starts[0] + 1, len(lines)) if re.match(r"^\s*- name:", lines[i])),
           len(lines))
hits = [i for i in range(starts[0] + 1, end) if re.match(r"^    sample:", lines[i])]
if len(hits) != 1:
    sys.exit(f"torch.sh: expected one '    sample:' line in rule torch-compute, found {len(hits)}")
print(lines[hits[0]].strip())
lines[hits[0]] = "    sample: { every: 1 }\n"
checks = [i for i in range(starts[0] + 1, end) if re.match(r"^      - \{ plugin:", lines[i])]
abft = ["      - { plugin: checksum, vectors: 2 }\n", "      - { plugin: nan_inf }\n",
        "      - { plugin: perturb, trials: 1 }\n"]
lines_abft = lines[:checks[0]] + abft + lines[checks[-1] + 1:]
keep = lambda ls: "".join(l for l in ls if not l.startswith("overhead_budget:"))
open(sys.argv[2], "w").write(keep(lines))
open(sys.argv[3], "w").write(keep(lines_abft))
EOF
)
[[ -n $DEFAULT_SAMPLE ]] || { echo "torch.sh: could not derive the leaves policy" >&2; exit 1; }

# ---- runs -------------------------------------------------------------------------------------
# run_mode MODEL MODE ROUND: one training process; steps to $TMP/MODEL/steps-MODE-ROUND, fumi's
# events to $TMP/MODEL/out-MODE-ROUND.
run_mode() {
  local model=$1 mode=$2 round=$3 dir=$TMP/$1
  local out=$dir/out-$mode-$round
  local -a env=(env)
  [[ $PIN_MALLOC == 1 ]] && env+=(GLIBC_TUNABLES="$MALLOC_TUNABLES")
  case $mode in
    baseline) ;;
    attached) env+=(LD_PRELOAD="$LIBFUMI" FUMI_OUT="$out" FUMI_POLICY="$TMP/attached.yaml") ;;
    default) env+=(LD_PRELOAD="$LIBFUMI" FUMI_OUT="$out") ;;
    leaves) env+=(LD_PRELOAD="$LIBFUMI" FUMI_OUT="$out" FUMI_POLICY="$TMP/leaves.yaml") ;;
    abft) env+=(LD_PRELOAD="$LIBFUMI" FUMI_OUT="$out" FUMI_POLICY="$TMP/abft.yaml") ;;
    production)
      env+=(LD_PRELOAD="$LIBFUMI" FUMI_OUT="$out" FUMI_POLICY="$ROOT/config/production.yaml") ;;
  esac
  if ! "${env[@]}" "$PYTHON" "$ROOT/bench/torch_step.py" --model "$model" "${AUTOCAST[@]}" \
       --steps "$STEPS" --warmup "$WARMUP" --threads "$THREADS" \
       >"$dir/steps-$mode-$round" 2>>"$dir/stderr-$mode"; then
    echo "torch.sh: the $model $mode run failed; its stderr ends with:" >&2
    tail -n 20 "$dir/stderr-$mode" >&2
    exit 1
  fi
}

bench_machine
versions=$("$PYTHON" -c 'import torch, torchvision as tv
print(f"PyTorch {torch.__version__}, torchvision {tv.__version__}")')

echo "# fumi benchmark: CPU training steps (${MODELS[*]})"
echo
echo "Machine: ${cpu:-unknown CPU}, $(nproc) CPUs, ${os}, ${versions}; build type ${BUILD_TYPE:-?}."
[[ $BUILD_TYPE == Debug ]] && echo "**Warning: a Debug build; the numbers are meaningless.**"
if [[ $PIN_MALLOC == 1 ]]; then
  echo "Every mode ran with GLIBC_TUNABLES=${MALLOC_TUNABLES} (fixed malloc thresholds, --pin-malloc)."
else
  echo "glibc's own dynamic malloc thresholds, as users run (no GLIBC_TUNABLES)."
fi
if [[ $THREADS == 0 ]]; then
  echo "PyTorch's default intra-op thread count ($("$PYTHON" -c 'import torch; print(torch.get_num_threads())'))."
else
  echo "torch.set_num_threads($THREADS) in every run."
fi
[[ ${#AUTOCAST[@]} -gt 0 ]] && echo "Every mode trained under torch.autocast(cpu, ${AUTOCAST[1]})."
echo

for model in "${MODELS[@]}"; do
  mkdir -p "$TMP/$model"
  read -r load1 _ </proc/loadavg
  model_load=$load1
  read -r -a MODES <<<"$(modes_of "$model")"
  for ((round = 1; round <= ROUNDS; ++round)); do
    for mode in "${MODES[@]}"; do
      echo "torch.sh: $model: round $round/$ROUNDS: $mode" >&2
      run_mode "$model" "$mode" "$round"
    done
  done
  read -r load_end _ </proc/loadavg

# ---- report -----------------------------------------------------------------------------------
echo "## ${model}"
echo
echo "Load average at start: ${model_load}; at the end: ${load_end}."
if bench_busy; then
  echo "**Warning: the machine is busy; times below are inflated and noisy.**"
fi
echo

"$PYTHON" - "$TMP/$model" "$ROUNDS" "$WARMUP" "$STEPS" "$THREADS" "$DEFAULT_SAMPLE" "$model" \
  "${MODES[*]}" <<'EOF'
import glob, json, statistics, sys

tmp, rounds, warmup, steps, threads, default_sample, model, modes = sys.argv[1:9]
rounds, warmup, steps = int(rounds), int(warmup), int(steps)
modes = modes.split()
label = {
    "baseline": "baseline: no LD_PRELOAD",
    "attached": "attached: preloaded, `rules: []` (adapter counts every op, none selected)",
    "default": "default: preloaded, embedded default policy",
    "leaves": "leaves: default policy, torch-compute `sample: { every: 1 }`",
    "abft": "abft: leaves with checksum (vectors 2) + nan_inf + perturb (trials 1)",
    "production": "production: preloaded, config/production.yaml",
}
target = {"attached": 1.03, "default": 1.05, "abft": 3.0}

peak_kb = {}  # mode -> [peak resident set of each process, KiB]

def read_steps(mode, r):
    """[(kind, seconds, loss_hex, minor_faults)] of one process, warm-up included."""
    rows = []
    for line in open(f"{tmp}/steps-{mode}-{r}"):
        f = line.split()  # step <i> warmup|timed step_s <s> loss <hex> minflt <n>
        if len(f) == 9 and f[0] == "step":
            rows.append((f[2], float(f[4]), f[6], int(f[8])))
        elif len(f) == 2 and f[0] == "peak_rss_kb":
            peak_kb.setdefault(mode, []).append(int(f[1]))
    if len(rows) != warmup + steps:
        sys.exit(f"torch.sh: {mode} round {r} printed {len(rows)} steps, expected {warmup + steps}")
    return rows

searches = {}  # mode -> NaN/Inf searches started (nan_search events), all processes

def summaries(mode):
    """The ops lists of the summary events of one mode, one per process."""
    out = []
    for r in range(1, rounds + 1):
        for path in glob.glob(f"{tmp}/out-{mode}-{r}/events-*.jsonl"):
            last = None
            for line in open(path):
                if line.strip():
                    e = json.loads(line)
                    if e.get("event") == "summary":
                        last = e
                    elif e.get("event") == "nan_search":
                        searches[mode] = searches.get(mode, 0) + 1
            if last is not None:
                out.append(last["ops"])
    return out

def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, max(0, round(q * (len(v) - 1))))]

runs = {m: [read_steps(m, r) for r in range(1, rounds + 1)] for m in modes}
timed = {m: [s for run in runs[m] for k, s, _, _ in run if k == "timed"] for m in modes}
every = {m: [s for run in runs[m] for _, s, _, _ in run] for m in modes}
med = {m: statistics.median(timed[m]) for m in modes}
round_med = {m: [statistics.median(s for k, s, _, _ in run if k == "timed") for run in runs[m]]
             for m in modes}
# Minor page faults per process (all steps) and per timed step (mean): the allocator's work.
faults_run = {m: [sum(x[3] for x in run) for run in runs[m]] for m in modes}
faults_timed = {m: statistics.fmean(x[3] for run in runs[m] for x in run if x[0] == "timed")
                for m in modes}
mean_all = {m: statistics.fmean(every[m]) for m in modes}
mean_timed = {m: statistics.fmean(timed[m]) for m in modes}
ops = {m: summaries(m) for m in modes}

def losses(m):
    if m == "baseline":
        same = all([x[2] for x in run] == [x[2] for x in runs[m][0]] for run in runs[m])
        return "reference" + ("" if rounds == 1 else
                              ", identical across rounds" if same else ", DIFFERENT across rounds")
    bad = sum(1 for a, b in zip(runs[m], runs["baseline"])
              if [x[2] for x in a] != [x[2] for x in b])
    return "identical" if bad == 0 else f"**DIFFERENT** ({bad} of {rounds} rounds)"

def checks(m):
    if m == "baseline":
        return "—"
    if len(ops[m]) != rounds:
        return f"**{len(ops[m])} of {rounds} processes wrote a summary**"
    per = [sum(o["checked"] for o in p) for p in ops[m]]
    return " ".join(str(c) for c in per)

job = {
    "resnet18": "resnet18(num_classes=10), SGD momentum 0.9, batch 8 of random 3×64×64 images",
    "lstm": "word-level LSTM LM (vocabulary 10 000, embedding and hidden 200, 2 layers, "
            "dropout 0.2), bptt 35, batch 20 of random tokens, clipping 0.25, hand-written SGD",
    "transformer": "Transformer LM (vocabulary 10 000, d_model 200, 2 heads, 2 layers, "
                   "feed-forward 200, causal mask), bptt 35, batch 20 of random tokens, "
                   "clipping 0.25, hand-written SGD",
}[model]
thread_text = "PyTorch's default thread count" if threads == "0" else f"{threads} intra-op thread(s)"
print(f"{rounds} round(s), modes alternating; each run is one process of bench/torch_step.py "
      f"--model {model}: {job}, "
      f"{thread_text}; {warmup} warm-up steps, then {steps} timed steps. "
      f"Median and p10–p90 of the {rounds * steps} pooled timed steps per mode, and the "
      f"median of each round's run; factor = mode median / baseline median. The warm-up "
      f"leaves out the first steps, where the default policy's `first: 1` checks land (its "
      f"torch-compute rule has `{default_sample}`); the mean over all "
      f"{rounds * (warmup + steps)} steps, warm-up included, shows them, and the mean of the "
      f"timed steps shows the random checks that the median passes over. Checks: checked calls "
      f"in each process (all steps). Faults: minor page faults per process over all steps, "
      f"median of the processes (mean per timed step in brackets). Peak memory: the "
      f"process's peak resident set (getrusage), median of the processes, and its increase "
      f"over the baseline's. Losses: each step's loss, "
      f"bit for bit, against the baseline run of the same round.")
print()
print("| mode | median step s (p10–p90) | median per round | factor | target | verdict | mean s, timed steps (factor) | mean s, all steps incl. warm-up (factor) | checks per process | faults (per timed step) | peak memory MiB (added) | losses vs baseline |")
print("|---|---:|---|---:|---|---|---:|---:|---|---:|---:|---|")
peak_mib = {m: statistics.median(peak_kb[m]) / 1024 if peak_kb.get(m) else None for m in modes}

def peak(m):
    if peak_mib[m] is None:
        return "?"
    if m == "baseline" or peak_mib["baseline"] is None:
        return f"{peak_mib[m]:.0f}"
    add = peak_mib[m] - peak_mib["baseline"]
    return f"{peak_mib[m]:.0f} ({add:+.0f}, {100 * add / peak_mib['baseline']:+.0f}%)"
for m in modes:
    f = med[m] / med["baseline"]
    if m == "baseline":
        fac, tgt, verdict = "1.00", "—", "(baseline)"
    elif m in target:
        fac, tgt = f"{f:.3f}", f"≤ {target[m]:.2f}×"
        verdict = "met" if f <= target[m] else "**missed**"
    else:
        fac, tgt, verdict = f"{f:.1f}", "none (report)", "—"
    print(f"| {label[m]} | {med[m]:.4f} ({pct(timed[m], 0.1):.4f}–{pct(timed[m], 0.9):.4f}) "
          f"| {' '.join(f'{x:.4f}' for x in round_med[m])} | {fac} | {tgt} | {verdict} "
          f"| {mean_timed[m]:.4f} ({mean_timed[m] / mean_timed['baseline']:.2f}) "
          f"| {mean_all[m]:.4f} ({mean_all[m] / mean_all['baseline']:.2f}) "
          f"| {checks(m)} | {statistics.median(faults_run[m]):.0f} ({faults_timed[m]:.0f}) "
          f"| {peak(m)} | {losses(m)} |")
print()

att = [sum(o["calls"] for o in p if o["backend"] == "torch") for p in ops["attached"]]
att_checked = sum(o["checked"] for p in ops["attached"] for o in p)
print(f"Sanity: attached counted {' '.join(map(str, att)) or 'no'} torch op calls per process "
      f"(expected > 0: the adapter attached) and checked {att_checked} (expected 0). "
      f"NaN/Inf searches: {', '.join(f'{m} {searches.get(m, 0)}' for m in modes[1:])} "
      f"(expected 0: no step of these jobs makes a NaN or Inf).")
print()
if "leaves" not in modes:
    sys.exit(0)

# Where the leaves mode's time goes: check_s per op, summed over all its processes.
per_op = {}
for p in ops["leaves"]:
    for o in p:
        if o["checked"]:
            a = per_op.setdefault((o["op"], o["backend"]), {"calls": 0, "checked": 0, "s": 0.0})
            a["calls"] += o["calls"]; a["checked"] += o["checked"]; a["s"] += o["check_s"]
nsteps = len(ops["leaves"]) * (warmup + steps)
# check_s covers all steps, warm-up included, so it is set against the increase of the mean.
rise = mean_all["leaves"] - mean_all["baseline"]
total = sum(a["s"] for a in per_op.values())
torch_ops = [a for (op, be), a in per_op.items() if be == "torch"]
all_checked = all(a["checked"] == a["calls"] for a in torch_ops)
print(f"### {model}: where the time goes with every call of the compute leaves checked")
print()
print(f"Mean step over all {nsteps} steps of the leaves runs {mean_all['leaves']:.3f} s − "
      f"baseline {mean_all['baseline']:.4f} s = +{rise:.3f} s per step (medians: "
      f"+{med['leaves'] - med['baseline']:.3f} s). check_s = wall seconds in the op's checks, "
      f"from the summary events, summed over the {len(ops['leaves'])} leaves process(es); "
      f"per step = check_s / {nsteps} steps; share = per step / +{rise:.3f} s. "
      f"{len(torch_ops)} torch ops had checks, "
      + ("each with every call checked (checked = calls)." if all_checked else
         "**not every call of them checked (checked < calls)**.")
      + " BLAS ops keep their own rule (`first: 3, every: 100`).")
print()
print("| op | checks (calls) | check_s total | ms per check | s per step | share of the increase |")
print("|---|---:|---:|---:|---:|---:|")
ranked = sorted(per_op.items(), key=lambda kv: -kv[1]["s"])
def row(name, checked, calls, s):
    ms = 1000 * s / checked if checked else 0
    share = f"{100 * s / nsteps / rise:.1f}%" if rise > 0 else "—"
    print(f"| {name} | {checked} ({calls}) | {s:.2f} | {ms:.1f} | {s / nsteps:.3f} | {share} |")
for (op, be), a in ranked[:6]:
    row(f"{op} ({be})", a["checked"], a["calls"], a["s"])
rest = ranked[6:]
if rest:
    row(f"{len(rest)} other ops with checks", sum(a["checked"] for _, a in rest),
        sum(a["calls"] for _, a in rest), sum(a["s"] for _, a in rest))
row("**all checks**", sum(a["checked"] for a in per_op.values()),
    sum(a["calls"] for a in per_op.values()), total)
other = rise - total / nsteps
print(f"| not in check_s (adapter, copies taken before an op runs, memory, noise) | | | | "
      f"{other:.3f} | {f'{100 * other / rise:.1f}%' if rise > 0 else '—'} |")
EOF
done
exit 0
