"""Exercise `mla`: DeepSeek-V2's multi-head latent attention, with decoupled RoPE and a latent cache.

Grade it with `drill check mla.py`. Only `MLA` is graded; you may add helpers
(your own RoPE, your own RMSNorm) in this file.

Contract
--------
Sizes
    d_n = qk_nope_head_dim, d_r = qk_rope_head_dim (even), d_v = v_head_dim,
    r = kv_lora_rank, H = n_heads.
Parameters (transformers' DeepseekV2Attention names, q_lora_rank=None, all bias=False)
    q_proj: Linear(d_model, H * (d_n + d_r))
    kv_a_proj_with_mqa: Linear(d_model, r + d_r)
    kv_a_layernorm: an RMSNorm over r features (as in `rmsnorm`) with .weight (r,) and eps
    kv_b_proj: Linear(r, H * (d_n + d_v))
    o_proj: Linear(H * d_v, d_model)
Calls
    forward(x, past=None): x (B, T_new, d_model) holds only the new tokens, at
    positions T_past .. T_past + T_new - 1. past is None or the (c_kv, k_rope)
    pair a previous call returned: c_kv (B, T_past, r), k_rope (B, T_past, d_r).
Per call
    q = q_proj(x); head h is features [h (d_n + d_r), (h + 1)(d_n + d_r)):
    q_nope its first d_n, q_rope its last d_r.
    a = kv_a_proj_with_mqa(x): c_kv = kv_a_layernorm(a[..., :r]);
    k_rope = a[..., r:], one vector per token shared by every head.
    RoPE (base rope_base, over the d_r features, in the file's CONVENTION as in
    `rope`) on q_rope and k_rope at the new tokens' positions; nothing else is
    rotated. Append the new c_kv and k_rope to the past ones.
    kv_b_proj(c_kv_all): head h is features [h (d_n + d_v), ...): k_nope its
    first d_n, v its last d_v.
    score = (q_nope . k_nope + q_rope . k_rope) / sqrt(d_n + d_r), causal over
    past + new; out = o_proj of the heads' outputs concatenated (head h at
    [h d_v, (h + 1) d_v)).
Returns
    (out (B, T_new, d_model), (c_kv_all (B, T, r), k_rope_all (B, T, d_r))),
    T = T_past + T_new, all in x's dtype. The cache is exactly those two
    tensors: c_kv after the norm, k_rope after RoPE, nothing per head.
Equivalence
    Any split of a sequence into calls gives the outputs and the cache of one
    full causal pass.
State
    None kept between calls: the grader runs two sequences through one module,
    their calls interleaved. Everything about the past is in `past`.
Gradients
    Must reach x and every parameter (kv_a_layernorm.weight included).
Grading
    Modules are called in training mode and hold no dropout. Before a
    half-precision test the grader casts your module to the input's dtype.
    YaRN's softmax-scale correction is not part of the contract.
Forbidden
    F.scaled_dot_product_attention, nn.MultiheadAttention,
    F.multi_head_attention_forward, F.rms_norm and nn.RMSNorm (and the layer
    norm ops).
Reported (not failing unless --strict)
    Whether a decode step expands the whole latent cache through kv_b_proj
    (naive) or absorbs it (kv_b_proj's key half folded into the query, its
    value half applied after the softmax), with the decode step's FLOPs at a
    few cache lengths. Both pass; --strict fails the naive form.
"""

import math

import torch
from torch import nn

# Which RoPE pairing you implement, as in the `rope` exercise: "half" pairs
# (i, i + d/2); DeepSeek's own checkpoints pair (2i, 2i + 1): declare "interleaved".
CONVENTION = "half"


class MLA(nn.Module):
    def __init__(self, d_model: int, n_heads: int, kv_lora_rank: int, qk_nope_head_dim: int,
                 qk_rope_head_dim: int, v_head_dim: int, rope_base: float = 10000.0, eps: float = 1e-6):
        super().__init__()
        # Create q_proj, kv_a_proj_with_mqa, kv_a_layernorm (with .weight), kv_b_proj and o_proj
        # (bias=False), and keep the sizes, rope_base and eps for forward().
        raise NotImplementedError("write MLA.__init__")

    def forward(self, x, past=None):
        """x: (B, T_new, d_model), the new tokens only; past: None or (c_kv, k_rope) from the previous call.
        Returns (out (B, T_new, d_model), (c_kv_all (B, T, r), k_rope_all (B, T, d_r)))."""
        # Things to think about:
        # - Which parts are rotated? Only q_rope and k_rope: the latent c_kv carries no position, so
        #   kv_b_proj could be folded into the query.
        # - k_rope is one d_r vector per token, shared by all heads: broadcast it in the score, do not
        #   store it per head.
        # - The cache is (c_kv, k_rope): c_kv after kv_a_layernorm, k_rope after RoPE. Not the keys and
        #   values kv_b_proj makes from it.
        # - In both splits the rotary part comes last: [q_nope, q_rope] per head, [latent, k_rope] in a.
        # - The softmax scale is 1/sqrt(d_n + d_r): the length of a whole query head.
        # - T_past comes from past[0].shape[1]; the new tokens' positions start there.
        # - Keep nothing on self between calls.
        raise NotImplementedError("write MLA.forward")
