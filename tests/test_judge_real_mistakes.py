"""Mistakes real code makes (issue 18): the probes and rules behind their names, through the fork server.

test_judge_fixtures.py checks every fixture's id on one seed and
test_judge_seed_stability.py on three more; here: the determinism probes
exist in every exercise and draw nothing, a second call's disagreement fails
a case whose first output was right, two mistakes are ranked by the tests
each explains (and the other is listed), and the new diagnoses say what the
issue asks them to say (the contract's default eps, which tests fail).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from drill.cli import app
from drill.judge import registry
from drill.judge.check import check_file
from drill.judge.compare import compare
from drill.judge.diagnose import again_check
from drill.judge.runner import Limits
from drill.judge.spec import Tolerance

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions"
SEED = 5


@pytest.mark.parametrize("name", list(registry.SPECS))
@pytest.mark.parametrize("seed", [0, 9])
def test_every_exercise_has_determinism_probes_on_plain_fp32_cases(name: str, seed: int) -> None:
    spec = registry.load_spec(name)
    probes = [c for c in spec.make_cases(seed) if c.extra.get("twice")]
    if spec.no_determinism_probes:  # the exception says why, and then has none
        assert not probes, name
        return
    assert 2 <= len(probes) <= 3, name
    for case in probes:
        assert case.ctx["dtype"] == "float32" and case.repeat is None and case.derive is None, case.name
        assert case.kind in ("call", "module") or case.extra.get("returns") == "out", case.name


@pytest.mark.parametrize("name", list(registry.SPECS))
def test_marking_the_probes_draws_nothing(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same seed gives the same inputs with and without the probes: older cases of a seed are unchanged."""
    spec = registry.load_spec(name)
    marked = spec.make_cases(3)
    module = __import__(spec.make_cases.__module__, fromlist=["twice_probes"])
    if hasattr(module, "twice_probes"):
        monkeypatch.setattr(module, "twice_probes", lambda cases, n=3: cases)
    plain = spec.make_cases(3)
    assert [c.name for c in marked] == [c.name for c in plain]
    for a, b in zip(marked, plain, strict=True):
        for key, value in a.args.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(value, b.args[key]), (a.name, key)


def test_a_second_call_that_disagrees_fails_the_case_even_when_the_first_was_right() -> None:
    tol = Tolerance(2e-5, 1e-4)
    expected = torch.ones(3, 4)
    first = compare(expected.clone(), expected, tol)
    assert first.ok
    assert again_check(first, expected.clone(), expected.clone(), tol) is first  # identical: unchanged
    changed = expected.clone()
    changed[1, 2] = 0.0
    failed = again_check(first, expected.clone(), changed, tol)
    assert not failed.ok and failed.reason == "values"
    assert failed.message.startswith("a second call with identical inputs returned other values: second call: 1 of 12")
    assert again_check(first, expected.clone(), None, tol) is first  # no probe on this case


@pytest.fixture(scope="module")
def graded(fork_server) -> dict[str, object]:
    files = [
        "mha/bug_nondeterministic__nanogpt_dropout.py",
        "attention/bug_mask_inverted__two_bugs_mask_none_unhandled.py",
        "mha/bug_mask_none_unhandled__two_bugs_masked_row_nan.py",
        "rmsnorm/bug_rms_default_eps__llama2c_1e5.py",
        "kv_cache/bug_rope_convention_swapped__meta_undeclared.py",
        "gqa/bug_missing_scale__two_bugs_gqa_tiled_kv.py",
    ]
    pool = fork_server
    return {f: check_file(SOLUTIONS / f, f.split("/")[0], SEED, Limits(), pool=pool) for f in files}


def test_dropout_is_named_from_the_two_identical_calls(graded) -> None:
    result = graded["mha/bug_nondeterministic__nanogpt_dropout.py"]
    assert result.diagnosis.id == "nondeterministic"
    assert "calls your code twice on identical inputs and the outputs disagree" in result.diagnosis_detail
    assert "dropout" in result.diagnosis.why and "p = 0" in result.diagnosis.fix


def test_two_mistakes_name_the_one_explaining_more_tests_and_list_the_other(graded) -> None:
    inverted = graded["attention/bug_mask_inverted__two_bugs_mask_none_unhandled.py"]
    assert inverted.diagnosis.id == "mask_inverted" and inverted.diagnosis_partial
    assert "more than one mistake: mask=None not handled (mask_none_unhandled) shows on 5 other failing tests" \
        in inverted.diagnosis_detail
    none = graded["mha/bug_mask_none_unhandled__two_bugs_masked_row_nan.py"]
    assert none.diagnosis.id == "mask_none_unhandled" and none.diagnosis_partial
    assert "every test without a mask raises (4 tests)" in none.diagnosis_detail
    assert "(masked_row_nan) shows on 2 other failing tests" in none.diagnosis_detail
    combo = graded["gqa/bug_missing_scale__two_bugs_gqa_tiled_kv.py"]  # one composed variant explains every test
    assert combo.diagnosis.id == "missing_scale" and combo.diagnosis_partial
    assert f"and gqa_tiled_kv together (no scaling; K/V heads tiled) on {combo.total} failing tests" \
        in combo.diagnosis_detail


def test_a_default_eps_off_the_contract_says_so_and_only_default_eps_tests_fail(graded) -> None:
    result = graded["rmsnorm/bug_rms_default_eps__llama2c_1e5.py"]
    assert result.diagnosis.id == "rms_default_eps" and not result.diagnosis_partial
    failing = [t.name for t in result.tests if t.status != "pass"]
    assert failing and all("default eps" in name for name in failing), failing
    assert any("explicitly" in t.name and t.status == "pass" for t in result.tests)
    assert "eps = 1e-6" in result.diagnosis.why and "eps=1e-6" in result.diagnosis.fix
    assert "default eps 1e-05 instead of the contract's 1e-6" in result.diagnosis_detail


def test_an_undeclared_interleaved_cache_is_the_convention_swap(graded) -> None:
    result = graded["kv_cache/bug_rope_convention_swapped__meta_undeclared.py"]
    assert result.diagnosis.id == "rope_convention_swapped"
    assert 'declare CONVENTION = "interleaved"' in result.diagnosis_detail


def test_the_cli_json_names_a_declared_interleaved_cache_pass_and_an_invalid_value(tmp_path: Path,
                                                                                  monkeypatch) -> None:
    monkeypatch.setenv("DRILL_HOME", str(tmp_path))
    good = SOLUTIONS / "kv_cache" / "good_meta_interleaved_declared.py"
    bad = SOLUTIONS / "kv_cache" / "bug_rope_convention_invalid__neox_name.py"
    res = CliRunner().invoke(app, ["check", str(good), str(bad), "-e", "kv_cache", "--json", "--seed", "3"])
    docs = json.loads(res.output)
    assert res.exit_code == 1, res.output
    assert docs[0]["status"] == "pass"
    assert docs[1]["diagnosis"]["id"] == "rope_convention_invalid"
    assert docs[1]["diagnosis"]["detail"] == "CONVENTION is 'neox'; expected \"half\" or \"interleaved\""
