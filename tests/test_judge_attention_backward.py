"""attention_backward grading: the expectations are autograd's, the cases reach what the contract names, every
mistake shows and is told apart, and the private kernels a policy-free file could reach are trapped at run time.

Fixture verdicts are checked for every file by test_judge_fixtures.py; here:
the reference's closed form (drill.reference.attention_backward) agrees with
autograd of the masked forward on every case, rows with no allowed key get
exactly zero gradients, the fp16 overflow case overflows fp16 math only, each
variant fails a test on every seed and no two ids fail the same set, and the
softmax / SDPA backward kernels are `forbidden_op` with the policy off.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from drill.judge.check import _tolerance_of, check_file
from drill.judge.compare import compare
from drill.judge.runner import Limits
from drill.judge.specs import attention_backward as ab
from drill.reference import attention_backward as closed_form

SEEDS = (0, 1, 7, 20261201)
TOL = _tolerance_of(ab.SPEC)
LIMITS = Limits(timeout_s=60, cpu_s=60, memory_mb=2048)


def _prepared(seed: int) -> list:
    cases = ab.make_cases(seed)
    for c in cases:
        c.expected, c.expected_grads = ab.reference(c)
    return cases


@pytest.mark.parametrize("seed", SEEDS)
def test_the_closed_form_agrees_with_autograd_on_every_case(seed: int) -> None:
    for case in _prepared(seed):
        a = case.args
        ours = closed_form(*(a[n].float() for n in ("q", "k", "v", "grad_out")), a.get("mask"))[case.ctx["pick"]]
        assert torch.allclose(ours, case.expected, rtol=1e-4, atol=1e-4 * max(1.0, float(ours.abs().max()))), \
            case.name
        assert torch.isfinite(case.expected).all(), case.name


def test_a_row_with_no_allowed_key_gets_zero_gradients_and_adds_nothing() -> None:
    gen = torch.Generator().manual_seed(3)
    q, k, v, g = (torch.randn(2, 5 if i in (0, 3) else 4, 8, generator=gen) for i in range(4))
    mask = torch.ones(5, 4, dtype=torch.bool)
    mask[2] = False
    dq, dk, dv = closed_form(q, k, v, g, mask)
    assert torch.equal(dq[:, 2], torch.zeros_like(dq[:, 2]))
    keep = [0, 1, 3, 4]
    dq2, dk2, dv2 = closed_form(q[:, keep], k, v, g[:, keep], mask[keep])
    assert torch.allclose(dk, dk2, atol=1e-6) and torch.allclose(dv, dv2, atol=1e-6)
    assert torch.allclose(dq[:, keep], dq2, atol=1e-6)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_cases_reach_what_the_contract_names(seed: int) -> None:
    cases = ab.make_cases(seed)
    assert {c.ctx["what"] for c in cases} == {what for what, _ in ab.OUTPUTS}
    dtypes = {c.args["q"].dtype for c in cases}
    assert dtypes == {torch.float32, torch.float16, torch.bfloat16}
    shapes = [(c.args["q"].shape, c.args["k"].shape, c.args["v"].shape) for c in cases]
    assert any(q[-2] != k[-2] for q, k, _ in shapes) and any(q[-1] != v[-1] for q, _, v in shapes)
    assert any(q[-2] == k[-2] for q, k, _ in shapes)  # a forgotten transpose shows as values, not only as a shape
    assert {len(q) for q, _, _ in shapes} >= {3, 4, 5}
    masks = [c.args["mask"] for c in cases if "mask" in c.args]
    assert any(m.dim() < c.args["q"].dim() for c in cases if "mask" in c.args for m in [c.args["mask"]])
    assert any(m.dim() == 1 for m in masks)  # a (T_k,) key mask
    assert any(bool((~m.any(dim=-1)).any()) for m in masks)  # a query with no allowed key
    for c in cases:
        if "mask" in c.args:
            assert c.args["mask"].dim() <= c.args["q"].dim(), c.name


@pytest.mark.parametrize("seed", SEEDS)
def test_the_fp16_overflow_case_overflows_only_in_fp16_math(seed: int) -> None:
    case = next(c for c in _prepared(seed) if "overflows fp16" in c.name)
    a = case.args
    half = ab.backward(a["q"], a["k"], a["v"], a["grad_out"], None, upcast=False)[case.ctx["pick"]]
    assert not torch.isfinite(half).all()
    assert torch.isfinite(case.expected.half()).all()


@pytest.mark.parametrize("seed", SEEDS)
def test_every_mistake_shows_and_no_two_are_alike(seed: int) -> None:
    """Each variant fails some test; two variants of different ids differ (beyond tolerance) on some test."""
    cases = _prepared(seed)
    outputs = {}
    for bug in ab.SPEC.bugs:
        outs = []
        for c in cases:
            produced = bug.fn(c, c.expected) if bug.fit else bug.fn(c)
            outs.append(produced if isinstance(produced, tuple) or produced is None else (produced, None))
        outputs[bug.label] = outs
        failing = [c.name for c, o in zip(cases, outs, strict=True)
                   if o is not None and not compare(o[0], c.expected, TOL(c), ignore=o[1]).ok]
        if not bug.fit:  # the fit takes the learner's non-finite values: fed the reference it passes
            assert failing, bug.label
    ids = {b.label: b.diagnosis.id for b in ab.SPEC.bugs}

    def differ(x, y, c):
        if x is None or y is None:
            return (x is None) != (y is None)
        if x[0].shape != y[0].shape:
            return True
        ignore = None if x[1] is None and y[1] is None else (x[1] if y[1] is None else y[1] if x[1] is None
                                                             else x[1] | y[1])
        return not compare(x[0], y[0], TOL(c), ignore=ignore).ok

    for x, ox in outputs.items():
        for y, oy in outputs.items():
            if ids[x] < ids[y] and "fp16" not in x + y and "input dtype" not in x + y:
                assert any(differ(a, b, c) for a, b, c in zip(ox, oy, cases, strict=True)), (x, y)


# Kernels the static policy refuses by name (private attributes); with the policy off the child still traps them.
KERNELS = {
    "softmax backward": "torch._softmax_backward_data(dp, p, -1, torch.float32)",
    "aten softmax backward": "torch.ops.aten._softmax_backward_data.default(dp, p, -1, torch.float32)",
    "sdpa cpu flash backward": "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(dp, q, k, v, p, "
                               "p, 0.0, False)",
}
BODY = """import math

import torch


def attention_backward(q, k, v, grad_out, mask=None):
    qf, kf, vf, gf = (t.float() for t in (q, k, v, grad_out))
    s = 1.0 / math.sqrt(q.shape[-1])
    p = torch.softmax(qf @ kf.transpose(-2, -1) * s, dim=-1)
    dp = gf @ vf.transpose(-2, -1)
    ds = {call}
    return (ds @ kf * s).to(q.dtype), (ds.transpose(-2, -1) @ qf * s).to(k.dtype), (p.mT @ gf).to(v.dtype)
"""


@pytest.fixture(scope="module")
def pool(fork_server):
    return fork_server


@pytest.mark.parametrize("way", sorted(KERNELS))
def test_backward_kernels_are_trapped_at_run_time(way: str, tmp_path: Path, pool) -> None:
    path = tmp_path / "attention_backward.py"
    path.write_text(BODY.format(call=KERNELS[way]))
    on = check_file(path, seed=2, limits=LIMITS, pool=pool)
    assert on.status == "fail" and on.diagnosis.id == "policy_violation", (way, on.diagnosis_detail)
    off = check_file(path, seed=2, limits=LIMITS, pool=pool, policy=False)
    assert off.status == "fail" and off.diagnosis.id == "forbidden_op", (way, off.diagnosis_detail)
    assert "line 11" in off.diagnosis_detail, (way, off.diagnosis_detail)
