"""How long `drill check NAME.py` takes on a correct file, relative to `import torch`; and on a failing one.

Target (issues 3, 12): ratio <= 2.0 for a passing file; with --failing, a
failing file of the same exercise at most 1.3x the passing one (diagnosis
must not dominate). The commands are run alternately, several times, each
in a fresh interpreter; the medians are compared, so a noisy shared machine
affects all sides alike. The passing file is the index's `fixture` of the
exercise (tests/fixtures/solutions/NAME/), the failing one a file of that
folder.

    python benchmarks/check_startup.py [--runs 7] [--exercise rmsnorm] [--failing bug_....py]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from drill.judge.registry import entry

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "tests" / "fixtures" / "solutions"


def timed(cmd: list[str], env: dict[str, str], expect: int = 0) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != expect:
        sys.exit(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr[-500:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--exercise", default="rmsnorm")
    parser.add_argument("--failing", default=None, help="a bug fixture of the exercise, timed against the passing one")
    args = parser.parse_args()
    name = args.exercise
    good = SOLUTIONS / name / entry(name).fixture
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "DRILL_HOME": str(Path(tmp) / "home"), "NO_COLOR": "1"}
        (Path(tmp) / "pass").mkdir()
        target = Path(tmp) / "pass" / f"{name}.py"
        shutil.copyfile(good, target)
        check = [sys.executable, "-m", "drill.cli", "check", str(target)]
        failing = None
        if args.failing:
            (Path(tmp) / "fail").mkdir()
            bad = Path(tmp) / "fail" / f"{name}.py"
            shutil.copyfile(SOLUTIONS / name / args.failing, bad)
            failing = [sys.executable, "-m", "drill.cli", "check", str(bad)]
        torch_only = [sys.executable, "-c", "import torch"]
        timed(check, env)  # warm the OS file cache for both
        checks, imports, fails = [], [], []
        for _ in range(args.runs):
            imports.append(timed(torch_only, env))
            checks.append(timed(check, env))
            if failing:
                fails.append(timed(failing, env, expect=1))
    c, t = statistics.median(checks), statistics.median(imports)
    print(f"import torch      median {t:.2f} s  ({', '.join(f'{x:.2f}' for x in imports)})")
    print(f"drill check       median {c:.2f} s  ({', '.join(f'{x:.2f}' for x in checks)})  {name}, passing")
    print(f"ratio             {c / t:.2f}  (target <= 2.0)")
    if fails:
        f = statistics.median(fails)
        print(f"failing file      median {f:.2f} s  ({', '.join(f'{x:.2f}' for x in fails)})  {args.failing}")
        print(f"fail / pass       {f / c:.2f}  (target <= 1.3)")


if __name__ == "__main__":
    main()
