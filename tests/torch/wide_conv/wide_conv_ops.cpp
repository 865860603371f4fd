// Test-only torch ops over the adapter's fp64 convolution (interposer/torch/wide_conv.h):
//   fumi_test::wide_conv_forward  wide_conv::forward, with its im2col buffer bound
//   fumi_test::wide_conv_backward wide_conv::backward, likewise: (dx, dw, db), None where
//                                 the mask leaves one out
//   fumi_test::wide_conv_transposed  wide_conv::transposed, likewise
//   fumi_test::wide_conv_run      wide_conv::run on aten::convolution's, _convolution's or
//                                 conv2d's arguments: the result, or None where it declines
//   fumi_test::wide_conv_run_backward  the same on aten::convolution_backward's
//   fumi_test::wide_winograd     winograd.h's F(2×2, 3×3) itself on a 3×3 stride-1 convolution:
//                                 the result, or None where a result was not finite
//   fumi_test::wide_winograd_filter_grad  winograd.h's filter gradient of that convolution, for
//                                 dy: the gradient, or None where it was not finite
//   fumi_test::wide_pool_run      wide_ops::run on aten::max_pool2d's arguments: the result,
//                                 or None where it declines
//   fumi_test::wide_batch_norm_run  wide_ops::run on aten::batch_norm's or native_batch_norm's:
//                                 whether it took them, and the results (None: not returned)
#include <torch/library.h>

#include "wide_conv.h"
#include "wide_ops.h"
#include "winograd.h"

namespace {

at::Tensor forwardOp(const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& b,
                     at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                     int64_t groups, int64_t column_bytes) {
  at::Tensor y = fumi::wide_conv::forward(x, w, b ? *b : at::Tensor(), stride, padding, dilation,
                                          groups, column_bytes);
  TORCH_CHECK(y.defined(), "wide_conv::forward declined these arguments");
  return y;
}

std::tuple<c10::optional<at::Tensor>, c10::optional<at::Tensor>, c10::optional<at::Tensor>>
backwardOp(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w, at::IntArrayRef stride,
           at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
           std::array<bool, 3> mask, int64_t column_bytes) {
  const std::array<at::Tensor, 3> g = fumi::wide_conv::backward(dy, x, w, stride, padding,
                                                                dilation, groups, mask,
                                                                column_bytes);
  TORCH_CHECK(g[0].defined() || g[1].defined() || g[2].defined(),
              "wide_conv::backward declined these arguments");
  auto opt = [](const at::Tensor& t) {
    return t.defined() ? c10::optional<at::Tensor>(t) : c10::nullopt;
  };
  return {opt(g[0]), opt(g[1]), opt(g[2])};
}

at::Tensor transposedOp(const at::Tensor& x, const at::Tensor& w,
                        const c10::optional<at::Tensor>& b, at::IntArrayRef stride,
                        at::IntArrayRef padding, at::IntArrayRef output_padding,
                        at::IntArrayRef dilation, int64_t groups, int64_t column_bytes) {
  at::Tensor y = fumi::wide_conv::transposed(x, w, b ? *b : at::Tensor(), stride, padding,
                                             output_padding, dilation, groups, column_bytes);
  TORCH_CHECK(y.defined(), "wide_conv::transposed declined these arguments");
  return y;
}

// run() on the stack aten::convolution (name "convolution", output padding 0), its implementation
// step aten::_convolution ("_convolution": the same and four flags) or aten::conv2d ("conv2d":
// no transposed, no output padding) would get.
c10::optional<at::Tensor> runOp(const std::string& name, const at::Tensor& x, const at::Tensor& w,
                                const c10::optional<at::Tensor>& b, at::IntArrayRef stride,
                                at::IntArrayRef padding, at::IntArrayRef dilation,
                                bool transposed, int64_t groups) {
  const std::string qualified = "aten::" + name;
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(qualified.c_str(), "");
  torch::jit::Stack stack{x, w, b ? c10::IValue(*b) : c10::IValue(), stride.vec(), padding.vec(),
                          dilation.vec()};
  if (name == "convolution" || name == "_convolution") {
    stack.emplace_back(transposed);
    stack.emplace_back(std::vector<int64_t>(stride.size(), 0));
  }
  stack.emplace_back(groups);
  if (name == "_convolution")  // benchmark, deterministic, cudnn_enabled, allow_tf32
    for (bool flag : {false, false, true, true}) stack.emplace_back(flag);
  if (!fumi::wide_conv::run(op, stack)) return c10::nullopt;
  TORCH_CHECK(stack.size() == 1 && stack[0].isTensor(), "run() left no single tensor");
  return stack[0].toTensor();
}

// run() on aten::convolution_backward's stack (no bias sizes, no output padding): whether it
// took the call, and the three results.
std::tuple<bool, c10::optional<at::Tensor>, c10::optional<at::Tensor>, c10::optional<at::Tensor>>
runBackwardOp(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
              at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
              bool transposed, int64_t groups, std::array<bool, 3> mask) {
  const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution_backward", "");
  torch::jit::Stack stack{dy, x, w, c10::IValue(), stride.vec(), padding.vec(), dilation.vec(),
                          transposed, std::vector<int64_t>(stride.size(), 0), groups,
                          c10::List<bool>({mask[0], mask[1], mask[2]})};
  if (!fumi::wide_conv::run(op, stack)) return {false, c10::nullopt, c10::nullopt, c10::nullopt};
  TORCH_CHECK(stack.size() == 3, "run() left ", stack.size(), " values, not 3");
  auto opt = [](const c10::IValue& v) {
    return v.isTensor() && v.toTensor().defined() ? c10::optional<at::Tensor>(v.toTensor())
                                                  : c10::nullopt;
  };
  return {true, opt(stack[0]), opt(stack[1]), opt(stack[2])};
}

// winograd3x3 on x (N, C, H, W) by w (K, C, 3, 3), whatever winogradPays says, its tiles in
// blocks of at most block_bytes.
c10::optional<at::Tensor> winogradOp(const at::Tensor& x, const at::Tensor& w,
                                     at::IntArrayRef padding, int64_t block_bytes) {
  TORCH_CHECK(x.dim() == 4 && w.dim() == 4 && w.size(1) == x.size(1) && w.size(2) == 3 &&
                  w.size(3) == 3 && padding.size() == 2 && x.scalar_type() == at::kDouble &&
                  w.scalar_type() == at::kDouble,
              "wide_winograd: a 3x3 fp64 convolution");
  fumi::wide_conv::WinogradShape s;
  s.n = x.size(0), s.c = x.size(1), s.k = w.size(0), s.h = x.size(2), s.w = x.size(3);
  s.pad_h = padding[0], s.pad_w = padding[1];
  const at::Tensor xc = x.permute({0, 2, 3, 1}).contiguous();
  at::Tensor out = at::empty({s.n, s.out_h(), s.out_w(), s.k}, x.options());
  if (!fumi::wide_conv::winograd3x3(xc.data_ptr<double>(), w, false, s, block_bytes,
                                    out.data_ptr<double>()))
    return c10::nullopt;
  return out.permute({0, 3, 1, 2});
}

// winogradFilterGradient on x (N, C, H, W) and dy (N, K, OH, OW): dw (K, C, 3, 3).
c10::optional<at::Tensor> winogradFilterGradOp(const at::Tensor& x, const at::Tensor& dy,
                                               at::IntArrayRef padding, int64_t block_bytes) {
  TORCH_CHECK(x.dim() == 4 && dy.dim() == 4 && dy.size(0) == x.size(0) && padding.size() == 2 &&
                  x.scalar_type() == at::kDouble && dy.scalar_type() == at::kDouble,
              "wide_winograd_filter_grad: a 3x3 fp64 convolution's x and dy");
  fumi::wide_conv::WinogradShape s;
  s.n = x.size(0), s.c = x.size(1), s.k = dy.size(1), s.h = x.size(2), s.w = x.size(3);
  s.pad_h = padding[0], s.pad_w = padding[1];
  TORCH_CHECK(dy.size(2) == s.out_h() && dy.size(3) == s.out_w(), "dy's sizes");
  const at::Tensor xc = x.permute({0, 2, 3, 1}).contiguous();
  const at::Tensor dyc = dy.permute({0, 2, 3, 1}).contiguous();
  at::Tensor dw = at::empty({s.k, s.c, 3, 3}, x.options());
  if (!fumi::wide_conv::winogradFilterGradient(xc.data_ptr<double>(), dyc.data_ptr<double>(), s,
                                               block_bytes, x.options(), dw.data_ptr<double>()))
    return c10::nullopt;
  return dw;
}

// wide_ops::run on the stack aten::max_pool2d would get.
c10::optional<at::Tensor> poolOp(const at::Tensor& x, at::IntArrayRef kernel,
                                 at::IntArrayRef stride, at::IntArrayRef padding,
                                 at::IntArrayRef dilation, bool ceil_mode) {
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::max_pool2d", "");
  torch::jit::Stack stack{x, kernel.vec(), stride.vec(), padding.vec(), dilation.vec(), ceil_mode};
  if (!fumi::wide_ops::run(op, stack)) return c10::nullopt;
  TORCH_CHECK(stack.size() == 1 && stack[0].isTensor(), "run() left no single tensor");
  return stack[0].toTensor();
}

// wide_ops::run on the stack aten::batch_norm (name "batch_norm") or aten::native_batch_norm
// ("native_batch_norm") would get; running_mean and running_var updated in place as the op
// would.
std::tuple<bool, c10::optional<at::Tensor>, c10::optional<at::Tensor>, c10::optional<at::Tensor>>
batchNormOp(const std::string& name, const at::Tensor& x, const c10::optional<at::Tensor>& w,
            const c10::optional<at::Tensor>& b, const c10::optional<at::Tensor>& rm,
            const c10::optional<at::Tensor>& rv, bool training, double momentum, double eps) {
  const std::string qualified = "aten::" + name;
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(qualified.c_str(), "");
  auto opt = [](const c10::optional<at::Tensor>& t) { return t ? c10::IValue(*t) : c10::IValue(); };
  torch::jit::Stack stack{x, opt(w), opt(b), opt(rm), opt(rv), training, momentum, eps};
  if (name == "batch_norm") stack.emplace_back(false);  // cudnn_enabled
  if (!fumi::wide_ops::run(op, stack)) return {false, c10::nullopt, c10::nullopt, c10::nullopt};
  std::array<c10::optional<at::Tensor>, 3> r;
  for (size_t i = 0; i < stack.size() && i < 3; ++i) r[i] = stack[i].toTensor();
  return {true, r[0], r[1], r[2]};
}

}  // namespace

TORCH_LIBRARY(fumi_test, m) {
  m.def("wide_conv_forward(Tensor x, Tensor w, Tensor? b, int[] stride, int[] padding, "
        "int[] dilation, int groups, int column_bytes) -> Tensor",
        &forwardOp);
  m.def("wide_conv_backward(Tensor dy, Tensor x, Tensor w, int[] stride, int[] padding, "
        "int[] dilation, int groups, bool[3] mask, int column_bytes) -> "
        "(Tensor?, Tensor?, Tensor?)",
        &backwardOp);
  m.def("wide_conv_transposed(Tensor x, Tensor w, Tensor? b, int[] stride, int[] padding, "
        "int[] output_padding, int[] dilation, int groups, int column_bytes) -> Tensor",
        &transposedOp);
  m.def("wide_conv_run(str name, Tensor x, Tensor w, Tensor? b, int[] stride, int[] padding, "
        "int[] dilation, bool transposed, int groups) -> Tensor?",
        &runOp);
  m.def("wide_conv_run_backward(Tensor dy, Tensor x, Tensor w, int[] stride, int[] padding, "
        "int[] dilation, bool transposed, int groups, bool[3] mask) -> "
        "(bool, Tensor?, Tensor?, Tensor?)",
        &runBackwardOp);
  m.def("wide_winograd(Tensor x, Tensor w, int[] padding, int block_bytes) -> Tensor?",
        &winogradOp);
  m.def("wide_winograd_filter_grad(Tensor x, Tensor dy, int[] padding, int block_bytes) -> "
        "Tensor?",
        &winogradFilterGradOp);
  m.def("wide_pool_run(Tensor x, int[] kernel, int[] stride, int[] padding, int[] dilation, "
        "bool ceil_mode) -> Tensor?",
        &poolOp);
  m.def("wide_batch_norm_run(str name, Tensor x, Tensor? w, Tensor? b, Tensor(a!)? rm, "
        "Tensor(b!)? rv, bool training, float momentum, float eps) -> "
        "(bool, Tensor?, Tensor?, Tensor?)",
        &batchNormOp);
}
