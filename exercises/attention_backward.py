"""Exercise `attention_backward`: the backward pass of softmax attention, derived and written by hand.

Grade it with `drill check attention_backward.py`. Only `attention_backward`
is graded; you may add helpers.

Contract
--------
The forward pass (the `attention` exercise)
    s = 1 / sqrt(d_k);  S = q k^T * s, set to -inf where the mask is False;
    P = softmax(S) over the keys;  out = P v.
What to return
    (dq, dk, dv): the gradients of sum(out * grad_out) with respect to q, k
    and v, each with its input's shape and dtype.
Shapes
    q: (..., T_q, d_k); k: (..., T_k, d_k); v: (..., T_k, d_v);
    grad_out: (..., T_q, d_v). One set of leading dims (any number, even
    none beyond the batch), shared by all four. T_q may differ from T_k, and
    d_k from d_v.
The mask
    None, or a bool tensor broadcastable to (..., T_q, T_k): True means "may
    attend", as in F.scaled_dot_product_attention. It may broadcast over the
    leading dims (one (T_q, T_k) mask for every head, a (T_k,) key mask, a
    (B, 1, 1, T_k) padding mask) but never has more dims than the scores.
A query with no allowed key
    Its P row is 0 (PyTorch's SDPA gives out = 0 there): its dq row is 0 and
    it adds nothing to dk or dv. Never NaN.
Dtypes
    Compute in fp32 whatever the input dtype (grad_out v^T overflows fp16 for
    inputs a few dozen in size), then cast each gradient to its input's dtype.
Forbidden
    Autograd in every form: torch.autograd.grad, Tensor.backward,
    torch.autograd.backward, torch.autograd.functional.*, and torch.func's
    grad, vjp, jvp, jacrev, jacfwd, hessian (and functorch). Also everything
    `attention` forbids (F.scaled_dot_product_attention and the aten SDPA
    kernels, forward and backward, nn.MultiheadAttention) and
    torch._softmax_backward_data. torch.softmax itself is allowed.
    The grader traps them at run time and names the line.
"""

import torch


def attention_backward(q, k, v, grad_out, mask=None):
    """The backward pass of `attention`'s out = softmax(q k^T / sqrt(d_k) + masking) v, by hand.
    q: (..., T_q, d_k); k: (..., T_k, d_k); v: (..., T_k, d_v); grad_out: (..., T_q, d_v), one set of leading
    dims; mask: None or bool broadcastable to (..., T_q, T_k), True = may attend.
    Returns (dq like q, dk like k, dv like v), the gradients of sum(out * grad_out). With s = 1 / sqrt(d_k),
    S = q k^T s (-inf where masked), P = softmax(S) over the keys:
    dv = P^T grad_out;  dP = grad_out v^T;  dS = P * (dP - rowsum(dP * P));  dq = s dS k;  dk = s dS^T q.
    Compute in fp32 (upcast half inputs); return each input's dtype."""
    # Things to think about before you type:
    # - The backward needs P. Recompute it exactly as the forward did: same
    #   scale, same mask.
    # - Each probability depends on every score of its row. What does that do
    #   to the softmax's Jacobian, and which axis does its correction sum over?
    # - Which of dq, dk, dv sum over queries, and which over keys? Check each
    #   product's shapes with T_q != T_k and d_k != d_v.
    # - Where does s appear in the chain rule, and how many times?
    # - What does a row with every key blocked turn into, and what must it be?
    # - In which dtype do you form grad_out v^T?
    raise NotImplementedError("write attention_backward")
