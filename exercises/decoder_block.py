"""Exercise `decoder_block`: one pre-norm Llama decoder layer, assembled from scratch.

Grade it with `drill check decoder_block.py` (add `--in-model` to run your
block as every layer of a small Llama). Only `DecoderBlock` is graded; write
your own RMSNorm, RoPE, attention and SwiGLU in this file (they are the
exercises `rmsnorm`, `rope`, `gqa` and `swiglu`).

Contract
--------
Parameters (the grader copies its weights in through exactly these paths)
    attn_norm.weight, mlp_norm.weight: (d_model,), RMSNorm weights (eps = eps).
    attn.q_proj: Linear(d_model, n_heads * d_head), attn.k_proj and attn.v_proj:
    Linear(d_model, n_kv_heads * d_head), attn.o_proj: Linear(n_heads * d_head,
    d_model), with d_head = d_model // n_heads, all bias=False, laid out as in `gqa`
    (query head h reads KV head h // (n_heads // n_kv_heads)).
    mlp.w_gate, mlp.w_up: Linear(d_model, d_ff), mlp.w_down: Linear(d_ff, d_model),
    bias=False, as in `swiglu`.
    `attn` and `mlp` may be any modules holding these projections.
Forward
    forward(x, positions): x (B, T, d_model), positions (T,) int64, strictly
    increasing but not necessarily 0..T-1 (an offset, gaps).
        h   = x + attn(attn_norm(x))
        out = h + mlp(mlp_norm(h))
    (Llama's layout: no norm on a branch's output as in OLMo 2, no q/k norm as in
    OLMo 2 or Qwen3.)
    attn is causal grouped-query attention, scale 1/sqrt(d_head), with RoPE
    (base rope_base) on q and k (never v) at `positions`. Causal by index:
    token t sees tokens 0..t, whatever the position values.
    RMSNorm as in `rmsnorm`: x / sqrt(mean(x**2) + eps) * weight over the
    last dim, statistics in fp32, result in x's dtype.
    mlp(x) = w_down(silu(w_gate(x)) * w_up(x)).
RoPE convention
    CONVENTION below: "half" pairs feature i with i + d_head/2 (Hugging Face),
    "interleaved" pairs 2i with 2i+1 (Meta's Llama); "half" if you delete it.
    Angles in fp32 whatever x's dtype.
Dtypes
    Returns (B, T, d_model) in x's dtype. Half-precision tests convert the whole
    block with .to(dtype); no NaN/inf where the fp32 block is finite.
Gradients
    Must reach x and every parameter: no .detach(), no torch.no_grad(), no NumPy.
Forbidden
    F.scaled_dot_product_attention, nn.MultiheadAttention,
    F.multi_head_attention_forward, F.rms_norm, nn.RMSNorm, F.layer_norm,
    nn.LayerNorm.
"""

import math

import torch
from torch import nn

CONVENTION = "half"  # or "interleaved": which RoPE pairing your code implements


class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads, d_ff, eps=1e-6, rope_base=10000.0):
        super().__init__()
        # Create attn_norm and mlp_norm (each with a (d_model,) weight of ones),
        # attn with q_proj/k_proj/v_proj/o_proj and mlp with w_gate/w_up/w_down,
        # and keep the sizes, eps and rope_base for forward().
        raise NotImplementedError("write DecoderBlock.__init__")

    def forward(self, x, positions):
        """x: (B, T, d_model), positions: (T,) int64 -> (B, T, d_model)."""
        # Things to think about:
        # - Pre-norm: each branch reads a normalised copy of the residual stream,
        #   but the residual itself adds the branch output to the raw x (and h).
        # - Two norms, each with its own weight: attn_norm before attention,
        #   mlp_norm before the MLP.
        # - RoPE goes on q and k after the head split, at `positions` (not
        #   0..T-1), and never on v.
        # - The causal mask follows the index t in the sequence, not the
        #   position values, and a token sees itself.
        # - silu goes on the gate projection, then multiplies the up projection.
        # - In fp16/bf16, keep the norm statistics and the RoPE angles in fp32.
        raise NotImplementedError("write DecoderBlock.forward")
