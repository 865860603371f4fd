// wide_pool.h — fumi's own fp64 max pooling on the CPU, for the wider reruns of highprec and
// attribution: aten's CPU max_pool2d took as long in fp64 as the program's own fp32 call (5.9 ms
// for resnet18's one call at 64×64 inputs, batch 8, on an AVX2 EPYC: a sixth of the f64 reruns'
// time outside the convolutions), where a plain loop over the windows takes a tenth of that.
// Max pooling is exact: the result is the same fp64 values whichever loop computes them.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace fumi::wide_pool {

// aten::max_pool2d of x ((N,) C, H, W), fp64, on the CPU, contiguous: the result as aten's,
// NaN where a window holds one; undefined for anything else (other dtypes and layouts,
// arguments aten rejects).
at::Tensor maxPool2d(const at::Tensor& x, c10::IntArrayRef kernel, c10::IntArrayRef stride,
                     c10::IntArrayRef padding, c10::IntArrayRef dilation, bool ceil_mode);

// When `op` is aten::max_pool2d and maxPool2d takes its arguments on `stack`, replaces them by
// the result, as OperatorHandle::callBoxed would, and returns true; otherwise leaves the stack
// and returns false.
bool run(const c10::OperatorHandle& op, torch::jit::Stack& stack);

}  // namespace fumi::wide_pool
