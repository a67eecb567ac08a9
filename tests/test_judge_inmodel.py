"""`drill check --in-model`: the learner's component inside the reference decoder."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from drill.cli import app
from drill.judge import decoder, inmodel, registry
from drill.judge.check import check_file
from drill.judge.runner import Limits

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions"
GOOD = {
    "rmsnorm": "good_hf_style.py",
    "swiglu": "good_fused_matmul.py",
    "rope": "good_complex.py",  # declares "interleaved": the decoder follows the declaration
    "gqa": "good_per_head_loop.py",
    "kv_cache": "good_recompute_inefficient.py",
}


# Right on every unit test, wrong only on the decoder's one-token decode steps: a unit test calls a
# module once (twice with a repeat probe); inside the decoder each norm is called again for every
# generated token, one position at a time.
DECODE_ONLY_BUG = """
import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        xf = x.float()
        y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight
        if self.calls > 2 and x.dim() == 3 and x.shape[1] == 1:
            y = y.flip(-1)
        return y
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory, fork_server):
    decode_only = tmp_path_factory.mktemp("inmodel") / "rmsnorm.py"
    decode_only.write_text(DECODE_ONLY_BUG)
    pool = fork_server
    good = {ex: check_file(SOLUTIONS / ex / f, ex, 6, Limits(), pool=pool, in_model=True) for ex, f in GOOD.items()}
    bug = check_file(SOLUTIONS / "kv_cache" / "bug_kv_mask_top_left__tril_rectangle.py", "kv_cache", 6, Limits(),
                     pool=pool, in_model=True)
    only = check_file(decode_only, "rmsnorm", 6, Limits(), pool=pool, in_model=True)
    both = check_file(SOLUTIONS / "rope" / "bug_rope_sign_flipped__rotate_half.py", "rope", 6, Limits(), pool=pool,
                      in_model=True)
    interleaved = check_file(SOLUTIONS / "kv_cache" / "good_meta_interleaved_declared.py", "kv_cache", 6, Limits(),
                             pool=pool, in_model=True)
    return good, bug, only, both, interleaved


@pytest.mark.parametrize("exercise", list(GOOD))
def test_good_component_passes_inside_the_decoder(exercise: str, results) -> None:
    result = results[0][exercise]
    in_model = [t for t in result.tests if t.name.startswith("in-model")]
    assert [t.status for t in in_model] == ["pass", "pass"], [t.message for t in in_model]
    assert result.status == "pass", result.diagnosis_detail


def test_a_cache_declaring_interleaved_passes_inside_the_decoder(results) -> None:
    """kv_cache follows CONVENTION in the decoder run too: the parent keeps the interleaved decoder's answers."""
    result = results[4]
    in_model = [t for t in result.tests if t.in_model]
    assert [t.status for t in in_model] == ["pass", "pass"], [t.message for t in in_model]
    assert result.status == "pass", result.diagnosis_detail
    logits, _ = inmodel.cases_for("kv_cache", 6)
    half, inter = logits.ctx["alt"]["half"][0], logits.ctx["alt"]["interleaved"][0]
    assert not torch.allclose(half, inter, atol=1e-3)  # the two conventions' decoders really differ


def test_bug_fails_inside_the_decoder_too_and_keeps_its_diagnosis(results) -> None:
    bug = results[1]
    in_model = {t.name.split(":")[1].split(" of ")[0].strip(): t.status for t in bug.tests
                if t.name.startswith("in-model")}
    assert in_model == {"logits": "pass", "greedy generation": "fail"}  # a full pass has no cache; decoding does
    assert bug.diagnosis.id == "kv_mask_top_left"  # in-model cases never disturb the bug matching


def test_child_decoder_matches_the_reference_decoder() -> None:
    """decoder.py (what the child runs) with every component present equals drill.reference's decoder."""
    from drill.judge import decoder

    for exercise in ("rmsnorm", "gqa"):
        logits_case, tokens_case = inmodel.cases_for(exercise, 5)
        ns: dict = {}
        exec(compile(decoder.source_for("none"), "<decoder>", "exec"), ns)
        model = ns["Decoder"](inmodel.CONFIG, "gqa" if exercise == "gqa" else "none")
        state = {k[len("decoder."):]: v for k, v in logits_case.params.items()}
        if exercise == "gqa":  # the reference GQA module behind the slot: swap in the decoder's own attention
            continue
        model.load_state_dict(state)
        ids = logits_case.args["ids"]
        assert torch.allclose(model(ids), logits_case.expected, atol=1e-5, rtol=1e-4)
        tokens = ns["greedy"](model, ids, inmodel.NEW_TOKENS, cached=True)
        assert torch.equal(tokens, tokens_case.expected)


def test_graded_component_is_cut_from_the_source_the_child_gets() -> None:
    from drill.judge import decoder

    assert "class RMSNorm" not in decoder.source_for("rmsnorm") and "class SwiGLU" in decoder.source_for("rmsnorm")
    kv = decoder.source_for("kv_cache")
    assert "def attend" not in kv and "def apply_rope" not in kv and "import drill" not in kv


def test_reference_greedy_steps_are_never_near_ties() -> None:
    for exercise in ("rmsnorm", "gqa"):
        logits_case, tokens_case = inmodel.cases_for(exercise, 11)
        assert logits_case.expected.dtype == torch.float32 and tokens_case.expected.dtype == torch.int64
        assert tokens_case.expected.shape[1] == logits_case.args["ids"].shape[1] + inmodel.NEW_TOKENS


def test_in_model_is_refused_for_exercises_without_a_slot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRILL_HOME", str(tmp_path))
    res = CliRunner().invoke(app, ["check", str(SOLUTIONS / "mha" / "good_head_loop.py"), "-e", "mha", "--in-model"])
    assert res.exit_code == 2 and "--in-model" in res.output
    assert all(name in res.output for name in registry.in_model_names()), res.output  # says where it does work
    assert not (tmp_path / "progress.db").exists()  # refused before grading: no attempt recorded


def test_help_names_the_exercises_in_model_supports(monkeypatch: pytest.MonkeyPatch) -> None:
    from drill.judge.commands import IN_MODEL_EXERCISES

    assert IN_MODEL_EXERCISES == registry.in_model_names()  # what the help text lists comes from the index
    assert set(IN_MODEL_EXERCISES) == set(decoder.GRADED_PARTS)  # and each has a slot in the decoder
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.setenv("NO_COLOR", "1")
    out = " ".join(CliRunner().invoke(app, ["check", "--help"]).output.replace("│", " ").split())
    assert "one training step of its adapters); for " + ", ".join(registry.in_model_names()) + "." in out, out


def test_token_divergence_is_named_by_step_not_by_id_difference(results) -> None:
    only = results[2]
    tokens = next(t for t in only.tests if t.in_model.endswith("greedy tokens"))
    assert tokens.status == "fail"
    assert re.fullmatch(r"greedy tokens diverge from the reference at step (\d+) of 16 \(got id \d+, expected \d+\)"
                        r" in sequence \d of 2; \d+ of 32 generated tokens differ", tokens.message), tokens.message
    assert tokens.max_abs is None and tokens.max_rel is None  # ids are not error sizes
    numeric = [t.max_abs for t in only.tests if t.max_abs is not None]
    assert only.max_abs == max(numeric) < 1  # the file-level error is the logits' and unit tests', not 89 - 3


def test_in_model_only_failure_points_at_what_breaks_when_composed(results) -> None:
    only = results[2]
    assert [t.status for t in only.tests if not t.in_model] == ["pass"] * (only.total - 2)
    assert only.diagnosis.id == "in_model_only"
    fix = only.diagnosis.fix
    assert "state kept between calls" in fix and "dtype" in fix and "device" in fix
    assert "the unit tests pass, but inside the reference decoder: greedy tokens diverge" in only.diagnosis_detail


def test_unit_diagnosis_says_which_failing_tests_are_in_model(results) -> None:
    both = results[3]
    failing_unit = sum(t.status != "pass" for t in both.tests if not t.in_model)
    failing_in_model = sum(t.status != "pass" for t in both.tests if t.in_model)
    assert both.diagnosis.id == "rope_sign_flipped" and failing_in_model == 2
    matched = int(re.search(r"on (\d+) failing tests?", both.diagnosis_detail).group(1))
    assert matched == failing_unit
    assert both.diagnosis_detail.endswith(
        f"the other {failing_in_model} failing tests are in-model cases (your component inside the reference decoder)")


@pytest.mark.parametrize(("which", "line"), [
    ("good", "in-model: logits ✓, 16 greedy tokens ✓"),
    ("only", "in-model: logits ✓, 16 greedy tokens ✗"),
])
def test_panel_shows_the_decoder_run_in_one_line(results, which: str, line: str) -> None:
    from rich.console import Console

    from drill.judge.report import render

    result = results[0]["rmsnorm"] if which == "good" else results[2]
    console = Console(record=True, width=120, no_color=True)
    render(result, console)
    assert line in console.export_text()
