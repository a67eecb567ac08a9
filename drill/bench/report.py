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

from drill.bench.run import IMPL_LABELS, IMPLS, BenchReport, ImplResult

STYLES = {"learner": "bold cyan", "fused": "green", "math": "yellow"}
PLOT_WIDTH = 40


def fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


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


def table(report: BenchReport) -> Table:
    wl = report.workload
    bw_col = wl.bytes_moved is not None
    t = Table(title=f"{report.exercise}: {wl.size_name}", title_justify="left", header_style="bold")
    t.add_column(wl.size_label, justify="right")
    t.add_column("code", no_wrap=True)
    t.add_column("median", justify="right")
    t.add_column("IQR", justify="right")
    t.add_column("tokens/s", justify="right")
    if bw_col:
        t.add_column("GB/s" + (" (%peak)" if report.peak_bandwidth else ""), justify="right")
    t.add_column("peak mem", justify="right")
    t.add_column("vs fused", justify="right")
    for i, row in enumerate(report.rows):
        for j, impl in enumerate(IMPLS):
            res = row.results[impl]
            size = str(row.size) if j == 0 else ""
            label = Text(IMPL_LABELS[impl], style=STYLES[impl])
            if res.status != "ok":
                cells = [size, label, Text(_status_text(res), style="red" if impl == "learner" else "dim")]
                cells += [""] * (len(t.columns) - 3)
            else:
                ratio = report.ratio(row, impl)
                cells = [size, label, fmt_time(res.median_s),
                         "±" + fmt_time((res.q3_s - res.q1_s) / 2) if res.q1_s is not None and res.q3_s is not None else "-",
                         fmt_rate(report.throughput(row.size, res))]
                if bw_col:
                    bw = report.bandwidth(row.size, res)
                    cell = "-" if bw is None else f"{bw / 1e9:.1f}"
                    if bw is not None and report.peak_bandwidth:
                        cell += f" ({100 * bw / report.peak_bandwidth:.0f}%)"
                    cells.append(cell)
                cells += [fmt_bytes(res.peak_bytes), "-" if ratio is None else f"{ratio:.2f}x"]
            t.add_row(*cells, end_section=(j == len(IMPLS) - 1 and i < len(report.rows) - 1))
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


def render(report: BenchReport, console: Console) -> None:
    wl = report.workload
    head = (f"[bold]{escape(report.file)}[/] on {escape(report.device_name or report.device)}, {report.dtype}, "
            f"{report.threads} thread{'s' if report.threads != 1 else ''}, torch {escape(report.torch_version)}")
    dims = ", ".join(f"{k}={v}" for k, v in report.dims.items())
    parts: list = [Text.from_markup(head), Text(f"fixed: {dims}; passed drill check (seed {report.check_seed})", style="dim")]
    if report.peak_bandwidth:
        parts.append(Text(f"device copy bandwidth (practical peak): {report.peak_bandwidth / 1e9:.0f} GB/s", style="dim"))
    console.print(Group(*parts))
    if report.rows:
        console.print(table(report))
        label = wl.size_label
        console.print(Text(f"growth (least squares on log time vs log {label})", style="bold"))
        console.print(exponents(report))
        if len(report.rows) < 3:
            console.print(Text(f"(a growth exponent needs at least 3 sizes; this run measured {len(report.rows)} — "
                               "raise --max-size)", style="dim"))
        console.print(Text(f"expected for an efficient implementation: {wl.expected_note}", style="dim"))
        console.print()
        console.print(plot(report))
    for note in report.warnings():
        console.print(Text("note: " + note, style="yellow"))
    if report.learner_error:
        err = report.learner_error
        prefix = "" if err.startswith("your code") else "your code failed during the benchmark: "
        console.print(Text(prefix + err, style="red"))
    if report.stopped:
        console.print(Text("ladder stopped: " + report.stopped, style="dim"))
    console.print(Text(f"seed {report.seed}, {report.elapsed_s:.1f} s", style="dim"))


def to_json(report: BenchReport) -> str:
    return json.dumps(report.to_json(), indent=2)
