"""Exercise `alibi`: ALiBi slopes and the attention bias they give, from scratch.

Grade it with `drill check alibi.py`. `alibi_slopes` and `alibi_bias` are
graded; you may add helpers in this file.

Contract
--------
alibi_slopes(n_heads) -> (n_heads,) fp32
    For n a power of two, head h (h = 0 .. n-1) has slope 2 ** (-8 (h + 1) / n).
    Otherwise (the ALiBi paper's rule): the slopes of the largest power of two
    m < n, followed by the first n - m of the slopes for 2m taken at even
    indices (0, 2, 4, ...).
alibi_bias(n_heads, t_q, t_k) -> (n_heads, t_q, t_k) fp32, with t_q <= t_k
    bias[h, i, j] = -slope_h * (p_i - j), where p_i = t_k - t_q + i is query
    i's absolute position: the queries are the last t_q of the t_k positions
    (bottom-right aligned, as a KV cache sees them; t_q == 1 is a decode step).
    Entries with j > p_i come out positive: the causal mask removes them, not
    this function.
Gradients
    None: everything depends on integers only.
"""

import torch


def alibi_slopes(n_heads):
    """(n_heads,) fp32 slopes, for any n_heads >= 1."""
    # Things to think about:
    # - 2 ** (-8 / n) is the first slope and the ratio between neighbours when n
    #   is a power of two. What is m for n = 6, 12, 40?
    # - Which of the 2m slopes are "at even indices", and in which order do they
    #   follow the first m?
    # - Which dtype does the result have?
    raise NotImplementedError("write alibi_slopes")


def alibi_bias(n_heads, t_q, t_k):
    """(n_heads, t_q, t_k) fp32: bias[h, i, j] = -slope_h * (t_k - t_q + i - j)."""
    # Things to think about:
    # - Where does query i sit when t_q < t_k? Check t_q == 1 by hand.
    # - Which sign makes keys further in the past less attractive?
    # - A (t_q, 1) column minus a (1, t_k) row, times a (n_heads, 1, 1) slope.
    # - Future keys (j > p_i): leave them as the formula gives them.
    raise NotImplementedError("write alibi_bias")
