"""Rendering a BenchReport: one table (a section per size), growth exponents, a log-scaled plot.

Numbers are formatted for reading, not parsing (`--json` is for tools): times
with units (µs/ms/s), the spread as the interquartile range, memory as the
call's peak extra bytes, and the ratio to the fused reference (> 1 = slower).
"""

from __future__ import annotations

import json
import math

from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from drill.bench.run import IMPL_LABELS, IMPLS, NOISY_SPREAD, BenchReport, ImplResult
from drill.bench.stats import fmt_time

STYLES = {"learner": "bold cyan", "fused": "green", "math": "yellow"}
PLOT_WIDTH = 40


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def fmt_rate(x: float | None) -> str:
    if x is None:
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.1f}{unit}"
    return f"{x:.0f}"


def _status_text(res: ImplResult) -> str:
    if res.status == "skipped":
        return "skipped"
    if res.status == "not_run":
        return "not run"
    if res.status == "oom":
        return "out of memory"
    return res.status.replace("_", " ")


def _bandwidth_cell(report: BenchReport, size: int, res: ImplResult) -> str:
    bw = report.bandwidth(size, res)
    if bw is None:
        return "-"
    gb = bw / 1e9
    cell = f"{gb:.0f}" if gb >= 100 else f"{gb:.1f}"
    if report.peak_bandwidth:
        cell += f" ({100 * bw / report.peak_bandwidth:.0f}%)"
    return cell


def _columns(report: BenchReport) -> list[str]:
    cols = ["size", "code", "median", "iqr", "tokens"]
    if report.workload.bytes_moved is not None:
        cols.append("bw")
    return cols + ["mem", "ratio"]


# Dropped first to last when the table would not fit the terminal. Where GB/s is shown it carries the
# throughput, so tokens/s goes first; the size, the code, the median and the ratio always stay.
DROP_ORDER = ("tokens", "iqr", "mem", "bw")
DROPPED_NAMES = {"tokens": "tokens/s", "iqr": "IQR", "mem": "peak memory", "bw": "GB/s"}


def table(report: BenchReport, width: int | None = None) -> Table:
    """The results table, at most `width` columns wide (None: no limit).

    Cells never wrap (a "48.79" over "ms" is unreadable): optional columns
    are dropped instead (DROP_ORDER), and the caption says which.
    """
    cols = _columns(report)
    t = _table(report, cols)
    dropped = []
    for name in DROP_ORDER:
        if width is None or _width(t) <= width:
            break
        if name in cols:
            cols.remove(name)
            dropped.append(DROPPED_NAMES[name])
            t = _table(report, cols)
    notes = []
    if any(report.is_noisy(row, impl) for row in report.rows for impl in ("learner", "math")):
        notes.append(f"* noisy: rounds spread > {100 * NOISY_SPREAD:.0f}% of the median")
    if dropped:
        notes.append(f"narrow terminal: {', '.join(dropped)} not shown (--json has them)")
    if notes:
        t.caption = "; ".join(notes)
        t.caption_justify = "left"
    return t


def _width(t: Table) -> int:
    from rich.measure import Measurement

    console = Console(width=1000)
    return Measurement.get(console, console.options, t).maximum


def _table(report: BenchReport, cols: list[str]) -> Table:
    wl = report.workload
    headers = {"size": wl.size_label, "code": "code", "median": "median", "iqr": "IQR", "tokens": "tokens/s",
               "bw": "GB/s" + (" (%peak)" if report.peak_bandwidth else ""), "mem": "peak mem", "ratio": "vs fused"}
    t = Table(title=f"{report.exercise}: {wl.size_name}", title_justify="left", header_style="bold")
    for c in cols:
        t.add_column(headers[c], justify="left" if c == "code" else "right", no_wrap=True)
    for i, row in enumerate(report.rows):
        for j, impl in enumerate(IMPLS):
            res = row.results[impl]
            label = Text(IMPL_LABELS[impl], style=STYLES[impl])
            cells: dict[str, object] = {"size": str(row.size) if j == 0 else "", "code": label}
            if res.status != "ok":
                cells["median"] = Text(_status_text(res), style="red" if impl == "learner" else "dim")
            else:
                ratio = report.ratio(row, impl)
                mark = "*" if impl != "fused" and report.is_noisy(row, impl) else ""
                cells.update(
                    median=fmt_time(res.median_s),
                    iqr=("±" + fmt_time((res.q3_s - res.q1_s) / 2)
                         if res.q1_s is not None and res.q3_s is not None else "-"),
                    tokens=fmt_rate(report.throughput(row.size, res)),
                    bw=_bandwidth_cell(report, row.size, res),
                    mem=fmt_bytes(res.peak_bytes),
                    ratio="-" if ratio is None else f"{ratio:.2f}x{mark}",
                )
            t.add_row(*(cells.get(c, "") for c in cols),
                      end_section=(j == len(IMPLS) - 1 and i < len(report.rows) - 1))
    return t


def exponents(report: BenchReport) -> Table:
    label = report.workload.size_label
    t = Table(header_style="bold", show_edge=False, box=None, padding=(0, 2))
    t.add_column("implementation")
    t.add_column("time", justify="right")
    t.add_column("peak memory", justify="right")
    for impl in IMPLS:
        e, m = report.exponent(impl), report.exponent(impl, "peak_bytes")
        t.add_row(Text(IMPL_LABELS[impl], style=STYLES[impl]),
                  "-" if e is None else f"~{label}^{e:.2f}", "-" if m is None else f"~{label}^{m:.2f}")
    return t


def plot(report: BenchReport, width: int = PLOT_WIDTH) -> Text:
    """Horizontal bars of median time per size and implementation, log-scaled.

    A bar's length is proportional to log(time / floor), floor a bit below
    the fastest time measured, so equal bar-length differences mean equal
    time *ratios*, and a line that doubles its lead at each doubling of the
    size is a higher power of it.
    """
    times = [r.results[i].median_s for r in report.rows for i in IMPLS
             if r.results[i].status == "ok" and r.results[i].median_s]
    out = Text()
    if not times:
        return out
    lo, hi = min(times) / 1.5, max(times)
    span = math.log(hi / lo) or 1.0
    out.append(f"time vs {report.workload.size_label} (log scale, {fmt_time(lo)} .. {fmt_time(hi)})\n", style="bold")
    for row in report.rows:
        for j, impl in enumerate(IMPLS):
            res = row.results[impl]
            head = f"{row.size:>7} " if j == 0 else " " * 8
            out.append(head)
            out.append(f"{IMPL_LABELS[impl][:17]:<18}", style=STYLES[impl])
            if res.status == "ok" and res.median_s:
                n = max(1, round(width * math.log(res.median_s / lo) / span))
                out.append("█" * n, style=STYLES[impl])
                out.append(f" {fmt_time(res.median_s)}\n")
            else:
                out.append(f"{_status_text(res)}\n", style="dim")
    return out


def curves(report: BenchReport, width: int) -> str | None:
    """Median time against size on log-log axes, one curve per implementation (drill/charts.py): a straight
    line of slope k is time ~ size^k, so the learner's curve bending above the fused one is visible growth.

    None with fewer than two measured sizes, or too narrow a terminal (the bars above say it then)."""
    from drill.charts import line_chart

    series = {IMPL_LABELS[impl]: [(float(r.size), r.results[impl].median_s) for r in report.rows
                                  if r.results[impl].status == "ok" and r.results[impl].median_s]
              for impl in IMPLS}
    if sum(len(points) >= 2 for points in series.values()) == 0:
        return None
    return line_chart(series, width=min(width, 100), height=10, log_x=True, log_y=True,
                      x_label=f"{report.workload.size_label} (log)", y_label="seconds per call (log)")


def few_sizes_advice(report: BenchReport) -> str:
    """What ended the ladder before a third size, and the flag that would let it go on."""
    reason = report.stop_reason
    if reason == "memory":
        if report.device == "cuda":
            return "the device's free memory stopped the ladder"
        return "the memory budget stopped the ladder; raise --memory-mb"
    return {
        "timeout": "--timeout stopped the ladder; raise --timeout",
        "size_budget": "--size-budget stopped the ladder; raise --size-budget",
        "max_size": "--max-size stopped the ladder; raise --max-size",
        "learner": "your code failed at the next size (below)",
        "limit": "a limit cut the run short (below)",
    }.get(reason, "the ladder ended")


def render(report: BenchReport, console: Console) -> None:
    wl = report.workload
    head = (f"[bold]{escape(report.file)}[/] on {escape(report.device_name or report.device)}, {report.dtype}, "
            f"{report.threads} thread{'s' if report.threads != 1 else ''}, torch {escape(report.torch_version)}")
    dims = ", ".join(f"{k}={v}" for k, v in report.dims.items())
    parts: list = [Text.from_markup(head),
                   Text(f"fixed: {dims}; passed drill check (seed {report.check_seed})", style="dim")]
    if report.peak_bandwidth:
        bandwidth = f"device copy bandwidth (practical peak): {report.peak_bandwidth / 1e9:.0f} GB/s"
        if report.datasheet_bandwidth:
            share = 100 * report.peak_bandwidth / report.datasheet_bandwidth
            bandwidth += f" = {share:.0f}% of the {report.datasheet_bandwidth / 1e9:.0f} GB/s datasheet peak"
        parts.append(Text(bandwidth, style="dim"))
    console.print(Group(*parts))
    if report.rows:
        console.print(table(report, console.width))
        label = wl.size_label
        console.print(Text(f"growth (least squares on log time vs log {label})", style="bold"))
        console.print(exponents(report))
        if len(report.rows) < 3:
            console.print(Text(f"(a growth exponent needs at least 3 sizes; this run measured {len(report.rows)}: "
                               f"{few_sizes_advice(report)})", style="dim"))
        console.print(Text(f"expected for an efficient implementation: {wl.expected_note}", style="dim"))
        console.print()
        console.print(plot(report))
        chart = curves(report, console.width)
        if chart is not None:
            console.print()
            console.print(Text(chart))
    for note in report.warnings():
        console.print(Text("note: " + note, style="yellow"))
    if report.learner_error:
        err = report.learner_error
        prefix = "" if err.startswith("your code") else "your code failed during the benchmark: "
        console.print(Text(prefix + err, style="red"))
    if report.stopped:
        console.print(Text("ladder " + report.stopped, style="dim"))
    console.print(Text(f"seed {report.seed}, {report.elapsed_s:.1f} s", style="dim"))


def to_json(report: BenchReport) -> str:
    return json.dumps(report.to_json(), indent=2)
