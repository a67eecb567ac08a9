"""Exercise `rmsnorm`: root-mean-square layer normalisation, from scratch.

Grade it with `drill check rmsnorm.py`. Only `RMSNorm` is graded.

Contract
--------
Parameters
    weight: nn.Parameter of shape (dim,), initialised to ones (attribute name
    `weight`). No bias. `eps` defaults to 1e-6.
Computation
    Over the last dimension only: y = x / sqrt(mean(x**2) + eps) * weight.
    Unlike LayerNorm there is no mean subtraction.
Shapes
    x: (..., dim) with any number of leading dims -> same shape.
Dtypes
    Accumulate in fp32 whatever the input dtype (squares of fp16 values
    overflow above ~256, and bf16 sums lose precision), then return x.dtype.
Default
    eps defaults to 1e-6, Llama's value (some code bases use 1e-5): a model is
    trained with one eps, and most callers rely on the default.
Gradients
    Must reach x and weight: no .detach(), no torch.no_grad(), no NumPy.
Grading
    Modules are called in training mode (gradients are graded), so they hold
    no dropout (or build it with p = 0): two identical calls must give
    identical outputs. Before a half-precision test the grader casts your
    module to the input's dtype (module.to(dtype)).
Forbidden
    F.rms_norm, nn.RMSNorm, F.layer_norm, nn.LayerNorm.
"""

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        # Store eps and create the learnable `weight` of shape (dim,).
        raise NotImplementedError("write RMSNorm.__init__")

    def forward(self, x):
        """Normalise over the last dim: x / sqrt(mean(x**2) + eps) * weight.
        Accumulate in fp32; return x.dtype."""
        # Things to think about:
        # - Which axis is averaged, and does the result keep that axis so it
        #   broadcasts back against x?
        # - Where exactly does eps go: inside or outside the square root?
        # - In which dtype do you square and average? What dtype do you hand
        #   back?
        # - torch.rsqrt exists and is a single op.
        raise NotImplementedError("write RMSNorm.forward")
