"""Exercise `speculative_decoding`: one verification step of speculative sampling.

Grade it with `drill check speculative_decoding.py`. `verify` is graded; you may
add helpers in this file.

A small draft model proposed K tokens; the large target model scored the same
K positions, plus the one after them, in a single pass. `verify` decides which
drafts the target keeps and adds the one token the step always gains, so that
the output follows the target's distribution exactly (Leviathan et al. 2023,
Chen et al. 2023).

Contract
--------
verify(draft_tokens, draft_probs, target_probs, uniforms) -> list[int]
    draft_tokens  (K,) int64, K >= 1, drawn from the draft model
    draft_probs   q (K, V) fp32: row i is the draft's distribution at draft
                  position i (q[i, draft_tokens[i]] > 0)
    target_probs  p (K + 1, V) fp32: row i is the target's at the same position,
                  row K the one after all K drafts
    uniforms      (K + 1,) fp32 in [0, 1): the step's random numbers
    For i = 0 .. K-1, with x = draft_tokens[i]: keep x iff
    uniforms[i] < p[i, x] / q[i, x] (a ratio >= 1 always keeps it).
    At the first rejection i: append ONE token drawn from
    normalize(max(0, p[i] - q[i])) by inverse CDF with uniforms[K], and stop.
    If all K are kept: append a bonus token drawn from p[K] by inverse CDF
    with uniforms[K].
    Inverse CDF of u over dist: the smallest j with cumsum(dist)[j] > u
    (torch.searchsorted(cdf, u, right=True)); if rounding leaves no such j,
    the last j with dist[j] > 0.
    Returns a Python list of ints: the kept drafts, then that one token
    (1 .. K + 1 of them). Compared exactly.
Example (LeetGPU challenge 87)
    draft_tokens [1, 2, 0], uniforms [0.5, 0.7, 0.3, 0.9]: draft 0 is kept,
    draft 1 rejected, the residual at position 1 gives token 3: [1, 3].
Randomness
    None inside: every random number is an argument. A call that moves
    torch's or Python's global generator (torch.multinomial, torch.rand,
    random.random) fails. Rescaling the rejected uniform, (u - r) / (1 - r),
    is a valid sampler too, but it gives other tokens: use uniforms[K].
Precision
    fp32 or fp64 both work: the grader keeps every uniform at least 1e-4 away
    from each acceptance ratio and each CDF step.
"""

import torch


def verify(draft_tokens, draft_probs, target_probs, uniforms):
    """The kept drafts, then one residual or bonus token, as a list of Python ints."""
    # Things to think about:
    # - Which row of target_probs is compared with draft i, and which one is only for the bonus?
    # - After the first rejection, may any later draft still count?
    # - max(0, p - q) sums to less than 1: what does its inverse CDF need first?
    # - Which uniform draws the final token, and why not the one that just rejected a draft?
    # - What does the caller get back: a tensor, or a list of ints?
    raise NotImplementedError("write verify")
