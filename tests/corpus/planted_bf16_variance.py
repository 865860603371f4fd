# corpus-expect: op=aten::sqrt check=nan_inf
"""Planted (issue 16): a hand-written layer norm in bf16 over activations with a common offset,
its variance computed as E[x^2] - E[x]^2. With an offset of ~50 and a spread of ~1, both terms
are ~2500, where a bf16 ulp is 16: the difference cancels to rounding noise and is negative in
some rows, and sqrt makes NaN from finite input there (the origin). The normalised features feed
a monitoring statistic under no_grad, so training goes on and the NaN recurs every step."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus_common import report, setup


def main():
    setup(10)
    net = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 4))
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    losses, stats = [], []
    for _ in range(5):
        x = torch.randn(64, 16)
        y = torch.randint(0, 4, (64,))
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        with torch.no_grad():
            h = (net[0](x) + 50.0).bfloat16()           # activations with a common offset
            mean = h.mean(dim=1, keepdim=True)
            var = (h * h).mean(dim=1, keepdim=True) - mean * mean  # cancels in bf16
            std = torch.sqrt(var)  # FUMI-PLANTED
            stats.append(((h - mean) / (std + 1e-3)).abs().mean().item())
    report("planted_bf16_variance", losses)
    print("normalised-feature statistic:", stats)


if __name__ == "__main__":
    main()
