"""A reader that stops early (`drill stats | head -1`, a pager quit with q).

Every drill command must then stop quietly: exit code 141 (128 + SIGPIPE, as
`cat` or `seq` give), nothing on stderr — no traceback, no "Exception ignored
... BrokenPipeError" — whichever layer meets the closed pipe first: Rich's
console, Typer's echo, or the final flush of buffered output.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from drill.cliutil import EXIT_BROKEN_PIPE

BANK = Path(__file__).parent / "fixtures" / "questions" / "good"

# (arguments, stdin): each prints through a different path (Rich tables, Rich help, typer.echo, a quiz loop).
COMMANDS: list[tuple[list[str], str]] = [
    (["stats"], ""),
    (["exercises"], ""),
    (["mock", "--history"], ""),
    (["validate", str(BANK)], ""),
    (["quiz", "--help"], ""),
    (["--version"], ""),
    (["quiz", "--bank", str(BANK), "-n", "2", "--cram", "--seed", "1"], "a\nb\n"),
]


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "DRILL_HOME": str(home), "COLUMNS": "100", "PYTHONUNBUFFERED": ""}


def _drill_into_a_pipe_nobody_reads(home: Path, args: list[str], stdin: str) -> subprocess.CompletedProcess[bytes]:
    """Run drill with stdout on a pipe whose reading end is already closed: the first
    write meets EPIPE, every time (no race with how fast a reader gives up)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-c", "from drill.cli import main; main()", *args],
            input=stdin.encode(), stdout=write_end, stderr=subprocess.PIPE, env=_env(home), timeout=120,
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize(("args", "stdin"), COMMANDS, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_a_closed_stdout_ends_the_command_quietly(tmp_path: Path, args: list[str], stdin: str) -> None:
    proc = _drill_into_a_pipe_nobody_reads(tmp_path, args, stdin)
    assert proc.stderr.decode() == "", args
    assert proc.returncode == EXIT_BROKEN_PIPE, (args, proc.returncode)


def test_head_reading_one_line_of_a_long_output(tmp_path: Path) -> None:
    """The real thing: a reader takes the first line and closes while drill is still
    writing (a bank of leeches makes `drill stats` print far more than a pipe holds)."""
    from drill.quiz.schedule import LEECH_LAPSES
    from drill.store import Store, now_iso

    with Store(tmp_path / "progress.db") as store, store.transaction() as db:
        db.executemany(  # 3000 leeches, one line each: ~100 KB of output, past any pipe buffer
            "INSERT INTO cards (question_id, card_json, due, reps, lapses, updated_at) VALUES (?, '{}', ?, ?, ?, ?)",
            [(f"q{i}", "2030-01-01T00:00:00+00:00", LEECH_LAPSES, LEECH_LAPSES, now_iso()) for i in range(3000)],
        )
    proc = subprocess.Popen(
        [sys.executable, "-c", "from drill.cli import main; main()", "stats", "--bank", str(BANK)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(tmp_path),
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == EXIT_BROKEN_PIPE, err
    assert b"reviews" in first and err == ""


def test_a_full_read_still_exits_0(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "from drill.cli import main; main()", "stats"],
        capture_output=True, env=_env(tmp_path), timeout=120,
    )
    assert proc.returncode == 0 and b"0 reviews" in proc.stdout and proc.stderr == b""
