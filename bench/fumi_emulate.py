"""FuMi's own checks, emulated the way FuMi's Python wrappers do them, for bench/fumi_compare.sh
(issue 13 item 5): the same work as fumi's `perturb` (one trial) and `highprec` on the forward
calls of the functional ops FuMi wraps on resnet18, done with torch ops around
torch.nn.functional, so that the two tools' cost per checked call can be compared on one job.

  perturb  (FuMi's add_noise) for the first floating tensor argument x:
           x' = where(x > sqrt(d), x + d, x), d = 1e-8 (f32), 1e-6 (f16), 1e-4 (bf16),
           1e-16 (f64); the op rerun on x'; R = max|y - y'| / |y + y'|, with torch ops.
  f64      (FuMi's improve_precision) every floating argument .double(); the op rerun; the
           same R against the original output.
  rerun    the floor of a perturbation check: the op rerun on its own arguments, nothing else
           (no noise, no comparison).
  rerun64  the floor of an f64 check: every floating argument .double() and the op rerun,
           nothing else.

Reruns run under torch.no_grad() on copies of any state the op updates (batch norm's running
statistics), and R is read with .item() (FuMi logs it), so the training computes exactly what it
computes without the wrappers. Only calls made while autograd records (the forward pass) are
checked, as FuMi's wrappers see them.

install(mode) patches torch.nn.functional; calls() is the number of calls checked so far and
own_seconds() the wall time the wrappers spent on them besides the op itself (preparing the
rerun's arguments, the rerun, the comparison): the counterpart of fumi's check_s + adapter_s."""
import time

import torch
import torch.nn.functional as F

OPS = ["conv2d", "batch_norm", "relu", "max_pool2d", "adaptive_avg_pool2d", "linear",
       "cross_entropy"]
MODES = ("perturb", "f64", "rerun", "rerun64")
DELTA = {torch.float32: 1e-8, torch.float16: 1e-6, torch.bfloat16: 1e-4, torch.float64: 1e-16}
_checked = [0]
_worst = [0.0]
_own = [0.0]


def calls():
    return _checked[0]


def own_seconds():
    return _own[0]


def _ratio(y, y2):
    y2 = y2.to(y.dtype) if y2.dtype != y.dtype else y2
    num = (y - y2).abs().max()
    den = (y + y2).abs().max()
    return (num / den).item() if den.item() != 0 else 0.0


def _prepare(name, mode, args, kwargs):
    """The rerun's arguments, built before the op runs (relu_ overwrites its input)."""
    args = list(args)
    kwargs = dict(kwargs)
    # batch_norm updates running_mean/running_var (args 1, 2) in training: the rerun gets copies.
    if name == "batch_norm":
        for i in (1, 2):
            if i < len(args) and isinstance(args[i], torch.Tensor):
                args[i] = args[i].clone()
    if mode == "rerun":  # an in-place relu reruns out of place: its input stays as it is
        if kwargs.get("inplace"):
            kwargs["inplace"] = False
        return args, kwargs
    if mode == "perturb":
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor) and a.is_floating_point():
                d = DELTA.get(a.dtype, 1e-8)
                x = a.detach()
                args[i] = torch.where(x > d ** 0.5, x + d, x)
                break
    else:
        args = [a.detach().double() if isinstance(a, torch.Tensor) and a.is_floating_point()
                else a for a in args]
        kwargs = {k: v.detach().double() if isinstance(v, torch.Tensor) and v.is_floating_point()
                  else v for k, v in kwargs.items()}
    return args, kwargs


def _wrap(name, fn, mode):
    def wrapper(*args, **kwargs):
        if not torch.is_grad_enabled():  # not the forward pass of training
            return fn(*args, **kwargs)
        t0 = time.perf_counter()
        with torch.no_grad():
            rargs, rkwargs = _prepare(name, mode, args, kwargs)
        t1 = time.perf_counter()
        y = fn(*args, **kwargs)
        t2 = time.perf_counter()
        with torch.no_grad():
            y2 = fn(*rargs, **rkwargs)
            if not mode.startswith("rerun"):
                _worst[0] = max(_worst[0], _ratio(y.detach(), y2))
        _own[0] += (t1 - t0) + (time.perf_counter() - t2)
        _checked[0] += 1
        return y
    return wrapper


def install(mode):
    assert mode in MODES
    for name in OPS:
        setattr(F, name, _wrap(name, getattr(F, name), mode))
