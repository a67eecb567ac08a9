"""Small statistics for timings: robust summaries, repetition counts, log-log fits.

Pure Python (no torch) so it is cheap to import and trivial to unit-test.
Medians and quartiles rather than means: on a shared machine one preempted
repetition would drag a mean far more than it moves a median.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
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
    pts = [(math.log(s), math.log(v)) for s, v in zip(sizes, values) if s > 0 and v is not None and v > 0]
    if len(pts) < 3:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    if sxx == 0:
        return None
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx


def predict_time(elapsed_s: float, size: int, next_size: int, exponent: float) -> float:
    """Time a size will take if cost grows as size^exponent from the one just measured."""
    if size <= 0:
        return elapsed_s
    return elapsed_s * (next_size / size) ** exponent
