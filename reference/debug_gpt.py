"""debug_gpt's fixed model: the starter with every planted bug reverted, for both variants of each slot.

The grader's ground truth. The variant travels in the config (`fused`: one `c_attn` or `q_proj`/`k_proj`/
`v_proj`; `swiglu`: `w_gate`/`w_up`/`w_down` or GELU's `c_fc`/`c_proj`), so one module serves the four
files `drill start debug_gpt` can write; `namespace(fused, swiglu)` gives the names a written file
defines, which the grader's probes (drill/judge/dgpt.py) call on this module and on the learner's file
alike. A test holds this module equal to the template's fixed text for all four variants.
`generate(..., use_cache=True)` is part 2's answer: one position per decode step, keys and values kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

import torch
import torch.nn as nn
from torch.nn import functional as F


@dataclass
class GPTConfig:
    vocab_size: int = 64
    block_size: int = 16
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 32
    dropout: float = 0.1
    fused: bool = True
    swiglu: bool = False


def causal_mask(size: int) -> torch.Tensor:
    return torch.tril(torch.ones(size, size, dtype=torch.bool))


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        d = config.n_embd
        self.fused = config.fused
        if config.fused:
            self.c_attn = nn.Linear(d, 3 * d, bias=False)
        else:
            self.q_proj = nn.Linear(d, d, bias=False)
            self.k_proj = nn.Linear(d, d, bias=False)
            self.v_proj = nn.Linear(d, d, bias=False)
        self.c_proj = nn.Linear(d, d, bias=False)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head, self.n_embd, self.dropout = config.n_head, d, config.dropout
        self.register_buffer("mask", causal_mask(config.block_size), persistent=False)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        return x.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)

    def merge_heads(self, y: torch.Tensor) -> torch.Tensor:
        B, H, T, D = y.size()
        return y.transpose(1, 2).contiguous().view(B, T, H * D)

    def scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))

    def masked_softmax(self, att: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)

    def mix(self, att: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.attn_dropout(att) @ v

    def qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.fused:
            return self.c_attn(x).split(self.n_embd, dim=2)
        return self.q_proj(x), self.k_proj(x), self.v_proj(x)

    def forward(self, x: torch.Tensor, cache: list | None = None) -> torch.Tensor:
        """`cache` (part 2): a [k, v] pair this call extends with the new positions' keys and values."""
        T = x.size(1)
        q, k, v = (self.split_heads(t) for t in self.qkv(x))
        if cache is not None:
            if cache:
                k, v = torch.cat((cache[0], k), dim=2), torch.cat((cache[1], v), dim=2)
            cache[:] = [k, v]
        T_k = k.size(2)
        mask = self.mask[T_k - T:T_k, :T_k]
        y = self.merge_heads(self.mix(self.masked_softmax(self.scores(q, k), mask), v))
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        d = config.n_embd
        self.swiglu = config.swiglu
        if config.swiglu:
            self.w_gate = nn.Linear(d, 4 * d, bias=False)
            self.w_up = nn.Linear(d, 4 * d, bias=False)
            self.w_down = nn.Linear(4 * d, d, bias=False)
        else:
            self.c_fc = nn.Linear(d, 4 * d, bias=False)
            self.c_proj = nn.Linear(4 * d, d, bias=False)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.swiglu:
            return self.dropout(self.w_down(F.silu(self.w_gate(x)) * self.w_up(x)))
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, cache: list | None = None) -> torch.Tensor:
        x = x + (self.attn(self.ln_1(x)) if cache is None else self.attn(self.ln_1(x), cache))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.h = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def embed(self, idx: torch.Tensor, start: int = 0) -> torch.Tensor:
        pos = torch.arange(start, start + idx.size(1), dtype=torch.long, device=idx.device)
        return self.drop(self.wte(idx) + self.wpe(pos))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None,
                caches: list | None = None, start: int = 0) -> tuple[torch.Tensor, torch.Tensor | None]:
        x = self.embed(idx, start)
        for i, block in enumerate(self.h):
            x = block(x) if caches is None else block(x, caches[i])
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss


def split_batch(batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return batch[:, :-1], batch[:, 1:]


def train_step(model: nn.Module, batch: torch.Tensor, optimizer) -> float:
    inputs, targets = split_batch(batch)
    optimizer.zero_grad(set_to_none=True)
    _, loss = model(inputs, targets)
    loss.backward()
    optimizer.step()
    return loss.item()


@torch.no_grad()
def generate(model: GPT, idx: torch.Tensor, max_new_tokens: int, use_cache: bool = False) -> torch.Tensor:
    """Greedy; with the cache, the prompt (cropped) once, then one position per step while the context
    fits, and a fresh prefill of the cropped context once it no longer does (positions are absolute)."""
    model.eval()
    block = model.config.block_size
    caches = None
    for _ in range(max_new_tokens):
        if not use_cache:
            logits, _ = model(idx[:, -block:])
        elif caches is None or idx.size(1) > block:
            caches = [[] for _ in model.h]
            ctx = idx[:, -block:]
            logits, _ = model(ctx, caches=caches, start=0)
        else:
            logits, _ = model(idx[:, -1:], caches=caches, start=idx.size(1) - 1)
        idx = torch.cat((idx, torch.argmax(logits[:, -1, :], dim=-1, keepdim=True)), dim=1)
    return idx


def namespace(fused: bool, swiglu: bool) -> SimpleNamespace:
    """The names a written debug_gpt file defines, for one variant."""

    def config(**kw):
        return GPTConfig(**kw, fused=fused, swiglu=swiglu)

    return SimpleNamespace(GPTConfig=config, causal_mask=causal_mask, CausalSelfAttention=CausalSelfAttention,
                           MLP=MLP, Block=Block, GPT=GPT, split_batch=split_batch, train_step=train_step,
                           generate=generate)
