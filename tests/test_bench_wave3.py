"""drill bench for the backprop and serving exercises: every new workload runs its real ladder on a correct file.

Each run is the real isolated child on CPU over the first two sizes of the
ladder (--max-size), so the learner, the fused and the math paths are all
built, compared and timed as a learner's run would be.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drill.bench.workloads import WORKLOADS
from drill.cli import app
from drill.judge.registry import INDEX

pytestmark = pytest.mark.slow  # real ladders (the inner loop has tests/test_bench_parts.py)

ROOT = Path(__file__).parent
SOL = ROOT / "fixtures" / "solutions"
NEW = ("attention_backward", "flash_attention_backward", "layernorm_backward", "cross_entropy_backward",
       "quant_matmul", "paged_kv")
FIXTURE = {e.name: SOL / e.name / e.fixture for e in INDEX}

runner = CliRunner()


def bench_json(path: Path, exercise: str, max_size: int) -> tuple[int, dict]:
    res = runner.invoke(app, ["bench", str(path), "--exercise", exercise, "--max-size", str(max_size), "--json",
                              "--seed", "4"])
    return res.exit_code, json.loads(res.stdout)


@pytest.mark.parametrize("exercise", NEW)
def test_a_correct_file_is_measured_against_both_references(exercise: str) -> None:
    ladder = WORKLOADS[exercise].ladder("cpu")
    code, doc = bench_json(FIXTURE[exercise], exercise, ladder[1])
    assert code == 0, doc
    assert [s["size"] for s in doc["sizes"]] == list(ladder[:2])
    for size in doc["sizes"]:
        for impl in ("learner", "fused", "math"):
            res = size["results"][impl]
            assert res["status"] == "ok" and res["median_s"] > 0, (size["size"], impl, res)
        assert size["results"]["learner"]["ratio_to_fused"] > 0


def test_an_answer_wrong_only_at_benchmark_sizes_is_a_mismatch_not_a_time() -> None:
    code, doc = bench_json(ROOT / "fixtures" / "bench" / "quant_matmul_drops_b_scale_when_large.py",
                           "quant_matmul", 512)
    assert code == 1, doc
    first, second = doc["sizes"][0], doc["sizes"][1]
    assert first["size"] == 128 and first["results"]["learner"]["status"] == "ok"
    bad = second["results"]["learner"]
    assert second["size"] == 256 and bad["status"] == "mismatch" and bad["median_s"] is None, bad
