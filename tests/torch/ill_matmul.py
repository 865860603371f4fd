"""A matmul with catastrophic cancellation in fp32 (each output = 1e8*s + 1 - 1e8*s: exactly 1,
computed 0), the kind of operation fumi must flag, and a well-conditioned control.
Usage: ill_matmul.py ill|well"""
import sys

import torch


def main():
    if sys.argv[1] == "ill":
        s = torch.arange(1, 9, dtype=torch.float32).unsqueeze(1)
        a = torch.cat([1e8 * s, torch.ones(8, 1), -1e8 * s], dim=1)  # 8x3
        b = torch.ones(3, 8)
        c = torch.mm(a, b)  # the ill-conditioned line
    else:
        g = torch.Generator().manual_seed(0)
        a = torch.rand(8, 16, generator=g) + 0.5
        b = torch.rand(16, 8, generator=g) + 0.5
        c = torch.mm(a, b)
    print(c.sum().item().hex())


if __name__ == "__main__":
    main()
