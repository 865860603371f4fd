// device_kernels.h — fumi's own CUDA kernels: checksum's projections, the NaN/Inf scan and the
// comparison of outputs (highprec, determinism, perturb) for operands in device memory, so that
// only projections and reductions' partial results come back to the host, not the tensors. One
// source for three compilers: nvcc builds the kernels
// (device_kernels.cu, embedded in libfumi as a fatbin and loaded through the driver API:
// device_launch.cpp), the host compiler builds the launches' parameter blocks, and the
// simulated device (tests/simdevice/cuda.cpp) runs the same bodies over the same grid.
//
// Every kernel is a body run once per (block, thread) with no shared memory, no atomics and no
// warp intrinsics: each thread owns its outputs, and sums are taken in a fixed order (chunks
// of the contracted axis, then the chunks in order), so results are deterministic and do not
// depend on the device. Accumulation is fp64.
#pragma once

#include <cstdint>
#include <cstring>

#include "counter_draw.h"  // perturb's draws (plugins/common)
#include "fumi/dtype.hpp"  // loadAsDouble, storeFromDouble: the host's own conversions
#include "metrics.h"       // the comparison's scales (plugins/common)

#ifdef __CUDACC__
#define FUMI_HD __host__ __device__ inline
#define FUMI_UNROLL _Pragma("unroll")
#else
#define FUMI_HD inline
#define FUMI_UNROLL
#endif

namespace fumi::cuda::kern {

constexpr int kMaxDims = 8;       // FUMI_MAX_DIMS
constexpr int kMaxVectors = 8;    // vectors per contraction launch
constexpr int kThreads = 128;     // threads per block, every kernel
// The element-wise reductions' first grid, at most: 1024 blocks (131 072 threads, 8 MiB of
// partial results) keep a device's memory busy on tensors of millions of elements, where 256
// blocks (two per SM of an H100) would wait on each load in turn.
constexpr int kReduceBlocks = 1024;

// Element types: fumi_dtype's (plugin.h) for the ones the kernels read.
enum Dtype : int32_t {
  kF64 = FUMI_DTYPE_F64,
  kF32 = FUMI_DTYPE_F32,
  kF16 = FUMI_DTYPE_F16,
  kBF16 = FUMI_DTYPE_BF16
};

// Kept dimensions of a strided view (the contracted one removed, or all of them for a scan),
// outermost first: element index p = sum of coordinates times `stride`.
struct Dims {
  int32_t ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};
};

FUMI_HD int64_t offsetOf(const Dims& d, int64_t p) {
  if (d.ndim == 1) return p * d.stride[0];  // no divisions (64-bit ones are slow on devices)
  int64_t off = 0;
  for (int32_t i = d.ndim - 1; i >= 0; --i) {
    const int64_t c = p % d.shape[i];
    p /= d.shape[i];
    off += c * d.stride[i];
  }
  return off;
}

FUMI_HD double load(const void* data, int32_t dtype, int64_t i) {
  return loadAsDouble(data, i, static_cast<fumi_dtype>(dtype));
}

// ---- contraction -----------------------------------------------------------------------------
// out[(o * total + first + s) * inner + q] = sum_i vectors[s * len + i] * view[o, i, q]
// for s < count (the launch's vectors, `first` of `total`), the view read as outer x len x
// inner around its contracted axis (stride `sl`); `kept` lists outer's and inner's dimensions
// (inner's last, `inner` their size), `outputs` = outer * inner. Grid: x over the outputs
// times `lanes`, y over `chunks` chunks of `chunk` contracted elements: with one lane a thread
// sums its output's chunk; with kLanes (a contracted axis of unit stride, its outputs far
// apart in memory: a column-major matrix's columns), the kLanes threads of an output take
// every kLanes-th element of the chunk, so that a warp reads consecutive elements. The
// partial sums go to partial[((y * lanes + lane) * outputs + o) * count + s], and the second
// kernel adds them in that order.
struct ContractParams {
  const void* data = nullptr;
  int32_t dtype = 0;
  int32_t count = 0, first = 0, total = 0;
  Dims kept;
  int64_t outputs = 0, inner = 1, len = 0, sl = 0, chunk = 0, chunks = 0, lanes = 1;
  const double* vectors = nullptr;  // device memory, count x len
  double* partial = nullptr;        // device memory, chunks x lanes x outputs x count
  double* out = nullptr;            // device memory, outer x total x inner
};

constexpr int64_t kLanes = 32;  // a warp

template <int32_t kDtype>
FUMI_HD void contractChunk(const ContractParams& p, int64_t out_index, int64_t chunk,
                           int64_t lane) {
  double acc[kMaxVectors] = {};
  const int64_t base = offsetOf(p.kept, out_index);
  const int64_t begin = chunk * p.chunk;
  const int64_t end = begin + p.chunk < p.len ? begin + p.chunk : p.len;
  for (int64_t i = begin + lane; i < end; i += p.lanes) {
    const double x = load(p.data, kDtype, base + i * p.sl);
    FUMI_UNROLL
    for (int s = 0; s < kMaxVectors; ++s)
      if (s < p.count) acc[s] += x * p.vectors[s * p.len + i];
  }
  double* dst = p.partial + ((chunk * p.lanes + lane) * p.outputs + out_index) * p.count;
  for (int s = 0; s < p.count; ++s) dst[s] = acc[s];
}

// First kernel: thread `t` of the grid's row `chunk` (output t / lanes, lane t % lanes).
FUMI_HD void contractPartialBody(const ContractParams& p, int64_t t, int64_t chunk) {
  if (t >= p.outputs * p.lanes || chunk >= p.chunks) return;
  const int64_t o = t / p.lanes, lane = t % p.lanes;
  switch (p.dtype) {
    case kF64: contractChunk<kF64>(p, o, chunk, lane); break;
    case kF32: contractChunk<kF32>(p, o, chunk, lane); break;
    case kF16: contractChunk<kF16>(p, o, chunk, lane); break;
    default: contractChunk<kBF16>(p, o, chunk, lane); break;
  }
}

// Second kernel: thread t = output * count + s adds its chunks' lanes in order.
FUMI_HD void contractReduceBody(const ContractParams& p, int64_t t) {
  if (t >= p.outputs * p.count) return;
  const int64_t o = t / p.count, s = t % p.count;
  double sum = 0;
  for (int64_t c = 0; c < p.chunks * p.lanes; ++c)
    sum += p.partial[(c * p.outputs + o) * p.count + s];
  const int64_t outer = o / p.inner, q = o % p.inner;
  p.out[(outer * p.total + p.first + s) * p.inner + q] = sum;
}

// ---- convolution ----------------------------------------------------------------------------
// One fp64 convolution (groups 1, cross-correlation) in one of three directions, as checksum
// projects a convolution on the device (framework_projection.h): `dev` an operand in device
// memory (its dtype and strides), `host` the operand reduced against the vectors (dense fp64,
// copied to the device), `out` dense fp64. Spatial extents padded in front to 3 (extent 1):
//   forward          out[n, q, o] = sum_{c, t} dev[n, c, o*s - p + t*d] * host[q, c, t]
//   backward data    out[n, q, i] = sum_{k, t, o: o*s - p + t*d = i} dev[n, k, o] * host[k, q, t]
//   backward filter  out[q, c, t] = sum_{n, o} host[n, q, o] * dev[n, c, o*s - p + t*d]
// (taps t and positions outside the operand read nothing). Grid: x over the outputs, y over
// `chunks` chunks of `chunk` images (backward filter sums over the images; the other
// directions have one chunk); partial[y * outputs + t], the second kernel adds the chunks in
// order into out.
struct ConvParams {
  int32_t direction = 0;  // fumi_conv_direction: 0 forward, 1 backward data, 2 backward filter
  const void* dev = nullptr;
  int32_t dev_dtype = 0;
  int64_t dev_shape[5] = {}, dev_stride[5] = {};
  const double* host = nullptr;
  int64_t host_shape[5] = {};
  int64_t out_shape[5] = {};
  int64_t stride[3] = {1, 1, 1}, pad[3] = {}, dil[3] = {1, 1, 1};
  int64_t outputs = 0, chunk = 1, chunks = 1;
  double* partial = nullptr;  // device memory, chunks x outputs
  double* out = nullptr;      // device memory, outputs
};

template <int32_t kDtype>
FUMI_HD double convPartial(const ConvParams& p, int64_t t, int64_t chunk) {
  const int64_t* os = p.out_shape;
  int64_t pos[3], rest = t;
  for (int e = 2; e >= 0; --e) {
    pos[e] = rest % os[2 + e];
    rest /= os[2 + e];
  }
  const int64_t b = rest % os[1], a = rest / os[1];
  const int64_t* ds = p.dev_shape;
  const int64_t* st = p.dev_stride;
  const int64_t* hs = p.host_shape;
  const auto at = [&](int64_t n, int64_t ch, const int64_t* i) {
    return load(p.dev, kDtype,
                n * st[0] + ch * st[1] + i[0] * st[2] + i[1] * st[3] + i[2] * st[4]);
  };
  const auto host = [&](int64_t h0, int64_t h1, const int64_t* i) {
    return p.host[(((h0 * hs[1] + h1) * hs[2] + i[0]) * hs[3] + i[1]) * hs[4] + i[2]];
  };
  double acc = 0;
  if (p.direction != 2) {  // a = n, b = q; pos = o (forward) or i (backward data)
    const bool forward = p.direction == 0;
    for (int64_t ch = 0; ch < ds[1]; ++ch)  // c (forward) or k (backward data)
      for (int64_t t0 = 0; t0 < hs[2]; ++t0)
        for (int64_t t1 = 0; t1 < hs[3]; ++t1)
          for (int64_t t2 = 0; t2 < hs[4]; ++t2) {
            const int64_t tap[3] = {t0, t1, t2};
            int64_t from[3];  // the position read: i = o*s - p + t*d, or o with that i
            bool in = true;
            for (int e = 0; e < 3; ++e) {
              if (forward) {
                from[e] = pos[e] * p.stride[e] - p.pad[e] + tap[e] * p.dil[e];
                in = in && from[e] >= 0;
              } else {
                const int64_t num = pos[e] + p.pad[e] - tap[e] * p.dil[e];
                from[e] = num >= 0 ? num / p.stride[e] : -1;
                in = in && num >= 0 && num % p.stride[e] == 0;
              }
              in = in && from[e] < ds[2 + e];
            }
            if (in) acc += at(a, ch, from) * (forward ? host(b, ch, tap) : host(ch, b, tap));
          }
  } else {  // a = q, b = c, pos = tap; images [chunk * p.chunk, ...)
    const int64_t first = chunk * p.chunk;
    const int64_t last = first + p.chunk < ds[0] ? first + p.chunk : ds[0];
    for (int64_t n = first; n < last; ++n)
      for (int64_t o0 = 0; o0 < hs[2]; ++o0)
        for (int64_t o1 = 0; o1 < hs[3]; ++o1)
          for (int64_t o2 = 0; o2 < hs[4]; ++o2) {
            const int64_t o[3] = {o0, o1, o2};
            int64_t i[3];
            bool in = true;
            for (int e = 0; e < 3; ++e) {
              i[e] = o[e] * p.stride[e] - p.pad[e] + pos[e] * p.dil[e];
              in = in && i[e] >= 0 && i[e] < ds[2 + e];
            }
            if (in) acc += host(n, a, o) * at(n, b, i);
          }
  }
  return acc;
}

// First kernel: thread t of grid row `chunk`.
FUMI_HD void convPartialBody(const ConvParams& p, int64_t t, int64_t chunk) {
  if (t >= p.outputs || chunk >= p.chunks) return;
  double v;
  switch (p.dev_dtype) {
    case kF64: v = convPartial<kF64>(p, t, chunk); break;
    case kF32: v = convPartial<kF32>(p, t, chunk); break;
    case kF16: v = convPartial<kF16>(p, t, chunk); break;
    default: v = convPartial<kBF16>(p, t, chunk); break;
  }
  p.partial[chunk * p.outputs + t] = v;
}

// Second kernel: output t, its chunks added in order.
FUMI_HD void convReduceBody(const ConvParams& p, int64_t t) {
  if (t >= p.outputs) return;
  double sum = 0;
  for (int64_t c = 0; c < p.chunks; ++c) sum += p.partial[c * p.outputs + t];
  p.out[t] = sum;
}

// ---- element-wise reductions -----------------------------------------------------------------
// Over the n elements of a view, one buffer (a) or two laid out alike (a, b): the NaN/Inf scan,
// the two passes of the host's comparison (plugins/common/metrics.h: comparePass1,
// comparePass2, the same fields with the same masking) and maps (below). First kernel: T
// threads (`threads`: a multiple of kThreads, about one per kPerThread elements, at most
// kReduceThreads), thread t over the elements t, t + T, ... accumulating kFields doubles (a
// field is a sum, or a maximum where `max_mask` has its bit) into partial[f * T + t] (field
// f's results side by side: a warp's stores, and the next kernel's loads, are consecutive).
// Then the combining kernel, as often as it takes (at most four times): S results into
// D = ceil(S / kFanIn), thread d combining d, d + D, d + 2D, ... in that order, until one is
// left, in `fields`: 64 bytes come back, whatever the size. Several passes over one view (a
// comparison's two) run back to back, each later one able to read the one before it where it
// is (kComparePass2: its scales from the first pass's maxima), so they come back together.
constexpr int kFields = 8;
constexpr int64_t kPerThread = 32;  // elements per thread of the first kernel, at least
constexpr int64_t kFanIn = 32;      // results combined per thread
enum ReduceOp : int32_t { kScan = 0, kComparePass1 = 1, kComparePass2 = 2, kMap = 3 };
// kMap's kinds: fumi_map_kind's (plugin.h), into a buffer `dst` laid out like the source, the
// host's mapTensor bit for bit: its conversions (fumi/dtype.hpp) and, for PERTURB, its draws
// (counter_draw.h) numbered as the host numbers the elements, in the order of their storage.
enum MapKind : int32_t {
  kMapCopy = FUMI_MAP_COPY,
  kMapAbs = FUMI_MAP_ABS,
  kMapPerturb = FUMI_MAP_PERTURB
};
struct ReduceParams {
  int32_t op = kScan;
  const void* a = nullptr;
  const void* b = nullptr;
  int32_t a_dtype = 0, b_dtype = 0;
  Dims dims;
  int64_t n = 0;
  uint32_t max_mask = 0;
  double underflow_below = 0;  // kComparePass1 (0: not counted)
  // kComparePass2: what the spec decides (metrics.h, compareWants); the scales come from the
  // first pass's fields, `previous`, on the device (scaleFromMaxima).
  metrics::detail::CompareScales k{};
  const double* previous = nullptr;  // device memory, kFields: the pass run just before
  // kMap: the kind, and where the mapped values go (field 0 counts the elements whose stored
  // value is not the source's: the host's `changed`). PERTURB: x + x * shift * u, u the
  // draw numbered `first` + the element's place in storage order (sum of its coordinates
  // times `order`, dims not merged).
  int32_t map_kind = kMapCopy;
  void* dst = nullptr;
  int32_t dst_dtype = 0;
  double shift = 0;
  uint64_t seed = 0, first = 0;
  int64_t order[kMaxDims] = {};
  int64_t threads = 0;         // the first kernel's (reduceThreads)
  double* partial = nullptr;   // device memory, kReduceThreads x kFields
  double* out = nullptr;       // device memory, kReduceThreads / kFanIn x kFields
  double* fields = nullptr;    // device memory, kFields: the result
  // The combining kernel's launch: `from_count` results into `to_count` (both field-major).
  const double* from = nullptr;
  double* to = nullptr;
  int64_t from_count = 0, to_count = 0;
};

constexpr int64_t kReduceThreads = int64_t{kReduceBlocks} * kThreads;

// The first kernel's threads for n elements.
inline int64_t reduceThreads(int64_t n) {
  const int64_t want = (n + kPerThread - 1) / kPerThread;
  const int64_t threads = (want + kThreads - 1) / kThreads * kThreads;
  return threads < kThreads ? kThreads : threads > kReduceThreads ? kReduceThreads : threads;
}

// Field masks: which are maxima.
constexpr uint32_t kScanMax = 1u << 2;                                // nan, inf, max_abs, sum_sq
constexpr uint32_t kPass1Max = (1u << 3) | (1u << 4) | (1u << 5) | (1u << 6);
constexpr uint32_t kPass2Max = (1u << 0) | (1u << 1) | (1u << 5) | (1u << 6);

FUMI_HD uint64_t doubleBits(double x) {
#ifdef __CUDA_ARCH__
  return static_cast<uint64_t>(__double_as_longlong(x));
#else
  uint64_t u;
  std::memcpy(&u, &x, 8);
  return u;
#endif
}
FUMI_HD double bitsDouble(uint64_t u) {
#ifdef __CUDA_ARCH__
  return __longlong_as_double(static_cast<long long>(u));
#else
  double x;
  std::memcpy(&x, &u, 8);
  return x;
#endif
}
FUMI_HD double absOf(double x) { return bitsDouble(doubleBits(x) & ~(uint64_t{1} << 63)); }
FUMI_HD double maxOf(double x, double y) { return x > y ? x : y; }
constexpr double kMaxFinite = 1.7976931348623157e308;

// One element's contribution to acc (kFields doubles); k: kComparePass2's scales.
FUMI_HD void reduceElement(const ReduceParams& p, const metrics::detail::CompareScales& k,
                           int64_t index, double* acc) {
  const int64_t off = offsetOf(p.dims, index);
  const double a = load(p.a, p.a_dtype, off);
  if (p.op == kMap) {
    double v = p.map_kind == kMapAbs ? absOf(a) : a;
    // Zeros keep their sign; Inf and NaN stay (inf + inf * -d would be NaN): a - a is 0
    // only for finite values.
    if (p.map_kind == kMapPerturb && a != 0.0 && a - a == 0.0) {
      int64_t j = 0, rest = index;
      for (int32_t d = p.dims.ndim - 1; d >= 0; --d) {
        j += rest % p.dims.shape[d] * p.order[d];
        rest /= p.dims.shape[d];
      }
      const double u = metrics::uniformSymDraw(p.seed, p.first + static_cast<uint64_t>(j));
      v = a + a * (p.shift * u);
    }
    const auto dt = static_cast<fumi_dtype>(p.dst_dtype);
    storeFromDouble(p.dst, off, v, dt);
    // Changed: the stored bits against the source's where the types agree, else the fp64
    // values' bits (elementwise.cpp, sameBits).
    bool same;
    if (p.a_dtype == p.dst_dtype) {
      const int bytes = p.dst_dtype == kF64 ? 8 : p.dst_dtype == kF32 ? 4 : 2;
      uint64_t x = 0, y = 0;
      std::memcpy(&x, static_cast<const char*>(p.a) + off * bytes, bytes);
      std::memcpy(&y, static_cast<const char*>(p.dst) + off * bytes, bytes);
      same = x == y;
    } else {
      same = doubleBits(loadAsDouble(p.dst, off, dt)) == doubleBits(a);
    }
    acc[0] += same ? 0 : 1;
    return;
  }
  if (p.op == kScan) {
    const double m = absOf(a);
    if (a != a) {
      acc[0] += 1;
    } else if (m > kMaxFinite) {
      acc[1] += 1;
    } else {
      acc[2] = maxOf(acc[2], m);
      acc[3] += m * m;
    }
    return;
  }
  const double b = load(p.b, p.b_dtype, off);
  const bool ok = absOf(a) <= kMaxFinite && absOf(b) <= kMaxFinite;
  if (p.op == kComparePass1) {
    acc[0] += ok ? 0 : 1;
    acc[1] += doubleBits(a) != doubleBits(b) ? 1 : 0;
    acc[2] += p.underflow_below > 0 && b != 0.0 && absOf(b) < p.underflow_below &&
                      absOf(a) < p.underflow_below
                  ? 1
                  : 0;
    if (ok) {
      acc[3] = maxOf(acc[3], absOf(0.5 * a + 0.5 * b));
      acc[4] = maxOf(acc[4], absOf(a));
      acc[5] = maxOf(acc[5], absOf(b));
      acc[6] = maxOf(acc[6], absOf(a - b));
    }
    return;
  }
  if (!ok) return;
  const double as = a * k.f, bs = b * k.f, diff = absOf(as - bs);
  if (k.ratio) {
    const double sum = absOf(as + bs);
    if (sum > 0.0) {
      const double r = diff / sum;
      acc[1] = maxOf(acc[1], r);
      if (sum > k.ratio_threshold) acc[0] = maxOf(acc[0], r);
    }
  }
  if (k.rel) {
    const double m = absOf(bs);
    if (m > k.rel_threshold && m > 0.0) acc[5] = maxOf(acc[5], diff / m);
  }
  const double d = a * k.s_diff - b * k.s_diff, rr = b * k.s_ref, yy = a * k.s_y;
  acc[2] += d * d;
  acc[3] += rr * rr;
  acc[4] += yy * yy;
  if (k.ulp) {
    // The host's ULP unit (metrics.h comparePass2): 2^(max(exponent of b, emin) - p), scaled
    // by 2^64 where it would be subnormal.
    int e = metrics::detail::rawExponent(b);
    e = (e > k.emin ? e : k.emin) - k.p;
    const bool tiny = e < -1022;
    const double inv_ulp = metrics::detail::pow2Normal(tiny ? -(e + 64) : -e);
    const double du = absOf(a - b) * (tiny ? 18446744073709551616.0 : 1.0);
    acc[6] = maxOf(acc[6], du * inv_ulp);
  }
}

FUMI_HD void reducePartialBody(const ReduceParams& p, int64_t t) {
  if (t >= p.threads) return;
  metrics::detail::CompareScales k = p.k;
  if (p.op == kComparePass2)
    metrics::detail::scaleFromMaxima(k, p.previous[3], p.previous[4], p.previous[5]);
  double acc[kFields] = {};
  for (int64_t e = t; e < p.n; e += p.threads) reduceElement(p, k, e, acc);
  for (int i = 0; i < kFields; ++i) p.partial[i * p.threads + t] = acc[i];
}

// Result d of a combining launch: from's results d, d + to_count, ... in order (a field is a
// sum, or the maximum where `max_mask` has its bit).
FUMI_HD void reduceCombineBody(const ReduceParams& p, int64_t d) {
  if (d >= p.to_count) return;
  double acc[kFields] = {};
  for (int64_t j = d; j < p.from_count; j += p.to_count)
    for (int i = 0; i < kFields; ++i) {
      const double v = p.from[i * p.from_count + j];
      acc[i] = (p.max_mask >> i) & 1u ? maxOf(acc[i], v) : acc[i] + v;
    }
  for (int i = 0; i < kFields; ++i) p.to[i * p.to_count + d] = acc[i];
}

// ---- host side: launch plans -----------------------------------------------------------------

// `dims` (size, stride) outermost first into d, merged where one steps over the next exactly
// and size-1 ones dropped (the fewer, the cheaper each thread's offset). False past kMaxDims
// or for a negative stride.
inline bool collapseDims(int32_t n, const int64_t* shape, const int64_t* stride, int32_t skip,
                         Dims& d) {
  d = Dims{};
  for (int32_t i = 0; i < n; ++i) {
    if (i == skip || shape[i] == 1) continue;
    if (stride[i] < 0) return false;
    const int32_t last = d.ndim - 1;
    if (last >= 0 && d.stride[last] == shape[i] * stride[i]) {
      d.shape[last] *= shape[i];
      d.stride[last] = stride[i];
      continue;
    }
    if (d.ndim == kMaxDims) return false;
    d.shape[d.ndim] = shape[i];
    d.stride[d.ndim++] = stride[i];
  }
  return true;
}

inline unsigned blocksFor(int64_t threads) {
  return static_cast<unsigned>((threads + kThreads - 1) / kThreads);
}

// p's shape for a view (n dimensions) contracted along `dim`: kept, outputs, inner, len, sl, the
// lanes (kLanes where the contracted axis has unit stride and the outputs do not) and the
// chunks (enough threads to fill a device, at least 32 elements each, at most 65535).
inline bool planContract(int32_t n, const int64_t* shape, const int64_t* stride, int32_t dim,
                         ContractParams& p) {
  if (dim < 0 || dim >= n || stride[dim] < 0 || !collapseDims(n, shape, stride, dim, p.kept))
    return false;
  p.outputs = p.inner = 1;
  for (int32_t i = 0; i < n; ++i)
    if (i != dim) {
      p.outputs *= shape[i];
      if (i > dim) p.inner *= shape[i];
    }
  p.len = shape[dim];
  p.sl = stride[dim];
  const bool outputs_apart = p.kept.ndim == 0 || p.kept.stride[p.kept.ndim - 1] != 1;
  p.lanes = p.sl == 1 && outputs_apart && p.len >= 2 * kLanes ? kLanes : 1;
  const int64_t threads = p.outputs * p.lanes, per_chunk = 32 * p.lanes;
  int64_t chunks = threads > 0 ? (int64_t{1} << 17) / threads : 1;
  chunks = chunks < 1 ? 1 : chunks;
  chunks = chunks > (p.len + per_chunk - 1) / per_chunk ? (p.len + per_chunk - 1) / per_chunk
                                                          : chunks;
  chunks = chunks > 65535 ? 65535 : chunks < 1 ? 1 : chunks;
  p.chunk = p.len > 0 ? (p.len + chunks - 1) / chunks : 1;
  p.chunks = p.len > 0 ? (p.len + p.chunk - 1) / p.chunk : 1;
  return true;
}

// The launches of one contraction, in order (p planned, its data, dtype, total = count,
// partial and out set; `vectors` count x len): each group of kMaxVectors vectors, the partial
// kernel then the reduction. launch(partial, gx, gy, params) makes one; false stops.
template <class Launch>
bool launchContraction(ContractParams p, const double* vectors, Launch launch) {
  for (int32_t first = 0; first < p.total; first += kMaxVectors) {
    p.first = first;
    p.count = p.total - first < kMaxVectors ? p.total - first : kMaxVectors;
    p.vectors = vectors + static_cast<int64_t>(first) * p.len;
    if (!launch(true, blocksFor(p.outputs * p.lanes), static_cast<unsigned>(p.chunks), p) ||
        !launch(false, blocksFor(p.outputs * p.count), 1u, p))
      return false;
  }
  return true;
}

// p.dims and p.order for a PERTURB map of a view (n dimensions): its dimensions unmerged (size-1
// ones dropped), with `storage` the dense strides of its storage order (tensor_copy.h,
// storageStrides): the host's numbering of the elements. False for a negative stride, and for
// a view whose elements may share memory (a broadcast): their threads would store different
// noise into one place, where the host's last write wins.
inline bool planPerturb(int32_t n, const int64_t* shape, const int64_t* stride,
                        const int64_t* storage, ReduceParams& p) {
  p.dims = Dims{};
  int64_t sorted[kMaxDims][2];  // (stride, extent), by stride: each past the span inside it
  for (int32_t i = 0; i < n; ++i) {
    if (stride[i] < 0) return false;
    if (shape[i] == 1) continue;
    int32_t k = p.dims.ndim;
    for (; k > 0 && sorted[k - 1][0] > stride[i]; --k) {
      sorted[k][0] = sorted[k - 1][0];
      sorted[k][1] = sorted[k - 1][1];
    }
    sorted[k][0] = stride[i];
    sorted[k][1] = shape[i];
    p.dims.shape[p.dims.ndim] = shape[i];
    p.dims.stride[p.dims.ndim] = stride[i];
    p.order[p.dims.ndim++] = storage[i];
  }
  int64_t span = 1;
  bool dense = true;  // the view's strides are its storage order's: offset == number
  for (int32_t k = 0; k < p.dims.ndim; ++k) {
    if (sorted[k][0] < span) return false;
    dense = dense && sorted[k][0] == span;
    span = sorted[k][0] * sorted[k][1];
  }
  for (int32_t k = 0; k < p.dims.ndim; ++k) dense = dense && p.dims.stride[k] == p.order[k];
  if (dense && p.dims.ndim > 1) {  // one run: element i at offset i, numbered i
    p.dims.ndim = 1;
    p.dims.shape[0] = span;
    p.dims.stride[0] = p.order[0] = 1;
  }
  return true;
}

// p.dims for a reduction over a view: merged (collapseDims), unless a PERTURB map has them
// planned already (planPerturb).
inline bool planReduction(int32_t n, const int64_t* shape, const int64_t* stride,
                          ReduceParams& p) {
  if (p.op == kMap && p.map_kind == kMapPerturb) return true;
  return collapseDims(n, shape, stride, -1, p.dims);
}

// The launches of `count` reductions over one view (n dimensions, `numel` elements), one after
// the other: each planned (planReduction), sharing the buffers `partial` and `out` (device
// memory: reduceThreads(numel) x kFields, and a kFanIn-th of that), its result in its own
// kFields of `fields` (count x kFields), a later one reading the one's before it there
// (`previous`: kComparePass2). Each is the first kernel, then the combining one until one result
// is left: launch(stage 0 or 1, gx, gy, p). `whole` false: the first kernel alone, where only
// its element-wise work is wanted (a map whose count nobody reads).
template <class Launch>
bool launchReductions(int32_t n, const int64_t* shape, const int64_t* stride, int64_t numel,
                      ReduceParams* passes, int count, double* partial, double* out,
                      double* fields, Launch launch, bool whole = true) {
  for (int k = 0; k < count; ++k) {
    ReduceParams& p = passes[k];
    if (!planReduction(n, shape, stride, p)) return false;
    p.n = numel;
    p.partial = partial;
    p.out = out;
    p.fields = fields + k * kFields;
    p.previous = k > 0 ? fields + (k - 1) * kFields : nullptr;
    p.threads = reduceThreads(numel);
    if (!launch(0, blocksFor(p.threads), 1u, p)) return false;
    if (!whole) continue;
    p.from = partial;
    p.from_count = p.threads;
    double* spare[2] = {out, partial};  // each launch's results where the last one's are not
    for (int s = 0; p.from_count > 1; s ^= 1) {  // threads >= kThreads: one launch at least
      p.to_count = p.from_count > kFanIn ? (p.from_count + kFanIn - 1) / kFanIn : 1;
      p.to = p.to_count == 1 ? p.fields : spare[s];
      if (!launch(1, blocksFor(p.to_count), 1u, p)) return false;
      p.from = p.to;
      p.from_count = p.to_count;
    }
  }
  return true;
}

// p's shape for a convolution of `spatial` dimensions (the sizes of dev, host and out, and
// stride/pad/dilation, at their dimensions; the rest of p set by the caller): extents padded
// in front to 3, outputs and the image chunks (backward filter: enough threads to fill a
// device). False where the shapes do not fit together as the direction says.
inline bool planConv(int32_t spatial, const int64_t* dev_shape, const int64_t* dev_stride,
                     const int64_t* host_shape, const int64_t* out_shape, const int32_t* stride,
                     const int32_t* pad, const int32_t* dil, ConvParams& p) {
  if (spatial < 1 || spatial > 3 || p.direction < 0 || p.direction > 2) return false;
  for (int i = 0; i < 5; ++i) p.dev_shape[i] = p.host_shape[i] = p.out_shape[i] = 1;
  for (int i = 0; i < 5; ++i) p.dev_stride[i] = 0;
  const int lead = 3 - spatial;
  for (int i = 0; i < spatial + 2; ++i) {
    const int j = i < 2 ? i : i + lead;
    p.dev_shape[j] = dev_shape[i];
    p.dev_stride[j] = dev_stride[i];
    p.host_shape[j] = host_shape[i];
    p.out_shape[j] = out_shape[i];
    if (dev_stride[i] < 0 || dev_shape[i] < 0 || host_shape[i] < 0 || out_shape[i] < 0)
      return false;
  }
  for (int e = 0; e < 3; ++e) p.stride[e] = p.dil[e] = 1, p.pad[e] = 0;
  for (int d = 0; d < spatial; ++d) {
    if (stride[d] < 1 || dil[d] < 1 || pad[d] < 0) return false;
    p.stride[lead + d] = stride[d];
    p.pad[lead + d] = pad[d];
    p.dil[lead + d] = dil[d];
  }
  const int64_t *ds = p.dev_shape, *hs = p.host_shape, *os = p.out_shape;
  const bool fits = p.direction == 0   ? hs[1] == ds[1] && os[0] == ds[0] && os[1] == hs[0]
                    : p.direction == 1 ? hs[0] == ds[1] && os[0] == ds[0] && os[1] == hs[1]
                                       : hs[0] == ds[0] && os[0] == hs[1] && os[1] == ds[1];
  if (!fits) return false;
  p.outputs = 1;
  for (int i = 0; i < 5; ++i) p.outputs *= os[i];
  p.chunks = 1;
  p.chunk = ds[0] > 0 ? ds[0] : 1;
  if (p.direction == 2 && p.outputs > 0 && ds[0] > 1) {
    int64_t chunks = (int64_t{1} << 17) / p.outputs;
    chunks = chunks < 1 ? 1 : chunks > ds[0] ? ds[0] : chunks > 65535 ? 65535 : chunks;
    p.chunk = (ds[0] + chunks - 1) / chunks;
    p.chunks = (ds[0] + p.chunk - 1) / p.chunk;
  }
  return true;
}

// The launches of one convolution (p planned, its pointers set): launch(partial, gx, gy, p).
template <class Launch>
bool launchConv(ConvParams& p, Launch launch) {
  return launch(true, blocksFor(p.outputs), static_cast<unsigned>(p.chunks), p) &&
         launch(false, blocksFor(p.outputs), 1u, p);
}

// The grid of a launch run on the host, (block, thread) by (block, thread): the simulated
// device's kernels and the tests of the bodies. body(t, y): thread t of grid row y.
template <class Body>
void runGridOnHost(unsigned gx, unsigned gy, Body body) {
  for (unsigned y = 0; y < gy; ++y)
    for (int64_t t = 0; t < int64_t{gx} * kThreads; ++t) body(t, static_cast<int64_t>(y));
}

// The kernels' names in the module (device_kernels.cu) and the simulated device.
constexpr const char* kContractPartial = "fumi_contract_partial";
constexpr const char* kContractReduce = "fumi_contract_reduce";
constexpr const char* kReducePartial = "fumi_reduce_partial";
constexpr const char* kReduceCombine = "fumi_reduce_combine";
constexpr const char* kConvPartial = "fumi_conv_partial";
constexpr const char* kConvReduce = "fumi_conv_reduce";

}  // namespace fumi::cuda::kern
