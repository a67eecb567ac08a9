"""FSRS scheduling through the public API with an injected clock: due order, lapses, leeches."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

from rich.console import Console

from drill.quiz.loader import load_bank
from drill.quiz.run import QuizOptions, run_quiz
from drill.quiz.schedule import AGAIN, GOOD, LEECH_LAPSES, Scheduler
from drill.quiz.select import due_queue, new_today
from drill.quiz.session import lines_reader
from drill.quiz.stats import compute_stats
from drill.store import Store

GOOD_BANK = Path(__file__).parent / "fixtures" / "questions" / "good"
T0 = datetime(2025, 3, 3, 9, 0, tzinfo=timezone.utc)


def _review(store: Store, qid: str, rating: int, at: datetime, scheduler: Scheduler) -> None:
    outcome = scheduler.review(store.card_json(qid), rating, at)
    store.record_review(qid, rating, card_json=outcome.card_json, due=outcome.due.isoformat(), lapsed=outcome.lapsed,
                        topic="attention", reviewed_at=at.isoformat())


def test_again_comes_back_before_good(tmp_path: Path) -> None:
    bank = load_bank(GOOD_BANK, cache_dir=tmp_path)
    questions = [q for q in bank.questions if q.kind == "choice"][:2]
    scheduler = Scheduler(fuzz=False)
    with Store(tmp_path / "p.db") as store:
        _review(store, questions[0].id, GOOD, T0, scheduler)
        _review(store, questions[1].id, AGAIN, T0, scheduler)
        cards = store.cards()
    later = T0 + timedelta(days=30)
    queue = due_queue(questions, cards, later, new_limit=0, new_done_today=0, count=None, rng=random.Random(0))
    assert [q.id for q in queue] == [questions[1].id, questions[0].id]
    soon = T0 + timedelta(minutes=5)  # Again: 1-minute step; Good: 10-minute step
    queue = due_queue(questions, cards, soon, new_limit=0, new_done_today=0, count=None, rng=random.Random(0))
    assert [q.id for q in queue] == [questions[1].id]


def test_lapse_only_counts_again_on_a_review_card(tmp_path: Path) -> None:
    scheduler = Scheduler(fuzz=False)
    first = scheduler.review(None, AGAIN, T0)
    assert not first.lapsed  # a new card rated Again is not a lapse
    graduated = scheduler.review(scheduler.review(first.card_json, GOOD, first.due).card_json, GOOD,
                                 T0 + timedelta(hours=1))
    lapse = scheduler.review(graduated.card_json, AGAIN, graduated.due)
    assert lapse.lapsed


def test_leech_after_eight_lapses_is_flagged_in_stats(tmp_path: Path) -> None:
    scheduler = Scheduler(fuzz=False)
    qid = "attn-complexity-choice"
    at = T0
    with Store(tmp_path / "p.db") as store:
        for _ in range(LEECH_LAPSES):
            while True:  # get the card into Review state, then fail it
                card = store.card_json(qid)
                outcome = scheduler.review(card, GOOD, at)
                state = __import__("json").loads(outcome.card_json)["state"]
                _review(store, qid, GOOD, at, scheduler)
                at = outcome.due
                if state == 2:
                    break
            _review(store, qid, AGAIN, at, scheduler)
            at += timedelta(hours=1)
        cards = store.cards()
        stats = compute_stats(store.reviews(), cards, at)
    assert cards[qid]["lapses"] == LEECH_LAPSES
    assert stats.leeches == [(qid, LEECH_LAPSES)]


def test_session_schedules_with_injected_clock(tmp_path: Path) -> None:
    """A whole due-mode session at T0, then again a day later: the failed card is back first."""
    with Store(tmp_path / "p.db") as store:
        options = QuizOptions(bank=GOOD_BANK, tags=("complexity",), seed=2, new_limit=10, shuffle=False)
        console = Console(record=True, width=120)
        run_quiz(options, console=console, read=lines_reader(["a", "a", "a"]), store=store, clock=lambda: T0,
                 fuzz=False)
        text = console.export_text()
        assert text.count("✓ correct") == 1  # "a" is right only for the decode question
        failed = [r.question_id for r in store.reviews() if r.rating == AGAIN]
        assert len(failed) == 2
        console = Console(record=True, width=120)
        run_quiz(options, console=console, read=lines_reader([]), store=store, clock=lambda: T0 + timedelta(days=1),
                 fuzz=False)
        text = console.export_text()
        first_shown = text.split("Question 1/")[1].splitlines()[1]
        prompts = {q.id: q.prompt for q in load_bank(GOOD_BANK, cache_dir=tmp_path).questions}
        assert first_shown in {prompts[qid] for qid in failed}
        assert new_today(store.reviews(), T0) == 3


def test_new_today_ignores_cram_and_older_reviews(tmp_path: Path) -> None:
    with Store(tmp_path / "p.db") as store:
        store.record_review("a-1", 3, source="cram", reviewed_at=T0.isoformat())
        store.record_review("b-1", 3, card_json="{}", due=T0.isoformat(),
                            reviewed_at=(T0 - timedelta(days=3)).isoformat())
        store.record_review("b-1", 3, card_json="{}", due=T0.isoformat(), reviewed_at=T0.isoformat())
        store.record_review("c-1", 3, card_json="{}", due=T0.isoformat(), reviewed_at=T0.isoformat())
        assert new_today(store.reviews(), T0) == 1
