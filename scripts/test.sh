#!/usr/bin/env bash
# Set up (dependencies + build) and run every test: unit, preload integration on real OpenBLAS,
# CLI, export list, PyTorch training. Extra arguments go to ctest (e.g. -R preload).
set -euo pipefail
cd "$(dirname "$0")/.."
FUMI_WERROR=ON scripts/setup.sh  # a development build: warnings are errors
cd "${FUMI_BUILD_DIR:-build}"
ctest --output-on-failure -j"$(nproc)" "$@"
