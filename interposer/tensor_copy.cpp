// tensor_copy.cpp — copyElements (tensor_copy.h).
#include "tensor_copy.h"

#include <algorithm>
#include <cstdlib>

#include "element_types.h"
#include "fumi/simd.h"

namespace fumi {

namespace {

using namespace element_types;


// Transposing tiles: 8 x 8 keeps the lines either side touches within one L1 way set even when
// a stride is a large power of two (a 512-row column-major matrix), where 32 x 32 tiles thrash.
constexpr int64_t kTile = 8;

// rows x cols with rows contiguous on both sides: (r, c) from s[r * sr + c] to d[r * dr + c].
// Always inlined, like copyBlock: only copyTyped is compiled for each CPU (FUMI_WIDE), and a
// function it calls would be built for the baseline CPU only (SSE2, scalar stores).
template <class L, class S>
__attribute__((always_inline)) inline void copyRows(int64_t rows, int64_t cols,
                                                    const typename L::T* s, int64_t sr,
                                                    typename S::T* d, int64_t dr) {
  for (int64_t r = 0; r < rows; ++r) {
    const typename L::T* sp = s + r * sr;
    typename S::T* dp = d + r * dr;
    for (int64_t c = 0; c < cols; ++c) dp[c] = S::store(L::load(sp[c]));
  }
}

// One rows x cols block: element (r, c) from s[r * sr + c * sc] to d[r * dr + c * dc].
template <class L, class S>
__attribute__((always_inline)) inline void copyBlock(int64_t rows, int64_t cols,
                                                     const typename L::T* s, int64_t sr,
                                                     int64_t sc, typename S::T* d, int64_t dr,
                                                     int64_t dc) {
  if (sc == 1 && dc == 1) {  // rows contiguous on both sides
    copyRows<L, S>(rows, cols, s, sr, d, dr);
    return;
  }
  if (sr == 1 && dr == 1) {  // columns contiguous on both sides: the same with roles swapped
    copyRows<L, S>(cols, rows, s, sc, d, dc);
    return;
  }
  // A transpose or other strides: tiles small enough that both sides stay in L1.
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
      if (sc == 1 && dr == 1 && r1 - r0 == kTile && c1 - c0 == kTile) {
        // A whole tile of a plain transpose (NCHW to channels-last): contiguous reads of the
        // source's rows into registers, contiguous writes of the destination's columns, with
        // constant trip counts the compiler unrolls and vectorises.
        typename S::T tile[kTile][kTile];
        for (int64_t r = 0; r < kTile; ++r)
          for (int64_t c = 0; c < kTile; ++c)
            tile[c][r] = S::store(L::load(s[(r0 + r) * sr + c0 + c]));
        for (int64_t c = 0; c < kTile; ++c)
          for (int64_t r = 0; r < kTile; ++r) d[(c0 + c) * dc + r0 + r] = tile[c][r];
        continue;
      }
      if (sr == 1) {  // the source's columns are contiguous: walk them inside the tile
        for (int64_t c = c0; c < c1; ++c)
          for (int64_t r = r0; r < r1; ++r) d[r * dr + c * dc] = S::store(L::load(s[r + c * sc]));
      } else {
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t c = c0; c < c1; ++c)
            d[r * dr + c * dc] = S::store(L::load(s[r * sr + c * sc]));
      }
    }
}

// The array's dimensions reordered for the walk: by decreasing source stride (the source is
// read in its own memory order whatever the destination), adjacent dimensions merged where both
// sides are contiguous across them (a dense tensor becomes one run), empty arrays flagged.
struct Walk {
  int ndim = 0;
  int64_t shape[FUMI_MAX_DIMS], from[FUMI_MAX_DIMS], to[FUMI_MAX_DIMS];
  bool empty = false;
  Walk(int n, const int64_t* sh, const int64_t* fs, const int64_t* ts) {
    int order[FUMI_MAX_DIMS];
    int kept = 0;
    for (int k = 0; k < n; ++k) {
      if (sh[k] == 0) empty = true;
      if (sh[k] != 1) order[kept++] = k;  // size-1 dimensions move nothing
    }
    std::stable_sort(order, order + kept, [&](int a, int b) {
      return std::abs(fs[a]) > std::abs(fs[b]);
    });
    for (int j = 0; j < kept; ++j) {
      const int k = order[j];
      if (ndim > 0 && from[ndim - 1] == fs[k] * sh[k] && to[ndim - 1] == ts[k] * sh[k]) {
        shape[ndim - 1] *= sh[k];  // the previous dimension continues this one on both sides
        from[ndim - 1] = fs[k];
        to[ndim - 1] = ts[k];
        continue;
      }
      shape[ndim] = sh[k];
      from[ndim] = fs[k];
      to[ndim] = ts[k];
      ++ndim;
    }
  }
};

template <class L, class S>
FUMI_WIDE void copyTyped(int ndim, const int64_t* shape, const void* src, ElementLayout from,
                         void* dst, ElementLayout to) {
  const Walk w(ndim, shape, from.strides, to.strides);
  if (w.empty) return;
  const auto* s = static_cast<const typename L::T*>(src);
  auto* d = static_cast<typename S::T*>(dst);
  // The last two dimensions of the walk are one block; the others an odometer around it.
  const int n = w.ndim;
  const int64_t rows = n >= 2 ? w.shape[n - 2] : 1, cols = n >= 1 ? w.shape[n - 1] : 1;
  const int64_t sr = n >= 2 ? w.from[n - 2] : 0, sc = n >= 1 ? w.from[n - 1] : 0;
  const int64_t dr = n >= 2 ? w.to[n - 2] : 0, dc = n >= 1 ? w.to[n - 1] : 0;
  const int outer = std::max(n - 2, 0);
  int64_t idx[FUMI_MAX_DIMS] = {0};
  int64_t so = from.base, doff = to.base;
  while (true) {
    copyBlock<L, S>(rows, cols, s + so, sr, sc, d + doff, dr, dc);
    int k = outer - 1;
    for (; k >= 0; --k) {
      so += w.from[k];
      doff += w.to[k];
      if (++idx[k] < w.shape[k]) break;
      so -= w.from[k] * w.shape[k];
      doff -= w.to[k] * w.shape[k];
      idx[k] = 0;
    }
    if (k < 0) return;
  }
}

}  // namespace

bool copyElements(int ndim, const int64_t* shape, const void* src, fumi_dtype src_dtype,
                  ElementLayout from, void* dst, fumi_dtype dst_dtype, ElementLayout to) {
  bool stored = false;
  const bool loaded = visitLoad(src_dtype, [&](auto load) {
    stored = visitStore(dst_dtype, [&](auto store) {
      copyTyped<decltype(load), decltype(store)>(ndim, shape, src, from, dst, to);
    });
  });
  return loaded && stored;
}

void denseStrides(int ndim, const int64_t* shape, int64_t* strides) {
  int64_t stride = 1;
  for (int k = ndim - 1; k >= 0; --k) {
    strides[k] = stride;
    stride *= shape[k];
  }
}

void channelsLastStrides(int ndim, const int64_t* shape, int64_t* strides) {
  denseStrides(ndim, shape, strides);
  if (ndim <= 2) return;
  int64_t step = shape[1];
  for (int k = ndim - 1; k >= 2; --k) {
    strides[k] = step;
    step *= shape[k];
  }
  strides[1] = 1;
  strides[0] = step;
}

void storageStrides(int ndim, const int64_t* shape, const int64_t* layout, int64_t* strides) {
  int order[FUMI_MAX_DIMS];
  for (int k = 0; k < ndim; ++k) order[k] = k;
  std::stable_sort(order, order + ndim,
                   [&](int a, int b) { return std::abs(layout[a]) > std::abs(layout[b]); });
  int64_t stride = 1;
  for (int j = ndim - 1; j >= 0; --j) {
    strides[order[j]] = stride;
    stride *= shape[order[j]];
  }
}

}  // namespace fumi
