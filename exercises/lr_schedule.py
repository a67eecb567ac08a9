"""Exercise `lr_schedule`: linear warmup, then a cosine decay to a floor.

Grade it with `drill check lr_schedule.py`. `cosine_lr` is graded; you may add
helpers in this file.

Contract
--------
cosine_lr(it, max_lr, min_lr, warmup_iters, cosine_cycle_iters) -> float
    Three pieces (Tw = warmup_iters, Tc = cosine_cycle_iters):
    it < Tw:          it / Tw * max_lr                               (linear warmup from 0)
    Tw <= it <= Tc:   min_lr + 0.5 * (1 + cos(pi * (it - Tw) / (Tc - Tw))) * (max_lr - min_lr)
    it > Tc:          min_lr                                         (the floor, for ever after)
    0 <= Tw < Tc and it >= 0. Returns a plain Python float, compared to a
    relative 1e-12. Tw = 0 starts straight at max_lr; the pieces meet at Tw
    (max_lr) and at Tc (min_lr).
Example
    For (max_lr, min_lr, Tw, Tc) = (1.0, 0.1, 7, 21): it = 0 gives 0.0, it = 1
    gives 0.142857..., it = 7 gives 1.0, it = 14 gives 0.55, it >= 21 gives 0.1.
Forbidden
    torch.optim.lr_scheduler (every class in it): the point is the formula.
"""

import math


def cosine_lr(it, max_lr, min_lr, warmup_iters, cosine_cycle_iters):
    """The learning rate at step `it` (a float)."""
    # Things to think about:
    # - Which piece owns it == warmup_iters, and which owns it == cosine_cycle_iters?
    # - What fraction of the cosine has passed at step it: counted from 0 or from Tw?
    # - At the end of the cycle, what keeps the rate from rising again?
    # - Python 3's / is true division; is anything here an integer that should not be?
    raise NotImplementedError("write cosine_lr")
