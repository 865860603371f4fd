# corpus-expect: op=aten::log check=nan_inf
"""Planted: each step also computes an entropy-like metric under no_grad as sum(p * log p),
with p a ReLU'd score that holds exact zeros: torch.log turns the zeros into -inf from finite
input (the origin), and 0 * -inf makes NaN. The NaN stays in the metric, out of the gradients,
so training goes on and the NaN recurs every step."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus_common import report, setup


def main():
    setup(6)
    net = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 5))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    losses, metrics = [], []
    for _ in range(5):
        x = torch.randn(16, 12)
        y = torch.randint(0, 5, (16,))
        logits = net(x)
        loss = F.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        with torch.no_grad():
            p = torch.relu(logits)            # negative logits become exact zeros
            p = p / (p.sum(dim=1, keepdim=True) + 1e-6)
            logp = torch.log(p)  # FUMI-PLANTED
            metrics.append((p * logp).sum().item())
    report("planted_log0", losses)
    print("entropy metric:", metrics)


if __name__ == "__main__":
    main()
