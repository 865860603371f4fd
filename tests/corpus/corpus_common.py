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
