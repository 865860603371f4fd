// cuda_api.cpp — resolving the table of cuda_api.def once.
#include "cuda_api.h"

#include <mutex>

#include "resolve.h"

namespace fumi::cuda {

const CudaApi* cudaApi(const char** missing) {
  static CudaApi api;
  static const char* absent = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
#define FUMI_CUDA_FN(name, ret, params)                                    \
  api.name = reinterpret_cast<ret(*) params>(resolveReal(#name));         \
  if (!api.name && !absent) absent = #name;
#include "cuda_api.def"
#undef FUMI_CUDA_FN
  });
  if (missing) *missing = absent;
  return absent ? nullptr : &api;
}

}  // namespace fumi::cuda
