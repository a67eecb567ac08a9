"""ALiBi (Press et al., 2022): attention biased linearly by distance, one slope per head.

Head h adds -slope_h * (distance from the query to the key) to its scores,
so far keys fade out at a rate fixed per head and no position embedding is
needed; models trained that way extrapolate to longer inputs.

Slopes: for n heads, n a power of two, slope_h = 2 ** (-8 (h + 1) / n), a
geometric sequence from 2**(-8/n) down to 2**-8. For other n the paper
takes the slopes of the largest power of two m < n, then the first n - m
slopes of the 2m sequence at even indices (0, 2, 4, ...): the 2m sequence
interleaves the m one with new in-between values, and those are the
in-between ones. BLOOM's `build_alibi_tensor` computes the same slopes.

Bias: query i of t_q sits at absolute position p_i = t_k - t_q + i (the
queries are the last t_q of the t_k positions, as during decoding with a
KV cache), and bias[h, i, j] = -slope_h * (p_i - j). Keys after the query
(j > p_i) get a positive bias: removing them is the causal mask's job.
BLOOM adds slope_h * j instead, which differs from this by -slope_h * p_i,
a constant per query row: softmax does not see it.

"fused" builds the slopes as powers of one fp32 base (BLOOM's arithmetic)
and the bias by broadcasting; "math" follows the paper's recursive rule in
Python floats, one exact power of two at a time, and loops over the bias.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .backend import resolve


def _check_heads(n_heads: int) -> None:
    if isinstance(n_heads, bool) or not isinstance(n_heads, int) or n_heads <= 0:
        raise ValueError(f"n_heads must be a positive int, got {n_heads!r}")


def alibi_slopes(n_heads: int, impl: str | None = None) -> Tensor:
    """(n_heads,) fp32 slopes by the paper's rule (any head count)."""
    _check_heads(n_heads)
    if resolve(impl) == "math":
        return torch.tensor(_paper_slopes(n_heads), dtype=torch.float64).to(torch.float32)
    m = 2 ** math.floor(math.log2(n_heads))
    slopes = torch.full((), 2.0 ** (-8.0 / m)) ** torch.arange(1, m + 1)
    if m < n_heads:
        extra = torch.full((), 2.0 ** (-4.0 / m)) ** torch.arange(1, 2 * (n_heads - m), 2)
        slopes = torch.cat([slopes, extra])
    return slopes.to(torch.float32)


def _paper_slopes(n: int) -> list[float]:
    """The ALiBi paper's recursion: power-of-two sequence, else m's slopes + every other slope of 2m's."""
    if n & (n - 1) == 0:
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]
    m = 2 ** math.floor(math.log2(n))
    return _paper_slopes(m) + _paper_slopes(2 * m)[0::2][: n - m]


def alibi_bias(n_heads: int, t_q: int, t_k: int, impl: str | None = None) -> Tensor:
    """(n_heads, t_q, t_k) fp32: bias[h, i, j] = -slope_h * (t_k - t_q + i - j), queries bottom-right aligned."""
    _check_heads(n_heads)
    for name, size in (("t_q", t_q), ("t_k", t_k)):
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ValueError(f"{name} must be a positive int, got {size!r}")
    if t_q > t_k:
        raise ValueError(f"alibi_bias needs t_q <= t_k, got t_q={t_q}, t_k={t_k}")
    if resolve(impl) == "math":
        slopes = _paper_slopes(n_heads)
        out = torch.empty(n_heads, t_q, t_k, dtype=torch.float64)
        for h in range(n_heads):
            for i in range(t_q):
                for j in range(t_k):
                    out[h, i, j] = -slopes[h] * ((t_k - t_q + i) - j) + 0.0  # + 0.0: 0, not -0, on the diagonal
        return out.to(torch.float32)
    distance = (torch.arange(t_q)[:, None] + (t_k - t_q)) - torch.arange(t_k)[None, :]
    return -alibi_slopes(n_heads)[:, None, None] * distance.to(torch.float32) + 0.0
