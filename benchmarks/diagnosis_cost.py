"""Benchmark: what a failing check costs next to a passing one (issue 14: target <= 1.3x), per exercise.

For each exercise, a correct fixture and a few buggy ones are graded on a warm
fork server (`pool.ChildPool`), interleaved, --repeat times on the same
seed; the script prints the median wall time of each, the ratio of every
buggy file to the correct one, and how much of a failing check is the
parent's diagnosis (`diagnose.diagnose_cases`, timed by wrapping it, in CPU
time of the grading thread: on a shared, busy machine that moves far less than
the wall clock, so compare versions by it). The
determinism probes (a second call on three fp32 cases) are in both.

Run: .venv/bin/python benchmarks/diagnosis_cost.py [--repeat 5] [--seed 7]
Compare two versions by running it from each checkout (PYTHONPATH=<checkout>).
Not a test: numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "tests" / "fixtures" / "solutions"
FILES = {
    "attention": ("good_matmul_softmax.py", ["bug_mask_inverted__masked_fill.py", "bug_missing_scale__matmul.py",
                                             "bug_unknown__all_nan.py"]),
    "mha": ("good_view_transpose.py", ["bug_mask_inverted__mha.py", "bug_missing_scale__mha.py",
                                       "bug_split_heads_no_transpose__view.py"]),
    "gqa": ("good_repeat_interleave.py", ["bug_gqa_tiled_kv__repeat.py", "bug_gqa_not_causal__no_mask.py"]),
    "rope": ("good_rotate_half.py", ["bug_rope_sign_flipped__rotate_half.py",
                                     "bug_rope_base_ignored__hardcoded_10000.py"]),
    "rmsnorm": ("good_rsqrt.py", ["bug_rms_missing_weight__rsqrt.py", "bug_rms_eps_outside_sqrt__rsqrt.py"]),
    "swiglu": ("good_f_silu.py", ["bug_swiglu_gate_up_swapped__silu_on_up.py", "bug_swiglu_wrong_activation__relu.py"]),
    "kv_cache": ("good_concat_bottom_right.py", ["bug_kv_mask_top_left__tril_rectangle.py",
                                                 "bug_kv_rope_positions_restart__arange_new.py"]),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--only", default="", help="comma-separated exercises")
    args = parser.parse_args()

    import torch

    from drill.judge import check, diagnose
    from drill.judge.pool import ChildPool
    from drill.judge.runner import Limits

    torch.set_num_threads(1)  # intra-op workers spin while they wait: CPU time would count the machine's load

    spent: list[float] = []
    inner = diagnose.diagnose_cases

    def timed_diagnose(*a, **k):
        t0 = time.thread_time()
        try:
            return inner(*a, **k)
        finally:
            spent.append(time.thread_time() - t0)

    diagnose.diagnose_cases = timed_diagnose  # check._grade imports it at call time
    limits = Limits(timeout_s=120, cpu_s=120, memory_mb=2048)
    only = {s for s in args.only.split(",") if s}
    print(f"seed {args.seed}, median of {args.repeat} runs; ratio = failing / passing check")
    with ChildPool() as pool:
        for exercise, (good, bugs) in FILES.items():
            if only and exercise not in only:
                continue
            paths = [SOLUTIONS / exercise / good] + [SOLUTIONS / exercise / b for b in bugs]
            for p in paths:  # warm: the spec imported, the reference's first calls paid
                check.check_file(p, exercise, args.seed, limits, pool=pool)
            walls: dict[Path, list[float]] = {p: [] for p in paths}
            diag: dict[Path, list[float]] = {p: [] for p in paths}
            for _ in range(args.repeat):
                for p in paths:
                    spent.clear()
                    t0 = time.perf_counter()
                    result = check.check_file(p, exercise, args.seed, limits, pool=pool)
                    walls[p].append(time.perf_counter() - t0)
                    diag[p].append(sum(spent))
                    assert (result.status == "pass") == (p.name == good), (p.name, result.status)
            base = statistics.median(walls[paths[0]])
            print(f"{exercise}: {good} {base:.3f} s")
            for p in paths[1:]:
                wall, dg = statistics.median(walls[p]), statistics.median(diag[p])
                print(f"    {p.name}: {wall:.3f} s  ratio {wall / base:.2f}  diagnosis {dg * 1000:.0f} ms CPU")


if __name__ == "__main__":
    main()
