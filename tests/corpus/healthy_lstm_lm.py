"""Healthy: word-level LSTM language model (Embedding -> 2-layer LSTM -> Linear) on a
synthetic token stream, truncated BPTT, gradient-norm clipping, plain SGD."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus_common import forward_ctx, report, setup

VOCAB, EMB, HID, BPTT, B = 60, 32, 64, 12, 8


class LSTMLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, EMB)
        self.rnn = nn.LSTM(EMB, HID, num_layers=2)
        self.out = nn.Linear(HID, VOCAB)

    def forward(self, x, state):
        h, state = self.rnn(self.emb(x), state)
        return self.out(h), state


def token_stream(n):
    # A small "grammar": each word picks its successor from a few likely ones.
    succ = torch.randint(0, VOCAB, (VOCAB, 3))
    toks = [0]
    for _ in range(n - 1):
        toks.append(int(succ[toks[-1], torch.randint(0, 3, ()).item()]))
    return torch.tensor(toks)


def main():
    setup(3)
    data = token_stream(B * (BPTT * 6 + 1)).reshape(B, -1).t().contiguous()   # (time, batch)
    model = LSTMLM()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    state = None
    losses = []
    for i in range(6):
        x = data[i * BPTT:(i + 1) * BPTT]
        y = data[i * BPTT + 1:(i + 1) * BPTT + 1]
        if state is not None:
            state = tuple(s.detach() for s in state)
        with forward_ctx():
            logits, state = model(x, state)
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        losses.append(loss.item())
    report("healthy_lstm_lm", losses)


if __name__ == "__main__":
    main()
