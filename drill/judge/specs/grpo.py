"""Hidden tests for `grpo`: group_advantages(rewards, group_size, normalize_by_std=True, eps=1e-6) and
grpo_clip_loss(logp, old_logp, advantages, response_mask, clip_eps).

What each case is built to reveal:
- group_advantages: group sizes 2, 4, 8 and drawn ones, always at least two groups (statistics over the
  whole batch, or groups taken with a stride, then differ from the contract's); both settings of
  normalize_by_std, given and left to the default (a flag ignored either way); groups whose rewards are
  all equal (binary 0/1 rewards, as a verifier gives: NaN without eps, 0 with it); rewards spread ~1e-3
  (eps inside the square root moves them by tens of percent) and an explicit large eps (any eps other than
  the one passed shows); fp64 rewards (the result is fp32); a repeat call.
- grpo_clip_loss: every ratio drawn inside (1 - clip_eps, 1 + clip_eps) or outside it on either side, at
  least 0.02 from both thresholds, with advantages of both signs, so min/max, the clamp's place and the
  ratio's direction each move the loss; prompt prefixes, padding and a scattered mask with rows of very
  different response lengths (a token mean over the batch, or a mask left out, differ from the
  per-sequence mean); cases with B == T, where an advantage vector broadcast along the token axis runs
  (and is wrong) instead of raising; a repeat call. Gradients with respect to logp are graded on every
  loss case.
"""

from __future__ import annotations

import torch

from drill.judge.registry import default
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

ADV, LOSS = "group_advantages", "grpo_clip_loss"
DEFAULT_NORMALIZE = default("grpo", "normalize_by_std")
DEFAULT_EPS = default("grpo", "eps")
MARGIN = 0.02  # every drawn ratio is at least this far from 1 - clip_eps and 1 + clip_eps

GD = diagnoses(
    Diagnosis("grpo_batch_norm", "Advantages normalised over the whole batch, not per group",
              "GRPO's baseline is the mean of the SAME prompt's responses; its scale the std of that group. "
              "A mean and std over every reward of the batch mixes easy and hard prompts: a group whose "
              "responses all fail still gets advantages of the batch's sign (THUDM/slime #1414).",
              "r = rewards.view(-1, group_size); A = r - r.mean(dim=1, keepdim=True), divided by "
              "(r.std(dim=1, keepdim=True) + eps); then A.view(-1)."),
    Diagnosis("grpo_biased_std", "Group std without Bessel's correction",
              "The contract's std is torch.std's default (divide by n - 1, as TRL's GRPOTrainer); "
              "unbiased=False (or a plain sqrt of the mean squared deviation) gives advantages larger "
              "by sqrt(n / (n - 1)), 41% for groups of two.",
              "Use r.std(dim=1, keepdim=True) (correction=1), not std(unbiased=False) or var(correction=0)."),
    Diagnosis("grpo_no_eps", "No eps in the denominator (NaN on a group of equal rewards)",
              "When every response of a prompt gets the same reward (all right, or all wrong: common with "
              "0/1 rewards) the group's std is 0 and (r - mean) / std is 0 / 0 = NaN, which poisons the whole "
              "loss. The eps argument is there for that: the advantage is then 0.",
              "Divide by (std + eps), with the eps passed in."),
    Diagnosis("grpo_eps_in_sqrt", "eps added inside the square root",
              "The contract divides by std + eps. sqrt(var + eps) is another regulariser: for groups whose "
              "rewards are close together (std near sqrt(eps)) the two differ by tens of percent.",
              "A / (r.std(dim=1, keepdim=True) + eps), not A / torch.sqrt(r.var(...) + eps)."),
    Diagnosis("grpo_strided_groups", "Groups taken with a stride instead of as consecutive slices",
              "One prompt's responses are consecutive: group g is rewards[g * group_size : (g + 1) * "
              "group_size]. rewards[g::n_groups] (or view(group_size, -1) with statistics over dim 0) "
              "groups responses of different prompts together.",
              "rewards.view(n_groups, group_size) (or view(-1, group_size)) and statistics over dim 1."),
    Diagnosis("grpo_std_flag_ignored", "normalize_by_std not honoured",
              "normalize_by_std=False is the mean-only advantage (Dr. GRPO's): r - mean, no division. "
              "True (the default) divides by std + eps. Code that always divides, or never does, is "
              "right for one setting only.",
              "if normalize_by_std: A = A / (std + eps); and nothing otherwise."),
    Diagnosis("grpo_max_not_min", "max instead of min in the clipped objective",
              "The clipped surrogate is a pessimistic bound: per token the SMALLER of ratio * A and "
              "clamp(ratio) * A, then negated as a loss. Taking the larger removes the clipping's purpose "
              "(a ratio far outside the range keeps pushing).",
              "l = -torch.minimum(ratio * A, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * A)."),
    Diagnosis("grpo_ratio_inverted", "Probability ratio inverted",
              "ratio = pi_new / pi_old = exp(logp - old_logp); exp(old_logp - logp) is its inverse, so "
              "the loss pushes the wrong tokens and clips on the wrong side.",
              "ratio = torch.exp(logp - old_logp)."),
    Diagnosis("grpo_clip_advantage", "The clamp applied to the wrong quantity",
              "Only the RATIO is clamped to [1 - clip_eps, 1 + clip_eps]; it then multiplies the advantage. "
              "Clamping the product ratio * A, or the advantage itself, bounds something else.",
              "torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * A."),
    Diagnosis("grpo_token_mean", "Token-level mean over the batch (DAPO's), not the per-sequence mean",
              "The contract averages each sequence over its own response tokens (DeepSeekMath's 1/|o_i|), "
              "then averages the B sequences. One sum over every token of the batch divided by the token "
              "count (DAPO's loss) weighs long responses more, and differs whenever lengths differ.",
              "per_seq = (mask * l).sum(dim=1) / mask.sum(dim=1); loss = per_seq.mean()."),
    Diagnosis("grpo_mask_ignored", "Response mask not used (prompt and padding tokens counted)",
              "Only the tokens where response_mask is True belong to the response: the prompt and the "
              "padding must contribute nothing, to the sum nor to the length that divides it.",
              "m = response_mask.to(l.dtype); per_seq = (l * m).sum(dim=1) / m.sum(dim=1)."),
    Diagnosis("grpo_adv_broadcast", "Advantages broadcast along the token axis",
              "advantages is (B,), one per sequence, and logp is (B, T): ratio * advantages broadcasts the "
              "advantages along the LAST axis, giving token t of every row the advantage of sequence t. "
              "It raises when B != T and is silently wrong when B == T.",
              "Add the token axis: advantages[:, None] (or advantages.unsqueeze(1))."),
    Diagnosis("grpo_sign", "Loss has the wrong sign",
              "The objective min(ratio * A, clamp(ratio) * A) is to be MAXIMISED, so the loss an optimiser "
              "minimises is its negative. Without the minus sign training lowers the probability of the "
              "responses with positive advantages.",
              "l = -torch.minimum(...)."),
)


# ---------------------------------------------------------------- recomputing, one knob per mistake

def advantages_variant(rewards: torch.Tensor, group_size: int, normalize_by_std: bool, eps: float, *,
                       groups: str = "consecutive", std: str = "bessel", eps_at: str = "outside",
                       flag: str = "honoured") -> torch.Tensor:
    """group_advantages with each knob set to one mistake (float64, returned fp32); defaults: the contract.

    groups: "consecutive" | "strided" (rewards[g::n_groups]) | "batch" (one group of everything);
    std: "bessel" | "biased"; eps_at: "outside" | "none" | "sqrt"; flag: "honoured" | "always" | "never"."""
    r = rewards.detach().to(torch.float64)
    n = r.numel()
    n_groups = n // group_size
    if groups == "strided":
        grid = r.reshape(group_size, n_groups).T  # row g holds rewards[g::n_groups]
    elif groups == "batch":
        grid = r.reshape(1, n)
    else:
        grid = r.reshape(n_groups, group_size)
    centred = grid - grid.mean(dim=1, keepdim=True)
    divide = {"honoured": normalize_by_std, "always": True, "never": False}[flag]
    if divide:
        var = grid.var(dim=1, keepdim=True, correction=1 if std == "bessel" else 0)
        denom = {"outside": var.sqrt() + eps, "none": var.sqrt(), "sqrt": (var + eps).sqrt()}[eps_at]
        centred = centred / denom
    out = centred.T.reshape(n) if groups == "strided" else centred.reshape(n)
    return out.to(torch.float32)


def loss_variant(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                 clip_eps: float, *, ratio: str = "right", combine: str = "min", clip: str = "ratio",
                 reduce: str = "sequence", adv: str = "row", sign: float = -1.0) -> torch.Tensor | None:
    """grpo_clip_loss with each knob set to one mistake (float64, returned fp32); defaults: the contract.

    clip: "ratio" | "product" (clamp(ratio * A)) | "advantage" (ratio * clamp(A)); reduce: "sequence" |
    "token" (DAPO) | "all" (mask ignored) | "length_T" (masked sum over T); adv: "row" | "broadcast"
    (A along the token axis: None unless B == T, where it runs)."""
    lp, old = logp.detach().to(torch.float64), old_logp.detach().to(torch.float64)
    a = advantages.detach().to(torch.float64)
    if adv == "broadcast":
        if lp.shape[0] != lp.shape[1]:
            return None
        a = a[None, :]
    else:
        a = a[:, None]
    rho = torch.exp(old - lp) if ratio == "inverted" else torch.exp(lp - old)
    lo, hi = 1.0 - clip_eps, 1.0 + clip_eps
    plain = rho * a
    bounded = {"ratio": lambda: rho.clamp(lo, hi) * a, "product": lambda: plain.clamp(lo, hi),
               "advantage": lambda: rho * a.clamp(lo, hi)}[clip]()
    pick = torch.minimum if combine == "min" else torch.maximum
    per = sign * pick(plain, bounded).expand_as(lp)
    m = mask.to(torch.float64)
    if reduce == "token":
        out = (per * m).sum() / m.sum()
    elif reduce == "all":
        out = per.mean()
    elif reduce == "length_T":
        out = ((per * m).sum(dim=1) / per.shape[1]).mean()
    else:
        out = ((per * m).sum(dim=1) / m.sum(dim=1)).mean()
    return out.to(torch.float32)


def _adv_args(case: Case) -> tuple:
    a = case.args
    return (a["rewards"], a["group_size"], a.get("normalize_by_std", DEFAULT_NORMALIZE), a.get("eps", DEFAULT_EPS))


def _adv(**knobs):
    """A mistake in group_advantages (the loss cases are right)."""
    return lambda case: advantages_variant(*_adv_args(case), **knobs) if case.target == ADV else None


def _loss(**knobs):
    """A mistake in grpo_clip_loss (the advantage cases are right)."""
    def run(case: Case):
        if case.target != LOSS:
            return None
        a = case.args
        return loss_variant(a["logp"], a["old_logp"], a["advantages"], a["response_mask"], a["clip_eps"], **knobs)

    return run


GRPO_VARIANTS = [
    ("grpo_batch_norm", "mean and std over the whole batch", _adv(groups="batch")),
    ("grpo_biased_std", "std with unbiased=False", _adv(std="biased")),
    ("grpo_no_eps", "(r - mean) / std", _adv(eps_at="none")),
    ("grpo_eps_in_sqrt", "(r - mean) / sqrt(var + eps)", _adv(eps_at="sqrt")),
    ("grpo_strided_groups", "group g = rewards[g::n_groups]", _adv(groups="strided")),
    ("grpo_std_flag_ignored", "always divided by std + eps", _adv(flag="always")),
    ("grpo_std_flag_ignored", "never divided by std + eps", _adv(flag="never")),
    ("grpo_max_not_min", "-max(ratio * A, clamp(ratio) * A)", _loss(combine="max")),
    ("grpo_ratio_inverted", "ratio = exp(old_logp - logp)", _loss(ratio="inverted")),
    ("grpo_clip_advantage", "clamp(ratio * A, 1 - eps, 1 + eps)", _loss(clip="product")),
    ("grpo_clip_advantage", "ratio * clamp(A, 1 - eps, 1 + eps)", _loss(clip="advantage")),
    ("grpo_token_mean", "one masked mean over every token of the batch", _loss(reduce="token")),
    ("grpo_mask_ignored", "mean over all T tokens of each row", _loss(reduce="all")),
    ("grpo_mask_ignored", "masked sum divided by T", _loss(reduce="length_T")),
    ("grpo_adv_broadcast", "ratio (B, T) times advantages (B,), broadcast along T", _loss(adv="broadcast")),
    ("grpo_sign", "+min(ratio * A, clamp(ratio) * A)", _loss(sign=1.0)),
]


# ---------------------------------------------------------------- the cases

def _adv_case(d: Draw, name: str, rewards: torch.Tensor, group_size: int, normalize: bool | None = None,
              eps: float | None = None) -> Case:
    """Arguments are positional: eps given means normalize_by_std given too."""
    args: dict = {"rewards": rewards, "group_size": group_size}
    if normalize is not None or eps is not None:
        args["normalize_by_std"] = DEFAULT_NORMALIZE if normalize is None else normalize
    if eps is not None:
        args["eps"] = eps
    return call_case(d, name, ADV, args, out_dtype=torch.float32)


def _with_equal_groups(d: Draw, rewards: torch.Tensor, group_size: int, count: int) -> torch.Tensor:
    """`count` distinct groups set to one value each (drawn), the rest left as drawn."""
    r = rewards.clone().reshape(-1, group_size)
    for g in d.rng.sample(range(r.shape[0]), count):
        r[g] = float(d.choice([0.0, 1.0, -0.5, 2.0]))
    return r.reshape(-1)


def _binary(d: Draw, n_groups: int, group_size: int) -> torch.Tensor:
    """0/1 rewards with one group all 1 and one all 0, the others mixed (at least one of each)."""
    rows = []
    for g in range(n_groups):
        if g < 2:
            rows.append(torch.full((group_size,), float(1 - g)))
            continue
        row = (torch.rand(group_size, generator=d.gen) < 0.5).float()
        row[0], row[1] = 1.0, 0.0
        rows.append(row[torch.randperm(group_size, generator=d.gen)])
    order = torch.randperm(n_groups, generator=d.gen)
    return torch.stack(rows)[order].reshape(-1)


def _ratios(d: Draw, shape: tuple[int, int], clip: float, bands: tuple[str, ...]) -> torch.Tensor:
    """Ratios, each in a band drawn from `bands`: "in" the clip range, "above" or "below" it, MARGIN clear."""
    lo, hi = 1.0 - clip, 1.0 + clip
    edges = {"in": (lo + MARGIN, hi - MARGIN), "above": (hi + MARGIN, hi + 0.6), "below": (max(0.05, lo - 0.5),
                                                                                            lo - MARGIN)}
    pick = torch.randint(0, len(bands), shape, generator=d.gen)
    u = torch.rand(shape, generator=d.gen, dtype=torch.float64)
    out = torch.empty(shape, dtype=torch.float64)
    for i, band in enumerate(bands):
        a, b = edges[band]
        out = torch.where(pick == i, a + (b - a) * u, out)
    return out


def _mask(d: Draw, b: int, t: int, kind: str) -> torch.Tensor:
    """(b, t) bool: "span" (a prompt prefix, a response, padding, lengths varying by row), "scattered"
    (random holes), "full" (every token); each row has at least one True."""
    if kind == "full":
        return torch.ones(b, t, dtype=torch.bool)
    if kind == "scattered":
        m = d.bools(b, t, p=0.55)
        for i in range(b):
            m[i, d.int(0, t - 1)] = True
        return m
    m = torch.zeros(b, t, dtype=torch.bool)
    for i in range(b):
        start = d.int(0, t // 2)
        length = d.int(1, t - start)
        m[i, start:start + length] = True
    return m


def _loss_case(d: Draw, name: str, b: int, t: int, clip: float, *, bands=("in", "above", "below"),
               mask: str = "span") -> Case:
    old = -(torch.rand(b, t, generator=d.gen, dtype=torch.float64) * 4.0 + 0.05)
    rho = _ratios(d, (b, t), clip, bands)
    # the ratio the learner computes from the fp32 log-probs stays MARGIN / 2 clear of the thresholds
    logp = (old + rho.log()).float()
    mag = 0.2 + 1.8 * torch.rand(b, generator=d.gen)
    sign = torch.where(torch.rand(b, generator=d.gen) < 0.5, -1.0, 1.0)
    sign[0], sign[-1] = 1.0, -1.0  # both signs in every case with two rows or more
    args = {"logp": logp, "old_logp": old.float(), "advantages": mag * sign,
            "response_mask": _mask(d, b, t, mask), "clip_eps": clip}
    return call_case(d, name, LOSS, args, grads=("logp",), out_shape=(), out_dtype=torch.float32)


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    size = Distinct().pick  # (group size, groups) never repeats: a cache keyed on it collides only in the probe
    cases: list[Case] = []
    g, n = size(lambda: (2, d.int(3, 6)))
    cases.append(_adv_case(d, f"group_advantages, {n} groups of 2, defaults", d.normal(g * n, scale=2.0), g))
    g, n = size(lambda: (4, d.int(2, 5)))
    cases.append(_adv_case(d, f"group_advantages, {n} groups of 4, normalize_by_std=False",
                           d.normal(g * n, scale=1.5, shift=0.5), g, normalize=False))
    g, n = size(lambda: (8, d.int(3, 5)))
    cases.append(_adv_case(d, f"group_advantages, {n} groups of 8, 0/1 rewards, one group all 1 and one all 0",
                           _binary(d, n, g), g))
    g, n = size(lambda: (d.int(3, 16), d.int(3, 6)))
    cases.append(_adv_case(d, f"group_advantages, {n} groups of {g}, two of equal rewards, normalize_by_std=True",
                           _with_equal_groups(d, d.normal(g * n), g, 2), g, normalize=True))
    g, n = size(lambda: (d.int(3, 12), d.int(2, 5)))
    cases.append(_adv_case(d, f"group_advantages, {n} groups of {g}, one of equal rewards, normalize_by_std=False",
                           _with_equal_groups(d, d.normal(g * n, scale=3.0), g, 1), g, normalize=False))
    g, n = size(lambda: (d.int(2, 10), d.int(2, 6)))
    cases.append(_adv_case(d, f"group_advantages, {n} groups of {g}, rewards spread ~1e-3 (std near sqrt(eps))",
                           d.normal(g * n, scale=1e-3), g))
    g, n = size(lambda: (d.int(3, 10), d.int(2, 5)))
    eps = d.choice([0.05, 0.1, 0.25])
    cases.append(_adv_case(d, f"group_advantages, {n} groups of {g}, eps={eps}", d.normal(g * n, scale=0.3), g,
                           normalize=True, eps=eps))
    g, n = size(lambda: (d.int(2, 8), d.int(2, 4)))
    cases.append(_adv_case(d, f"group_advantages, {n} groups of {g}, fp64 rewards (the result is fp32)",
                           d.normal(g * n).double(), g))
    t = d.int(4, 8)
    cases.append(_loss_case(d, f"grpo_clip_loss (B,T)=({t},{t}), clip_eps=0.2, prompt and padding masked", t, t,
                            0.2))
    b, t = d.int(2, 4), d.int(9, 16)
    cases.append(_loss_case(d, f"grpo_clip_loss (B,T)=({b},{t}), clip_eps=0.2, response lengths varying", b, t, 0.2))
    t = d.int(3, 6)
    cases.append(_loss_case(d, f"grpo_clip_loss (B,T)=({t},{t}), clip_eps=0.1, every ratio outside the clip range",
                            t, t, 0.1, bands=("above", "below")))
    b, t = d.int(3, 6), d.int(5, 10)
    cases.append(_loss_case(d, f"grpo_clip_loss (B,T)=({b},{t}), clip_eps=0.3, scattered mask", b, t, 0.3,
                            mask="scattered"))
    b, t = d.int(2, 4), d.int(4, 8)
    cases.append(_loss_case(d, f"grpo_clip_loss (B,T)=({b},{t}), clip_eps=0.2, every ratio inside the clip range",
                            b, t, 0.2, bands=("in",)))
    t = d.int(5, 9)
    cases.append(_loss_case(d, f"grpo_clip_loss (B,T)=({t},{t}), clip_eps=0.28, every token a response token", t, t,
                            0.28, mask="full"))
    g, n = size(lambda: (d.int(3, 8), d.int(2, 4)))
    probe = _adv_case(d, f"repeat call: group_advantages twice, {n} groups of {g}", d.normal(g * n), g)
    cases.append(repeat_after(d, probe, scale=2.0))
    b, t = d.int(2, 4), d.int(5, 9)
    probe = _loss_case(d, f"repeat call: grpo_clip_loss twice, (B,T)=({b},{t})", b, t, 0.2)
    first = {"logp": probe.args["logp"] - 0.05, "old_logp": probe.args["old_logp"] - 0.05,
             "advantages": -probe.args["advantages"], "response_mask": torch.ones(b, t, dtype=torch.bool)}
    if torch.equal(first["response_mask"], probe.args["response_mask"]):
        first["response_mask"][:, 1:] = False
    cases.append(repeat_after(d, probe, first))
    return twice_probes(cases)


def reference(case: Case):
    from drill.reference.rl import group_advantages, grpo_clip_loss

    if case.target == ADV:
        return group_advantages(*_adv_args(case)), {}
    return reference_with_grads(case, lambda a, p: grpo_clip_loss(
        a["logp"], a["old_logp"], a["advantages"], a["response_mask"], a["clip_eps"]))


SPEC = Spec(
    name="grpo",
    graded=(ADV, LOSS),
    make_cases=make_cases,
    reference=reference,
    tolerances=TOLERANCES,
    bugs=variant_bugs(GD, GRPO_VARIANTS),
)
