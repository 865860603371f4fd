// blas.cpp — CPU BLAS hooks: decode sgemm_/dgemm_/sgemv_/dgemv_/cblas_?gemm exactly into the
// Call model (user-view operands with their transposes and leading dimensions) and rerun them
// through the real Fortran entry points at f32 or f64.
#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string>
#include <memory>
#include <exception>
#include <mutex>
#include <new>
#include <vector>

#include "call.h"
#include "context.h"
#include "engine.h"
#include "fumi/dtype.hpp"
#include "hook.h"
#include "reference.h"
#include "report.h"

namespace fumi::hooks {

// Declarations of the real-pointer accessors the handlers use (defined by the table below).
#define FUMI_HOOK(name, backend, dtype, handler, ret, params, args) \
  using name##_fn = ret(*) params;                                  \
  inline name##_fn try_real_##name();
#include "blas.def"
#undef FUMI_HOOK

namespace {

// CPU BLAS calls nothing fumi hooks: forward as is.
template <class F, class... A>
inline auto forwardReal(F f, A... a) {
  return f(a...);
}

template <class T>
constexpr fumi_dtype dtypeOf() {
  return sizeof(T) == 4 ? FUMI_DTYPE_F32 : FUMI_DTYPE_F64;
}

char upper(const char* c) { return static_cast<char>(std::toupper(static_cast<unsigned char>(*c))); }
bool isTrans(char t) { return t == 'T' || t == 'C'; }
bool validTrans(char t) { return t == 'N' || isTrans(t); }

// A GEMM in canonical column-major form: C = alpha*op(A)*op(B) + beta*C.
struct Gemm {
  char ta, tb;
  int m, n, k, lda, ldb, ldc;
  double alpha, beta;
  bool valid() const {
    return validTrans(ta) && validTrans(tb) && m >= 0 && n >= 0 && k >= 0 &&
           lda >= std::max(1, isTrans(ta) ? k : m) && ldb >= std::max(1, isTrans(tb) ? n : k) &&
           ldc >= std::max(1, m);
  }
};

class GemmCall final : public Call {
 public:
  // a/b/c_in/c: tensor indices of the canonical operands (c_in -1 when beta == 0).
  GemmCall(OpSite& site, fumi_dtype dt, int64_t size, uint64_t index, const Gemm& g)
      : Call(site, dt, dt, size, index), g_(g) {}
  int a = -1, b = -1, c_in = -1, c = -1;
  MatmulSpec spec;  // the user's logical view (row-major A and B are not swapped here)

  fumi_status reference(int32_t output, double* out) override {
    return matmulReference(tensors(), spec, output, out);
  }
  fumi_status project(int32_t output, const std::vector<Projection>& sides) override {
    return matmulProjection(tensors(), spec, output, sides);
  }

  fumi_status rerun(fumi_dtype p, void* const* buf) override {
    const auto& ts = tensors();
    const void* A = buf[a] ? buf[a] : ts[a].data;
    const void* B = buf[b] ? buf[b] : ts[b].data;
    void* C = buf[c];
    const size_t bytes = static_cast<size_t>(tensorSpan(ts[c])) * dtypeBytes(p);
    if (c_in >= 0) std::memcpy(C, buf[c_in] ? buf[c_in] : ts[c_in].data, bytes);
    const char ta[2] = {g_.ta, 0}, tb[2] = {g_.tb, 0};
    if (p == FUMI_DTYPE_F32) {
      auto fn = try_real_sgemm_();
      if (!fn) return FUMI_UNSUPPORTED;
      const float alpha = static_cast<float>(g_.alpha), beta = static_cast<float>(g_.beta);
      fn(ta, tb, &g_.m, &g_.n, &g_.k, &alpha, static_cast<const float*>(A), &g_.lda,
         static_cast<const float*>(B), &g_.ldb, &beta, static_cast<float*>(C), &g_.ldc, 1, 1);
      return FUMI_OK;
    }
    if (p == FUMI_DTYPE_F64) {
      auto fn = try_real_dgemm_();
      if (!fn) return FUMI_UNSUPPORTED;
      fn(ta, tb, &g_.m, &g_.n, &g_.k, &g_.alpha, static_cast<const double*>(A), &g_.lda,
         static_cast<const double*>(B), &g_.ldb, &g_.beta, static_cast<double*>(C), &g_.ldc, 1,
         1);
      return FUMI_OK;
    }
    return FUMI_UNSUPPORTED;
  }

 private:
  Gemm g_;
};

class GemvCall final : public Call {
 public:
  GemvCall(OpSite& site, fumi_dtype dt, int64_t size, uint64_t index, char t, int m, int n,
           double alpha, int lda, int incx, double beta, int incy)
      : Call(site, dt, dt, size, index),
        t_(t), m_(m), n_(n), lda_(lda), incx_(incx), incy_(incy), alpha_(alpha), beta_(beta) {}
  int a = -1, x = -1, y_in = -1, y = -1;

  fumi_status reference(int32_t output, double* out) override {
    return matmulReference(tensors(), spec(), output, out);
  }
  fumi_status project(int32_t output, const std::vector<Projection>& sides) override {
    return matmulProjection(tensors(), spec(), output, sides);
  }

  fumi_status rerun(fumi_dtype p, void* const* buf) override {
    const auto& ts = tensors();
    const void* A = buf[a] ? buf[a] : ts[a].data;
    const void* X = buf[x] ? buf[x] : ts[x].data;
    void* Y = buf[y];
    const size_t bytes = static_cast<size_t>(tensorSpan(ts[y])) * dtypeBytes(p);
    if (y_in >= 0) std::memcpy(Y, buf[y_in] ? buf[y_in] : ts[y_in].data, bytes);
    const char t[2] = {t_, 0};
    if (p == FUMI_DTYPE_F32) {
      auto fn = try_real_sgemv_();
      if (!fn) return FUMI_UNSUPPORTED;
      const float alpha = static_cast<float>(alpha_), beta = static_cast<float>(beta_);
      fn(t, &m_, &n_, &alpha, static_cast<const float*>(A), &lda_, static_cast<const float*>(X),
         &incx_, &beta, static_cast<float*>(Y), &incy_, 1);
      return FUMI_OK;
    }
    if (p == FUMI_DTYPE_F64) {
      auto fn = try_real_dgemv_();
      if (!fn) return FUMI_UNSUPPORTED;
      fn(t, &m_, &n_, &alpha_, static_cast<const double*>(A), &lda_,
         static_cast<const double*>(X), &incx_, &beta_, static_cast<double*>(Y), &incy_, 1);
      return FUMI_OK;
    }
    return FUMI_UNSUPPORTED;
  }

 private:
  MatmulSpec spec() const { return MatmulSpec{a, x, y_in, y, /*bias=*/-1, alpha_, beta_}; }
  char t_;
  int m_, n_, lda_, incx_, incy_;
  double alpha_, beta_;
};

// Forward the original call exactly once; if a check can run, snapshot the in/out operand
// first, then build the Call and run the checks. Any failure inside fumi leaves the original
// call's effect untouched.
// The LAPACK routine a BLAS call was made by, or null: its caller's code is in a LAPACK library
// (liblapack, numpy's lapack_lite, scipy's flapack) or in the BLAS library itself (OpenBLAS
// builds LAPACK in and calls its own dgemm_ through the PLT). Such a product is a step of a
// factorisation (dgebrd_'s trailing update A - V·Yᵀ - X·Uᵀ cancels by construction as the
// reduction proceeds), not a result of the program's: its sensitivity says nothing about what
// the program gets (batch 17: a PINN's numpy 2-norm, exact to 17 digits, raised 3 dgemm_
// sensitivity violations from inside dgesdd_). Resolved once per return address.
const char* lapackCaller(const void* caller, const void* real) {
  struct Entry {
    const void* caller;
    const char* routine;  // interned; "" when not LAPACK
  };
  static std::mutex mu;
  static std::vector<Entry> seen;  // a few call sites per process
  std::lock_guard<std::mutex> lock(mu);
  for (const Entry& e : seen)
    if (e.caller == caller) return *e.routine ? e.routine : nullptr;
  const char* routine = "";
  Dl_info from{}, lib{};
  if (caller && dladdr(caller, &from) && from.dli_fname) {
    std::string file = from.dli_fname;
    file = file.substr(file.rfind('/') + 1);
    std::transform(file.begin(), file.end(), file.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    const bool same_library =
        real && dladdr(real, &lib) && lib.dli_fbase && lib.dli_fbase == from.dli_fbase;
    if (same_library || file.find("lapack") != std::string::npos)
      routine = strdup(from.dli_sname ? from.dli_sname : "a LAPACK routine");
  }
  if (seen.size() < 4096) seen.push_back(Entry{caller, routine});
  return *routine ? routine : nullptr;
}

// The sampling decision, taken before anything is decoded: a call that is not sampled should
// cost as little as possible. An empty problem (m, n or k is 0) a rule samples is counted
// skipped, saying why (batch 12: LAPACK's empty calls inside numpy's svd showed as neither),
// and so is a product LAPACK makes (lapackCaller).
RuleSampler* sampleCall(const CallSite& cs, const void* real, int64_t size) {
  RuleSampler* sampler =
      cs.decision.select(CallFacts{std::max<int64_t>(size, 0), cs.site.dtype, "cpu"},
                         cs.call_index);
  if (!sampler) return nullptr;
  if (const char* routine = lapackCaller(cs.caller, real)) {
    cs.site.countSkipped((std::string("made by LAPACK's ") + routine +
                          " (a step of its factorisation, not a result of the program's)")
                             .c_str());
    return nullptr;
  }
  if (size > 0) return sampler;
  cs.site.countSkipped("an empty product (m, n or k is 0)");
  return nullptr;
}

// A sampled call: snapshot the in/out operand, forward the original call exactly once, then
// build the Call and run the checks. Any failure inside fumi leaves the call's effect as is.
template <class Forward, class Build>
void checkedCall(const CallSite& cs, RuleSampler& sampler, const void* inout,
                 int64_t inout_span, size_t elem_bytes, Forward&& forward, Build&& build) {
  Engine& eng = *engine();
  // Inside a framework op whose inputs live in shared memory (Hogwild): another process may
  // change the operands between the call and its check, and the check would flag a correct
  // call. The op itself is checked by its adapter on copies it can verify.
  if (contextReadsSharedMemory()) {
    cs.site.countSkipped("its framework op reads shared memory another process may write");
    forward();
    return;
  }
  std::vector<unsigned char> snapshot;
  const char* why_not = nullptr;
  if (inout) {
    const size_t bytes = static_cast<size_t>(inout_span) * elem_bytes;
    if (bytes > eng.policy().scratch_budget)  // the snapshot alone is over budget
      why_not = "the copy of its input/output operand before the call exceeds scratch_budget";
    else
      try {
        InsideScope inside;
        snapshot.assign(static_cast<const unsigned char*>(inout),
                        static_cast<const unsigned char*>(inout) + bytes);
      } catch (const std::bad_alloc&) {
        why_not = "no memory for the copy of its input/output operand before the call";
      }
  }
  const double started = monotonicSeconds();
  forward();  // outside any try: what the real function does is the caller's business
  const double op_seconds = monotonicSeconds() - started;
  if (why_not) {
    cs.site.countSkipped(why_not);
    return;
  }
  checkSafely(cs.site, sampler, [&] {
    auto call = build(cs.call_index, inout ? snapshot.data() : nullptr);
    call->setOpSeconds(op_seconds);
    return call;
  });
}

// Describe a GEMM given in the user's layout. Column-major operands use strides {1, ld}
// (transposed: {ld, 1}); row-major the opposite. `canonical` is the same product in
// column-major form, used for reruns (row-major swaps A and B).
template <class T>
std::unique_ptr<GemmCall> describeGemm(OpSite& site, uint64_t index, bool row_major, char ta,
                                       char tb, int m, int n, int k, const T* a, int lda,
                                       const T* b, int ldb, double beta, T* c, int ldc,
                                       void* c_snapshot, const Gemm& canonical) {
  const fumi_dtype dt = dtypeOf<T>();
  auto call = std::make_unique<GemmCall>(site, dt, int64_t{m} * n * k, index, canonical);
  call->setReductionLength(k);
  // Stride of the row index and of the column index of a logical operand.
  auto rs = [row_major](bool trans, int ld) -> int64_t { return trans != row_major ? ld : 1; };
  auto cs = [row_major](bool trans, int ld) -> int64_t { return trans != row_major ? 1 : ld; };
  const bool tra = isTrans(ta), trb = isTrans(tb);
  const int ia = call->addTensor("A", FUMI_ROLE_INPUT, dt, FUMI_MEMORY_HOST, {m, k},
                                 {rs(tra, lda), cs(tra, lda)}, const_cast<T*>(a));
  const int ib = call->addTensor("B", FUMI_ROLE_INPUT, dt, FUMI_MEMORY_HOST, {k, n},
                                 {rs(trb, ldb), cs(trb, ldb)}, const_cast<T*>(b));
  int ic_in = -1;
  if (beta != 0)
    ic_in = call->addTensor("C", FUMI_ROLE_INPUT, dt, FUMI_MEMORY_HOST, {m, n},
                            {rs(false, ldc), cs(false, ldc)}, c_snapshot);
  const int ic = call->addTensor("C", FUMI_ROLE_OUTPUT, dt, FUMI_MEMORY_HOST, {m, n},
                                 {rs(false, ldc), cs(false, ldc)}, c);
  call->addArg("layout", row_major ? "row" : "col");
  call->addArg("transa", std::string(1, ta));
  call->addArg("transb", std::string(1, tb));
  call->addArg("alpha", formatScalar(canonical.alpha));
  call->addArg("beta", formatScalar(beta));
  call->addArg("lda", std::to_string(lda));
  call->addArg("ldb", std::to_string(ldb));
  call->addArg("ldc", std::to_string(ldc));
  call->a = row_major ? ib : ia;
  call->b = row_major ? ia : ib;
  call->c_in = ic_in;
  call->c = ic;
  call->spec = MatmulSpec{ia, ib, ic_in, ic, /*bias=*/-1, canonical.alpha, beta};
  return call;
}

int64_t gemmSpanC(int m, int n, int ldc, bool row_major) {
  if (m == 0 || n == 0) return 0;
  return row_major ? int64_t{m - 1} * ldc + n : int64_t{n - 1} * ldc + m;
}

template <class T, class Real>
void fortranGemm(const CallSite& cs, Real real, const char* ta, const char* tb,
                 const int* m, const int* n, const int* k, const T* alpha, const T* a,
                 const int* lda, const T* b, const int* ldb, const T* beta, T* c, const int* ldc,
                 size_t la, size_t lb) {
  auto forward = [&] { real(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, la, lb); };
  RuleSampler* sampler =
      sampleCall(cs, reinterpret_cast<const void*>(real), int64_t{*m} * *n * *k);
  if (!sampler) return forward();
  const Gemm g{upper(ta), upper(tb), *m, *n, *k, *lda, *ldb, *ldc, double(*alpha), double(*beta)};
  if (!g.valid()) return forward();  // the real library reports the bad argument
  checkedCall(cs, *sampler, *beta != 0 ? c : nullptr,
              gemmSpanC(g.m, g.n, g.ldc, false), sizeof(T), forward,
              [&](uint64_t index, void* snap) {
                return describeGemm<T>(cs.site, index, false, g.ta, g.tb, g.m, g.n, g.k, a, g.lda,
                                       b, g.ldb, g.beta, c, g.ldc, snap, g);
              });
}

constexpr int kCblasRowMajor = 101, kCblasColMajor = 102;
constexpr int kCblasNoTrans = 111, kCblasTrans = 112, kCblasConjTrans = 113;

char cblasTrans(int t) {
  return t == kCblasNoTrans ? 'N' : t == kCblasTrans ? 'T' : t == kCblasConjTrans ? 'C' : '?';
}

template <class T, class Real>
void cblasGemm(const CallSite& cs, Real real, int layout, int ta, int tb, int m, int n, int k, T alpha, const T* a, int lda, const T* b, int ldb, T beta, T* c,
               int ldc) {
  auto forward = [&] { real(layout, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); };
  RuleSampler* sampler =
      sampleCall(cs, reinterpret_cast<const void*>(real), int64_t{m} * n * k);
  if (!sampler) return forward();
  const char cta = cblasTrans(ta), ctb = cblasTrans(tb);
  const bool row = layout == kCblasRowMajor;
  if (!row && layout != kCblasColMajor) return forward();
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
  const Gemm g = row ? Gemm{ctb, cta, n, m, k, ldb, lda, ldc, double(alpha), double(beta)}
                     : Gemm{cta, ctb, m, n, k, lda, ldb, ldc, double(alpha), double(beta)};
  if (!g.valid()) return forward();
  checkedCall(cs, *sampler, beta != 0 ? c : nullptr, gemmSpanC(m, n, ldc, row),
              sizeof(T), forward, [&](uint64_t index, void* snap) {
                return describeGemm<T>(cs.site, index, row, cta, ctb, m, n, k, a, lda, b, ldb,
                                       double(beta), c, ldc, snap, g);
              });
}

template <class T, class Real>
void fortranGemv(const CallSite& cs, Real real, const char* t, const int* m,
                 const int* n, const T* alpha, const T* a, const int* lda, const T* x,
                 const int* incx, const T* beta, T* y, const int* incy, size_t lt) {
  auto forward = [&] { real(t, m, n, alpha, a, lda, x, incx, beta, y, incy, lt); };
  RuleSampler* sampler = sampleCall(cs, reinterpret_cast<const void*>(real), int64_t{*m} * *n);
  if (!sampler) return forward();
  const char tr = upper(t);
  if (!validTrans(tr) || *m < 0 || *n < 0 || *lda < std::max(1, *m) || *incx == 0 ||
      *incy == 0)
    return forward();
  const bool trans = isTrans(tr);
  const int rows = trans ? *n : *m, cols = trans ? *m : *n;
  const int64_t span_y = rows ? int64_t{rows - 1} * std::abs(*incy) + 1 : 0;
  checkedCall(cs, *sampler, *beta != 0 ? y : nullptr, span_y, sizeof(T), forward,
              [&](uint64_t index, void* snap) {
                const fumi_dtype dt = dtypeOf<T>();
                auto call = std::make_unique<GemvCall>(cs.site, dt, int64_t{*m} * *n, index, tr,
                                                       *m, *n, double(*alpha), *lda, *incx,
                                                       double(*beta), *incy);
                const int64_t ld = *lda;
                call->setReductionLength(cols);
                call->a = call->addTensor("A", FUMI_ROLE_INPUT, dt, FUMI_MEMORY_HOST,
                                          {rows, cols}, {trans ? ld : 1, trans ? 1 : ld},
                                          const_cast<T*>(a));
                call->x = call->addTensor("x", FUMI_ROLE_INPUT, dt, FUMI_MEMORY_HOST, {cols},
                                          {*incx}, const_cast<T*>(x));
                if (*beta != 0)
                  call->y_in = call->addTensor("y", FUMI_ROLE_INPUT, dt, FUMI_MEMORY_HOST,
                                               {rows}, {*incy}, snap);
                call->y = call->addTensor("y", FUMI_ROLE_OUTPUT, dt, FUMI_MEMORY_HOST, {rows},
                                          {*incy}, y);
                call->addArg("trans", std::string(1, tr));
                call->addArg("alpha", formatScalar(double(*alpha)));
                call->addArg("beta", formatScalar(double(*beta)));
                call->addArg("lda", std::to_string(*lda));
                call->addArg("incx", std::to_string(*incx));
                call->addArg("incy", std::to_string(*incy));
                return call;
              });
}

}  // namespace

#define FUMI_HOOK FUMI_HOOK_STATE
#include "blas.def"
#undef FUMI_HOOK

}  // namespace fumi::hooks

#define FUMI_HOOK FUMI_HOOK_WRAPPER
#include "blas.def"
#undef FUMI_HOOK
