// cudnn_fns.h — the cuDNN functions libfumi calls itself (table in cudnn_fns.def), typed from
// the real cuDNN 9 headers and resolved at run time like cuda_api.h: libfumi never links
// libcudnn. Only the cuDNN hooks use it, so a process without cuDNN never resolves it.
#pragma once

#include <cudnn.h>

#include "cuda_api.h"

namespace fumi::cuda {

struct CudnnApi {
#define FUMI_CUDA_FN(name, ret, params) ret(*name) params = nullptr;
#define FUMI_CUDA_OPTIONAL_FN FUMI_CUDA_FN
#include "cudnn_fns.def"
#undef FUMI_CUDA_OPTIONAL_FN
#undef FUMI_CUDA_FN
};

// Every function of the table, or nullptr when the process lacks one (`missing`: its name);
// defined with the hooks (hooks/cudnn.cpp).
const CudnnApi* cudnnApi(const char** missing = nullptr);

}  // namespace fumi::cuda
