"""sampling grading: what the hidden cases are made of, the decision margins, exact zeros and the variants.

Fixture verdicts (good_* pass, bug_<id>__* get <id>) are checked for every
file by test_judge_fixtures.py on one seed; here: every option alone and
combined is in every seed's cases, no case sits within rounding of a
decision, the knob pipeline at its defaults is the reference, every known
mistake shows on every seed (so its fixture cannot pass by luck), the
exact-zero rule, and a few fixtures over several seeds through the fork server.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from drill.judge import registry
from drill.judge.check import _tolerance_of, check_file
from drill.judge.compare import compare
from drill.judge.runner import Limits
from drill.judge.spec import Tolerance
from drill.judge.specs import sampling
from drill.judge.specs._sampling_bugs import SAMPLING_VARIANTS, pipeline

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions" / "sampling"
SEEDS = (0, 1, 7, 20261129)
TOL = _tolerance_of(sampling.SPEC)


def _opts(case) -> dict:
    return {k: case.args.get(k, sampling.DEFAULTS[k]) for k in sampling.ARG_ORDER}


@pytest.fixture(scope="module")
def graded_cases() -> dict[int, list]:
    out = {}
    for seed in SEEDS:
        cases = sampling.make_cases(seed)
        for c in cases:
            c.expected, c.expected_grads = sampling.reference(c)
        out[seed] = cases
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_every_option_alone_and_combined_every_dtype_and_magnitude(seed: int, graded_cases: dict) -> None:
    cases = graded_cases[seed]
    opts = [_opts(c) for c in cases]
    temps = {o["temperature"] for o in opts}
    assert any(t < 1 for t in temps) and any(t > 1 for t in temps) and 1.0 in temps
    ks = [(o["top_k"], c.args["logits"].shape[-1]) for o, c in zip(opts, cases, strict=True)]
    assert {None, 0, 1} <= {k for k, _ in ks}
    assert any(k is not None and 1 < k < v for k, v in ks) and any(k is not None and k >= v for k, v in ks)
    ps = {o["top_p"] for o in opts}
    assert {None, 1.0} <= ps and any(p is not None and p < 0.05 for p in ps) and any(p and 0.3 < p < 1 for p in ps)
    assert {o["min_p"] for o in opts} >= {None, 1.0} and any(m and m < 1 for m in (o["min_p"] for o in opts))
    alone = [sum(o[k] not in (None, sampling.DEFAULTS[k], 0) for k in sampling.ARG_ORDER) for o in opts]
    assert max(alone) == 4 and alone.count(1) >= 8  # options alone, and all four together
    assert any(c.args == {"logits": c.args["logits"]} for c in cases)  # the defaults themselves
    dtypes = {c.args["logits"].dtype for c in cases}
    assert dtypes == {torch.float32, torch.float16, torch.bfloat16}
    assert all(c.out_dtype == torch.float32 and c.ctx["tol"] == "float32" for c in cases)  # fp32 out, always
    big = [float(c.args["logits"].float().abs().max()) for c in cases]
    assert max(big) > 5000 and any(float(c.args["logits"].float().max()) < -1e4 for c in cases)  # -1e4 fills above
    assert max(c.args["logits"].shape[-1] for c in cases) >= 2000
    assert sum(c.repeat is not None for c in cases) == 1 and cases[-1].repeat is not None
    assert len({tuple(c.args["logits"].shape) for c in cases}) == len(cases)  # no shape twice (see Distinct)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_row_is_clear_of_every_threshold(seed: int, graded_cases: dict) -> None:
    """What makes every correct formulation keep the same tokens (the contract's "no ties")."""
    for c in graded_cases[seed]:
        o = _opts(c)
        for row in c.args["logits"]:
            assert sampling.decisive(row.float() / o["temperature"], o["top_k"], o["top_p"], o["min_p"]), c.name


def test_decisive_refuses_rows_at_a_threshold() -> None:
    tied_k = torch.tensor([3.0, 2.0, 2.0, 0.0])  # the 2nd and 3rd logits tie at top_k = 2
    assert not sampling.decisive(tied_k, 2, None, None) and sampling.decisive(tied_k, 1, None, None)
    p = torch.tensor([0.5, 0.3, 0.2]).log()  # mass above token 2 is exactly 0.8
    assert not sampling.decisive(p, None, 0.8, None) and sampling.decisive(p, None, 0.7, None)
    assert not sampling.decisive(torch.tensor([0.0, math.log(0.25)]), None, None, 0.25)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_reference_paths_and_the_knob_pipeline_agree(seed: int, graded_cases: dict) -> None:
    from drill.reference.sampling import filter_logits, keep_mask

    for c in graded_cases[seed]:
        a, o = c.args, _opts(c)
        keep = keep_mask(a["logits"], **o, impl="math")
        assert torch.equal(keep, keep_mask(a["logits"], **o, impl="fused")), c.name
        assert torch.equal(c.zeros, ~keep), c.name
        for got in (filter_logits(a["logits"], **o, impl="fused"), pipeline(a["logits"], *o.values())):
            assert compare(got, c.expected, TOL(c), zeros=c.zeros).ok, c.name
        assert torch.allclose(c.expected.sum(-1), torch.ones(c.expected.shape[0]), atol=1e-5)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_known_mistake_shows_on_every_seed(seed: int, graded_cases: dict) -> None:
    cases = graded_cases[seed]
    for diagnosis_id, label, fn in SAMPLING_VARIANTS:
        outs = [(c, out if isinstance(out, tuple) else (out, None)) for c in cases if (out := fn(c)) is not None]
        shown = [c.name for c, (out, unknown) in outs
                 if not compare(out, c.expected, TOL(c), ignore=unknown, zeros=c.zeros).ok]
        assert shown, (diagnosis_id, label)


def test_a_removed_token_must_be_exactly_zero() -> None:
    expected = torch.tensor([[0.75, 0.25, 0.0]])
    zeros = torch.tensor([[False, False, True]])
    tol = Tolerance(2e-5, 1e-4)
    tiny = torch.tensor([[0.75, 0.25, 1e-30]])
    assert compare(tiny, expected, tol).ok  # a tolerance alone lets it through
    verdict = compare(tiny, expected, tol, zeros=zeros)
    assert not verdict.ok and verdict.reason == "values" and "must be exactly 0" in verdict.message
    assert compare(torch.tensor([[0.75, 0.25, 0.0]]), expected, tol, zeros=zeros).ok
    assert compare(torch.tensor([[0.75, 0.25, -0.0]]), expected, tol, zeros=zeros).ok


def test_no_forbidden_ops_and_gradients_are_not_graded() -> None:
    assert sampling.SPEC.forbidden == () and sampling.SPEC.forbidden_classes == ()
    assert not any(c.wants_grads for c in sampling.make_cases(5))


def test_the_defaults_come_from_the_index() -> None:
    assert sampling.DEFAULTS == registry.entry("sampling").defaults
    assert sampling.DEFAULTS == {"temperature": 1.0, "top_k": None, "top_p": None, "min_p": None}


@pytest.fixture(scope="module")
def pool(fork_server):
    return fork_server


@pytest.mark.slow
@pytest.mark.parametrize("name,want", [
    ("good_threshold_based.py", "pass"),
    ("good_row_loop.py", "pass"),
    ("bug_sampling_top_p_crossing_dropped__cumsum_lt.py", "sampling_top_p_crossing_dropped"),
    ("bug_sampling_min_p_mixed__threshold_before_top_p.py", "sampling_min_p_mixed"),
    ("bug_sampling_no_fp32_upcast__half_math.py", "sampling_no_fp32_upcast"),
    ("bug_no_max_subtraction__manual_softmax.py", "no_max_subtraction"),
    # issue 31: once named after whichever catalogued mistake fitted a few of the seed's tests
    ("bug_sampling_top_k_off_by_one__masked_fill_le.py", "sampling_top_k_off_by_one"),
    ("bug_sampling_filter_missing__no_top_p.py", "sampling_filter_missing"),
    ("bug_sampling_filter_missing__no_min_p.py", "sampling_filter_missing"),
    ("bug_sampling_filter_missing__no_top_k.py", "sampling_filter_missing"),
    ("bug_sampling_top_p_complement__descending_one_minus.py", "sampling_top_p_complement"),
    ("bug_sampling_top_p_complement__hf_rule_descending.py", "sampling_top_p_complement"),
])
def test_fixtures_over_several_seeds(name: str, want: str, verdicts_over_seeds) -> None:
    for seed, got, partial, detail in verdicts_over_seeds("sampling", SOLUTIONS / name, (2, 3, 11, 31)):
        assert got == want and not partial, (seed, got, detail)


@pytest.mark.parametrize("name,label", [
    ("bug_sampling_filter_missing__no_top_p.py", "top-p never applied"),
    ("bug_sampling_filter_missing__no_min_p.py", "min-p never applied"),
    ("bug_sampling_filter_missing__no_top_k.py", "top-k never applied"),
])
def test_a_missing_filter_is_named_with_the_step_it_lacks(name: str, label: str, verdicts_over_seeds) -> None:
    """Code without a top-p (or min-p) step: once named after whichever pattern fitted the seed's tests."""
    for seed, got, partial, detail in verdicts_over_seeds("sampling", SOLUTIONS / name, (0, 5, 9)):
        assert got == "sampling_filter_missing" and not partial and f"({label})" in detail, (seed, got, detail)


def test_a_late_temperature_with_the_crossing_token_dropped_names_both(verdicts_over_seeds) -> None:
    """The temperature first (it moves every tempered test), the crossing token as the second mistake."""
    path = SOLUTIONS / "bug_sampling_temperature_late__two_bugs_sampling_top_p_crossing_dropped.py"
    for seed, got, partial, detail in verdicts_over_seeds("sampling", path, (0, 5, 9)):
        assert got == "sampling_temperature_late" and partial, (seed, got, detail)
        assert "sampling_top_p_crossing_dropped" in detail and "more than one mistake" in detail, detail


def test_the_worst_mismatch_is_shown_when_no_mistake_matches(pool) -> None:
    r = check_file(SOLUTIONS / "bug_unknown__softmax_over_batch.py", "sampling", 4, Limits(), pool=pool)
    assert r.diagnosis.id == "unknown" and "worst at" in r.diagnosis_detail and "got" in r.diagnosis_detail


def test_top_k_edge_raising_only_on_its_cases_is_named_with_the_exception(pool) -> None:
    r = check_file(SOLUTIONS / "bug_sampling_top_k_edge__topk_unclamped.py", "sampling", 4, Limits(), pool=pool)
    assert r.diagnosis.id == "sampling_top_k_edge"
    failing = [t.name for t in r.tests if t.status != "pass"]
    assert failing and all("top-k = 0" in n or "top-k >= V" in n for n in failing), failing


def test_tiny_probabilities_on_removed_tokens_fail_as_not_exactly_zero(pool) -> None:
    """clamp_min(1e-10): within every tolerance of the reference, yet a removed token can be drawn."""
    r = check_file(SOLUTIONS / "bug_sampling_removed_not_zero__clamp_min.py", "sampling", 4, Limits(), pool=pool)
    assert r.diagnosis.id == "sampling_removed_not_zero" and not r.diagnosis_partial
    failing = [t for t in r.tests if t.status != "pass"]
    assert failing and all("must be exactly 0" in t.message for t in failing), [t.message for t in failing]


def test_a_tie_at_a_variants_own_top_p_crossing_leaves_the_row_unknown() -> None:
    """Rows are drawn clear of the contract's thresholds only: without top-k, two fp16 logits may tie at top-p's
    crossing, and which one a sort keeps is not the mistake."""
    from drill.judge.spec import Case
    from drill.judge.specs._sampling_bugs import tie_aware

    logits = torch.tensor([[2.0, 1.0, 1.0, -1.0], [3.0, 1.0, 0.0, -1.0]])
    case = Case(name="tie", target=sampling.TARGET, args={"logits": logits, "top_p": 0.75})
    out, unknown = tie_aware(order=("top_p", "min_p"))(case)
    assert unknown[0].all() and not unknown[1].any()
    assert torch.equal(out, pipeline(logits, 1.0, None, 0.75, None))
