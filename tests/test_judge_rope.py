"""rope grading: the hidden cases, the convention handling, tolerances and the bug variants.

Fixture verdicts (good_* pass, bug_<id>__* get <id>) are checked for every
file by test_judge_fixtures.py; here: what the cases are made of, that each
variant model is exact where it should be, and the CONVENTION contract
end to end (declared, absent, invalid).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from drill.judge.check import check_file
from drill.judge.compare import compare
from drill.judge.pool import ChildPool
from drill.judge.runner import Limits
from drill.judge.specs import rope
from drill.judge.specs._rope_bugs import rotate
from drill.reference.rope import apply_rope

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions" / "rope"
SEEDS = (0, 1, 7, 20261129)


@pytest.fixture(scope="module")
def pool(fork_server):
    return fork_server


@pytest.mark.parametrize("seed", SEEDS)
def test_cases_cover_offsets_gaps_large_positions_bases_dtypes_and_dims(seed: int) -> None:
    cases = rope.make_cases(seed)
    direct = [c for c in cases if c.ctx["kind"] == "direct"]
    positions = [c.args["positions"] for c in direct]
    assert any(torch.equal(p, torch.arange(len(p))) for p in positions)
    assert sum(not torch.equal(p, torch.arange(len(p))) for p in positions) >= 5
    assert any(int(p.max()) >= 9000 for p in positions)
    assert any(bool((p.diff() > 1).any()) for p in positions)  # gaps
    assert {c.args["base"] for c in direct} >= {10000.0, 500000.0}
    assert {c.ctx["dtype"] for c in direct} >= {"float32", "bfloat16", "float16"}
    bf16 = [c for c in direct if c.ctx["dtype"] == "bfloat16"]
    assert all(int(c.args["positions"].max()) >= 8000 for c in bf16)  # where low-precision angles show
    assert len({c.args["x"].shape[-1] for c in direct}) >= 2
    assert {c.ctx["kind"] for c in cases} == {"direct", "norm", "relative"}
    assert any(c.wants_grads for c in direct)


def test_tolerance_grows_with_the_largest_position() -> None:
    small = rope.SPEC.tolerances["float32@1024"]
    large = rope.SPEC.tolerances["float32@16384"]
    assert large.atol > small.atol * 10 and large.rtol == small.rtol


@pytest.mark.parametrize("convention", ["half", "interleaved"])
def test_exact_variant_matches_the_reference(convention: str) -> None:
    """The variants' rotation with every knob at its default is the reference itself."""
    x = torch.randn(2, 3, 5, 16)
    p = torch.tensor([0, 3, 900, 4000, 12000])
    want = apply_rope(x, p, 500000.0, convention, impl="math")
    got = rotate(x, p, 500000.0, convention)
    assert compare(got, want.double(), rope.SPEC.tolerances["float32@16384"]).ok
    other = "interleaved" if convention == "half" else "half"
    assert not compare(rotate(x, p, 500000.0, other), want.double(), rope.SPEC.tolerances["float32@16384"]).ok


def test_prepare_keeps_the_declared_convention_and_refuses_unknown_ones() -> None:
    cases = rope.make_cases(3)
    for c in cases:
        c.expected, c.expected_grads = rope.reference(c)
    assert rope.prepare(cases, {"CONVENTION": {"present": True, "value": "interleaved", "type": "str"}}) is None
    direct = next(c for c in cases if c.ctx["kind"] == "direct")
    a = direct.args
    want = apply_rope(a["x"].float(), a["positions"], a["base"], "interleaved", impl="math")
    assert torch.allclose(direct.expected, want)
    assert rope.prepare(cases, {"CONVENTION": {"present": False}}) is None
    assert direct.ctx["convention"] == "half" and direct.ctx["declared"] == "absent"
    refused = rope.prepare(cases, {"CONVENTION": {"present": True, "value": "neox", "type": "str"}})
    assert refused is not None and refused[0].id == "rope_convention_invalid" and "'neox'" in refused[1]
    refused = rope.prepare(cases, {"CONVENTION": {"present": True, "value": None, "type": "list"}})
    assert refused is not None and "a list" in refused[1]


def test_property_cases_derive_norms_and_shifted_scores() -> None:
    cases = rope.make_cases(5)
    for c in cases:
        c.expected, c.expected_grads = rope.reference(c)
    rope.prepare(cases, {})
    tol = rope.SPEC.tolerances
    for case in (c for c in cases if c.ctx["kind"] in ("norm", "relative")):
        a = case.args
        good = apply_rope(a["x"], a["positions"], a["base"], "half", impl="math")
        assert compare(case.derive(good), case.expected, tol[case.ctx["tol"]]).ok, case.name
        scrambled = good[..., torch.randperm(good.shape[-2]), :] * 1.5
        assert not compare(case.derive(scrambled), case.expected, tol[case.ctx["tol"]]).ok, case.name
        assert case.derive(good[..., :2]).shape == good[..., :2].shape  # a wrong shape passes through to compare


def _write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "rope.py"
    path.write_text(body, encoding="utf-8")
    return path


GOOD_BODY = (SOLUTIONS / "good_rotate_half.py").read_text(encoding="utf-8")


def test_invalid_convention_fails_clearly(tmp_path: Path, pool: ChildPool) -> None:
    path = _write(tmp_path, GOOD_BODY.replace('CONVENTION = "half"', 'CONVENTION = "Half"'))
    result = check_file(path, None, 4, Limits(), pool=pool)
    assert result.status == "fail"
    assert result.diagnosis.id == "rope_convention_invalid"
    assert "'Half'" in result.diagnosis_detail and '"interleaved"' in result.diagnosis_detail


def test_swapped_convention_says_how_to_declare(tmp_path: Path, pool: ChildPool) -> None:
    source = (SOLUTIONS / "good_interleaved_stack.py").read_text()
    path = _write(tmp_path, source.replace('CONVENTION = "interleaved"\n', ""))
    result = check_file(path, None, 4, Limits(), pool=pool)
    assert result.diagnosis is not None and result.diagnosis.id == "rope_convention_swapped"
    assert 'CONVENTION = "interleaved"' in result.diagnosis_detail
