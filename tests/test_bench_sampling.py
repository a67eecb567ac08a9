"""drill bench's sampling workload: decisions clear in every dtype at every size, and a real run through the CLI.

The workload compares the learner's probabilities with the fused
reference's; that is fair only if every correct formulation keeps the same
tokens, so its logits are built to sit clear of every threshold (the
hidden tests' `decisive` rule), in fp32, fp16 and bf16 alike.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import drill.reference as R
from drill.bench.workloads import SAMPLING_OPTIONS, WORKLOADS
from drill.cli import app
from drill.judge.specs.sampling import decisive

SOL = Path(__file__).parent / "fixtures" / "solutions" / "sampling"
WL = WORKLOADS["sampling"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_every_row_of_every_size_is_decisive(dtype: torch.dtype, device: str) -> None:
    o = SAMPLING_OPTIONS
    dims = WL.dims(device)
    for size in WL.ladder(device)[:2]:  # built on the CPU whatever the ladder: the values are what matter
        logits = WL.build(size, dims, dtype, torch.device("cpu"), seed=size)["logits"][:8]
        assert logits.shape == (8, size) and logits.dtype == dtype
        for row in logits:
            assert decisive(row.float() / o["temperature"], o["top_k"], o["top_p"], o["min_p"]), (size, dtype)
        kept = R.keep_mask(logits, **o)
        assert torch.equal(kept, R.keep_mask(logits, **o, impl="math"))
        assert bool((kept.sum(-1) > 1).all()) and bool((kept.sum(-1) < o["top_k"]).all())  # every filter bites


def test_bench_runs_a_correct_solution_and_names_the_vocabulary_size(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["bench", str(SOL / "good_sort_descending.py"), "--exercise", "sampling",
                                   "--max-size", "16384", "--json", "--seed", "2"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["exercise"] == "sampling" and doc["size_label"] == "V"
    assert [s["size"] for s in doc["sizes"]] == [4096, 16384]
    assert all(s["results"][impl]["status"] == "ok" for s in doc["sizes"] for impl in ("learner", "fused", "math"))


def test_bench_refuses_a_file_that_fails_check() -> None:
    res = CliRunner().invoke(app, ["bench", str(SOL / "bug_sampling_temperature_late__divide_at_end.py"),
                                   "--exercise", "sampling", "--max-size", "4096"])
    assert res.exit_code == 1 and "sampling_temperature_late" in res.output
