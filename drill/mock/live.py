"""The live countdown: one status line pinned to the top row of the terminal.

Why a scroll region and not rich.live.Live: Live redraws the bottom of the
screen, which fights with the learner typing an answer on that same line.
Here the top row is fenced off (DECSTBM) and rewritten in place with the
cursor saved and restored around it, so it ticks every second while the
learner types below, reads, or works in their editor — and the questions,
answers and verdicts scroll normally underneath. Only used on a real
terminal; pipes and tests get the time left in every prompt instead.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console

from drill.mock.clock import Countdown, budget_left, mmss

ESC = "\x1b"


class LiveStatus:
    def __init__(self, stream) -> None:  # type: ignore[no-untyped-def]
        self.stream = stream
        self.countdown: Countdown | None = None
        self.title = ""
        self.phase = ""
        self.budget_until: float | None = None  # monotonic end of the question's budget, shown ticking
        self._shown = ""
        self._size = (0, 0)
        self._lock = threading.Lock()

    @classmethod
    def for_terminal(cls, console: Console) -> LiveStatus | None:
        """A status line when stdout is a capable terminal, else None."""
        stream = sys.stdout
        if not console.is_terminal or not stream.isatty() or os.environ.get("TERM", "dumb") == "dumb":
            return None
        return cls(stream)

    def start(self, countdown: Countdown, title: str) -> None:
        self.countdown, self.title = countdown, title
        self._write(f"{ESC}[2J{ESC}[H")  # a clean screen for the interview
        self._fence(force=True)
        self._write(f"{ESC}[2;1H")
        self.tick()

    def set_phase(self, phase: str, budget_until: float | None = None) -> None:
        self.phase, self.budget_until = phase, budget_until
        self.tick()

    def tick(self) -> None:
        """Redraw the status line if the shown second (or the terminal size) changed."""
        if self.countdown is None:
            return
        with self._lock:
            self._fence()
            remaining = self.countdown.remaining()
            text = self.status_text()
            if text == self._shown:
                return
            self._shown = text
            width = self._size[0]
            style = "7;1" if remaining > 60 else "41;1"  # reverse video; red in the last minute
            self._write(f"{ESC}7{ESC}[1;1H{ESC}[2K{ESC}[{style}m{text[:width - 1].ljust(width - 1)}{ESC}[0m{ESC}8")

    def status_text(self) -> str:
        """' ⏱  2:46 left · drill mock #3 · round 1: question 2/6 · 1:12 of budget', as of now."""
        assert self.countdown is not None
        text = f" ⏱  {mmss(self.countdown.remaining())} left · {self.title}"
        if self.phase:
            text += f" · {self.phase}"
        if self.budget_until is not None:
            text += f" · {budget_left(self.budget_until - self.countdown.clock.monotonic())}"
        return text

    @contextmanager
    def ticking(self, every: float = 0.5) -> Iterator[None]:
        """Keep the countdown moving while the main thread blocks (grading)."""
        done = threading.Event()

        def loop() -> None:
            while not done.wait(every):
                self.tick()

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    def stop(self) -> None:
        """Give the whole screen back (the cursor stays where the text is)."""
        with self._lock:
            self._write(f"{ESC}7{ESC}[r{ESC}8")
            self.countdown = None

    def _fence(self, force: bool = False) -> None:
        size = shutil.get_terminal_size()
        if force or (size.columns, size.lines) != self._size:
            self._size = (size.columns, size.lines)
            self._shown = ""
            self._write(f"{ESC}7{ESC}[2;{size.lines}r{ESC}8")

    def _write(self, data: str) -> None:
        try:
            self.stream.write(data)
            self.stream.flush()
        except (OSError, ValueError):
            pass
