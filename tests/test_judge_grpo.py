"""grpo grading: the reference against torch.std and a loop, the cases reach every clause, every mistake shows.

Fixture verdicts are checked for every file by test_judge_fixtures.py; here:
the reference's advantages equal a per-group torch.std computation and its
loss (and gradient) a token-by-token loop; each seed has group sizes 2, 4, 8,
at least two groups per case, both normalize_by_std settings, groups of equal
rewards, B == T loss cases, and ratios in all three bands on both signs of A,
clear of the thresholds; the variants at their defaults are the reference;
every known mistake fails some test on every seed.
"""

from __future__ import annotations

import pytest
import torch

from drill.judge.check import _tolerance_of
from drill.judge.compare import compare
from drill.judge.specs import grpo
from drill.reference.rl import group_advantages, grpo_clip_loss

SEEDS = (0, 1, 7, 20261201)
TOL = _tolerance_of(grpo.SPEC)


def _prepared(seed: int) -> list:
    cases = grpo.make_cases(seed)
    for c in cases:
        c.expected, c.expected_grads = grpo.reference(c)
    return cases


def _loop_loss(logp, old, adv, mask, clip):
    rows = []
    for b in range(logp.shape[0]):
        terms = []
        for t in range(logp.shape[1]):
            if mask[b, t]:
                ratio = torch.exp(logp[b, t] - old[b, t])
                terms.append(-torch.min(ratio * adv[b], torch.clamp(ratio, 1 - clip, 1 + clip) * adv[b]))
        rows.append(torch.stack(terms).mean())
    return torch.stack(rows).mean()


@pytest.mark.parametrize("seed", SEEDS)
def test_the_reference_is_torch_std_per_group_and_a_token_loop(seed: int) -> None:
    for case in grpo.make_cases(seed):
        a = case.args
        if case.target == grpo.ADV:
            r, g = a["rewards"].double(), a["group_size"]
            norm, eps = a.get("normalize_by_std", True), a.get("eps", 1e-6)
            want = torch.cat([(r[i:i + g] - r[i:i + g].mean()) / ((torch.std(r[i:i + g]) + eps) if norm else 1.0)
                              for i in range(0, r.numel(), g)])
            got = group_advantages(a["rewards"], g, norm, eps)
            assert got.dtype == torch.float32 and torch.allclose(got.double(), want, rtol=1e-6, atol=1e-7), case.name
            continue
        lp = a["logp"].double().requires_grad_(True)
        want = _loop_loss(lp, a["old_logp"].double(), a["advantages"].double(), a["response_mask"], a["clip_eps"])
        want.backward()
        got, grads = grpo.reference(case)
        direct = grpo_clip_loss(a["logp"], a["old_logp"], a["advantages"], a["response_mask"], a["clip_eps"])
        assert torch.equal(direct, got)
        assert got.dtype == torch.float32 and got.shape == ()
        assert torch.allclose(got.double(), want.detach(), rtol=1e-6, atol=1e-7), case.name
        if case.repeat is not None:  # a repeat probe grades values only
            continue
        assert torch.allclose(grads["input:logp"].double(), (lp.grad * case.upstream.double()), rtol=1e-5, atol=1e-7)


def test_equal_rewards_give_zero_and_normalize_false_is_mean_only() -> None:
    r = torch.tensor([1.0, 1.0, 0.0, 2.0, 3.0, 3.0, 3.0, 3.0])
    assert group_advantages(r, 4).tolist()[4:] == [0.0, 0.0, 0.0, 0.0]
    assert group_advantages(r, 2, normalize_by_std=False).tolist() == [0.0, 0.0, -1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    with pytest.raises(ValueError):
        group_advantages(r, 3)


@pytest.mark.parametrize("seed", SEEDS)
def test_cases_cover_the_contract(seed: int) -> None:
    cases = grpo.make_cases(seed)
    adv = [c for c in cases if c.target == grpo.ADV]
    sizes = {c.args["group_size"] for c in adv}
    assert {2, 4, 8} <= sizes and all(c.args["rewards"].numel() // c.args["group_size"] >= 2 for c in adv)
    assert {c.args.get("normalize_by_std", True) for c in adv} == {True, False}
    assert any("normalize_by_std" not in c.args for c in adv) and any("eps" in c.args for c in adv)

    def has_equal_group(c):
        grid = c.args["rewards"].view(-1, c.args["group_size"])
        return bool((grid == grid[:, :1]).all(dim=1).any())

    assert any(has_equal_group(c) and c.args.get("normalize_by_std", True) for c in adv)
    assert any(has_equal_group(c) and not c.args.get("normalize_by_std", True) for c in adv)
    loss = [c for c in cases if c.target == grpo.LOSS]
    assert sum(c.args["logp"].shape[0] == c.args["logp"].shape[1] for c in loss) >= 3
    assert any(c.args["logp"].shape[0] != c.args["logp"].shape[1] for c in loss)
    seen = set()
    for c in loss:
        a = c.args
        ratio = torch.exp(a["logp"].double() - a["old_logp"].double())
        lo, hi = 1 - a["clip_eps"], 1 + a["clip_eps"]
        assert ((ratio - lo).abs() > grpo.MARGIN / 2).all() and ((ratio - hi).abs() > grpo.MARGIN / 2).all()
        assert a["response_mask"].any(dim=1).all() and (a["advantages"].abs() >= 0.2).all()
        sign = torch.sign(a["advantages"])[:, None].expand_as(ratio)[a["response_mask"]]
        band = torch.where(ratio > hi, 2, torch.where(ratio < lo, 0, 1))[a["response_mask"]]
        seen |= {(int(s), int(k)) for s, k in zip(sign, band, strict=True)}
    assert seen == {(s, k) for s in (-1, 1) for k in (0, 1, 2)}
    # gradients to logp on every loss case but the repeat probe (values only)
    assert all(c.grad_inputs == (("logp",) if c.repeat is None else ()) for c in loss)
    assert not any(c.grad_inputs for c in adv)
    assert [c.target for c in cases if c.repeat is not None] == [grpo.ADV, grpo.LOSS]


@pytest.mark.parametrize("seed", SEEDS)
def test_the_variants_at_their_defaults_are_the_reference(seed: int) -> None:
    for c in _prepared(seed):
        a = c.args
        if c.target == grpo.ADV:
            got = grpo.advantages_variant(*grpo._adv_args(c))
        else:
            got = grpo.loss_variant(a["logp"], a["old_logp"], a["advantages"], a["response_mask"], a["clip_eps"])
        assert compare(got, c.expected, TOL(c)).ok, c.name


@pytest.mark.parametrize("seed", SEEDS)
def test_every_known_mistake_shows_on_every_seed(seed: int) -> None:
    cases = _prepared(seed)
    for bug in grpo.SPEC.bugs:
        assert any((out := bug.fn(c)) is not None and not compare(out, c.expected, TOL(c)).ok for c in cases), bug.label


def test_every_listed_mistake_is_a_variant_and_no_op_is_forbidden() -> None:
    listed = {"grpo_batch_norm", "grpo_biased_std", "grpo_no_eps", "grpo_eps_in_sqrt", "grpo_strided_groups",
              "grpo_std_flag_ignored", "grpo_max_not_min", "grpo_ratio_inverted", "grpo_clip_advantage",
              "grpo_token_mean", "grpo_mask_ignored", "grpo_adv_broadcast", "grpo_sign"}
    assert {b.diagnosis.id for b in grpo.SPEC.bugs} == listed == set(grpo.GD)
    assert grpo.SPEC.forbidden == () and grpo.SPEC.forbidden_classes == ()
