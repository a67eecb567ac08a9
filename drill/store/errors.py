"""How the progress store refuses: one line saying what is wrong and where, never a traceback.

`StoreUnavailable`: the file is fine but cannot be used now (locked, read-only,
disk full); `StoreCorrupt`: it holds something drill cannot read. Both are
UserErrors (exit 2), and neither is raised after a half-done write.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from drill.errors import UserError


class StoreUnavailable(UserError):
    """The store is fine but cannot be used right now (locked, read-only, disk full).

    A write that raises this saved nothing; every earlier write is intact."""


class StoreCorrupt(UserError):
    """The store holds something drill cannot read (a damaged page, a hand-edited row,
    tables its version does not promise). Refused as it is: nothing is written."""


def operational_error(exc: sqlite3.OperationalError, path: Path) -> StoreUnavailable:
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


def corrupt(exc: sqlite3.DatabaseError, path: Path) -> UserError:
    return UserError(
        f"progress store is not a readable SQLite database ({exc}); it was left untouched — "
        "move it aside (or set DRILL_HOME) to start a fresh one",
        str(path),
    )
