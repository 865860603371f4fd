"""Healthy: a tiny Transformer encoder language model.

Block 1 is hand-written causal self-attention: the scores come from
torch.baddbmm(mask, q, k^T, alpha=1/sqrt(d)) where mask is an additive causal mask holding
-inf above the diagonal, then softmax. Block 2 is an nn.TransformerEncoder layer run with a
src_key_padding_mask (the tail of some sequences is padding; no row is fully masked).
Embeddings, LayerNorm, Adam. The final LayerNorm follows the post-norm encoder layer, so its
input rows are already normalised: the mean that aten::native_layer_norm returns (an auxiliary
output saved for backward) is ~1e-8, pure rounding noise. Healthy and common."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus_common import forward_ctx, report, setup

VOCAB, D, HEADS, T, B = 64, 64, 4, 16, 6


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)

    def forward(self, x):
        b, t, _ = x.shape
        hd = D // HEADS
        q, k, v = self.qkv(x).split(D, dim=2)
        # (b, t, D) -> (b*heads, t, hd)
        q, k, v = (z.reshape(b, t, HEADS, hd).transpose(1, 2).reshape(b * HEADS, t, hd)
                   for z in (q, k, v))
        mask = torch.full((t, t), float("-inf")).triu(1)
        mask = mask.to(q.dtype).expand(b * HEADS, t, t)
        scores = torch.baddbmm(mask, q, k.transpose(1, 2), beta=1.0, alpha=1.0 / math.sqrt(hd))
        att = torch.softmax(scores, dim=-1)
        y = torch.bmm(att, v).reshape(b, HEADS, t, hd).transpose(1, 2).reshape(b, t, D)
        return self.proj(y)


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.pos = nn.Embedding(T, D)
        self.ln1 = nn.LayerNorm(D)
        self.att = CausalSelfAttention()
        layer = nn.TransformerEncoderLayer(D, HEADS, dim_feedforward=128, dropout=0.0,
                                           batch_first=True)
        self.enc = nn.TransformerEncoder(layer, num_layers=1, enable_nested_tensor=False)
        self.lnf = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB)

    def forward(self, idx, pad):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        x = x + self.att(self.ln1(x))
        x = self.enc(x, src_key_padding_mask=pad)
        return self.head(self.lnf(x))


def main():
    setup(2)
    model = LM()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    # Sequences with a learnable structure: the next token is (token + 1) mod VOCAB mostly.
    lengths = torch.tensor([T, T - 3, T, T - 5, T - 1, T])   # never 0: no fully masked row
    pad = torch.arange(T)[None, :] >= lengths[:, None]
    losses = []
    for _ in range(6):
        start = torch.randint(0, VOCAB, (B, 1))
        seq = (start + torch.arange(T + 1)[None, :]) % VOCAB
        noise = torch.rand(B, T + 1) < 0.1
        seq = torch.where(noise, torch.randint(0, VOCAB, (B, T + 1)), seq)
        inp, tgt = seq[:, :-1], seq[:, 1:].clone()
        tgt[pad] = -100   # padded positions are not scored
        with forward_ctx():
            logits = model(inp, pad)
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), tgt.reshape(-1),
                               ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    report("healthy_transformer", losses)


if __name__ == "__main__":
    main()
