"""Reference models for benches, tests, the demos and `flbridge coverage`:
a small CNN with synthetic images, and a small GPT-style causal language
model with a synthetic token batch generator.

The model is deliberately ordinary (nanoGPT's layout: packed q/k/v
projection split three ways, causal mask by masked_fill, pre-LN blocks,
GELU MLP, token embedding tied to the output projection), so the ops it
dispatches are the ones a real training step sends to a chip.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, d: int, heads: int, ctx: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        # True where a query may look (itself and earlier positions)
        self.register_buffer("causal", torch.tril(torch.ones(ctx, ctx, dtype=torch.bool)), persistent=False)

    def forward(self, x):
        b, t, d = x.shape
        hd = d // self.heads
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, hd).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(~self.causal[:t, :t], float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d: int, heads: int, ctx: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads, ctx)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """A 2-block GPT: hidden 64, 4 heads, vocabulary 256, up to 320
    positions; 136,960 parameters.  Built deterministically from `seed`
    (the global RNG is left as it was)."""

    def __init__(self, vocab: int = 256, d: int = 64, heads: int = 4, layers: int = 2, ctx: int = 320,
                 seed: int = 0):
        super().__init__()
        self.ctx = ctx
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(ctx, d)
            self.blocks = nn.ModuleList(Block(d, heads, ctx) for _ in range(layers))
            self.ln_f = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)
            self.head.weight = self.tok.weight          # tied: one matrix, two uses
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets=None):
        t = idx.shape[1]
        if t > self.ctx:
            raise ValueError(f"sequence of {t} tokens is longer than the model's {self.ctx} positions")
        pos = torch.arange(t, device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def token_batch(batch: int = 2, seq: int = 12, vocab: int = 256, seed: int = 0):
    """(inputs, targets): int64 [batch, seq] each, targets shifted by one
    position, from a fixed pattern with noise so a model can learn it."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, vocab, (batch, 1), generator=g)
    step = torch.randint(1, 8, (batch, 1), generator=g)
    seq_all = (start + step * torch.arange(seq + 1)) % vocab
    noise = torch.rand(batch, seq + 1, generator=g) < 0.1
    seq_all = torch.where(noise, torch.randint(0, vocab, (batch, seq + 1), generator=g), seq_all)
    return seq_all[:, :-1].contiguous(), seq_all[:, 1:].contiguous()


class SmallCNN(nn.Module):
    """conv, batch norm, ReLU, pooling, linear (cross-entropy on top)."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.pool = nn.AdaptiveAvgPool2d((2, 2))
        self.fc = nn.Linear(16 * 2 * 2, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.relu(self.conv2(x))
        return self.fc(torch.flatten(self.pool(x), 1))


def synthetic_batch(n: int, classes: int = 10, seed: int = 0):
    """Images whose class sets a colour pattern (no dataset download needed)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    x = torch.randn(n, 3, 16, 16, generator=g) * 0.5
    x[:, y % 3] += (y.float() / classes).view(n, 1, 1).expand(n, 16, 16).unsqueeze(1).squeeze(1)
    return x, y


def example_cnn():
    """The demo's SmallCNN with a batch of 8 images and cross-entropy loss
    (`flbridge coverage flbridge.demos.models:example_cnn`)."""
    x, y = synthetic_batch(8)
    return SmallCNN(), (x,), lambda out: torch.nn.functional.cross_entropy(out, y.to(out.device))


def example_gpt():
    """TinyGPT with a batch of 2x12 tokens; its own loss
    (`flbridge coverage flbridge.demos.models:example_gpt`)."""
    x, y = token_batch()
    return TinyGPT(), (x, y), lambda out: out[1]
