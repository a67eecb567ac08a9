"""Line charts of a few named series in plain terminal characters (torch-free, stdlib only).

One small helper for every command that draws a curve (`drill train` today; `drill stats` and
`drill bench` may use it too). The API is two functions:

- `line_chart(series, width=, height=, log_x=, log_y=, x_label=, y_label=)` -> str | None: the chart as
  text, exactly `width` columns wide at most, or None when `width` is below `MIN_WIDTH` (the caller
  prints a table instead). Pure: the same input gives the same text, which the snapshot tests hold.
- `chart_width(stream, force=None)` -> int | None: the width to draw at on that stream, or None when
  the stream asks for plain output (not a terminal, or TERM=dumb) and `force` is not True.

Why character cells and one glyph per series (`MARKERS`) rather than braille or colour: braille's 2x4
dots per cell cannot tell two series apart without colour, and colour is what NO_COLOR and pipes take
away. A cell reached by more than one series shows `OVERLAP`, so two curves that agree (a learner's run
and the reference's) read as one line of `OVERLAP` glyphs, and where they part each shows its own.
NO_COLOR does not suppress the chart: it has no colour to remove.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import TextIO

MARKERS = ("*", "o", "+", "x", "~", "^")
OVERLAP = "#"
MIN_WIDTH = 40
_AXIS = 10  # columns of the y labels ("1.23e+04 |")

Series = Sequence[float] | Sequence[tuple[float, float]]


def chart_width(stream: TextIO, force: bool | None = None) -> int | None:
    """Columns to draw a chart at on `stream`, or None for plain output (the caller prints a table).

    `force=True` draws whatever the stream is (COLUMNS, else 80); `force=False` never draws.
    """
    if force is False:
        return None
    if not force:
        isatty = getattr(stream, "isatty", None)
        if not (callable(isatty) and isatty()) or os.environ.get("TERM") == "dumb":
            return None
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(stream.fileno()).columns
        except (AttributeError, OSError, ValueError):
            columns = 80
    return columns


def _points(values: Series) -> list[tuple[float, float]]:
    out = []
    for i, v in enumerate(values):
        x, y = (float(v[0]), float(v[1])) if isinstance(v, (tuple, list)) else (float(i), float(v))
        out.append((x, y))
    return out


def _fmt(v: float) -> str:
    if v != 0 and (abs(v) >= 1e4 or abs(v) < 1e-2):
        return f"{v:.2e}"
    return f"{v:.4g}"


def line_chart(series: Mapping[str, Series], *, width: int = 80, height: int = 12, log_x: bool = False,
               log_y: bool = False, x_label: str = "", y_label: str = "") -> str | None:
    """`series`: name -> y values (x = 0, 1, ...) or (x, y) pairs, in legend order (at most len(MARKERS)).

    Non-finite points, and non-positive ones on a log axis, are left out (the legend says how many).
    Returns None when `width` < MIN_WIDTH or no series has a point to draw.
    """
    if width < MIN_WIDTH or height < 3:
        return None
    names = list(series)[: len(MARKERS)]
    kept: dict[str, list[tuple[float, float]]] = {}
    dropped: dict[str, int] = {}
    for name in names:
        pts = _points(series[name])
        good = [(x, y) for x, y in pts if math.isfinite(x) and math.isfinite(y)
                and (not log_x or x > 0) and (not log_y or y > 0)]
        kept[name], dropped[name] = good, len(pts) - len(good)
    if not any(kept.values()):
        return None

    def tx(x: float) -> float:
        return math.log10(x) if log_x else x

    def ty(y: float) -> float:
        return math.log10(y) if log_y else y

    xs = [tx(x) for pts in kept.values() for x, _ in pts]
    ys = [ty(y) for pts in kept.values() for _, y in pts]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    if x1 == x0:
        x1 = x0 + 1.0
    cols = width - _AXIS - 1
    grid = [[" "] * cols for _ in range(height)]
    owner: dict[tuple[int, int], int] = {}

    def cell(x: float, y: float) -> tuple[int, int]:
        c = round((tx(x) - x0) / (x1 - x0) * (cols - 1))
        r = round((y1 - ty(y)) / (y1 - y0) * (height - 1))
        return r, c

    for k, name in enumerate(names):
        pts = kept[name]
        hit: set[tuple[int, int]] = set()
        for (xa, ya), (xb, yb) in zip(pts, pts[1:], strict=False):  # each segment, sampled at the column resolution
            (ra, ca), (rb, cb) = cell(xa, ya), cell(xb, yb)
            steps = max(abs(cb - ca), abs(rb - ra), 1)
            for s in range(steps + 1):
                hit.add((round(ra + (rb - ra) * s / steps), round(ca + (cb - ca) * s / steps)))
        if len(pts) == 1:
            hit.add(cell(*pts[0]))
        for r, c in hit:
            seen = owner.get((r, c))
            owner[(r, c)] = k if seen is None or seen == k else -1
    for (r, c), k in owner.items():
        grid[r][c] = OVERLAP if k < 0 else MARKERS[k]

    def y_at(row: int) -> float:
        v = y1 - (y1 - y0) * row / (height - 1)
        return 10 ** v if log_y else v

    lines = []
    if y_label:
        lines.append(y_label[:width])
    for r in range(height):
        label = _fmt(y_at(r)) if r in (0, height // 2, height - 1) else ""
        lines.append(f"{label:>{_AXIS - 1}} |" + "".join(grid[r]).rstrip())
    lines.append(" " * (_AXIS - 1) + " +" + "-" * (cols - 1))
    left = _fmt(10 ** x0 if log_x else x0)
    right = _fmt(10 ** x1 if log_x else x1)
    mid = f" {x_label} " if x_label else ""
    gap = max(1, cols - len(left) - len(right) - len(mid))
    lines.append(" " * (_AXIS + 1) + left + " " * (gap // 2) + mid + " " * (gap - gap // 2) + right)
    legend = []
    for k, name in enumerate(names):
        extra = f" ({dropped[name]} not drawn)" if dropped[name] else ""
        legend.append(f"{MARKERS[k]} {name}{extra}")
    if len(names) > 1:
        legend.append(f"{OVERLAP} overlap")
    text_line = "  ".join(legend)
    lines.append((" " * (_AXIS + 1) + text_line)[:width])
    if log_x or log_y:
        axes = " and ".join(a for a, on in (("x", log_x), ("y", log_y)) if on)
        lines.append(" " * (_AXIS + 1) + f"(log {axes})")
    return "\n".join(line[:width].rstrip() for line in lines)
