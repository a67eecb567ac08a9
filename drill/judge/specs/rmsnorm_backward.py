"""Hidden tests for `rmsnorm_backward`: rmsnorm_backward(x, weight, grad_out, eps=1e-6) -> (grad_x, grad_weight).

Expected values are autograd's, through the reference forward
(drill.reference.rms_norm, fp32); `drill.reference.rms_norm_backward` is the
closed form the reference tests hold against it. Cases: one, two and three
leading dims (a grad_weight summed over too few of them shows as a shape),
random weights, inputs with a mean (the projection term is large), tiny
inputs with the default and with a large eps (where eps sits shows), large
magnitudes, fp16 inputs whose squares overflow fp16, bf16, weights in the
input's dtype and in fp32 (grad_weight keeps weight's dtype), a repeat call.
Each input is two cases, one per returned element (`Case.extra["tuple"]`,
as moe), so a message names grad_x or grad_weight.
Autograd in any form is trapped in the child (spec.FORBIDDEN_AUTOGRAD).
"""

from __future__ import annotations

import torch

from drill.judge.allowance import Allowance
from drill.judge.registry import default
from drill.judge.spec import FORBIDDEN_AUTOGRAD, FORBIDDEN_NORM, FORBIDDEN_NORM_CLASSES, Bug, Case, Diagnosis, Spec
from drill.judge.specs._backward import elements, half_only
from drill.judge.specs._common import DTYPES, TOLERANCES, Draw, call_case, diagnoses, repeat_after, twice_probes
from drill.judge.specs._norm import half_precision_stats

TARGET = "rmsnorm_backward"
OUTPUTS = (("grad_x", "x"), ("grad_weight", "weight"))
DEFAULT_EPS = default("rmsnorm_backward", "eps")
# A default eps several real code bases use (Hugging Face's LlamaRMSNorm config default is 1e-6, T5/others 1e-5).
OTHER_DEFAULT_EPS = 1e-5

BD = diagnoses(
    Diagnosis("rmsb_no_projection", "Projection term missing (rms treated as a constant)",
              "r = 1/sqrt(mean(x**2) + eps) depends on every x_j of the row, so grad_x has a second term: "
              "grad_x = r * (g - x_hat * mean(g * x_hat)), g = grad_out * weight. Without it the gradient is "
              "right only when g is orthogonal to x_hat.",
              "Subtract x_hat * (g * x_hat).mean(-1, keepdim=True) from g before multiplying by r."),
    Diagnosis("rmsb_grad_weight_partial_sum", "grad_weight not summed over every leading dim",
              "weight is shared by every position, so its gradient sums grad_out * x_hat over all leading dims; "
              "summing over dim 0 only (or a fixed pair of dims) leaves a shape that depends on x's rank.",
              "grad_weight = (grad_out * x_hat).reshape(-1, d).sum(0)."),
    Diagnosis("rmsb_missing_inv_d", "1/d factor missing in the projection term",
              "dr/dx_j = -r**3 * x_j / d: the mean's 1/d survives into the gradient. Using a sum instead of a mean "
              "makes the projection term d times too large.",
              "Use (g * x_hat).mean(-1, keepdim=True), not .sum(-1, ...), in the projection term."),
    Diagnosis("rmsb_eps_placement", "eps placed differently from the forward pass",
              "The forward computes 1/sqrt(mean(x**2) + eps); the backward must use that same r everywhere "
              "(also in r**3 of the projection term). eps outside the root, or left out, changes the gradient "
              "when mean(x**2) is comparable to eps (tiny inputs, large eps).",
              "r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps), reused in both terms."),
    Diagnosis("rmsb_projection_sign", "Sign error in the projection term",
              "Growing x_j grows the RMS and so shrinks every y_i: the path through r enters with a minus sign, "
              "grad_x = r * (g - x_hat * mean(g * x_hat)).",
              "Subtract the projection term; do not add it."),
    half_precision_stats("rmsb"),
    Diagnosis("rmsb_default_eps", "Different default eps",
              f"The contract's default eps is {DEFAULT_EPS:g} (as in the rmsnorm exercise); the tests that rely on "
              f"the default get {OTHER_DEFAULT_EPS:g}, a common default elsewhere, which matters for inputs whose "
              "mean square is comparable to eps.",
              f"def rmsnorm_backward(x, weight, grad_out, eps={DEFAULT_EPS:g})."),
    Diagnosis("rmsb_weight_twice", "weight multiplied in twice in the projection term",
              "g = grad_out * weight already carries the weight; the projection term is mean(g * x_hat), so "
              "multiplying g by weight again inside that mean gives mean(grad_out * weight**2 * x_hat). It "
              "goes unnoticed with weight = 1 (a freshly initialised RMSNorm) and is wrong for any other weight.",
              "Use one g = grad_out * weight in both terms: r * (g - x_hat * (g * x_hat).mean(-1, keepdim=True))."),
    Diagnosis("rmsb_projection_r_squared", "Projection term scaled by r**2 instead of r**3",
              "With r = 1/sqrt(mean(x**2) + eps), dr/dx_j = -r**3 * x_j / d, so the projection term is "
              "x * r**3 * mean(g * x); in rms = 1/r it is divided by rms**3. One power of r lost (dividing by "
              "rms**2) leaves the term off by the factor rms, right only for rows whose rms is 1.",
              "grad_x = r * g - x * r**3 * (g * x).mean(-1, keepdim=True), or r * (g - x_hat * mean(g * x_hat))."),
)


def backward(x, weight, grad_out, eps: float, *, projection: str = "right", eps_at: str = "inside",
             w_dims: object = "all", upcast: bool = True, weight_twice: bool = False,
             r_power: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad_x, grad_weight) of RMSNorm with one knob per mistake; fp32 unless `upcast=False` (the input's dtype).

    `weight_twice` multiplies g by the weight once more inside the projection's mean; `r_power=2` scales the
    projection term by r**2 (dividing by rms**2) instead of r**3."""
    dt = torch.float32 if upcast else x.dtype
    xf, gf, wf = x.to(dt), grad_out.to(dt), weight.to(dt)
    ms = xf.pow(2).mean(dim=-1, keepdim=True)
    r = {"inside": lambda: torch.rsqrt(ms + eps), "outside": lambda: 1.0 / (ms.sqrt() + eps),
         "missing": lambda: torch.rsqrt(ms), "projection": lambda: torch.rsqrt(ms + eps)}[eps_at]()
    r_proj = torch.rsqrt(ms) if eps_at in ("missing", "projection") else r
    g = gf * wf
    x_hat = xf * r
    gd = g * wf if weight_twice else g
    dot = (gd * xf).mean(dim=-1, keepdim=True) if projection != "sum" else (gd * xf).sum(dim=-1, keepdim=True)
    term = xf * r_proj.pow(r_power) * dot
    grad_x = {"right": r * g - term, "sum": r * g - term, "none": r * g, "sign": r * g + term}[projection]
    gw = gf * x_hat
    grad_w = gw.reshape(-1, x.shape[-1]).sum(dim=0) if w_dims == "all" else gw.sum(dim=w_dims)
    return grad_x.float(), grad_w.float()


def _case(d: Draw, name: str, shape: tuple[int, ...], *, eps=None, dtype="float32", w_dtype=None, scale=1.0,
          shift=0.0) -> Case:
    """The grad_x case of one input (see `_pair`, which adds its grad_weight twin)."""
    x = d.normal(*shape, dtype=dtype, scale=scale, shift=shift)
    w = d.normal(shape[-1], scale=0.5, shift=1.0).to(DTYPES[w_dtype or dtype])
    g = d.normal(*shape, dtype=dtype)
    args = {"x": x, "weight": w, "grad_out": g, **({} if eps is None else {"eps": eps})}
    return call_case(d, name, TARGET, args, dtype=dtype, out_dtype=x.dtype,
                     ctx={"eps": DEFAULT_EPS if eps is None else eps, "default_eps": eps is None})


def _pair(case: Case) -> list[Case]:
    """`case` grading grad_x and its twin grading grad_weight, on the very same inputs."""
    return elements(case, OUTPUTS)


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    D1, D2, D3 = d.choice([16, 32, 48]), d.choice([8, 24, 64]), d.choice([12, 40])
    inputs = [
        _case(d, f"fp32 2-D (N,{D1}), default eps, random weight", (d.int(3, 7), D1)),
        _case(d, f"fp32 3-D (B,T,{D2}), eps=1e-2", (2, d.int(3, 6), D2), eps=1e-2),
        _case(d, f"fp32 4-D (2,3,4,{D3}), inputs with mean 3", (2, 3, 4, D3), shift=3.0, eps=1e-6),
        _case(d, "fp32 3-D tiny inputs (~1e-4), default eps", (2, 5, D1), scale=1e-4),
        _case(d, "fp32 2-D tiny inputs (~1e-2), eps=1e-3", (d.int(3, 6), D2), scale=1e-2, eps=1e-3),
        _case(d, "fp32 3-D large inputs (~1e3), eps=1e-5", (3, 4, D2), scale=1e3, eps=1e-5),
        _case(d, "fp16 3-D (B,T,d), fp16 weight", (2, 6, D1), dtype="float16", eps=1e-6),
        _case(d, "fp16 inputs of magnitude ~400 (squares overflow fp16), fp32 weight", (2, 4, D2), dtype="float16",
              w_dtype="float32", scale=400.0, eps=1e-6),
        _case(d, "bf16 4-D, inputs with mean 1, bf16 weight", (2, 2, 5, D3), dtype="bfloat16", shift=1.0, eps=1e-6),
        _case(d, "bf16 3-D, fp32 weight, default eps", (2, 5, D1), dtype="bfloat16", w_dtype="float32"),
    ]
    probe = _case(d, f"repeat call: two calls, x (2,4,{D2})", (2, 4, D2), eps=1e-6)
    cases = [twin for case in inputs for twin in _pair(case)]
    cases += _pair(repeat_after(d, probe, {"eps": 1e-6}))[:1]  # one probe (on grad_x), as every exercise has
    return twice_probes(cases)


def reference(case: Case):
    from drill.reference.norm import rms_norm

    a = case.args
    x = a["x"].detach().float().requires_grad_(True)
    w = a["weight"].detach().float().requires_grad_(True)
    y = rms_norm(x, w, case.ctx["eps"], impl="math")
    (y * a["grad_out"].float()).sum().backward()
    return (x.grad, w.grad)[case.ctx["pick"]].detach(), {}


def _variant(**knobs):
    def run(case: Case):
        a = case.args
        return backward(a["x"], a["weight"], a["grad_out"], case.ctx["eps"], **knobs)[case.ctx["pick"]]

    return run


def _low_precision(case: Case):
    a = case.args
    if a["x"].dtype == torch.float32:
        return None
    got = backward(a["x"], a["weight"].to(a["x"].dtype), a["grad_out"], case.ctx["eps"], upcast=False)
    return half_only(got[case.ctx["pick"]], a["x"].dtype)


def _default_eps(case: Case):
    if not case.ctx["default_eps"]:
        return None
    a = case.args
    return backward(a["x"], a["weight"], a["grad_out"], OTHER_DEFAULT_EPS)[case.ctx["pick"]]


BUGS = (
    Bug(BD["rmsb_no_projection"], _variant(projection="none"), "grad_x = r * grad_out * weight"),
    Bug(BD["rmsb_grad_weight_partial_sum"], _variant(w_dims=0), "summed over dim 0 only"),
    Bug(BD["rmsb_grad_weight_partial_sum"], _variant(w_dims=(0, 1)), "summed over dims (0, 1)"),
    Bug(BD["rmsb_grad_weight_partial_sum"], _variant(w_dims=-2), "summed over dim -2 only"),
    Bug(BD["rmsb_missing_inv_d"], _variant(projection="sum"), "sum(g * x) instead of its mean"),
    Bug(BD["rmsb_eps_placement"], _variant(eps_at="outside"), "r = 1 / (sqrt(mean(x**2)) + eps)"),
    Bug(BD["rmsb_eps_placement"], _variant(eps_at="missing"), "no eps in the backward"),
    Bug(BD["rmsb_eps_placement"], _variant(eps_at="projection"), "no eps in the projection term's r**3"),
    Bug(BD["rmsb_projection_sign"], _variant(projection="sign"), "projection term added"),
    Bug(BD["rmsb_no_fp32_upcast"], _low_precision, "computed in the input dtype"),
    Bug(BD["rmsb_default_eps"], _default_eps, f"default eps={OTHER_DEFAULT_EPS:g}"),
    # issue 31: mistakes seen in hand-derived backward passes
    Bug(BD["rmsb_weight_twice"], _variant(weight_twice=True), "mean(g * weight * x_hat), g already weighted"),
    Bug(BD["rmsb_projection_r_squared"], _variant(r_power=2), "x * r**2 * mean(g * x)"),
)

SPEC = Spec(
    name="rmsnorm_backward",
    allowance=Allowance(graded_backward=False),  # from scratch: the op families alone (issue 30 §3)
    graded=(TARGET,),
    make_cases=make_cases,
    reference=reference,
    tolerances=TOLERANCES,
    bugs=BUGS,
    forbidden=FORBIDDEN_AUTOGRAD + FORBIDDEN_NORM,
    forbidden_classes=FORBIDDEN_NORM_CLASSES,
)
