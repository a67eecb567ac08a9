"""`drill check DIR`: every exercise file in a folder, graded concurrently, one summary table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drill.cli import app
from drill.errors import UserError
from drill.judge.batch import expand

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions"


@pytest.fixture()
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DRILL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    d = tmp_path / "mine"
    d.mkdir()
    shutil.copy(SOLUTIONS / "rope" / "good_no_convention.py", d / "rope.py")
    shutil.copy(SOLUTIONS / "kv_cache" / "good_position_mask.py", d / "kv_cache.py")
    shutil.copy(SOLUTIONS / "gqa" / "bug_gqa_not_causal__no_mask.py", d / "gqa.py")
    (d / "notes.py").write_text("print('not an exercise')\n")
    return d


def test_dir_grades_each_exercise_file_with_one_table(workdir: Path) -> None:
    res = CliRunner().invoke(app, ["check", str(workdir), "--seed", "3"])
    assert res.exit_code == 1, res.output  # one of the three fails
    out = res.output
    assert "2/3 passed" in out
    for name in ("rope.py", "kv_cache.py", "gqa.py"):
        assert name in out
    assert "notes.py" not in out
    assert "gqa_not_causal" in out  # the failure's panel and its table row
    assert out.count("PASS") >= 2


def test_dir_json_lists_every_result(workdir: Path) -> None:
    res = CliRunner().invoke(app, ["check", str(workdir), "--seed", "3", "--json", "-j", "2"])
    docs = json.loads(res.stdout)
    assert [d["exercise"] for d in docs] == ["rope", "gqa", "kv_cache"]  # canonical exercise order
    assert [d["status"] for d in docs] == ["pass", "fail", "pass"]
    assert res.exit_code == 1


def test_dir_all_good_exits_zero(workdir: Path) -> None:
    (workdir / "gqa.py").unlink()
    res = CliRunner().invoke(app, ["check", str(workdir), "--seed", "4"])
    assert res.exit_code == 0, res.output
    assert "2/2 passed" in res.output


def test_dir_usage_errors(tmp_path: Path, workdir: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    for args in (["check", str(empty)], ["check", str(workdir), "-e", "rope"], ["check", str(tmp_path / "nope")]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2, (args, res.output)
    with pytest.raises(UserError, match="no exercise files"):
        expand([empty], None)


def test_expand_deduplicates_and_keeps_order(workdir: Path) -> None:
    items = expand([workdir, workdir / "rope.py"], None)
    assert [p.name for p, _ in items] == ["rope.py", "gqa.py", "kv_cache.py"]


def test_a_folder_with_one_exercise_file_still_ends_with_the_table(workdir: Path) -> None:
    for name in ("kv_cache.py", "gqa.py"):
        (workdir / name).unlink()
    res = CliRunner().invoke(app, ["check", str(workdir), "--seed", "4"])
    assert res.exit_code == 0, res.output
    assert "1/1 passed" in res.output and "diagnosis / advisories" in res.output
    alone = CliRunner().invoke(app, ["check", str(workdir / "rope.py"), "--seed", "4"])
    assert alone.exit_code == 0 and "1/1 passed" not in alone.output  # a file named alone: its panel only


def test_in_model_on_a_folder_skips_exercises_without_a_slot(tmp_path: Path, workdir: Path) -> None:
    """A lone mha.py is refused --in-model (exit 2); a folder holding only mha.py is graded without it."""
    d = tmp_path / "only_mha"
    d.mkdir()
    shutil.copy(SOLUTIONS / "mha" / "good_head_loop.py", d / "mha.py")
    lone = CliRunner().invoke(app, ["check", str(d / "mha.py"), "--in-model"])
    assert lone.exit_code == 2 and "not for mha" in lone.output
    folder = CliRunner().invoke(app, ["check", str(d), "--in-model", "--seed", "2"])
    assert folder.exit_code == 0, folder.output
    assert "1/1 passed" in folder.output and "in-model:" not in folder.output
