"""Symmetric int8 quantisation per row, and the int8 x int8 matmul that consumes it.

The W8A8 layout of LLM.int8() without its outlier split (and of SmoothQuant):
activations get one scale per token (row of a), weights in nn.Linear's (out, in)
layout one scale per output channel (row of b). A row maps its largest
magnitude to 127, so -128 is never produced; a row of zeros keeps scale 1 (its
codes are all 0 and any scale would do, but 0 / 0 must not appear). Codes are
rounded half to even, as torch.round does, and the products are summed as
exact integers before the two scales are applied.
"""

from __future__ import annotations

import torch

QMAX = 127


def quantize_rowwise(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, K) float -> (codes (M, K) int8, scale (M,) fp32); everything computed in fp32."""
    if x.dim() != 2 or not x.is_floating_point():
        raise ValueError(f"x must be a 2-D floating-point tensor, got {x.dtype} of shape {tuple(x.shape)}")
    xf = x.float()
    amax = xf.abs().amax(dim=1)
    scale = torch.where(amax > 0, amax / QMAX, torch.ones_like(amax))
    codes = torch.round(xf / scale[:, None]).clamp(-QMAX, QMAX).to(torch.int8)
    return codes, scale


def int8_matmul(a_q: torch.Tensor, a_s: torch.Tensor, b_q: torch.Tensor, b_s: torch.Tensor) -> torch.Tensor:
    """(M, K) int8 and (N, K) int8 codes with their row scales -> (M, N) fp32 = (a_q @ b_q.T) * a_s * b_s.

    The integer products are summed in int64 (exact for any K a tensor can hold) and the scales applied in
    float64, so the one rounding is the final cast to fp32."""
    if a_q.dtype != torch.int8 or b_q.dtype != torch.int8:
        raise ValueError(f"codes must be int8, got {a_q.dtype} and {b_q.dtype}")
    if a_q.dim() != 2 or b_q.dim() != 2 or a_q.shape[1] != b_q.shape[1]:
        raise ValueError(f"need a_q (M, K) and b_q (N, K), got {tuple(a_q.shape)} and {tuple(b_q.shape)}")
    if a_s.shape != (a_q.shape[0],) or b_s.shape != (b_q.shape[0],):
        raise ValueError(f"need a_s (M,) and b_s (N,), got {tuple(a_s.shape)} and {tuple(b_s.shape)}")
    acc = a_q.long() @ b_q.long().T
    out = acc.double() * a_s.double()[:, None] * b_s.double()[None, :]
    return out.float()
