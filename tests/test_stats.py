"""`drill stats`: works on an empty store; counts, retention and forecast come from the store."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drill.cli import app
from drill.quiz.stats import FORECAST_DAYS, HISTORY_DAYS, compute_stats, scheduled_reviews, weakest_topics
from drill.store import Store

runner = CliRunner()
NOW = datetime.now(timezone.utc)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DRILL_HOME", str(tmp_path))
    return tmp_path


def test_empty_store(home: Path) -> None:
    result = runner.invoke(app, ["stats"])
    assert result.exit_code == 0, result.output
    assert "No reviews yet" in result.output
    assert "Reviews per day" in result.output and "Due in the next" in result.output


def test_numbers_and_rendering(home: Path) -> None:
    with Store(home / "progress.db") as store:
        for i, rating in enumerate([1, 3, 3, 4]):
            store.record_review(f"attn-q{i}", rating, card_json="{}", due=(NOW + timedelta(days=i)).isoformat(),
                                topic="attention", reviewed_at=(NOW - timedelta(days=1)).isoformat())
        for rating in (1, 1, 3):
            store.record_review("moe-q", rating, topic="moe", source="cram", reviewed_at=NOW.isoformat())
        reviews, cards = store.reviews(), store.cards()
    stats = compute_stats(reviews, cards, NOW)
    assert len(stats.per_day) == HISTORY_DAYS and len(stats.forecast) == FORECAST_DAYS
    # Cram answers are counted apart: not in reviews/day, retention or weakest topics.
    assert stats.per_day[-1][1] == 0 and stats.per_day[-2][1] == 4
    assert stats.total_reviews == 4 and stats.cram_reviews == 3
    assert stats.cram_per_day == {NOW.astimezone().date(): 3}
    retention = {r.topic: r.retention for r in stats.by_topic}
    assert retention == {"attention": pytest.approx(0.75)}
    assert [r.topic for r in stats.weakest] == ["attention"]
    assert [n for _, n in stats.forecast[:4]] == [1, 1, 1, 1]
    result = runner.invoke(app, ["stats"])
    assert result.exit_code == 0, result.output
    assert "4 reviews, 4 cards scheduled (+ 3 cram answers, not scheduled)" in result.output
    assert "Weakest topics: attention (75%)" in result.output and "moe" not in result.output
    assert "No leeches." in result.output


def test_weakest_topics_is_one_shared_definition_without_cram(home: Path) -> None:
    with Store(home / "progress.db") as store:
        for topic, ratings in {"moe": [1, 1, 3], "gqa": [3, 3, 1, 3], "rope": [1, 1]}.items():
            for i, rating in enumerate(ratings):
                store.record_review(f"{topic}-q{i}", rating, card_json="{}", due=NOW.isoformat(), topic=topic)
        for _ in range(10):  # a cram spree on moe, all right: must not lift moe's retention
            store.record_review("moe-q0", 4, topic="moe", source="cram")
        reviews = store.reviews()
    # rope has only 2 scheduled reviews (< WEAK_MIN_REVIEWS): not ranked yet
    assert [(r.topic, r.reviews) for r in weakest_topics(reviews)] == [("moe", 3), ("gqa", 4)]
    assert [r.topic for r in weakest_topics(reviews, limit=1)] == ["moe"]
    assert all(r.source != "cram" for r in scheduled_reviews(reviews)) and len(scheduled_reviews(reviews)) == 9


def test_newer_store_is_refused(home: Path) -> None:
    import sqlite3

    db = sqlite3.connect(home / "progress.db")
    db.execute("PRAGMA user_version = 999")
    db.close()
    result = runner.invoke(app, ["stats"])
    assert result.exit_code == 2
    assert "newer than this drill understands" in result.output


def test_section_titles_stay_on_one_line_at_80_columns(home: Path) -> None:
    result = runner.invoke(app, ["stats"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for title in ("Reviews per day (last 14 days)", "Retention by topic (share of scheduled reviews not rated Again)",
                  "Due in the next 7 days (today includes overdue)"):
        assert title in lines, (title, result.output)  # whole, not wrapped to the table's width
