"""Sliding-window causal attention and a KV cache that keeps only the window.

Query i of T_q sits at position p_i = T_k - T_q + i (the queries are the last
T_q positions of the keys' sequence) and attends to the `window` keys
p_i - window < j <= p_i, itself included: the mask Hugging Face builds for
Mistral and Gemma's sliding layers (kv_idx > q_idx - window, and causal).
Every query sees at least itself, so no row is ever empty.

Because a query never looks further back than window - 1 positions, a cache
for decoding needs only the last window - 1 keys and values: RollingKVCache
drops everything older after each call, and any split of a sequence into
calls gives the rows one call over the whole sequence gives.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def window_mask(t_q: int, t_k: int, window: int, device: torch.device | str | None = None) -> Tensor:
    """(t_q, t_k) bool, True = may attend: bottom-right aligned, `window` keys per query, itself included."""
    pos_q = torch.arange(t_k - t_q, t_k, device=device).unsqueeze(-1)
    pos_k = torch.arange(t_k, device=device).unsqueeze(0)
    return (pos_k <= pos_q) & (pos_k > pos_q - window)


def _check(q: Tensor, k: Tensor, v: Tensor, window: int) -> None:
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an int >= 1, got {window!r}")
    if q.dim() < 2 or k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v need the same length, got {tuple(k.shape)} and {tuple(v.shape)}")
    if q.shape[-2] > k.shape[-2]:
        raise ValueError(f"T_q = {q.shape[-2]} queries but only T_k = {k.shape[-2]} keys (the contract: T_q <= T_k)")


def sliding_window_attention(q: Tensor, k: Tensor, v: Tensor, window: int) -> Tensor:
    """softmax(q k^T / sqrt(d) over the window band) v; computed in fp32, returned in q.dtype."""
    _check(q, k, v, window)
    t_q, t_k = q.shape[-2], k.shape[-2]
    qf, kf, vf = q.float(), k.float(), v.float()
    scores = (qf @ kf.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~window_mask(t_q, t_k, window, q.device), float("-inf"))
    return (torch.softmax(scores, dim=-1) @ vf).to(q.dtype)


class RollingKVCache:
    """The last window - 1 keys and values of one sequence; `attend` adds the next positions and attends."""

    def __init__(self, window: int) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"window must be an int >= 1, got {window!r}")
        self.window = window
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    def attend(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """q, k, v: (B, H, T_new, d), the next positions; returns their rows of attention over the sequence."""
        k_all = k if self.k is None else torch.cat([self.k, k], dim=-2)
        v_all = v if self.v is None else torch.cat([self.v, v], dim=-2)
        out = sliding_window_attention(q, k_all, v_all, self.window)
        keep = self.window - 1  # the next query looks back window - 1 positions at most
        self.k = k_all[..., k_all.shape[-2] - min(keep, k_all.shape[-2]):, :].clone()
        self.v = v_all[..., v_all.shape[-2] - min(keep, v_all.shape[-2]):, :].clone()
        return out
