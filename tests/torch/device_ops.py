"""Ops on the simulated torch device (tests/torch/simdevice: the PrivateUse1 backend,
"privateuseone:0"), for tests of fumi's PyTorch adapter on device ops. Loads the library named by
FUMI_SIMTORCH and prints every result as hex floats after moving it to the CPU, with the device
tensor's version counter, so runs with and without fumi compare bit for bit.
An optional second argument names another device ("cpu"): the same computation there, the
reference a device run is compared with (FUMI_SIMTORCH is then not needed).
On the simulated device it ends by writing to stderr the bytes copied from the device to the
host during the run ("bytes_to_host N", the simulator's meter).
Usage: FUMI_SIMTORCH=.../libfumi_simtorch.so device_ops.py PROGRAM [device]
(PROGRAM: mm, tf32, train, prims, gemms or convs)"""
import os
import sys

import torch

DEVICE = "privateuseone:0"


def show(name, t, version=True):
    cpu = t.detach().to("cpu")
    if cpu.is_complex():
        cpu = torch.view_as_real(cpu.resolve_conj())
    values = [v.hex() for v in cpu.flatten().tolist()]
    print(name, *([t._version] if version else []), values, flush=True)


def rand(g, *shape, dtype=torch.float32):
    # Well-conditioned: entries in [0.5, 1.5), drawn on the CPU from a seeded generator.
    return (torch.rand(*shape, generator=g, dtype=dtype) + 0.5).to(DEVICE)


def crand(g, *shape, dtype=torch.float32):
    # Complex, both parts as rand()'s, made on the CPU (the device has no complex factory).
    parts = [torch.rand(*shape, generator=g, dtype=dtype) + 0.5 for _ in range(2)]
    return torch.complex(*parts).to(DEVICE)


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


def prims():
    """What fumi's element-wise primitives meet on a device: every floating dtype, transposed and
    strided operands, zeros, NaN and Inf, one-element and empty tensors; the GEMM operands much
    larger than the scalars a check may bring back."""
    g = torch.Generator().manual_seed(3)
    show("mm_f32", torch.mm(rand(g, 96, 64), rand(g, 64, 48)))
    show("mm_f64_t", torch.mm(rand(g, 40, 64, dtype=torch.float64),
                              rand(g, 32, 64, dtype=torch.float64).t()))
    show("add_f16_strided", torch.add(rand(g, 48, 40, dtype=torch.float16),
                                      rand(g, 48, 80, dtype=torch.float16)[:, ::2]))
    show("mul_bf16_t", torch.mul(rand(g, 40, 40, dtype=torch.bfloat16),
                                 rand(g, 40, 40, dtype=torch.bfloat16).t()))
    special = torch.rand(24, 24, generator=g) + 0.5
    special[::3] = 0
    special[1, 1], special[2, 2], special[4, 5] = float("nan"), float("inf"), -float("inf")
    show("mul_zeros_nonfinite", torch.mul(special.to(DEVICE), rand(g, 24, 24)))
    show("add_f64_zeros", torch.add(torch.zeros(16, 8, dtype=torch.float64).to(DEVICE),
                                    rand(g, 16, 8, dtype=torch.float64)))
    show("mm_1", torch.mm(rand(g, 1, 1), rand(g, 1, 1)))
    show("add_1", torch.add(rand(g, 1), rand(g, 1)))
    show("mm_0", torch.mm(rand(g, 3, 0), rand(g, 0, 4)))
    # Complex tensors, checked through their real views: a complex64 product, and a
    # complex128 sum with a transposed operand.
    show("mm_c64", torch.mm(crand(g, 24, 16), crand(g, 16, 12)))
    c, d = crand(g, 12, 10, dtype=torch.float64), crand(g, 10, 12, dtype=torch.float64)
    show("add_c128_t", torch.add(c, d.t()))


def gemms():
    """The GEMM family checksum projects, with operands far larger than its projections: a
    transposed operand, self broadcast with beta and alpha, batches (one operand shared through
    a stride-0 batch), matrix-vector products, fp32 and bf16."""
    g = torch.Generator().manual_seed(4)
    show("mm", torch.mm(rand(g, 640, 384), rand(g, 448, 384).t()))
    show("addmm", torch.addmm(rand(g, 512), rand(g, 640, 384), rand(g, 384, 512), beta=0.5,
                              alpha=2))
    show("bmm", torch.bmm(rand(g, 3, 256, 320), rand(g, 3, 320, 192)))
    show("baddbmm", torch.baddbmm(rand(g, 3, 256, 192), rand(g, 3, 256, 320),
                                  rand(g, 320, 192).expand(3, 320, 192), beta=0.25))
    show("mv", torch.mv(rand(g, 800, 600), rand(g, 600)))
    show("addmv", torch.addmv(rand(g, 800), rand(g, 600, 800).t(), rand(g, 600), alpha=0.5))
    a, b = rand(g, 512, 384, dtype=torch.bfloat16), rand(g, 384, 256, dtype=torch.bfloat16)
    c = torch.mm(a, b)
    show("mm_bf16", c)
    # Its own error against the exact product: a kernel summing in bf16 (torch 1.13's on CPUs
    # without AVX-512) loses far more than bf16 rounding, and checksum must say so. Taken with
    # numpy's own loops (einsum), out of fumi's sight: no torch op, no BLAS call.
    import numpy
    a64, b64, c64 = (t.cpu().double().numpy() for t in (a, b, c))
    exact = numpy.einsum("ik,kj->ij", a64, b64)
    print("kernel_error", numpy.linalg.norm(c64 - exact) / numpy.linalg.norm(exact))


def convs():
    """Convolutions on the device with their backward (grad_input, grad_weight, grad_bias):
    stride, padding, dilation, groups, a bias, 2-d and 1-d, channels enough that checksum's
    projections (a few channels of fp64) are a small part of the activations."""
    g = torch.Generator().manual_seed(5)
    x = rand(g, 2, 64, 14, 12).requires_grad_()
    w = rand(g, 128, 32, 3, 3).requires_grad_()
    b = rand(g, 128).requires_grad_()
    y = torch.nn.functional.conv2d(x, w, b, stride=2, padding=1, groups=2)
    w2 = rand(g, 96, 128, 3, 2).requires_grad_()
    z = torch.nn.functional.conv2d(y, w2, None, padding=(2, 1), dilation=2)
    z.backward(rand(g, *z.shape))
    s = rand(g, 3, 80, 40).requires_grad_()
    w3 = rand(g, 160, 80, 5).requires_grad_()
    t = torch.nn.functional.conv1d(s, w3, None, stride=3, padding=2)
    t.backward(rand(g, *t.shape))
    for name, v in (("y", y), ("z", z), ("t", t), ("dx", x.grad), ("dw", w.grad),
                    ("db", b.grad), ("dw2", w2.grad), ("ds", s.grad), ("dw3", w3.grad)):
        show(name, v, version=False)


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
    {"mm": mm, "tf32": tf32, "train": train, "prims": prims, "gemms": gemms,
     "convs": convs}[sys.argv[1]]()
    if DEVICE != "cpu":
        print("bytes_to_host", torch.ops.fumi_sim.bytes_to_host(), file=sys.stderr, flush=True)
