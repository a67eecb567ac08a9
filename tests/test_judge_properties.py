"""Property tests: random shapes and seeds never crash the grader, never flip a verdict."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drill.judge import registry
from drill.judge.check import check_file
from drill.judge.compare import compare
from drill.judge.diagnose import CaseEval, diagnose_cases
from drill.judge.pool import ChildPool
from drill.judge.runner import Limits
from drill.judge.specs import attention as attention_spec
from drill.judge.specs._common import Draw

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions"
PAIRS = {
    "attention": ("good_einsum_manual_softmax.py", "bug_mask_inverted__where.py"),
    "mha": ("good_view_transpose.py", "bug_split_heads_no_transpose__view.py"),
    "rmsnorm": ("good_hf_style.py", "bug_rms_eps_outside_sqrt__rsqrt.py"),
    "swiglu": ("good_divmod_loop.py", "bug_ffn_hidden_rounding__rounds_down.py"),
}


@pytest.fixture(scope="module")
def pool(fork_server):
    return fork_server


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(min_value=0, max_value=2**31 - 1))
def test_any_seed_good_passes_and_bug_is_named(seed: int, pool: ChildPool) -> None:
    """Through the real child: every exercise's good file passes, a bug file gets its id."""
    for exercise, (good, bug) in PAIRS.items():
        ok = check_file(SOLUTIONS / exercise / good, exercise, seed, Limits(), pool=pool)
        assert ok.status == "pass", (exercise, seed, ok.diagnosis_detail, [t.message for t in ok.tests if t.message])
        bad = check_file(SOLUTIONS / exercise / bug, exercise, seed, Limits(), pool=pool)
        want = bug[len("bug_"):].split("__")[0]
        assert bad.status == "fail" and bad.diagnosis.id == want, (exercise, seed, bad.diagnosis_detail)


shapes = st.fixed_dictionaries(
    {
        "lead": st.lists(st.integers(1, 3), min_size=0, max_size=3),
        "tq": st.integers(1, 9),
        "tk": st.integers(1, 9),
        "dk": st.integers(1, 12),
        "dv": st.integers(1, 12),
        "dtype": st.sampled_from(["float32", "float16", "bfloat16"]),
        "mask": st.sampled_from(["none", "random", "causal", "empty_row"]),
        "seed": st.integers(0, 2**20),
    }
)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(s=shapes)
def test_parent_side_never_crashes_on_random_attention_shapes(s: dict) -> None:
    """Reference, comparison, every bug variant and the diagnosis run on any valid shape."""
    d = Draw(s["seed"])
    lead = tuple(s["lead"])
    q = d.normal(*lead, s["tq"], s["dk"], dtype=s["dtype"])
    k = d.normal(*lead, s["tk"], s["dk"], dtype=s["dtype"])
    v = d.normal(*lead, s["tk"], s["dv"], dtype=s["dtype"])
    mask = None
    if s["mask"] == "random":
        mask = d.bools(*lead, s["tq"], s["tk"])
    elif s["mask"] == "causal":
        mask = torch.ones(s["tq"], s["tk"], dtype=torch.bool).tril(diagonal=s["tk"] - s["tq"])
    elif s["mask"] == "empty_row":
        mask = torch.ones(s["tq"], s["tk"], dtype=torch.bool)
        mask[0] = False
    case = attention_spec._case("prop", q, k, v, mask, dtype=s["dtype"], draw=d, grads=s["dtype"] == "float32")
    spec = registry.load_spec("attention")
    case.expected, case.expected_grads = spec.reference(case)
    tol = spec.tolerances[s["dtype"]]
    assert compare(case.expected.to(q.dtype), case.expected, tol, care=case.care, dtype=q.dtype).ok
    noisy = (case.expected + 10).to(q.dtype)
    for bug in spec.bugs:
        produced = bug.fn(case, noisy) if bug.fit else bug.fn(case)
        if produced is not None:
            out = produced[0] if isinstance(produced, tuple) else produced
            assert tuple(out.shape) == tuple(case.expected.shape)
    ev = CaseEval(case, "ok", {}, got=noisy, forward=compare(noisy, case.expected, tol, care=case.care, dtype=q.dtype))
    verdict = diagnose_cases(spec, [ev], lambda c: tol)
    if not ev.forward.ok:
        assert verdict.diagnosis.id  # some diagnosis, never an exception
