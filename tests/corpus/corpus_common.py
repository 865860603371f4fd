"""Shared helpers of the calibration corpus programs (tests/corpus).

CORPUS_AUTOCAST=bf16 makes forward_ctx() a CPU autocast region in bfloat16; unset (or "f32"),
the forward pass runs in plain float32.
"""
import contextlib
import os

import torch


def setup(seed=0):
    torch.manual_seed(seed)
    torch.set_default_dtype(torch.float32)


def forward_ctx():
    mode = os.environ.get("CORPUS_AUTOCAST", "f32").lower()
    if mode in ("", "f32", "none", "off"):
        return contextlib.nullcontext()
    if mode == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    raise SystemExit("CORPUS_AUTOCAST must be f32 or bf16, not %r" % mode)


def report(name, losses):
    """Print the losses and fail when training went non-finite (a healthy program must train)."""
    print("%s: loss %s" % (name, " ".join("%.4f" % l for l in losses)))
    if not all(l == l and abs(l) != float("inf") for l in losses):
        raise SystemExit("%s: non-finite loss" % name)


def scaled_mlp(seed, spread=30.0):
    """A classifier whose output layer's weight gradient is ~`spread`/1.5 times the loss scale:
    with the scale near float32's top (2^126, as a loss scaler's first guesses are for fp16),
    the backward matmul overflows on some batches (on every batch with spread 60) while the
    scaled loss itself stays finite. Returns (net, batch): batch() gives (inputs, labels)."""
    setup(seed)
    net = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    with torch.no_grad():
        net[2].weight.mul_(0.05)  # small logits: the loss stays ~2.3, the scaled loss finite
    w_true = torch.randn(20, 10)

    def batch():
        x = spread * torch.randn(32, 20)
        return x, (x @ w_true).argmax(dim=1)

    return net, batch


def grads_finite(params):
    return all(bool(torch.isfinite(p.grad).all()) for p in params if p.grad is not None)
