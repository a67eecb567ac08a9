"""Exercise `layernorm_backward`: the backward pass of LayerNorm, derived and written by hand.

Grade it with `drill check layernorm_backward.py`. Only `layernorm_backward`
is graded; you may add helpers.

Contract
--------
The forward pass (the `layernorm` exercise)
    y = (x - mean) / sqrt(var + eps) * weight + bias, over the last dim,
    var the population (biased, divide by d) variance, default eps 1e-5.
What to return
    (dx, dweight, dbias): the gradients of sum(y * grad_out) with respect to
    x, weight and bias. dx has x's shape and dtype; dweight and dbias have
    shape (d,), summed over every leading dim of x, in weight's and bias's
    dtypes. bias never enters dx; it is passed so the call mirrors the forward.
Shapes
    x, grad_out: (..., d) with one to three leading dims, d = 1 included;
    weight, bias: (d,).
Dtypes
    Accumulate in fp32 whatever the input dtype (squares of fp16 values
    overflow above ~256, and sums of bf16 values lose precision), then cast.
Forbidden
    Autograd in every form: torch.autograd.grad, Tensor.backward,
    torch.autograd.backward, torch.autograd.functional.*, and torch.func's
    grad, vjp, jvp, jacrev, jacfwd, hessian (and functorch). Also everything
    `layernorm` forbids (F.layer_norm, nn.LayerNorm, F.group_norm, F.rms_norm,
    ...) and aten's native_layer_norm_backward. The grader traps them at run
    time and names the line.
"""

import torch


def layernorm_backward(x, weight, bias, grad_out, eps=1e-5):
    """The backward pass of y = (x - mean) / sqrt(var + eps) * weight + bias over the last dim, by hand.
    x, grad_out: (..., d); weight, bias: (d,). Returns (dx like x, dweight (d,), dbias (d,)), the
    gradients of sum(y * grad_out); accumulate in fp32, return x.dtype / weight.dtype / bias.dtype."""
    # Things to think about before you type:
    # - The identity that makes it tractable: with xhat = (x - mean) * rstd and
    #   g = grad_out * weight, the Jacobian of xhat with respect to x is
    #   rstd * (I - 1/d - xhat xhat^T / d), symmetric, so
    #   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
    #   Which part of the forward pass does each of the two corrections undo?
    # - What should dx sum to over a row? What is dx when d = 1?
    # - Which variance did the forward use: divided by d or by d - 1?
    # - Put eps where the forward put it.
    # - weight and bias are shared by every position: how many leading dims can x have?
    # - In which dtype do you subtract, square, average and sum?
    raise NotImplementedError("write layernorm_backward")
