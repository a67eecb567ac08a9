"""`drill stats`'s charts: retention by week and the due forecast, snapshots at 80 and 120 columns; the tables
where there is no chart (a pipe, NO_COLOR, a narrow terminal, too little history)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from rich.console import Console

from drill.quiz.stats import RETENTION_WEEKS, compute_stats, render_stats
from drill.quiz.stats_charts import forecast_chart, weekly_chart
from drill.store import Review

SNAPSHOTS = Path(__file__).parent / "fixtures" / "charts"
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)  # fixed: the snapshots hold dates


def _history() -> tuple[list[Review], dict]:
    """Ten weeks of reviews whose retention climbs from 40% to 90%, and cards due over the next week."""
    reviews = []
    for week in range(10):
        right = 4 + week // 2
        for i in range(10):
            when = NOW - timedelta(days=7 * (9 - week) + 1, hours=i)
            reviews.append(Review(question_id=f"q{i}", rating=1 if i >= right else 3, reviewed_at=when.isoformat(),
                                  answer="", duration_ms=0, topic="attention", source="quiz"))
    cards = {f"c{i}": {"due": (NOW + timedelta(days=i % 7, hours=1)).isoformat(), "lapses": 0}
             for i in range(3 * 7 + 5)}
    return reviews, cards


def _render(width: int | None, columns: int = 120) -> str:
    reviews, cards = _history()
    console = Console(record=True, width=columns, force_terminal=False, color_system=None)
    render_stats(compute_stats(reviews, cards, NOW), console, chart_width=width)
    return console.export_text()


@pytest.mark.parametrize("width", [80, 120])
def test_charts_match_their_snapshots(width: int) -> None:
    reviews, cards = _history()
    stats = compute_stats(reviews, cards, NOW)
    text = f"{weekly_chart(stats, width)}\n---\n{forecast_chart(stats, width)}\n"
    snapshot = SNAPSHOTS / f"stats_{width}.txt"
    assert text == snapshot.read_text(encoding="utf-8"), text
    assert max(len(line) for line in text.splitlines()) <= width


def test_weekly_retention_counts_scheduled_reviews_by_week_ending_today() -> None:
    reviews, cards = _history()
    stats = compute_stats(reviews, cards, NOW)
    assert len(stats.by_week) == RETENTION_WEEKS
    assert [(n, ok) for _, n, ok in stats.by_week[-10:]] == [(10, 4 + w // 2) for w in range(10)]
    assert stats.by_week[-1][0] == NOW.astimezone().date() - timedelta(days=6)


def test_the_stats_screen_draws_charts_when_it_may_and_tables_otherwise() -> None:
    charted, plain = _render(120), _render(None)
    assert "retention %" in charted and "weeks ago" in charted and "week of" not in charted
    assert "week of" in plain and "retention %" not in plain and "80%" in plain
    narrow = _render(30, columns=80)  # below the chart's minimum width: the tables
    assert "week of" in narrow and "weeks ago" not in narrow


def test_show_stats_on_a_pipe_or_with_no_color_prints_tables(tmp_path: Path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from drill.cli import app

    monkeypatch.setenv("DRILL_HOME", str(tmp_path))
    res = CliRunner().invoke(app, ["stats"], env={"NO_COLOR": "1"})
    assert res.exit_code == 0 and "Retention by week" in res.output and "weeks ago" not in res.output


def test_too_little_history_is_a_table_not_a_one_point_chart() -> None:
    reviews, cards = _history()
    stats = compute_stats(reviews[-10:], {}, NOW)
    assert weekly_chart(stats, 120) is None and forecast_chart(stats, 120) is None
