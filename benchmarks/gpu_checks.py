"""Every indexed exercise's `drill check --device cuda` on a correct and a buggy file, and the cold wall time of a
CUDA check against a CPU check of the same file (benchmarks/gpu_check.sh runs it; issue 17).

    python benchmarks/gpu_checks.py --out checks.json [--device cuda] [--reps 2]

Part 1, verdicts: for each exercise of the index, its index fixture (good_*) and one bug fixture whose name
says the diagnosis (the first that is not a policy refusal), plus every `bug_forbidden_op__*` fixture of
attention, gqa, mha, decoder_block, rmsnorm and layernorm (the forbidden fused CUDA kernels must trip on
the GPU), graded with `check_file(device=...)` through one fork server. Each entry records the verdict it
should have (from the file name), the one it got, the device and reference backend the result names, and
the audit lines (triton_rmsnorm's bandwidth).

Part 2, wall time: `drill check FILE --no-server` as a subprocess (both torch imports, CUDA start-up
included), CPU and CUDA alternated --reps times on rmsnorm's and attention's index fixtures; the ratio of the
medians is the issue's "within 1.5x" figure. Not a test: it prints and writes numbers, and exits 0 unless
it could not run at all. `--device cpu` (the dry run) does the same on the CPU (a CUDA-only exercise is then
graded through Triton's interpreter if DRILL_TRITON_INTERPRET=1 and triton is installed, else recorded as
skipped).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from drill.judge import devices, registry
from drill.judge.check import check_file
from drill.judge.pool import ChildPool
from drill.judge.runner import Limits

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "tests" / "fixtures" / "solutions"
SEED = 20261129
FORBIDDEN_ON_GPU = ("attention", "gqa", "mha", "decoder_block", "rmsnorm", "layernorm")
NOT_VALUES = ("policy_violation", "syntax_error", "not_implemented", "forbidden_op", "missing_name")


def expected(path: Path) -> str:
    return "pass" if path.name.startswith("good_") else path.name[len("bug_"):].split("__", 1)[0]


def files_of(exercise: str) -> list[Path]:
    entry = registry.entry(exercise)
    folder = SOLUTIONS / exercise
    bugs = sorted(p for p in folder.glob("bug_*.py") if expected(p) not in NOT_VALUES and "two_bugs" not in p.name)
    out = [folder / entry.fixture] + bugs[:1]
    if exercise in FORBIDDEN_ON_GPU:
        out += sorted(folder.glob("bug_forbidden_op__*.py"))
    return out


def verdicts(device: str) -> list[dict]:
    rows = []
    with ChildPool() as pool:
        for entry in registry.INDEX:
            if not devices.device_available(entry):
                rows.append({"exercise": entry.name, "skipped": "graded on CUDA only; no GPU here"})
                continue
            for path in files_of(entry.name):
                t0 = time.monotonic()
                try:
                    r = check_file(path, entry.name, SEED, Limits(), pool=pool, device=device)
                except Exception as exc:  # noqa: BLE001 - recorded, the loop goes on
                    rows.append({"exercise": entry.name, "file": path.name, "error": f"{type(exc).__name__}: {exc}"})
                    continue
                got = "pass" if r.status == "pass" else (r.diagnosis.id if r.diagnosis else r.status)
                rows.append({"exercise": entry.name, "file": path.name, "want": expected(path), "got": got,
                             "ok": got == expected(path), "partial": r.diagnosis_partial,
                             "tests": f"{r.passed}/{r.total}",
                             "device": r.device, "reference_backend": r.reference_backend, "audit": r.audit,
                             "detail": r.diagnosis_detail[:300], "kernels": r.layers.get("kernels", ""),
                             "sandbox": r.layers.get("sandbox", ""), "wall_s": round(time.monotonic() - t0, 2)})
                print(f"{'ok ' if rows[-1]['ok'] else 'BAD'} {entry.name}/{path.name}: {got} "
                      f"({rows[-1]['tests']}, {rows[-1]['wall_s']} s) on {r.device}", flush=True)
    return rows


def cold_wall(path: Path, exercise: str, device: str) -> float:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-P", "-m", "drill.cli", "check", str(path), "-e", exercise, "--no-server",
                           "--device", device], capture_output=True, text=True, timeout=300)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"drill check {path.name} --device {device} exited {proc.returncode}: "
                           f"{(proc.stdout + proc.stderr)[-400:]}")
    return wall


def timings(device: str, reps: int) -> list[dict]:
    out = []
    for exercise in ("rmsnorm", "attention"):
        path = SOLUTIONS / exercise / registry.entry(exercise).fixture
        walls: dict[str, list[float]] = {"cpu": [], device: []}
        try:
            for _ in range(reps):  # interleaved: a machine getting busier hurts both alike
                for dev in dict.fromkeys(("cpu", device)):
                    walls[dev].append(cold_wall(path, exercise, dev))
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            out.append({"exercise": exercise, "error": str(exc)[:500]})
            continue
        cpu, dev = statistics.median(walls["cpu"]), statistics.median(walls[device])
        out.append({"exercise": exercise, "cpu_s": walls["cpu"], f"{device}_s": walls[device],
                    "ratio": dev / cpu, "target": 1.5})
        print(f"cold drill check {exercise}: cpu {cpu:.2f} s, {device} {dev:.2f} s, ratio {dev / cpu:.2f} "
              f"(target <= 1.5)", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--skip-timing", action="store_true")
    args = ap.parse_args(argv)
    doc: dict = {"device": args.device, "seed": SEED}
    doc["verdicts"] = verdicts(args.device)
    doc["timing"] = [] if args.skip_timing else timings(args.device, args.reps)
    args.out.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    bad = [r for r in doc["verdicts"] if not r.get("ok") and "skipped" not in r]
    print(f"{len(doc['verdicts']) - len(bad)}/{len(doc['verdicts'])} verdicts as their file names say"
          + (f"; NOT: {[(r['exercise'], r.get('file'), r.get('got', r.get('error'))) for r in bad]}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
