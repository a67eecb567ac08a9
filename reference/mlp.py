"""SwiGLU feed-forward: down(silu(gate(x)) * up(x)).

The gate lets the network multiply two projections instead of squashing one,
which trains better than a plain GELU MLP at the same cost. Three matrices
instead of two, so the hidden width is 8/3 * d_model (not 4 * d_model) to keep
the parameter count, rounded up to a multiple of 256 for efficient matmuls.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import _compat
from .backend import acc_dtype, resolve


def ffn_hidden_dim(d_model: int, multiple_of: int = 256) -> int:
    """int(8 * d_model / 3) rounded UP to a multiple of `multiple_of` (4096 -> 11008)."""
    if d_model <= 0:
        raise ValueError(f"d_model must be positive, got d_model={d_model}")
    if multiple_of <= 0:
        raise ValueError(f"multiple_of must be positive, got multiple_of={multiple_of}")
    hidden = int(8 * d_model / 3)
    return multiple_of * -(-hidden // multiple_of)


def swiglu(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor, impl: str | None = None) -> Tensor:
    """down(silu(gate(x)) * up(x)) with `nn.Linear.weight` tensors (out, in), no bias.

    "math" writes silu as g * sigmoid(g) and computes the gate product in fp32;
    "fused" uses F.silu (or liger's fused silu*mul kernel on CUDA).
    """
    if w_gate.shape != w_up.shape:
        raise ValueError(f"gate and up weights differ in shape: {tuple(w_gate.shape)} vs {tuple(w_up.shape)}")
    if w_down.shape != (w_gate.shape[1], w_gate.shape[0]):
        raise ValueError(
            f"down weight must be {(w_gate.shape[1], w_gate.shape[0])}, got {tuple(w_down.shape)}"
        )
    gate, up = F.linear(x, w_gate), F.linear(x, w_up)
    if resolve(impl) == "math":
        acc = acc_dtype(x.dtype)
        g = gate.to(acc)
        hidden = (g * torch.sigmoid(g) * up.to(acc)).to(x.dtype)
    else:
        liger = _compat.use_liger(x, "silu_mul")
        hidden = liger.apply(gate, up) if liger is not None else F.silu(gate) * up
    return F.linear(hidden, w_down)


class SwiGLU(nn.Module):
    """SwiGLU MLP with Hugging Face Llama's names: gate_proj, up_proj, down_proj."""

    def __init__(self, d_model: int, d_ff: int, impl: str | None = None) -> None:
        super().__init__()
        if d_model <= 0 or d_ff <= 0:
            raise ValueError(f"SwiGLU sizes must be positive, got d_model={d_model}, d_ff={d_ff}")
        self.impl = impl
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return swiglu(x, self.gate_proj.weight, self.up_proj.weight, self.down_proj.weight, impl=self.impl)
