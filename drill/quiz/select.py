"""Choosing what to ask: filters, then due cards first, then a ration of new ones.

Why a daily new-card limit counted from the store: spaced repetition breaks
down when a learner adds 80 new cards in one evening and drowns in reviews
the week after; counting today's first reviews (not this session's) keeps the
limit honest across several short sessions.
"""

from __future__ import annotations

import difflib
import random
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from drill.errors import UserError
from drill.quiz.schedule import parse_time
from drill.quiz.schema import Question
from drill.store import Review


@dataclass(frozen=True)
class Filters:
    """The selection a quiz or mock was asked for (--topic, --tag, --difficulty, --kind), resolved."""

    topics: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    difficulty: str | None = None
    kinds: tuple[str, ...] = ()

    def keep(self, question: Question) -> bool:
        if self.topics and question.topic not in self.topics:
            return False
        if self.tags and not set(self.tags) & set(question.tags):
            return False
        if self.kinds and question.kind not in self.kinds:
            return False
        return self.difficulty is None or question.difficulty == self.difficulty


def filtered(questions: Iterable[Question], filters: Filters) -> list[Question]:
    return [q for q in questions if filters.keep(q)]


DIFFICULTIES = ("easy", "medium", "hard")


def split_values(values: Iterable[str] | None) -> tuple[str, ...]:
    """`--tag a,b --tag c` -> ('a', 'b', 'c'): comma lists and repeats mean the same."""
    return tuple(part.strip() for value in values or () for part in value.split(",") if part.strip())


def _key(name: str) -> str:
    """How a typed filter is compared: case and -/_ do not matter (GQA, kv-cache for kv_cache)."""
    return name.strip().lower().replace("_", "-")


def _canonical(typed: str, known: Iterable[str], what: str, flag: str, popular: list[str] | None = None) -> str:
    """The bank's own spelling of `typed`; UserError naming close spellings if there is none."""
    by_key = {_key(name): name for name in known}
    if _key(typed) in by_key:
        return by_key[_key(typed)]
    close = difflib.get_close_matches(_key(typed), list(by_key), n=5, cutoff=0.6)
    close += [k for k in by_key if _key(typed) in k and k not in close][: 5 - len(close)]
    if close:
        hint = "did you mean " + ", ".join(by_key[k] for k in close) + "?"
    elif popular is not None:
        hint = f"{len(by_key)} {what}s, e.g. " + ", ".join(popular)
    else:
        hint = f"{what}s: " + ", ".join(sorted(by_key.values()))
    raise UserError(f"unknown {what} {typed!r}; {hint}", flag)


def resolve_filters(questions: list[Question], topics: Iterable[str] = (), tags: Iterable[str] = (),
                    difficulty: str | None = None, kinds: Iterable[str] = ()) -> Filters:
    """Typed filters -> the bank's spellings. Unknown names are a UserError with
    suggestions (never a silent "nothing matches"); comma lists are split. Kinds are
    those the registry knows (spot-bug for spot_bug), whether or not the bank uses them."""
    from drill.quiz.kinds import names as kind_names

    topic_names = {q.topic for q in questions}
    tag_counts = Counter(t for q in questions for t in q.tags)
    popular = [t for t, _ in tag_counts.most_common(8)]
    level = None
    if difficulty is not None:
        level = _canonical(difficulty, DIFFICULTIES, "difficulty", "--difficulty")
    return Filters(
        tuple(dict.fromkeys(_canonical(t, topic_names, "topic", "--topic") for t in split_values(topics))),
        tuple(dict.fromkeys(_canonical(t, tag_counts, "tag", "--tag", popular) for t in split_values(tags))),
        level,
        tuple(dict.fromkeys(_canonical(k, kind_names(), "kind", "--kind") for k in split_values(kinds))),
    )


def no_match_message(questions: list[Question], filters: Filters) -> str:
    """Why a combination of known filters is empty: what each filter alone would give."""
    parts = []
    if filters.topics:
        parts.append(("topic " + ",".join(filters.topics), Filters(topics=filters.topics)))
    if filters.tags:
        parts.append(("tag " + ",".join(filters.tags), Filters(tags=filters.tags)))
    if filters.difficulty:
        parts.append((f"difficulty {filters.difficulty}", Filters(difficulty=filters.difficulty)))
    if filters.kinds:
        parts.append(("kind " + ",".join(filters.kinds), Filters(kinds=filters.kinds)))
    alone = "; ".join(f"{label} alone: {len(filtered(questions, f))}" for label, f in parts)
    return "no question matches all of these filters together" + (f" ({alone})" if alone else "")


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
