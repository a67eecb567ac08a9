"""A post-training loss returned per sequence instead of as the scalar the contract wants is named as a shape
mistake, with both shapes, not as a value mismatch (issue 25's bad input)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from drill.judge.check import check_file
from drill.judge.runner import Limits

SOL = Path(__file__).parent / "fixtures" / "solutions"
# exercise -> (a correct file, the scalar reduction to take out of it, the loss test's name)
PER_SEQUENCE = {
    "dpo": ("good_trl_style.py", "return losses.mean(), chosen_rewards", "loss"),
    "grpo": ("good_reshape_keepdim.py", "return ((per_token * m).sum(dim=1) / m.sum(dim=1)).mean()", "grpo_clip_loss"),
}


@pytest.mark.parametrize("exercise", list(PER_SEQUENCE))
def test_a_per_sequence_loss_is_named_a_wrong_shape(exercise: str, tmp_path: Path, fork_server) -> None:
    good, scalar, loss_test = PER_SEQUENCE[exercise]
    text = (SOL / exercise / good).read_text()
    assert scalar in text
    per_sequence = scalar.replace(".mean(), chosen", ", chosen") if exercise == "dpo" else scalar[:-len(".mean()")]
    path = tmp_path / f"{exercise}.py"
    path.write_text(text.replace(scalar, per_sequence))
    result = check_file(path, exercise, 3, Limits(), pool=fork_server)
    assert result.status == "fail"
    assert result.diagnosis.id == "wrong_shape", (result.diagnosis.id, result.diagnosis_detail)
    failing = [t for t in result.tests if t.status == "fail"]
    assert failing and all(loss_test in t.name for t in failing), [t.name for t in failing]
    shape_told = [bool(re.search(r"has shape \(\d+,\), expected \(\)", t.message)) for t in failing]
    assert all(shape_told), [t.message for t in failing]
