"""Line input with a deadline.

Why not `input()`: a blocking read cannot be interrupted when the mock's time
runs out, so a learner who stops typing would freeze the countdown. Instead
the reader waits on stdin's file descriptor with `select`, in short ticks
against the time left, and raises `TimeUp` the moment the deadline passes.
The same code serves a terminal (canonical mode hands over a whole line at a
time) and a pipe (tests, scripted runs); a stream without a file descriptor
(Typer's CliRunner) falls back to plain `readline`, with the deadline checked
before and after.

Without a live status line (a pipe, a dumb terminal) every prompt starts
with the time left, so the countdown is on screen in every line the learner
answers. With one (drill.mock.live) prompts carry no time at all: a printed
"[3:00 left]" would go stale under a status line that ticks on to 2:46.
"""

from __future__ import annotations

import os
import select
import sys
from collections.abc import Callable, Iterable
from typing import IO, Protocol

from rich.console import Console
from rich.text import Text

from drill.mock.clock import Countdown, FakeClock, mmss


class TimeUp(Exception):
    """The mock's deadline passed while waiting for (or before) an answer."""


class EndOfInput(Exception):
    """stdin is exhausted: nothing more will ever be typed."""


class DeadlineReader(Protocol):
    def __call__(self, prompt: str, countdown: Countdown) -> str:
        """Show `prompt`, return one line; raise TimeUp, EndOfInput or KeyboardInterrupt."""


def prompt_text(prompt: str, countdown: Countdown, clock: bool = True) -> Text:
    """The prompt, led by the time left when `clock` (no live status line to show it instead)."""
    text = Text()
    if clock:
        text.append(f"[{mmss(countdown.remaining())} left] ", style="bold yellow")
    text.append(prompt + " ", style="bold cyan")
    return text


def stream_reader(
    console: Console,
    stream: IO[str] | None = None,
    *,
    tick: float = 0.25,
    on_tick: Callable[[], None] | None = None,
    clock_in_prompt: bool = True,
) -> DeadlineReader:
    """Read lines from `stream` (default stdin) until the countdown runs out."""
    source = stream if stream is not None else sys.stdin
    if source is None:  # stdin was closed: nothing will ever be typed
        import io

        source = io.StringIO()
    try:
        fd: int | None = source.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    interactive = bool(fd is not None and os.isatty(fd))
    pending = bytearray()

    def show(prompt: str, countdown: Countdown) -> None:
        console.print(prompt_text(prompt, countdown, clock_in_prompt), end="")
        console.file.flush()

    def finish(raw: bytes | str) -> str:
        line = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
        line = line.rstrip("\r\n")
        if not interactive:
            console.print(Text(line, style="dim"))  # echo piped input so transcripts read naturally
        return line

    def read_plain(prompt: str, countdown: Countdown) -> str:
        show(prompt, countdown)
        line = source.readline()
        if countdown.expired():  # time ran out first, whatever came (or did not) after it
            console.print()
            raise TimeUp
        if not line:
            console.print()
            raise EndOfInput
        return finish(line)

    def read_fd(prompt: str, countdown: Countdown) -> str:
        assert fd is not None
        show(prompt, countdown)
        while b"\n" not in pending:
            remaining = countdown.remaining()
            if remaining <= 0:
                console.print()
                _drop_typeahead(fd, interactive)
                raise TimeUp
            ready, _, _ = select.select([fd], [], [], min(tick, remaining))
            if on_tick is not None:
                on_tick()
            if not ready:
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                if pending:  # last line without a newline
                    line = bytes(pending)
                    pending.clear()
                    return finish(line)
                console.print()
                raise EndOfInput
            pending.extend(chunk)
        line, _, rest = bytes(pending).partition(b"\n")
        pending[:] = rest
        return finish(line)

    def read(prompt: str, countdown: Countdown) -> str:
        if countdown.expired():
            raise TimeUp
        return read_fd(prompt, countdown) if fd is not None else read_plain(prompt, countdown)

    return read


def _drop_typeahead(fd: int, interactive: bool) -> None:
    """At the deadline, discard a half-typed line so it cannot answer the next prompt."""
    if not interactive:
        return
    try:
        import termios

        termios.tcflush(fd, termios.TCIFLUSH)
    except (ImportError, OSError):
        pass


# A scripted step: a line, (seconds spent before answering, line), or a callable
# producing the line (run just before answering: tests copy a solution in there).
# A line of None means end of input; "^C" raises KeyboardInterrupt.
Step = str | None | tuple[float, str | None] | Callable[[], str | None]
INTERRUPT = "^C"


class ScriptedReader:
    """Replays steps against a FakeClock: a 45-minute mock runs in milliseconds.

    Spending time past the deadline raises TimeUp exactly as the terminal
    reader does; `prompts` keeps every prompt shown, for assertions.
    """

    def __init__(self, console: Console, clock: FakeClock, steps: Iterable[Step], *,
                 clock_in_prompt: bool = True) -> None:
        self.console = console
        self.clock = clock
        self.steps = list(steps)
        self.clock_in_prompt = clock_in_prompt
        self.prompts: list[str] = []

    def __call__(self, prompt: str, countdown: Countdown) -> str:
        if countdown.expired():
            raise TimeUp
        self.prompts.append(prompt)
        self.console.print(prompt_text(prompt, countdown, self.clock_in_prompt), end="")
        if not self.steps:
            self.console.print()
            raise EndOfInput
        step = self.steps.pop(0)
        if isinstance(step, tuple):
            seconds, line = step
            self.clock.advance(seconds)
        elif callable(step):
            line = step()
        else:
            line = step
        if countdown.expired():
            self.console.print()
            raise TimeUp
        if line is None:
            self.console.print()
            raise EndOfInput
        if line == INTERRUPT:
            self.console.print()
            raise KeyboardInterrupt
        self.console.print(Text(line, style="dim"))
        return line
