"""Benchmark: `drill train DIR`'s default run, against its target of 90 s and the reference's run alone.

Prints, for --repeat runs (the median):
1. the wall time of `drill train DIR` (a subprocess, the warm server allowed as a learner's shell has it:
   the checks of the seven files, both training runs, the chart), against the 90 s target (issue 23);
2. the wall time of the reference's run alone in this process (`train.reference_run`, one thread), measured
   in the same round: the ratio says what the checks, the child and the second run add to one training
   run (two cores run the two runs side by side, so a ratio near 1 plus the checks is the aim).

The folder holds one correct fixture per part (tests/fixtures/solutions/<part>/good_*.py). DRILL_HOME is a
throw-away folder. Not a test: the numbers depend on the machine and its load; the script prints them and
exits 0.

Run: .venv/bin/python benchmarks/train_run.py [--repeat 1] [--no-server]
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
GOOD = {"bpe": "good_heap.py", "adamw": "good_plain_loop.py", "lr_schedule": "good_three_pieces.py",
        "grad_clip": "good_global_norm.py", "decoder_block": "good_hf_llama.py",
        "cross_entropy": "good_log_probs_gather.py", "sampling": "good_rank_mask.py"}
TARGET_S = 90.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--no-server", action="store_true", help="grade the seven files in-process (cold path)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="drill-bench-train-"))
    ws = work / "ws"
    ws.mkdir()
    for part, name in GOOD.items():
        shutil.copyfile(ROOT / "tests" / "fixtures" / "solutions" / part / name, ws / f"{part}.py")
    env = {**os.environ, "DRILL_HOME": str(work / "home")}
    if args.no_server:
        env["DRILL_NO_SERVER"] = "1"
    drill = str(Path(sys.executable).with_name("drill"))
    from drill.judge import train

    walls, refs = [], []
    try:
        for i in range(args.repeat):
            t0 = time.monotonic()
            proc = subprocess.run([drill, "train", str(ws), "--seed", str(i), "--no-chart"], env=env,
                                  capture_output=True, text=True, check=False)
            walls.append(time.monotonic() - t0)
            if proc.returncode != 0:
                print(proc.stdout[-2000:], proc.stderr[-2000:])
            config = {**train.SIZES["default"], "seed": i, "convention": "half"}
            tensors, _ = train.prepare(config, i)
            t1 = time.monotonic()
            train.reference_run(config, tensors)
            refs.append(time.monotonic() - t1)
            print(f"round {i + 1}: drill train {walls[-1]:.1f} s (exit {proc.returncode}), "
                  f"the reference's run alone {refs[-1]:.1f} s", flush=True)
        wall, ref = statistics.median(walls), statistics.median(refs)
        print(f"drill train DIR (default run, checks and both runs): {wall:.1f} s wall, target {TARGET_S:.0f} s: "
              f"{wall / TARGET_S:.2f} of it")
        print(f"the reference's run alone: {ref:.1f} s; drill train / reference run = {wall / ref:.2f}")
    finally:
        if not args.no_server:  # the server this run started, in its throw-away home
            subprocess.run([drill, "server", "stop"], env=env, capture_output=True, check=False)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
