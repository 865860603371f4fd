// cublas_fns.h — the cuBLAS/cuBLASLt functions libfumi calls itself (table in cublas_fns.def),
// resolved at run time like cuda_api.h. Only the cuBLAS hooks use it.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include "cuda_api.h"

namespace fumi::cuda {

struct BlasApi {
#define FUMI_CUDA_FN(name, ret, params) ret(*name) params = nullptr;
#include "cublas_fns.def"
#undef FUMI_CUDA_FN
};

// Every function of the table, or nullptr when the process lacks one (`missing`: its name);
// defined with the hooks (hooks/cublas.cpp).
const BlasApi* blasApi(const char** missing = nullptr);

}  // namespace fumi::cuda
