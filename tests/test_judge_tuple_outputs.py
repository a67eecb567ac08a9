"""Tuple outputs, grader-set module attributes and judged cases: the engine pieces Wave 2 exercises share.

A throw-away exercise `pairdemo` (registered for the test only) returns
`(out, aux)` like moe: `pair(x, w)` -> (x * w * SCALE, sum(x * w)), with the
module constant SCALE set by the grader on one case. Its files are graded
through the fork server like every fixture: each element is compared on its
own and a failure names it, a wrong container is `wrong_type` in words,
gradients flow back from both elements (one upstream per element), a bug
variant returns per-element productions, and SCALE is restored after the
case that set it. The pieces' own contracts (compare_outputs,
boundary.graded_output, diagnose.production) are tested directly.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from drill.judge import boundary, registry
from drill.judge.check import check_file
from drill.judge.compare import compare_outputs, shapes
from drill.judge.diagnose import production
from drill.judge.runner import ChildPool, Limits
from drill.judge.spec import Bug, Case, Diagnosis, Spec
from drill.judge.specs._common import TOLERANCES, Draw, call_case, reference_with_grads

NAMES = ("out", "aux")
AUX_MEAN = Diagnosis("pair_aux_mean", "aux is a mean", "aux must be the sum.", "Use .sum().")


def _forward(a: dict, scale: float):
    prod = a["x"] * a["w"]
    return prod * scale, prod.sum()


def _make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    cases = []
    for name, attrs in (("own SCALE", None), ("SCALE=3 set by the grader", {"SCALE": 3.0}), ("own SCALE again", None)):
        x, w = d.normal(2, 5), d.normal(5)
        cases.append(call_case(d, name, "pair", {"x": x, "w": w}, grads=("x", "w"), outputs=NAMES,
                               out_shape=((2, 5), ()), out_dtype=(torch.float32, torch.float32), module_attrs=attrs,
                               ctx={"scale": (attrs or {}).get("SCALE", 1.0)}))
    x, w = d.normal(3, 4), d.normal(4)
    cases.append(call_case(d, "no gradient from aux", "pair", {"x": x, "w": w}, grads=("x",), outputs=NAMES,
                           out_shape=((3, 4), None), out_dtype=(torch.float32, torch.float32), ctx={"scale": 1.0}))
    return cases


def _aux_mean(case: Case):
    prod = case.args["x"] * case.args["w"]
    return None, prod.mean()  # out as expected, aux wrong


SPEC = Spec(
    name="pairdemo", graded=("pair",), make_cases=_make_cases, tolerances=TOLERANCES,
    reference=lambda case: reference_with_grads(case, lambda a, p: _forward(a, case.ctx["scale"])),
    bugs=(Bug(AUX_MEAN, _aux_mean, "aux = mean"),),
)

GOOD = """
SCALE = 1.0


def pair(x, w):
    prod = x * w
    return prod * SCALE, prod.sum()
"""


@pytest.fixture()
def pairdemo(monkeypatch: pytest.MonkeyPatch):
    entry = dataclasses.replace(registry.entry("rmsnorm"), name="pairdemo", graded=("pair",), defaults={})
    monkeypatch.setitem(registry._BY_NAME, "pairdemo", entry)
    monkeypatch.setitem(registry.SPECS, "pairdemo", "tests.pairdemo")
    real = registry.load_spec
    monkeypatch.setattr(registry, "load_spec", lambda name: SPEC if name == "pairdemo" else real(name))


@pytest.fixture(scope="module")
def pool():
    with ChildPool() as p:
        yield p


def _grade(tmp_path: Path, source: str, pool: ChildPool):
    path = tmp_path / "pairdemo.py"
    path.write_text(source)
    return check_file(path, "pairdemo", seed=5, limits=Limits(timeout_s=30, cpu_s=30, memory_mb=2048), pool=pool)


def test_a_correct_tuple_passes_with_gradients_from_both_elements(tmp_path, pairdemo, pool) -> None:
    result = _grade(tmp_path, GOOD, pool)
    assert result.status == "pass", (result.diagnosis_detail, [(t.name, t.message) for t in result.tests])
    assert result.total == 4


def test_a_wrong_element_is_named_and_matched_by_a_tuple_variant(tmp_path, pairdemo, pool) -> None:
    result = _grade(tmp_path, GOOD.replace("prod.sum()", "prod.mean()"), pool)
    assert result.status == "fail" and result.diagnosis.id == "pair_aux_mean", result.diagnosis_detail
    failing = [t for t in result.tests if t.status == "fail"]
    assert failing and all(t.message.startswith("aux: ") for t in failing), [t.message for t in failing]


def test_gradients_through_one_element_only_are_checked(tmp_path, pairdemo, pool) -> None:
    """aux's gradient is wrong (detached) while its value is right: only cases with an aux upstream fail."""
    result = _grade(tmp_path, GOOD.replace("prod.sum()", "prod.detach().sum()"), pool)
    assert result.status == "fail" and result.diagnosis.id == "grad_broken", result.diagnosis_detail
    by_name = {t.name: t.status for t in result.tests}
    assert by_name["no gradient from aux"] == "pass" and by_name["own SCALE"] == "fail", by_name


@pytest.mark.parametrize("body, words", [
    ("return prod * SCALE", "returned torch.Tensor instead of a tuple (out, aux)"),
    ("return prod * SCALE, prod.sum(), prod", "returned a tuple of 3 items instead of a tuple (out, aux)"),
    ("return [prod * SCALE, float(prod.sum())]", "returned aux as float instead of a tensor"),
])
def test_a_wrong_container_is_wrong_type_in_words(tmp_path, pairdemo, pool, body: str, words: str) -> None:
    result = _grade(tmp_path, GOOD.replace("return prod * SCALE, prod.sum()", body), pool)
    assert result.diagnosis.id == "wrong_type", result.diagnosis_detail
    assert words in result.diagnosis_detail


def test_the_grader_set_attribute_is_seen_and_restored(tmp_path, pairdemo, pool) -> None:
    """A file that ignores SCALE fails only the case that set it; one that keeps the last value fails after it."""
    frozen = _grade(tmp_path, GOOD.replace("def pair(x, w):", "def pair(x, w, scale=SCALE):").replace(
        "prod * SCALE", "prod * scale"), pool)
    assert [t.name for t in frozen.tests if t.status != "pass"] == ["SCALE=3 set by the grader"]
    # the restore is observable: a file that records SCALE each call sees 1, 3, 1, 1
    record = ("    SEEN.append(SCALE)\n    assert SEEN[-1] == [1.0, 3.0, 1.0, 1.0][len(SEEN) - 1], SEEN\n"
              "    prod = x * w")
    seen = _grade(tmp_path, GOOD.replace("    prod = x * w", record) + "\nSEEN = []\n", pool)
    assert seen.status == "pass", [(t.name, t.message) for t in seen.tests]


def test_compare_outputs_names_the_element_and_lists_the_others() -> None:
    tol = TOLERANCES["float32"]
    want = (torch.ones(3), torch.zeros(2))
    ok = compare_outputs((torch.ones(3), torch.zeros(2)), want, tol, names=("a", "b"))
    assert ok.ok and ok.max_abs == 0.0
    both = compare_outputs((torch.full((3,), 2.0), torch.ones(2)), want, tol, names=("a", "b"))
    assert not both.ok and both.message.startswith("a: ") and both.message.endswith("(also wrong: b)")
    dtype = compare_outputs((torch.ones(3), torch.zeros(2, dtype=torch.float64)), want, tol, names=("a", "b"),
                            dtype=(torch.float32, torch.float32))
    assert dtype.reason == "dtype" and dtype.message.startswith("b has dtype float64")
    assert compare_outputs(torch.ones(3), want, tol, names=("a", "b")).reason == "shape"
    assert shapes(want) == ((3,), (2,)) and shapes(torch.ones(2, 2)) == (2, 2)


def test_quick_comparisons_agree_with_full_ones() -> None:
    gen = torch.Generator().manual_seed(0)
    tol = TOLERANCES["float32"]
    for trial in range(200):
        e = torch.randn(6, generator=gen)
        g = e + torch.randn(6, generator=gen) * (10.0 ** -torch.randint(2, 7, (), generator=gen).item())
        if trial % 7 == 0:
            g[trial % 6] = float("nan")
        if trial % 11 == 0:
            e[1] = float("inf")
        ignore = torch.rand(6, generator=gen) < 0.2 if trial % 3 == 0 else None
        full = compare_outputs(g, e, tol, ignore=ignore)
        quick = compare_outputs(g, e, tol, ignore=ignore, quick=True)
        assert (full.ok, full.reason) == (quick.ok, quick.reason), (g, e, ignore)


def test_graded_output_accepts_only_the_promised_layout() -> None:
    t = torch.zeros(2)
    assert boundary.graded_output({"out": t}, 0) is t
    assert boundary.graded_output({"out.0": t, "out.1": t, "input:x": t}, 2) == (t, t)
    for saved, n in (({"out.0": t}, 2), ({"out": t, "out.0": t, "out.1": t}, 2),
                     ({"out.0": t, "out.1": t, "out.2": t}, 2), ({"out": 1.0}, 0), ({"out.0": t, "out.1": [t]}, 2),
                     ([t], 0), ({0: t}, 0)):
        with pytest.raises((TypeError, ValueError)):
            boundary.graded_output(saved, n)


def test_a_tuple_production_fills_in_the_expected_elements() -> None:
    case = Case(name="c", target="pair", outputs=NAMES, expected=(torch.ones(2), torch.zeros(())))
    assert production(None, case) == (None, None)
    assert production((None, None), case) == (None, None)
    variant, unknown = production((None, torch.ones(())), case)
    assert torch.equal(variant[0], torch.ones(2)) and float(variant[1]) == 1.0 and unknown is None
    mask = torch.tensor([True, False])
    variant, unknown = production(((torch.zeros(2), mask), None), case)
    assert torch.equal(variant[0], torch.zeros(2)) and unknown[0] is mask and unknown[1] is None
    with pytest.raises(ValueError):
        production(torch.ones(2), case)
