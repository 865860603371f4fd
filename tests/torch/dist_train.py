"""Data-parallel training with torch.distributed (gloo, CPU), started by torchrun: each rank
trains a small MLP on its own shard of synthetic data for STEPS steps (0: until stopped, at most
60 s), gradients all-reduced by DistributedDataParallel. Rank 0 prints "ready" after the first
step and each step's loss.
Usage: torchrun --nproc_per_node N dist_train.py STEPS"""
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main():
    steps = int(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + rank)
    x, y = torch.randn(64, 32, generator=g), torch.randint(0, 4, (64,), generator=g)
    t0 = time.time()
    i = 0
    while (steps == 0 and time.time() - t0 < 60) or i < steps:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {i} loss {loss.item():.6f}" if i else "ready", flush=True)
        i += 1
    dist.barrier()
    dist.destroy_process_group()
    assert int(os.environ["RANK"]) == rank


if __name__ == "__main__":
    main()
