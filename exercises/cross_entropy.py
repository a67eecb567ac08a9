"""Exercise `cross_entropy`: a numerically stable cross-entropy loss, from scratch.

Grade it with `drill check cross_entropy.py`. Only `cross_entropy` is graded.

Contract
--------
Inputs
    logits: (..., V) float, classes on the LAST axis (an LM's (B, T, V) or
    (N, V) logits, or a single (V,) row); targets: (...) int64 class ids with
    the same leading shape (a 0-dim tensor for (V,) logits).
Computation
    With p = softmax(logits) over V and ls = label_smoothing, each position
    contributes
        (1 - ls) * -log p[target] + ls * mean over all V classes of -log p[v]
    and the result is the mean of that over the positions whose target is
    not ignore_index (the definition of F.cross_entropy with
    label_smoothing=ls). Every call has at least one such position. An
    ignored target may hold any value (-100 is not a class id).
Dtypes
    Computed in at least fp32 whatever the logits' dtype; returns a 0-dim
    tensor of logits.dtype.
Magnitudes
    Logits can be as large as ~1e4: the loss must stay finite and exact.
Gradients
    Must reach logits: no .detach(), no torch.no_grad(), no NumPy.
Forbidden
    F.cross_entropy, F.nll_loss, nn.CrossEntropyLoss, nn.NLLLoss,
    F.log_softmax, torch.log_softmax, Tensor.log_softmax, nn.LogSoftmax,
    torch.logsumexp, Tensor.logsumexp, torch.special.logsumexp,
    torch.special.log_softmax (and any other path to their kernels).
"""

import torch


def cross_entropy(logits, targets, ignore_index=-100, label_smoothing=0.0):
    """Mean over non-ignored positions of (1 - ls) * -log p[target] + ls * mean_v(-log p[v]).
    Computed in fp32; returns a 0-dim tensor of logits.dtype."""
    # Things to think about:
    # - softmax(x) of a logit 200 below its row's max is exactly 0 in fp32.
    #   What is log of that? Can you get log p without ever forming p?
    # - exp(1e4) is inf. What can you subtract from each row first without
    #   changing the softmax?
    # - Which positions does the mean run over, for the target term AND for
    #   the smoothing term?
    # - What happens when you index with a target of -100?
    # - Which axis holds the classes, here and in F.cross_entropy?
    raise NotImplementedError("write cross_entropy")
