#!/usr/bin/env bash
# bench/violations.sh — what a violation costs the program: a PyTorch job whose matmul violates
# on every call (bf16 products of k = 2048, checked by highprec at f32's tolerance 1e-4), timed
# plain and under libfumi with the native stacks of every violation (report.stack_depth 24, the
# default policy's) and without them (stack_depth 0). Prints a markdown table of the loop's
# median wall time over the rounds. Not a test: it never fails on a slow number.
#
# Usage: bench/violations.sh [--calls N] [--rounds R] [--no-build]
# Environment: FUMI_BUILD_DIR, PYTHON (bench/common.sh). Described in docs/benchmarks.md.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
CALLS=1000 ROUNDS=3 BUILD_IT=1
while (($#)); do
  case $1 in
    --calls) CALLS=${2:?--calls needs a value}; shift ;;
    --rounds) ROUNDS=${2:?--rounds needs a value}; shift ;;
    --no-build) BUILD_IT=0 ;;
    -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "violations.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
if [[ $BUILD_IT == 1 ]]; then
  [[ -f $BUILD/CMakeCache.txt ]] || cmake -S "$ROOT" -B "$BUILD" >&2
  cmake --build "$BUILD" -j"$(nproc)" --target fumi fumi_highprec >&2
fi
bench_setup violations.sh
bench_machine

cat >"$TMP/job.py" <<EOF
import time
import torch
torch.manual_seed(0)
a, b = torch.randn(16, 2048).bfloat16(), torch.randn(2048, 16).bfloat16()
start = time.perf_counter()
for _ in range($CALLS):
    a @ b
print(time.perf_counter() - start)
EOF
for depth in 24 0; do
  cat >"$TMP/stacks$depth.yaml" <<EOF
version: 1
report: { stack_depth: $depth, log_level: error }
rules:
  - match: { op: aten::mm }
    sample: { every: 1 }
    checks: [ { plugin: highprec, tolerance: 1e-4 } ]
EOF
done
declare -A TIMES
for ((round = 1; round <= ROUNDS; ++round)); do
  TIMES[plain]+=" $("$PYTHON" "$TMP/job.py")"
  for depth in 24 0; do
    TIMES[stacks$depth]+=" $(env LD_PRELOAD="$BUILD/lib/libfumi.so" FUMI_OUT="$TMP/out$depth-$round" \
      FUMI_POLICY="$TMP/stacks$depth.yaml" "$PYTHON" "$TMP/job.py")"
  done
done
violations=$(cat "$TMP"/out24-1/events-*.jsonl | grep -c '"event":"violation"' || true)

echo "## What a violation costs (bench/violations.sh)"
echo
echo "Machine: ${cpu:-unknown CPU}, $(nproc) CPUs; build type ${BUILD_TYPE:-?}; load average ${load1} at start$(bench_busy && echo ' (**busy: times inflated**)'). $CALLS calls of a bf16 16×2048 by 2048×16 \`aten::mm\`, each checked by highprec and each a violation ($violations violation events in the first round with stacks); median of $ROUNDS rounds."
echo
echo "| run | loop s | ms per violation above plain |"
echo "|---|---:|---:|"
median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{v[NR]=$1} END{print v[int((NR+1)/2)]}'; }
plain=$(echo "${TIMES[plain]}" | median)
printf '| plain (no LD_PRELOAD) | %.2f | — |\n' "$plain"
for depth in 24 0; do
  t=$(echo "${TIMES[stacks$depth]}" | median)
  label="every violation with its stacks (stack_depth 24)"
  [[ $depth == 0 ]] && label="without native stacks (stack_depth 0)"
  printf '| %s | %.2f | %.2f |\n' "$label" "$t" "$(awk -v t="$t" -v p="$plain" -v n="$CALLS" 'BEGIN{print 1000*(t-p)/n}')"
done
