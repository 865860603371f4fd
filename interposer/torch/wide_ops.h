// wide_ops.h — fumi's own fp64 kernels on the CPU for ops other than convolutions
// (wide_conv.h), for the wider reruns of highprec and attribution, where aten's fp64 kernel is
// slow: measured on an AVX2 EPYC at resnet18's shapes (64×64 inputs, batch 8), aten's
// max_pool2d took as long in fp64 as the program's own fp32 call (5.3 ms, fumi's 1.8), and its
// training batch norm ran at 3.4 ns an element in fp32 and fp64 alike.
//   max_pool2d  exact: the same fp64 values as aten's, bit for bit (the first of equal maxima,
//               a window's NaN).
//   batch_norm, native_batch_norm  the batch's (training) or the running statistics, in fp64
//               sums; the running statistics updated as aten does. Not aten's bits: the same
//               values to fp64 rounding, which is all a reference for narrower calls needs.
#pragma once

#include <array>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace fumi::wide_ops {

// aten::max_pool2d of x ((N,) C, H, W), fp64, on the CPU, contiguous: the result as aten's,
// NaN where a window holds one; undefined for anything else (other dtypes and layouts,
// arguments aten rejects).
at::Tensor maxPool2d(const at::Tensor& x, c10::IntArrayRef kernel, c10::IntArrayRef stride,
                     c10::IntArrayRef padding, c10::IntArrayRef dilation, bool ceil_mode);

// aten::native_batch_norm of x (N, C, ...), fp64, contiguous, on the CPU, with weight, bias,
// running_mean and running_var fp64 (C) where defined: (y, save_mean, save_invstd) as aten's
// (the last two empty in evaluation), the running statistics updated in training; all
// undefined where the arguments are outside its reach (then nothing is updated).
std::array<at::Tensor, 3> batchNorm(const at::Tensor& x, const at::Tensor& weight,
                                    const at::Tensor& bias, const at::Tensor& running_mean,
                                    const at::Tensor& running_var, bool training,
                                    double momentum, double eps);

// When `op` is aten::max_pool2d, aten::batch_norm or aten::native_batch_norm and the
// functions above take its arguments on `stack`, replaces them by the results, as
// OperatorHandle::callBoxed would, and returns true; otherwise leaves the stack and returns
// false.
bool run(const c10::OperatorHandle& op, torch::jit::Stack& stack);

}  // namespace fumi::wide_ops
