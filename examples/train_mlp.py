"""A small, real PyTorch CPU training job: an MLP classifier on a synthetic 10-class problem
(Gaussian clusters), trained with SGD + momentum. Each printed loss is also given as a hex
float, so runs with and without fumi can be compared bit for bit.
Usage: /usr/bin/python3 train_mlp.py [--steps N] [--batch B] [--log-every K]"""
import argparse

import torch
import torch.nn as nn


def make_data(n, dim, classes, gen):
    centers = torch.randn(classes, dim, generator=gen) * 0.4
    labels = torch.randint(0, classes, (n,), generator=gen)
    points = centers[labels] + torch.randn(n, dim, generator=gen)
    return points, labels


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--log-every", type=int, default=10)
    args = parser.parse_args()

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    x, y = make_data(8192, 64, 10, gen)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                          nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (args.batch,), generator=gen)
        opt.zero_grad()
        loss = loss_fn(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        if step % args.log_every == 0 or step == args.steps - 1:
            print(f"step {step} loss {loss.item().hex()} ({loss.item():.4f})", flush=True)
    with torch.no_grad():
        accuracy = (model(x).argmax(dim=1) == y).float().mean().item()
    print(f"train accuracy {accuracy:.3f}")


if __name__ == "__main__":
    main()
