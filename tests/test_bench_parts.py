"""drill bench, the pieces that need no child process: statistics, the CPU memory audit, workload data."""

from __future__ import annotations

import math

import pytest
import torch

from drill.bench import stats
from drill.bench.memory import LiveBytes, cpu_peak_bytes
from drill.bench.workloads import WORKLOADS, ffn_hidden
from drill.judge.registry import bench_names


@pytest.mark.parametrize("k", [0.5, 1.0, 2.0, 3.0])
def test_fit_exponent_recovers_a_power_law(k: float) -> None:
    sizes = [128, 256, 512, 1024, 2048]
    times = [3e-6 * s**k for s in sizes]
    assert stats.fit_exponent(sizes, times) == pytest.approx(k, abs=1e-9)


def test_fit_exponent_is_robust_to_a_noisy_point_and_needs_three() -> None:
    sizes = [256, 512, 1024, 2048]
    times = [s**2 * (1.3 if s == 512 else 1.0) for s in sizes]
    assert 1.8 < stats.fit_exponent(sizes, times) < 2.2
    assert stats.fit_exponent(sizes[:2], times[:2]) is None
    assert stats.fit_exponent([64, 64, 64], [1.0, 2.0, 3.0]) is None
    assert stats.fit_exponent([1, 2, 4, 8], [0.0, 1.0, 2.0, 4.0]) == pytest.approx(1.0)  # zero skipped


def test_summarize_median_quartiles_range() -> None:
    s = stats.summarize([5.0, 1.0, 3.0, 2.0, 4.0, 100.0, 3.5])
    assert s.median == 3.5 and s.min == 1.0 and s.max == 100.0 and s.n == 7
    assert s.q1 <= s.median <= s.q3 and s.iqr == s.q3 - s.q1
    one = stats.summarize([0.25])
    assert (one.median, one.q1, one.q3, one.iqr) == (0.25, 0.25, 0.25, 0.0)
    with pytest.raises(ValueError):
        stats.summarize([])


def test_choose_reps() -> None:
    assert stats.choose_reps(0.01, 0.25) == 25  # capped
    assert stats.choose_reps(0.05, 0.25) == 5
    assert stats.choose_reps(2.0, 0.25) == 3  # floor: a median of fewer is no median


def test_cpu_audit_sees_a_materialised_score_matrix() -> None:
    t, d = 256, 32
    q, k, v = (torch.randn(1, 2, t, d) for _ in range(3))

    def textbook():
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=-1) @ v

    def row_at_a_time():
        return torch.cat([torch.softmax(q[..., i : i + 1, :] @ k.transpose(-2, -1), -1) @ v for i in range(t)], dim=-2)

    with torch.no_grad():
        _, big = cpu_peak_bytes(textbook)
        _, small = cpu_peak_bytes(row_at_a_time)
    scores = 2 * t * t * 4
    assert big >= scores  # the (2, T, T) fp32 scores were alive at some point
    assert small < scores / 2  # only (2, 1, T) rows, plus the output pieces


def test_cpu_audit_counts_views_once_and_frees() -> None:
    audit = LiveBytes()
    with audit:
        for _ in range(5):
            a = torch.ones(1000)  # 4000 bytes; the previous one dies when `a` is rebound
            b = a.view(10, 100).t()  # a view: no new memory
            del b
    assert audit.peak == 8000  # two buffers overlap at the rebinding, never more
    assert audit.current == 4000  # `a` is still alive
    del a


def test_every_exercise_has_a_consistent_workload() -> None:
    assert tuple(WORKLOADS) == bench_names() and len(WORKLOADS) >= 7
    for wl in WORKLOADS.values():
        for device in ("cpu", "cuda"):
            ladder = wl.ladder(device)
            assert list(ladder) == sorted(set(ladder)) and len(ladder) >= 3, wl.exercise
            dims = wl.dims(device)
            est = [wl.est_bytes(s, dims, 4) for s in ladder]
            assert est == sorted(est) and est[0] > 0, wl.exercise
        assert max(wl.ladder("cuda")) >= max(wl.ladder("cpu")) or wl.exercise == "swiglu"
    assert max(WORKLOADS["attention"].ladder("cuda")) == 16384


def test_ffn_hidden_matches_the_reference() -> None:
    from drill.reference import ffn_hidden_dim

    for d in (128, 256, 1000, 4096):
        assert ffn_hidden(d) == ffn_hidden_dim(d)


@pytest.mark.parametrize("exercise", sorted(WORKLOADS))
def test_reference_calls_run_at_the_smallest_size(exercise: str) -> None:
    """Each workload's inputs fit its reference call on both paths (what the child will time)."""
    import drill.reference as ref

    wl = WORKLOADS[exercise]
    dims = wl.dims("cpu")
    size = wl.ladder("cpu")[0]
    x = wl.build(size, dims, torch.float32, torch.device("cpu"), seed=1)
    with torch.no_grad():
        outs = [wl.reference(ref, impl, x, dims)() for impl in ("fused", "math")]
    assert outs[0].shape == outs[1].shape
    torch.testing.assert_close(outs[0], outs[1], atol=1e-4, rtol=1e-4)


# One size of attention on CPU from a QA run (T=1024): median seconds per call, and timed repetitions.
QA_T1024 = {"learner": (0.01785, 7), "fused": (0.01304, 19), "math": (0.01840, 7)}
QA_T1024_ELAPSED = 0.677  # wall seconds of that size; T=2048 then took 1.96 s


def _planned(per_call: dict[str, float], scale: float, target_s: float, extra: int) -> float:
    """What the child will run at the next size: per implementation, extra + choose_reps calls of one scaled call."""
    return sum(t * scale * (extra + stats.choose_reps(t * scale, target_s)) for t in per_call.values())


@pytest.mark.parametrize("extra", [2, 3])
@pytest.mark.parametrize("growth", [1.0, 2.0])
def test_predicted_wall_counts_the_calls_the_next_size_will_make(extra: int, growth: float) -> None:
    per_call = {impl: m for impl, (m, _) in QA_T1024.items()}
    got = stats.predict_size_wall(per_call, {impl: growth for impl in per_call}, 1024, 2048, 0.25,
                                  overhead_s=0.05, extra_calls=extra)
    scale = 2.0**growth
    assert got == pytest.approx(_planned(per_call, scale, 0.25, extra) + 0.05 * scale)


def test_predicted_wall_is_not_the_last_size_scaled_when_repetitions_shrink() -> None:
    """The bug: 0.677 s x 2^2 = 2.7 s predicted for T=2048 (which took 1.96 s), and 4 s on a busier run."""
    per_call = {impl: m for impl, (m, _) in QA_T1024.items()}
    explained = sum(m * (2 + reps) for m, reps in QA_T1024.values())
    got = stats.predict_size_wall(per_call, dict.fromkeys(per_call, 2.0), 1024, 2048, 0.25,
                                  overhead_s=QA_T1024_ELAPSED - explained)
    assert 0.9 < got < 1.96 < QA_T1024_ELAPSED * 4  # T=2048 runs 3-4 timed calls each, not 7-19


def test_predicted_wall_uses_each_implementations_own_growth_and_skips_none() -> None:
    slow = stats.predict_size_wall({"learner": 0.001}, {"learner": 3.0}, 100, 200, 0.25)
    fast = stats.predict_size_wall({"learner": 0.001}, {"learner": 1.0}, 100, 200, 0.25)
    assert slow == pytest.approx(0.008 * (2 + 25)) and fast == pytest.approx(0.002 * (2 + 25))
    assert stats.predict_size_wall({}, {}, 100, 200, 0.25, overhead_s=0.1) == pytest.approx(0.1)
