"""RoPE's inverse frequencies after context-extension scaling: the formulas of transformers' modeling_rope_utils.

A model trained with RoPE at context L0 (`original_max_position`) is stretched
to longer contexts by changing its frequencies, inv_i = base ** (-2i / d):
- "linear" (position interpolation) divides every frequency by the factor;
- "ntk" (static NTK-aware) keeps the high frequencies and stretches the low ones
  by raising the base to base * factor ** (d / (d - 2));
- "dynamic" does the same with a factor grown from the current length L,
  base * (factor * L / L0 - (factor - 1)) ** (d / (d - 2)), and nothing while L <= L0;
- "yarn" blends interpolated (inv / factor) and original frequencies with a
  linear ramp over the dimensions between two correction dims, the dims whose
  wavelength fits beta_fast and beta_slow turns into L0, and asks attention to
  scale its logits by 0.1 ln(factor) + 1;
- "llama3" (Llama 3.1) divides the long wavelengths (beyond L0 / low_freq_factor)
  by the factor, keeps the short ones (under L0 / high_freq_factor) and moves
  smoothly between the two bands.
Everything is computed in float64 from the formulas and returned as fp32, so
this differs from transformers' fp32 arithmetic by its rounding only.
"""

from __future__ import annotations

import math

import torch

KINDS = ("default", "linear", "ntk", "dynamic", "yarn", "llama3")


def _inv(d: int, base: float) -> list[float]:
    return [base ** (-2.0 * i / d) for i in range(d // 2)]


def ntk_exponent(d: int) -> float:
    """d / (d - 2): the power NTK-aware scaling raises the factor to, so the lowest frequency is divided by it."""
    return d / (d - 2)


def yarn_correction_dim(d: int, base: float, original_max_position: int, rotations: float) -> float:
    """The (fractional) dimension whose wavelength turns `rotations` times over `original_max_position` tokens."""
    return d * math.log(original_max_position / (2 * math.pi * rotations)) / (2 * math.log(base))


def yarn_bounds(d: int, base: float, original_max_position: int, beta_fast: float, beta_slow: float) -> tuple[float,
                                                                                                            float]:
    """(low, high) of the ramp, truncated to integers and to [0, d - 1], high nudged by 0.001 when they meet."""
    low = max(math.floor(yarn_correction_dim(d, base, original_max_position, beta_fast)), 0)
    high = min(math.ceil(yarn_correction_dim(d, base, original_max_position, beta_slow)), d - 1)
    return float(low), float(high) + (0.001 if low == high else 0.0)


def yarn_attention_scale(factor: float) -> float:
    return 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0


def llama3_edges(original_max_position: int, low_freq_factor: float, high_freq_factor: float) -> tuple[float, float]:
    """(long, short): wavelengths above `long` are divided by the factor, below `short` kept."""
    return original_max_position / low_freq_factor, original_max_position / high_freq_factor


def scaled_inv_freq(d_head: int, base: float, kind: str, factor: float = 1.0, *, original_max_position: int = 8192,
                    seq_len: int | None = None, beta_fast: float = 32.0, beta_slow: float = 1.0,
                    low_freq_factor: float = 1.0, high_freq_factor: float = 4.0) -> tuple[torch.Tensor, float]:
    """(inv_freq (d_head / 2,) fp32, attention_scale) for one scaling `kind`; ValueError for any other kind."""
    if kind not in KINDS:
        raise ValueError(f"unknown RoPE scaling kind {kind!r}; expected one of {', '.join(KINDS)}")
    if d_head <= 2 or d_head % 2:
        raise ValueError(f"d_head must be even and > 2, got {d_head}")
    d, l0 = d_head, original_max_position
    inv = _inv(d, base)
    scale = 1.0
    if kind == "linear":
        inv = [f / factor for f in inv]
    elif kind == "ntk":
        inv = _inv(d, base * factor ** ntk_exponent(d))
    elif kind == "dynamic":
        length = max(seq_len if seq_len is not None else l0, l0)
        inv = _inv(d, base * (factor * length / l0 - (factor - 1)) ** ntk_exponent(d))
    elif kind == "yarn":
        low, high = yarn_bounds(d, base, l0, beta_fast, beta_slow)
        ramps = [min(max((i - low) / (high - low), 0.0), 1.0) for i in range(d // 2)]
        inv = [f / factor * r + f * (1 - r) for f, r in zip(inv, ramps, strict=True)]
        scale = yarn_attention_scale(factor)
    elif kind == "llama3":
        long_edge, short_edge = llama3_edges(l0, low_freq_factor, high_freq_factor)
        out = []
        for f in inv:
            wavelen = 2 * math.pi / f
            if wavelen > long_edge:
                out.append(f / factor)
            elif wavelen < short_edge:
                out.append(f)
            else:
                s = (l0 / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
                out.append((1 - s) * f / factor + s * f)
        inv = out
    return torch.tensor(inv, dtype=torch.float64).to(torch.float32), float(scale)
