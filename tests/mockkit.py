"""Helpers shared by the mock tests (test_mock*.py): a stub grader and `sit`, one scripted mock.

`sit` runs a whole mock through the Python API with a FakeClock and a
ScriptedReader, so a "45-minute" mock takes milliseconds; the stub grader
passes a file that contains GOOD and never spawns the real grader.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from drill.mock.clock import FakeClock
from drill.mock.reader import ScriptedReader
from drill.mock.run import MockOptions, run_mock
from drill.store import Store

RIGHT, WRONG = "a,b", "a"  # see BANK in conftest.py


@dataclass
class StubResult:
    """Shaped like drill.judge.check.Result, for tests that must not spawn the grader."""

    status: str
    passed: int
    total: int
    seed: int = 7
    diagnosis: Any = None
    diagnosis_detail: str = ""
    advisories: list[str] = field(default_factory=list)


@dataclass
class StubDiagnosis:
    id: str = "missing_scale"
    title: str = "Missing 1/sqrt(d_k) scaling"
    why: str = ""
    fix: str = "divide the scores by sqrt(d_k)"


class StubGrader:
    """Records what it was asked to grade; passes files containing 'GOOD'."""

    def __init__(self) -> None:
        self.graded: list[str] = []

    def __call__(self, path: Path, exercise: str, seed: int | None) -> StubResult:
        text = path.read_text()
        self.graded.append(text)
        if "GOOD" in text:
            return StubResult("pass", 12, 12)
        return StubResult("fail", 3, 12, diagnosis=StubDiagnosis(), diagnosis_detail="matches on 9 failing tests")


def sit(tmp_path: Path, bank: Path, steps: list, *, grade: Any = None, interactive: bool = False, **opts: Any):
    clock = FakeClock()
    console = Console(record=True, width=100, force_terminal=False)
    reader = ScriptedReader(console, clock, steps)
    store = Store(tmp_path / "progress.db")
    options = MockOptions(**{"minutes": 45, "questions": 2, "seed": 3, "exercise": "attention",
                             "folder": tmp_path / "work", "bank": bank, **opts})
    code = run_mock(options, console=console, read=reader, clock=clock, store=store,
                    grade=grade if grade is not None else StubGrader(), interactive=interactive, fuzz=False)
    return code, store, console.export_text(), reader


def last_report(store: Store) -> dict[str, Any]:
    mock = store.mocks()[-1]
    return {**mock, "report": json.loads(mock["report_json"])}


def write_into(path: Path, text: str, then: str = "submit"):
    def step() -> str:
        path.write_text(text)
        return then

    return step
