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


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2e}"


def render(result: Any, console: Console, *, verbose: bool = False) -> None:
    """One panel: verdict, tests, diagnosis, errors, seed, time."""
    parts: list[Any] = []
    head = Text()
    head.append(VERDICT.get(result.status, result.status.upper()), style=STYLE.get(result.status, "bold"))
    head.append(f"  {result.passed}/{result.total} tests passed", style="bold")
    head.append(f"   max abs err {_fmt(result.max_abs)}, max rel err {_fmt(result.max_rel)}")
    parts.append(head)

    if result.tests and (verbose or result.status != "pass"):
        table = Table(show_header=True, header_style="bold", box=None, pad_edge=False, expand=False)
        table.add_column("test")
        table.add_column("result")
        table.add_column("max abs err", justify="right")
        table.add_column("message", overflow="fold")
        for t in result.tests:
            if t.status == "pass" and not verbose:
                continue
            table.add_row(escape(t.name), Text(t.status, style=STYLE.get(t.status, "")), _fmt(t.max_abs), escape(t.message))
            if verbose and t.detail:
                table.add_row("", "", "", Text(t.detail, style="dim"))
        parts.append(table)

    d = result.diagnosis
    if d is not None:
        diag = Text()
        diag.append("Diagnosis: ", style="bold")
        diag.append(f"{d.title} ", style="bold yellow")
        diag.append(f"[{d.id}]\n", style="dim")
        if result.diagnosis_detail:
            diag.append(f"  {result.diagnosis_detail}\n")
        diag.append("  Why: ", style="bold")
        diag.append(d.why + "\n")
        diag.append("  Fix: ", style="bold")
        diag.append(d.fix)
        parts.append(diag)
    elif result.diagnosis_detail:
        parts.append(Text(result.diagnosis_detail))

    for line in getattr(result, "audit", []):
        parts.append(Text(line, style="cyan"))
    for note in result.advisories:
        parts.append(Text(f"advisory: {note}", style="yellow"))
    if verbose and result.output_tail.strip():
        parts.append(Text("printed output (tail):\n" + result.output_tail.rstrip()[-800:], style="dim"))

    parts.append(Text(f"seed {result.seed} (replay with --seed {result.seed})   {result.elapsed_s:.1f} s", style="dim"))
    console.print(
        Panel(
            Group(*parts),
            title=f"[bold]{escape(result.exercise)}[/] — {escape(result.file)}",
            title_align="left",
            border_style=STYLE.get(result.status, "white").replace("bold ", ""),
        )
    )


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
