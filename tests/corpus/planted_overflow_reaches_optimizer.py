# corpus-expect: op=aten::mm check=nan_inf
"""Planted: loss scaling without the check: the overflowed gradients are unscaled (Inf stays
Inf) and the optimizer steps on them, so the parameters become non-finite. The backward
overflow reached the optimizer: raised, at the backward call."""
import torch
import torch.nn.functional as F

from corpus_common import scaled_mlp


def main():
    net, batch = scaled_mlp(13)
    opt = torch.optim.SGD(net.parameters(), lr=1e-2)
    scale = 2.0 ** 126
    for _ in range(3):
        x, y = batch()
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        (loss * scale).backward()  # FUMI-PLANTED
        for p in net.parameters():
            p.grad.div_(scale)
        opt.step()
    print("finite parameters:", all(bool(torch.isfinite(p).all()) for p in net.parameters()))


if __name__ == "__main__":
    main()
