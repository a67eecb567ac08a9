"""From scratch by what the ops do (issue 30 §3): an exercise's op allowance, and reading the recorded graph.

Each fixture in tests/fixtures/allowance/ passed before: a library normalisation or reduction under a name
the blocklist did not hold (instance_norm, group_norm, logcumsumexp), or gradients taken from the graph's
own nodes (y.grad_fn). Each must now fail as forbidden_op, naming the op and the learner's line, with the
static policy on and off (the trap is in the child). That no correct style is refused is what
test_judge_fixtures.py's grid shows for the exercises with an allowance (every good_* fixture passes).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from drill.judge import registry
from drill.judge.allowance import Allowance
from drill.judge.check import check_file
from drill.judge.runner import Limits

ALLOWANCE = Path(__file__).parent / "fixtures" / "allowance"
SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions"

# fixture -> (what the refusal names, the learner's line it names)
REFUSED = {
    "layernorm__instance_norm": ("aten.native_batch_norm (not among this exercise's ops", "F.instance_norm"),
    "rmsnorm__group_norm": ("aten.native_group_norm (not among this exercise's ops", "F.group_norm"),
    "cross_entropy__logcumsumexp": ("aten.logcumsumexp (not among this exercise's ops", "torch.logcumsumexp"),
    "layernorm_backward__graph_nodes": ("reading a tensor's grad_fn", "_walk(y.grad_fn"),
}


@pytest.mark.parametrize("policy", [True, False], ids=["policy", "no-policy"])
@pytest.mark.parametrize("stem", REFUSED)
def test_an_op_outside_the_allowance_is_refused_with_its_line(stem: str, policy: bool, fork_server) -> None:
    exercise = stem.split("__")[0]
    result = check_file(ALLOWANCE / f"{stem}.py", exercise, 3, Limits(), pool=fork_server, policy=policy)
    what, line = REFUSED[stem]
    assert result.status == "fail" and result.diagnosis.id == "forbidden_op", result.diagnosis_detail
    assert what in result.diagnosis_detail and line in result.diagnosis_detail, result.diagnosis_detail


def test_the_exercises_with_an_allowance() -> None:
    have = {name for name in registry.graded_names() if registry.load_spec(name).allowance is not None}
    assert have == {"rmsnorm", "layernorm", "cross_entropy", "rmsnorm_backward", "layernorm_backward",
                    "cross_entropy_backward"}
    for name in have:  # the backward exercises' learners write the gradients: no backward kernel is theirs
        allowance = registry.load_spec(name).allowance
        assert allowance.graded_backward == (not name.endswith("_backward"))
        assert ("*_backward" in allowance.patterns()) == allowance.graded_backward


def test_an_allowance_s_patterns_and_words() -> None:
    plain = Allowance(families=("elementwise", "shape"), extra=("_softmax",), graded_backward=False)
    patterns = plain.patterns()
    assert {"mul", "mul_", "view", "_softmax", "_softmax_"} <= set(patterns)
    assert "mm" not in patterns and "*_backward" not in patterns and len(patterns) == len(set(patterns))
    assert plain.describe() == "elementwise ops, shape and copy ops and _softmax"
    assert Allowance(families=("matmul",)).describe() == "matmuls"


def test_the_grader_s_own_model_around_the_part_is_not_held_to_it(fork_server) -> None:
    good = SOLUTIONS / "rmsnorm" / "good_einsum_double.py"
    result = check_file(good, "rmsnorm", 3, Limits(), pool=fork_server, in_model=True)
    assert result.status == "pass", result.diagnosis_detail
    assert any(t.name.startswith("in-model") or "decoder" in t.name for t in result.tests)
