"""Issue 31 §1 and §3 on real fixture files, through `drill check` (CLI) and `check_file`.

The rules themselves are tested on a made-up exercise in
test_judge_diagnosis_rules.py; here, the cases the issue reported: alibi's
slope exponent off by one is named and shows `alibi_slopes(1)` (got 1,
expected 0.0039); flash_attention's top-left causal no longer counts its 12
value failures twice; a 0-dim loss shows its value; a file with two known
mistakes names both; each of these gets the same name on every seed; and a
pass shows its error against the tolerance, the absolute sizes only with
--verbose.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drill.cli import app
from drill.judge.check import check_file
from drill.judge.runner import Limits

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions"
SEEDS = (20261129, 11, 2027)
SLOPE_OFFSET = SOLUTIONS / "alibi" / "bug_alibi_slope_offset__slopes_from_zero.py"
TOP_LEFT = SOLUTIONS / "flash_attention" / "bug_flash_causal_top_left__mask_and_skip.py"
NOT_TILED = SOLUTIONS / "flash_attention" / "bug_missing_scale__two_bugs_flash_not_tiled.py"
LOG2_LOSS = SOLUTIONS / "cross_entropy" / "bug_unknown__log2_bits.py"
TWO_KNOWN = SOLUTIONS / "gqa" / "bug_gqa_not_causal__two_bugs_gqa_tiled_kv.py"


@pytest.fixture(autouse=True)
def _plain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "100")


def _flat(text: str) -> str:
    return " ".join(text.replace("│", " ").replace("╭", " ").replace("╰", " ").split())


def _check(*args: str):
    return CliRunner().invoke(app, ["check", *args])


def test_alibi_slope_exponent_off_by_one_is_named_with_the_simplest_failing_case() -> None:
    res = _check(str(SLOPE_OFFSET), "-e", "alibi", "--seed", str(SEEDS[0]))
    assert res.exit_code == 1, res.output
    flat = _flat(res.output)
    assert "[alibi_slope_offset]" in flat and "head 0 gets slope 1" in flat, flat
    assert "2 ** (-8 * (h + 1) / n)" in flat  # the fix
    assert "simplest failing test: 'alibi_slopes(1) (a power of two)', got 1, expected 0.00390625" in flat, flat
    first = re.search(r"✗ (.+?) (\d+/\d+ values off|got )", flat)
    assert first and first[1].startswith("alibi_slopes(1)"), flat  # the first failing test listed is that one too


def test_the_other_failing_tests_do_not_count_those_the_named_mistake_explains(fork_server) -> None:
    top_left = check_file(TOP_LEFT, "flash_attention", SEEDS[0], Limits(), pool=fork_server)
    assert top_left.diagnosis.id == "flash_causal_top_left", top_left.diagnosis_detail
    assert "also failing: flash_causal_tiles_not_skipped" in top_left.diagnosis_detail
    assert "match no known mistake" not in top_left.diagnosis_detail, top_left.diagnosis_detail
    not_tiled = check_file(NOT_TILED, "flash_attention", SEEDS[0], Limits(), pool=fork_server)
    assert not_tiled.diagnosis.id == "missing_scale" and "also failing: flash_not_tiled" in not_tiled.diagnosis_detail
    assert "other failing tests (values) match no known mistake" not in not_tiled.diagnosis_detail


def test_a_scalar_loss_shows_its_value_not_an_empty_index() -> None:
    res = _check(str(LOG2_LOSS), "-e", "cross_entropy", "--seed", str(SEEDS[0]), "--json")
    doc = json.loads(res.output)
    assert doc["diagnosis"]["id"] == "unknown"
    messages = [t["message"] for t in doc["tests"] if t["status"] == "fail"] + [doc["diagnosis"]["detail"]]
    assert not any("[]" in m for m in messages), messages
    assert re.search(r"output: got \S+, expected \S+ \(a scalar\)", doc["diagnosis"]["detail"]), doc["diagnosis"]


def test_two_known_mistakes_are_both_named(fork_server) -> None:
    result = check_file(TWO_KNOWN, "gqa", SEEDS[0], Limits(), pool=fork_server)
    assert result.diagnosis.id == "gqa_not_causal" and result.diagnosis_partial, result.diagnosis_detail
    assert "another known mistake" in result.diagnosis_detail and "(gqa_tiled_kv" in result.diagnosis_detail


@pytest.mark.parametrize("path", [SLOPE_OFFSET, TOP_LEFT, TWO_KNOWN], ids=lambda p: p.parent.name)
def test_the_same_file_gets_the_same_diagnosis_on_every_seed(path: Path, fork_server) -> None:
    seen = set()
    for seed in SEEDS:
        r = check_file(path, path.parent.name, seed, Limits(), pool=fork_server)
        seen.add((r.diagnosis.id, r.diagnosis_partial, "another known mistake" in r.diagnosis_detail))
    assert len(seen) == 1, seen


def test_a_pass_shows_its_error_against_the_tolerance_and_absolute_sizes_only_when_verbose() -> None:
    good = SOLUTIONS / "cross_entropy" / "good_logsumexp_by_hand.py"
    plain = _flat(_check(str(good), "-e", "cross_entropy", "--seed", "3").output)
    assert "PASS" in plain and re.search(r"every error within tolerance: the largest is (under 0\.1|[\d.]+)% of "
                                         r"its tolerance", plain), plain
    assert "max abs err" not in plain
    verbose = _flat(_check(str(good), "-e", "cross_entropy", "--seed", "3", "--verbose").output)
    assert "of its tolerance" in verbose and "max abs err" in verbose
    doc = json.loads(_check(str(good), "-e", "cross_entropy", "--seed", "3", "--json").output)
    assert doc["status"] == "pass" and isinstance(doc["max_abs_err"], float)  # --json keeps its fields
