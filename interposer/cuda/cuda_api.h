// cuda_api.h — the CUDA runtime/cuBLAS/cuBLASLt functions libfumi calls itself (table in
// cuda_api.def), typed from the real CUDA headers and resolved at run time in the process:
// libfumi never links a CUDA library, so programs without CUDA never load one because of it.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

namespace fumi::cuda {

struct CudaApi {
#define FUMI_CUDA_FN(name, ret, params) ret(*name) params = nullptr;
#include "cuda_api.def"
#undef FUMI_CUDA_FN
};

// Every function of the table, or nullptr when the process lacks one (then fumi cannot check
// CUDA calls: the program's libraries are not the CUDA libraries fumi was built for). The
// first call resolves; `missing` (optional) receives the first name not found.
const CudaApi* cudaApi(const char** missing = nullptr);

}  // namespace fumi::cuda
