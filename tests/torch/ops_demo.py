"""Operators whose checks are easy to get wrong, for tests under fumi. Prints every result as hex
floats, with tensor version counters, so runs with and without fumi compare bit for bit.
Usage: ops_demo.py inplace|random"""
import sys

import torch


def show(name, t):
    print(name, t._version, [v.hex() for v in t.detach().flatten().tolist()], flush=True)


def inplace():
    g = torch.Generator().manual_seed(1)
    a = torch.rand(4, 5, generator=g) + 0.5
    b = torch.rand(4, 5, generator=g) + 0.5
    a.add_(b, alpha=3.0)  # in place: a fumi rerun must start from a before this line
    show("add_", a)
    out = torch.empty(4, 5)
    torch.mul(a, b, out=out)  # out=: the result lands in a tensor the caller passed
    show("mul.out", out)
    c = torch.rand(4, 6, generator=g)
    m1 = torch.rand(4, 3, generator=g)
    m2 = torch.rand(3, 6, generator=g)
    c.addmm_(m1, m2, beta=0.5)  # reads and overwrites c
    show("addmm_", c)
    bn = torch.nn.BatchNorm1d(5)  # training mode: updates running statistics in place
    y = bn(torch.rand(8, 5, generator=g))
    show("batch_norm", y)
    show("running_mean", bn.running_mean)
    show("running_var", bn.running_var)


def random():
    torch.manual_seed(3)
    x = torch.rand(16, 16) + 1.0
    drop = torch.nn.functional.dropout(x, p=0.5, training=True)  # draws from the global RNG
    y = torch.mm(drop, x)
    show("dropout_mm", y)
    show("rand_after", torch.rand(8))  # the program's RNG stream must be where it would be


if __name__ == "__main__":
    {"inplace": inplace, "random": random}[sys.argv[1]]()
