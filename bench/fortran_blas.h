// fortran_blas.h — the Fortran sgemm_ entry point as the benchmarks call it (gfortran ABI:
// hidden CHARACTER lengths last). Defined by OpenBLAS or by bench/nullblas.c.
#pragma once

#include <cstddef>

extern "C" void sgemm_(const char* ta, const char* tb, const int* m, const int* n, const int* k,
                       const float* alpha, const float* a, const int* lda, const float* b,
                       const int* ldb, const float* beta, float* c, const int* ldc, size_t la,
                       size_t lb);
