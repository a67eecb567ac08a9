"""Every legal mask form the contract allows is among the hidden tests, and failing only on one is named.

exercises/README.md: a bool mask of "any shape that broadcasts to (..., T_q, T_k)" is
legal (attention), and mha's "broadcasts to (B, n_heads, T, T)". Here: the cases of several seeds contain each
form, the reference accepts them on both of its paths, the mha variant for
"head 0's mask for every head" claims only what it can show, and the
`probe_failure` rule names `mask_shape_assumed` only when the failures are
confined to those probes and are exceptions or wrong shapes. Fixture verdicts
(through the real child) are in test_judge_fixtures.py.
"""

from __future__ import annotations

import pytest
import torch

from drill.judge.compare import Comparison, compare
from drill.judge.diagnose import CaseEval, probe_failure
from drill.judge.spec import Case
from drill.judge.specs import attention, mha
from drill.judge.specs._attention_bugs import D
from drill.reference.attention import sdpa

SEEDS = [0, 7, 20261129]


def _mask_shapes(cases: list[Case]) -> list[tuple[tuple[int, ...], int]]:
    """(mask shape, rank of q or x) for every case with a mask."""
    first = "q" if "q" in cases[0].args else "x"
    return [(tuple(c.args["mask"].shape), c.args[first].dim()) for c in cases if "mask" in c.args]


@pytest.mark.parametrize("seed", SEEDS)
def test_attention_cases_cover_every_mask_rank(seed: int) -> None:
    cases = attention.make_cases(seed)
    shapes = _mask_shapes(cases)
    assert any(len(s) == 1 for s, _ in shapes)  # 1-D key mask (T_k,)
    assert any(len(s) == 2 and rank == 3 for s, rank in shapes)  # (T_q, T_k) with 3-D inputs
    assert any(len(s) == 2 and s[-1] == 1 and s[-2] > 1 for s, _ in shapes)  # (T_q, 1) query mask
    assert any(len(s) == 2 and rank == 4 for s, rank in shapes)  # (T, T) with 4-D inputs
    assert any(len(s) == 4 and s[1:3] == (1, 1) for s, _ in shapes)  # (B, 1, 1, T_k) padding
    probes = [c for c in cases if "probe" in c.ctx]
    assert len(probes) == 3 and all(c.ctx["probe"].id == "mask_shape_assumed" for c in probes)
    for c in probes:  # T_q != T_k: a mask read along the wrong axis cannot pass by coincidence
        assert c.args["q"].shape[-2] != c.args["k"].shape[-2], c.name


@pytest.mark.parametrize("seed", SEEDS)
def test_mha_cases_cover_every_mask_form(seed: int) -> None:
    cases = mha.make_cases(seed)
    forms = set()
    for c in cases:
        if "mask" not in c.args:
            continue
        m, (B, T, _), H = c.args["mask"], c.args["x"].shape, c.ctx["n_heads"]
        assert torch.broadcast_shapes(m.shape, (B, H, T, T)) == (B, H, T, T), c.name
        forms.add({(T,): "1-D", (T, T): "(T,T)", (B, 1, 1, T): "padding", (B, 1, T, T): "(B,1,T,T)",
                   (B, H, T, T): "per-head"}.get(tuple(m.shape), str(tuple(m.shape))))
    assert {"1-D", "(T,T)", "padding", "(B,1,T,T)", "per-head"} <= forms
    per_head = next(c.args["mask"] for c in cases if c.args.get("mask") is not None and c.args["mask"].dim() == 4
                    and c.args["mask"].shape[1] > 1)
    assert per_head.any(dim=-1).all()  # no empty row: every element of the output is compared
    assert not (per_head[:, :1] == per_head[:, 1:]).all(dim=(-2, -1)).any()  # no head repeats head 0's mask


@pytest.mark.parametrize(
    "mask",
    [torch.tensor([True, False, True, True, False, True]), torch.tensor(True),
     torch.tensor([[True], [False], [True], [True]])],
    ids=["1-D key mask", "0-d", "(T_q,1)"],
)
def test_reference_takes_every_broadcastable_mask_on_both_paths(mask: torch.Tensor) -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, t, 8, generator=g) for t in (4, 6, 6))
    fused, math = sdpa(q, k, v, mask, impl="fused"), sdpa(q, k, v, mask, impl="math")
    full = sdpa(q, k, v, torch.broadcast_to(mask, (2, 3, 4, 6)).clone(), impl="math")
    assert torch.allclose(fused, math, atol=1e-5) and torch.allclose(math, full, atol=1e-6)


def test_head0_variant_shows_only_on_a_real_per_head_mask() -> None:
    cases = mha.make_cases(11)
    for case in cases:
        case.expected, _ = mha.reference(case)
        produced = mha.mha_variant(case, head0_mask=True)
        m = case.args.get("mask")
        real = m is not None and m.dim() >= 3 and m.shape[-3] > 1
        assert (produced is not None) == real, case.name
        if real:
            assert not compare(produced[0], case.expected, mha.SPEC.tolerances["float32"], ignore=produced[1]).ok


def _eval(name: str, status: str, *, probe: bool, reason: str | None = None) -> CaseEval:
    case = Case(name=name, target="f", ctx={"probe": D["mask_shape_assumed"]} if probe else {})
    forward = None if reason is None else Comparison(reason == "", reason, f"{reason or 'ok'} in {name}")
    record = {"type": "IndexError", "message": "tuple index out of range", "line": 12, "source": "mask.shape[-2]"}
    return CaseEval(case, status, record if status == "exception" else {}, forward=forward)


PASS = ("plain", "ok", False, "")
PROBE_RULES = [
    # (evals as (name, status, probe, forward reason), named?)
    ([PASS, ("1-D", "exception", True, None)], True),
    ([PASS, ("3-D", "ok", True, "shape")], True),
    ([PASS, ("1-D", "exception", True, None), ("3-D", "ok", True, "shape")], True),
    ([PASS, ("1-D", "ok", True, "values")], False),  # a wrong value may be any mistake
    ([PASS, ("1-D", "exception", True, None), ("causal", "exception", False, None)], False),  # not confined to probes
    ([("1-D", "exception", True, None)], False),  # nothing passed: no evidence the usual forms work
    ([PASS, PASS], False),
]


@pytest.mark.parametrize("rows,named", PROBE_RULES)
def test_probe_failure_names_the_clause_only_when_confined_to_probes(rows, named: bool) -> None:
    verdict = probe_failure([_eval(n, s, probe=p, reason=r) for n, s, p, r in rows])
    assert (verdict is not None) == named
    if named:
        assert verdict.diagnosis.id == "mask_shape_assumed" and "every other test passes" in verdict.detail
        first_failing = next(n for n, s, _, r in rows if s != "ok" or r)
        assert f"test '{first_failing}'" in verdict.detail
