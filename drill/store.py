"""The progress store: one SQLite file holding reviews, attempts and mocks.

Why SQLite: a learner's weeks of reviews are the one thing drill must never
lose. Every write is its own transaction, so a crash or Ctrl-C loses at most
the write in flight; WAL mode lets two terminals (a quiz and a check, say)
write at once. The schema is versioned with PRAGMA user_version and only ever
migrated forwards, each migration in one transaction; a file we cannot read,
one written by a newer drill, one whose version no drill writes (negative),
or one whose tables are not those its version promises, is refused with one
line before anything is written, and left exactly as it was. Every read goes
through `_read`, which turns SQLite errors and values drill cannot parse (a
review dated 'yesterday', a card that is not JSON) into one line naming the
table and row: the learner sees that, never a traceback.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
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
    # 2 -> 3: FSRS parameters fitted to the learner's own reviews (drill optimize); the last row is in use.
    """
    CREATE TABLE fsrs_parameters (
        id          INTEGER PRIMARY KEY,
        fitted_at   TEXT NOT NULL,
        reviews     INTEGER NOT NULL,       -- how many reviews they were fitted on
        parameters  TEXT NOT NULL           -- JSON list of floats, fsrs.Scheduler(parameters=...)
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
        if read_only:
            self._db, self.note = _open_read_only(self.path)
            self._db.row_factory = sqlite3.Row
            return
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
            _check_schema(self._db, version, self.path)  # before the first write: a refused file is untouched
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
            raise _corrupt(exc, self.path) from exc
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
        if self.read_only:
            raise StoreUnavailable("the progress store was opened read-only; nothing was saved", str(self.path))
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
            raise _operational_error(exc, self.path) from exc
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
            raise _operational_error(exc, self.path) from exc
        except sqlite3.Error as exc:
            raise StoreCorrupt(f"progress store cannot be read ({exc}) in {table}; the file was left untouched — "
                               "move it aside (or set DRILL_HOME) to start a fresh one", str(self.path)) from exc
        for row in rows:
            for column, check in (checks or {}).items():
                value = row[column]
                if not check(value):
                    ident = row["id"] if "id" in row.keys() else row[0]
                    raise StoreCorrupt(
                        f"progress store: {table} row {ident!r} has {column} = {_shown(value)}, which drill cannot "
                        f"read ({_CHECK_NAMES.get(check, 'wrong type')}); fix or delete that row — the file was left untouched",
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
                          checks=_CARD_CHECKS)
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
        query = "SELECT id, question_id, reviewed_at, rating, answer, duration_ms, topic, source FROM reviews"
        args: tuple[Any, ...] = ()
        if since is not None:
            query += " WHERE reviewed_at >= ?"
            args = (since,)
        rows = self._read(query + " ORDER BY reviewed_at, id", args, table="reviews", checks=_REVIEW_CHECKS)
        return [Review(**{k: r[k] for k in r.keys() if k != "id"}) for r in rows]

    def scheduled_log(self) -> list[tuple[Review, str | None]]:
        """Scheduled reviews (quiz and mock, not cram) in order, each with the card state it
        left (JSON): what `drill export reviews` and `drill optimize` replay."""
        rows = self._read(
            "SELECT id, question_id, reviewed_at, rating, answer, duration_ms, topic, source, card_json FROM reviews"
            " WHERE source != 'cram' ORDER BY reviewed_at, id", table="reviews",
            checks={**_REVIEW_CHECKS, "card_json": is_json_object_or_none})
        return [(Review(**{k: r[k] for k in r.keys() if k not in ("id", "card_json")}), r["card_json"]) for r in rows]

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
                          table="attempts", checks=_ATTEMPT_CHECKS)
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
            table="mocks", checks=_MOCK_CHECKS)
        return [dict(r) for r in rows]


class StoreUnavailable(UserError):
    """The store is fine but cannot be used right now (locked, read-only, disk full).

    A write that raises this saved nothing; every earlier write is intact."""


class StoreCorrupt(UserError):
    """The store holds something drill cannot read (a damaged page, a hand-edited row,
    tables its version does not promise). Refused as it is: nothing is written."""


# --- what a row must hold ---------------------------------------------------------


def _shown(value: Any) -> str:
    return repr(value[:40] if isinstance(value, (str, bytes)) else value)


def is_iso_time(value: Any) -> bool:
    if not isinstance(value, str) or len(value) > 64:
        return False
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return False
    return True


def is_iso_time_or_none(value: Any) -> bool:
    return value is None or is_iso_time(value)


def is_text(value: Any) -> bool:
    return isinstance(value, str)


def is_text_or_none(value: Any) -> bool:
    return value is None or isinstance(value, str)


def is_rating(value: Any) -> bool:
    return isinstance(value, int) and 1 <= value <= 4


def is_count(value: Any) -> bool:
    return isinstance(value, int) and value >= 0


def is_count_or_none(value: Any) -> bool:
    return value is None or is_count(value)


def is_number_or_none(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and math.isfinite(value))


def _json(value: Any) -> Any:
    if not isinstance(value, str) or len(value) > 1_000_000:
        raise ValueError
    return json.loads(value)


def is_json_object(value: Any) -> bool:
    try:
        return isinstance(_json(value), dict)
    except (ValueError, RecursionError):
        return False


def is_json_object_or_none(value: Any) -> bool:
    return value is None or is_json_object(value)


def is_parameter_list(value: Any) -> bool:
    try:
        data = _json(value)
    except (ValueError, RecursionError):
        return False
    return (isinstance(data, list) and 0 < len(data) <= 64
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in data))


_CHECK_NAMES: dict[Callable[[Any], bool], str] = {
    is_iso_time: "not an ISO 8601 time", is_iso_time_or_none: "not an ISO 8601 time",
    is_text: "not text", is_text_or_none: "not text", is_rating: "not a rating 1-4",
    is_count: "not a whole number >= 0", is_count_or_none: "not a whole number >= 0",
    is_number_or_none: "not a number", is_json_object: "not a JSON object",
    is_json_object_or_none: "not a JSON object", is_parameter_list: "not a JSON list of numbers",
}
_REVIEW_CHECKS = {"question_id": is_text, "reviewed_at": is_iso_time, "rating": is_rating,
                  "answer": is_text_or_none, "duration_ms": is_count_or_none, "topic": is_text_or_none,
                  "source": is_text}
_CARD_CHECKS = {"question_id": is_text, "card_json": is_json_object, "due": is_iso_time, "reps": is_count,
                "lapses": is_count}
_ATTEMPT_CHECKS = {"exercise": is_text, "attempted_at": is_iso_time, "status": is_text,
                   "diagnosis": is_text_or_none, "tests_passed": is_count_or_none,
                   "tests_total": is_count_or_none, "elapsed_ms": is_count_or_none, "file": is_text_or_none}
_MOCK_CHECKS = {"started_at": is_iso_time, "ended_at": is_iso_time_or_none, "status": is_text,
                "minutes": is_number_or_none, "exercise": is_text_or_none, "score": is_number_or_none,
                "report_json": is_json_object_or_none}


# --- the schema a version promises ----------------------------------------------------


@lru_cache(maxsize=8)
def _promised(migrations: tuple[str, ...]) -> tuple[tuple[dict[str, frozenset[str]], frozenset[str]], ...]:
    """For each version 0..len(migrations): (table -> columns, index names) after running
    that many migrations on an empty database — one in-memory database for all of them."""
    db = sqlite3.connect(":memory:")
    try:
        schemas = [_schema_of(db)]
        for script in migrations:
            for statement in _split_sql(script):
                db.execute(statement)
            schemas.append(_schema_of(db))
        return tuple(schemas)
    finally:
        db.close()


def _schema_of(db: sqlite3.Connection) -> tuple[dict[str, frozenset[str]], frozenset[str]]:
    tables: dict[str, frozenset[str]] = {}
    indexes: set[str] = set()
    for kind, name in db.execute("SELECT type, name FROM main.sqlite_master WHERE name NOT LIKE 'sqlite_%'").fetchall():
        if kind == "table":
            tables[name] = frozenset(row[1] for row in db.execute(f"PRAGMA main.table_info({_quoted(name)})"))
        elif kind == "index":
            indexes.add(name)
    return tables, frozenset(indexes)


def _quoted(name: str) -> str:
    return '"' + str(name).replace('"', '""') + '"'


def _check_schema(db: sqlite3.Connection, version: Any, path: Path) -> None:
    """Refuse, without writing, a store whose version no drill writes, one from a newer
    drill, or one whose tables differ from what its version promises (a later migration
    would then fail halfway, or a read would): what is missing, or already there too early."""
    if not isinstance(version, int) or version < 0:
        raise StoreCorrupt(f"progress store has schema version {version}, which no drill writes; the file was left "
                           "untouched — move it aside (or set DRILL_HOME) to start a fresh one", str(path))
    if version > SCHEMA_VERSION:
        raise _too_new(version, path)
    tables, indexes = _schema_of(db)
    promised = _promised(tuple(MIGRATIONS))
    want_tables, want_indexes = promised[version]
    later_tables, later_indexes = promised[-1]
    wrong = [f"table '{t}' is missing" for t in sorted(want_tables) if t not in tables]
    wrong += [f"table '{t}' has columns {sorted(tables[t])}, not {sorted(cols)}"
              for t, cols in sorted(want_tables.items()) if t in tables and tables[t] != cols]
    wrong += [f"index '{i}' is missing" for i in sorted(want_indexes - indexes)]
    wrong += [f"table '{t}' of a later version is already there" for t in sorted(set(later_tables) - set(want_tables))
              if t in tables]
    wrong += [f"index '{i}' of a later version is already there" for i in sorted(later_indexes - want_indexes) if i in indexes]
    if wrong:
        raise StoreCorrupt(f"progress store says schema version {version}, but {wrong[0]}"
                           + (f" (and {len(wrong) - 1} more difference{'s' * (len(wrong) > 2)})" if len(wrong) > 1 else "")
                           + ": it was changed outside drill; the file was left untouched — move it aside "
                           "(or set DRILL_HOME) to start a fresh one", str(path))


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


def open_store(path: Path | str | None = None, *, read_only: bool = False) -> Store:
    """The store the CLI uses: $DRILL_HOME/progress.db or the platform default.

    Commands that only show progress pass read_only=True (see Store)."""
    return Store(path, read_only=read_only)


# --- read-only opening ------------------------------------------------------------

READ_ONLY_NOTE = (
    "progress store is read-only here (its file, folder or disk cannot be written): "
    "showing it as it is; commands that save progress will refuse until it is writable"
)


def _open_read_only(path: Path) -> tuple[sqlite3.Connection, str | None]:
    """A connection that can only read `path`, and the note to show (or None).

    Tried in order, the first that can read wins:
    1. mode=rw + PRAGMA query_only: an ordinary connection that refuses writes.
       On a writable store it behaves exactly like a writer's, so it reads the
       latest commits in the WAL and, closing last, removes the -wal/-shm files.
    2. mode=ro: the file is read-only but its WAL side files exist or can be
       created (SQLite >= 3.22 reads WAL databases this way).
    3. mode=ro&immutable=1: nothing beside the file can be created (read-only
       folder or mount, no -shm). SQLite then takes no locks and skips the WAL,
       which is safe because no writer can be using a folder nobody can write,
       but it would miss commits left in a -wal file, so the note says so.
    A store locked past the busy timeout, corrupt or from a newer drill is
    refused with one line, as for writers.
    """
    if not path.exists():
        db = sqlite3.connect(":memory:", isolation_level=None)
        _shadow_later_tables(db, 0, path)
        db.execute("PRAGMA query_only = ON")
        return db, None
    last: sqlite3.OperationalError | None = None
    for mode in ("mode=rw", "mode=ro", "mode=ro&immutable=1"):
        try:
            db = sqlite3.connect(f"{path.absolute().as_uri()}?{mode}", uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.OperationalError as exc:
            last = exc
            continue
        try:
            db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            version = db.execute("PRAGMA user_version").fetchone()[0]  # the first read opens the WAL side files
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.OperationalError as exc:
            db.close()
            if not _cannot_write(exc):  # locked past the timeout, ...: the same one line as for a writer
                raise _operational_error(exc, path) from exc
            last = exc
            continue
        except sqlite3.DatabaseError as exc:
            db.close()
            raise _corrupt(exc, path) from exc
        try:
            _check_schema(db, version, path)
            if version < SCHEMA_VERSION:
                _shadow_later_tables(db, version, path)
            db.execute("PRAGMA query_only = ON")
        except BaseException:
            db.close()
            raise
        return db, _read_only_note(path, mode)
    raise StoreUnavailable(
        f"cannot read the progress store ({last}); check the permissions of the file and its folder, "
        "or set DRILL_HOME — the file was left untouched",
        str(path),
    ) from last


def _cannot_write(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "readonly" in text or "read-only" in text or "unable to open" in text


def _read_only_note(path: Path, mode: str) -> str | None:
    import os

    if mode == "mode=rw":  # SQLite silently opens a write-protected file read-only
        writable = os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)
        return None if writable else READ_ONLY_NOTE
    wal = path.with_name(path.name + "-wal")
    if "immutable" in mode and wal.exists() and wal.stat().st_size > 0:
        return READ_ONLY_NOTE + f"; the latest writes, in {wal.name}, could not be read"
    return READ_ONLY_NOTE


def _shadow_later_tables(db: sqlite3.Connection, version: int, path: Path) -> None:
    """Read an older-schema store without migrating it: the tables that later
    migrations add are created as empty TEMP tables (temp objects live in the
    connection's own scratch database, never in the file), so queries see what
    the file holds plus empty new tables. A later migration that does more than
    add tables and indexes (changing a column, moving data) cannot be emulated:
    then the store is refused with one line until a writing command upgrades it.
    """
    import re

    for target in range(version + 1, SCHEMA_VERSION + 1):
        for statement in _split_sql(MIGRATIONS[target - 1]):
            if re.match(r"CREATE\s+INDEX\b", statement, re.IGNORECASE):
                continue  # empty tables need no index
            if not re.match(r"CREATE\s+TABLE\b", statement, re.IGNORECASE):
                raise UserError(
                    f"progress store has schema version {version}, older than this drill's ({SCHEMA_VERSION}), "
                    "and cannot be read without upgrading it; run `drill quiz` once where the store is "
                    "writable to upgrade it — the file was left untouched",
                    str(path),
                )
            db.execute(re.sub(r"^CREATE\s+TABLE", "CREATE TEMP TABLE", statement, count=1, flags=re.IGNORECASE))


def _too_new(version: int, path: Path) -> UserError:
    return UserError(
        f"progress store has schema version {version}, newer than this drill understands "
        f"({SCHEMA_VERSION}); upgrade drill — the file was left untouched",
        str(path),
    )


def _corrupt(exc: sqlite3.DatabaseError, path: Path) -> UserError:
    return UserError(
        f"progress store is not a readable SQLite database ({exc}); it was left untouched — "
        "move it aside (or set DRILL_HOME) to start a fresh one",
        str(path),
    )
