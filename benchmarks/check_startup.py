"""How long `drill check NAME.py` takes on a correct file, relative to `import torch`.

Target (issues 3 and 11): ratio <= 2.0 for every exercise. Both commands are
run alternately, several times, each in a fresh interpreter; the medians are
compared, so a noisy shared machine affects both sides alike. The file is the
exercise's plain correct solution (the index's `fixture`); rmsnorm by default.

    python benchmarks/check_startup.py [--runs 7] [--exercise sampling]
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
    parser.add_argument("--exercise", default="rmsnorm", help="an indexed exercise (its index fixture is graded)")
    args = parser.parse_args()
    good = ROOT / "tests" / "fixtures" / "solutions" / args.exercise / entry(args.exercise).fixture
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / f"{args.exercise}.py"
        shutil.copyfile(good, target)
        env = {**os.environ, "DRILL_HOME": str(Path(tmp) / "home"), "NO_COLOR": "1"}
        check = [sys.executable, "-m", "drill.cli", "check", str(target)]
        torch_only = [sys.executable, "-c", "import torch"]
        timed(check, env)  # warm the OS file cache for both
        checks, imports = [], []
        for _ in range(args.runs):
            imports.append(timed(torch_only, env))
            checks.append(timed(check, env))
    c, t = statistics.median(checks), statistics.median(imports)
    print(f"import torch      median {t:.2f} s  ({', '.join(f'{x:.2f}' for x in imports)})")
    print(f"drill check {args.exercise:<10s} median {c:.2f} s  ({', '.join(f'{x:.2f}' for x in checks)})")
    print(f"ratio             {c / t:.2f}  (target <= 2.0)")


if __name__ == "__main__":
    main()
