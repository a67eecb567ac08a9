"""Frictions of issue 31 §3, through the CLI: a kind or topic asked for by name on day one
gets a few new cards past the daily limit (and says so), and `spot-bug`/`spot_bug` are one
kind on every input (a card's `kind:`, `--kind`, `drill validate`), shown as `spot_bug`."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from drill.cli import app
from drill.quiz.run import FILTERED_NEW_EXTRA
from drill.store import Store

runner = CliRunner()


def _choice(n: int) -> str:
    return f"""\
  - id: new-choice-{n:02d}
    kind: choice
    difficulty: easy
    prompt: "Question {n}: pick the first."
    explanation: "The first."
    options:
      - {{text: "first {n}", correct: true}}
      - {{text: "second {n}", correct: false}}
"""


def _spot(n: int, spelling: str) -> str:
    return f"""\
  - id: new-spot-{n:02d}
    kind: {spelling}
    difficulty: hard
    prompt: "Snippet {n}: the scale is wrong. Which line?"
    code: |
      import math

      def scores(q, k):
          s = q @ k.transpose(-2, -1)
          return s / math.sqrt(k.size(0))
    bug_line: 5
    fix: "return s / math.sqrt(q.size(-1))"
    explanation: "Scale by sqrt(d_k)."
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DRILL_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _bank(folder: Path, spots: int, spelling: str = "spot_bug") -> Path:
    folder.mkdir()
    body = "".join(_choice(n) for n in range(6)) + "".join(_spot(n, spelling) for n in range(spots))
    (folder / "alpha.yaml").write_text("topic: alpha\nquestions:\n" + body)
    return folder


def _quiz(bank: Path, *args: str, input: str) -> object:
    return runner.invoke(app, ["quiz", "--bank", str(bank), "--no-shuffle", "--new-limit", "3", *args], input=input)


def _new_ids(home: Path) -> list[str]:
    with Store(home / "progress.db") as store:
        return list(dict.fromkeys(r.question_id for r in store.reviews()))


def test_day_one_kind_filter_draws_new_cards_past_the_spent_limit(home: Path, tmp_path: Path) -> None:
    bank = _bank(tmp_path / "bank", spots=FILTERED_NEW_EXTRA + 2)
    first = _quiz(bank, "--difficulty", "easy", input="a\n" * 3)  # today's 3 new cards: all choice
    assert first.exit_code == 0, first.output
    assert len(_new_ids(home)) == 3
    plain = _quiz(bank, input="")  # no kind or topic asked for: the limit holds
    assert "today's 3 new cards are done" in plain.output and "Question 1/" not in plain.output
    asked = _quiz(bank, "--kind", "spot-bug", input="5\n" * FILTERED_NEW_EXTRA)
    assert asked.exit_code == 0, asked.output
    said = " ".join(asked.output.split())
    assert (f"today's limit of 3 new cards is used up; drawing {FILTERED_NEW_EXTRA} new cards of spot_bug past it"
            in said)
    assert f"Question 1/{FILTERED_NEW_EXTRA}" in asked.output and "new cards are done" not in asked.output
    seen = _new_ids(home)
    assert len([i for i in seen if i.startswith("new-spot-")]) == FILTERED_NEW_EXTRA
    again = _quiz(bank, "--kind", "spot_bug", input="5\n")  # a few a day per selection, not an open door
    assert "past it" not in again.output and "Question 1/" not in again.output
    topic = _quiz(bank, "--topic", "alpha", input="")  # another selection asked for by name
    assert "past it" not in topic.output  # 8 of its cards were already new today: more than the few


def test_a_filter_with_room_left_in_the_limit_tops_it_up_to_a_few(home: Path, tmp_path: Path) -> None:
    bank = _bank(tmp_path / "bank", spots=FILTERED_NEW_EXTRA + 2)
    _quiz(bank, "--difficulty", "easy", input="a\n" * 2)  # 2 of 3 new cards used
    asked = _quiz(bank, "--kind", "spot_bug", input="5\n" * FILTERED_NEW_EXTRA)
    said = " ".join(asked.output.split())
    assert f"limit of 3 new cards leaves 1; drawing {FILTERED_NEW_EXTRA - 1} new cards of spot_bug" in said


@pytest.mark.parametrize("spelling", ["spot_bug", "spot-bug"])
def test_both_spellings_of_spot_bug_are_one_kind_shown_one_way(home: Path, tmp_path: Path, spelling: str) -> None:
    bank = _bank(tmp_path / "bank", spots=2, spelling=spelling)
    checked = runner.invoke(app, ["validate", str(bank)])
    assert checked.exit_code == 0, checked.output
    assert "spot_bug 2" in checked.output and "spot-bug" not in checked.output
    for flag in ("spot-bug", "spot_bug", "Spot-Bug"):
        result = _quiz(bank, "--kind", flag, "--cram", input="5\n5\n")
        assert result.exit_code == 0, result.output
        assert result.output.count("· spot_bug") == 2 and "spot-bug" not in result.output

