"""Exercise `sliding_window`: sliding-window causal attention and a rolling KV cache.

Grade it with `drill check sliding_window.py`. `sliding_window_attention` and
`RollingKVCache` are graded; you may add helpers in this file.

In a sliding-window layer (Mistral, Gemma's local layers) every query attends
only to the last `window` positions, itself included. Far-away keys are never
read again, so a decoder needs to keep only the last few keys and values.

Contract
--------
sliding_window_attention(q, k, v, window) -> (B, H, T_q, d) in q.dtype
    q (B, H, T_q, d); k, v (B, H, T_k, d); T_q <= T_k; window: an int >= 1.
    The queries are the LAST T_q positions of the sequence: query i sits at
    position p_i = T_k - T_q + i (bottom-right alignment) and attends to the
    keys j with p_i - window < j <= p_i: `window` keys, itself included
    (Hugging Face's mask, kv_idx > q_idx - window and causal).
    Scores scaled by 1/sqrt(d). window >= T_k is plain causal attention;
    window = 1 returns v (each query sees only itself).
    Gradients w.r.t. q, k and v are graded (autograd through your code).
RollingKVCache(window)
    attend(q, k, v): q, k, v (B, H, T_new, d), T_new >= 1, the next T_new
    positions of one sequence (the first call starts it). Stores k and v and
    returns (B, H, T_new, d): the new queries' rows of
    sliding_window_attention over the whole sequence so far. Any split of a
    sequence into calls (one call, one token at a time, chunks longer than
    the window) must give the rows one uncached call gives.
Memory (graded, failing)
    Between calls the cache holds at most `window` positions: after each call
    the grader adds up the elements of the floating-point tensors reachable
    from the cache's attributes (through lists, tuples, dicts and your own
    helper objects); more than 2 * B * H * window * d fails. Integer
    bookkeeping (a position counter, slot indices) does not count.
Precision
    fp32, fp16 and bf16 inputs; compute the softmax in fp32 if you like, return
    q.dtype. A full masked (T_q, T_k) score matrix is fine.
Forbidden
    F.scaled_dot_product_attention and the other fused attention kernels,
    nn.MultiheadAttention, torch.nn.attention.flex_attention.
"""

import torch


def sliding_window_attention(q, k, v, window):
    """softmax(q k^T / sqrt(d)) v, each query over the `window` keys ending at its own position."""
    # Things to think about:
    # - Which absolute position does query i have when T_q < T_k?
    # - Exactly how many keys does a query see, and does that count include itself?
    # - Which keys AFTER a query must stay hidden?
    # - What do window = 1 and window >= T_k reduce to?
    raise NotImplementedError("write sliding_window_attention")


class RollingKVCache:
    """Keys and values of the last positions of one sequence; attend() adds new positions and attends."""

    def __init__(self, window):
        raise NotImplementedError("write RollingKVCache.__init__")

    def attend(self, q, k, v):
        """The new queries' rows of sliding-window attention over every position seen so far."""
        # Things to think about:
        # - Which cached keys can a new query still need, and which can go?
        # - Should the old positions go before or after the new queries have attended?
        # - A chunk of several new positions: may its first query see the chunk's last key?
        # - A chunk longer than the window: what must be kept afterwards?
        raise NotImplementedError("write RollingKVCache.attend")
