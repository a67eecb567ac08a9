"""Hostile environments: a locked or misplaced store, closed streams, a Latin-1 terminal, typos.

Each must end in one line that says what and where, a non-zero exit (2 for
usage and input errors), no traceback, and every answer saved before the
problem still in the store.
"""

from __future__ import annotations

import io
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from drill import store as store_mod
from drill.cli import app
from drill.errors import UserError
from drill.quiz.run import QuizOptions, run_quiz
from drill.store import Store, StoreUnavailable

BANK = Path(__file__).parent / "fixtures" / "questions" / "good"
runner = CliRunner()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DRILL_HOME", str(tmp_path))
    monkeypatch.setattr(store_mod.core, "BUSY_TIMEOUT_S", 0.2)  # a held lock fails fast in tests
    return tmp_path


def _hold_write_lock(db: Path) -> sqlite3.Connection:
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    return other


def test_a_locked_store_refuses_one_write_and_keeps_the_rest(home: Path) -> None:
    db = home / "progress.db"
    with Store(db) as store:
        store.record_review("q1", 3, card_json="{}", due="2030-01-01T00:00:00+00:00")
        other = _hold_write_lock(db)
        try:
            with pytest.raises(StoreUnavailable, match="write lock"):
                store.record_review("q2", 3, card_json="{}", due="2030-01-01T00:00:00+00:00")
        finally:
            other.rollback()
            other.close()
        assert [r.question_id for r in store.reviews()] == ["q1"]
        assert set(store.cards()) == {"q1"}
        store.record_review("q3", 3)  # and it works again once the lock is gone
        assert [r.question_id for r in store.reviews()] == ["q1", "q3"]


def test_quiz_stops_with_a_summary_when_the_store_is_locked_mid_session(home: Path) -> None:
    db = home / "progress.db"
    Store(db).close()
    held: list[sqlite3.Connection] = []
    prompts: list[str] = []

    def read(prompt: str) -> str | None:
        prompts.append(prompt)
        if len(prompts) == 2 and not held:  # second question on screen: another process grabs the lock
            held.append(_hold_write_lock(db))
        return "a"

    out = io.StringIO()
    options = QuizOptions(bank=BANK, tags=("complexity",), seed=5, shuffle=False)
    try:
        with pytest.raises(UserError, match="write lock"):
            run_quiz(options, console=Console(file=out, width=100), read=read)
    finally:
        for conn in held:
            conn.rollback()
            conn.close()
    assert "Session stopped: the last answer could not be saved — 1 review saved" in out.getvalue()
    with Store(db) as store:
        assert len(store.reviews()) == 1


def test_drill_home_pointing_at_a_file_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setenv("DRILL_HOME", str(blocker))
    for args in (["quiz", "--bank", str(BANK)], ["stats"], ["mock", "--history"]):
        result = runner.invoke(app, args, input="")
        assert result.exit_code == 2, (args, result.output)
        assert "is a file, not a folder" in result.output and str(blocker) in result.output
        assert "Traceback" not in result.output
    assert blocker.read_text() == "x"


def _drill(home: Path, *args: str, stdin_closed: bool = False, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from drill.cli import main; main()", *args],
        input=None if stdin_closed else "", stdin=None, capture_output=True, text=True, timeout=120,
        env={**os.environ, "DRILL_HOME": str(home), "COLUMNS": "100", **env},
        preexec_fn=(lambda: os.close(0)) if stdin_closed else None,
    )


def test_closed_stdin_ends_the_session_as_end_of_input(home: Path) -> None:
    proc = _drill(home, "quiz", "--bank", str(BANK), "-n", "1", stdin_closed=True)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "Session ended (end of input) — 0 reviews saved" in proc.stdout
    proc = _drill(home, "mock", "--bank", str(BANK), "--minutes", "1", "--questions", "1", "--dir", str(home),
                  stdin_closed=True)
    assert "Traceback" not in proc.stderr, proc.stderr


def test_a_latin1_terminal_gets_replacement_marks_not_a_crash(home: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "from drill.cli import main; main()", "quiz", "--bank", str(BANK), "--no-shuffle",
         "--cram", "--tag", "complexity", "--seed", "5", "-n", "1"],
        input=b"b\n", capture_output=True, timeout=120,
        env={**os.environ, "DRILL_HOME": str(home), "PYTHONIOENCODING": "latin-1"},
    )
    assert proc.returncode == 0, proc.stderr.decode("latin-1")
    assert b"Traceback" not in proc.stderr
    with Store(home / "progress.db") as store:
        assert len(store.reviews()) == 1  # the answer was saved, not lost to a print


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["quiz", "--topik", "x"], "No such option: --topik (Possible options: --topic, --topics)"),
        (["quz"], "No such command 'quz'. Did you mean 'quiz'?"),
        (["quiz", "-n", "abc"], "'abc' is not an integer"),
        (["check"], "Missing argument"),
    ],
)
def test_usage_errors_are_one_line_with_exit_2(home: Path, args: list[str], expected: str) -> None:
    proc = _drill(home, *args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and expected in lines[0]
    assert "--help" in lines[0]  # says where to look
