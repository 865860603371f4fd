"""Ops on the simulated torch device (tests/torch/simdevice: the PrivateUse1 backend,
"privateuseone:0"), for tests of fumi's PyTorch adapter on device ops. Loads the library named by
FUMI_SIMTORCH and prints every result as hex floats after moving it to the CPU, with the device
tensor's version counter, so runs with and without fumi compare bit for bit.
An optional second argument names another device ("cpu"): the same computation there, the
reference a device run is compared with (FUMI_SIMTORCH is then not needed).
Usage: FUMI_SIMTORCH=.../libfumi_simtorch.so device_ops.py mm|tf32|train [device]"""
import os
import sys

import torch

DEVICE = "privateuseone:0"


def show(name, t, version=True):
    values = [v.hex() for v in t.detach().to("cpu").flatten().tolist()]
    print(name, *([t._version] if version else []), values, flush=True)


def rand(g, *shape, dtype=torch.float32):
    # Well-conditioned: entries in [0.5, 1.5), drawn on the CPU from a seeded generator.
    return (torch.rand(*shape, generator=g, dtype=dtype) + 0.5).to(DEVICE)


def mm():
    g = torch.Generator().manual_seed(1)
    a, b = rand(g, 7, 5), rand(g, 5, 6)
    show("mm", torch.mm(a, b))
    c, m1, m2 = rand(g, 4, 6), rand(g, 4, 3), rand(g, 3, 6)
    show("addmm", torch.addmm(c, m1, m2, beta=0.5, alpha=1))
    x, w, bias = rand(g, 8, 5), rand(g, 6, 5), rand(g, 6)
    show("linear", torch.nn.functional.linear(x, w, bias))  # addmm(bias, x, w.t())
    a64, b64 = rand(g, 3, 4, dtype=torch.float64), rand(g, 4, 2, dtype=torch.float64)
    show("mm_f64", torch.mm(a64, b64))


def tf32():
    # 1 + 2^-11 + 2^-13 is exact in fp32; TF32 (10-bit mantissa) rounds it up to 1 + 2^-10.
    a = torch.full((4, 16), 1 + 2**-11 + 2**-13, dtype=torch.float32).to(DEVICE)
    b = torch.ones(16, 4, dtype=torch.float32).to(DEVICE)
    show("tf32_mm", torch.mm(a, b))


def train():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.ReLU(),
                                torch.nn.Linear(6, 1)).to(DEVICE)
    g = torch.Generator().manual_seed(2)
    x, y = rand(g, 16, 5), rand(g, 16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(5):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        print("step", step, loss.item().hex(), flush=True)
    for name, p in model.named_parameters():
        show(name, p, version=False)  # on the CPU, .to() keeps the initialised tensors


if __name__ == "__main__":
    if len(sys.argv) > 2:
        DEVICE = sys.argv[2]
    else:
        torch.ops.load_library(os.environ["FUMI_SIMTORCH"])
    {"mm": mm, "tf32": tf32, "train": train}[sys.argv[1]]()
