"""The progress store: migrations, concurrency, and refusing files it cannot trust."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from drill import store as store_mod
from drill.errors import UserError
from drill.store import Attempt, Store


def test_new_store_is_at_current_schema_in_wal_mode(tmp_path: Path) -> None:
    with Store(tmp_path / "p.db") as s:
        assert s.schema_version() == store_mod.SCHEMA_VERSION
    db = sqlite3.connect(tmp_path / "p.db")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_drill_home_overrides_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRILL_HOME", str(tmp_path / "home"))
    with store_mod.open_store() as s:
        s.record_review("q1", 3, card_json="{}", due="2030-01-01T00:00:00+00:00")
    assert (tmp_path / "home" / store_mod.DB_NAME).exists()


def test_reviews_and_cards_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    with Store(path) as s:
        s.record_review("q1", 1, answer="x", duration_ms=1200, card_json='{"a":1}', due="2030-01-01", lapsed=True,
                        topic="attention")
        s.record_review("q1", 3, card_json='{"a":2}', due="2030-01-05", topic="attention")
        s.record_review("q2", 4, source="cram")  # cram: logged, not scheduled
    with Store(path) as s:  # survives reopening
        assert [r.rating for r in s.reviews()] == [1, 3, 4]
        cards = s.cards()
        assert set(cards) == {"q1"}
        assert cards["q1"]["reps"] == 2 and cards["q1"]["lapses"] == 1
        assert cards["q1"]["due"] == "2030-01-05"
        assert s.card_json("q1") == '{"a":2}'


def test_failed_write_leaves_nothing_half_written(tmp_path: Path) -> None:
    with Store(tmp_path / "p.db") as s:
        with pytest.raises(ValueError):
            s.record_review("q1", 3, card_json="{}")  # a scheduled review without its due date
        assert s.reviews() == [] and s.cards() == {}
        with pytest.raises(ValueError):
            s.record_review("q1", 7)


def test_attempts_and_best_results(tmp_path: Path) -> None:
    with Store(tmp_path / "p.db") as s:
        for status in ("error", "fail", "pass", "fail"):
            s.record_attempt(Attempt("attention", store_mod.now_iso(), status, None, 1, 0, 5, 10))
        s.record_attempt(Attempt("rmsnorm", store_mod.now_iso(), "fail", "rms_missing_weight", 2, 3, 5, 10))
        assert s.best_results() == {"attention": "pass", "rmsnorm": "fail"}
        assert [a.status for a in s.attempts("attention")] == ["error", "fail", "pass", "fail"]


def test_mock_lifecycle(tmp_path: Path) -> None:
    with Store(tmp_path / "p.db") as s:
        mock_id = s.start_mock(45, "attention")
        s.finish_mock(mock_id, "completed", 0.75, {"rounds": []})
        (row,) = s.mocks()
        assert row["status"] == "completed" and row["score"] == 0.75


def test_corrupt_file_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    garbage = b"this is not sqlite at all\x00" * 100
    path.write_bytes(garbage)
    with pytest.raises(UserError, match="not a readable SQLite database") as info:
        Store(path)
    assert str(path) in str(info.value)
    assert path.read_bytes() == garbage


def test_newer_schema_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE future (x)")
    db.execute(f"PRAGMA user_version = {store_mod.SCHEMA_VERSION + 5}")
    db.commit()
    db.close()
    before = path.read_bytes()
    with pytest.raises(UserError, match="newer than this drill"):
        Store(path)
    assert path.read_bytes() == before


def test_forward_migration_keeps_existing_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "p.db"
    with Store(path) as s:
        s.record_review("q1", 3, card_json="{}", due="2030-01-01")
    extra = store_mod.MIGRATIONS + ["ALTER TABLE reviews ADD COLUMN note TEXT; CREATE TABLE extra (id INTEGER)"]
    monkeypatch.setattr(store_mod.migrations, "MIGRATIONS", extra)
    monkeypatch.setattr(store_mod.migrations, "SCHEMA_VERSION", len(extra))
    with Store(path) as s:
        assert s.schema_version() == len(extra)
        assert [r.question_id for r in s.reviews()] == ["q1"]
    cols = [r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(reviews)")]
    assert "note" in cols


def _write_reviews(path: str, tag: str, count: int) -> None:
    with Store(path) as s:
        for i in range(count):
            s.record_review(f"{tag}-{i}", 3, card_json="{}", due="2030-01-01")


def test_two_processes_writing_at_once_both_persist(tmp_path: Path) -> None:
    path = str(tmp_path / "p.db")
    Store(path).close()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_reviews, args=(path, tag, 40)) for tag in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with Store(path) as s:
        assert len(s.reviews()) == 80
        assert len(s.cards()) == 80


def test_unwritable_home_is_a_user_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UserError):
        Store(blocker / "sub" / "p.db")


def test_hint_progress_never_rewinds(tmp_path: Path) -> None:
    with Store(tmp_path / "p.db") as s:
        assert s.hints_shown("attention") == 0
        s.record_hints_shown("attention", 2)
        s.record_hints_shown("attention", 1)
        assert s.hints_shown("attention") == 2 and s.hints_shown("mha") == 0


def test_a_version_1_file_migrates_to_the_current_schema(tmp_path: Path) -> None:
    """A progress file written by the first release keeps its reviews and gains the new tables."""
    path = tmp_path / "p.db"
    db = sqlite3.connect(path)
    for statement in store_mod.split_sql(store_mod.MIGRATIONS[0]):
        db.execute(statement)
    db.execute("INSERT INTO reviews (question_id, reviewed_at, rating) VALUES ('q1', '2026-01-01', 3)")
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    with Store(path) as s:
        assert s.schema_version() == store_mod.SCHEMA_VERSION
        assert [r.question_id for r in s.reviews()] == ["q1"]
        s.record_hints_shown("rope", 1)
