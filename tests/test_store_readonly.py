"""Showing progress from a store that cannot be written.

Read-only commands (`drill stats`, `drill exercises`) open the store with
`read_only=True`: they must work on a read-only file, folder or mount and
while another drill holds the write lock, create and migrate nothing, and
leave the file byte-for-byte as it was. Writing commands keep refusing with
one line and exit 2.

Permissions mean nothing to root, so as root the read-only cases run drill in
a private mount namespace where the folder (or file) is bind-mounted
read-only (`unshare --mount`): a real read-only mount, visible to nobody else.
As any other user they chmod a-w instead.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drill import store as store_mod
from drill.cli import app
from drill.errors import UserError
from drill.store import Attempt, Store, StoreUnavailable

BANK = Path(__file__).parent / "fixtures" / "questions" / "good"
DUE = "2030-01-01T00:00:00+00:00"
runner = CliRunner()


def _filled_store(path: Path) -> None:
    with Store(path) as s:
        s.record_review("q1", 3, card_json="{}", due=DUE, topic="rope")
        s.record_review("q2", 1, card_json="{}", due=DUE, topic="gqa")
        s.record_attempt(Attempt("rope", "2026-01-02T00:00:00+00:00", "pass", None, 1, 5, 5, 10))
        s.record_hints_shown("rope", 2)
        s.finish_mock(s.start_mock(45, "rope"), "completed", 0.5, {"score": 0.5})


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _version_1_file(path: Path) -> None:
    """A file as the first release left it: schema 1, no hint_views table."""
    db = sqlite3.connect(path)
    for statement in store_mod.split_sql(store_mod.MIGRATIONS[0]):
        db.execute(statement)
    db.execute("INSERT INTO reviews (question_id, reviewed_at, rating, topic) VALUES ('q1', "
               "'2026-01-01T00:00:00+00:00', 3, 'rope')")
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()


# --- the Python API -----------------------------------------------------------------


def test_reading_a_writable_store_read_only_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "progress.db"
    _filled_store(path)
    before = _snapshot(tmp_path)
    with Store(path, read_only=True) as s:
        assert s.read_only and s.note is None
        assert [r.question_id for r in s.reviews()] == ["q1", "q2"]
        assert set(s.cards()) == {"q1", "q2"}
        assert s.best_results() == {"rope": "pass"}
        assert s.hints_shown("rope") == 2
        assert [m["status"] for m in s.mocks()] == ["completed"]
    assert _snapshot(tmp_path) == before  # same bytes, and no -wal/-shm left behind


WRITES: list[tuple[str, Callable[[Store], object]]] = [
    ("review", lambda s: s.record_review("q9", 3, card_json="{}", due=DUE)),
    ("cram review", lambda s: s.record_review("q9", 3)),
    ("attempt", lambda s: s.record_attempt(Attempt("rope", "2026-01-03T00:00:00+00:00", "fail", "x", 1, 0, 5, 1))),
    ("hint", lambda s: s.record_hints_shown("gqa", 1)),
    ("mock", lambda s: s.start_mock(30, None)),
    ("mock result", lambda s: s.finish_mock(1, "completed", 1.0, {})),
    ("mock checkpoint", lambda s: s.checkpoint_mock(1, {})),
    ("mock interrupted", lambda s: s.interrupt_mock(1, DUE, {})),
]


@pytest.mark.parametrize("write", [w for _, w in WRITES], ids=[name for name, _ in WRITES])
def test_a_read_only_store_refuses_every_write(tmp_path: Path, write: Callable[[Store], object]) -> None:
    path = tmp_path / "progress.db"
    _filled_store(path)
    before = _snapshot(tmp_path)
    with Store(path, read_only=True) as s, pytest.raises(StoreUnavailable, match="opened read-only; nothing was saved"):
        write(s)
    assert _snapshot(tmp_path) == before


def test_a_missing_store_reads_as_empty_and_creates_nothing(tmp_path: Path) -> None:
    home = tmp_path / "not-yet"
    with Store(home / "progress.db", read_only=True) as s:
        assert (s.reviews(), s.cards(), s.attempts(), s.mocks(), s.hints_shown("rope")) == ([], {}, [], [], 0)
    assert not home.exists()


def test_an_older_schema_is_read_without_migrating(tmp_path: Path) -> None:
    path = tmp_path / "progress.db"
    _version_1_file(path)
    before = path.read_bytes()
    with Store(path, read_only=True) as s:
        assert s.schema_version() == 1
        assert [r.question_id for r in s.reviews()] == ["q1"]
        assert s.hints_shown("rope") == 0  # hint_views came with schema 2: reads as empty
    assert path.read_bytes() == before
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 1


@pytest.mark.parametrize(
    ("later", "readable"),
    [
        ("CREATE TABLE streaks (day TEXT PRIMARY KEY); CREATE INDEX streaks_by_day ON streaks (day)", True),
        ("ALTER TABLE reviews ADD COLUMN note TEXT", False),
    ],
    ids=["adds-a-table", "changes-a-table"],
)
def test_a_later_migration_is_emulated_only_when_it_just_adds_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, later: str, readable: bool
) -> None:
    path = tmp_path / "progress.db"
    _filled_store(path)
    before = _snapshot(tmp_path)
    migrations = [*store_mod.MIGRATIONS, later]
    monkeypatch.setattr(store_mod.migrations, "MIGRATIONS", migrations)
    monkeypatch.setattr(store_mod.migrations, "SCHEMA_VERSION", len(migrations))
    if readable:
        with Store(path, read_only=True) as s:
            assert len(s.reviews()) == 2
            assert s._db.execute("SELECT count(*) FROM streaks").fetchone()[0] == 0
    else:
        with pytest.raises(UserError, match="cannot be read without upgrading it; run `drill quiz` once") as info:
            Store(path, read_only=True)
        assert str(path) in str(info.value)
    assert _snapshot(tmp_path) == before


def _newer(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE future (x)")
    db.execute(f"PRAGMA user_version = {store_mod.SCHEMA_VERSION + 1}")
    db.commit()
    db.close()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (_newer, "newer than this drill"),
        (lambda p: p.write_bytes(b"not sqlite\x00" * 200), "not a readable SQLite database"),
    ],
    ids=["newer", "corrupt"],
)
def test_untrusted_files_are_refused_read_only_too(tmp_path: Path, make: Callable[[Path], None], message: str) -> None:
    path = tmp_path / "progress.db"
    make(path)
    before = _snapshot(tmp_path)
    with pytest.raises(UserError, match=message):
        Store(path, read_only=True)
    assert _snapshot(tmp_path) == before


# --- another drill holding the write lock ------------------------------------------------


def test_read_only_commands_work_while_another_drill_holds_the_write_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DRILL_HOME", str(tmp_path))
    monkeypatch.setattr(store_mod, "BUSY_TIMEOUT_S", 0.2)
    path = tmp_path / "progress.db"
    _filled_store(path)
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO reviews (question_id, reviewed_at, rating) VALUES ('q3', '2026-01-01', 3)")
    try:
        stats = runner.invoke(app, ["stats"])
        exercises = runner.invoke(app, ["exercises"])
    finally:
        writer.rollback()
        writer.close()
    assert stats.exit_code == 0, stats.output
    assert "2 reviews, 2 cards scheduled" in stats.output  # the committed state, not the write in flight
    assert exercises.exit_code == 0 and "warning" not in exercises.output, exercises.output


# --- a read-only folder, file or mount ----------------------------------------------------------


def _can_bind_mount() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True, timeout=30)
    return probe.returncode == 0


def _drill_with_read_only(target: Path, home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """Run drill with `target` (the store's folder or the file itself) read-only."""
    drill = [sys.executable, "-c", "from drill.cli import main; main()", *args]
    env = {**os.environ, "DRILL_HOME": str(home), "COLUMNS": "200"}
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in (target, *(target.iterdir() if target.is_dir() else ()))}
        for p in modes:
            p.chmod(modes[p] & ~0o222)
        try:
            return subprocess.run(drill, input=stdin, capture_output=True, text=True, env=env, timeout=120)
        finally:
            for p, mode in modes.items():
                p.chmod(mode)
    if not _can_bind_mount():
        pytest.skip("running as root without `unshare --mount`: no way to make a folder read-only for drill")
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    return subprocess.run(
        ["unshare", "--mount", "sh", "-c", script, str(target), *drill],
        input=stdin, capture_output=True, text=True, env=env, timeout=120,
    )


@pytest.fixture(params=["folder", "file"])
def read_only_store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, Path]:
    """(home, what is read-only): a filled store whose folder or file cannot be written."""
    _filled_store(tmp_path / "progress.db")
    return tmp_path, tmp_path if request.param == "folder" else tmp_path / "progress.db"


def test_stats_shows_a_read_only_store_with_a_one_line_note(read_only_store: tuple[Path, Path]) -> None:
    home, target = read_only_store
    before = (home / "progress.db").read_bytes()
    proc = _drill_with_read_only(target, home, "stats")
    assert proc.returncode == 0, proc.stderr
    assert "2 reviews, 2 cards scheduled" in proc.stdout
    notes = proc.stderr.strip().splitlines()
    assert len(notes) == 1 and notes[0].startswith("note: progress store is read-only here"), proc.stderr
    assert (home / "progress.db").read_bytes() == before


def test_exercises_lists_attempts_from_a_read_only_store(read_only_store: tuple[Path, Path]) -> None:
    home, target = read_only_store
    proc = _drill_with_read_only(target, home, "exercises")
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr
    rope = next(line for line in proc.stdout.splitlines() if " rope " in line)
    assert " 1 " in rope and "pass" in rope  # one attempt, passed


def test_a_writing_command_refuses_a_read_only_store_in_one_line(read_only_store: tuple[Path, Path]) -> None:
    home, target = read_only_store
    before = (home / "progress.db").read_bytes()
    proc = _drill_with_read_only(target, home, "quiz", "--bank", str(BANK), "-n", "1", "--seed", "1", stdin="a\n")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "read-only" in errors[0] and "Traceback" not in proc.stderr, proc.stderr
    assert (home / "progress.db").read_bytes() == before


def test_the_latest_commits_in_a_left_over_wal_are_read_from_a_read_only_folder(tmp_path: Path) -> None:
    """A writer that died left its last commit only in progress.db-wal; read-only stats must
    still see it (immutable=1 would not), so the WAL path wins whenever its files are there."""
    live, crashed = tmp_path / "live", tmp_path / "crashed"
    live.mkdir()
    crashed.mkdir()
    _filled_store(live / "progress.db")
    writer = sqlite3.connect(live / "progress.db", isolation_level=None)
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute(
        "INSERT INTO reviews (question_id, reviewed_at, rating, topic) VALUES ('q3', '2026-01-05T00:00:00+00:00', 3, "
        "'rope')"
    )
    for name in ("progress.db", "progress.db-wal", "progress.db-shm"):  # the files as a crash leaves them
        shutil.copy(live / name, crashed / name)
    writer.close()
    immutable = sqlite3.connect(f"{(crashed / 'progress.db').as_uri()}?mode=ro&immutable=1", uri=True)
    assert immutable.execute("SELECT count(*) FROM reviews").fetchone()[0] == 2  # the commit is only in the WAL
    immutable.close()
    proc = _drill_with_read_only(crashed, crashed, "stats")
    assert proc.returncode == 0, proc.stderr
    assert "3 reviews" in proc.stdout
