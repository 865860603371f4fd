#!/usr/bin/env bash
# scripts/build_adapter.sh — the PyTorch adapter (libfumi_torch.so) built by hand against the
# torch of a Python other than the one CMake found (a GPU machine's PyTorch 2.x wheel), into
# LIBDIR/fumi/, beside the libfumi.so of LIBDIR that loads it from there. The adapter refuses a
# torch other than the one it was built against, so build it where the job runs. Needs g++ and
# CMake (cmake/torch_api.cmake reads which torch APIs the headers offer); the wheel brings the
# headers. The flags are the adapter's CMake target's (interposer/torch/CMakeLists.txt).
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
fast=(-O3 -fno-trapping-math -fopenmp-simd -DFUMI_OPENMP_SIMD=1)
echo "build_adapter.sh: torch $("$PY" -c 'import torch; print(torch.__version__)') (${api[*]})"
g++ "${flags[@]}" -c "$T/fumi_torch.cpp" -o "$OBJ/fumi_torch.o" &
g++ "${flags[@]}" -c "$T/wide_conv.cpp" -o "$OBJ/wide_conv.o" &
g++ "${flags[@]}" "${fast[@]}" -c "$T/wide_ops.cpp" -o "$OBJ/wide_ops.o" &
g++ "${flags[@]}" "${fast[@]}" -c "$T/winograd.cpp" -o "$OBJ/winograd.o" &
for job in $(jobs -p); do wait "$job"; done
mkdir -p "$LIBDIR/fumi"
g++ -shared -o "$LIBDIR/fumi/libfumi_torch.so" "$OBJ"/*.o -L"$TORCH/lib" -ltorch_cpu -lc10 \
  "-Wl,--version-script=$T/fumi_torch.map" "-Wl,-rpath,$TORCH/lib"
echo "build_adapter.sh: $LIBDIR/fumi/libfumi_torch.so"
