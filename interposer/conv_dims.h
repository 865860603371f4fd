// conv_dims.h — a convolution's dimensions read from its x, w and y tensors, shared by the
// reference (reference.cpp) and the projection (conv_projection.cpp).
#pragma once

#include <array>
#include <cstdint>

#include "fumi/plugin.h"
#include "reference.h"

namespace fumi {

// Dimensions of the convolution, from the x, w and y tensors: 3 spatial dimensions, the call's
// own at the end and the unused leading ones of extent 1, so that the last (the one contiguous
// in memory) is the innermost loop of every kernel, whatever the convolution's rank.
struct ConvDims {
  int64_t n = 0, c = 0, k = 0, cg = 0, kg = 0;
  std::array<int64_t, 3> in{1, 1, 1}, filter{1, 1, 1}, out{1, 1, 1};
  std::array<int64_t, 3> pad{0, 0, 0}, stride{1, 1, 1}, dilation{1, 1, 1};

  bool read(const fumi_tensor& x, const fumi_tensor& w, const fumi_tensor& y, const ConvSpec& s) {
    const int nd = s.spatial + 2;
    if (s.spatial < 1 || s.spatial > 3 || s.groups < 1 || x.ndim != nd || w.ndim != nd ||
        y.ndim != nd)
      return false;
    n = x.shape[0];
    c = x.shape[1];
    k = w.shape[0];
    cg = w.shape[1];
    if (y.shape[0] != n || y.shape[1] != k || cg * s.groups != c || k % s.groups != 0) return false;
    kg = k / s.groups;
    for (int d = 0; d < s.spatial; ++d) {
      const int e = 3 - s.spatial + d;
      in[e] = x.shape[d + 2];
      filter[e] = w.shape[d + 2];
      out[e] = y.shape[d + 2];
      pad[e] = s.pad[d];
      stride[e] = s.stride[d];
      dilation[e] = s.dilation[d];
      if (stride[e] < 1 || dilation[e] < 1) return false;
    }
    return true;
  }
  static int64_t spatialSize(const std::array<int64_t, 3>& e) { return e[0] * e[1] * e[2]; }
};

}  // namespace fumi
