// known_ops.cpp — op names of every hook table, for policy validation.
#include <string>
#include <vector>

#include "policy.h"

namespace fumi {

const std::vector<std::string>& knownOpNames() {
  static const std::vector<std::string> kNames = {
#define FUMI_HOOK(name, ...) #name,
#include "hooks/blas.def"
#include "hooks/cublas.def"
#include "hooks/cudnn.def"
#include "hooks/cudnn_norm.def"
#define FUMI_PASS_HOOK(...)  // bookkeeping, not ops
#include "hooks/cudnn_backend.def"
#undef FUMI_PASS_HOOK
#undef FUMI_HOOK
  };
  return kNames;
}

}  // namespace fumi
