"""ppo_gae grading: the loop-by-loop GAE against a closed form, the cases reach every clause, every mistake shows.

Fixture verdicts are checked for every file by test_judge_fixtures.py; here:
the reference's reverse scan equals an explicit sum over each step's episode
(no carried state) and, at lam = 1 without dones, the bootstrapped discounted
return, at lam = 0 the one-step TD error; the PPO loss equals an element loop
(and its gradient autograd's through it); each seed has episodes ending
mid-rollout, lam 0 and 1, gamma < 1, loss cases with and without a mask;
the variants at their defaults are the reference; every known mistake fails
some test on every seed.
"""

from __future__ import annotations

import pytest
import torch

from drill.judge.check import _tolerance_of
from drill.judge.compare import compare
from drill.judge.specs import ppo_gae
from drill.reference.rl import gae, gae_closed_form, ppo_clip_loss

SEEDS = (0, 1, 7, 20261201)
TOL = _tolerance_of(ppo_gae.SPEC)


def _prepared(seed: int) -> list:
    cases = ppo_gae.make_cases(seed)
    for c in cases:
        c.expected, c.expected_grads = ppo_gae.reference(c)
    return cases


@pytest.mark.parametrize("seed", SEEDS)
def test_the_reverse_scan_is_the_closed_form_sum(seed: int) -> None:
    for case in ppo_gae.make_cases(seed):
        if case.target != ppo_gae.GAE:
            continue
        a = case.args
        args = (a["rewards"], a["values"], a["dones"], a["last_value"], a["gamma"], a["lam"])
        for got, want in zip(gae(*args), gae_closed_form(*args), strict=True):
            assert got.dtype == torch.float32 and torch.allclose(got, want, rtol=1e-6, atol=1e-6), case.name


def test_lam_one_is_the_bootstrapped_return_and_lam_zero_the_td_error() -> None:
    g = torch.Generator().manual_seed(3)
    r, v, last = torch.randn(3, 9, generator=g), torch.randn(3, 9, generator=g), torch.randn(3, generator=g)
    none = torch.zeros(3, 9, dtype=torch.bool)
    _, ret = gae(r, v, none, last, 0.9, 1.0)
    mc = torch.stack([sum(0.9 ** (k - t) * r[:, k] for k in range(t, 9)) + 0.9 ** (9 - t) * last for t in range(9)], 1)
    assert torch.allclose(ret, mc, atol=1e-5)
    dones = torch.zeros(3, 9, dtype=torch.bool)
    dones[0, 4] = dones[1, 8] = True
    adv, _ = gae(r, v, dones, last, 0.9, 0.0)
    nxt = torch.cat([v[:, 1:], last[:, None]], 1)
    assert torch.allclose(adv, r + 0.9 * nxt * (~dones) - v, atol=1e-6)
    # a done on the last step keeps last_value out; a done inside cuts the row into two episodes
    adv1, _ = gae(r, v, dones, last + 100.0, 0.9, 0.7)
    adv2, _ = gae(r, v, dones, last, 0.9, 0.7)
    assert torch.equal(adv1[1], adv2[1]) and torch.equal(adv1[0, :5], adv2[0, :5]) and not torch.equal(adv1[0], adv2[0])


def _loop_loss(logp, old, adv, clip, mask):
    terms = []
    for i in range(logp.numel()):
        if mask is not None and not mask.reshape(-1)[i]:
            continue
        ratio = torch.exp(logp.reshape(-1)[i] - old.reshape(-1)[i])
        a = adv.reshape(-1)[i]
        terms.append(-torch.min(ratio * a, torch.clamp(ratio, 1 - clip, 1 + clip) * a))
    return torch.stack(terms).mean()


@pytest.mark.parametrize("seed", SEEDS)
def test_the_ppo_loss_is_an_element_loop(seed: int) -> None:
    for case in ppo_gae.make_cases(seed):
        if case.target != ppo_gae.LOSS:
            continue
        a = case.args
        lp = a["logp"].double().requires_grad_(True)
        want = _loop_loss(lp, a["old_logp"].double(), a["advantages"].double(), a["clip_eps"], a.get("mask"))
        want.backward()
        got, grads = ppo_gae.reference(case)
        direct = ppo_clip_loss(a["logp"], a["old_logp"], a["advantages"], a["clip_eps"], a.get("mask"))
        assert torch.equal(direct, got) and got.dtype == torch.float32 and got.shape == ()
        assert torch.allclose(got.double(), want.detach(), rtol=1e-6, atol=1e-7), case.name
        if case.repeat is not None:  # a repeat probe grades values only
            continue
        assert torch.allclose(grads["input:logp"].double(), lp.grad * case.upstream.double(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("seed", SEEDS)
def test_cases_cover_the_contract(seed: int) -> None:
    cases = ppo_gae.make_cases(seed)
    g = [c for c in cases if c.target == ppo_gae.GAE]
    assert {c.args["lam"] for c in g} >= {0.0, 1.0} and any(0 < c.args["lam"] < 1 for c in g)
    assert all(c.args["gamma"] < 1 for c in g)
    inside = [c for c in g if c.args["dones"][:, :-1].any()]
    assert len(inside) >= 4 and any(not c.args["dones"].any() for c in g)
    assert any(c.args["dones"][:, -1].any() for c in g) and any(not c.args["dones"][:, -1].all() for c in g)
    assert any(c.args["lam"] == 1.0 and c.args["dones"].any() for c in g)
    assert {c.ctx["pick"] for c in g} == {0, 1} and not any(c.grad_inputs for c in g)
    loss = [c for c in cases if c.target == ppo_gae.LOSS]
    assert any("mask" not in c.args for c in loss) and any(c.args.get("mask", 0) is None for c in loss)
    masked = [c for c in loss if c.args.get("mask") is not None]
    assert len(masked) >= 2 and {c.args["logp"].dim() for c in loss} == {1, 2, 3}
    for c in masked:
        counts = c.args["mask"].reshape(-1, c.args["mask"].shape[-1]).sum(-1)
        assert (counts >= 1).all() and counts.max() > counts.min()
    # gradients to logp on every loss case but the repeat probe (values only)
    assert all(c.grad_inputs == (("logp",) if c.repeat is None else ()) for c in loss)
    assert [c.target for c in cases if c.repeat is not None] == [ppo_gae.GAE, ppo_gae.LOSS]


@pytest.mark.parametrize("seed", SEEDS)
def test_the_variants_at_their_defaults_are_the_reference(seed: int) -> None:
    for c in _prepared(seed):
        a = c.args
        if c.target == ppo_gae.GAE:
            got = ppo_gae.gae_variant(a["rewards"], a["values"], a["dones"], a["last_value"], a["gamma"],
                                      a["lam"])[c.ctx["pick"]]
        else:
            got = ppo_gae.ppo_variant(a["logp"], a["old_logp"], a["advantages"], a["clip_eps"], a.get("mask"))
        assert compare(got, c.expected, TOL(c)).ok, c.name


@pytest.mark.parametrize("seed", SEEDS)
def test_every_known_mistake_shows_on_every_seed(seed: int) -> None:
    cases = _prepared(seed)
    for bug in ppo_gae.SPEC.bugs:
        assert any((out := bug.fn(c)) is not None and not compare(out, c.expected, TOL(c)).ok for c in cases), bug.label


def test_every_listed_mistake_is_named_and_no_op_is_forbidden() -> None:
    listed = {"gae_no_done_bootstrap", "gae_no_done_carry", "gae_forward_scan", "gae_no_last_value",
              "gae_lambda_missing", "gae_returns_mc", "gae_returns_are_adv", "gae_dones_as_starts",
              "ppo_max_not_min", "ppo_ratio_inverted", "ppo_no_clip", "ppo_clip_advantage", "ppo_mean_per_row",
              "ppo_sign"}
    named = {b.diagnosis.id for b in ppo_gae.SPEC.bugs} | {d.id for _, d in ppo_gae.SPEC.exception_bugs}
    assert listed <= named and named == set(ppo_gae.PD)
    assert ppo_gae.SPEC.forbidden == () and ppo_gae.SPEC.forbidden_classes == ()
