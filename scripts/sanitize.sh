#!/usr/bin/env bash
# scripts/sanitize.sh asan|tsan — build libfumi, the plugins, the simulated CUDA device (CUPTI
# included) and the test programs with AddressSanitizer or ThreadSanitizer, then run them under
# libfumi with every check on every call: the unit tests, blas_demo's modes, cuda_gemm's
# modes (async and sync), and the cuDNN programs (cuda_conv, cuda_norm, cuda_graph). Prints one line per run (with the checks that passed: a run without
# any counts as a failure) and every sanitizer report; exits 1 if any.
# Not part of CI (a sanitizer build takes ~10 min on 2 cores). Build dir: FUMI_SAN_DIR
# (default build-<kind>). Needs what scripts/setup.sh installs.
set -euo pipefail
kind=${1:-}
case $kind in
  asan) flags="-fsanitize=address -fno-omit-frame-pointer"; rt=libasan.so
        export ASAN_OPTIONS=detect_leaks=0 ;;  # fumi leaks its process-lifetime state on purpose
  tsan) flags="-fsanitize=thread"; rt=libtsan.so.2
        export TSAN_OPTIONS="report_signal_unsafe=0 halt_on_error=0" ;;
  *) echo "usage: $0 asan|tsan" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
dir=${FUMI_SAN_DIR:-build-$kind}
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="$flags" \
      -DCMAKE_C_FLAGS="$flags" -DFUMI_BUILD_BENCH=OFF -DFUMI_LIBC_WRAPPERS=OFF >/dev/null
targets=(fumi fumi_unit_tests blas_demo fumi_nan_inf fumi_highprec fumi_reference
         fumi_determinism fumi_perturb fumi_checksum)
have_cuda=0  # the CUDA backend and its tests exist only where CMake found the toolkit
if [[ $(cmake --build "$dir" --target help) == *" cuda_gemm"* ]]; then
  have_cuda=1
  targets+=(cuda_gemm fumi_sim_cudart fumi_sim_cublaslt fumi_sim_cublas fumi_sim_cupti fumi_sim_cuda)
  if [[ $(cmake --build "$dir" --target help) == *" cuda_graph"* ]]; then
    targets+=(cuda_conv cuda_norm cuda_graph fumi_sim_cudnn)
  fi
fi
cmake --build "$dir" -j"$(nproc)" --target "${targets[@]}" >/dev/null

runtime=$(gcc -print-file-name="$rt")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
checks='[ { plugin: nan_inf }, { plugin: highprec, tolerance: 1e-4 }, { plugin: reference, tolerance: 1e-4 }, { plugin: determinism }, { plugin: perturb, trials: 2, tolerance: 1 }, { plugin: checksum, tolerance: 1e-4 } ]'
for ops in '"*gem*"' '"cublas*"' '"cudnn*"'; do
  printf 'version: 1\nreport: { all_checks: true }\nrules:\n  - match: { op: %s }\n    sample: { every: 1 }\n    checks: %s\n' \
    "$ops" "$checks" >"$work/policy-${ops//[^a-z]/}.yaml"
done

reports=0
# run NAME POLICY PRELOAD CMD...: one program under libfumi and the sanitizer.
run() {
  local name=$1 policy=$2 preload=$3; shift 3
  local out=$work/out-${name//[^a-zA-Z0-9]/_}
  local rc=0
  env FUMI_POLICY="$policy" FUMI_OUT="$out" FUMI_CUDA_QUEUE=1024 \
      LD_PRELOAD="$runtime:$dir/lib/libfumi.so${preload:+:$preload}" "$@" \
      >"$out.stdout" 2>"$out.stderr" || rc=$?
  local found
  found=$(grep -c -E '^(==[0-9]+==ERROR: AddressSanitizer|WARNING: ThreadSanitizer)' "$out.stderr" || true)
  local checks
  checks=$(cat "$out"/events-*.jsonl 2>/dev/null | grep -c '"event":"check"' || true)
  # With the driver stand-in preloaded, fumi's own kernels must have run (not said to be off).
  local kernels_off=0
  [[ $preload == *libcuda.so.1* ]] && grep -q "device kernels are off" "$out.stderr" &&
    kernels_off=1
  printf '%-28s rc=%-3s checks passed=%-5s sanitizer reports=%s\n' "$name" "$rc" "$checks" "$found"
  if [[ $found != 0 || $rc != 0 || $checks == 0 || $kernels_off != 0 ]]; then
    reports=$((reports + 1))
    grep -A25 -E 'ERROR: AddressSanitizer|WARNING: ThreadSanitizer' "$out.stderr" | head -60 || tail -20 "$out.stderr"
  fi
}

# The unit tests load nothing through LD_PRELOAD but the runtime itself.
rc=0
LD_PRELOAD="$runtime" "$dir/bin/fumi_unit_tests" >"$work/unit.log" 2>&1 || rc=$?
found=$(grep -c -E 'ERROR: AddressSanitizer|WARNING: ThreadSanitizer' "$work/unit.log" || true)
printf '%-28s rc=%-3s %-19s sanitizer reports=%s\n' "unit tests" "$rc" "" "$found"
[[ $rc == 0 && $found == 0 ]] || { reports=$((reports + 1)); tail -40 "$work/unit.log"; }

for mode in ill well layouts "loop 50" fork_term empty; do
  # shellcheck disable=SC2086
  run "blas_demo $mode" "$work/policy-gem.yaml" "" "$dir/bin/blas_demo" $mode
done
if [[ $have_cuda == 1 ]]; then
  sim=$dir/tests/simdevice/lib
  # libcuda.so.1: the driver stand-in that runs fumi's own kernels (docs/cuda.md).
  preload="$sim/libcudart.so.13:$sim/libcublasLt.so.13:$sim/libcublas.so.13:$sim/libcupti.so.13"
  preload+=":$sim/libcuda.so.1"
  for mode in sweep tf32 fault large device-scalars capture errors poolrace exit profiler; do
    run "cuda_gemm $mode" "$work/policy-cublas.yaml" "$preload" "$dir/bin/cuda_gemm" "$mode"
  done
  FUMI_CUDA_MODE=sync run "cuda_gemm sweep (sync)" "$work/policy-cublas.yaml" "$preload" \
    "$dir/bin/cuda_gemm" sweep
  FUMI_SIM_FAULTS=wrong:f32:7x6x5,nan:f32:9x3x4 run "cuda_gemm fault (planted)" \
    "$work/policy-cublas.yaml" "$preload" "$dir/bin/cuda_gemm" fault
  if [[ -x $dir/bin/cuda_graph ]]; then  # cuDNN: legacy convolutions, batch norm, backend graphs
    preload="$sim/libcudart.so.13:$sim/libcudnn.so.9:$sim/libcuda.so.1"
    run "cuda_conv sweep" "$work/policy-cudnn.yaml" "$preload" "$dir/bin/cuda_conv" sweep
    run "cuda_conv large" "$work/policy-cudnn.yaml" "$preload" "$dir/bin/cuda_conv" large
    run "cuda_norm sweep" "$work/policy-cudnn.yaml" "$preload" "$dir/bin/cuda_norm" sweep
    for mode in sweep ops autotune; do
      run "cuda_graph $mode" "$work/policy-cudnn.yaml" "$preload" "$dir/bin/cuda_graph" "$mode"
    done
  fi
fi
echo "$kind: $reports run(s) with sanitizer reports or failures"
[[ $reports == 0 ]]
