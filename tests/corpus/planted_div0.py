# corpus-expect: op=aten::div check=nan_inf
"""Planted: a no-grad metric normalises each row of a feature batch by its norm; one row is
all zeros (a dead sample), so 0/0 gives NaN in that row, every step. Training itself is
unaffected."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus_common import report, setup


def main():
    setup(7)
    net = nn.Sequential(nn.Linear(10, 24), nn.ReLU(), nn.Linear(24, 3))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    losses, metrics = [], []
    for _ in range(5):
        x = torch.randn(12, 10)
        x[3] = 0.0                                  # a dead, all-zero sample
        y = torch.randint(0, 3, (12,))
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        with torch.no_grad():
            norms = x.norm(dim=1, keepdim=True)
            unit = x / norms  # FUMI-PLANTED
            metrics.append((unit @ unit.t()).mean().item())   # mean cosine similarity
    report("planted_div0", losses)
    print("cosine metric:", metrics)


if __name__ == "__main__":
    main()
