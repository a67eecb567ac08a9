#!/usr/bin/env python3
"""A busy temp folder for CI: 100k files and a few foreign drill stores (issue 31 §2).

On a long-lived machine the system temp folder holds many thousands of other
people's files, and some of them are drill progress stores. A test that
looks beyond the folders it made (walking the temp folder, globbing it,
grepping it) gets slow there, or finds another run's store. CI runs the
suite with TMPDIR pointing at a folder made by this script, so such a test
fails in CI rather than on somebody's machine:

    python .ci/prefill_tmp.py create DIR [--files N]   # DIR must be new or empty
    TMPDIR=DIR python -m pytest ...
    python .ci/prefill_tmp.py verify DIR               # the foreign stores are untouched

The foreign stores hold the tamper tests' sentinel (the bytes an attack
fixture looks for) and a small SQLite file, so an attack that searched
beyond its own folder would find them; `verify` fails when any of them
changed or went. Standard library only (it runs before drill is installed).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sqlite3
import sys
from pathlib import Path

MANIFEST = "foreign-stores.json"
SENTINEL = b"sentinel"  # what tests/test_judge_tamper.py's stores hold
PER_FOLDER = 1000


def create(root: Path, files: int) -> dict[str, str]:
    """`files` empty files in folders of PER_FOLDER, and four foreign stores; returns {store: sha256}."""
    root.mkdir(parents=True, exist_ok=True)
    if any(root.iterdir()):
        raise SystemExit(f"error: {root}: not empty (give a new folder)")
    made = 0
    folder_index = 0
    while made < files:
        folder = root / f"busy-{folder_index:04d}"
        folder.mkdir()
        for i in range(min(PER_FOLDER, files - made)):
            (folder / f"f{i:04d}").touch()
        made += min(PER_FOLDER, files - made)
        folder_index += 1
    stores = {}
    for name in ("pytest-of-someone/pytest-3/test_store0/home", "other-user/.local/share/drill", "drill-ci-a/home",
                 "deep/a/b/c/d/home"):
        home = root / "foreign" / name
        home.mkdir(parents=True)
        db = home / "progress.db"
        db.write_bytes(SENTINEL)
        stores[str(db)] = _digest(db)
    sql = root / "foreign" / "sqlite-store" / "progress.db"
    sql.parent.mkdir(parents=True)
    with sqlite3.connect(sql) as con:
        con.execute("create table attempts (id integer primary key, exercise text)")
        con.execute("insert into attempts (exercise) values ('rmsnorm')")
    con.close()
    stores[str(sql)] = _digest(sql)
    (root / MANIFEST).write_text(json.dumps(stores, indent=1))
    return stores


def verify(root: Path) -> list[str]:
    """What changed among the foreign stores ([] when all are as made)."""
    try:
        stores = json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        return [f"{root / MANIFEST}: unreadable ({exc})"]
    problems = []
    for path, digest in stores.items():
        p = Path(path)
        if not p.is_file():
            problems.append(f"{p}: gone")
        elif _digest(p) != digest:
            problems.append(f"{p}: changed")
        elif sorted(os.listdir(p.parent)) != ["progress.db"]:
            problems.append(f"{p.parent}: holds more than the store: {sorted(os.listdir(p.parent))}")
    return problems


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("create", "verify"))
    parser.add_argument("folder", type=Path)
    parser.add_argument("--files", type=int, default=100_000)
    args = parser.parse_args(argv)
    if args.action == "create":
        stores = create(args.folder, args.files)
        print(f"{args.folder}: {args.files} files, {len(stores)} foreign stores")
        return 0
    problems = verify(args.folder)
    for line in problems:
        print(f"error: {line}", file=sys.stderr)
    if not problems:
        print(f"{args.folder}: every foreign store untouched")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
