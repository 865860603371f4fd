# torch_adapter.cmake — the PyTorch adapter's sources (interposer/torch/) and the options its
# vectorised fp64 kernels build with, listed once: include()d by interposer/torch/CMakeLists.txt
# (fumi_wide_kernels), or run as `cmake -P cmake/torch_adapter.cmake` to print them for
# scripts/build_adapter.sh, one line each: the adapter's own source, the kernels', the
# vectorised kernels', their options.
#   FUMI_ADAPTER_SOURCE          the adapter itself (libfumi_torch.so only)
#   FUMI_WIDE_SOURCES            its fp64 kernels for wider reruns (the adapter and the test ops)
#   FUMI_WIDE_FAST_SOURCES       those of them built at -O3 without trapping math, so that their
#                                selects become blends and their sums vector reductions
#   FUMI_WIDE_FAST_OPTIONS       the options (and definitions, as -D) those are built with
set(FUMI_ADAPTER_SOURCE fumi_torch.cpp)
set(FUMI_WIDE_SOURCES wide_conv.cpp wide_ops.cpp winograd.cpp)
set(FUMI_WIDE_FAST_SOURCES wide_ops.cpp winograd.cpp)
set(FUMI_WIDE_FAST_OPTIONS -O3 -fno-trapping-math -fopenmp-simd -DFUMI_OPENMP_SIMD=1)
if(CMAKE_SCRIPT_MODE_FILE)
  foreach(list FUMI_ADAPTER_SOURCE FUMI_WIDE_SOURCES FUMI_WIDE_FAST_SOURCES
          FUMI_WIDE_FAST_OPTIONS)
    string(JOIN " " line ${${list}})
    execute_process(COMMAND ${CMAKE_COMMAND} -E echo "${line}")
  endforeach()
endif()
