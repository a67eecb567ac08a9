"""Hidden tests for `rmsnorm`: RMSNorm(dim, eps=1e-6) with a `weight` of shape (dim,).

Random (non-ones) weights catch a missing weight; inputs with a non-zero mean
catch LayerNorm-style centring; tiny inputs and a large explicit eps catch
eps outside the square root (and a wrong default eps); fp16 inputs of
magnitude ~400 (whose squares overflow fp16) catch accumulating in half
precision; 2-D, 3-D and 4-D inputs catch normalising over the wrong axis.
"""

from __future__ import annotations

from drill.judge.registry import default
from drill.judge.spec import FORBIDDEN_NORM, FORBIDDEN_NORM_CLASSES, Bug, Case, Diagnosis, Spec
from drill.judge.specs._common import DTYPES, TOLERANCES, Draw, diagnoses, module_case, reference_with_grads
from drill.judge.specs._norm import (
    EPS_ON_RECIPROCAL,
    EPS_OUTSIDE,
    STAT_VAR,
    eps_outside_sqrt,
    half_precision_stats,
    in_input_dtype,
    missing_param,
    norm_cases,
    norm_variant,
    normalise,
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
)


def _case(d: Draw, name: str, shape: tuple[int, ...], *, eps=None, dtype="float32", scale=1.0, shift=0.0, grads=False) -> Case:
    dim = shape[-1]
    x = d.normal(*shape, dtype=dtype, scale=scale, shift=shift)
    w = (d.normal(dim, scale=0.5, shift=1.0)).to(DTYPES[dtype])
    return module_case(d, name, TARGET, {"x": x}, init=(dim,) if eps is None else (dim, eps), params={"weight": w},
                       dtype=dtype, grads=grads, ctx={"eps": DEFAULT_EPS if eps is None else eps})


def make_cases(seed: int) -> list[Case]:
    return norm_cases(Draw(seed), _case)


def reference(case: Case):
    from drill.reference.norm import rms_norm

    eps = case.ctx["eps"]
    return reference_with_grads(case, lambda a, p: rms_norm(a["x"], p["weight"], eps))


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
)

SPEC = Spec(
    name="rmsnorm",
    graded=(TARGET,),
    make_cases=make_cases,
    reference=reference,
    tolerances=TOLERANCES,
    bugs=BUGS,
    forbidden=FORBIDDEN_NORM,
    forbidden_classes=FORBIDDEN_NORM_CLASSES,
)
