"""drill.charts: snapshots of the line chart at 80 and 120 columns, and when it declines to draw.

A snapshot is tests/fixtures/charts/<name>_<width>.txt; DRILL_UPDATE_SNAPSHOTS=1 rewrites them (then read
the diff before committing it).
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path

import pytest

from drill.charts import MARKERS, MIN_WIDTH, OVERLAP, chart_width, line_chart

SNAPSHOTS = Path(__file__).parent / "fixtures" / "charts"


def _loss(i: int) -> float:
    return 4.5 * math.exp(-i / 40) + 1.2


CHARTS = {
    # Two runs that agree, then part: the shared stretch is OVERLAP glyphs, the rest each series' own.
    "two_runs": (dict(series={"yours": [(i + 1, _loss(i) * (1.0 if i < 120 else 1.25)) for i in range(300)],
                              "reference": [(i + 1, _loss(i)) for i in range(300)]},
                      x_label="step", y_label="training loss"), {}),
    # Growth over decades on log axes (what drill bench draws), one point not positive and one NaN left out.
    "log_axes": (dict(series={"yours": [(2 ** k, 0.01 * 4 ** k) for k in range(4, 13)] + [(8192, 0.0)],
                              "fused": [(2 ** k, 0.02 * 2 ** k) for k in range(4, 13)] + [(8192, math.nan)]},
                      log_x=True, log_y=True, x_label="T"), {}),
    # Three series and a flat one (a zero y-range is widened, not divided by).
    "three_flat": (dict(series={"a": [1.0, 2.0, 3.0, 2.0, 1.0], "b": [2.0] * 5, "c": [3.0, 1.0, 3.0, 1.0, 3.0]},
                        height=8), {}),
}


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("name", sorted(CHARTS))
def test_snapshot(name: str, width: int) -> None:
    kwargs, _ = CHARTS[name]
    text = line_chart(**kwargs, width=width)
    assert text is not None
    assert all(len(line) <= width for line in text.splitlines())
    path = SNAPSHOTS / f"{name}_{width}.txt"
    if os.environ.get("DRILL_UPDATE_SNAPSHOTS") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n", encoding="utf-8")
    assert text + "\n" == path.read_text(encoding="utf-8")


def test_overlap_and_parting_are_both_drawn() -> None:
    kwargs, _ = CHARTS["two_runs"]
    text = line_chart(**kwargs, width=80)
    plot = "\n".join(line.split("|", 1)[1] for line in text.splitlines() if "|" in line)
    assert OVERLAP in plot and MARKERS[0] in plot and MARKERS[1] in plot
    assert "* yours" in text and "o reference" in text and "# overlap" in text


def test_points_left_out_are_counted_in_the_legend() -> None:
    kwargs, _ = CHARTS["log_axes"]
    text = line_chart(**kwargs, width=80)
    assert "yours (1 not drawn)" in text and "fused (1 not drawn)" in text and "(log x and y)" in text


@pytest.mark.parametrize("width", [MIN_WIDTH - 1, 10])
def test_too_narrow_is_none(width: int) -> None:
    assert line_chart({"a": [1.0, 2.0]}, width=width) is None


def test_nothing_to_draw_is_none() -> None:
    assert line_chart({"a": [math.nan, math.inf]}, width=80) is None
    assert line_chart({"a": [0.0, -1.0]}, width=80, log_y=True) is None


def test_chart_width_plain_for_pipes_and_dumb_terminals(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("COLUMNS", "97")
    monkeypatch.delenv("TERM", raising=False)
    assert chart_width(io.StringIO()) is None  # a pipe or a file: the caller prints a table
    assert chart_width(io.StringIO(), force=True) == 97
    assert chart_width(Tty()) == 97
    assert chart_width(Tty(), force=False) is None
    monkeypatch.setenv("NO_COLOR", "1")  # no colour to take away: still drawn
    assert chart_width(Tty()) == 97
    monkeypatch.setenv("TERM", "dumb")
    assert chart_width(Tty()) is None
