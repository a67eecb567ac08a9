"""Hidden tests for `rmsnorm`: RMSNorm(dim, eps=1e-6) with a `weight` of shape (dim,).

Random (non-ones) weights catch a missing weight; inputs with a non-zero mean
catch LayerNorm-style centring; tiny inputs and a large explicit eps catch
eps outside the square root (and a wrong default eps); fp16 inputs of
magnitude ~400 (whose squares overflow fp16) catch accumulating in half
precision; 2-D, 3-D and 4-D inputs catch normalising over the wrong axis.
"""

from __future__ import annotations

import torch

from drill.judge.allowance import Allowance
from drill.judge.registry import default
from drill.judge.spec import FORBIDDEN_NORM, FORBIDDEN_NORM_CLASSES, Bug, Case, Diagnosis, Spec
from drill.judge.specs._common import DTYPES, TOLERANCES, Draw, diagnoses, module_case, reference_with_grads
from drill.judge.specs._norm import (
    EPS_ON_RECIPROCAL,
    EPS_OUTSIDE,
    STAT_VAR,
    Knob,
    default_eps_is,
    eps_outside_sqrt,
    half_precision_stats,
    in_input_dtype,
    knob_pairs,
    missing_param,
    norm_cases,
    norm_variant,
    normalise,
    set_form,
    set_part,
    weight_offset,
    wrong_axis,
    wrong_axis_variants,
)

TARGET = "RMSNorm"
DEFAULT_EPS = default("rmsnorm", "eps")

RD = diagnoses(
    missing_param("rms", "weight"),
    Diagnosis("rms_subtracts_mean", "Mean subtracted (LayerNorm-style)",
              "RMSNorm does not centre: it divides x itself by its root mean square.",
              "Drop the x - mean step; use x * rsqrt(mean(x**2) + eps)."),
    eps_outside_sqrt("rms", "mean(x**2)", "x.pow(2).mean(-1, keepdim=True)"),
    half_precision_stats("rms"),
    wrong_axis("rms", "mean of squares", "Use .mean(dim=-1, keepdim=True)."),
    # Issue 18: mistakes seen in real code.
    Diagnosis("rms_default_eps", "Default eps differs from the contract",
              "RMSNorm(dim) must default to eps = 1e-6, the contract's (and Llama's) value, because a model is "
              "trained with one eps and most callers rely on the default; yours defaults to another value, which "
              "shows only where mean(x**2) is comparable to eps (the default-eps test with inputs of ~1e-4), "
              "while the tests that pass eps explicitly are right.",
              "Write the signature exactly as the contract does: def __init__(self, dim, eps=1e-6)."),
    Diagnosis("rms_eps_ignored", "eps argument ignored",
              "RMSNorm(dim, eps) must use the eps it is given; your code uses a fixed value, so a model built with "
              "another eps (1e-5 in Mistral's and llama2.c's configs, 1e-2 in one test) normalises differently.",
              "Store it in __init__ (self.eps = eps) and use self.eps in forward, never a literal."),
    Diagnosis("rms_weight_offset", "Weight applied as (1 + weight)",
              "Gemma stores the RMSNorm scale as an offset from 1 (weight initialised to zeros, output times "
              "1 + weight). The contract's weight is the scale itself, initialised to ones, and the grader loads "
              "that scale into `weight`, so your output is scaled by 1 + weight instead of weight.",
              "Initialise weight to ones and multiply by self.weight (a Gemma checkpoint converts with weight + 1)."),
    Diagnosis("rms_inverted_scale", "Multiplied by the RMS instead of dividing",
              "torch.rsqrt already gives 1 / sqrt(mean(x**2) + eps); dividing by it multiplies x by its root mean "
              "square, so large inputs grow instead of being normalised.",
              "Multiply by torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps), or divide by torch.sqrt(...)."),
)


def _case(d: Draw, name: str, shape: tuple[int, ...], *, eps=None, dtype="float32", scale=1.0, shift=0.0,
          grads=False) -> Case:
    dim = shape[-1]
    x = d.normal(*shape, dtype=dtype, scale=scale, shift=shift)
    w = (d.normal(dim, scale=0.5, shift=1.0)).to(DTYPES[dtype])
    return module_case(d, name, TARGET, {"x": x}, init=(dim,) if eps is None else (dim, eps), params={"weight": w},
                       dtype=dtype, grads=grads,
                       ctx={"eps": DEFAULT_EPS if eps is None else eps, "default_eps": eps is None})


def make_cases(seed: int) -> list[Case]:
    return norm_cases(Draw(seed), _case)


def reference(case: Case):
    from drill.reference.norm import rms_norm

    eps = case.ctx["eps"]
    return reference_with_grads(case, lambda a, p: rms_norm(a["x"], p["weight"], eps))


def _default_eps(value: float):
    """Another default eps: the cases built without an eps (init=(dim,)) use `value`; the others are right."""

    def run(case: Case):
        if len(case.init) > 1:
            return None
        return normalise(case.args["x"], case.params["weight"], None, value)

    return run


def _hard_coded(value: float, **form):
    """`value` used whatever eps the module was given (`form`: `normalise`'s knobs, default the right formula)."""

    def run(case: Case):
        return normalise(case.args["x"], case.params["weight"], None, value, **form)

    return run


def _times_rms(x, w, b, eps):
    """Cast back to x's dtype like any solution: x * rms of ~400 overflows fp16 to inf, as the learner's does."""
    xf = x.float()
    return (xf / torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps) * w.float()).to(x.dtype)


# Defaults and literals real code bases use: 1e-5 (llama2.c, Mistral, gpt-fast), 1e-8, 1e-6 (the contract's).
_OTHER_DEFAULTS = (1e-5, 1e-8)
_LITERALS = (1e-6, 1e-5, 1e-8)

# Two mistakes in one file, where both change the same tests (no weight and eps outside the root change every
# output: neither alone reproduces a failing test). Gemma's 1 + weight with a 1e-5 default is a real pair.
KNOBS = (
    Knob(RD["rms_missing_weight"], "no weight", set_part("weight", None)),
    Knob(RD["rms_subtracts_mean"], "x - mean", set_form(centre=True)),
    Knob(RD["rms_eps_outside_sqrt"], "sqrt(mean) + eps", set_form(eps_at=EPS_OUTSIDE)),
    Knob(RD["rms_weight_offset"], "output * (1 + weight)", weight_offset),
    *(Knob(RD["rms_default_eps"], f"default eps {v:g}", default_eps_is(v)) for v in _OTHER_DEFAULTS),
)

BUGS = (
    Bug(RD["rms_missing_weight"], norm_variant(lambda x, w, b, eps: normalise(x, None, None, eps)), "no weight"),
    Bug(RD["rms_subtracts_mean"], norm_variant(lambda x, w, b, eps: normalise(x, w, None, eps, centre=True)),
        "x - mean"),
    Bug(RD["rms_subtracts_mean"], norm_variant(lambda x, w, b, eps: normalise(x, w, None, eps, stat=STAT_VAR)),
        "divides by the standard deviation (x.var)"),
    Bug(RD["rms_eps_outside_sqrt"], norm_variant(lambda x, w, b, eps: normalise(x, w, None, eps, eps_at=EPS_OUTSIDE)),
        "sqrt(mean) + eps"),
    Bug(RD["rms_eps_outside_sqrt"],
        norm_variant(lambda x, w, b, eps: normalise(x, w, None, eps, eps_at=EPS_ON_RECIPROCAL)), "rsqrt(mean) + eps"),
    Bug(RD["rms_no_fp32_upcast"], in_input_dtype(), "computed in the input dtype"),
    *wrong_axis_variants(RD["rms_wrong_axis"], "mean"),
    # Issue 18, after the planted ones: likely first (a default of 1e-5 is common).
    *(Bug(RD["rms_default_eps"], _default_eps(v),
          f"default eps {v:g} instead of the contract's 1e-6: it changes only the tests that rely on the default")
      for v in _OTHER_DEFAULTS),
    Bug(RD["rms_weight_offset"], norm_variant(lambda x, w, b, eps: normalise(x, 1.0 + w.float(), None, eps)),
        "output * (1 + weight)"),
    Bug(RD["rms_inverted_scale"], norm_variant(_times_rms), "x / rsqrt(mean(x**2) + eps)"),
    *(Bug(RD["rms_eps_ignored"], _hard_coded(v), f"eps hard-coded to {v:g}") for v in _LITERALS),
    *(Bug(RD["rms_eps_outside_sqrt"], _hard_coded(v, eps_at=EPS_OUTSIDE),
          f"sqrt(mean) + eps, with eps hard-coded to {v:g} (the eps argument is ignored too)") for v in _LITERALS),
    *knob_pairs(KNOBS, centre=False),
)

SPEC = Spec(
    name="rmsnorm",
    allowance=Allowance(),  # from scratch: the op families alone (issue 30 §3)
    graded=(TARGET,),
    make_cases=make_cases,
    reference=reference,
    tolerances=TOLERANCES,
    bugs=BUGS,
    forbidden=FORBIDDEN_NORM,
    forbidden_classes=FORBIDDEN_NORM_CLASSES,
)
