"""Exercise `attention`: scaled dot-product attention, written from scratch.

Grade it with `drill check attention.py`. Only `scaled_dot_product_attention`
is graded; you may add helper functions above it.

Contract
--------
Shapes
    q: (..., T_q, d_k)   k: (..., T_k, d_k)   v: (..., T_k, d_v)
    Any number of leading batch dimensions (often (B, H)); T_q may differ
    from T_k and d_v may differ from d_k. The result is (..., T_q, d_v).
Mask
    A bool tensor broadcastable to (..., T_q, T_k), with the same meaning as in
    torch.nn.functional.scaled_dot_product_attention: True = "this query may
    attend to this key", False = "blocked". None means every key is allowed.
    A query row where *every* key is blocked must still come out finite
    (any finite value is accepted; no NaN, no inf).
Dtypes
    The output has the dtype of q. With fp16 or bf16 inputs the result must not
    contain NaN or inf wherever the fp32 computation is finite.
Gradients
    Gradients must flow back to q, k and v: no .detach(), no torch.no_grad()
    around the computation, no round trip through NumPy.
Grading
    Two calls with identical inputs must return identical outputs: no dropout
    and no random ops (F.dropout's training flag defaults to True). Code that
    needs no gradient (building the mask or a bias from it) may run under
    torch.no_grad(); the graded computation may not.
Forbidden
    F.scaled_dot_product_attention, nn.MultiheadAttention and
    F.multi_head_attention_forward (the grader blocks them, however called).
"""

import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    """q: (..., T_q, d_k)  k: (..., T_k, d_k)  v: (..., T_k, d_v)
    mask: bool, broadcastable to (..., T_q, T_k), True = may attend; None = attend to all.
    Returns (..., T_q, d_v): softmax(q k^T / sqrt(d_k) + masking) v."""
    # Things to think about before you type:
    # - Which dimension of k must be swapped so the product is (..., T_q, T_k)?
    #   Use a transpose that works for any number of leading dims.
    # - What is the scale, and which of the sizes (d_k, d_v, T) is it built from?
    # - Over which axis do the probabilities of one query sum to 1?
    # - How do you block a key so it gets exactly zero weight? Filling a logit
    #   with 0 does not block anything; think about what exp() does.
    # - The fill value has to fit in the dtype you compute in: -1e9 is not
    #   representable in fp16 (its largest magnitude is about 65504).
    # - What happens to a row whose keys are all blocked? exp(-inf - (-inf))
    #   is NaN. The contract asks for a finite row.
    # - Large logits: exp(12) already overflows fp16 and exp(89) overflows
    #   fp32. torch.softmax subtracts the row max for you; a hand-written
    #   exp must do the same.
    raise NotImplementedError("write scaled_dot_product_attention")
