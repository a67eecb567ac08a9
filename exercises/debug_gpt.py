# drill debug_gpt seed=7 bugs=4 (keep this line)
"""A single-file mini GPT (nanoGPT-style) with planted bugs: find them and fix them.

Every bug keeps the file running: shapes agree and training runs, the loss just misbehaves.
`drill check debug_gpt.py` says how many planted bugs remain and where they were planted
(`--explain` names them); `drill hint debug_gpt` gives hints one at a time. Parameter names and
shapes must stay as they are: the grader loads its own weights into your model by name.

Part 2, once every bug is fixed: make `generate(..., use_cache=True)` run each decode step on the
new token only, keeping keys and values of the earlier positions in a cache of your design.
"""

import math
from dataclasses import dataclass

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


def causal_mask(size):
    """(size, size) bool, True where a query may attend to a key."""
    return torch.triu(torch.ones(size, size, dtype=torch.bool))


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=False)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=False)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        self.register_buffer("mask", causal_mask(config.block_size), persistent=False)

    def split_heads(self, x):
        """(B, T, C) -> (B, n_head, T, head_size)"""
        B, T, C = x.size()
        return x.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)

    def merge_heads(self, y):
        """(B, n_head, T, head_size) -> (B, T, C)"""
        B, H, T, D = y.size()
        return y.transpose(1, 2).contiguous().view(B, T, H * D)

    def scores(self, q, k):
        """Attention scores (B, n_head, T_q, T_k)."""
        return q @ k.transpose(-2, -1)

    def masked_softmax(self, att, mask):
        """Softmax over the keys, the masked-out keys removed."""
        att = att.masked_fill(~mask, float("-inf"))
        return F.softmax(att, dim=-1)

    def mix(self, att, v):
        """The attention weights applied to the values."""
        att = self.attn_dropout(att)
        return att @ v

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        att = self.scores(q, k)
        att = self.masked_softmax(att, self.mask[:T, :T])
        y = self.merge_heads(self.mix(att, v))
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.w_gate = nn.Linear(config.n_embd, 4 * config.n_embd, bias=False)
        self.w_up = nn.Linear(config.n_embd, 4 * config.n_embd, bias=False)
        self.w_down = nn.Linear(4 * config.n_embd, config.n_embd, bias=False)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.w_down(F.silu(self.w_gate(x)) * self.w_up(x)))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.h = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def embed(self, idx):
        """Token plus position embeddings, (B, T, C)."""
        B, T = idx.size()
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        tok_emb = self.wte(idx)
        pos_emb = self.wpe(pos)
        return self.drop(tok_emb + pos_emb)

    def forward(self, idx, targets=None):
        x = self.embed(idx)
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        logits = self.lm_head(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss


def split_batch(batch):
    """(B, T + 1) token ids -> inputs (B, T) and next-token targets (B, T)."""
    return batch[:, :-1], batch[:, :-1]


def train_step(model, batch, optimizer):
    """One optimisation step on one batch; returns the loss as a float."""
    inputs, targets = split_batch(batch)
    _, loss = model(inputs, targets)
    loss.backward()
    optimizer.step()
    return loss.item()


@torch.no_grad()
def generate(model, idx, max_new_tokens, use_cache=False):
    """Greedy decoding: (B, T) -> (B, T + max_new_tokens)."""
    model.eval()
    if use_cache:
        raise NotImplementedError("part 2: decode with a KV cache")
    for _ in range(max_new_tokens):
        idx_cond = idx[:, -model.config.block_size:]
        logits, _ = model(idx_cond)
        logits = logits[:, -1, :]
        idx_next = torch.argmax(logits, dim=-1, keepdim=True)
        idx = torch.cat((idx, idx_next), dim=1)
    return idx


if __name__ == "__main__":
    torch.manual_seed(0)
    config = GPTConfig()
    model = GPT(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randint(0, config.vocab_size, (8, config.block_size + 1))
    for step in range(20):
        loss = train_step(model, data, optimizer)
        if step % 5 == 0:
            print(f"step {step}: loss {loss:.4f}")
    print(generate(model, data[:1, :4], 8).tolist())
