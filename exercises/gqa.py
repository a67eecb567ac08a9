"""Exercise `gqa`: grouped-query causal self-attention, from scratch.

Grade it with `drill check gqa.py`. Only `GroupedQueryAttention` is graded;
you may add helpers (for example your own attention function) in this file.

Contract
--------
Parameters
    d_head = d_model // n_heads, and n_kv_heads divides n_heads.
    q_proj: nn.Linear(d_model, n_heads * d_head, bias=False)
    k_proj, v_proj: nn.Linear(d_model, n_kv_heads * d_head, bias=False)
    o_proj: nn.Linear(n_heads * d_head, d_model, bias=False)
    Exactly these attribute names: the grader copies your weights into the
    reference. Head h uses feature slice [h*d_head, (h+1)*d_head) of its
    projection, as in `mha`.
Groups
    With group = n_heads // n_kv_heads, query head h reads KV head
    h // group: consecutive query heads share a KV head (the layout of
    torch.repeat_interleave and of SDPA's enable_gqa). n_kv_heads == n_heads
    is plain multi-head attention; n_kv_heads == 1 is multi-query attention.
Attention
    Causal: the token at position t attends to positions 0..t, itself
    included. Scale 1/sqrt(d_head).
Shapes
    x: (B, T, d_model) -> (B, T, d_model).
Dtypes
    Output dtype = input dtype; fp16/bf16 must not give NaN or inf where the
    fp32 computation is finite.
Gradients
    Must reach x and all four weights: no .detach(), no torch.no_grad() around
    the computation, no NumPy.
Grading
    Modules are called in training mode (gradients are graded), so they hold
    no dropout (or build it with p = 0): two identical calls must give
    identical outputs. Any module whose .weight has nn.Linear's (out, in)
    layout may stand in for nn.Linear. Before a half-precision test the grader
    casts your module to the input's dtype (module.to(dtype)). Code that needs
    no gradient (the causal mask) may run under torch.no_grad(); the graded
    computation may not.
Forbidden
    F.scaled_dot_product_attention, nn.MultiheadAttention and
    F.multi_head_attention_forward.
Reported (not failing unless --strict)
    Whether K/V get materialised at n_heads heads. Sharing KV heads exists to
    save exactly that memory; an implementation that never copies K/V to
    n_heads heads is what an interviewer hopes to see.
"""

import math

import torch
from torch import nn


class GroupedQueryAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int):
        super().__init__()
        # Create q_proj, k_proj, v_proj, o_proj (bias=False) with the shapes
        # above, and keep n_heads, n_kv_heads and d_head for forward().
        raise NotImplementedError("write GroupedQueryAttention.__init__")

    def forward(self, x):
        """Causal self-attention, x: (B, T, d_model) -> (B, T, d_model)."""
        # Things to think about:
        # - q has n_heads heads, k and v only n_kv_heads. Which query heads
        #   share a KV head? Heads 0..group-1 use KV head 0, not heads
        #   0, n_kv, 2*n_kv, ... (that is what .repeat would give you).
        # - Can you avoid copying K/V to n_heads heads? Try viewing q as
        #   (B, n_kv_heads, group, T, d_head) and letting broadcasting or
        #   einsum pair each group with its KV head.
        # - The causal mask must let a token see itself (the diagonal).
        # - Scale by 1/sqrt(d_head), not by d_model.
        # - Merge heads back to (B, T, n_heads * d_head) and apply o_proj.
        raise NotImplementedError("write GroupedQueryAttention.forward")
