"""Hidden tests for `cross_entropy_backward`: d cross_entropy / d logits, by hand, like logits.

Expected values are autograd's through `F.cross_entropy(reduction="mean",
ignore_index=..., label_smoothing=...)` on the logits flattened to (N, V),
taken here in the parent in float64 on the very same (already rounded)
inputs; `drill.reference.cross_entropy_backward` is the closed form the
reference tests hold against it. Ignored rows are fixed at exactly 0
(`Case.zeros`). The denominator and smoothing variants are the gradients of
`cross_entropy`'s own `loss_variant` (one knob per mistake), taken by autograd
here in the parent; the others are the closed form with one piece changed.

Cases: (N, V), (B, T, V), a 1-D (V,) row with a 0-dim target and three
leading dims; no ignored target, -100 ones by default, an ignore_index that
is a class id, one past the vocabulary and -1 (out of range: indexing with
them raises or wraps), every position but one ignored; label smoothing off
and on, with a small V where `ls / (V - 1)` differs from `ls / V` by far more
than the tolerance; logits 1e4 + N(0, 2) (exp overflows without the max) and
spread ~1e4; fp16 and bf16 rows whose target is confidently predicted
(p ~ 0.99: p - 1 rounded in half precision keeps a few bits at most), where
the tolerance is two units in the last place of the result, since one
rounding of an fp32 gradient is all a correct solution does; a repeat call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from drill.judge.allowance import Allowance
from drill.judge.registry import default
from drill.judge.spec import (
    FORBIDDEN_CROSS_ENTROPY_BACKWARD,
    FORBIDDEN_CROSS_ENTROPY_CLASSES,
    Bug,
    Case,
    Diagnosis,
    Spec,
    Tolerance,
)
from drill.judge.specs._common import TOLERANCES, Draw, call_case, diagnoses, repeat_probe, twice_probes
from drill.judge.specs.cross_entropy import (
    DENOM_ALL,
    DENOM_NONE,
    SMOOTH_OTHERS_ONLY,
    draw_targets,
    loss_variant,
)

TARGET = "cross_entropy_backward"
IGNORE_INDEX = default("cross_entropy_backward", "ignore_index")
LABEL_SMOOTHING = default("cross_entropy_backward", "label_smoothing")
# Unit roundoff of each half dtype: a correct result is an fp32 gradient rounded once, within one of these
# (relative; fp16's subnormals below 6.1e-5 within 3e-8 absolute).
ROUNDOFF = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}

# Two units in the last place of the half dtypes, relative; atol (gradients are at most 1 in size, so the
# table's max(1, |expected|) scale leaves it absolute) covers fp16's subnormal spacing.
CEB_TOLERANCES: dict[str, Tolerance] = {
    **TOLERANCES,
    "float16": Tolerance(atol=1e-7, rtol=2.0**-10),
    "bfloat16": Tolerance(atol=1e-7, rtol=2.0**-7),
}

CBD = diagnoses(
    Diagnosis("ceb_sum_not_mean", "Gradient of the summed loss, not of the mean",
              "The loss is the mean over the N kept positions, so every kept row's p - q is divided by N; without "
              "the 1/N the gradient grows with the batch and sequence length.",
              "Divide by the number of kept positions: keep = targets != ignore_index; ... / keep.sum()."),
    Diagnosis("ceb_mean_over_all", "Divided by every position, ignored ones included",
              "N is the number of positions whose target is kept; dividing by all of them makes the gradient "
              "shrink with the amount of padding (F.cross_entropy's mean skips ignored positions).",
              "N = (targets != ignore_index).sum(), not targets.numel()."),
    Diagnosis("ceb_ignored_nonzero", "Ignored rows get a gradient",
              "An ignored position is not in the loss at all, so its whole row of dlogits is exactly 0; leaving "
              "softmax(logits) (or part of the target distribution) there pushes its logits anyway.",
              "Zero the ignored rows at the end: torch.where(keep[..., None], grad, 0), keep = targets != "
              "ignore_index."),
    Diagnosis("ceb_sign", "Gradient with the wrong sign",
              "d(-log p_t)/d z_j = p_j - [j = t]: the target's logit must go up when the loss goes down, so its "
              "gradient is negative (p_t - 1 < 0) and every other class's is positive. (q - p) is the direction "
              "of descent, not the gradient.",
              "Return (softmax(z) - q) / N, q the target distribution."),
    Diagnosis("ceb_smoothing_v_minus_1", "Smoothing spread as ls / (V - 1) over the other classes",
              "F.cross_entropy's label smoothing mixes the one-hot target with a uniform over all V classes, the "
              "target included: q = (1 - ls) * onehot + ls / V. Putting ls / (V - 1) on the other classes only "
              "(and 1 - ls on the target) is another smoothing, off by ls / (V (V - 1)) per class and ls / V on the "
              "target.",
              "q = (1 - ls) * onehot(target) + ls / V on every class."),
    Diagnosis("ceb_no_smoothing", "label_smoothing ignored",
              "With label smoothing ls the target distribution is (1 - ls) * onehot + ls / V, so the gradient is "
              "p - q with that q, not p - onehot.",
              "Build q from label_smoothing: q = (1 - ls) * onehot(target) + ls / V."),
    Diagnosis("ceb_unstable_softmax", "Softmax without subtracting the row max",
              "exp(z) overflows to inf above ~88 in fp32, and inf / inf is NaN: with logits ~1e4 the gradient is "
              "NaN (or 0 where exp underflows), although softmax itself is a modest number.",
              "Subtract each row's max before exp, or call torch.softmax (allowed here), in fp32."),
    Diagnosis("ceb_index_with_ignore", "Ignored targets used as class indices",
              "An ignored position's target is not a class id: it may be -100, -1, or past the vocabulary. "
              "Scattering, gathering or one-hot encoding with it raises, or wraps around to another class.",
              "Replace ignored targets before indexing, torch.where(keep, targets, 0), then zero those rows."),
    Diagnosis("ceb_half_math", "Gradient computed in half precision",
              "In fp16/bf16 p is rounded before p - q is formed: where the model is confident (p ~ 1) the "
              "difference keeps only the few bits that survive, off by whole percents, and 1/N and ls / V round "
              "again. An fp32 gradient rounded once is within half a unit in the last place.",
              "z = logits.float(); compute softmax, q and the division in fp32; cast only the result back with "
              ".to(logits.dtype)."),
)


# ---------------------------------------------------------------- the variants


def _args(case: Case) -> tuple[torch.Tensor, torch.Tensor, int, float]:
    a = case.args
    return a["logits"], a["targets"], a.get("ignore_index", IGNORE_INDEX), a.get("label_smoothing", LABEL_SMOOTHING)


def loss_grad(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int, ls: float, **knobs: Any) -> torch.Tensor:
    """The gradient of `cross_entropy`'s `loss_variant` with `knobs` (fp32 logits), taken by autograd here."""
    z = logits.detach().float().requires_grad_(True)
    (grad,) = torch.autograd.grad(loss_variant(z, targets, ignore_index, ls, **knobs), z)
    return grad


def _of_loss(shows: Callable[[Case], bool] = lambda case: True, smoothing: bool = True,
             **knobs: Any) -> Callable[[Case], Any]:
    """A variant that is the gradient of a loss variant; `smoothing=False` drops label_smoothing."""

    def run(case: Case) -> Any:
        if not shows(case):
            return None
        logits, targets, ignore, ls = _args(case)
        return loss_grad(logits, targets, ignore, ls if smoothing else 0.0, **knobs)

    return run


def _right(case: Case) -> torch.Tensor:
    from drill.reference.loss import cross_entropy_backward

    return cross_entropy_backward(case.args["logits"].float(), *_args(case)[1:])


IGNORED_P, IGNORED_P_MINUS_UNIFORM, IGNORED_INDEX_0 = "p", "p_minus_uniform", "index_0"


def _ignored_rows(fill: str) -> Callable[[Case], Any]:
    """The right kept rows, and on ignored rows what code that forgot to zero them leaves (over the kept N)."""

    def run(case: Case) -> Any:
        logits, targets, ignore, ls = _args(case)
        keep = (targets != ignore).unsqueeze(-1)
        if bool(keep.all()):
            return None
        z = logits.float()
        v = z.shape[-1]
        p = torch.softmax(z, dim=-1)
        left = {IGNORED_P: p, IGNORED_P_MINUS_UNIFORM: p - ls / v,
                IGNORED_INDEX_0: p - ls / v - (1.0 - ls) * (torch.arange(v) == 0)}[fill]
        return torch.where(keep, _right(case), left / keep.sum())

    return run


def _sign(case: Case) -> torch.Tensor:
    return -_right(case)


def _unshifted(case: Case) -> Any:
    """(p - q) / N on kept rows with p = exp(z) / sum(exp(z)) in fp32 (inf / inf = NaN past ~88), ignored rows 0."""
    if not _large(case):
        return None
    logits, targets, ignore, _ = _args(case)
    e = logits.float().exp()
    p = e / e.sum(dim=-1, keepdim=True)
    right = _right(case)
    kept = (targets != ignore).unsqueeze(-1)
    n = kept.sum()
    return torch.where(kept, right + (p - torch.softmax(logits.float(), dim=-1)) / n, right)


def _large(case: Case) -> bool:
    return bool(case.args["logits"].float().abs().max() > 80)


def _smoothed(case: Case) -> bool:
    return _args(case)[3] > 0


def _half_math(case: Case, got: Any) -> Any:
    """The family of half-precision computations: any output within a few roundings of the logits' dtype of the
    right one (each of p, q, p - q and the division by N rounded once, whatever the order)."""
    logits, targets, ignore, ls = _args(case)
    if logits.dtype not in ROUNDOFF:
        return None
    z = logits.float().reshape(-1, logits.shape[-1])
    t = targets.reshape(-1)
    keep = t != ignore
    p = torch.softmax(z, dim=-1)
    q = torch.full_like(p, ls / z.shape[-1])
    q[keep, torch.where(keep, t, 0)[keep]] += 1.0 - ls
    n = keep.sum()
    right = _right(case).double()
    scale = (p.abs() + q.abs() + (p - q).abs()).double().reshape(right.shape) / n
    bound = 8 * ROUNDOFF[logits.dtype] * scale + 1e-7
    g = got.double()
    if not bool(torch.isfinite(g).all()) or bool(((g - right).abs() > bound).any()):
        return None  # not a rounding of the right gradient: as if the reference, which the output fails
    return got.clone()


BUGS = (
    Bug(CBD["ceb_sum_not_mean"], _of_loss(denom=DENOM_NONE), "the summed loss's gradient (no 1/N)"),
    Bug(CBD["ceb_mean_over_all"], _of_loss(denom=DENOM_ALL), "divided by every position"),
    Bug(CBD["ceb_ignored_nonzero"], _ignored_rows(IGNORED_P), "softmax left on ignored rows"),
    Bug(CBD["ceb_ignored_nonzero"], _ignored_rows(IGNORED_P_MINUS_UNIFORM), "p - ls / V left on ignored rows"),
    Bug(CBD["ceb_ignored_nonzero"], _ignored_rows(IGNORED_INDEX_0), "ignored rows given class 0 as their target"),
    Bug(CBD["ceb_sign"], _sign, "(q - p) / N"),
    Bug(CBD["ceb_smoothing_v_minus_1"], _of_loss(_smoothed, smooth=SMOOTH_OTHERS_ONLY),
        "ls / (V - 1) on the other classes, 1 - ls on the target"),
    Bug(CBD["ceb_no_smoothing"], _of_loss(_smoothed, smoothing=False), "p - onehot whatever label_smoothing"),
    Bug(CBD["ceb_unstable_softmax"], _unshifted, "exp(z) / sum(exp(z)) unshifted"),
    Bug(CBD["ceb_half_math"], _half_math, "softmax, q and p - q in the logits' dtype", fit=True),
)

# What torch says when an ignored target is used as an index (measured on torch 2.13): scatter, gather
# and advanced indexing with -100 or V + k, and F.one_hot with either.
EXCEPTION_BUGS = (
    ("is out of bounds for dimension", CBD["ceb_index_with_ignore"]),
    ("Class values must be non-negative", CBD["ceb_index_with_ignore"]),
    ("Class values must be smaller than num_classes", CBD["ceb_index_with_ignore"]),
)


# ---------------------------------------------------------------- the cases


def _case(d: Draw, name: str, logits: torch.Tensor, targets: torch.Tensor, *, ignore_index: int | None = None,
          label_smoothing: float | None = None, dtype: str = "float32") -> Case:
    """A call with only the arguments given (ignore_index is passed whenever label_smoothing is, as arguments are
    positional); the ignored rows are fixed at exactly 0."""
    args: dict[str, Any] = {"logits": logits, "targets": targets}
    if ignore_index is not None or label_smoothing is not None:
        args["ignore_index"] = IGNORE_INDEX if ignore_index is None else ignore_index
    if label_smoothing is not None:
        args["label_smoothing"] = label_smoothing
    case = call_case(d, name, TARGET, args, dtype=dtype, out_dtype=logits.dtype)
    ignored = targets == args.get("ignore_index", IGNORE_INDEX)
    case.zeros = ignored.unsqueeze(-1).expand(logits.shape).clone()
    return case


def _peaked(d: Draw, n: int, v: int, dtype: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows whose target is predicted with p ~ 0.99 (its logit 8-10 above N(0, 1) others)."""
    z = d.normal(n, v)
    t = torch.randint(0, v, (n,), generator=d.gen)
    z[torch.arange(n), t] += 8.0 + 2.0 * torch.rand(n, generator=d.gen)
    return z.to(getattr(torch, dtype)), t


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    cases: list[Case] = []
    n, v = d.int(4, 12), d.int(10, 120)
    cases.append(_case(d, f"fp32 (N,V)=({n},{v}), every target kept", d.normal(n, v, scale=3.0),
                       draw_targets(d, (n,), v)))
    b, t, v = d.int(2, 3), d.int(3, 7), d.int(10, 80)
    cases.append(_case(d, f"fp32 (B,T,V)=({b},{t},{v})", d.normal(b, t, v, scale=3.0), draw_targets(d, (b, t), v)))
    v = d.int(10, 120)
    cases.append(_case(d, f"fp32 1-D logits ({v},) with a 0-dim target", d.normal(v, scale=3.0),
                       draw_targets(d, (), v)))
    n, v = d.int(6, 14), d.int(10, 80)
    cases.append(_case(d, f"fp32 (N,V)=({n},{v}), some targets -100 (default ignore_index)",
                       d.normal(n, v, scale=3.0), draw_targets(d, (n,), v, -100)))
    b, t, v = 2, d.int(4, 8), d.int(10, 80)
    custom = d.int(0, v - 1)
    cases.append(_case(d, f"fp32 (B,T,V), ignore_index={custom} (a class id) on some positions",
                       d.normal(b, t, v, scale=3.0), draw_targets(d, (b, t), v, custom), ignore_index=custom))
    n, v = d.int(6, 12), d.int(10, 80)
    past = v + d.int(0, 50)
    cases.append(_case(d, f"fp32 (N,V)=({n},{v}), ignore_index={past} (past the vocabulary) on some positions",
                       d.normal(n, v, scale=3.0), draw_targets(d, (n,), v, past), ignore_index=past))
    b, t, v = 2, d.int(3, 6), d.int(10, 80)
    ls = d.choice([0.1, 0.2])
    cases.append(_case(d, f"fp32 (B,T,V), ignore_index=-1 and label_smoothing={ls}", d.normal(b, t, v, scale=3.0),
                       draw_targets(d, (b, t), v, -1), ignore_index=-1, label_smoothing=ls))
    n, v = d.int(4, 12), d.int(10, 120)
    ls = d.choice([0.05, 0.1, 0.2])
    cases.append(_case(d, f"fp32 (N,V), label_smoothing={ls}", d.normal(n, v, scale=3.0), draw_targets(d, (n,), v),
                       label_smoothing=ls))
    b, t, v = d.int(2, 3), d.int(3, 7), d.int(10, 80)
    ls = d.choice([0.1, 0.3])
    cases.append(_case(d, f"fp32 (B,T,V), label_smoothing={ls} and targets -100", d.normal(b, t, v, scale=3.0),
                       draw_targets(d, (b, t), v, -100), label_smoothing=ls))
    n, v, ls = d.int(6, 12), d.int(3, 6), d.choice([0.3, 0.4, 0.5])
    confident = d.normal(n, v, scale=3.0)
    cases.append(_case(d, f"fp32 small vocabulary V={v}, label_smoothing={ls}, each target its row's most likely "
                       "class", confident, confident.argmax(-1), label_smoothing=ls))
    n, v = d.int(3, 6), d.int(1000, 3000)
    cases.append(_case(d, f"fp32 vocabulary-sized V={v}, label_smoothing=0.1, targets -100", d.normal(n, v, scale=2.0),
                       draw_targets(d, (n,), v, -100), label_smoothing=0.1))
    n, v = d.int(4, 10), d.int(10, 80)
    cases.append(_case(d, "fp32 large logits close together (1e4 + N(0, 2): exp overflows unshifted)",
                       d.normal(n, v, scale=2.0, shift=1e4), draw_targets(d, (n,), v)))
    b, t, v = 2, d.int(3, 6), d.int(10, 80)
    cases.append(_case(d, "fp32 logits spread ~1e4, label_smoothing=0.1, targets -100", d.normal(b, t, v, scale=1e4),
                       draw_targets(d, (b, t), v, -100), label_smoothing=0.1))
    v = d.int(10, 80)
    lone = draw_targets(d, (2, 2, 3), v, -100, frac=1.0)
    cases.append(_case(d, "fp32 (2,2,3,V), every position but one ignored", d.normal(2, 2, 3, v, scale=3.0), lone))
    n, v = d.int(6, 12), d.int(10, 120)
    cases.append(_case(d, "fp16 (N,V), targets -100", d.normal(n, v, dtype="float16", scale=3.0),
                       draw_targets(d, (n,), v, -100), dtype="float16"))
    n, v = d.int(6, 12), d.int(20, 200)
    cases.append(_case(d, "fp16 confident rows (p ~ 0.99 on the target: p - 1 cancels in fp16)",
                       *_peaked(d, n, v, "float16"), dtype="float16"))
    b, t, v = 2, d.int(3, 6), d.int(30, 200)
    cases.append(_case(d, "fp16 logits ~1e4 + N(0, 4), label_smoothing=0.1",
                       d.normal(b, t, v, dtype="float16", scale=4.0, shift=1e4), draw_targets(d, (b, t), v),
                       label_smoothing=0.1, dtype="float16"))
    b, t, v = 2, d.int(3, 6), d.int(10, 80)
    cases.append(_case(d, "bf16 (B,T,V), label_smoothing=0.1 and targets -100",
                       d.normal(b, t, v, dtype="bfloat16", scale=3.0), draw_targets(d, (b, t), v, -100),
                       label_smoothing=0.1, dtype="bfloat16"))
    n, v = d.int(6, 12), d.int(20, 200)
    cases.append(_case(d, "bf16 confident rows (p ~ 0.99 on the target: p - 1 cancels in bf16)",
                       *_peaked(d, n, v, "bfloat16"), dtype="bfloat16"))
    n, v = d.int(6, 12), d.int(30, 200)
    cases.append(_case(d, "bf16 logits ~2e3 + N(0, 4), targets -100",
                       d.normal(n, v, dtype="bfloat16", scale=4.0, shift=2e3), draw_targets(d, (n,), v, -100),
                       dtype="bfloat16"))
    cases.append(_repeat_case(d))
    return twice_probes(cases)


def _repeat_case(d: Draw) -> Case:
    """Two calls with the same shapes, options and ignored positions, other logits and targets."""
    n, v = d.int(4, 10), d.int(10, 80)
    targets = draw_targets(d, (n,), v, -100)
    case = _case(d, f"repeat call: cross_entropy_backward called twice, logits ({n},{v})", d.normal(n, v, scale=3.0),
                 targets, label_smoothing=0.1)
    other = torch.where(targets == -100, targets, (targets + 1 + d.int(0, v - 2)) % v)
    return repeat_probe(case, {**case.args, "logits": d.normal(n, v, scale=3.0, shift=0.5), "targets": other})


def reference(case: Case):
    """Autograd of F.cross_entropy (reduction="mean"), in float64 on the case's own logits, never in the child."""
    import torch.nn.functional as F

    logits, targets, ignore, ls = _args(case)
    z = logits.detach().double().requires_grad_(True)
    loss = F.cross_entropy(z.reshape(-1, z.shape[-1]), targets.reshape(-1), ignore_index=ignore,
                           label_smoothing=ls, reduction="mean")
    (grad,) = torch.autograd.grad(loss, z)
    return grad.float(), {}


SPEC = Spec(
    name="cross_entropy_backward",
    allowance=Allowance(extra=("_softmax",), graded_backward=False),  # the op families and softmax (issue 30 §3)
    graded=(TARGET,),
    make_cases=make_cases,
    reference=reference,
    tolerances=CEB_TOLERANCES,
    bugs=BUGS,
    exception_bugs=EXCEPTION_BUGS,
    forbidden=FORBIDDEN_CROSS_ENTROPY_BACKWARD,
    forbidden_classes=FORBIDDEN_CROSS_ENTROPY_CLASSES,
)
