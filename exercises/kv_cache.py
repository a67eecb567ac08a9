"""Exercise `kv_cache`: causal self-attention with RoPE and a key/value cache.

Grade it with `drill check kv_cache.py`. Only `CachedSelfAttention` is graded;
you may add helpers (your own RoPE, your own attention) in this file.

Contract
--------
Parameters
    q_proj, k_proj, v_proj, o_proj exactly as in `gqa`: d_head = d_model // n_heads,
    q_proj: Linear(d_model, n_heads*d_head), k_proj/v_proj:
    Linear(d_model, n_kv_heads*d_head), o_proj: Linear(n_heads*d_head, d_model),
    all bias=False. Query head h reads KV head h // (n_heads // n_kv_heads).
    rope_base is the RoPE base (theta_i = rope_base ** (-2i / d_head)).
Calls
    forward(x, past_kv=None) receives only the *new* tokens, x: (B, T_new, d_model).
    past_kv is None on the first call, else (k, v), each
    (B, n_kv_heads, T_past, d_head), exactly as your previous call returned them.
    The new tokens sit at absolute positions T_past .. T_past + T_new - 1.
RoPE
    Applied to q and k, never to v, with each token's absolute position, in
    the file's CONVENTION (as in `rope`): "half" pairs i with i + d_head/2
    (Hugging Face Llama, GPT-NeoX; the default when CONVENTION is absent),
    "interleaved" pairs 2i with 2i + 1 (Meta's Llama, gpt-fast,
    mistral-inference, llama2.c). Angles in fp32.
Cache
    The returned cache holds keys *after* RoPE (so past keys are never
    rotated again) and values as projected: (k_all, v_all), each
    (B, n_kv_heads, T_past + T_new, d_head).
Attention
    Causal over past + new: the new token at position p sees every position
    <= p, including earlier tokens of the same call and itself.
Equivalence
    Any split of a sequence into calls (all at once; a prompt then one token
    at a time; chunks of several tokens) must give the same outputs as one
    full causal pass.
Returns
    (out (B, T_new, d_model), (k_all, v_all)); out has x's dtype.
Gradients
    Must reach x and all four weights: no .detach(), no torch.no_grad() around
    the computation, no NumPy.
Grading
    Modules are called in training mode (gradients are graded), so they hold
    no dropout (or build it with p = 0): two identical calls must give
    identical outputs. Any module whose .weight has nn.Linear's (out, in)
    layout may stand in for nn.Linear. Before a half-precision test the grader
    casts your module to the input's dtype (module.to(dtype)). Code that needs
    no gradient (a cos/sin table, the causal mask) may run under
    torch.no_grad(); the graded computation may not.
Forbidden
    F.scaled_dot_product_attention, nn.MultiheadAttention and
    F.multi_head_attention_forward.
Reported (not failing unless --strict)
    That a decode step's work grows linearly with the cache length and that
    past tokens' projections are never recomputed: that is the point of a cache.
"""

import math

import torch
from torch import nn

# Which RoPE pairing you implement, as in the `rope` exercise: "half" pairs
# (i, i + d_head/2); change to "interleaved" for the pairs (2i, 2i + 1).
CONVENTION = "half"


class CachedSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, rope_base: float = 10000.0):
        super().__init__()
        # Create q_proj, k_proj, v_proj, o_proj as in `gqa` (bias=False) and
        # keep n_heads, n_kv_heads, d_head and rope_base for forward().
        raise NotImplementedError("write CachedSelfAttention.__init__")

    def forward(self, x, past_kv=None):
        """x: (B, T_new, d_model), the new tokens only.
        past_kv: None, or (k, v), each (B, n_kv_heads, T_past, d_head), keys already rotated.
        New tokens sit at absolute positions T_past .. T_past + T_new - 1.
        RoPE (in CONVENTION's pairing) on q and k, causal attention over past + new.
        Returns (out (B, T_new, d_model), (k_all, v_all) with T_past + T_new positions)."""
        # Things to think about:
        # - T_past comes from the cache; the new tokens' positions start there,
        #   not at 0.
        # - Rotate the new keys *before* appending them: cached keys are never
        #   touched again. Values are not rotated at all.
        # - The scores are (T_new, T_past + T_new). The causal mask for that
        #   rectangle is aligned to the bottom-right corner: compare absolute
        #   positions (key position <= query position) rather than reusing
        #   torch.tril of the rectangle, which aligns top-left.
        # - The mask is needed on every call with T_new > 1, not only the first.
        # - Only the new tokens go through the projections; the cache holds
        #   everything you need about the past.
        raise NotImplementedError("write CachedSelfAttention.forward")
