// winograd.cpp — F(2×2, 3×3) for wide_conv.cpp's fp64 convolutions (winograd.h says why).
//
// Tile t (image n, tile row ty, tile column tx) reads the input's 4×4 block from row 2·ty − pad_h
// and column 2·tx − pad_w (zeros outside) and gives the outputs (2·ty + a, 2·tx + b), a, b in
// {0, 1}, those inside the output. Point ξ = 4·r + s of a transformed tile or filter is element
// (r, s) of Bᵀ·d·B or G·g·Gᵀ, with (rows of Bᵀ, G and Aᵀ)
//   Bᵀ: (1 0 −1 0) (0 1 1 0) (0 −1 1 0) (0 1 0 −1)
//   G:  (1 0 0) (½ ½ ½) (½ −½ ½) (0 0 1)
//   Aᵀ: (1 1 1 0) (0 1 −1 −1)
// The transformed tiles of a block are V (16, tiles, C), the filters U (16, K, C), the products
// M (16, tiles, K): M[ξ] = V[ξ]·U[ξ]ᵀ; each kernel below runs along the channels, contiguous in
// all three and in the channels-last input and output rows.
#include "winograd.h"

#include <algorithm>
#include <vector>

#include "fumi/simd.h"

namespace fumi::wide_conv {
namespace {

constexpr int64_t kPoints = 16;
constexpr int64_t kRun = 256;  // filter planes per gather of their taps into nine rows

// Points ξ of the G·g·Gᵀ of `count` filter planes: tap[3·r + s] element (r, s) of each plane
// (unit stride across the planes), dst[ξ·plane + i].
FUMI_WIDE void filterPoints(const double* tap, int64_t count, int64_t plane, double* dst) {
  FUMI_SIMD()
  for (int64_t i = 0; i < count; ++i) {
    double t[4][3];  // G·g
    for (int j = 0; j < 3; ++j) {
      const double g0 = tap[j * count + i], g1 = tap[(3 + j) * count + i],
                   g2 = tap[(6 + j) * count + i];
      t[0][j] = g0;
      t[1][j] = 0.5 * (g0 + g1 + g2);
      t[2][j] = 0.5 * (g0 - g1 + g2);
      t[3][j] = g2;
    }
    for (int r = 0; r < 4; ++r) {  // (G·g)·Gᵀ
      dst[(4 * r + 0) * plane + i] = t[r][0];
      dst[(4 * r + 1) * plane + i] = 0.5 * (t[r][0] + t[r][1] + t[r][2]);
      dst[(4 * r + 2) * plane + i] = 0.5 * (t[r][0] - t[r][1] + t[r][2]);
      dst[(4 * r + 3) * plane + i] = t[r][2];
    }
  }
}

// U[ξ] (K, C) from w (K, C, 3, 3), or (turned) from w (C, K, 3, 3) turned by 180°, in runs of
// kRun planes: each run's taps gathered to nine rows in a buffer (the transform then reads each
// at unit stride), then transformed.
at::Tensor transformFilter(const at::Tensor& w, bool turned, int64_t k, int64_t c) {
  const at::Tensor g = w.contiguous();
  const int64_t plane = k * c;
  at::Tensor u = at::empty({kPoints, k, c}, g.options());
  const double* src = g.data_ptr<double>();
  double* dst = u.data_ptr<double>();
  double taps[9 * kRun];
  for (int64_t first = 0; first < plane; first += kRun) {
    const int64_t count = std::min(kRun, plane - first);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t f = (first + i) / c, ch = (first + i) % c;  // U's plane (f, ch) is w's
      const double* from = src + (turned ? ch * k + f : f * c + ch) * 9;
      for (int64_t j = 0; j < 9; ++j) taps[j * count + i] = from[turned ? 8 - j : j];
    }
    filterPoints(taps, count, plane, dst + first);
  }
  return u;
}

// One tile's Bᵀ·d·B for every channel: p[4·r + s] the input row (C channels) of the tile's
// element (r, s), or zeros; dst[ξ·plane + channel].
FUMI_WIDE void inputTile(const double* const* p, int64_t c, int64_t plane, double* dst) {
  FUMI_SIMD()
  for (int64_t ch = 0; ch < c; ++ch) {
    double a[4][4];  // Bᵀ·d
    for (int s = 0; s < 4; ++s) {
      const double d0 = p[s][ch], d1 = p[4 + s][ch], d2 = p[8 + s][ch], d3 = p[12 + s][ch];
      a[0][s] = d0 - d2;
      a[1][s] = d1 + d2;
      a[2][s] = d2 - d1;
      a[3][s] = d1 - d3;
    }
    for (int r = 0; r < 4; ++r) {  // (Bᵀ·d)·B
      dst[(4 * r + 0) * plane + ch] = a[r][0] - a[r][2];
      dst[(4 * r + 1) * plane + ch] = a[r][1] + a[r][2];
      dst[(4 * r + 2) * plane + ch] = a[r][2] - a[r][1];
      dst[(4 * r + 3) * plane + ch] = a[r][1] - a[r][3];
    }
  }
}

// One tile's Aᵀ·m·A for every filter: m[ξ·plane + filter] its products, y[2·a + b] the output
// row (K filters) of its output (a, b). Returns 0, or NaN where a result is not finite.
FUMI_WIDE double outputTile(const double* m, int64_t k, int64_t plane, double* const* y) {
  double poison = 0.0;
  FUMI_SIMD(reduction(+ : poison))
  for (int64_t f = 0; f < k; ++f) {
    double b[2][4];  // Aᵀ·m
    for (int s = 0; s < 4; ++s) {
      const double m0 = m[s * plane + f], m1 = m[(4 + s) * plane + f],
                   m2 = m[(8 + s) * plane + f], m3 = m[(12 + s) * plane + f];
      b[0][s] = m0 + m1 + m2;
      b[1][s] = m1 - m2 - m3;
    }
    double sum = 0.0;
    for (int a = 0; a < 2; ++a) {  // (Aᵀ·m)·A
      const double y0 = b[a][0] + b[a][1] + b[a][2], y1 = b[a][1] - b[a][2] - b[a][3];
      y[2 * a][f] = y0;
      y[2 * a + 1][f] = y1;
      sum += y0 + y1;
    }
    poison += sum * 0.0;  // 0, or NaN from ∞ or NaN (no fast math: not folded away)
  }
  return poison;
}

// One tile's A·dy·Aᵀ for every filter (the adjoint of Aᵀ·m·A): dy[2·a + b] the result
// gradient's row (K filters) at the tile's output (a, b), or zeros past the edge;
// dst[ξ·plane + filter].
FUMI_WIDE void gradTile(const double* const* dy, int64_t k, int64_t plane, double* dst) {
  FUMI_SIMD()
  for (int64_t f = 0; f < k; ++f) {
    double a[4][2];  // A·dy
    for (int b = 0; b < 2; ++b) {
      const double g0 = dy[b][f], g1 = dy[2 + b][f];
      a[0][b] = g0;
      a[1][b] = g0 + g1;
      a[2][b] = g0 - g1;
      a[3][b] = -g1;
    }
    for (int r = 0; r < 4; ++r) {  // (A·dy)·Aᵀ
      dst[(4 * r + 0) * plane + f] = a[r][0];
      dst[(4 * r + 1) * plane + f] = a[r][0] + a[r][1];
      dst[(4 * r + 2) * plane + f] = a[r][0] - a[r][1];
      dst[(4 * r + 3) * plane + f] = -a[r][1];
    }
  }
}

// Gᵀ·p·G (the adjoint of G·g·Gᵀ) of `count` planes: p[ξ·plane + i] point ξ of plane i, tap[j ·
// count + i] its element j = 3·r + s. Returns 0, or NaN where a result is not finite.
FUMI_WIDE double filterTaps(const double* p, int64_t count, int64_t plane, double* tap) {
  double poison = 0.0;
  FUMI_SIMD(reduction(+ : poison))
  for (int64_t i = 0; i < count; ++i) {
    double t[3][4];  // Gᵀ·p
    for (int j = 0; j < 4; ++j) {
      const double p0 = p[j * plane + i], p1 = p[(4 + j) * plane + i],
                   p2 = p[(8 + j) * plane + i], p3 = p[(12 + j) * plane + i];
      t[0][j] = p0 + 0.5 * (p1 + p2);
      t[1][j] = 0.5 * (p1 - p2);
      t[2][j] = 0.5 * (p1 + p2) + p3;
    }
    double sum = 0.0;
    for (int r = 0; r < 3; ++r) {  // (Gᵀ·p)·G
      const double g0 = t[r][0] + 0.5 * (t[r][1] + t[r][2]), g1 = 0.5 * (t[r][1] - t[r][2]),
                   g2 = 0.5 * (t[r][1] + t[r][2]) + t[r][3];
      tap[(3 * r) * count + i] = g0;
      tap[(3 * r + 1) * count + i] = g1;
      tap[(3 * r + 2) * count + i] = g2;
      sum += g0 + g1 + g2;
    }
    poison += sum * 0.0;  // 0, or NaN from ∞ or NaN (no fast math: not folded away)
  }
  return poison;
}

// Tile t's image and first output row and column.
struct Tile {
  int64_t n, oy, ox;
};
Tile tileAt(const WinogradShape& s, int64_t t) {
  const int64_t th = (s.out_h() + 1) / 2, tw = (s.out_w() + 1) / 2;
  return {t / (th * tw), 2 * (t / tw % th), 2 * (t % tw)};
}

// V (16, block, C) for tiles t0 .. t0 + count of channels-last x.
void inputTiles(const double* x, const WinogradShape& s, int64_t t0, int64_t count,
                int64_t block, const double* zeros, double* v) {
  const double* p[kPoints];
  for (int64_t i = 0; i < count; ++i) {
    const Tile at = tileAt(s, t0 + i);
    for (int r = 0; r < 4; ++r)
      for (int q = 0; q < 4; ++q) {
        const int64_t iy = at.oy - s.pad_h + r, ix = at.ox - s.pad_w + q;
        p[4 * r + q] = iy >= 0 && iy < s.h && ix >= 0 && ix < s.w
                           ? x + ((at.n * s.h + iy) * s.w + ix) * s.c
                           : zeros;
      }
    inputTile(p, s.c, block * s.c, v + i * s.c);
  }
}

// The rows (K values) of tile t's four outputs in out (N·OH·OW, K) rows, or `edge` past the
// edge: where forward results are written (edge: spare room) or result gradients read (zeros).
template <class T>
void outputRows(const WinogradShape& s, const Tile& at, T* out, T* edge, T* rows[4]) {
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b)
      rows[2 * a + b] = at.oy + a < s.out_h() && at.ox + b < s.out_w()
                            ? out + ((at.n * s.out_h() + at.oy + a) * s.out_w() + at.ox + b) * s.k
                            : edge;
}

// Tiles per block: their transformed tiles (16 points of `channels` values) in block_bytes.
int64_t blockOf(const WinogradShape& s, int64_t channels, int64_t block_bytes) {
  const int64_t per_tile = kPoints * channels * static_cast<int64_t>(sizeof(double));
  return std::clamp<int64_t>(block_bytes / per_tile, 1, s.tiles());
}

}  // namespace

bool winogradPays(const WinogradShape& s) {
  return s.c >= 16 && s.k >= 16 && s.tiles() >= 64;
}

bool winograd3x3(const double* x, const at::Tensor& filter, bool turned, const WinogradShape& s,
                 int64_t block_bytes, double* out) {
  const int64_t tiles = s.tiles(), c = s.c, k = s.k, block = blockOf(s, c + k, block_bytes);
  const at::Tensor u = transformFilter(filter, turned, k, c);
  const at::Tensor v = at::empty({kPoints, block, c}, filter.options());
  const at::Tensor m = at::empty({kPoints, block, k}, filter.options());
  const std::vector<double> zeros(static_cast<size_t>(c), 0.0);
  std::vector<double> spare(static_cast<size_t>(k));  // outputs past the edge
  const double* mp = m.data_ptr<double>();
  // One thread: the transforms move a few bytes per multiply-add of the GEMMs, which the BLAS's
  // own threads run; ATen's threads spinning beside them (OpenMP's wait after a parallel loop)
  // made the whole three to four times slower on two cores.
  double poison = 0.0;
  for (int64_t t0 = 0; t0 < tiles; t0 += block) {
    const int64_t count = std::min(block, tiles - t0);
    inputTiles(x, s, t0, count, block, zeros.data(), v.data_ptr<double>());
    for (int64_t xi = 0; xi < kPoints; ++xi) {
      at::Tensor dst = m[xi].narrow(0, 0, count);
      at::mm_out(dst, v[xi].narrow(0, 0, count), u[xi].t());
    }
    double* y[4];
    for (int64_t i = 0; i < count; ++i) {
      outputRows(s, tileAt(s, t0 + i), out, spare.data(), y);
      poison += outputTile(mp + i * k, k, block * k, y);
    }
  }
  return poison == 0.0;  // NaN compares unequal
}

bool winogradFilterGradient(const double* x, const double* dy, const WinogradShape& s,
                            int64_t block_bytes, const at::TensorOptions& options, double* dw) {
  const int64_t tiles = s.tiles(), c = s.c, k = s.k, block = blockOf(s, c + k, block_bytes);
  const at::Tensor v = at::empty({kPoints, block, c}, options);
  const at::Tensor z = at::empty({kPoints, block, k}, options);
  const at::Tensor p = at::empty({kPoints, k, c}, options);  // Σ over the tiles of zᵀ·v
  const std::vector<double> zeros(static_cast<size_t>(std::max(c, k)), 0.0);
  double* zp = z.data_ptr<double>();
  for (int64_t t0 = 0; t0 < tiles; t0 += block) {  // one thread: winograd3x3 says why
    const int64_t count = std::min(block, tiles - t0);
    inputTiles(x, s, t0, count, block, zeros.data(), v.data_ptr<double>());
    const double* g[4];
    for (int64_t i = 0; i < count; ++i) {
      outputRows(s, tileAt(s, t0 + i), dy, zeros.data(), g);
      gradTile(g, k, block * k, zp + i * k);
    }
    for (int64_t xi = 0; xi < kPoints; ++xi) {
      at::Tensor dst = p[xi];
      const at::Tensor a = z[xi].narrow(0, 0, count).t(), b = v[xi].narrow(0, 0, count);
      if (t0 == 0) at::mm_out(dst, a, b);
      else dst.addmm_(a, b);
    }
  }
  // dw's taps plane by plane, in runs gathered to nine rows (as transformFilter's, reversed).
  const int64_t plane = k * c;
  double taps[9 * kRun];
  double poison = 0.0;
  for (int64_t first = 0; first < plane; first += kRun) {
    const int64_t count = std::min(kRun, plane - first);
    poison += filterTaps(p.data_ptr<double>() + first, count, plane, taps);
    for (int64_t i = 0; i < count; ++i)
      for (int64_t j = 0; j < 9; ++j) dw[(first + i) * 9 + j] = taps[j * count + i];
  }
  return poison == 0.0;
}

}  // namespace fumi::wide_conv
