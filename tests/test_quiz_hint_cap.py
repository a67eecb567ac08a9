"""A hint that does the card's work caps its rating at Hard (issue 28 §2), end to end.

Through the CLI: a learner who reads only a nudge and answers right gets Good;
one who reads the last hint, or a hint marked `worked: true`, gets Hard at most,
the card says so, the review is stored as hint-capped, and `drill stats`
counts hinted answers apart. The store's migration that holds the flag is
tested on a store written by the previous schema: its reviews pass through
unchanged, and a read-only open of such a store still works.
"""

from __future__ import annotations

import sqlite3
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drill.cli import app
from drill.store import Store
from drill.store import migrations as store_migrations

runner = CliRunner()

BANK = """\
topic: block
questions:
  - id: cap-numeric
    kind: numeric
    difficulty: easy
    prompt: "How many weights does a 3 × 4 matrix hold?"
    hints:
      - "Count rows and columns."
      - text: "3 × 4 = 12."
        worked: true
      - "It is a small matrix."
    answer: 12
    explanation: "Rows times columns."
  - id: cap-recall
    kind: recall
    difficulty: easy
    prompt: "Why does pre-norm train more robustly than post-norm?"
    hints: ["The identity path."]
    answer: "The residual path stays an identity."
    key_points:
      - text: "Clean identity path"
        patterns: ["identity"]
      - text: "Gradients reach early layers"
        patterns: ["gradient"]
    explanation: "Pre-norm keeps the residual path clean."
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DRILL_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def bank(tmp_path: Path) -> Path:
    folder = tmp_path / "bank"
    folder.mkdir()
    (folder / "block.yaml").write_text(BANK)
    return folder


def _quiz(bank: Path, *args: str, input: str) -> object:
    return runner.invoke(app, ["quiz", "--bank", str(bank), "--no-shuffle", *args], input=input)


def _saved(home: Path) -> list[tuple[str, int, int, bool]]:
    with Store(home / "progress.db") as store:
        return [(r.question_id, r.rating, r.hints_shown, r.hint_capped) for r in store.reviews()]


@pytest.mark.parametrize(
    ("typed", "rating", "shown", "capped"),
    [
        ("12\n", 3, 0, False),  # no hint
        ("?\n12\n", 3, 1, False),  # the nudge only: the learner still did the work
        ("?\n?\n12\n", 2, 2, True),  # the worked hint: Hard at most
        ("?\n?\n?\n12\n", 2, 3, True),  # the last hint
        ("?\n?\n13\n", 1, 2, True),  # a wrong answer stays Again
    ],
)
def test_a_worked_or_last_hint_caps_a_right_answer_at_hard(home: Path, bank: Path, typed: str, rating: int,
                                                           shown: int, capped: bool) -> None:
    result = _quiz(bank, "--kind", "numeric", input=typed)
    assert result.exit_code == 0, result.output
    assert _saved(home) == [("cap-numeric", rating, shown, capped)]
    assert ("rated Hard at most" in result.output) is capped
    assert ("rated Hard, not Good: hint-capped" in result.output) is (capped and rating == 2)


def test_the_cap_is_said_when_the_hint_is_read_and_when_the_rating_is_lowered(home: Path, bank: Path) -> None:
    result = _quiz(bank, "--kind", "numeric", input="?\n?\n12\n")
    out = result.output
    said = out.index("(a worked hint: this answer is rated Hard at most")
    assert out.index("hint: 3 × 4 = 12.") < said < out.index("✓ correct")
    assert "rated Hard, not Good: hint-capped (2 of 3 hints read)" in out


def test_a_self_rated_card_after_its_last_hint_is_stored_as_hard(home: Path, bank: Path) -> None:
    result = _quiz(bank, "--kind", "recall", input="?\nthe identity path and gradients\n4\n")
    assert result.exit_code == 0, result.output
    assert "(the last hint: this answer is rated Hard at most" in result.output
    assert "rated Hard, not Easy: hint-capped (1 of 1 hints read)" in result.output
    assert _saved(home) == [("cap-recall", 2, 1, True)]


def test_stats_counts_hinted_answers_apart(home: Path, bank: Path) -> None:
    _quiz(bank, "--kind", "numeric", input="?\n12\n")  # hinted, not capped
    _quiz(bank, "--cram", "--kind", "numeric", input="?\n?\n?\n12\n")  # cram: not a scheduled review
    _quiz(bank, "--kind", "recall", input="?\nidentity gradient\n3\n")  # capped
    result = runner.invoke(app, ["stats"])
    assert result.exit_code == 0, result.output
    assert "2 of them answered after a hint, 1 hint-capped" in " ".join(result.output.split())


def _store_at_schema(path: Path, version: int) -> None:
    """A progress store as a drill of schema `version` left it, with two reviews and a card."""
    db = sqlite3.connect(path)
    for script in store_migrations.MIGRATIONS[:version]:
        for statement in store_migrations.split_sql(script):
            db.execute(statement)
    db.execute(f"PRAGMA user_version = {version}")
    db.executemany(
        "INSERT INTO reviews (question_id, reviewed_at, rating, answer, duration_ms, card_json, topic, source)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [("cap-numeric", "2026-01-01T10:00:00+00:00", 3, "12", 900, "{}", "block", "quiz"),
         ("cap-recall", "2026-01-01T10:01:00+00:00", 4, "", 1200, None, "block", "cram")])
    db.execute("INSERT INTO cards (question_id, card_json, due, reps, lapses, updated_at) VALUES "
               "('cap-numeric', '{}', '2026-01-03T10:00:00+00:00', 1, 0, '2026-01-01T10:00:00+00:00')")
    db.commit()
    db.close()


def test_an_old_store_migrates_without_loss_and_takes_hint_capped_reviews(tmp_path: Path) -> None:
    path = tmp_path / "progress.db"
    _store_at_schema(path, 3)
    with Store(path, read_only=True) as old:  # read-only: nothing migrated, nothing written
        assert old.schema_version() == 3
        assert [(r.question_id, r.rating, r.hints_shown, r.hint_capped) for r in old.reviews()] == [
            ("cap-numeric", 3, 0, False), ("cap-recall", 4, 0, False)]
    with Store(path) as store:
        assert store.schema_version() == store_migrations.SCHEMA_VERSION
        before = [(r.question_id, r.reviewed_at, r.rating, r.answer, r.duration_ms, r.topic, r.source,
                   r.hints_shown, r.hint_capped) for r in store.reviews()]
        assert before == [
            ("cap-numeric", "2026-01-01T10:00:00+00:00", 3, "12", 900, "block", "quiz", 0, False),
            ("cap-recall", "2026-01-01T10:01:00+00:00", 4, "", 1200, "block", "cram", 0, False)]
        assert set(store.cards()) == {"cap-numeric"}
        store.record_review("cap-numeric", 2, card_json="{}", due="2026-01-04T10:00:00+00:00",
                            hints_shown=2, hint_capped=True)
        assert [(r.rating, r.hints_shown, r.hint_capped) for r in store.reviews()][-1] == (2, 2, True)
        assert [r.hint_capped for r, _card in store.scheduled_log()] == [False, True]


def test_a_hint_capped_review_above_hard_is_refused(tmp_path: Path) -> None:
    with Store(tmp_path / "progress.db") as store:
        with pytest.raises(ValueError, match="Hard at most"):
            store.record_review("q", 3, hints_shown=1, hint_capped=True)
        assert store.reviews() == []


@pytest.mark.parametrize(
    ("hints", "line", "message"),
    [
        ('[{text: "3 × 4 = 12.", worked: true}, "Count."]', 8,
         "the first hint is marked worked; the first hint must nudge towards the method"),
        ('["Count.", {text: "3 × 4 = 12.", worked: "yes"}]', 8, "a hint's 'worked' must be true or false, not text"),
        ('["Count.", {text: "3 × 4 = 12.", formula: true}]', 8, "unknown field 'formula'"),
        ('["Count.", {worked: true}]', 8, "field 'text'"),
        ('["Count.", [1, 2]]', 8, "must be a mapping, not a list"),
    ],
)
def test_the_validator_refuses_a_badly_marked_hint_with_its_line(tmp_path: Path, hints: str, line: int,
                                                                 message: str) -> None:
    folder = tmp_path / "bank"
    folder.mkdir()
    (folder / "block.yaml").write_text(textwrap.dedent(f"""\
        topic: block
        questions:
          - id: cap-bad
            kind: numeric
            difficulty: easy
            prompt: "How many weights does a 3 × 4 matrix hold?"
            explanation: "Rows times columns."
            hints: {hints}
            answer: 12
        """))
    result = runner.invoke(app, ["validate", str(folder)])
    assert result.exit_code == 2, result.output
    assert f"block.yaml:{line}: question 'cap-bad'" in result.output and message in result.output, result.output


def test_the_validator_accepts_a_worked_hint_after_a_nudge(bank: Path) -> None:
    result = runner.invoke(app, ["validate", str(bank)])
    assert result.exit_code == 0, result.output
