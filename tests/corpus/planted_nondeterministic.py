# corpus-expect: op=aten::index_put_,aten::_index_put_impl_ check=determinism
# corpus-extra-rule: { name: corpus-determinism, match: { backend: torch, op: [aten::index_put_, aten::_index_put_impl_] }, sample: { every: 1 }, checks: [ { plugin: determinism, runs: 2 } ] }
"""Planted: a non-deterministic reduction. Each step accumulates per-token loss weights into a
per-vocabulary histogram with index_put_(..., accumulate=True) over many repeated indices. On
the CPU with two intra-op threads, PyTorch 1.13 splits the indices between threads that add
into the same float32 bins: the order of the additions, hence the rounded sums, changes from
run to run. The default policy has no determinism rule, so this program names its own
(corpus-extra-rule above, added before the default rules)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus_common import report, setup

VOCAB = 16


def main():
    setup(10)
    torch.set_num_threads(2)   # the race needs two intra-op threads (the default may be 1)
    net = nn.Sequential(nn.Embedding(VOCAB, 8), nn.Linear(8, VOCAB))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    losses, metrics = [], []
    for _ in range(4):
        tok = torch.randint(0, VOCAB, (64,))
        loss = F.cross_entropy(net(tok), (tok * 3) % VOCAB)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        with torch.no_grad():
            # A long stream of (token, weight) pairs: 16 bins, 400k additions.
            stream = torch.randint(0, VOCAB, (400000,))
            weight = torch.rand(400000)
            hist = torch.zeros(VOCAB)
            hist.index_put_((stream,), weight, accumulate=True)  # FUMI-PLANTED
            metrics.append(hist.max().item())
    report("planted_nondeterministic", losses)
    print("histogram max:", metrics)


if __name__ == "__main__":
    main()
