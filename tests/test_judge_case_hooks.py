"""Engine hooks the Wave 2 exercises added: grader-set module attributes, shape-predicting variants, tuple probes.

A throw-away exercise `pairdemo` (registered for the test only) returns
`(out, aux)` like moe: `pair(x, w)` -> (x * w * SCALE, sum(x * w, dim=0)),
graded one element per case (`Case.extra["tuple"]`) with the module
constant SCALE set by the grader on one input. Its files are graded through
the fork server like every fixture: SCALE is seen by the call that set it
and restored after it; a variant that predicts a wrong *shape* (aux summed
over too few dims) names a file that makes that mistake; a determinism probe
on a tuple case compares the same element of both calls. The quick
comparison bug matching uses gives the full comparison's verdicts.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from drill.judge import registry
from drill.judge.check import check_file
from drill.judge.compare import compare
from drill.judge.pool import ChildPool
from drill.judge.runner import Limits
from drill.judge.spec import Bug, Case, Diagnosis, Spec
from drill.judge.specs._common import TOLERANCES, Draw, call_case, twice_probes

NAMES = ("out", "aux")
AUX_PARTIAL = Diagnosis("pair_aux_partial", "aux summed over dim 0 only", "aux sums every leading dim.",
                        "Flatten the leading dims first.")


def _forward(x, w, scale):
    prod = x * w
    return prod * scale, prod.reshape(-1, prod.shape[-1]).sum(0)


def _make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    cases = []
    for name, shape, attrs in (("own SCALE", (2, 5), None), ("SCALE=3 set by the grader", (2, 3, 5), {"SCALE": 3.0}),
                               ("own SCALE again, 3-D", (3, 2, 5), None)):
        x, w = d.normal(*shape), d.normal(shape[-1])
        base = call_case(d, name, "pair", {"x": x, "w": w}, module_attrs=attrs,
                         ctx={"scale": (attrs or {}).get("SCALE", 1.0)})
        for pick, what in enumerate(NAMES):
            cases.append(dataclasses.replace(base, name=f"{name}: {what}", ctx={**base.ctx, "pick": pick, "what": what},
                                             extra={"tuple": {"names": list(NAMES), "pick": pick}}))
    return twice_probes(cases, n=2)


def _aux_partial(case: Case):
    if case.ctx["pick"] == 0:
        return None
    return (case.args["x"] * case.args["w"]).sum(0)


SPEC = Spec(
    name="pairdemo", graded=("pair",), make_cases=_make_cases, tolerances=TOLERANCES,
    reference=lambda case: (_forward(case.args["x"], case.args["w"], case.ctx["scale"])[case.ctx["pick"]], {}),
    bugs=(Bug(AUX_PARTIAL, _aux_partial, "sum(0)"),),
)

GOOD = """
SCALE = 1.0


def pair(x, w):
    prod = x * w
    return prod * SCALE, prod.reshape(-1, prod.shape[-1]).sum(0)
"""


@pytest.fixture()
def pairdemo(monkeypatch: pytest.MonkeyPatch):
    entry = dataclasses.replace(registry.entry("rmsnorm"), name="pairdemo", graded=("pair",), defaults={})
    monkeypatch.setitem(registry._BY_NAME, "pairdemo", entry)
    monkeypatch.setitem(registry.SPECS, "pairdemo", "tests.pairdemo")
    real = registry.load_spec
    monkeypatch.setattr(registry, "load_spec", lambda name: SPEC if name == "pairdemo" else real(name))


@pytest.fixture(scope="module")
def pool(fork_server):
    return fork_server


def _grade(tmp_path: Path, source: str, pool: ChildPool):
    path = tmp_path / "pairdemo.py"
    path.write_text(source)
    return check_file(path, "pairdemo", seed=5, limits=Limits(timeout_s=30, cpu_s=30, memory_mb=2048), pool=pool)


def test_the_good_file_passes(tmp_path, pairdemo, pool) -> None:
    result = _grade(tmp_path, GOOD, pool)
    assert result.status == "pass", (result.diagnosis_detail, [(t.name, t.message) for t in result.tests])


def test_the_grader_set_attribute_is_seen_and_restored(tmp_path, pairdemo, pool) -> None:
    """A file that froze SCALE at import fails only the input that set it; the value is put back after that case."""
    frozen = _grade(tmp_path, GOOD.replace("def pair(x, w):", "def pair(x, w, scale=SCALE):").replace(
        "prod * SCALE", "prod * scale"), pool)
    assert {t.name for t in frozen.tests if t.status != "pass"} == {"SCALE=3 set by the grader: out"}
    record = "    assert SCALE == (3.0 if tuple(x.shape) == (2, 3, 5) else 1.0), SCALE\n    prod = x * w"
    seen = _grade(tmp_path, GOOD.replace("    prod = x * w", record), pool)
    assert seen.status == "pass", [(t.name, t.message) for t in seen.tests]


def test_a_variant_that_predicts_the_wrong_shape_names_it(tmp_path, pairdemo, pool) -> None:
    result = _grade(tmp_path, GOOD.replace("prod.reshape(-1, prod.shape[-1]).sum(0)", "prod.sum(0)"), pool)
    assert result.status == "fail" and result.diagnosis.id == "pair_aux_partial", result.diagnosis_detail
    failing = {t.name for t in result.tests if t.status != "pass"}
    assert failing == {"SCALE=3 set by the grader: aux", "own SCALE again, 3-D: aux"}  # 2-D: the same sum


def test_a_wrong_shape_no_variant_predicts_stays_wrong_shape(tmp_path, pairdemo, pool) -> None:
    result = _grade(tmp_path, GOOD.replace("prod.reshape(-1, prod.shape[-1]).sum(0)", "prod.sum(-1)"), pool)
    assert result.diagnosis.id == "wrong_shape", result.diagnosis_detail


def test_a_determinism_probe_compares_the_same_tuple_element(tmp_path, pairdemo, pool) -> None:
    noisy = GOOD.replace("return prod * SCALE,", "return prod * SCALE + 0.1 * torch.rand_like(prod),")
    result = _grade(tmp_path, "import torch\n" + noisy, pool)
    assert result.diagnosis.id == "nondeterministic", result.diagnosis_detail


def test_quick_comparisons_agree_with_full_ones() -> None:
    gen = torch.Generator().manual_seed(0)
    tol = TOLERANCES["float32"]
    for trial in range(300):
        e = torch.randn(6, generator=gen)
        g = e + torch.randn(6, generator=gen) * (10.0 ** -torch.randint(2, 7, (), generator=gen).item())
        if trial % 7 == 0:
            g[trial % 6] = float("nan")
        if trial % 11 == 0:
            e[1] = float("inf")
        ignore = torch.rand(6, generator=gen) < 0.2 if trial % 3 == 0 else None
        care = torch.rand(6, generator=gen) < 0.8 if trial % 5 == 0 else None
        full = compare(g, e, tol, ignore=ignore, care=care)
        quick = compare(g, e, tol, ignore=ignore, care=care, quick=True)
        assert (full.ok, full.reason) == (quick.ok, quick.reason), (g, e, ignore, care)
