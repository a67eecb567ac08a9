"""drill bench's exit codes: a run cut short is never a success, and the blame goes where the time went.

End to end (CLI, real child on CPU): a learner that hangs at T=256 and one
that is fast-and-wrong at T=256. Unit level (`drill.bench.run._read_events`
on recorded child events): which limit, at which size, in whose code.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drill.bench.run import BenchReport, _read_events, _read_running
from drill.bench.workloads import WORKLOADS
from drill.cli import app
from drill.judge.runner import Limits, RunOutcome

FIX = Path(__file__).parent / "fixtures" / "bench"
runner = CliRunner()


@pytest.mark.slow
def test_a_hang_in_your_code_stops_at_timeout_and_exits_1() -> None:
    res = runner.invoke(app, ["bench", str(FIX / "attention_hangs_when_long.py"), "--exercise", "attention",
                              "--max-size", "512", "--timeout", "3", "--json"])
    assert res.exit_code == 1, res.output
    doc = json.loads(res.stdout)
    assert [s["size"] for s in doc["sizes"]] == [128]  # measured before the hang, still reported
    assert doc["cut_short"] is True and doc["exit_code"] == 1
    assert doc["learner_error"].startswith("your code did not finish at T=256")
    assert "--timeout 3 s" in doc["learner_error"] and "fused reference took" in doc["learner_error"]
    assert doc["elapsed_s"] < 60  # the ladder's own alarm, not the parent's backstop


def test_fast_and_wrong_at_bench_sizes_is_not_timed() -> None:
    res = runner.invoke(app, ["bench", str(FIX / "attention_window_when_long.py"), "--exercise", "attention",
                              "--max-size", "512", "--json", "--seed", "5"])
    assert res.exit_code == 1, res.output
    doc = json.loads(res.stdout)
    statuses = [s["results"]["learner"]["status"] for s in doc["sizes"]]
    assert statuses == ["ok", "mismatch"]
    assert doc["sizes"][1]["results"]["learner"]["median_s"] is None
    assert "differs from the fused reference at T=256" in doc["learner_error"]
    assert doc["learner_error"].count("T=256") == 1


# -- attribution, on recorded events -------------------------------------------------------

ROW = {"learner": {"status": "ok", "median_s": 0.001}, "fused": {"status": "ok", "median_s": 0.001},
       "math": {"status": "ok", "median_s": 0.002}}
SIZE_128 = [{"event": "env", "device_name": "x"}, {"event": "size_start", "size": 128},
            {"event": "size", "size": 128, "elapsed_s": 0.1, "results": ROW},
            {"event": "size_start", "size": 256},
            {"event": "prepared", "size": 256, "impl": "fused", "warmup_s": 0.004}]


def _report(events: list[dict], killed_for: str | None, returncode: int | None, running: dict | None) -> BenchReport:
    wl = WORKLOADS["attention"]
    report = BenchReport(exercise="attention", file="a.py", device="cpu", dtype="float32", threads=1, seed=1,
                         workload=wl, dims=wl.dims("cpu"), check_seed=1)
    outcome = RunOutcome(events=events, returncode=returncode, killed_for=killed_for, cpu_s=0.0, wall_s=0.0)
    _read_events(report, outcome, Limits(timeout_s=135.0, memory_mb=4096), wl, running)
    return report


@pytest.mark.parametrize(
    "killed_for, returncode, running, code, words",
    [
        ("time_limit", -9, {"size": 256, "impl": "learner", "phase": "audit"}, 1,
         "your code did not finish at T=256: the overall time limit (--timeout 120 s)"),
        (None, -signal.SIGALRM, {"size": 256, "impl": "learner", "phase": "timed"}, 1,
         "your code did not finish at T=256"),
        ("memory_limit", -9, {"size": 256, "impl": "learner", "phase": "setup"}, 1,
         "your code went over the memory limit at T=256"),
        (None, -11, {"size": 256, "impl": "learner", "phase": "audit"}, 1, "your code stopped the run at T=256"),
        ("time_limit", -9, {"size": 256, "impl": "math", "phase": "warm-up"}, 3,
         "at T=256 while the math reference was running"),
        ("time_limit", -9, None, 3, "cut short by the overall time limit"),
        ("startup", -9, None, 3, "a start-up failure"),
    ],
)
def test_who_was_running_when_a_limit_hit(killed_for, returncode, running, code, words) -> None:
    report = _report(SIZE_128, killed_for, returncode, running)
    assert report.exit_code == code
    assert report.cut_short
    assert [r.size for r in report.rows] == [128]
    assert words in (report.learner_error if code == 1 else report.stopped)
    if code == 1:  # the fused reference had finished its calls at that size: say how long one took
        assert report.learner_error.endswith("the fused reference took 4.00 ms per call there")


@pytest.mark.parametrize(
    "stop",
    [
        {"event": "stop", "size": 512, "reason": "memory", "message": "skipped T=512: a textbook ..."},
        {"event": "stop", "size": 512, "reason": "time", "message": "stopped before T=512: predicted ~20 s"},
    ],
)
def test_a_ladder_stopped_on_purpose_is_exit_0(stop: dict) -> None:
    events = [*SIZE_128[:3], stop, {"event": "done"}]
    report = _report(events, None, 0, None)
    assert report.exit_code == 0 and not report.cut_short and report.stopped == stop["message"]


def test_learner_oom_names_the_size_and_the_fused_footprint() -> None:
    row = {"learner": {"status": "oom", "message": "out of memory at T=128"},
           "fused": {"status": "ok", "median_s": 0.001, "peak_bytes": 3 * 2**20},
           "math": {"status": "ok", "median_s": 0.002}}
    events = [{"event": "size", "size": 128, "results": row}, {"event": "done"}]
    report = _report(events, None, 0, None)
    assert report.exit_code == 1
    assert report.learner_error == "out of memory at T=128 (the fused reference needed 3 MB at this size)"


@pytest.mark.parametrize("text", ["", "garbage", "[1, 2]", '{"size": "big", "impl": "learner"}'])
def test_a_garbled_running_marker_is_ignored(tmp_path: Path, text: str) -> None:
    p = tmp_path / "running.json"
    p.write_text(text)
    assert _read_running(p) is None
    assert _read_running(tmp_path / "missing.json") is None
