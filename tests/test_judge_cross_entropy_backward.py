"""cross_entropy_backward grading: the expected values are autograd's, the cases reach the contract's edges,
every named mistake shows and is told apart, the half-precision tolerance passes one rounding and fails half
math, and aten's log_softmax backward kernel is trapped.

Fixture verdicts (4 styles that pass, one bug file per mistake) are checked by test_judge_fixtures.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from drill.judge.check import _tolerance_of, check_file
from drill.judge.compare import compare
from drill.judge.pool import ChildPool
from drill.judge.runner import Limits
from drill.judge.specs import cross_entropy_backward as ceb
from drill.reference import cross_entropy_backward

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions" / "cross_entropy_backward"
SEEDS = (0, 1, 7, 20261129)
TOL = _tolerance_of(ceb.SPEC)
LIMITS = Limits(timeout_s=60, cpu_s=60, memory_mb=2048)


def _prepared(seed: int) -> list:
    cases = ceb.make_cases(seed)
    for c in cases:
        c.expected, c.expected_grads = ceb.reference(c)
    return cases


def _opts(case):
    return case.args.get("ignore_index", -100), case.args.get("label_smoothing", 0.0)


@pytest.mark.parametrize("ignore", [-100, -1, 57, 3])
@pytest.mark.parametrize("ls", [0.0, 0.2])
@pytest.mark.parametrize("scale", [3.0, 1e4])
def test_the_reference_closed_form_is_autograd_of_f_cross_entropy(ignore, ls, scale) -> None:
    gen = torch.Generator().manual_seed(ignore + int(ls * 10) + int(scale))
    z = torch.randn(2, 5, 11, generator=gen, dtype=torch.float64) * scale
    t = torch.randint(0, 11, (2, 5), generator=gen)
    t = torch.where(t == ignore, (t + 1) % 11, t)
    t[0, 1] = t[1, 3] = ignore
    got = cross_entropy_backward(z, t, ignore, ls)
    leaf = z.clone().requires_grad_(True)
    loss = F.cross_entropy(leaf.reshape(-1, 11), t.reshape(-1), ignore_index=ignore, label_smoothing=ls)
    (want,) = torch.autograd.grad(loss, leaf)
    assert got.dtype == torch.float64 and torch.isfinite(got).all()
    assert torch.allclose(got, want, rtol=1e-10, atol=1e-14)
    assert torch.equal(got[0, 1], torch.zeros(11, dtype=torch.float64))  # an ignored row is exactly 0
    assert float(got[t != ignore].sum(-1).abs().max()) < 1e-12  # every kept row sums to 0


@pytest.mark.parametrize("seed", SEEDS)
def test_the_spec_reference_agrees_with_the_closed_form_and_fixes_ignored_rows_at_zero(seed: int) -> None:
    for c in _prepared(seed):
        mine = cross_entropy_backward(c.args["logits"], c.args["targets"], *_opts(c))
        assert torch.isfinite(c.expected).all(), c.name
        assert compare(mine, c.expected, TOL(c), zeros=c.zeros).ok, c.name
        assert bool((c.expected[c.zeros] == 0).all()), c.name


@pytest.mark.parametrize("seed", SEEDS)
def test_the_cases_the_contract_names_are_there(seed: int) -> None:
    cases = ceb.make_cases(seed)
    ranks = {c.args["logits"].dim() for c in cases}
    assert {1, 2, 3, 4} <= ranks
    assert {c.args["logits"].dtype for c in cases} == {torch.float32, torch.float16, torch.bfloat16}
    kinds = set()
    for c in cases:
        ignore, ls = _opts(c)
        v, t = c.args["logits"].shape[-1], c.args["targets"]
        kept = t != ignore
        assert bool(kept.any()), c.name  # at least one kept target, every kept one a class id
        assert bool(((t[kept] >= 0) & (t[kept] < v)).all()), c.name
        if not bool(kept.all()):
            kinds.add("class id" if 0 <= ignore < v else "past V" if ignore >= v else str(ignore))
        kinds.add(f"ls {ls > 0}")
    assert kinds >= {"-100", "-1", "class id", "past V", "ls True", "ls False"}
    assert any(float(c.args["logits"].float().abs().max()) > 9000 for c in cases)
    assert any(c.repeat is not None for c in cases)
    assert any(int((c.args["targets"] != _opts(c)[0]).sum()) == 1 and c.args["targets"].numel() > 1 for c in cases)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_mistake_shows_and_each_id_differs_from_the_others(seed: int) -> None:
    cases = _prepared(seed)
    plain = [b for b in ceb.SPEC.bugs if not b.fit]
    outs = {}
    for bug in plain:
        outs[bug.label] = [bug.fn(c) for c in cases]
        wrong = [c.name for c, o in zip(cases, outs[bug.label], strict=True)
                 if o is not None and not compare(o.to(c.out_dtype), c.expected, TOL(c), zeros=c.zeros).ok]
        assert wrong, bug.label
    ids = {b.label: b.diagnosis.id for b in plain}
    for a in outs:
        for b in outs:
            if ids[a] < ids[b]:
                assert any((oa is None) != (ob is None) or (oa is not None and not torch.allclose(
                    oa.float(), ob.float(), rtol=1e-3, atol=1e-6, equal_nan=True))
                    for oa, ob in zip(outs[a], outs[b], strict=True)), (a, b)


def _half_math(logits, targets, ignore, ls):
    """The bug fixture's computation: softmax, q, p - q and the division, all in logits' dtype."""
    v = logits.shape[-1]
    z = logits.reshape(-1, v)
    t = targets.reshape(-1)
    keep = t != ignore
    hot = (torch.arange(v) == torch.where(keep, t, 0)[:, None]).to(z.dtype)
    q = (1.0 - ls) * hot + ls / v
    grad = torch.where(keep[:, None], torch.softmax(z, dim=-1) - q, 0.0) / keep.sum().to(z.dtype)
    return grad.reshape(logits.shape)


@pytest.mark.parametrize("seed", range(12))
def test_one_rounding_passes_the_half_tolerance_and_half_math_fails_it(seed: int) -> None:
    """Measured over seeds: the right fp32 gradient rounded once passes every half case; half math fails the
    confident-row cases of both dtypes, and the half-math family reproduces it wherever it fails."""
    caught = set()
    for c in _prepared(seed):
        if c.out_dtype == torch.float32:
            continue
        rounded = c.expected.to(c.out_dtype)
        assert compare(rounded, c.expected, TOL(c), zeros=c.zeros).ok, c.name
        bad = _half_math(c.args["logits"], c.args["targets"], *_opts(c))
        if not compare(bad, c.expected, TOL(c), zeros=c.zeros).ok:
            caught.add((c.out_dtype, "confident" in c.name))
            member = ceb._half_math(c, bad)
            assert member is not None and torch.equal(member, bad), c.name
    assert {(torch.float16, True), (torch.bfloat16, True)} <= caught


def test_the_family_of_half_math_rejects_other_mistakes() -> None:
    c = next(c for c in _prepared(3) if c.out_dtype == torch.float16 and "confident" in c.name)
    doubled = (2 * c.expected).to(torch.float16)
    assert ceb._half_math(c, doubled) is None
    assert ceb._half_math(c, c.expected.to(torch.float16)) is not None  # a correct result is a member too


def test_aten_log_softmax_backward_is_trapped_below_the_policy() -> None:
    path = SOLUTIONS / "bug_policy_violation__private_log_softmax_backward.py"
    with ChildPool() as pool:
        on = check_file(path, "cross_entropy_backward", 4, LIMITS, pool=pool)
        off = check_file(path, "cross_entropy_backward", 4, LIMITS, pool=pool, policy=False)
    assert on.diagnosis.id == "policy_violation", on.diagnosis_detail
    assert off.status == "fail" and off.diagnosis.id == "forbidden_op", off.diagnosis_detail
    assert "_log_softmax_backward_data" in off.diagnosis_detail and "line 15" in off.diagnosis_detail
