"""dpo grading: the reference against a token loop and logsigmoid, the cases reach every clause, every mistake shows.

Fixture verdicts are checked for every file by test_judge_fixtures.py; here:
sequence_logprobs equals a loop over positions with logits[t - 1] scoring
labels[t] (and its gradient autograd's through it); dpo_loss equals TRL's
-logsigmoid(beta * margin) mean, finite at |z| = 1e4 where log(sigmoid(z)) is
not; each seed has -100 labels, real prompt ids, a mask at position 0, half
logits with an offset, z = +-1e3 and -1e4, and two detach probes; the variants
at their defaults are the reference; every known mistake fails some test on
every seed; the detach judge passes the child's report 0 and names 1 (the
fixtures run the report end to end, attached and detached).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from drill.judge.check import _tolerance_of
from drill.judge.compare import compare
from drill.judge.specs import dpo
from drill.reference.rl import dpo_loss, sequence_logprobs

SEEDS = (0, 1, 7, 20261201)
TOL = _tolerance_of(dpo.SPEC)


def _prepared(seed: int) -> list:
    cases = dpo.make_cases(seed)
    for c in cases:
        c.expected, c.expected_grads = dpo.reference(c)
    return cases


def _loop(logits, labels, mask):
    rows = []
    for b in range(logits.shape[0]):
        total = torch.zeros((), dtype=torch.float64)
        for t in range(1, logits.shape[1]):
            if mask[b, t]:
                total = total + torch.log_softmax(logits[b, t - 1].double(), -1)[int(labels[b, t])]
        rows.append(total)
    return torch.stack(rows)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_reference_is_a_token_loop_and_trls_loss(seed: int) -> None:
    for case in dpo.make_cases(seed):
        a = case.args
        if "track_grad" in case.extra:
            continue
        if case.target == dpo.LOGPS:
            x = a["logits"].double().requires_grad_(True)
            want = _loop(x, a["labels"], a["response_mask"])
            got = sequence_logprobs(a["logits"], a["labels"], a["response_mask"])
            assert got.dtype == torch.float32 and torch.allclose(got.double(), want.detach(), rtol=1e-5, atol=1e-4)
            if case.grad_inputs:
                (want * case.upstream.double()).sum().backward()
                _, grads = dpo.reference(case)
                assert torch.allclose(grads["input:logits"].double(), x.grad, rtol=1e-4, atol=1e-6), case.name
            continue
        pc, pr, rc, rr, beta = dpo._loss_args(case)
        loss, chosen, rejected = dpo_loss(pc, pr, rc, rr, beta)
        trl = -F.logsigmoid(beta * ((pc.double() - pr.double()) - (rc.double() - rr.double()))).mean()
        assert torch.isfinite(loss) and torch.allclose(loss.double(), trl, rtol=1e-5), case.name
        assert torch.allclose(chosen, beta * (pc - rc)) and torch.allclose(rejected, beta * (pr - rr))


def test_log_of_sigmoid_is_infinite_where_the_contract_is_exact() -> None:
    z = torch.tensor([-1e4, -1e3, 0.0, 1e3, 1e4])
    loss, _, _ = dpo_loss(z, torch.zeros(5), torch.zeros(5), torch.zeros(5), 1.0)
    assert torch.isclose(loss, torch.tensor((1e4 + 1e3 + 0.6931471805599453) / 5))
    assert torch.isinf(-torch.log(torch.sigmoid(z)).mean())


def test_the_rewards_come_back_detached_and_the_loss_reaches_the_policy() -> None:
    pc, pr = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    loss, chosen, rejected = dpo_loss(pc, pr, torch.randn(3), torch.randn(3), 0.1)
    assert loss.requires_grad and not chosen.requires_grad and not rejected.requires_grad
    loss.backward()
    assert pc.grad is not None and pr.grad is not None and torch.allclose(pc.grad, -pr.grad)


@pytest.mark.parametrize("seed", SEEDS)
def test_cases_cover_the_contract(seed: int) -> None:
    cases = dpo.make_cases(seed)
    lp = [c for c in cases if c.target == dpo.LOGPS]
    assert any((c.args["labels"] == -100).any() for c in lp)
    assert any(not (c.args["labels"] == -100).any() for c in lp)
    assert any(c.args["response_mask"][:, 0].any() for c in lp)
    assert {c.args["logits"].dtype for c in lp} == {torch.float32, torch.float16, torch.bfloat16}
    assert all(c.out_dtype == torch.float32 and c.ctx["tol"] == "float32" for c in lp)
    assert all(c.grad_inputs in ((), ("logits",)) for c in lp) and any(c.grad_inputs for c in lp)
    for c in lp:
        counts = c.args["response_mask"][:, 1:].sum(-1)
        assert (counts >= 2).all() and (c.args["labels"][c.args["response_mask"]] >= 0).all()
    loss = [c for c in cases if c.target == dpo.LOSS and "track_grad" not in c.extra]
    assert {c.ctx["pick"] for c in loss} == {0, 1, 2}
    # gradients to the policy log-probs on the loss element of every case but the repeat probe (values only)
    assert all((c.grad_inputs == dpo.POLICY) == (c.ctx["pick"] == 0 and c.repeat is None) for c in loss)
    zs = torch.cat([c.args["beta"] * ((c.args["policy_chosen_logps"] - c.args["policy_rejected_logps"])
                                       - (c.args["ref_chosen_logps"] - c.args["ref_rejected_logps"])) for c in loss])
    assert zs.min() < -5e3 and zs.max() > 5e2 and (zs < -5e2).sum() >= 2
    assert all((c.args[k] < 0).all() for c in loss for k in dpo.POLICY)
    probes = [c for c in cases if "track_grad" in c.extra]
    assert [c.ctx["pick"] for c in probes] == [1, 2] and all(c.judge is not None for c in probes)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_variants_at_their_defaults_are_the_reference(seed: int) -> None:
    for c in _prepared(seed):
        if "track_grad" in c.extra:
            continue
        a = c.args
        if c.target == dpo.LOGPS:
            got = dpo.logps_variant(a["logits"], a["labels"], a["response_mask"])
        else:
            got = dpo.loss_variant(*dpo._loss_args(c))[c.ctx["pick"]]
        assert compare(got, c.expected, TOL(c)).ok, c.name


@pytest.mark.parametrize("seed", SEEDS)
def test_every_known_mistake_shows_on_every_seed(seed: int) -> None:
    cases = _prepared(seed)
    for bug in dpo.SPEC.bugs:
        assert any((out := bug.fn(c)) is not None and not compare(out, c.expected, TOL(c)).ok for c in cases), bug.label


def test_the_detach_judge_reads_the_childs_report() -> None:
    judge = dpo._detach_judge("chosen_rewards")
    assert judge(torch.tensor([0])).ok
    bad = judge(torch.tensor([1]))
    assert not bad.ok and bad.diagnosis.id == "dpo_rewards_not_detached"


def test_every_listed_mistake_is_named_and_no_op_is_forbidden() -> None:
    listed = {"dpo_no_shift", "dpo_labels_preshifted", "dpo_probs_not_logprobs", "dpo_token_mean",
              "dpo_prompt_counted", "dpo_gather_ignored", "dpo_swapped", "dpo_beta_misplaced",
              "dpo_log_sigmoid_overflow", "dpo_loss_sum", "dpo_rewards_no_ref", "dpo_rewards_not_detached"}
    named = ({b.diagnosis.id for b in dpo.SPEC.bugs} | {d.id for _, d in dpo.SPEC.exception_bugs}
             | {"dpo_rewards_not_detached"})
    assert listed <= named and named == set(dpo.DD)
    assert dpo.SPEC.forbidden == () and dpo.SPEC.forbidden_classes == ()
