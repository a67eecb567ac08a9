"""Building blocks of the normalisation exercises (rmsnorm today; layernorm, rmsnorm_backward, decoder_block).

Three kinds, each parametrised by the exercise:
- `normalise`: one recomputation of a norm with every knob a real mistake
  turns (centring, which statistic, where eps goes, the axis, the compute
  dtype, weight/bias), so a bug variant is one call with one knob changed;
- diagnosis templates (`missing_param`, `eps_outside_sqrt`,
  `half_precision_stats`, `wrong_axis`) whose why/fix name the exercise's own
  statistic and code, under ids prefixed by the exercise (`rms_`, `ln_`);
- `norm_cases`: the hidden-test battery every norm needs (2-D/3-D/4-D,
  non-zero mean, tiny inputs against eps, an explicit eps, fp16 inputs whose
  squares overflow, bf16, a repeat call), drawn in a fixed order around the
  exercise's own case builder.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from drill.judge.spec import Case, Diagnosis
from drill.judge.specs._common import Draw, repeat_probe

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


# ---------------------------------------------------------------- the case battery

# What the build function of `norm_cases` receives: (draw, name, shape, eps or None for the
# default, dtype, scale, shift, grads) -> Case; it draws x first, then its parameters.
NormBuild = Callable[..., Case]


def norm_cases(d: Draw, build: NormBuild) -> list[Case]:
    """The hidden tests every last-axis norm needs, in a fixed drawing order, then a repeat call.

    Random weights (from `build`) catch a missing weight; a mean of 3 catches
    centring (or its absence); tiny inputs and eps=1e-2 catch eps outside the
    root and a wrong default eps; fp16 at ~400 (squares overflow) catches
    half-precision statistics; 2-D/3-D/4-D shapes catch a wrong axis.
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
    shape = (2, d.int(3, 6), D2)  # drawn last: the cases above are unchanged for a seed
    first = d.normal(*shape, scale=3.0, shift=1.0)  # the same module first sees other inputs: a cached statistic shows
    cases.append(repeat_probe(build(d, f"repeat call: one module called twice, x {shape}", shape), {"x": first}))
    return cases


def norm_variant(fn: Callable[..., Any]) -> Callable[[Case], Any]:
    """A bug variant `fn(x, weight, bias, eps)` run on a norm case (bias None where the module has none)."""

    def run(case: Case) -> Any:
        return fn(case.args["x"], case.params["weight"], case.params.get("bias"), case.ctx["eps"])

    return run
