"""Start-up benchmark: `drill quiz -n 1` to the first question on screen, vs. importing Typer + Rich.

Why this ratio: the quiz is opened dozens of times a day for a few cards; if
it takes a second to show the first question people stop using it. The
baseline is the cost any Typer/Rich CLI pays, so the ratio isolates what
drill adds (bank loading, store, scheduling). Target: <= 1.5 (issue 28).

Usage: python benchmarks/quiz_startup.py [--runs 7] [--bank PATH]
Each run uses a fresh temporary DRILL_HOME that already holds a warm bank
cache (the state every start after the first one sees); the first, cold start
(YAML parsing + full validation) is reported separately. Baseline and drill
runs alternate, so a burst of load on a shared machine falls on both.

On a shared, loaded machine wall-clock medians swing by ±50%; the CPU time
(user + sys) the child processes used is steadier, so its ratio is printed
too. Bytecode caching is left on for the children (PYTHONDONTWRITEBYTECODE
would make every start compile drill from source, which no user pays).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MARKER = b"Question 1/"


def _drill_command() -> list[str]:
    script = Path(sys.executable).with_name("drill")
    return [str(script)] if script.exists() else [sys.executable, "-m", "drill.cli"]


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
CPU: dict[str, list[float]] = {"baseline": [], "warm": []}


def time_to_first_question(home: Path, bank: str | None, record: bool = False) -> float:
    args = [*_drill_command(), "quiz", "-n", "1", "--cram"] + (["--bank", bank] if bank else [])
    env = {**ENV, "DRILL_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    cpu = _child_cpu()
    started = time.perf_counter()
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    seen = b""
    assert proc.stdout is not None
    while MARKER not in seen:
        chunk = proc.stdout.read1(4096)  # type: ignore[attr-defined]
        if not chunk:
            proc.wait()
            err = proc.stderr.read().decode()  # type: ignore[union-attr]
            raise SystemExit(f"drill quiz ended before showing a question:\n{seen.decode()}\n{err}")
        seen += chunk
    elapsed = time.perf_counter() - started
    proc.communicate(b"q\n")
    if record:
        CPU["warm"].append(_child_cpu() - cpu)
    return elapsed


def time_baseline() -> float:
    cpu = _child_cpu()
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import typer, rich.console"], check=True, env=ENV)
    elapsed = time.perf_counter() - started
    CPU["baseline"].append(_child_cpu() - cpu)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--bank", default=None, help="question folder (default: the shipped bank)")
    args = parser.parse_args()
    template = Path(tempfile.mkdtemp(prefix="drill-bench-"))
    try:
        cold = time_to_first_question(template, args.bank)  # builds the bank cache
        base_runs, warm_runs = [], []
        for i in range(args.runs):
            base_runs.append(time_baseline())
            home = template.parent / f"{template.name}-{i}"
            shutil.copytree(template / "cache", home / "cache")
            try:
                warm_runs.append(time_to_first_question(home, args.bank, record=True))
            finally:
                shutil.rmtree(home, ignore_errors=True)
        baseline, warm = statistics.median(base_runs), statistics.median(warm_runs)
    finally:
        shutil.rmtree(template, ignore_errors=True)
    print(f"baseline  python -c 'import typer, rich.console': median {baseline * 1000:.0f} ms ({args.runs} runs)")
    print(f"drill quiz -n 1, first question (warm cache): median {warm * 1000:.0f} ms ({args.runs} runs)")
    print(f"drill quiz -n 1, first question (cold, builds cache): {cold * 1000:.0f} ms")
    cpu_base, cpu_warm = statistics.median(CPU["baseline"]), statistics.median(CPU["warm"])
    print(f"cpu time (user+sys): baseline {cpu_base * 1000:.0f} ms, drill quiz warm {cpu_warm * 1000:.0f} ms, "
          f"ratio {cpu_warm / cpu_base:.2f}")
    print(f"ratio warm/baseline: {warm / baseline:.2f} (target <= 1.5)")


if __name__ == "__main__":
    main()
