# bench/common.sh — what every benchmark script sets up, written once. Sourced (not run) by
# bench/run.sh and bench/torch.sh after `set -euo pipefail`.
#
#   ROOT, BUILD, PYTHON     repository, build directory (FUMI_BUILD_DIR), interpreter (PYTHON)
#   bench_setup NAME        after the build: BUILD_TYPE; a private TMP removed at exit (NAME in
#                           the failure message); an environment without fumi settings
#   bench_machine           cpu, os and load1 (the 1-minute load average now)
#   bench_busy              succeeds when load1 is above half the CPUs
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${FUMI_BUILD_DIR:-$ROOT/build}
PYTHON=${PYTHON:-/usr/bin/python3}
# glibc's malloc thresholds pinned (--pin-malloc of torch.sh and fumi_compare.sh): glibc moves its
# mmap threshold up to the largest block freed so far (and the trim threshold to twice that);
# fixed values stop both moves, so each mode pays the same page faults per step.
MALLOC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824

bench_setup() {
  BUILD_TYPE=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$BUILD/CMakeCache.txt" 2>/dev/null || true)
  # Configured without one (as run.sh does): CMakeLists.txt then builds RelWithDebInfo.
  [[ -f $BUILD/CMakeCache.txt && -z $BUILD_TYPE ]] && BUILD_TYPE="RelWithDebInfo (default)"
  TMP=$(mktemp -d "${TMPDIR:-/tmp}/fumi-bench-$1.XXXXXX")
  BENCH_NAME=$1
  trap 'rm -rf "$TMP"' EXIT
  trap 'echo "$BENCH_NAME: failed at line $LINENO (outputs in $TMP are removed on exit)" >&2' ERR
  # Environment without any fumi setting a caller may have exported.
  unset LD_PRELOAD FUMI_POLICY FUMI_OUT FUMI_DISABLE FUMI_LOG_LEVEL FUMI_PLUGIN_PATH FUMI_ON_ERROR
}

bench_machine() {
  cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
  os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME" || uname -s)
  read -r load1 _ </proc/loadavg
}

bench_busy() {
  awk -v l="$load1" -v n="$(nproc)" 'BEGIN{exit !(l > n / 2)}'
}
