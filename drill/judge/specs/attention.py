"""Hidden tests for `attention`: scaled_dot_product_attention(q, k, v, mask=None).

Each case is built to catch a real mistake: several leading batch dims
(transpose(2, 3) instead of (-2, -1)), T_q != T_k and d_k != d_v (scale taken
from the wrong size), causal and padding masks (mask direction, fill value),
a fully masked row (NaN), large logits (exp overflow), fp16/bf16 inputs
(fill overflow, dtype of the result), and masks of every legal rank (a 1-D
key mask, a 2-D mask with 3-D inputs, a (T_q, 1) query mask): code that
assumes a query axis or 4-D scores fails those with `mask_shape_assumed`.
Shapes and values are fresh per seed.
"""

from __future__ import annotations

import torch

from drill.judge.spec import FORBIDDEN_ATTENTION, FORBIDDEN_ATTENTION_CLASSES, Bug, Case, Spec
from drill.judge.specs._attention_bugs import (
    ATTENTION_KNOBS,
    ATTENTION_VARIANTS,
    D,
    _fitted_scale,
    _guard,
    attend,
    guarded_overflow,
    knobbed,
    named_scales,
)
from drill.judge.specs._common import (
    TOLERANCES,
    Draw,
    causal_mask,
    knob_pair_bugs,
    reference_with_grads,
    repeat_probe,
    twice_probes,
    variant_bugs,
)

TARGET = "scaled_dot_product_attention"


def _case(
    name: str, q, k, v, mask=None, *, dtype="float32", draw: Draw | None = None, grads=False, tol=None, probe=False
) -> Case:
    args = {"q": q, "k": k, "v": v}
    if mask is not None:
        args["mask"] = mask
    from drill.reference.attention import broadcast_shape  # torch.broadcast_shapes imports sympy

    out_shape = (*broadcast_shape(tuple(q.shape[:-2]), tuple(k.shape[:-2])), q.shape[-2], v.shape[-1])
    care = None
    if mask is not None:
        rows = mask.any(dim=-1, keepdim=True)
        care = torch.broadcast_to(rows, (*out_shape[:-1], 1)).expand(out_shape).clone()
    upstream = draw.normal(*out_shape) if grads and draw is not None else None
    return Case(
        name=name,
        target=TARGET,
        args=args,
        grad_inputs=("q", "k", "v") if grads else (),
        upstream=upstream,
        care=care,
        out_dtype=q.dtype,
        ctx={"dtype": dtype, **({"tol": tol} if tol else {}), **({"probe": D["mask_shape_assumed"]} if probe else {})},
    )


def _row_mask(draw: Draw, lead: tuple[int, ...], t_q: int, t_k: int, blocked_row: bool) -> torch.Tensor:
    """A random mask where every row has an allowed key, except one fully blocked row."""
    m = draw.bools(*lead, t_q, t_k, p=0.6)
    m[..., :, draw.int(0, t_k - 1)] = True
    if blocked_row:
        m[..., draw.int(0, t_q - 1), :] = False
    return m


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    cases: list[Case] = []
    B, H = d.int(1, 3), d.int(1, 4)
    T = d.int(4, 12)
    dk = d.choice([8, 16, 32])
    q, k, v = (d.normal(B, H, T, dk) for _ in range(3))
    cases.append(_case(f"fp32 (B,H,T,d)=({B},{H},{T},{dk}), no mask", q, k, v, draw=d, grads=True))

    tq, tk = d.int(2, 7), d.int(8, 14)
    dk, dv = d.choice([8, 16]), d.choice([4, 12, 24])
    lead = (2, d.int(1, 3), 3)
    cases.append(
        _case(
            f"fp32 5-D inputs, T_q={tq} != T_k={tk}, d_k={dk} != d_v={dv}",
            d.normal(*lead, tq, dk), d.normal(*lead, tk, dk), d.normal(*lead, tk, dv), draw=d, grads=True,
        )
    )
    tq, tk, dk = d.int(3, 8), d.int(3, 8), d.choice([4, 8])
    cases.append(_case(f"fp32 3-D inputs (B,T,d), T_q={tq}, T_k={tk}", d.normal(2, tq, dk), d.normal(2, tk, dk),
                       d.normal(2, tk, dk)))

    T, dk = d.int(5, 12), d.choice([8, 16])
    causal = causal_mask(T)
    cases.append(
        _case("fp32 causal mask (T,T)", d.normal(B, H, T, dk), d.normal(B, H, T, dk), d.normal(B, H, T, dk), causal,
              draw=d, grads=True)
    )

    tq, tk, dk = d.int(3, 7), d.int(6, 12), d.choice([8, 16])
    pad = torch.ones(2, 1, 1, tk, dtype=torch.bool)
    pad[0, ..., tk - d.int(1, tk // 2):] = False
    pad[1, ..., tk - d.int(1, tk // 2):] = False
    cases.append(
        _case(f"fp32 padding mask (B,1,1,T_k), T_q={tq} != T_k={tk}", d.normal(2, 3, tq, dk), d.normal(2, 3, tk, dk),
              d.normal(2, 3, tk, dk), pad, draw=d, grads=True)
    )

    tq, tk = d.int(4, 8), d.int(4, 8)
    cases.append(
        _case("fp32 random mask with a fully masked row", d.normal(2, 2, tq, 8), d.normal(2, 2, tk, 8),
              d.normal(2, 2, tk, 8), _row_mask(d, (2, 2), tq, tk, True))
    )

    T, dk = d.int(6, 10), 16
    cases.append(
        _case("fp32 large logits (|q.k|/sqrt(d) ~ 1e3)", d.normal(2, 2, T, dk, scale=30.0),
              d.normal(2, 2, T, dk, scale=30.0), d.normal(2, 2, T, dk), tol="float32_large_logits")
    )

    tq, tk = d.int(2, 6), d.int(2, 10)
    cases.append(
        _case(f"fp32 one fully masked row among padding, T_q={tq}", d.normal(1, 2, tq, 8), d.normal(1, 2, tk, 8),
              d.normal(1, 2, tk, 8), _row_mask(d, (1, 1), tq, tk, True), draw=d)
    )

    T = d.int(5, 12)
    cases.append(_case("fp16, no mask", *(d.normal(B, H, T, 16, dtype="float16") for _ in range(3)), dtype="float16"))

    tq, tk = d.int(6, 10), d.int(3, 5)
    cm = causal_mask(tq, tk)  # bottom-right: first rows see nothing
    cases.append(
        _case(f"fp16 causal mask with T_q={tq} > T_k={tk} (fully masked rows)", d.normal(2, 2, tq, 16, dtype="float16"),
              d.normal(2, 2, tk, 16, dtype="float16"), d.normal(2, 2, tk, 16, dtype="float16"), cm, dtype="float16")
    )
    tq, tk = d.int(3, 8), d.int(4, 9)
    cases.append(
        _case("bf16 random mask with a fully masked row", d.normal(2, 2, tq, 16, dtype="bfloat16"),
              d.normal(2, 2, tk, 16, dtype="bfloat16"), d.normal(2, 2, tk, 8, dtype="bfloat16"),
              _row_mask(d, (2, 1), tq, tk, True), dtype="bfloat16")
    )
    tk = d.int(4, 10)
    pad = torch.ones(3, 1, 1, tk, dtype=torch.bool)
    pad[1, ..., -1] = False
    cases.append(
        _case("fp32 single query (T_q=1) with padding mask", d.normal(3, 2, 1, 8), d.normal(3, 2, tk, 8),
              d.normal(3, 2, tk, 8), pad, draw=d, grads=True)
    )
    return twice_probes(cases + _mask_shape_cases(d) + [_repeat_case(d)])  # each drawn after the ones before


def _repeat_case(d: Draw) -> Case:
    """Two calls with the same shapes (q, k, v and a (B,1,1,T_k) padding mask), the second graded.

    A bias or mask cache keyed on the shape answers the second call with the first call's mask.
    """
    tq, tk, dk = d.int(3, 6), d.int(5, 9), d.choice([8, 16])

    def draw() -> dict:
        pad = torch.ones(2, 1, 1, tk, dtype=torch.bool)
        for b in range(2):
            pad[b, ..., tk - d.int(1, tk // 2):] = False
        return {"q": d.normal(2, 2, tq, dk), "k": d.normal(2, 2, tk, dk), "v": d.normal(2, 2, tk, dk), "mask": pad}

    first, second = draw(), draw()
    case = _case(f"repeat call: two calls, q (2,2,{tq},{dk}), {tk} keys, padding masks",
                 second["q"], second["k"], second["v"], second["mask"])
    return repeat_probe(case, first)


def _mask_shape_cases(d: Draw) -> list[Case]:
    """Legal masks of unusual rank: code that assumes a query axis or 4-D scores fails only here.

    Drawn after every other case, so adding them left the earlier cases of a
    seed unchanged. T_q != T_k in each, so a mask read along the wrong axis
    cannot pass by coincidence.
    """
    cases = []
    h, tq = d.int(2, 3), d.int(3, 6)
    tk = tq + d.int(2, 5)
    keys = torch.ones(tk, dtype=torch.bool)
    keys[tk - d.int(1, tk // 2):] = False
    cases.append(
        _case(f"fp32 1-D key mask (T_k,), T_q={tq} != T_k={tk}", d.normal(2, h, tq, 8), d.normal(2, h, tk, 8),
              d.normal(2, h, tk, 8), keys, draw=d, grads=True, probe=True)
    )
    tq, tk = d.int(3, 6), d.int(7, 10)
    cases.append(
        _case(f"fp32 3-D inputs (B,T,d) with a (T_q,T_k) mask, T_q={tq}, T_k={tk}", d.normal(2, tq, 8),
              d.normal(2, tk, 8), d.normal(2, tk, 4), _row_mask(d, (), tq, tk, False), probe=True)
    )
    tq, tk = d.int(4, 7), d.int(2, 3)
    rows = torch.ones(tq, 1, dtype=torch.bool)
    rows[d.int(0, tq - 1)] = False  # one query row blocked entirely: only finiteness is required there
    cases.append(
        _case(f"fp32 query mask (T_q,1) broadcast over keys, T_q={tq}, T_k={tk}", d.normal(2, 2, tq, 8),
              d.normal(2, 2, tk, 8), d.normal(2, 2, tk, 8), rows, probe=True)
    )
    return cases


def reference(case: Case):
    from drill.reference.attention import sdpa

    return reference_with_grads(case, lambda a, p: sdpa(a["q"], a["k"], a["v"], a.get("mask")))


def _variant(fn):
    def run(case: Case):
        a = case.args
        q, k, v = a["q"].float(), a["k"].float(), a["v"].float()
        return fn(q, k, v, a.get("mask"), a["q"].dtype)

    return run


def _fit_scale(case: Case, got):
    """wrong_scale with any factor built from the input sizes (1/sqrt(T_k), 1/d_v, ...): the one nearest
    the learner's."""
    a = case.args
    return _fitted_scale((a["q"].float(), a["k"].float(), a["v"].float(), a.get("mask"), a["q"].dtype), got)


def _guarded_overflow(case: Case, got):
    """no_max_subtraction behind an overflow guard (nan_to_num, clamp): see `guarded_overflow`."""
    a = case.args
    return guarded_overflow((a["q"].float(), a["k"].float(), a["v"].float(), a.get("mask"), a["q"].dtype),
                            case.expected, got)


def _scaled(case: Case, scale: float):
    a = case.args
    return _guard(attend(a["q"].float(), a["k"].float(), a["v"].float(), a.get("mask"), scale=scale), a.get("mask"))


# Sizes a scale may wrongly be taken from (d_k's own slips are fixed ATTENTION_VARIANTS);
# q.shape[0]/[1] are what code written for one rank reads on another.
_SIZES = {
    "d_k": lambda c: c.args["q"].shape[-1],
    "d_v": lambda c: c.args["v"].shape[-1],
    "T_q": lambda c: c.args["q"].shape[-2],
    "T_k": lambda c: c.args["k"].shape[-2],
    "q.shape[0]": lambda c: c.args["q"].shape[0],
    "q.shape[1]": lambda c: c.args["q"].shape[1],
}
NAMED_SCALES = named_scales(_SIZES, _scaled, skip={"1/sqrt(d_k)", "1/d_k", "sqrt(d_k)", "1/sqrt(d_v)"})

SPEC = Spec(
    name="attention",
    graded=(TARGET,),
    make_cases=make_cases,
    reference=reference,
    tolerances=TOLERANCES,
    bugs=variant_bugs(D, ATTENTION_VARIANTS, _variant)
    + tuple(NAMED_SCALES)
    + (Bug(D["wrong_scale"], _fit_scale, "another factor made of the input sizes", fit=True),
       Bug(D["no_max_subtraction"], _guarded_overflow,
           "exp without max subtraction, its overflow patched (nan_to_num/clamp): wrong only where exp overflows",
           fit=True))
    + knob_pair_bugs(D, ATTENTION_KNOBS, lambda knobs: _variant(knobbed(knobs))),
    exception_bugs=(("without overflow", D["fp16_fill_overflow"]),),
    forbidden=FORBIDDEN_ATTENTION,
    forbidden_classes=FORBIDDEN_ATTENTION_CLASSES,
    absent_arg_bugs=(("mask", D["mask_none_unhandled"]),),
)
