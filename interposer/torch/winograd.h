// winograd.h — Winograd's minimal filtering F(2×2, 3×3) for wide_conv.cpp's fp64 convolutions:
// the 3×3, stride-1, undilated, one-group 2-D convolutions that are most of a CNN's work
// (resnet's every block). Each 4×4 input tile and 3×3 filter are transformed (Bᵀ·d·B, G·g·Gᵀ:
// additions and halvings only) and multiplied point by point, 16 GEMMs of (tiles × C)·(C × K),
// then transformed back to the tile's 2×2 outputs (Aᵀ·m·A). 16 multiply-adds per output pair
// of channels for every 4 outputs, where direct convolution (im2col and one GEMM) makes 36: 2.25×
// fewer, and the GEMMs keep their width. The input gradient is the same computation on dy (the
// filter turned); the filter gradient is its adjoint in the filter: Gᵀ·((A·dy·Aᵀ) ⊙ (Bᵀ·d·B))·G
// summed over the tiles, 16 GEMMs of (K × tiles)·(tiles × C).
//
// Accuracy: every transform coefficient is 0, ±1 or ±½, and each point sums a few terms, so
// the error is fp64 rounding of terms of at most 81·max|d|·max|g| per channel (max over the
// tile's 4×4 input block and the 3×3 filter): (C + 10)·2⁻⁵³·81·Σ_c max|d|·max|g| at most
// (tests/torch/wide_conv, winograd_bound). Unlike a direct sum's, that is not in terms of
// Σ|x||w| of the output itself: a small output beside large inputs in its tile gets the large
// inputs' rounding. On data of ordinary range it is a few units of Σ|x||w|'s fp64 rounding
// (measured below 5 units at 16 to 256 channels), eight orders of magnitude below what an fp32
// call rounds, which is what a reference for narrower calls needs; the adapter's wider reruns
// (callWide) are all of narrower calls. Non-finite inputs spread through a transform into
// values a direct sum never forms (∞ − ∞ where one ∞ meets a filter): any non-finite result
// makes the caller run the direct convolution instead, whose NaN and ∞ land where aten's do.
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

namespace fumi::wide_conv {

struct WinogradShape {
  int64_t n = 0, c = 0, k = 0, h = 0, w = 0, pad_h = 0, pad_w = 0;  // input (N, C, H, W)
  int64_t out_h() const { return h + 2 * pad_h - 2; }
  int64_t out_w() const { return w + 2 * pad_w - 2; }
  int64_t tiles() const { return n * ((out_h() + 1) / 2) * ((out_w() + 1) / 2); }
};

// Whether the convolution is worth F(2×2, 3×3) rather than wide_conv.cpp's im2col GEMM: 16
// channels or more a side, 64 tiles or more (the filter's transform, 16 points per tap plane,
// is paid once per call). Measured on resnet's shapes on an AVX-512 EPYC: from 64 tiles (batch
// 8, 8×8 outputs) up 1.3-2× faster on one thread, up to 1.5× on two (one shape of five 10%
// slower); at 32 tiles (4×4 outputs) slower by 10-25% as often as faster.
bool winogradPays(const WinogradShape& s);

// out (N·OH·OW, K) row by row (channels-last rows, as wide_conv's im2col GEMM gives them) = the
// convolution of x (N, H, W, C) channels-last contiguous by filter (K, C, 3, 3), or (turned) by
// filter (C, K, 3, 3) turned by 180° with its channel axes swapped (an input gradient), the
// filter of any strides, with padding (pad_h, pad_w). Tiles go through the GEMMs in blocks whose transformed
// tiles take at most block_bytes (at least one tile). False where a result is not finite (out
// is then partly written and the caller recomputes it).
bool winograd3x3(const double* x, const at::Tensor& filter, bool turned, const WinogradShape& s,
                 int64_t block_bytes, double* out);

// dw (K, C, 3, 3) contiguous = the filter gradient of that convolution of x (N, H, W, C)
// channels-last contiguous, for dy (N·OH·OW, K) the rows of its result's gradient: per tile,
// Gᵀ·((A·dy·Aᵀ) ⊙ (Bᵀ·d·B))·G summed over the tiles, the sums as 16 GEMMs of
// (K × tiles)·(tiles × C). Tiles in blocks as winograd3x3's; false where a result is not finite.
bool winogradFilterGradient(const double* x, const double* dy, const WinogradShape& s,
                            int64_t block_bytes, const at::TensorOptions& options, double* dw);

}  // namespace fumi::wide_conv
