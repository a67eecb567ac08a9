"""Exercise `flash_attention_backward`: the FlashAttention-2 backward pass, written in PyTorch.

Grade it with `drill check flash_attention_backward.py`. Only
`flash_attention_backward` is graded; BLOCK_Q and BLOCK_K are read by the
grader. You may add helpers.

Contract
--------
Tiles
    BLOCK_Q and BLOCK_K are your tile sizes: powers of two from 16 to 256.
    The grader may set them to other values before a call, so read the
    module-level names inside the function, on every call (not as default
    arguments, which are fixed when the file is imported).
Inputs
    q: (B, H, T_q, d)   k, v: (B, H, T_k, d)   grad_out: like out.
    out (B, H, T_q, d) in q.dtype and lse (B, H, T_q) in fp32 are what
    `flash_attention` returns for q, k, v, causal (the grader computes them).
    T_q may differ from T_k; neither needs to be a multiple of a tile size.
Computation
    With scale = 1 / sqrt(d): D = rowsum(grad_out * out), once, shape
    (B, H, T_q). Then, for each (query tile, key tile):
        S  = q_t k_t^T * scale          (-inf above the diagonal when causal)
        P  = exp(S - lse_t)             (0 on a row whose lse is -inf)
        dv_t += P^T do_t
        dP = do_t v_t^T
        dS = P * (dP - D_t)
        dq_t += dS k_t * scale
        dk_t += dS^T q_t * scale
    These are the gradients of sum(out * grad_out) for softmax attention.
Causal
    Bottom-right aligned as in flash_attention: query i sits at position
    T_k - T_q + i and sees keys 0 .. T_k - T_q + i. A query that sees no key
    (lse = -inf) gets a zero dq and adds nothing to dk and dv.
Returns
    (dq, dk, dv) in q's, k's and v's dtypes, accumulated in fp32.
Graded beyond the values (and failing)
    - No floating-point tensor holding more than BLOCK_Q * BLOCK_K scores,
      probabilities, dP or dS per (batch, head) is ever alive: P is rebuilt
      per tile from lse, never stored whole.
    - With causal=True, the q.k products of your call, divided by those of a
      causal=False call on the same inputs, may not exceed the share of
      tiles (on the grid from query 0 and key 0, with your tile sizes) not
      entirely above the diagonal: skip those tiles.
    Reported (failing only with --strict): q.k products beyond two passes
    over the visible tiles (one key-outer pass, or a dK/dV pass plus a dQ
    pass as in Triton's tutorial, is fine).
Forbidden
    Autograd in every form (torch.autograd.grad, Tensor.backward,
    torch.autograd.functional, torch.func's grad/vjp/jvp/jacrev/...),
    F.scaled_dot_product_attention and the aten SDPA kernels, and the aten
    flash / efficient attention backward kernels.
"""

import math

import torch

BLOCK_Q = 64
BLOCK_K = 64


def flash_attention_backward(q, k, v, out, lse, grad_out, causal=False):
    """Returns (dq, dk, dv) like q, k, v: the gradients of sum(out * grad_out), computed tile by tile."""
    # Things to think about before you type:
    # - Which loop goes outside? With key tiles outside, dk and dv of a tile
    #   are finished before the next; dq then accumulates over key tiles.
    # - Why is D = rowsum(grad_out * out) equal to rowsum(P * dP), and why is
    #   the first one the only one you can afford here?
    # - exp(S - lse) is already normalised: what would a softmax over the
    #   tile get wrong?
    # - A row with lse = -inf: what is exp(-inf - (-inf))? Its P must be 0.
    # - Bottom-right causal: which (query tile, key tile) pairs does no query
    #   see at all? Which ones cross the diagonal and need a mask?
    # - dq and dk both carry the scale; does dv?
    # - Which dtype do your accumulators have for fp16 input?
    raise NotImplementedError("write flash_attention_backward")
