// wide_conv.cpp — fumi's own fp64 convolution on the CPU (wide_conv.h says why and what).
//
// Every convolution runs as a 3-d one (1-d and 2-d ones with leading spatial extents of 1).
// Layout: x channels-last, so that element (n, c, z, y, x) is at (((n·D + z)·H + y)·W + x)·C + c.
// Row (n, o) of the im2col matrix, o an output position, holds, group by group, filter tap by tap
// (t, r, s), the group's C/groups channels of x at o·stride − pad + tap·dilation in each spatial
// dimension, zeros where that falls in the padding. The filter is reordered alike,
// (K, T, R, S, C/groups), so that group g's output columns are rows·filterᵀ over its own column
// block: the result comes out as an (N·O, K) matrix, which is the channels-last (N, K, O...)
// tensor.
#include "wide_conv.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include <ATen/Parallel.h>

#include "winograd.h"

namespace fumi::wide_conv {
namespace {

constexpr int kDims = 3;  // spatial dimensions inside this file
using Extents = std::array<int64_t, kDims>;

constexpr int64_t kFewChannels = 8, kLargeImage = 256;

// A spatial argument (int[]) of a convolution over `spatial` dimensions as kDims values, the
// leading ones `fill` (aten expands a single value to every dimension); false when it has
// another length.
bool extents(c10::IntArrayRef in, int spatial, int64_t fill, Extents* out) {
  if (in.size() != 1 && in.size() != static_cast<size_t>(spatial)) return false;
  for (int e = 0; e < kDims; ++e) {
    const int d = e - (kDims - spatial);
    (*out)[static_cast<size_t>(e)] = d < 0 ? fill : in[in.size() == 1 ? 0 : static_cast<size_t>(d)];
  }
  return true;
}

// t (N, C, spatial...) as (N, C, D, H, W); lower() undoes it.
at::Tensor lift(const at::Tensor& t, int spatial) {
  at::Tensor r = t;
  for (int e = spatial; e < kDims; ++e) r = r.unsqueeze(2);
  return r;
}
at::Tensor lower(const at::Tensor& t, int spatial) {
  if (!t.defined()) return t;
  at::Tensor r = t;
  for (int e = spatial; e < kDims; ++e) r = r.squeeze(2);
  return r;
}

struct Shape {
  int spatial = 0;  // of the call: 1 to 3
  int64_t n = 0, c = 0, k = 0, cg = 0, groups = 1;
  Extents in{}, filter{}, out{}, stride{}, pad{}, dilation{};
  int64_t outputs() const { return out[0] * out[1] * out[2]; }
  int64_t taps() const { return filter[0] * filter[1] * filter[2] * cg; }
};

// Where tap `f` of output position `o` reads the input in dimension e (may be outside it).
inline int64_t inputAt(const Shape& d, int e, int64_t o, int64_t f) {
  return o * d.stride[e] - d.pad[e] + f * d.dilation[e];
}

// fn(row, offset) for each group's filter taps of output row i (image n, position o): `row`
// counts the taps' runs of C/groups in im2col's row order, offset is where the run's channels
// start in channels-last x, or -1 in the padding.
template <class F>
void forEachTap(const Shape& d, int64_t i, F&& fn) {
  const int64_t outputs = d.outputs();
  const int64_t n = i / outputs, o = i % outputs;
  const int64_t oz = o / (d.out[1] * d.out[2]), oy = (o / d.out[2]) % d.out[1], ox = o % d.out[2];
  int64_t run = 0;
  for (int64_t g = 0; g < d.groups; ++g)
    for (int64_t t = 0; t < d.filter[0]; ++t) {
      const int64_t z = inputAt(d, 0, oz, t);
      for (int64_t r = 0; r < d.filter[1]; ++r) {
        const int64_t y = inputAt(d, 1, oy, r);
        for (int64_t s = 0; s < d.filter[2]; ++s, ++run) {
          const int64_t x = inputAt(d, 2, ox, s);
          const bool inside =
              z >= 0 && z < d.in[0] && y >= 0 && y < d.in[1] && x >= 0 && x < d.in[2];
          fn(run, inside ? (((n * d.in[0] + z) * d.in[1] + y) * d.in[2] + x) * d.c + g * d.cg
                         : -1);
        }
      }
    }
}

// The `count` rows of the im2col matrix from row `first` on (image first / outputs) into `cols`.
void im2col(const double* x, const Shape& d, int64_t first, int64_t count, double* cols) {
  const int64_t row = d.taps() * d.groups;
  const size_t bytes = sizeof(double) * static_cast<size_t>(d.cg);
  at::parallel_for(0, count, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      forEachTap(d, first + i, [&](int64_t run, int64_t at) {
        double* dst = cols + i * row + run * d.cg;
        if (at < 0) std::memset(dst, 0, bytes);
        else std::memcpy(dst, x + at, bytes);
      });
  });
}

// The `count` rows of the im2col matrix from row `first` on, each in the filter's own order
// (channel, then filter position: a row of the contiguous (K, C, spatial...) filter), read
// from channels-first x. One group. Each element a load of its own, where im2col copies runs
// of channels: cheaper only where that spares transposing a filter larger than the rows.
void im2colFilterOrder(const double* x, const Shape& d, int64_t first, int64_t count,
                       double* cols) {
  const int64_t positions = d.filter[0] * d.filter[1] * d.filter[2], row = d.c * positions;
  const int64_t image = d.in[0] * d.in[1] * d.in[2], outputs = d.outputs();
  at::parallel_for(0, count, 16, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> where(static_cast<size_t>(positions));  // in a channel, or -1
    for (int64_t i = begin; i < end; ++i) {
      const int64_t n = (first + i) / outputs;
      forEachTap(d, first + i, [&](int64_t run, int64_t offset) {
        // forEachTap's offsets are channels-last: (n, z, y, x) times C. Here the position alone.
        where[static_cast<size_t>(run)] = offset < 0 ? -1 : offset / d.c - n * image;
      });
      double* dst = cols + i * row;
      const double* channel = x + n * d.c * image;
      for (int64_t c = 0; c < d.c; ++c, channel += image, dst += positions)
        for (int64_t p = 0; p < positions; ++p) {
          const int64_t a = where[static_cast<size_t>(p)];
          dst[p] = a < 0 ? 0.0 : channel[a];
        }
    }
  });
}

// The adjoint of im2col: `count` rows of `cols` (from row `first` on) added into x
// (channels-last, zeroed by the caller), each element's in row order. Whole images write
// disjoint parts of x: one thread each; rows of part of an image, each thread a range of the
// channels.
void col2im(const double* cols, const Shape& d, int64_t first, int64_t count, double* x) {
  const int64_t row = d.taps() * d.groups, outputs = d.outputs();
  const auto add = [&](int64_t i0, int64_t i1, int64_t c0, int64_t c1) {
    for (int64_t i = i0; i < i1; ++i)
      forEachTap(d, first + i, [&](int64_t run, int64_t at) {
        if (at < 0) return;
        const double* src = cols + i * row + run * d.cg;
        double* dst = x + at;
        for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
      });
  };
  if (first % outputs == 0 && count % outputs == 0)
    at::parallel_for(0, count / outputs, 1, [&](int64_t begin, int64_t end) {
      add(begin * outputs, end * outputs, 0, d.cg);
    });
  else
    at::parallel_for(0, d.cg, 8, [&](int64_t c0, int64_t c1) { add(0, count, c0, c1); });
}

// The dimensions of a convolution of an input of sizes `in` (N, C, spatial...) with w; false
// where they are outside this file's reach.
bool shapeFrom(c10::IntArrayRef in, const at::Tensor& w, c10::IntArrayRef stride,
               c10::IntArrayRef padding, c10::IntArrayRef dilation, int64_t groups, Shape* out) {
  Shape d;
  d.spatial = static_cast<int>(in.size()) - 2;
  if (!fp64Cpu(w) || d.spatial < 1 || d.spatial > kDims || w.dim() != d.spatial + 2 ||
      groups < 1 || !extents(stride, d.spatial, 1, &d.stride) ||
      !extents(padding, d.spatial, 0, &d.pad) || !extents(dilation, d.spatial, 1, &d.dilation))
    return false;
  d.n = in[0], d.c = in[1], d.k = w.size(0), d.cg = w.size(1), d.groups = groups;
  if (d.n < 1 || d.cg < 1 || d.cg * groups != d.c || d.k < 1 || d.k % groups != 0) return false;
  for (int e = 0; e < kDims; ++e) {
    const int a = e - (kDims - d.spatial);  // the argument's dimension, < 0: a lifted one
    d.in[e] = a < 0 ? 1 : in[static_cast<size_t>(a) + 2];
    d.filter[e] = a < 0 ? 1 : w.size(a + 2);
    if (d.stride[e] < 1 || d.dilation[e] < 1 || d.pad[e] < 0 || d.filter[e] < 1) return false;
    d.out[e] = (d.in[e] + 2 * d.pad[e] - d.dilation[e] * (d.filter[e] - 1) - 1) / d.stride[e] + 1;
    if (d.out[e] < 1) return false;
  }
  *out = d;
  return true;
}

bool shapeOf(const at::Tensor& x, const at::Tensor& w, c10::IntArrayRef stride,
             c10::IntArrayRef padding, c10::IntArrayRef dilation, int64_t groups, Shape* out) {
  return fp64Cpu(x) && shapeFrom(x.sizes(), w, stride, padding, dilation, groups, out);
}

bool sizesAre(const at::Tensor& t, const Shape& d, int64_t channels, const Extents& e) {
  if (t.dim() != d.spatial + 2 || t.size(0) != d.n || t.size(1) != channels) return false;
  for (int a = 0; a < d.spatial; ++a)
    if (t.size(a + 2) != e[static_cast<size_t>(a + kDims - d.spatial)]) return false;
  return true;
}

// The plain convolution whose input gradient the transposed convolution of x by w is: from
// (N, C_out, extent...) to x's sizes.
bool transposedShape(const at::Tensor& x, const at::Tensor& w, c10::IntArrayRef stride,
                     c10::IntArrayRef padding, c10::IntArrayRef output_padding,
                     c10::IntArrayRef dilation, int64_t groups, Shape* out) {
  const int spatial = static_cast<int>(x.dim()) - 2;
  Extents st{}, pad{}, extra{}, dil{};
  if (!fp64Cpu(x) || spatial < 1 || spatial > kDims || w.dim() != x.dim() || groups < 1 ||
      !extents(stride, spatial, 1, &st) || !extents(padding, spatial, 0, &pad) ||
      !extents(output_padding, spatial, 0, &extra) || !extents(dilation, spatial, 1, &dil))
    return false;
  std::vector<int64_t> in{x.size(0), w.size(1) * groups};
  for (int a = 0; a < spatial; ++a) {
    const size_t e = static_cast<size_t>(a + kDims - spatial);
    if (st[e] < 1 || dil[e] < 1 || extra[e] < 0 || extra[e] >= std::max(st[e], dil[e]))
      return false;
    in.push_back((x.size(a + 2) - 1) * st[e] - 2 * pad[e] + dil[e] * (w.size(a + 2) - 1) +
                 extra[e] + 1);
  }
  return shapeFrom(in, w, stride, padding, dilation, groups, out) &&
         sizesAre(x, *out, out->k, out->out);
}

// Whether run() takes the convolution `d` from aten (measured here against aten's fp64 kernel):
// one group only (grouped and depthwise convolutions ran 1.3-5x slower as one small GEMM per
// group), and not a stem (fewer than 8 channels and 256 output positions or more: the tap
// copies are a few bytes each, and aten's per-image GEMMs are wide enough to run at rate) —
// unless aten's im2col buffer, which it takes for the whole batch at once, passes
// kColumnBytes: mapped afresh and faulted in on every call, torchaudio's Resample (32
// waveforms of 16 028 samples by one 28-tap filter: 57 MB) took aten 190-470 ms, this file
// 26-137 (batch 13).
bool faster(const Shape& d) {
  if (d.groups != 1) return false;
  const bool stem = d.cg < kFewChannels && d.outputs() >= kLargeImage;
  const double aten_columns = static_cast<double>(d.n) * static_cast<double>(d.outputs()) *
                              static_cast<double>(d.taps()) * sizeof(double);
  return !stem || aten_columns > static_cast<double>(kColumnBytes);
}

// How many im2col rows go in one GEMM: as many whole images as fit in column_bytes, or, where
// one image's rows do not (a 9x9 filter over 64 channels of a 96x96 image: 382 MB), as many
// of its rows as fit, at least kMinRows (the GEMMs stay wide enough to run at rate).
constexpr int64_t kMinRows = 256;
int64_t rowsPerGemm(const Shape& d, int64_t column_bytes) {
  const int64_t row = d.taps() * d.groups * static_cast<int64_t>(sizeof(double));
  const int64_t outputs = d.outputs(), per_image = outputs * row;
  if (per_image <= column_bytes) return std::min(column_bytes / per_image, d.n) * outputs;
  return std::clamp<int64_t>(column_bytes / row, std::min(kMinRows, outputs), outputs);
}

// fn(first, rows, cols) over the batch's im2col rows in runs of rowsPerGemm: `rows` of them from
// row `first` on, `cols` a buffer of that many (one buffer for every run).
template <class F>
void inGemmRuns(const Shape& d, int64_t column_bytes, const at::TensorOptions& options, F&& fn) {
  const int64_t per_gemm = rowsPerGemm(d, column_bytes), total = d.n * d.outputs();
  const at::Tensor cols = at::empty({per_gemm, d.taps() * d.groups}, options);
  for (int64_t first = 0; first < total; first += per_gemm) {
    const int64_t rows = std::min(per_gemm, total - first);
    fn(first, rows, cols.narrow(0, 0, rows));
  }
}

// dst (cols × rows) = the transpose of src (rows × cols), both contiguous, in tiles of eight
// rows: a cache line of each destination row at a time (a row at a time, the destination rows'
// writes, often 4 KiB apart, fought over the same L1 sets; aten's strided copy went through
// memory: a 512x512x3x3 filter took 12 ms, this 4, about the time its bytes take).
void transposeInto(const double* src, int64_t rows, int64_t cols, double* dst) {
  for (int64_t r0 = 0; r0 < rows; r0 += 8) {
    const int64_t r1 = std::min(rows, r0 + 8);
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t r = r0; r < r1; ++r) dst[c * rows + r] = src[r * cols + c];
  }
}

// x as (N, D, H, W, C) memory: lifted, channels-last. A channels-first x goes image by image
// through transposeInto (aten's strided copy of it took three times as long).
at::Tensor channelsLast(const at::Tensor& x, int spatial) {
  const at::Tensor lifted = lift(x, spatial);
  if (!lifted.is_contiguous() || lifted.numel() == 0)
    return lifted.contiguous(at::MemoryFormat::ChannelsLast3d);
  at::Tensor out = at::empty(lifted.sizes(),
                             lifted.options().memory_format(at::MemoryFormat::ChannelsLast3d));
  const int64_t c = lifted.size(1), block = lifted.numel() / lifted.size(0);
  const double* src = lifted.data_ptr<double>();
  double* dst = out.data_ptr<double>();
  at::parallel_for(0, lifted.size(0), 1, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n)
      transposeInto(src + n * block, c, block / c, dst + n * block);
  });
  return out;
}

// The filter (K, C/groups, spatial...) as the (K, taps) matrix of im2col's row order: each
// filter's (C/groups, positions) block transposed. A view where w is stored that way already
// (channels-last).
at::Tensor filterMatrix(const at::Tensor& w, const Shape& d) {
  const at::Tensor permuted = lift(w, d.spatial).permute({0, 2, 3, 4, 1});
  if (permuted.is_contiguous()) return permuted.view({d.k, d.taps()});
  if (!w.is_contiguous()) return permuted.contiguous().view({d.k, d.taps()});
  at::Tensor m = at::empty({d.k, d.taps()}, w.options());
  const int64_t positions = d.filter[0] * d.filter[1] * d.filter[2], block = d.cg * positions;
  const double* src = w.data_ptr<double>();
  double* dst = m.data_ptr<double>();
  at::parallel_for(0, d.k, 1, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k)
      transposeInto(src + k * block, d.cg, positions, dst + k * block);
  });
  return m;
}

// forward()'s (N·O, K) result rows as the (N, K, spatial...) tensor in channels-first memory:
// each image's (O, K) block transposed.
at::Tensor channelsFirst(const at::Tensor& rows, const Shape& d) {
  at::Tensor y = at::empty({d.n, d.k, d.out[0], d.out[1], d.out[2]}, rows.options());
  const int64_t block = d.outputs() * d.k;
  const double* src = rows.data_ptr<double>();
  double* dst = y.data_ptr<double>();
  at::parallel_for(0, d.n, 1, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n)
      transposeInto(src + n * block, d.outputs(), d.k, dst + n * block);
  });
  return lower(y, d.spatial);
}

// A channels-last (N, D, H, W, C) buffer as the call's (N, C, spatial...) tensor.
at::Tensor fromChannelsLast(const at::Tensor& t, int spatial) {
  return lower(t.permute({0, 4, 1, 2, 3}), spatial);
}

// The convolution `d` (and its filter gradient) as winograd.h's F(2×2, 3×3) takes it, or
// (adjoint) its input gradient: the correlation of the result's gradient (K channels, padded by
// 2 − pad) with the filter turned by 180° and its channel axes swapped. False where it is not a
// 3×3, stride-1, undilated, one-group 2-D convolution, or F(2×2, 3×3) does not pay there.
bool winogradOf(const Shape& d, bool adjoint, WinogradShape* s) {
  const bool plain = d.groups == 1 && d.in[0] == 1 && d.filter[0] == 1 && d.pad[0] == 0;
  const bool three_by_three = d.filter[1] == 3 && d.filter[2] == 3 && d.stride[1] == 1 &&
                              d.stride[2] == 1 && d.dilation[1] == 1 && d.dilation[2] == 1;
  if (!plain || !three_by_three || (adjoint && (d.pad[1] > 2 || d.pad[2] > 2))) return false;
  s->n = d.n;
  s->c = adjoint ? d.k : d.c, s->k = adjoint ? d.c : d.k;
  s->h = adjoint ? d.out[1] : d.in[1], s->w = adjoint ? d.out[2] : d.in[2];
  s->pad_h = adjoint ? 2 - d.pad[1] : d.pad[1], s->pad_w = adjoint ? 2 - d.pad[2] : d.pad[2];
  return winogradPays(*s);
}

// The gradient with respect to the input of the convolution `d` by w, for `grad` its result's
// gradient as the (N·O, K) matrix.
at::Tensor gradInput(const at::Tensor& grad, const at::Tensor& w, const Shape& d,
                     int64_t column_bytes) {
  WinogradShape s;
  if (winogradOf(d, true, &s)) {
    at::Tensor dx = at::empty({d.n, d.in[0], d.in[1], d.in[2], d.c}, w.options());
    if (winograd3x3(grad.contiguous().data_ptr<double>(), w, true, s, column_bytes,
                    dx.data_ptr<double>()))
      return fromChannelsLast(dx, d.spatial);
  }
  const int64_t kg = d.k / d.groups, taps = d.taps();
  const at::Tensor filter = filterMatrix(w, d);
  at::Tensor dx = at::zeros({d.n, d.in[0], d.in[1], d.in[2], d.c}, w.options());
  inGemmRuns(d, column_bytes, w.options(), [&](int64_t first, int64_t rows, const at::Tensor& cols) {
    const at::Tensor block = grad.narrow(0, first, rows);
    for (int64_t g = 0; g < d.groups; ++g) {  // cols_g = dy_g · filter_g
      at::Tensor dst = cols.narrow(1, g * taps, taps);
      at::mm_out(dst, block.narrow(1, g * kg, kg), filter.narrow(0, g * kg, kg));
    }
    col2im(cols.data_ptr<double>(), d, first, rows, dx.data_ptr<double>());  // where im2col read
  });
  return fromChannelsLast(dx, d.spatial);
}

// A result's gradient dy (N, K, spatial...) as the (N·O, K) matrix of forward()'s result.
at::Tensor gradMatrix(const at::Tensor& dy, const Shape& d) {
  return channelsLast(dy, d.spatial).permute({0, 2, 3, 4, 1}).reshape({d.n * d.outputs(), d.k});
}

// forward()'s GEMMs over im2col rows in tap order (runs of channels from channels-last x) and
// the transposed filter, into out (N·O, K).
void forwardTapsOrder(const at::Tensor& x, const at::Tensor& w, const Shape& d,
                      int64_t column_bytes, at::Tensor& out) {
  const int64_t groups = d.groups;
  const at::Tensor xc = channelsLast(x, d.spatial);
  const int64_t kg = d.k / groups, taps = d.taps();
  const at::Tensor filter = filterMatrix(w, d);
  inGemmRuns(d, column_bytes, x.options(), [&](int64_t first, int64_t rows, const at::Tensor& cols) {
    im2col(xc.data_ptr<double>(), d, first, rows, cols.data_ptr<double>());
    const at::Tensor block = out.narrow(0, first, rows);
    for (int64_t g = 0; g < groups; ++g) {
      at::Tensor dst = block.narrow(1, g * kg, kg);
      at::mm_out(dst, cols.narrow(1, g * taps, taps), filter.narrow(0, g * kg, kg).t());
    }
  });
}
// forward()'s result rows (N·O, K) by im2col and GEMMs.
void forwardDirect(const at::Tensor& x, const at::Tensor& w, const Shape& d, int64_t column_bytes,
                   at::Tensor& out) {
  if (d.groups == 1 && x.is_contiguous() && w.is_contiguous() &&
      rowsPerGemm(d, column_bytes) < 2 * d.k) {
    // Fewer im2col rows per GEMM than twice the filters (resnet's later layers: 32 rows of
    // 4608 against 512 filters of 4608): the rows in the filter's order, and the filter as it
    // is, rather than transposing every filter.
    const at::Tensor filter = w.view({d.k, d.taps()});
    inGemmRuns(d, column_bytes, x.options(),
               [&](int64_t first, int64_t rows, const at::Tensor& cols) {
                 im2colFilterOrder(x.data_ptr<double>(), d, first, rows, cols.data_ptr<double>());
                 at::Tensor dst = out.narrow(0, first, rows);
                 at::mm_out(dst, cols, filter.t());
               });
  } else {
    forwardTapsOrder(x, w, d, column_bytes, out);
  }
}
}  // namespace

at::Tensor forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                   c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
                   int64_t groups, int64_t column_bytes) {
  Shape d;
  if (!shapeOf(x, w, stride, padding, dilation, groups, &d)) return {};
  if (bias.defined() && (!fp64Cpu(bias) || bias.dim() != 1 || bias.size(0) != d.k)) return {};
  const at::NoGradGuard no_grad;
  at::Tensor out = at::empty({d.n * d.outputs(), d.k}, x.options());
  WinogradShape s;
  if (!winogradOf(d, false, &s) || !winograd3x3(channelsLast(x, d.spatial).data_ptr<double>(), w,
                                               false, s, column_bytes, out.data_ptr<double>()))
    forwardDirect(x, w, d, column_bytes, out);
  if (bias.defined()) out.add_(bias.view({1, d.k}));
  // In x's memory format, as aten's result: a channels-first program's output buffer then takes
  // it in one contiguous copy (a strided copy of the channels-last rows cost as much as them).
  if (x.is_contiguous()) return channelsFirst(out, d);
  return fromChannelsLast(out.view({d.n, d.out[0], d.out[1], d.out[2], d.k}), d.spatial);
}

std::array<at::Tensor, 3> backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
                                   c10::IntArrayRef stride, c10::IntArrayRef padding,
                                   c10::IntArrayRef dilation, int64_t groups,
                                   std::array<bool, 3> mask, int64_t column_bytes) {
  Shape d;
  if (!shapeOf(x, w, stride, padding, dilation, groups, &d) || !fp64Cpu(dy) ||
      !sizesAre(dy, d, d.k, d.out))
    return {};
  const at::NoGradGuard no_grad;
  const at::Tensor grad = gradMatrix(dy, d);
  std::array<at::Tensor, 3> out;
  if (mask[2]) out[2] = grad.sum(0);
  if (mask[0]) out[0] = gradInput(grad, w, d, column_bytes);
  if (!mask[1]) return out;
  WinogradShape s;
  if (winogradOf(d, false, &s)) {
    at::Tensor dw = at::empty(w.sizes(), w.options());
    if (winogradFilterGradient(channelsLast(x, d.spatial).data_ptr<double>(),
                               grad.contiguous().data_ptr<double>(), s, column_bytes,
                               x.options(), dw.data_ptr<double>())) {
      out[1] = dw;
      return out;
    }
  }
  // dw_g = Σ over the images' rows of dy_gᵀ · cols_g.
  const int64_t kg = d.k / groups, taps = d.taps();
  const at::Tensor xc = channelsLast(x, d.spatial);
  at::Tensor dw = at::zeros({d.k, taps}, x.options());
  inGemmRuns(d, column_bytes, x.options(), [&](int64_t first, int64_t rows, const at::Tensor& cols) {
    im2col(xc.data_ptr<double>(), d, first, rows, cols.data_ptr<double>());
    const at::Tensor block = grad.narrow(0, first, rows);
    for (int64_t g = 0; g < groups; ++g) {
      at::Tensor dst = dw.narrow(0, g * kg, kg);
      dst.addmm_(block.narrow(1, g * kg, kg).t(), cols.narrow(1, g * taps, taps));
    }
  });
  out[1] = fromChannelsLast(dw.view({d.k, d.filter[0], d.filter[1], d.filter[2], d.cg}),
                            d.spatial);
  return out;
}

at::Tensor transposed(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                      c10::IntArrayRef stride, c10::IntArrayRef padding,
                      c10::IntArrayRef output_padding, c10::IntArrayRef dilation, int64_t groups,
                      int64_t column_bytes) {
  Shape d;
  if (!transposedShape(x, w, stride, padding, output_padding, dilation, groups, &d)) return {};
  if (bias.defined() && (!fp64Cpu(bias) || bias.dim() != 1 || bias.size(0) != d.c)) return {};
  const at::NoGradGuard no_grad;
  at::Tensor y = gradInput(gradMatrix(x, d), w, d, column_bytes);
  if (bias.defined()) {
    std::vector<int64_t> shape(static_cast<size_t>(d.spatial) + 2, 1);
    shape[1] = d.c;
    y.add_(bias.view(shape));
  }
  return y;
}

bool run(const c10::OperatorHandle& op, torch::jit::Stack& stack) {
  const c10::OperatorName& name = op.schema().operator_name();
  if (!name.overload_name.empty()) return false;
  // aten::convolution(input, weight, bias?, stride, padding, dilation, transposed,
  //                   output_padding, groups)
  // aten::_convolution(the same nine, benchmark, deterministic, cudnn_enabled, allow_tf32)
  // aten::conv1d / conv2d / conv3d(input, weight, bias?, stride, padding, dilation, groups)
  // aten::convolution_backward(grad_output, input, weight, bias_sizes?, stride, padding,
  //                            dilation, transposed, output_padding, groups, output_mask)
  const bool step = name.name == "aten::_convolution";
  const bool convolution = step || name.name == "aten::convolution";
  const bool convnd = name.name == "aten::conv1d" || name.name == "aten::conv2d" ||
                      name.name == "aten::conv3d";
  const bool backward_op = name.name == "aten::convolution_backward";
  const size_t args = step ? 13 : convolution ? 9 : convnd ? 7 : backward_op ? 11 : 0;
  if (args == 0 || stack.size() != args) return false;
  try {
    const c10::IValue* a = stack.data() + (backward_op ? 1 : 0);  // from input on
    const c10::IValue& groups_arg = convnd ? a[args - 1] : a[8];
    if (!a[0].isTensor() || !a[1].isTensor() || !a[3].isIntList() || !a[4].isIntList() ||
        !a[5].isIntList() || !groups_arg.isInt() || (backward_op && !stack[0].isTensor()))
      return false;
    if (!convnd && (!a[6].isBool() || !a[7].isIntList())) return false;
    const bool is_transposed = !convnd && a[6].toBool();
    const int64_t groups = groups_arg.toInt();
    const at::Tensor x = a[0].toTensor(), w = a[1].toTensor();
    const std::vector<int64_t> stride = a[3].toIntVector(), padding = a[4].toIntVector(),
                               dilation = a[5].toIntVector();
    const std::vector<int64_t> extra = convnd ? std::vector<int64_t>{0} : a[7].toIntVector();
    if (backward_op) {
      const at::Tensor dy = stack[0].toTensor();
      const c10::IValue& mask_arg = stack[10];
      if (!mask_arg.isBoolList() || mask_arg.toBoolList().size() != 3) return false;
      const c10::List<bool> m = mask_arg.toBoolList();
      const std::array<bool, 3> mask{m[0], m[1], m[2]};
      std::array<at::Tensor, 3> grads;
      Shape d;
      // The plain convolution computed: of x, or (transposed) of dy.
      if (!shapeOf(is_transposed ? dy : x, w, stride, padding, dilation, groups, &d) ||
          !faster(d))
        return false;
      if (!is_transposed) {
        grads = backward(dy, x, w, stride, padding, dilation, groups, mask);
        if (!grads[0].defined() && !grads[1].defined() && !grads[2].defined()) return false;
      } else {
        // A transposed convolution is the input gradient of the plain one by w: its input
        // gradient is that convolution of dy, its filter gradient the plain one's with the
        // roles of x and dy swapped.
        if (!fp64Cpu(x) || x.dim() != dy.dim()) return false;  // dy: checked by shapeOf
        if (mask[0]) {
          grads[0] = forward(dy, w, at::Tensor(), stride, padding, dilation, groups);
          if (!grads[0].defined() || grads[0].sizes() != x.sizes()) return false;
        }
        if (mask[1]) {
          grads[1] = backward(x, dy, w, stride, padding, dilation, groups, {false, true, false})[1];
          if (!grads[1].defined()) return false;
        }
        if (mask[2]) {
          std::vector<int64_t> dims{0};
          for (int64_t e = 2; e < dy.dim(); ++e) dims.push_back(e);
          grads[2] = dy.sum(dims);
        }
      }
      stack.clear();
      for (at::Tensor& g : grads) stack.emplace_back(std::move(g));
      return true;
    }
    if (!a[2].isTensor() && !a[2].isNone()) return false;
    const at::Tensor bias = a[2].isTensor() ? a[2].toTensor() : at::Tensor();
    Shape d;
    if (!(is_transposed ? transposedShape(x, w, stride, padding, extra, dilation, groups, &d)
                        : shapeOf(x, w, stride, padding, dilation, groups, &d)) ||
        !faster(d))
      return false;
    return replaceBy(stack, is_transposed
                                ? transposed(x, w, bias, stride, padding, extra, dilation, groups)
                                : forward(x, w, bias, stride, padding, dilation, groups));
  } catch (const c10::Error&) {
    return false;  // aten's own kernel will say what is wrong with the arguments
  }
}

}  // namespace fumi::wide_conv
