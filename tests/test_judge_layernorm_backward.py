"""layernorm_backward grading: the expected values are autograd's, the cases reach the contract's edges,
every named mistake shows and is told apart, and aten's own backward kernel is trapped.

Fixture verdicts (5 styles that pass, one bug file per mistake) are checked by test_judge_fixtures.py.
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
from drill.judge.specs import layernorm_backward as lnb
from drill.reference import layer_norm_backward

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions" / "layernorm_backward"
SEEDS = (0, 1, 7, 20261129)
TOL = _tolerance_of(lnb.SPEC)
LIMITS = Limits(timeout_s=60, cpu_s=60, memory_mb=2048)


def _prepared(seed: int) -> list:
    cases = lnb.make_cases(seed)
    for c in cases:
        c.expected, c.expected_grads = lnb.reference(c)
    return cases


def _autograd(x, w, b, g, eps):
    leaves = [t.detach().double().requires_grad_(True) for t in (x, w, b)]
    y = F.layer_norm(leaves[0], (x.shape[-1],), leaves[1], leaves[2], eps)
    return torch.autograd.grad(y, leaves, g.double())


@pytest.mark.parametrize("shape", [(7,), (3, 16), (2, 5, 1), (2, 3, 4, 12)])
@pytest.mark.parametrize("eps", [1e-5, 1e-2])
def test_the_reference_closed_form_is_autograd_of_f_layer_norm(shape, eps) -> None:
    gen = torch.Generator().manual_seed(len(shape) * 31 + int(eps * 1e5))
    x = torch.randn(shape, generator=gen, dtype=torch.float64) * 2 + 1
    w = torch.randn(shape[-1], generator=gen, dtype=torch.float64)
    b = torch.randn(shape[-1], generator=gen, dtype=torch.float64)
    g = torch.randn(shape, generator=gen, dtype=torch.float64)
    got = layer_norm_backward(x, w, b, g, eps)
    want = _autograd(x, w, b, g, eps)
    for a, e in zip(got, want, strict=True):
        assert a.dtype == torch.float64 and a.shape == e.shape
        assert torch.allclose(a, e, rtol=1e-10, atol=1e-12)
    assert float(got[0].sum(-1).abs().max()) < 1e-10  # every row of dx sums to 0
    if shape[-1] == 1:
        assert torch.equal(got[0], torch.zeros_like(x))


def test_the_reference_keeps_each_dtype_and_accumulates_in_fp32() -> None:
    gen = torch.Generator().manual_seed(3)
    x = (torch.randn(2, 4, 24, generator=gen) * 400).half()  # squares overflow fp16
    g = torch.randn(2, 4, 24, generator=gen).half()
    w, b = torch.randn(24, generator=gen), torch.randn(24, generator=gen).bfloat16()
    dx, dw, db = layer_norm_backward(x, w, b, g, 1e-5)
    assert (dx.dtype, dw.dtype, db.dtype) == (torch.float16, torch.float32, torch.bfloat16)
    want = layer_norm_backward(x.float(), w, b.float(), g.float(), 1e-5)
    assert torch.isfinite(dx).all() and torch.allclose(dx.float(), want[0], rtol=1e-2, atol=1e-5)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_spec_reference_agrees_with_the_closed_form(seed: int) -> None:
    for c in _prepared(seed):
        a = c.args
        mine = layer_norm_backward(a["x"], a["weight"], a["bias"], a["grad_out"], c.ctx["eps"])[c.ctx["pick"]]
        assert c.expected.dtype == torch.float32 and torch.isfinite(c.expected).all(), c.name
        assert compare(mine, c.expected, TOL(c)).ok, c.name


@pytest.mark.parametrize("seed", SEEDS)
def test_the_cases_the_contract_names_are_there(seed: int) -> None:
    cases = lnb.make_cases(seed)
    assert {c.extra["tuple"]["pick"] for c in cases} == {0, 1, 2}
    assert all(c.extra["tuple"]["names"] == ["dx", "dweight", "dbias"] for c in cases)
    xs = [c.args["x"] for c in cases]
    assert {x.dim() - 1 for x in xs} == {1, 2, 3}  # leading dims 1-3
    assert any(x.shape[-1] == 1 for x in xs)
    assert {x.dtype for x in xs} == {torch.float32, torch.float16, torch.bfloat16}
    assert any(c.ctx["default_eps"] for c in cases) and {1e-2, 1e-3, 1e-5} <= {c.args.get("eps") for c in cases}
    mixed = [c for c in cases if c.args["weight"].dtype != c.args["x"].dtype]
    assert mixed and all(c.out_dtype == c.args[("x", "weight", "bias")[c.ctx["pick"]]].dtype for c in cases)
    assert any(c.repeat is not None for c in cases)
    assert any(float(x.abs().max()) > 256 and x.dtype == torch.float16 for x in xs)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_mistake_shows_and_each_id_differs_from_the_others(seed: int) -> None:
    cases = _prepared(seed)

    def value(bug, case):
        out = bug.fn(case)
        return out[0] if isinstance(out, tuple) else out

    outs = {}
    for bug in lnb.SPEC.bugs:
        outs[bug.label] = [value(bug, c) for c in cases]
        wrong = [c.name for c, o in zip(cases, outs[bug.label], strict=True) if o is not None
                 and (o.shape != c.expected.shape or not compare(o.to(c.out_dtype), c.expected, TOL(c)).ok)]
        assert wrong, bug.label
    ids = {b.label: b.diagnosis.id for b in lnb.SPEC.bugs}
    for a in outs:  # two mistakes with different names never give the same outputs on every case
        for b in outs:
            if ids[a] < ids[b]:
                assert any(oa is not None and ob is not None and (oa.shape != ob.shape or not torch.allclose(
                    oa.float(), ob.float(), rtol=1e-3, atol=1e-4, equal_nan=True))
                    for oa, ob in zip(outs[a], outs[b], strict=True)), (a, b)


def test_aten_native_layer_norm_backward_is_trapped_below_the_policy() -> None:
    path = SOLUTIONS / "bug_policy_violation__torch_ops_native_backward.py"
    with ChildPool() as pool:
        on = check_file(path, "layernorm_backward", 4, LIMITS, pool=pool)
        off = check_file(path, "layernorm_backward", 4, LIMITS, pool=pool, policy=False)
    assert on.diagnosis.id == "policy_violation", on.diagnosis_detail
    assert off.status == "fail" and off.diagnosis.id == "forbidden_op", off.diagnosis_detail
    assert "native_layer_norm_backward" in off.diagnosis_detail and "line 9" in off.diagnosis_detail
