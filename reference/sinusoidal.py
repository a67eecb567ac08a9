"""Fixed sinusoidal position encodings (Vaswani et al., 2017), in either column layout.

Frequency i (i = 0 .. d_model/2 - 1) is w_i = base ** (-2i / d_model); the
token at position p gets sin(p * w_i) and cos(p * w_i). Wavelengths run
geometrically from 2*pi to 2*pi*base, and PE(p + k) is a fixed linear map
(a rotation per frequency) of PE(p), which is what lets attention read
relative offsets from them.

Where the columns go, and checkpoints are tied to one choice:
- "interleaved" (the paper; Hugging Face's DistilBERT/XLM
  `create_sinusoidal_embeddings`): sin at column 2i, cos at 2i + 1;
- "concat" (tensor2tensor's layout; Hugging Face's
  `MarianSinusoidalPositionalEmbedding`): sin at column i, cos at d_model/2 + i.

The angle p * w_i must be computed in fp32 or better: at position 10000 an
fp16 or bf16 angle is off by whole radians. "fused" computes it in fp32 as a
vectorised outer product (what a model's forward would do); "math" computes
every angle in float64 and rounds the result once, so it is the one closest
to the exact values.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from .backend import resolve

LAYOUTS: tuple[str, ...] = ("interleaved", "concat")


def check_layout(layout: str) -> str:
    """`layout` if it is known, else ValueError naming it."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown sinusoidal layout {layout!r}: expected one of {', '.join(LAYOUTS)}")
    return layout


def sinusoidal_positions(
    positions: Tensor | Sequence[int],
    d_model: int,
    base: float = 10000.0,
    layout: str = "interleaved",
    impl: str | None = None,
) -> Tensor:
    """(T, d_model) fp32 encodings of the (T,) integer `positions`, on positions' device."""
    check_layout(layout)
    if isinstance(d_model, bool) or not isinstance(d_model, int) or d_model <= 0 or d_model % 2:
        raise ValueError(f"d_model must be a positive even int, got {d_model!r}")
    if not base > 0:
        raise ValueError(f"base must be positive, got base={base}")
    positions = torch.as_tensor(positions)
    if positions.dim() != 1 or positions.is_floating_point() or positions.is_complex():
        raise ValueError(f"positions must be a 1-D integer tensor, got {positions.dtype} {tuple(positions.shape)}")
    math_path = resolve(impl) == "math"
    acc = torch.float64 if math_path else torch.float32
    i = torch.arange(d_model // 2, dtype=acc, device=positions.device)
    inv_freq = float(base) ** (-2.0 * i / d_model)
    angles = positions.to(acc)[:, None] * inv_freq[None, :]
    sin, cos = angles.sin(), angles.cos()
    if layout == "interleaved":
        out = torch.stack([sin, cos], dim=-1).flatten(-2)
    else:
        out = torch.cat([sin, cos], dim=-1)
    return out.to(torch.float32)
