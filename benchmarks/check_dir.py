"""Benchmark: `drill check DIR` on every indexed exercise, and what the audits cost.

Two ratios, each the median of --repeat runs (interleaved, so a machine
getting busier hurts both sides alike):

1. wall time of `drill check DIR` on correct solutions of every exercise
   of the index (drill/judge/registry.py), divided by the wall time of `python -c "import torch"`
   (target <= 3.0: grading everything should cost about three torch imports);
2. wall time of a single `drill check FILE` with the advisory audits,
   divided by the same check with `--no-audit`, for gqa (memory audit) and
   kv_cache (work audit) (target <= 1.5); then the same ratio for a warm
   in-process `check_file` on a fork server, where start-up costs no longer
   hide the audit's own cost.

Every command runs with --no-server (the cold path, as these targets were
set for); benchmarks/check_server.py measures the warm grading server.

Run: .venv/bin/python benchmarks/check_dir.py [--repeat 5] [--also-wave1] [--no-audits]
`--also-wave1` times, in the same interleaved rounds, a second folder holding
only the first exercises (wave 1 of the index), so the per-exercise cost of
the full index can be compared with the first seven's on the same machine at
the same moment; `--no-audits` skips part 2.
The learner files are fixtures from tests/fixtures/solutions (one good style
per exercise), copied into a temporary folder under their exercise names.
Progress goes to a throw-away DRILL_HOME. Not a test: numbers depend on the
machine and its load; the script prints them and exits 0.
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

from drill.judge.devices import device_available
from drill.judge.registry import INDEX

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "tests" / "fixtures" / "solutions"
# One plain correct solution per indexed exercise (the index's `fixture`).
GOOD = {e.name: e.fixture for e in INDEX if device_available(e)}  # what this machine can grade
AUDITED = {"gqa": "good_repeat_interleave.py", "kv_cache": "good_recompute_inefficient.py"}


def _solutions(folder: Path, good: dict[str, str]) -> Path:
    """A folder holding each exercise's plain correct solution under the exercise's name."""
    folder.mkdir()
    for name, fixture in good.items():
        shutil.copy(SOLUTIONS / name / fixture, folder / f"{name}.py")
    return folder


def drill_command() -> list[str]:
    script = Path(sys.executable).with_name("drill")
    return [str(script)] if script.exists() else [sys.executable, "-c", "from drill.cli import app; app()"]


def timed(cmd: list[str], env: dict[str, str], expect_rc: int = 0) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != expect_rc:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr[-500:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (median is reported)")
    parser.add_argument("--also-wave1", action="store_true", help="also time a folder of the wave-1 exercises only")
    parser.add_argument("--no-audits", action="store_true", help="skip the audit ratios (part 2)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="drill-bench-") as tmp:
        tmp_path = Path(tmp)
        folder = _solutions(tmp_path / "solutions", GOOD)
        wave1 = {e.name: e.fixture for e in INDEX if e.wave == 1}
        folder1 = _solutions(tmp_path / "wave1", wave1) if args.also_wave1 else None
        env = {**os.environ, "DRILL_HOME": str(tmp_path / "home"), "NO_COLOR": "1"}
        drill = drill_command()
        torch_cmd = [sys.executable, "-c", "import torch"]

        timed(torch_cmd, env)  # warm the page cache before measuring anything
        torch_s, dir_s, wave1_s = [], [], []
        for _ in range(args.repeat):
            torch_s.append(timed(torch_cmd, env))
            dir_s.append(timed([*drill, "check", str(folder), "--seed", "1", "--no-server"], env))
            if folder1 is not None:
                wave1_s.append(timed([*drill, "check", str(folder1), "--seed", "1", "--no-server"], env))
        t_torch, t_dir = statistics.median(torch_s), statistics.median(dir_s)
        print(f"python -c 'import torch'        median {t_torch:6.2f} s  (runs: "
              f"{', '.join(f'{x:.2f}' for x in torch_s)})")
        label = f"drill check DIR ({len(GOOD)} exercises)"
        print(f"{label:31s} median {t_dir:6.2f} s  (runs: {', '.join(f'{x:.2f}' for x in dir_s)})")
        print(f"ratio DIR / import torch        {t_dir / t_torch:6.2f}   (target <= 3.0)")
        # Comparable across index sizes: 2.58 / 7 = 0.37 was measured with the first 7 exercises.
        print(f"  per exercise                  {t_dir / t_torch / len(GOOD):6.3f}   (the first 7 measured 0.37)")
        if wave1_s:
            t_1 = statistics.median(wave1_s)
            print(f"{f'drill check DIR (wave 1, {len(wave1)})':31s} median {t_1:6.2f} s  "
                  f"(runs: {', '.join(f'{x:.2f}' for x in wave1_s)})")
            print(f"  ratio {t_1 / t_torch:5.2f}, per exercise {t_1 / t_torch / len(wave1):6.3f}   (same rounds)")
        if args.no_audits:
            return

        for name, fixture in AUDITED.items():
            path = tmp_path / f"{name}.py"
            shutil.copy(SOLUTIONS / name / fixture, path)
            on, off = [], []
            for _ in range(args.repeat):
                on.append(timed([*drill, "check", str(path), "--seed", "1", "--no-server"], env))
                off.append(timed([*drill, "check", str(path), "--seed", "1", "--no-audit", "--no-server"], env))
            m_on, m_off = statistics.median(on), statistics.median(off)
            print(f"{name:8s} check with audit   median {m_on:6.2f} s, --no-audit {m_off:6.2f} s, "
                  f"ratio {m_on / m_off:5.2f}   (target <= 1.5)")
        warm_audit_ratios(args.repeat)


def warm_audit_ratios(repeat: int) -> None:
    """The same ratio without process start-up in the picture: check_file in-process on a warm fork server."""
    from drill.judge.check import check_file
    from drill.judge.pool import ChildPool
    from drill.judge.runner import Limits

    with ChildPool() as pool:
        for name, fixture in AUDITED.items():
            path = SOLUTIONS / name / fixture
            check_file(path, name, 1, Limits(), pool=pool)  # warm-up: imports, first-use costs
            on, off = [], []
            for _ in range(repeat):
                on.append(check_file(path, name, 1, Limits(), pool=pool).elapsed_s)
                off.append(check_file(path, name, 1, Limits(), pool=pool, audit=False).elapsed_s)
            m_on, m_off = statistics.median(on), statistics.median(off)
            print(f"{name:8s} warm check_file   median {m_on:6.2f} s, no audit {m_off:6.2f} s, "
                  f"ratio {m_on / m_off:5.2f}   (target <= 1.5)")


if __name__ == "__main__":
    main()
