"""Attention that also returns the log-sum-exp of its scores, three ways: math, PyTorch's fused kernel, tiles.

`flash_attention` exercise's ground truth. `attention_lse` is the answer
(out, lse) with the bottom-right causal alignment of FlashAttention-2 (query
i sits at position T_k - T_q + i) and the contract's convention for a query
that sees no key: zeros, lse = -inf. Its "fused" path is PyTorch's own CPU
flash kernel (`aten._scaled_dot_product_flash_attention_for_cpu`, the op
`F.scaled_dot_product_attention` runs on CPU), the one place torch exposes
the lse of a fused kernel on every build; elsewhere (CUDA, a torch without
that op) it falls back to the math path. `flash_attention_tiled` is the
FlashAttention-2 forward written with tiles and an online softmax (running
max m, running sum l, the running output rescaled when m grows, tiles
entirely above the diagonal skipped), the algorithm the exercise asks for;
the tests keep all three in agreement.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .attention import causal_mask
from .backend import acc_dtype, resolve


def _check(q: Tensor, k: Tensor, v: Tensor) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be (B, H, T, d), got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if q.shape[:2] != k.shape[:2] or k.shape[:3] != v.shape[:3] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)} do not fit together")


def _visible(t_q: int, t_k: int, causal: bool, device) -> Tensor | None:
    return causal_mask(t_q, t_k, device=device) if causal else None


def attention_lse(
    q: Tensor, k: Tensor, v: Tensor, causal: bool = False, *, scale: float | None = None, impl: str | None = None
) -> tuple[Tensor, Tensor]:
    """(out (B, H, T_q, d_v) in q.dtype, lse (B, H, T_q) fp32): attention and the logsumexp of its scaled scores.

    Computed in fp32 (fp64 stays fp64). `causal` is bottom-right aligned; a
    query row with no visible key gives out = 0 and lse = -inf on both paths.
    """
    _check(q, k, v)
    t_q, t_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    acc = acc_dtype(q.dtype)
    qf, kf, vf = q.to(acc), k.to(acc), v.to(acc)
    mask = _visible(t_q, t_k, causal, q.device)
    if resolve(impl) == "fused":
        fused = _fused_cpu(qf, kf, vf, mask, scale)
        if fused is not None:
            out, lse = fused
            return _dead_rows(out, lse, mask, q.dtype)
    scores = (qf @ kf.transpose(-2, -1)) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    weights = torch.exp(scores - lse.masked_fill(torch.isinf(lse), 0.0).unsqueeze(-1))
    return _dead_rows(weights @ vf, lse, mask, q.dtype)


def _dead_rows(out: Tensor, lse: Tensor, mask: Tensor | None, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """Rows that see no key: out 0, lse -inf (the kernels leave 0 or NaN there)."""
    if mask is not None:
        dead = ~mask.any(dim=-1)
        if bool(dead.any()):
            out = out.masked_fill(dead.unsqueeze(-1), 0.0)
            lse = lse.masked_fill(dead, float("-inf"))
    return out.to(dtype), lse.to(torch.float32)


def _fused_cpu(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float) -> tuple[Tensor, Tensor] | None:
    """PyTorch's CPU flash kernel, which returns (out, lse); None where it does not exist or cannot run."""
    op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if op is None or q.device.type != "cpu":
        return None
    bias = None
    if mask is not None:  # additive, so the alignment is ours (its is_causal is top-left)
        bias = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(~mask, float("-inf"))
    try:
        out, lse = op(q, k, v, 0.0, False, attn_mask=bias, scale=scale)
    except (RuntimeError, TypeError):  # an older schema (no attn_mask), an unsupported dtype
        return None
    return out, lse


def flash_attention_tiled(
    q: Tensor, k: Tensor, v: Tensor, causal: bool = False, *, block_q: int = 64, block_k: int = 64,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """The FlashAttention-2 forward pass in PyTorch: (out in q.dtype, lse fp32), one score tile alive at a time.

    For each tile of `block_q` queries, the key tiles it can see are visited
    in order; m (running row max), l (running sum of exp(s - m)) and the
    unnormalised output are rescaled by exp(m_old - m_new) whenever m grows,
    and divided by l once at the end. With `causal`, key tiles entirely above
    the (bottom-right aligned) diagonal are never computed.
    """
    _check(q, k, v)
    b, h, t_q, d = q.shape
    t_k, d_v = k.shape[-2], v.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    acc = acc_dtype(q.dtype)
    out = torch.zeros(b, h, t_q, d_v, dtype=acc, device=q.device)
    lse = torch.full((b, h, t_q), float("-inf"), dtype=torch.float32, device=q.device)
    offset = t_k - t_q  # query i sits at position offset + i
    for q0 in range(0, t_q, block_q):
        q1 = min(q0 + block_q, t_q)
        qt = q[:, :, q0:q1].to(acc) * scale
        m = torch.full((b, h, q1 - q0), float("-inf"), dtype=acc, device=q.device)
        l_sum = torch.zeros_like(m)
        o = torch.zeros(b, h, q1 - q0, d_v, dtype=acc, device=q.device)
        last_key = t_k if not causal else min(t_k, offset + q1)  # keys at or past it: above the diagonal
        for k0 in range(0, max(last_key, 0), block_k):
            k1 = min(k0 + block_k, t_k)
            s = qt @ k[:, :, k0:k1].to(acc).transpose(-2, -1)
            if causal and k1 - 1 > offset + q0:  # the tile crosses the diagonal
                rows = torch.arange(q0, q1, device=q.device).unsqueeze(-1) + offset
                s = s.masked_fill(torch.arange(k0, k1, device=q.device) > rows, float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))
            safe = m_new.masked_fill(torch.isinf(m_new), 0.0)  # a row that has seen no key yet stays at 0
            p = torch.exp(s - safe.unsqueeze(-1))
            alpha = torch.exp(m - safe)
            l_sum = alpha * l_sum + p.sum(dim=-1)
            o = alpha.unsqueeze(-1) * o + p @ v[:, :, k0:k1].to(acc)
            m = m_new
        seen = l_sum > 0
        out[:, :, q0:q1] = torch.where(seen.unsqueeze(-1), o / l_sum.clamp_min(1e-30).unsqueeze(-1), 0.0)
        lse[:, :, q0:q1] = torch.where(seen, m + torch.log(l_sum.clamp_min(1e-30)), float("-inf")).float()
    return out.to(q.dtype), lse


def flash_attention_backward_tiled(
    q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, grad_out: Tensor, causal: bool = False, *,
    block_q: int = 64, block_k: int = 64, scale: float | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """FlashAttention-2's backward in PyTorch: (dq, dk, dv) in q's, k's, v's dtypes, accumulated in fp32.

    D = rowsum(grad_out * out) once; then key tiles outside, query tiles
    inside (each key tile's dk, dv finished before the next; dq accumulated
    across key tiles), P rebuilt per tile as exp(S - lse) (0 on a row with
    lse = -inf), tiles entirely above the bottom-right diagonal skipped. Only
    a (block_q, block_k) tile of S, P, dP or dS exists at a time.
    """
    _check(q, k, v)
    b, h, t_q, d = q.shape
    t_k = k.shape[-2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    acc = acc_dtype(q.dtype)
    qf, kf, vf, gf = (t.to(acc) for t in (q, k, v, grad_out))
    lse_f = lse.to(acc)
    dead = torch.isneginf(lse_f)
    lse_safe = lse_f.masked_fill(dead, float("inf"))  # exp(s - inf) = 0: a row that sees no key adds nothing
    big_d = (gf * out.to(acc)).sum(dim=-1)
    dq = torch.zeros_like(qf)
    dk = torch.zeros_like(kf)
    dv = torch.zeros_like(vf)
    offset = t_k - t_q
    for k0 in range(0, t_k, block_k):
        k1 = min(k0 + block_k, t_k)
        kt, vt = kf[:, :, k0:k1], vf[:, :, k0:k1]
        first_q = max(0, k0 - offset) if causal else 0  # query tiles before it see none of these keys
        for q0 in range((first_q // block_q) * block_q, t_q, block_q):
            q1 = min(q0 + block_q, t_q)
            s = (qf[:, :, q0:q1] @ kt.transpose(-2, -1)) * scale
            if causal and k1 - 1 > offset + q0:  # the tile crosses the diagonal
                rows = torch.arange(q0, q1, device=q.device).unsqueeze(-1) + offset
                s = s.masked_fill(torch.arange(k0, k1, device=q.device) > rows, float("-inf"))
            p = torch.exp(s - lse_safe[:, :, q0:q1].unsqueeze(-1))
            g_t = gf[:, :, q0:q1]
            dv[:, :, k0:k1] += p.transpose(-2, -1) @ g_t
            ds = p * (g_t @ vt.transpose(-2, -1) - big_d[:, :, q0:q1].unsqueeze(-1))
            dq[:, :, q0:q1] += (ds @ kt) * scale
            dk[:, :, k0:k1] += (ds.transpose(-2, -1) @ qf[:, :, q0:q1]) * scale
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)
