"""Exercise `flash_attention`: the FlashAttention forward pass, written in PyTorch.

Grade it with `drill check flash_attention.py`. Only `flash_attention` is
graded; BLOCK_Q and BLOCK_K are read by the grader. You may add helpers.

Contract
--------
Tiles
    BLOCK_Q and BLOCK_K are your tile sizes: powers of two from 16 to 256.
    The grader may set them to other values before a call, so read the
    module-level names inside the function, on every call (not as default
    arguments, which are fixed when the file is imported).
Shapes
    q: (B, H, T_q, d)   k, v: (B, H, T_k, d). T_q may differ from T_k, and
    neither needs to be a multiple of the tile sizes (the last tile of a row
    or column is smaller).
Computation
    Tiles of BLOCK_Q queries meet tiles of BLOCK_K keys under an online
    softmax: a running row max m, a running sum l of exp(s - m) and a running
    output, both rescaled whenever m grows, and ONE division by l at the end
    (FlashAttention-2's order; FlashAttention-1's running output normalised
    after every tile gives the same values and is accepted too).
    The scores are s = q.k / sqrt(d).
Causal
    causal=True is bottom-right aligned: query i sits at position
    T_k - T_q + i and sees keys 0 .. T_k - T_q + i (the queries are the last
    T_q positions, as with a KV cache). A query that sees no key at all
    (T_q > T_k) comes out as zeros with lse = -inf.
Returns
    (out, lse): out (B, H, T_q, d) in q.dtype; lse (B, H, T_q) in fp32, the
    natural-log logsumexp of the scaled scores over the keys the query sees.
    fp16/bf16 inputs must not give NaN or inf where the fp32 answer is finite.
Graded beyond the values (and failing)
    - No floating-point tensor holding more than BLOCK_Q * BLOCK_K scores or
      probabilities per (batch, head) is ever alive: a (B, H, BLOCK_Q, BLOCK_K)
      tile is fine, the (T_q, T_k) matrix is not (a bool mask does not count).
    - With causal=True, key tiles entirely above the diagonal are skipped,
      not computed and masked.
    Gradients are not graded.
Forbidden
    F.scaled_dot_product_attention, nn.MultiheadAttention,
    F.multi_head_attention_forward, and the aten SDPA kernels called directly
    (some of them return lse too): the grader blocks them however called.
"""

import math

import torch

BLOCK_Q = 64
BLOCK_K = 64


def flash_attention(q, k, v, causal=False):
    """q: (B, H, T_q, d); k, v: (B, H, T_k, d). Returns (out (B, H, T_q, d) in q.dtype, lse (B, H, T_q) fp32)."""
    # Things to think about before you type:
    # - Which state survives from one key tile to the next? Only m, l and the
    #   unnormalised output of the current query tile: never the scores.
    # - When a tile raises the row max from m_old to m_new, by what factor must
    #   the old l and the old output be multiplied? Is it <= 1?
    # - What is m before the first tile, and what does exp(-inf - (-inf))
    #   give? A row that sees no key in a tile (or at all) must not turn NaN.
    # - lse is logsumexp(s): how do you get it back from m and l?
    # - Bottom-right causal: which key tiles can a query tile [q0, q1) see at
    #   all? Stop before the first one that lies entirely above the diagonal.
    # - Which tiles cross the diagonal and need a mask inside?
    # - In which dtype do you accumulate m, l and the output for fp16 input?
    raise NotImplementedError("write flash_attention")
