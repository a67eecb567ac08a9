"""`drill quiz` as a plain function: load, filter, pick, run the session, summarize.

Why separate from commands.py: the CLI layer only parses flags; this is the
whole behaviour, callable from tests and from `drill mock` with an injected
reader, console and clock.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.text import Text

from drill.errors import UserError
from drill.quiz.loader import load_bank
from drill.quiz.schedule import scheduler_for
from drill.quiz.select import cram_queue, due_queue, filtered, new_today, no_match_message, resolve_filters
from drill.quiz.session import LineReader, Session, render_summary, terminal_reader
from drill.store import Store, open_store

EXIT_INTERRUPTED = 130
# An explicit --topic/--kind over cards never seen draws this many new cards of that selection a day even when
# the daily new-card limit is spent: asking for spot_bug on day one must not answer "today's new cards are done".
FILTERED_NEW_EXTRA = 5


@dataclass(frozen=True)
class QuizOptions:
    """`drill quiz`'s flags, as run_quiz takes them (the mock builds one of its own)."""

    topics: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    difficulty: str | None = None
    kinds: tuple[str, ...] = ()
    count: int | None = 20
    cram: bool = False
    new_limit: int = 10
    seed: int | None = None
    retention: float = 0.9
    bank: Path | None = None
    shuffle: bool = True


def run_quiz(
    options: QuizOptions,
    *,
    console: Console | None = None,
    read: LineReader | None = None,
    store: Store | None = None,
    clock: Callable[[], datetime] | None = None,
    fuzz: bool = True,
) -> int:
    """Run one quiz session; returns the exit code (0, or 130 after Ctrl-C)."""
    console = console or Console(highlight=False)
    clock = clock or (lambda: datetime.now(timezone.utc))
    bank = load_bank(options.bank)
    filters = resolve_filters(bank.questions, options.topics, options.tags, options.difficulty, options.kinds)
    pool = filtered(bank.questions, filters)
    if not pool:
        raise UserError(no_match_message(bank.questions, filters))
    own_store = store is None
    store = store or open_store()
    try:
        rng = random.Random(options.seed)
        now = clock()
        if options.cram:
            queue = cram_queue(pool, count=options.count, rng=rng)
            scheduler = None
        else:
            cards = store.cards()
            since = now.astimezone().replace(hour=0, minute=0, second=0, microsecond=0).astimezone(timezone.utc)
            todays = store.reviews(since=since.isoformat())
            done = new_today(todays, now)
            ration = max(0, options.new_limit - done)
            allowed = ration
            if filters.topics or filters.kinds:
                ids = {q.id for q in pool}
                done_here = new_today((r for r in todays if r.question_id in ids), now)
                allowed = max(ration, FILTERED_NEW_EXTRA - done_here)
            queue = due_queue(pool, cards, now, new_limit=allowed, new_done_today=0, count=options.count, rng=rng)
            past = sum(q.id not in cards for q in queue) - ration
            if past > 0:
                asked = ", ".join((*filters.topics, *filters.kinds))
                used = "is used up" if ration == 0 else f"leaves {ration}"
                console.print(Text(f"today's limit of {options.new_limit} new cards {used}; drawing {past} new "
                                   f"{'card' if past == 1 else 'cards'} of {asked} past it, since you asked "
                                   f"for them (at most {FILTERED_NEW_EXTRA} a day per selection; --new-limit "
                                   "sets the limit)", style="yellow"))
            scheduler = scheduler_for(store, options.retention, fuzz=fuzz)
            if not queue:
                _nothing_due(console, pool, cards, done, options.new_limit, now)
                return 0
        # Refuse a store we could not save to *now*, before the first answer is typed
        # (a held write lock would otherwise cost that answer after a 10 s wait).
        store.probe_write()
        session = Session(store, console, read or terminal_reader(console), scheduler, rng, clock,
                          shuffle=options.shuffle)
        if options.cram:  # said before the first question, not only in the summary after the last
            console.print(Text("cram: answers are not scheduled (practice; your schedule is left as it is)",
                               style="bold yellow"))
        result = session.run(queue, limit=options.count)
        due_left, next_due = None, ""
        if not options.cram:
            from drill.quiz.upcoming import describe, upcoming

            later = clock()
            cards = store.cards()
            coming = upcoming((cards[q.id] for q in pool if q.id in cards), later)
            due_left, next_due = coming.due_now, describe(coming, later)
        render_summary(console, result, cram=options.cram, due_left=due_left, next_due=next_due)
        if result.ended_by == "error":
            raise UserError(result.error)  # one line on stderr, exit 2, after the summary
        return EXIT_INTERRUPTED if result.ended_by == "interrupt" else 0
    finally:
        if own_store:
            store.close()


def _nothing_due(console: Console, pool: list, cards: dict, done: int, limit: int,  # type: ignore[type-arg]
                 now: datetime) -> None:
    from drill.quiz.upcoming import describe, upcoming

    line = "Nothing due right now"
    if done >= limit and any(q.id not in cards for q in pool):
        line += f" and today's {limit} new cards are done (--new-limit)"
    coming = describe(upcoming((cards[q.id] for q in pool if q.id in cards), now), now)
    if coming:
        line += f"; {coming}"
    console.print(Text(line + ". Practice anyway with `drill quiz --cram`.", style="bold"))
