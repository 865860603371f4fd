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
//   TF32 settings              <= 2.8: allowTF32CuDNN(), allowTF32CuBLAS(); 2.9: float32Precision
//                              ("cuda", op) strings; newer: Float32Backend/Float32Op enums (the
//                              old getters may warn or throw there). FUMI_TORCH_FP32_API (0, 1,
//                              2) says which, read from ATen/Context.h by CMake: allowsTF32().
//   autocast state             <= 2.3: is_cpu_enabled(), is_enabled() (CUDA), their dtypes;
//                              newer: is_autocast_enabled(device type), get_autocast_dtype(),
//                              the old ones deprecated (a Python warning in the program's
//                              output). FUMI_TORCH_AUTOCAST_API (0, 1), from ATen/autocast_mode.h.
//   a stream's native handle   newer: c10::Stream::stream_handle(); some 2.x: native_handle();
//                              1.13: none (the default stream, id 0, is CUDA's legacy default
//                              stream, NULL). FUMI_TORCH_STREAM_API (2, 1, 0), from
//                              c10/core/Stream.h: currentCudaStream().
#pragma once

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/api/include/torch/version.h>

#if TORCH_VERSION_MAJOR < 1 || (TORCH_VERSION_MAJOR == 1 && TORCH_VERSION_MINOR < 10)
#error "the fumi PyTorch adapter needs torch >= 1.10"
#endif

#ifndef FUMI_TORCH_FP32_API
#define FUMI_TORCH_FP32_API 0
#endif
#ifndef FUMI_TORCH_AUTOCAST_API
#define FUMI_TORCH_AUTOCAST_API 0
#endif
#ifndef FUMI_TORCH_STREAM_API
#define FUMI_TORCH_STREAM_API 0
#endif

namespace fumi::torch_compat {

// Whether the calling thread is in an autocast region for ops on `device` (CPU or CUDA), and
// its dtype.
// Whether autocast has a kernel of its own for `op` on `device` (an op on its lists: it casts
// the inputs, down or up); every other op falls through autocast and runs on its inputs' own
// dtypes (batch norm's backward on bf16 activations and f32 statistics).
inline bool autocastKernel(const c10::OperatorHandle& op, c10::DeviceType device) {
  return op.hasKernelForDispatchKey(device == c10::DeviceType::CUDA
                                        ? c10::DispatchKey::AutocastCUDA
                                        : c10::DispatchKey::AutocastCPU);
}

inline bool autocastDtype(c10::DeviceType device, c10::ScalarType* dtype) {
#if FUMI_TORCH_AUTOCAST_API == 1
  if (!at::autocast::is_autocast_enabled(device)) return false;
  *dtype = at::autocast::get_autocast_dtype(device);
  return true;
#else
  if (device == c10::DeviceType::CPU && at::autocast::is_cpu_enabled()) {
    *dtype = at::autocast::get_autocast_cpu_dtype();
    return true;
  }
  if (device == c10::DeviceType::CUDA && at::autocast::is_enabled()) {
    *dtype = at::autocast::get_autocast_gpu_dtype();
    return true;
  }
  return false;
#endif
}

// Families of CUDA ops that torch lets compute f32 in TF32, each with its own setting.
enum class Tf32Family { kNone, kConv, kMatmul, kRnn };

// Whether torch's settings let f32 ops of `family` on a CUDA device compute in TF32 (its
// defaults: convolutions and RNNs yes, matmuls no).
inline bool allowsTF32(Tf32Family family) {
  if (family == Tf32Family::kNone) return false;
  at::Context& ctx = at::globalContext();
#if FUMI_TORCH_FP32_API == 2
  const at::Float32Op op = family == Tf32Family::kConv     ? at::Float32Op::CONV
                           : family == Tf32Family::kMatmul ? at::Float32Op::MATMUL
                                                           : at::Float32Op::RNN;
  return ctx.float32Precision(at::Float32Backend::CUDA, op) == at::Float32Precision::TF32;
#elif FUMI_TORCH_FP32_API == 1
  const char* op = family == Tf32Family::kConv     ? "conv"
                   : family == Tf32Family::kMatmul ? "matmul"
                                                   : "rnn";
  return ctx.float32Precision("cuda", op) == "tf32";
#else
  return family == Tf32Family::kMatmul ? ctx.allowTF32CuBLAS() : ctx.allowTF32CuDNN();
#endif
}

// The cudaStream_t of the current stream of `device` (a CUDA device), in *handle: false where
// `device` is not the calling thread's current device, or where this torch cannot say (a
// stream other than the default one, without a native handle).
inline bool currentCudaStream(c10::Device device, void** handle) {
  const c10::impl::DeviceGuardImplInterface* impl = c10::impl::getDeviceGuardImpl(device.type());
  if (impl->getDevice() != device) return false;
  const c10::Stream stream = impl->getStream(device);
#if FUMI_TORCH_STREAM_API == 2
  *handle = stream.stream_handle();
  return true;
#elif FUMI_TORCH_STREAM_API == 1
  *handle = stream.native_handle();
  return true;
#else
  *handle = nullptr;
  return stream.id() == 0;
#endif
}

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

// A nested tensor (torch.nested): strided over a storage, but without sizes or strides to read
// (asking throws).
inline bool nested(const at::Tensor& t) {
  return t.key_set().has(c10::DispatchKey::NestedTensor);
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
