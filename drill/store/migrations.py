"""The store's schema: forward migrations, the schema each version promises, and the check against it.

The schema is versioned with PRAGMA user_version and only ever migrated
forwards (`Store` runs each migration in one transaction). A file whose
version no drill writes, one from a newer drill, or one whose tables are not
those its version promises is refused before anything is written
(`check_schema`). A read-only opening reads an older file without migrating
it: the tables later migrations add are shadowed by empty TEMP tables
(`shadow_later_tables`).
"""

from __future__ import annotations

import re
import sqlite3
from functools import lru_cache
from pathlib import Path
from typing import Any

from drill.errors import UserError
from drill.store.errors import StoreCorrupt

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
    # 3 -> 4: the hints read before a quiz answer; capped = the rating was held at Hard at most
    # (the last hint, or one marked worked, was read). A table of its own, not columns on
    # reviews: an older store read read-only then only needs an empty TEMP table (no review
    # of an older store had hints recorded), and no existing row is rewritten.
    """
    CREATE TABLE review_hints (
        review_id   INTEGER PRIMARY KEY REFERENCES reviews (id),
        hints_shown INTEGER NOT NULL CHECK (hints_shown >= 1),
        capped      INTEGER NOT NULL CHECK (capped IN (0, 1))
    );
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)


def split_sql(script: str) -> list[str]:
    """Split a migration into statements, so they run inside our own transaction
    (executescript would commit first). Comments are dropped before splitting;
    migrations must not put ';' inside string literals."""
    code = "\n".join(line.split("--", 1)[0] for line in script.splitlines())
    return [stmt.strip() for stmt in code.split(";") if stmt.strip()]


@lru_cache(maxsize=8)
def _promised(migrations: tuple[str, ...]) -> tuple[tuple[dict[str, frozenset[str]], frozenset[str]], ...]:
    """For each version 0..len(migrations): (table -> columns, index names) after running
    that many migrations on an empty database — one in-memory database for all of them."""
    db = sqlite3.connect(":memory:")
    try:
        schemas = [_schema_of(db)]
        for script in migrations:
            for statement in split_sql(script):
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


def check_schema(db: sqlite3.Connection, version: Any, path: Path) -> None:
    """Refuse, without writing, a store whose version no drill writes, one from a newer
    drill, or one whose tables differ from what its version promises (a later migration
    would then fail halfway, or a read would): what is missing, or already there too early."""
    if not isinstance(version, int) or version < 0:
        raise StoreCorrupt(f"progress store has schema version {version}, which no drill writes; the file was left "
                           "untouched — move it aside (or set DRILL_HOME) to start a fresh one", str(path))
    if version > SCHEMA_VERSION:
        raise too_new(version, path)
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
    wrong += [f"index '{i}' of a later version is already there" for i in sorted(later_indexes - want_indexes)
              if i in indexes]
    if wrong:
        more = f" (and {len(wrong) - 1} more difference{'s' * (len(wrong) > 2)})" if len(wrong) > 1 else ""
        raise StoreCorrupt(f"progress store says schema version {version}, but {wrong[0]}" + more
                           + ": it was changed outside drill; the file was left untouched — move it aside "
                           "(or set DRILL_HOME) to start a fresh one", str(path))


def shadow_later_tables(db: sqlite3.Connection, version: int, path: Path) -> None:
    """Read an older-schema store without migrating it: the tables that later
    migrations add are created as empty TEMP tables (temp objects live in the
    connection's own scratch database, never in the file), so queries see what
    the file holds plus empty new tables. A later migration that does more than
    add tables and indexes (changing a column, moving data) cannot be emulated:
    then the store is refused with one line until a writing command upgrades it.
    """
    for target in range(version + 1, SCHEMA_VERSION + 1):
        for statement in split_sql(MIGRATIONS[target - 1]):
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


def too_new(version: int, path: Path) -> UserError:
    return UserError(
        f"progress store has schema version {version}, newer than this drill understands "
        f"({SCHEMA_VERSION}); upgrade drill — the file was left untouched",
        str(path),
    )
