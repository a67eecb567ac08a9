"""When the next cards come due: the line that explains "0 due now, 14 ten minutes later".

Why it exists: FSRS shows a card again minutes after it is first learnt or
missed (its learning steps: 1 and 10 minutes by default), so right after a
session nothing is due and ten minutes later a dozen cards are. Said at the
end of a session, when nothing is due and in `drill stats`, that reads as the
schedule working, not as a bug. Plain values in, one line out: the quiz, its
"nothing due" message and stats all call `upcoming` and `describe`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from drill.quiz.schedule import parse_time

# fsrs.State.Learning and fsrs.State.Relearning as stored in a card's JSON (Review is 2).
LEARNING_STATES = frozenset({1, 3})
WEEK_DAYS = 7
# A card due within this much of now is "soon" (shown in minutes or hours) even past midnight.
SOON = timedelta(hours=1)


@dataclass(frozen=True)
class Upcoming:
    """Cards by when they come due, as counted from `now`."""

    due_now: int = 0
    soon: tuple[datetime, ...] = ()  # due after now, later today or within SOON; soonest first
    soon_learning: int = 0  # of those, cards in a learning or relearning step
    tomorrow: int = 0
    this_week: int = 0  # due from the day after tomorrow to the end of the next WEEK_DAYS days
    first_later: date | None = None  # the first day past the week with a card due, and how many
    first_later_count: int = 0


def _learning(card: Mapping[str, Any]) -> bool:
    """Whether a stored card is in a learning step; a card whose JSON cannot be read is not."""
    try:
        state = json.loads(card.get("card_json") or "{}").get("state")
    except (ValueError, TypeError, AttributeError):
        return False
    return state in LEARNING_STATES


def upcoming(cards: Iterable[Mapping[str, Any]], now: datetime) -> Upcoming:
    """Count `cards` (the store's rows: `due`, `card_json`) by when they come due after `now`;
    days are the learner's local calendar days."""
    today = now.astimezone().date()
    due_now = tomorrow = week = 0
    soon: list[tuple[datetime, bool]] = []
    later: dict[date, int] = {}
    for card in cards:
        when = parse_time(card["due"])
        day = when.astimezone().date()
        if when <= now:
            due_now += 1
        elif day == today or when - now <= SOON:
            soon.append((when, _learning(card)))
        elif day == today + timedelta(days=1):
            tomorrow += 1
        elif day < today + timedelta(days=WEEK_DAYS):
            week += 1
        else:
            later[day] = later.get(day, 0) + 1
    soon.sort(key=lambda item: item[0])
    first = min(later) if later and not (soon or tomorrow or week) else None
    return Upcoming(due_now, tuple(w for w, _ in soon), sum(learning for _, learning in soon), tomorrow, week,
                    first, later.get(first, 0) if first else 0)


def _wait(delta: timedelta) -> tuple[int, str]:
    """A wait as a person says it: (1, "min"), (10, "min"), (3, "h"); rounded up to the minute,
    so never "0 min"."""
    minutes = max(1, math.ceil(delta.total_seconds() / 60))
    return (minutes, "min") if minutes < 90 else (round(minutes / 60), "h")


def _span(first: tuple[int, str], last: tuple[int, str]) -> str:
    """in 10 min, in 3–10 min, in 1 min–3 h."""
    if first == last:
        return f"in {first[0]} {first[1]}"
    if first[1] == last[1]:
        return f"in {first[0]}–{last[0]} {last[1]}"
    return f"in {first[0]} {first[1]}–{last[0]} {last[1]}"


def _cards(count: int) -> str:
    return f"{count} card{'s' * (count != 1)}"


def describe(up: Upcoming, now: datetime) -> str:
    """"next: 14 cards in 3–10 min (learning steps), 3 tomorrow, 12 later this week", or ""
    when no card is due after now."""
    parts = []
    if up.soon:
        when = _span(_wait(up.soon[0] - now), _wait(up.soon[-1] - now))
        if up.soon_learning == len(up.soon):
            when += " (learning steps)"
        elif up.soon_learning:
            when += f" ({up.soon_learning} in learning steps)"
        parts.append(f"{_cards(len(up.soon))} {when}")
    if up.tomorrow:
        parts.append(f"{up.tomorrow if parts else _cards(up.tomorrow)} tomorrow")
    if up.this_week:
        parts.append(f"{up.this_week if parts else _cards(up.this_week)} later this week")
    if up.first_later is not None:
        parts.append(f"{_cards(up.first_later_count)} on {up.first_later:%a %Y-%m-%d}")
    return "next: " + ", ".join(parts) if parts else ""
