"""Exercise `layernorm`: layer normalisation with a learned weight and bias, from scratch.

Grade it with `drill check layernorm.py`. Only `LayerNorm` is graded.

Contract
--------
Parameters
    weight: nn.Parameter of shape (dim,), initialised to ones; bias:
    nn.Parameter of shape (dim,), initialised to zeros (attribute names
    `weight` and `bias`). `eps` defaults to 1e-5.
Computation
    Over the last dimension only:
        y = (x - mean) / sqrt(var + eps) * weight + bias
    where var is the population (biased) variance: the mean of
    (x - mean)**2, dividing by dim, not dim - 1.
Shapes
    x: (..., dim) with any number of leading dims (a single (dim,) vector
    too) -> same shape.
Dtypes
    Accumulate in fp32 or better whatever the input dtype, apply weight and
    bias there too, and return x.dtype (cast once, at the end).
Gradients
    Must reach x, weight and bias: no .detach(), no torch.no_grad(), no NumPy.
Forbidden
    F.layer_norm, torch.layer_norm, nn.LayerNorm, F.group_norm, nn.GroupNorm,
    F.rms_norm, nn.RMSNorm (and any other path to their kernels).
"""

import torch
from torch import nn


class LayerNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        # Store eps and create the learnable `weight` (ones) and `bias` (zeros), both of shape (dim,).
        raise NotImplementedError("write LayerNorm.__init__")

    def forward(self, x):
        """(x - mean) / sqrt(var + eps) * weight + bias over the last dim, var the population variance.
        Accumulate in fp32; return x.dtype."""
        # Things to think about:
        # - torch.var(x, dim) divides by dim - 1 by default. Which variance does
        #   the contract want?
        # - Where exactly does eps go: inside or outside the square root?
        # - A row with mean 1000 and spread 1: is mean(x**2) - mean(x)**2 still
        #   accurate in fp32? What about centring first, then squaring?
        # - fp16 can hold 400 but not 400**2. In which dtype do you square?
        # - Which axis carries the statistics, and does the result keep that axis
        #   so it broadcasts back against x?
        raise NotImplementedError("write LayerNorm.forward")
