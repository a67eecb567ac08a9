"""Fixtures shared by the mock tests: a two-topic bank whose every answer is scriptable, and a private DRILL_HOME."""

from __future__ import annotations

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


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    monkeypatch.setenv("DRILL_HOME", str(path))
    return path


@pytest.fixture(scope="module")
def verdicts_over_seeds():
    """`grade(exercise, path, seeds)` -> [(seed, "pass" or the diagnosis id, partial, detail)], on one fork server.

    For the spec tests that check a few fixtures on more seeds than test_judge_fixtures.py's one.
    """
    from drill.judge.check import check_file
    from drill.judge.runner import ChildPool, Limits

    with ChildPool() as pool:
        def grade(exercise: str, path: Path, seeds) -> list[tuple]:
            out = []
            for seed in seeds:
                r = check_file(path, exercise, seed, Limits(timeout_s=60, cpu_s=60), pool=pool)
                got = "pass" if r.status == "pass" else r.diagnosis.id
                out.append((seed, got, r.diagnosis_partial, r.diagnosis_detail))
            return out

        yield grade
