"""One CPU training job for bench/torch.sh, on data drawn from fixed seeds, so that every run
computes the same losses bit for bit (with the same thread count). --model picks the job:

  resnet18     torchvision resnet18 (10 classes), SGD with momentum, batches of B random
               3×S×S images with random labels: few, large ops (~1 600 aten calls a step).
  lstm         a word-level LSTM language model in the shape of the classic PyTorch example:
               embedding 200, 2-layer LSTM with hidden size 200, dropout 0.2, linear decoder to
               a 10 000-word vocabulary; bptt 35, batch 20; the hidden state carried from one
               step to the next (detached), gradient norm clipped at 0.25, and the example's
               hand-written SGD update (p -= 20 * grad, no torch.optim: no optimizer step for
               fumi to see). Many small ops: the LSTM runs cell by cell (~7 000 aten calls a
               step).
  transformer  a small Transformer language model: the same embedding and decoder around
               nn.TransformerEncoder (2 layers, d_model 200, 2 heads, feed-forward 200,
               dropout 0.2) under a causal mask, sinusoidal positions; same batches, clipping
               and update as lstm.

The language models train on a synthetic token stream (random words drawn from fixed seeds,
batch B columns, bptt rows a step), like the example's batchify/get_batch on a real corpus.

Runs W warm-up steps, then N timed steps. Prints one line per step:
    step <i> warmup|timed step_s <seconds> loss <loss.item().hex()> minflt <faults>
A step is zero_grad + forward + loss + backward + parameter update + loss.item(),
timed with time.perf_counter(); drawing the batch is outside the timed region. minflt: the
process's minor page faults during the step (getrusage), the allocator's footprint.
At the end: peak_rss_kb <n>, the process's peak resident set (getrusage ru_maxrss): with
libfumi preloaded, fumi's memory is in it (its scratch, the reruns' tensors, its own state).

Usage: /usr/bin/python3 bench/torch_step.py [--model resnet18|lstm|transformer] [--steps N]
                                            [--warmup W] [--batch B] [--size S] [--threads T]
                                            [--autocast bf16]
--batch defaults to 8 for resnet18 and 20 for the language models; --size is resnet18's image
size (default 64) and the language models' bptt (default 35).
--threads 0 (the default) leaves PyTorch's own choice (one thread per core).
--autocast bf16 runs the forward pass and the loss under torch.autocast("cpu", bfloat16), the way
a bf16 mixed-precision job runs.
--emulate perturb|f64|rerun|rerun64 checks the forward calls FuMi's Python wrappers check, the way they check
them (bench/fumi_emulate.py; bench/fumi_compare.sh), and prints "emulated_checks <n>" at the
end.
--device cuda runs the job on the GPU (the batches are drawn on the CPU, from the same seeds,
and moved there before the step's clock starts; loss.item() ends each step, so the step's time
includes its kernels).
--count-copies runs the timed steps under torch.profiler and prints, at the end,
"d2h_copies <n> d2h_bytes <bytes>": the device-to-host copies the CUDA activity records show
(the program's own loss.item() among them), for bench/fumi_compare.sh's bytes-per-check table.
--profile-top N (with --count-copies) also prints, for each kind of record (kernels, runtime
and driver calls, copies), the N with the most time over the timed steps, a line each:
"profile <kind> <count> <total_us> <name>" (scripts/gpu_suite.sh shows them per check)."""
import argparse
import contextlib
import math
import resource
import time

import torch
import torch.nn as nn

VOCAB = 10000
EMBED = 200
HIDDEN = 200
LAYERS = 2
DROPOUT = 0.2


class LstmLM(nn.Module):
    """Embedding -> dropout -> LSTM -> dropout -> linear decoder; (seq, batch) token layout."""

    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(DROPOUT)
        self.encoder = nn.Embedding(VOCAB, EMBED)
        self.rnn = nn.LSTM(EMBED, HIDDEN, LAYERS, dropout=DROPOUT)
        self.decoder = nn.Linear(HIDDEN, VOCAB)
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def initial_state(self, batch):
        z = torch.zeros(LAYERS, batch, HIDDEN, device=self.decoder.weight.device)
        return (z, z.clone())

    def forward(self, tokens, state):
        out, state = self.rnn(self.drop(self.encoder(tokens)), state)
        return self.decoder(self.drop(out)).view(-1, VOCAB), state


class TransformerLM(nn.Module):
    """Embedding * sqrt(d) + sinusoidal positions -> TransformerEncoder (causal) -> decoder."""

    def __init__(self, max_len=512):
        super().__init__()
        self.encoder = nn.Embedding(VOCAB, EMBED)
        layer = nn.TransformerEncoderLayer(EMBED, nhead=2, dim_feedforward=HIDDEN,
                                           dropout=DROPOUT)
        self.transformer = nn.TransformerEncoder(layer, LAYERS)
        self.decoder = nn.Linear(EMBED, VOCAB)
        self.drop = nn.Dropout(DROPOUT)
        pos = torch.arange(max_len).unsqueeze(1)
        freq = torch.exp(torch.arange(0, EMBED, 2) * (-math.log(10000.0) / EMBED))
        pe = torch.zeros(max_len, 1, EMBED)
        pe[:, 0, 0::2] = torch.sin(pos * freq)
        pe[:, 0, 1::2] = torch.cos(pos * freq)
        self.register_buffer("pe", pe)
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def initial_state(self, batch):
        return None

    def forward(self, tokens, state):
        n = tokens.size(0)
        mask = torch.triu(torch.full((n, n), float("-inf"), device=tokens.device), diagonal=1)
        x = self.drop(self.encoder(tokens) * math.sqrt(EMBED) + self.pe[:n])
        return self.decoder(self.transformer(x, mask)).view(-1, VOCAB), None


def resnet18_job(args, gen):
    """(model, draw() -> batch, zero_grad(), forward(batch) -> loss, update()) for resnet18:
    torch.optim.SGD (or Adam, --optimizer adam),
    whose step() PyTorch records as the range "Optimizer.step#SGD.step"."""
    import torchvision
    model = torchvision.models.resnet18(num_classes=10).to(args.device)
    opt = (torch.optim.Adam(model.parameters(), lr=1e-3) if args.optimizer == "adam" else
           torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))
    loss_fn = nn.CrossEntropyLoss()
    batch, size = args.batch or 8, args.size or 64

    def draw():
        return (torch.randn(batch, 3, size, size, generator=gen),
                torch.randint(0, 10, (batch,), generator=gen))

    def forward(data):
        x, y = data
        return loss_fn(model(x), y)

    return model, draw, opt.zero_grad, forward, opt.step


def language_model_job(args, gen):
    """The same for the LSTM and Transformer language models (shared data and training)."""
    model = (LstmLM() if args.model == "lstm" else TransformerLM()).to(args.device)
    lr = 20.0
    loss_fn = nn.CrossEntropyLoss()
    batch, bptt = args.batch or 20, args.size or 35
    state = [model.initial_state(batch)]

    def draw():
        # One bptt window of a token stream: rows are time, columns the batch's streams; the
        # targets are the next tokens.
        seq = torch.randint(0, VOCAB, (bptt + 1, batch), generator=gen)
        return seq[:-1], seq[1:].reshape(-1)

    def forward(data):
        tokens, targets = data
        hidden = state[0]
        if hidden is not None:  # carried over, cut from the last step's graph
            hidden = tuple(h.detach() for h in hidden)
        out, state[0] = model(tokens, hidden)
        return loss_fn(out, targets)

    def update():
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(p.grad, alpha=-lr)

    return model, draw, model.zero_grad, forward, update


@contextlib.contextmanager
def profile_copies(top=0):
    """torch.profiler around the block; at its end, prints the device-to-host copies that the
    CUDA activity records (kineto's gpu_memcpy events, named "Memcpy DtoH ...") and their
    bytes; with `top`, the records with the most time of each kind."""
    import json
    import os
    import tempfile
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        yield
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
        events = trace["traceEvents"] if isinstance(trace, dict) else trace  # kineto / legacy
    finally:
        os.unlink(path)
    d2h = [e for e in events
           if e.get("cat") == "gpu_memcpy" and "DtoH" in e.get("name", "")]
    print(f"d2h_copies {len(d2h)} d2h_bytes {sum(e['args'].get('bytes', 0) for e in d2h)}",
          flush=True)
    kinds = ("kernel", "cuda_runtime", "cuda_driver", "gpu_memcpy")
    totals = {}  # (kind, name): [count, microseconds]
    for e in events:
        if top and e.get("cat") in kinds and "dur" in e:
            t = totals.setdefault((e["cat"], e.get("name", "?")), [0, 0.0])
            t[0] += 1
            t[1] += e["dur"]
    for kind in kinds:
        rows = sorted(((v, n) for (k, n), v in totals.items() if k == kind),
                      key=lambda r: -r[0][1])[:top]
        for (count, us), name in rows:
            print(f"profile {kind} {count} {us:.1f} {name}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=["resnet18", "lstm", "transformer"],
                        default="resnet18")
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd",
                        help="resnet18's optimizer (the language models update by hand)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--batch", type=int, default=0, help="0: the model's default")
    parser.add_argument("--size", type=int, default=0,
                        help="resnet18: image height and width; language models: bptt "
                             "(0: the model's default)")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch.set_num_threads (0: leave the default)")
    parser.add_argument("--autocast", choices=["bf16"], default=None,
                        help="forward and loss under torch.autocast (the device, bfloat16)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--count-copies", action="store_true",
                        help="count device-to-host copies of the timed steps (torch.profiler)")
    parser.add_argument("--profile-top", type=int, default=0,
                        help="with --count-copies: the N records of each kind with most time")
    parser.add_argument("--emulate", choices=["perturb", "f64", "rerun", "rerun64"], default=None,
                        help="FuMi's own checks, emulated (bench/fumi_emulate.py)")
    args = parser.parse_args()
    if args.emulate:
        import fumi_emulate
        fumi_emulate.install(args.emulate)

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    job = resnet18_job if args.model == "resnet18" else language_model_job
    model, draw, zero_grad, forward, update = job(args, gen)
    model.train()
    copies = contextlib.ExitStack()  # --count-copies: the profiler around the timed steps

    for step in range(args.warmup + args.steps):
        if step == args.warmup and args.count_copies:
            copies.enter_context(profile_copies(args.profile_top))
        data = tuple(t.to(args.device) for t in draw())
        faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        zero_grad()
        region = (torch.autocast(torch.device(args.device).type, dtype=torch.bfloat16)
                  if args.autocast
                  else contextlib.nullcontext())
        with region:
            loss = forward(data)
        loss.backward()
        update()
        value = loss.item()
        dt = time.perf_counter() - t0
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
        kind = "warmup" if step < args.warmup else "timed"
        print(f"step {step} {kind} step_s {dt:.6f} loss {value.hex()} minflt {faults}",
              flush=True)
    copies.close()
    print(f"peak_rss_kb {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}", flush=True)
    if args.emulate:
        print(f"emulated_checks {fumi_emulate.calls()}", flush=True)
        print(f"emulated_own_s {fumi_emulate.own_seconds()!r}", flush=True)


if __name__ == "__main__":
    main()
