"""Exercise `cross_entropy_backward`: the gradient of the cross-entropy loss, derived and written by hand.

Grade it with `drill check cross_entropy_backward.py`. Only
`cross_entropy_backward` is graded; you may add helpers.

Contract
--------
The loss (the `cross_entropy` exercise)
    the mean, over the N positions whose target != ignore_index, of
    (1 - ls) * -log p[target] + ls * mean_v(-log p[v]),  p = softmax(logits)
    over the last dim, ls = label_smoothing (F.cross_entropy's definition,
    reduction="mean", with the class dim last).
What to return
    dlogits = d loss / d logits (the upstream gradient is 1), with logits'
    shape and dtype. A kept row is
        (softmax(logits) - ((1 - ls) * onehot(target) + ls / V)) / N
    and an ignored row is exactly 0.
Shapes
    logits: (..., V) float; targets: (...) int64 (a 1-D logits row takes a
    0-dim target). At least one target is kept.
Targets
    An ignored position's target equals ignore_index, which may be -100, -1,
    a number past V, or a real class id: never index with it.
Dtypes
    Compute in fp32 with each row's max subtracted (|logits| ~ 1e4 must stay
    finite and exact), then cast once to logits.dtype.
Forbidden
    Autograd in every form (torch.autograd.grad, Tensor.backward,
    torch.autograd.backward, torch.autograd.functional.*, torch.func's grad,
    vjp, jvp, jacrev, jacfwd, hessian, functorch), everything `cross_entropy`
    forbids (F.cross_entropy, F.nll_loss, log_softmax and logsumexp in every
    spelling), and aten's _log_softmax_backward_data and nll_loss_backward.
    torch.softmax is allowed. The grader traps them at run time and names
    the line.
"""

import torch


def cross_entropy_backward(logits, targets, ignore_index=-100, label_smoothing=0.0):
    """d loss / d logits for `cross_entropy`'s mean loss, by hand; returns a tensor like logits.
    A kept row: (softmax(logits) - ((1 - ls) * onehot(target) + ls / V)) / N; an ignored row: 0."""
    # Things to think about before you type:
    # - The identity that makes it tractable: for any target distribution q
    #   over the V classes (summing to 1), d/dz of -sum_v q_v log softmax(z)_v
    #   is softmax(z) - q. Label smoothing only changes q. What does each
    #   kept row then sum to?
    # - N counts the kept positions, not all of them.
    # - Which rows get no gradient at all, and how do you build a one-hot
    #   without using an ignored target as an index?
    # - exp(1e4) overflows fp32: what does subtracting the row max change?
    # - In which dtype do you form p - q, where p is close to 1?
    raise NotImplementedError("write cross_entropy_backward")
