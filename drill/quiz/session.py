"""The quiz loop: ask, check, rate, save — one question at a time.

Why the shape: input and output are injected (`LineReader`, a Rich Console),
so tests drive a whole session with a list of lines and read what was
printed, without a terminal. Each rating is written to the store *before*
the next question appears, so killing the process loses at most the question
on screen. Unreadable input (a typo, a letter that is not an option) is asked
again and never graded; `q`, end of input and Ctrl-C all end the session
cleanly with a summary.
"""

from __future__ import annotations

import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Protocol

from rich.console import Console
from rich.text import Text

from drill.quiz import kinds
from drill.quiz.kinds.recall import suggest_rating  # noqa: F401 - re-exported
from drill.quiz.schedule import AGAIN, EASY, GOOD, HARD, LEECH_LAPSES, RATING_NAMES, Scheduler
from drill.quiz.schema import Question
from drill.quiz.text import reflow
from drill.store import Store, StoreUnavailable

QUIT_WORDS = {"q", "quit", ":q", "exit"}
HINT_WORDS = {"?", "hint"}


class LineReader(Protocol):
    def __call__(self, prompt: str) -> str | None:
        """Show `prompt`, return one line of input without its newline, or None at end of input."""


class _EndSession(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def lines_reader(lines: list[str]) -> LineReader:
    """A reader that replays fixed lines (tests), then reports end of input."""
    feed: Iterator[str] = iter(lines)

    def read(prompt: str) -> str | None:
        return next(feed, None)

    return read


def terminal_reader(console: Console) -> LineReader:
    """Read from the terminal, or line by line from stdin when it is a pipe."""
    interactive = sys.stdin is not None and sys.stdin.isatty()
    if interactive:
        # Line editing and history for input(): without it arrow keys type ^[[D into
        # the answer. Imported only for a terminal (pipes and tests never pay for it).
        try:
            import readline  # noqa: F401
        except ImportError:  # Windows, or a Python built without it: plain input() still works
            pass

    def read(prompt: str) -> str | None:
        console.print(Text(prompt + " ", style="bold cyan"), end="")
        sys.stdout.flush()
        if interactive:
            try:
                return input()
            except EOFError:
                console.print()
                return None
        line = sys.stdin.readline() if sys.stdin is not None else ""  # None: stdin was closed
        if not line:
            console.print()
            return None
        line = line.rstrip("\r\n")
        console.print(Text(line, style="dim"))  # echo piped answers so transcripts read naturally
        return line

    return read


@dataclass
class SessionResult:
    """What one session did, for its summary (and for `drill mock`'s concept round)."""

    asked: int = 0
    ratings: Counter[int] = field(default_factory=Counter)
    auto_right: int = 0
    auto_wrong: int = 0
    hint_capped: int = 0  # answers rated Hard at most because a worked or the last hint was read
    ended_by: str = "done"  # done | quit | eof | interrupt | error
    error: str = ""  # why the store refused a write (ended_by == "error")
    seconds: float = 0.0
    missed: list[str] = field(default_factory=list)

    @property
    def saved(self) -> int:
        return sum(self.ratings.values())


@dataclass
class Session:
    """One quiz run over a prepared queue of questions."""

    store: Store
    console: Console
    read: LineReader
    scheduler: Scheduler | None  # None = cram: log reviews, leave the schedule alone
    rng: random.Random
    clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)
    source: str = "quiz"  # recorded with each scheduled review; drill mock sets "mock"
    shuffle: bool = True  # choice options in a seeded random order: banks tend to list the right one first
    _hint_note: bool = field(default=False, init=False, repr=False)  # the "? for a hint" line is still to show
    _hints_seen: int = field(default=0, init=False, repr=False)  # hints shown for the card on screen

    def ask(self, question: Question) -> tuple[int, str, bool | None]:
        """Ask ONE question and save its rating; returns (rating, answer, auto-check result).

        For callers that drive their own loop (drill mock: deadlines, its own
        headers). Whatever the reader raises propagates, and nothing is saved
        for a question that was not answered.
        """
        rating, answer, right, began = self._ask(question)
        self._save(question, rating, answer, began)
        return rating, answer, right

    @property
    def hints_seen(self) -> int:
        """How many hints the learner read on the card on screen (or the last one asked)."""
        return self._hints_seen

    def record_miss(self, question: Question, answer: str, seconds: float) -> None:
        """Save an Again for a question the learner saw and chose not to answer
        (a skip in a mock is a failed recall, and the schedule should know)."""
        self._save(question, AGAIN, answer, time.monotonic() - seconds)

    def run(self, queue: list[Question], limit: int | None = None) -> SessionResult:
        """Ask the queue in order; at most `limit` questions in all, repeats included.

        A card missed in a scheduled session comes back once at the end while
        there is room under `limit` (like Anki's learning steps: the correction
        is fresh). Repeats get their own header, so "Question i/N" never grows.
        """
        result = SessionResult()
        started = time.monotonic()
        first_pass = len(queue)
        queue = list(queue)  # grows: lapsed cards are appended once, within the limit
        requeued: set[str] = set()
        try:
            for index, question in enumerate(queue):
                if index < first_pass:
                    self._header(f"Question {index + 1}/{first_pass}", question)
                else:
                    self._header(f"Repeat {index + 1 - first_pass} (missed earlier)", question)
                rating, answer, right, began = self._ask(question)
                self._save(question, rating, answer, began)
                result.asked += 1
                result.ratings[rating] += 1
                result.hint_capped += question.hint_caps(self._hints_seen)
                if right is True:
                    result.auto_right += 1
                elif right is False:
                    result.auto_wrong += 1
                if rating == AGAIN:
                    result.missed.append(question.id)
                    # Cram sessions keep to their queue: they do not schedule, so no learning step.
                    room = limit is None or len(queue) < limit
                    if self.scheduler is not None and question.id not in requeued and room:
                        requeued.add(question.id)
                        queue.append(question)
        except _EndSession as end:
            result.ended_by = end.reason
        except KeyboardInterrupt:
            result.ended_by = "interrupt"
            self.console.print()
        except StoreUnavailable as exc:
            # Locked or read-only store: this answer is not saved, earlier ones are. Stop
            # here (the next one could not be saved either) and still show the summary.
            result.ended_by = "error"
            result.error = str(exc)
        result.seconds = time.monotonic() - started
        return result

    # -- what a kind's `ask` uses (drill.quiz.kinds.base.Asker) ------------

    def line(self, prompt: str) -> str:
        """One line of input; q, end of input and Ctrl-C end the session."""
        text = self.read(prompt)
        if text is None:
            raise _EndSession("eof")
        if text.strip().lower() in QUIT_WORDS:
            raise _EndSession("quit")
        return text

    def say(self, text: str, style: str | None = None) -> None:
        self.console.print(Text(text, style=style or ""))

    def answer(self, question: Question, prompt: str) -> str:
        """Read an answer; '?' reveals the next hint instead of counting as one.

        The first prompt of a card with hints says so in one dim line (every kind, once:
        a hint offer on every re-asked prompt would be noise)."""
        if self._hint_note:
            self._hint_note = False
            count = len(question.hints)
            self.say(f"? for a hint ({count} available)" if count > 1 else "? for a hint", "dim")
        while True:
            text = self.line(prompt)
            if text.strip().lower() in HINT_WORDS:
                shown = self._hints_seen
                if shown < len(question.hints):
                    self.say(f"hint: {question.hints[shown]}", "yellow")
                    self._hints_seen = shown + 1
                    if question.hint_caps(shown + 1) and not question.hint_caps(shown):
                        why = "the last hint" if shown + 1 == len(question.hints) else "a worked hint"
                        self.say(f"({why}: this answer is rated Hard at most, so the card comes back soon)", "dim")
                else:
                    self.say("no more hints" if question.hints else "this question has no hints", "yellow")
                continue
            return text

    def teach(self, question: Question) -> None:
        self.show_common_wrong(question)
        self.say(reflow(question.explanation), "dim")

    def show_common_wrong(self, question: Question) -> None:
        if question.common_wrong:
            self.say("Common wrong answers", "bold")
            self.items([("✗", f"{item.answer} — {item.why}", "red") for item in question.common_wrong])

    def items(self, rows: list[tuple[str, str, str | None]]) -> None:
        """Indented `mark text` lines whose wrapped lines stay under the text, not under the
        mark: options, key points and feedback stay readable at 80 columns and below."""
        if not rows:
            return
        from rich.table import Table

        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True)
        grid.add_column()
        for mark, text, style in rows:
            grid.add_row(Text("  " + mark, style=style or ""), Text(text, style=style or ""))
        self.console.print(grid)

    def verdict(self, right: bool, text: str) -> None:
        self.say(("✓ " if right else "✗ ") + text, "bold green" if right else "bold red")

    def _header(self, title: str, question: Question) -> None:
        self.console.print()
        tags = f" · {', '.join(question.tags)}" if question.tags else ""
        self.say(f"{title} · {question.topic} · {question.difficulty} · {question.kind}{tags}", "bold magenta")

    def _ask(self, question: Question) -> tuple[int, str, bool | None, float]:
        began = time.monotonic()
        self._hint_note = bool(question.hints)
        self._hints_seen = 0
        asked = kinds.get(question.kind).ask(self, question)
        rating = asked.rating
        if question.hint_caps(self._hints_seen) and rating > HARD:
            rating = HARD  # the hint did the card's work: it is not known yet, whatever the answer
            self.say(f"rated {RATING_NAMES[HARD]}, not {RATING_NAMES[asked.rating]}: hint-capped "
                     f"({self._hints_seen} of {len(question.hints)} hints read)", "yellow")
        return rating, asked.answer, asked.right, began

    # -- saving -----------------------------------------------------------

    def _save(self, question: Question, rating: int, answer: str, began: float) -> None:
        now = self.clock()
        duration = int((time.monotonic() - began) * 1000)
        hints = {"hints_shown": self._hints_seen, "hint_capped": question.hint_caps(self._hints_seen)}
        if self.scheduler is None:
            self.store.record_review(
                question.id, rating, answer=answer, duration_ms=duration, topic=question.topic,
                source="cram", reviewed_at=now.astimezone(timezone.utc).isoformat(), **hints,
            )
            return
        outcome = self.scheduler.review(self.store.card_json(question.id), rating, now)
        self.store.record_review(
            question.id, rating, answer=answer, duration_ms=duration, card_json=outcome.card_json,
            due=outcome.due.astimezone(timezone.utc).isoformat(), lapsed=outcome.lapsed,
            topic=question.topic, source=self.source, reviewed_at=now.astimezone(timezone.utc).isoformat(), **hints,
        )
        if outcome.lapsed:
            lapses = self.store.cards().get(question.id, {}).get("lapses", 0)
            if lapses >= LEECH_LAPSES:
                self.say(f"this card is a leech ({lapses} lapses): rewrite your notes on it or suspend it", "yellow")


def render_summary(console: Console, result: SessionResult, *, cram: bool, due_left: int | None,
                   next_due: str = "") -> None:
    """The one-screen end of a session; `next_due` says when the next cards come due (drill.quiz.upcoming),
    so "0 still due" followed by 14 due ten minutes later (FSRS's learning steps) reads as the schedule."""
    from rich.table import Table

    console.print()
    ended = {
        "done": "Session complete",
        "quit": "Session ended (q)",
        "eof": "Session ended (end of input)",
        "interrupt": "Session interrupted (Ctrl-C)",
        "error": "Session stopped: the last answer could not be saved",
    }[result.ended_by]
    console.print(Text(f"{ended} — {result.saved} review{'s' * (result.saved != 1)} saved"
                       + (" (cram: schedule untouched)" if cram else ""), style="bold"))
    if result.asked:
        table = Table(show_header=False, box=None, padding=(0, 2))
        for rating in (AGAIN, HARD, GOOD, EASY):
            if result.ratings[rating]:
                table.add_row(RATING_NAMES[rating], str(result.ratings[rating]))
        if result.auto_right + result.auto_wrong:
            table.add_row("auto-checked", f"{result.auto_right}/{result.auto_right + result.auto_wrong} right")
        if result.hint_capped:
            table.add_row("hint-capped", f"{result.hint_capped} (rated Hard at most)")
        minutes, seconds = divmod(int(result.seconds), 60)
        table.add_row("time", f"{minutes}m {seconds:02d}s")
        console.print(table)
        if result.missed:
            console.print(Text("to revisit: " + ", ".join(result.missed), style="yellow"))
    if due_left is not None:
        still = f"{due_left} card{'s' * (due_left != 1)} still due now"
        console.print(Text(still + (f"; {next_due}" if next_due else ""), style="dim"))
