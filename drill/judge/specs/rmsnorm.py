"""Hidden tests for `rmsnorm`: RMSNorm(dim, eps=1e-6) with a `weight` of shape (dim,).

Random (non-ones) weights catch a missing weight; inputs with a non-zero mean
catch LayerNorm-style centring; tiny inputs and a large explicit eps catch
eps outside the square root (and a wrong default eps); fp16 inputs of
magnitude ~400 (whose squares overflow fp16) catch accumulating in half
precision; 2-D, 3-D and 4-D inputs catch normalising over the wrong axis.
"""

from __future__ import annotations

import torch

from drill.judge.spec import FORBIDDEN_NORM, FORBIDDEN_NORM_CLASSES, KIND_MODULE, Bug, Case, Diagnosis, Spec
from drill.judge.specs._common import DTYPES, TOLERANCES, Draw, reference_with_grads, repeat_probe, twice_probes

TARGET = "RMSNorm"
DEFAULT_EPS = 1e-6

RD = {
    d.id: d
    for d in [
        Diagnosis("rms_missing_weight", "Weight not applied",
                  "The normalised value must be scaled by the learnable `weight`; it is not (it only looks right while weight is all ones).",
                  "Multiply by self.weight at the end."),
        Diagnosis("rms_subtracts_mean", "Mean subtracted (LayerNorm-style)",
                  "RMSNorm does not centre: it divides x itself by its root mean square.",
                  "Drop the x - mean step; use x * rsqrt(mean(x**2) + eps)."),
        Diagnosis("rms_eps_outside_sqrt", "eps added outside the square root",
                  "sqrt(mean(x**2)) + eps differs from sqrt(mean(x**2) + eps) when mean(x**2) is comparable to eps (small inputs or a large eps).",
                  "Add eps inside: torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)."),
        Diagnosis("rms_no_fp32_upcast", "Statistics computed in half precision",
                  "Squaring fp16 values above ~256 overflows to inf (and bf16 sums lose precision), so the output collapses.",
                  "Compute in fp32: xf = x.float(), normalise, then cast back with .to(x.dtype)."),
        Diagnosis("rms_wrong_axis", "Normalised over the wrong axis",
                  "The mean of squares must be over the last dimension (features) only, one statistic per token.",
                  "Use .mean(dim=-1, keepdim=True)."),
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
    ]
}


def _case(d: Draw, name: str, shape: tuple[int, ...], *, eps=None, dtype="float32", scale=1.0, shift=0.0, grads=False) -> Case:
    dim = shape[-1]
    x = d.normal(*shape, dtype=dtype, scale=scale, shift=shift)
    w = (d.normal(dim, scale=0.5, shift=1.0)).to(DTYPES[dtype])
    return Case(
        name=name,
        target=TARGET,
        kind=KIND_MODULE,
        args={"x": x},
        init=(dim,) if eps is None else (dim, eps),
        params={"weight": w},
        module_dtype=DTYPES[dtype] if dtype != "float32" else None,
        grad_inputs=("x",) if grads else (),
        grad_params=grads,
        upstream=d.normal(*shape) if grads else None,
        out_dtype=DTYPES[dtype],
        ctx={"dtype": dtype, "eps": DEFAULT_EPS if eps is None else eps},
    )


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    D1, D2, D3 = d.choice([16, 32, 48]), d.choice([8, 24, 64]), d.choice([12, 40])
    return twice_probes([
        _case(d, f"fp32 (B,T,{D1}), default eps, random weight", (2, d.int(3, 7), D1), grads=True),
        _case(d, f"fp32 2-D (N,{D2}), eps=1e-2", (d.int(3, 6), D2), eps=1e-2, grads=True),
        _case(d, f"fp32 4-D (2,3,4,{D3}), inputs with mean 3", (2, 3, 4, D3), shift=3.0),
        _case(d, "fp32 tiny inputs (~1e-4), default eps", (2, 5, D1), scale=1e-4),
        _case(d, "fp32 (B,T,d), eps=1e-5 passed explicitly", (3, 4, D2), eps=1e-5, grads=True),
        _case(d, "fp16 (B,T,d)", (2, 6, D1), dtype="float16"),
        _case(d, "fp16 inputs of magnitude ~400 (squares overflow fp16)", (2, 4, D2), dtype="float16", scale=400.0),
        _case(d, "bf16 (B,T,d), inputs with mean 1", (2, 5, D3), dtype="bfloat16", shift=1.0),
        _repeat_case(d, (2, d.int(3, 6), D2)),  # drawn last: the cases above are unchanged for a seed
    ])


def _repeat_case(d: Draw, shape: tuple[int, ...]) -> Case:
    """The same module instance called first on other inputs of this shape (a cached statistic shows)."""
    first = d.normal(*shape, scale=3.0, shift=1.0)
    case = _case(d, f"repeat call: one module called twice, x {shape}", shape)
    return repeat_probe(case, {"x": first})


def reference(case: Case):
    from drill.reference.norm import rms_norm

    eps = case.ctx["eps"]
    return reference_with_grads(case, lambda a, p: rms_norm(a["x"], p["weight"], eps))


def _variant(fn):
    def run(case: Case):
        x, w = case.args["x"], case.params["weight"]
        return fn(x, w, case.ctx["eps"])

    return run


def _rms(x, w, eps, dim=-1):
    xf = x.float()
    ms = xf.pow(2).mean(dim=dim, keepdim=True) if dim is not None else xf.pow(2).mean()
    return xf * torch.rsqrt(ms + eps) * w.float()


def _axis(dim):
    def fn(x, w, eps):
        if dim is not None and dim % x.dim() == x.dim() - 1:
            return None
        if dim is not None and dim >= x.dim():
            return None
        return _rms(x, w, eps, dim)

    return fn


def _low_precision(x, w, eps):
    if x.dtype == torch.float32:
        return None
    out = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * w
    return out.float()


def _centred(x, w, eps):
    xc = x.float() - x.float().mean(dim=-1, keepdim=True)
    return xc * torch.rsqrt(xc.pow(2).mean(dim=-1, keepdim=True) + eps) * w.float()


def _divides_by_std(x, w, eps):
    xf = x.float()
    return xf * torch.rsqrt(xf.var(dim=-1, keepdim=True, unbiased=False) + eps) * w.float()


def _eps_outside(x, w, eps):
    xf = x.float()
    return xf / (xf.pow(2).mean(dim=-1, keepdim=True).sqrt() + eps) * w.float()


def _eps_on_reciprocal(x, w, eps):
    xf = x.float()
    return xf * (torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True)) + eps) * w.float()


def _default_eps(value: float):
    """Another default eps: the cases built without an eps (init=(dim,)) use `value`; the others are right."""

    def run(case: Case):
        if len(case.init) > 1:
            return None
        return _rms(case.args["x"], case.params["weight"], value)

    return run


def _hard_coded(value: float, form=None):
    """`value` used whatever eps the module was given (`form`: the formula, default the right one)."""

    def run(case: Case):
        return (form or _rms)(case.args["x"], case.params["weight"], value)

    return run


def _times_rms(x, w, eps):
    """Cast back to x's dtype like any solution: x * rms of ~400 overflows fp16 to inf, as the learner's does."""
    xf = x.float()
    return (xf / torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps) * w.float()).to(x.dtype)


# Defaults and literals real code bases use: 1e-5 (llama2.c, Mistral, gpt-fast), 1e-8, 1e-6 (the contract's).
_OTHER_DEFAULTS = (1e-5, 1e-8)
_LITERALS = (1e-6, 1e-5, 1e-8)

BUGS = (
    Bug(RD["rms_missing_weight"], _variant(lambda x, w, eps: _rms(x, torch.ones_like(w), eps)), "no weight"),
    Bug(RD["rms_subtracts_mean"], _variant(_centred), "x - mean"),
    Bug(RD["rms_subtracts_mean"], _variant(_divides_by_std), "divides by the standard deviation (x.var)"),
    Bug(RD["rms_eps_outside_sqrt"], _variant(_eps_outside), "sqrt(mean) + eps"),
    Bug(RD["rms_eps_outside_sqrt"], _variant(_eps_on_reciprocal), "rsqrt(mean) + eps"),
    Bug(RD["rms_no_fp32_upcast"], _variant(_low_precision), "computed in the input dtype"),
    Bug(RD["rms_wrong_axis"], _variant(_axis(0)), "mean over dim 0"),
    Bug(RD["rms_wrong_axis"], _variant(_axis(1)), "mean over dim 1"),
    Bug(RD["rms_wrong_axis"], _variant(_axis(-2)), "mean over dim -2"),
    Bug(RD["rms_wrong_axis"], _variant(_axis(None)), "mean over every element"),
    # Issue 18, after the planted ones: likely first (a default of 1e-5 is common).
    *(Bug(RD["rms_default_eps"], _default_eps(v),
          f"default eps {v:g} instead of the contract's 1e-6: it changes only the tests that rely on the default")
      for v in _OTHER_DEFAULTS),
    Bug(RD["rms_weight_offset"], _variant(lambda x, w, eps: _rms(x, 1.0 + w.float(), eps)), "output * (1 + weight)"),
    Bug(RD["rms_inverted_scale"], _variant(_times_rms), "x / rsqrt(mean(x**2) + eps)"),
    *(Bug(RD["rms_eps_ignored"], _hard_coded(v), f"eps hard-coded to {v:g}") for v in _LITERALS),
    *(Bug(RD["rms_eps_outside_sqrt"], _hard_coded(v, _eps_outside),
          f"sqrt(mean) + eps, with eps hard-coded to {v:g} (the eps argument is ignored too)") for v in _LITERALS),
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
