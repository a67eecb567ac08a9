"""Exercise `swiglu`: the SwiGLU feed-forward block of Llama-style models.

Grade it with `drill check swiglu.py`. Two names are graded:
`ffn_hidden_dim` and `SwiGLU`.

Contract
--------
ffn_hidden_dim(d_model, multiple_of=256) -> int
    Take 8/3 * d_model, truncate it to an int, then round it UP to the next
    multiple of `multiple_of` (a value that is already a multiple stays).
    Example: d_model=4096 -> 10922 -> 11008.
SwiGLU(d_model, d_ff)
    Attributes (exact names, all bias=False):
        w_gate: nn.Linear(d_model, d_ff)
        w_up:   nn.Linear(d_model, d_ff)
        w_down: nn.Linear(d_ff, d_model)
    forward(x) = w_down(silu(w_gate(x)) * w_up(x)), x: (..., d_model) -> same
    shape. silu(z) = z * sigmoid(z). The activation goes on the gate branch
    only.
Dtypes
    Output dtype = input dtype; fp16/bf16 must stay finite where fp32 is.
Gradients
    Must reach x and all three weights: no .detach(), no torch.no_grad(),
    no NumPy.
Grading
    Modules are called in training mode (gradients are graded), so they hold
    no dropout (or build it with p = 0): two identical calls must give
    identical outputs. Any module whose .weight has nn.Linear's (out, in)
    layout may stand in for nn.Linear. Before a half-precision test the grader
    casts your module to the input's dtype (module.to(dtype)).
"""

import math

import torch
from torch import nn


def ffn_hidden_dim(d_model: int, multiple_of: int = 256) -> int:
    """8/3 * d_model, truncated to an int, rounded UP to a multiple of `multiple_of`
    (d_model=4096 -> 11008)."""
    # Think about: integer vs float division, and how to round *up* to a
    # multiple without adding a whole extra block when the value is already
    # a multiple.
    raise NotImplementedError("write ffn_hidden_dim")


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        # Create w_gate, w_up (d_model -> d_ff) and w_down (d_ff -> d_model),
        # all without bias.
        raise NotImplementedError("write SwiGLU.__init__")

    def forward(self, x):
        """w_down(silu(w_gate(x)) * w_up(x))"""
        # Which of the two up-projections is the gate? Which activation is
        # SiLU (also called swish), and which ones are not (ReLU, GELU,
        # plain sigmoid)?
        raise NotImplementedError("write SwiGLU.forward")
