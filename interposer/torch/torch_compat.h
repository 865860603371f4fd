// torch_compat.h — every PyTorch-version difference the adapter depends on, in one place.
// The adapter is compiled against the installed libtorch (1.13 on the machines here; 2.x on GPU
// clusters) and uses only what this header names. docs/architecture.md lists what was checked.
//
//   RecordFunction::inputs()   <= 1.9: const std::vector<IValue>&; >= 1.10: ArrayRef<const IValue>.
//                              Both index and size() alike: inputsOf() hides which.
//   RecordFunction::name()     >= 1.10: const char*; older: a StringView.
//   OperatorHandle::hasTag     >= 1.13 (tags in native_functions.yaml); older: never seeded.
//   InferenceMode              >= 1.9.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/api/include/torch/version.h>

#if TORCH_VERSION_MAJOR < 1 || (TORCH_VERSION_MAJOR == 1 && TORCH_VERSION_MINOR < 10)
#error "the fumi PyTorch adapter needs torch >= 1.10"
#endif

namespace fumi::torch_compat {

// The op's name as users know it ("aten::addmm", "Optimizer.step#SGD.step").
inline const char* opName(const at::RecordFunction& fn) { return fn.name(); }

// The op's inputs; valid only inside the start callback.
inline auto inputsOf(const at::RecordFunction& fn) { return fn.inputs(); }

// The op's outputs; valid inside the end callback of a callback that needs outputs.
inline const std::vector<c10::IValue>& outputsOf(const at::RecordFunction& fn) {
  return fn.outputs();
}

// Ops whose result depends on the random generator (dropout, bernoulli, randn, ...): a rerun
// cannot reproduce them, so they are never checked.
inline bool randomised(const c10::OperatorHandle& op) {
#if TORCH_VERSION_MAJOR >= 2 || TORCH_VERSION_MINOR >= 13
  return op.hasTag(at::Tag::nondeterministic_seeded);
#else
  (void)op;
  return false;
#endif
}

}  // namespace fumi::torch_compat
