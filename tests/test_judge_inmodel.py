"""`drill check --in-model`: the learner's component inside the reference decoder."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from drill.cli import app
from drill.judge import inmodel
from drill.judge.check import check_file
from drill.judge.runner import ChildPool, Limits

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions"
GOOD = {
    "rmsnorm": "good_hf_style.py",
    "swiglu": "good_fused_matmul.py",
    "rope": "good_complex.py",  # declares "interleaved": the decoder follows the declaration
    "gqa": "good_per_head_loop.py",
    "kv_cache": "good_recompute_inefficient.py",
}


@pytest.fixture(scope="module")
def results():
    with ChildPool() as pool:
        good = {ex: check_file(SOLUTIONS / ex / f, ex, 6, Limits(), pool=pool, in_model=True) for ex, f in GOOD.items()}
        bug = check_file(SOLUTIONS / "kv_cache" / "bug_kv_mask_top_left__tril_rectangle.py", "kv_cache", 6, Limits(),
                         pool=pool, in_model=True)
    return good, bug


@pytest.mark.parametrize("exercise", list(GOOD))
def test_good_component_passes_inside_the_decoder(exercise: str, results) -> None:
    result = results[0][exercise]
    in_model = [t for t in result.tests if t.name.startswith("in-model")]
    assert [t.status for t in in_model] == ["pass", "pass"], [t.message for t in in_model]
    assert result.status == "pass", result.diagnosis_detail


def test_bug_fails_inside_the_decoder_too_and_keeps_its_diagnosis(results) -> None:
    bug = results[1]
    in_model = {t.name.split(":")[1].split(" of ")[0].strip(): t.status for t in bug.tests if t.name.startswith("in-model")}
    assert in_model == {"logits": "pass", "greedy generation": "fail"}  # a full pass has no cache; decoding does
    assert bug.diagnosis.id == "kv_mask_top_left"  # in-model cases never disturb the bug matching


def test_reference_greedy_steps_are_never_near_ties() -> None:
    for exercise in ("rmsnorm", "gqa"):
        logits_case, tokens_case = inmodel.cases_for(exercise, 11)
        assert logits_case.expected.dtype == torch.float32 and tokens_case.expected.dtype == torch.int64
        assert tokens_case.expected.shape[1] == logits_case.args["ids"].shape[1] + inmodel.NEW_TOKENS


def test_in_model_is_refused_for_exercises_without_a_slot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRILL_HOME", str(tmp_path))
    res = CliRunner().invoke(app, ["check", str(SOLUTIONS / "mha" / "good_head_loop.py"), "-e", "mha", "--in-model"])
    assert res.exit_code == 2 and "--in-model" in res.output
