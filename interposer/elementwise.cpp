// elementwise.cpp — the host's element-wise primitives (elementwise.h).
#include "elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "element_types.h"
#include "metrics.h"
#include "tensor_copy.h"

namespace fumi {

namespace {

using namespace element_types;

// Whether t's elements fill [data, data + numel) exactly with non-negative strides: then
// element j of memory is element j of FUMI_ORDER_STORAGE, and buffers laid out like t are flat
// arrays walked together.
bool flatLayout(const fumi_tensor& t) {
  int64_t strides[FUMI_MAX_DIMS], shape[FUMI_MAX_DIMS];
  int n = 0;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] == 0) return true;  // nothing to walk
    if (t.shape[d] == 1) continue;
    if (t.strides[d] < 0) return false;
    strides[n] = t.strides[d];
    shape[n++] = t.shape[d];
  }
  // Innermost first (an insertion sort of at most FUMI_MAX_DIMS strides): each stride must be
  // the product of the extents inside it.
  for (int k = 1; k < n; ++k)
    for (int j = k; j > 0 && strides[j] < strides[j - 1]; --j) {
      std::swap(strides[j], strides[j - 1]);
      std::swap(shape[j], shape[j - 1]);
    }
  int64_t expect = 1;
  for (int k = 0; k < n; ++k) {
    if (strides[k] != expect) return false;
    expect *= shape[k];
  }
  return true;
}

// A buffer laid out like t as a flat array in FUMI_ORDER_STORAGE: the buffer itself when t is
// flat, else a dense copy in `pack` (same dtype, exact).
class Flat {
 public:
  Flat(const fumi_tensor& t, bool flat, const void* buffer, fumi_dtype dtype) {
    if (flat) {
      data_ = buffer;
      return;
    }
    pack_.resize(static_cast<size_t>(tensorNumel(t)) * static_cast<size_t>(dtypeBytes(dtype)));
    int64_t dense[FUMI_MAX_DIMS];
    storageStrides(t.ndim, t.shape, t.strides, dense);
    copyElements(t.ndim, t.shape, buffer, dtype, ElementLayout{t.strides, tensorBase(t)},
                 pack_.data(), dtype, ElementLayout{dense, 0});
    data_ = pack_.data();
  }
  const void* data() const { return data_; }

 private:
  std::vector<unsigned char> pack_;
  const void* data_ = nullptr;
};

template <class F>
bool visitPair(fumi_dtype a, fumi_dtype b, F&& f) {
  bool both = false;
  const bool first = visitLoad(a, [&](auto la) {
    both = visitLoad(b, [&](auto lb) { f(la, lb); });
  });
  return first && both;
}

// Whether the value stored (dst, of S) is the source value x (read from src, of L). Between
// elements of one type the stored bits are compared as they are (load is exact and one to one;
// a signalling NaN, quieted by the store, counts as changed); otherwise their fp64 values, bit
// for bit.
template <class L, class S>
bool sameBits(double x, typename L::T src, typename S::T stored) {
  if constexpr (std::is_same_v<L, S>) {
    using Bits = std::conditional_t<sizeof(typename S::T) == 8, uint64_t,
                                    std::conditional_t<sizeof(typename S::T) == 4, uint32_t,
                                                       uint16_t>>;
    Bits p, q;
    std::memcpy(&p, &src, sizeof p);
    std::memcpy(&q, &stored, sizeof q);
    return p == q;
  } else {
    const double b = S::load(stored);
    uint64_t u, v;
    std::memcpy(&u, &x, sizeof u);
    std::memcpy(&v, &b, sizeof v);
    return u == v;
  }
}

// One loop per map kind (an integer count vectorises without `omp simd`, whose per-lane arrays
// GCC 12 mis-sizes beside the f16/bf16 conversions); `changed` counts elements whose stored
// value is not the source value.
template <class L, class S>
FUMI_WIDE size_t mapFlat(const typename L::T* src, typename S::T* dst, size_t n,
                         const fumi_map_spec& spec) {
  size_t changed = 0;
  switch (spec.kind) {
    case FUMI_MAP_COPY:
      for (size_t j = 0; j < n; ++j) {
        const double x = L::load(src[j]);
        dst[j] = S::store(x);
        changed += sameBits<L, S>(x, src[j], dst[j]) ? 0 : 1;
      }
      break;
    case FUMI_MAP_ABS:
      for (size_t j = 0; j < n; ++j) {
        const double x = L::load(src[j]);
        dst[j] = S::store(std::fabs(x));
        changed += sameBits<L, S>(x, src[j], dst[j]) ? 0 : 1;
      }
      break;
    case FUMI_MAP_PERTURB: {
      const double shift = spec.shift;
      // In chunks whose draws share their index's high half, so that the loop runs on 32-bit
      // lanes (counter_draw.h): one chunk but for tensors crossing a multiple of 2^32 draws.
      for (size_t start = 0; start < n;) {
        const uint64_t index = spec.first + start;
        const size_t len = static_cast<size_t>(
            std::min<uint64_t>(n - start, (uint64_t{1} << 32) - (index & 0xffffffffu)));
        const uint32_t base = metrics::noiseBase(spec.seed, index);
        const uint32_t low = static_cast<uint32_t>(index);
        const typename L::T* s = src + start;
        typename S::T* d = dst + start;
        // x + x·δu: 1 + δu would round δ away in fp64 for fp64 inputs. Zeros keep their sign,
        // Inf and NaN stay as they are (-inf + -inf·(-δ) would be NaN: half of an attention
        // mask's -inf turned NaN and took their rows out of the comparison); x - x is 0 only
        // for finite x.
        for (size_t j = 0; j < len; ++j) {
          const double x = L::load(s[j]);
          const double u = metrics::noiseDraw(base, low + static_cast<uint32_t>(j));
          d[j] = S::store(x == 0.0 || x - x != 0.0 ? x : x + x * (shift * u));
          changed += sameBits<L, S>(x, s[j], d[j]) ? 0 : 1;
        }
        start += len;
      }
      break;
    }
  }
  return changed;
}

}  // namespace

fumi_status mapTensor(const fumi_tensor& t, const void* src, fumi_dtype src_dtype, void* dst,
                      fumi_dtype dst_dtype, const fumi_map_spec& spec, uint64_t* changed) {
  if (spec.kind != FUMI_MAP_COPY && spec.kind != FUMI_MAP_ABS && spec.kind != FUMI_MAP_PERTURB)
    return FUMI_UNSUPPORTED;
  if (dtypeBytes(src_dtype) == 0 || dtypeBytes(dst_dtype) == 0) return FUMI_UNSUPPORTED;
  const size_t n = static_cast<size_t>(tensorNumel(t));
  const bool flat = flatLayout(t);
  const Flat in(t, flat, src, src_dtype);
  std::vector<unsigned char> out_pack(flat ? 0 : n * static_cast<size_t>(dtypeBytes(dst_dtype)));
  void* out = flat ? dst : out_pack.data();
  size_t count = 0;
  const bool known = visitLoad(src_dtype, [&](auto load) {
    visitStore(dst_dtype, [&](auto store) {
      using L = decltype(load);
      using S = decltype(store);
      count = mapFlat<L, S>(static_cast<const typename L::T*>(in.data()),
                            static_cast<typename S::T*>(out), n, spec);
    });
  });
  if (!known) return FUMI_UNSUPPORTED;
  if (!flat) {  // back into t's layout (broadcast positions: the last write wins, as scatter)
    int64_t dense[FUMI_MAX_DIMS];
    storageStrides(t.ndim, t.shape, t.strides, dense);
    copyElements(t.ndim, t.shape, out, dst_dtype, ElementLayout{dense, 0}, dst, dst_dtype,
                 ElementLayout{t.strides, tensorBase(t)});
  }
  if (changed) *changed = count;
  return FUMI_OK;
}

fumi_status mapKeepingIndexColumn(const fumi_tensor& t, const void* src, fumi_dtype src_dtype,
                                  void* dst, fumi_dtype dst_dtype, const fumi_map_spec& spec,
                                  uint64_t* changed) {
  const int last = t.ndim - 1;
  if (last < 0 || t.shape[last] == 0)
    return mapTensor(t, src, src_dtype, dst, dst_dtype, spec, changed);
  if (t.strides[last] < 0 || dtypeBytes(src_dtype) == 0 || dtypeBytes(dst_dtype) == 0)
    return FUMI_UNSUPPORTED;
  // Two views of the buffers' layout: the column (element 0 along the last dimension), and the
  // rest, whose element 0 lies one stride further in each buffer.
  fumi_tensor column = t, rest = t;
  column.shape[last] = 1;
  rest.shape[last] = t.shape[last] - 1;
  fumi_map_spec copy = spec;
  copy.kind = FUMI_MAP_COPY;
  uint64_t kept = 0, moved = 0;
  if (const fumi_status st = mapTensor(column, src, src_dtype, dst, dst_dtype, copy, &kept);
      st != FUMI_OK)
    return st;
  const auto step = [&](auto* p, fumi_dtype dtype) {
    return p + t.strides[last] * dtypeBytes(dtype);
  };
  if (const fumi_status st =
          mapTensor(rest, step(static_cast<const char*>(src), src_dtype), src_dtype,
                    step(static_cast<char*>(dst), dst_dtype), dst_dtype, spec, &moved);
      st != FUMI_OK)
    return st;
  if (changed) *changed = kept + moved;
  return FUMI_OK;
}

namespace {

// dst = f(x, i) for element i (dense row-major) of src, both laid out like t, through fp64; one
// element at a time (the terms maps below run only on a violation); *changed as mapTensor's.
template <class F>
void mapEach(const fumi_tensor& t, const void* src, fumi_dtype src_dtype, void* dst,
             fumi_dtype dst_dtype, uint64_t* changed, F&& f) {
  uint64_t differ = 0;
  forEachElement(t, [&](int64_t i, int64_t at) {
    const double x = loadAsDouble(src, at, src_dtype);
    storeFromDouble(dst, at, f(x, i), dst_dtype);
    const double y = loadAsDouble(dst, at, dst_dtype);
    uint64_t a, b;
    std::memcpy(&a, &x, sizeof a);
    std::memcpy(&b, &y, sizeof b);
    differ += a != b ? 1 : 0;
  });
  if (changed) *changed = differ;
}

}  // namespace

fumi_status mapCentred(const fumi_tensor& t, const void* src, fumi_dtype src_dtype, void* dst,
                       fumi_dtype dst_dtype, const double* means, int64_t count,
                       const Centring& c, uint64_t* changed) {
  if (dtypeBytes(src_dtype) == 0 || dtypeBytes(dst_dtype) == 0) return FUMI_UNSUPPORTED;
  if (c.inner <= 0 || c.channels <= 0 || c.per_group <= 0 || c.outer < 0) return FUMI_UNSUPPORTED;
  const int64_t n = tensorNumel(t);
  const auto meanIndex = [&](int64_t i) {
    return i / (c.channels * c.inner) * c.outer + i / c.inner % c.channels / c.per_group;
  };
  // Whole blocks of channels: then the last element has the largest index.
  if (n % (c.channels * c.inner) != 0 || (n > 0 && meanIndex(n - 1) >= count))
    return FUMI_UNSUPPORTED;
  mapEach(t, src, src_dtype, dst, dst_dtype, changed, [&](double x, int64_t i) {
    const double mu = means[meanIndex(i)];
    return mu + std::fabs(x - mu);
  });
  return FUMI_OK;
}

fumi_status mapNegatedAbs(const fumi_tensor& t, const void* src, fumi_dtype src_dtype, void* dst,
                          fumi_dtype dst_dtype, uint64_t* changed) {
  if (dtypeBytes(src_dtype) == 0 || dtypeBytes(dst_dtype) == 0) return FUMI_UNSUPPORTED;
  mapEach(t, src, src_dtype, dst, dst_dtype, changed,
          [](double x, int64_t) { return -std::fabs(x); });
  return FUMI_OK;
}

fumi_status compareTensor(const fumi_tensor& t, const void* a, fumi_dtype a_dtype, const void* b,
                          fumi_dtype b_dtype, const fumi_compare_spec& spec,
                          fumi_comparison* out) {
  const size_t n = static_cast<size_t>(tensorNumel(t));
  const bool flat = flatLayout(t);
  const Flat fa(t, flat, a, a_dtype), fb(t, flat, b, b_dtype);
  fumi_comparison c{};
  const bool known = visitPair(a_dtype, b_dtype, [&](auto la, auto lb) {
    using A = decltype(la);
    using B = decltype(lb);
    c = metrics::compareValues<A, B>(static_cast<const typename A::T*>(fa.data()),
                                     static_cast<const typename B::T*>(fb.data()), n, spec);
  });
  if (!known) return FUMI_UNSUPPORTED;
  *out = c;
  return FUMI_OK;
}

fumi_status scanTensor(const fumi_tensor& t, const void* buffer, fumi_dtype dtype,
                       fumi_scan* out) {
  const size_t n = static_cast<size_t>(tensorNumel(t));
  const Flat f(t, flatLayout(t), buffer, dtype);
  fumi_scan s{};
  const bool known = visitLoad(dtype, [&](auto l) {
    using L = decltype(l);
    s = metrics::scanValues<L>(static_cast<const typename L::T*>(f.data()), n);
  });
  if (!known) return FUMI_UNSUPPORTED;
  *out = s;
  return FUMI_OK;
}

}  // namespace fumi
