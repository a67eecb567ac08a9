"""Choosing what to ask: filters, then due cards first, then a ration of new ones.

Why a daily new-card limit counted from the store: spaced repetition breaks
down when a learner adds 80 new cards in one evening and drowns in reviews
the week after; counting today's first reviews (not this session's) keeps the
limit honest across several short sessions.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from drill.quiz.schedule import parse_time
from drill.quiz.schema import Question
from drill.store import Review


@dataclass(frozen=True)
class Filters:
    topics: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    difficulty: str | None = None

    def keep(self, question: Question) -> bool:
        if self.topics and question.topic not in self.topics:
            return False
        if self.tags and not set(self.tags) & set(question.tags):
            return False
        return self.difficulty is None or question.difficulty == self.difficulty


def filtered(questions: Iterable[Question], filters: Filters) -> list[Question]:
    return [q for q in questions if filters.keep(q)]


def new_today(reviews: Iterable[Review], now: datetime) -> int:
    """How many cards got their first scheduled review on `now`'s local calendar day."""
    first: dict[str, datetime] = {}
    for review in reviews:
        if review.source == "cram":
            continue
        at = parse_time(review.reviewed_at)
        if review.question_id not in first or at < first[review.question_id]:
            first[review.question_id] = at
    today = now.astimezone().date()
    return sum(1 for at in first.values() if at.astimezone().date() == today)


def due_queue(
    questions: list[Question],
    cards: Mapping[str, Mapping[str, Any]],
    now: datetime,
    *,
    new_limit: int,
    new_done_today: int,
    count: int | None,
    rng: random.Random,
) -> list[Question]:
    """Due cards (most overdue first), then unseen questions up to today's remaining new-card ration."""
    due: list[tuple[datetime, Question]] = []
    fresh: list[Question] = []
    for question in questions:
        card = cards.get(question.id)
        if card is None:
            fresh.append(question)
            continue
        when = parse_time(card["due"])
        if when <= now:
            due.append((when, question))
    due.sort(key=lambda item: item[0])
    rng.shuffle(fresh)
    fresh = fresh[: max(0, new_limit - new_done_today)]
    queue = [q for _, q in due] + fresh
    return queue if count is None else queue[:count]


def cram_queue(questions: list[Question], *, count: int | None, rng: random.Random) -> list[Question]:
    """The filtered set in random order; the schedule is not consulted."""
    queue = list(questions)
    rng.shuffle(queue)
    return queue if count is None else queue[:count]
