"""Mistakes of real code the grader names since issue 31 (flash_attention, decoder_block, moe, rmsnorm_backward).

test_judge_fixtures.py checks each fixture's id on its seed; here each new
fixture is graded on other seeds too and what the verdict says is checked:
a single mistake is named as one (not "one of several"), with no "other
failing tests" left over, only the tests the mistake can touch fail, and a
file with two mistakes made by one convention (DeepSeek's gate, OLMo 2's block) names both.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from drill.judge.check import check_file
from drill.judge.runner import Limits

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions"
LIMITS = Limits(timeout_s=60, cpu_s=60, memory_mb=2048)

# (fixture, what its verdict's detail names, which failing tests: a substring every failing test's name holds)
SINGLE = [
    ("flash_attention/bug_flash_lse_phantom_key__running_lse_zero.py", "a phantom key of score 0", None),
    ("flash_attention/bug_flash_lse_empty_row_finite__where_zero.py", "lse = 0 on rows with no visible key",
     "no visible key"),
    ("flash_attention/bug_flash_lse_empty_row_finite__log_l_plus_tiny.py", "finite lse on rows with no visible key",
     "no visible key"),
    ("decoder_block/bug_block_norm_on_output__olmo2_reordered.py", "out = h + mlp_norm(mlp(h))", None),
    ("decoder_block/bug_block_qk_norm__qwen3_per_head.py", "per head", None),
    ("decoder_block/bug_block_qk_norm__full_projection.py", "over the whole projection", None),
    ("decoder_block/bug_wrong_scale__sqrt_d_model.py", "scaled by 1/sqrt(d_model)", None),
    ("moe/bug_moe_aux_softmax_twice__helper_given_probs.py", "softmax(p).mean(0)", "aux loss"),
    ("moe/bug_moe_aux_deepseek_sequence__seq_aux_alpha.py", "alpha=0.001", "aux loss"),
    ("rmsnorm_backward/bug_rmsb_weight_twice__weighted_g_times_weight.py", "mean(g * weight * x_hat)", "grad_x"),
    ("rmsnorm_backward/bug_rmsb_projection_r_squared__rms_squared.py", "x * r**2 * mean(g * x)", "grad_x"),
]
DEEPSEEK_GATE = "moe/bug_moe_aux_deepseek_sequence__two_bugs_moe_renorm_missing.py"
OLMO2_BLOCK = "decoder_block/bug_block_norm_on_output__two_bugs_block_qk_norm.py"


def _grade(pool, rel: str, seed: int):
    return check_file(SOLUTIONS / rel, rel.split("/")[0], seed, LIMITS, pool=pool)


def _expected_id(rel: str) -> str:
    return Path(rel).name[len("bug_"):].split("__", 1)[0]


def _assert_named_alone(result, rel: str, names: str, failing_in: str | None) -> None:
    assert result.status == "fail" and result.diagnosis.id == _expected_id(rel), (rel, result.diagnosis_detail)
    assert not result.diagnosis_partial, result.diagnosis_detail
    assert names in result.diagnosis_detail, result.diagnosis_detail
    assert "other failing test" not in result.diagnosis_detail, result.diagnosis_detail
    if failing_in is not None:
        failing = [t.name for t in result.tests if t.status != "pass"]
        assert failing and all(failing_in in name for name in failing), failing


@pytest.mark.parametrize(("rel", "names", "failing_in"), SINGLE, ids=[Path(r).stem for r, _, _ in SINGLE])
def test_each_new_mistake_is_named_alone_and_says_which(fork_server, rel: str, names: str,
                                                        failing_in: str | None) -> None:
    _assert_named_alone(_grade(fork_server, rel, 5), rel, names, failing_in)


def test_deepseeks_gate_is_named_as_deepseeks_with_the_missing_renormalisation_beside_it(fork_server) -> None:
    result = _grade(fork_server, DEEPSEEK_GATE, 5)
    assert result.diagnosis.id == "moe_aux_deepseek_sequence" and result.diagnosis_partial
    assert (f"and moe_renorm_missing together (DeepSeek's gate: top-k weights not renormalised and its "
            f"sequence-wise aux, alpha=0.003) on {result.total} failing tests") in result.diagnosis_detail


def test_olmo2s_block_names_both_of_its_conventions(fork_server) -> None:
    result = _grade(fork_server, OLMO2_BLOCK, 5)
    assert result.diagnosis.id == "block_norm_on_output" and result.diagnosis_partial
    assert "and block_qk_norm together (OLMo 2's block: norms on the branch outputs" in result.diagnosis_detail
    assert "other failing test" not in result.diagnosis_detail  # the fp16 overflow its layout causes aside


def test_a_finite_empty_row_lse_is_not_named_when_the_rows_nan_instead(fork_server) -> None:
    """The finite-lse family fits the learner's own values: a NaN there is still the NaN mistake."""
    result = _grade(fork_server, "flash_attention/bug_flash_masked_row_nan__divide_by_zero.py", 5)
    assert result.diagnosis.id == "flash_masked_row_nan", result.diagnosis_detail


@pytest.mark.slow
@pytest.mark.parametrize("seed", [11, 2027, 424242])
def test_the_new_names_hold_on_other_seeds(fork_server, seed: int) -> None:
    for rel, names, failing_in in SINGLE:
        _assert_named_alone(_grade(fork_server, rel, seed), rel, names, failing_in)
    assert _grade(fork_server, DEEPSEEK_GATE, seed).diagnosis.id == "moe_aux_deepseek_sequence"
    assert _grade(fork_server, OLMO2_BLOCK, seed).diagnosis.id == "block_norm_on_output"
