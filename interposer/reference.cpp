// reference.cpp — the host fp64 reference implementations of reference.h.
#include "reference.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <type_traits>

#include "contract.h"
#include "conv_dims.h"
#include "tensor_copy.h"
#include "engine.h"
#include "fumi/dtype.hpp"
#include "scratch_arena.h"

namespace fumi {

namespace {

// Dense row-major copy of tensor i (empty vector for i < 0).
bool gathered(const std::vector<fumi_tensor>& ts, int i, std::vector<double>& out) {
  if (i < 0) {
    out.clear();
    return true;
  }
  const fumi_tensor& t = ts[static_cast<size_t>(i)];
  chargeScratch(static_cast<size_t>(tensorNumel(t)) * sizeof(double));
  out.resize(static_cast<size_t>(tensorNumel(t)));
  return gatherTensor(t, nullptr, t.dtype, out.data()) == FUMI_OK;
}


// The same interface as plain fp64 sums, for projections of outputs narrower than fp64.
struct PlainSum {
  double s = 0;
  void add(double a, double b) { s += a * b; }
  void addTail(double x) { s += x; }
  double hi() const { return s; }
  double lo() const { return 0; }
};

// sum a[i] * b[i*sb], compensated.
double dot2(const double* a, const double* b, int64_t sb, int64_t n) {
  Compensated sum;
  for (int64_t i = 0; i < n; ++i) sum.add(a[i], b[i * sb]);
  return sum.value();
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

// The operands of a MatmulSpec decoded once, for the reference and the projections alike:
// dense row-major fp64 copies, the dimensions, and where each batch starts in the copies.
// The copies live in the calling thread's buffers and are reused by its next call: on fresh
// memory, page faults and zeroing cost more than a projection's arithmetic (docs/checksum.md).
// Buffers above kKeptDoubles are released after each use. One MatmulOperands per thread at a
// time (the reference and the projections never nest).
struct MatmulOperands {
  static constexpr size_t kKeptDoubles = size_t{1} << 21;  // 16 MiB per operand
  struct Buffers {
    std::vector<double> A, B, C, bias;
  };
  static Buffers& threadBuffers() {
    thread_local Buffers buffers;
    return buffers;
  }

  int64_t batch = 1, m = 0, n = 0, k = 0;
  int64_t sa = 0, sb = 0, sc = 0;  // batch strides of A, B, C (0: shared by every batch)
  // C empty when not read (beta == 0: NaN stays out).
  std::vector<double>& A = threadBuffers().A;
  std::vector<double>& B = threadBuffers().B;
  std::vector<double>& C = threadBuffers().C;
  std::vector<double>& bias = threadBuffers().bias;

  MatmulOperands() = default;
  MatmulOperands(const MatmulOperands&) = delete;
  MatmulOperands& operator=(const MatmulOperands&) = delete;
  ~MatmulOperands() {
    for (std::vector<double>* v : {&A, &B, &C, &bias})
      if (v->capacity() > kKeptDoubles) std::vector<double>().swap(*v);
  }

  fumi_status decode(const std::vector<fumi_tensor>& ts, const MatmulSpec& s, int32_t output) {
    if (output != s.d || s.a < 0 || s.b < 0 || s.d < 0) return FUMI_UNSUPPORTED;
    const Dims da(ts[static_cast<size_t>(s.a)]), db(ts[static_cast<size_t>(s.b)]),
        dd(ts[static_cast<size_t>(s.d)]);
    batch = dd.batch;
    m = dd.rows;
    n = dd.cols;
    k = da.cols;
    if (da.rows != m || db.rows != k || db.cols != n) return FUMI_UNSUPPORTED;
    if (!gathered(ts, s.a, A) || !gathered(ts, s.b, B) || !gathered(ts, s.beta != 0 ? s.c : -1, C) ||
        !gathered(ts, s.bias, bias))
      return FUMI_UNSUPPORTED;
    // Operands without a batch dimension serve every batch.
    sa = da.batch > 1 ? m * k : 0;
    sb = db.batch > 1 ? k * n : 0;
    sc = C.size() > static_cast<size_t>(m * n) ? m * n : 0;
    return FUMI_OK;
  }
  const double* a(int64_t b) const { return &A[static_cast<size_t>(b * sa)]; }
  const double* b(int64_t b) const { return &B[static_cast<size_t>(b * sb)]; }
  const double* c(int64_t b) const { return C.empty() ? nullptr : &C[static_cast<size_t>(b * sc)]; }
};

// acc[t * count + s] += M[r, c] * v[w * count + s] over the rows x cols dense matrix M, with
// (t, w) = (r, c), or (c, r) when `transposed`: M * V or M^T * V for `count` vectors stored
// interleaved (element i of vector s at i * count + s). v_lo (may be null): low parts of v.
template <class Acc>
void multiplyInto(std::vector<Acc>& acc, const double* M, int64_t rows, int64_t cols,
                  bool transposed, const double* v, const double* v_lo, int32_t count) {
  // Plain sums have no low parts to carry (they are zero).
  if (std::is_same<Acc, PlainSum>::value) v_lo = nullptr;
  auto term = [&](double x, int64_t t, int64_t w) {
    Acc* out = &acc[static_cast<size_t>(t * count)];
    const double* vw = v + w * count;
    for (int32_t s = 0; s < count; ++s) out[s].add(x, vw[s]);
    if (v_lo)
      for (int32_t s = 0; s < count; ++s) out[s].addTail(x * v_lo[w * count + s]);
  };
  if (transposed) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) term(M[r * cols + c], c, r);
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) term(M[r * cols + c], r, c);
  }
}

// The sums of `acc` split into high and low parts, the accumulators cleared for the next batch.
template <class Acc>
void split(std::vector<Acc>& acc, std::vector<double>& hi, std::vector<double>& lo) {
  hi.resize(acc.size());
  lo.resize(acc.size());
  for (size_t i = 0; i < acc.size(); ++i) {
    hi[i] = acc[i].hi();
    lo[i] = acc[i].lo();
    acc[i] = Acc{};
  }
}

// The projection itself, with sums of type Acc (Compensated or PlainSum). `rows`: the row
// dimension (m) is contracted, else the column dimension (n).
template <class Acc>
void matmulProject(const MatmulOperands& op, const MatmulSpec& s, bool rows,
                   const Projection& p) {
  const int32_t count = p.count;
  const int64_t len = rows ? op.m : op.n;
  // The vectors interleaved (element i of every vector together), as multiplyInto reads them.
  std::vector<double> v(static_cast<size_t>(len * count));
  for (int32_t q = 0; q < count; ++q)
    for (int64_t i = 0; i < len; ++i) v[static_cast<size_t>(i * count + q)] = p.vectors[q * len + i];
  std::vector<Acc> inner(static_cast<size_t>(op.k * count));  // B * R, or L^T * A
  std::vector<Acc> prod(static_cast<size_t>((rows ? op.n : op.m) * count));
  std::vector<Acc> prior(prod.size()), bias(static_cast<size_t>(count));
  std::vector<double> hi, lo, prod_hi, prod_lo, prior_hi, prior_lo, bias_hi, bias_lo;
  if (!op.bias.empty()) {  // bias_i summed against the vectors: sum(R), or L^T * bias
    if (rows) multiplyInto(bias, op.bias.data(), op.m, 1, true, v.data(), nullptr, count);
    else
      for (int64_t i = 0; i < len; ++i)
        for (int32_t q = 0; q < count; ++q) bias[static_cast<size_t>(q)].add(1.0, v[static_cast<size_t>(i * count + q)]);
  }
  split(bias, bias_hi, bias_lo);
  for (int64_t b = 0; b < op.batch; ++b) {
    if (rows) {  // L^T D = alpha (L^T A) B + beta L^T C
      multiplyInto(inner, op.a(b), op.m, op.k, true, v.data(), nullptr, count);
      split(inner, hi, lo);
      multiplyInto(prod, op.b(b), op.k, op.n, true, hi.data(), lo.data(), count);
      if (op.c(b)) multiplyInto(prior, op.c(b), op.m, op.n, true, v.data(), nullptr, count);
    } else {  // D R = alpha A (B R) + beta C R
      multiplyInto(inner, op.b(b), op.k, op.n, false, v.data(), nullptr, count);
      split(inner, hi, lo);
      multiplyInto(prod, op.a(b), op.m, op.k, false, hi.data(), lo.data(), count);
      if (op.c(b)) multiplyInto(prior, op.c(b), op.m, op.n, false, v.data(), nullptr, count);
    }
    split(prod, prod_hi, prod_lo);
    split(prior, prior_hi, prior_lo);
    // prod and prior hold (other dimension) x count; out holds count x n (rows) or m x count.
    const int64_t other = rows ? op.n : op.m;
    for (int64_t j = 0; j < other; ++j)
      for (int32_t q = 0; q < count; ++q) {
        const size_t at = static_cast<size_t>(j * count + q);
        Compensated sum;
        sum.add(s.alpha, prod_hi[at]);
        sum.addTail(s.alpha * prod_lo[at]);
        if (op.c(b)) {
          sum.add(s.beta, prior_hi[at]);
          sum.addTail(s.beta * prior_lo[at]);
        }
        if (!op.bias.empty()) {
          const double weight = rows ? 1.0 : op.bias[static_cast<size_t>(j)];
          sum.add(weight, bias_hi[static_cast<size_t>(q)]);
          sum.addTail(weight * bias_lo[static_cast<size_t>(q)]);
        }
        const int64_t o = rows ? (b * count + q) * op.n + j : (b * op.m + j) * count + q;
        p.out[o] = sum.hi();
        if (p.out_lo) p.out_lo[o] = sum.lo();
      }
  }
}

}  // namespace

fumi_status matmulReference(const std::vector<fumi_tensor>& ts, const MatmulSpec& s,
                            int32_t output, double* out) {
  MatmulOperands op;
  if (const fumi_status st = op.decode(ts, s, output); st != FUMI_OK) return st;
  const int64_t m = op.m, n = op.n, k = op.k;
  for (int64_t b = 0; b < op.batch; ++b)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const int64_t o = (b * m + i) * n + j;
        double v = s.alpha * dot2(op.a(b) + i * k, op.b(b) + j, n, k);
        if (op.c(b)) v += s.beta * op.c(b)[i * n + j];
        if (!op.bias.empty()) v += op.bias[static_cast<size_t>(i)];
        out[o] = activate(v, s.act);
      }
  return FUMI_OK;
}

namespace {

// A [batch x] rows x cols operand read in place: element (b, i, j) at
// data[base + b * sb + i * sr + j * sc] (sb 0: one matrix for every batch).
struct MatrixView {
  const fumi_tensor* t = nullptr;
  int64_t batch = 1, rows = 0, cols = 1, sb = 0, sr = 0, sc = 0, base = 0;
  explicit MatrixView(const fumi_tensor& x) : t(&x) {
    const Dims d(x);
    batch = d.batch;
    rows = d.rows;
    cols = d.cols;
    sr = x.strides[x.ndim == 3 ? 1 : 0];
    sc = x.ndim >= 2 ? x.strides[x.ndim - 1] : 0;
    sb = x.ndim == 3 && x.shape[0] > 1 ? x.strides[0] : 0;
    base = tensorBase(x);
  }
  // Contract batch b along its columns (along_cols) or rows with `count` vectors of `V`.
  AxisContraction along(int64_t b, bool along_cols, const double* V, int32_t count, double alpha,
                        bool accumulate, double* out, int64_t out_k, int64_t out_s) const {
    AxisContraction c;
    c.data = t->data;
    c.dtype = t->dtype;
    c.base = base + (batch > 1 ? b * sb : 0);
    c.K = along_cols ? rows : cols;
    c.sk = along_cols ? sr : sc;
    c.L = along_cols ? cols : rows;
    c.sl = along_cols ? sc : sr;
    c.V = V;
    c.ldv = c.L;
    c.count = count;
    c.alpha = alpha;
    c.accumulate = accumulate;
    c.out = out;
    c.out_k = out_k;
    c.out_s = out_s;
    return c;
  }
};

// The plain-sum projection with every operand read in place, typed (contract.h): no fp64
// copies of A, B or C. `rows_p` and `cols_p` (either may be null) the two sides; with both (as
// many vectors each), A and C are each read once for the two (contractBoth): B R, then A against
// B R and L on one pass, then (L^T A) B. FUMI_UNSUPPORTED where it does not apply: another
// output than D, compensated sums (out_lo), an operand not in host memory (nor, with `device`,
// in device memory: contracted there) or shapes that do not fit (the caller then takes the
// copying path).
fumi_status matmulProjectInPlace(const std::vector<fumi_tensor>& ts, const MatmulSpec& s,
                                 int32_t output, const Projection* rows_p,
                                 const Projection* cols_p, const DeviceContract* device) {
  if (output != s.d || s.a < 0 || s.b < 0 || (rows_p && rows_p->out_lo) ||
      (cols_p && cols_p->out_lo))
    return FUMI_UNSUPPORTED;
  const auto tensor = [&](int i) -> const fumi_tensor* {
    return i >= 0 ? &ts[static_cast<size_t>(i)] : nullptr;
  };
  const fumi_tensor* prior = s.beta != 0 ? tensor(s.c) : nullptr;
  for (const fumi_tensor* t : {tensor(s.a), tensor(s.b), tensor(s.d), prior})
    if (t && ((t->memory != FUMI_MEMORY_HOST && !device) || t->ndim < 1 || t->ndim > 3))
      return FUMI_UNSUPPORTED;
  if (const fumi_tensor* bias = tensor(s.bias); bias && bias->memory != FUMI_MEMORY_HOST)
    return FUMI_UNSUPPORTED;
  const MatrixView A(*tensor(s.a)), B(*tensor(s.b)), D(*tensor(s.d));
  const int64_t m = D.rows, n = D.cols, k = A.cols, batch = D.batch;
  if (A.rows != m || B.rows != k || B.cols != n || (A.batch != 1 && A.batch != batch) ||
      (B.batch != 1 && B.batch != batch))
    return FUMI_UNSUPPORTED;
  std::unique_ptr<MatrixView> C;
  if (prior) {
    C = std::make_unique<MatrixView>(*prior);
    if (C->rows != m || C->cols != n || (C->batch != 1 && C->batch != batch)) return FUMI_UNSUPPORTED;
  }
  std::vector<double> bias;
  if (!gathered(ts, s.bias, bias) || (!bias.empty() && bias.size() != static_cast<size_t>(m)))
    return FUMI_UNSUPPORTED;
  // Each vector summed against the bias: sum(R) (columns), or L^T bias (rows).
  auto biasTerms = [&](const Projection* p, bool rows) {
    std::vector<double> term(p && !bias.empty() ? static_cast<size_t>(p->count) : 0, 0.0);
    const int64_t len = rows ? m : n;
    for (int32_t q = 0; p && q < p->count && !bias.empty(); ++q)
      for (int64_t i = 0; i < len; ++i)
        term[static_cast<size_t>(q)] +=
            p->vectors[q * len + i] * (rows ? bias[static_cast<size_t>(i)] : 1.0);
    return term;
  };
  const std::vector<double> rows_bias = biasTerms(rows_p, true),
                            cols_bias = biasTerms(cols_p, false);
  // One contraction of matrix M: in place on the host, or where M lives.
  auto one = [&](const MatrixView& M, const AxisContraction& c) {
    return M.t->memory == FUMI_MEMORY_HOST ? contractAxis(c) : contractAxisOnDevice(c, *device);
  };
  // Both contractions of one matrix: in one pass where they fit together, else one by one.
  auto both = [&](const MatrixView& M, const AxisContraction* x, const AxisContraction* y) {
    if (x && y && M.t->memory == FUMI_MEMORY_HOST && contractBoth(*x, *y, nullptr, nullptr))
      return true;
    return (!x || one(M, *x)) && (!y || one(M, *y));
  };
  thread_local std::vector<double> inner_r, inner_l;  // B R and L^T A: count x k, vector-major
  if (cols_p) inner_r.resize(static_cast<size_t>(cols_p->count * k));
  if (rows_p) inner_l.resize(static_cast<size_t>(rows_p->count * k));
  for (int64_t b = 0; b < batch; ++b) {
    // L^T D = alpha (L^T A) B + beta L^T C (+ L^T bias in every column), laid out count x n;
    // D R = alpha A (B R) + beta C R (+ bias_i sum(R)), laid out m x count.
    double* out_rows = rows_p ? rows_p->out + b * rows_p->count * n : nullptr;
    double* out_cols = cols_p ? cols_p->out + b * m * cols_p->count : nullptr;
    std::optional<AxisContraction> a_rows, a_cols, c_rows, c_cols;
    if (rows_p) a_rows = A.along(b, false, rows_p->vectors, rows_p->count, 1.0, false,
                                 inner_l.data(), 1, k);
    if (cols_p) a_cols = A.along(b, true, inner_r.data(), cols_p->count, s.alpha, false, out_cols,
                                 cols_p->count, 1);
    if (C && rows_p) c_rows = C->along(b, false, rows_p->vectors, rows_p->count, s.beta, true,
                                       out_rows, 1, n);
    if (C && cols_p) c_cols = C->along(b, true, cols_p->vectors, cols_p->count, s.beta, true,
                                       out_cols, cols_p->count, 1);
    const auto ptr = [](const std::optional<AxisContraction>& c) { return c ? &*c : nullptr; };
    const bool ok =
        (!cols_p || one(B, B.along(b, true, cols_p->vectors, cols_p->count, 1.0, false,
                                   inner_r.data(), 1, k))) &&
        both(A, ptr(a_cols), ptr(a_rows)) &&
        (!rows_p || one(B, B.along(b, false, inner_l.data(), rows_p->count, s.alpha, false,
                                   out_rows, 1, n))) &&
        (!C || both(*C, ptr(c_cols), ptr(c_rows)));
    if (!ok) return FUMI_UNSUPPORTED;
    for (int32_t q = 0; rows_p && q < rows_p->count && !bias.empty(); ++q)
      for (int64_t j = 0; j < n; ++j) out_rows[q * n + j] += rows_bias[static_cast<size_t>(q)];
    for (int64_t i = 0; cols_p && i < m && !bias.empty(); ++i)
      for (int32_t q = 0; q < cols_p->count; ++q)
        out_cols[i * cols_p->count + q] +=
            bias[static_cast<size_t>(i)] * cols_bias[static_cast<size_t>(q)];
  }
  for (std::vector<double>* v : {&inner_r, &inner_l})
    if (v->capacity() > (size_t{1} << 20)) std::vector<double>().swap(*v);
  return FUMI_OK;
}

// One side: the in-place path where it applies, else (without `device`) the operands decoded
// (fp64 copies) with plain or compensated sums.
fumi_status matmulProjectOne(const std::vector<fumi_tensor>& ts, const MatmulSpec& s,
                             int32_t output, bool rows, const Projection& p,
                             const DeviceContract* device) {
  if (matmulProjectInPlace(ts, s, output, rows ? &p : nullptr, rows ? nullptr : &p, device) ==
      FUMI_OK)
    return FUMI_OK;
  if (device) return FUMI_UNSUPPORTED;
  MatmulOperands op;
  if (const fumi_status st = op.decode(ts, s, output); st != FUMI_OK) return st;
  if (p.out_lo) matmulProject<Compensated>(op, s, rows, p);
  else matmulProject<PlainSum>(op, s, rows, p);
  return FUMI_OK;
}

}  // namespace

fumi_status matmulProjection(const std::vector<fumi_tensor>& ts, const MatmulSpec& s,
                             int32_t output, const std::vector<Projection>& sides,
                             const DeviceContract* device) {
  if (s.act != MatmulSpec::Act::kNone || output < 0 || static_cast<size_t>(output) >= ts.size())
    return FUMI_UNSUPPORTED;
  const fumi_tensor& d = ts[static_cast<size_t>(output)];
  const int rows_dim = d.ndim == 3 ? 1 : 0, cols_dim = d.ndim >= 2 ? d.ndim - 1 : -1;
  for (const Projection& p : sides)
    if (p.count < 1 || !p.vectors || !p.out || (p.dim != rows_dim && p.dim != cols_dim))
      return FUMI_UNSUPPORTED;
  // The rows and the columns together, read in place.
  if (sides.size() == 2 && sides[0].dim != sides[1].dim) {
    const bool first_rows = sides[0].dim == rows_dim;
    if (matmulProjectInPlace(ts, s, output, &sides[first_rows ? 0 : 1],
                             &sides[first_rows ? 1 : 0], device) == FUMI_OK)
      return FUMI_OK;
  }
  for (const Projection& p : sides)
    if (const fumi_status st = matmulProjectOne(ts, s, output, p.dim == rows_dim, p, device);
        st != FUMI_OK)
      return st;
  return FUMI_OK;
}

fumi_status convReference(const std::vector<fumi_tensor>& ts, const ConvSpec& s,
                          int32_t output, double* out) {
  using Dir = ConvSpec::Direction;
  const int expected = s.direction == Dir::kForward        ? s.y
                       : s.direction == Dir::kBackwardData ? s.x
                                                           : s.w;
  if (output != expected || s.x < 0 || s.w < 0 || s.y < 0) return FUMI_UNSUPPORTED;
  ConvDims d;
  if (!d.read(ts[static_cast<size_t>(s.x)], ts[static_cast<size_t>(s.w)],
              ts[static_cast<size_t>(s.y)], s))
    return FUMI_UNSUPPORTED;
  // The two operands of the direction (the output's own data is never read: prior holds it).
  std::vector<double> X, W, Y, prior, Z, bias;
  const bool ok = (s.direction == Dir::kBackwardData || gathered(ts, s.x, X)) &&
                  (s.direction == Dir::kBackwardFilter || gathered(ts, s.w, W)) &&
                  (s.direction == Dir::kForward || gathered(ts, s.y, Y)) &&
                  gathered(ts, s.beta != 0 ? s.prior : -1, prior) &&
                  gathered(ts, s.alpha2 != 0 ? s.z : -1, Z) && gathered(ts, s.bias, bias);
  if (!ok) return FUMI_UNSUPPORTED;
  const int64_t in_sp = d.spatialSize(d.in), f_sp = d.spatialSize(d.filter),
                out_sp = d.spatialSize(d.out);
  const size_t n_out = static_cast<size_t>(tensorNumel(ts[static_cast<size_t>(output)]));
  std::vector<Compensated> acc(n_out);
  // One loop nest for every direction: each (x, w, y) triple of the convolution contributes
  // x*w to y (forward), dy*w to dx (backward data) or x*dy to dw (backward filter).
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t k = 0; k < d.k; ++k) {
      const int64_t g = k / d.kg;
      for (int64_t cl = 0; cl < d.cg; ++cl) {
        const int64_t c = g * d.cg + cl;
        const int64_t x_base = (n * d.c + c) * in_sp, w_base = (k * d.cg + cl) * f_sp,
                      y_base = (n * d.k + k) * out_sp;
        for (int64_t o0 = 0; o0 < d.out[0]; ++o0)
          for (int64_t o1 = 0; o1 < d.out[1]; ++o1)
            for (int64_t o2 = 0; o2 < d.out[2]; ++o2)
              for (int64_t f0 = 0; f0 < d.filter[0]; ++f0)
                for (int64_t f1 = 0; f1 < d.filter[1]; ++f1)
                  for (int64_t f2 = 0; f2 < d.filter[2]; ++f2) {
                    const int64_t o[3] = {o0, o1, o2}, f[3] = {f0, f1, f2};
                    int64_t xi = 0, wi = 0, yi = 0;
                    bool inside = true;
                    for (int e = 0; e < 3; ++e) {
                      const int64_t i = o[e] * d.stride[e] - d.pad[e] + f[e] * d.dilation[e];
                      inside = inside && i >= 0 && i < d.in[e];
                      xi = xi * d.in[e] + i;
                      wi = wi * d.filter[e] + (s.flip ? d.filter[e] - 1 - f[e] : f[e]);
                      yi = yi * d.out[e] + o[e];
                    }
                    if (!inside) continue;
                    xi += x_base;
                    wi += w_base;
                    yi += y_base;
                    const auto at = [](const std::vector<double>& v, int64_t i) {
                      return v[static_cast<size_t>(i)];
                    };
                    switch (s.direction) {
                      case Dir::kForward: acc[static_cast<size_t>(yi)].add(at(X, xi), at(W, wi)); break;
                      case Dir::kBackwardData: acc[static_cast<size_t>(xi)].add(at(Y, yi), at(W, wi)); break;
                      case Dir::kBackwardFilter: acc[static_cast<size_t>(wi)].add(at(X, xi), at(Y, yi)); break;
                    }
                  }
      }
    }
  const int64_t channel_size = std::max<int64_t>(1, out_sp);  // bias: forward only
  for (size_t i = 0; i < n_out; ++i) {
    double v = s.alpha * acc[i].value();
    if (!prior.empty()) v += s.beta * prior[i];
    if (!Z.empty()) v += s.alpha2 * Z[i];
    if (!bias.empty()) v += bias[static_cast<size_t>((static_cast<int64_t>(i) / channel_size) % d.k)];
    out[i] = s.act == ConvSpec::Act::kRelu && v < 0 ? 0 : v;
  }
  return FUMI_OK;
}

fumi_tensor hostTensor(const char* name, const std::vector<int64_t>& shape, double* data) {
  fumi_tensor t{};
  t.name = name;
  t.dtype = FUMI_DTYPE_F64;
  t.memory = FUMI_MEMORY_HOST;
  t.role = FUMI_ROLE_INPUT;
  t.ndim = static_cast<int32_t>(shape.size());
  std::copy(shape.begin(), shape.end(), t.shape);
  denseStrides(t.ndim, t.shape, t.strides);
  t.data = data;
  return t;
}

fumi_status normReference(const std::vector<fumi_tensor>& ts, const NormSpec& s, int32_t output,
                          double* out) {
  using Phase = NormSpec::Phase;
  if (s.x < 0 || s.scale < 0) return FUMI_UNSUPPORTED;
  const fumi_tensor& xt = ts[static_cast<size_t>(s.x)];
  if (xt.ndim < 3) return FUMI_UNSUPPORTED;
  const int64_t total = tensorNumel(xt), n = xt.shape[0], c = xt.shape[1];
  if (total <= 0 || n <= 0 || c <= 0) return FUMI_UNSUPPORTED;
  const int64_t positions = total / (n * c);
  const int64_t sets = s.spatial ? c : c * positions;  // parameter sets
  const double m = static_cast<double>(total / sets);    // values per set
  auto set = [&](int64_t l) {
    return static_cast<size_t>(s.spatial ? (l / positions) % c : l % (c * positions));
  };
  std::vector<double> x, scale, mean, inv, var;
  if (!gathered(ts, s.x, x) || !gathered(ts, s.scale, scale) ||
      scale.size() != static_cast<size_t>(sets))
    return FUMI_UNSUPPORTED;
  const bool saved = s.phase != Phase::kTraining && s.mean >= 0 && s.var >= 0;
  if (saved) {
    if (!gathered(ts, s.mean, mean) || !gathered(ts, s.var, inv)) return FUMI_UNSUPPORTED;
    if (s.phase == Phase::kInference)  // estimated variance, not its inverse
      for (double& v : inv) v = 1.0 / std::sqrt(v + s.epsilon);
  } else {  // batch statistics, two passes with compensated sums
    std::vector<Compensated> sum(static_cast<size_t>(sets)), sq(static_cast<size_t>(sets));
    for (int64_t l = 0; l < total; ++l) sum[set(l)].add(x[static_cast<size_t>(l)], 1.0);
    mean.resize(static_cast<size_t>(sets));
    for (size_t j = 0; j < mean.size(); ++j) mean[j] = sum[j].value() / m;
    for (int64_t l = 0; l < total; ++l) {
      const double d = x[static_cast<size_t>(l)] - mean[set(l)];
      sq[set(l)].add(d, d);
    }
    var.resize(mean.size());
    inv.resize(mean.size());
    for (size_t j = 0; j < mean.size(); ++j) {
      var[j] = sq[j].value() / m;
      inv[j] = 1.0 / std::sqrt(var[j] + s.epsilon);
    }
  }
  // out = a * v + b * prior (prior read only when b != 0).
  auto blend = [&](const std::vector<double>& v, double a, double b, int prior) {
    std::vector<double> p;
    if (b != 0 && !gathered(ts, prior, p)) return FUMI_UNSUPPORTED;
    if (b != 0 && p.size() != v.size()) return FUMI_UNSUPPORTED;
    for (size_t i = 0; i < v.size(); ++i) out[i] = a * v[i] + (b != 0 ? b * p[i] : 0.0);
    return FUMI_OK;
  };
  if (s.phase != Phase::kBackward) {
    if (output == s.save_mean) return blend(mean, 1, 0, -1);
    if (output == s.save_inv) return blend(inv, 1, 0, -1);
    if (output == s.running_mean || output == s.running_var) {
      const bool is_mean = output == s.running_mean;
      std::vector<double> prior;
      if (var.empty() || !gathered(ts, is_mean ? s.running_mean_in : s.running_var_in, prior) ||
          prior.size() != mean.size())
        return FUMI_UNSUPPORTED;
      const double unbias = m > 1 ? m / (m - 1) : 1.0;
      for (size_t j = 0; j < prior.size(); ++j)
        out[j] = (1 - s.factor) * prior[j] +
                 s.factor * (is_mean ? mean[j] : var[j] * unbias);
      return FUMI_OK;
    }
    if (output != s.y) return FUMI_UNSUPPORTED;
    std::vector<double> bias;
    if (!gathered(ts, s.bias, bias) || bias.size() != scale.size()) return FUMI_UNSUPPORTED;
    std::vector<double> y(x.size());
    for (int64_t l = 0; l < total; ++l) {
      const size_t j = set(l), i = static_cast<size_t>(l);
      y[i] = scale[j] * (x[i] - mean[j]) * inv[j] + bias[j];
    }
    return blend(y, s.alpha, s.beta, s.y_in);
  }
  std::vector<double> dy;
  if (!gathered(ts, s.y, dy) || dy.size() != x.size()) return FUMI_UNSUPPORTED;
  std::vector<Compensated> db(static_cast<size_t>(sets)), ds(static_cast<size_t>(sets));
  std::vector<double> xhat(x.size());
  for (int64_t l = 0; l < total; ++l) {
    const size_t j = set(l), i = static_cast<size_t>(l);
    xhat[i] = (x[i] - mean[j]) * inv[j];
    db[j].add(dy[i], 1.0);
    ds[j].add(dy[i], xhat[i]);
  }
  std::vector<double> dbias(db.size()), dscale(ds.size());
  for (size_t j = 0; j < db.size(); ++j) {
    dbias[j] = db[j].value();
    dscale[j] = ds[j].value();
  }
  if (output == s.dscale) return blend(dscale, s.alpha_param, s.beta_param, s.dscale_in);
  if (output == s.dbias) return blend(dbias, s.alpha_param, s.beta_param, s.dbias_in);
  if (output != s.dx) return FUMI_UNSUPPORTED;
  std::vector<double> dx(x.size());
  for (int64_t l = 0; l < total; ++l) {
    const size_t j = set(l), i = static_cast<size_t>(l);
    dx[i] = scale[j] * inv[j] * (dy[i] - dbias[j] / m - xhat[i] * dscale[j] / m);
  }
  return blend(dx, s.alpha, s.beta, s.dx_in);
}

}  // namespace fumi
