"""Choice options: the right one's position in bank order is not a giveaway (issue 28 §2).

`--no-shuffle` and every reader of the YAML see bank order, where drafting puts the
right option first or second. `drill validate` refuses a bank whose right options
crowd one position (as it refuses one where the right option is the longest), and
the shipped bank passes it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from drill.cli import app
from drill.paths import questions_dir
from drill.quiz.kinds.choice import POSITION_RIGHT_MAX, POSITION_SLACK, right_positions
from drill.quiz.loader import scan

runner = CliRunner()


def _choice_bank(folder: Path, positions: list[int]) -> Path:
    folder.mkdir()
    items = []
    for n, right in enumerate(positions):
        options = "".join(
            f'      - {{text: "option {k} of question {n}", correct: {"true" if k == right else "false"}}}\n'
            for k in range(4))
        items.append(f"""\
  - id: pos-q-{n:02d}
    kind: choice
    difficulty: easy
    prompt: "Question {n}: pick one."
    explanation: "Because."
    options:
{options}""")
    (folder / "alpha.yaml").write_text("topic: alpha\nquestions:\n" + "".join(items))
    return folder


def test_the_shipped_bank_spreads_its_right_options() -> None:
    result = scan(questions_dir(), audit=False)
    questions = [q for q in result.bank.questions if q.kind == "choice"]
    seen, fair = right_positions(questions)
    for position, chance in fair.items():
        assert seen[position] <= POSITION_RIGHT_MAX * chance + POSITION_SLACK, (position, seen, fair)
        assert seen[position] >= chance / POSITION_RIGHT_MAX - POSITION_SLACK, (position, seen, fair)


@pytest.mark.parametrize(
    ("positions", "crowded"),
    [
        ([0] * 16 + [1] * 13 + [2] * 7 + [3] * 4, "a"),  # the drafting order: a or b three times in four
        ([1] * 20 + [0, 2, 3] * 7, "b"),
    ],
)
def test_validate_refuses_right_options_crowding_one_position(tmp_path: Path, positions: list[int],
                                                              crowded: str) -> None:
    bank = _choice_bank(tmp_path / "bank", positions)
    result = runner.invoke(app, ["validate", str(bank)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if "right options' positions are" in line]
    assert len(lines) == positions.count("abcd".index(crowded)), result.output
    assert all(line.startswith(str(bank / "alpha.yaml") + ":") or "alpha.yaml:" in line for line in lines)
    assert f"the right option is {crowded})" in lines[0] and f"passes by picking {crowded}" in lines[0]


def test_validate_accepts_a_balanced_bank_and_reports_the_positions(tmp_path: Path) -> None:
    bank = _choice_bank(tmp_path / "bank", [0, 1, 2, 3] * 4)
    result = runner.invoke(app, ["validate", str(bank)])
    assert result.exit_code == 0, result.output
    assert "right option at a 4 b 4 c 4 d 4" in " ".join(result.output.split())
