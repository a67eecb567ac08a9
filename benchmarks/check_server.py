"""The edit-check loop (issue 14): warm server, cold path, a folder, and failing vs passing checks, in one run.

Printed, each a ratio of medians measured in this run (commands alternate, so
a machine getting busier hurts both sides alike):

1. `drill check rmsnorm.py` through a warm server, wall / `python -c "import torch"`   (target <= 0.3)
2. the same with `--no-server` (cold: two torch imports), wall / torch import           (target <= 1.5)
3. `drill check DIR` over every exercise's index fixture, warm server, wall / torch import (target <= 1.0)
4. per exercise, CPU of a failing check / CPU of a passing one                         (target <= 1.3)
   as whole processes (`--no-server`, the CPU of drill and every process it waited for),
   the failing file being the exercise's bug fixture whose diagnosis costs most (found by a
   warm in-process pass over every bug fixture, also printed: the grading work alone);
5. passing kv_cache / passing rmsnorm, CPU, whole processes                            (target <= 1.5)

Run: .venv/bin/python benchmarks/check_server.py [--runs 5] [--cpu-runs 3] [--only gqa,kv_cache] [--warm mla,bpe]
(--warm: each named exercise's passing check through the warm server / torch import, in place of 1-3)
Progress and the server live in a throw-away DRILL_HOME and XDG_RUNTIME_DIR.
Not a test: it prints the figures and `uptime`, and exits 0.
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

from drill.judge.devices import device_available
from drill.judge.registry import INDEX

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "tests" / "fixtures" / "solutions"
GOOD = {e.name: e.fixture for e in INDEX  # what this machine can grade (no CUDA-only one without a GPU)
        if (SOLUTIONS / e.name / e.fixture).is_file() and device_available(e)}


def drill(*args: str) -> list[str]:
    return [sys.executable, "-m", "drill.cli", *args]


def run(cmd: list[str], env: dict[str, str], expect: tuple[int, ...] = (0,)) -> tuple[float, float]:
    """(wall s, CPU s of the process and every descendant it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in expect:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr[-800:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def runs_text(xs: list[float]) -> str:
    return ", ".join(f"{x:.2f}" for x in xs)


def costliest_bugs(only: set[str] | None = None) -> dict[str, tuple[str, float, float]]:
    """Per exercise: (bug fixture with the most grading CPU, its CPU, the index fixture's), warm, in-process."""
    from drill.judge.check import check_file
    from drill.judge.pool import ChildPool
    from drill.judge.runner import Limits

    class Tracking:
        def __init__(self, pool):
            self.pool, self.kids = pool, []

        def child(self, limits, learner=None):
            kid = self.pool.child(limits, learner)
            self.kids.append(kid)
            return kid

    def cost(pool, path: Path, name: str) -> float:
        tracking = Tracking(pool)
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        check_file(path, name, 1, Limits(), pool=tracking)
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime) + sum(k._rusage_cpu for k in tracking.kids)

    out = {}
    with ChildPool() as pool:
        cost(pool, SOLUTIONS / "rmsnorm" / GOOD["rmsnorm"], "rmsnorm")  # first-use costs
        for name, fixture in GOOD.items():
            if only and name not in only:
                continue
            good = med([cost(pool, SOLUTIONS / name / fixture, name) for _ in range(3)])
            bugs = {p.name: cost(pool, p, name) for p in sorted((SOLUTIONS / name).glob("bug_*.py"))}
            worst = max(bugs, key=bugs.get)
            out[name] = (worst, bugs[worst], good)
    return out


def measure_server(runs: int, env: dict[str, str], folder: Path) -> tuple[list[float], ...]:
    """Wall times of figures 1-3 and of the torch import, commands alternating, through one warm server."""
    one = folder / "rmsnorm.py"
    torch_cmd = [sys.executable, "-c", "import torch"]
    try:
        run(drill("server", "start"), env)
        run(drill("check", str(one)), env)  # the server is warm now
        run(drill("check", str(folder)), env)  # every exercise's pool and specs too
        t_torch, t_warm, t_cold, t_dir = [], [], [], []
        for _ in range(runs):
            t_torch.append(run(torch_cmd, env)[0])
            t_warm.append(run(drill("check", str(one)), env)[0])
            t_cold.append(run(drill("check", str(one), "--no-server"), env)[0])
            t_dir.append(run(drill("check", str(folder)), env)[0])
    finally:
        subprocess.run(drill("server", "stop"), env=env, capture_output=True)
    return t_torch, t_warm, t_cold, t_dir


def measure_warm_each(names: list[str], runs: int, env: dict[str, str], folder: Path) -> dict[str, list[float]]:
    """Wall times of `drill check <name>.py` through one warm server for each exercise, and of the torch
    import (key "torch"), commands alternating; each file is graded once first, so its spec is loaded."""
    torch_cmd = [sys.executable, "-c", "import torch"]
    times: dict[str, list[float]] = {"torch": [], **{n: [] for n in names}}
    try:
        run(drill("server", "start"), env)
        for name in names:
            run(drill("check", str(folder / f"{name}.py")), env)
        for _ in range(runs):
            times["torch"].append(run(torch_cmd, env)[0])
            for name in names:
                times[name].append(run(drill("check", str(folder / f"{name}.py")), env)[0])
    finally:
        subprocess.run(drill("server", "stop"), env=env, capture_output=True)
    return times


def print_server_figures(t_torch: list[float], t_warm: list[float], t_cold: list[float], t_dir: list[float]) -> None:
    tt = med(t_torch)
    print(f"python -c 'import torch'          median {tt:5.2f} s  ({runs_text(t_torch)})")
    print(f"drill check rmsnorm.py, warm      median {med(t_warm):5.2f} s  ({runs_text(t_warm)})  "
          f"ratio {med(t_warm) / tt:4.2f}  (target <= 0.3)")
    print(f"drill check rmsnorm.py, no server median {med(t_cold):5.2f} s  ({runs_text(t_cold)})  "
          f"ratio {med(t_cold) / tt:4.2f}  (target <= 1.5)")
    print(f"drill check DIR ({len(GOOD)} exercises), warm median {med(t_dir):5.2f} s  ({runs_text(t_dir)})  "
          f"ratio {med(t_dir) / tt:4.2f}  (target <= 1.0)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cpu-runs", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated exercises: only their failing/passing CPU "
                        "ratios (figures 4-5), with more --cpu-runs where one run's noise is too large")
    parser.add_argument("--warm", default="", help="comma-separated exercises: each one's passing check through "
                        "the warm server, wall / torch import (target <= 0.3), instead of figures 1-3")
    args = parser.parse_args()
    only = {n for n in args.only.split(",") if n}
    warm = [n for n in args.warm.split(",") if n]
    if set(warm) - set(GOOD):
        raise SystemExit(f"--warm: unknown or not gradable here: {', '.join(sorted(set(warm) - set(GOOD)))}")
    if only - set(GOOD):
        raise SystemExit(f"--only: unknown or not gradable here: {', '.join(sorted(only - set(GOOD)))}")
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    with tempfile.TemporaryDirectory(prefix="drill-bench-") as tmp:
        tmp_path = Path(tmp)
        run_dir = tmp_path / "run"
        run_dir.mkdir(mode=0o700)
        env = {k: v for k, v in os.environ.items() if k != "DRILL_NO_SERVER"}
        env.update(DRILL_HOME=str(tmp_path / "home"), XDG_RUNTIME_DIR=str(run_dir), NO_COLOR="1")
        folder = tmp_path / "all"
        folder.mkdir()
        for name, fixture in GOOD.items():
            shutil.copy(SOLUTIONS / name / fixture, folder / f"{name}.py")
        if warm:
            times = measure_warm_each(warm, args.runs, env, folder)
            tt = med(times["torch"])
            print(f"python -c 'import torch'  median {tt:5.2f} s  ({runs_text(times['torch'])})")
            for name in warm:
                print(f"  drill check {name}.py, warm  median {med(times[name]):5.2f} s  ratio "
                      f"{med(times[name]) / tt:4.2f}  (target <= 0.3)")
        elif not only:
            print_server_figures(*measure_server(args.runs, env, folder))

        worst = costliest_bugs(only)
        print("\nper exercise, CPU s: warm grading work (in-process, fork server) and whole `drill check --no-server`")
        cpu_good: dict[str, float] = {}
        for name, (bug, bug_cpu, good_cpu) in worst.items():
            good_path, bug_path = tmp_path / "g" / f"{name}.py", tmp_path / "b" / f"{name}.py"
            for src, dest in ((SOLUTIONS / name / GOOD[name], good_path), (SOLUTIONS / name / bug, bug_path)):
                dest.parent.mkdir(exist_ok=True)
                shutil.copy(src, dest)
            p, f = [], []
            for _ in range(args.cpu_runs):
                p.append(run(drill("check", str(good_path), "--no-server", "--seed", "1"), env)[1])
                f.append(run(drill("check", str(bug_path), "--no-server", "--seed", "1"), env, expect=(1,))[1])
            cpu_good[name] = med(p)
            print(f"  {name:10s} warm pass {good_cpu:5.2f} fail {bug_cpu:5.2f} ({bug[:48]}) | "
                  f"whole pass {med(p):5.2f} fail {med(f):5.2f}  ratio {med(f) / med(p):4.2f}  (target <= 1.3)")
        if "kv_cache" in cpu_good and "rmsnorm" in cpu_good:
            print(f"passing kv_cache / passing rmsnorm, CPU, whole processes: "
                  f"{cpu_good['kv_cache'] / cpu_good['rmsnorm']:4.2f}  (target <= 1.5)")
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
