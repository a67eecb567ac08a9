"""Shared fixtures: a two-topic bank whose every answer is scriptable, a private DRILL_HOME; no grading server by default."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

# Hermetic by default: no test talks to a grading server unless it asks for one
# (tests/test_judge_server.py unsets DRILL_NO_SERVER and gives each server its own
# runtime folder). Set here, at import, so module-scoped fixtures and every
# subprocess see it too; each pytest process (each xdist worker) gets its own folder.
os.environ["DRILL_NO_SERVER"] = "1"
_RUNTIME = tempfile.mkdtemp(prefix="drill-test-run-")
os.environ["XDG_RUNTIME_DIR"] = _RUNTIME


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_RUNTIME, ignore_errors=True)

# Both options of every question are correct (options may be shown in any
# order), so "a,b" is always right and "a" always wrong: a script can answer
# without knowing which question the weighting drew.
BANK = """\
topic: {topic}
questions:
  - id: {topic}-choice-one
    kind: choice
    difficulty: easy
    prompt: "Pick the first option ({topic} one)."
    explanation: "The first option is right."
    options:
      - {{text: "first", correct: true}}
      - {{text: "second", correct: true}}
  - id: {topic}-choice-two
    kind: choice
    difficulty: easy
    prompt: "Pick the first option ({topic} two)."
    explanation: "The first option is right."
    options:
      - {{text: "first", correct: true}}
      - {{text: "second", correct: true}}
"""


@pytest.fixture
def bank(tmp_path: Path) -> Path:
    folder = tmp_path / "bank"
    folder.mkdir()
    for topic in ("alpha", "beta"):
        (folder / f"{topic}.yaml").write_text(BANK.format(topic=topic))
    return folder


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    monkeypatch.setenv("DRILL_HOME", str(path))
    return path
