"""alibi grading: the hidden cases, the knob variants at their defaults, every mistake showing, the probes.

Fixture verdicts are checked for every file by test_judge_fixtures.py; here:
head counts of both kinds and every query alignment are in each seed's
cases, the variants' slopes and bias at their defaults are the reference
(and each knob changes them where it should), every mistake shows on every
seed, and BLOOM's key-only bias differs from the contract's by exactly a
constant per query row.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from drill.judge.check import _tolerance_of
from drill.judge.compare import compare
from drill.judge.specs import alibi
from drill.reference.alibi import alibi_bias, alibi_slopes

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions" / "alibi"
SEEDS = (0, 1, 7, 20261129)
TOL = _tolerance_of(alibi.SPEC)


def _prepared(seed: int) -> list:
    cases = alibi.make_cases(seed)
    for c in cases:
        c.expected, c.expected_grads = alibi.reference(c)
    return cases


@pytest.mark.parametrize("seed", SEEDS)
def test_cases_cover_head_counts_and_query_alignments(seed: int) -> None:
    cases = alibi.make_cases(seed)
    slopes = [c.args["n_heads"] for c in cases if c.target == alibi.SLOPES and c.repeat is None]
    assert {1, 8, 6, 12, 20, 40} <= set(slopes) and sum(n & (n - 1) == 0 for n in slopes) >= 3
    assert sum(n & (n - 1) != 0 for n in slopes) >= 5
    bias = [(c.args["n_heads"], c.args["t_q"], c.args["t_k"]) for c in cases if c.target == alibi.BIAS]
    assert any(q == k for _, q, k in bias) and any(1 < q < k for _, q, k in bias) and any(q == 1 for _, q, _ in bias)
    assert any(n & (n - 1) and q < k for n, q, k in bias) and any(n == 1 for n, _, _ in bias)
    assert all(q <= k for _, q, k in bias) and all(c.out_dtype == torch.float32 for c in cases)
    probes = [c for c in cases if c.repeat is not None]
    assert [c.target for c in probes] == [alibi.BIAS, alibi.SLOPES] and cases[-2:] == probes
    step = probes[0]
    assert step.args["t_q"] == 1 and step.repeat == {"n_heads": step.args["n_heads"], "t_q": step.args["t_k"],
                                                      "t_k": step.args["t_k"]}
    keys = [(n, k) for n, _, k in bias]
    assert len(set(keys)) == len(keys)  # a bias cached per (n_heads, t_k) collides only in the probe


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6, 8, 12, 20, 40, 64, 100])
def test_the_variant_slopes_at_their_defaults_are_the_reference(n: int) -> None:
    assert torch.equal(alibi.slopes(n).float(), alibi_slopes(n, impl="math"))
    # BLOOM's powers of one rounded fp32 base drift by an ulp per power: 64 ulps at most here
    assert torch.allclose(alibi_slopes(n, impl="fused"), alibi_slopes(n, impl="math"), rtol=1e-5, atol=0)
    m = 1 << (n.bit_length() - 1)  # the largest power of two <= n
    for rule in ("geometric", "next_pow2", "odd", "prefix"):
        # a power of two has one rule; with one extra head, "the first n - m" and "the even ones" agree
        same = m == n or (rule == "prefix" and n - m == 1)
        assert torch.equal(alibi.slopes(n, rule), alibi.slopes(n)) == same, rule


def test_the_papers_example_of_six_heads() -> None:
    assert alibi_slopes(6, impl="math").tolist() == [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3]


@pytest.mark.parametrize("t_q,t_k", [(5, 5), (3, 9), (1, 7)])
def test_the_variant_bias_at_its_defaults_is_the_reference_and_bloom_is_a_row_constant(t_q: int, t_k: int) -> None:
    want = alibi_bias(12, t_q, t_k, impl="math")
    assert torch.equal(alibi.bias(12, t_q, t_k), want)
    assert torch.allclose(alibi_bias(12, t_q, t_k, impl="fused"), want, rtol=1e-5, atol=1e-7)
    bloom = alibi.bias(12, t_q, t_k, form="key_only")
    gap = want - bloom  # -slope * p_i, the same along each row
    assert torch.allclose(gap, gap[..., :1].expand_as(gap), atol=1e-6)
    assert torch.allclose(torch.softmax(want, -1), torch.softmax(bloom, -1), atol=1e-6)
    assert not compare(bloom, want, alibi.SPEC.tolerances["float32"]).ok


@pytest.mark.parametrize("seed", SEEDS)
def test_every_known_mistake_shows_on_every_seed(seed: int) -> None:
    cases = _prepared(seed)
    for bug in alibi.SPEC.bugs:
        assert any((out := bug.fn(c)) is not None and not compare(out, c.expected, TOL(c)).ok for c in cases), bug.label


def test_no_forbidden_ops() -> None:
    assert alibi.SPEC.forbidden == () and alibi.SPEC.forbidden_classes == ()


@pytest.mark.slow
@pytest.mark.parametrize("name,want", [
    ("good_bloom_pow.py", "pass"),
    ("good_loops.py", "pass"),
    ("bug_alibi_key_only__bloom.py", "alibi_key_only"),
    ("bug_alibi_even_indices__odd_indices.py", "alibi_even_indices"),
    ("bug_state_between_calls__bias_cached_per_heads.py", "state_between_calls"),
])
def test_fixtures_over_several_seeds(name: str, want: str, verdicts_over_seeds) -> None:
    for seed, got, partial, detail in verdicts_over_seeds("alibi", SOLUTIONS / name, (2, 3, 11, 31)):
        assert got == want and not partial, (seed, got, detail)


def test_the_key_only_diagnosis_explains_the_softmax_equivalence() -> None:
    why = alibi.AD["alibi_key_only"].why
    assert "constant per query row" in why and "softmax" in why.lower() and "contract" in why
