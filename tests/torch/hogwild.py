"""Hogwild's pattern, reduced (test_torch.py SharedMemory): a spawned process updates a weight
in shared memory in place, as a Hogwild worker's optimizer step does, while this process
multiplies by it. Each product is an exact f32 GEMM of whatever weight values it read: nothing
is wrong with its numerics, but a check that rereads the weight afterwards sees other values.
`quiet`: the other process only waits (the control: the same shared weight, never written).
Usage: hogwild.py write|quiet [ITERATIONS]"""
import sys

import torch
import torch.multiprocessing as mp


def writer(w, stop, ready, write):
    torch.set_num_threads(1)
    ready.set()
    while not stop.is_set():
        if write:
            w.add_(1e-3)  # never back to an earlier value


def main():
    write = sys.argv[1] == "write"
    iterations = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    torch.manual_seed(0)
    w = torch.randn(128, 128).share_memory_()
    stop, ready = mp.Event(), mp.Event()
    p = mp.Process(target=writer, args=(w, stop, ready, write))
    p.start()
    ready.wait()
    x = torch.randn(64, 128)
    for _ in range(iterations):
        torch.mm(x, w).sum()
    stop.set()
    p.join()
    print("done", flush=True)


if __name__ == "__main__":
    mp.set_start_method("spawn")
    main()
