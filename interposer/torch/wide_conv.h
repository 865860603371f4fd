// wide_conv.h — fumi's own fp64 convolution on the CPU, for the wider reruns of highprec and
// attribution (the reference a convolution's float outputs are compared with).
//
// aten runs an fp64 convolution on the CPU with slow_conv2d (oneDNN has no fp64): one im2col
// and one GEMM per image. Where an image's output is small (resnet's later layers: 4×4 and 2×2
// at 64×64 inputs) those GEMMs are a few columns wide and run far below the BLAS's rate: a
// 512-channel 3×3 layer on 2×2 outputs took 27 ms in fp64 against 2.7 ms in fp32. Here the
// images are stacked into one GEMM (as many as fit in kColumnBytes of im2col rows),
// channels-last, so that each filter tap copies a run of channels: the same fp64 products,
// summed in another order. 3×3 stride-1 convolutions and their input and filter gradients,
// with enough channels and outputs, go through Winograd's F(2×2, 3×3) instead (winograd.h).
//
// Forward, backward and transposed; 1-D, 2-D and 3-D, any stride, padding, dilation, groups
// and bias; fp64 strided CPU tensors of any memory format (the functions return undefined
// tensors for anything else). run(), which the adapter's reruns go through, takes only what
// this file does faster than aten (measured here): one group, and not a stem (fewer than 8
// channels on 256 output positions or more, where aten's per-image GEMMs are wide enough and
// the tap copies here a few bytes each). Grouped and depthwise convolutions ran 1.3-5x slower
// as one small GEMM per group, and stay with aten.
#pragma once

#include <array>
#include <cstdint>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace fumi::wide_conv {

// im2col rows of at most this many bytes per GEMM (whole images where one fits, else part of
// one, at least 256 rows): aten's own fp64 path holds a whole batch's, and an image's alone can
// be hundreds of MB (a 9x9 filter over 64 channels of 96x96: 382 MB).
constexpr int64_t kColumnBytes = int64_t{32} << 20;

// The convolution of x (N, C, spatial...) with w (K, C/groups, filter...), plus bias (K) when
// defined; undefined when the arguments are outside what this file computes. The result is
// (N, K, output...), channels-first where x is contiguous, else channels-last. When the GEMM has
// fewer im2col rows than twice the filters (resnet's later layers), the rows follow the filter's
// own order, read from channels-first x, and the filter is not transposed. column_bytes bounds
// the im2col buffer (tests make it small to run the batch in several GEMMs).
at::Tensor forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                   c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
                   int64_t groups, int64_t column_bytes = kColumnBytes);

// The gradients of that convolution with respect to x, w and the bias (dx, dw, db) for dy, the
// gradient of its result, as aten::convolution_backward gives them where `mask` asks for them
// (undefined elsewhere); all undefined when the arguments are outside this file's reach. dx and
// dw come out channels-last: the adjoint GEMMs of forward()'s over the same im2col rows.
std::array<at::Tensor, 3> backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
                                   c10::IntArrayRef stride, c10::IntArrayRef padding,
                                   c10::IntArrayRef dilation, int64_t groups,
                                   std::array<bool, 3> mask,
                                   int64_t column_bytes = kColumnBytes);

// The transposed convolution of x (N, C_in, spatial...) by w (C_in, C_out/groups, filter...),
// plus bias
// (C_out) when defined: the input gradient of the plain convolution by w, through backward()'s
// GEMMs and col2im. Undefined where the arguments are outside this file's reach, and where the
// output padding reaches the stride (aten allows it up to the dilation: rows the plain
// convolution never reads).
at::Tensor transposed(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                      c10::IntArrayRef stride, c10::IntArrayRef padding,
                      c10::IntArrayRef output_padding, c10::IntArrayRef dilation, int64_t groups,
                      int64_t column_bytes = kColumnBytes);

// When `op` is aten::convolution (or its implementation step aten::_convolution, which a traced
// graph calls), aten::conv1d, conv2d or conv3d (the overloads with numeric padding) or
// aten::convolution_backward, its arguments on `stack` are within the reach of
// forward(), backward() or transposed(), and the convolution is one this file does faster
// (above), replaces them by the op's results, as OperatorHandle::callBoxed would, and returns
// true; otherwise leaves the stack and returns false.
bool run(const c10::OperatorHandle& op, torch::jit::Stack& stack);

// Whether t is a defined fp64 strided CPU tensor: what this file's and wide_ops.h's kernels read.
inline bool fp64Cpu(const at::Tensor& t) {
  return t.defined() && t.layout() == at::kStrided && t.device().is_cpu() &&
         t.scalar_type() == at::kDouble;
}

// For a run(): y as the op's one result on `stack`, as OperatorHandle::callBoxed leaves it, and
// true; false (the stack left as it is) where y is undefined (the arguments were declined).
inline bool replaceBy(torch::jit::Stack& stack, at::Tensor y) {
  if (!y.defined()) return false;
  stack.clear();
  stack.emplace_back(std::move(y));
  return true;
}

}  // namespace fumi::wide_conv
