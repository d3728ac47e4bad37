#!/usr/bin/env python3
"""Peer of examples/transformer:train: the same decoder-only LM in PyTorch 2 on the CPU, one
process, for tokens/s next to the example's on the same machine.

Model as parallel::TransformerLM: token embedding, pre-norm blocks (RMSNorm, causal multi-head
attention with rotary positions on q and k, no biases; RMSNorm, GELU MLP of 4*dim), dropout on
both residual branches, final RMSNorm, linear head; N(0, 0.02) weights. Adam (fused), loss the
mean next-token cross-entropy. Tokens are random (timing only; the step does not depend on them).

  peers_transformer.py [--mode eager|compile] [--layers 2] [--dim 128] [--heads 4]
                       [--context 64] [--batch 16] [--threads 2] [--rounds 30]
One JSON line: {"peer":"torch2","model":"transformer_lm","mode":..,"median_ms":..,"tokens_per_s":..}
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F


class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.gain = torch.nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.gain


def rotary(x, base=10000.0):
    t, d = x.shape[-2], x.shape[-1]
    half = d // 2
    freq = base ** (-torch.arange(half, dtype=torch.float64) / half)
    angle = torch.arange(t, dtype=torch.float64)[:, None] * freq[None, :]
    c, s = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], -1)


class Block(torch.nn.Module):
    def __init__(self, dim, heads, dropout):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.norm1, self.norm2 = RMSNorm(dim), RMSNorm(dim)
        self.wq, self.wk, self.wv, self.wo = (torch.nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.w1 = torch.nn.Linear(dim, 4 * dim, bias=False)
        self.w2 = torch.nn.Linear(4 * dim, dim, bias=False)

    def attention(self, x):
        b, t, d = x.shape
        split = lambda y: y.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        q, k, v = rotary(split(self.wq(x))), rotary(split(self.wk(x))), split(self.wv(x))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(a.transpose(1, 2).reshape(b, t, d))

    def forward(self, x):
        x = x + F.dropout(self.attention(self.norm1(x)), self.dropout, self.training)
        return x + F.dropout(self.w2(F.gelu(self.w1(self.norm2(x)))), self.dropout, self.training)


class LM(torch.nn.Module):
    def __init__(self, vocab, dim, heads, layers, dropout):
        super().__init__()
        self.embedding = torch.nn.Embedding(vocab, dim)
        self.blocks = torch.nn.ModuleList(Block(dim, heads, dropout) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.head = torch.nn.Linear(dim, vocab, bias=False)
        for p in self.parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, 0.0, 0.02)

    def forward(self, tokens):
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["eager", "compile"], default="eager")
    for name, value in [("layers", 2), ("dim", 128), ("heads", 4), ("context", 64), ("batch", 16),
                        ("threads", 2), ("rounds", 30)]:
        p.add_argument("--" + name, type=int, default=value)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(7)
    vocab = 96
    model = LM(vocab, a.dim, a.heads, a.layers, 0.1)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3, fused=True)
    x = torch.randint(0, vocab, (a.batch, a.context))
    y = torch.randint(0, vocab, (a.batch, a.context))

    def loss_of(x, y):
        return F.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))

    forward = torch.compile(loss_of) if a.mode == "compile" else loss_of

    def step():
        opt.zero_grad(set_to_none=True)
        loss = forward(x, y)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(3):
        step()
    times = []
    for _ in range(a.rounds):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    print(json.dumps({"peer": "torch2", "model": "transformer_lm", "mode": a.mode,
                      "threads": a.threads, "median_ms": round(1e3 * median, 3),
                      "tokens_per_s": round(a.batch * a.context / median, 1)}))


if __name__ == "__main__":
    main()
