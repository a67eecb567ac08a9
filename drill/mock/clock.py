"""Time for the mock, injectable so tests can sit a 45-minute mock in milliseconds.

Two readings are needed: a monotonic one for the countdown (immune to the
wall clock jumping: NTP, DST, a laptop waking up) and a wall-clock one for
what goes into the store (FSRS due dates, timestamps).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds from an arbitrary origin; never goes backwards."""

    def now(self) -> datetime:
        """The current wall-clock time, timezone-aware."""

    def sleep(self, seconds: float) -> None:
        """Wait (a fake clock just advances)."""


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


class FakeClock:
    """A clock that moves only when told to (tests)."""

    def __init__(self, start: datetime | None = None) -> None:
        self._origin = start or datetime(2025, 1, 6, 9, 0, tzinfo=timezone.utc)
        self._elapsed = 0.0

    def advance(self, seconds: float) -> None:
        self._elapsed += seconds

    def monotonic(self) -> float:
        return 1000.0 + self._elapsed

    def now(self) -> datetime:
        return self._origin + timedelta(seconds=self._elapsed)

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))


class Countdown:
    """The mock's one deadline, fixed when the brief is shown."""

    def __init__(self, clock: Clock, seconds: float) -> None:
        self.clock = clock
        self.started = clock.monotonic()
        self.deadline = self.started + seconds

    def remaining(self) -> float:
        return max(0.0, self.deadline - self.clock.monotonic())

    def elapsed(self) -> float:
        return self.clock.monotonic() - self.started

    def expired(self) -> bool:
        return self.clock.monotonic() >= self.deadline


def mmss(seconds: float) -> str:
    """12:05 style; rounds up so the display shows 0:00 only when time is really out."""
    whole = int(-(-max(0.0, seconds) // 1))
    minutes, secs = divmod(whole, 60)
    if minutes >= 60:
        return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def duration(seconds: float) -> str:
    """A time taken, rounded to the nearest second (1:05)."""
    minutes, secs = divmod(int(round(max(0.0, seconds))), 60)
    return f"{minutes}:{secs:02d}"


def budget_left(seconds: float) -> str:
    """What is left of a question's budget: '1:20 of budget', or 'over budget by 0:10'."""
    return f"{mmss(seconds)} of budget" if seconds > 0 else f"over budget by {mmss(-seconds)}"
