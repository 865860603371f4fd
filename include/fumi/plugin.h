/* fumi/plugin.h — the C ABI between libfumi (the host) and check plugins.
 *
 * How to write a plugin:
 *   1. Build a shared library named libfumi_<name>.so that exports one symbol,
 *      `const fumi_plugin* fumi_plugin_entry(void)`, returning a static fumi_plugin whose
 *      abi_version is FUMI_PLUGIN_ABI_VERSION and struct_size is sizeof(fumi_plugin).
 *   2. `create` receives the host API and the parameters of one policy entry
 *      (`- { plugin: <name>, tolerance: ..., key: value }`); reject unknown or bad parameters by
 *      returning NULL and writing a message into `err`.
 *   3. `check` runs after the intercepted call returned. Build substitute inputs with
 *      host->alloc_like + host->map (a copy, |x| or a perturbation, converted to any dtype, in
 *      place of the tensor's own layout and memory), rerun the call with host->rerun, compare
 *      outputs with host->compare and count non-finite values with host->scan: the element-wise
 *      work then runs where the tensors live, in their own dtypes. host->gather (any dtype,
 *      any layout, host or device memory -> dense fp64) and host->scatter serve everything
 *      else (gather_in / scatter_in with FUMI_ORDER_STORAGE where positions do not matter).
 *      Report with host->report. Scratch is freed by the host when `check` returns; its
 *      contents are unspecified when allocated (not zeroed).
 *   4. Never let a C++ exception escape; return a fumi_status instead. A plugin that returns
 *      FUMI_ERROR (or throws anyway) is disabled for the rest of the run; the program goes on.
 *
 * Rules of this ABI: C only, every struct starts with struct_size (and abi_version where it is
 * an entry point) so both sides can grow them by appending fields; a reader uses only the
 * fields that struct_size covers, and steps through arrays of structs (fumi_call_info.tensors)
 * by the first element's struct_size. Pointers handed to a plugin are valid only during the
 * call that handed them over. `check` may run on one instance from several threads at once
 * (calls of a multi-threaded program): keep per-call state on the stack or in host scratch.
 */
#ifndef FUMI_PLUGIN_H
#define FUMI_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 2: the element-wise primitives (map, compare, scan) appended to fumi_host_api. A host speaking
 * 2 also loads plugins built for 1 and hands them a host API marked 1 (docs/plugin-abi.md). */
#define FUMI_PLUGIN_ABI_VERSION 2u
#define FUMI_PLUGIN_ABI_OLDEST 1u
#define FUMI_MAX_DIMS 8
#define FUMI_MAX_EXTRA_METRICS 8

#if defined(__GNUC__)
#define FUMI_EXPORT __attribute__((visibility("default")))
#else
#define FUMI_EXPORT
#endif

typedef enum fumi_status {
  FUMI_OK = 0,
  FUMI_SKIPPED = 1,         /* nothing to check for this call (e.g. empty problem) */
  FUMI_NO_SCRATCH = 2,      /* scratch budget exhausted: counted as skipped */
  FUMI_UNSUPPORTED = 3,     /* dtype / op / precision not supported: counted as skipped */
  FUMI_ERROR = 4            /* plugin failure: the plugin is disabled for the run */
} fumi_status;

typedef enum fumi_dtype {
  FUMI_DTYPE_F64 = 0,
  FUMI_DTYPE_F32 = 1,
  FUMI_DTYPE_F16 = 2,
  FUMI_DTYPE_BF16 = 3,
  FUMI_DTYPE_TF32 = 4,      /* compute precision only (fp32 storage, 10-bit mantissa) */
  FUMI_DTYPE_UNKNOWN = 15
} fumi_dtype;

/* What a check's findings mean (docs/policy.md, "Kinds of finding"):
 *   ERROR        the op computed this result badly: its output against a higher-precision or
 *                independent result on the same inputs, NaN/Inf appearing from finite inputs, a
 *                bitwise difference where the op should be deterministic.
 *   SENSITIVITY  how much the output moves when the inputs move by their rounding (perturb):
 *                a property of the op and its inputs, data rather than an alarm below a bound
 *                far above the error tolerances. */
typedef enum fumi_kind {
  FUMI_KIND_ERROR = 0,
  FUMI_KIND_SENSITIVITY = 1,
  /* What running in a lower precision than the program's values costs (autocast): the op in
   * its autocast dtype against the same op on the values before the cast. Host-measured. */
  FUMI_KIND_PRECISION_COST = 2,
  /* A result an ERROR check found off by more than its tolerance only because its inputs
   * cancel: the verdict's extra `error_of_terms` (its error against the magnitudes of the
   * terms it sums) times sqrt(k), k the terms each output sums (reduction_length), is within
   * the tolerance, so had the terms cancelled no further than random signs do the result would
   * have kept it, and the digits lost are the data's. Host-judged from such a verdict: data, and
   * a violation only above the policy's cancellation bound. */
  FUMI_KIND_CANCELLATION = 3
} fumi_kind;

/* Tolerances indexed by fumi_dtype (the check's effective precision); NaN: not set. */
#define FUMI_TOLERANCE_SLOTS 16

/* Where an error check's tolerance comes from when neither its entry nor the policy's per-kind
 * table sets one (docs/policy.md, "Error tolerances from the precision"):
 *   TABLE      FuMi's fixed table at the call's effective precision (f32 1e-4, bf16 1e-2, ...).
 *   PRECISION  derived per call from the unit roundoff of its effective precision and its
 *              reduction length with f32 accumulation (metrics.h, precisionTolerance); the
 *              table where the host does not know the reduction length.
 *   MAX        the larger of the two where the reduction length is known (the table never
 *              tightens; long f32 sums get their accumulation bound); the table elsewhere.
 *              The host's default. */
typedef enum fumi_tolerance_model {
  FUMI_TOLERANCE_TABLE = 0,
  FUMI_TOLERANCE_PRECISION = 1,
  FUMI_TOLERANCE_MAX = 2
} fumi_tolerance_model;

typedef enum fumi_memory { FUMI_MEMORY_HOST = 0, FUMI_MEMORY_DEVICE = 1 } fumi_memory;

typedef enum fumi_role { FUMI_ROLE_INPUT = 1, FUMI_ROLE_OUTPUT = 2 } fumi_role;

/* The order of a tensor's elements in the dense fp64 arrays of gather_in / scatter_in.
 *   LOGICAL  row-major over the logical shape (what gather and scatter use).
 *   STORAGE  the order of the tensor's layout in memory: its dimensions by decreasing |stride|
 *            (ties in logical order), each element where a dense array laid out like the tensor
 *            would hold it. The same permutation for every buffer laid out like the tensor, so
 *            elementwise work and comparisons of two such buffers (an output against its rerun,
 *            an input on its way to a rerun buffer) need no transpose: for a column-major BLAS
 *            operand, no strided walk at all. Use LOGICAL where positions matter (an index in a
 *            report, projections, the host's reference). */
typedef enum fumi_order { FUMI_ORDER_LOGICAL = 0, FUMI_ORDER_STORAGE = 1 } fumi_order;

/* One operand of a call, as a logical N-d array. Element (i0..in-1) lives at
 *   data + (base + sum_d i_d * strides[d]) * element_size
 * where base = sum over dims with a negative stride of (shape[d]-1) * -strides[d], so `data`
 * always points at the lowest address used. A BLAS operand op(A) of m x k with transpose and
 * leading dimension is described exactly this way (shape {m,k}, strides {1,lda} or {lda,1}).
 * An argument that is both read and written (BLAS C with beta != 0) appears twice: an INPUT
 * pointing at a snapshot taken before the call, and an OUTPUT pointing at the user's buffer. */
typedef struct fumi_tensor {
  uint32_t struct_size;
  const char* name;
  fumi_dtype dtype;
  fumi_memory memory;
  fumi_role role;
  int32_t ndim;
  int64_t shape[FUMI_MAX_DIMS];
  int64_t strides[FUMI_MAX_DIMS]; /* in elements; may be negative */
  void* data;
} fumi_tensor;

typedef struct fumi_call_info {
  uint32_t struct_size;
  const char* op;          /* e.g. "sgemm_", "cblas_dgemm" */
  const char* backend;     /* e.g. "blas" */
  fumi_dtype dtype;        /* storage dtype of the floating operands */
  fumi_dtype compute;      /* compute precision the call ran with */
  uint64_t call_index;     /* 0-based index of this call among calls of this op in the process */
  int32_t ntensors;
  const fumi_tensor* tensors;
  /* Appended: the number of terms each output element sums (GEMM: k; convolution forward:
   * C_in/groups times the filter's elements; an elementwise op: 1), where the host knows the
   * operation's shape; 0 when it does not. Read it only when struct_size covers it. */
  int64_t reduction_length;
  /* Appended: the training phase the call ran in, "forward", "backward" (inside an autograd
   * node), "optimizer" (inside an optimizer's step), or "" where the host cannot tell (no
   * framework). Read it only when struct_size covers it. */
  const char* phase;
  /* Appended: how many of the call's floating scalar arguments are not finite (a framework
   * op's fill value: masked_fill(mask, -inf) writes -inf from finite tensors). NaN/Inf in the
   * outputs came in through them as through a tensor. Read it only when struct_size covers it. */
  int32_t nonfinite_scalars;
} fumi_call_info;

typedef struct fumi_call fumi_call; /* opaque: one intercepted call being checked */

/* ABI 2 — what fumi_host_api.map writes: dst = f(src), element by element. */
typedef enum fumi_map_kind {
  FUMI_MAP_COPY = 0,    /* the value, converted to dst's dtype (rounded to nearest even) */
  FUMI_MAP_ABS = 1,     /* |x|: the op rerun on them gives its terms' magnitudes. Where |x|
                         * does not (a normalisation's backward, host memory), the host maps
                         * its input to mean + |x - mean| and copies that mean as it is */
  FUMI_MAP_PERTURB = 2  /* x + x * (shift * u), u = draw number first + j of the counter-based
                         * uniform [-1, 1) stream `seed` (metrics.h, Rng::uniformSymAt), j the
                         * element's position in FUMI_ORDER_STORAGE; zeros, Inf and NaN stay
                         * as they are, and so do indices a framework op keeps in floating
                         * values (torchvision's rois: their image column) */
} fumi_map_kind;

/* ABI 2 — fumi_map_spec.flags. */
typedef enum fumi_map_flag {
  /* The caller reads *changed only after a later compare, scan, project, contract (or their
   * _sides forms) of the same check has returned, or not at all: the host may write it as late
   * as that one's return (never after the check's run returns), so that a map on a device need
   * not wait for it. *changed must stay valid (and be read only) until then. */
  FUMI_MAP_CHANGED_LATER = 1
} fumi_map_flag;

typedef struct fumi_map_spec {
  uint32_t struct_size;
  fumi_map_kind kind;
  double shift;   /* PERTURB */
  uint64_t seed;  /* PERTURB */
  uint64_t first; /* PERTURB */
  /* Appended: fumi_map_flag values or'ed. A spec that predates it (a shorter struct_size) has
   * none; a host that predates it writes *changed before map returns. */
  uint32_t flags;
} fumi_map_spec;

/* ABI 2 — groups of fumi_comparison's fields, for fumi_compare_spec.metrics. */
typedef enum fumi_compare_metric {
  FUMI_COMPARE_RATIO = 1,   /* fumi_ratio, fumi_ratio_unguarded */
  FUMI_COMPARE_NORMS = 2,   /* normwise, norm_ratio */
  FUMI_COMPARE_MAX_REL = 4, /* max_rel */
  FUMI_COMPARE_ULP = 8,     /* ulp (with ulp_dtype) */
  FUMI_COMPARE_DIFFS = 16   /* nonfinite, mismatches, max_abs_diff, underflow: always filled */
} fumi_compare_metric;

/* ABI 2 — what fumi_host_api.compare measures of `a` against `b` over the pairs where both are
 * finite (metrics.h, compareValues, has each formula). */
typedef struct fumi_compare_spec {
  uint32_t struct_size;
  double ratio_guard;   /* fumi_ratio leaves out |a + b| below ratio_guard * max|a + b| */
  double rel_guard;     /* max_rel leaves out |b| below rel_guard * max|b| */
  fumi_dtype ulp_dtype; /* the unit of `ulp` (FUMI_DTYPE_UNKNOWN: ulp is NaN) */
  /* Appended: `underflow` counts the pairs with 0 < |b| < underflow_below and
   * |a| < underflow_below (0: not counted). A host that predates it leaves `underflow` as the
   * caller set it. */
  double underflow_below;
  /* Appended: the fields the caller reads, fumi_compare_metric flags or'ed; 0 (or a spec that
   * predates the field): all. The host may leave the others NaN and skip their per-element
   * work (a division per element for each of RATIO and MAX_REL). */
  uint32_t metrics;
} fumi_compare_spec;

typedef struct fumi_comparison {
  uint32_t struct_size;        /* set by the caller: the host fills what it covers */
  double fumi_ratio;           /* FuMi's max |a - b| / |a + b|, guarded */
  double fumi_ratio_unguarded;
  double normwise;             /* ||a - b||_2 / ||b||_2 */
  double max_rel;              /* max |a - b| / |b|, guarded */
  double ulp;                  /* max |a - b| in ULPs of b in ulp_dtype */
  double norm_ratio;           /* ||a||_2 / ||b||_2 */
  double max_abs_diff;         /* max |a - b| */
  uint64_t nonfinite;          /* pairs left out: a or b NaN or Inf */
  uint64_t mismatches;         /* elements whose values differ bit for bit (as fp64) */
  /* Appended: pairs where `a` is zero or subnormal although `b` is not zero, both below the
   * spec's underflow_below (a's smallest normal): values a low precision flushed. */
  uint64_t underflow;
} fumi_comparison;

typedef struct fumi_scan {
  uint32_t struct_size;        /* set by the caller */
  uint64_t nan;
  uint64_t inf;
  double max_abs;              /* over the finite elements */
  double norm;                 /* the 2-norm of the finite elements */
} fumi_scan;

typedef struct fumi_metric {
  const char* name;
  double value;
} fumi_metric;

/* The outcome of one check on one call. `value` is the check's primary metric, compared with
 * `tolerance`; `violated` is the plugin's decision. Extra metrics go to the report as-is. */
typedef struct fumi_verdict {
  uint32_t struct_size;
  const char* metric;
  double value;
  double tolerance;
  int32_t violated;
  int32_t nextra;
  fumi_metric extra[FUMI_MAX_EXTRA_METRICS];
  const char* detail; /* optional short text, e.g. "appeared" / "propagated" */
} fumi_verdict;

/* One `key: value` of a policy check entry, as text (the plugin parses numbers itself). */
typedef struct fumi_param {
  const char* key;
  const char* value;
} fumi_param;

typedef struct fumi_params {
  uint32_t struct_size;
  int32_t count;
  const fumi_param* items;
  double tolerance;      /* the entry's `tolerance:`, or NaN when not given (use the dtype table) */
  uint64_t seed;         /* deterministic seed for this check instance */
  /* Appended: the policy's `tolerances:` entry for this check's kind, per precision
   * (FUMI_TOLERANCE_SLOTS doubles indexed by fumi_dtype, NaN where unset), or NULL. A plugin
   * uses, in order: `tolerance` when set, this table's value for the call's precision, its own
   * default. */
  const double* kind_tolerances;
  /* Appended: how error tolerances not set above are derived (the policy's
   * `tolerances: { error: ... }`). Read it only when struct_size covers it. */
  fumi_tolerance_model error_model;
} fumi_params;

typedef enum fumi_log_level {
  FUMI_LOG_DEBUG = 1, FUMI_LOG_INFO = 2, FUMI_LOG_WARN = 3, FUMI_LOG_ERROR = 4
} fumi_log_level;

/* Services the host offers to plugins. */
/* One set of vectors for project_sides and contract_sides: what dim, count, vectors, out and
 * out_lo are to one project call (contract_sides ignores out_lo). */
typedef struct fumi_side {
  uint32_t struct_size; /* set by the caller */
  int32_t dim;
  int32_t count;
  const double* vectors;
  double* out;
  double* out_lo;
} fumi_side;

typedef struct fumi_host_api {
  uint32_t abi_version;
  uint32_t struct_size;
  const fumi_call_info* (*call_info)(fumi_call* call);
  /* Scratch memory of `bytes` bytes in `memory`, counted against the policy's scratch budget;
   * NULL when the budget is exhausted (return FUMI_NO_SCRATCH then). Freed after `check`.
   * Host scratch is 64-byte aligned and not zeroed. */
  void* (*alloc)(fumi_call* call, size_t bytes, fumi_memory memory);
  /* A scratch buffer laid out like tensor `index` (same shape and strides) holding `dtype`. */
  void* (*alloc_like)(fumi_call* call, int32_t index, fumi_dtype dtype);
  /* Number of logical elements of tensor `index` (product of its shape). */
  int64_t (*numel)(fumi_call* call, int32_t index);
  /* Copy the logical elements of tensor `index`, read from `buffer` (NULL: the call's own data)
   * holding `dtype`, into `out` as dense row-major fp64. */
  fumi_status (*gather)(fumi_call* call, int32_t index, const void* buffer, fumi_dtype dtype,
                        double* out);
  /* Write dense row-major fp64 `in` into `buffer` laid out like tensor `index`, as `dtype`
   * (rounded to nearest even). */
  fumi_status (*scatter)(fumi_call* call, int32_t index, const double* in, void* buffer,
                         fumi_dtype dtype);
  /* Rerun the call computing in `precision`. buffers[i] replaces tensor i's data (it must hold
   * `precision` storage, laid out like tensor i — except when `precision` equals the call's
   * dtype: then each buffer holds its tensor's own dtype, so a call with fp16 inputs and an fp32
   * output reruns as it ran); NULL keeps the original data, which is only valid for inputs when
   * `precision` equals the call's dtype. Every OUTPUT needs a buffer. */
  fumi_status (*rerun)(fumi_call* call, fumi_dtype precision, void* const* buffers);
  void (*report)(fumi_call* call, const fumi_verdict* verdict);
  void (*log)(fumi_log_level level, const char* message);
  /* Appended (read it only when struct_size covers it): output tensor `index` recomputed by
   * the host's own independent fp64 implementation of the operation (not the library that ran
   * the call), as dense row-major fp64 in `out`. FUMI_UNSUPPORTED when the host has none. */
  fumi_status (*reference)(fumi_call* call, int32_t index, double* out);
  /* Appended (read it only when struct_size covers it): output tensor `index` as `reference`
   * computes it, contracted along its logical dimension `dim` with `count` vectors, without
   * computing the output itself (for a GEMM, O((mn + mk + kn) * count) instead of O(mnk)).
   * vectors[s * len + i] is element i of vector s, len = shape[dim]. With the output read as
   * outer x len x inner around `dim`, out[(o * count + s) * inner + q] =
   * sum_i vectors[s * len + i] * Y[o, i, q]: the output's shape with `dim` replaced by `count`,
   * dense row-major. `out_lo` may be NULL; when given it receives low parts such that
   * out + out_lo carries the projection to about 2^-100 relative (compensated sums: needed to
   * check fp64 calls); without it, plain fp64 sums. FUMI_UNSUPPORTED when the host has no
   * projection for this operation, output or dimension. */
  fumi_status (*project)(fumi_call* call, int32_t index, int32_t dim, int32_t count,
                         const double* vectors, double* out, double* out_lo);
  /* Appended (read them only when struct_size covers them): gather and scatter with the dense
   * array's element order chosen (fumi_order); with FUMI_ORDER_LOGICAL they are gather and
   * scatter. */
  fumi_status (*gather_in)(fumi_call* call, int32_t index, const void* buffer, fumi_dtype dtype,
                           double* out, fumi_order order);
  fumi_status (*scatter_in)(fumi_call* call, int32_t index, const double* in, void* buffer,
                            fumi_dtype dtype, fumi_order order);
  /* Appended (read it only when struct_size covers it): tensor `index` read from `buffer`
   * holding `dtype` (NULL: the call's own data, as gather reads it) contracted along its logical
   * dimension `dim` with `count` vectors, in project's layout and with plain fp64 sums: what
   * project gives for the exact result, for the tensor itself. Read in place, typed, in its own
   * layout (no dense copy). */
  fumi_status (*contract)(fumi_call* call, int32_t index, const void* buffer, fumi_dtype dtype,
                          int32_t dim, int32_t count, const double* vectors, double* out);
  /* ABI 2, the element-wise primitives: each reads and writes buffers laid out like tensor
   * `index` (a source, `a` or `b` of NULL: the call's own data, in the tensor's dtype) in their own
   * dtype and memory, with fp64 arithmetic per element and fp64 accumulators: no dense copy,
   * and for device tensors the work stays where they live (only the results come back).
   *   map      dst (holding dst_dtype) = spec's function of src (holding src_dtype); *changed
   *            (may be NULL) receives the number of elements whose stored value differs from
   *            the source value (what rounding left of a perturbation).
   *   compare  `a` against `b` (the reference side of the relative metrics).
   *   scan     NaN and Inf counts, the largest finite magnitude and the 2-norm of the finite
   *            elements. */
  fumi_status (*map)(fumi_call* call, int32_t index, const void* src, fumi_dtype src_dtype,
                     void* dst, fumi_dtype dst_dtype, const fumi_map_spec* spec,
                     uint64_t* changed);
  fumi_status (*compare)(fumi_call* call, int32_t index, const void* a, fumi_dtype a_dtype,
                         const void* b, fumi_dtype b_dtype, const fumi_compare_spec* spec,
                         fumi_comparison* out);
  fumi_status (*scan)(fumi_call* call, int32_t index, const void* buffer, fumi_dtype dtype,
                      fumi_scan* out);
  /* Appended to ABI 2 (read them only when struct_size covers them): project and contract for
   * `n` sets of vectors in one call, each set with the semantics and layout of one project or
   * contract call; contract_sides also scans the tensor (as scan) when `scan` is not NULL. The
   * host reads each operand once for all of them where it can: a GEMM's A for both of its
   * sides, a matrix contracted along its rows and its columns and scanned in one pass. */
  fumi_status (*project_sides)(fumi_call* call, int32_t index, int32_t n, const fumi_side* sides);
  fumi_status (*contract_sides)(fumi_call* call, int32_t index, const void* buffer,
                                fumi_dtype dtype, int32_t n, const fumi_side* sides,
                                fumi_scan* scan);
} fumi_host_api;

typedef struct fumi_plugin {
  uint32_t abi_version;
  uint32_t struct_size;
  const char* name;
  const char* description;
  /* One instance per policy entry. Return NULL and fill `err` to reject the parameters. */
  void* (*create)(const fumi_host_api* host, const fumi_params* params, char* err,
                  size_t err_len);
  fumi_status (*check)(void* instance, fumi_call* call);
  void (*destroy)(void* instance);
  /* Appended: what this check's findings mean (a plugin without the field: FUMI_KIND_ERROR). */
  fumi_kind kind;
} fumi_plugin;

typedef const fumi_plugin* (*fumi_plugin_entry_fn)(void);
#define FUMI_PLUGIN_ENTRY_SYMBOL "fumi_plugin_entry"

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FUMI_PLUGIN_H */
