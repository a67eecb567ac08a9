"""Opening the store read-only: for commands that only show progress (stats, exercises, mock history).

They must work when the store cannot be written (a read-only file, folder or
mount, or another drill holding the write lock): nothing is created, nothing
migrated, and a one-line note says why the store is read-only.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from drill.store import migrations
from drill.store.errors import StoreUnavailable, corrupt, operational_error
from drill.store.migrations import check_schema, shadow_later_tables

READ_ONLY_NOTE = (
    "progress store is read-only here (its file, folder or disk cannot be written): "
    "showing it as it is; commands that save progress will refuse until it is writable"
)


def open_read_only(path: Path, busy_timeout_s: float) -> tuple[sqlite3.Connection, str | None]:
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
        shadow_later_tables(db, 0, path)
        db.execute("PRAGMA query_only = ON")
        return db, None
    last: sqlite3.OperationalError | None = None
    for mode in ("mode=rw", "mode=ro", "mode=ro&immutable=1"):
        try:
            db = sqlite3.connect(f"{path.absolute().as_uri()}?{mode}", uri=True, timeout=busy_timeout_s,
                                 isolation_level=None)
        except sqlite3.OperationalError as exc:
            last = exc
            continue
        try:
            db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            version = db.execute("PRAGMA user_version").fetchone()[0]  # the first read opens the WAL side files
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.OperationalError as exc:
            db.close()
            if not _cannot_write(exc):  # locked past the timeout, ...: the same one line as for a writer
                raise operational_error(exc, path) from exc
            last = exc
            continue
        except sqlite3.DatabaseError as exc:
            db.close()
            raise corrupt(exc, path) from exc
        try:
            check_schema(db, version, path)
            if version < migrations.SCHEMA_VERSION:
                shadow_later_tables(db, version, path)
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
    if mode == "mode=rw":  # SQLite silently opens a write-protected file read-only
        writable = os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)
        return None if writable else READ_ONLY_NOTE
    wal = path.with_name(path.name + "-wal")
    if "immutable" in mode and wal.exists() and wal.stat().st_size > 0:
        return READ_ONLY_NOTE + f"; the latest writes, in {wal.name}, could not be read"
    return READ_ONLY_NOTE
