// sim_conv.h — the simulated device's convolution and batch-normalisation "kernels" for the
// cuDNN stand-in (header-only, no state, no cuDNN types: cudnn.cpp decodes the API into these
// problems). The element types and their rounding come from sim_gemm.h (one place for fp16,
// bf16 and tf32).
//
// Convolution: one loop nest for all three directions. Every (image n, group g, output channel
// k, input channel c, output position o, filter tap r) with an in-bounds input position
//   i = o * stride - pad + r' * dilation      (r' = R-1-r for true convolution, r otherwise)
// is one product, added to the accumulator of the direction's output element:
//   forward          y[n,k,o]  += x[n,c,i] * w[k,c,r]
//   backward data    dx[n,c,i] += dy[n,k,o] * w[k,c,r]
//   backward filter  dw[k,c,r] += x[n,c,i] * dy[n,k,o]
// Spatial ranks 1..3 run as 3-D with unit dimensions. Each output element's sum is sequential
// in loop order (c, then o, then r for forward), products and sums in the accumulator type:
// double (F64), float (F32), or double rounded to fp16 (F16: fp16 accumulation) or bf16 (BF16)
// after every multiply-add. TF32: float inputs rounded to tf32 (10-bit mantissa, ties to even)
// first.
// Then out = alpha * acc [+ alpha2 * z + bias, relu] [+ beta * prior] in the scale type
// (double for F64, float otherwise), times `scale` (planted fault), rounded once to the output
// type; `bump` moves output element 0 up one ulp (planted fault). beta == 0: prior not read.
//
// Batch normalisation: statistics and results computed in double from the stored values,
// rounded once to each output's type; per channel (SPATIAL: over N and all spatial positions)
// or per activation (over N).
//
// Tensors are strided views in logical order (N, C, spatial... / K, C/groups, spatial...);
// `data` is the device pointer as passed; only these kernels (run on a stream) translate it.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "sim.h"
#include "sim_gemm.h"

namespace sim {
namespace conv {

using gemm::DType;

constexpr int kMaxDims = 8;

struct Tensor {
  DType type = DType::F32;
  int nbDims = 0;
  int64_t dim[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};  // in elements
  const void* data = nullptr;

  int64_t count() const {
    int64_t n = 1;
    for (int i = 0; i < nbDims; ++i) n *= dim[i];
    return n;
  }
  // The element offset of logical (row-major) index `linear`.
  int64_t offset(int64_t linear) const {
    int64_t off = 0;
    for (int i = nbDims - 1; i >= 0; --i) {
      off += (linear % dim[i]) * stride[i];
      linear /= dim[i];
    }
    return off;
  }
  unsigned char* at(int64_t linear) const {
    return static_cast<unsigned char*>(hostAddress(data)) +
           offset(linear) * static_cast<int64_t>(gemm::dtypeSize(type));
  }
};

// All elements in logical order, as doubles (optionally rounded to tf32).
inline std::vector<double> gather(const Tensor& t, bool tf32 = false) {
  std::vector<double> v(static_cast<size_t>(t.count()));
  for (int64_t l = 0; l < t.count(); ++l) {
    const double x = gemm::load(t.at(l), t.type);
    v[static_cast<size_t>(l)] = tf32 ? gemm::roundTf32(x) : x;
  }
  return v;
}

inline void scatter(const Tensor& t, const std::vector<double>& v) {
  for (int64_t l = 0; l < t.count(); ++l) gemm::store(t.at(l), t.type, v[static_cast<size_t>(l)]);
}

// ---------------------------------------------------------------------------------------
// Convolution

enum class Direction { Forward, BackwardData, BackwardFilter };
enum class Accum { F64, F32, F16, BF16 };  // BF16: the backend API's reduced-precision engine

struct ConvProblem {
  Direction dir = Direction::Forward;
  int spatial = 2;  // 1..3
  int64_t groups = 1;
  int64_t pad[3] = {0, 0, 0}, stride[3] = {1, 1, 1}, dil[3] = {1, 1, 1};
  bool flip = false;  // true convolution (CUDNN_CONVOLUTION)
  Accum accum = Accum::F32;
  bool tf32 = false;
  Tensor x, w, y;  // the output is y (Forward), x (BackwardData) or w (BackwardFilter)
  double alpha = 1, beta = 0;
  // Fused bias + activation (forward only): out = act(alpha*conv + alpha2*z + bias).
  bool fused = false;
  bool hasZ = false;
  double alpha2 = 0;
  Tensor z, bias;  // z like y; bias 1 x K x 1...
  bool relu = false;
  double scale = 1;   // planted fault: every result times this
  bool bump = false;  // planted fault: output element 0 one ulp up
};

namespace detail {

// The tensor's spatial extents as 3-D (missing leading ones are 1).
inline void extents3(const Tensor& t, int spatial, int64_t out[3]) {
  for (int d = 0; d < 3; ++d) out[d] = 1;
  for (int d = 0; d < spatial; ++d) out[3 - spatial + d] = t.dim[2 + d];
}

template <typename T, typename Add>
void accumulate(const ConvProblem& p, const std::vector<T>& X, const std::vector<T>& W,
                const std::vector<T>& Y, std::vector<T>* acc, Add add) {
  const int s = p.spatial;
  int64_t xs[3], ws[3], ys[3], pad[3] = {0, 0, 0}, str[3] = {1, 1, 1}, dil[3] = {1, 1, 1};
  extents3(p.x, s, xs);
  extents3(p.w, s, ws);
  extents3(p.y, s, ys);
  for (int d = 0; d < s; ++d) {
    pad[3 - s + d] = p.pad[d];
    str[3 - s + d] = p.stride[d];
    dil[3 - s + d] = p.dil[d];
  }
  const int64_t N = p.x.dim[0], C = p.x.dim[1], K = p.w.dim[0], G = p.groups;
  const int64_t Cg = C / G, Kg = K / G;
  const int64_t xSp = xs[0] * xs[1] * xs[2], wSp = ws[0] * ws[1] * ws[2],
                ySp = ys[0] * ys[1] * ys[2];
  T* a = acc->data();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g)
      for (int64_t kk = 0; kk < Kg; ++kk)
        for (int64_t cc = 0; cc < Cg; ++cc) {
          const int64_t k = g * Kg + kk, c = g * Cg + cc;
          const int64_t xBase = (n * C + c) * xSp, wBase = (k * Cg + cc) * wSp,
                        yBase = (n * K + k) * ySp;
          for (int64_t o0 = 0; o0 < ys[0]; ++o0)
            for (int64_t o1 = 0; o1 < ys[1]; ++o1)
              for (int64_t o2 = 0; o2 < ys[2]; ++o2) {
                const int64_t yi = yBase + (o0 * ys[1] + o1) * ys[2] + o2;
                for (int64_t r0 = 0; r0 < ws[0]; ++r0) {
                  const int64_t i0 =
                      o0 * str[0] - pad[0] + (p.flip ? ws[0] - 1 - r0 : r0) * dil[0];
                  if (i0 < 0 || i0 >= xs[0]) continue;
                  for (int64_t r1 = 0; r1 < ws[1]; ++r1) {
                    const int64_t i1 =
                        o1 * str[1] - pad[1] + (p.flip ? ws[1] - 1 - r1 : r1) * dil[1];
                    if (i1 < 0 || i1 >= xs[1]) continue;
                    for (int64_t r2 = 0; r2 < ws[2]; ++r2) {
                      const int64_t i2 =
                          o2 * str[2] - pad[2] + (p.flip ? ws[2] - 1 - r2 : r2) * dil[2];
                      if (i2 < 0 || i2 >= xs[2]) continue;
                      const int64_t xi = xBase + (i0 * xs[1] + i1) * xs[2] + i2;
                      const int64_t wi = wBase + (r0 * ws[1] + r1) * ws[2] + r2;
                      switch (p.dir) {
                        case Direction::Forward: a[yi] = add(a[yi], X[xi] * W[wi]); break;
                        case Direction::BackwardData: a[xi] = add(a[xi], Y[yi] * W[wi]); break;
                        case Direction::BackwardFilter: a[wi] = add(a[wi], X[xi] * Y[yi]); break;
                      }
                    }
                  }
                }
              }
        }
}

template <typename T>
std::vector<T> as(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

}  // namespace detail

// Runs the convolution. Called on the stream only.
inline void execute(const ConvProblem& p) {
  const Tensor& out = p.dir == Direction::Forward        ? p.y
                      : p.dir == Direction::BackwardData ? p.x
                                                         : p.w;
  const bool tf = p.tf32;
  const std::vector<double> none;
  // The two inputs of the direction, in logical order.
  const std::vector<double> X = p.dir == Direction::BackwardData ? none : gather(p.x, tf);
  const std::vector<double> W = p.dir == Direction::BackwardFilter ? none : gather(p.w, tf);
  const std::vector<double> Y = p.dir == Direction::Forward ? none : gather(p.y, tf);
  const size_t n = static_cast<size_t>(out.count());

  // Everything read before anything is written: outputs may alias inputs (z and y).
  std::vector<double> prior, zv, bv;
  if (p.beta != 0) prior = gather(out);
  if (p.fused && p.hasZ && p.alpha2 != 0) zv = gather(p.z);
  if (p.fused) bv = gather(p.bias);
  const int64_t perChannel = out.count() / (out.dim[0] * out.dim[1]);

  std::vector<double> result(n);
  auto finish = [&](auto acc, size_t l) {
    using T = decltype(acc);
    T t = static_cast<T>(p.alpha) * acc;
    if (p.fused) {
      if (!zv.empty()) t += static_cast<T>(p.alpha2) * static_cast<T>(zv[l]);
      const int64_t k = (static_cast<int64_t>(l) / perChannel) % out.dim[1];
      t += static_cast<T>(bv[static_cast<size_t>(k)]);
      if (p.relu) t = t < T(0) ? T(0) : t;  // NaN passes through
    }
    if (p.beta != 0) t += static_cast<T>(p.beta) * static_cast<T>(prior[l]);
    if (p.scale != 1) t = static_cast<T>(t * static_cast<T>(p.scale));
    result[l] = static_cast<double>(t);
  };

  switch (p.accum) {
    case Accum::F64: {
      std::vector<double> acc(n, 0.0);
      detail::accumulate(p, X, W, Y, &acc, [](double s, double v) { return s + v; });
      for (size_t l = 0; l < n; ++l) finish(acc[l], l);
      break;
    }
    case Accum::F32: {
      std::vector<float> acc(n, 0.0f);
      detail::accumulate(p, detail::as<float>(X), detail::as<float>(W), detail::as<float>(Y),
                         &acc, [](float s, float v) { return s + v; });
      for (size_t l = 0; l < n; ++l) finish(acc[l], l);
      break;
    }
    case Accum::F16: {  // fp16 products are exact in double: one rounding per multiply-add
      std::vector<double> acc(n, 0.0);
      detail::accumulate(p, X, W, Y, &acc,
                         [](double s, double v) { return gemm::roundHalf(s + v); });
      for (size_t l = 0; l < n; ++l) finish(static_cast<float>(acc[l]), l);
      break;
    }
    case Accum::BF16: {  // likewise in bf16 (bf16 products are exact in double too)
      std::vector<double> acc(n, 0.0);
      detail::accumulate(p, X, W, Y, &acc,
                         [](double s, double v) { return gemm::roundBf16(s + v); });
      for (size_t l = 0; l < n; ++l) finish(static_cast<float>(acc[l]), l);
      break;
    }
  }
  for (double& r : result) r = gemm::roundToType(r, out.type);
  if (p.bump && n > 0) result[0] = gemm::nextUp(result[0], out.type);
  scatter(out, result);
}

// ---------------------------------------------------------------------------------------
// Batch normalisation

enum class BnPhase { Training, Inference, Backward };

struct BnProblem {
  BnPhase phase = BnPhase::Training;
  bool spatial = true;  // false: per activation
  Tensor x, y;          // y: the output (Training, Inference) or dy (Backward)
  Tensor dx;            // Backward only
  // Per-channel (or per-activation) parameters: one descriptor, these pointers.
  Tensor param;
  const void* scale = nullptr;
  const void* bias = nullptr;       // Training, Inference
  const void* mean = nullptr;       // Inference: estimated; Backward: saved (optional)
  const void* var = nullptr;        // Inference: estimated variance; Backward: saved inv. var
  void* runningMean = nullptr;      // Training (optional)
  void* runningVar = nullptr;
  void* saveMean = nullptr;         // Training (optional)
  void* saveInvVar = nullptr;
  void* dScale = nullptr;           // Backward
  void* dBias = nullptr;
  double factor = 1, epsilon = 0;
  double alpha = 1, beta = 0;            // data (y, dx)
  double alphaParam = 1, betaParam = 0;  // Backward: dScale, dBias
  // Planted fault: batch statistics in one pass, var = E[x^2] - E[x]^2, summed sequentially in
  // the parameter type (float for f16/bf16/f32 data): catastrophic cancellation when the mean
  // is large against the spread.
  bool onePass = false;
};

namespace detail {
inline Tensor with(const Tensor& t, const void* data) {
  Tensor r = t;
  r.data = data;
  return r;
}
}  // namespace detail

inline void execute(const BnProblem& p) {
  const int64_t total = p.x.count();
  const int64_t P = p.param.count();  // number of parameter sets
  const int64_t C = p.x.dim[1];
  const int64_t S = total / (p.x.dim[0] * C);  // spatial positions
  const double M = static_cast<double>(total / P);
  auto pidx = [&](int64_t l) -> size_t {
    return static_cast<size_t>(p.spatial ? (l / S) % C : l % (C * S));
  };
  const std::vector<double> x = gather(p.x);
  const std::vector<double> scale = gather(detail::with(p.param, p.scale));
  std::vector<double> mean(static_cast<size_t>(P), 0.0), inv(static_cast<size_t>(P), 0.0);
  std::vector<double> var(static_cast<size_t>(P), 0.0);

  auto onePass = [&](auto zero) {  // the planted fault, summed in decltype(zero)
    std::vector<decltype(zero)> s(mean.size(), zero), s2(mean.size(), zero);
    for (int64_t l = 0; l < total; ++l) {
      const auto v = static_cast<decltype(zero)>(x[static_cast<size_t>(l)]);
      s[pidx(l)] += v;
      s2[pidx(l)] += v * v;
    }
    for (size_t j = 0; j < mean.size(); ++j) {
      const auto m = s[j] / static_cast<decltype(zero)>(M);
      mean[j] = m;
      var[j] = std::max(0.0, static_cast<double>(s2[j] / static_cast<decltype(zero)>(M) - m * m));
      inv[j] = 1.0 / std::sqrt(var[j] + p.epsilon);
    }
  };
  auto statistics = [&] {
    if (p.onePass) {
      if (p.param.type == gemm::DType::F64) onePass(0.0);
      else onePass(0.0f);
      return;
    }
    for (int64_t l = 0; l < total; ++l) mean[pidx(l)] += x[static_cast<size_t>(l)];
    for (double& m : mean) m /= M;
    for (int64_t l = 0; l < total; ++l) {
      const double d = x[static_cast<size_t>(l)] - mean[pidx(l)];
      var[pidx(l)] += d * d;
    }
    for (size_t j = 0; j < var.size(); ++j) {
      var[j] /= M;
      inv[j] = 1.0 / std::sqrt(var[j] + p.epsilon);
    }
  };
  auto blendStore = [&](const Tensor& t, std::vector<double> v, double alpha, double beta) {
    if (beta != 0) {
      const std::vector<double> prior = gather(t);
      for (size_t l = 0; l < v.size(); ++l) v[l] = alpha * v[l] + beta * prior[l];
    } else {
      for (double& e : v) e *= alpha;
    }
    scatter(t, v);
  };

  if (p.phase == BnPhase::Training || p.phase == BnPhase::Inference) {
    const std::vector<double> bias = gather(detail::with(p.param, p.bias));
    if (p.phase == BnPhase::Training) {
      statistics();
    } else {
      mean = gather(detail::with(p.param, p.mean));
      const std::vector<double> ev = gather(detail::with(p.param, p.var));
      for (size_t j = 0; j < ev.size(); ++j) inv[j] = 1.0 / std::sqrt(ev[j] + p.epsilon);
    }
    std::vector<double> y(static_cast<size_t>(total));
    for (int64_t l = 0; l < total; ++l) {
      const size_t j = pidx(l);
      y[static_cast<size_t>(l)] = scale[j] * (x[static_cast<size_t>(l)] - mean[j]) * inv[j] + bias[j];
    }
    blendStore(p.y, y, p.alpha, p.beta);
    if (p.phase == BnPhase::Training) {
      if (p.runningMean) {
        const Tensor rm = detail::with(p.param, p.runningMean);
        const Tensor rv = detail::with(p.param, p.runningVar);
        std::vector<double> m = gather(rm), v = gather(rv);
        const double unbias = M > 1 ? M / (M - 1) : 1.0;
        for (size_t j = 0; j < m.size(); ++j) {
          m[j] = (1 - p.factor) * m[j] + p.factor * mean[j];
          v[j] = (1 - p.factor) * v[j] + p.factor * var[j] * unbias;
        }
        scatter(rm, m);
        scatter(rv, v);
      }
      if (p.saveMean) {
        scatter(detail::with(p.param, p.saveMean), mean);
        scatter(detail::with(p.param, p.saveInvVar), inv);
      }
    }
    return;
  }

  // Backward.
  if (p.mean) {
    mean = gather(detail::with(p.param, p.mean));
    inv = gather(detail::with(p.param, p.var));
  } else {
    statistics();
  }
  const std::vector<double> dy = gather(p.y);
  std::vector<double> db(static_cast<size_t>(P), 0.0), ds(static_cast<size_t>(P), 0.0);
  std::vector<double> xhat(static_cast<size_t>(total));
  for (int64_t l = 0; l < total; ++l) {
    const size_t j = pidx(l), i = static_cast<size_t>(l);
    xhat[i] = (x[i] - mean[j]) * inv[j];
    db[j] += dy[i];
    ds[j] += dy[i] * xhat[i];
  }
  std::vector<double> dx(static_cast<size_t>(total));
  for (int64_t l = 0; l < total; ++l) {
    const size_t j = pidx(l), i = static_cast<size_t>(l);
    dx[i] = scale[j] * inv[j] * (dy[i] - db[j] / M - xhat[i] * ds[j] / M);
  }
  blendStore(p.dx, dx, p.alpha, p.beta);
  blendStore(detail::with(p.param, p.dScale), ds, p.alphaParam, p.betaParam);
  blendStore(detail::with(p.param, p.dBias), db, p.alphaParam, p.betaParam);
}

}  // namespace conv
}  // namespace sim
