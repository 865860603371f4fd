// device_kernels.h — fumi's own CUDA kernels: checksum's projections and the NaN/Inf scan of
// operands in device memory, so that only the projections (and four scalars) come back to the
// host, not the tensors. One source for three compilers: nvcc builds the kernels
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
constexpr int kScanBlocks = 256;  // the scan's first grid

// Element types: fumi_dtype's values (plugin.h; device_launch.cpp asserts they agree) for the
// ones the kernels read.
enum Dtype : int32_t { kF64 = 0, kF32 = 1, kF16 = 2, kBF16 = 3 };

// Kept dimensions of a strided view (the contracted one removed, or all of them for a scan),
// outermost first: element index p = sum of coordinates times `stride`.
struct Dims {
  int32_t ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};
};

FUMI_HD int64_t offsetOf(const Dims& d, int64_t p) {
  int64_t off = 0;
  for (int32_t i = d.ndim - 1; i >= 0; --i) {
    const int64_t c = p % d.shape[i];
    p /= d.shape[i];
    off += c * d.stride[i];
  }
  return off;
}

FUMI_HD float bitsToFloat(uint32_t bits) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

FUMI_HD float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);  // Inf, NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exp = 113;
    while (!(man & 0x400u)) {
      man <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
  }
  return bitsToFloat(bits);
}

FUMI_HD float bf16ToFloat(uint16_t h) { return bitsToFloat(static_cast<uint32_t>(h) << 16); }

FUMI_HD double load(const void* data, int32_t dtype, int64_t i) {
  switch (dtype) {
    case kF64: return static_cast<const double*>(data)[i];
    case kF32: return static_cast<const float*>(data)[i];
    case kF16: return halfToFloat(static_cast<const uint16_t*>(data)[i]);
    default: return bf16ToFloat(static_cast<const uint16_t*>(data)[i]);
  }
}

// ---- contraction -----------------------------------------------------------------------------
// out[(o * total + first + s) * inner + q] = sum_i vectors[s * len + i] * view[o, i, q]
// for s < count (the launch's vectors, `first` of `total`), the view read as outer x len x
// inner around its contracted axis (stride `sl`); `kept` lists outer's and inner's dimensions
// (inner's last, `inner` their size), `outputs` = outer * inner. Grid: x over the outputs,
// y over `chunks` chunks of `chunk` contracted elements; the partial sums go to
// partial[(y * outputs + p) * count + s], and the second kernel adds the chunks in order.
struct ContractParams {
  const void* data = nullptr;
  int32_t dtype = 0;
  int32_t count = 0, first = 0, total = 0;
  Dims kept;
  int64_t outputs = 0, inner = 1, len = 0, sl = 0, chunk = 0, chunks = 0;
  const double* vectors = nullptr;  // device memory, count x len
  double* partial = nullptr;        // device memory, chunks x outputs x count
  double* out = nullptr;            // device memory, outer x total x inner
};

template <int32_t kDtype>
FUMI_HD void contractChunk(const ContractParams& p, int64_t out_index, int64_t chunk) {
  double acc[kMaxVectors] = {};
  const int64_t base = offsetOf(p.kept, out_index);
  const int64_t begin = chunk * p.chunk;
  const int64_t end = begin + p.chunk < p.len ? begin + p.chunk : p.len;
  for (int64_t i = begin; i < end; ++i) {
    const double x = load(p.data, kDtype, base + i * p.sl);
    FUMI_UNROLL
    for (int s = 0; s < kMaxVectors; ++s)
      if (s < p.count) acc[s] += x * p.vectors[s * p.len + i];
  }
  double* dst = p.partial + (chunk * p.outputs + out_index) * p.count;
  for (int s = 0; s < p.count; ++s) dst[s] = acc[s];
}

// First kernel: thread `t` of the grid's row `chunk`.
FUMI_HD void contractPartialBody(const ContractParams& p, int64_t t, int64_t chunk) {
  if (t >= p.outputs || chunk >= p.chunks) return;
  switch (p.dtype) {
    case kF64: contractChunk<kF64>(p, t, chunk); break;
    case kF32: contractChunk<kF32>(p, t, chunk); break;
    case kF16: contractChunk<kF16>(p, t, chunk); break;
    default: contractChunk<kBF16>(p, t, chunk); break;
  }
}

// Second kernel: thread t = output * count + s adds its chunks in order.
FUMI_HD void contractReduceBody(const ContractParams& p, int64_t t) {
  if (t >= p.outputs * p.count) return;
  const int64_t o = t / p.count, s = t % p.count;
  double sum = 0;
  for (int64_t c = 0; c < p.chunks; ++c) sum += p.partial[(c * p.outputs + o) * p.count + s];
  const int64_t outer = o / p.inner, q = o % p.inner;
  p.out[(outer * p.total + p.first + s) * p.inner + q] = sum;
}

// ---- scan ------------------------------------------------------------------------------------
// NaN and Inf counts, the largest finite magnitude and the sum of the finite squares of the
// view's `n` elements. First kernel: kScanBlocks x kThreads threads, each over the elements
// t, t + threads, ... into partial[t] (4 doubles: nan, inf, max_abs, sum_sq); second kernel:
// thread t < kScanBlocks adds partials [t * kThreads, (t + 1) * kThreads) (one block's) in
// order into out[t]; the host adds those kScanBlocks results (8 KiB, whatever the size).
struct ScanParams {
  const void* data = nullptr;
  int32_t dtype = 0;
  Dims dims;
  int64_t n = 0;
  double* partial = nullptr;  // device memory, kScanBlocks * kThreads * 4
  double* out = nullptr;      // device memory, kScanResults * 4
};

constexpr int64_t kScanThreads = int64_t{kScanBlocks} * kThreads;
constexpr int64_t kScanResults = kScanBlocks;

FUMI_HD void scanPartialBody(const ScanParams& p, int64_t t) {
  if (t >= kScanThreads) return;
  double nan = 0, inf = 0, max_abs = 0, sum = 0;
  for (int64_t e = t; e < p.n; e += kScanThreads) {
    const double v = load(p.data, p.dtype, offsetOf(p.dims, e));
    const double m = v < 0 ? -v : v;
    if (v != v) {
      nan += 1;
    } else if (m > 1.7976931348623157e308) {
      inf += 1;
    } else {
      max_abs = m > max_abs ? m : max_abs;
      sum += m * m;
    }
  }
  double* dst = p.partial + t * 4;
  dst[0] = nan;
  dst[1] = inf;
  dst[2] = max_abs;
  dst[3] = sum;
}

FUMI_HD void scanReduceBody(const ScanParams& p, int64_t t) {
  if (t >= kScanResults) return;
  double r[4] = {0, 0, 0, 0};
  for (int64_t j = t * kThreads; j < (t + 1) * kThreads; ++j) {
    const double* s = p.partial + j * 4;
    r[0] += s[0];
    r[1] += s[1];
    r[2] = s[2] > r[2] ? s[2] : r[2];
    r[3] += s[3];
  }
  for (int i = 0; i < 4; ++i) p.out[t * 4 + i] = r[i];
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

// p's shape for a view (n dimensions) contracted along `dim`: kept, outputs, inner, len, sl and
// the chunks (enough threads to fill a device, at least 32 elements each, at most 65535).
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
  int64_t chunks = p.outputs > 0 ? (int64_t{1} << 17) / p.outputs : 1;
  chunks = chunks < 1 ? 1 : chunks;
  chunks = chunks > (p.len + 31) / 32 ? (p.len + 31) / 32 : chunks;
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
    if (!launch(true, blocksFor(p.outputs), static_cast<unsigned>(p.chunks), p) ||
        !launch(false, blocksFor(p.outputs * p.count), 1u, p))
      return false;
  }
  return true;
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
constexpr const char* kScanPartial = "fumi_scan_partial";
constexpr const char* kScanReduce = "fumi_scan_reduce";

}  // namespace fumi::cuda::kern
