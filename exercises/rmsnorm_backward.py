"""Exercise `rmsnorm_backward`: the backward pass of RMSNorm, derived and written by hand.

Grade it with `drill check rmsnorm_backward.py`. Only `rmsnorm_backward` is
graded; you may add helpers.

Contract
--------
The forward pass
    y = x / sqrt(mean(x**2, over the last dim) + eps) * weight
    (RMSNorm, as in the `rmsnorm` exercise: no mean subtracted, eps inside
    the square root, default eps 1e-6).
What to return
    (grad_x, grad_weight): the gradients of sum(y * grad_out) with respect to
    x and weight. grad_x has x's shape and dtype; grad_weight has shape (d,)
    and weight's dtype, summed over every leading dim of x.
Shapes
    x, grad_out: (..., d) with one to three leading dims; weight: (d,).
Dtypes
    Accumulate in fp32 whatever the input dtype (squares of fp16 values
    overflow above ~256, and sums of bf16 values lose precision), then cast.
Forbidden
    Autograd in every form: torch.autograd.grad, Tensor.backward,
    torch.autograd.backward, torch.autograd.functional.*, and torch.func's
    grad, vjp, jvp, jacrev, jacfwd, hessian (and functorch). Also everything
    `rmsnorm` forbids: F.rms_norm, nn.RMSNorm, F.layer_norm, nn.LayerNorm.
    The grader traps them at run time and names the line.
"""

import torch


def rmsnorm_backward(x, weight, grad_out, eps=1e-6):
    """The backward pass of y = x / sqrt(mean(x**2, -1) + eps) * weight, written by hand.
    x, grad_out: (..., d); weight: (d,). Returns (grad_x like x, grad_weight (d,)), the
    gradients of sum(y * grad_out); accumulate in fp32, return x.dtype / weight.dtype."""
    # Things to think about before you type:
    # - Write r = 1 / sqrt(mean(x**2) + eps). y depends on x twice: directly,
    #   and through r, which every element of the row moves. What is dr/dx_j?
    # - Where does the 1/d of the mean end up in the gradient?
    # - Is the term through r added or subtracted?
    # - grad_weight sums over every position: how many leading dims can x have?
    # - Use the same eps, in the same place, as the forward pass.
    # - In which dtype do you square, average and sum?
    raise NotImplementedError("write rmsnorm_backward")
