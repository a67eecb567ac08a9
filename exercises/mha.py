"""Exercise `mha`: multi-head self-attention as an nn.Module, from scratch.

Grade it with `drill check mha.py`. Only `MultiHeadAttention` is graded; you
may add helpers (for example your own attention function) in this file.

Contract
--------
Parameters
    q_proj, k_proj, v_proj, o_proj: each nn.Linear(d_model, d_model, bias=False),
    with exactly these attribute names. The grader copies *your* weights into
    the reference, so random initialisation is fine, but the names and shapes
    must match. n_heads divides d_model; d_head = d_model // n_heads.
Heads
    Head h uses the feature slice [h*d_head, (h+1)*d_head) of each projection's
    output. Internally heads are laid out (B, n_heads, T, d_head).
Shapes
    x: (B, T, d_model) -> (B, T, d_model).
Mask
    Optional bool tensor broadcastable to (B, n_heads, T, T); True = "may
    attend" (as in F.scaled_dot_product_attention). None = attend to all.
    A query with no allowed key must produce a finite output.
Dtypes
    Output dtype = input dtype. fp16/bf16 inputs must not produce NaN or inf
    where the fp32 computation is finite.
Gradients
    Must reach x and all four weights: no .detach(), no torch.no_grad()
    around the computation, no NumPy.
Grading
    Modules are called in training mode (gradients are graded), so they hold
    no dropout (or build it with p = 0): two identical calls must give
    identical outputs. Any module whose .weight has nn.Linear's (out, in)
    layout may stand in for nn.Linear. Before a half-precision test the grader
    casts your module to the input's dtype (module.to(dtype)). Code that needs
    no gradient (a mask, or a bias built from it) may run under torch.no_grad(); the graded
    computation may not.
Forbidden
    F.scaled_dot_product_attention, nn.MultiheadAttention and
    F.multi_head_attention_forward.
"""

import math

import torch
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        # Create q_proj, k_proj, v_proj, o_proj here (bias=False) and keep
        # n_heads / d_head around for forward().
        raise NotImplementedError("write MultiHeadAttention.__init__")

    def forward(self, x, mask=None):
        """x: (B, T, d_model); mask as in `attention`, broadcastable to (B, n_heads, T, T).
        Returns (B, T, d_model)."""
        # Things to think about:
        # - Splitting heads: (B, T, d_model) -> (B, T, n_heads, d_head) is a
        #   view; which two axes must then swap to reach (B, n_heads, T, d_head)?
        #   A direct .view(B, n_heads, T, d_head) has the right shape and the
        #   wrong contents.
        # - Merging heads back is the same question in reverse (and may need
        #   .contiguous() or .reshape before the view).
        # - The scale uses the size of one head, not d_model.
        # - Masking, fully blocked rows and half precision: everything from
        #   the `attention` exercise applies here.
        # - Do not forget the last step after merging the heads.
        raise NotImplementedError("write MultiHeadAttention.forward")
