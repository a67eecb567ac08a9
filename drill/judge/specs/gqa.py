"""Hidden tests for `gqa`: GroupedQueryAttention(d_model, n_heads, n_kv_heads), causal.

Configs: MHA (n_kv = n_heads), MQA (n_kv = 1) and real GQA with group sizes
2, 3 and 4 — `.repeat` instead of `repeat_interleave` only shows when
1 < n_kv < n_heads, so most cases are of that kind. fp32 cases check
gradients of x and of all four projections; fp16/bf16 cases check dtype
and finiteness. Bug variants: K/V tiled (head h reads kv head h % n_kv),
no causal mask, a mask that hides the diagonal, and the attention mistakes
that apply to a causal self-attention (scale, softmax axis, mask handling,
exp overflow).

Memory audit (advisory): see drill/judge/audit.py; it measures the graded
forwards themselves (every fp32 case with groups and more than one token,
the largest at the audit's size) and reports whether K/V were copied to
n_heads heads and the forward's peak allocation next to a grouped
baseline's, run the same way.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from drill.judge.spec import FORBIDDEN_ATTENTION, FORBIDDEN_ATTENTION_CLASSES, Bug, Case, Diagnosis, Spec
from drill.judge.specs._attention_bugs import (
    ATTENTION_VARIANTS,
    D,
    attend,
    closest,
    merge_heads,
    named_scales,
    shape_scales,
    split_heads,
)
from drill.judge.specs._common import (
    TOLERANCES,
    Draw,
    causal_mask,
    measured_calls,
    module_case,
    reference_with_grads,
    repeat_probe,
    twice_probes,
    variant_bugs,
)

TARGET = "GroupedQueryAttention"
PROJ = ("q_proj", "k_proj", "v_proj", "o_proj")

GD = {
    d.id: d
    for d in [
        Diagnosis("gqa_tiled_kv", "K/V heads tiled instead of grouped",
                  "Query head h must read KV head h // group (consecutive query heads share one); `.repeat` tiles the "
                  "KV heads, so head h reads h % n_kv_heads instead.",
                  "Use k.repeat_interleave(group, dim=1), or fold each group into the query rows: q.reshape(B, n_kv, "
                  "group * T, d)."),
        Diagnosis("gqa_not_causal", "No causal mask",
                  "Every token also attends to later tokens; in a decoder token t may only see positions 0..t.",
                  "Mask scores where key position > query position with -inf before the softmax."),
        Diagnosis("gqa_diagonal_masked", "Causal mask hides the diagonal",
                  "Your mask blocks key position == query position too, so no token sees itself and token 0 sees "
                  "nothing at all (a NaN or uniform row).",
                  "Block only key_pos > query_pos: torch.tril(ones(T, T)) is the *allowed* set, triu(..., diagonal=1) "
                  "the blocked one."),
    ]
}

# The attention-level mistakes that make sense for causal self-attention (no user mask to invert or fully block).
APPLICABLE = ("missing_scale", "scale_after_softmax", "wrong_scale", "softmax_wrong_axis", "mask_fill_zero",
              "mask_after_softmax", "no_max_subtraction",
              "softmax_discarded")  # the last: a mistake of real code (issue 18)


def _case(d: Draw, name: str, B: int, T: int, h: int, h_kv: int, dh: int, *, dtype="float32", grads=False,
          scale=1.0) -> Case:
    d_model = h * dh
    params = {
        "q_proj.weight": d.weight(h * dh, d_model, dtype=dtype),
        "k_proj.weight": d.weight(h_kv * dh, d_model, dtype=dtype),
        "v_proj.weight": d.weight(h_kv * dh, d_model, dtype=dtype),
        "o_proj.weight": d.weight(d_model, h * dh, dtype=dtype),
    }
    x = d.normal(B, T, d_model, dtype=dtype, scale=scale)
    return module_case(d, name, TARGET, {"x": x}, init=(d_model, h, h_kv), params=params, dtype=dtype, grads=grads,
                       ctx={"n_heads": h, "n_kv_heads": h_kv,
                            **({"tol": "float32_large_logits"} if scale > 1.0 and dtype == "float32" else {})})


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    T = lambda: d.int(5, 10)  # noqa: E731 - a fresh length per case
    return measured_calls(twice_probes([
        _case(d, "fp32 GQA n_heads=4, n_kv_heads=2 (group 2)", 2, T(), 4, 2, d.choice([8, 16]), grads=True),
        _case(d, "fp32 MHA n_heads=n_kv_heads=4", 2, T(), 4, 4, 8, grads=True),
        _case(d, "fp32 MQA n_heads=4, n_kv_heads=1", 2, T(), 4, 1, 8, grads=True),
        _case(d, "fp32 GQA n_heads=8, n_kv_heads=2 (group 4)", 1, T(), 8, 2, 8, grads=True),
        _case(d, "fp32 GQA n_heads=6, n_kv_heads=2 (group 3)", 2, T(), 6, 2, 4),
        _case(d, "fp32 GQA n_heads=6, n_kv_heads=3 (group 2), T=1", 3, 1, 6, 3, 8),
        _case(d, "fp32 GQA n_heads=8, n_kv_heads=4, large logits (~1e3)", 2, T(), 8, 4, 8, scale=30.0),
        _case(d, "fp16 GQA n_heads=4, n_kv_heads=2", 2, T(), 4, 2, 16, dtype="float16"),
        _case(d, "bf16 GQA n_heads=8, n_kv_heads=2", 2, T(), 8, 2, 8, dtype="bfloat16"),
        _repeat_case(d, T()),  # drawn last: the cases above are unchanged for a seed
        _case(d, "fp32 GQA at the memory audit's size (B=2, T=48, n_heads=8, n_kv_heads=2)", 2, 48, 8, 2, 16,
              grads=True),
    ]), "gqa_memory", _grouped_fp32)


def _grouped_fp32(case: Case) -> bool:
    """The cases the memory audit measures: every fp32 one with real groups (at h = h_kv, K is already per head) and
    more than one token (at T = 1 each head's output is its V row, which the by-value copy check would take for V)."""
    return (case.ctx.get("dtype", "float32") == "float32" and case.ctx["n_heads"] > case.ctx["n_kv_heads"]
            and case.args["x"].shape[1] > 1)


def _repeat_case(d: Draw, t: int) -> Case:
    """The same module instance called first on other inputs of the same shape; second call graded."""
    first = d.normal(2, t, 32)
    case = _case(d, f"repeat call: one module called twice, x (2,{t},32), n_heads=4, n_kv_heads=2",
                 2, t, 4, 2, 8)
    return repeat_probe(case, {"x": first})


def _weights(case: Case, dtype=torch.float32) -> list[torch.Tensor]:
    return [case.params[f"{p}.weight"].to(dtype) for p in PROJ]


def reference(case: Case):
    from drill.reference.attention import grouped_query_attention

    h, h_kv = case.ctx["n_heads"], case.ctx["n_kv_heads"]
    return reference_with_grads(
        case,
        lambda a, p: grouped_query_attention(a["x"], *(p[f"{n}.weight"] for n in PROJ), h, h_kv, impl="math")[0],
    )


def gqa_variant(case: Case, *, tiled=False, mask="causal", core=None, scale=None, strided_split=False,
                strided_merge=False):
    """GQA recomputed (fp32) with one mistake; returns (output, unknown) like the attention variants.

    mask: "causal", "none" or "strict" (diagonal blocked too: row 0 has no key,
    its value depends on the fill and is left out of matching).
    strided_split / strided_merge: heads read every n-th feature (see `split_heads`).
    """
    x = case.args["x"].float()
    wq, wk, wv, wo = _weights(case)
    h, h_kv = case.ctx["n_heads"], case.ctx["n_kv_heads"]
    B, T, _ = x.shape
    g = h // h_kv
    ss = strided_split
    q = split_heads(F.linear(x, wq), h, ss)
    k, v = split_heads(F.linear(x, wk), h_kv, ss), split_heads(F.linear(x, wv), h_kv, ss)
    if tiled:
        if g == 1 or h_kv == 1:
            return None
        k, v = k.repeat(1, g, 1, 1), v.repeat(1, g, 1, 1)
    else:
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    m = None
    if mask == "causal":
        m = causal_mask(T)
    elif mask == "strict":
        m = torch.ones(T, T, dtype=torch.bool).tril(diagonal=-1)
    if core is None:
        o = attend(q, k, v, m, scale=scale)
        unknown_rows = None if m is None else ~m.any(dim=-1)  # (T,)
    else:
        produced = core(q, k, v, m, case.args["x"].dtype)
        if produced is None:
            return None
        o, unknown = produced if isinstance(produced, tuple) else (produced, None)
        unknown_rows = None if unknown is None else unknown.reshape(B, h, T, -1).any(dim=-1).any(dim=1).any(dim=0)
    out = F.linear(merge_heads(o, strided_merge), wo)
    unknown_out = torch.zeros(out.shape, dtype=torch.bool)
    if unknown_rows is not None:
        unknown_out[:, unknown_rows] = True
    unknown_out |= torch.isnan(out)
    return out, unknown_out


def _fit_scale(case: Case, got):
    """wrong_scale with any factor built from the sizes (d_model, heads, d_head, T, B): the one nearest
    the learner's."""
    B, T, dm = case.args["x"].shape
    h, h_kv = case.ctx["n_heads"], case.ctx["n_kv_heads"]
    scales = [1.0 / math.sqrt(dm // h)] + [c for c in shape_scales(B, T, dm, h, h_kv, dm // h) if c != 1.0]
    return closest(got, [gqa_variant(case, scale=c) for c in scales])


def _tiles(case: Case) -> bool:
    """Whether tiling K/V differs from grouping them here (1 < n_kv_heads < n_heads)."""
    h, h_kv = case.ctx["n_heads"], case.ctx["n_kv_heads"]
    return h_kv > 1 and h // h_kv > 1


_SIZES = {
    "d_head": lambda c: c.args["x"].shape[-1] // c.ctx["n_heads"],
    "d_model": lambda c: c.args["x"].shape[-1],
    "n_heads": lambda c: c.ctx["n_heads"],
    "n_kv_heads": lambda c: c.ctx["n_kv_heads"],
    "T": lambda c: c.args["x"].shape[1],
    "B": lambda c: c.args["x"].shape[0],
}
# d_head's 1/d and sqrt slips come from the shared ATTENTION_VARIANTS (d_k is d_head per head).
NAMED_SCALES = named_scales(_SIZES, lambda c, s: gqa_variant(c, scale=s),
                            skip={"1/sqrt(d_head)", "1/d_head", "sqrt(d_head)"})

BUGS = [
    Bug(GD["gqa_tiled_kv"], lambda c: gqa_variant(c, tiled=True), "head h reads kv head h % n_kv_heads"),
    Bug(GD["gqa_not_causal"], lambda c: gqa_variant(c, mask="none"), "no mask"),
    Bug(GD["gqa_diagonal_masked"], lambda c: gqa_variant(c, mask="strict"), "strictly-lower mask"),
    Bug(D["heads_strided_split"], lambda c: gqa_variant(c, strided_split=True, strided_merge=True),
        "view(B, T, d_head, heads) to split, the same layout to merge"),
    Bug(D["heads_strided_split"], lambda c: gqa_variant(c, strided_split=True), "view(B, T, d_head, heads) to split"),
    *NAMED_SCALES,
    Bug(D["wrong_scale"], _fit_scale, "another factor made of the sizes", fit=True),
    # Two independent slips at once. Alone, each reproduces only the tests the other cannot touch (MHA/MQA for
    # the scale; T = 1 and saturated large logits for the tiling), so which one matched more depended on the seed.
    Bug(D["missing_scale"], lambda c: gqa_variant(c, tiled=_tiles(c), scale=1.0), "no scaling; K/V heads tiled",
        also="gqa_tiled_kv"),
] + [*variant_bugs(D, ATTENTION_VARIANTS, lambda fn: lambda c: gqa_variant(c, core=fn), only=APPLICABLE)]

SPEC = Spec(
    name="gqa",
    graded=(TARGET,),
    make_cases=make_cases,
    reference=reference,
    tolerances=TOLERANCES,
    bugs=tuple(BUGS),
    exception_bugs=(("without overflow", D["fp16_fill_overflow"]),),
    forbidden=FORBIDDEN_ATTENTION,
    forbidden_classes=FORBIDDEN_ATTENTION_CLASSES,
    audit={"name": "gqa_memory", "batch": 2, "seq": 48, "d_model": 128, "n_heads": 8, "n_kv_heads": 2},
)
