"""One resnet18 CPU training job for bench/torch.sh: torchvision resnet18 (10 classes), SGD with
momentum, on random images and labels drawn from fixed seeds, so that every run computes the
same losses bit for bit (with the same thread count).

Runs W warm-up steps, then N timed steps. Prints one line per step:
    step <i> warmup|timed step_s <seconds> loss <loss.item().hex()>
A step is zero_grad + forward + loss + backward + optimizer step + loss.item(), timed with
time.perf_counter(); drawing the batch is outside the timed region.

Usage: /usr/bin/python3 bench/torch_step.py [--steps N] [--warmup W] [--batch B] [--size S]
                                            [--threads T] [--autocast bf16]
--threads 0 (the default) leaves PyTorch's own choice (one thread per core).
--autocast bf16 runs the forward pass and the loss under torch.autocast("cpu", bfloat16), the way
a bf16 mixed-precision job runs."""
import argparse
import contextlib
import time

import torch
import torch.nn as nn
import torchvision


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=64, help="image height and width")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch.set_num_threads (0: leave the default)")
    parser.add_argument("--autocast", choices=["bf16"], default=None,
                        help="forward and loss under torch.autocast (cpu, bfloat16)")
    args = parser.parse_args()

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    model = torchvision.models.resnet18(num_classes=10)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    for step in range(args.warmup + args.steps):
        x = torch.randn(args.batch, 3, args.size, args.size, generator=gen)
        y = torch.randint(0, 10, (args.batch,), generator=gen)
        t0 = time.perf_counter()
        opt.zero_grad()
        region = (torch.autocast("cpu", dtype=torch.bfloat16) if args.autocast
                  else contextlib.nullcontext())
        with region:
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        value = loss.item()
        dt = time.perf_counter() - t0
        kind = "warmup" if step < args.warmup else "timed"
        print(f"step {step} {kind} step_s {dt:.6f} loss {value.hex()}", flush=True)


if __name__ == "__main__":
    main()
