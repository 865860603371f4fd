#!/usr/bin/env bash
# bench/gpu.sh — what fumi's checks cost on cuBLAS calls on a real GPU (docs/benchmarks.md part
# 5c). Needs a GPU and the CUDA 13 libraries (cuBLAS, cudart) where the loader finds them;
# elsewhere it says so and exits 0.
#
# Usage: bench/gpu.sh [SIZES] [CALLS]    (default: "1024 2048 4096" and 10 calls each)
#
# bench_cublas_checked runs CALLS cublasSgemm of n x n x n, plainly and under libfumi with one
# check on every call: nan_inf, checksum, highprec and perturb, each also with its operands
# read through host copies (FUMI_DEVICE_KERNELS=0) instead of by fumi's own kernels. Two
# figures per case: the program's time per call (what it waits for: the checks run on fumi's
# checker thread, behind it) and the check's own time per call, from the summary's check_s
# (docs/report-schema.md), against the GEMM itself.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
SIZES=${1:-"1024 2048 4096"}
CALLS=${2:-10}
PROG=$BUILD/bench/bench_cublas_checked
LIBFUMI=$BUILD/lib/libfumi.so
[[ -x $PROG && -f $LIBFUMI ]] || { echo "gpu.sh: build first (bench_cublas_checked, libfumi)" >&2; exit 1; }
if ! "$PYTHON" -c 'import ctypes, sys
c = ctypes.CDLL("libcuda.so.1"); n = ctypes.c_int(0)
sys.exit(0 if c.cuInit(0) == 0 and c.cuDeviceGetCount(ctypes.byref(n)) == 0 and n.value > 0 else 1)' \
    2>/dev/null; then
  echo "gpu.sh: no GPU here (libcuda.so.1 finds no device): nothing to measure"
  exit 0
fi
bench_setup gpu
bench_machine
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo "?")

policy() {  # policy NAME CHECK: every cuBLAS call checked with CHECK
  printf 'version: 1\nscratch_budget: 4GiB\nrules:\n  - match: { op: "cublas*" }\n    sample: { every: 1 }\n    checks: [ %s ]\n' \
    "$2" >"$TMP/$1.yaml"
}
policy nan_inf "{ plugin: nan_inf }"
policy checksum "{ plugin: checksum, vectors: 2 }"
policy highprec "{ plugin: highprec }"
policy perturb "{ plugin: perturb, trials: 1 }"

ms_per_call() { sed -n 's/.*ms_per_call=\([0-9.]*\).*/\1/p'; }
# check_ms DIR: "runs ms-per-check" of the one check in DIR's summaries.
check_ms() {
  "$PYTHON" - "$1" <<'EOF'
import glob, json, sys
runs = secs = 0
for f in glob.glob(sys.argv[1] + "/events-*.jsonl"):
    for line in open(f):
        e = json.loads(line)
        if e.get("event") == "summary":
            for o in e["ops"]:
                for c in (o.get("checks") or {}).values():
                    runs += c.get("runs", 0)
                    secs += c.get("check_s", 0.0)
print(runs, f"{1000 * secs / runs:.2f}" if runs else "n/a")
EOF
}

echo "## 5c. cuBLAS checks on a GPU (bench/gpu.sh)"
echo
echo "Machine: $gpu; host $cpu, $(nproc) CPUs; $os; build type $BUILD_TYPE; load average $load1."
echo "$CALLS calls of cublasSgemm n×n×n per case after a warm-up call, every call checked; policy scratch_budget 4GiB, FUMI_CUDA_QUEUE=64."
echo
echo "| n | GEMM ms/call (plain) | check | program ms/call under fumi | checks run | ms per check | check ÷ GEMM |"
echo "|---:|---:|---|---:|---:|---:|---:|"
for n in $SIZES; do
  plain=$("$PROG" "$n" "$CALLS" | ms_per_call)
  # "CHECK:host": FUMI_DEVICE_KERNELS=0, the operands read through host copies instead of by
  # fumi's own kernels on the device (docs/cuda.md).
  for spec in nan_inf nan_inf:host checksum checksum:host highprec highprec:host perturb \
      perturb:host; do
    check=${spec%%:*}
    kernels=1 label=$check
    [[ $spec == *:host ]] && kernels=0 label="$check (host copies)"
    out=$TMP/out-$spec-$n
    t=$(FUMI_DEVICE_KERNELS=$kernels FUMI_CUDA_QUEUE=64 LD_PRELOAD=$LIBFUMI \
        FUMI_POLICY=$TMP/$check.yaml FUMI_OUT=$out "$PROG" "$n" "$CALLS" 2>>"$TMP/stderr" |
        ms_per_call)
    read -r runs per < <(check_ms "$out")
    ratio=$(awk -v c="$per" -v g="$plain" 'BEGIN{ if (c == "n/a" || g == 0) print "n/a"; else printf "%.0f×", c / g }')
    echo "| $n | $plain | $label | $t | $runs | $per | $ratio |"
  done
done
