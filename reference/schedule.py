"""Learning-rate schedules: linear warmup into a cosine decay with a floor.

The schedule LLM pre-training runs since GPT-3 (and the one Stanford CS336's
first assignment asks for): the rate climbs linearly from 0 over the warmup,
follows half a cosine from `max_lr` down to `min_lr` until the cycle ends, and
stays at `min_lr` after it. Plain Python floats: a schedule is a scalar per
step, and a float64 closed form is exact to the last bit a learner can match.
"""

from __future__ import annotations

import math


def cosine_lr(it: int, max_lr: float, min_lr: float, warmup_iters: int, cosine_cycle_iters: int) -> float:
    """The rate at step `it`: `it / Tw * max_lr` while warming up, the cosine piece up to and
    including `Tc`, `min_lr` after it. Raises ValueError outside `0 <= Tw < Tc`, `it >= 0`."""
    if not 0 <= warmup_iters < cosine_cycle_iters:
        raise ValueError(f"need 0 <= warmup_iters < cosine_cycle_iters, got {warmup_iters}, {cosine_cycle_iters}")
    if it < 0:
        raise ValueError(f"it must be >= 0, got {it}")
    if it < warmup_iters:
        return it / warmup_iters * max_lr
    if it <= cosine_cycle_iters:
        progress = (it - warmup_iters) / (cosine_cycle_iters - warmup_iters)
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (max_lr - min_lr)
    return float(min_lr)
