"""`drill mock --round debug`: the debug round, with the real grader (fork server) on debug_gpt's planted file.

A scripted mock fixes the planted bugs one by one from the end of the file: each grade says how many are
left and where, and the report card scores the bugs fixed and the cache part and shows the time taken.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from drill.cli import app
from drill.debug_round import bugs as library
from drill.debug_round.round import read_planted
from drill.judge.check import check_file
from drill.judge.runner import Limits
from drill.mock.coding import coding_credit
from drill.mock.report import score_rule

from mockkit import last_report, sit

CACHED = Path(__file__).parent / "fixtures" / "solutions" / "debug_gpt" / "good_cached.py"


def _revert_last(path: Path, fixed_so_far: list[str]) -> str:
    """Fix the planted bug nearest the end of the file not fixed yet (so earlier bugs keep their lines)."""
    written = read_planted(path)
    bug_id = next(b for b in reversed(written.plan.ids) if b not in fixed_so_far)
    fixed, planted = library.BY_ID[bug_id].texts(written.plan.mlp)
    text = path.read_text(encoding="utf-8")
    if planted:
        text = text.replace(planted, fixed)
    else:
        lines = text.split("\n")
        at = written.lines[bug_id][1] - 1
        text = "\n".join(lines[:at] + [fixed.rstrip("\n")] + lines[at:])
    path.write_text(text, encoding="utf-8")
    fixed_so_far.append(bug_id)
    return "submit"


@pytest.fixture
def grader(fork_server):
    return lambda path, exercise, seed: check_file(path, exercise, seed or 3, Limits(), pool=fork_server)


def test_the_debug_round_counts_planted_bugs_down_and_scores_them(tmp_path: Path, bank: Path, grader) -> None:
    work = tmp_path / "work"
    coding_file = work / "debug_gpt.py"
    fixed: list[str] = []
    steps = [lambda: _revert_last(coding_file, fixed)] + [lambda: _revert_last(coding_file, fixed)] * 3 + ["done"]
    code, store, out, _ = sit(tmp_path, bank, steps, grade=grader, round="debug", exercise=None, questions=6,
                              seed=11)
    assert code == 0, out
    text = " ".join(out.split())
    header = coding_file.read_text(encoding="utf-8").splitlines()[0]
    assert header.startswith("# drill debug_gpt seed=") and header.endswith("bugs=4 (keep this line)")
    assert "Concept round" not in text and "debugging: a mini GPT with planted bugs" in text
    for left in (3, 2, 1):
        assert f"planted bugs left: {left} of 4 (line" in text, text
    assert "planted bugs left: 0 of 4; KV cache: not attempted" in text
    report = last_report(store)["report"]
    final = report["coding"]["submissions"][-1]
    assert (final["bugs_planted"], final["bugs_left"], final["cache"]) == (4, 0, "not attempted")
    assert report["coding"]["exercise"] == "debug_gpt" and report["score"] == 75.0
    assert "planted bugs fixed: 4 of 4; KV cache: not attempted; time taken:" in text
    assert score_rule(False, debug=True) in text


def test_the_same_seed_plants_the_same_file_and_another_seeds_fixed_file_earns_nothing(
        tmp_path: Path, bank: Path, grader) -> None:
    """The grader judges a file by its own line 1, so a passing file of another seed (good_cached.py is seed
    7's, fixed and cached) passes `drill check`; in the mock it is not the planted file and fixes no bug."""
    files = []
    for run in ("a", "b"):
        coding_file = tmp_path / run / "work" / "debug_gpt.py"

        def paste(path: Path = coding_file) -> str:
            files.append(path.read_text(encoding="utf-8"))
            path.write_text(CACHED.read_text(encoding="utf-8"), encoding="utf-8")
            return "submit"

        (tmp_path / run).mkdir()
        code, store, out, _ = sit(tmp_path / run, bank, [paste, "done"], grade=grader, round="debug",
                                  exercise=None, seed=5)
        assert code == 0
    assert files[0] == files[1] and not files[0].startswith("# drill debug_gpt seed=7 ")
    final = last_report(store)["report"]["coding"]["submissions"][-1]
    assert (final["status"], final["bugs_left"], final["cache"]) == ("fail", 4, "not run")
    assert last_report(store)["report"]["score"] == 0.0
    assert "line 1 is no longer this mock's" in " ".join(out.split())


def test_the_debug_credit_rule() -> None:
    assert coding_credit("fail", 10, 20, bugs_planted=4, bugs_left=1, cache="not run") == pytest.approx(0.5625)
    assert coding_credit("fail", 19, 20, bugs_planted=4, bugs_left=0, cache="not attempted") == pytest.approx(0.75)
    assert coding_credit("pass", 20, 20, bugs_planted=4, bugs_left=0, cache="pass") == 1.0
    assert coding_credit("error", 0, 0, bugs_planted=4, bugs_left=None, cache=None) == 0.0
    assert coding_credit("fail", 10, 20) == 0.25  # every other exercise keeps its rule


@pytest.mark.parametrize(("args", "message"), [
    (["--round", "debug", "--exercise", "attention"], "the debug round is debug_gpt; drop --exercise attention"),
    (["--round", "lunch"], "unknown round 'lunch'; choose from standard, debug"),
])
def test_bad_rounds_are_refused_in_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    res = CliRunner().invoke(app, ["mock", *args, "--dir", str(tmp_path / "w")])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0], res.stderr
    assert not (tmp_path / "w").exists()


def test_help_says_the_default_mock_may_pick_the_debug_round() -> None:
    res = CliRunner().invoke(app, ["mock", "--help"], env={"COLUMNS": "200"})
    text = " ".join(res.output.split())
    assert "It may be debug_gpt, the debug round, like any other." in text
    assert "The debug round (--round debug), as onsite loops run it" in text
