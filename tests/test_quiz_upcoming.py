"""When the next cards come due: said at the end of a session, when nothing is due, and in `drill stats`.

Why: FSRS's learning steps bring a card back minutes after it is learnt or missed, so "0 cards
still due" right after a session and 14 due ten minutes later looked like a bug (issue 16).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drill.cli import app
from drill.quiz.stats import compute_stats
from drill.quiz.upcoming import describe, upcoming
from drill.store import Store

runner = CliRunner()
# Local noon: "later today", "tomorrow" and "this week" do not depend on when the test runs.
NOON = datetime.now().astimezone().replace(hour=12, minute=0, second=0, microsecond=0)
LEARNING, REVIEW, RELEARNING = 1, 2, 3


def _card(due: datetime, state: int = REVIEW) -> dict[str, object]:
    return {"due": due.astimezone(timezone.utc).isoformat(), "card_json": json.dumps({"state": state}),
            "reps": 1, "lapses": 0}


@pytest.mark.parametrize(
    ("offsets", "line"),
    [
        ([], ""),
        ([(-60, REVIEW)], ""),  # only overdue: nothing comes due later
        ([(10, LEARNING)] * 14 + [(60 * 24, REVIEW)] * 3,
         "next: 14 cards in 10 min (learning steps), 3 tomorrow"),
        ([(3, LEARNING), (10, LEARNING), (10, RELEARNING)], "next: 3 cards in 3–10 min (learning steps)"),
        ([(1, LEARNING), (180, REVIEW)], "next: 2 cards in 1 min–3 h (1 in learning steps)"),
        ([(60 * 24 * 3, REVIEW), (60 * 24 * 4, REVIEW)], "next: 2 cards later this week"),
        ([(60 * 24, REVIEW), (60 * 24 * 3, REVIEW)], "next: 1 card tomorrow, 1 later this week"),
    ],
)
def test_upcoming_cards_in_words(offsets: list[tuple[int, int]], line: str) -> None:
    cards = [_card(NOON + timedelta(minutes=minutes), state) for minutes, state in offsets]
    assert describe(upcoming(cards, NOON), NOON) == line


def test_a_far_card_is_named_by_its_day_and_a_card_within_the_hour_is_soon_past_midnight() -> None:
    far = NOON + timedelta(days=20)
    assert describe(upcoming([_card(far)], NOON), NOON) == f"next: 1 card on {far:%a %Y-%m-%d}"
    late = NOON.replace(hour=23, minute=55)
    coming = upcoming([_card(late + timedelta(minutes=10), LEARNING), _card(late - timedelta(minutes=1))], late)
    assert coming.due_now == 1 and describe(coming, late) == "next: 1 card in 10 min (learning steps)"


def test_an_unreadable_card_json_is_counted_but_not_called_a_learning_step() -> None:
    card = {"due": (NOON + timedelta(minutes=5)).isoformat(), "card_json": "{not json", "reps": 1, "lapses": 0}
    assert describe(upcoming([card], NOON), NOON) == "next: 1 card in 5 min"


def _bank(tmp_path: Path) -> Path:
    folder = tmp_path / "bank"
    folder.mkdir()
    (folder / "alpha.yaml").write_text(
        "topic: alpha\nquestions:\n"
        "  - id: alpha-one\n    kind: choice\n    difficulty: easy\n    prompt: 'Pick first.'\n"
        "    explanation: 'First.'\n    options:\n      - {text: first, correct: true}\n"
        "      - {text: second, correct: false}\n")
    return folder


def test_the_end_of_a_session_and_the_next_start_say_when_learning_steps_bring_cards_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRILL_HOME", str(tmp_path / "home"))
    bank = _bank(tmp_path)
    first = runner.invoke(app, ["quiz", "--bank", str(bank), "--no-shuffle"], input="a\n")
    assert first.exit_code == 0, first.output
    # Good on a new card: FSRS's second learning step, 10 minutes (never fuzzed).
    assert "0 cards still due now; next: 1 card in 10 min (learning steps)" in first.output
    again = runner.invoke(app, ["quiz", "--bank", str(bank)], input="")
    assert again.exit_code == 0, again.output
    assert "Nothing due right now; next: 1 card in 10 min (learning steps)." in " ".join(again.output.split())
    stats = runner.invoke(app, ["stats"])
    assert stats.exit_code == 0, stats.output
    assert "due now: 0; next: 1 card in 10 min (learning steps)" in stats.output


def test_stats_counts_due_now_and_what_comes_next(tmp_path: Path) -> None:
    with Store(tmp_path / "progress.db") as store:
        for i, (minutes, state) in enumerate([(-5, REVIEW), (4, LEARNING), (9, LEARNING), (60 * 24, REVIEW)]):
            store.record_review(f"q{i}", 3, card_json=json.dumps({"state": state}),
                                due=(NOON + timedelta(minutes=minutes)).isoformat(), topic="alpha",
                                reviewed_at=(NOON - timedelta(minutes=1)).isoformat())
        stats = compute_stats(store.reviews(), store.cards(), NOON)
    assert stats.upcoming.due_now == 1
    assert stats.next_due == "next: 2 cards in 4–9 min (learning steps), 1 tomorrow"
    assert [n for _, n in stats.forecast[:2]] == [3, 1]  # the day table agrees: today holds due now and soon
