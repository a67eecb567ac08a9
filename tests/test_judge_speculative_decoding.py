"""speculative_decoding grading: exact token lists on uniforms kept clear of every threshold, a chi-square check
in the parent, the global generators watched.

Fixture verdicts are checked for every file by test_judge_fixtures.py; here: the reference gives LeetGPU 87's
worked example and its inverse CDF is torch.searchsorted's (the contract's anchor), the spec's knob-free
recomputation agrees with it on every case, each seed's cases cover what the contract lists (K = 1 .. 8, small
and ~1000-token vocabularies, all kept, the first refused, a zero target probability) with every uniform at least
1e-4 from the ratios and CDF steps on the contract's path, every variant differs from the reference (and from
every variant of another mistake) on every seed, the distribution judge passes the contract's sampler and fails
two wrong ones, a failing list names its first differing position, and through the child: a tensor where a list
is due is `wrong_type`, and Python's `random` inside the call is `spec_rng_inside`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from drill.judge.check import check_file
from drill.judge.compare import Comparison, name_the_list
from drill.judge.runner import Limits
from drill.judge.specs import speculative_decoding as sd
from drill.reference.speculative import inverse_cdf, speculative_verify

SEEDS = (0, 1, 7, 20261201)


def _prepared(seed: int) -> list:
    cases = sd.make_cases(seed)
    for c in cases:
        c.expected, c.expected_grads = sd.reference(c)
    return cases


def _exact(cases: list) -> list:
    return [c for c in cases if c.judge is None]


def test_the_reference_gives_leetgpus_worked_example() -> None:
    case = sd._leetgpu()
    assert speculative_verify(*(case.args[n] for n in sd.ARGS)) == [1, 3]


def test_the_inverse_cdf_is_torch_searchsorted_with_the_fallback() -> None:
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        dist = torch.softmax(torch.randn(17, generator=g, dtype=torch.float64), 0)
        u = float(torch.rand(1, generator=g))
        want = int(torch.searchsorted(torch.cumsum(dist, 0), torch.tensor([u], dtype=torch.float64), right=True)[0])
        assert inverse_cdf(dist, u) == want
    # rounding leaves no step above u: the last positive entry, not V (a zero tail is skipped)
    assert inverse_cdf(torch.tensor([0.25, 0.25, 0.4999999, 0.0]), 0.99999999) == 2


@pytest.mark.parametrize("seed", SEEDS)
def test_the_spec_recomputation_agrees_with_the_reference(seed: int) -> None:
    for c in _exact(_prepared(seed)):
        assert sd._steps(*sd._inputs(c)) == c.expected.tolist(), c.name


@pytest.mark.parametrize("seed", SEEDS)
def test_cases_cover_the_contract_and_keep_every_uniform_clear(seed: int) -> None:
    cases = _prepared(seed)
    exact = _exact(cases)
    ks = [c.args["draft_tokens"].numel() for c in exact]
    vs = [c.args["draft_probs"].shape[1] for c in exact]
    assert min(ks) == 1 and max(ks) >= 5 and max(ks) <= 8
    assert min(vs) <= 12 and max(vs) >= 900
    lengths = [(c.expected.numel(), c.args["draft_tokens"].numel()) for c in exact]
    assert any(n == k + 1 for n, k in lengths), "no case keeps every draft"
    assert any(n == 1 and k >= 2 for n, k in lengths), "no case refuses the first of several drafts"
    assert any(bool((c.args["target_probs"][torch.arange(c.args["draft_tokens"].numel()),
                                            c.args["draft_tokens"]] == 0).any()) for c in exact)
    assert sum(c.extra.get("twice", False) for c in exact) == 3
    assert all(c.extra["rng_unchanged"] for c in cases)
    for c in exact:
        dt, q, p, u = sd._inputs(c)
        k = dt.numel()
        assert bool((u >= 0).all() and (u < 1).all())
        final = p[k]
        for i in range(k):
            r = float(p[i, int(dt[i])] / q[i, int(dt[i])])
            assert abs(float(u[i]) - r) >= sd.CLEAR, (c.name, i)
            if float(u[i]) >= r:
                final = sd._residual(p[i], q[i])
                break
        assert float((torch.cumsum(final, 0) - u[k]).abs().min()) >= sd.CLEAR, c.name
    dist = next(c for c in cases if c.judge is not None)  # the distribution case
    assert dist.judge is not None and dist.args["uniforms"].shape == (sd.N_DRAWS, 3)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_known_mistake_shows_on_every_seed_and_no_two_mistakes_look_alike(seed: int) -> None:
    cases = _exact(_prepared(seed))
    outputs = {}
    for bug in sd.SPEC.bugs:
        outs = [bug.fn(c) for c in cases]
        assert any(not torch.equal(o, c.expected) for o, c in zip(outs, cases, strict=True)), bug.label
        outputs[bug.label] = (bug.diagnosis.id, outs)
    for a, (id_a, outs_a) in outputs.items():
        for b, (id_b, outs_b) in outputs.items():
            if id_a < id_b:
                assert any(not torch.equal(x, y) for x, y in zip(outs_a, outs_b, strict=True)), (a, b)


def _answers(case, **knobs) -> torch.Tensor:
    a = case.args
    q, p = a["draft_probs"].double(), a["target_probs"].double()
    rows = []
    for dt, u in zip(a["draft_tokens"], a["uniforms"].double(), strict=True):
        got = sd._steps(dt, q, p, u, **knobs)
        rows.append(got + [-1] * (3 - len(got)))
    return torch.tensor(rows, dtype=torch.int64)


def test_the_distribution_judge_passes_the_contract_and_fails_wrong_samplers() -> None:
    case = next(c for c in sd.make_cases(5) if c.judge is not None)  # the distribution case
    assert case.judge(_answers(case)).ok
    resampled = case.judge(_answers(case, final="target"))
    assert not resampled.ok and "does not follow p[0]" in resampled.message
    inverted = case.judge(_answers(case, accept="inverted"))
    assert not inverted.ok and "probability 0" in inverted.message


def test_a_failing_list_names_the_first_differing_position_and_the_lengths() -> None:
    failed = Comparison(False, "shape", "shape (2,) vs (3,)")
    said = name_the_list(failed, torch.tensor([1, 3]), torch.tensor([1, 2, 4]))
    assert said.message == "got [1, 3], expected [1, 2, 4]: first differs at position 1 (got 3, expected 2); " \
                           "2 ints instead of 3"
    assert (said.worst_got, said.worst_expected, said.where) == (3, 2, "at position 1 of [1, 3] vs [1, 2, 4]")
    said = name_the_list(failed, torch.tensor([1, 2]), torch.tensor([1, 2, 4]))
    assert "the same up to position 1; 2 ints instead of 3" in said.message
    assert (said.worst_got, said.worst_expected, said.where) == (2, 3, "ints in [1, 2] vs [1, 2, 4]")


HEAD = "import random\nimport torch\n\n\ndef verify(draft_tokens, draft_probs, target_probs, uniforms):\n"
BODY = """    k = draft_tokens.numel()
    out = []
    for i in range(k):
        x = int(draft_tokens[i])
        if uniforms[i] < target_probs[i, x] / draft_probs[i, x]:
            out.append(x)
            continue
        r = (target_probs[i] - draft_probs[i]).clamp(min=0)
        return out + [int(torch.searchsorted(torch.cumsum(r / r.sum(), 0), uniforms[k:], right=True)[0])]
    return out + [int(torch.searchsorted(torch.cumsum(target_probs[k], 0), uniforms[k:], right=True)[0])]
"""


def _grade(tmp_path: Path, body: str, fork_server):
    path = tmp_path / "speculative_decoding.py"
    path.write_text(HEAD + body)
    return check_file(path, exercise="speculative_decoding", seed=3,
                      limits=Limits(timeout_s=120, cpu_s=120, memory_mb=2048), pool=fork_server)


def test_a_tensor_answer_is_the_wrong_type(tmp_path: Path, fork_server) -> None:
    body = BODY.replace("return out + [", "return torch.tensor(out + [").replace(")[0])]\n", ")[0])])\n")
    result = _grade(tmp_path, body, fork_server)
    assert result.status == "fail" and result.diagnosis.id == "wrong_type", result.diagnosis_detail
    assert "instead of a list of ints" in result.diagnosis_detail


def test_pythons_random_inside_is_named(tmp_path: Path, fork_server) -> None:
    result = _grade(tmp_path, "    random.random()\n" + BODY, fork_server)
    assert result.status == "fail" and result.diagnosis.id == "spec_rng_inside", result.diagnosis_detail
    assert "Python's random module" in result.diagnosis_detail
