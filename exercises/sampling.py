"""Exercise `sampling`: the distribution a sampler draws the next token from, from scratch.

Grade it with `drill check sampling.py`. Only `filter_logits` is graded; you
may add helpers in this file.

Contract
--------
Shapes
    logits: (B, V) float, one row of next-token logits per sequence.
    Returns probabilities (B, V) in fp32, each row summing to 1.
Steps, in this order (Hugging Face's logits warpers: temperature, top-k,
top-p, min-p), each on what the previous one kept
    1. temperature (> 0): divide the logits by it.
    2. top_k (int or None): keep each row's top_k largest logits. None or 0
       turns the step off; top_k >= V keeps every token.
    3. top_p (float in (0, 1] or None): on the softmax of what is still
       kept, keep the smallest set of most probable tokens whose cumulative
       probability reaches top_p. The token that crosses top_p is kept, at
       least one token always is, and top_p = 1.0 keeps everything.
    4. min_p (float in (0, 1] or None): keep the tokens whose probability,
       in the distribution left after steps 1-3, is at least min_p times
       that row's largest probability.
    Then renormalise. Removed tokens have probability exactly 0.
Dtypes
    Work in fp32: upcast fp16/bf16 logits first. The result is fp32 whatever
    the input dtype. Logits may be large (|x| ~ 1e4): no NaN, no inf.
Gradients
    Not graded.
Inputs
    The grader draws continuous values: no ties at the k-th logit, at the
    top-p crossing or at the min-p threshold.
"""

import torch


def filter_logits(logits, temperature=1.0, top_k=None, top_p=None, min_p=None):
    """logits: (B, V). Returns (B, V) fp32 probabilities after temperature, top-k, top-p, min-p."""
    # Things to think about:
    # - Which dtype do you work in? Upcast before dividing by the temperature.
    # - How do you "remove" a token so that the next softmax gives it exactly 0?
    #   What does a finite fill such as 0 or -1e4 do when every logit is ~ -2e4?
    # - top_k = 0, top_k = 1 and top_k > V: what does torch.topk do with each?
    # - top-p works on sorted probabilities. Is the token whose probability takes
    #   the running sum past top_p kept? What if the top token alone is above top_p?
    # - After sorting, how do you put the keep/remove decision back in the
    #   original token order?
    # - min-p is relative: compared with min_p * the largest probability. Of which
    #   distribution, and does it matter whether it was renormalised?
    # - Does each row of the result sum to 1?
    raise NotImplementedError("write filter_logits")
