"""Global-norm gradient clipping, as a pure function of the gradients.

`torch.nn.utils.clip_grad_norm_` (norm_type 2) and CS336 a1's
`run_gradient_clipping`: one norm over every gradient together, and when it
exceeds `max_norm` every gradient is multiplied by `max_norm / (total + eps)`.
Pure (the gradients in, the clipped copies out) so the grader can compute what a
learner's in-place edit should leave behind without touching anything.
"""

from __future__ import annotations

import torch
from torch import Tensor


def clip_grad_norm(
    grads: list[Tensor | None], max_norm: float, eps: float = 1e-6
) -> tuple[Tensor, list[Tensor | None]]:
    """(total, clipped): the global L2 norm as a 0-dim fp32 tensor (squares summed in float64, so fp16 and
    bf16 gradients of any size stay finite), and each gradient scaled when total > max_norm, in its own dtype
    (None stays None). With no gradient at all the norm is 0 and nothing changes."""
    present = [g for g in grads if g is not None]
    total = torch.zeros((), dtype=torch.float64)
    for g in present:
        total = total + g.detach().to(torch.float64).pow(2).sum()
    total = total.sqrt()
    if float(total) > max_norm:
        coef = max_norm / (float(total) + eps)
        clipped = [None if g is None else (g.detach().to(torch.float64) * coef).to(g.dtype) for g in grads]
    else:
        clipped = [None if g is None else g.detach().clone() for g in grads]
    return total.to(torch.float32), clipped
