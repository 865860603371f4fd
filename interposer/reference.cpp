// reference.cpp — the host fp64 reference implementations of reference.h.
#include "reference.h"

#include <cmath>

#include "engine.h"
#include "fumi/dtype.hpp"

namespace fumi {

namespace {

// Dense row-major copy of tensor i (empty vector for i < 0).
bool gathered(const std::vector<fumi_tensor>& ts, int i, std::vector<double>& out) {
  if (i < 0) return true;
  const fumi_tensor& t = ts[static_cast<size_t>(i)];
  out.resize(static_cast<size_t>(tensorNumel(t)));
  return gatherTensor(t, nullptr, t.dtype, out.data()) == FUMI_OK;
}

// sum a[i] * b[i*sb] with error-free transformations (TwoProduct by fma, TwoSum): the result
// is as accurate as a dot product computed in twice the working precision.
double dot2(const double* a, const double* b, int64_t sb, int64_t n) {
  double s = 0, c = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double p = a[i] * b[i * sb];
    const double pe = std::fma(a[i], b[i * sb], -p);
    const double t = s + p;
    const double z = t - s;
    c += (s - (t - z)) + (p - z) + pe;
    s = t;
  }
  return s + c;
}

double activate(double x, MatmulSpec::Act act) {
  switch (act) {
    case MatmulSpec::Act::kRelu: return x < 0 ? 0 : x;
    case MatmulSpec::Act::kGelu:
      return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case MatmulSpec::Act::kNone: break;
  }
  return x;
}

// Rows and columns of a matrix operand ([batch x] rows x cols, or a vector = rows x 1), and
// its batch count.
struct Dims {
  int64_t batch = 1, rows = 0, cols = 1;
  explicit Dims(const fumi_tensor& t) {
    if (t.ndim == 3) batch = t.shape[0];
    rows = t.shape[t.ndim == 3 ? 1 : 0];
    if (t.ndim >= 2) cols = t.shape[t.ndim - 1];
  }
};

}  // namespace

fumi_status matmulReference(const std::vector<fumi_tensor>& ts, const MatmulSpec& s,
                            int32_t output, double* out) {
  if (output != s.d || s.a < 0 || s.b < 0 || s.d < 0) return FUMI_UNSUPPORTED;
  const Dims da(ts[static_cast<size_t>(s.a)]), db(ts[static_cast<size_t>(s.b)]),
      dd(ts[static_cast<size_t>(s.d)]);
  const int64_t m = dd.rows, n = dd.cols, k = da.cols;
  if (da.rows != m || db.rows != k || db.cols != n) return FUMI_UNSUPPORTED;
  std::vector<double> A, B, C, bias;
  if (!gathered(ts, s.a, A) || !gathered(ts, s.b, B) || !gathered(ts, s.c, C) ||
      !gathered(ts, s.bias, bias))
    return FUMI_UNSUPPORTED;
  // Operands without a batch dimension serve every batch.
  const int64_t sa = da.batch > 1 ? m * k : 0, sb = db.batch > 1 ? k * n : 0;
  const int64_t sc = C.size() > static_cast<size_t>(m * n) ? m * n : 0;
  const bool reads_c = !C.empty() && s.beta != 0;  // beta == 0: C is not read (NaN stays out)
  for (int64_t b = 0; b < dd.batch; ++b)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const int64_t o = (b * m + i) * n + j;
        double v = s.alpha * dot2(&A[static_cast<size_t>(b * sa + i * k)],
                                  &B[static_cast<size_t>(b * sb + j)], n, k);
        if (reads_c) v += s.beta * C[static_cast<size_t>(b * sc + i * n + j)];
        if (!bias.empty()) v += bias[static_cast<size_t>(i)];
        out[o] = activate(v, s.act);
      }
  return FUMI_OK;
}

}  // namespace fumi
