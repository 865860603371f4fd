// cuda_api.h — the CUDA runtime functions libfumi calls itself (table in cuda_api.def), typed
// from the real CUDA headers and resolved at run time in the process: libfumi never links a
// CUDA library, so programs without CUDA never load one because of it. The libraries' own
// tables (cublas_fns.h, cudnn_fns.h) are resolved the same way (resolvedTable).
#pragma once

#include <cuda_runtime_api.h>

#include <mutex>

#include "resolve.h"

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

// One table entry resolved in the process; the first name not found goes to `absent`.
template <class Fn>
void resolveInto(Fn& slot, const char* name, const char*& absent) {
  slot = reinterpret_cast<Fn>(resolveReal(name));
  if (!slot && !absent) absent = name;
}

// A table of functions resolved once, by `Fill` (a resolveInto per row): the table, or nullptr
// when one is missing (`missing`, optional, receives its name).
template <class Api, void (*Fill)(Api&, const char*&)>
const Api* resolvedTable(const char** missing) {
  static Api api;
  static const char* absent = nullptr;
  static std::once_flag once;
  std::call_once(once, [] { Fill(api, absent); });
  if (missing) *missing = absent;
  return absent ? nullptr : &api;
}

}  // namespace fumi::cuda
