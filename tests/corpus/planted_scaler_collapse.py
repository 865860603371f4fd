# corpus-expect: op=aten::mm check=loss_scaling
"""Planted: a loss scaler whose backoff is broken (it raises the scale on overflow instead of
lowering it): every backward pass overflows, every step is skipped, training never moves. Each
overflow alone is handled; the run of them is the finding."""
import torch
import torch.nn.functional as F

from corpus_common import grads_finite, scaled_mlp


def main():
    net, batch = scaled_mlp(12, spread=60.0)
    opt = torch.optim.SGD(net.parameters(), lr=1e-2)
    scale, skipped = 2.0 ** 126, 0
    for _ in range(40):
        x, y = batch()
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        (loss * scale).backward()
        if not grads_finite(net.parameters()):
            scale, skipped = min(scale * 2, 2.0 ** 126), skipped + 1  # the bug: up, not down
            opt.zero_grad()  # FUMI-PLANTED
            continue
        for p in net.parameters():
            p.grad.div_(scale)
        opt.step()
    print("skipped steps:", skipped)


if __name__ == "__main__":
    main()
