// torch_compat.h — every PyTorch-version difference the adapter depends on, in one place.
// The adapter is compiled against the installed libtorch (1.13 on the machines here; 2.x on GPU
// clusters) and uses only what this header names. docs/architecture.md lists what was checked.
//
//   RecordFunction::inputs()   <= 1.9: const std::vector<IValue>&; >= 1.10: ArrayRef<const IValue>.
//                              Both index and size() alike: inputsOf() hides which.
//   RecordFunction::name()     >= 1.10: const char*; older: a StringView.
//   OperatorHandle::hasTag     >= 1.13 (tags in native_functions.yaml); older: never seeded.
//   InferenceMode              >= 1.9.
//   Argument::alias_info()     older: const c10::optional<AliasInfo>&; newer: const AliasInfo*.
//                              Both test and dereference alike: returnsView() uses either.
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

// Ops that return only views of their inputs (as_strided, select, t, expand, detach, unbind):
// every return carries an alias annotation that is not a write (`Tensor(a)`; in-place and out=
// ops return `Tensor(a!)`). alias_info() is an optional in older releases, a pointer in newer
// ones: both test and dereference alike.
inline bool returnsView(const c10::FunctionSchema& schema) {
  const auto& returns = schema.returns();
  if (returns.empty()) return false;
  for (const c10::Argument& r : returns) {
    const auto& alias = r.alias_info();
    if (!alias || alias->isWrite()) return false;
  }
  return true;
}

// Ops that change only a tensor's metadata in place (tag inplace_view: as_strided_, resize_,
// unsqueeze_, squeeze_, t_, transpose_, detach_, ...): like views, they compute no values.
// Kernels restride or resize the fresh, unwritten memory of their results with them (max.dim's
// unsqueeze_ -> as_strided_) before filling it. Torch releases without the tag: none known.
inline bool changesOnlyMetadata(const c10::OperatorHandle& op) {
#if TORCH_VERSION_MAJOR >= 2 || TORCH_VERSION_MINOR >= 13
  return op.hasTag(at::Tag::inplace_view);
#else
  (void)op;
  return false;
#endif
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
