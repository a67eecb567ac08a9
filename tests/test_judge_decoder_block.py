"""`decoder_block`: the hidden tests' coverage, CONVENTION, `--in-model`, CLI and mock, and a seed sweep.

Fixtures' verdicts at the suite's seed are tests/test_judge_fixtures.py's;
here they are graded at other seeds too (nothing may flip).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from drill.judge import decoder
from drill.judge.check import check_file
from drill.judge.runner import Limits
from drill.judge.specs import decoder_block as spec

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions" / "decoder_block"
GOOD = SOLUTIONS / "good_hf_llama.py"
SEEDS = (1, 2, 3, 4, 5)
LIMITS = Limits(timeout_s=120, cpu_s=120, memory_mb=2048)


@pytest.mark.parametrize("seed", SEEDS)
def test_cases_cover_the_contract(seed: int) -> None:
    cases = spec.make_cases(seed)
    for case in cases:
        case.expected, case.expected_grads = spec.reference(case)
        pos = case.args["positions"]
        assert pos.dtype == torch.int64 and bool((pos[1:] > pos[:-1]).all()), case.name  # strictly increasing
        for norm in ("attn_norm.weight", "mlp_norm.weight"):
            assert not torch.allclose(case.params[norm].float(), torch.ones(case.params[norm].shape)), case.name
    positions = [c.args["positions"] for c in cases]
    assert any(int(p[0]) > 0 and bool((p.diff() == 1).all()) for p in positions if len(p) > 1)  # an offset
    assert any(bool((p.diff() > 1).any()) for p in positions)  # gaps
    assert any(len(p) == 1 for p in positions)
    assert {c.ctx["dtype"] for c in cases} == {"float32", "float16", "bfloat16"}
    assert all(c.module_dtype == getattr(torch, c.ctx["dtype"]) for c in cases if c.ctx["dtype"] != "float32")
    graded = [c for c in cases if c.wants_grads]
    want = {"input:x"} | {f"param:{p}" for p in decoder.BLOCK_PATHS}
    assert len(graded) >= 3 and all(set(c.expected_grads) == want for c in graded)
    assert {(c.ctx["n_heads"], c.ctx["n_kv_heads"]) for c in cases} >= {(4, 4), (4, 1), (4, 2), (6, 2)}
    assert any(c.repeat for c in cases) and any(c.ctx["base"] != 10000.0 for c in cases)


def test_both_conventions_are_computed_and_the_declared_one_kept() -> None:
    cases = spec.make_cases(4)
    for case in cases:
        case.expected, case.expected_grads = spec.reference(case)
    half = cases[0].expected
    assert spec.prepare(cases, {"CONVENTION": {"present": True, "value": "interleaved", "type": "str"}}) is None
    assert not torch.allclose(cases[0].expected, half)
    diagnosis, detail = spec.prepare(cases, {"CONVENTION": {"present": True, "value": "meta", "type": "str"}})
    assert diagnosis.id == "rope_convention_invalid"
    assert detail == 'CONVENTION is \'meta\'; expected "half" or "interleaved"'


def test_the_graded_block_is_cut_from_the_decoder_the_child_gets() -> None:
    source = decoder.source_for("decoder_block")
    for gone in ("class Block(", "class Attention(", "class SwiGLU(", "def attend(", "def apply_rope("):
        assert gone not in source, gone
    assert "class RMSNorm(" in source and "class BlockSlot(" in source  # the final norm stays
    assert "class Block(" in decoder.source_for("rmsnorm")


@pytest.fixture(scope="module")
def in_model(fork_server) -> dict:
    pool = fork_server
    return {
        "good": check_file(SOLUTIONS / "good_meta_complex_polar.py", "decoder_block", 6, LIMITS, pool=pool,
                           in_model=True),
        "bug": check_file(SOLUTIONS / "bug_block_post_norm__norm_after_add.py", "decoder_block", 6, LIMITS,
                          pool=pool, in_model=True),
    }


def test_a_good_block_passes_as_every_layer_of_the_decoder(in_model: dict) -> None:
    result = in_model["good"]  # declares "interleaved": the decoder's answers follow the declaration
    names = [t.name for t in result.tests if t.in_model]
    assert len(names) == 2 and "re-running the sequence each step" in names[1]
    assert result.status == "pass", [(t.name, t.message) for t in result.tests if t.status != "pass"]


def test_a_bug_fails_inside_the_decoder_too_and_keeps_its_diagnosis(in_model: dict) -> None:
    result = in_model["bug"]
    assert result.diagnosis.id == "block_post_norm"
    assert [t.status for t in result.tests if t.in_model] == ["fail", "fail"]
    assert "in-model cases" in result.diagnosis_detail


@pytest.mark.slow
def test_no_fixture_verdict_flips_across_seeds() -> None:
    from test_judge_fixtures import verdict_flips

    assert not verdict_flips("decoder_block", SEEDS[:4], LIMITS)


# ---------------------------------------------------------------- CLI and mock


from test_judge_cli import run  # noqa: E402 - the CLI tests' runner; `home` (a private DRILL_HOME) is conftest's


def test_start_hint_and_check_through_the_cli(home: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    assert run("start", "decoder_block", str(work)).exit_code == 0
    starter = work / "decoder_block.py"
    text = starter.read_text()
    assert 'CONVENTION = "half"' in text and "attn_norm.weight" in text
    doc = json.loads(run("check", str(starter), "--json").stdout)
    assert doc["diagnosis"]["id"] == "not_implemented"
    hints = run("hint", "decoder_block", "3")
    assert hints.exit_code == 0 and "Hint 3/3" in hints.output
    shutil.copy(SOLUTIONS / "bug_rope_convention_invalid__llama.py", starter)
    res = run("check", str(starter))
    assert res.exit_code == 1 and "CONVENTION is 'llama'" in res.output
    shutil.copy(GOOD, starter)
    res = run("check", str(starter), "--in-model", "--seed", "2")
    assert res.exit_code == 0 and "in-model: logits ✓" in res.output, res.output


def test_a_mock_can_be_run_on_decoder_block(tmp_path: Path, bank: Path) -> None:
    from test_mock import RIGHT, _real_grader, last_report, sit

    work = tmp_path / "work"
    steps = [(60, RIGHT), (200, RIGHT), lambda: (shutil.copy(GOOD, work / "decoder_block.py"), "submit")[1]]
    code, store, out, _ = sit(tmp_path, bank, steps, grade=_real_grader(), exercise="decoder_block")
    assert code == 0, out
    mock = last_report(store)
    assert mock["exercise"] == "decoder_block" and mock["report"]["coding"]["submissions"][-1]["status"] == "pass"
