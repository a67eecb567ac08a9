"""Scaled dot-product attention, multi-head and grouped-query attention.

Masks follow `F.scaled_dot_product_attention`: a bool tensor, True = may attend.

Why causal masks here are *bottom-right* aligned: with a KV cache the queries
are the *last* T_q of T_k positions, so query i sits at absolute position
T_k - T_q + i and may see keys 0 .. T_k - T_q + i. SDPA's `is_causal=True` is
top-left aligned (query i sees keys 0 .. i), which is the same thing only when
T_q == T_k; for a decode step (T_q = 1) it would hide every key but the first.
So we pass `is_causal` to the kernel only for square problems and an explicit
mask otherwise.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from . import _compat
from .backend import acc_dtype, logging_kernels, note_kernel, resolve, sdpa_choice
from .rope import apply_rope


def causal_mask(t_q: int, t_k: int, device: torch.device | str | None = None) -> Tensor:
    """Bool (t_q, t_k) mask, True = may attend, bottom-right aligned.

    Query i is at absolute position t_k - t_q + i. When t_q > t_k the first
    t_q - t_k rows have no visible key at all (they are "before" the keys).
    """
    if t_q < 0 or t_k < 0:
        raise ValueError(f"causal_mask needs non-negative lengths, got t_q={t_q}, t_k={t_k}")
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)


def _check_shapes(q: Tensor, k: Tensor, v: Tensor) -> int:
    """Validate SDPA operands; return the GQA group size Hq // Hkv."""
    if q.dim() < 2 or k.dim() != q.dim() or v.dim() != q.dim():
        raise ValueError(
            f"q, k, v must have the same rank >= 2, got shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k head dims differ: d_q={q.shape[-1]}, d_k={k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v lengths differ: T_k={k.shape[-2]}, T_v={v.shape[-2]}")
    if k.shape[:-2] != v.shape[:-2]:
        raise ValueError(f"k and v leading dims differ: {tuple(k.shape[:-2])} vs {tuple(v.shape[:-2])}")
    if q.dim() < 3 or q.shape[-3] == k.shape[-3]:
        return 1
    h_q, h_kv = q.shape[-3], k.shape[-3]
    if h_kv == 0 or h_q % h_kv != 0:
        raise ValueError(f"kv heads must divide query heads: Hq={h_q}, Hkv={h_kv}")
    return h_q // h_kv


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The shape `shapes` broadcast to, by the usual rules; ValueError if they do not.

    torch.broadcast_shapes gives the same answer, but its first call imports
    torch's symbolic-shape machinery (sympy, mpmath: ~500 modules, 0.2-0.7 s),
    which every cold attention, mha and failing kv_cache check used to pay.
    """
    n = max(map(len, shapes), default=0)
    out: list[int] = []
    for dims in zip(*((1,) * (n - len(s)) + tuple(s) for s in shapes), strict=True):  # all n long now
        sizes = {d for d in dims if d != 1}
        if len(sizes) > 1:
            raise ValueError(f"shapes {', '.join(str(tuple(s)) for s in shapes)} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _combined_mask(
    mask: Tensor | None, causal: bool, q_rows: torch.Size, t_k: int, device: torch.device
) -> tuple[Tensor | None, bool]:
    """The effective bool mask, and whether the causal part can go to `is_causal`.

    Returns (mask, use_is_causal). `is_causal` is used only when the problem is
    square (top-left == bottom-right) and there is no other mask; a one-query
    causal step sees every key, so it needs no mask at all.
    """
    t_q = q_rows[-1]
    if mask is not None:
        if mask.dtype != torch.bool:
            raise ValueError(f"mask must be a bool tensor (True = may attend), got dtype {mask.dtype}")
        target = (*q_rows, t_k)
        try:
            fits = broadcast_shape(tuple(mask.shape), target) == target
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to {target}")
        if mask.dim() < 2:  # legal (a (T_k,) key mask, a 0-d flag), but F.sdpa indexes dim -2: give it one
            mask = mask.reshape((1,) * (2 - mask.dim()) + tuple(mask.shape))
        # A view, not a copy. torch 2.4's CPU SDPA reads a (T_q, 1) mask as if
        # its key dim were not broadcast (wrong output, seen on 2.4.1), so the
        # last two dims are always handed over at full size.
        mask = mask.expand(*mask.shape[:-2], t_q, t_k)
    if not causal:
        return mask, False
    if mask is None and t_q == t_k:
        return None, True
    if mask is None and t_q == 1:
        return None, False
    cm = causal_mask(t_q, t_k, device=device)
    return (cm if mask is None else mask & cm), False


def sdpa(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    causal: bool = False,
    scale: float | None = None,
    impl: str | None = None,
) -> Tensor:
    """softmax(q k^T * scale, masked) v, with GQA and bottom-right causal masking.

    q (..., Hq, T_q, d_k), k (..., Hkv, T_k, d_k), v (..., Hkv, T_k, d_v); Hkv
    must divide Hq and query head h reads kv head h // (Hq // Hkv). `mask` is
    bool, True = may attend, broadcastable to (..., Hq, T_q, T_k); `causal`
    ANDs in the bottom-right causal mask. A query row with no visible key
    returns zeros (not NaN) in every dtype and on both paths, with finite
    gradients. Output dtype = q.dtype.
    """
    group = _check_shapes(q, k, v)
    t_q, t_k, d_k = q.shape[-2], k.shape[-2], q.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(d_k)
    if t_k == 0 or t_q == 0:
        # Nothing to attend to (or nobody asking): the defined answer is zeros.
        return q.new_zeros(*q.shape[:-1], v.shape[-1])
    mask, is_causal = _combined_mask(mask, causal, q.shape[:-1], t_k, q.device)

    # Rows with no visible key: let them attend everywhere (keeps softmax and
    # its backward finite), then zero their output. Masking after the fact
    # with NaNs present would poison gradients through 0 * NaN.
    row_ok = None
    if mask is not None:
        row_ok = mask.any(dim=-1, keepdim=True)
        if bool(row_ok.all()):
            row_ok = None
        else:
            mask = mask | ~row_ok

    if resolve(impl) == "fused":
        out = _sdpa_fused(q, k, v, mask, is_causal, scale, group)
    else:
        out = _sdpa_math(q, k, v, mask, is_causal, scale, group)
    if row_ok is not None:
        out = out.masked_fill(~row_ok, 0.0)
    return out


def _sdpa_fused(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool, scale: float, group: int
) -> Tensor:
    """PyTorch's fused SDPA (Flash / memory-efficient / cuDNN / CPU flash).

    `enable_gqa` is used only without an explicit mask: that is the case the
    Flash kernel handles natively; with a mask we expand K/V ourselves so the
    memory-efficient kernel (which does not take GQA everywhere) can run.
    """
    if group > 1:
        if mask is None and _compat.sdpa_has_enable_gqa():
            if logging_kernels():
                note_kernel("sdpa", sdpa_choice(q, k, v, None, is_causal, scale, enable_gqa=True), q.device.type)
            return F.scaled_dot_product_attention(
                q, k, v, is_causal=is_causal, scale=scale, enable_gqa=True
            )
        k = k.repeat_interleave(group, dim=-3)
        v = v.repeat_interleave(group, dim=-3)
    if logging_kernels():
        note_kernel("sdpa", sdpa_choice(q, k, v, mask, is_causal, scale), q.device.type)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale)


def _sdpa_math(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool, scale: float, group: int
) -> Tensor:
    """Textbook attention in fp32 (half inputs are upcast; fp64 stays fp64), cast back at the end."""
    note_kernel("sdpa", "math", q.device.type)
    if group > 1:
        k = k.repeat_interleave(group, dim=-3)
        v = v.repeat_interleave(group, dim=-3)
    acc = acc_dtype(q.dtype)
    scores = (q.to(acc) @ k.to(acc).transpose(-2, -1)) * scale
    if is_causal:
        mask = causal_mask(q.shape[-2], k.shape[-2], device=q.device)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return (weights @ v.to(acc)).to(q.dtype)


def _split_heads(x: Tensor, n_heads: int) -> Tensor:
    """(B, T, n_heads * d_head) -> (B, n_heads, T, d_head); head h = features [h*d, (h+1)*d)."""
    b, t, f = x.shape
    return x.view(b, t, n_heads, f // n_heads).transpose(1, 2)


def _merge_heads(x: Tensor) -> Tensor:
    """(B, H, T, d_head) -> (B, T, H * d_head), inverse of `_split_heads`."""
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)


def _check_heads(d_model: int, n_heads: int, n_kv_heads: int | None = None) -> None:
    if n_heads <= 0:
        raise ValueError(f"n_heads must be positive, got n_heads={n_heads}")
    if d_model % n_heads != 0:
        raise ValueError(f"n_heads={n_heads} does not divide d_model={d_model}")
    if n_kv_heads is not None:
        if n_kv_heads <= 0:
            raise ValueError(f"n_kv_heads must be positive, got n_kv_heads={n_kv_heads}")
        if n_heads % n_kv_heads != 0:
            raise ValueError(f"n_kv_heads={n_kv_heads} does not divide n_heads={n_heads}")


def multi_head_attention(
    x: Tensor,
    w_q: Tensor,
    w_k: Tensor,
    w_v: Tensor,
    w_o: Tensor,
    n_heads: int,
    mask: Tensor | None = None,
    impl: str | None = None,
) -> Tensor:
    """MHA with bias-free projections given as `nn.Linear.weight` tensors (out, in).

    x (B, T, d_model) -> (B, T, d_model). `mask` broadcastable to (B, H, T, T);
    no causal mask unless the caller passes one.
    """
    _check_heads(w_q.shape[0], n_heads)
    q = _split_heads(F.linear(x, w_q), n_heads)
    k = _split_heads(F.linear(x, w_k), n_heads)
    v = _split_heads(F.linear(x, w_v), n_heads)
    return F.linear(_merge_heads(sdpa(q, k, v, mask, impl=impl)), w_o)


def grouped_query_attention(
    x: Tensor,
    w_q: Tensor,
    w_k: Tensor,
    w_v: Tensor,
    w_o: Tensor,
    n_heads: int,
    n_kv_heads: int,
    *,
    positions: Tensor | None = None,
    rope_base: float | None = None,
    causal: bool = True,
    past_kv: tuple[Tensor, Tensor] | None = None,
    impl: str | None = None,
    rope_convention: str = "half",
) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    """GQA self-attention; with `rope_base`/`past_kv`, the kv_cache exercise's semantics.

    x (B, T_new, d_model). `past_kv` = (k, v), each (B, Hkv, T_past, d_head),
    keys already rotated. RoPE (in `rope_convention`, "half" unless the kv_cache
    file declares "interleaved") is applied to q and k when `rope_base`
    or `positions` is given, at `positions` (default T_past .. T_past+T_new-1;
    base 10000 when only positions are given). Attention is causal over past +
    new (bottom-right aligned). Returns (out (B, T_new, d_model), (k_all, v_all)).
    """
    _check_heads(w_q.shape[0], n_heads, n_kv_heads)
    d_head = w_q.shape[0] // n_heads
    if w_k.shape[0] != n_kv_heads * d_head or w_v.shape[0] != n_kv_heads * d_head:
        raise ValueError(
            f"k/v projections must have n_kv_heads*d_head={n_kv_heads * d_head} rows, "
            f"got {w_k.shape[0]} and {w_v.shape[0]}"
        )
    q = _split_heads(F.linear(x, w_q), n_heads)
    k = _split_heads(F.linear(x, w_k), n_kv_heads)
    v = _split_heads(F.linear(x, w_v), n_kv_heads)
    t_past = 0 if past_kv is None else past_kv[0].shape[-2]
    if rope_base is not None or positions is not None:
        if positions is None:
            positions = torch.arange(t_past, t_past + x.shape[1], device=x.device)
        base = 10000.0 if rope_base is None else rope_base
        q = apply_rope(q, positions, base, rope_convention, impl=impl)
        k = apply_rope(k, positions, base, rope_convention, impl=impl)
    if past_kv is not None:
        k = torch.cat([past_kv[0], k], dim=-2)
        v = torch.cat([past_kv[1], v], dim=-2)
    out = sdpa(q, k, v, causal=causal, impl=impl)
    return F.linear(_merge_heads(out), w_o), (k, v)


def attention_backward(
    q: Tensor, k: Tensor, v: Tensor, grad_out: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv): the gradients of sum(sdpa(q, k, v, mask) * grad_out), in closed form.

    With s = 1/sqrt(d_k), P the masked softmax of q k^T s over the keys (a row
    with no allowed key has P = 0, as `sdpa` gives it), dv = P^T grad_out,
    dP = grad_out v^T, dS = P * (dP - rowsum(dP * P)), dq = s dS k and
    dk = s dS^T q. Computed in fp32 (fp64 stays fp64), each returned in its
    input's dtype. q, k, v share their leading dims; `mask` broadcasts to
    (..., T_q, T_k).
    """
    acc = acc_dtype(q.dtype)
    qf, kf, vf, gf = (t.to(acc) for t in (q, k, v, grad_out))
    s = 1.0 / math.sqrt(q.shape[-1])
    scores = (qf @ kf.transpose(-2, -1)) * s
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    top = scores.amax(dim=-1, keepdim=True)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))  # a row with no allowed key: exp(-inf) = 0
    e = torch.exp(scores - top)
    total = e.sum(dim=-1, keepdim=True)
    p = e / torch.where(total > 0, total, torch.ones_like(total))
    dv = p.transpose(-2, -1) @ gf
    dp = gf @ vf.transpose(-2, -1)
    ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))
    dq = (ds @ kf) * s
    dk = (ds.transpose(-2, -1) @ qf) * s
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)
