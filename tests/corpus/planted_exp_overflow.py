# corpus-expect: op=aten::exp check=nan_inf
"""Planted: a no-grad 'perplexity' metric exponentiates the summed (not averaged) token loss;
the sum over 48 tokens is above 89, where float32 exp overflows to Inf from a finite input, every step."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus_common import report, setup


def main():
    setup(8)
    net = nn.Sequential(nn.Embedding(20, 16), nn.Flatten(0, 1), nn.Linear(16, 20))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    losses, metrics = [], []
    for _ in range(5):
        idx = torch.randint(0, 20, (4, 48))
        tgt = (idx + 1) % 20
        logits = net(idx)
        loss = F.cross_entropy(logits, tgt.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        with torch.no_grad():
            total = F.cross_entropy(logits, tgt.reshape(-1), reduction="none").reshape(4, 48).sum(1)
            ppl = torch.exp(total)  # FUMI-PLANTED
            metrics.append(ppl.mean().item())
    report("planted_exp_overflow", losses)
    print("perplexity metric:", metrics)


if __name__ == "__main__":
    main()
