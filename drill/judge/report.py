"""Rendering a check Result: a Rich panel per file, or the --json document.

Colour follows Rich's own rules (NO_COLOR, not a TTY => no colour); nothing
here decides a verdict.
"""

from __future__ import annotations

import json
import math
from typing import Any

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

STYLE = {"pass": "bold green", "fail": "bold red", "error": "bold red", "not_run": "dim"}
VERDICT = {"pass": "PASS", "fail": "FAIL", "error": "ERROR"}


COMPACT_FAILURES = 4  # failing tests listed without --verbose


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2e}"


def render(result: Any, console: Console, *, verbose: bool = False) -> None:
    """One panel, most important first: verdict, diagnosis (title, why, fix), failing tests, details.

    Without --verbose at most COMPACT_FAILURES failing tests are listed, one
    line each; --verbose lists every test with its full message and inputs.
    """
    console.print(panel(result, verbose=verbose))


def panel(result: Any, *, verbose: bool = False) -> Panel:
    """The panel `render` prints, as a renderable: a notebook shows the same one (drill/api.py)."""
    parts: list[Any] = []
    head = Text()
    head.append(VERDICT.get(result.status, result.status.upper()), style=STYLE.get(result.status, "bold"))
    # No test drawn (a syntax error, an empty file, a refused file): no count, which would read "0/0".
    head.append(f"  {result.passed}/{result.total} tests passed" if result.total else "  nothing was run", style="bold")
    parts.append(head)

    d = result.diagnosis
    if d is not None:
        parts.append(_diagnosis(result, d))
    elif result.diagnosis_detail:
        parts.append(Text(result.diagnosis_detail))

    if result.tests and (verbose or result.status != "pass"):
        parts.append(_tests_verbose(result) if verbose else _tests_compact(result))

    in_model = _in_model_line(result)
    if in_model is not None:
        parts.append(in_model)
    for line in getattr(result, "audit", []):
        parts.append(Text(line, style="cyan"))
    for note in result.advisories:
        parts.append(Text(f"advisory: {note}", style="yellow"))
    if verbose and result.output_tail.strip():
        from drill.judge.boundary import safe_text

        tail = safe_text(result.output_tail.rstrip()[-800:], 1000, newlines=True)
        parts.append(Text("printed output (tail):\n" + tail, style="dim"))
    layers = getattr(result, "layers", {})
    if verbose and layers:
        parts.append(Text("defences: " + "; ".join(f"{k} {v}" for k, v in layers.items() if v), style="dim"))

    parts.append(_foot(result, verbose))
    return Panel(
        Group(*parts),
        title=f"[bold]{escape(result.exercise)}[/] — {escape(result.file)}",
        title_align="left",
        border_style=STYLE.get(result.status, "white").replace("bold ", ""),
    )


def _foot(result: Any, verbose: bool = False) -> Text:
    """The error sizes, then the seed to replay and the time; a seed only when tests were drawn from it.

    A pass shows its largest error as a share of the tolerance: an absolute size means nothing without the
    scale (a bf16 loss of 2e4 passes with "max abs err 3.78e+01"); --verbose adds the absolute sizes.
    """
    foot = Text(style="dim")
    share = getattr(result, "tol_used", None) if result.status == "pass" else None
    if share is not None:
        foot.append(f"every error within tolerance: the largest is {_share(share)} of its tolerance\n")
    if result.max_abs is not None and (share is None or verbose):
        foot.append(f"max abs err {_fmt(result.max_abs)}, max rel err {_fmt(result.max_rel)} (|diff| / max|expected|)")
        nonfinite = sum(getattr(t, "nonfinite", 0) for t in result.tests)
        if nonfinite:  # the sizes above are over finite elements only: say what they leave out
            foot.append(f", not counting {nonfinite} NaN/inf element{'s' if nonfinite != 1 else ''} where finite "
                        "values were expected", style="yellow")
        foot.append("\n")
    if result.total:
        foot.append(f"seed {result.seed} (replay with --seed {result.seed})   ")
    foot.append(f"{result.elapsed_s:.1f} s")
    return foot


def _share(x: float) -> str:
    """0.0213 -> '2.1%'; tiny shares read 'under 0.1%' rather than a string of zeros."""
    pct = 100 * x
    return "under 0.1%" if pct < 0.1 else f"{pct:.2g}%"


def _diagnosis(result: Any, d: Any) -> Text:
    diag = Text()
    diag.append(f"{d.title} ", style="bold yellow")
    diag.append(f"[{d.id}]", style="dim")
    if getattr(result, "diagnosis_partial", False):
        diag.append("  (not the only mistake)", style="yellow")
    diag.append("\n")
    diag.append("Why: ", style="bold")
    diag.append(d.why + "\n")
    diag.append("Fix: ", style="bold")
    diag.append(d.fix)
    if result.diagnosis_detail:
        diag.append("\n")
        diag.append(result.diagnosis_detail, style="dim")
    return diag


def _in_model_line(result: Any) -> Text | None:
    """'in-model: logits ✓, 16 greedy tokens ✓': the decoder run at a glance (None without --in-model).

    A pass lists no tests, so without this line a passing --in-model run
    would not show that the decoder run happened at all.
    """
    cases = [t for t in result.tests if getattr(t, "in_model", "")]
    if not cases:
        return None
    line = Text("in-model: ")
    for i, t in enumerate(cases):
        if i:
            line.append(", ")
        ok = t.status == "pass"
        line.append(f"{t.in_model} ")
        line.append("✓" if ok else ("✗" if t.status in ("fail", "error") else "not run"),
                    style=STYLE["pass" if ok else t.status])
    return line


def _tests_compact(result: Any) -> Group:
    """Failing tests: the name (wrapped, never cut), a short message under it; then how many are left out.

    Names wrap under a hanging indent rather than being cut: kv_cache names
    differ only at their end ("...: returned cache keys" / "... values"), so a
    cut name made two different tests look identical.
    """
    failing = [t for t in result.tests if t.status != "pass"]
    if result.diagnosis is not None and result.diagnosis.id == "unknown":  # no known mistake: smallest case first
        failing.sort(key=lambda t: getattr(t, "size", (0, 0)))
    if all(t.status == "not_run" for t in result.tests):  # the run failed before its first test (import, crash)
        n = len(result.tests)
        return Group(Text(f"none of the {n} hidden test{'s' if n != 1 else ''} ran — use --verbose to list them",
                          style="dim"))
    lines: list[Any] = []
    for t in failing[:COMPACT_FAILURES]:
        row = Table.grid(padding=0)
        row.add_column(no_wrap=True)
        row.add_column(overflow="fold")
        row.add_row(Text("✗ " if t.status in ("fail", "error") else "- ", style=STYLE.get(t.status, "")), Text(t.name))
        lines.append(row)
        lines.append(Text("    " + (t.short or t.message), no_wrap=True, overflow="ellipsis"))
    left = len(failing) - COMPACT_FAILURES
    if left > 0:
        lines.append(Text(f"… {left} more failing test{'s' if left != 1 else ''} — use --verbose", style="dim"))
    return Group(*lines)


def _tests_verbose(result: Any) -> Table:
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False, expand=False)
    table.add_column("test")
    table.add_column("result")
    table.add_column("max abs err", justify="right")
    table.add_column("message", overflow="fold")
    for t in result.tests:
        table.add_row(escape(t.name), Text(t.status, style=STYLE.get(t.status, "")), _fmt(t.max_abs), escape(t.message))
        if t.detail:
            table.add_row("", "", "", Text(t.detail, style="dim"))
    return table


def to_json(results: list[Any]) -> str:
    """One document: the object for a single file, a list for several."""
    docs = [_finite(r.to_json()) for r in results]
    return json.dumps(docs[0] if len(docs) == 1 else docs, indent=2, allow_nan=False)


def _finite(value: Any) -> Any:
    """JSON has no NaN/inf: such numbers become null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
