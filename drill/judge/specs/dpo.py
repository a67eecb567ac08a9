"""Hidden tests for `dpo`: sequence_logprobs(logits, labels, response_mask) and
dpo_loss(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta).

What each case is built to reveal:
- sequence_logprobs: logits[:, t - 1] scoring labels[:, t] (TRL's in-function shift; scoring logits[:, t]
  against labels[:, t], with or without the first position, fails); prompts and padding whose labels are
  real ids (counted when the mask is left out) and ones whose labels are -100 (gathering with them raises);
  a mask True at position 0 on some rows (nothing predicts that token: CS336's pre-shifted reading counts
  it); response lengths that differ by row (a mean over tokens is not the sum); fp16 and bf16 logits with
  a common offset of 10-20, where a log_softmax in half precision is off by 1e-2 per token (the result is
  fp32 and graded at fp32 tolerance); a vocabulary of 1000+; a repeat call. Gradients with respect to the
  logits are graded on the fp32 cases.
- dpo_loss: each input graded three times, once per returned element (`Case.extra["tuple"]`): the loss
  (with gradients to both policy log-probs), the chosen and the rejected rewards; betas from 0.05 to 0.5;
  rows with z = +-1e3 and -1e4, where log(sigmoid(z)) is -inf; one row (B = 1); two cases that grade only
  whether the rewards come back detached (the child reports whether they require grad); a repeat call.
"""

from __future__ import annotations

import dataclasses

import torch

from drill.judge.compare import Comparison
from drill.judge.spec import Case, Diagnosis, Spec
from drill.judge.specs._common import (
    TOLERANCES,
    Draw,
    call_case,
    diagnoses,
    reference_with_grads,
    repeat_after,
    twice_probes,
    variant_bugs,
)

LOGPS, LOSS = "sequence_logprobs", "dpo_loss"
OUTPUTS = ("loss", "chosen_rewards", "rejected_rewards")
POLICY = ("policy_chosen_logps", "policy_rejected_logps")

DD = diagnoses(
    Diagnosis("dpo_no_shift", "Logits scored against the label at their own position",
              "A causal LM's logits at position t predict the NEXT token: logits[:, t - 1] scores labels[:, t]. "
              "Gathering logits[:, t] at labels[:, t] scores each token by a model that has already seen it.",
              "logp = log_softmax(logits[:, :-1].float(), -1); gather at labels[:, 1:]; mask with "
              "response_mask[:, 1:]."),
    Diagnosis("dpo_labels_preshifted", "Labels taken as already shifted (CS336's layout)",
              "CS336 a5's get_response_log_probs takes labels = tokens[:, 1:] beside input_ids = tokens[:, :-1]. "
              "Here labels ARE the input ids (TRL's get_batch_logps): shift inside the function. Reading them as "
              "pre-shifted scores logits[:, t] against labels[:, t] and counts position 0, which nothing predicts.",
              "Drop the first label and the last logits: logits[:, :-1] against labels[:, 1:], mask[:, 1:]."),
    Diagnosis("dpo_probs_not_logprobs", "Probabilities summed instead of log-probabilities",
              "A sequence's log-probability is the SUM of its tokens' log-probabilities (the log of the product of "
              "their probabilities); summing softmax probabilities is another quantity.",
              "torch.log_softmax(logits, -1), then gather and sum."),
    Diagnosis("dpo_token_mean", "Mean over response tokens instead of the sum",
              "DPO's policy log-probability of a response is the sum over its tokens (TRL's default); dividing by "
              "the response length is another objective (IPO-style averaging, SimPO's).",
              "Sum the masked per-token log-probabilities; do not divide by the mask's sum."),
    Diagnosis("dpo_prompt_counted", "Response mask not applied (prompt and padding tokens counted)",
              "Only response tokens count: prompt tokens are shared by the chosen and rejected responses and "
              "padding is not text at all.",
              "Multiply by (or select with) response_mask[:, 1:] before the sum."),
    Diagnosis("dpo_gather_ignored", "Masked labels (-100) used as indices",
              "Where the mask is False the labels may hold anything, -100 included: gathering with them raises "
              "(or reads some other token). Replace them before gathering and mask the result.",
              "safe = torch.where(mask, labels, 0); gather with safe; then zero the masked positions."),
    Diagnosis("dpo_no_fp32_upcast", "log_softmax computed in half precision",
              "With fp16 or bf16 logits of size ~10-20, log_softmax in the logits' own dtype rounds every token's "
              "log-probability to the spacing of that magnitude (1e-2 in fp16, 6e-2 in bf16), and a sequence sums "
              "dozens of them. The contract computes it in fp32.",
              "torch.log_softmax(logits[:, :-1].float(), dim=-1): upcast before, not after."),
    Diagnosis("dpo_swapped", "Chosen and rejected exchanged",
              "z = beta * ((policy_chosen - policy_rejected) - (ref_chosen - ref_rejected)): the chosen response's "
              "log-ratio comes first. Exchanging them trains the model to prefer the rejected answers.",
              "Keep the argument order of the contract in z and in the two rewards."),
    Diagnosis("dpo_beta_misplaced", "beta applied to the wrong term",
              "beta multiplies the whole margin difference inside the sigmoid: z = beta * (policy margin - "
              "reference margin). On one margin alone, or outside the log-sigmoid, it is another loss.",
              "z = beta * ((pc - pr) - (rc - rr)); loss = -logsigmoid(z).mean()."),
    Diagnosis("dpo_log_sigmoid_overflow", "log(sigmoid(z)) underflows to -inf",
              "sigmoid(z) is exactly 0 in fp32 for z below about -104, so log(sigmoid(z)) is -inf and the loss "
              "inf, although -log sigmoid(z) is just -z there.",
              "torch.nn.functional.logsigmoid(z), or -softplus(-z)."),
    Diagnosis("dpo_loss_sum", "Loss summed over the batch instead of averaged",
              "The loss is the mean over the B pairs; a sum grows with the batch size.",
              "-logsigmoid(z).mean()."),
    Diagnosis("dpo_rewards_no_ref", "Rewards without the reference log-probabilities",
              "DPO's implicit reward is beta * (policy_logp - ref_logp), the log-ratio to the reference; "
              "beta * policy_logp alone is not a reward.",
              "chosen_rewards = beta * (policy_chosen - ref_chosen), the same for rejected."),
    Diagnosis("dpo_rewards_not_detached", "Rewards returned with a gradient",
              "The rewards are for logging: they come back detached, so summing them into a metric or a loss "
              "never backpropagates into the policy by accident.",
              "chosen_rewards = (beta * (policy_chosen - ref_chosen)).detach(), the same for rejected."),
)


# ---------------------------------------------------------------- recomputing, one knob per mistake

def logps_variant(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, *, shift: str = "right",
                  kind: str = "log", reduce: str = "sum", use_mask: bool = True,
                  zero_masked: bool = False, half: str = "") -> torch.Tensor:
    """sequence_logprobs with each knob set to one mistake (fp32); defaults: the contract.

    shift: "right" | "none" (logits[:, t] vs labels[:, t], t >= 1) | "preshifted" (the same, t >= 0);
    kind: "log" | "prob"; reduce: "sum" | "mean"; use_mask=False counts every position (-100 read as 0;
    with `zero_masked` every masked label read as 0, TRL's labels[~mask] = 0 without the multiply after);
    half: "" | "terms" (log_softmax in the logits' dtype, summed in fp32) | "sum" (summed in it too)."""
    x = logits.detach() if half else logits.detach().float()
    if shift == "right":
        x, lab, keep = x[:, :-1], labels[:, 1:], mask[:, 1:]
    elif shift == "none":
        x, lab, keep = x[:, 1:], labels[:, 1:], mask[:, 1:]
    else:
        lab, keep = labels, mask
    if zero_masked:
        lab = torch.where(keep, lab, torch.zeros_like(lab))
    if not use_mask:
        keep = torch.ones_like(keep)
    scores = torch.log_softmax(x, -1) if kind == "log" else torch.softmax(x, -1)
    safe = torch.where(keep & (lab >= 0), lab, torch.zeros_like(lab))
    picked = scores.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    total = torch.where(keep, picked, torch.zeros_like(picked))
    total = total.sum(-1).float() if half == "sum" else total.float().sum(-1)
    return total / keep.sum(-1).clamp(min=1) if reduce == "mean" else total


def loss_variant(pc, pr, rc, rr, beta: float, *, swap: str = "", beta_at: str = "all", form: str = "stable",
                 reduce: str = "mean", rewards: str = "right") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dpo_loss with each knob set to one mistake (float64, returned fp32); defaults: the contract.

    beta_at: "all" | "policy" (beta on the policy margin only) | "outside" (-beta * logsigmoid(margins));
    form: "stable" | "log_sigmoid" (log(sigmoid(z)) in fp32); rewards: "right" | "no_ref";
    swap: "" | "loss" (chosen and rejected exchanged in z only) | "all" (in the rewards too)."""
    pc, pr, rc, rr = (t.detach().double() for t in (pc, pr, rc, rr))
    kept = (pc, pr, rc, rr)
    if swap:
        pc, pr, rc, rr = pr, pc, rr, rc
    margin = {"all": lambda: beta * ((pc - pr) - (rc - rr)), "policy": lambda: beta * (pc - pr) - (rc - rr),
              "outside": lambda: (pc - pr) - (rc - rr)}[beta_at]()
    if form == "log_sigmoid":
        per = -torch.log(torch.sigmoid(margin.float())).double()
    else:
        per = torch.nn.functional.softplus(-margin)
    if beta_at == "outside":
        per = beta * per
    loss = per.sum() if reduce == "sum" else per.mean()
    if swap == "loss":
        pc, pr, rc, rr = kept
    if rewards == "no_ref":
        chosen, rejected = beta * pc, beta * pr
    else:
        chosen, rejected = beta * (pc - rc), beta * (pr - rr)
    return loss.float(), chosen.float(), rejected.float()


def _on_logps(**knobs):
    def run(case: Case):
        if case.target != LOGPS:
            return None
        a = case.args
        return logps_variant(a["logits"], a["labels"], a["response_mask"], **knobs)

    return run


def _on_half_logps(half: str):
    """Half precision shows on half-precision logits only."""
    def run(case: Case):
        if case.target != LOGPS or case.args["logits"].dtype == torch.float32:
            return None
        return _on_logps(half=half)(case)

    return run


def _loss_args(case: Case) -> tuple:
    a = case.args
    return (a["policy_chosen_logps"], a["policy_rejected_logps"], a["ref_chosen_logps"], a["ref_rejected_logps"],
            a["beta"])


def _on_loss(**knobs):
    def run(case: Case):
        if case.target != LOSS or "track_grad" in case.extra:
            return None
        return loss_variant(*_loss_args(case), **knobs)[case.ctx["pick"]]

    return run


DPO_VARIANTS = [
    ("dpo_no_shift", "logits[:, t] scored against labels[:, t], t >= 1", _on_logps(shift="none")),
    ("dpo_labels_preshifted", "logits[:, t] scored against labels[:, t], position 0 counted",
     _on_logps(shift="preshifted")),
    ("dpo_probs_not_logprobs", "softmax probabilities summed", _on_logps(kind="prob")),
    ("dpo_token_mean", "the mean over response tokens", _on_logps(reduce="mean")),
    ("dpo_prompt_counted", "every position counted, -100 read as 0", _on_logps(use_mask=False)),
    ("dpo_prompt_counted", "masked labels set to 0, then every position counted",
     _on_logps(use_mask=False, zero_masked=True)),
    ("dpo_no_fp32_upcast", "log_softmax in the logits' dtype, summed in fp32", _on_half_logps("terms")),
    ("dpo_no_fp32_upcast", "log_softmax and the sum in the logits' dtype", _on_half_logps("sum")),
    ("dpo_swapped", "chosen and rejected exchanged in z", _on_loss(swap="loss")),
    ("dpo_swapped", "chosen and rejected exchanged, the rewards too", _on_loss(swap="all")),
    ("dpo_beta_misplaced", "beta * (pc - pr) - (rc - rr)", _on_loss(beta_at="policy")),
    ("dpo_beta_misplaced", "-beta * logsigmoid((pc - pr) - (rc - rr))", _on_loss(beta_at="outside")),
    ("dpo_log_sigmoid_overflow", "log(sigmoid(z))", _on_loss(form="log_sigmoid")),
    ("dpo_loss_sum", "the sum over the batch", _on_loss(reduce="sum")),
    ("dpo_rewards_no_ref", "rewards = beta * policy_logps", _on_loss(rewards="no_ref")),
]

# What torch says when a -100 label is used as an index (gather and advanced indexing; measured on torch 2.13).
EXCEPTION_BUGS = (("index -100 is out of bounds", DD["dpo_gather_ignored"]),)


# ---------------------------------------------------------------- the cases

def _labels_and_mask(d: Draw, b: int, t: int, v: int, *, ignore: bool, first: bool = False):
    """Token ids in [0, v); per row a prompt prefix (>= 1 token), a response (>= 2 tokens, lengths differing
    by row) and padding; `ignore`: prompt and padding labels -100; `first`: the mask True at position 0 on
    row 0 (its label a real id)."""
    labels = torch.randint(0, v, (b, t), generator=d.gen)
    mask = torch.zeros(b, t, dtype=torch.bool)
    for i in range(b):
        start = d.int(1, max(1, t // 3))
        length = d.int(2, t - start) if i % 2 == 0 else d.int(2, max(2, (t - start) // 2))
        mask[i, start:start + length] = True
    if ignore:
        labels = torch.where(mask, labels, torch.full_like(labels, -100))
    if first:
        mask[0, 0] = True
        labels[0, 0] = d.int(0, v - 1)
    return labels, mask


def _logps_case(d: Draw, name: str, b: int, t: int, v: int, *, dtype: str = "float32", ignore: bool = False,
                first: bool = False, shift: float = 0.0, grads: bool = True) -> Case:
    logits = d.normal(b, t, v, dtype=dtype, scale=2.0, shift=shift)
    labels, mask = _labels_and_mask(d, b, t, v, ignore=ignore, first=first)
    args = {"logits": logits, "labels": labels, "response_mask": mask}
    # the result is fp32 from fp32 log-probs whatever the logits' dtype: graded at fp32 tolerance
    return call_case(d, name, LOGPS, args, dtype=dtype, grads=("logits",) if grads else (), out_shape=(b,),
                     out_dtype=torch.float32, ctx={"tol": "float32"})


def _loss_inputs(d: Draw, b: int, beta: float, extremes: tuple[float, ...] = ()) -> dict:
    """Sequence log-probs of order -10 .. -100; rows 0.. of `extremes` get z set to those values exactly
    (a reference margin of 0 and a policy margin of z / beta, all log-probs negative)."""
    pc = -(torch.rand(b, generator=d.gen) * 90.0 + 10.0)
    pr = -(torch.rand(b, generator=d.gen) * 90.0 + 10.0)
    rc = pc + d.normal(b, scale=3.0)
    rr = pr + d.normal(b, scale=3.0)
    for i, z in enumerate(extremes):  # the lower of the two policy log-probs moved down by |z| / beta
        if z < 0:
            pc[i] = pr[i] + z / beta
        else:
            pr[i] = pc[i] - z / beta
        rc[i], rr[i] = -20.0, -20.0
    return {"policy_chosen_logps": pc, "policy_rejected_logps": pr, "ref_chosen_logps": rc,
            "ref_rejected_logps": rr, "beta": beta}


def _loss_triple(d: Draw, name: str, args: dict) -> list[Case]:
    """One input graded three times: the loss (gradients to both policy log-probs), each reward (none)."""
    b = int(args["policy_chosen_logps"].shape[0])
    loss = call_case(d, f"{name}: loss", LOSS, args, grads=POLICY, out_shape=(), out_dtype=torch.float32)
    out = []
    for pick, what in enumerate(OUTPUTS):
        base = loss if pick == 0 else dataclasses.replace(loss, name=f"{name}: {what}", grad_inputs=(),
                                                          upstream=None)
        out.append(dataclasses.replace(base, ctx={**base.ctx, "what": what, "pick": pick},
                                       extra={**base.extra, "tuple": {"names": list(OUTPUTS), "pick": pick}}))
    assert all(tuple(c.args["policy_chosen_logps"].shape) == (b,) for c in out)
    return out


def _detach_judge(what: str):
    def judge(got) -> Comparison:
        if int(got.reshape(-1)[0]) == 0:
            return Comparison(True, "", "")
        return Comparison(False, "measurement", f"{what} requires grad: it was returned without .detach()",
                          short=f"{what} carries a gradient", diagnosis=DD["dpo_rewards_not_detached"])

    return judge


def _detach_case(d: Draw, pick: int) -> Case:
    what = OUTPUTS[pick]
    args = _loss_inputs(d, 3, 0.1)
    case = Case(name=f"dpo_loss: {what} returned detached (policy log-probs requiring grad)", target=LOSS,
                kind="call", args=args, out_dtype=torch.int64,
                ctx={"dtype": "float32", "what": what, "pick": pick},
                extra={"tuple": {"names": list(OUTPUTS), "pick": pick}, "track_grad": list(POLICY)})
    case.judge = _detach_judge(what)
    return case


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    cases: list[Case] = []
    b, t, v = d.int(2, 4), d.int(6, 12), d.int(20, 60)
    cases.append(_logps_case(d, f"sequence_logprobs fp32 (B,T,V)=({b},{t},{v}), prompt labels real ids", b, t, v))
    b, t, v = d.int(2, 4), d.int(7, 14), d.int(20, 60)
    cases.append(_logps_case(d, f"sequence_logprobs fp32 (B,T,V)=({b},{t},{v}), prompt and padding labels -100",
                             b, t, v, ignore=True))
    b, t, v = d.int(2, 4), d.int(6, 12), d.int(20, 60)
    cases.append(_logps_case(d, f"sequence_logprobs fp32 (B,T,V)=({b},{t},{v}), response_mask[0, 0] True "
                             "(nothing predicts it)", b, t, v, first=True))
    b, t, v = d.int(2, 3), d.int(5, 9), d.int(1000, 2000)
    cases.append(_logps_case(d, f"sequence_logprobs fp32 vocabulary V={v}, labels -100", b, t, v, ignore=True,
                             grads=False))
    b, t, v = d.int(2, 4), d.int(6, 12), d.int(30, 80)
    cases.append(_logps_case(d, f"sequence_logprobs fp16 logits ~15 + N(0, 4) (B,T,V)=({b},{t},{v}), labels -100",
                             b, t, v, dtype="float16", ignore=True, shift=15.0, grads=False))
    b, t, v = d.int(2, 4), d.int(6, 12), d.int(30, 80)
    cases.append(_logps_case(d, f"sequence_logprobs bf16 logits ~10 + N(0, 4) (B,T,V)=({b},{t},{v})", b, t, v,
                             dtype="bfloat16", shift=10.0, grads=False))
    b = d.int(3, 6)
    cases += _loss_triple(d, f"dpo_loss B={b}, beta=0.1", _loss_inputs(d, b, 0.1))
    b = d.int(4, 8)
    beta = d.choice([0.05, 0.5])
    cases += _loss_triple(d, f"dpo_loss B={b}, beta={beta}", _loss_inputs(d, b, beta))
    cases += _loss_triple(d, "dpo_loss B=4, beta=0.1, rows with z = -1e3, +1e3 and -1e4",
                          _loss_inputs(d, 4, 0.1, extremes=(-1e3, 1e3, -1e4)))
    cases += _loss_triple(d, "dpo_loss B=1, beta=0.2", _loss_inputs(d, 1, 0.2))
    b, t, v = d.int(2, 3), d.int(6, 10), d.int(20, 50)
    probe = _logps_case(d, f"repeat call: sequence_logprobs twice, (B,T,V)=({b},{t},{v})", b, t, v, ignore=True)
    labels, mask = _labels_and_mask(d, b, t, v, ignore=True)
    if torch.equal(mask, probe.args["response_mask"]):
        mask = torch.ones_like(mask)
        labels = torch.randint(0, v, (b, t), generator=d.gen)
    cases.append(repeat_after(d, probe, {"labels": labels, "response_mask": mask}))
    probe = _loss_triple(d, "repeat call: dpo_loss twice, B=3", _loss_inputs(d, 3, 0.1))[0]
    cases.append(repeat_after(d, probe, {"beta": 0.1}, scale=20.0, shift=-40.0))
    cases = twice_probes(cases)
    return cases + [_detach_case(d, 1), _detach_case(d, 2)]


def reference(case: Case):
    from drill.reference.rl import dpo_loss, sequence_logprobs

    if "track_grad" in case.extra:
        return torch.tensor([0], dtype=torch.int64), {}
    a = case.args
    if case.target == LOGPS:
        return reference_with_grads(case, lambda x, p: sequence_logprobs(x["logits"], x["labels"],
                                                                         x["response_mask"]))
    pick = case.ctx["pick"]
    return reference_with_grads(case, lambda x, p: dpo_loss(
        x["policy_chosen_logps"], x["policy_rejected_logps"], x["ref_chosen_logps"], x["ref_rejected_logps"],
        a["beta"])[pick])


SPEC = Spec(
    name="dpo",
    graded=(LOGPS, LOSS),
    make_cases=make_cases,
    reference=reference,
    tolerances=TOLERANCES,
    bugs=variant_bugs(DD, DPO_VARIANTS),
    exception_bugs=EXCEPTION_BUGS,
)
