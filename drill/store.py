"""The progress store: one SQLite file holding reviews, attempts and mocks.

Why SQLite: a learner's weeks of reviews are the one thing drill must never
lose. Every write is its own transaction, so a crash or Ctrl-C loses at most
the write in flight; WAL mode lets two terminals (a quiz and a check, say)
write at once. The schema is versioned with PRAGMA user_version and only ever
migrated forwards; a file we cannot read, or one written by a newer drill, is
refused with a message and left exactly as it was.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from drill.errors import UserError
from drill.paths import data_home

DB_NAME = "progress.db"
# How long a write waits for another process's write lock before giving up with a message.
BUSY_TIMEOUT_S = 10.0

# Forward migrations: MIGRATIONS[i] takes the schema from version i to i + 1.
# Append new steps; never edit a released one (users' files already ran it).
MIGRATIONS: list[str] = [
    # 0 -> 1: the whole first schema.
    """
    CREATE TABLE cards (
        question_id TEXT PRIMARY KEY,
        card_json   TEXT NOT NULL,          -- fsrs Card.to_json()
        due         TEXT NOT NULL,          -- ISO 8601, UTC
        reps        INTEGER NOT NULL DEFAULT 0,
        lapses      INTEGER NOT NULL DEFAULT 0,
        updated_at  TEXT NOT NULL
    );
    CREATE TABLE reviews (
        id          INTEGER PRIMARY KEY,
        question_id TEXT NOT NULL,
        reviewed_at TEXT NOT NULL,
        rating      INTEGER NOT NULL CHECK (rating BETWEEN 1 AND 4),
        answer      TEXT,
        duration_ms INTEGER,
        card_json   TEXT,                   -- card state after this review, NULL when cramming
        topic       TEXT,
        source      TEXT NOT NULL DEFAULT 'quiz'   -- quiz | cram | mock
    );
    CREATE INDEX reviews_by_question ON reviews (question_id, reviewed_at);
    CREATE INDEX reviews_by_time ON reviews (reviewed_at);
    CREATE TABLE attempts (
        id           INTEGER PRIMARY KEY,
        exercise     TEXT NOT NULL,
        file         TEXT,
        attempted_at TEXT NOT NULL,
        status       TEXT NOT NULL,         -- pass | fail | error
        diagnosis    TEXT,
        seed         INTEGER,
        tests_passed INTEGER,
        tests_total  INTEGER,
        elapsed_ms   INTEGER,
        mock_id      INTEGER REFERENCES mocks (id)
    );
    CREATE INDEX attempts_by_exercise ON attempts (exercise, attempted_at);
    CREATE TABLE mocks (
        id          INTEGER PRIMARY KEY,
        started_at  TEXT NOT NULL,
        ended_at    TEXT,
        status      TEXT NOT NULL,          -- running | completed | abandoned | expired
        minutes     REAL,
        exercise    TEXT,
        score       REAL,
        report_json TEXT
    );
    """,
    # 1 -> 2: how far into each exercise's hints the learner has read (drill hint).
    """
    CREATE TABLE hint_views (
        exercise   TEXT PRIMARY KEY,
        shown      INTEGER NOT NULL,
        updated_at TEXT NOT NULL
    );
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)


def now_iso() -> str:
    """Current time as an ISO 8601 UTC string (the store's only time format)."""
    return datetime.now(timezone.utc).isoformat()


def default_path() -> Path:
    return data_home() / DB_NAME


@dataclass(frozen=True)
class Review:
    question_id: str
    reviewed_at: str
    rating: int
    answer: str | None
    duration_ms: int | None
    topic: str | None
    source: str


@dataclass(frozen=True)
class Attempt:
    exercise: str
    attempted_at: str
    status: str
    diagnosis: str | None
    seed: int | None
    tests_passed: int | None
    tests_total: int | None
    elapsed_ms: int | None
    file: str | None = None
    mock_id: int | None = None


class Store:
    """Open (creating and migrating if needed) the progress store at `path`.

    Raises UserError, never deletes or rewrites an unreadable file.
    """

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else default_path()
        folder = self.path.parent
        if folder.exists() and not folder.is_dir():
            raise UserError("the progress folder is a file, not a folder; point DRILL_HOME at a folder", str(folder))
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"cannot create the progress folder ({exc.strerror}); set DRILL_HOME to a writable folder", str(folder)) from exc
        try:
            # isolation_level=None: we issue BEGIN/COMMIT ourselves, one transaction per write.
            self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.Error as exc:
            raise UserError(f"cannot open the progress store: {exc}", str(self.path)) from exc
        try:
            self._db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise UserError(
                    f"progress store has schema version {version}, newer than this drill understands "
                    f"({SCHEMA_VERSION}); upgrade drill — the file was left untouched",
                    str(self.path),
                )
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA foreign_keys = ON")
            self._migrate(version)
        except sqlite3.OperationalError as exc:
            # Not a damaged file: a folder we may not write (WAL needs its -shm/-wal files
            # beside the database), or another process holding the lock past busy_timeout.
            self._db.close()
            raise _operational_error(exc, self.path) from exc
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise UserError(
                f"progress store is not a readable SQLite database ({exc}); it was left untouched — "
                "move it aside (or set DRILL_HOME) to start a fresh one",
                str(self.path),
            ) from exc
        except UserError:
            self._db.close()
            raise
        self._db.row_factory = sqlite3.Row

    # -- plumbing ---------------------------------------------------------

    def _migrate(self, version: int) -> None:
        for target in range(version + 1, SCHEMA_VERSION + 1):
            with self.transaction() as db:
                # Re-read inside the write lock: another process may have migrated meanwhile.
                current = db.execute("PRAGMA user_version").fetchone()[0]
                if current >= target:
                    continue
                for statement in _split_sql(MIGRATIONS[target - 1]):
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {target}")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; BEGIN IMMEDIATE takes the write lock up front so
        two processes queue instead of failing halfway."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise _operational_error(exc, self.path) from exc
        try:
            yield self._db
        except BaseException as exc:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.OperationalError):  # disk full, lost lock, read-only
                raise _operational_error(exc, self.path) from exc
            raise
        else:
            try:
                self._db.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise _operational_error(exc, self.path) from exc

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def schema_version(self) -> int:
        return self._db.execute("PRAGMA user_version").fetchone()[0]

    # -- quiz -------------------------------------------------------------

    def card_json(self, question_id: str) -> str | None:
        row = self._db.execute("SELECT card_json FROM cards WHERE question_id = ?", (question_id,)).fetchone()
        return row[0] if row else None

    def cards(self) -> dict[str, dict[str, Any]]:
        """Every scheduled card: question id -> {card_json, due, reps, lapses}."""
        rows = self._db.execute("SELECT question_id, card_json, due, reps, lapses FROM cards")
        return {r["question_id"]: dict(r) for r in rows}

    def record_review(
        self,
        question_id: str,
        rating: int,
        *,
        answer: str | None = None,
        duration_ms: int | None = None,
        card_json: str | None = None,
        due: str | None = None,
        lapsed: bool = False,
        topic: str | None = None,
        source: str = "quiz",
        reviewed_at: str | None = None,
    ) -> None:
        """Record one rated answer and, unless cramming (card_json None), the new
        card state — both in one transaction, so the log and the schedule never disagree."""
        if rating not in (1, 2, 3, 4):
            raise ValueError(f"rating must be 1..4, got {rating!r}")
        at = reviewed_at or now_iso()
        with self.transaction() as db:
            db.execute(
                "INSERT INTO reviews (question_id, reviewed_at, rating, answer, duration_ms, card_json, topic, source)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (question_id, at, rating, answer, duration_ms, card_json, topic, source),
            )
            if card_json is not None:
                if due is None:
                    raise ValueError("a scheduled review needs its due date")
                db.execute(
                    "INSERT INTO cards (question_id, card_json, due, reps, lapses, updated_at)"
                    " VALUES (?, ?, ?, 1, ?, ?)"
                    " ON CONFLICT (question_id) DO UPDATE SET card_json = excluded.card_json,"
                    " due = excluded.due, reps = cards.reps + 1, lapses = cards.lapses + excluded.lapses,"
                    " updated_at = excluded.updated_at",
                    (question_id, card_json, due, int(lapsed), at),
                )

    def reviews(self, since: str | None = None) -> list[Review]:
        query = "SELECT question_id, reviewed_at, rating, answer, duration_ms, topic, source FROM reviews"
        args: tuple[Any, ...] = ()
        if since is not None:
            query += " WHERE reviewed_at >= ?"
            args = (since,)
        rows = self._db.execute(query + " ORDER BY reviewed_at, id", args)
        return [Review(**dict(r)) for r in rows]

    # -- grader -----------------------------------------------------------

    def record_attempt(self, attempt: Attempt) -> int:
        with self.transaction() as db:
            cur = db.execute(
                "INSERT INTO attempts (exercise, file, attempted_at, status, diagnosis, seed, tests_passed,"
                " tests_total, elapsed_ms, mock_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    attempt.exercise,
                    attempt.file,
                    attempt.attempted_at,
                    attempt.status,
                    attempt.diagnosis,
                    attempt.seed,
                    attempt.tests_passed,
                    attempt.tests_total,
                    attempt.elapsed_ms,
                    attempt.mock_id,
                ),
            )
            return int(cur.lastrowid)

    def attempts(self, exercise: str | None = None) -> list[Attempt]:
        query = (
            "SELECT exercise, attempted_at, status, diagnosis, seed, tests_passed, tests_total, elapsed_ms,"
            " file, mock_id FROM attempts"
        )
        args: tuple[Any, ...] = ()
        if exercise is not None:
            query += " WHERE exercise = ?"
            args = (exercise,)
        return [Attempt(**dict(r)) for r in self._db.execute(query + " ORDER BY attempted_at, id", args)]

    def best_results(self) -> dict[str, str]:
        """Exercise -> best status so far ('pass' beats 'fail' beats 'error')."""
        rank = {"pass": 0, "fail": 1, "error": 2}
        best: dict[str, str] = {}
        for exercise, status in self._db.execute("SELECT exercise, status FROM attempts"):
            if exercise not in best or rank.get(status, 3) < rank.get(best[exercise], 3):
                best[exercise] = status
        return best

    def hints_shown(self, exercise: str) -> int:
        """How many of the exercise's hints the learner has seen (0 = none)."""
        row = self._db.execute("SELECT shown FROM hint_views WHERE exercise = ?", (exercise,)).fetchone()
        return int(row[0]) if row else 0

    def record_hints_shown(self, exercise: str, shown: int) -> None:
        """Remember the furthest hint seen; asking for an earlier one again never rewinds it."""
        with self.transaction() as db:
            db.execute(
                "INSERT INTO hint_views (exercise, shown, updated_at) VALUES (?, ?, ?)"
                " ON CONFLICT (exercise) DO UPDATE SET shown = MAX(hint_views.shown, excluded.shown),"
                " updated_at = excluded.updated_at",
                (exercise, shown, now_iso()),
            )

    # -- mock -------------------------------------------------------------

    def start_mock(self, minutes: float, exercise: str | None) -> int:
        with self.transaction() as db:
            cur = db.execute(
                "INSERT INTO mocks (started_at, status, minutes, exercise) VALUES (?, 'running', ?, ?)",
                (now_iso(), minutes, exercise),
            )
            return int(cur.lastrowid)

    def finish_mock(self, mock_id: int, status: str, score: float | None, report: dict[str, Any]) -> None:
        with self.transaction() as db:
            db.execute(
                "UPDATE mocks SET ended_at = ?, status = ?, score = ?, report_json = ? WHERE id = ?",
                (now_iso(), status, score, json.dumps(report), mock_id),
            )

    def checkpoint_mock(self, mock_id: int, report: dict[str, Any]) -> None:
        """Save a running mock's report so far, so a killed process still leaves its
        answers on record; does nothing once the mock has finished."""
        with self.transaction() as db:
            db.execute(
                "UPDATE mocks SET report_json = ? WHERE id = ? AND status = 'running'",
                (json.dumps(report), mock_id),
            )

    def interrupt_mock(self, mock_id: int, ended_at: str, report: dict[str, Any]) -> bool:
        """Mark a mock whose process died as 'interrupted' (no score: it never finished).

        Only a mock still 'running' is changed, so one that finished meanwhile is
        never overwritten; returns whether the row was changed."""
        with self.transaction() as db:
            cur = db.execute(
                "UPDATE mocks SET status = 'interrupted', ended_at = ?, score = NULL, report_json = ?"
                " WHERE id = ? AND status = 'running'",
                (ended_at, json.dumps(report), mock_id),
            )
            return cur.rowcount == 1

    def mocks(self) -> list[dict[str, Any]]:
        rows = self._db.execute(
            "SELECT id, started_at, ended_at, status, minutes, exercise, score, report_json FROM mocks ORDER BY id"
        )
        return [dict(r) for r in rows]


class StoreUnavailable(UserError):
    """The store is fine but cannot be used right now (locked, read-only, disk full).

    A write that raises this saved nothing; every earlier write is intact."""


def _operational_error(exc: sqlite3.OperationalError, path: Path) -> StoreUnavailable:
    """One actionable line for SQLite's operational errors (the file itself is not damaged)."""
    text = str(exc).lower()
    if "locked" in text or "busy" in text:
        what = ("another drill (or program) is holding the progress store's write lock; "
                "nothing was saved by this step — finish or close the other one and retry")
    elif "readonly" in text or "read-only" in text or "unable to open" in text:
        what = (f"cannot write the progress store ({exc}): the file or its folder is read-only; "
                "fix the permissions or set DRILL_HOME to a writable folder")
    elif "full" in text:
        what = "the disk is full: nothing was saved by this step — free some space and retry"
    else:
        what = f"the progress store cannot be used right now ({exc}); the file was left untouched"
    return StoreUnavailable(what, str(path))


def _split_sql(script: str) -> list[str]:
    """Split a migration into statements, so they run inside our own transaction
    (executescript would commit first). Comments are dropped before splitting;
    migrations must not put ';' inside string literals."""
    code = "\n".join(line.split("--", 1)[0] for line in script.splitlines())
    return [stmt.strip() for stmt in code.split(";") if stmt.strip()]


def open_store(path: Path | str | None = None) -> Store:
    """The store the CLI uses: $DRILL_HOME/progress.db or the platform default."""
    return Store(path)
