"""grad_clip grading: the reference is PyTorch's, the scenarios reach every edge, every mistake is told apart.

Fixture verdicts are checked for every file by test_judge_fixtures.py; here:
the reference agrees with torch.nn.utils.clip_grad_norm_ (values, and the
in-place edit), each seed has the scenarios the contract names, every variant
fails a test on every seed and no two mistakes fail the same set of tests, the
child's "grads" executor hands over a generator exactly once, and a learner
file that returns a float or rebinds .grad is told so.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from drill.judge import grads as grads_kind
from drill.judge.check import _tolerance_of, check_file
from drill.judge.compare import compare
from drill.judge.runner import Limits
from drill.judge.specs import grad_clip
from drill.reference.clip import clip_grad_norm

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions" / "grad_clip"
SEEDS = (0, 1, 7, 20261201)
TOL = _tolerance_of(grad_clip.SPEC)


def _prepared(seed: int) -> list:
    cases = grad_clip.make_cases(seed)
    for c in cases:
        c.expected, c.expected_grads = grad_clip.reference(c)
    return cases


@pytest.mark.parametrize("seed", SEEDS)
def test_the_reference_is_torchs_clip_grad_norm(seed: int) -> None:
    for case in grad_clip.make_cases(seed):
        if case.ctx["returns"] != "grads" or not any(g is not None for g in case.ctx["grads"]):
            continue
        if any(g is not None and g.dtype != torch.float32 for g in case.ctx["grads"]):
            continue  # torch scales half gradients in their own dtype, by a factor rounded to it: within fp16 tolerance
        params = []
        for g, shape in zip(case.ctx["grads"], case.ctx["shapes"], strict=True):
            p = torch.nn.Parameter(torch.zeros(shape))
            p.grad = None if g is None else g.clone()
            params.append(p)
        eps = case.ctx["eps"] if case.ctx["eps"] is not None else 1e-6
        total = torch.nn.utils.clip_grad_norm_(params, case.ctx["max_norm"])
        want, clipped = clip_grad_norm(case.ctx["grads"], case.ctx["max_norm"], eps)
        assert torch.allclose(total, want, rtol=1e-5), case.name
        if eps == 1e-6:
            for p, c in zip(params, clipped, strict=True):
                assert (p.grad is None) == (c is None) and (c is None or torch.allclose(p.grad, c, rtol=1e-5, atol=0))


def test_no_gradient_at_all_is_zero_and_nothing_changes() -> None:
    total, clipped = clip_grad_norm([None, None], 1.0)
    assert total.dtype == torch.float32 and total.shape == () and float(total) == 0.0 and clipped == [None, None]


@pytest.mark.parametrize("seed", SEEDS)
def test_the_scenarios_the_contract_names_are_there(seed: int) -> None:
    cases = grad_clip.make_cases(seed)
    seen = {(c.ctx["as"], tuple(c.ctx["states"]), c.ctx["eps"]) for c in cases}
    assert any(a == "generator" and "frozen" in st for a, st, _ in seen)
    assert any("none" in st for _, st, _ in seen)
    assert any(e is not None for *_, e in seen)
    assert any(all(s != "grad" for s in st) for _, st, _ in seen)
    dtypes = {g.dtype for c in cases for g in c.ctx["grads"] if g is not None}
    assert dtypes == {torch.float32, torch.float16, torch.bfloat16}
    for c in cases:  # never on the edge: total at least 20% away from max_norm
        present = [g.double() for g in c.ctx["grads"] if g is not None]
        if present:
            total = float(sum(g.pow(2).sum() for g in present) ** 0.5)
            assert abs(total - c.ctx["max_norm"]) > 0.15 * total, c.name
    assert {c.ctx["returns"] for c in cases} == {"norm", "grads", "same"}


@pytest.mark.parametrize("seed", SEEDS)
def test_every_mistake_shows_and_no_two_fail_the_same_tests(seed: int) -> None:
    cases = _prepared(seed)
    fails = {}
    for bug in grad_clip.SPEC.bugs:
        fails[bug.label] = frozenset(c.name for c in cases if not compare(bug.fn(c), c.expected, TOL(c)).ok)
        assert fails[bug.label], bug.label
    ids = {b.label: b.diagnosis.id for b in grad_clip.SPEC.bugs}
    for a, fa in fails.items():
        for b, fb in fails.items():
            if ids[a] < ids[b]:
                assert fa != fb, (a, b)


class _Host:
    @staticmethod
    def plain(t: torch.Tensor) -> torch.Tensor:
        return t.detach().clone()


def test_the_executor_passes_a_generator_once_and_reports_identity() -> None:
    case = next(c for c in grad_clip.make_cases(3) if c.ctx["as"] == "generator" and c.ctx["returns"] == "same")
    tensors = {f"t{i}": g for i, g in enumerate(case.args.values())}
    job = {"target": grad_clip.TARGET, "extra": case.extra, "arg_names": list(case.args),
           "args": [{"t": f"t{i}"} for i in range(len(case.args))]}
    calls = []

    class Learner:
        @staticmethod
        def clip_grad_norm_(parameters, max_norm, eps=1e-6):
            calls.append(type(parameters).__name__)
            for p in parameters:
                if p.grad is not None:
                    p.grad = p.grad * 1.0  # a rebinding
            return torch.zeros(())

    out = grads_kind.run_case(Learner, job, tensors, _Host)["out"]
    assert calls == ["generator"]
    want = [0 if s == "grad" else 1 for s in case.ctx["states"]]
    assert out.tolist() == want


def _grade(tmp_path: Path, body: str, fork_server):
    path = tmp_path / "grad_clip.py"
    path.write_text("import torch\n\n\ndef clip_grad_norm_(parameters, max_norm, eps=1e-6):\n" + body)
    return check_file(path, "grad_clip", 3, Limits(timeout_s=60, cpu_s=60), pool=fork_server)


def test_a_float_for_the_norm_is_the_wrong_type(tmp_path: Path, fork_server) -> None:
    path = tmp_path / "grad_clip.py"
    good = (SOLUTIONS / "good_python_floats.py").read_text()
    path.write_text(good.replace("return torch.tensor(total, dtype=torch.float32)", "return total"))
    r = check_file(path, "grad_clip", 3, Limits(timeout_s=60, cpu_s=60), pool=fork_server)
    assert r.status == "fail" and r.diagnosis.id == "wrong_type", (r.status, r.diagnosis)
    assert "returned float" in r.diagnosis_detail and "0-dim tensor" in r.diagnosis_detail


def test_torchs_own_function_is_refused_with_its_line_before_it_runs(tmp_path: Path, fork_server) -> None:
    r = _grade(tmp_path, "    return torch.nn.utils.clip_grad_norm_(parameters, max_norm)\n", fork_server)
    # refused before it runs (the policy: torch.nn.utils is no from-scratch tool); the child's block is the layer below
    assert r.status == "fail" and r.diagnosis.id == "policy_violation", (r.status, r.diagnosis)
    assert "grad_clip.py:5:" in r.diagnosis_detail and "clip_grad_norm_" in r.diagnosis_detail, r.diagnosis_detail
    assert all(f"torch.nn.utils.{n}" in grad_clip.SPEC.forbidden for n in ("clip_grad_norm_", "get_total_norm"))
