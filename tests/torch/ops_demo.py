"""Operators whose checks are easy to get wrong, for tests under fumi. Prints every result as hex
floats, with tensor version counters, so runs with and without fumi compare bit for bit.
Usage: ops_demo.py inplace|random|gemmconv|inference|bn_bf16|bn_eval|rnn_dropout|conv_bn|
       bias_bn|scaled_bn|norm_grads|softmax_flat|ctc|grid|sum_dtype|functorch_ensemble"""
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


def gemmconv():
    # The GEMM and convolution family with the layouts and arguments checksum's projections
    # read: transposed views, broadcast self (beta, alpha), batches, vectors, a strided, padded,
    # dilated, grouped convolution and its backward.
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(37, 29, generator=g), torch.randn(23, 29, generator=g).t()
    show("mm", torch.mm(a, b))
    show("addmm_bias", torch.addmm(torch.randn(23, generator=g), a, b, beta=0.5, alpha=2.0))
    show("addmm_col", torch.addmm(torch.randn(37, 1, generator=g), a, b))
    p, q = torch.randn(3, 7, 5, generator=g), torch.randn(3, 5, 4, generator=g)
    show("bmm", torch.bmm(p, q))
    show("baddbmm", torch.baddbmm(torch.randn(7, 4, generator=g), p, q, beta=1.5))
    v = torch.randn(29, generator=g)
    show("mv", torch.mv(a, v))
    show("addmv", torch.addmv(torch.randn(37, generator=g), a, v))
    x = torch.randn(2, 4, 11, 9, generator=g, requires_grad=True)
    w = torch.randn(6, 2, 3, 3, generator=g, requires_grad=True)
    bias = torch.randn(6, generator=g, requires_grad=True)
    y = torch.nn.functional.conv2d(x, w, bias, stride=2, padding=1, dilation=(1, 2), groups=2)
    show("conv2d", y)
    (y * torch.randn(y.shape, generator=g)).sum().backward()
    show("grad_x", x.grad)
    show("grad_w", w.grad)
    show("grad_bias", bias.grad)


def inference():
    # torch.inference_mode(): outputs are inference tensors, which keep no version counter.
    torch.manual_seed(4)  # the layer's initial weights
    g = torch.Generator().manual_seed(4)
    lin = torch.nn.Linear(16, 16)
    x = torch.randn(8, 16, generator=g)
    with torch.inference_mode():
        y = lin(x)  # normal inputs, an inference output
        z = lin(y)  # an inference tensor in
        print("inference", [v.hex() for v in z.flatten().tolist()], flush=True)


def bn_bf16():
    # Batch norm in training mode on bf16 channels centred to ~1e-4 of their spread (a
    # bias-free bf16 convolution before it): the f32 saved mean cancels, and a last-bit bf16
    # shift of x moves it by most of itself; y moves by a last bit.
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4, 72, 32, 32, generator=g)
    x = (x - x.mean((0, 2, 3), keepdim=True)).bfloat16()
    y = torch.nn.functional.batch_norm(x, torch.zeros(72), torch.ones(72), torch.ones(72),
                                       torch.zeros(72), training=True, momentum=0.01, eps=1e-3)
    print("bn_bf16", y.float().abs().sum().item().hex(), flush=True)


def bn_eval():
    # Batch norm in eval mode: its saved mean and inverse deviation come back empty (no memory).
    torch.manual_seed(6)
    bn = torch.nn.BatchNorm2d(16).eval()
    with torch.no_grad():
        show("bn_eval", bn(torch.randn(2, 16, 4, 4)))


def rnn_dropout():
    # A 2-layer LSTM with dropout between its layers: in training it draws masks inside
    # aten::lstm (no random tag on the op); in eval mode it draws none.
    torch.manual_seed(7)
    lstm = torch.nn.LSTM(8, 16, num_layers=2, dropout=0.5)
    x = torch.randn(6, 3, 8)
    with torch.no_grad():
        show("lstm_train", lstm(x)[0])
        show("lstm_eval", lstm.eval()(x)[0])


def conv_bn():
    # A convolution with a bias before batch norm: its bias gradient is rounding noise, which
    # highprec finds by a second rerun on |x| (noiseOutputs).
    torch.manual_seed(8)
    m = torch.nn.Sequential(torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.BatchNorm2d(64),
                            torch.nn.LeakyReLU())
    m(torch.randn(4, 64, 16, 16)).square().mean().backward()
    show("conv_bn_grad_bias", m[0].bias.grad)


def scaled_bn():
    # Quantization-aware training's fused conv-bn divides the convolution's output by a
    # per-channel scale before batch norm, which takes the scale out again: the scale's gradient
    # (DivBackward0's sum over the batch and positions) is exactly 0 but for rounding, which the
    # ops before it leave at tens to hundreds of unit roundoffs of its terms. The same with a
    # convolution's bias in channels_last (its grad_bias at 4-8 roundoffs of its terms).
    torch.manual_seed(3)
    conv = torch.nn.Conv2d(16, 32, 3, padding=1)
    bn = torch.nn.BatchNorm2d(32)
    scale = torch.nn.Parameter(torch.rand(32, 1, 1) + 0.5)
    head = torch.nn.Linear(32, 10)
    conv = conv.to(memory_format=torch.channels_last)
    for _ in range(2):
        x = torch.randn(8, 16, 12, 12).contiguous(memory_format=torch.channels_last)
        for p in (*conv.parameters(), scale):
            p.grad = None
        y = torch.relu(bn(conv(x) / scale)).mean((2, 3))
        torch.nn.functional.cross_entropy(head(y), torch.arange(8)).backward()
        show("scale_grad", scale.grad)
        show("conv_bias_grad", conv.bias.grad)


def grid():
    # Ops that round their result to a grid, as quantization-aware training and metrics run
    # them: at a step a wider or perturbed rerun lands on the other side. Then a Linear under
    # dynamic int8 quantization (quantized::linear_dynamic).
    torch.manual_seed(5)
    x = torch.arange(-64.0, 64.0) * 0.37  # on the steps, but for the rounding of the products
    with torch.no_grad():
        show("floor_div", torch.div(x, 0.37, rounding_mode="floor"))
        show("remainder", torch.remainder(x, 0.37))
        show("histc", torch.histc(x, bins=128, min=-64 * 0.37, max=64 * 0.37))
        show("fake_quant", torch.fake_quantize_per_tensor_affine(x, 0.74, 0, -128, 127))
        show("round", torch.round(x / 0.74))
        model = torch.ao.quantization.quantize_dynamic(
            torch.nn.Sequential(torch.nn.Linear(64, 32)), {torch.nn.Linear}, dtype=torch.qint8)
        show("linear_dynamic", model(torch.randn(8, 64)))


def decompositions():
    # Singular and eigenvectors are defined up to their signs: an f64 rerun of this SVD (batch
    # 9's Gaussian-process fit) returns 2 of its 20 vector pairs flipped, and a comparison of U
    # and Vh read 0.63. Then eigh, the legacy svd, and eig/eigvals (eigenvalues in no defined
    # order).
    torch.manual_seed(1)
    a = torch.randn(500, 20) @ torch.randn(20, 20) + 0.1 * torch.randn(500, 20)
    a = a - a.mean(0)
    with torch.no_grad():
        u, s, vh = torch.linalg.svd(a, full_matrices=False)
        show("svd", torch.cat([s, (u[:, :3] * vh[:3, :1].T).sum(0)]))
        w, v = torch.linalg.eigh(a.T @ a)
        show("eigh", torch.cat([w, v[0, :3] * v[1, :3]]))
        show("svd_legacy", torch.svd(a[:40])[1])
        show("eigvals", torch.linalg.eigvals(a[:20, :20]).abs().sort().values)
        show("eig", torch.linalg.eig(a[:20, :20])[0].abs().sort().values)
        # An integer matrix: pivots tie, and a perturbed rerun picked other rows (perturb 370).
        b = torch.randint(-3, 4, (30, 30), generator=torch.Generator().manual_seed(0)).float()
        lu, pivots = torch.linalg.lu_factor(b)
        show("lu_factor", torch.cat([lu.flatten(), pivots.float()]))
        show("solve", torch.linalg.solve(b, torch.ones(30)))


def bias_bn():
    # A Linear's bias before batch norm (as GAN generators have it): batch norm takes out what
    # the bias adds, so the bias gradient, a sum over the batch of rows that cancel, is exactly
    # 0 but for the rounding of its terms. Then the same cancellation in the forward pass: the
    # column sums of centred activations, a result a program would use.
    torch.manual_seed(7)
    lin, bn = torch.nn.Linear(32, 64), torch.nn.BatchNorm1d(64)
    x = torch.randn(128, 32)
    for _ in range(2):
        lin.zero_grad()
        h = lin(x)
        bn(h).pow(3).sum().backward()
        show("bias_grad", lin.bias.grad)
    with torch.no_grad():
        show("centred_sum", (h - h.mean(0)).sum(0))


def norm_grads():
    # Batch, layer and group norm with output gradients whose products with x^ cancel over
    # what each weight gathers, as the last layers' of MobileNet and ShuffleNet do (batch 1:
    # 1e4-fold): grad_weight = sum dy * x^ keeps few digits of its terms. Prints how far each
    # cancels, computed here in fp64: sum |dy * x^| against the sum, normwise over the weights.
    torch.manual_seed(11)

    def xhat(x, dims):
        x = x.double()
        return (x - x.mean(dims, keepdim=True)) / (x.var(dims, unbiased=False, keepdim=True)
                                                   + 1e-5).sqrt()

    def grads(name, norm, x, xh, dims):
        r = torch.randn(x.shape, dtype=torch.float64)
        w = (r * xh).sum(dims, keepdim=True) / (xh * xh).sum(dims, keepdim=True)
        dy = (r - xh * w * (1 - 3e-3)).float()
        terms = (dy.double() * xh).abs().sum(dims).norm() / (dy.double() * xh).sum(dims).norm()
        print("terms_cancel", name, float(terms))
        x = x.clone().requires_grad_()
        norm(x).backward(dy)
        show(name + "_grad_weight", norm.weight.grad)
        show(name + "_grad_input", x.grad)

    x = torch.randn(8, 6, 10, 10) * 3 + 1
    grads("batch_norm", torch.nn.BatchNorm2d(6), x, xhat(x, (0, 2, 3)), (0, 2, 3))
    x = torch.randn(64, 32) * 3 + 1
    grads("layer_norm", torch.nn.LayerNorm(32), x, xhat(x, (1,)), (0,))
    x = torch.randn(8, 6, 10, 10) * 3 + 1
    xh = xhat(x.view(8, 3, 2, 10, 10), (2, 3, 4)).view(8, 6, 10, 10)
    grads("group_norm", torch.nn.GroupNorm(3, 6), x, xh, (0, 2, 3))


def softmax_flat():
    # Attention at initialisation (pytorch-fm's AutoInt, batch 16): softmax over 10 logits
    # whose upstream gradient is constant along the softmax dimension to a few ulps, so that
    # its backward, y * (g - sum g * y), cancels to ~1e-7 of its terms: the true gradient into
    # the logits is 0 but for rounding.
    torch.manual_seed(0)
    x = (0.01 * torch.randn(512, 10, 10)).requires_grad_()
    y = torch.softmax(x, -1)
    g = (1e-5 * torch.randn(512, 10, 1)).expand(512, 10, 10).contiguous()
    y.backward(g * (1 + 3e-7 * torch.randn(512, 10, 10)))
    show("logits_grad", x.grad[0])


def ctc():
    # A CTC loss over sequences of different input and target lengths, three training steps:
    # _ctc_loss returns its alpha lattice for the backward, -inf off the paths and unwritten
    # beyond each sequence's lengths.
    torch.manual_seed(12)
    rnn, head = torch.nn.GRU(8, 16), torch.nn.Linear(16, 12)
    opt = torch.optim.SGD(list(rnn.parameters()) + list(head.parameters()), lr=0.1)
    x, targets = torch.randn(30, 6, 8), torch.randint(1, 12, (6, 9))
    inputs = torch.tensor([30, 30, 25, 22, 30, 28])
    lengths = torch.tensor([9, 4, 6, 3, 7, 9])
    for _ in range(3):
        opt.zero_grad()
        loss = torch.nn.functional.ctc_loss(head(rnn(x)[0]).log_softmax(-1), targets, inputs,
                                            lengths)
        loss.backward()
        opt.step()
        show("ctc_loss", loss)


def sum_dtype():
    # Reductions told their dtype (dtype=float32 on f32 data), with and without out=: the
    # wider rerun must widen that argument too. Long rows of large values: f32's rounding shows.
    torch.manual_seed(8)
    x = torch.randn(16, 4096) * 1000 + 0.5
    show("sum_dtype", torch.sum(x, 1, dtype=torch.float32))
    out = torch.empty(16)
    torch.sum(x, 1, dtype=torch.float32, out=out)
    show("sum_dtype_out", out)
    show("cast_f16", x[:2].to(torch.float16))  # a cast makes its dtype: nothing to widen


def functorch_ensemble():
    # functorch's transforms, as its model-ensembling and per-sample-gradient examples use them:
    # vmap over stacked parameters of four MLPs and grad inside it, 20 SGD steps. The ops see
    # batched and gradient-wrapper tensors, which have no storage.
    from functorch import combine_state_for_ensemble, grad, vmap
    torch.manual_seed(9)
    models = [torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                  torch.nn.Linear(16, 2)) for _ in range(4)]
    fmodel, params, buffers = combine_state_for_ensemble(models)
    x, y = torch.randn(32, 8), torch.randint(0, 2, (32,))

    def loss(p, b):
        return torch.nn.functional.cross_entropy(fmodel(p, b, x), y)
    for _ in range(20):
        g = vmap(grad(loss))(params, buffers)
        params = tuple(p - 0.1 * gp for p, gp in zip(params, g))
    show("ensemble_loss", vmap(loss)(params, buffers))


if __name__ == "__main__":
    {"inplace": inplace, "random": random, "gemmconv": gemmconv, "inference": inference,
     "bn_bf16": bn_bf16, "bn_eval": bn_eval, "rnn_dropout": rnn_dropout, "conv_bn": conv_bn,
     "bias_bn": bias_bn, "scaled_bn": scaled_bn, "norm_grads": norm_grads,
     "softmax_flat": softmax_flat, "ctc": ctc, "grid": grid, "decompositions": decompositions,
     "sum_dtype": sum_dtype, "functorch_ensemble": functorch_ensemble}[sys.argv[1]]()
