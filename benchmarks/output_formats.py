"""Benchmark: what `--format line` and `--junit` cost next to the panels and `--json`, for the same Results.

They are renderings of the Results `drill check` computes, so they must cost nothing next to grading.
The script grades a few fixture files once (one fork server, in this process), then times, median of
--repeat rounds: the Rich panels plus summary table (`rich`, the baseline), `--json`'s document,
`--format line`'s lines (which re-read and parse each failing file) and `--junit`'s XML. It prints each as
a ratio to `rich`, and each format's cost as a share of the grading time measured in the same run.

Run: .venv/bin/python benchmarks/output_formats.py [--repeat 20]
Not a test: the numbers depend on the machine and its load; the script prints them and exits 0.
"""

from __future__ import annotations

import argparse
import io
import shutil
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "tests" / "fixtures" / "solutions"
FILES = [("rmsnorm", "good_rsqrt.py"), ("rmsnorm", "bug_rms_eps_outside_sqrt__sqrt_plus_eps.py"),
         ("attention", "bug_missing_scale__matmul.py"), ("gqa", "bug_gqa_not_causal__no_mask.py"),
         ("rope", "good_no_convention.py"), ("rmsnorm", "bug_forbidden_op__layer_norm_trick.py")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    from rich.console import Console

    from drill.judge.batch import summary_table
    from drill.judge.check import check_file
    from drill.judge.editor_lines import lines_for
    from drill.judge.junit import to_junit
    from drill.judge.pool import ChildPool
    from drill.judge.report import render, to_json

    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, (exercise, name) in enumerate(FILES):
            folder = Path(tmp) / str(i)
            folder.mkdir()
            paths.append((shutil.copy(SOLUTIONS / exercise / name, folder / f"{exercise}.py"), exercise))
        pool = ChildPool()
        try:
            t0 = time.perf_counter()
            results = [check_file(p, ex, 3, pool=pool) for p, ex in paths]
            grading = time.perf_counter() - t0
        finally:
            pool.close()

        def rich() -> None:
            console = Console(file=io.StringIO(), width=120, force_terminal=False)
            for r in results:
                render(r, console)
            console.print(summary_table(results, 1.0, width=120))

        formats = {"rich": rich, "json": lambda: to_json(results),
                   "line": lambda: [lines_for(r) for r in results], "junit": lambda: to_junit(results)}
        times: dict[str, list[float]] = {k: [] for k in formats}
        for _ in range(args.repeat):  # interleaved, so a machine getting busier hurts every format alike
            for name, fn in formats.items():
                t = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t)
    base = statistics.median(times["rich"])
    print(f"{len(results)} files graded in {grading:.2f} s; rendering them, median of {args.repeat}:")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:6s} {med * 1000:8.2f} ms  {med / base:5.2f}x rich  {100 * med / grading:6.3f}% of grading")


if __name__ == "__main__":
    main()
