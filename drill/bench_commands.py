"""CLI command of the benchmark: `drill bench FILE`.

Thin: parse options, call `drill.bench.run.bench_file`, render. Nothing here
imports torch at import time (`drill quiz` start-up must stay fast).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from drill.bench.schema import outline
from drill.cliutil import EXIT_FAIL, err_console, user_errors

BENCH_HELP = f"""Time your implementation against the reference (fused and math paths) as the size grows.

Runs only a file that passes `drill check` (checked first; exit 1 with the
reason otherwise). Your code runs in the grader's isolated process, on the
same inputs as the reference, one thread on CPU (--threads), bf16 on CUDA.
Sizes: sequence length for attention, mha, gqa, rope, decoder_block; cache
length for kv_cache (one decode step); hidden size for rmsnorm and swiglu;
the number of experts for moe. The ladder
stops before a size whose naive memory estimate exceeds the budget, after a
size slower than --size-budget (or before one predicted to be), before a size
predicted not to finish within --timeout, or at --max-size.

Reports per size: median time and IQR, tokens/s (GB/s for memory-bound
ops, as % of the device's copy bandwidth on CUDA), peak memory of the call,
ratio to the fused reference; then the fitted growth exponent (time ~ size^k)
and a log-scaled plot.

--json prints one JSON document:
{outline()}.
See drill/bench/README.md.

Exit codes: 0 measured (also when the ladder stopped on purpose: memory
budget, --size-budget, a size predicted past --timeout, --max-size); 1 the
file fails drill check, or your code failed, hung past --timeout, ran out of
memory or disagreed with the reference during the run; 2 usage error (bad
flag, no such file, --device cuda without a GPU); 3 cut short by a limit
while the reference was running.
"""


def register(app: typer.Typer) -> None:
    @app.command(help=BENCH_HELP)
    def bench(
        file: Path = typer.Argument(..., help="Your solution file, e.g. attention.py."),
        exercise: Optional[str] = typer.Option(None, "--exercise", "-e", help="Exercise name, if the file is not named after it."),
        device: Optional[str] = typer.Option(None, "--device", help="cpu or cuda (default: cuda when available)."),
        dtype: Optional[str] = typer.Option(None, "--dtype", help="float32, bfloat16 or float16 (default: float32 on CPU, bfloat16 on CUDA)."),
        max_size: Optional[int] = typer.Option(None, "--max-size", help="Largest size of the ladder to run.", min=1),
        memory_mb: Optional[int] = typer.Option(None, "--memory-mb", help="Host-memory limit of the benchmark process, MB (default 4096 on CPU, where the ladder stays well below it; 16384 on CUDA, where the ladder's budget is the device's free memory).", min=600),
        timeout: float = typer.Option(120.0, "--timeout", help="Wall-clock limit for the whole ladder, seconds.", min=1.0),
        size_budget: float = typer.Option(15.0, "--size-budget", help="Stop the ladder after a size that takes longer than this, seconds.", min=0.1),
        threads: int = typer.Option(1, "--threads", help="CPU threads (torch.set_num_threads), the same for your code and the reference.", min=1),
        seed: Optional[int] = typer.Option(None, "--seed", help="Seed of the benchmark inputs."),
        json_out: bool = typer.Option(False, "--json", help="Print one JSON document instead of tables."),
    ) -> None:
        from drill.bench.run import BenchOptions, BenchRefused, bench_file

        opts = BenchOptions(device=device, dtype=dtype, max_size=max_size, memory_mb=memory_mb, timeout_s=timeout,
                            size_budget_s=size_budget, threads=threads, seed=seed)
        try:
            with user_errors():
                report = bench_file(file, exercise, opts)
        except BenchRefused as refused:
            _refuse(refused.result, json_out)
            raise typer.Exit(EXIT_FAIL) from None
        if json_out:
            from drill.bench.report import to_json

            typer.echo(to_json(report))
        else:
            from drill.bench.report import render

            render(report, Console(highlight=False))
        if report.exit_code:
            raise typer.Exit(report.exit_code)


def _refuse(result, json_out: bool) -> None:
    """The check failed: say why in one line (and, for --json, as a document), point to `drill check`."""
    d = result.diagnosis
    reason = result.status
    if d is not None:
        reason = d.title + (f": {result.diagnosis_detail}" if result.diagnosis_detail else "")
    else:
        failed = next((t for t in result.tests if t.status != "pass"), None)
        if failed is not None:
            reason = f"test '{failed.name}' {failed.status}: {failed.message}"
    line = (f"{result.file} does not pass drill check ({result.passed}/{result.total} tests), so it is not benchmarked: "
            f"{reason}. Run `drill check {result.file}` for the full report.")
    if json_out:
        import json

        typer.echo(json.dumps({"exercise": result.exercise, "file": result.file, "status": "refused",
                               "reason": reason, "check": result.to_json()}, indent=2))
    from rich.markup import escape

    err_console.print(f"[bold red]refused:[/] {escape(line)}", soft_wrap=True)
