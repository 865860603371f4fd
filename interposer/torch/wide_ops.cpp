// wide_ops.cpp — fumi's own fp64 max pooling and batch norm on the CPU (wide_ops.h says why).
#include "wide_ops.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include <ATen/Parallel.h>

#include "fumi/simd.h"
#include "wide_conv.h"

namespace fumi::wide_ops {
namespace {

// An int[2] argument: one value for both dimensions or one each.
bool pair(c10::IntArrayRef in, int64_t out[2]) {
  if (in.size() != 1 && in.size() != 2) return false;
  out[0] = in[0];
  out[1] = in[in.size() - 1];
  return true;
}

// An int[] argument as the stack holds it: an int list, or (as a RecordFunction's inputs give
// it) a generic list of ints.
bool ints(const c10::IValue& v, std::vector<int64_t>* out) {
  if (v.isIntList()) {
    *out = v.toIntVector();
    return true;
  }
  if (!v.isList()) return false;
  out->clear();
  for (const c10::IValue& e : v.toListRef()) {
    if (!e.isInt()) return false;
    out->push_back(e.toInt());
  }
  return true;
}

// aten's pooling output extent (pooling_output_shape): -1 where it rejects the arguments.
int64_t extent(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dilation, bool ceil) {
  if (k < 1 || stride < 1 || dilation < 1 || pad < 0 || pad > k / 2) return -1;
  const int64_t span = in + 2 * pad - dilation * (k - 1) - 1 + (ceil ? stride - 1 : 0);
  if (span < 0) return -1;
  int64_t out = span / stride + 1;
  if (ceil && (out - 1) * stride >= in + pad) --out;
  return out >= 1 ? out : -1;
}

}  // namespace

at::Tensor maxPool2d(const at::Tensor& x, c10::IntArrayRef kernel, c10::IntArrayRef stride,
                     c10::IntArrayRef padding, c10::IntArrayRef dilation, bool ceil_mode) {
  if (!wide_conv::fp64Cpu(x) || (x.dim() != 3 && x.dim() != 4) || !x.is_contiguous() ||
      x.numel() == 0)
    return {};
  int64_t k[2], s[2], p[2], d[2];
  if (!pair(kernel, k) || !pair(stride.empty() ? kernel : stride, s) || !pair(padding, p) ||
      !pair(dilation, d))
    return {};
  const int64_t h = x.size(-2), w = x.size(-1);
  const int64_t oh = extent(h, k[0], p[0], s[0], d[0], ceil_mode);
  const int64_t ow = extent(w, k[1], p[1], s[1], d[1], ceil_mode);
  if (oh < 1 || ow < 1) return {};
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes[sizes.size() - 2] = oh;
  sizes[sizes.size() - 1] = ow;
  at::Tensor y = at::empty(sizes, x.options());
  const int64_t planes = x.numel() / (h * w);
  const double* src = x.data_ptr<double>();
  double* dst = y.data_ptr<double>();
  const int64_t kh = k[0], kw = k[1], sh = s[0], sw = s[1], ph = p[0], pw = p[1], dh = d[0],
                dw = d[1];
  // The taps of a window inside the input: from first(o) on, count(o) of them.
  const auto first = [](int64_t start, int64_t dil) {
    return start >= 0 ? int64_t{0} : (-start + dil - 1) / dil;
  };
  const auto count = [](int64_t start, int64_t dil, int64_t k_, int64_t in, int64_t from) {
    const int64_t last = std::min(k_ - 1, (in - 1 - start) / dil);  // start + last·dil < in
    return start + from * dil >= in ? int64_t{0} : last - from + 1;
  };
  // aten's order and test, a NaN replacing the maximum and staying (nothing is > NaN), taken
  // in two passes: along each row, then down the columns of those row maxima. The first of
  // equal maxima in aten's (row-major) window order and the last NaN come out the same.
  const auto better = [](double v, double best) { return (v > best) | (v != v) ? v : best; };
  std::vector<int64_t> cols_first(static_cast<size_t>(ow)), cols_count(static_cast<size_t>(ow));
  for (int64_t j = 0; j < ow; ++j) {
    const int64_t left = j * sw - pw;
    cols_first[static_cast<size_t>(j)] = left + first(left, dw) * dw;
    cols_count[static_cast<size_t>(j)] = count(left, dw, kw, w, first(left, dw));
  }
  at::parallel_for(0, planes, 1, [&](int64_t p0, int64_t p1) {
    std::vector<double> rows(static_cast<size_t>(h * ow));  // each input row's window maxima
    for (int64_t plane = p0; plane < p1; ++plane) {
      const double* in = src + plane * h * w;
      double* out = dst + plane * oh * ow;
      for (int64_t r = 0; r < h; ++r)
        for (int64_t j = 0; j < ow; ++j) {
          const double* at = in + r * w + cols_first[static_cast<size_t>(j)];
          const int64_t n = cols_count[static_cast<size_t>(j)];
          // A plain maximum (maxsd: no branch) and whether a NaN went by; only then the window
          // again with NaN's rule, for aten's NaN.
          double best = -std::numeric_limits<double>::infinity();
          bool nan = false;
          for (int64_t b = 0; b < n; ++b) {
            const double v = at[b * dw];
            best = v > best ? v : best;
            nan |= v != v;
          }
          if (nan)
            for (int64_t b = 0; b < n; ++b) best = better(at[b * dw], best);
          rows[static_cast<size_t>(r * ow + j)] = best;
        }
      for (int64_t i = 0; i < oh; ++i) {
        const int64_t top = i * sh - ph, a0 = first(top, dh), na = count(top, dh, kh, h, a0);
        double* o = out + i * ow;
        for (int64_t j = 0; j < ow; ++j) o[j] = -std::numeric_limits<double>::infinity();
        for (int64_t a = a0; a < a0 + na; ++a) {
          const double* m = rows.data() + (top + a * dh) * ow;
          for (int64_t j = 0; j < ow; ++j) o[j] = better(m[j], o[j]);
        }
      }
    }
  });
  return y;
}

std::array<at::Tensor, 3> batchNorm(const at::Tensor& x, const at::Tensor& weight,
                                    const at::Tensor& bias, const at::Tensor& running_mean,
                                    const at::Tensor& running_var, bool training,
                                    double momentum, double eps) {
  using wide_conv::fp64Cpu;
  if (!fp64Cpu(x) || x.dim() < 2 || !x.is_contiguous() || x.numel() == 0) return {};
  const int64_t channels = x.size(1), images = x.size(0),
                inner = x.numel() / (images * channels), per_channel = images * inner;
  for (const at::Tensor* t : {&weight, &bias, &running_mean, &running_var})
    if (t->defined() && (!fp64Cpu(*t) || t->dim() != 1 || t->size(0) != channels ||
                         !t->is_contiguous()))
      return {};
  const bool stats = running_mean.defined() && running_var.defined();
  if (running_mean.defined() != running_var.defined() || (!training && !stats) ||
      (training && per_channel < 2))
    return {};
  const at::Tensor mean = at::empty({channels}, x.options()),
                   invstd = at::empty({channels}, x.options());
  at::Tensor y = at::empty_like(x);
  const double* src = x.data_ptr<double>();
  double* dst = y.data_ptr<double>();
  double* m = mean.data_ptr<double>();
  double* s = invstd.data_ptr<double>();
  const double* w = weight.defined() ? weight.data_ptr<double>() : nullptr;
  const double* b = bias.defined() ? bias.data_ptr<double>() : nullptr;
  double* rm = stats ? running_mean.data_ptr<double>() : nullptr;
  double* rv = stats ? running_var.data_ptr<double>() : nullptr;
  at::parallel_for(0, channels, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double mu, var;
      if (training) {  // two passes: the mean, then the squares about it
        double sum = 0;
        for (int64_t n = 0; n < images; ++n) {
          const double* p = src + (n * channels + c) * inner;
          FUMI_SIMD(reduction(+ : sum))
          for (int64_t i = 0; i < inner; ++i) sum += p[i];
        }
        mu = sum / static_cast<double>(per_channel);
        double squares = 0;
        for (int64_t n = 0; n < images; ++n) {
          const double* p = src + (n * channels + c) * inner;
          FUMI_SIMD(reduction(+ : squares))
          for (int64_t i = 0; i < inner; ++i) squares += (p[i] - mu) * (p[i] - mu);
        }
        var = squares / static_cast<double>(per_channel);
        if (stats) {
          rm[c] = (1 - momentum) * rm[c] + momentum * mu;
          rv[c] = (1 - momentum) * rv[c] +
                  momentum * squares / static_cast<double>(per_channel - 1);
        }
      } else {
        mu = rm[c];
        var = rv[c];
      }
      const double inv = 1 / std::sqrt(var + eps);
      m[c] = mu;
      s[c] = inv;
      const double scale = (w ? w[c] : 1.0) * inv, shift = b ? b[c] : 0.0;
      for (int64_t n = 0; n < images; ++n) {
        const double* p = src + (n * channels + c) * inner;
        double* q = dst + (n * channels + c) * inner;
        for (int64_t i = 0; i < inner; ++i) q[i] = (p[i] - mu) * scale + shift;
      }
    }
  });
  if (!training) return {y, at::empty({0}, x.options()), at::empty({0}, x.options())};
  return {y, mean, invstd};
}

namespace {

// An optional tensor argument: undefined for None.
bool optionalTensor(const c10::IValue& v, at::Tensor* out) {
  if (v.isNone()) {
    *out = at::Tensor();
    return true;
  }
  if (!v.isTensor()) return false;
  *out = v.toTensor();
  return true;
}

// aten::batch_norm(input, weight?, bias?, running_mean?, running_var?, training, momentum, eps,
// cudnn_enabled) -> y, and aten::native_batch_norm (the first eight) -> (y, save_mean,
// save_invstd).
bool runBatchNorm(bool native, torch::jit::Stack& stack) {
  if (stack.size() != (native ? 8u : 9u) || !stack[0].isTensor() || !stack[5].isBool() ||
      !stack[6].isDouble() || !stack[7].isDouble())
    return false;
  at::Tensor args[4];
  for (size_t i = 0; i < 4; ++i)
    if (!optionalTensor(stack[i + 1], &args[i])) return false;
  std::array<at::Tensor, 3> r = batchNorm(stack[0].toTensor(), args[0], args[1], args[2], args[3],
                                          stack[5].toBool(), stack[6].toDouble(),
                                          stack[7].toDouble());
  if (!native) return wide_conv::replaceBy(stack, std::move(r[0]));
  if (!r[0].defined()) return false;
  stack.clear();
  for (at::Tensor& t : r) stack.emplace_back(std::move(t));
  return true;
}

}  // namespace

bool run(const c10::OperatorHandle& op, torch::jit::Stack& stack) {
  const c10::OperatorName& name = op.schema().operator_name();
  if (!name.overload_name.empty()) return false;
  try {
    if (name.name == "aten::batch_norm" || name.name == "aten::native_batch_norm")
      return runBatchNorm(name.name == "aten::native_batch_norm", stack);
    // aten::max_pool2d(self, kernel_size, stride=[], padding=0, dilation=1, ceil_mode=False)
    if (name.name != "aten::max_pool2d" || stack.size() != 6) return false;
    std::vector<int64_t> lists[4];
    for (size_t i = 0; i < 4; ++i)
      if (!ints(stack[i + 1], &lists[i])) return false;
    if (!stack[0].isTensor() || !stack[5].isBool()) return false;
    return wide_conv::replaceBy(stack, maxPool2d(stack[0].toTensor(), lists[0], lists[1], lists[2],
                                                 lists[3], stack[5].toBool()));
  } catch (const c10::Error&) {
    return false;  // aten's own kernel will say what is wrong with the arguments
  }
}

}  // namespace fumi::wide_ops
