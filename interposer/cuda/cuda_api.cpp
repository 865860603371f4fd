// cuda_api.cpp — resolving the table of cuda_api.def once.
#include "cuda_api.h"

namespace fumi::cuda {

namespace {
void fill(CudaApi& api, const char*& absent) {
#define FUMI_CUDA_FN(name, ret, params) resolveInto(api.name, #name, absent);
#include "cuda_api.def"
#undef FUMI_CUDA_FN
}
}  // namespace

const CudaApi* cudaApi(const char** missing) { return resolvedTable<CudaApi, fill>(missing); }

}  // namespace fumi::cuda
