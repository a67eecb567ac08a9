"""Hidden tests for `grad_clip`: clip_grad_norm_(parameters, max_norm, eps=1e-6) -> the norm before clipping.

Each scenario (a set of parameters, their gradients, max_norm) runs three times
in the child as a "grads" case (drill/judge/grads.py), each grading one thing:
the returned norm, the gradients the call leaves behind, and whether every
`.grad` is still the same tensor object. What the scenarios are built to reveal:
- norms above and below max_norm (below: nothing may change; scaling anyway
  makes gradients grow);
- `model.parameters()` with a frozen part (a generator: iterated twice, the
  second loop finds nothing to scale; frozen parameters have no gradient);
- a trainable parameter whose gradient is still None (skip it, don't crash);
- one gradient a million times the others (per-parameter clipping and a sum of
  per-parameter norms are far from the global norm there);
- fp16 gradients of a few hundred (squares summed in fp16 overflow to inf) and
  bf16 ones;
- gradients of order 1e-7 with max_norm near eps, where the eps in the
  denominator is a third of it; and an explicit eps = 0.5;
- no gradient at all: the norm is 0 and nothing changes.
Gradient values are drawn continuous and max_norm is drawn at least 20% away
from the total, so no test sits on the `total > max_norm` edge.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from drill.judge import registry
from drill.judge.spec import Bug, Case, Diagnosis, Spec, Tolerance
from drill.judge.specs._common import DTYPE_LABEL, TOLERANCES, Draw, diagnoses, repeat_probe

TARGET = "clip_grad_norm_"
KIND = "grads"
RETURNS = ("norm", "grads", "same")
WHAT = {"norm": "the returned norm", "grads": "the gradients after the call",
        "same": "each .grad still the same tensor"}
DEFAULT_EPS = registry.default("grad_clip", "eps")
# Gradients of order 1e-7 sit far inside the usual atol (2e-5 times max(1, max|expected|)): there every value is
# compared relative to itself, so eps's share of the factor (a third of it) shows. A product g * c is exact to
# ~1e-7 relative in fp32 whatever the order of operations.
TOLS = {**TOLERANCES, "float32_relative": Tolerance(atol=0.0, rtol=1e-4)}

CD = diagnoses(
    Diagnosis("clip_per_parameter", "Each gradient clipped by its own norm",
              "Clipping is by the GLOBAL norm, sqrt(sum over every parameter of sum(grad ** 2)), and every gradient "
              "gets the same factor max_norm / (total + eps): the update keeps its direction. Clipping each "
              "parameter separately changes the direction and lets the total norm reach max_norm * sqrt(n).",
              "Compute one total over all gradients first, then scale every gradient by the same factor."),
    Diagnosis("clip_always_scales", "Gradients scaled even when the norm is below max_norm",
              "max_norm / (total + eps) is above 1 when total < max_norm: multiplying anyway makes small gradients "
              "GROW to max_norm. PyTorch multiplies by min(1, max_norm / (total + eps)); the contract scales only "
              "when total > max_norm.",
              "if total > max_norm: scale; otherwise leave the gradients alone."),
    Diagnosis("clip_returns_clipped_norm", "Returns the norm after clipping",
              "The return value is the total norm BEFORE clipping (what training logs plot as grad_norm, and what "
              "shows a spike); after clipping it is max_norm, which says nothing.",
              "Return the total you computed before scaling."),
    Diagnosis("clip_rebinds_grad", "Each .grad replaced by a new tensor instead of scaled in place",
              "p.grad = p.grad * c gives the right numbers in a NEW tensor: anything holding the old one (an "
              "optimizer's fused buffers, a hook, a gradient bucket in DDP) keeps the unclipped values. The "
              "trailing underscore of clip_grad_norm_ means in place.",
              "p.grad.mul_(c) (or p.grad *= c, or p.grad.detach().mul_(c))."),
    Diagnosis("clip_none_grad_crash", "Crashes on a parameter whose .grad is None",
              "A frozen parameter, or one the loss did not reach, has .grad None. The norm is over the parameters "
              "that HAVE a gradient; the others are skipped.",
              "grads = [p.grad for p in parameters if p.grad is not None]."),
    Diagnosis("clip_generator_twice", "The parameters iterated twice: nothing is scaled",
              "model.parameters() is a generator: the first loop (the norm) exhausts it, and the second loop (the "
              "scaling) sees no parameter at all, so a list works while a generator silently clips nothing.",
              "parameters = list(parameters) once at the top, then loop over the list."),
    Diagnosis("clip_no_eps", "No eps in the denominator",
              "The factor is max_norm / (total + eps): the eps keeps it finite when the total is tiny (a gradient "
              "of zeros with max_norm 0 divides 0 by 0). It shows when the total is near eps.",
              "coef = max_norm / (total + eps)."),
    Diagnosis("clip_eps_ignored", "The eps argument is ignored",
              "The caller's eps enters the factor max_norm / (total + eps); a hard-coded 1e-6 (or none) ignores it.",
              "Use the eps parameter."),
    Diagnosis("clip_sum_of_norms", "Total = sum of the per-parameter norms",
              "Norms do not add: the global L2 norm is sqrt(sum of squared norms). Adding the norms over-estimates "
              "it (by up to sqrt(n)) and clips too often and too hard.",
              "total = sqrt(sum(g.pow(2).sum() for g in grads)), or torch.linalg.vector_norm of the per-parameter "
              "norms."),
    Diagnosis("clip_no_sqrt", "Total = sum of squares, no square root",
              "sum(grad ** 2) is the squared norm: compared with max_norm it clips at the wrong threshold and "
              "returns the wrong number.",
              "Take the square root of the sum of squares."),
    Diagnosis("clip_half_accumulation", "Squares summed in fp16: the norm overflows",
              "fp16 tops out at 65504: a gradient entry of 300 squares to 90000 = inf, so the total is inf and the "
              "factor 0 wipes every gradient. Accumulate the squares in fp32 or better.",
              "g.float().pow(2).sum() for each gradient (or torch.linalg.vector_norm(g, dtype=torch.float32))."),
    Diagnosis("clip_empty_crash", "Crashes when no parameter has a gradient",
              "With no gradient at all (every parameter frozen, or before the first backward) the norm is "
              "tensor(0.) and nothing changes; torch.stack of an empty list, or sum([]) (an int) with .sqrt(), "
              "raises.",
              "Start from total = torch.zeros((), dtype=torch.float32) and add each gradient's sum of squares."),
)


@dataclass(frozen=True)
class Param:
    shape: tuple[int, ...]
    dtype: str
    state: str  # "grad" (has a gradient), "frozen" (requires_grad False, no grad), "none" (trainable, grad None)


def _scenario(d: Draw, name: str, params: list[Param], *, scale: float = 1.0, big: int | None = None,
              above: bool = True, as_: str = "list", eps: float | None = None, edge: float = 0.2,
              relative: bool = False) -> list[Case]:
    grads: list[torch.Tensor | None] = []
    for i, p in enumerate(params):
        if p.state != "grad":
            grads.append(None)
            continue
        g = torch.randn(p.shape, generator=d.gen, dtype=torch.float32) * scale * (1e6 if i == big else 1.0)
        grads.append(g.to(getattr(torch, p.dtype)))
    total = float(sum(g.double().pow(2).sum() for g in grads if g is not None) ** 0.5) if any(
        g is not None for g in grads) else 0.0
    factor = d.rng.uniform(0.2, 1 - edge) if above else d.rng.uniform(1 + edge, 3.0)
    max_norm = float(f"{total * factor:.4g}") if total else 1.0
    extra = {"shapes": [list(p.shape) for p in params], "dtypes": [p.dtype for p in params],
             "frozen": [i for i, p in enumerate(params) if p.state == "frozen"], "as": as_, "max_norm": max_norm,
             "eps": eps}
    half = next((p.dtype for p in params if p.state == "grad" and p.dtype != "float32"), "float32")
    args = {f"g{i}": g for i, g in enumerate(grads) if g is not None}
    cases = []
    for returns in RETURNS:
        tol = {"norm": "float32", "grads": half, "same": "int64"}[returns]
        if relative and returns != "same":
            tol = "float32_relative"
        cases.append(Case(
            name=f"{name}: {WHAT[returns]}", target=TARGET, kind=KIND, args=dict(args),
            extra={**extra, "returns": returns},
            out_dtype={"norm": torch.float32, "grads": torch.float32, "same": torch.int64}[returns],
            ctx={"dtype": "float32" if returns != "grads" else half, "tol": tol, "grads": grads,
                 "states": [p.state for p in params], **extra, "returns": returns}))
    return cases


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)

    def shapes(n: int) -> list[tuple[int, ...]]:
        return [d.choice([(d.int(2, 9),), (d.int(2, 6), d.int(2, 6)), (d.int(1, 3), d.int(2, 4), d.int(2, 4))])
                for _ in range(n)]

    def grads_of(dtype: str, n: int) -> list[Param]:
        return [Param(s, dtype, "grad") for s in shapes(n)]

    cases = []
    cases += _scenario(d, "3 parameters, norm above max_norm", grads_of("float32", 3))
    cases += _scenario(d, "3 parameters, norm below max_norm", grads_of("float32", 3), above=False)
    frozen = [Param(s, "float32", st) for s, st in zip(shapes(4), ("frozen", "grad", "frozen", "grad"), strict=True)]
    cases += _scenario(d, "model.parameters() with a frozen part (a generator)", frozen, as_="generator")
    none = [Param(s, "float32", st) for s, st in zip(shapes(3), ("grad", "none", "grad"), strict=True)]
    cases += _scenario(d, "a trainable parameter whose .grad is still None", none)
    cases += _scenario(d, "one gradient a million times the others", grads_of("float32", 3), big=1)
    cases += _scenario(d, "fp16 gradients of a few hundred", grads_of("float16", 2), scale=300.0)
    cases += _scenario(d, f"{DTYPE_LABEL['bfloat16']} gradients, model.parameters()", grads_of("bfloat16", 3),
                       as_="generator")
    cases += _scenario(d, "gradients of order 1e-7, max_norm near eps", grads_of("float32", 2), scale=1e-7,
                       relative=True)
    cases += _scenario(d, "eps = 0.5 given", grads_of("float32", 2), scale=1.0, eps=0.5)
    cases += _scenario(d, "no gradient at all", [Param(s, "float32", "frozen") for s in shapes(2)] +
                       [Param(s, "float32", "none") for s in shapes(1)])
    # Drawn last, so the cases above are unchanged for a seed: the same shapes clipped once just before the
    # graded call (a factor or a norm cached per shape answers from the first call's gradients).
    probe = _scenario(d, "repeat call: the same shapes clipped just before", grads_of("float32", 2))[1]
    first = {name: torch.randn(g.shape, generator=d.gen) * 3.0 for name, g in probe.args.items()}
    return [*cases, repeat_probe(probe, first)]


def _outcome(case: Case, total: torch.Tensor | float, grads: list, same: list[int]) -> torch.Tensor:
    returns = case.ctx["returns"]
    if returns == "norm":
        return torch.as_tensor(total, dtype=torch.float64).to(torch.float32).reshape(())
    if returns == "same":
        return torch.tensor(same, dtype=torch.int64)
    flat = [g.to(torch.float32).reshape(-1) for g in grads if g is not None]
    return torch.cat(flat) if flat else torch.zeros(0)


def reference(case: Case):
    from drill.reference.clip import clip_grad_norm

    eps = case.ctx["eps"] if case.ctx["eps"] is not None else DEFAULT_EPS
    total, clipped = clip_grad_norm(case.ctx["grads"], case.ctx["max_norm"], eps)
    return _outcome(case, total, clipped, [1] * len(case.ctx["grads"])), {}


def simulate(case: Case, *, total_rule: str = "l2", coef_rule: str = "contract", returned: str = "before",
             per_parameter: bool = False, rebind: str = "never", generator_twice: bool = False) -> torch.Tensor:
    """What code with one mistake leaves behind on this case (the defaults are the contract)."""
    grads = case.ctx["grads"]
    max_norm = case.ctx["max_norm"]
    eps = case.ctx["eps"] if case.ctx["eps"] is not None else DEFAULT_EPS
    present = [g for g in grads if g is not None]
    if total_rule == "half":  # each square in the gradient's own dtype, summed there
        parts = [g.pow(2).sum().to(torch.float64) for g in present]
    else:
        parts = [g.double().pow(2).sum() for g in present]
    sq = sum(parts, torch.zeros((), dtype=torch.float64))
    total = {"l2": sq.sqrt(), "half": sq.sqrt(), "no_sqrt": sq,
             "sum_of_norms": sum((p.sqrt() for p in parts), torch.zeros((), dtype=torch.float64))}[total_rule]
    t = float(total)
    used_eps = {"contract": eps, "no_eps": 0.0, "eps_ignored": DEFAULT_EPS, "always": eps}[coef_rule]
    clips = t > max_norm or coef_rule == "always"
    scaled = bool(clips and not (generator_twice and case.ctx["as"] == "generator"))
    out = []
    for g in grads:
        if g is None:
            out.append(None)
        elif per_parameter:
            n = float(g.double().pow(2).sum().sqrt())
            out.append((g.double() * (max_norm / (n + eps))).to(g.dtype) if n > max_norm else g.clone())
        elif scaled:
            out.append((g.double() * (max_norm / (t + used_eps) if t + used_eps else float("inf"))).to(g.dtype))
        else:
            out.append(g.clone())
    changed = scaled or (per_parameter and any(o is not None and not torch.equal(o, g)
                                                for o, g in zip(out, grads, strict=True)))
    same = [0 if g is not None and (rebind == "always" or (rebind == "scaled" and changed)) else 1 for g in grads]
    shown = total * (max_norm / (t + used_eps)) if returned == "after" and clips else total
    return _outcome(case, shown, out, same)


def _v(**knobs):
    return lambda case: simulate(case, **knobs)


CLIP_VARIANTS = [
    ("clip_per_parameter", "each gradient by its own norm", _v(per_parameter=True)),
    ("clip_always_scales", "max_norm / (total + eps) also below max_norm", _v(coef_rule="always")),
    ("clip_returns_clipped_norm", "the norm after scaling returned", _v(returned="after")),
    ("clip_rebinds_grad", "p.grad = p.grad * coef when clipping", _v(rebind="scaled")),
    ("clip_rebinds_grad", "p.grad = p.grad * min(1, coef) always", _v(rebind="always")),
    ("clip_generator_twice", "two loops over a generator", _v(generator_twice=True)),
    ("clip_no_eps", "max_norm / total", _v(coef_rule="no_eps")),
    ("clip_eps_ignored", "eps fixed at 1e-6", _v(coef_rule="eps_ignored")),
    ("clip_sum_of_norms", "total = sum of the per-parameter norms", _v(total_rule="sum_of_norms")),
    ("clip_no_sqrt", "total = sum of squares", _v(total_rule="no_sqrt")),
    ("clip_half_accumulation", "squares summed in the gradients' dtype", _v(total_rule="half")),
]

FORBIDDEN_CLIP = tuple(f"{owner}.{name}" for owner in ("torch.nn.utils", "torch.nn.utils.clip_grad")
                       for name in ("clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "get_total_norm",
                                    "clip_grads_with_norm_"))

SPEC = Spec(
    name="grad_clip",
    graded=(TARGET,),
    make_cases=make_cases,
    reference=reference,
    tolerances=TOLS,
    bugs=tuple(Bug(CD[i], fn, label) for i, label, fn in CLIP_VARIANTS),
    exception_bugs=(
        ("non-empty TensorList", CD["clip_empty_crash"]),
        ("non-empty list of Tensors", CD["clip_empty_crash"]),
        ("'int' object has no attribute", CD["clip_empty_crash"]),
        ("NoneType", CD["clip_none_grad_crash"]),
    ),
    forbidden=FORBIDDEN_CLIP,
    no_determinism_probes="clip_grad_norm_ edits gradients in place and returns their norm: a second call on the "
                          "clipped gradients is a different question (nothing left to clip), so a repeat would not "
                          "show randomness, only the first call's effect.",
)
