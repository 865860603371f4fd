"""A small training loop for the durable-data tests (test_durable.py). It prints "ready" after
its first step, then trains until stopped (at most 60 s).
Usage: durable_job.py MODE
  plain     the default SIGTERM/SIGHUP dispositions: a signal ends the process
  handler   its own SIGTERM handler: stop after the current step, exit with status 3
  interrupt KeyboardInterrupt (SIGINT) caught: print "interrupted", exit with status 4
  exec      a few steps, then os.execv into a second image that runs one more step
  nohup     SIGHUP ignored (as under nohup): the signal changes nothing, exit 0 after 3 s
  segfault  5 more steps, then a read of address 0 (SIGSEGV, as a faulty extension would)
  abort     5 more steps, then abort() (SIGABRT, as a failed assertion in C++ code would)
  faulthandler  as segfault, with Python's faulthandler enabled (a program handler of its own)"""
import ctypes
import faulthandler
import os
import signal
import sys
import time

import torch

mode = sys.argv[1]
stop = False
if mode == "handler":
    def on_term(sig, frame):
        global stop
        stop = True
        print("handled", sig, flush=True)
    signal.signal(signal.SIGTERM, on_term)
if mode == "nohup":
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
if mode == "faulthandler":
    faulthandler.enable()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))


def step():
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


step()
print("ready", flush=True)
if mode == "exec":
    for _ in range(5):
        step()
    os.execv(sys.executable, [sys.executable, "-c",
                              "import torch; print('second image', torch.mm(torch.ones(4, 4), "
                              "torch.ones(4, 4)).sum().item(), flush=True)"])
if mode in ("segfault", "abort", "faulthandler"):
    for _ in range(5):
        step()
    print("crashing", flush=True)
    if mode == "abort":
        os.abort()
    ctypes.string_at(0)
limit = 3 if mode == "nohup" else 60
t0 = time.time()
try:
    while not stop and time.time() - t0 < limit:
        step()
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(4)
sys.exit(3 if stop else 0)
