#!/usr/bin/env bash
# scripts/build_adapter.sh — the PyTorch adapter (libfumi_torch.so) built by hand against the
# torch of a Python other than the one CMake found (a GPU machine's PyTorch 2.x wheel), into
# LIBDIR/fumi/, beside the libfumi.so of LIBDIR that loads it from there. The adapter refuses a
# torch other than the one it was built against, so build it where the job runs. Needs g++ and
# CMake (cmake/torch_api.cmake reads which torch APIs the headers offer); the wheel brings the
# headers. The sources and the kernels' options are cmake/torch_adapter.cmake's, as for the
# adapter's CMake target (interposer/torch/CMakeLists.txt).
#
# Usage: scripts/build_adapter.sh LIBDIR [PYTHON]     (PYTHON default: python3)
set -euo pipefail
LIBDIR=${1:?usage: scripts/build_adapter.sh LIBDIR [PYTHON]}
PY=${2:-python3}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TORCH=$("$PY" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
ABI=$("$PY" -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
read -r -a api < <(cmake -DFUMI_TORCH_INCLUDE="$TORCH/include" -P "$ROOT/cmake/torch_api.cmake")
T=$ROOT/interposer/torch
OBJ=$(mktemp -d)
trap 'rm -rf "$OBJ"' EXIT
flags=(-std=c++17 -O2 -fPIC -DNDEBUG "-D_GLIBCXX_USE_CXX11_ABI=$ABI" "${api[@]}"
       "-I$ROOT/interposer" "-I$ROOT/include" "-I$ROOT/plugins/common" -isystem "$TORCH/include"
       -isystem "$TORCH/include/torch/csrc/api/include")
{ read -r -a sources; read -r -a wide; read -r -a fast_sources; read -r -a fast; } \
  < <(cmake -P "$ROOT/cmake/torch_adapter.cmake")
echo "build_adapter.sh: torch $("$PY" -c 'import torch; print(torch.__version__)') (${api[*]})"
for src in "${sources[@]}" "${wide[@]}"; do
  options=()
  [[ " ${fast_sources[*]} " == *" $src "* ]] && options=("${fast[@]}")
  g++ "${flags[@]}" "${options[@]}" -c "$T/$src" -o "$OBJ/${src%.cpp}.o" &
done
for job in $(jobs -p); do wait "$job"; done
mkdir -p "$LIBDIR/fumi"
g++ -shared -o "$LIBDIR/fumi/libfumi_torch.so" "$OBJ"/*.o -L"$TORCH/lib" -ltorch_cpu -lc10 \
  "-Wl,--version-script=$T/fumi_torch.map" "-Wl,-rpath,$TORCH/lib"
echo "build_adapter.sh: $LIBDIR/fumi/libfumi_torch.so"
