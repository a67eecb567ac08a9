"""CLI command of the benchmark: `drill bench FILE`.

Thin: parse options, call `drill.bench.run.bench_file`, render. Nothing here
imports torch at import time (`drill quiz` start-up must stay fast).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from drill.bench.schema import outline
from drill.cliutil import EXIT_FAIL, err_console, user_errors

BENCH_HELP = f"""Time your implementation against the reference (fused and math paths) as the size grows.

Runs only a file that passes `drill check` (checked first; exit 1 with the
reason otherwise). Your code runs in the grader's isolated process, on the
same inputs as the reference, one thread on CPU (--threads), bf16 on CUDA.
Sizes: sequence length for attention, flash_attention, mha, gqa, rope,
decoder_block, attention_backward and flash_attention_backward; cache length
for kv_cache and paged_kv (one decode step); hidden size for rmsnorm,
layernorm, layernorm_backward and swiglu; vocabulary size for cross_entropy,
cross_entropy_backward and sampling; the number of experts for moe; the
matrix size for quant_matmul. The ladder
stops before a size whose naive memory estimate exceeds the budget, after a
size slower than --size-budget (or before one predicted to be), before a size
predicted not to finish within --timeout, or at --max-size.

Reports per size: median time and IQR, tokens/s (GB/s for memory-bound
ops, as % of the device's copy bandwidth on CUDA), peak memory of the call,
ratio to the fused reference; then the fitted growth exponent (time ~ size^k)
a log-scaled bar plot, and the time-vs-size curves on log-log axes.

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


app = typer.Typer()


@app.command(help=BENCH_HELP)
def bench(
    file: Annotated[Path, typer.Argument(help="Your solution file, e.g. attention.py.")],
    exercise: Annotated[str | None, typer.Option(
        "--exercise", "-e", help="Exercise name, if the file is not named after it.")] = None,
    device: Annotated[str | None, typer.Option("--device", help="cpu or cuda (default: cuda when available).")] = None,
    dtype: Annotated[str | None, typer.Option(
        "--dtype", help="float32, bfloat16 or float16 (default: float32 on CPU, bfloat16 on CUDA).")] = None,
    max_size: Annotated[int | None, typer.Option(
        "--max-size", help="Largest size of the ladder to run.", min=1)] = None,
    memory_mb: Annotated[int | None, typer.Option(
        "--memory-mb", min=600,
        help="Host-memory limit of the benchmark process, MB (default 4096 on CPU, where the ladder stays well "
             "below it; 16384 on CUDA, where the ladder's budget is the device's free memory).")] = None,
    timeout: Annotated[float, typer.Option(
        "--timeout", help="Wall-clock limit for the whole ladder, seconds.", min=1.0)] = 120.0,
    size_budget: Annotated[float, typer.Option(
        "--size-budget", help="Stop the ladder after a size that takes longer than this, seconds.", min=0.1)] = 15.0,
    threads: Annotated[int, typer.Option(
        "--threads", min=1,
        help="CPU threads (torch.set_num_threads), the same for your code and the reference.")] = 1,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed of the benchmark inputs.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON document instead of tables.")] = False,
) -> None:
    """`drill bench` (its help is BENCH_HELP)."""
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


def check_command(result: Any) -> str:
    """The `drill check` command that grades this file exactly as the refusal did, ready to paste.

    `-e` is carried when the file name does not say the exercise (`bugs/att_noscale.py`: plain
    `drill check` would stop at "cannot tell the exercise"), and `--seed` always, so that the same
    hidden tests run and the counts match the refusal's.
    """
    import shlex

    words = ["drill", "check", shlex.quote(result.file)]
    if Path(result.file).stem != result.exercise:
        words += ["-e", result.exercise]
    return " ".join([*words, "--seed", str(result.seed)])


def _refuse(result: Any, json_out: bool) -> None:
    """The check failed: say why in one line (and, for --json, as a document), and the `drill check` to run."""
    d = result.diagnosis
    reason = result.status
    if d is not None:
        reason = d.title + (f": {result.diagnosis_detail}" if result.diagnosis_detail else "")
    else:
        failed = next((t for t in result.tests if t.status != "pass"), None)
        if failed is not None:
            reason = f"test '{failed.name}' {failed.status}: {failed.message}"
    command = check_command(result)
    line = (f"{result.file} does not pass drill check ({result.passed}/{result.total} tests), so it is not "
            f"benchmarked: {reason}. Run `{command}` for the full report.")
    if json_out:
        import json

        typer.echo(json.dumps({"exercise": result.exercise, "file": result.file, "status": "refused",
                               "reason": reason, "check_command": command, "check": result.to_json()}, indent=2))
    from rich.markup import escape

    err_console.print(f"[bold red]refused:[/] {escape(line)}", soft_wrap=True)
