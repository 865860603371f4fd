"""Healthy: MLP classifier trained with log_softmax + nll_loss and Adam."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus_common import forward_ctx, report, setup


def main():
    setup(4)
    net = nn.Sequential(nn.Linear(20, 128), nn.ReLU(), nn.Linear(128, 128), nn.Tanh(),
                        nn.Linear(128, 6))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    w_true = torch.randn(20, 6)
    losses = []
    for _ in range(8):
        x = torch.randn(64, 20)
        y = (x @ w_true).argmax(dim=1)
        with forward_ctx():
            logits = net(x)
        loss = F.nll_loss(F.log_softmax(logits.float(), dim=1), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    report("healthy_mlp_nll", losses)


if __name__ == "__main__":
    main()
