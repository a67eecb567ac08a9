"""Rotary position embeddings (RoPE) in both pairing conventions.

Each pair of features (a, b) of a query/key at position m is rotated by the
angle m * theta_i, theta_i = base^(-2i/d), i = 0 .. d/2 - 1. Because a
rotation by m then the transpose of a rotation by n is a rotation by m - n,
q.k after RoPE depends only on the offset m - n: that is the whole point.

Two ways to pick the pairs, and checkpoints are tied to one of them:
- "half" (Hugging Face Llama, GPT-NeoX): pair (i, i + d/2).
- "interleaved" (Meta's original Llama, GPT-J): pair (2i, 2i + 1).
They are the same function up to a fixed permutation of the features
(`half_to_interleaved_perm`), which is why HF permutes q/k weights when it
converts Meta checkpoints.

Angles are always computed in fp32: in bf16 a position like 3000 is already
rounded to a multiple of 16, which would scramble the high frequencies.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from .backend import acc_dtype, resolve

CONVENTIONS: tuple[str, ...] = ("half", "interleaved")


def _check_d_head(d_head: int) -> None:
    if d_head <= 0 or d_head % 2 != 0:
        raise ValueError(f"RoPE needs a positive even head dim, got d_head={d_head}")


def check_convention(convention: str) -> str:
    """`convention` if it is known, else ValueError naming it."""
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown RoPE convention {convention!r}: expected one of {', '.join(CONVENTIONS)}")
    return convention


def rope_angles(
    positions: Tensor | Sequence[int], d_head: int, base: float = 10000.0
) -> tuple[Tensor, Tensor]:
    """(cos, sin) of m * theta_i in fp32, each (T, d_head / 2), on positions' device.

    theta_i is computed as 1 / base^(2i/d) in fp32, the same arithmetic as
    Hugging Face's Llama, so the reference matches it to the last bit or two.
    """
    _check_d_head(d_head)
    if not base > 0:
        raise ValueError(f"RoPE base must be positive, got base={base}")
    positions = torch.as_tensor(positions)
    if positions.dim() != 1:
        raise ValueError(f"positions must be 1-D (T,), got shape {tuple(positions.shape)}")
    if positions.is_floating_point() or positions.is_complex():
        raise ValueError(f"positions must be integers, got dtype {positions.dtype}")
    exponents = torch.arange(0, d_head, 2, dtype=torch.int64, device=positions.device).float() / d_head
    inv_freq = 1.0 / (base**exponents)
    angles = positions.float()[:, None] * inv_freq[None, :]
    return angles.cos(), angles.sin()


def half_to_interleaved_perm(d_head: int) -> Tensor:
    """Index tensor p with `x_half[..., p]` laid out in the interleaved convention.

    In "half", pair i lives at features (i, i + d/2); in "interleaved" at
    (2i, 2i+1). So interleaved feature 2i comes from half feature i and
    interleaved 2i+1 from half i + d/2:
    apply_rope(x[..., p], pos, convention="interleaved")
        == apply_rope(x, pos, convention="half")[..., p].
    """
    _check_d_head(d_head)
    half = d_head // 2
    return torch.stack([torch.arange(half), torch.arange(half) + half], dim=-1).reshape(d_head)


def apply_rope(
    x: Tensor,
    positions: Tensor | Sequence[int],
    base: float = 10000.0,
    convention: str = "half",
    impl: str | None = None,
) -> Tensor:
    """Rotate x (..., T, d_head) by its positions (T,); returns x.dtype.

    The rotation is done in fp32 (fp64 for fp64 input; the angles themselves
    are always fp32, as the exercise contract says) and rounded once at the end. The "fused"
    path uses the rotate-half formulation (x * cos + rot(x) * sin over whole
    vectors, what fused RoPE kernels compute); "math" rotates each pair with
    the 2x2 rotation written out. Same numbers, different code: a cross-check.
    """
    check_convention(convention)
    if x.dim() < 2:
        raise ValueError(f"apply_rope expects x of shape (..., T, d_head), got {tuple(x.shape)}")
    t, d_head = x.shape[-2], x.shape[-1]
    _check_d_head(d_head)
    positions = torch.as_tensor(positions, device=x.device)
    if positions.shape != (t,):
        raise ValueError(f"positions must have shape (T,)=({t},), got {tuple(positions.shape)}")
    acc = acc_dtype(x.dtype)
    cos, sin = (t.to(acc) for t in rope_angles(positions, d_head, base))
    if resolve(impl) == "fused":
        out = _rope_rotate_half(x.to(acc), cos, sin, convention)
    else:
        out = _rope_pairs(x.to(acc), cos, sin, convention)
    return out.to(x.dtype)


def _rope_rotate_half(x: Tensor, cos: Tensor, sin: Tensor, convention: str) -> Tensor:
    """x * cos + rot(x) * sin, with cos/sin spread over the full feature dim."""
    if convention == "half":
        cos_f, sin_f = torch.cat([cos, cos], dim=-1), torch.cat([sin, sin], dim=-1)
        x1, x2 = x.chunk(2, dim=-1)
        rotated = torch.cat([-x2, x1], dim=-1)
    else:
        cos_f, sin_f = cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)
        pairs = x.unflatten(-1, (-1, 2))
        rotated = torch.stack([-pairs[..., 1], pairs[..., 0]], dim=-1).flatten(-2)
    return x * cos_f + rotated * sin_f


def _rope_pairs(x: Tensor, cos: Tensor, sin: Tensor, convention: str) -> Tensor:
    """Each pair (a, b) -> (a cos - b sin, a sin + b cos), pairs picked by convention."""
    half = x.shape[-1] // 2
    if convention == "half":
        a, b = x[..., :half], x[..., half:]
    else:
        a, b = x[..., 0::2], x[..., 1::2]
    ra = a * cos - b * sin
    rb = a * sin + b * cos
    if convention == "half":
        return torch.cat([ra, rb], dim=-1)
    return torch.stack([ra, rb], dim=-1).flatten(-2)
