"""The memory (gqa) and routing (moe) audits measure the graded calls themselves (issue 30 §2).

They used to make a call of their own, under no_grad on a module they built, and a file that checked
`torch.is_grad_enabled()` grouped K/V or routed its tokens only then: it passed `--strict` while every
graded call did the wasteful thing. Each fixture in tests/fixtures/measured/ does exactly that; graded
with `--strict` it must now fail with the advice its waste deserves (and pass without --strict: its
values are right). The judging half's handling of several measurements is tested on plain data.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from drill.judge import audit
from drill.judge.check import check_file
from drill.judge.runner import Limits
from drill.judge.specs import gqa, moe

MEASURED = Path(__file__).parent / "fixtures" / "measured"

# fixture -> (exercise, a phrase of the advice)
SWITCHERS = {
    "gqa__grouped_only_without_grad": ("gqa", "K/V copied to all 8 query heads"),
    "moe__routed_only_without_grad": ("moe", "every expert runs on every token"),
}


@pytest.mark.parametrize("stem", SWITCHERS)
def test_a_file_that_behaves_only_when_autograd_is_off_fails_strict(stem: str, fork_server) -> None:
    exercise, advice = SWITCHERS[stem]
    path = MEASURED / f"{stem}.py"
    strict = check_file(path, exercise, 3, Limits(), pool=fork_server, strict=True)
    assert strict.status == "fail" and "--strict" in strict.diagnosis_detail, strict.diagnosis_detail
    assert any(advice in a for a in strict.advisories), strict.advisories
    assert any("graded calls" in line for line in strict.audit), strict.audit
    plain = check_file(path, exercise, 3, Limits(), pool=fork_server)
    assert plain.status == "pass", (plain.diagnosis, plain.diagnosis_detail)


@pytest.mark.parametrize("spec", [gqa.SPEC, moe.SPEC], ids=lambda s: s.name)
def test_the_measured_cases_are_graded_cases_in_grad_mode(spec) -> None:
    cases = spec.make_cases(5)
    marked = [c for c in cases if c.extra.get("measure")]
    assert marked and all(c.extra["measure"] == spec.audit["name"] for c in marked)
    assert all(c.kind == "module" and c.ctx["dtype"] == "float32" for c in marked)
    assert any(c.upstream is not None for c in marked)  # graded with gradients, as the other fp32 cases
    biggest = max(c.args["x"].numel() for c in marked)
    assert biggest == max(c.args["x"].numel() for c in cases)  # the audit-sized case is among them


def _gqa(batch: int, seq: int, expanded: list) -> dict:
    return {"config": {"batch": batch, "seq": seq, "d_model": 32, "n_heads": 4, "n_kv_heads": 2},
            "peak_bytes": 1000, "baseline_peak_bytes": 900, "kv_bytes": 100, "expanded": expanded}


COPY = {"what": "K", "shape": [2, 4, 5, 8], "bytes": 640}


def test_the_largest_call_is_shown_and_any_call_s_waste_is_advised() -> None:
    lines, advice, measured = audit.judge("gqa_memory", {"cases": [_gqa(1, 5, [COPY]), _gqa(2, 48, [])]})
    assert measured and "B=2, T=48" in lines[0]
    assert any("B=1, T=5" in line for line in lines) and advice and "K/V copied" in advice[0]
    lines, advice, measured = audit.judge("gqa_memory", {"cases": [_gqa(1, 5, []), _gqa(2, 48, [])]})
    assert measured and advice == [] and lines[-1].startswith("measured during 2 graded calls")


@pytest.mark.parametrize("cases", [[], "x", [{"config": {}}]], ids=["none", "not a list", "unreadable"])
def test_no_or_malformed_measurements_could_not_measure(cases) -> None:
    lines, advice, measured = audit.judge("gqa_memory", {"cases": cases})
    assert not measured and advice == [] and "could not measure" in lines[0]


def test_one_call_that_measured_nothing_makes_the_audit_unmeasured() -> None:
    silent = {**_gqa(1, 5, []), "peak_bytes": 0}
    lines, _advice, measured = audit.judge("gqa_memory", {"cases": [_gqa(2, 48, []), silent]})
    assert not measured and "could not measure one of the graded calls" in lines[-1]
