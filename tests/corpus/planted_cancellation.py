# corpus-expect: op=aten::mm check=highprec
"""Planted: catastrophic cancellation in a float32 matrix product. A no-grad 'drift' metric
computes [U, -U] @ [V; V + E] = -U @ E: the terms are ~1e4 while the exact result is ~1e-3,
so float32 accumulation (unit roundoff 6e-8 of partial sums ~1e4) loses all but its leading digit;
the f64 rerun of highprec sees a normwise relative error far above f32's 1e-4. The training
next to it is an ordinary small regression."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus_common import report, setup


def main():
    setup(9)
    net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    u = 1e4 * torch.randn(16, 32)
    v = torch.randn(32, 8)
    big = torch.cat([u, -u], dim=1)                          # (16, 64)
    losses, metrics = [], []
    for step in range(5):
        x = torch.randn(32, 8)
        y = x.sum(dim=1, keepdim=True).sin()
        loss = F.mse_loss(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        with torch.no_grad():
            e = 1e-7 * torch.randn(32, 8)
            stacked = torch.cat([v, v + e], dim=0)            # (64, 8)
            drift = torch.mm(big, stacked)  # FUMI-PLANTED
            exact = -(u.double() @ (stacked[32:].double() - v.double()))
            metrics.append(((drift.double() - exact).norm() / exact.norm()).item())
    report("planted_cancellation", losses)
    print("relative error of the f32 product vs f64:", ["%.3g" % m for m in metrics])


if __name__ == "__main__":
    main()
