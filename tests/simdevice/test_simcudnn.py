"""The cuDNN stand-in (libcudnn.so.9 of the simulated device) against PyTorch CPU.

cudnn_selftest is linked against the REAL libcudnn.so.9 and libcudart.so.13; it runs here with
the cudart and cuDNN stand-ins preloaded (their sonames satisfy its DT_NEEDED entries). Each
case prints the inputs as stored and the outputs (hex floats); the references are computed
from those same inputs by torch in float64 (conv2d/conv3d, autograd for the backward passes,
batch_norm). Tolerances are relative to the sum of |terms| of each output element, per the
output type; TF32 cases are compared with references from TF32-rounded inputs.

The backend (graph) API cases (op=g*) build graphs as cudnn-frontend does and check them
bit-for-bit against the legacy calls with the same precision choices (convolutions, the
conv+bias+relu fusion), against torch (matmul, layer/batch norm, SDPA forward), and the API's
statuses, engines and notes, CUDA-graph capture/population and planted faults.

ctest runs this as `simcudnn` (CUDNN_SELFTEST, FUMI_SIM_CUDART, FUMI_SIM_CUDNN set)."""
import os
import subprocess
import unittest

import numpy as np

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover
    torch = None

SELFTEST = os.environ.get("CUDNN_SELFTEST", "")
SIM_CUDART = os.environ.get("FUMI_SIM_CUDART", "")
SIM_CUDNN = os.environ.get("FUMI_SIM_CUDNN", "")

BAD_PARAM, NOT_SUPPORTED = 2000, 3000
# Error bound per output type, relative to sum |terms| (accumulation + one output rounding).
TOL = {"f64": 1e-13, "f32": 2e-6, "f16": 2.0 ** -10, "bf16": 2.0 ** -7}


class Result:
    def __init__(self, stdout):
        self.status, self.tensors, self.gaps = {}, {}, {}
        for line in stdout.splitlines():
            if line.startswith("S "):
                _, name, *rest = line.split(" ")
                value = " ".join(rest)
                self.status[name] = int(value) if value.lstrip("-").isdigit() else value
            elif line.startswith("T "):
                head, _, vals = line.partition(" : ")
                _, name, dims = head.split(" ")
                shape = [int(d) for d in dims.split(",")]
                data = [float.fromhex(v) for v in vals.split()] if vals else []
                self.tensors[name] = np.array(data, dtype=np.float64).reshape(shape)
            elif line.startswith("G "):
                _, name, ok = line.split(" ")
                self.gaps[name] = ok == "1"

    def t(self, name):
        return torch.from_numpy(self.tensors[name].copy())


def selftest(faults=None, env=None, **case):
    full_env = dict(os.environ)
    full_env["LD_PRELOAD"] = ":".join([SIM_CUDART, SIM_CUDNN])
    full_env.pop("FUMI_SIMCUDNN_FAULTS", None)
    if faults:
        full_env["FUMI_SIMCUDNN_FAULTS"] = faults
    full_env.update(env or {})
    args = [SELFTEST] + [f"{k}={v}" for k, v in case.items()]
    p = subprocess.run(args, env=full_env, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({p.returncode}): {p.stderr[-2000:]}")
    return Result(p.stdout)


def tf32(t):
    """float64 tensor of float32 values rounded to TF32 (10-bit mantissa, ties to even)."""
    b = t.to(torch.float32).numpy().view(np.uint32).astype(np.uint64)
    b = (b + 0xFFF + ((b >> 13) & 1)) & ~np.uint64(0x1FFF)
    return torch.from_numpy(b.astype(np.uint32).view(np.float32).astype(np.float64))


def conv_fn(case):
    """f(x, w) -> y for the case's geometry (flipping the filter for true convolution)."""
    three = int(case.get("d", 0)) > 0
    n = 3 if three else 2

    def per_dim(key, default):
        v = [int(s) for s in str(case.get(key, default)).split(",")]
        return tuple((v + [v[-1]] * n)[:n])

    stride, pad, dil = per_dim("stride", 1), per_dim("pad", 0), per_dim("dil", 1)
    groups = int(case.get("groups", 1))
    flip = case.get("mode", "xcorr") == "conv"
    fn = F.conv3d if three else F.conv2d

    def f(x, w):
        if flip:
            w = torch.flip(w, dims=list(range(2, 2 + n)))
        return fn(x, w, None, stride, pad, dil, groups)
    return f


def conv_reference(case, r, round_tf32=False):
    """(reference, bound): the op's result in float64 and sum |terms| per element."""
    op = case["op"]
    f = conv_fn(case)
    alpha = float(case.get("alpha", 1))
    beta = float(case.get("beta", 0))
    rnd = tf32 if round_tf32 else (lambda t: t)

    def run(x, w, dy, absolute):
        if op in ("fwd", "biasact"):
            return f(x, w)
        if op == "bwdd":
            xz = torch.zeros(r.tensors["dx_prior"].shape, dtype=torch.float64, requires_grad=True)
            f(xz, w).backward(dy)
            return xz.grad
        wz = torch.zeros(r.tensors["dw_prior"].shape, dtype=torch.float64, requires_grad=True)
        f(x, wz).backward(dy)
        return wz.grad

    x = rnd(r.t("x")) if "x" in r.tensors else None
    w = rnd(r.t("w")) if "w" in r.tensors else None
    dy = rnd(r.t("dy")) if "dy" in r.tensors else None
    conv = run(x, w, dy, False)
    bound = run(*(t.abs() if t is not None else None for t in (x, w, dy)), True) * abs(alpha)
    if op == "biasact":
        alpha2 = float(case.get("alpha2", 0))
        bias = r.t("bias")
        ref = alpha * conv + alpha2 * r.t("z") + bias
        bound = bound + abs(alpha2) * r.t("z").abs() + bias.abs()
        if case.get("act", "relu") == "relu":
            ref = torch.relu(ref)
        return ref, bound
    prior = {"fwd": "y_prior", "bwdd": "dx_prior", "bwdf": "dw_prior"}[op]
    ref = alpha * conv
    if beta != 0:
        ref = ref + beta * r.t(prior)
        bound = bound + abs(beta) * r.t(prior).abs()
    return ref, bound


def max_rel_error(out, ref, bound):
    err = (torch.from_numpy(out) - ref).abs()
    return float((err / (bound + 1e-300)).max())


def conv_case(op, **kw):
    case = {"op": op, "dtype": "f32", "math": "fma"}
    case.update(kw)
    return case


# The sweep: every direction x layouts x dtypes x geometry (groups, dilation, stride, padding),
# true convolution and cross-correlation, alpha/beta, 3-D, bias-activation, every algo value.
SWEEP = []
for op in ("fwd", "bwdd", "bwdf"):
    for dtype in ("f64", "f32", "f16", "bf16"):
        SWEEP.append(conv_case(op, dtype=dtype, layout="nchw", n=2, c=4, k=6, h=6, w=7, r=3, s=3,
                               pad=1, mode="conv"))
    SWEEP += [
        conv_case(op, layout="nhwc", flayout="nhwc", n=2, c=4, k=4, groups=2, h=7, w=6, r=3, s=2,
                  pad="1,0", stride=2, alpha=0.75, beta=0.5, algo=1),
        conv_case(op, dtype="f16", layout="strided", n=1, c=6, k=3, groups=3, h=8, w=9, r=3, s=3,
                  dil=2, pad=2, mode="conv", alpha=-1.5, beta=0.25, algo=2),
        conv_case(op, dtype="bf16", layout="nhwc", flayout="nchw", n=2, c=3, k=5, h=9, w=5, r=2,
                  s=3, stride="2,1", dil="1,2", pad="0,1", alpha=2, beta=-1, algo=3),
        conv_case(op, dtype="f64", layout="strided", flayout="nhwc", n=2, c=4, k=4, groups=4,
                  h=6, w=6, r=3, s=3, pad=1, stride=3, mode="xcorr", algo=4),
        conv_case(op, dtype="f64", layout="nchw", n=1, c=2, k=3, d=4, h=5, w=4, t=2, r=3, s=2,
                  pad="1,1,0", stride="1,2,1", dil="2,1,1", mode="conv", alpha=0.5, beta=2),
        conv_case(op, dtype="f32", layout="nhwc", flayout="nhwc", n=2, c=4, k=2, groups=2, d=3,
                  h=4, w=5, t=3, r=2, s=2, pad=1, alpha=1, beta=1, algo=5),
        conv_case(op, dtype="f16", layout="strided", n=1, c=3, k=2, d=3, h=3, w=4, t=2, r=2, s=3,
                  pad="0,1,1", compute="f16"),
    ]
SWEEP += [
    conv_case("biasact", dtype="f32", layout="nchw", n=2, c=3, k=4, h=5, w=5, r=3, s=3, pad=1,
              alpha=1, alpha2=0.5, act="relu", algo=0),
    conv_case("biasact", dtype="f16", layout="nhwc", flayout="nhwc", n=2, c=4, k=4, groups=2,
              h=6, w=5, r=3, s=3, stride=2, alpha=0.5, alpha2=1, act="identity", algo=1),
    conv_case("biasact", dtype="f64", layout="strided", n=1, c=2, k=3, d=3, h=4, w=4, t=2, r=2,
              s=2, mode="conv", alpha=1.5, alpha2=-1, act="relu", algo=7),
    conv_case("biasact", dtype="bf16", layout="nchw", n=1, c=4, k=2, h=5, w=6, r=3, s=3,
              dil=2, pad=2, alpha=1, alpha2=0, act="relu", algo=6),
]


@unittest.skipUnless(SELFTEST and SIM_CUDNN and torch is not None,
                     "cudnn_selftest or the cuDNN stand-in not built, or no torch")
class Convolutions(unittest.TestCase):

    def check(self, case):
        r = selftest(**case)
        self.assertEqual(r.status["call0"], 0, case)
        self.assertEqual(r.status["workspace"], 0)
        ref, bound = conv_reference(case, r)
        err = max_rel_error(r.tensors["out0"], ref, bound)
        self.assertLessEqual(err, TOL[case["dtype"]], case)
        out_name = {"bwdd": "x", "bwdf": "w"}.get(case["op"], "y")
        self.assertTrue(r.gaps[out_name], f"wrote between strided elements: {case}")
        return r, ref, bound

    def test_sweep(self):
        self.assertGreaterEqual(len(SWEEP), 30)
        for case in SWEEP:
            with self.subTest(case=case):
                self.check(case)

    def test_beta_zero_does_not_read_output(self):
        for op in ("fwd", "bwdd", "bwdf"):
            case = conv_case(op, n=1, c=2, k=3, h=5, w=5, r=3, s=3, pad=1, nanprior=1)
            r, _, _ = self.check(case)
            self.assertFalse(np.isnan(r.tensors["out0"]).any())

    def test_tf32_default_math(self):
        """f32 data under DEFAULT/TENSOR_OP math rounds inputs to TF32; FMA_MATH does not."""
        base = dict(n=2, c=8, k=4, h=6, w=6, r=3, s=3, pad=1, dtype="f32")
        for op in ("fwd", "bwdd", "bwdf"):
            fma = selftest(op=op, math="fma", **base)
            ref, bound = conv_reference(dict(op=op, **base), fma)
            self.assertLessEqual(max_rel_error(fma.tensors["out0"], ref, bound), TOL["f32"])
            for math in ("default", "tensor", "conversion"):
                with self.subTest(op=op, math=math):
                    r = selftest(op=op, math=math, **base)
                    self.assertEqual(r.status["call0"], 0)
                    case = dict(op=op, **base)
                    ref_tf32, bound_tf32 = conv_reference(case, r, round_tf32=True)
                    self.assertLessEqual(
                        max_rel_error(r.tensors["out0"], ref_tf32, bound_tf32), TOL["f32"])
                    # Against the unrounded inputs the TF32 error shows (~2^-11), and the
                    # result differs from FMA_MATH.
                    self.assertGreater(max_rel_error(r.tensors["out0"], ref, bound), 1e-4)
                    self.assertFalse(np.array_equal(r.tensors["out0"], fma.tensors["out0"]))
        # NVIDIA_TF32_OVERRIDE=0 turns TF32 off, as in the real libraries.
        off = selftest(op="fwd", math="default", env={"NVIDIA_TF32_OVERRIDE": "0"}, **base)
        fma = selftest(op="fwd", math="fma", **base)
        np.testing.assert_array_equal(off.tensors["out0"], fma.tensors["out0"])

    def test_runs_in_stream_order(self):
        """Inputs copied by cudaMemcpyAsync behind a slow host function on the handle's
        stream are what the call computes with: it runs on the stream, asynchronously."""
        for op in ("fwd", "bwdd", "bwdf", "biasact"):
            with self.subTest(op=op):
                case = conv_case(op, n=1, c=2, k=3, h=5, w=5, r=3, s=3, pad=1, beta=0.5,
                                 ordered=1, calls=2)
                r, _, _ = self.check(case)
                self.assertEqual(r.status["pending0"], 1)  # still queued when the call returns
                np.testing.assert_array_equal(r.tensors["out0"], r.tensors["out1"])
        for op in ("bn_train", "bn_bwd"):
            with self.subTest(op=op):
                case = dict(op=op, dtype="f32", ordered=1)
                r = selftest(**case)
                self.assertEqual(r.status["pending0"], 1)
                ref = BatchNorm.reference(None, case, r)["out0"]
                np.testing.assert_allclose(r.tensors["out0"], ref.numpy(), rtol=1e-5, atol=1e-5)

    def test_every_algo_same_result(self):
        counts = {"fwd": 8, "bwdd": 6, "bwdf": 7}
        for op, count in counts.items():
            outs = [selftest(op=op, algo=a, n=1, c=4, k=4, groups=2, h=5, w=5, r=3, s=3,
                             pad=1).tensors["out0"] for a in range(count)]
            for o in outs[1:]:
                np.testing.assert_array_equal(o, outs[0])

    def test_half_compute_accumulates_in_float(self):
        """HALF compute (no fault) gives exactly what FLOAT compute gives on fp16 data."""
        base = dict(op="fwd", dtype="f16", n=1, c=16, k=4, h=6, w=6, r=3, s=3, pad=1)
        a = selftest(compute="f16", **base).tensors["out0"]
        b = selftest(compute="f32", **base).tensors["out0"]
        np.testing.assert_array_equal(a, b)


@unittest.skipUnless(SELFTEST and SIM_CUDNN and torch is not None, "not built")
class BatchNorm(unittest.TestCase):

    def reference(self, case, r):
        op = case["op"]
        x = r.t("x")
        per_act = case.get("bnmode", "spatial") == "per_act"
        n = x.shape[0]
        flat = (lambda t: t.reshape(n, -1)) if per_act else (lambda t: t)
        p = lambda name: r.t(name).reshape(-1)  # noqa: E731
        eps = float(case.get("eps", 1e-5))
        factor = float(case.get("factor", 0.1))
        alpha, beta = float(case.get("alpha", 1)), float(case.get("beta", 0))
        out = {}
        if op == "bn_train":
            rm, rv = p("mean_in").clone(), p("var_in").clone()
            y = F.batch_norm(flat(x), rm, rv, p("scale"), p("bias"), True, factor, eps)
            out["out0"] = alpha * y.reshape(x.shape) + beta * r.t("y_prior")
            out["running_mean"], out["running_var"] = rm, rv
            dims = [0] + ([] if per_act else list(range(2, x.dim())))
            xf = flat(x)
            mean = xf.mean(dim=dims)
            var = xf.var(dim=dims, unbiased=False)
            out["save_mean"], out["save_inv"] = mean.reshape(-1), (1 / torch.sqrt(var + eps)).reshape(-1)
        elif op == "bn_infer":
            y = F.batch_norm(flat(x), p("mean_in"), p("var_in"), p("scale"), p("bias"), False,
                             0.0, eps)
            out["out0"] = alpha * y.reshape(x.shape) + beta * r.t("y_prior")
        else:
            xr = flat(x).clone().requires_grad_()
            wr = p("scale").clone().requires_grad_()
            br = torch.zeros_like(wr, requires_grad=True)
            y = F.batch_norm(xr, None, None, wr, br, True, 0.0, eps)
            y.backward(flat(r.t("dy")))
            ap, bp = float(case.get("alphap", alpha)), float(case.get("betap", beta))
            out["out0"] = alpha * xr.grad.reshape(x.shape) + beta * r.t("dx_prior")
            out["dscale"] = ap * wr.grad + bp * p("dscale_prior")
            out["dbias"] = ap * br.grad + bp * p("dbias_prior")
        return out

    CASES = [
        dict(op="bn_train", dtype="f32", layout="nchw", bnmode="spatial"),
        dict(op="bn_train", dtype="f64", layout="nhwc", bnmode="per_act", factor=0.3),
        dict(op="bn_train", dtype="f16", layout="strided", bnmode="persistent", alpha=0.5,
             beta=0.5),
        dict(op="bn_train", dtype="bf16", layout="nchw", bnmode="spatial", d=2, factor=1.0),
        dict(op="bn_infer", dtype="f32", layout="nhwc", bnmode="spatial", alpha=2, beta=-1),
        dict(op="bn_infer", dtype="f64", layout="strided", bnmode="per_act"),
        dict(op="bn_infer", dtype="f16", layout="nchw", bnmode="spatial", d=3),
        dict(op="bn_bwd", dtype="f32", layout="nchw", bnmode="spatial"),
        dict(op="bn_bwd", dtype="f64", layout="nhwc", bnmode="per_act", saved=0, alpha=0.5,
             beta=0.25, alphap=2, betap=1),
        dict(op="bn_bwd", dtype="f16", layout="strided", bnmode="spatial", d=2),
        dict(op="bn_bwd", dtype="bf16", layout="nhwc", bnmode="spatial", saved=0),
    ]

    def test_ex_forms_match_plain_forms(self):
        """cudnnBatchNormalizationForwardTrainingEx / BackwardEx with OPS_BN compute exactly
        what the plain forms compute; no workspace or reserve space; fused activation forms
        are not supported."""
        for case in (dict(op="bn_train", dtype="f32", bnmode="spatial", alpha=0.5, beta=0.5),
                     dict(op="bn_train", dtype="f16", layout="nhwc", bnmode="persistent"),
                     dict(op="bn_bwd", dtype="f32", bnmode="per_act", saved=1),
                     dict(op="bn_bwd", dtype="bf16", bnmode="spatial", saved=0)):
            with self.subTest(case=case):
                plain = selftest(**case)
                ex = selftest(ex=1, **case)
                self.assertEqual(ex.status["call0"], 0)
                self.assertEqual(ex.status["ex_sizes"], "0 0")
                self.assertEqual(ex.status["ex_activation"], NOT_SUPPORTED)
                for name in plain.tensors:
                    np.testing.assert_array_equal(ex.tensors[name], plain.tensors[name], name)
                ref = self.reference(case, ex)["out0"]
                got = torch.from_numpy(ex.tensors["out0"]).reshape(ref.shape)
                self.assertLess(float(((got - ref).abs() / (ref.abs() + 1)).max()), 2 ** -6)

    def test_batch_norm(self):
        for case in self.CASES:
            with self.subTest(case=case):
                r = selftest(**case)
                self.assertEqual(r.status["call0"], 0)
                self.assertEqual(r.status["derived_type"], 1 if case["dtype"] == "f64" else 0)
                ref = self.reference(case, r)
                for name, want in ref.items():
                    got = torch.from_numpy(r.tensors[name]).reshape(want.shape)
                    # The data output has the data type; statistics are float or double.
                    dtype = case["dtype"] if name == "out0" else \
                        ("f64" if case["dtype"] == "f64" else "f32")
                    tol = {"f64": 1e-12, "f32": 1e-5, "f16": 2 ** -9, "bf16": 2 ** -6}[dtype]
                    err = float(((got - want).abs() / (want.abs() + 1)).max())
                    self.assertLessEqual(err, tol, f"{name}: {case}")
                out_name = "dx" if case["op"] == "bn_bwd" else "y"
                self.assertTrue(r.gaps[out_name])


@unittest.skipUnless(SELFTEST and SIM_CUDNN and torch is not None, "not built")
class PlantedFaults(unittest.TestCase):

    def test_wrong_scales_matching_convolutions(self):
        for op in ("fwd", "bwdd", "bwdf", "biasact"):
            for dtype, tol in (("f64", 1e-15), ("f32", 1e-6), ("f16", 2 ** -10)):
                with self.subTest(op=op, dtype=dtype):
                    case = dict(op=op, dtype=dtype, math="fma", n=1, c=3, k=5, h=5, w=5, r=3,
                                s=3, pad=1, alpha2=0)
                    clean = selftest(**case).tensors["out0"]
                    bad = selftest(faults="wrong:3x5", **case).tensors["out0"]
                    mask = np.abs(clean) > 1e-3
                    ratio = bad[mask] / clean[mask]
                    self.assertLess(np.abs(ratio - (1 + 2 ** -7)).max(), tol)
                    # Other channel counts are untouched.
                    other = selftest(faults="wrong:5x3", **case).tensors["out0"]
                    np.testing.assert_array_equal(other, clean)

    def test_accum16_reduced_precision_accumulation(self):
        case = dict(op="fwd", dtype="f16", n=2, c=32, k=4, h=6, w=6, r=3, s=3, pad=1)
        f32c = selftest(compute="f32", faults="accum16", **case)
        f16c = selftest(compute="f16", faults="accum16", **case)
        ref, bound = conv_reference(dict(case), f32c)
        err32 = max_rel_error(f32c.tensors["out0"], ref, bound)
        err16 = max_rel_error(f16c.tensors["out0"], ref, bound)
        self.assertLessEqual(err32, TOL["f16"])
        self.assertGreater(err16, 2 * err32)
        # f32 compute is unaffected by the fault.
        clean = selftest(compute="f32", **case)
        np.testing.assert_array_equal(clean.tensors["out0"], f32c.tensors["out0"])

    def test_nondet_every_other_forward_call(self):
        for dtype in ("f32", "f16", "f64"):
            r = selftest(op="fwd", dtype=dtype, calls=4, faults="nondet", n=1, c=2, k=2, h=4, w=4,
                         r=3, s=3, pad=1)
            o = [r.tensors[f"out{i}"].reshape(-1) for i in range(4)]
            np.testing.assert_array_equal(o[0], o[2])
            np.testing.assert_array_equal(o[1], o[3])
            self.assertNotEqual(o[0][0], o[1][0])
            np.testing.assert_array_equal(o[0][1:], o[1][1:])
            np.testing.assert_array_equal(o[0][0] < o[1][0], True)
            # Backward passes are deterministic under the fault.
            r = selftest(op="bwdd", dtype=dtype, calls=2, faults="nondet", n=1, c=2, k=2, h=4,
                         w=4, r=3, s=3, pad=1)
            np.testing.assert_array_equal(r.tensors["out0"], r.tensors["out1"])
        clean = selftest(op="fwd", calls=2, n=1, c=2, k=2, h=4, w=4, r=3, s=3)
        np.testing.assert_array_equal(clean.tensors["out0"], clean.tensors["out1"])


@unittest.skipUnless(SELFTEST and SIM_CUDNN, "not built")
class Api(unittest.TestCase):

    def test_host_pointers_are_errors(self):
        r = selftest(op="hostptr")
        self.assertEqual(r.status["host_x"], BAD_PARAM)
        self.assertEqual(r.status["host_y"], BAD_PARAM)
        self.assertEqual(r.status["pinned_x"], 0)  # pinned host memory is device-accessible
        self.assertEqual(r.status["pinned_y0"], 9)

    def test_documented_error_statuses(self):
        r = selftest(op="badparam")
        want = {
            "set4d_negative": BAD_PARAM, "set4d_bad_format": BAD_PARAM,
            "setnd_9dims": NOT_SUPPORTED, "conv_stride0": BAD_PARAM,
            "conv_pad_negative": BAD_PARAM, "groups0": BAD_PARAM, "math_bad": BAD_PARAM,
            "fwd_ok": 0, "fwd_algo_bad": BAD_PARAM, "fwd_alpha_null": BAD_PARAM,
            "fwd_channels": BAD_PARAM, "fwd_out_dims": NOT_SUPPORTED,
            "fwd_compute_half": NOT_SUPPORTED, "fwd_mixed_types": BAD_PARAM,
            "outdim_filter_too_big": BAD_PARAM, "biasact_relu_algo0": 0,
            "biasact_identity_algo0": NOT_SUPPORTED, "biasact_identity_algo1": 0,
            "biasact_sigmoid": NOT_SUPPORTED, "bn_derive_bad_mode": BAD_PARAM,
            "bn_eps_negative": BAD_PARAM, "bn_infer_ok": 0, "bn_save_half_null": BAD_PARAM,
            "handle_null": BAD_PARAM, "error_string_CUDNN_STATUS_BAD_PARAM": 0,
        }
        for name, status in want.items():
            self.assertEqual(r.status.get(name), status, name)

    def test_descriptor_getters(self):
        r = selftest(op="descs")
        want = {
            "version": 91900,
            "nhwc4d": "2 2,3,4,5 60,1,15,3",
            "nhwc4d_bytes": 240,
            "ndhwc": "0 5 2,3,4,5,6 360,1,90,18,3",
            "strided_bytes": 1272,
            "filter4d": "9 1 8,3,5,7",
            "filternd": "0 0 5 4,2,3,3,3",
            "conv_defaults": "1 0",
            "conv2d": "1,2,3,4,5,6 0 2",
            "convnd": "3 1,0,2 1,2,1 2,1,1 1 0",
            "conv_set": "2 3",
            # depth (7+2-3)/1+1... with dilation 2: 7+2-5+1 = 5; 9: (9-3)/2+1 = 4; 11+4-3+1 = 13
            "outdim": "2,4,5,4,13",
            "activation": "5 1 2.5",
            "default_stream": 1,
            "set_stream": 1,
        }
        for name, value in want.items():
            self.assertEqual(r.status.get(name), value, name)


# --- the backend (graph) API ----------------------------------------------------------------

def category(status):
    return status // 1000 * 1000


def graph_conv_case(direction, **kw):
    case = {"op": "gconv", "dir": direction, "dtype": "f32", "engine": 0}
    case.update(kw)
    return case


def graph_conv_reference(case, r):
    """conv_reference for a gconv case (engine 1 on f32 data: TF32-rounded inputs)."""
    ref_case = dict(case, op=case["dir"])
    return conv_reference(ref_case, r,
                          round_tf32=case["dtype"] == "f32" and int(case.get("engine", 0)) >= 1)


GRAPH_SWEEP = []
for _dir in ("fwd", "bwdd", "bwdf"):
    for _dtype in ("f32", "f16", "bf16", "f64"):
        for _engine in ((0,) if _dtype == "f64" else (0, 1)):
            GRAPH_SWEEP.append(graph_conv_case(_dir, dtype=_dtype, engine=_engine, n=2, c=4, k=6,
                                               h=6, w=7, r=3, s=3, pad=1, mode="conv"))
    GRAPH_SWEEP += [
        graph_conv_case(_dir, layout="nhwc", flayout="nhwc", n=2, c=4, k=4, groups=2, h=7, w=6,
                        r=3, s=2, pad="1,0", stride=2, alpha=0.75, beta=0.5, engine=1),
        graph_conv_case(_dir, dtype="f16", layout="nhwc", flayout="nchw", n=1, c=6, k=3,
                        groups=3, h=8, w=9, r=3, s=3, dil=2, pad=2, alpha=-1.5, beta=0.25,
                        scalars="double"),
        graph_conv_case(_dir, dtype="bf16", layout="strided", n=2, c=3, k=5, h=9, w=5, r=2, s=3,
                        stride="2,1", dil="1,2", pad="0,1", alpha=2, beta=-1, engine=1),
        graph_conv_case(_dir, dtype="f64", layout="nchw", n=1, c=2, k=3, d=4, h=5, w=4, t=2, r=3,
                        s=2, pad="1,1,0", stride="1,2,1", dil="2,1,1", mode="conv", alpha=0.5,
                        beta=2),
    ]


@unittest.skipUnless(SELFTEST and SIM_CUDNN and torch is not None, "not built")
class GraphConvolutions(unittest.TestCase):
    """One-op convolution graphs: bit-for-bit the legacy call with the same precision choices
    (engine 0 = FMA math, engine 1 = default math), and PyTorch within the type's bound."""

    def check(self, case, **extra):
        r = selftest(**case, **extra)
        self.assertEqual(r.status["call0"], 0, case)
        self.assertEqual(r.status["legacy"], 0, case)
        np.testing.assert_array_equal(r.tensors["out0"], r.tensors["legacy"], err_msg=str(case))
        ref, bound = graph_conv_reference(case, r)
        self.assertLessEqual(max_rel_error(r.tensors["out0"], ref, bound), TOL[case["dtype"]],
                             case)
        out_name = {"bwdd": "x", "bwdf": "w"}.get(case["dir"], "y")
        self.assertTrue(r.gaps[out_name], case)
        return r

    def test_sweep_matches_legacy_and_torch(self):
        self.assertGreaterEqual(len(GRAPH_SWEEP), 30)
        for case in GRAPH_SWEEP:
            with self.subTest(case=case):
                self.check(case)

    def test_engines_and_notes(self):
        for dtype, engines in (("f64", 0), ("f32", "1,0"), ("f16", "1,0,2"),
                               ("bf16", "1,0,2")):
            with self.subTest(dtype=dtype):
                r = selftest(op="gconv", dtype=dtype, engine=0)
                self.assertEqual(r.status["engines"], engines)
                self.assertEqual(r.status["engine_count"], 3)
                self.assertEqual(r.status["notes"], "-")
                self.assertEqual(r.status["graph_workspace"], 0)
        r = selftest(op="gconv", dtype="f16", engine=1, heur="fallback")
        self.assertEqual(r.status["engines"], "0,1,2")
        self.assertEqual(r.status["notes"], 0)  # CUDNN_NUMERICAL_NOTE_TENSOR_CORE
        r = selftest(op="gconv", dtype="f16", engine=2, heur="a")
        self.assertEqual(r.status["notes"], "0,2")  # + REDUCED_PRECISION_REDUCTION

    def test_tf32_engine(self):
        """f32 data: engine 1 rounds inputs to TF32 (unless NVIDIA_TF32_OVERRIDE=0)."""
        base = dict(n=2, c=8, k=4, h=6, w=6, r=3, s=3, pad=1)
        for direction in ("fwd", "bwdd", "bwdf"):
            fma = selftest(**graph_conv_case(direction, engine=0, **base))
            tc = selftest(**graph_conv_case(direction, engine=1, **base))
            self.assertFalse(np.array_equal(fma.tensors["out0"], tc.tensors["out0"]))
            ref, bound = graph_conv_reference(graph_conv_case(direction, engine=0, **base), tc)
            self.assertGreater(max_rel_error(tc.tensors["out0"], ref, bound), 1e-4)
            off = selftest(env={"NVIDIA_TF32_OVERRIDE": "0"},
                           **graph_conv_case(direction, engine=1, **base))
            np.testing.assert_array_equal(off.tensors["out0"], fma.tensors["out0"])

    def test_reduced_precision_engine(self):
        """Engine 2 accumulates in fp16 (bit-for-bit the legacy HALF compute under accum16)
        or bf16: less accurate than engine 0, within the accumulation's bound."""
        base = dict(n=2, c=32, k=4, h=6, w=6, r=3, s=3, pad=1)
        for direction in ("fwd", "bwdd", "bwdf"):
            with self.subTest(direction=direction):
                case = graph_conv_case(direction, dtype="f16", engine=2, **base)
                r = selftest(faults="accum16", lcompute="f16", **case)
                np.testing.assert_array_equal(r.tensors["out0"], r.tensors["legacy"])
                exact = selftest(**graph_conv_case(direction, dtype="f16", engine=0, **base))
                ref, bound = graph_conv_reference(case, r)
                err2 = max_rel_error(r.tensors["out0"], ref, bound)
                err0 = max_rel_error(exact.tensors["out0"], ref, bound)
                self.assertGreater(err2, 2 * err0)
                bf = graph_conv_case(direction, dtype="bf16", engine=2, **base)
                rb = selftest(**bf)
                bf0 = selftest(**dict(bf, engine=0))
                ref, bound = graph_conv_reference(bf, rb)
                terms = 32 * 9 if direction != "bwdf" else 2 * 36
                errb = max_rel_error(rb.tensors["out0"], ref, bound)
                self.assertLessEqual(errb, terms * 2.0 ** -8)
                self.assertGreater(errb, max_rel_error(bf0.tensors["out0"], ref, bound))

    def test_descriptors_destroyed_after_finalize(self):
        case = graph_conv_case("fwd", n=1, c=4, k=4, h=5, w=5, pad=1, beta=0.5)
        kept = selftest(destroy=0, **case)
        gone = selftest(destroy=1, **case)
        np.testing.assert_array_equal(kept.tensors["out0"], gone.tensors["out0"])
        np.testing.assert_array_equal(gone.tensors["out0"], gone.tensors["legacy"])

    def test_cuda_graphs(self):
        """Execute on a capturing stream is captured; PopulateCudaGraph adds one node; both
        replay to the Execute result."""
        for direction in ("fwd", "bwdd", "bwdf"):
            r = self.check(graph_conv_case(direction, n=1, c=2, k=3, h=5, w=5, pad=1, beta=0.5),
                           capture=1, populate=1)
            self.assertEqual(r.status["capture"], 0)
            self.assertEqual(r.status["populate"], 0)
            self.assertEqual(r.status["capture_nodes"], 1)
            self.assertEqual(r.status["populate_nodes"], 1)
            np.testing.assert_array_equal(r.tensors["out_capture"], r.tensors["out0"])
            np.testing.assert_array_equal(r.tensors["out_populate"], r.tensors["out0"])

    def test_runs_in_stream_order(self):
        for direction in ("fwd", "bwdd", "bwdf"):
            r = self.check(graph_conv_case(direction, n=1, c=2, k=3, h=5, w=5, pad=1, beta=0.5,
                                           ordered=1, calls=2))
            self.assertEqual(r.status["pending0"], 1)
            np.testing.assert_array_equal(r.tensors["out0"], r.tensors["out1"])

    def test_planted_faults(self):
        for direction in ("fwd", "bwdd", "bwdf"):
            case = graph_conv_case(direction, n=1, c=3, k=5, h=5, w=5, pad=1)
            clean = selftest(**case).tensors["out0"]
            bad = selftest(faults="wrong:3x5", **case)
            # The legacy call on the same inputs is hit the same way.
            np.testing.assert_array_equal(bad.tensors["out0"], bad.tensors["legacy"])
            mask = np.abs(clean) > 1e-3
            ratio = bad.tensors["out0"][mask] / clean[mask]
            self.assertLess(np.abs(ratio - (1 + 2 ** -7)).max(), 1e-6)
            np.testing.assert_array_equal(selftest(faults="wrong:5x3", **case).tensors["out0"],
                                          clean)
        # accum16: HALF compute on HALF data accumulates in fp16 on engines 0 and 1.
        case = graph_conv_case("fwd", dtype="f16", compute="f16", n=2, c=32, k=4, h=6, w=6,
                               pad=1)
        clean = selftest(**case).tensors["out0"]
        r = selftest(faults="accum16", **case)
        self.assertFalse(np.array_equal(clean, r.tensors["out0"]))
        np.testing.assert_array_equal(r.tensors["out0"], r.tensors["legacy"])
        # nondet: every other forward convolution, counted with the legacy calls.
        r = selftest(faults="nondet", calls=2, **graph_conv_case("fwd", n=1, c=2, k=2, h=4, w=4))
        o0, o1 = r.tensors["out0"].reshape(-1), r.tensors["out1"].reshape(-1)
        self.assertLess(o0[0], o1[0])
        np.testing.assert_array_equal(o0[1:], o1[1:])


@unittest.skipUnless(SELFTEST and SIM_CUDNN and torch is not None, "not built")
class GraphFusions(unittest.TestCase):

    def test_conv_bias_relu(self):
        """conv -> virtual -> add bias -> virtual -> relu: bit-for-bit the legacy
        cudnnConvolutionBiasActivationForward (float intermediates, one rounding to y)."""
        for dtype, engine in (("f32", 0), ("f32", 1), ("f16", 0), ("f16", 1), ("f64", 0)):
            with self.subTest(dtype=dtype, engine=engine):
                r = selftest(op="gfused", dtype=dtype, engine=engine)
                self.assertEqual(r.status["call0"], 0)
                self.assertEqual(r.status["legacy"], 0)
                self.assertGreater(r.status["graph_workspace"], 0)
                np.testing.assert_array_equal(r.tensors["out0"], r.tensors["legacy"])
                x, w = r.t("x"), r.t("w")
                if dtype == "f32" and engine == 1:
                    x, w = tf32(x), tf32(w)
                conv = F.conv2d(x, w, None, 1, 1)
                ref = torch.relu(conv + r.t("bias"))
                bound = F.conv2d(x.abs(), w.abs(), None, 1, 1) + r.t("bias").abs()
                self.assertLessEqual(max_rel_error(r.tensors["out0"], ref, bound), TOL[dtype])
                self.assertTrue((r.tensors["out0"] >= 0).all())
                self.assertTrue((r.tensors["out0"] == 0).any())


@unittest.skipUnless(SELFTEST and SIM_CUDNN and torch is not None, "not built")
class GraphMatmul(unittest.TestCase):

    def reference(self, r, round_tf32=False):
        a, b = r.t("a"), r.t("b")
        if round_tf32:
            a, b = tf32(a), tf32(b)
        return torch.matmul(a, b), torch.matmul(a.abs(), b.abs())

    def test_batched_matmul(self):
        cases = [
            dict(dtype="f32", engine=0), dict(dtype="f32", engine=1, atrans=1),
            dict(dtype="f16", engine=0, bbatch=1), dict(dtype="bf16", engine=1, atrans=1),
            dict(dtype="f64", engine=0, bbatch=1, batch=2, m=7, n=3, k=9),
        ]
        for case in cases:
            with self.subTest(case=case):
                r = selftest(op="gmatmul", **case)
                self.assertEqual(r.status["call0"], 0)
                self.assertTrue(r.gaps["c"])
                ref, bound = self.reference(r, case["dtype"] == "f32" and case["engine"] == 1)
                self.assertLessEqual(max_rel_error(r.tensors["out0"], ref, bound),
                                     TOL[case["dtype"]])
        # Engine 2 (fp16 accumulation) is less accurate; TF32 differs from FMA.
        r0 = selftest(op="gmatmul", dtype="f16", engine=0, k=64)
        r2 = selftest(op="gmatmul", dtype="f16", engine=2, k=64)
        self.assertEqual(r2.status["notes"], "0,2")
        ref, bound = self.reference(r0)
        self.assertGreater(max_rel_error(r2.tensors["out0"], ref, bound),
                           2 * max_rel_error(r0.tensors["out0"], ref, bound))
        f0 = selftest(op="gmatmul", dtype="f32", engine=0, k=64)
        f1 = selftest(op="gmatmul", dtype="f32", engine=1, k=64)
        self.assertFalse(np.array_equal(f0.tensors["out0"], f1.tensors["out0"]))

    def test_wrongmm_fault(self):
        case = dict(op="gmatmul", dtype="f32", batch=2, m=4, n=5, k=6)
        clean = selftest(**case).tensors["out0"]
        bad = selftest(faults="wrongmm:4x5x6", **case).tensors["out0"]
        mask = np.abs(clean) > 1e-3
        self.assertLess(np.abs(bad[mask] / clean[mask] - (1 + 2 ** -7)).max(), 1e-6)
        np.testing.assert_array_equal(selftest(faults="wrongmm:5x4x6", **case).tensors["out0"],
                                      clean)


@unittest.skipUnless(SELFTEST and SIM_CUDNN and torch is not None, "not built")
class GraphNorm(unittest.TestCase):

    def reference(self, case, r):
        x = r.t("x")
        bn = case["kind"] == "bn"
        eps = 1e-5
        scale, bias = r.t("scale"), r.t("bias")
        dims = [0, 2, 3] if bn else [1, 2, 3]
        out = {}
        if case["phase"] == "bwd":
            xr = x.clone().requires_grad_()
            sr = scale.clone().requires_grad_()
            br = bias.clone().requires_grad_()
            mean = xr.mean(dim=dims, keepdim=True)
            var = xr.var(dim=dims, unbiased=False, keepdim=True)
            y = (xr - mean) / torch.sqrt(var + eps) * sr + br
            y.backward(r.t("dy"))
            out.update(dx=xr.grad, dscale=sr.grad, dbias=br.grad)
            return out
        if bn and case["phase"] == "infer":
            out["out0"] = (x - r.t("mean_in")) * r.t("inv_in") * scale + bias
            return out
        mean = x.mean(dim=dims, keepdim=True)
        var = x.var(dim=dims, unbiased=False, keepdim=True)
        out["out0"] = (x - mean) / torch.sqrt(var + eps) * scale + bias
        if case["phase"] == "train":
            out["mean"], out["inv"] = mean, 1 / torch.sqrt(var + eps)
        if bn and case["phase"] == "train":
            m = x.numel() / x.shape[1]
            out["running_mean"] = 0.9 * r.t("rm") + 0.1 * mean
            out["running_var"] = 0.9 * r.t("rv") + 0.1 * var * m / (m - 1)
        return out

    CASES = [
        dict(kind="ln", phase="train", dtype="f32"), dict(kind="ln", phase="infer", dtype="f16"),
        dict(kind="ln", phase="bwd", dtype="f32"), dict(kind="bn", phase="train", dtype="f32"),
        dict(kind="bn", phase="train", dtype="bf16", layout="nhwc"),
        dict(kind="bn", phase="infer", dtype="f32"), dict(kind="bn", phase="bwd", dtype="f32"),
        dict(kind="bn", phase="bwd", dtype="f16", layout="nhwc"),
        dict(kind="ln", phase="train", dtype="f64"),
    ]

    def test_norms(self):
        for case in self.CASES:
            with self.subTest(case=case):
                r = selftest(op="gnorm", **case)
                self.assertEqual(r.status["call0"], 0)
                self.assertEqual(r.status["engines"], 0)
                ref = self.reference(case, r)
                self.assertGreaterEqual(len(ref), 1)
                for name, want in ref.items():
                    got = torch.from_numpy(r.tensors[name]).reshape(want.shape)
                    dtype = case["dtype"] if name in ("out0", "dx") else "f32"
                    tol = {"f64": 1e-6, "f32": 1e-5, "f16": 2 ** -9, "bf16": 2 ** -6}[dtype]
                    err = float(((got - want).abs() / (want.abs() + 1)).max())
                    self.assertLessEqual(err, tol, f"{name}: {case}")
                out = "dx" if case["phase"] == "bwd" else "out0"
                self.assertTrue(r.gaps["y"])
                self.assertTrue(np.isfinite(r.tensors[out]).all())


@unittest.skipUnless(SELFTEST and SIM_CUDNN and torch is not None, "not built")
class GraphSdpa(unittest.TestCase):
    """SDPA forward against softmax(q @ k^T * scale) @ v and logsumexp, torch in float64."""

    @staticmethod
    def reference(r, scale):
        q, k, v = r.t("q"), r.t("k"), r.t("v")
        heads = q.shape[1]
        k = k.repeat_interleave(heads // k.shape[1], dim=1)  # grouped-query attention
        v = v.repeat_interleave(heads // v.shape[1], dim=1)
        s = torch.matmul(q, k.transpose(-1, -2)) * scale
        p = torch.softmax(s, dim=-1)
        return torch.matmul(p, v), torch.matmul(p, v.abs()), torch.logsumexp(s, -1, keepdim=True)

    CASES = [
        dict(dtype="f16", engine=1), dict(dtype="f16", engine=2, h=4, hk=2, hv=1, dv=6),
        dict(dtype="bf16", engine=0, layout="strided", sq=3, skv=9),
        dict(dtype="f32", engine=1, h=6, hk=3, hv=2, d=16, dv=4, scale=0.125),
        dict(dtype="f32", engine=0, layout="strided", stats=0),
        dict(dtype="f64", engine=0, b=1, sq=1, skv=1),
    ]

    def test_matches_torch(self):
        for case in self.CASES:
            with self.subTest(case=case):
                r = selftest(op="gsdpa", **case)
                self.assertEqual((r.status["sdpa_finalize"], r.status["call0"]), (0, 0))
                self.assertTrue(r.gaps["o"])
                # The engines of the data type, as for a matmul.
                engines = {"f16": "1,0,2", "bf16": "1,0,2", "f32": "1,0", "f64": "0"}
                self.assertEqual(str(r.status["engines"]), engines[case["dtype"]])
                scale = float(np.float32(case.get("scale", 1 / np.sqrt(case.get("d", 8)))))
                ref, bound, lse = self.reference(r, scale)
                out = r.tensors["out0"]
                self.assertEqual(list(out.shape), list(ref.shape))
                self.assertLessEqual(max_rel_error(out, ref, bound), TOL[case["dtype"]])
                if case.get("stats", 1):  # FLOAT: one rounding of the natural-log logsumexp
                    err = np.abs(r.tensors["stats"] - lse.numpy()) / (np.abs(lse.numpy()) + 1)
                    self.assertLessEqual(err.max(), 2 ** -23)
                else:
                    self.assertNotIn("stats", r.tensors)

    def test_unsupported_options_and_bad_shapes(self):
        for extra in ("mask", "pagek", "pagev", "seqq", "seqkv"):
            r = selftest(op="gsdpa", extra=extra)
            self.assertEqual(r.status["sdpa_finalize"], NOT_SUPPORTED, extra)
            self.assertNotIn("call0", r.status)
        for shape in (dict(h=4, hk=3), dict(h=4, hv=3), dict(dtype="f16", d=8, dv=4, hk=2, h=3)):
            r = selftest(op="gsdpa", **shape)
            self.assertEqual(category(r.status["sdpa_finalize"]), BAD_PARAM, shape)

    def test_wrongsdpa_fault(self):
        case = dict(op="gsdpa", dtype="f32", sq=5, skv=7)
        clean = selftest(**case)
        bad = selftest(faults="wrongsdpa:5x7", **case)
        mask = np.abs(clean.tensors["out0"]) > 1e-3
        ratio = bad.tensors["out0"][mask] / clean.tensors["out0"][mask]
        self.assertLess(np.abs(ratio - (1 + 2 ** -7)).max(), 1e-6)
        np.testing.assert_array_equal(bad.tensors["stats"], clean.tensors["stats"])
        np.testing.assert_array_equal(selftest(faults="wrongsdpa:7x5", **case).tensors["out0"],
                                      clean.tensors["out0"])


@unittest.skipUnless(SELFTEST and SIM_CUDNN, "not built")
class GraphApi(unittest.TestCase):

    def test_statuses_and_getters(self):
        r = selftest(op="gapi")
        NOT_INITIALIZED = 1001
        want = {
            "create_unknown": NOT_SUPPORTED, "create_null": 2002, "initialize": NOT_SUPPORTED,
            "set_wrong_type": 2010, "set_wrong_count": BAD_PARAM, "set_null": 2002,
            "set_foreign_attr": BAD_PARAM, "get_before_finalize": NOT_INITIALIZED,
            "finalize_incomplete": BAD_PARAM, "finalize_ok": 0, "finalize_twice": BAD_PARAM,
            "set_after_finalize": NOT_INITIALIZED, "dims_count": 4, "dims_partial": "4 1,2,0",
            "uid": 77, "get_wrong_type": 2010, "get_null": 2002, "destroy_twice": BAD_PARAM,
            "use_destroyed": BAD_PARAM, "conv_f16": 0, "conv_f32": 0,
            "op_unfinalized_tensor": 2004, "op_wrong_descriptor": 2012, "op_alpha_int": 2010,
            "engine_count": 3, "f16_instant": "1,0,2", "f16_fallback": "0,1,2",
            "f32_heur_a": "1,0", "notes_eng0": "- behavior 1:3", "notes_eng1": "0 behavior 1:3",
            "notes_eng2": "0,2 behavior 1:3", "knob_info_eng0": 0, "engine2_f32": NOT_SUPPORTED,
            "engine2_f16": 0, "engine_out_of_range": BAD_PARAM,
            "get_plan_unfinalized": NOT_INITIALIZED, "plan_knobs": "1 2", "plan_notes": "-",
            "exec_ok": 0, "exec_missing_uid": BAD_PARAM, "exec_host_pointer": BAD_PARAM,
            "exec_misaligned": 2003, "exec_pack_unfinalized": 2004,
            "update_cuda_graph": NOT_SUPPORTED, "graph_virtual_unproduced": BAD_PARAM,
            "graph_disconnected": 3001, "graph_duplicate_uid": 2009, "fused_workspace": 256,
            "exec_no_workspace": BAD_PARAM, "exec_with_workspace": 0,
        }
        for name, value in want.items():
            self.assertEqual(r.status.get(name), value, name)
        # Shape errors are in the BAD_PARAM category.
        self.assertEqual(category(r.status["conv_bad_shape"]), BAD_PARAM)


if __name__ == "__main__":
    unittest.main()
