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

The package, by job: `core` (the Store: opening, transactions, every read and
write), `migrations` (the versioned schema and the check against it), `readonly`
(opening for commands that only show progress), `rows` (what each column must
hold), `errors` (the two refusals). Import from `drill.store`; a test that
changes a setting patches the module that holds it (`migrations.MIGRATIONS`,
`core.BUSY_TIMEOUT_S`).
"""

from __future__ import annotations

from drill.store.core import BUSY_TIMEOUT_S, DB_NAME, Attempt, Review, Store, default_path, now_iso, open_store
from drill.store.errors import StoreCorrupt, StoreUnavailable
from drill.store.migrations import MIGRATIONS, SCHEMA_VERSION, split_sql
from drill.store.readonly import READ_ONLY_NOTE

__all__ = [
    "BUSY_TIMEOUT_S", "DB_NAME", "MIGRATIONS", "READ_ONLY_NOTE", "SCHEMA_VERSION", "Attempt", "Review", "Store",
    "StoreCorrupt", "StoreUnavailable", "default_path", "now_iso", "open_store", "split_sql",
]
