"""Hidden tests for `rmsnorm`: RMSNorm(dim, eps=1e-6) with a `weight` of shape (dim,).

Random (non-ones) weights catch a missing weight; inputs with a non-zero mean
catch LayerNorm-style centring; tiny inputs and a large explicit eps catch
eps outside the square root (and a wrong default eps); fp16 inputs of
magnitude ~400 (whose squares overflow fp16) catch accumulating in half
precision; 2-D, 3-D and 4-D inputs catch normalising over the wrong axis.
"""

from __future__ import annotations

import torch

from drill.judge.registry import default
from drill.judge.spec import FORBIDDEN_NORM, FORBIDDEN_NORM_CLASSES, KIND_MODULE, Bug, Case, Diagnosis, Spec
from drill.judge.specs._common import DTYPES, TOLERANCES, Draw, reference_with_grads, repeat_probe

TARGET = "RMSNorm"
DEFAULT_EPS = default("rmsnorm", "eps")

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
    return [
        _case(d, f"fp32 (B,T,{D1}), default eps, random weight", (2, d.int(3, 7), D1), grads=True),
        _case(d, f"fp32 2-D (N,{D2}), eps=1e-2", (d.int(3, 6), D2), eps=1e-2, grads=True),
        _case(d, f"fp32 4-D (2,3,4,{D3}), inputs with mean 3", (2, 3, 4, D3), shift=3.0),
        _case(d, "fp32 tiny inputs (~1e-4), default eps", (2, 5, D1), scale=1e-4),
        _case(d, "fp32 (B,T,d), eps=1e-5 passed explicitly", (3, 4, D2), eps=1e-5, grads=True),
        _case(d, "fp16 (B,T,d)", (2, 6, D1), dtype="float16"),
        _case(d, "fp16 inputs of magnitude ~400 (squares overflow fp16)", (2, 4, D2), dtype="float16", scale=400.0),
        _case(d, "bf16 (B,T,d), inputs with mean 1", (2, 5, D3), dtype="bfloat16", shift=1.0),
        _repeat_case(d, (2, d.int(3, 6), D2)),  # drawn last: the cases above are unchanged for a seed
    ]


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
