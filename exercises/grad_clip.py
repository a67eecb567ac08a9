"""Exercise `grad_clip`: clip the gradients by their global norm, in place.

Grade it with `drill check grad_clip.py`. `clip_grad_norm_` is graded; you may
add helpers in this file.

Contract
--------
clip_grad_norm_(parameters, max_norm, eps=1e-6) -> 0-dim fp32 tensor
    parameters: an iterable of tensors: a list, or a generator such as
    model.parameters() (iterate it only once).
    total = sqrt(sum, over the parameters whose .grad is not None, of
    sum(grad ** 2)), accumulated in fp32 or better (gradients may be fp32,
    fp16 or bf16).
    If total > max_norm: every such grad *= max_norm / (total + eps), IN PLACE
    (each p.grad is the same tensor object afterwards). Otherwise the
    gradients are left as they are.
    Returns total, the norm BEFORE clipping, as a 0-dim fp32 tensor. With no
    gradient at all it returns tensor(0.) and changes nothing. max_norm > 0.
    This is torch.nn.utils.clip_grad_norm_ with norm_type 2, and CS336 a1's
    run_gradient_clipping.
Forbidden
    torch.nn.utils.clip_grad_norm_, clip_grad_norm, clip_grad_value_,
    get_total_norm and clip_grads_with_norm_.
"""

import torch


def clip_grad_norm_(parameters, max_norm, eps=1e-6):
    """Scale every gradient by one factor when their global norm exceeds max_norm; return that norm."""
    # Things to think about:
    # - What happens to a generator the second time you loop over it?
    # - Which parameters have no gradient (frozen, or not reached by the loss)?
    # - Is the norm of all gradients the sum of their norms?
    # - An fp16 gradient entry of 300, squared, in fp16: what do you get?
    # - "In place": which of p.grad.mul_(c) and p.grad = p.grad * c is it?
    raise NotImplementedError("write clip_grad_norm_")
