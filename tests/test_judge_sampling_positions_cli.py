"""sampling, sinusoidal and alibi through the public surface: start, hint, exercises, check (FILE, DIR,
--json, --watch) and a mock whose coding round is one of them, with the real grader."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from drill.cli import app
from drill.judge.check import check_file
from drill.judge.pool import ChildPool
from drill.judge.runner import Limits
from drill.judge.watch import watch
from drill.store import Store

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions"
EXERCISES = {  # name: (a correct style, a mistake and its id)
    "sampling": ("good_sort_descending.py", "bug_sampling_top_p_crossing_dropped__cumsum_lt.py",
                 "sampling_top_p_crossing_dropped"),
    "sinusoidal": ("good_concat_declared.py", "bug_sinusoidal_sin_cos_swapped__cos_even.py",
                   "sinusoidal_sin_cos_swapped"),
    "alibi": ("good_loops.py", "bug_alibi_top_left__arange_tq.py", "alibi_top_left"),
}


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DRILL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    return tmp_path / "home"


def run(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_start_hint_and_the_list(home: Path, tmp_path: Path, name: str) -> None:
    assert run("start", name, str(tmp_path / "w")).exit_code == 0
    text = (tmp_path / "w" / f"{name}.py").read_text()
    assert "NotImplementedError" in text and "Things to think about" in text and "Contract" in text
    outputs = [run("hint", name).output for _ in range(3)]
    assert "Hint 1/3" in outputs[0] and "Hint 2/3" in outputs[1] and "Hint 3/3" in outputs[2]
    assert name in run("exercises").output
    starter = run("check", str(tmp_path / "w" / f"{name}.py"), "--seed", "1", "--json")
    assert starter.exit_code == 1 and json.loads(starter.stdout)["diagnosis"]["id"] == "not_implemented"


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_check_json_passes_a_good_file_and_names_a_bug(home: Path, tmp_path: Path, name: str) -> None:
    good, bug, bug_id = EXERCISES[name]
    for src, want in ((good, "pass"), (bug, bug_id)):
        f = tmp_path / src.split("__")[0] / f"{name}.py"  # named after the exercise: no --exercise needed
        f.parent.mkdir(exist_ok=True)
        shutil.copy(SOLUTIONS / name / src, f)
        res = run("check", str(f), "--seed", "4", "--json")
        doc = json.loads(res.stdout)
        assert doc["exercise"] == name and res.exit_code == (0 if want == "pass" else 1), res.output
        assert (doc["status"] if want == "pass" else doc["diagnosis"]["id"]) == want
        assert doc["tests_total"] == len(doc["tests"]) > 10
    assert [a.status for a in Store(home / "progress.db").attempts(name)] == ["pass", "fail"]


def test_check_dir_grades_the_three_with_one_table(home: Path, tmp_path: Path) -> None:
    d = tmp_path / "mine"
    d.mkdir()
    for name, (good, _, _) in EXERCISES.items():
        shutil.copy(SOLUTIONS / name / good, d / f"{name}.py")
    res = run("check", str(d), "--seed", "6")
    assert res.exit_code == 0, res.output
    assert all(name in res.output for name in EXERCISES) and res.output.count("PASS") >= 3
    docs = json.loads(run("check", str(d), "--seed", "6", "--json").stdout)
    assert sorted(doc["exercise"] for doc in docs) == sorted(EXERCISES) and {doc["status"] for doc in docs} == {"pass"}


def test_watch_regrades_sinusoidal_after_the_layout_is_declared(tmp_path: Path) -> None:
    """The real watcher and grader: an undeclared concat layout fails, declaring it passes."""
    f = tmp_path / "sinusoidal.py"
    undeclared = SOLUTIONS / "sinusoidal" / "bug_sinusoidal_layout_swapped__concat_undeclared.py"
    shutil.copy(undeclared, f)
    declared = undeclared.read_text().replace("import torch\n", 'import torch\n\nLAYOUT = "concat"\n', 1)
    state = {"now": 0.0}

    def sleep(s: float) -> None:
        state["now"] += s
        if state["now"] >= 0.5 and "saved" not in state:
            f.write_text(declared)
            state["saved"] = True
            import os

            os.utime(f, ns=(5_000_000_000, 5_000_000_000))

    verdicts = []
    with ChildPool() as pool:
        def grade(changed):
            for p in changed:
                r = check_file(p, None, 9, Limits(), pool=pool)
                verdicts.append(r.status if r.diagnosis is None else r.diagnosis.id)

        watch([f], grade, poll_s=0.1, debounce_s=0.2, max_rounds=2, sleep=sleep, clock=lambda: state["now"])
    assert verdicts == ["sinusoidal_layout_swapped", "pass"]


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_a_mock_can_pick_it_and_grades_it(tmp_path: Path, bank: Path, name: str) -> None:
    from drill.mock.clock import FakeClock
    from drill.mock.plan import gradable_exercises
    from drill.mock.reader import ScriptedReader
    from drill.mock.run import MockOptions, _check_file, run_mock

    assert name in gradable_exercises()
    work = tmp_path / "work"
    clock = FakeClock()
    console = Console(record=True, width=100, force_terminal=False)
    steps = [(60, "a,b"), (60, "a,b"), lambda: (shutil.copy(SOLUTIONS / name / EXERCISES[name][0], work / f"{name}.py"),
                                                 "submit")[1]]
    store = Store(tmp_path / "progress.db")
    options = MockOptions(minutes=45, questions=2, seed=3, exercise=name, folder=work, bank=bank)
    code = run_mock(options, console=console, read=ScriptedReader(console, clock, steps), clock=clock, store=store,
                    grade=_check_file, interactive=False, fuzz=False)
    assert code == 0, console.export_text()
    mock = store.mocks()[-1]
    assert mock["exercise"] == name and json.loads(mock["report_json"])["coding"]["submissions"][-1]["status"] == "pass"
