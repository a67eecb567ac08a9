"""A preallocated, static-shape KV cache (the gpt-fast layout).

Buffers of shape (B, n_kv_heads, max_len, d_head) are allocated once and
written in place; nothing is concatenated per step. That keeps memory flat,
avoids O(T^2) copying over a generation, and gives CUDA graphs / torch.compile
fixed shapes. Keys are stored *after* RoPE, so past tokens are never rotated
(or projected) again.

Inference only: in-place writes into a buffer are not meant to be
differentiated through across steps.
"""

from __future__ import annotations

import torch
from torch import Tensor


class KVCache:
    """Static K/V buffers for one attention layer; `update` appends and returns the filled views."""

    def __init__(
        self,
        batch: int,
        n_kv_heads: int,
        max_len: int,
        d_head: int,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        for name, value in (("batch", batch), ("n_kv_heads", n_kv_heads), ("max_len", max_len), ("d_head", d_head)):
            if value <= 0:
                raise ValueError(f"KVCache {name} must be positive, got {name}={value}")
        shape = (batch, n_kv_heads, max_len, d_head)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self._length = 0

    @property
    def length(self) -> int:
        """Number of positions filled so far (= absolute position of the next token)."""
        return self._length

    @property
    def max_len(self) -> int:
        return self.k.shape[2]

    def update(self, k_new: Tensor, v_new: Tensor) -> tuple[Tensor, Tensor]:
        """Write (B, Hkv, T_new, d_head) keys/values at [length, length + T_new); return views up to there."""
        b, h, _, d = self.k.shape
        for name, t in (("k_new", k_new), ("v_new", v_new)):
            if t.dim() != 4 or t.shape[0] != b or t.shape[1] != h or t.shape[3] != d:
                raise ValueError(f"{name} must be (B={b}, Hkv={h}, T, d_head={d}), got {tuple(t.shape)}")
            if t.dtype != self.k.dtype:
                raise ValueError(f"{name} dtype {t.dtype} does not match the cache dtype {self.k.dtype}")
        if k_new.shape[2] != v_new.shape[2]:
            raise ValueError(f"k_new has {k_new.shape[2]} positions but v_new has {v_new.shape[2]}")
        start, end = self._length, self._length + k_new.shape[2]
        if end > self.max_len:
            raise ValueError(
                f"KV cache overflow: {start} cached + {k_new.shape[2]} new = {end} > max_len={self.max_len}"
            )
        self.k[:, :, start:end] = k_new
        self.v[:, :, start:end] = v_new
        self._length = end
        return self.k[:, :, :end], self.v[:, :, :end]

    def reset(self) -> None:
        """Forget every position (buffers are kept; stale values are never read)."""
        self._length = 0
