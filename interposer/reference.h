// reference.h — fumi's independent host implementations, for the `reference` check: the output
// of a call recomputed in fp64 on the host from the call's own operands (any dtype, layout or
// memory), by code that shares nothing with the library that ran the call.
//
// How to give a Call a reference: describe its operands once as a MatmulSpec or ConvSpec (or add
// a spec type for another operation family here) and return matmulReference(...) /
// convReference(...) from the Call's reference() override.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "contract.h"
#include "fumi/plugin.h"

namespace fumi {

// A sum of products kept with error-free transformations (TwoProduct by fma, TwoSum): as
// accurate as a dot product computed in twice the working precision.
struct Compensated {
  double s = 0, c = 0;
  void add(double a, double b) {
    const double p = a * b;
    const double pe = std::fma(a, b, -p);
    const double t = s + p;
    const double z = t - s;
    c += (s - (t - z)) + (p - z) + pe;
    s = t;
  }
  void addTail(double x) { c += x; }  // a term far below the sum (a product's low part)
  double value() const { return s + c; }
  double hi() const { return s + c; }
  double lo() const { return c - (hi() - s); }  // hi + lo == s + c (Fast2Sum: |s| >= |c|)
};

// A dense row-major fp64 host tensor over `data` (an input; shape as given), for running the
// references on operands fumi computed itself (reduced operands, a graph's intermediates).
fumi_tensor hostTensor(const char* name, const std::vector<int64_t>& shape, double* data);

// D = act(alpha * A * B + beta * C + bias) over tensor indices of a call. A is [batch x] m x k,
// B [batch x] k x n (or a length-k vector: n = 1), C and D like D ([batch x] m x n or a
// length-m vector), bias m x 1 shared by every batch. c and bias are -1 when absent.
struct MatmulSpec {
  enum class Act { kNone, kRelu, kGelu };  // gelu: the tanh form cuBLASLt's epilogue computes
  int a = -1, b = -1, c = -1, d = -1, bias = -1;
  double alpha = 1, beta = 0;
  Act act = Act::kNone;
};

// Output `output` of the call (it must be spec.d) as dense row-major fp64 in `out`. Sums are
// compensated (error-free products and sums), so the reference is accurate well past fp64
// rounding even for an fp64 call.
fumi_status matmulReference(const std::vector<fumi_tensor>& tensors, const MatmulSpec& spec,
                            int32_t output, double* out);

// A projection of an output (fumi_host_api.project): the output Y as the reference computes it,
// contracted along its logical dimension `dim` with `count` vectors of length len = shape[dim]
// (vectors[s * len + i] is element i of vector s). With Y read as outer x len x inner around
// that dimension, out[(o * count + s) * inner + q] = sum_i vectors[s * len + i] * Y[o, i, q]:
// the output's shape with `dim` replaced by `count`, dense row-major. `out_lo` (may be null)
// receives the low parts of compensated sums, so that out + out_lo carries the projection to
// about 2^-100 relative; without it, plain fp64 sums (relative error about len * 2^-53 of the
// sum of magnitudes), enough for outputs narrower than fp64.
struct Projection {
  int32_t dim = 0;
  int32_t count = 0;
  const double* vectors = nullptr;
  double* out = nullptr;
  double* out_lo = nullptr;
};

// D = alpha * A * B + beta * C + bias projected without forming D: for the columns (dim = the
// last; D * R = alpha * A * (B * R) + beta * C * R + bias * sum(R)) or the rows (dim = the one
// before it, or 0 for a vector D; L^T * D likewise from L^T * A), O((mk + kn + mn) * count) per
// batch instead of O(mnk). FUMI_UNSUPPORTED for another dimension or an activation (a
// projection of act(x) is not act of a projection). Several sides in one call (the rows and the
// columns, as many vectors each, plain sums): A and C are each read once for both.
// With `device`, operands in device memory are contracted there (contract.h: only the
// projections come back) and nothing is copied: FUMI_UNSUPPORTED where that cannot be done
// (compensated sums, a bias on the device, `device` declining).
fumi_status matmulProjection(const std::vector<fumi_tensor>& tensors, const MatmulSpec& spec,
                             int32_t output, const std::vector<Projection>& sides,
                             const DeviceContract* device = nullptr);
inline fumi_status matmulProjection(const std::vector<fumi_tensor>& tensors,
                                    const MatmulSpec& spec, int32_t output, const Projection& p) {
  return matmulProjection(tensors, spec, output, std::vector<Projection>{p});
}

// A convolution over 1 to 3 spatial dimensions, cuDNN's legacy definition, by tensor indices of
// a call. x is N x C x spatial, w is K x C/groups x filter spatial, y is N x K x output spatial
// (logical dimensions: any layout is read through the tensors' strides).
//   y[n, k, o] = sum over c in k's group and filter taps f of
//                x[n, c, o*stride - pad + f*dilation] * w[k, c mod C/groups, f'],
// f' = f for cross-correlation and the mirrored tap for (true) convolution; inputs outside x
// are zero. The direction says which of x, w, y is the output:
//   kForward         y = act(alpha * conv(x, w) + beta * y_in + alpha2 * z + bias[k])
//   kBackwardData    x = alpha * (dy correlated back through w) + beta * x_in
//   kBackwardFilter  w = alpha * (x correlated with dy) + beta * w_in
// The index of the output is `y`, `x` or `w` respectively; `prior` (the output's value before the
// call, read with beta), `z` and `bias` (forward only, bias 1 x K x 1...) are -1 when absent.
struct ConvSpec {
  enum class Direction { kForward, kBackwardData, kBackwardFilter };
  enum class Act { kNone, kRelu };
  Direction direction = Direction::kForward;
  int x = -1, w = -1, y = -1, prior = -1, z = -1, bias = -1;
  int spatial = 2, groups = 1;
  int pad[3] = {0, 0, 0}, stride[3] = {1, 1, 1}, dilation[3] = {1, 1, 1};
  bool flip = true;  // true convolution; false: cross-correlation
  double alpha = 1, beta = 0, alpha2 = 0;
  Act act = Act::kNone;
};

// Output `output` of the call (x, w or y as the direction says) as dense row-major fp64 in
// `out`, with compensated sums like matmulReference.
fumi_status convReference(const std::vector<fumi_tensor>& tensors, const ConvSpec& spec,
                          int32_t output, double* out);

// The projection of a convolution's output along its channels (dimension 1 of y or dx, the
// output channels K of dw): one single-channel convolution per vector, on the filter (forward,
// backward data) or dy (backward filter, groups 1 only) summed against the vector. Plain fp64
// results (no out_lo: FUMI_UNSUPPORTED, as for relu and other dimensions); elements below the
// fp64 rounding bound of the reduced operand are returned as 0.
fumi_status convProjection(const std::vector<fumi_tensor>& tensors, const ConvSpec& spec,
                           int32_t output, const Projection& p);
// convProjection's noise floor: the reduced operand carries fp64 rounding of its terms, so a
// projected element of vector q does too, up to (len + taps) * 2^-53 of bound(q) (the largest
// sum of magnitudes its terms can reach); elements at or below 4 times that are that noise, and
// are set to 0 (an output that is exactly zero must project to exactly zero). p.out laid out
// outer x count x inner.
void zeroConvNoise(const Projection& p, int64_t len, int64_t taps, int64_t outer, int64_t inner,
                   const std::function<double(int32_t q)>& bound);
// Several sets of vectors: one projection after the other.
inline fumi_status convProjection(const std::vector<fumi_tensor>& tensors, const ConvSpec& spec,
                                  int32_t output, const std::vector<Projection>& sides) {
  for (const Projection& p : sides)
    if (const fumi_status st = convProjection(tensors, spec, output, p); st != FUMI_OK) return st;
  return FUMI_OK;
}

// Batch normalisation, cuDNN's legacy definition, by tensor indices of a call. x is
// N x C x spatial; the parameters (scale, bias, mean, var and the outputs of their shape) are
// 1 x C x 1... (spatial: one set per channel, statistics over N and every position) or
// 1 x C x spatial... (per activation: statistics over N). With M values per set,
// mean = sum x / M, var = sum (x - mean)^2 / M, inv = 1 / sqrt(var + epsilon):
//   kTraining   y = alpha * (scale * (x - mean) * inv + bias) + beta * y_in;
//               save_mean = mean, save_inv = inv;
//               running_mean = (1 - factor) * running_mean_in + factor * mean,
//               running_var  = (1 - factor) * running_var_in + factor * var * M / (M - 1)
//   kInference  the same y with mean = est_mean and inv = 1 / sqrt(est_var + epsilon)
//   kBackward   with mean and inv saved (or recomputed from x when absent) and
//               xhat = (x - mean) * inv, db = sum dy, ds = sum dy * xhat per set:
//               dx = alpha * scale * inv * (dy - db / M - xhat * ds / M) + beta * dx_in,
//               dscale = alpha_param * ds + beta_param * dscale_in, dbias likewise with db.
// Indices are -1 when absent. `y` is dy for kBackward; every *_in is the output's value before
// the call (read when its beta is not 0).
struct NormSpec {
  enum class Phase { kTraining, kInference, kBackward };
  Phase phase = Phase::kTraining;
  bool spatial = true;
  int x = -1, y = -1, y_in = -1, scale = -1, bias = -1, mean = -1, var = -1;
  int save_mean = -1, save_inv = -1, running_mean = -1, running_var = -1;
  int running_mean_in = -1, running_var_in = -1;
  int dx = -1, dx_in = -1, dscale = -1, dscale_in = -1, dbias = -1, dbias_in = -1;
  double epsilon = 1e-5, factor = 1;
  double alpha = 1, beta = 0, alpha_param = 1, beta_param = 0;
};

// Output `output` of the call (one of the spec's outputs) as dense row-major fp64 in `out`;
// means and sums compensated.
fumi_status normReference(const std::vector<fumi_tensor>& tensors, const NormSpec& spec,
                          int32_t output, double* out);

}  // namespace fumi
