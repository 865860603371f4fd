// conv_projection.cpp — convProjection (reference.h): a convolution's output projected along its
// channels without the convolution. Built -O3 with the vector flags of fumi/simd.h
// (interposer/CMakeLists.txt): on convolution networks this is most of the checksum check's host
// time, so its kernels read every operand once for all the vectors, in unit-stride vector loops.
#include <algorithm>
#include <cmath>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "contract.h"
#include "conv_dims.h"
#include "scratch_arena.h"
#include "engine.h"
#include "fumi/dtype.hpp"
#include "fumi/simd.h"
#include "reference.h"
#include "tensor_copy.h"

namespace fumi {

namespace {

using Dir = ConvSpec::Direction;

// Activations with this many channels or more are gathered channels-last ([N, spatial..., C]),
// and the reduced convolution runs along the channels: unit-stride runs of C (of C times the
// filter width where taps are adjacent), against rows of a few to a few dozen positions in
// N x C x spatial. Below it (an RGB input's 3 channels), the spatial rows are the longer run.
// Backward filter goes channels-last from runs of kMergedRunMin (C times the filter width; its
// channels-first kernel sums each short row on its own): resnet's 3-channel 7x7 stride-2 stem
// 3.3 ms against 1.5, a 3-channel 3x3 0.64 against 0.43, a 1-channel 5x5 0.35 against 0.45.
constexpr int64_t kChannelsLastMin = 16;
constexpr int64_t kMergedRunMin = 8;

// A thread's buffer, reused by its next call with no zeroing (the kernels clear only what they
// accumulate into): on fresh memory, page faults and zeroing cost more than the projection's
// arithmetic. Above kKept bytes it is released after each call. Raw storage: an operand is
// held as fp64 or fp32 (the kernels' T), accumulators as fp64.
class Scratch {
 public:
  template <class T>
  T* get(int64_t n) {
    const size_t want = static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(T);
    chargeScratch(want);  // kept between checks, but each use counts against its budget
    if (want > size_) {
      data_.reset(static_cast<unsigned char*>(::operator new[](want, kAlign)));
      size_ = want;
    }
    return reinterpret_cast<T*>(data_.get());
  }
  void trim() {
    if (size_ > kKept) {
      data_.reset();
      size_ = 0;
    }
  }

 private:
  static constexpr size_t kKept = size_t{16} << 20;
  static constexpr std::align_val_t kAlign{64};
  struct Free {
    void operator()(unsigned char* p) const { ::operator delete[](p, kAlign); }
  };
  std::unique_ptr<unsigned char[], Free> data_;
  size_t size_ = 0;
};

// The calling thread's buffers (convProjection never nests), trimmed when the call ends.
struct Buffers {
  Scratch act, other, reduced, acc, prior, z, bias;
  static Buffers& get() {
    thread_local Buffers b;
    return b;
  }
  struct Trim {
    ~Trim() {
      Buffers& b = get();
      for (Scratch* s : {&b.act, &b.other, &b.reduced, &b.acc, &b.prior, &b.z, &b.bias}) s->trim();
    }
  };
};

template <class T>
constexpr fumi_dtype kDtypeOf = std::is_same_v<T, float> ? FUMI_DTYPE_F32 : FUMI_DTYPE_F64;

// Tensor i's elements as T (fp32 holds every narrower dtype exactly), row-major or channels-last
// (dimension 1 innermost, the others row-major around it): the tensor's own memory when it is
// laid out so already in host memory as T (a contiguous activation or filter: no copy), else a
// copy in `buf`. nullptr when absent (i < 0) or unreadable, *ok false for the latter.
template <class T>
bool inPlaceAs(const fumi_tensor& t, bool channels_last, int64_t* strides) {
  if (channels_last) channelsLastStrides(t.ndim, t.shape, strides);
  else denseStrides(t.ndim, t.shape, strides);
  bool in_place = t.memory == FUMI_MEMORY_HOST && t.dtype == kDtypeOf<T> && t.data;
  for (int32_t d = 0; in_place && d < t.ndim; ++d)
    in_place = t.shape[d] <= 1 || t.strides[d] == strides[d];
  return in_place;
}
template <class T>
const T* operandAt(const std::vector<fumi_tensor>& ts, int i, bool channels_last, Scratch& buf,
                   bool* ok) {
  if (i < 0) return nullptr;
  const fumi_tensor& t = ts[static_cast<size_t>(i)];
  int64_t strides[FUMI_MAX_DIMS];
  if (inPlaceAs<T>(t, channels_last, strides)) return static_cast<const T*>(t.data);
  T* out = buf.get<T>(tensorNumel(t));
  if (gatherTensorAt(t, out, kDtypeOf<T>, strides) != FUMI_OK) *ok = false;
  return out;
}

template <class T>
FUMI_WIDE double maxAbs(const T* v, int64_t n) {
  double m = 0;
  FUMI_SIMD(reduction(max : m))
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(static_cast<double>(v[i])));
  return m;
}

// The kernels read the operands (x, w, dy: T) widened to fp64 against fp64 vectors, reduced
// operands and sums.
template <class T>
inline double dot(const T* a, const double* b, int64_t n) {
  double s = 0;
  FUMI_SIMD(reduction(+ : s))
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// part[j] = x . R_j (R_j = R + j * stride) for j < nq <= 4: x read once for all of them, four
// independent sums (one dot product at a time waits on its adds).
template <class T>
inline void dotMany(const T* x, const double* R, int64_t stride, int32_t nq, int64_t n,
                    double* part) {
  if (nq < 4) {
    for (int32_t j = 0; j < nq; ++j) part[j] = dot(x, R + j * stride, n);
    return;
  }
  const double *r0 = R, *r1 = R + stride, *r2 = R + 2 * stride, *r3 = R + 3 * stride;
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  FUMI_SIMD(reduction(+ : s0, s1, s2, s3))
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    s0 += v * r0[i];
    s1 += v * r1[i];
    s2 += v * r2[i];
    s3 += v * r3[i];
  }
  part[0] = s0, part[1] = s1, part[2] = s2, part[3] = s3;
}

template <class T>
inline void axpy(double* y, double a, const T* x, int64_t n) {
  FUMI_SIMD()
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// y_j += a_j x (y_j = y + j * stride) for j < nq <= 4: x read once for all of them.
template <class T>
inline void axpyMany(double* y, int64_t stride, const double* a, const T* x, int64_t n,
                     int32_t nq) {
  if (nq < 4) {
    for (int32_t j = 0; j < nq; ++j) axpy(y + j * stride, a[j], x, n);
    return;
  }
  double *y0 = y, *y1 = y + stride, *y2 = y + 2 * stride, *y3 = y + 3 * stride;
  const double a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3];
  FUMI_SIMD()
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    y0[i] += a0 * v;
    y1[i] += a1 * v;
    y2[i] += a2 * v;
    y3[i] += a3 * v;
  }
}

// Taps [lo, hi) of spatial dimension e whose input o * stride - pad + f * dilation lies inside x,
// for output position o.
void tapRange(const ConvDims& d, int e, int64_t o, int64_t* lo, int64_t* hi) {
  const int64_t first = o * d.stride[e] - d.pad[e];  // the input under tap 0
  const int64_t dil = d.dilation[e];
  *lo = first >= 0 ? 0 : (-first + dil - 1) / dil;
  *hi = first > d.in[e] - 1 ? 0 : std::min(d.filter[e], (d.in[e] - 1 - first) / dil + 1);
}

// The reduced convolution (one channel on the projected side, groups 1) for all `count` vectors
// at once, plain fp64 sums, into `out` in the projection's layout (Projection). R is the reduced
// operand with taps in loop order (mirrored already for a true convolution):
//   forward          A = x,  R = w_r [count, C, filter]  -> out [N, count, out]
//   backward data    A = dy, R = w_r [count, K, filter]  -> out [N, count, in]
//   backward filter  A = x,  R = dy_r [N, count, out]    -> out [count, C, filter]
// Channels-first kernel: A dense [N, channels, spatial], the innermost loops over the output
// positions of a row, each tap's valid range computed once per row.
template <class T>
FUMI_WIDE void reducedChannelsFirst(const ConvDims& d, const ConvSpec& s, int32_t count,
                                    const T* A, const double* R, double* out) {
  const int64_t in_sp = d.spatialSize(d.in), f_sp = d.spatialSize(d.filter),
                out_sp = d.spatialSize(d.out);
  const int64_t channels = s.direction == Dir::kBackwardData ? d.k : d.c;
  const int64_t a_sp = s.direction == Dir::kBackwardData ? out_sp : in_sp;
  const int64_t out_size = s.direction == Dir::kForward        ? d.n * count * out_sp
                           : s.direction == Dir::kBackwardData ? d.n * count * in_sp
                                                               : count * d.c * f_sp;
  std::fill(out, out + out_size, 0.0);
  const int64_t st = d.stride[2];
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t ch = 0; ch < channels; ++ch) {
      const T* a = A + (n * channels + ch) * a_sp;
      for (int64_t f0 = 0; f0 < d.filter[0]; ++f0)
        for (int64_t f1 = 0; f1 < d.filter[1]; ++f1)
          for (int64_t f2 = 0; f2 < d.filter[2]; ++f2) {
            const int64_t tap = (f0 * d.filter[1] + f1) * d.filter[2] + f2;
            // Outputs o2 whose input i2 = o2 * stride - pad + f2 * dilation lies inside.
            const int64_t shift = f2 * d.dilation[2] - d.pad[2];
            const int64_t lo = shift >= 0 ? 0 : (-shift + st - 1) / st;
            const int64_t hi =
                std::min(d.out[2], d.in[2] - 1 - shift < 0 ? 0 : (d.in[2] - 1 - shift) / st + 1);
            if (lo >= hi) continue;
            for (int64_t o0 = 0; o0 < d.out[0]; ++o0) {
              const int64_t i0 = o0 * d.stride[0] - d.pad[0] + f0 * d.dilation[0];
              if (i0 < 0 || i0 >= d.in[0]) continue;
              for (int64_t o1 = 0; o1 < d.out[1]; ++o1) {
                const int64_t i1 = o1 * d.stride[1] - d.pad[1] + f1 * d.dilation[1];
                if (i1 < 0 || i1 >= d.in[1]) continue;
                const int64_t in_row = (i0 * d.in[1] + i1) * d.in[2] + shift;
                const int64_t out_row = (o0 * d.out[1] + o1) * d.out[2];
                for (int32_t q = 0; q < count; ++q) switch (s.direction) {
                    case Dir::kForward: {
                      const double w = R[(q * channels + ch) * f_sp + tap];
                      double* y = out + (n * count + q) * out_sp + out_row;
                      FUMI_SIMD()
                      for (int64_t o2 = lo; o2 < hi; ++o2) y[o2] += a[in_row + o2 * st] * w;
                      break;
                    }
                    case Dir::kBackwardData: {
                      const double w = R[(q * channels + ch) * f_sp + tap];
                      double* x = out + (n * count + q) * in_sp + in_row;
                      FUMI_SIMD()
                      for (int64_t o2 = lo; o2 < hi; ++o2) x[o2 * st] += a[out_row + o2] * w;
                      break;
                    }
                    case Dir::kBackwardFilter: {
                      const double* dy = R + (n * count + q) * out_sp + out_row;
                      double acc = 0;
                      FUMI_SIMD(reduction(+ : acc))
                      for (int64_t o2 = lo; o2 < hi; ++o2) acc += a[in_row + o2 * st] * dy[o2];
                      out[(q * d.c + ch) * f_sp + (s.flip ? f_sp - 1 - tap : tap)] += acc;
                      break;
                    }
                  }
              }
            }
          }
    }
}

// The same reduced convolution with A channels-last [N, spatial, channels] and w_r
// [count, filter, channels]: for each output position and tap, a unit-stride run over the
// channels (over the filter width times the channels when the taps of a row are adjacent,
// dilation 1). Forward out[n, q, o] = sum over f of x[n, i(o, f), :] . w_r[q, f, :]; backward
// data scatters dy[n, o, :] . w_r[q, f, :] to out[n, q, i(o, f)]; backward filter adds
// dy_r[n, q, o] x[n, i(o, f), :] to acc[q, f, :] (count x filter x C, then written out in the
// projection's layout).
template <class T>
FUMI_WIDE void reducedChannelsLast(const ConvDims& d, const ConvSpec& s, int32_t count,
                                   const T* A, const double* R, double* acc, double* out) {
  const int64_t in_sp = d.spatialSize(d.in), f_sp = d.spatialSize(d.filter),
                out_sp = d.spatialSize(d.out);
  const int64_t C = s.direction == Dir::kBackwardData ? d.k : d.c;
  if (s.direction == Dir::kBackwardData) std::fill(out, out + d.n * count * in_sp, 0.0);
  if (s.direction == Dir::kBackwardFilter) std::fill(acc, acc + count * f_sp * C, 0.0);
  // Adjacent taps of a row read adjacent channel runs of x (dilation 1): one run of their
  // channels together.
  const bool merged = d.dilation[2] == 1;
  const int64_t x_step = d.dilation[2] * C;  // between the x runs of adjacent taps
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t o0 = 0; o0 < d.out[0]; ++o0) {
      int64_t lo0, hi0;
      tapRange(d, 0, o0, &lo0, &hi0);
      for (int64_t o1 = 0; o1 < d.out[1]; ++o1) {
        int64_t lo1, hi1;
        tapRange(d, 1, o1, &lo1, &hi1);
        for (int64_t o2 = 0; o2 < d.out[2]; ++o2) {
          int64_t lo2, hi2;
          tapRange(d, 2, o2, &lo2, &hi2);
          const int64_t o = (o0 * d.out[1] + o1) * d.out[2] + o2;
          const int64_t taps = hi2 - lo2, runs = merged ? 1 : taps, run = merged ? taps * C : C;
          if (taps <= 0) {
            if (s.direction == Dir::kForward)
              for (int32_t q = 0; q < count; ++q) out[(n * count + q) * out_sp + o] = 0;
            continue;
          }
          const T* dy = A + (n * out_sp + o) * C;  // backward data
          // Vectors four at a time: each run of x or dy is read once for the four.
          for (int32_t q0 = 0; q0 < count; q0 += 4) {
            const int32_t nq = std::min<int32_t>(4, count - q0);
            double sum[4] = {0, 0, 0, 0}, part[4];  // forward
            for (int64_t f0 = lo0; f0 < hi0; ++f0)
              for (int64_t f1 = lo1; f1 < hi1; ++f1) {
                const int64_t i0 = o0 * d.stride[0] - d.pad[0] + f0 * d.dilation[0];
                const int64_t i1 = o1 * d.stride[1] - d.pad[1] + f1 * d.dilation[1];
                const int64_t i2 = o2 * d.stride[2] - d.pad[2] + lo2 * d.dilation[2];
                const int64_t in_at = (i0 * d.in[1] + i1) * d.in[2] + i2;
                // Vector q's taps start f_sp further on than vector q - 1's.
                const int64_t tap =
                    ((q0 * d.filter[0] + f0) * d.filter[1] + f1) * d.filter[2] + lo2;
                switch (s.direction) {
                  case Dir::kForward: {
                    const T* x = A + (n * in_sp + in_at) * C;
                    for (int64_t r = 0; r < runs; ++r) {
                      dotMany(x + r * x_step, R + (tap + r) * C, f_sp * C, nq, run, part);
                      for (int32_t j = 0; j < nq; ++j) sum[j] += part[j];
                    }
                    break;
                  }
                  case Dir::kBackwardData: {
                    for (int64_t t = 0; t < taps; ++t) {
                      dotMany(dy, R + (tap + t) * C, f_sp * C, nq, C, part);
                      for (int32_t j = 0; j < nq; ++j)
                        out[(n * count + q0 + j) * in_sp + in_at + t * d.dilation[2]] += part[j];
                    }
                    break;
                  }
                  case Dir::kBackwardFilter: {
                    const T* x = A + (n * in_sp + in_at) * C;
                    for (int32_t j = 0; j < nq; ++j) {
                      const double coef = R[(n * count + q0 + j) * out_sp + o];
                      for (int64_t r = 0; r < runs; ++r)
                        axpy(acc + (tap + j * f_sp + r) * C, coef, x + r * x_step, run);
                    }
                    break;
                  }
                }
              }
            if (s.direction == Dir::kForward)
              for (int32_t j = 0; j < nq; ++j) out[(n * count + q0 + j) * out_sp + o] = sum[j];
          }
        }
      }
    }
  if (s.direction != Dir::kBackwardFilter) return;
  for (int32_t q = 0; q < count; ++q)
    for (int64_t f = 0; f < f_sp; ++f) {
      const int64_t tap = s.flip ? f_sp - 1 - f : f;
      const double* a = acc + (q * f_sp + f) * C;
      for (int64_t c = 0; c < C; ++c) out[(q * C + c) * f_sp + tap] = a[c];
    }
}

// The reduced operand for every vector (r_q = vectors + q * len), from B (w, or dy for backward
// filter), and mag[v]: the sum of the magnitudes that element v of the vectors scales, for the
// noise bound (mag zeroed by the caller).
//   forward          w_r[q, c, f] = sum over k of c's group of r_q[k] w[k, c, f]: per k, one
//                    scaled add of its whole (C/groups x filter) block; B row-major, w_r
//                    [count, C, filter] in storage tap order
//   backward data    w_r[q, f, k] = sum over c of k's group of r_q[c] w[k, c, f]: a dot
//                    product over the channels; B channels-last [K, filter, C/groups], w_r
//                    [count, filter, K]
//   backward filter  dy_r[n, q, o] = sum over k of r_q[k] dy[n, k, o]; B row-major
template <class T>
FUMI_WIDE void reduceOperand(const ConvDims& d, const ConvSpec& s, int32_t count, int64_t len,
                             const double* r, const T* B, double* out, double* mag) {
  const int64_t f_sp = d.spatialSize(d.filter), out_sp = d.spatialSize(d.out);
  switch (s.direction) {
    case Dir::kForward: {
      const int64_t block = d.cg * f_sp;
      std::fill(out, out + count * d.c * f_sp, 0.0);
      for (int64_t k = 0; k < d.k; ++k) {
        const T* w = B + k * block;
        double m = 0;
        FUMI_SIMD(reduction(+ : m))
        for (int64_t e = 0; e < block; ++e) m += std::fabs(w[e]);
        mag[k] = m;
        for (int32_t q0 = 0; q0 < count; q0 += 4) {  // vectors four at a time: w read once
          const int32_t nq = std::min<int32_t>(4, count - q0);
          double a[4];
          for (int32_t j = 0; j < nq; ++j) a[j] = r[(q0 + j) * len + k];
          axpyMany(out + (q0 * d.c + (k / d.kg) * d.cg) * f_sp, d.c * f_sp, a, w, block, nq);
        }
      }
      break;
    }
    case Dir::kBackwardData:
      for (int64_t k = 0; k < d.k; ++k) {
        const int64_t c0 = (k / d.kg) * d.cg;  // the first input channel of k's group
        for (int64_t f = 0; f < f_sp; ++f) {
          const T* w = B + (k * f_sp + f) * d.cg;
          FUMI_SIMD()
          for (int64_t cl = 0; cl < d.cg; ++cl) mag[c0 + cl] += std::fabs(w[cl]);
          for (int32_t q0 = 0; q0 < count; q0 += 4) {
            const int32_t nq = std::min<int32_t>(4, count - q0);
            double part[4];
            dotMany(w, r + q0 * len + c0, len, nq, d.cg, part);
            for (int32_t j = 0; j < nq; ++j) out[((q0 + j) * f_sp + f) * d.k + k] = part[j];
          }
        }
      }
      break;
    case Dir::kBackwardFilter:
      std::fill(out, out + d.n * count * out_sp, 0.0);
      for (int64_t n = 0; n < d.n; ++n)
        for (int64_t k = 0; k < d.k; ++k) {
          const T* dy = B + (n * d.k + k) * out_sp;
          double m = 0;
          FUMI_SIMD(reduction(+ : m))
          for (int64_t o = 0; o < out_sp; ++o) m += std::fabs(dy[o]);
          mag[k] += m;
          for (int32_t q0 = 0; q0 < count; q0 += 4) {
            const int32_t nq = std::min<int32_t>(4, count - q0);
            double a[4];
            for (int32_t j = 0; j < nq; ++j) a[j] = r[(q0 + j) * len + k];
            axpyMany(out + (n * count + q0) * out_sp, out_sp, a, dy, out_sp, nq);
          }
        }
      break;
  }
}

// The activation the reduced convolution reads (x, or dy for backward data), and the operand
// summed against the vectors (w, or dy for backward filter).
int aIndex(const ConvSpec& s) { return s.direction == Dir::kBackwardData ? s.y : s.x; }
int bIndex(const ConvSpec& s) { return s.direction == Dir::kBackwardFilter ? s.y : s.w; }

// convProjection with the operands the kernels read (A, B) as T.
template <class T>
fumi_status projectAs(const std::vector<fumi_tensor>& ts, const ConvSpec& s, const ConvDims& d,
                      int32_t output, int32_t channels_dim, const Projection& p) {
  const fumi_tensor& out_t = ts[static_cast<size_t>(output)];
  const int64_t len = out_t.shape[channels_dim], out_numel = tensorNumel(out_t);
  const int32_t count = p.count;
  const int64_t f_sp = d.spatialSize(d.filter), out_sp = d.spatialSize(d.out);
  // The activation A is read by the reduced convolution (x, or dy for backward data), the other
  // operand (w, or dy for backward filter) only summed against the vectors.
  const int64_t channels = s.direction == Dir::kBackwardData ? d.k : d.c;
  bool last = s.direction == Dir::kBackwardFilter ? channels * d.filter[2] >= kMergedRunMin
                                                  : channels >= kChannelsLastMin;
  Buffers& buf = Buffers::get();
  const Buffers::Trim trim;
  bool ok = true;
  const int a_index = aIndex(s);
  // Channels-last reads a channels-first activation through a copy: where the copy would not
  // fit in the scratch budget left, the activation is read in place, channels first.
  if (int64_t strides[FUMI_MAX_DIMS]; last && a_index >= 0) {
    const fumi_tensor& a = ts[static_cast<size_t>(a_index)];
    const size_t copy = static_cast<size_t>(tensorNumel(a)) * sizeof(T);
    if (!inPlaceAs<T>(a, true, strides) && inPlaceAs<T>(a, false, strides) && copy > scratchLeft())
      last = false;
  }
  const T* A = operandAt<T>(ts, a_index, last, buf.act, &ok);
  const T* B = operandAt<T>(ts, bIndex(s), s.direction == Dir::kBackwardData, buf.other, &ok);
  const double* prior = operandAt<double>(ts, s.beta != 0 ? s.prior : -1, false, buf.prior, &ok);
  const double* Z = operandAt<double>(ts, s.alpha2 != 0 ? s.z : -1, false, buf.z, &ok);
  const double* bias = operandAt<double>(ts, s.bias, false, buf.bias, &ok);
  const auto numel = [&](int i) { return tensorNumel(ts[static_cast<size_t>(i)]); };
  if (!ok || (prior && numel(s.prior) != out_numel) || (Z && numel(s.z) != out_numel) ||
      (bias && numel(s.bias) != len))
    return FUMI_UNSUPPORTED;

  // The reduced operand, and for a filter one in the kernel's layout: taps in loop order
  // (mirrored for a true convolution), [count, filter, channels] or [count, channels, filter].
  const double* r = p.vectors;
  std::vector<double> mag(static_cast<size_t>(len), 0.0);
  const int64_t r_size =
      s.direction == Dir::kBackwardFilter ? d.n * count * out_sp : count * channels * f_sp;
  double* R = buf.reduced.get<double>(r_size);
  if (s.direction == Dir::kBackwardFilter) {
    reduceOperand(d, s, count, len, r, B, R, mag.data());
  } else {
    double* Tr = buf.acc.get<double>(r_size);
    reduceOperand(d, s, count, len, r, B, Tr, mag.data());
    // (channel, tap) steps of T, and of R
    const bool fwd = s.direction == Dir::kForward;
    const int64_t t_ch = fwd ? f_sp : 1, t_f = fwd ? 1 : channels;
    const int64_t r_ch = last ? 1 : f_sp, r_f = last ? channels : 1;
    for (int32_t q = 0; q < count; ++q)
      for (int64_t ch = 0; ch < channels; ++ch)
        for (int64_t f = 0; f < f_sp; ++f)
          R[q * channels * f_sp + ch * r_ch + (s.flip ? f_sp - 1 - f : f) * r_f] =
              Tr[q * channels * f_sp + ch * t_ch + f * t_f];
  }
  if (last)
    reducedChannelsLast(d, s, count, A, R, buf.acc.get<double>(count * f_sp * channels), p.out);
  else
    reducedChannelsFirst(d, s, count, A, R, p.out);

  // The terms the reduced convolution leaves out, projected directly: beta * prior,
  // alpha2 * z, bias.
  const int64_t projected = out_numel / std::max<int64_t>(len, 1) * count;
  const int64_t outer = channels_dim == 0 ? 1 : d.n,
                inner = projected / count / std::max<int64_t>(outer, 1);
  for (int64_t i = 0; i < projected; ++i) p.out[i] *= s.alpha;
  std::vector<int64_t> shape(out_t.shape, out_t.shape + out_t.ndim);
  for (const auto& [data, scale] : {std::pair{prior, s.beta}, std::pair{Z, s.alpha2}}) {
    if (!data) continue;
    const fumi_tensor t = hostTensor("term", shape, const_cast<double*>(data));
    if (!contractTensor(t, data, FUMI_DTYPE_F64, channels_dim, count, p.vectors, scale, true,
                        p.out))
      return FUMI_UNSUPPORTED;
  }
  for (int32_t q = 0; q < count && bias; ++q) {
    double b = 0;
    for (int64_t c = 0; c < len; ++c) b += r[q * len + c] * bias[c];
    for (int64_t a = 0; a < outer; ++a)
      for (int64_t i = 0; i < inner; ++i) p.out[(a * count + q) * inner + i] += b;
  }
  // The reduced operand carries fp64 rounding (about len * 2^-53 of its terms' magnitudes), so
  // every projected element does too, up to this bound: values below it are that noise, and
  // are 0 (an output that is exactly zero must project to exactly zero).
  const double other = maxAbs(A, numel(a_index));
  const double others = std::fabs(s.beta) * (prior ? maxAbs(prior, out_numel) : 0) +
                        std::fabs(s.alpha2) * (Z ? maxAbs(Z, out_numel) : 0) +
                        (bias ? maxAbs(bias, len) : 0);
  zeroConvNoise(p, len, f_sp, outer, inner, [&](int32_t q) {
    double r_abs = 0, term_abs = 0;  // sums of |r_c| and of the reduced operand's terms
    for (int64_t c = 0; c < len; ++c) {
      r_abs += std::fabs(r[q * len + c]);
      term_abs += std::fabs(r[q * len + c]) * mag[static_cast<size_t>(c)];
    }
    return std::fabs(s.alpha) * other * term_abs + others * r_abs;
  });
  return FUMI_OK;
}

}  // namespace

void zeroConvNoise(const Projection& p, int64_t len, int64_t taps, int64_t outer, int64_t inner,
                   const std::function<double(int32_t q)>& bound) {
  for (int32_t q = 0; q < p.count; ++q) {
    const double noise = 4.0 * static_cast<double>(len + taps) * 0x1p-53 * bound(q);
    for (int64_t a = 0; a < outer; ++a) {
      double* o = p.out + (a * p.count + q) * inner;
      for (int64_t i = 0; i < inner; ++i)
        if (std::fabs(o[i]) <= noise) o[i] = 0.0;
    }
  }
}

fumi_status convProjection(const std::vector<fumi_tensor>& ts, const ConvSpec& s, int32_t output,
                           const Projection& p) {
  const int expected = s.direction == Dir::kForward        ? s.y
                       : s.direction == Dir::kBackwardData ? s.x
                                                           : s.w;
  const int32_t channels_dim = s.direction == Dir::kBackwardFilter ? 0 : 1;
  if (output != expected || p.dim != channels_dim || p.out_lo || p.count < 1 ||
      s.act != ConvSpec::Act::kNone || s.x < 0 || s.w < 0 || s.y < 0)
    return FUMI_UNSUPPORTED;
  ConvDims d;
  if (!d.read(ts[static_cast<size_t>(s.x)], ts[static_cast<size_t>(s.w)],
              ts[static_cast<size_t>(s.y)], s) ||
      (s.direction == Dir::kBackwardFilter && s.groups != 1))
    return FUMI_UNSUPPORTED;
  // The operands the kernels read, as fp32 unless one of them holds more (half the bytes of
  // fp64 copies, and none at all for contiguous fp32 tensors).
  const auto narrow = [&](int i) {
    const fumi_dtype t = ts[static_cast<size_t>(i)].dtype;
    return t == FUMI_DTYPE_F32 || t == FUMI_DTYPE_F16 || t == FUMI_DTYPE_BF16;
  };
  return narrow(aIndex(s)) && narrow(bIndex(s))
             ? projectAs<float>(ts, s, d, output, channels_dim, p)
             : projectAs<double>(ts, s, d, output, channels_dim, p);
}

}  // namespace fumi
