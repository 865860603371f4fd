#!/usr/bin/env bash
# Install fumi's build and test dependencies (Debian 12 packages only) and build it into
# build/ (or $FUMI_BUILD_DIR). Safe to rerun: installs only what is missing, builds
# incrementally. Uses sudo for apt-get when not root.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake binutils python3
  libyaml-cpp-dev libspdlog-dev libfmt-dev libboost-stacktrace-dev nlohmann-json3-dev
  libcli11-dev libgtest-dev libbenchmark-dev libopenblas-dev
  python3-torch libtorch-dev python3-torchvision python3-prometheus-client libpython3-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "fumi setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

BUILD_DIR="${FUMI_BUILD_DIR:-build}"
# FUMI_WERROR=ON (scripts/test.sh sets it) makes warnings errors: development and CI only.
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFUMI_WERROR="${FUMI_WERROR:-OFF}" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
echo "fumi setup: built in $BUILD_DIR (CLI: $BUILD_DIR/bin/fumi)"
