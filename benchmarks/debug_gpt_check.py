"""debug_gpt's check against `import torch`, cold and warm, and a failing check against a passing one.

Targets (the debug round's issue): a cold `drill check debug_gpt.py --no-server` <= 2.5x `python -c
"import torch"`; through the warm grading server <= 0.5x; a failing check (the seed-7 starter, 4 planted
bugs) <= 1.3x a passing one (the fixture with part 2), both warm and cold. Commands alternate, each in a
fresh interpreter; medians of this run are compared. Progress and the server live in a throw-away
DRILL_HOME and XDG_RUNTIME_DIR; the server is stopped at the end.

    .venv/bin/python benchmarks/debug_gpt_check.py [--runs 5]
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

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "solutions" / "debug_gpt"
FILES = {"pass": "good_cached.py", "fail": "bug_dgpt_bugs_remain__starter.py"}


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="drill-bench-") as tmp:
        t = Path(tmp)
        run = t / "run"
        run.mkdir(mode=0o700)
        env = {k: v for k, v in os.environ.items() if k != "DRILL_NO_SERVER"}
        env.update(DRILL_HOME=str(t / "home"), XDG_RUNTIME_DIR=str(run), NO_COLOR="1")
        paths = {}
        for label, name in FILES.items():
            (t / label).mkdir()
            paths[label] = t / label / "debug_gpt.py"
            shutil.copy(FIXTURES / name, paths[label])
        drill = [sys.executable, "-m", "drill.cli", "check"]
        cmds = {"import torch": [sys.executable, "-c", "import torch"]}
        for label, path in paths.items():
            cmds[f"cold {label}"] = [*drill, str(path), "--no-server"]
            cmds[f"warm {label}"] = [*drill, str(path)]
        for cmd in cmds.values():  # the OS file cache, and the server started
            timed(cmd, env)
        times: dict[str, list[float]] = {k: [] for k in cmds}
        for _ in range(args.runs):
            for label, cmd in cmds.items():
                times[label].append(timed(cmd, env))
        subprocess.run([*drill[:-1], "server", "stop"], env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)
    m = {k: statistics.median(v) for k, v in times.items()}
    for label, values in times.items():
        print(f"{label:13s} median {m[label]:.2f} s  ({', '.join(f'{x:.2f}' for x in values)})")
    torch_s = m["import torch"]
    print(f"cold pass / import torch  {m['cold pass'] / torch_s:.2f}  (target <= 2.5)")
    print(f"warm pass / import torch  {m['warm pass'] / torch_s:.2f}  (target <= 0.5)")
    print(f"cold fail / cold pass     {m['cold fail'] / m['cold pass']:.2f}  (target <= 1.3)")
    print(f"warm fail / warm pass     {m['warm fail'] / m['warm pass']:.2f}  (target <= 1.3)")


if __name__ == "__main__":
    main()
