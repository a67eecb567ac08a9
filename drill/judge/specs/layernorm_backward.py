"""Hidden tests for `layernorm_backward`: layernorm_backward(x, weight, bias, grad_out, eps=1e-5) -> (dx, dw, db).

Expected values are autograd's through `F.layer_norm`, taken here in the
parent in float64 on the very same (already rounded) inputs and handed over
as fp32; `drill.reference.layer_norm_backward` is the closed form the
reference tests hold against it. Cases: one, two and three leading dims (a
dweight summed over too few of them shows as a shape), random weights and
biases, inputs with a mean (centring matters), d = 1 (dx is 0: x equals its
mean), tiny inputs with the default eps and with a larger one (where eps sits,
and which default, shows), large magnitudes, fp16 inputs whose squares
overflow fp16, bf16, weight and bias in the input's dtype and in fp32 (each
gradient keeps its parameter's dtype), a repeat call. Each input is three
cases, one per returned element (`_backward.elements`), so a message names
dx, dweight or dbias. Autograd in any form is trapped in the child, with
`layernorm`'s set and aten's own `native_layer_norm_backward`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from drill.judge.allowance import Allowance
from drill.judge.registry import default
from drill.judge.spec import (
    FORBIDDEN_LAYER_NORM_BACKWARD,
    FORBIDDEN_LAYER_NORM_CLASSES,
    Bug,
    Case,
    Diagnosis,
    Spec,
)
from drill.judge.specs._backward import elements, half_only, picked
from drill.judge.specs._common import DTYPES, TOLERANCES, Draw, call_case, diagnoses, repeat_after, twice_probes
from drill.judge.specs._norm import (
    EPS_INSIDE,
    EPS_OUTSIDE,
    STAT_VAR,
    STAT_VAR_UNBIASED,
    eps_outside_sqrt,
    eps_text,
    half_precision_stats,
    unbiased_variance,
    wrong_default_eps,
)

TARGET = "layernorm_backward"
OUTPUTS = (("dx", "x"), ("dweight", "weight"), ("dbias", "bias"))
DEFAULT_EPS = default("layernorm_backward", "eps")
# Defaults carried over from elsewhere: RMSNorm's and Llama's 1e-6, BERT's 1e-12.
OTHER_DEFAULT_EPS = (1e-6, 1e-12)


def _renamed(diagnosis: Diagnosis, new_id: str) -> Diagnosis:
    """A `_norm` template under the id this exercise's contract lists."""
    return dataclasses.replace(diagnosis, id=new_id)


LBD = diagnoses(
    Diagnosis("lnb_no_mean_g", "mean(g) not subtracted in dx",
              "The mean is subtracted in the forward pass, so moving every x_j of a row by the same amount changes "
              "nothing: dx must sum to zero over the row. That is the -mean(g) term of "
              "dx = rstd * (g - mean(g) - xhat * mean(g * xhat)); without it only the RMSNorm part is left.",
              "Subtract g.mean(-1, keepdim=True) as well as the projection term, g = grad_out * weight."),
    Diagnosis("lnb_no_xhat_term", "Term through the variance missing (rstd treated as a constant)",
              "rstd = 1/sqrt(var + eps) depends on every x_j of the row, so dx carries a second correction, "
              "-xhat * mean(g * xhat): the component of g along xhat is removed. Without it dx is right only when "
              "g is orthogonal to xhat.",
              "dx = rstd * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))."),
    Diagnosis("lnb_weight_forgotten", "weight left out of dx (g = grad_out)",
              "y = xhat * weight + bias, so the gradient reaching xhat is grad_out * weight; using grad_out alone "
              "looks right while weight is all ones (a fresh LayerNorm) and is wrong for any trained one.",
              "g = grad_out.float() * weight.float(), used in all three terms of dx."),
    _renamed(unbiased_variance("lnb"), "lnb_unbiased_var"),
    eps_outside_sqrt("lnb", "var", "((x - mean)**2).mean(-1, keepdim=True)"),
    Diagnosis("lnb_dweight_partial_sum", "dweight (or dbias) not summed over every leading dim",
              "weight and bias are shared by every position, so their gradients sum over all leading dims of x; "
              "summing over dim 0 only (or a fixed pair of dims) leaves a shape that depends on x's rank.",
              "dweight = (grad_out * xhat).reshape(-1, d).sum(0); dbias = grad_out.reshape(-1, d).sum(0)."),
    Diagnosis("lnb_dweight_no_xhat", "dweight not weighted by xhat",
              "weight multiplies the normalised input, so dweight = sum(grad_out * xhat): summing grad_out alone "
              "is dbias, and grad_out * x leaves out both the centring and the 1/sigma.",
              "dweight = (grad_out * xhat).reshape(-1, d).sum(0), xhat = (x - mean) * rstd."),
    Diagnosis("lnb_projection_sign", "Sign error in a correction term of dx",
              "Both corrections remove something from g: its mean (centring) and its component along xhat "
              "(scaling by 1/sigma, which shrinks as the spread grows). Adding either gives a dx that no longer "
              "sums to zero, or that grows along xhat.",
              "dx = rstd * (g - mean(g) - xhat * mean(g * xhat)): both terms subtracted."),
    _renamed(half_precision_stats("lnb"), "lnb_no_fp32"),
    wrong_default_eps("lnb", DEFAULT_EPS, "as in `layernorm` and nn.LayerNorm"),
)

DX_RIGHT, DX_NO_MEAN_G, DX_NO_XHAT_TERM, DX_MEAN_PLUS, DX_XHAT_PLUS = (
    "right", "no_mean_g", "no_xhat_term", "mean_plus", "xhat_plus")
DW_XHAT, DW_GRAD_OUT, DW_RAW_X = "xhat", "grad_out", "raw_x"


def backward(x: torch.Tensor, weight: torch.Tensor, grad_out: torch.Tensor, eps: float, *, dx_form: str = DX_RIGHT,
             weighted: bool = True, stat: str = STAT_VAR, eps_at: str = EPS_INSIDE, sum_dims: Any = "all",
             bias_too: bool = False, dweight: str = DW_XHAT, upcast: bool = True) -> tuple[torch.Tensor, ...]:
    """(dx, dweight, dbias) of LayerNorm with one knob per mistake, fp32 (`upcast=False`: in x's own dtype).

    `sum_dims` are the dims dweight is summed over ("all": every leading dim), `bias_too` sums dbias the same
    way; `dweight` picks what multiplies grad_out in it."""
    dt = torch.float32 if upcast else x.dtype
    xf, gf, wf = x.to(dt), grad_out.to(dt), weight.to(dt)
    centred = xf - xf.mean(dim=-1, keepdim=True)
    squares = centred.pow(2).sum(dim=-1, keepdim=True)  # d = 1 and d - 1: 0 / 0 = NaN, as torch.var gives
    var = squares / (x.shape[-1] - 1 if stat == STAT_VAR_UNBIASED else x.shape[-1])
    rstd = torch.rsqrt(var + eps) if eps_at == EPS_INSIDE else 1.0 / (var.sqrt() + eps)
    xhat = centred * rstd
    g = gf * wf if weighted else gf
    mean_g = g.mean(dim=-1, keepdim=True)
    along = xhat * (g * xhat).mean(dim=-1, keepdim=True)
    dx = rstd * {DX_RIGHT: g - mean_g - along, DX_NO_MEAN_G: g - along, DX_NO_XHAT_TERM: g - mean_g,
                 DX_MEAN_PLUS: g + mean_g - along, DX_XHAT_PLUS: g - mean_g + along}[dx_form]
    by = {DW_XHAT: xhat, DW_GRAD_OUT: torch.ones_like(xhat), DW_RAW_X: xf}[dweight]

    def total(t: torch.Tensor, partial: bool) -> torch.Tensor:
        return t.sum(dim=sum_dims) if partial and sum_dims != "all" else t.reshape(-1, x.shape[-1]).sum(dim=0)

    return dx.float(), total(gf * by, True).float(), total(gf, bias_too).float()


def _case(d: Draw, name: str, shape: tuple[int, ...], *, eps=None, dtype="float32", p_dtype=None, scale=1.0,
          shift=0.0) -> Case:
    """The dx case of one input (`elements` adds its dweight and dbias twins)."""
    x = d.normal(*shape, dtype=dtype, scale=scale, shift=shift)
    w = d.normal(shape[-1], scale=0.5, shift=1.0).to(DTYPES[p_dtype or dtype])
    b = d.normal(shape[-1], scale=0.5).to(DTYPES[p_dtype or dtype])
    g = d.normal(*shape, dtype=dtype)
    args = {"x": x, "weight": w, "bias": b, "grad_out": g, **({} if eps is None else {"eps": eps})}
    return call_case(d, name, TARGET, args, dtype=dtype, out_dtype=x.dtype,
                     ctx={"eps": DEFAULT_EPS if eps is None else eps, "default_eps": eps is None})


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    D1, D2, D3 = d.choice([16, 32, 48]), d.choice([8, 24, 64]), d.choice([12, 40])
    inputs = [
        _case(d, f"fp32 2-D (N,{D1}), default eps, random weight and bias", (d.int(3, 7), D1)),
        _case(d, f"fp32 3-D (B,T,{D2}), eps=1e-2", (2, d.int(3, 6), D2), eps=1e-2),
        _case(d, f"fp32 4-D (2,3,4,{D3}), inputs with mean 3, eps=1e-5 passed", (2, 3, 4, D3), shift=3.0, eps=1e-5),
        _case(d, "fp32 3-D tiny inputs (~1e-3), default eps", (2, 5, D1), scale=1e-3),
        _case(d, "fp32 2-D tiny inputs (~1e-2), eps=1e-3", (d.int(3, 6), D2), scale=1e-2, eps=1e-3),
        _case(d, "fp32 3-D large inputs (~1e3), eps=1e-5", (3, 4, D2), scale=1e3, eps=1e-5),
        _case(d, "fp32 3-D with d = 1 (x is its own mean: dx = 0)", (2, d.int(2, 5), 1)),
        _case(d, "fp16 3-D (B,T,d), fp16 weight and bias", (2, 6, D1), dtype="float16", eps=1e-5),
        _case(d, "fp16 inputs of magnitude ~400 (squares overflow fp16), fp32 weight and bias", (2, 4, D2),
              dtype="float16", p_dtype="float32", scale=400.0, eps=1e-5),
        _case(d, "bf16 4-D, inputs with mean 1, bf16 weight and bias", (2, 2, 5, D3), dtype="bfloat16", shift=1.0,
              eps=1e-5),
        _case(d, "bf16 2-D, fp32 weight and bias, default eps", (5, D1), dtype="bfloat16", p_dtype="float32"),
    ]
    probe = _case(d, f"repeat call: two calls, x (2,4,{D2})", (2, 4, D2), eps=1e-5)
    cases = [twin for case in inputs for twin in elements(case, OUTPUTS)]
    cases += elements(repeat_after(d, probe, {"eps": 1e-5}), OUTPUTS)[:1]  # one probe (on dx), as every exercise has
    return twice_probes(cases)


def reference(case: Case):
    """Autograd of F.layer_norm, in float64 on the case's own inputs (never in the learner's process)."""
    import torch.nn.functional as F

    a = case.args
    x, w, b = (a[k].detach().double().requires_grad_(True) for k in ("x", "weight", "bias"))
    y = F.layer_norm(x, (x.shape[-1],), w, b, case.ctx["eps"])
    (y * a["grad_out"].double()).sum().backward()
    return (x.grad, w.grad, b.grad)[case.ctx["pick"]].float(), {}


def _variant(**knobs):
    a = "x", "weight", "grad_out"
    return picked(lambda case: backward(*(case.args[k] for k in a), case.ctx["eps"], **knobs))


def _low_precision(case: Case):
    a = case.args
    if a["x"].dtype == torch.float32:
        return None
    got = backward(a["x"], a["weight"].to(a["x"].dtype), a["grad_out"], case.ctx["eps"], upcast=False)
    return half_only(got[case.ctx["pick"]], a["x"].dtype)


def _default_eps(eps: float):
    def run(case: Case):
        if not case.ctx["default_eps"]:
            return None
        a = case.args
        return backward(a["x"], a["weight"], a["grad_out"], eps)[case.ctx["pick"]]

    return run


BUGS = (
    Bug(LBD["lnb_no_mean_g"], _variant(dx_form=DX_NO_MEAN_G), "dx = rstd * (g - xhat * mean(g * xhat))"),
    Bug(LBD["lnb_no_xhat_term"], _variant(dx_form=DX_NO_XHAT_TERM), "dx = rstd * (g - mean(g))"),
    Bug(LBD["lnb_weight_forgotten"], _variant(weighted=False), "g = grad_out in dx"),
    Bug(LBD["lnb_unbiased_var"], _variant(stat=STAT_VAR_UNBIASED), "var over d - 1"),
    Bug(LBD["lnb_eps_outside_sqrt"], _variant(eps_at=EPS_OUTSIDE), "rstd = 1 / (sqrt(var) + eps)"),
    Bug(LBD["lnb_dweight_partial_sum"], _variant(sum_dims=0), "dweight summed over dim 0 only"),
    Bug(LBD["lnb_dweight_partial_sum"], _variant(sum_dims=0, bias_too=True), "dweight and dbias over dim 0 only"),
    Bug(LBD["lnb_dweight_partial_sum"], _variant(sum_dims=(0, 1)), "dweight summed over dims (0, 1)"),
    Bug(LBD["lnb_dweight_partial_sum"], _variant(sum_dims=(0, 1), bias_too=True),
        "dweight and dbias over dims (0, 1)"),
    Bug(LBD["lnb_dweight_partial_sum"], _variant(sum_dims=-2), "dweight summed over dim -2 only"),
    Bug(LBD["lnb_dweight_no_xhat"], _variant(dweight=DW_GRAD_OUT), "dweight = sum(grad_out)"),
    Bug(LBD["lnb_dweight_no_xhat"], _variant(dweight=DW_RAW_X), "dweight = sum(grad_out * x)"),
    Bug(LBD["lnb_projection_sign"], _variant(dx_form=DX_XHAT_PLUS), "xhat * mean(g * xhat) added"),
    Bug(LBD["lnb_projection_sign"], _variant(dx_form=DX_MEAN_PLUS), "mean(g) added"),
    Bug(LBD["lnb_no_fp32"], _low_precision, "computed in the input dtype"),
    *(Bug(LBD["lnb_wrong_default_eps"], _default_eps(e), f"default eps={eps_text(e)}") for e in OTHER_DEFAULT_EPS),
)

SPEC = Spec(
    name="layernorm_backward",
    allowance=Allowance(graded_backward=False),  # from scratch: the op families alone (issue 30 §3)
    graded=(TARGET,),
    make_cases=make_cases,
    reference=reference,
    tolerances=TOLERANCES,
    bugs=BUGS,
    forbidden=FORBIDDEN_LAYER_NORM_BACKWARD,
    forbidden_classes=FORBIDDEN_LAYER_NORM_CLASSES,
)
