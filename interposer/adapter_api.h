/* adapter_api.h — the C interface between libfumi and its framework adapters (the PyTorch
 * adapter libfumi_torch.so, interposer/torch/). libfumi loads an adapter itself when the
 * framework appears in the process and calls its attach function with this table; adapters
 * never link against libfumi. Adapter and libfumi are built together: the version must match.
 *
 * Per framework op call an adapter does:
 *   index = count_call(site, &checkable); push_context(site, index);
 *   if (checkable && <it can describe the call>) token = sample(site, index, facts...);
 *   if (token) { capture (copies of the inputs it writes); let the op run; check(...); }
 *   pop_context();
 * so describing and copying inputs is paid only by calls the policy samples. */
#ifndef FUMI_ADAPTER_API_H
#define FUMI_ADAPTER_API_H

#include <stddef.h>
#include <stdint.h>

#include "fumi/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 5: the device memory and element-wise primitives of fumi_adapter_call (alloc_device ... scan).
 * 6: contract and convolve (checksum's projections of device ops on the device).
 * 7: set_shared_probe (library calls inside a framework op reading shared memory).
 * 8: quiet (the adapter's own computations outside check(): library calls pass through).
 * 9: compare (the host's comparison of two host buffers, for the adapter's own figures) and
 *    account (the adapter's own time on sampled calls, for the summary).
 * 10: fumi_adapter_call.cuda_stream (fumi's own kernels for the primitives and checksum's
 *    projections of CUDA tensors, on the framework's stream).
 * 11: fumi_adapter_call.write_aux (the tensors `tensors` leaves out, for a dump).
 * 12: report (a violation the adapter found itself, with a sentence for the report).
 * 13: phase, nan_look_back and nan_looked_back (the NaN origin found among the ops before a
 *    sentinel).
 * 14: fumi_adapter_call.op_seconds (what the overhead budget predicts a check's cost from).
 * 15: fumi_past_call.hops (how near the origin each call a look-back went through ran).
 * 16: nan_looked_back's `through`: every call followed back (up to 4096), not the 16 nearest:
 *    libfumi picks the likeliest maker among them and lists the nearest.
 * 17: fumi_past_call.steps_ago (an origin whose optimizer step has run: its values reached the
 *    parameters, no loss scaler handled them).
 * 18: held_findings and nonfinite_parameter (NaN/Inf of the backward pass written into the
 *    parameters outside an optimizer step: SAM's ascent step, before its zero_grad).
 * 19: python_place and fumi_past_call.place (where in the program's Python code a kept call
 *    ran: an origin found looking back gets its line) and fumi_past_call.by_zero.
 * 20: set_script_frames and fumi_py_place.script (the TorchScript frames an op ran in);
 *    fumi_past_call.out_of_domain and forward_site/forward_index; fumi_py_place.node (the
 *    autograd node a kept call ran in); gradient_accumulated.
 * 21: nan_origin_forward (an origin found at its call in the backward pass, told with the
 *    forward call whose autograd node it runs in) and set_forward_probe (the same, asked by
 *    libfumi for a check's finding); fumi_past_call.positive_inf.
 * 22: set_look_back_probe (a library call's NaN made of Inf, looked back from first). */
#define FUMI_ADAPTER_ABI_VERSION 22u

/* Where a call ran in the program's Python code (python_place): its innermost frames, taken
 * cheaply as the call runs and turned into "file:line in function" only when reported. The
 * program's own frames (not installed packages' or the standard library's; those where it has
 * none), innermost first; `code` is NULL past the last and opaque to adapters. */
#define FUMI_PY_PLACE_FRAMES 4
typedef struct fumi_py_place {
  const void* code[FUMI_PY_PLACE_FRAMES];
  int32_t instr[FUMI_PY_PLACE_FRAMES];
  /* ABI 20: the TorchScript frames it ran in (set_script_frames' text; NULL: none), which come
   * before its Python frames. */
  const char* script;
  /* ABI 20: the innermost autograd node it ran in, in the backward pass (its
   * "autograd::engine::evaluate_function: ..." range; opaque to adapters), NULL elsewhere: the
   * Python frames of a backward op are the backward() call's. */
  const void* node;
} fumi_py_place;

/* One call of an op an adapter saw earlier (nan_looked_back). */
typedef struct fumi_past_call {
  void* site;
  uint64_t index;
  const char* phase; /* phase() when the call ran */
  /* In nan_looked_back's `through`: the fewest ops between it and the origin along the inputs
   * followed back (1: it made an input of the origin); 0 elsewhere. */
  uint32_t hops;
  /* In nan_looked_back: the optimizer steps the adapter's thread began since the call ran (0: in
   * this step). */
  uint32_t steps_ago;
  /* ABI 19: where it ran (python_place when it ran; all NULL where not known). */
  fumi_py_place place;
  /* ABI 19, in nan_looked_back's `call` and `through`: nonzero for a division whose divisor,
   * one element read as the call ran, was exactly 0: it made non-finite values for certain. */
  uint32_t by_zero;
  /* ABI 20, likewise: nonzero for a call whose input, still held as the call read it, lies
   * outside the op's domain (a sqrt of a negative, a log of 0, a fractional power of a
   * negative): it made non-finite values, which a later op may have dropped (a `where` guarding
   * a log is common), so it only tells calls of the same op apart. */
  uint32_t out_of_domain;
  /* ABI 20, in nan_looked_back's `call`: for a call of the backward pass, the forward call whose
   * autograd node it ran in (RecordFunction's sequence numbers), where still kept; its `place`
   * is then that call's Python frames (the line the program wrote), not the backward() call's.
   * NULL elsewhere. */
  void* forward_site;
  uint64_t forward_index;
  /* ABI 21, in nan_looked_back's `call`: nonzero where its outputs hold +Inf (which a log or a
   * sqrt never makes of finite values: the likeliest maker is then another). */
  uint32_t positive_inf;
} fumi_past_call;

/* A convolution in fp64 on the device, for checksum's projections of a device op's convolution
 * (fumi_adapter_call.convolve, ABI 6): a cross-correlation over `spatial` (1 to 3) dimensions
 * with `stride`, `padding` and `dilation`, groups 1, of `device` (a strided view of the call's
 * device memory, as contract's) and `host` (dense row-major fp64 in host memory), its result
 * dense row-major fp64 in `out` (host memory), of `out_ndim` dimensions `out_shape`:
 *   FUMI_CONV_FORWARD          out (N, K, out...) = conv(x: device (N, C, in...),
 *                              w: host (K, C, filter...))
 *   FUMI_CONV_BACKWARD_DATA    out (N, C, in...) = that convolution's input gradient for
 *                              dy: device (N, K, out...) and w: host (K, C, filter...)
 *   FUMI_CONV_BACKWARD_FILTER  out (K, C, filter...) = its filter gradient for x: device
 *                              (N, C, in...) and dy: host (N, K, out...) */
typedef enum fumi_conv_direction {
  FUMI_CONV_FORWARD = 0,
  FUMI_CONV_BACKWARD_DATA = 1,
  FUMI_CONV_BACKWARD_FILTER = 2
} fumi_conv_direction;

typedef struct fumi_device_conv {
  uint32_t struct_size;
  int32_t direction; /* fumi_conv_direction */
  int32_t spatial;
  int32_t stride[3], padding[3], dilation[3];
  fumi_tensor device;
  fumi_tensor host;
  int32_t out_ndim;
  int64_t out_shape[FUMI_MAX_DIMS];
  double* out;
} fumi_device_conv;

/* One sampled framework-op call, described by the adapter after the op ran. INPUTs are their
 * values before the op ran (copies taken then of those the op may write: in-place, out=,
 * running statistics; the program's own tensors otherwise), OUTPUTs what the op produced. Only
 * floating tensors are listed. A tensor on a device is FUMI_MEMORY_DEVICE with `data` its own
 * device memory: libfumi reaches it only through the functions below, the adapter's. */
typedef struct fumi_adapter_call {
  uint32_t struct_size;
  fumi_dtype dtype;   /* the op's floating dtype (first floating input) */
  int64_t size;       /* the problem size handed to sample() */
  int32_t ntensors;
  const fumi_tensor* tensors;
  int32_t nargs;      /* non-tensor arguments, as text, for reports and dumps */
  const char* const* arg_names;
  const char* const* arg_values;
  /* Rerun the op on fresh copies computing in `precision`, with the semantics of
   * fumi_host_api.rerun; never touches the program's tensors, RNG or autograd state. */
  fumi_status (*rerun)(void* self, fumi_dtype precision, void* const* buffers);
  void* self;
  /* Output tensor `index` (of `tensors`) recomputed by an implementation independent of the
   * one that ran the call, with the semantics of fumi_host_api.reference (dense row-major
   * fp64); FUMI_UNSUPPORTED when the adapter has none (torch: the CPU kernel, for ops that ran
   * on a device). NULL: none. */
  fumi_status (*reference)(void* self, int32_t index, double* out);
  /* The autocast dtype of the region the op ran in (torch.autocast); FUMI_DTYPE_UNKNOWN: none. */
  fumi_dtype autocast;
  /* The precision the op computed in: the autocast dtype when autocast cast its (f32) inputs
   * down, so its results carry that precision; else `dtype`. */
  fumi_dtype compute;
  /* ABI 5 — the call's device memory and the element-wise primitives on it (plugin.h: map,
   * compare, scan), so that a check of a device op moves scalars to the host, not its tensors.
   * Each may be NULL: libfumi's own behaviour then applies (the CUDA runtime's memory, work
   * staged through host copies). `self` as for rerun.
   *   alloc_device    `bytes` of device memory where the call's device tensors live (NULL:
   *                   none), usable until release_device; the adapter counts it, libfumi
   *                   charges it to the check's scratch budget.
   *   to_host, to_device  copies of `bytes` between device memory and host memory (1: done).
   *   map, compare, scan  fumi_host_api's on buffers laid out like tensor `index` (device
   *                   memory; sources resolved by libfumi, never NULL). map's `order` gives
   *                   the element at logical index (i_0..i_n-1) its position
   *                   j = sum_d i_d * order[d] in FUMI_ORDER_STORAGE (the noise of
   *                   FUMI_MAP_PERTURB). FUMI_UNSUPPORTED for a layout or dtype the adapter
   *                   leaves to libfumi: it then stages that one through the host. */
  void* (*alloc_device)(void* self, size_t bytes);
  void (*release_device)(void* self, void* p);
  int (*to_host)(void* self, void* dst, const void* src, size_t bytes);
  int (*to_device)(void* self, void* dst, const void* src, size_t bytes);
  fumi_status (*map)(void* self, int32_t index, const int64_t* order, const void* src,
                     fumi_dtype src_dtype, void* dst, fumi_dtype dst_dtype,
                     const fumi_map_spec* spec, uint64_t* changed);
  fumi_status (*compare)(void* self, int32_t index, const void* a, fumi_dtype a_dtype,
                         const void* b, fumi_dtype b_dtype, const fumi_compare_spec* spec,
                         fumi_comparison* out);
  fumi_status (*scan)(void* self, int32_t index, const void* buffer, fumi_dtype dtype,
                      fumi_scan* out);
  /* ABI 6 — `count` vectors (host memory: vectors[s * len + i], len = view->shape[dim])
   * contracted in fp64 with a strided view of the call's device memory (`view`: dtype, ndim,
   * shape, strides >= 0 in elements, data the address of its element 0; name, role and memory
   * unused), on the device; `out` (host memory) laid out as fumi_host_api.project's: with the
   * view read as outer x len x inner around `dim`,
   * out[(o * count + s) * inner + q] = sum_i vectors[s * len + i] * view[o, i, q].
   * checksum's projections of a device op (the op's output, and its operands for the exact
   * side) go through it, so that only the projections come back. NULL or FUMI_UNSUPPORTED:
   * libfumi copies the tensors to the host instead. */
  fumi_status (*contract)(void* self, const fumi_tensor* view, int32_t dim, int32_t count,
                          const double* vectors, double* out);
  /* ABI 6 — the convolution `conv` describes (fumi_device_conv), in fp64 on the device: with
   * contract, how checksum projects a device op's convolution (the filter, or dy, summed
   * against the vectors first: a convolution with `vectors` channels). NULL or
   * FUMI_UNSUPPORTED: libfumi copies the operands to the host instead. */
  fumi_status (*convolve)(void* self, const fumi_device_conv* conv);
  /* ABI 10 — where the call's device tensors are CUDA memory on the calling thread's current
   * device: 1 and *stream the framework's current stream there (cudaStream_t; NULL: the legacy
   * default stream), which their values are ordered on; else 0. libfumi then runs map, compare,
   * scan, contract and convolve as its own kernels on that stream (a few launches each, where
   * the framework's ops take dozens), scratch from alloc_device, copies on that stream; where
   * they decline (no kernels, a capturing stream), the functions above serve. NULL: never. */
  int (*cuda_stream)(void* self, void** stream);
  /* ABI 11 — for a dump (a rule's `action: dump`): the input tensors `tensors` leaves out
   * (integer and boolean ones: indices, targets, masks), each written into the directory `dir`
   * as the raw bytes of a contiguous host copy, described by the returned JSON array of
   * {"name", "dtype" (PyTorch's name: "int64", "bool" ...), "shape", "strides", "file"}, so that
   * the call can be made again (fumi replay). The text stays valid until the check returns.
   * NULL (function or result): none. */
  const char* (*write_aux)(void* self, const char* dir);
  /* ABI 14 — wall seconds the op itself took on the calling thread, from after the adapter's
   * copies to its return (0: unknown): the overhead budget predicts a check's cost from it. */
  double op_seconds;
} fumi_adapter_call;

typedef struct fumi_adapter_api {
  uint32_t abi_version;
  uint32_t struct_size;
  /* The op site for a framework op name ("aten::addmm"); created once, valid for the process
   * lifetime. NULL when fumi is not active. */
  void* (*intern_op)(const char* name, const char* backend);
  /* Whether any policy rule checks ops of `backend`: if not, the adapter need not look at
   * inputs at all. */
  int (*backend_checked)(const char* backend);
  /* Count one call of `site`; returns its 0-based index among the op's calls. *checkable is
   * set to 1 when some rule may check calls of this op, else 0. */
  uint64_t (*count_call)(void* site, int* checkable);
  /* A token when the policy samples this call for checking, else NULL. `device` as "cpu",
   * "cuda:0"; `autocast` the autocast region's dtype (FUMI_DTYPE_UNKNOWN: none). Each non-NULL token must be passed to exactly one of check() or skip(). */
  void* (*sample)(void* site, uint64_t index, int64_t size, fumi_dtype dtype, const char* device,
                  fumi_dtype autocast);
  /* Run the sampled checks on a call that has run (on the calling thread, before it returns).
   * Returns 1 when a check of kind error found a violation. */
  int (*check)(void* site, void* token, uint64_t index, const fumi_adapter_call* call);
  /* A sampled call that cannot be checked (op cannot be rerun, no memory for copies). */
  void (*skip)(void* site, void* token, const char* why);
  /* Framework-op context of the calling thread: library-level calls (BLAS, cuBLAS) made while
   * an op is pushed are reported "inside" it. Pops must match pushes. */
  void (*push_context)(void* site, uint64_t index);
  void (*pop_context)(void);
  /* A line in fumi's log (levels as fumi_log_level). */
  void (*log)(int level, const char* message);
  /* Bytes one check may use for copies of a call's operands (the policy's scratch_budget). */
  uint64_t (*scratch_budget)(void);
  /* The NaN/Inf origin search (interposer/nan_search.h). nan_sentinels: whether the adapter
   * should watch single-element outputs (losses, norms) of every op for non-finite values and
   * report them with nonfinite_seen. nan_search: whether a search runs now; while it does, the
   * adapter scans every op, calls nan_search_op once per op (0: the search just ended), and
   * reports the first op making non-finite outputs from finite inputs with nan_origin
   * ("appeared" / "nan_from_inf" / "scaled_overflow"), or an op receiving them with
   * nan_propagated. A watched op whose inputs were finite is its own origin: the adapter may
   * call nan_origin at once, with no search running (it counts as one).
   * optimizer_step: a training step began (the search counts steps). */
  int (*nan_sentinels)(void);
  void (*nonfinite_seen)(void* site, uint64_t index);
  int (*nan_search)(void);
  int (*nan_search_op)(void);
  void (*nan_origin)(void* site, uint64_t index, const char* detail, uint64_t nan, uint64_t inf);
  void (*nan_propagated)(void* site, const char* input);
  void (*optimizer_step)(void);
  /* Error attribution of a violating call (`fields`: a JSON object as text, written as an
   * `attribution` event with op and call_index added). */
  void (*attribution)(void* site, uint64_t index, const char* fields);
  /* One value of a host-measured metric of `site` ("autocast.normwise"), into the summary's
   * per-op distributions; `bound` (NaN: none) makes a value above it a violation. */
  void (*record_metric)(void* site, uint64_t index, const char* name, fumi_kind kind,
                        double value, double bound);
  /* The policy's bound on autocast.normwise (NaN: data only). */
  double (*autocast_bound)(void);
  /* ABI 7 — the adapter's answer to "does a framework op running on the calling thread read
   * memory another process may write while it runs?" (torch: inputs in shared memory, as
   * Hogwild training shares its weights): a library call made inside such an op (sgemm_ under
   * aten::mm) is then not checked, as its operands may change between the call and its check.
   * Called only for sampled library calls made inside a framework op. */
  void (*set_shared_probe)(int (*probe)(void));
  /* ABI 8 — library calls the calling thread makes are fumi's own until quiet(previous) with
   * what quiet(1) returned: they pass through the hooks, neither counted nor checked (inside
   * check() they already are). For the adapter's reruns after a check (autocast's precision
   * cost, error attribution): a rerun in f64 calls dgemm_, which is not the program's. */
  int (*quiet)(int on);
  /* ABI 9 — fumi_host_api.compare's loops on two host buffers laid out like `t` (its data
   * unused): the adapter's own figures after a check (an output's error against its wider
   * rerun, kept for error attribution; autocast's precision cost) in the tensors' own dtypes,
   * vectorised, without fp64 copies. */
  fumi_status (*compare)(const fumi_tensor* t, const void* a, fumi_dtype a_dtype, const void* b,
                         fumi_dtype b_dtype, const fumi_compare_spec* spec, fumi_comparison* out);
  /* ABI 9 — wall seconds the adapter spent on a sampled call of `site` outside check() (copies
   * before the op ran, describing it, its work after the checks): the summary's `adapter_s`,
   * beside check_s. */
  void (*account)(void* site, double seconds);
  /* ABI 12 — a violation the adapter found itself, not a check's verdict: "check.metric" `name`
   * of kind `kind`, `value` over `bound`, with `detail` (a sentence for the report; NULL: none),
   * reported like record_metric's violations (the calling thread's stacks: call it inside the
   * op's call). */
  void (*report)(void* site, uint64_t index, const char* name, fumi_kind kind, double value,
                 double bound, const char* detail);
  /* ABI 13 — the phase of the op running on the calling thread ("forward", "backward",
   * "optimizer", or "" outside any op): a static string. */
  const char* (*phase)(void);
  /* ABI 13 — what the adapter found looking back over the ops before a sentinel that has just
   * started a search (nan_search.h, "look back"), from the values they left behind. With
   * `not_origin` NULL, `call` made non-finite outputs (`nan`, `inf`; `detail` as nan_origin's)
   * from finite inputs, through the `n_through` calls in `through` (in the order they ran)
   * whose results were no longer held as they were (none: from its own inputs): reported as
   * the origin at once, without a native stack (the op has returned; its Python frames are
   * its place's, ABI 19); the search goes on only for the op's stacks, should it make them
   * again. Otherwise `call` is the
   * earliest op still holding the values and `not_origin` says why it is not the origin (with
   * `call` NULL: why nothing was looked over), `through` the calls its inputs were followed
   * back through before they were lost (may be none): kept for the search's message should it
   * end without one. `detail` "spread": the values are the spread of `call`, an origin the
   * adapter reported before; the search ends quietly (a repeat). With `not_origin`, `detail`
   * "carried" (or NULL): the values were in the parameters or the optimizer's state when the
   * step began, and the step before had them too; where an origin reported before reached the
   * optimizer, they are its spread and the search ends quietly (a repeat); else as NULL. */
  void (*nan_looked_back)(const fumi_past_call* call, const char* detail, uint64_t nan,
                          uint64_t inf, const fumi_past_call* through, size_t n_through,
                          const char* not_origin);
  /* ABI 13 — the policy's nan_origin.look_back: 0 never keep the ops for looking back, 1
   * always, 2 while the thread's op rate keeps the cost small. */
  int (*nan_look_back)(void);
  /* ABI 18 — nonzero while NaN/Inf findings of the backward pass wait for what the loss scaler
   * does (loss_scaling.h): then an adapter tells nonfinite_parameter of in-place writes outside
   * an optimizer step that leave NaN/Inf in a parameter. */
  int (*held_findings)(void);
  /* ABI 18 — call `index` of `site`, outside an optimizer step, wrote NaN/Inf into a parameter
   * (a leaf tensor that requires grad): the held findings reached the parameters with no
   * optimizer step (SAM's ascent p += rho * g / |g|), raised, not handled by the zero_grad
   * after it. */
  void (*nonfinite_parameter)(void* site, uint64_t index);
  /* ABI 19 — where the calling thread runs in the program's Python code, for a call it keeps
   * (fumi_past_call.place): a few loads per frame, no lock, no GIL (the GIL is taken the first
   * time a code object is seen). All NULL where not known: no Python, another version than the
   * one libfumi was built for (CPython 3.11), a thread outside Python code. */
  void (*python_place)(fumi_py_place* out);
  /* ABI 20 — the adapter's answer to "in which TorchScript code does the calling thread run?":
   * its frames, innermost first, as "file:line in function (TorchScript)" lines joined by '\n',
   * in memory the adapter keeps for the process; NULL outside TorchScript. An op a scripted
   * function runs has no Python frame of its own (the innermost is the line calling the
   * function): python_place and the Python stacks of reports put these before the Python ones. */
  void (*set_script_frames)(const char* (*frames)(void));
  /* ABI 20 — autograd wrote a parameter's gradient (AccumulateGrad ran): NaN/Inf findings held
   * for the loss scaler reached gradients it may skip; a backward pass that wrote none
   * (autograd.grad) leaves its findings no scaler's. */
  void (*gradient_accumulated)(void);
  /* ABI 21 — nan_origin for a call of the backward pass running in the autograd node that the
   * forward call `forward` made (its site, index and place; fumi_past_call.forward_site's
   * pairing, found by the adapter at once): the origin's Python frames are that call's (the
   * line the program wrote; the backward op's own are the backward() call's) and its event
   * names it (forward_call); its native stack is still the calling thread's. */
  void (*nan_origin_forward)(void* site, uint64_t index, const char* detail, uint64_t nan,
                             uint64_t inf, const fumi_past_call* forward);
  /* ABI 21 — the adapter's answer to "which forward call made the autograd node the calling
   * thread runs in?": nonzero with it written to `out` (site, index, place), 0 where it does
   * not know (outside the backward pass, not kept). Asked only for a check's NaN/Inf origin of
   * the backward pass, which is then placed like nan_origin_forward's. */
  void (*set_forward_probe)(int (*probe)(fumi_past_call* out));
  /* ABI 22 — the adapter's answer to "look back now, from the op the calling thread runs, for
   * where NaN/Inf its inputs hold was made": nonzero where it found and reported an origin
   * (nan_origin and the search it starts, the op its sentinel), 0 otherwise. Asked in the
   * forward pass, before a library call's check inside the op claims NaN it made of Inf in its
   * inputs ("nan_from_inf": sgemm_ adding +inf and -inf) as an origin: found, that NaN is the
   * origin's spread (batch 37: an exp overflow's Inf, then the GEMM reading it, two origins). */
  void (*set_look_back_probe)(int (*probe)(void));
} fumi_adapter_api;

/* Exported by an adapter: returns 0 on success, else writes why into err. */
typedef int (*fumi_adapter_attach_fn)(const fumi_adapter_api* api, char* err, size_t err_len);
#define FUMI_TORCH_ATTACH_SYMBOL "fumi_torch_attach"

#ifdef __cplusplus
}
#endif

#endif /* FUMI_ADAPTER_API_H */
