"""The job a child is sent is complete before any expectation exists: check_file sends it first and computes
the reference while the learner's code runs, which is only sound if the reference changes nothing the job holds
(inputs, case descriptions, module attributes, upstream gradients)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from drill.judge import check, registry
from drill.judge.check import Result

SEEDS = (0, 7, 2027)


def _snapshot(spec, cases) -> tuple[str, dict[str, bytes]]:
    job, tensors = check._job(spec, cases, Path("learner.py"))
    raw = {k: t.reshape(-1).view(torch.uint8).numpy().tobytes() + str((t.dtype, tuple(t.shape))).encode()
           for k, t in tensors.items()}
    return json.dumps(job, sort_keys=True, default=repr), raw


@pytest.mark.parametrize("name", [e.name for e in registry.INDEX if registry.device_available(e)])
def test_the_job_does_not_depend_on_the_expectations(name: str) -> None:
    spec = registry.load_spec(name)
    for seed in SEEDS:
        cases = check._drawn_cases(spec, seed, "cpu")
        before = _snapshot(spec, cases)
        result = Result(exercise=name, file="learner.py", status="error", seed=seed)
        check._expect_all(spec, cases, "cpu", result)
        assert all(c.expected is not None or c.judge is not None for c in cases), "a case got no expectation"
        after = _snapshot(spec, cases)
        assert after[0] == before[0], f"seed {seed}: the reference changed a case's description"
        assert after[1] == before[1], f"seed {seed}: the reference changed an input tensor"
