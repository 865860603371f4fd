"""Healthy: token embeddings followed by pre-LayerNorm GELU MLP blocks with residual
connections, mean-pooled classifier head, AdamW with weight decay."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus_common import forward_ctx, report, setup

VOCAB, D, T, B = 40, 64, 16, 16


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(D)
        self.fc1 = nn.Linear(D, 4 * D)
        self.fc2 = nn.Linear(4 * D, D)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.ln(x))))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.blocks = nn.Sequential(Block(), Block())
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, 4)

    def forward(self, idx):
        return self.head(self.ln(self.blocks(self.emb(idx))).mean(dim=1))


def main():
    setup(5)
    model = Model()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    losses = []
    for _ in range(8):
        idx = torch.randint(0, VOCAB, (B, T))
        y = idx[:, 0] % 4   # the class is a function of the first token
        with forward_ctx():
            logits = model(idx)
        loss = F.cross_entropy(logits.float(), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    report("healthy_layernorm_gelu", losses)


if __name__ == "__main__":
    main()
