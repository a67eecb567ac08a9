"""Your reviews are yours (issue 15, section 5): export them for the FSRS optimizer, fit FSRS to
them, export the bank to Anki.

The review history is made the way a learner makes one: `run_quiz` once a
simulated day, over a generated bank, answering right most of the time, with
the real FSRS scheduler deciding what is due. Nothing is written to the store
by hand.
"""

from __future__ import annotations

import csv
import io
import random
import sqlite3
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from drill.cli import app
from drill.quiz.optimize import MIN_REVIEWS, usable_reviews
from drill.quiz.run import QuizOptions, run_quiz
from drill.quiz.schedule import Scheduler, parse_time, scheduler_for
from drill.store import Store

runner = CliRunner()
START = datetime(2026, 1, 5, 19, 0, tzinfo=timezone.utc)

# Both options are right: "a,b" answers right and "a" wrong whatever order they are shown in.
QUESTION = """\
  - id: sim-{n:03d}
    kind: choice
    difficulty: {level}
    prompt: "Simulated question {n}."
    explanation: "Both options are right."
    tags: [{tag}]
    options:
      - {{text: "option one of {n}", correct: true}}
      - {{text: "option two of {n}", correct: true}}
"""


def make_bank(folder: Path, cards: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for topic in ("alpha", "beta"):
        body = "".join(QUESTION.format(n=n, level=("easy", "medium", "hard")[n % 3], tag=f"t{n % 4}")
                       for n in range(cards) if (n % 2 == 0) == (topic == "alpha"))
        (folder / f"{topic}.yaml").write_text(f"topic: {topic}\nquestions:\n{body}")
    return folder


def simulate(store: Store, bank: Path, days: int, seed: int = 7, new_limit: int = 10) -> None:
    """One due-mode session a day at 19:00 (a few skipped days), right ~85% of the time, and
    a cram session now and then (logged, never scheduled)."""
    rng = random.Random(seed)
    for day in range(days):
        if rng.random() < 0.1:
            continue  # a day off
        now = START + timedelta(days=day, minutes=rng.randrange(0, 90))
        clock = lambda now=now: now  # noqa: E731
        read = lambda prompt: "a,b" if rng.random() < 0.85 else "a"  # noqa: E731
        options = QuizOptions(bank=bank, count=None, new_limit=new_limit, seed=day)
        run_quiz(options, console=Console(file=io.StringIO()), read=read, store=store, clock=clock, fuzz=False)
        if day % 9 == 4:
            cram = QuizOptions(bank=bank, count=3, cram=True, seed=day)
            run_quiz(cram, console=Console(file=io.StringIO()), read=read, store=store, clock=clock)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DRILL_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def month(home: Path, tmp_path: Path) -> Path:
    """A store with a month of real reviews of 30 cards."""
    bank = make_bank(tmp_path / "bank", 30)
    with Store(home / "progress.db") as store:
        simulate(store, bank, 30)
    return bank


def test_export_reviews_is_the_fsrs_optimizer_schema(month: Path, home: Path, tmp_path: Path) -> None:
    out = tmp_path / "revlog.csv"
    result = runner.invoke(app, ["export", "reviews", "-o", str(out)])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(out.open()))
    with Store(home / "progress.db", read_only=True) as store:
        everything = store.reviews()
        scheduled = [r for r in everything if r.source != "cram"]
    assert any(r.source == "cram" for r in everything)  # cram answers exist and are left out
    assert list(rows[0]) == ["card_id", "review_time", "review_rating", "review_state", "review_duration"]
    assert len(rows) == len(scheduled) > 100
    assert [r["card_id"] for r in rows] == [r.question_id for r in scheduled]
    by_card: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        by_card.setdefault(row["card_id"], []).append(row)
        assert row["review_rating"] in {"1", "3"}  # Again or Good: choice questions are auto-checked
        assert int(row["review_duration"]) >= 0
    for history in by_card.values():
        times = [int(r["review_time"]) for r in history]
        assert times == sorted(times)
        assert history[0]["review_state"] == "0"  # New at its first review
        assert all(r["review_state"] in {"1", "2", "3"} for r in history[1:])
        assert times[0] >= int(START.timestamp() * 1000)
    # a card that reached Review state and then failed is Relearning at its next review
    states = [(h[i]["review_state"], h[i]["review_rating"], h[i + 1]["review_state"])
              for h in by_card.values() for i in range(len(h) - 1)]
    assert ("2", "1", "3") in states


def test_export_reviews_to_stdout(month: Path) -> None:
    result = runner.invoke(app, ["export", "reviews"])
    assert result.exit_code == 0
    assert result.output.splitlines()[0] == "card_id,review_time,review_rating,review_state,review_duration"


def test_optimize_says_how_many_more_reviews_it_needs(month: Path, home: Path) -> None:
    with Store(home / "progress.db", read_only=True) as store:
        usable = usable_reviews(review for review, _ in store.scheduled_log())
    assert 0 < usable < MIN_REVIEWS
    result = runner.invoke(app, ["optimize"])
    assert result.exit_code == 2
    assert f"you have {usable}" in result.output and f"{MIN_REVIEWS - usable} more" in result.output
    with Store(home / "progress.db", read_only=True) as store:
        assert store.parameters() is None  # nothing fitted, nothing saved


@pytest.mark.slow
def test_optimize_fits_the_learners_log_and_the_quiz_uses_it(home: Path, tmp_path: Path) -> None:
    bank = make_bank(tmp_path / "bank", 120)
    with Store(home / "progress.db") as store:
        simulate(store, bank, 160, new_limit=15)
        usable = usable_reviews(review for review, _ in store.scheduled_log())
    assert usable >= MIN_REVIEWS
    result = runner.invoke(app, ["optimize"])
    assert result.exit_code == 0, result.output
    assert f"fitted on {usable} reviews" in result.output
    import fsrs

    with Store(home / "progress.db") as store:
        fitted = store.parameters()
        assert fitted is not None and fitted[2] == usable
        parameters = fitted[0]
        assert len(parameters) == len(fsrs.Scheduler().parameters)
        assert parameters != list(fsrs.Scheduler().parameters)
        # from then on: the quiz schedules with them
        scheduler = scheduler_for(store, fuzz=False)
        assert scheduler.parameters == parameters
        card_id, card = next((qid, c) for qid, c in store.cards().items() if '"state": 2' in c["card_json"])
        later = START + timedelta(days=400)
        ours = scheduler.review(card["card_json"], 3, later).due
        default = Scheduler(fuzz=False).review(card["card_json"], 3, later).due
        assert ours != default
        before = store.cards()
        options = QuizOptions(bank=bank, count=1, seed=1)
        run_quiz(options, console=Console(file=io.StringIO()), read=lambda p: "a,b", store=store,
                 clock=lambda: later, fuzz=False)
        asked = store.reviews()[-1].question_id
        due = parse_time(store.cards()[asked]["due"])
    # the quiz's own review was scheduled by the fitted parameters
    assert due == Scheduler(fuzz=False, parameters=parameters).review(before[asked]["card_json"], 3, later).due
    reset = runner.invoke(app, ["optimize", "--reset"])
    assert reset.exit_code == 0 and "reset" in reset.output
    with Store(home / "progress.db") as store:
        assert store.parameters() is None and scheduler_for(store).parameters is None


def _notes(apkg: Path, tmp_path: Path) -> list[tuple[str, str, str]]:
    with zipfile.ZipFile(apkg) as archive:
        archive.extract("collection.anki2", tmp_path / "unzipped")
    db = sqlite3.connect(tmp_path / "unzipped" / "collection.anki2")
    return db.execute("SELECT guid, flds, tags FROM notes ORDER BY id").fetchall()


def test_export_anki_writes_a_deck_of_the_filtered_bank(tmp_path: Path, home: Path) -> None:
    bank = make_bank(tmp_path / "bank", 12)
    out = tmp_path / "deck.apkg"
    result = runner.invoke(app, ["export", "anki", "--bank", str(bank), "--topic", "alpha", "-o", str(out)])
    assert result.exit_code == 0, result.output
    notes = _notes(out, tmp_path)
    assert len(notes) == 6
    fields = [flds.split("\x1f") for _, flds, _ in notes]
    assert {f[2] for f in fields} == {f"sim-{n:03d}" for n in range(0, 12, 2)}
    assert all("option one of" in f[0] and "Both options are right." in f[1] for f in fields)
    assert all(" alpha " in tags and " choice " in tags for _, _, tags in notes)
    again = tmp_path / "again.apkg"
    runner.invoke(app, ["export", "anki", "--bank", str(bank), "--topic", "alpha", "-o", str(again)])
    assert [g for g, _, _ in _notes(again, tmp_path / "2")] == [g for g, _, _ in notes]  # re-import updates


def test_export_anki_of_the_shipped_bank_has_every_kind(tmp_path: Path, home: Path) -> None:
    from drill.quiz import kinds
    from drill.quiz.loader import load_bank

    out = tmp_path / "all.apkg"
    result = runner.invoke(app, ["export", "anki", "-o", str(out)])
    assert result.exit_code == 0, result.output
    bank = load_bank(None)
    notes = _notes(out, tmp_path)
    assert len(notes) == len(bank.questions)
    shipped_kinds = {q.kind for q in bank.questions}
    assert shipped_kinds == set(kinds.names())
    assert {flds.split("\x1f")[3].split(" · ")[1] for _, flds, _ in notes} == shipped_kinds


def test_export_anki_with_no_match_is_one_line(tmp_path: Path, home: Path) -> None:
    bank = make_bank(tmp_path / "bank", 4)
    result = runner.invoke(app, ["export", "anki", "--bank", str(bank), "--topic", "alpha", "--tag", "t1",
                                 "-o", str(tmp_path / "x.apkg")])
    assert result.exit_code == 2 and "no question matches" in result.output
    assert not (tmp_path / "x.apkg").exists()


ANKI_CHOICES = "topic: alpha\nquestions:\n" + "".join(f"""\
  - id: anki-order-{n:02d}
    kind: choice
    difficulty: easy
    prompt: "Question {n}: which option is right?"
    explanation: "The first."
    options:
      - {{text: "right option {n}", correct: true}}
      - {{text: "wrong option one of {n}", correct: false}}
      - {{text: "wrong option two of {n}", correct: false}}
      - {{text: "wrong option three of {n}", correct: false}}
""" for n in range(12))


def _fronts(apkg: Path, tmp_path: Path) -> dict[str, str]:
    return {flds.split("\x1f")[2]: flds.split("\x1f")[0] for _, flds, _ in _notes(apkg, tmp_path)}


def test_export_anki_shuffles_options_the_same_way_every_time(tmp_path: Path, home: Path) -> None:
    """Bank order puts the right option first here; the deck must not (issue 28 §2), and a re-export
    must give each card the same order (seeded by its id), so an updated note does not reshuffle."""
    bank = tmp_path / "bank"
    bank.mkdir()
    (bank / "alpha.yaml").write_text(ANKI_CHOICES)
    first, second = tmp_path / "one.apkg", tmp_path / "two.apkg"
    for out in (first, second):
        result = runner.invoke(app, ["export", "anki", "--bank", str(bank), "-o", str(out)])
        assert result.exit_code == 0, result.output
    fronts = _fronts(first, tmp_path / "1")
    assert fronts == _fronts(second, tmp_path / "2")
    right_letters = {}
    for qid, front in fronts.items():
        n = int(qid.rsplit("-", 1)[1])
        line = next(x for x in front.splitlines() if f"right option {n}" in x)
        right_letters[qid] = line[0]
        assert sorted(x[3:] for x in front.splitlines() if x[1:3] == ") ") == sorted(
            [f"right option {n}", *(f"wrong option {w} of {n}" for w in ("one", "two", "three"))])
    assert len(set(right_letters.values())) >= 3, right_letters  # spread over the positions, not all at a)
    assert sum(letter == "a" for letter in right_letters.values()) <= 6
