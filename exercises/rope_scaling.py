"""Exercise `rope_scaling`: RoPE's inverse frequencies stretched for a longer context.

Grade it with `drill check rope_scaling.py`. `scaled_inv_freq` is graded; you
may add helpers in this file.

Contract
--------
scaled_inv_freq(d_head, base, kind, factor=1.0, *, original_max_position=8192, seq_len=None,
                beta_fast=32.0, beta_slow=1.0, low_freq_factor=1.0, high_freq_factor=4.0)
    -> (inv_freq (d_head / 2,) fp32, attention_scale: a Python float)
    The formulas of transformers' modeling_rope_utils. d = d_head (even),
    i = 0 .. d/2 - 1, inv_i = base ** (-2i / d), L0 = original_max_position.
    "default"  inv_i.
    "linear"   inv_i / factor (position interpolation).
    "ntk"      inv_i computed with base * factor ** (d / (d - 2)) as the base (static NTK-aware).
    "dynamic"  L = max(seq_len or L0, L0); the base becomes
               base * (factor * L / L0 - (factor - 1)) ** (d / (d - 2)): unchanged while L <= L0.
    "yarn"     c(n) = d * ln(L0 / (2 pi n)) / (2 ln base);
               low = max(floor(c(beta_fast)), 0), high = min(ceil(c(beta_slow)), d - 1),
               high += 0.001 if they are equal; ramp_i = clamp((i - low) / (high - low), 0, 1);
               inv_i' = inv_i / factor * ramp_i + inv_i * (1 - ramp_i);
               attention_scale = 0.1 * ln(factor) + 1 (1.0 when factor <= 1).
    "llama3"   wavelen_i = 2 pi / inv_i; wavelen > L0 / low_freq_factor: inv_i / factor;
               wavelen < L0 / high_freq_factor: inv_i; otherwise, with
               s = (L0 / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor):
               (1 - s) * inv_i / factor + s * inv_i.
    attention_scale is 1.0 for every kind but "yarn". Any other kind raises
    ValueError. Compute in float64 or fp32; inv_freq is compared within a
    relative 1e-5, attention_scale within 1e-9.
Example
    scaled_inv_freq(4, 10000.0, "linear", 2.0) gives (tensor([0.5, 0.005]), 1.0);
    scaled_inv_freq(4, 10000.0, "yarn", 4.0)[1] is 0.1 * ln 4 + 1 = 1.1386...
Forbidden
    transformers (not importable here): the point is the formulas.
"""

import math

import torch


def scaled_inv_freq(d_head, base, kind, factor=1.0, *, original_max_position=8192, seq_len=None,
                    beta_fast=32.0, beta_slow=1.0, low_freq_factor=1.0, high_freq_factor=4.0):
    """(inv_freq (d_head / 2,) fp32, attention_scale float) for one scaling kind."""
    # Things to think about:
    # - Which kinds change the base, and which divide the frequencies themselves?
    # - Why the exponent d / (d - 2): what happens to the lowest frequency?
    # - What must "dynamic" return for a sequence no longer than the trained context?
    # - In YaRN, which dimensions keep their frequency: the fast-turning ones or the slow ones?
    # - A wavelength counts positions per full turn: how many radians is a turn?
    # - What should happen with a kind you have never heard of?
    raise NotImplementedError("write scaled_inv_freq")
