"""The job a child is sent is complete before any expectation exists: check_file sends it first and computes
the reference while the learner's code runs, which is only sound if the reference changes nothing the job holds
(inputs, case descriptions, module attributes, upstream gradients)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from drill.judge import check, devices, registry
from drill.judge.check import Result

SEEDS = (0, 7, 2027)


def _snapshot(spec, cases) -> tuple[str, dict[str, bytes]]:
    job, tensors = check._job(spec, cases, Path("learner.py"))
    raw = {k: t.reshape(-1).view(torch.uint8).numpy().tobytes() + str((t.dtype, tuple(t.shape))).encode()
           for k, t in tensors.items()}
    return json.dumps(job, sort_keys=True, default=repr), raw


@pytest.mark.parametrize("name", [e.name for e in registry.INDEX if devices.device_available(e)])
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


def test_a_grader_error_while_the_child_runs_leaves_the_fork_server_in_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference raising after the job went out (a grader bug) is that check's error; the run it started is
    killed and its end read, so the next check on the same fork server gets its own run's verdict (an unread
    end once made the next check report "killed by signal SIGHUP")."""
    import dataclasses

    from drill.judge.pool import ChildPool
    from drill.judge.runner import Limits

    good = Path(__file__).parent / "fixtures" / "solutions" / "rmsnorm" / registry.entry("rmsnorm").fixture
    spec = registry.load_spec("rmsnorm")

    def broken(case):
        raise RuntimeError("reference bug")

    with ChildPool() as pool:
        monkeypatch.setattr(registry, "load_spec", lambda name: dataclasses.replace(spec, reference=broken))
        with pytest.raises(RuntimeError, match="reference bug"):
            check.check_file(good, "rmsnorm", 3, Limits(), pool=pool)
        monkeypatch.undo()
        for seed in (4, 5):
            result = check.check_file(good, "rmsnorm", seed, Limits(), pool=pool)
            assert result.status == "pass", (result.diagnosis_detail, result.layers)


GOOD_RMSNORM = Path(__file__).parent / "fixtures" / "solutions" / "rmsnorm" / registry.entry("rmsnorm").fixture


def test_a_fork_server_started_on_a_thread_that_ended_still_grades() -> None:
    """The fork server dies with its parent *thread* (PR_SET_PDEATHSIG): one started on a worker thread that
    then exited was SIGKILLed with it, and the next check through that pool failed as "did not start in
    time". Every process is started from one long-lived thread instead (runner.spawn_own)."""
    import threading

    from drill.judge.pool import ChildPool
    from drill.judge.runner import Limits

    with ChildPool() as pool:
        for seed in (1, 2):
            first: list = []
            worker = threading.Thread(target=lambda out=first, s=seed: out.append(
                check.check_file(GOOD_RMSNORM, "rmsnorm", s, Limits(), pool=pool)))
            worker.start()
            worker.join()
            later = check.check_file(GOOD_RMSNORM, "rmsnorm", seed, Limits(), pool=pool)
            assert [r.status for r in first] == ["pass"] and later.status == "pass", later.diagnosis_detail


def test_a_fork_server_that_dies_before_forking_the_run_is_replaced_once() -> None:
    """A fork server alive when the request went out and gone before it forked the run (its pipe ends) costs
    a fresh fork server, not a verdict: the same request is handed to a new one."""
    import subprocess
    import sys

    from drill.judge import runner
    from drill.judge.pool import ChildPool
    from drill.judge.runner import Limits

    with ChildPool() as pool:
        # alive at the check, gone as soon as the request arrives
        pool.proc = runner.spawn_own([sys.executable, "-c", "import sys; sys.stdin.readline()"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        result = check.check_file(GOOD_RMSNORM, "rmsnorm", 3, Limits(), pool=pool)
        assert result.status == "pass", (result.diagnosis_detail, result.layers)
