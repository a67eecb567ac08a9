"""Fixtures for every test: a private, empty DRILL_HOME (automatic), no grading server, the mock tests' bank.

Why the progress folder is automatic: a test that records a review or an
attempt without asking for isolation would write into the learner's real
store (`drill check` records every grade). Every test, and every fixture of
a wider scope, starts with DRILL_HOME pointing at a folder of its own that
does not exist yet (as on a fresh machine); subprocesses inherit it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# Hermetic by default: no test talks to a grading server unless it asks for one
# (tests/test_judge_server.py unsets DRILL_NO_SERVER and gives each server its own
# runtime folder). Set here, at import, so module-scoped fixtures and every
# subprocess see it too; each pytest process (each xdist worker) gets its own folder.
# A test that sets no DRILL_HOME of its own never reads or writes the user's real progress store either.
os.environ["DRILL_NO_SERVER"] = "1"
_RUNTIME = tempfile.mkdtemp(prefix="drill-test-run-")
os.environ["XDG_RUNTIME_DIR"] = _RUNTIME
os.environ["DRILL_HOME"] = os.path.join(_RUNTIME, "home")


def pytest_unconfigure(config: pytest.Config) -> None:
    for pool in _FORK_SERVERS:
        pool.close()
    shutil.rmtree(_RUNTIME, ignore_errors=True)


_FORK_SERVERS: list = []


def shared_fork_servers(n: int) -> list:
    """This test process's first `n` fork servers (pool.ChildPool), started on first use and shared by every
    module that grades files with the default environment: each costs a torch import (~1 s of CPU), which a
    module of its own, or each exercise of the fixture tests, used to pay again. Sharing changes no verdict:
    every graded run is a fresh fork with its own sandbox, and a run that kills its fork server makes the
    pool start a new one. A test that changes the zygote's environment (DRILL_SANDBOX, the Triton
    interpreter) or attacks the fork server keeps one of its own."""
    from drill.judge.pool import ChildPool

    while len(_FORK_SERVERS) < n:
        _FORK_SERVERS.append(ChildPool())
    return _FORK_SERVERS[:n]


@pytest.fixture(scope="session")
def fork_server():
    """One shared fork server (see shared_fork_servers)."""
    return shared_fork_servers(1)[0]


@pytest.fixture(scope="session")
def fork_server_pair() -> list:
    """Two shared fork servers, for grading a batch side by side (see shared_fork_servers)."""
    return shared_fork_servers(2)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `-n N --dist loadgroup`, a module's tests share one worker, so its module-scoped fixtures
    (fork servers, graded results, a grading server) are built once; test_judge_fixtures.py groups its
    tests by exercise instead, the unit it grades in."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__ if item.module else item.nodeid))

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
@pytest.fixture(scope="module")
def verdicts_over_seeds():
    """`grade(exercise, path, seeds)` -> [(seed, "pass" or the diagnosis id, partial, detail)], on one fork server.

    For the spec tests that check a few fixtures on more seeds than test_judge_fixtures.py's one.
    """
    from drill.judge.check import check_file
    from drill.judge.runner import Limits

    pool = shared_fork_servers(1)[0]

    def grade(exercise: str, path: Path, seeds) -> list[tuple]:
        out = []
        for seed in seeds:
            r = check_file(path, exercise, seed, Limits(timeout_s=60, cpu_s=60), pool=pool)
            got = "pass" if r.status == "pass" else r.diagnosis.id
            out.append((seed, got, r.diagnosis_partial, r.diagnosis_detail))
        return out

    return grade
