"""The progress store itself: opening (creating and migrating), one transaction per write, and every read and
write drill makes (reviews and cards, FSRS parameters, attempts, hints seen, mocks).

Every read goes through `Store._read`, which turns SQLite errors and values
drill cannot parse into one line naming the table and row (drill/store/rows.py).
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from drill.errors import UserError
from drill.paths import data_home
from drill.store import migrations
from drill.store.errors import StoreCorrupt, StoreUnavailable, corrupt, operational_error
from drill.store.migrations import check_schema, split_sql
from drill.store.readonly import open_read_only
from drill.store.rows import (
    ATTEMPT_CHECKS,
    CARD_CHECKS,
    CHECK_NAMES,
    MOCK_CHECKS,
    REVIEW_CHECKS,
    is_count,
    is_iso_time,
    is_json_object,
    is_json_object_or_none,
    is_parameter_list,
    is_text,
    shown,
)

DB_NAME = "progress.db"
# How long a write waits for another process's write lock before giving up with a message.
BUSY_TIMEOUT_S = 10.0


def now_iso() -> str:
    """Current time as an ISO 8601 UTC string (the store's only time format)."""
    return datetime.now(timezone.utc).isoformat()


def default_path() -> Path:
    return data_home() / DB_NAME


@dataclass(frozen=True)
class Review:
    """One answered card as stored: the rating the scheduler used, and what led to it."""

    question_id: str
    reviewed_at: str
    rating: int
    answer: str | None
    duration_ms: int | None
    topic: str | None
    source: str
    hints_shown: int = 0  # hints read before answering (0 for reviews stored before schema 4)
    hint_capped: bool = False  # the rating was held at Hard at most: a worked or the last hint was read


@dataclass(frozen=True)
class Attempt:
    """One graded run of an exercise as stored (`drill check`, a mock's coding round)."""

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

    `read_only=True` is for commands that only show progress (stats, the
    exercise list, mock history): they must work when the store cannot be
    written — a read-only file, folder or mount, or another drill holding the
    write lock. Such a store creates nothing (a missing file reads as empty),
    never migrates, and refuses writes; `note` then says, in one line, why it
    is read-only (None when it merely happens to be opened that way).
    """

    def __init__(self, path: Path | str | None = None, *, read_only: bool = False) -> None:
        self.path = Path(path) if path is not None else default_path()
        self.read_only = read_only
        self.note: str | None = None
        folder = self.path.parent
        if folder.exists() and not folder.is_dir():
            raise UserError("the progress folder is a file, not a folder; point DRILL_HOME at a folder", str(folder))
        refuse_special_files(self.path)
        if read_only:
            self._db, self.note = open_read_only(self.path, BUSY_TIMEOUT_S)
            self._db.row_factory = sqlite3.Row
            return
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"cannot create the progress folder ({exc.strerror}); set DRILL_HOME to a writable folder",
                            str(folder)) from exc
        try:
            # isolation_level=None: we issue BEGIN/COMMIT ourselves, one transaction per write.
            self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.Error as exc:
            raise UserError(f"cannot open the progress store: {exc}", str(self.path)) from exc
        try:
            self._db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            check_schema(self._db, version, self.path)  # before the first write: a refused file is untouched
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA foreign_keys = ON")
            self._migrate(version)
        except sqlite3.OperationalError as exc:
            # Not a damaged file: a folder we may not write (WAL needs its -shm/-wal files
            # beside the database), or another process holding the lock past busy_timeout.
            self._db.close()
            raise operational_error(exc, self.path) from exc
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise corrupt(exc, self.path) from exc
        except UserError:
            self._db.close()
            raise
        self._db.row_factory = sqlite3.Row

    # -- plumbing ---------------------------------------------------------

    def _migrate(self, version: int) -> None:
        for target in range(version + 1, migrations.SCHEMA_VERSION + 1):
            with self.transaction() as db:
                # Re-read inside the write lock: another process may have migrated meanwhile.
                current = db.execute("PRAGMA user_version").fetchone()[0]
                if current >= target:
                    continue
                for statement in split_sql(migrations.MIGRATIONS[target - 1]):
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {target}")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; BEGIN IMMEDIATE takes the write lock up front so
        two processes queue instead of failing halfway."""
        if self.read_only:
            raise StoreUnavailable("the progress store was opened read-only; nothing was saved", str(self.path))
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise operational_error(exc, self.path) from exc
        try:
            yield self._db
        except BaseException as exc:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.OperationalError):  # disk full, lost lock, read-only
                raise operational_error(exc, self.path) from exc
            raise
        else:
            try:
                self._db.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise operational_error(exc, self.path) from exc

    def probe_write(self, timeout_s: float = 1.0) -> None:
        """Check, in at most `timeout_s`, that a write would go through: take the write
        lock, write the header, roll back. A command about to ask for work it must save
        (drill quiz) calls this first, so a store that another process holds locked, or
        that is read-only, is refused before the learner types an answer, not after."""
        if self.read_only:
            raise StoreUnavailable("the progress store was opened read-only; nothing can be saved", str(self.path))
        try:
            self._db.execute(f"PRAGMA busy_timeout = {max(0, int(timeout_s * 1000))}")
            self._db.execute("BEGIN IMMEDIATE")
            try:
                version = self._db.execute("PRAGMA user_version").fetchone()[0]
                self._db.execute(f"PRAGMA user_version = {int(version)}")
            finally:
                self._db.execute("ROLLBACK")
        except sqlite3.OperationalError as exc:
            raise operational_error(exc, self.path) from exc
        finally:
            self._db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def schema_version(self) -> int:
        return int(self._read("PRAGMA user_version", table="the header")[0][0])

    def _read(self, query: str, args: tuple[Any, ...] = (), *, table: str,
              checks: dict[str, Callable[[Any], bool]] | None = None) -> list[sqlite3.Row]:
        """Every read of the store: rows of `query`, each column in `checks` validated. A
        SQLite error or a value that fails its check is a StoreCorrupt (one line, exit 2)
        naming the table, the row and the value — never a traceback further on."""
        try:
            rows = self._db.execute(query, args).fetchall()
        except sqlite3.OperationalError as exc:
            raise operational_error(exc, self.path) from exc
        except sqlite3.Error as exc:
            raise StoreCorrupt(f"progress store cannot be read ({exc}) in {table}; the file was left untouched — "
                               "move it aside (or set DRILL_HOME) to start a fresh one", str(self.path)) from exc
        for row in rows:
            for column, check in (checks or {}).items():
                value = row[column]
                if not check(value):
                    ident = row["id"] if "id" in row.keys() else row[0]
                    raise StoreCorrupt(
                        f"progress store: {table} row {ident!r} has {column} = {shown(value)}, which drill cannot "
                        f"read ({CHECK_NAMES.get(check, 'wrong type')}); fix or delete that row — the file was left "
                        "untouched",
                        str(self.path))
        return rows

    # -- quiz -------------------------------------------------------------

    def card_json(self, question_id: str) -> str | None:
        rows = self._read("SELECT question_id, card_json FROM cards WHERE question_id = ?", (question_id,),
                          table="cards", checks={"card_json": is_json_object})
        return rows[0]["card_json"] if rows else None

    def cards(self) -> dict[str, dict[str, Any]]:
        """Every scheduled card: question id -> {card_json, due, reps, lapses}."""
        rows = self._read("SELECT question_id, card_json, due, reps, lapses FROM cards", table="cards",
                          checks=CARD_CHECKS)
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
        hints_shown: int = 0,
        hint_capped: bool = False,
    ) -> None:
        """Record one rated answer and, unless cramming (card_json None), the new
        card state — both in one transaction, so the log and the schedule never disagree.
        `hints_shown` > 0 also records the hints read and whether they capped the rating."""
        if rating not in (1, 2, 3, 4):
            raise ValueError(f"rating must be 1..4, got {rating!r}")
        if hint_capped and rating > 2:
            raise ValueError(f"a hint-capped review is rated Hard at most, got {rating!r}")
        at = reviewed_at or now_iso()
        with self.transaction() as db:
            cur = db.execute(
                "INSERT INTO reviews (question_id, reviewed_at, rating, answer, duration_ms, card_json, topic, source)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (question_id, at, rating, answer, duration_ms, card_json, topic, source),
            )
            if hints_shown > 0:
                db.execute("INSERT INTO review_hints (review_id, hints_shown, capped) VALUES (?, ?, ?)",
                           (cur.lastrowid, int(hints_shown), int(bool(hint_capped))))
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
        query = f"SELECT {_REVIEW_COLUMNS} FROM {_REVIEWS_WITH_HINTS}"
        args: tuple[Any, ...] = ()
        if since is not None:
            query += " WHERE reviewed_at >= ?"
            args = (since,)
        rows = self._read(query + " ORDER BY reviewed_at, id", args, table="reviews", checks=REVIEW_CHECKS)
        return [_review(r) for r in rows]

    def scheduled_log(self) -> list[tuple[Review, str | None]]:
        """Scheduled reviews (quiz and mock, not cram) in order, each with the card state it
        left (JSON): what `drill export reviews` and `drill optimize` replay."""
        rows = self._read(
            f"SELECT {_REVIEW_COLUMNS}, card_json FROM {_REVIEWS_WITH_HINTS}"
            " WHERE source != 'cram' ORDER BY reviewed_at, id", table="reviews",
            checks={**REVIEW_CHECKS, "card_json": is_json_object_or_none})
        return [(_review(r), r["card_json"]) for r in rows]

    # -- fitted FSRS parameters (drill optimize) -----------------------------

    def record_parameters(self, parameters: list[float], reviews: int) -> None:
        with self.transaction() as db:
            db.execute("INSERT INTO fsrs_parameters (fitted_at, reviews, parameters) VALUES (?, ?, ?)",
                       (now_iso(), reviews, json.dumps([float(p) for p in parameters])))

    def clear_parameters(self) -> int:
        """Back to FSRS's defaults (drill optimize --reset); returns how many fits were dropped."""
        with self.transaction() as db:
            return int(db.execute("DELETE FROM fsrs_parameters").rowcount)

    def parameters(self) -> tuple[list[float], str, int] | None:
        """The FSRS parameters in use (the last fitted), when, and on how many reviews; None = defaults."""
        rows = self._read("SELECT id, fitted_at, reviews, parameters FROM fsrs_parameters ORDER BY id DESC LIMIT 1",
                          table="fsrs_parameters",
                          checks={"fitted_at": is_iso_time, "reviews": is_count, "parameters": is_parameter_list})
        if not rows:
            return None
        return [float(p) for p in json.loads(rows[0]["parameters"])], rows[0]["fitted_at"], int(rows[0]["reviews"])

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
        rows = self._read(query.replace("SELECT ", "SELECT id, ", 1) + " ORDER BY attempted_at, id", args,
                          table="attempts", checks=ATTEMPT_CHECKS)
        return [Attempt(**{k: r[k] for k in r.keys() if k != "id"}) for r in rows]

    def best_results(self) -> dict[str, str]:
        """Exercise -> best status so far ('pass' beats 'fail' beats 'error')."""
        rank = {"pass": 0, "fail": 1, "error": 2}
        best: dict[str, str] = {}
        rows = self._read("SELECT id, exercise, status FROM attempts", table="attempts",
                          checks={"exercise": is_text, "status": is_text})
        for _id, exercise, status in rows:
            if exercise not in best or rank.get(status, 3) < rank.get(best[exercise], 3):
                best[exercise] = status
        return best

    def hints_shown(self, exercise: str) -> int:
        """How many of the exercise's hints the learner has seen (0 = none)."""
        rows = self._read("SELECT exercise, shown FROM hint_views WHERE exercise = ?", (exercise,),
                          table="hint_views", checks={"shown": is_count})
        return int(rows[0]["shown"]) if rows else 0

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
        rows = self._read(
            "SELECT id, started_at, ended_at, status, minutes, exercise, score, report_json FROM mocks ORDER BY id",
            table="mocks", checks=MOCK_CHECKS)
        return [dict(r) for r in rows]


_REVIEW_COLUMNS = ("id, question_id, reviewed_at, rating, answer, duration_ms, topic, source,"
                   " hints_shown, capped")
_REVIEWS_WITH_HINTS = "reviews LEFT JOIN review_hints ON review_hints.review_id = reviews.id"


def _review(row: sqlite3.Row) -> Review:
    """A review row (with its review_hints columns, NULL when no hint was read) as a Review."""
    shown_hints = row["hints_shown"]
    return Review(**{k: row[k] for k in ("question_id", "reviewed_at", "rating", "answer", "duration_ms", "topic",
                                          "source")},
                  hints_shown=shown_hints if is_count(shown_hints) else 0, hint_capped=row["capped"] == 1)


def refuse_special_files(path: Path) -> None:
    """UserError unless the store and its WAL side files are regular files or absent: SQLite opening a FIFO
    blocks until someone writes to it (drill hung), and a device or socket is nothing a store can be."""
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        try:
            mode = os.stat(file).st_mode
        except OSError:
            continue  # absent, or unreadable: SQLite says what is wrong with it
        if not stat.S_ISREG(mode):
            what = "a folder" if stat.S_ISDIR(mode) else "not a regular file (a pipe, socket or device)"
            raise UserError(f"the progress store is {what}; move it away or point DRILL_HOME elsewhere", str(file))


def open_store(path: Path | str | None = None, *, read_only: bool = False) -> Store:
    """The store the CLI uses: $DRILL_HOME/progress.db or the platform default.

    Commands that only show progress pass read_only=True (see Store)."""
    return Store(path, read_only=read_only)
