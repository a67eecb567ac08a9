"""`drill check` on a passing and a failing file of one exercise, relative to `import torch`, in one run.

Targets (issue 12): a passing cold check (`--no-server`) <= 2.0x `python -c "import torch"`, a
failing one <= 1.3x the passing one (diagnosis must not dominate). The three
commands run round-robin in fresh interpreters, several times; medians are
compared, so a burst of load on a shared machine hits all three alike.

    python benchmarks/check_ratio.py moe [--good FILE] [--bad FILE] [--runs 5] [--in-model]

Defaults: the index's plain fixture, and the first bug_ fixture in
tests/fixtures/solutions/<exercise>/ (sorted by name).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from check_startup import timed  # noqa: E402 - one way of timing a fresh interpreter for both scripts


def main() -> None:
    from drill.judge.registry import entry

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("exercise")
    parser.add_argument("--good", type=Path)
    parser.add_argument("--bad", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--in-model", action="store_true")
    args = parser.parse_args()
    folder = ROOT / "tests" / "fixtures" / "solutions" / args.exercise
    good = args.good or folder / entry(args.exercise).fixture
    bad = args.bad or sorted(folder.glob("bug_*.py"))[0]
    extra = ["--in-model"] if args.in_model else []
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for label, src in (("good", good), ("bad", bad)):
            (Path(tmp) / label).mkdir()
            files[label] = Path(tmp) / label / f"{args.exercise}.py"
            shutil.copyfile(src, files[label])
        env = {**os.environ, "DRILL_HOME": str(Path(tmp) / "home"), "NO_COLOR": "1"}
        drill = [sys.executable, "-m", "drill.cli", "check", "--no-server"]
        cmds = {
            "import torch": ([sys.executable, "-c", "import torch"], 0),
            # cold, as the targets are: without --no-server the first command starts a warm server (in this
            # throw-away home, left running after it) and every later one measures that instead
            "check passing": ([*drill, str(files["good"]), *extra], 0),
            "check failing": ([*drill, str(files["bad"]), *extra], 1),
        }
        for cmd, code in cmds.values():  # warm the OS file cache
            timed(cmd, env, code)
        times: dict[str, list[float]] = {k: [] for k in cmds}
        for _ in range(args.runs):
            for label, (cmd, code) in cmds.items():
                times[label].append(timed(cmd, env, code))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"exercise {args.exercise}: passing {good.name}, failing {bad.name}{' (--in-model)' if extra else ''}")
    for label, values in times.items():
        print(f"{label:14s} median {med[label]:.2f} s  ({', '.join(f'{x:.2f}' for x in values)})")
    print(f"passing / import torch  {med['check passing'] / med['import torch']:.2f}  (target <= 2.0)")
    print(f"failing / passing       {med['check failing'] / med['check passing']:.2f}  (target <= 1.3)")


if __name__ == "__main__":
    main()
