#!/usr/bin/env bash
# scripts/gpu_suite.sh — the checks that need a GPU, in one run, on a machine that has one:
#   1. the hardware suite of the CUDA hooks (ctest cuda_gpu: test_cuda.py --gpu, class OnGpu);
#   2. the PyTorch adapter on CUDA tensors (test_torch.py OnCuda), with the adapter built
#      against that machine's torch by scripts/build_adapter.sh (the build's own adapter is
#      for the torch CMake found);
#   3. bench/fumi_compare.sh --device cuda (docs/benchmarks.md part 5d) and bench/gpu.sh (the
#      checks of cuBLAS calls, part 5c);
#   4. where the GPU time of a check goes: two resnet18 steps under torch.profiler with
#      fumi's perturb, then highprec, on the calls of part 5d (bench/torch_step.py
#      --profile-top), and the same steps without fumi: the kernels, runtime and driver calls
#      with the most time, and their counts.
# From a build of this checkout (FUMI_BUILD_DIR, default build/: libfumi, the plugins, the CLI
# and the CUDA test programs). The CUDA libraries are looked up in the Python's nvidia wheels
# and under /usr/local/cuda*. Each part's log goes to OUT (default: a new temporary directory);
# a line per part says how it ended. Exits 0 with a message where no GPU answers.
#
# Usage: scripts/gpu_suite.sh [--rounds R] [--skip-bench]   (PYTHON: the Python with torch,
#        default python3; R: the bench's rounds, default 2)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "${FUMI_BUILD_DIR:-$ROOT/build}" && pwd)
PY=${PYTHON:-python3}
ROUNDS=2 BENCH=1
while (($#)); do
  case $1 in
    --rounds) ROUNDS=${2:?--rounds needs a value}; shift ;;
    --skip-bench) BENCH=0 ;;
    -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "gpu_suite.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
export PYTHONUNBUFFERED=1
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/fumi-gpu.XXXXXX")}
mkdir -p "$OUT"
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null
then
  echo "gpu_suite.sh: $PY's torch sees no CUDA device: nothing to run"
  exit 0
fi
[[ -f $BUILD/lib/libfumi.so ]] || { echo "gpu_suite.sh: no libfumi in $BUILD (build first)" >&2; exit 2; }

# The CUDA libraries the test programs link (libcublas.so.13 ...), where the wheels or the
# toolkit keep them; torch's own libraries.
TORCH=$("$PY" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
SITE=$("$PY" -c 'import site; print(site.getsitepackages()[0])')
CUDA_LIBS=$(find /usr/local/cuda*/ "$SITE/nvidia" \( -name 'libcublas.so.13' -o \
  -name 'libcublasLt.so.13' -o -name 'libcudart.so.13' -o -name 'libcudnn.so.9' -o \
  -name 'libcupti.so.13' \) 2>/dev/null | xargs -r -n1 dirname | sort -u | tr '\n' ':')
export LD_LIBRARY_PATH=$CUDA_LIBS$TORCH/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
echo "gpu_suite.sh: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null |
  head -1); torch $("$PY" -c 'import torch; print(torch.__version__)'); logs in $OUT"

# A build directory beside the build: its libfumi, plugins, CLI and test programs (links),
# with an adapter of its own built against this torch.
STAGE=$(mktemp -d "${TMPDIR:-/tmp}/fumi-gpu-build.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/lib/fumi" "$STAGE/tests"
ln -s "$BUILD/lib/libfumi.so" "$STAGE/lib/libfumi.so"
ln -s "$BUILD/lib/fumi/plugins" "$STAGE/lib/fumi/plugins"
for d in bin bench; do [[ -d $BUILD/$d ]] && ln -s "$BUILD/$d" "$STAGE/$d"; done
[[ -d $BUILD/tests/plugins ]] && ln -s "$BUILD/tests/plugins" "$STAGE/tests/plugins"
[[ -f $BUILD/lib/libblas_user.so ]] && ln -s "$BUILD/lib/libblas_user.so" "$STAGE/lib/"
cp "$BUILD/CMakeCache.txt" "$STAGE/" 2>/dev/null

status=0
part() {  # part NAME COMMAND...: runs it, its output in OUT/NAME.log, one line of outcome
  local name=$1 rc
  shift
  "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  echo "gpu_suite.sh: $name: $([[ $rc == 0 ]] && echo passed || echo "FAILED (rc $rc)")" \
       "— $(grep -E '^(Ran|OK|FAILED)' "$OUT/$name.log" | tr '\n' ' ')"
  ((rc == 0)) || status=1
}
if ! bash "$ROOT/scripts/build_adapter.sh" "$STAGE/lib" "$PY" >"$OUT/adapter.log" 2>&1; then
  echo "gpu_suite.sh: the adapter did not build against this torch (see $OUT/adapter.log)"
  exit 1
fi
export FUMI_BUILD=$STAGE FUMI_SOURCE=$ROOT FUMI_TEST_PLUGIN_DIR=$STAGE/tests/plugins
export FUMI_TEST_PYTHON=$PY
B=$BUILD/bin
part ongpu env -C "$ROOT/tests/cuda" CUDA_GEMM="$B/cuda_gemm" CUDA_CONV="$B/cuda_conv" \
  CUDA_NORM="$B/cuda_norm" CUDA_GRAPH="$B/cuda_graph" RP_MAIN="$B/rp_main" \
  LOCAL_SCOPE="$B/local_scope" BLAS_DEMO="$B/blas_demo" BLAS_USER="$BUILD/lib/libblas_user.so" \
  "$PY" test_cuda.py --gpu
part oncuda env -C "$ROOT/tests/torch" "$PY" test_torch.py -v OnCuda
if ((BENCH)); then
  FUMI_BUILD_DIR=$STAGE PYTHON=$PY bash "$ROOT/bench/fumi_compare.sh" --no-build --device cuda \
    --rounds "$ROUNDS" >"$OUT/compare.md" 2>"$OUT/compare.log" ||
    { echo "gpu_suite.sh: bench FAILED (see $OUT/compare.log)"; status=1; }
  grep '^|' "$OUT/compare.md"
  FUMI_BUILD_DIR=$BUILD PYTHON=$PY bash "$ROOT/bench/gpu.sh" >"$OUT/gpu.md" 2>"$OUT/gpu.log" ||
    { echo "gpu_suite.sh: bench/gpu.sh FAILED (see $OUT/gpu.log)"; status=1; }
  grep '^|' "$OUT/gpu.md"
fi
# Where a check's time goes (part 4): the calls fumi_compare checks, profiled.
for check in none perturb highprec; do
  policy=$OUT/profile-$check.yaml
  [[ $check == none ]] || printf '%s\n' 'version: 1' 'report: { log_level: warn }' 'rules:' \
    '  - name: fumi-wraps' '    match:' \
    '      op: [aten::conv2d, aten::batch_norm, aten::relu_, aten::relu, aten::max_pool2d,' \
    '           aten::adaptive_avg_pool2d, aten::linear, aten::cross_entropy_loss]' \
    '      phase: forward' '    sample: { every: 1 }' \
    "    checks: [ { plugin: $check, tolerance: 1e9 } ]" >"$policy"
  run=(env LD_PRELOAD="$STAGE/lib/libfumi.so" FUMI_POLICY="$policy" FUMI_OUT="$OUT/profile-$check")
  [[ $check == none ]] && run=(env)
  "${run[@]}" "$PY" "$ROOT/bench/torch_step.py" --device cuda --steps 2 --warmup 2 \
    --count-copies --profile-top 12 >"$OUT/profile-$check.log" 2>&1 ||
    { echo "gpu_suite.sh: profile ($check) FAILED (see $OUT/profile-$check.log)"; status=1; }
  echo "gpu_suite.sh: two steps profiled, $([[ $check == none ]] && echo 'without fumi' ||
    echo "fumi $check on 61 calls a step"):"
  grep -E '^(profile|d2h_copies)' "$OUT/profile-$check.log"
done
exit $status
