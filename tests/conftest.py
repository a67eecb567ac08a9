"""Fixtures for every test: a private, empty DRILL_HOME (automatic), and the mock tests' scriptable bank.

Why the progress folder is automatic: a test that records a review or an
attempt without asking for isolation would write into the learner's real
store (`drill check` records every grade). Every test, and every fixture of
a wider scope, starts with DRILL_HOME pointing at a folder of its own that
does not exist yet (as on a fresh machine); subprocesses inherit it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

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


@pytest.fixture(scope="session", autouse=True)
def _session_drill_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """DRILL_HOME for what runs before any test's own (module- and session-scoped fixtures)."""
    path = tmp_path_factory.mktemp("session-drill-home") / "home"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DRILL_HOME", str(path))
        yield path


@pytest.fixture(autouse=True)
def _private_drill_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own progress folder (not created: a fresh machine has none). A test or a
    module fixture that needs another one sets DRILL_HOME itself, after this one."""
    path = tmp_path_factory.mktemp("drill-home") / "home"
    monkeypatch.setenv("DRILL_HOME", str(path))
    return path


@pytest.fixture
def home(_private_drill_home: Path) -> Path:
    """The test's DRILL_HOME, for a test that reads or seeds the store."""
    return _private_drill_home
