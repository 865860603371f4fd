"""The training loop of the test scripts (train_resnet.py, train_transformer.py): cross-entropy
steps on a fixed batch, each step's loss printed as a hex float so runs with and without fumi
compare bit for bit. The step count is the script's first argument (default 3)."""
import sys

import torch


def train(model, opt, x, y):
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    for step in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item().hex()}", flush=True)
