// wide_conv.cpp — fumi's own fp64 convolution on the CPU (wide_conv.h says why and what).
//
// Layout: x channels-last, so that element (n, c, h, w) is at ((n·H + h)·W + w)·C + c. Row
// (n, p, q) of the im2col matrix holds, group by group, filter tap by tap (r, s), the group's
// C/groups channels of x at (p·stride − pad + r·dilation, q·stride − pad + s·dilation), zeros
// where that falls in the padding. The filter is reordered alike, (K, R, S, C/groups), so that
// group g's output columns are rows·filterᵀ over its own column block: the result comes out as
// an (N·P·Q, K) matrix, which is the channels-last (N, K, P, Q) tensor.
#include "wide_conv.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include <ATen/Parallel.h>

namespace fumi::wide_conv {
namespace {

// A 2-element list from an int[] argument (aten expands a single value to every dimension);
// false when it has another length.
bool pair(c10::IntArrayRef in, std::array<int64_t, 2>* out) {
  if (in.size() == 1) *out = {in[0], in[0]};
  else if (in.size() == 2) *out = {in[0], in[1]};
  else return false;
  return true;
}

bool fp64Cpu(const at::Tensor& t) {
  return t.defined() && t.layout() == at::kStrided && t.device().is_cpu() &&
         t.scalar_type() == at::kDouble;
}

constexpr int64_t kFewChannels = 8, kLargeImage = 256;

struct Shape {
  int64_t n, c, h, w, k, cg, r, s, p, q, groups;
  std::array<int64_t, 2> stride, pad, dilation;
};

// The first `count` rows of the im2col matrix from image n0 on (rows (n, p, q), each R·S·C
// doubles long) into `cols`.
void im2col(const double* x, const Shape& d, int64_t n0, int64_t count, double* cols) {
  const int64_t pq = d.p * d.q, row = d.r * d.s * d.c;
  at::parallel_for(0, count, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t n = n0 + i / pq, p = (i % pq) / d.q, q = i % d.q;
      double* dst = cols + i * row;
      for (int64_t g = 0; g < d.groups; ++g) {
        for (int64_t r = 0; r < d.r; ++r) {
          const int64_t h = p * d.stride[0] - d.pad[0] + r * d.dilation[0];
          for (int64_t s = 0; s < d.s; ++s, dst += d.cg) {
            const int64_t w = q * d.stride[1] - d.pad[1] + s * d.dilation[1];
            if (h < 0 || h >= d.h || w < 0 || w >= d.w) {
              std::memset(dst, 0, sizeof(double) * static_cast<size_t>(d.cg));
              continue;
            }
            const double* src = x + ((n * d.h + h) * d.w + w) * d.c + g * d.cg;
            std::memcpy(dst, src, sizeof(double) * static_cast<size_t>(d.cg));
          }
        }
      }
    }
  });
}

// The adjoint of im2col: rows [0, count) of `cols` (image rows from image n0) added into x
// (channels-last, zeroed by the caller). Images write disjoint parts of x: one thread each.
void col2im(const double* cols, const Shape& d, int64_t n0, int64_t count, double* x) {
  const int64_t pq = d.p * d.q, row = d.r * d.s * d.c;
  at::parallel_for(0, count / pq, 1, [&](int64_t first, int64_t last) {
    for (int64_t i = first * pq; i < last * pq; ++i) {
      const int64_t n = n0 + i / pq, p = (i % pq) / d.q, q = i % d.q;
      const double* src = cols + i * row;
      for (int64_t g = 0; g < d.groups; ++g) {
        for (int64_t r = 0; r < d.r; ++r) {
          const int64_t h = p * d.stride[0] - d.pad[0] + r * d.dilation[0];
          for (int64_t s = 0; s < d.s; ++s, src += d.cg) {
            const int64_t w = q * d.stride[1] - d.pad[1] + s * d.dilation[1];
            if (h < 0 || h >= d.h || w < 0 || w >= d.w) continue;
            double* dst = x + ((n * d.h + h) * d.w + w) * d.c + g * d.cg;
            for (int64_t c = 0; c < d.cg; ++c) dst[c] += src[c];
          }
        }
      }
    }
  });
}

// The dimensions of a convolution of an input of sizes `in` with w; false where they are
// outside this file's reach.
bool shapeFrom(c10::IntArrayRef in, const at::Tensor& w, c10::IntArrayRef stride,
               c10::IntArrayRef padding, c10::IntArrayRef dilation, int64_t groups, Shape* out) {
  Shape d{};
  if (!fp64Cpu(w) || in.size() != 4 || w.dim() != 4 || groups < 1 || !pair(stride, &d.stride) ||
      !pair(padding, &d.pad) || !pair(dilation, &d.dilation))
    return false;
  d.n = in[0], d.c = in[1], d.h = in[2], d.w = in[3];
  d.k = w.size(0), d.cg = w.size(1), d.r = w.size(2), d.s = w.size(3), d.groups = groups;
  if (d.n < 1 || d.cg < 1 || d.cg * groups != d.c || d.k < 1 || d.k % groups != 0) return false;
  for (int e = 0; e < 2; ++e)
    if (d.stride[e] < 1 || d.dilation[e] < 1 || d.pad[e] < 0) return false;
  d.p = (d.h + 2 * d.pad[0] - d.dilation[0] * (d.r - 1) - 1) / d.stride[0] + 1;
  d.q = (d.w + 2 * d.pad[1] - d.dilation[1] * (d.s - 1) - 1) / d.stride[1] + 1;
  if (d.p < 1 || d.q < 1 || d.r < 1 || d.s < 1) return false;
  // A few channels a group and large images (resnet's stem: 3 channels, 32×32 outputs): the tap
  // copies are a few bytes each, and aten's per-image GEMMs are wide enough to run at rate.
  if (d.cg < kFewChannels && d.p * d.q >= kLargeImage) return false;
  *out = d;
  return true;
}

bool shapeOf(const at::Tensor& x, const at::Tensor& w, c10::IntArrayRef stride,
             c10::IntArrayRef padding, c10::IntArrayRef dilation, int64_t groups, Shape* out) {
  return fp64Cpu(x) && shapeFrom(x.sizes(), w, stride, padding, dilation, groups, out);
}

// How many images' im2col rows go in one GEMM.
int64_t imagesPerGemm(const Shape& d, int64_t column_bytes) {
  const int64_t per_image = d.p * d.q * d.r * d.s * d.c * static_cast<int64_t>(sizeof(double));
  return std::clamp<int64_t>(column_bytes / std::max<int64_t>(per_image, 1), 1, d.n);
}

// The gradient with respect to the input of the convolution `d` by w, for `grad` its result's
// gradient as the (N·P·Q, K) matrix: (N, C, H, W), channels-last.
at::Tensor gradInput(const at::Tensor& grad, const at::Tensor& w, const Shape& d,
                     int64_t column_bytes) {
  const int64_t kg = d.k / d.groups, taps = d.r * d.s * d.cg, row = taps * d.groups;
  const int64_t pq = d.p * d.q, images = imagesPerGemm(d, column_bytes);
  const at::Tensor filter = w.permute({0, 2, 3, 1}).contiguous().view({d.k, taps});
  const at::Tensor cols = at::empty({images * pq, row}, w.options());
  at::Tensor dx = at::zeros({d.n, d.h, d.w, d.c}, w.options());
  for (int64_t n0 = 0; n0 < d.n; n0 += images) {
    const int64_t rows = std::min(images, d.n - n0) * pq;
    const at::Tensor block = grad.narrow(0, n0 * pq, rows), live = cols.narrow(0, 0, rows);
    for (int64_t g = 0; g < d.groups; ++g) {  // cols_g = dy_g · filter_g
      at::Tensor dst = live.narrow(1, g * taps, taps);
      at::mm_out(dst, block.narrow(1, g * kg, kg), filter.narrow(0, g * kg, kg));
    }
    col2im(cols.data_ptr<double>(), d, n0, rows, dx.data_ptr<double>());  // where im2col read
  }
  return dx.permute({0, 3, 1, 2});
}

// A result's gradient dy (N, K, P, Q) as the (N·P·Q, K) matrix of forward()'s result.
at::Tensor gradMatrix(const at::Tensor& dy, const Shape& d) {
  return dy.contiguous(at::MemoryFormat::ChannelsLast)
      .permute({0, 2, 3, 1})
      .reshape({d.n * d.p * d.q, d.k});
}

}  // namespace

at::Tensor forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                   c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
                   int64_t groups, int64_t column_bytes) {
  Shape d;
  if (!shapeOf(x, w, stride, padding, dilation, groups, &d)) return {};
  if (bias.defined() && (!fp64Cpu(bias) || bias.dim() != 1 || bias.size(0) != d.k)) return {};

  const at::NoGradGuard no_grad;
  const at::Tensor xc = x.contiguous(at::MemoryFormat::ChannelsLast);
  const int64_t kg = d.k / groups, taps = d.r * d.s * d.cg, row = taps * groups;
  // (K, R, S, C/groups): group g's filter is rows [g·kg, (g+1)·kg), each `taps` long.
  const at::Tensor filter = w.permute({0, 2, 3, 1}).contiguous().view({d.k, taps});
  const int64_t pq = d.p * d.q, images = imagesPerGemm(d, column_bytes);
  const at::Tensor cols = at::empty({images * pq, row}, x.options());
  at::Tensor out = at::empty({d.n * pq, d.k}, x.options());
  for (int64_t n0 = 0; n0 < d.n; n0 += images) {
    const int64_t batch = std::min(images, d.n - n0), rows = batch * pq;
    im2col(xc.data_ptr<double>(), d, n0, rows, cols.data_ptr<double>());
    const at::Tensor block = out.narrow(0, n0 * pq, rows);
    for (int64_t g = 0; g < groups; ++g) {
      at::Tensor dst = block.narrow(1, g * kg, kg);
      at::mm_out(dst, cols.narrow(0, 0, rows).narrow(1, g * taps, taps),
                 filter.narrow(0, g * kg, kg).t());
    }
  }
  if (bias.defined()) out.add_(bias.view({1, d.k}));
  return out.view({d.n, d.p, d.q, d.k}).permute({0, 3, 1, 2});
}

std::array<at::Tensor, 3> backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
                                   c10::IntArrayRef stride, c10::IntArrayRef padding,
                                   c10::IntArrayRef dilation, int64_t groups,
                                   std::array<bool, 3> mask, int64_t column_bytes) {
  Shape d;
  if (!shapeOf(x, w, stride, padding, dilation, groups, &d) || !fp64Cpu(dy) ||
      dy.sizes() != c10::IntArrayRef({d.n, d.k, d.p, d.q}))
    return {};
  const at::NoGradGuard no_grad;
  const at::Tensor grad = gradMatrix(dy, d);
  std::array<at::Tensor, 3> out;
  if (mask[2]) out[2] = grad.sum(0);
  if (mask[0]) out[0] = gradInput(grad, w, d, column_bytes);
  if (!mask[1]) return out;
  // dw_g = Σ over the images' rows of dy_gᵀ · cols_g.
  const int64_t kg = d.k / groups, taps = d.r * d.s * d.cg, row = taps * groups;
  const int64_t pq = d.p * d.q, images = imagesPerGemm(d, column_bytes);
  const at::Tensor cols = at::empty({images * pq, row}, x.options());
  const at::Tensor xc = x.contiguous(at::MemoryFormat::ChannelsLast);
  at::Tensor dw = at::zeros({d.k, taps}, x.options());
  for (int64_t n0 = 0; n0 < d.n; n0 += images) {
    const int64_t rows = std::min(images, d.n - n0) * pq;
    im2col(xc.data_ptr<double>(), d, n0, rows, cols.data_ptr<double>());
    const at::Tensor block = grad.narrow(0, n0 * pq, rows), live = cols.narrow(0, 0, rows);
    for (int64_t g = 0; g < groups; ++g) {
      at::Tensor dst = dw.narrow(0, g * kg, kg);
      dst.addmm_(block.narrow(1, g * kg, kg).t(), live.narrow(1, g * taps, taps));
    }
  }
  out[1] = dw.view({d.k, d.r, d.s, d.cg}).permute({0, 3, 1, 2});
  return out;
}

at::Tensor transposed(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                      c10::IntArrayRef stride, c10::IntArrayRef padding,
                      c10::IntArrayRef output_padding, c10::IntArrayRef dilation, int64_t groups,
                      int64_t column_bytes) {
  std::array<int64_t, 2> st{}, pad{}, extra{}, dil{}, extent{};
  if (!fp64Cpu(x) || x.dim() != 4 || w.dim() != 4 || groups < 1 || !pair(stride, &st) ||
      !pair(padding, &pad) || !pair(output_padding, &extra) || !pair(dilation, &dil))
    return {};
  for (int e = 0; e < 2; ++e) {
    if (st[e] < 1 || dil[e] < 1 || extra[e] < 0 || extra[e] >= std::max(st[e], dil[e])) return {};
    extent[e] = (x.size(e + 2) - 1) * st[e] - 2 * pad[e] + dil[e] * (w.size(e + 2) - 1) +
                extra[e] + 1;
  }
  // The convolution whose input gradient this is: from (N, C_out, extent) by w to x's sizes.
  Shape d;
  const std::array<int64_t, 4> in{x.size(0), w.size(1) * groups, extent[0], extent[1]};
  if (!shapeFrom(in, w, stride, padding, dilation, groups, &d) || d.k != x.size(1) ||
      d.p != x.size(2) || d.q != x.size(3))
    return {};
  if (bias.defined() && (!fp64Cpu(bias) || bias.dim() != 1 || bias.size(0) != d.c)) return {};
  const at::NoGradGuard no_grad;
  at::Tensor y = gradInput(gradMatrix(x, d), w, d, column_bytes);
  if (bias.defined()) y.add_(bias.view({1, d.c, 1, 1}));
  return y;
}

bool run(const c10::OperatorHandle& op, torch::jit::Stack& stack) {
  const c10::OperatorName& name = op.schema().operator_name();
  if (!name.overload_name.empty()) return false;
  // aten::convolution(input, weight, bias?, stride, padding, dilation, transposed,
  //                   output_padding, groups)
  // aten::conv1d / conv2d(input, weight, bias?, stride, padding, dilation, groups)
  // aten::convolution_backward(grad_output, input, weight, bias_sizes?, stride, padding,
  //                            dilation, transposed, output_padding, groups, output_mask)
  const bool convolution = name.name == "aten::convolution";
  const bool convnd = name.name == "aten::conv2d" || name.name == "aten::conv1d";
  const bool backward_op = name.name == "aten::convolution_backward";
  const size_t args = convolution ? 9 : convnd ? 7 : backward_op ? 11 : 0;
  if (args == 0 || stack.size() != args) return false;
  try {
    const c10::IValue* a = stack.data() + (backward_op ? 1 : 0);  // from input on
    const c10::IValue& groups_arg = backward_op ? a[8] : a[args - 1];
    if (!a[0].isTensor() || !a[1].isTensor() || !a[3].isIntList() || !a[4].isIntList() ||
        !a[5].isIntList() || !groups_arg.isInt() || (backward_op && !stack[0].isTensor()))
      return false;
    if (!convnd && (!a[6].isBool() || !a[7].isIntList())) return false;
    const bool is_transposed = !convnd && a[6].toBool();
    const int64_t groups = groups_arg.toInt();
    at::Tensor x = a[0].toTensor(), w = a[1].toTensor();
    at::Tensor dy = backward_op ? stack[0].toTensor() : at::Tensor();
    std::vector<int64_t> stride = a[3].toIntVector(), padding = a[4].toIntVector(),
                         dilation = a[5].toIntVector();
    std::vector<int64_t> extra = convnd ? std::vector<int64_t>(stride.size(), 0)
                                        : a[7].toIntVector();  // output padding
    // A 1-d convolution is the 2-d one of extent 1 in height.
    const bool one_d = x.dim() == 3 && w.dim() == 3 && (!dy.defined() || dy.dim() == 3);
    if (one_d) {
      for (std::vector<int64_t>* v : {&stride, &padding, &dilation, &extra}) {
        if (v->size() != 1) return false;
        v->insert(v->begin(), v == &stride || v == &dilation ? 1 : 0);
      }
      x = x.unsqueeze(2), w = w.unsqueeze(2);
      if (dy.defined()) dy = dy.unsqueeze(2);
    }
    auto lower = [one_d](at::Tensor t) { return one_d && t.defined() ? t.squeeze(2) : t; };
    if (backward_op) {
      const c10::IValue& mask_arg = stack[10];
      if (!mask_arg.isBoolList() || mask_arg.toBoolList().size() != 3) return false;
      const c10::List<bool> m = mask_arg.toBoolList();
      const std::array<bool, 3> mask{m[0], m[1], m[2]};
      std::array<at::Tensor, 3> grads;
      if (!is_transposed) {
        grads = backward(dy, x, w, stride, padding, dilation, groups, mask);
        if (!grads[0].defined() && !grads[1].defined() && !grads[2].defined()) return false;
      } else {
        // A transposed convolution is the input gradient of the plain one by w: its input
        // gradient is that convolution of dy, its filter gradient the plain one's with the
        // roles of x and dy swapped.
        if (!fp64Cpu(dy) || dy.dim() != 4 || !fp64Cpu(x)) return false;
        if (mask[0]) {
          grads[0] = forward(dy, w, at::Tensor(), stride, padding, dilation, groups);
          if (!grads[0].defined() || grads[0].sizes() != x.sizes()) return false;
        }
        if (mask[1]) {
          grads[1] = backward(x, dy, w, stride, padding, dilation, groups, {false, true, false})[1];
          if (!grads[1].defined()) return false;
        }
        if (mask[2]) grads[2] = dy.sum({0, 2, 3});
      }
      stack.clear();
      stack.emplace_back(lower(grads[0]));
      stack.emplace_back(lower(grads[1]));
      stack.emplace_back(grads[2]);
      return true;
    }
    if (!a[2].isTensor() && !a[2].isNone()) return false;
    const at::Tensor bias = a[2].isTensor() ? a[2].toTensor() : at::Tensor();
    at::Tensor y = is_transposed
                       ? transposed(x, w, bias, stride, padding, extra, dilation, groups)
                       : forward(x, w, bias, stride, padding, dilation, groups);
    if (!y.defined()) return false;
    stack.clear();
    stack.emplace_back(lower(y));
    return true;
  } catch (const c10::Error&) {
    return false;  // aten's own kernel will say what is wrong with the arguments
  }
}

}  // namespace fumi::wide_conv
