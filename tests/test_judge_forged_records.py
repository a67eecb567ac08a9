"""Records and measurements the child can write never crash or hang the parent (issue 30, §1).

The child's status records and saved measurements are the learner's to forge
(with layer 1 off a file can append to the status file; a forged audit or
tiling vector rides in its output). Here every field of every record kind is
forged with every wrong type, through the boundary (`read_status`) and then
the parent's grading phases (`check._grade`): each must end refused or as an
honest non-pass, never as a traceback. Two forged values once gave parent
tracebacks (a case index past the list; a declared attribute of the wrong
shape), and a forged tiling measurement kept the parent's judge spinning for
minutes.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from drill.judge import check, tiling
from drill.judge.boundary import SCHEMA, Unreadable, read_status
from drill.judge.registry import load_spec
from drill.judge.runner import Limits, RunOutcome

WRONG = ["x", "", 0, -1, 10**6, 2**62, 1.5, True, None, [], [1, "a"], {}, {"present": True}, {"a": {"b": [1]}}]


def _base(n_cases: int, attrs: dict) -> list[dict]:
    return [{"event": "load"}, {"event": "sandbox", "sandbox": "off", "audit_hook": True, "kernels_blocked": 0},
            {"event": "loaded"}, {"event": "attrs", "values": attrs},
            *({"event": "start", "case": i} for i in range(n_cases)),
            *({"event": "end", "case": i, "status": "ok", "elapsed": 0.0} for i in range(n_cases)),
            {"event": "done"}]


class _NoOutputs:
    """The parent's view of a child that saved nothing (every output file missing: read as crashed)."""

    limits = Limits()

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def output_file(self, name: str) -> Path:
        return self.folder / name


@pytest.fixture(scope="module")
def flash():
    spec = load_spec("flash_attention")
    cases = check._drawn_cases(spec, 3, "cpu")
    return spec, cases


# Every exercise whose child reports module-level names (report_attrs), each read by its own `prepare`.
DECLARING = ("flash_attention", "rope", "moe", "kv_cache", "sinusoidal", "mla", "decoder_block",
             "flash_attention_backward")


def _forgeries(n_cases: int, names: tuple[str, ...]):
    """(label, record) for each event kind and field, each wrong value; the attrs' nested fields; case indices."""
    for event, fields in SCHEMA.items():
        for field in fields:
            for value in WRONG:
                yield f"{event}.{field}={value!r}", {"event": event, field: value}
    for name in names:
        for value in WRONG:
            yield f"attrs {name}={value!r}", {"event": "attrs", "values": {name: value}}
            for key in ("present", "type", "value"):
                info = {"present": True, "type": "str", "value": "half", key: value}
                yield f"attrs {name}.{key}={value!r}", {"event": "attrs", "values": {name: info}}
    for case in (n_cases, -1, 10**9):
        for event in ("start", "end", "grad_error"):
            yield f"{event} case {case}", {"event": event, "case": case, "status": "ok", "message": "m"}


@pytest.mark.parametrize("exercise", DECLARING)
def test_every_forged_record_is_refused_or_graded_without_a_traceback(exercise, tmp_path: Path) -> None:
    spec = load_spec(exercise)
    cases = check._drawn_cases(spec, 3, "cpu")
    check._expect_all(spec, cases, "cpu", check.Result(exercise=exercise, file="", status="", seed=3))
    status = tmp_path / "status.jsonl"
    tried = graded = 0
    for label, forged in _forgeries(len(cases), tuple(spec.report_attrs)):
        records = _base(len(cases), {})
        records.insert(3, forged)
        status.write_text("".join(json.dumps(r) + "\n" for r in records))
        tried += 1
        try:
            events = read_status(status)
        except Unreadable:
            continue
        graded += 1
        for killed in (None, "time_limit"):  # a limit's message names the test that was running
            outcome = RunOutcome(events=list(events), returncode=0, killed_for=killed, cpu_s=0.0, wall_s=0.0)
            result = check.Result(exercise=spec.name, file=f"{exercise}.py", status=check.STATUS_ERROR, seed=3)
            try:
                check._grade(result, spec, list(cases), _NoOutputs(tmp_path), outcome, strict=True)
            except Exception as exc:  # noqa: BLE001 - the failure this test exists to find
                raise AssertionError(f"{label}: the parent raised {type(exc).__name__}: {exc}") from exc
            assert result.status != check.STATUS_PASS, label
    assert tried > 300 and graded > 20  # the boundary lets some through: those reach the grading phases


def test_a_case_index_past_the_list_is_an_unreadable_report(flash, tmp_path: Path) -> None:
    spec, cases = flash
    records = _base(len(cases), {})
    records.insert(-1, {"event": "start", "case": len(cases) + 5})
    status = tmp_path / "status.jsonl"
    status.write_text("".join(json.dumps(r) + "\n" for r in records))
    outcome = RunOutcome(events=read_status(status), returncode=0, killed_for=None, cpu_s=0.0, wall_s=0.0)
    result = check.Result(exercise=spec.name, file="flash_attention.py", status=check.STATUS_ERROR, seed=3)
    check._grade(result, spec, list(cases), _NoOutputs(tmp_path), outcome, strict=False)
    assert result.status != check.STATUS_PASS
    assert result.diagnosis.id == "crashed" and "names case" in result.diagnosis_detail


def _measurement(**values: int) -> torch.Tensor:
    data = {f: 0 for f in tiling.FIELDS}
    data.update(version=tiling.VERSION, score_storages=1, products=10, computed=100, largest_per_bh=10)
    data.update(values)
    return torch.tensor([data[f] for f in tiling.FIELDS], dtype=torch.int64)


class _Alarm:
    """Fails the test instead of hanging it: a judge that loops over forged sizes is what is tested."""

    def __enter__(self):
        signal.signal(signal.SIGALRM, self._raise)
        signal.alarm(20)

    def __exit__(self, *exc):
        signal.alarm(0)

    @staticmethod
    def _raise(*_):
        raise AssertionError("the judge spun on a forged measurement")


@pytest.mark.parametrize("forged", [
    dict(t_q=2**62, t_k=2**62, block_q=1, block_k=1),  # once minutes of tile counting
    dict(t_q=2**16, t_k=2**16, block_q=1, block_k=1, products=10**9, computed=10**12),
    dict(t_q=64, t_k=64, block_q=0, block_k=0),
    dict(t_q=-5, t_k=64, block_q=16, block_k=16),
    dict(t_q=64, t_k=64, block_q=16, block_k=16, largest_ndim=2**40, largest_per_bh=10**6, largest_dtype=2**40),
])
def test_a_forged_tiling_measurement_is_judged_at_once(forged) -> None:
    diagnoses = {k: SimpleNamespace(id=k) for k in ("flash_tiling_unmeasured", "flash_not_tiled",
                                                    "flash_blocks_ignored", "flash_causal_tiles_not_skipped")}
    roles = {k: SimpleNamespace(id=k) for k in tiling.BACKWARD_ROLES}
    got = _measurement(**forged)
    with _Alarm():
        forward = tiling.judge(got, causal=True, blocks=(16, 16), own=None, grader_set=True, diagnoses=diagnoses)
        backward = tiling.judge_backward(got, causal=True, blocks=(16, 16), own=None, grader_set=True,
                                         diagnoses=roles)
        tiling.extra_passes(got, True)
        tiling.extra_passes(got, False)
    assert not forward.ok and not backward.ok


def test_min_scores_counts_the_visible_tiles() -> None:
    """The closed form (one step per row block) against counting every tile, on shapes the grader uses."""
    def by_tile(t_q, t_k, bq, bk):
        scores = tiles = total = 0
        for q0 in range(0, t_q, bq):
            q1 = min(q0 + bq, t_q)
            for k0 in range(0, t_k, bk):
                total += 1
                if k0 <= t_k - t_q + q1 - 1:
                    scores += (q1 - q0) * (min(k0 + bk, t_k) - k0)
                    tiles += 1
        return scores, tiles, total

    for t_q, t_k, bq, bk in [(1, 1, 16, 16), (100, 100, 16, 32), (37, 130, 64, 16), (130, 37, 16, 64),
                             (256, 256, 256, 16), (1, 300, 16, 16), (97, 97, 1, 7)]:
        assert tiling.min_scores(t_q, t_k, bq, bk) == by_tile(t_q, t_k, bq, bk)


def test_an_output_far_larger_than_the_answer_is_never_read_element_by_element() -> None:
    case = SimpleNamespace(expected=torch.zeros(4, 8), derive=None, kind="call", judge=None)
    assert check._oversized(torch.zeros(4, 8), case) is None
    assert check._oversized(torch.zeros(4096), case) is None  # small outputs go to the comparison as they are
    big = check._oversized(torch.zeros(10**6), case)
    assert big is not None and not big.ok and big.reason == "shape" and "1000000 elements" in big.message
    judged = SimpleNamespace(expected=torch.zeros(0), derive=None, kind="call", judge=lambda got: None)
    assert check._oversized(torch.zeros(90000), judged) is None  # its judge reads its own format (30 000 draws)
