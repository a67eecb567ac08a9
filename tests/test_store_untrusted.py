"""A progress store drill did not write as it is (issue 15, section 4): refused in one line, untouched.

The versions no drill writes, tables that are not what the version promises,
a migration failing halfway, rows drill cannot parse and damaged pages each
end in one line naming the store (and the table and row), exit 2, and the
file byte for byte as it was.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from drill import store as store_mod
from drill.errors import UserError
from drill.store import Store, StoreCorrupt

BANK = Path(__file__).parent / "fixtures" / "questions" / "good"


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _filled(path: Path) -> None:
    with Store(path) as s:
        s.record_review("q1", 3, card_json='{"card_id": 1}', due="2030-01-01T00:00:00+00:00", topic="attention")
        s.record_review("q2", 1, source="cram", topic="ffn")


def _raw(path: Path, *statements: str) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    for statement in statements:
        db.execute(statement)
    db.close()


def _drill(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DRILL_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "drill.cli", *args], capture_output=True, text=True, env=env,
                          timeout=60, stdin=subprocess.DEVNULL)


def _one_line(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.mark.parametrize(
    ("damage", "fragment"),
    [
        (["PRAGMA user_version = -1"], "schema version -1, which no drill writes"),
        (["DROP TABLE hint_views"], "but table 'hint_views' is missing"),
        (["ALTER TABLE reviews DROP COLUMN topic"], "table 'reviews' has columns"),
        (["DROP INDEX reviews_by_time"], "index 'reviews_by_time' is missing"),
        (["DROP TABLE fsrs_parameters", "PRAGMA user_version = 2", "CREATE TABLE fsrs_parameters (x)"],
         "table 'fsrs_parameters' of a later version is already there"),
        (["PRAGMA user_version = 0"], "table 'attempts' of a later version is already there"),
    ],
    ids=["negative-version", "missing-table", "missing-column", "missing-index", "early-table",
         "version-0-with-tables"],
)
@pytest.mark.parametrize("read_only", [False, True], ids=["writer", "reader"])
def test_a_schema_its_version_does_not_promise_is_refused_untouched(
    tmp_path: Path, damage: list[str], fragment: str, read_only: bool
) -> None:
    path = tmp_path / "progress.db"
    _filled(path)
    _raw(path, *damage)
    before = _snapshot(tmp_path)
    with pytest.raises(StoreCorrupt, match="left untouched") as info:
        Store(path, read_only=read_only)
    assert fragment in str(info.value) and str(path) in str(info.value)
    assert _snapshot(tmp_path) == before


def test_negative_version_through_the_cli_is_one_line_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "progress.db"
    _filled(path)
    _raw(path, "PRAGMA user_version = -1")
    before = _snapshot(tmp_path)
    for args in (["quiz", "--bank", str(BANK), "-n", "1"], ["stats"],
                 ["export", "reviews", "-o", str(tmp_path / "r.csv")]):
        _one_line(_drill(tmp_path, *args), "schema version -1", str(path))
        assert _snapshot(tmp_path) == before


def test_a_migration_failing_halfway_leaves_the_store_as_it_was(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Each migration is one transaction: its first statement is rolled back with the failing one."""
    path = tmp_path / "progress.db"
    _filled(path)
    migrations = [*store_mod.MIGRATIONS, "CREATE TABLE half (x INTEGER); INSERT INTO nowhere VALUES (1)"]
    monkeypatch.setattr(store_mod.migrations, "MIGRATIONS", migrations)
    monkeypatch.setattr(store_mod.migrations, "SCHEMA_VERSION", len(migrations))
    with pytest.raises(UserError):
        Store(path)
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == len(migrations) - 1
    assert db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'half'").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM reviews").fetchone()[0] == 2


BAD_ROWS = [
    ("UPDATE reviews SET reviewed_at = 'yesterday' WHERE question_id = 'q1'", "reviews", "reviewed_at = 'yesterday'"),
    ("UPDATE reviews SET duration_ms = 'slow'", "reviews", "duration_ms = 'slow'"),
    ("UPDATE cards SET due = '2030-13-45'", "cards", "due = '2030-13-45'"),
    ("UPDATE cards SET card_json = '{not json'", "cards", "card_json = '{not json'"),
    ("UPDATE cards SET lapses = -3", "cards", "lapses = -3"),
]


@pytest.mark.parametrize(("damage", "table", "fragment"), BAD_ROWS,
                         ids=[f"{t}:{f.split(' =')[0]}" for _, t, f in BAD_ROWS])
def test_a_row_drill_cannot_parse_is_one_line_naming_it(tmp_path: Path, damage: str, table: str, fragment: str) -> None:
    path = tmp_path / "progress.db"
    _filled(path)
    _raw(path, damage)
    with Store(path) as s, pytest.raises(StoreCorrupt, match=f"{table} row") as info:
        s.reviews() if table == "reviews" else s.cards()
    assert fragment in str(info.value)
    before = _snapshot(tmp_path)
    proc = _drill(tmp_path, "stats")
    _one_line(proc, f"{table} row", fragment)
    quiz = _drill(tmp_path, "quiz", "--bank", str(BANK), "-n", "1")
    _one_line(quiz, f"{table} row")
    assert _snapshot(tmp_path) == before


def test_a_card_fsrs_cannot_read_stops_the_quiz_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "progress.db"
    with Store(path) as s:
        s.record_review("attn-scale-recall", 3, card_json='{"state": "sideways"}', due="2000-01-01T00:00:00+00:00",
                        topic="attention")
    proc = subprocess.run([sys.executable, "-m", "drill.cli", "quiz", "--bank", str(BANK), "-n", "1", "--topic",
                           "attention"],
                          input="x\n3\n", capture_output=True, text=True, timeout=60,
                          env={**os.environ, "DRILL_HOME": str(tmp_path)})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "not an FSRS card" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_damaged_page_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "progress.db"
    with Store(path) as s:
        for i in range(400):
            s.record_review(f"q{i}", 3, answer="x" * 200, topic="attention", source="cram")
    _raw(path, "PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    page = 4096
    for offset in range(len(data) // 2 - page, len(data) // 2 + page):  # a page in the middle of the reviews table
        data[offset] = 0xA5
    path.write_bytes(bytes(data))
    proc = _drill(tmp_path, "stats")
    _one_line(proc, str(path))
