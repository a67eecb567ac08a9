"""debug_gpt graded through the fork server: the remaining count and line ranges are exact for every bug
alone and for whole starters, a file fixed bug by bug counts down to 0, a fix elsewhere than the planted line
passes, part 2 is graded once part 1 passes, and the 200-seed sweep (slow)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drill.cli import app
from drill.debug_round import bugs as library
from drill.debug_round.plant import draw, write_starter
from drill.debug_round.round import remaining
from drill.judge.check import check_file
from drill.judge.runner import Limits

FIXTURES = Path(__file__).parent / "fixtures" / "solutions" / "debug_gpt"


def _grade(tmp_path: Path, text: str, pool, seed: int = 3, name: str = "debug_gpt.py"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return check_file(path, "debug_gpt", seed, Limits(), pool=pool)


def _remaining_of(result, written) -> list[tuple[str, tuple[int, int]]]:
    return [(bug.id, lines) for bug, lines in remaining(result, written)]


def _seed_planting(bug_id: str) -> int:
    """A seed whose one-bug file plants `bug_id` (so the header rebuilds it)."""
    return next(s for s in range(10_000) if draw(s, 1).ids == (bug_id,))


def test_every_bug_alone_counts_one_at_its_lines(tmp_path: Path, fork_server) -> None:
    for bug in library.LIBRARY:
        written = write_starter(_seed_planting(bug.id), 1)
        r = _grade(tmp_path, written.text, fork_server)
        assert r.status == "fail" and r.diagnosis.id == "dgpt_bugs_remain", (bug.id, r.diagnosis_detail)
        assert _remaining_of(r, written) == [(bug.id, written.lines[bug.id])], bug.id
        a, b = written.lines[bug.id]
        assert r.diagnosis_detail.startswith("1 of 1 planted bugs remain, planted at line")
        assert (f"line {a}" if a == b else f"lines {a}-{b}") in r.diagnosis_detail
        cache = next(t for t in r.tests if t.name.startswith("part 2"))
        assert cache.status == "not_run" and cache.message == "graded once part 1 passes"


@pytest.mark.parametrize(("seed", "k"), [(7, 4), (0, 8), (1, 8), (2, 8), (3, 2)])
def test_a_starter_counts_all_its_bugs(tmp_path: Path, fork_server, seed: int, k: int) -> None:
    written = write_starter(seed, k)
    r = _grade(tmp_path, written.text, fork_server, seed=seed + 100)
    assert r.diagnosis.id == "dgpt_bugs_remain"
    assert _remaining_of(r, written) == [(b, written.lines[b]) for b in written.plan.ids]
    assert r.diagnosis_detail.startswith(f"{k} of {k} planted bugs remain")


def _revert(text: str, written, bug_id: str) -> str:
    fixed, planted = library.BY_ID[bug_id].texts(written.plan.mlp)
    if planted:
        assert text.count(planted) == 1
        return text.replace(planted, fixed)
    lines = text.split("\n")
    at = written.lines[bug_id][1] - 1  # the line the deleted one sat before
    return "\n".join(lines[:at] + [fixed.rstrip("\n")] + lines[at:])


def test_fixing_bug_by_bug_counts_down_to_zero_then_part_2(tmp_path: Path, fork_server) -> None:
    written = write_starter(7, 4)
    text = written.text
    # fix from the end of the file, so the line numbers of the bugs left stay those of the file as written
    left = list(written.plan.ids)
    for bug_id in reversed(written.plan.ids):
        text = _revert(text, written, bug_id)
        left.remove(bug_id)
        r = _grade(tmp_path, text, fork_server)
        if left:
            assert _remaining_of(r, written) == [(b, written.lines[b]) for b in left]
    assert r.diagnosis.id == "dgpt_cache_not_attempted" and r.status == "fail"
    assert "0 planted bugs remain" in r.diagnosis_detail
    cached = (FIXTURES / "good_cached.py").read_text(encoding="utf-8")
    assert _grade(tmp_path, cached, fork_server).status == "pass"


def test_a_fix_away_from_the_planted_line_passes_part_1(tmp_path: Path, fork_server) -> None:
    """Behaviour, not text: the missing 1/sqrt(d) put on q in forward instead of in scores."""
    written = write_starter(7, 4)
    text = written.text
    for bug_id in written.plan.ids:
        if bug_id != "dgpt_missing_scale":
            text = _revert(text, written, bug_id)
    text = text.replace("        att = self.scores(q, k)\n",
                        "        q = q / math.sqrt(q.size(-1))\n        att = self.scores(q, k)\n")
    r = _grade(tmp_path, text, fork_server)
    assert r.diagnosis.id == "dgpt_cache_not_attempted", r.diagnosis_detail


def test_an_own_bug_is_named_with_its_check_and_function(tmp_path: Path, fork_server) -> None:
    text = (FIXTURES / "bug_dgpt_own_bug__layernorm_eps.py").read_text(encoding="utf-8")
    r = _grade(tmp_path, text, fork_server)
    assert r.diagnosis.id == "dgpt_own_bug"
    assert "0 of 4 planted bugs remain" in r.diagnosis_detail and "Block.forward" in r.diagnosis_detail


def test_a_renamed_parameter_is_named_with_the_starters_name(tmp_path: Path, fork_server) -> None:
    text = (FIXTURES / "bug_dgpt_renamed_parameter__qkv.py").read_text(encoding="utf-8")
    r = _grade(tmp_path, text, fork_server)
    assert r.diagnosis.id == "dgpt_renamed_parameter"
    assert "`c_attn.weight` (the starter's name; yours has `qkv.weight` instead)" in r.diagnosis_detail


def test_the_cli_explains_and_json_lists_every_test(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("DRILL_NO_SERVER", "1")
    runner = CliRunner()
    runner.invoke(app, ["start", "debug_gpt", str(tmp_path), "--seed", "7"])
    path = str(tmp_path / "debug_gpt.py")
    out = runner.invoke(app, ["check", path, "--explain", "--seed", "3"])
    assert out.exit_code == 1, out.output
    text = re.sub(r"\s+", " ", out.output)
    for bug_id in draw(7, 4).ids:
        assert bug_id in text
    doc = runner.invoke(app, ["check", path, "--json", "--seed", "3"])
    data = json.loads(doc.output)
    assert data["exercise"] == "debug_gpt" and data["diagnosis"]["id"] == "dgpt_bugs_remain"
    assert len(data["tests"]) == len(library.FUNCTIONS) + 5
    bad = tmp_path / "other" / "debug_gpt.py"
    bad.parent.mkdir()
    bad.write_text("\n".join(Path(path).read_text(encoding="utf-8").split("\n")[1:]), encoding="utf-8")
    refused = runner.invoke(app, ["check", str(bad)])
    assert refused.exit_code == 2
    assert "this file was not written by `drill start debug_gpt`" in refused.output
    assert len(refused.output.strip().splitlines()) == 1


@pytest.mark.slow
def test_the_count_is_exact_for_200_seeds(tmp_path: Path, fork_server) -> None:
    for seed in range(200):
        written = write_starter(seed, 1 + seed % 8)
        r = _grade(tmp_path, written.text, fork_server, seed=seed)
        assert _remaining_of(r, written) == [(b, written.lines[b]) for b in written.plan.ids], seed
