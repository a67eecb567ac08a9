"""Building blocks of the normalisation exercises (rmsnorm, layernorm; later rmsnorm_backward, decoder_block).

Three kinds, each parametrised by the exercise:
- `normalise`: one recomputation of a norm with every knob a real mistake
  turns (centring, which statistic, where eps goes, the axis, the compute
  dtype, weight/bias), so a bug variant is one call with one knob changed;
- diagnosis templates (`missing_param`, `eps_outside_sqrt`,
  `half_precision_stats`, `wrong_axis`, `wrong_default_eps`,
  `unbiased_variance`, `variance_cancellation`) whose why/fix name the
  exercise's own statistic and code, under ids prefixed by the exercise
  (`rms_`, `ln_`), and variant builders (`wrong_axis_variants`,
  `in_input_dtype`, `default_eps_variants`, `cancellation_fit`);
- `norm_cases`: the hidden-test battery every norm needs (2-D/3-D/4-D,
  non-zero mean, tiny inputs against eps, an explicit eps, fp16 inputs whose
  squares overflow, bf16, a repeat call), drawn in a fixed order around the
  exercise's own case builder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from drill.judge.spec import Bug, Case, Diagnosis
from drill.judge.specs._common import Draw, repeat_probe, twice_probes

# Where eps goes: inside the root (right), added to the root, or added to its reciprocal.
EPS_INSIDE, EPS_OUTSIDE, EPS_ON_RECIPROCAL = "inside", "outside", "reciprocal"
# Which statistic divides: the mean of squares of the numerator (RMS; LayerNorm's variance once
# centred), torch's population variance of x, or the unbiased (n - 1) variance of x.
STAT_MEAN_SQUARE, STAT_VAR, STAT_VAR_UNBIASED = "mean_square", "var", "var_unbiased"


def _mean(t: torch.Tensor, dim: int | None) -> torch.Tensor:
    return t.mean(dim=dim, keepdim=True) if dim is not None else t.mean()


def normalise(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float, *, centre: bool = False,
    stat: str = STAT_MEAN_SQUARE, eps_at: str = EPS_INSIDE, dim: int | None = -1, upcast: bool = True,
) -> torch.Tensor:
    """`(x [- mean]) / sqrt(stat + eps) * weight [+ bias]`, returned in fp32; each knob is one mistake.

    RMSNorm is the default; LayerNorm is `centre=True` with a bias. `dim=None`
    takes the statistic over every element; `upcast=False` computes in x's
    own dtype (the half-precision mistake) and only casts the result.
    """
    xf = x.float() if upcast else x
    num = xf - _mean(xf, dim) if centre else xf
    if stat == STAT_MEAN_SQUARE:
        s = _mean(num.pow(2), dim)
    else:
        unbiased = stat == STAT_VAR_UNBIASED
        s = xf.var(dim=dim, keepdim=True, unbiased=unbiased) if dim is not None else xf.var(unbiased=unbiased)
    if eps_at == EPS_INSIDE:
        out = num * torch.rsqrt(s + eps)
    elif eps_at == EPS_OUTSIDE:
        out = num / (s.sqrt() + eps)
    else:
        out = num * (torch.rsqrt(s) + eps)
    if weight is not None:
        out = out * weight.to(xf.dtype)
    if bias is not None:
        out = out + bias.to(xf.dtype)
    return out.float()


def over_axis(dim: int | None) -> Callable[[torch.Tensor], bool]:
    """Whether the statistic over `dim` differs from the last-axis one for x (the wrong-axis variants)."""

    def shows(x: torch.Tensor) -> bool:
        if dim is None:
            return True
        return dim < x.dim() and dim % x.dim() != x.dim() - 1

    return shows


# ---------------------------------------------------------------- variants shared by the norms

# The axes a statistic is wrongly taken over: the batch, the next axis, the tokens, everything.
WRONG_AXES = (0, 1, -2, None)


def wrong_axis_variants(diagnosis: Diagnosis, what: str, **knobs: Any) -> tuple[Bug, ...]:
    """One bug per axis of WRONG_AXES: the norm (`normalise` with `knobs`) over it, where it is not the last one.

    `what` names the statistic in the label ("mean over dim 0").
    """

    def variant(dim: int | None) -> Callable[[Case], Any]:
        shows = over_axis(dim)
        return norm_variant(lambda x, w, b, eps: normalise(x, w, b, eps, dim=dim, **knobs) if shows(x) else None)

    return tuple(Bug(diagnosis, variant(dim), f"{what} over {'every element' if dim is None else f'dim {dim}'}")
                 for dim in WRONG_AXES)


def in_input_dtype(**knobs: Any) -> Callable[[Case], Any]:
    """The norm (`normalise` with `knobs`) computed in a half-precision input's own dtype; fp32 cases unchanged."""
    return norm_variant(lambda x, w, b, eps: None if x.dtype == torch.float32 else normalise(
        x, w, b, eps, upcast=False, **knobs))


# ---------------------------------------------------------------- diagnosis templates


def missing_param(prefix: str, param: str = "weight") -> Diagnosis:
    """`<prefix>_missing_<param>`: the learnable weight (scale, ones) or bias (shift, zeros) never applied."""
    scale = param == "weight"
    return Diagnosis(
        f"{prefix}_missing_{param}", f"{param.capitalize()} not applied",
        f"The normalised value must be {'scaled' if scale else 'shifted'} by the learnable `{param}`; it is not "
        f"(it only looks right while {param} is all {'ones' if scale else 'zeros'}).",
        f"{'Multiply by' if scale else 'Add'} self.{param} at the end.",
    )


def eps_outside_sqrt(prefix: str, stat: str, code: str) -> Diagnosis:
    """`<prefix>_eps_outside_sqrt`; `stat` is the statistic in words/math, `code` the right expression of it."""
    return Diagnosis(
        f"{prefix}_eps_outside_sqrt", "eps added outside the square root",
        f"sqrt({stat}) + eps differs from sqrt({stat} + eps) when {stat} is comparable to eps "
        "(small inputs or a large eps).",
        f"Add eps inside: torch.rsqrt({code} + eps).",
    )


def half_precision_stats(prefix: str) -> Diagnosis:
    """`<prefix>_no_fp32_upcast`: the statistic accumulated in fp16/bf16."""
    return Diagnosis(
        f"{prefix}_no_fp32_upcast", "Statistics computed in half precision",
        "Squaring fp16 values above ~256 overflows to inf (and bf16 sums lose precision), so the output collapses.",
        "Compute in fp32: xf = x.float(), normalise, then cast back with .to(x.dtype).",
    )


def wrong_axis(prefix: str, stat: str, fix: str) -> Diagnosis:
    """`<prefix>_wrong_axis`: the statistic taken over another axis (or all of x), not per token."""
    return Diagnosis(
        f"{prefix}_wrong_axis", "Normalised over the wrong axis",
        f"The {stat} must be over the last dimension (features) only, one statistic per token.", fix,
    )


def eps_text(eps: float) -> str:
    """1e-05 as people write it: 1e-5."""
    return f"{eps:g}".replace("e-0", "e-")


def wrong_default_eps(prefix: str, default: float, why: str) -> Diagnosis:
    """`<prefix>_wrong_default_eps`: the constructor's default eps is not the contract's (`why`: whose it is)."""
    return Diagnosis(
        f"{prefix}_wrong_default_eps", f"Default eps is not {eps_text(default)}",
        f"The contract expects eps={eps_text(default)} when none is passed ({why}); another default changes every "
        "output whose variance is comparable to eps, silently.",
        f"Make the signature's default eps={eps_text(default)}.",
    )


def unbiased_variance(prefix: str) -> Diagnosis:
    """`<prefix>_unbiased_variance`: divides by dim - 1 (torch.var's default) instead of dim."""
    return Diagnosis(
        f"{prefix}_unbiased_variance", "Unbiased variance (divides by dim - 1)",
        "The variance of a normalisation is the population variance, sum((x - mean)**2) / dim; torch.var and "
        "Tensor.var divide by dim - 1 unless told otherwise, which scales every output by sqrt((dim - 1) / dim).",
        "Use x.var(-1, unbiased=False, keepdim=True) (or correction=0), or ((x - mean)**2).mean(-1, keepdim=True).",
    )


def variance_cancellation(prefix: str) -> Diagnosis:
    """`<prefix>_var_cancellation`: the variance as E[x^2] - E[x]^2, which cancels when the mean is large."""
    return Diagnosis(
        f"{prefix}_var_cancellation", "Variance computed as E[x^2] - E[x]^2",
        "With a large mean and a small spread, E[x^2] and E[x]^2 are two nearly equal big numbers: their "
        "difference keeps only the rounding error of each (in fp32, ~1e-7 x mean^2), so the variance, and every "
        "output of the row, is off, or NaN when the difference comes out negative.",
        "Centre first, then square: mean = x.mean(-1, keepdim=True); var = ((x - mean)**2).mean(-1, keepdim=True).",
    )


# ---------------------------------------------------------------- the case battery

# What the build function of `norm_cases` receives: (draw, name, shape, eps or None for the
# default, dtype, scale, shift, grads) -> Case; it draws x first, then its parameters.
NormBuild = Callable[..., Case]


def norm_cases(d: Draw, build: NormBuild, more: Callable[[Draw, NormBuild], list[Case]] | None = None) -> list[Case]:
    """The hidden tests every last-axis norm needs, in a fixed drawing order, then a repeat call.

    Random weights (from `build`) catch a missing weight; a mean of 3 catches
    centring (or its absence); tiny inputs and eps=1e-2 catch eps outside the
    root and a wrong default eps; fp16 at ~400 (squares overflow) catches
    half-precision statistics; 2-D/3-D/4-D shapes catch a wrong axis.
    `more(d, build)` adds an exercise's own cases after these and before the
    repeat call (drawn there, so the cases above stay the same for a seed).
    """
    D1, D2, D3 = d.choice([16, 32, 48]), d.choice([8, 24, 64]), d.choice([12, 40])
    cases = [
        build(d, f"fp32 (B,T,{D1}), default eps, random weight", (2, d.int(3, 7), D1), grads=True),
        build(d, f"fp32 2-D (N,{D2}), eps=1e-2", (d.int(3, 6), D2), eps=1e-2, grads=True),
        build(d, f"fp32 4-D (2,3,4,{D3}), inputs with mean 3", (2, 3, 4, D3), shift=3.0),
        build(d, "fp32 tiny inputs (~1e-4), default eps", (2, 5, D1), scale=1e-4),
        build(d, "fp32 (B,T,d), eps=1e-5 passed explicitly", (3, 4, D2), eps=1e-5, grads=True),
        build(d, "fp16 (B,T,d)", (2, 6, D1), dtype="float16"),
        build(d, "fp16 inputs of magnitude ~400 (squares overflow fp16)", (2, 4, D2), dtype="float16", scale=400.0),
        build(d, "bf16 (B,T,d), inputs with mean 1", (2, 5, D3), dtype="bfloat16", shift=1.0),
    ]
    if more is not None:
        cases += more(d, build)
    shape = (2, d.int(3, 6), D2)  # drawn last: the cases above are unchanged for a seed
    first = d.normal(*shape, scale=3.0, shift=1.0)  # the same module first sees other inputs: a cached statistic shows
    cases.append(repeat_probe(build(d, f"repeat call: one module called twice, x {shape}", shape), {"x": first}))
    return twice_probes(cases)  # the first plain fp32 cases are also called twice: non-determinism shows


# Defaults people carry over from other norms and libraries, tried in this order: RMSNorm's and
# Llama's 1e-6, BERT's 1e-12, then other round values seen in the wild.
OTHER_EPS = (1e-6, 1e-12, 1e-8, 1e-7, 1e-4, 1e-3)


def default_eps_variants(
    diagnosis: Diagnosis, recompute: Callable[..., Any], contract: float, others: tuple[float, ...] = OTHER_EPS,
) -> tuple[Bug, ...]:
    """One bug variant per other default eps: cases built without eps use it, those given one use theirs.

    `recompute(x, weight, bias, eps)` is the right norm; a case built with
    the contract's default carries `ctx["default_eps"]` (set by the spec's
    case builder), the others pass their eps explicitly and are unaffected.
    """

    def variant(eps_used: float) -> Callable[[Case], Any]:
        def run(case: Case) -> Any:
            if not case.ctx.get("default_eps"):
                return None
            return recompute(case.args["x"], case.params["weight"], case.params.get("bias"), eps_used)

        return run

    return tuple(Bug(diagnosis, variant(e), f"default eps={eps_text(e)} instead of {eps_text(contract)}")
                 for e in others)


def cancellation_fit(diagnosis: Diagnosis, spread: float = 64.0) -> Bug:
    """The E[x^2] - E[x]^2 family: per row, the right centred output scaled as a misjudged variance scales it.

    The rounding error that cancellation leaves depends on the summation
    order, so no single recomputation reproduces a learner's; the family's
    free parameter is each row's variance, fitted from the learner's output
    (least squares of (got - bias) / weight on x - mean). A member is offered
    only on cases marked `ctx["big_mean"]` (elsewhere cancellation cannot
    show: the family is the reference there) and only when every fitted
    variance is within `spread` x mean^2 x fp32's eps of the true one, the
    size of error the cancellation leaves; an output that is no per-row
    rescaling (another mistake) is then not reproduced and the family is
    rejected by the consistency rule.
    """

    def fit(case: Case, got: Any) -> Any:
        if not case.ctx.get("big_mean"):
            return None
        x = case.args["x"].double()
        w, b = case.params["weight"].double(), case.params["bias"].double()
        centred = x - x.mean(dim=-1, keepdim=True)
        basis = centred * w
        target = got.double() - b
        scale = (target * basis).sum(-1, keepdim=True) / (basis * basis).sum(-1, keepdim=True).clamp_min(1e-300)
        var_true = centred.pow(2).mean(dim=-1, keepdim=True)
        var_fit = scale.pow(-2) - case.ctx["eps"]
        bound = spread * x.mean(dim=-1, keepdim=True).pow(2) * torch.finfo(torch.float32).eps
        if not bool(torch.isfinite(scale).all()) or bool(((var_fit - var_true).abs() > bound).any()):
            return None
        return (basis * scale + b).float()

    return Bug(diagnosis, fit, "E[x^2] - E[x]^2 on inputs with a large mean", fit=True)


def norm_variant(fn: Callable[..., Any]) -> Callable[[Case], Any]:
    """A bug variant `fn(x, weight, bias, eps)` run on a norm case (bias None where the module has none)."""

    def run(case: Case) -> Any:
        return fn(case.args["x"], case.params["weight"], case.params.get("bias"), case.ctx["eps"])

    return run


@dataclass(frozen=True)
class Knob:
    """One norm mistake written as a change to the recomputation's inputs, so that two of them compose.

    `change(case, parts)` edits `parts` ({"weight", "bias", "eps", "form"}: `normalise`'s arguments, `form`
    its keyword knobs) in place. Two knobs applied together are the file that has both mistakes, which no
    single variant reproduces when both show on the same tests (a missing weight and eps outside the root
    both change every output: neither alone matches any failing test).
    """

    diagnosis: Diagnosis
    label: str
    change: Callable[[Case, dict[str, Any]], None]


def _knobbed(knobs: tuple[Knob, ...], centre: bool) -> Callable[[Case], Any]:
    def run(case: Case) -> Any:
        parts: dict[str, Any] = {"weight": case.params["weight"], "bias": case.params.get("bias"),
                                 "eps": case.ctx["eps"], "form": {"centre": centre}}
        for knob in knobs:
            knob.change(case, parts)
        return normalise(case.args["x"], parts["weight"], parts["bias"], parts["eps"], **parts["form"])

    return run


def knob_pairs(knobs: tuple[Knob, ...], *, centre: bool) -> tuple[Bug, ...]:
    """A composed variant (`Bug.also`) for every two knobs of different mistakes, the earlier one named first.

    List them after the single variants: where the second knob changes nothing on any test, the pair equals
    the single variant and the tie goes to the single one, so one mistake is never reported as two.
    """
    pairs = []
    for i, a in enumerate(knobs):
        for b in knobs[i + 1:]:
            if a.diagnosis.id != b.diagnosis.id:
                pairs.append(Bug(a.diagnosis, _knobbed((a, b), centre), f"{a.label}, and {b.label}",
                                 also=b.diagnosis.id))
    return tuple(pairs)


def set_part(name: str, value: Any) -> Callable[[Case, dict[str, Any]], None]:
    """A knob's change that sets one of `normalise`'s arguments (None drops the weight or the bias)."""

    def change(case: Case, parts: dict[str, Any]) -> None:
        parts[name] = value

    return change


def set_form(**form: Any) -> Callable[[Case, dict[str, Any]], None]:
    """A knob's change that turns keyword knobs of `normalise` (stat=, eps_at=)."""

    def change(case: Case, parts: dict[str, Any]) -> None:
        parts["form"].update(form)

    return change


def weight_offset(case: Case, parts: dict[str, Any]) -> None:
    """output * (1 + weight) (Gemma's convention) where the contract multiplies by the weight."""
    parts["weight"] = 1.0 + parts["weight"].float()


def default_eps_is(value: float) -> Callable[[Case, dict[str, Any]], None]:
    """A knob's change: another default eps, on the cases built without one (`ctx["default_eps"]`)."""

    def change(case: Case, parts: dict[str, Any]) -> None:
        if case.ctx.get("default_eps"):
            parts["eps"] = value

    return change
