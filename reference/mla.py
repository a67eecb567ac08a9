"""Multi-head latent attention (DeepSeek-V2's MLA) with decoupled RoPE and a latent cache.

Each token is squeezed into one small latent c_kv (kv_lora_rank numbers,
RMS-normalised) plus one shared rotary key k_rope (qk_rope_head_dim
numbers); that pair is all the cache keeps. Every head's keys and values
are re-expanded from c_kv by kv_b_proj. RoPE cannot live in the latent (a
position-dependent rotation between the latent and the head projection
would stop the projection from being folded into the query), so each head
gets a separate, unprojected rotary part: q_rope from the query, k_rope
shared by all heads. The score is the sum of both dot products, over
sqrt(qk_nope_head_dim + qk_rope_head_dim).

Weight names follow transformers' DeepseekV2Attention with q_lora_rank=None:
q_proj, kv_a_proj_with_mqa, kv_a_layernorm.weight, kv_b_proj, o_proj (all
without bias, nn.Linear's (out, in) layout).

Two equivalent ways to attend, both here as a cross-check:
- "naive": kv_b_proj expands the whole latent cache into per-head k_nope
  and v, then ordinary attention;
- "absorbed": kv_b_proj's key half is folded into the query (q_nope W_uk
  lives in latent space, scored against c_kv directly) and its value half
  is applied after the softmax (the weighted latent times W_uv): the cache
  is never expanded, which is what makes MLA's decode step cheap.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from .attention import sdpa
from .norm import rms_norm
from .rope import apply_rope, check_convention

PARAMS = ("q_proj.weight", "kv_a_proj_with_mqa.weight", "kv_a_layernorm.weight", "kv_b_proj.weight", "o_proj.weight")


def mla_attention(
    x: Tensor,
    weights: dict[str, Tensor],
    n_heads: int,
    kv_lora_rank: int,
    qk_nope_head_dim: int,
    qk_rope_head_dim: int,
    v_head_dim: int,
    past: tuple[Tensor, Tensor] | None = None,
    *,
    rope_base: float = 10000.0,
    eps: float = 1e-6,
    convention: str = "half",
    absorbed: bool = False,
) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    """x (B, T_new, d_model) at positions T_past .. T_past + T_new - 1; past None or (c_kv, k_rope).

    Returns (out (B, T_new, d_model), (c_kv_all (B, T, r), k_rope_all (B, T, d_r))), all in x's dtype.
    """
    check_convention(convention)
    h, r, d_n, d_r, d_v = n_heads, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim
    b, t, _ = x.shape
    t_past = 0 if past is None else past[0].shape[1]
    positions = torch.arange(t_past, t_past + t, device=x.device)

    q = F.linear(x, weights["q_proj.weight"]).view(b, t, h, d_n + d_r).transpose(1, 2)  # (B, H, T, d_n + d_r)
    q_nope, q_rope = q.split([d_n, d_r], dim=-1)
    q_rope = apply_rope(q_rope, positions, rope_base, convention, impl="math")
    a = F.linear(x, weights["kv_a_proj_with_mqa.weight"])  # (B, T, r + d_r)
    c_kv = rms_norm(a[..., :r], weights["kv_a_layernorm.weight"], eps, impl="math")
    k_rope = apply_rope(a[..., r:], positions, rope_base, convention, impl="math")  # (B, T, d_r): one for all heads
    if past is not None:
        c_kv = torch.cat([past[0].to(x.dtype), c_kv], dim=1)
        k_rope = torch.cat([past[1].to(x.dtype), k_rope], dim=1)
    t_all = c_kv.shape[1]
    scale = 1.0 / math.sqrt(d_n + d_r)
    w_b = weights["kv_b_proj.weight"].view(h, d_n + d_v, r)

    if not absorbed:
        kv = F.linear(c_kv, weights["kv_b_proj.weight"]).view(b, t_all, h, d_n + d_v).transpose(1, 2)
        k_nope, v = kv.split([d_n, d_v], dim=-1)
        k = torch.cat([k_nope, k_rope[:, None].expand(b, h, t_all, d_r)], dim=-1)
        o = sdpa(torch.cat([q_nope, q_rope], dim=-1), k, v, causal=True, scale=scale, impl="math")
    else:
        w_uk, w_uv = w_b[:, :d_n], w_b[:, d_n:]  # (H, d_n, r), (H, d_v, r)
        q_latent = torch.einsum("bhtn,hnr->bhtr", q_nope, w_uk)
        scores = (torch.einsum("bhtr,bsr->bhts", q_latent, c_kv)
                  + torch.einsum("bhtd,bsd->bhts", q_rope, k_rope)).float() * scale
        allowed = torch.arange(t_all, device=x.device)[None, :] <= positions[:, None]
        probs = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1).to(x.dtype)
        o = torch.einsum("bhtr,hvr->bhtv", torch.einsum("bhts,bsr->bhtr", probs, c_kv), w_uv)
    out = F.linear(o.transpose(1, 2).reshape(b, t, h * d_v), weights["o_proj.weight"])
    return out, (c_kv, k_rope)


def decode_flops(n_heads: int, kv_lora_rank: int, qk_nope_head_dim: int, qk_rope_head_dim: int, v_head_dim: int,
                 t_cache: int, absorbed: bool) -> int:
    """Multiply-adds x 2 of one decoded token's attention over a cache of t_cache positions (projections of
    the new token excluded): naive expands every cached latent through kv_b_proj, absorbed never does."""
    h, r, d_n, d_r, d_v = n_heads, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim
    if absorbed:
        per = h * (d_n * r + t_cache * (r + d_r) + t_cache * r + r * d_v)
    else:
        per = t_cache * r * h * (d_n + d_v) + h * t_cache * (d_n + d_r) + h * t_cache * d_v
    return 2 * per
