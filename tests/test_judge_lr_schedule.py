"""lr_schedule grading: the cases cross every piece and boundary, every mistake shows, calls are named.

Fixture verdicts are checked for every file by test_judge_fixtures.py; here:
the reference reproduces CS336's list to the bit, each seed's cases hold both
boundaries of each piece and a Tw = 0 schedule, every variant differs from
the reference (and from every variant of another mistake) on every seed, a
tensor or a bool where a float is due is `wrong_type`, and a failing test names
the call that is off with its arguments.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from drill.judge.check import _tolerance_of, check_file
from drill.judge.compare import compare
from drill.judge.runner import Limits
from drill.judge.specs import lr_schedule
from drill.reference.schedule import cosine_lr

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions" / "lr_schedule"
SEEDS = (0, 1, 7, 20261201)
TOL = _tolerance_of(lr_schedule.SPEC)
# CS336 a1's test list for (max_lr, min_lr, Tw, Tc) = (1.0, 0.1, 7, 21) at it = 0 .. 24.
CS336 = [0, 0.14285714285714285, 0.2857142857142857, 0.42857142857142855, 0.5714285714285714, 0.7142857142857143,
         0.8571428571428571, 1.0, 0.9887175604818206, 0.9554359905560885, 0.9018241671106134, 0.8305704108364301,
         0.7452476826029011, 0.6501344202803414, 0.55, 0.44986557971965857, 0.3547523173970989, 0.26942958916356996,
         0.19817583288938662, 0.14456400944391146, 0.11128243951817937, 0.1, 0.1, 0.1, 0.1]


def _prepared(seed: int) -> list:
    cases = lr_schedule.make_cases(seed)
    for c in cases:
        c.expected, c.expected_grads = lr_schedule.reference(c)
    return cases


def test_the_reference_is_cs336s_list() -> None:
    assert [cosine_lr(it, 1.0, 0.1, 7, 21) for it in range(25)] == CS336
    with pytest.raises(ValueError, match="warmup_iters < cosine_cycle_iters"):
        cosine_lr(0, 1.0, 0.1, 5, 5)


@pytest.mark.parametrize("seed", SEEDS)
def test_cases_hold_every_boundary_and_a_zero_warmup(seed: int) -> None:
    rows = [row for c in lr_schedule.make_cases(seed) for row in c.rows]
    assert all(isinstance(it, int) and it >= 0 and 0 <= tw < tc for it, _, _, tw, tc in rows)
    for name, at in [("Tw - 1", lambda tw, tc: tw - 1), ("Tw", lambda tw, tc: tw), ("Tc", lambda tw, tc: tc),
                     ("Tc + 1", lambda tw, tc: tc + 1)]:
        assert any(it == at(tw, tc) for it, _, _, tw, tc in rows if tw > 0), name
    assert any(tw == 0 for *_, tw, _ in rows)
    drawn = [r for c in lr_schedule.make_cases(seed)[1:4] for r in c.rows]
    assert all(0 < min_lr < max_lr for _, max_lr, min_lr, _, _ in drawn)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_known_mistake_shows_on_every_seed_and_no_two_mistakes_look_alike(seed: int) -> None:
    cases = _prepared(seed)
    outputs = {}
    for bug in lr_schedule.SPEC.bugs:
        outs = [bug.fn(c) for c in cases]
        assert any(not compare(o, c.expected, TOL(c)).ok for o, c in zip(outs, cases, strict=True)), bug.label
        outputs[bug.label] = (bug.diagnosis.id, outs)
    for a, (id_a, outs_a) in outputs.items():
        for b, (id_b, outs_b) in outputs.items():
            if id_a < id_b:
                assert any(not torch.equal(x, y) for x, y in zip(outs_a, outs_b, strict=True)), (a, b)


def test_the_scheduler_classes_are_forbidden() -> None:
    assert "torch.optim.lr_scheduler.LambdaLR" in lr_schedule.SPEC.forbidden_classes
    assert "torch.optim.lr_scheduler.CosineAnnealingLR" in lr_schedule.SPEC.forbidden_classes


def _grade(tmp_path: Path, body: str, fork_server, seed: int = 3):
    path = tmp_path / "lr_schedule.py"
    head = "import math\nimport torch\n\n\ndef cosine_lr(it, max_lr, min_lr, warmup_iters, cosine_cycle_iters):\n"
    path.write_text(head + body)
    return check_file(path, "lr_schedule", seed, Limits(timeout_s=60, cpu_s=60), pool=fork_server)


@pytest.mark.parametrize(("body", "shown"), [
    ("    return torch.tensor(0.5, dtype=torch.float64)\n", "returned torch.Tensor"),
    ("    return True\n", "returned bool"),
    ("    return None\n", "returned NoneType"),
])
def test_anything_but_a_number_is_the_wrong_type(tmp_path: Path, fork_server, body: str, shown: str) -> None:
    r = _grade(tmp_path, body, fork_server)
    assert r.status == "fail" and r.diagnosis.id == "wrong_type", (r.status, r.diagnosis)
    assert shown in r.diagnosis_detail and "instead of a float" in r.diagnosis_detail


def test_an_int_is_taken_as_the_number_it_is(tmp_path: Path, fork_server) -> None:
    """`return 0` at it == 0 of a warmup is a right answer written as an int."""
    body = ("    if it == 0 < warmup_iters:\n        return 0\n" + "".join(
        line + "\n" for line in (SOLUTIONS / "good_three_pieces.py").read_text().split("\n")[5:] if line))
    r = _grade(tmp_path, body, fork_server)
    assert r.status == "pass", (r.status, r.diagnosis_detail)


def test_a_failing_test_names_the_call_with_its_arguments(tmp_path: Path, fork_server) -> None:
    r = check_file(SOLUTIONS / "bug_lr_no_floor__two_pieces.py", "lr_schedule", 3, Limits(timeout_s=60, cpu_s=60),
                   pool=fork_server)
    cs336 = next(t for t in r.tests if t.status == "fail" and t.name.startswith("CS336's list"))
    assert cs336.message.startswith("cosine_lr(") and "1.0, 0.1, 7, 21): got " in cs336.message, cs336.message
    assert "expected 0.1 (" in cs336.message and "of 25 calls off)" in cs336.message, cs336.message
