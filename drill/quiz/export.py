"""Your reviews and the bank, out of drill: `drill export reviews` (CSV) and `drill export anki` (.apkg).

Why these formats: the review log is in the FSRS optimizer's schema
(open-spaced-repetition/fsrs-optimizer: card_id, review_time in milliseconds
since the epoch in UTC, review_rating 1-4, review_state 0 New / 1 Learning /
2 Review / 3 Relearning at the time of the review, review_duration in ms), so
any FSRS tool can fit or inspect it; the bank goes to Anki, where most
learners already keep their cards. Only scheduled reviews are exported: cram
answers never touched the schedule. Files are written atomically (a temporary
file renamed into place), so an interrupted export leaves no half file.
"""

from __future__ import annotations

import csv
import html
import io
import json
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path

from drill.errors import UserError
from drill.quiz import kinds
from drill.quiz.schedule import parse_time
from drill.quiz.schema import Question
from drill.safe_files import resolve_target, write_atomic
from drill.store import Review

REVIEW_COLUMNS = ("card_id", "review_time", "review_rating", "review_state", "review_duration")
NEW = 0


def _state_after(card_json: str | None, previous: int) -> int:
    """The FSRS state a scheduled review left its card in (fsrs Card.to_dict()'s `state`)."""
    try:
        state = json.loads(card_json)["state"] if card_json else previous
    except (ValueError, TypeError, KeyError):
        return previous
    return state if isinstance(state, int) and 1 <= state <= 3 else previous


def review_rows(log: Iterable[tuple[Review, str | None]]) -> list[tuple[str, int, int, int, int | str]]:
    """One CSV row per scheduled review, in time order; the state is the card's before it."""
    rows = []
    state: dict[str, int] = {}
    for review, card_json in log:
        before = state.get(review.question_id, NEW)
        at = parse_time(review.reviewed_at)
        duration: int | str = review.duration_ms if review.duration_ms is not None else ""
        rows.append((review.question_id, int(at.timestamp() * 1000), review.rating, before, duration))
        state[review.question_id] = _state_after(card_json, before)
    return rows


def reviews_csv(log: Iterable[tuple[Review, str | None]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(REVIEW_COLUMNS)
    writer.writerows(review_rows(log))
    return out.getvalue()


# --- Anki -----------------------------------------------------------------------

_CSS = """.card { font-family: sans-serif; font-size: 18px; text-align: left; white-space: pre-wrap; }
.drill-kind { color: #888; font-size: 13px; }"""


def _stable_id(name: str) -> int:
    """Anki model and deck ids: fixed per name, so re-importing updates instead of duplicating."""
    return (1 << 30) + zlib.crc32(name.encode("utf-8")) % (1 << 30)


def anki_package(questions: Sequence[Question], deck: str = "drill") -> object:
    """A genanki Package with one sub-deck per topic and one note per question; a note's guid
    is its question id, so importing a newer export updates the cards already studied."""
    import genanki

    model = genanki.Model(
        _stable_id("drill-question-v1"),
        "drill question",
        fields=[{"name": "Front"}, {"name": "Back"}, {"name": "Id"}, {"name": "Kind"}],
        templates=[{
            "name": "Card 1",
            "qfmt": '<div class="drill-kind">{{Kind}}</div>{{Front}}',
            "afmt": '{{FrontSide}}<hr id="answer">{{Back}}',
        }],
        css=_CSS,
        sort_field_index=2,
    )
    decks: dict[str, object] = {}
    for question in questions:
        front, back = kinds.get(question.kind).card(question)
        name = f"{deck}::{question.topic}"
        if name not in decks:
            decks[name] = genanki.Deck(_stable_id(name), name)
        tags = [t.replace(" ", "_") for t in (*question.tags, question.topic, question.kind, question.difficulty)]
        note = genanki.Note(
            model=model,
            fields=[html.escape(front), html.escape(back), question.id, f"{question.topic} · {question.kind}"],
            guid=genanki.guid_for("drill", question.id),
            tags=sorted(set(tags)),
        )
        decks[name].add_note(note)  # type: ignore[attr-defined]
    return genanki.Package(list(decks.values()))


def write_anki(questions: Sequence[Question], path: Path, deck: str = "drill") -> int:
    """Write `questions` as an .apkg at `path` (atomically); returns the number of notes."""
    if not questions:
        raise UserError("no question to export (check the filters)")
    package = anki_package(questions, deck)
    resolve_target(path)  # refused before the deck is built, not after
    buffer = io.BytesIO()
    package.write_to_file(buffer)  # type: ignore[attr-defined]  # zipfile takes a file object
    write_atomic(path, buffer.getvalue())
    return len(questions)
