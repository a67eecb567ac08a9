"""`drill stats`: works on an empty store; counts, retention and forecast come from the store."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drill.cli import app
from drill.quiz.stats import FORECAST_DAYS, HISTORY_DAYS, WEAKEST_RULE, compute_stats, scheduled_reviews, weakest_topics
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


# The store a new user had: normalization 2/3 right, ffn 1/2, moe 0/1, attention all right.
ISSUE_HISTORY = {"normalization": [1, 3, 3], "ffn": [1, 3], "moe": [1], "attention": [3, 3, 4, 3]}


def _seed(db: Path, history: dict[str, list[int]]) -> None:
    with Store(db) as store:
        for topic, ratings in history.items():
            for i, rating in enumerate(ratings):
                store.record_review(f"{topic}-q{i}", rating, card_json="{}", due=NOW.isoformat(), topic=topic,
                                    reviewed_at=(NOW - timedelta(days=1)).isoformat())


def test_weakest_topics_say_their_rule_and_what_it_leaves_out(home: Path) -> None:
    """ffn at 50% and moe at 0% are not "weakest" on one or two answers: the screen says so, in the table too."""
    _seed(home / "progress.db", ISSUE_HISTORY)
    result = runner.invoke(app, ["stats"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = [line.strip() for line in result.output.splitlines()]
    assert "Weakest topics: normalization (67%)" in lines
    assert f"weak = {WEAKEST_RULE}" in lines  # the rule, whole on one line at 80 columns
    assert "not ranked yet (fewer reviews): ffn (2), moe (1)" in lines
    rows = {line.split()[1]: line for line in result.output.splitlines() if line.startswith("│")}
    assert "not ranked yet" in rows["ffn"] and "not ranked yet" in rows["moe"]
    assert "not ranked yet" not in rows["normalization"] and "not ranked yet" not in rows["attention"]


def test_no_weak_topic_is_said_plainly(home: Path) -> None:
    _seed(home / "progress.db", {"attention": [3, 3, 4], "rope": [3]})
    result = runner.invoke(app, ["stats"])
    assert "Weakest topics: none" in result.output and "not ranked yet (fewer reviews): rope (1)" in result.output


def test_the_mock_card_names_the_weakest_topics_by_the_same_rule(home: Path, bank: Path) -> None:
    """The mock's "weakest in your reviews" list is drill stats' list, and its card states the rule."""
    from mockkit import last_report, sit

    _seed(home / "progress.db", ISSUE_HISTORY)
    with Store(home / "progress.db") as store:
        expected = [r.topic for r in weakest_topics(store.reviews())]
    assert expected == ["normalization"]
    code, store, out, _ = sit(home, bank, ["done"], questions=0)
    report = last_report(store)["report"]
    assert report["history_weak_topics"] == expected
    text = " ".join(out.split())
    assert "weakest in your reviews before this mock: normalization" in text
    assert f"weak = {WEAKEST_RULE} (drill stats)" in text
    assert "drill quiz --topic normalization" in text and "ffn" not in text and "moe" not in text
