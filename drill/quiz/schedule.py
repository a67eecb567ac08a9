"""The FSRS scheduler behind `drill quiz`, wrapped so the rest never touches fsrs types.

Why a wrapper: cards live in the store as JSON, the fsrs package changes its
API between major versions, and tests need a clock they control. Everything
here takes and returns plain values (JSON text, datetimes, ints 1-4). The
fsrs import is deferred to the first review so it never delays the first
question on screen.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from drill.errors import UserError

AGAIN, HARD, GOOD, EASY = 1, 2, 3, 4
RATING_NAMES = {AGAIN: "Again", HARD: "Hard", GOOD: "Good", EASY: "Easy"}
LEECH_LAPSES = 8


@dataclass(frozen=True)
class Outcome:
    """The card after one review: what the store needs to save."""

    card_json: str
    due: datetime
    lapsed: bool


class Scheduler:
    """FSRS with a desired retention; `fuzz` off makes intervals deterministic (tests).

    `parameters`: the learner's own, fitted by `drill optimize` (None = FSRS's defaults)."""

    def __init__(self, retention: float = 0.9, *, fuzz: bool = True, parameters: list[float] | None = None) -> None:
        if not 0.5 <= retention < 1.0:
            raise ValueError("desired retention must be at least 0.5 and below 1.0 (e.g. 0.9)")
        self.retention = retention
        self.fuzz = fuzz
        self.parameters = parameters
        self._impl: Any = None

    def _fsrs(self) -> Any:
        if self._impl is None:
            import fsrs

            extra = {"parameters": tuple(self.parameters)} if self.parameters is not None else {}
            try:
                self._impl = fsrs.Scheduler(desired_retention=self.retention, enable_fuzzing=self.fuzz, **extra)
            except (ValueError, TypeError) as exc:  # a hand-edited parameter row fsrs refuses
                raise UserError(f"the FSRS parameters saved by `drill optimize` are not usable ({exc}); "
                                "run `drill optimize` again or `drill optimize --reset`") from None
        return self._impl

    def review(self, card_json: str | None, rating: int, now: datetime) -> Outcome:
        """Apply one rating (1-4) at time `now` to a stored card (None = a new card)."""
        import fsrs

        if rating not in RATING_NAMES:
            raise ValueError(f"rating must be 1-4, got {rating!r}")
        if now.tzinfo is None:
            now = now.replace(tzinfo=timezone.utc)
        try:
            card = fsrs.Card.from_dict(json.loads(card_json)) if card_json else fsrs.Card(due=now)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise UserError(f"a card in the progress store is not an FSRS card ({type(exc).__name__}: {exc}); "
                            "nothing was saved for this answer") from None
        was_review = card.state == fsrs.State.Review
        new_card, _log = self._fsrs().review_card(card, fsrs.Rating(rating), now)
        return Outcome(json.dumps(new_card.to_dict()), new_card.due, was_review and rating == AGAIN)


def scheduler_for(store: Any, retention: float = 0.9, *, fuzz: bool = True) -> Scheduler:
    """The scheduler a learner's reviews get: their fitted parameters when they have some."""
    fitted = store.parameters()
    return Scheduler(retention, fuzz=fuzz, parameters=fitted[0] if fitted else None)


def parse_time(text: str) -> datetime:
    """An ISO timestamp from the store as an aware datetime (naive ones are UTC)."""
    value = datetime.fromisoformat(text)
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
