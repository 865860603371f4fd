"""A parent and two worker processes each run one torch.mm. Under fumi every process must report
on its own. Workers exit as multiprocessing makes them: spawn workers through sys.exit, fork
workers through os._exit (no library destructors).
Usage: multiproc.py spawn|fork"""
import multiprocessing as mp
import sys

import torch


def work(seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(8, 8, generator=g)
    return torch.mm(a, a).sum().item().hex()


if __name__ == "__main__":
    print("parent", work(0), flush=True)
    pool = mp.get_context(sys.argv[1]).Pool(2)
    print("workers", sorted(pool.map(work, [1, 2])), flush=True)
    pool.close()  # workers finish and exit on their own (not terminate(): SIGTERM)
    pool.join()
