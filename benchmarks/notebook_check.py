"""A notebook's check (issue 29 §1): `drill.check` through the warm server, against `import torch`.

This process stands for the notebook's kernel: it imports drill once and grades in a loop, as cells
would. Printed, each a ratio of medians measured in this run (alternating with the baseline, so a
machine getting busier hurts both sides alike):

1. `import drill` plus `drill.check` looked up, in a fresh interpreter, wall / `python -c "import torch"`;
   and whether torch was imported by it (it must not be);
2. a warm `drill.check_source("rmsnorm", cell)` (what `%%drill rmsnorm` runs), wall / import torch
   (target <= 0.3, as `drill check` through the warm server);
3. a warm `drill.check("rmsnorm", RMSNorm)` on a class (its source found, the import header built),
   wall / import torch (target <= 0.3);
4. whether torch entered this process (the kernel) through the cell checks (it must not; the class
   check comes after, because the class's own module imports torch here, as its cell would).

Run: .venv/bin/python benchmarks/notebook_check.py [--runs 7]
The server and the progress store live in a throw-away XDG_RUNTIME_DIR and DRILL_HOME; the server is
stopped at the end. Not a test: it prints the figures and `uptime`, and exits 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOOD = ROOT / "tests" / "fixtures" / "solutions" / "rmsnorm" / "good_rsqrt.py"


def wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="drill-bench-nb-"))
    run_dir = scratch / "run"
    run_dir.mkdir(mode=0o700)
    os.environ.update(XDG_RUNTIME_DIR=str(run_dir), DRILL_HOME=str(scratch / "home"))
    os.environ.pop("DRILL_NO_SERVER", None)

    import drill

    cell = GOOD.read_text()
    light = "import sys, drill; drill.check; assert 'torch' not in sys.modules"
    torch_s, import_s, cell_s, class_s = [], [], [], []
    try:
        first = timed(lambda: drill.check_source("rmsnorm", cell, record=False))  # starts the server
        for _ in range(args.runs):
            torch_s.append(wall([sys.executable, "-c", "import torch"]))
            import_s.append(wall([sys.executable, "-c", light]))
            cell_s.append(timed(lambda: drill.check_source("rmsnorm", cell, record=False)))
        kernel_torch = "torch" in sys.modules  # before the class below, whose module imports torch here
        spec = importlib.util.spec_from_file_location("bench_rmsnorm", GOOD)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for _ in range(args.runs):
            torch_s.append(wall([sys.executable, "-c", "import torch"]))
            class_s.append(timed(lambda: drill.check("rmsnorm", module.RMSNorm, record=False)))
    finally:
        from drill.judge import client, server_dir

        client.ask(server_dir.place(), "stop")
        shutil.rmtree(scratch, ignore_errors=True)
    base = statistics.median(torch_s)
    print(f"import torch (fresh interpreter), median of {len(torch_s)}: {base:.3f} s")
    print(f"first check (starts the server): {first:.2f} s")
    rows = [("1. import drill; drill.check (fresh interpreter, no torch)", import_s, None),
            ("2. warm drill.check_source (%%drill)", cell_s, 0.3),
            ("3. warm drill.check on a class", class_s, 0.3)]
    for label, xs, target in rows:
        m = statistics.median(xs)
        goal = f"  (target <= {target})" if target else ""
        print(f"{label}: {m:.3f} s = {m / base:.3f} x import torch{goal}")
    print(f"4. torch in this process after {1 + args.runs} cell checks: {kernel_torch}")
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
