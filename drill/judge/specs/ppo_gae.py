"""Hidden tests for `ppo_gae`: gae(rewards, values, dones, last_value, gamma, lam) -> (advantages, returns) and
ppo_clip_loss(logp, old_logp, advantages, clip_eps, mask=None).

What each case is built to reveal:
- gae: episodes ending mid-rollout in every row but one (a done that does not cut the bootstrap, or the
  carry, or is read one step late as CleanRL's "next episode starts here" layout, all move the values);
  a done on the last step of some rows (last_value must not reach them) and none on others (it must);
  an episode of one step; lam 0 (one-step TD), lam 1 with and without dones (the bootstrapped Monte-Carlo
  return: a lam left out is invisible there and shows on every other case), lam strictly between;
  gamma < 1 everywhere; one row (B = 1); a repeat call. Each input is two cases, one per returned element
  (`Case.extra["tuple"]`), so a message names advantages or returns: returns computed as a Monte-Carlo
  reward-to-go, or returned as the advantages, fail the returns' case only.
- ppo_clip_loss: 1-D, 2-D and 3-D inputs; the mask left out, passed as None, and a bool mask whose rows
  keep very different numbers of elements (a per-row mean differs from the batch's masked mean); ratios
  drawn inside (1 - clip_eps, 1 + clip_eps) or outside it on either side, 0.02 clear of both thresholds,
  with advantages of both signs and a mean far from 0 (advantages normalised inside the loss differ);
  a repeat call. Gradients with respect to logp are graded on every loss case.
"""

from __future__ import annotations

import dataclasses

import torch

from drill.judge.spec import Case, Diagnosis, Spec
from drill.judge.specs._common import (
    TOLERANCES,
    Distinct,
    Draw,
    call_case,
    diagnoses,
    reference_with_grads,
    repeat_after,
    twice_probes,
    variant_bugs,
)
from drill.judge.specs.grpo import MARGIN

GAE, LOSS = "gae", "ppo_clip_loss"
OUTPUTS = ("advantages", "returns")

PD = diagnoses(
    Diagnosis("gae_no_done_bootstrap", "V(s_{t+1}) bootstrapped across the end of an episode",
              "When step t ends its episode, the state after it belongs to the NEXT episode (or to nothing): "
              "delta_t = r_t - V_t there, without gamma * V_{t+1}. Only the carry of A was cut.",
              "delta = r[:, t] + gamma * next_value * (1 - done[:, t]) - values[:, t]."),
    Diagnosis("gae_no_done_carry", "Advantage carried across the end of an episode",
              "A_t = delta_t + gamma * lam * (1 - done_t) * A_{t+1}: the next episode's advantage must not "
              "leak into the last step of this one. Only the bootstrap in delta was cut.",
              "last = delta + gamma * lam * (1 - done[:, t]) * last."),
    Diagnosis("gae_forward_scan", "Scan runs forward in time",
              "A_t depends on A_{t+1}, the FUTURE: the recursion must run t = T-1 down to 0, starting from "
              "A_T = 0. Looping t = 0 .. T-1 with the same update carries the past into each step instead.",
              "for t in reversed(range(T)): ... ; the value after step t is values[:, t + 1] (last_value at "
              "t = T-1)."),
    Diagnosis("gae_no_last_value", "last_value not used (V_T taken as 0)",
              "The rollout stops mid-episode in general: its last step bootstraps from V(s_T) = last_value "
              "unless it ended the episode. Taking 0 treats every cut-off rollout as a finished episode.",
              "next_value = last_value at t = T-1, values[:, t + 1] before it."),
    Diagnosis("gae_lambda_missing", "lam missing from the recursion",
              "The carry is gamma * lam * A_{t+1}; without lam the estimate is the lam = 1 one (Monte-Carlo "
              "like, high variance) whatever lam is passed. It is right only for lam = 1.",
              "last = delta + gamma * lam * (1 - done[:, t]) * last."),
    Diagnosis("gae_returns_mc", "Returns computed as a Monte-Carlo reward-to-go",
              "The contract's returns are the value targets A + V (TD(lambda) returns). The discounted sum "
              "of rewards is another target: it equals A + V only for lam = 1.",
              "returns = advantages + values."),
    Diagnosis("gae_returns_are_adv", "Returns are the advantages",
              "returns = advantages + values: the value function's target, not the advantage.",
              "return adv, adv + values."),
    Diagnosis("gae_dones_as_starts", "dones read as 'a new episode starts here' (CleanRL's layout)",
              "Here dones[:, t] is True when step t ENDED its episode, so step t uses 1 - dones[:, t]. CleanRL "
              "stores the flag of the state that starts the next step and reads dones[t + 1] at step t; that "
              "reading applied to this layout cuts every episode one step late.",
              "not_done = 1 - dones[:, t] in both the bootstrap and the carry of step t."),
    Diagnosis("ppo_max_not_min", "max instead of min in the clipped objective",
              "PPO's surrogate takes the SMALLER of ratio * A and clamp(ratio) * A per element (a pessimistic "
              "bound), then negates it as a loss; the larger one undoes the clipping.",
              "l = -torch.minimum(ratio * A, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * A)."),
    Diagnosis("ppo_ratio_inverted", "Probability ratio inverted",
              "ratio = pi_new / pi_old = exp(logp - old_logp); exp(old_logp - logp) is its inverse.",
              "ratio = torch.exp(logp - old_logp)."),
    Diagnosis("ppo_no_clip", "No clipping: the plain policy-gradient surrogate",
              "-ratio * A alone lets one update move the policy arbitrarily far; the loss must take the "
              "minimum with the clamped ratio's term.",
              "l = -torch.minimum(ratio * A, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * A)."),
    Diagnosis("ppo_clip_advantage", "The clamp applied to the wrong quantity",
              "Only the RATIO is clamped to [1 - clip_eps, 1 + clip_eps]; clamping ratio * A, or A itself, "
              "bounds something else.",
              "torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * A."),
    Diagnosis("ppo_mean_per_row", "Masked mean per row, then over rows (GRPO's), not over the whole batch",
              "With a mask the contract's loss is ONE mean over every kept element of the batch, "
              "sum(l * mask) / sum(mask) (TRL's PPO masked_mean). Averaging each row first weighs a row with "
              "few kept elements as much as a full one.",
              "(l * mask).sum() / mask.sum(), no per-row division."),
    Diagnosis("ppo_sign", "Loss has the wrong sign",
              "The clipped objective is to be maximised, so the loss is its negative: without the minus sign "
              "training lowers the probability of actions with positive advantages.",
              "l = -torch.minimum(...)."),
    Diagnosis("ppo_adv_normalized", "Advantages normalised inside the loss",
              "The contract uses the advantages as given: normalising them (minus their mean, over their std) "
              "is the caller's step, done once per minibatch as CleanRL does. Doing it again inside the loss "
              "changes the loss whenever the advantages' mean is not 0 or their std not 1.",
              "Use advantages as passed in."),
    Diagnosis("ppo_mask_ignored", "Mask not used in the mean",
              "With a mask only its True elements count, in the sum and in the count that divides it: "
              "sum(l * mask) / sum(mask). A plain mean, or the masked sum over every element's count, "
              "differs.",
              "if mask is not None: return (l * mask).sum() / mask.sum()."),
    Diagnosis("ppo_mask_none_unhandled", "mask=None not handled",
              "The mask is optional: without it (or with None) the loss is the mean over every element. Code "
              "that uses the mask unconditionally raises on every call without one.",
              "if mask is None: return l.mean(); otherwise the masked mean."),
)


# ---------------------------------------------------------------- recomputing, one knob per mistake

def gae_variant(rewards, values, dones, last_value, gamma: float, lam: float, *, bootstrap_done: bool = True,
                carry_done: bool = True, direction: str = "reverse", last: str = "given", use_lam: bool = True,
                done_at: str = "same", returns: str = "adv_plus_v") -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns) with each knob set to one mistake, in float64, returned fp32; defaults: the contract.

    done_at: "same" (dones[:, t] at step t) | "next_open" / "next_last" (dones[:, t + 1], the last step
    using False or dones[:, T-1]: CleanRL's layout); last: "given" | "zero"; returns: "adv_plus_v" |
    "mc" / "mc_bootstrap" (discounted reward-to-go, cut at dones, the tail without or with last_value) | "adv"."""
    r, v = rewards.double(), values.double()
    d = dones.double()
    steps = r.shape[1]
    if done_at == "same":
        ended = d
    else:
        tail = torch.zeros_like(d[:, -1:]) if done_at == "next_open" else d[:, -1:]
        ended = torch.cat([d[:, 1:], tail], dim=1)
    alive = 1.0 - ended
    boot = last_value.double() if last == "given" else torch.zeros_like(last_value.double())
    nxt = torch.cat([v[:, 1:], boot[:, None]], dim=1)
    delta = r + gamma * nxt * (alive if bootstrap_done else 1.0) - v
    k = gamma * (lam if use_lam else 1.0)
    carry = alive if carry_done else torch.ones_like(alive)
    adv = torch.zeros_like(r)
    run = torch.zeros_like(r[:, 0])
    order = range(steps - 1, -1, -1) if direction == "reverse" else range(steps)
    for t in order:
        run = delta[:, t] + k * carry[:, t] * run
        adv[:, t] = run
    if returns == "adv":
        ret = adv
    elif returns in ("mc", "mc_bootstrap"):
        ret = torch.zeros_like(r)
        acc = boot if returns == "mc_bootstrap" else torch.zeros_like(boot)
        for t in range(steps - 1, -1, -1):
            acc = r[:, t] + gamma * (1.0 - d[:, t]) * acc
            ret[:, t] = acc
    else:
        ret = adv + v
    return adv.float(), ret.float()


def ppo_variant(logp, old_logp, advantages, clip_eps: float, mask=None, *, ratio: str = "right",
                combine: str = "min", clip: str = "ratio", reduce: str = "batch", sign: float = -1.0,
                normalize: bool = False) -> torch.Tensor | None:
    """ppo_clip_loss with each knob set to one mistake (float64, returned fp32); defaults: the contract.

    clip: "ratio" | "product" | "advantage" | "none"; reduce: "batch" | "per_row" (masked mean over the last
    axis, then the mean of the rows) | "plain" (mask ignored) | "numel" (masked sum over every element's count)."""
    lp, old, a = logp.detach().double(), old_logp.detach().double(), advantages.detach().double()
    if normalize:
        a = (a - a.mean()) / (a.std() + 1e-8)
    rho = torch.exp(old - lp) if ratio == "inverted" else torch.exp(lp - old)
    lo, hi = 1.0 - clip_eps, 1.0 + clip_eps
    plain = rho * a
    if clip == "none":
        per = sign * plain
    else:
        bounded = {"ratio": lambda: rho.clamp(lo, hi) * a, "product": lambda: plain.clamp(lo, hi),
                   "advantage": lambda: rho * a.clamp(lo, hi)}[clip]()
        per = sign * (torch.minimum if combine == "min" else torch.maximum)(plain, bounded)
    if mask is None:
        return per.mean().float()
    m = mask.double()
    if reduce == "per_row":
        if lp.dim() < 2:
            return None
        return ((per * m).sum(-1) / m.sum(-1)).mean().float()
    if reduce == "plain":
        return per.mean().float()
    if reduce == "numel":
        return ((per * m).sum() / m.numel()).float()
    return ((per * m).sum() / m.sum()).float()


def _gae(**knobs):
    """A mistake in gae, on the element the case grades (the loss cases are right)."""
    def run(case: Case):
        if case.target != GAE:
            return None
        a = case.args
        out = gae_variant(a["rewards"], a["values"], a["dones"], a["last_value"], a["gamma"], a["lam"], **knobs)
        return out[case.ctx["pick"]]

    return run


def _ppo(masked_only: bool = False, **knobs):
    """A mistake in ppo_clip_loss (the gae cases are right); `masked_only`: it shows with a mask alone."""
    def run(case: Case):
        if case.target != LOSS:
            return None
        a = case.args
        mask = a.get("mask")
        if masked_only and mask is None:
            return None
        return ppo_variant(a["logp"], a["old_logp"], a["advantages"], a["clip_eps"], mask, **knobs)

    return run


PPO_VARIANTS = [
    ("gae_no_done_bootstrap", "gamma * V_{t+1} kept at a done", _gae(bootstrap_done=False)),
    ("gae_no_done_carry", "A_{t+1} carried across a done", _gae(carry_done=False)),
    ("gae_forward_scan", "the same update looped t = 0 .. T-1", _gae(direction="forward")),
    ("gae_no_last_value", "V_T = 0", _gae(last="zero")),
    ("gae_lambda_missing", "A_t = delta_t + gamma * (1 - done_t) * A_{t+1}", _gae(use_lam=False)),
    ("gae_returns_mc", "returns = discounted reward-to-go, cut at dones", _gae(returns="mc")),
    ("gae_returns_mc", "returns = discounted reward-to-go bootstrapped from last_value",
     _gae(returns="mc_bootstrap")),
    ("gae_returns_are_adv", "returns = advantages", _gae(returns="adv")),
    ("gae_dones_as_starts", "dones[:, t + 1] at step t, the last step never done", _gae(done_at="next_open")),
    ("gae_dones_as_starts", "dones[:, t + 1] at step t, the last step dones[:, T-1]", _gae(done_at="next_last")),
    ("ppo_max_not_min", "-max(ratio * A, clamp(ratio) * A)", _ppo(combine="max")),
    ("ppo_ratio_inverted", "ratio = exp(old_logp - logp)", _ppo(ratio="inverted")),
    ("ppo_no_clip", "-ratio * A", _ppo(clip="none")),
    ("ppo_clip_advantage", "clamp(ratio * A, 1 - eps, 1 + eps)", _ppo(clip="product")),
    ("ppo_clip_advantage", "ratio * clamp(A, 1 - eps, 1 + eps)", _ppo(clip="advantage")),
    ("ppo_mean_per_row", "masked mean of each row, then the rows' mean", _ppo(True, reduce="per_row")),
    ("ppo_sign", "+min(ratio * A, clamp(ratio) * A)", _ppo(sign=1.0)),
    ("ppo_adv_normalized", "(A - mean) / (std + 1e-8) inside the loss", _ppo(normalize=True)),
    ("ppo_mask_ignored", "the mean over every element, mask unused", _ppo(True, reduce="plain")),
    ("ppo_mask_ignored", "the masked sum over every element's count", _ppo(True, reduce="numel")),
]

# What Python says when the code uses mask=None as a tensor (or the signature has no default for it): the
# usual first uses of a mask, so that a None of the learner's own making elsewhere (gae) is not named this.
EXCEPTION_BUGS = tuple((needle, PD["ppo_mask_none_unhandled"]) for needle in (
    "bad operand type for unary ~: 'NoneType'",
    *(f"'NoneType' object has no attribute '{attr}'" for attr in ("float", "to", "sum", "bool", "type", "double",
                                                                    "logical_not", "shape", "dim")),
    "unsupported operand type(s) for *: 'Tensor' and 'NoneType'",
    "unsupported operand type(s) for *: 'NoneType' and 'Tensor'",
    "missing 1 required positional argument: 'mask'",
))


# ---------------------------------------------------------------- the cases

def _dones(d: Draw, b: int, t: int, *, p: float = 0.2, last: str = "mixed", short: bool = False) -> torch.Tensor:
    """(b, t) bool: every row but the last (when b > 1) has a done strictly inside the rollout with no done
    right after it; `last`: "mixed" (the last step done on row 0 only), "never", "always"; `short`: an episode
    of one step (two dones in a row) in row 0."""
    m = d.bools(b, t, p=p)
    m[:, -1] = False
    for i in range(b - 1 if b > 1 else b):
        s = d.int(1, t - 3)
        m[i, s], m[i, s + 1] = True, False
    if short:
        s = d.int(1, t - 3)
        m[0, s], m[0, s + 1] = True, True
    if last == "always":
        m[:, -1] = True
    elif last == "mixed":
        m[0, -1] = True
    return m


def _gae_pair(d: Draw, name: str, b: int, t: int, gamma: float, lam: float, dones: torch.Tensor) -> list[Case]:
    args = {"rewards": d.normal(b, t, shift=0.3), "values": d.normal(b, t, scale=2.0, shift=1.0), "dones": dones,
            "last_value": d.normal(b, scale=2.0, shift=1.0), "gamma": gamma, "lam": lam}
    base = call_case(d, name, GAE, args, out_dtype=torch.float32)
    return [_pick(base, i) for i in range(2)]


def _pick(case: Case, pick: int) -> Case:
    what = OUTPUTS[pick]
    return dataclasses.replace(case, name=f"{case.name}: {what}", ctx={**case.ctx, "what": what, "pick": pick},
                               extra={**case.extra, "tuple": {"names": list(OUTPUTS), "pick": pick}})


def _ratios(d: Draw, shape: tuple[int, ...], clip: float) -> torch.Tensor:
    lo, hi = 1.0 - clip, 1.0 + clip
    edges = ((lo + MARGIN, hi - MARGIN), (hi + MARGIN, hi + 0.6), (max(0.05, lo - 0.5), lo - MARGIN))
    pick = torch.randint(0, 3, shape, generator=d.gen)
    u = torch.rand(shape, generator=d.gen, dtype=torch.float64)
    out = torch.empty(shape, dtype=torch.float64)
    for i, (a, b) in enumerate(edges):
        out = torch.where(pick == i, a + (b - a) * u, out)
    return out


def _row_mask(d: Draw, shape: tuple[int, ...]) -> torch.Tensor:
    """Rows (the last axis) keep from one element to all of them, varying by row; at least one per row."""
    m = torch.zeros(shape, dtype=torch.bool)
    rows = m.view(-1, shape[-1])
    for i in range(rows.shape[0]):
        keep = d.int(1, shape[-1])
        start = d.int(0, shape[-1] - keep)
        rows[i, start:start + keep] = True
    rows[0, :] = True  # one full row beside shorter ones
    rows[-1, :] = False
    rows[-1, d.int(0, shape[-1] - 1)] = True  # and one with a single element
    return m


def _loss_case(d: Draw, name: str, shape: tuple[int, ...], clip: float, mask: str) -> Case:
    """mask: "absent" (argument left out), "none" (None passed), "rows" (a bool mask, see _row_mask)."""
    old = -(torch.rand(shape, generator=d.gen, dtype=torch.float64) * 3.0 + 0.05)
    logp = (old + _ratios(d, shape, clip).log()).float()
    mag = 0.2 + 1.8 * torch.rand(shape, generator=d.gen)
    sign = torch.where(torch.rand(shape, generator=d.gen) < 0.4, -1.0, 1.0)
    args = {"logp": logp, "old_logp": old.float(), "advantages": mag * sign + 0.5, "clip_eps": clip}
    if mask == "none":
        args["mask"] = None
    elif mask == "rows":
        args["mask"] = _row_mask(d, shape)
    return call_case(d, name, LOSS, args, grads=("logp",), out_shape=(), out_dtype=torch.float32)


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    key = Distinct().pick  # (B, T) of the gae cases never repeats: a cache keyed on it collides only in the probe
    cases: list[Case] = []
    b, t = key(lambda: (d.int(2, 4), d.int(8, 14)))
    cases += _gae_pair(d, f"gae (B,T)=({b},{t}), gamma=0.99, lam=0.95, episodes ending mid-rollout", b, t, 0.99, 0.95,
                       _dones(d, b, t))
    b, t = key(lambda: (d.int(2, 4), d.int(6, 12)))
    gamma = d.choice([0.9, 0.95])
    cases += _gae_pair(d, f"gae (B,T)=({b},{t}), gamma={gamma}, lam=0 (one-step TD), dones", b, t, gamma, 0.0,
                       _dones(d, b, t))
    b, t = key(lambda: (d.int(2, 3), d.int(6, 12)))
    cases += _gae_pair(d, f"gae (B,T)=({b},{t}), gamma=0.97, lam=1, no dones (bootstrapped Monte-Carlo)", b, t, 0.97,
                       1.0, torch.zeros(b, t, dtype=torch.bool))
    b, t = key(lambda: (d.int(2, 4), d.int(8, 14)))
    cases += _gae_pair(d, f"gae (B,T)=({b},{t}), gamma=0.9, lam=1, dones, every row's last step done", b, t, 0.9, 1.0,
                       _dones(d, b, t, last="always"))
    b, t = key(lambda: (d.int(3, 5), d.int(7, 12)))
    lam = d.choice([0.5, 0.8, 0.9])
    cases += _gae_pair(d, f"gae (B,T)=({b},{t}), gamma=0.95, lam={lam}, an episode of one step, no last step done",
                       b, t, 0.95, lam, _dones(d, b, t, p=0.1, last="never", short=True))
    b, t = key(lambda: (1, d.int(10, 16)))
    cases += _gae_pair(d, f"gae (B,T)=(1,{t}), gamma=0.99, lam=0.9, one row", b, t, 0.99, 0.9,
                       _dones(d, b, t, p=0.1, last="never"))
    n = d.int(12, 40)
    cases.append(_loss_case(d, f"ppo_clip_loss ({n},), clip_eps=0.2, no mask", (n,), 0.2, "absent"))
    b, t = d.int(3, 6), d.int(5, 12)
    cases.append(_loss_case(d, f"ppo_clip_loss ({b},{t}), clip_eps=0.2, a mask keeping rows of different lengths",
                            (b, t), 0.2, "rows"))
    b, t = d.int(2, 5), d.int(4, 9)
    cases.append(_loss_case(d, f"ppo_clip_loss ({b},{t}), clip_eps=0.1, mask=None", (b, t), 0.1, "none"))
    b, t = d.int(2, 3), d.int(3, 6)
    cases.append(_loss_case(d, f"ppo_clip_loss (2,{b},{t}), clip_eps=0.3, a mask", (2, b, t), 0.3, "rows"))
    b, t = d.int(3, 6), d.int(6, 10)
    cases.append(_loss_case(d, f"ppo_clip_loss ({b},{t}), clip_eps=0.2, no mask", (b, t), 0.2, "absent"))
    b, t = d.int(2, 4), d.int(6, 12)
    cases.append(_loss_case(d, f"ppo_clip_loss ({b},{t}), clip_eps=0.25, a mask", (b, t), 0.25, "rows"))
    b, t = key(lambda: (d.int(2, 3), d.int(6, 10)))
    probe = _gae_pair(d, f"repeat call: gae twice, (B,T)=({b},{t})", b, t, 0.99, 0.95, _dones(d, b, t))[0]
    first_dones = _dones(d, b, t, last="never")
    cases.append(repeat_after(d, probe, {"dones": first_dones} if not torch.equal(first_dones, probe.args["dones"])
                              else {"dones": ~probe.args["dones"]}))
    b, t = d.int(2, 4), d.int(5, 9)
    probe = _loss_case(d, f"repeat call: ppo_clip_loss twice, ({b},{t})", (b, t), 0.2, "rows")
    mask = _row_mask(d, (b, t))
    mask = mask if not torch.equal(mask, probe.args["mask"]) else torch.ones(b, t, dtype=torch.bool)
    cases.append(repeat_after(d, probe, {"logp": probe.args["logp"] - 0.05, "old_logp": probe.args["old_logp"] - 0.05,
                                         "advantages": -probe.args["advantages"], "mask": mask}))
    return twice_probes(cases)


def reference(case: Case):
    from drill.reference.rl import gae, ppo_clip_loss

    a = case.args
    if case.target == GAE:
        return gae(a["rewards"], a["values"], a["dones"], a["last_value"], a["gamma"], a["lam"])[case.ctx["pick"]], {}
    return reference_with_grads(case, lambda x, p: ppo_clip_loss(
        x["logp"], x["old_logp"], x["advantages"], x["clip_eps"], x.get("mask")))


SPEC = Spec(
    name="ppo_gae",
    graded=(GAE, LOSS),
    make_cases=make_cases,
    reference=reference,
    tolerances=TOLERANCES,
    bugs=variant_bugs(PD, PPO_VARIANTS),
    exception_bugs=EXCEPTION_BUGS,
)
