"""`drill stats`'s two curves as terminal charts: retention by week and the due forecast.

Drawn with drill/charts.py's `line_chart` (the helper `drill train` uses). Each function returns the
chart's text, or None when there is no width to draw at or too little to draw (fewer than two weeks with
reviews, no card due): the caller then prints the table, which says the same in rows.
"""

from __future__ import annotations

from typing import Any

from drill.charts import line_chart

HEIGHT = 8


def weekly_chart(stats: Any, width: int | None) -> str | None:
    """Retention (%) per week with reviews, x = weeks before this one (0 = the last 7 days)."""
    if width is None:
        return None
    weeks = len(stats.by_week)
    points = [(float(i - weeks + 1), 100.0 * ok / n) for i, (_, n, ok) in enumerate(stats.by_week) if n]
    if len(points) < 2:
        return None
    return line_chart({"retention %": points}, width=min(width, 120), height=HEIGHT,
                      x_label="weeks ago (0 = the last 7 days)", y_label="%")


def forecast_chart(stats: Any, width: int | None) -> str | None:
    """Cards due per day, x = days from today (0 = today, overdue included)."""
    if width is None or not any(n for _, n in stats.forecast):
        return None
    return line_chart({"due": [(float(i), float(n)) for i, (_, n) in enumerate(stats.forecast)]},
                      width=min(width, 120), height=HEIGHT, x_label="days from today (0 = today, with overdue)",
                      y_label="cards")
