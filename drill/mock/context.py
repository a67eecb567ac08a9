"""What both rounds of a mock share: its I/O, clock, store and id, and how it is abandoned.

The rounds (drill.mock.concept, drill.mock.coding) keep their results in
objects filled in as they go, so whatever ends the mock (time, Ctrl-C, a
deleted file) the report is built from exactly what happened up to then.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.text import Text

from drill.mock.clock import Clock, Countdown
from drill.mock.reader import DeadlineReader, EndOfInput
from drill.store import Store


class Abandoned(Exception):
    """The learner chose to abandon the mock (or Ctrl-C without a terminal to ask on)."""


class InputClosed(Abandoned):
    """End of input (Ctrl-D, a pipe that ran dry) before the time was up and the rounds done.

    Nothing more can ever be typed, so the learner has walked away: the mock is
    abandoned exactly as with Ctrl-C (same status, same exit code, no final
    grade of an unsubmitted file), not reported as completed. A mock whose
    rounds all finished never reads again, so it cannot end this way.
    """


@dataclass
class MockContext:
    """What both rounds share: I/O, time, the store and the mock's id."""

    console: Console
    read: DeadlineReader
    clock: Clock
    countdown: Countdown
    store: Store
    mock_id: int
    rng: random.Random
    interactive: bool
    seed: int | None = None
    live: Any = None  # drill.mock.live.LiveStatus on a terminal, else None
    on_progress: Callable[[], None] | None = None  # checkpoints the report (drill.mock.run)

    def progress(self) -> None:
        """Something worth keeping happened (a question settled, a file graded): checkpoint it."""
        if self.on_progress is not None:
            self.on_progress()

    def phase(self, text: str, budget_until: float | None = None) -> None:
        """What the live status line says the mock is doing; `budget_until` (monotonic) adds a
        ticking "of budget" for the question on screen."""
        if self.live is not None:
            self.live.set_phase(text, budget_until)

    def busy(self) -> Any:
        """Context for a long blocking call: the countdown keeps ticking on a terminal."""
        return self.live.ticking() if self.live is not None else nullcontext()

    def say(self, text: str, style: str = "") -> None:
        self.console.print(Text(text, style=style))

    def interrupted(self) -> None:
        """After Ctrl-C: ask whether to abandon (raises Abandoned) or carry on (returns).

        The clock keeps running while the question is on screen: a real
        interview does not stop either. Without a terminal there is nobody to
        ask, so Ctrl-C abandons.
        """
        self.console.print()
        if not self.interactive:
            raise Abandoned
        try:
            answer = self.read("Ctrl-C: abandon this mock? y = abandon (the report is saved), Enter = continue >",
                               self.countdown)
        except KeyboardInterrupt:
            raise Abandoned from None
        except EndOfInput:
            raise InputClosed from None
        if answer.strip().lower() in ("y", "yes", "abandon"):
            raise Abandoned
        self.say("continuing — the clock did not stop", "yellow")
