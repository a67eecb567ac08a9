"""Small statistics for timings: robust summaries, repetition counts, log-log fits.

Pure Python (no torch) so it is cheap to import and trivial to unit-test.
Medians and quartiles rather than means: on a shared machine one preempted
repetition would drag a mean far more than it moves a median.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Summary:
    """Median and spread of a set of timings (seconds)."""

    median: float
    q1: float
    q3: float
    min: float
    max: float
    n: int

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1


def summarize(samples: Sequence[float]) -> Summary:
    """Median, quartiles (inclusive method) and range; needs at least one sample."""
    if not samples:
        raise ValueError("summarize needs at least one sample")
    xs = sorted(float(s) for s in samples)
    if len(xs) == 1:
        q1 = q3 = xs[0]
    else:
        q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return Summary(statistics.median(xs), q1, q3, xs[0], xs[-1], len(xs))


def choose_reps(first_call_s: float, target_s: float, lo: int = 3, hi: int = 25) -> int:
    """How many timed repetitions fit in `target_s`, given one call took `first_call_s`.

    At least `lo` (a median of fewer is no median) and at most `hi` (tiny
    calls would otherwise repeat thousands of times for no extra precision).
    """
    if first_call_s <= 0:
        return hi
    return max(lo, min(hi, int(target_s / first_call_s)))


def fit_exponent(sizes: Sequence[float], values: Sequence[float]) -> float | None:
    """Least-squares slope of log(value) against log(size): value ~ size^slope.

    None with fewer than three usable points (two points give a slope but no
    check that a power law fits at all) or when every size is the same.
    Non-positive values are skipped (a zero peak-memory reading has no log).
    """
    pts = [(math.log(s), math.log(v)) for s, v in zip(sizes, values, strict=True) if s > 0 and v is not None and v > 0]
    if len(pts) < 3:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    if sxx == 0:
        return None
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx


# Calls an implementation makes at a size besides its timed ones: the memory-audit call and the
# warm-up call (CUDA adds a first-use call: `extra_calls=3`).
UNTIMED_CALLS = 2


def predict_size_wall(per_call_s: Mapping[str, float], exponents: Mapping[str, float], size: int,
                      next_size: int, target_s: float, overhead_s: float = 0.0,
                      extra_calls: int = UNTIMED_CALLS) -> float:
    """Wall seconds the next size of the ladder will take, from what it will actually run.

    For each implementation still running: one call at `next_size` is its
    median at `size` scaled by (next_size/size)^exponent; it will make
    `extra_calls` untimed calls plus `choose_reps(one call, target_s)` timed
    ones. Scaling the whole previous size's wall time instead overestimates
    several-fold: the repetition count shrinks as calls get slower (25 calls
    of 13 ms at T=1024 are 4 calls of 52 ms at T=2048, not 25 calls of 52 ms).
    `overhead_s` (building inputs and modules, the audit's bookkeeping: the
    part of the last size's wall time that no call explains) grows like the
    slowest implementation.
    """
    if size <= 0 or next_size <= 0:
        return overhead_s + sum(per_call_s.values()) * (extra_calls + 3)
    total, worst = 0.0, 1.0
    for impl, one in per_call_s.items():
        scale = (next_size / size) ** exponents.get(impl, 1.0)
        worst = max(worst, scale)
        call = max(0.0, one) * scale
        total += call * (extra_calls + choose_reps(call, target_s))
    return total + max(0.0, overhead_s) * worst


def fmt_time(s: float | None) -> str:
    """A duration as the report prints it (µs, ms or s); "-" when there is none."""
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"
