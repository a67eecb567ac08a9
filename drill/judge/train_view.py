"""What `drill train` shows: its help text, the progress bar, the report (no torch at import time; the command
itself is in drill/judge/commands.py, a thin caller of `drill.judge.train.run_train`)."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from drill.cliutil import err_console

TRAIN_HELP = """Train a tiny Llama with your own parts, beside the reference's run.

DIR holds your files of bpe, adamw, lr_schedule, grad_clip, decoder_block,
cross_entropy and sampling (named <exercise>.py, as `drill start` writes them).
Each one present is graded first and used only if it passes; the reference's
part stands in for every other. The text is drill's own question bank and
exercise docs. Your run (in the grader's sandboxed process) and the reference's
(here) start from the same weights and see the same batches, at the same time.

Verdict: your loss must stay within 1% of the reference's at every step. When it
does not, each of your parts is swapped back for the reference's in turn and the
one whose swap brings the run back in band is named. A NaN or infinite value
names its step and parameter. The loss curves are drawn when stdout is a terminal
at least 40 columns wide (--chart forces it, --no-chart prints a table).
Exit code: 0 in band, 1 out of band or your run failed, 2 usage error (no folder,
no part of yours that passes: it says which to write first)."""

def progress_bar():
    """A progress bar on stderr over the reference's steps (yours run at the same time), when it is a terminal."""
    if not sys.stderr.isatty():
        return None, None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    bar = Progress("[dim]training", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err_console,
                   transient=True)
    task = bar.add_task("train", total=None)
    bar.start()

    def update(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    return update, bar


def render(out: Console, report, chart: bool | None) -> None:
    """Parts, curves (or a table), the sampled continuations, the verdict."""
    from drill.charts import chart_width, line_chart
    from drill.judge.train_run import describe

    out.print(f"drill train: {describe(report.config)}, seed {report.config['seed']}")
    parts = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    parts.add_column("part")
    parts.add_column("used")
    parts.add_column("why")
    for p in report.parts:
        parts.add_row(p.name, "yours" if p.mine else "reference", escape(p.why))
    out.print(parts)
    mine = ", ".join(p.name for p in report.parts if p.mine)
    out.print(f"your parts in this run: {mine}")
    ref, yours = report.reference.losses, report.yours.losses
    width = chart_width(sys.stdout, chart)
    drawn = None
    if width is not None and report.yours.failure is None:
        drawn = line_chart({"yours": [(i + 1, v) for i, v in enumerate(yours)],
                            "reference": [(i + 1, v) for i, v in enumerate(ref)]},
                           width=min(width, 120), x_label="step", y_label="training loss")
    if drawn is not None:
        out.print(drawn, markup=False, highlight=False)
    else:
        table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        for col in ("step", "reference", "yours", "difference"):
            table.add_column(col, justify="right")
        every = max(1, len(ref) // 10)
        shown = sorted({*range(0, len(ref), every), len(ref) - 1} | (
            {report.first_out} if report.first_out is not None else set()))
        for i in shown:
            a = yours[i] if i < len(yours) else float("nan")
            diff = abs(a - ref[i]) / max(abs(ref[i]), 1e-12)
            table.add_row(str(i + 1), f"{ref[i]:.4f}", f"{a:.4f}", f"{diff:.2%}")
        out.print(table)
    if report.sample_text or report.reference_sample_text:
        out.print(f"sampled after {repr(_prompt())}: yours     {escape(repr(report.sample_text))}")
        out.print(f"{' ' * (16 + len(repr(_prompt())))}reference {escape(repr(report.reference_sample_text))}")
    style = "green" if report.passed else "red"
    out.print(f"[{style}]{escape(report.verdict)}[/]")
    checks = "the checks of your files included" if report.checked else "no checks (--no-check)"
    out.print(f"[dim]{report.wall_s:.1f} s wall, both runs and {checks}[/]")


def _prompt() -> str:
    from drill.judge.train import PROMPT

    return PROMPT
