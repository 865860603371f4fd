#!/usr/bin/env bash
# Set up fumi, then run a real PyTorch training job (examples/train_mlp.py) under fumi with the
# embedded default policy, and print the per-op report.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR="${FUMI_BUILD_DIR:-build}"
OUT="${FUMI_DEMO_OUT:-fumi-out}"
"$BUILD_DIR/bin/fumi" run --out "$OUT" -- /usr/bin/python3 examples/train_mlp.py "$@"
"$BUILD_DIR/bin/fumi" report "$OUT"
