"""Hidden tests for `mha`: MultiHeadAttention(d_model, n_heads) with q/k/v/o_proj.

The parent draws the four projection weights, the child copies them into the
learner's module by the contract's attribute names, and the reference MHA is
computed with exactly those weights. Cases vary the head count (so a wrong
split or merge of heads shows), masks (causal (T,T), padding (B,1,1,T),
(B,1,T,T) with a fully masked row, a 1-D (T,) key mask, one mask per head
(B,n_heads,T,T)), dtypes, and check gradients of x and of every projection.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from drill.judge.spec import FORBIDDEN_ATTENTION, FORBIDDEN_ATTENTION_CLASSES, Bug, Case, Diagnosis, Spec
from drill.judge.specs._attention_bugs import (
    ATTENTION_KNOBS,
    ATTENTION_VARIANTS,
    D,
    attend,
    closest,
    knobbed,
    merge_heads,
    named_scales,
    shape_scales,
    split_heads,
)
from drill.judge.specs._common import (
    TOLERANCES,
    Draw,
    causal_mask,
    knob_pair_bugs,
    module_case,
    reference_with_grads,
    repeat_probe,
    twice_probes,
    variant_bugs,
)

TARGET = "MultiHeadAttention"
PROJ = ("q_proj", "k_proj", "v_proj", "o_proj")

MHA_D = {
    d.id: d
    for d in [
        Diagnosis("split_heads_no_transpose", "Heads split without a transpose",
                  "Viewing (B, T, d_model) straight as (B, H, T, d_head) scrambles tokens and features; head h must "
                  "get feature slice [h*d_head, (h+1)*d_head) of every token.",
                  "Use x.view(B, T, H, d_head).transpose(1, 2)."),
        Diagnosis("merge_heads_no_transpose", "Heads merged without a transpose",
                  "Reshaping (B, H, T, d_head) straight to (B, T, d_model) mixes tokens; the head axis must move next "
                  "to d_head first.",
                  "Use out.transpose(1, 2).reshape(B, T, d_model) (or .contiguous().view)."),
        Diagnosis("missing_output_projection", "Output projection missing",
                  "The merged heads must go through o_proj; without it the heads are never mixed.",
                  "Return self.o_proj(merged)."),
        Diagnosis("mask_heads_collapsed", "One head's mask used for every head",
                  "A mask may differ per head: (B, n_heads, T, T) is legal. Your code takes the mask of head 0 "
                  "(e.g. mask[:, 0], assuming the head axis is always a broadcast 1) and applies it to all heads.",
                  "Broadcast first, then slice: m = torch.broadcast_to(mask, (B, n_heads, T, T)) and use m[:, h] "
                  "for head h (or apply the whole mask to the (B, n_heads, T, T) scores at once)."),
        Diagnosis("mask_1d_on_queries", "1-D key mask applied to the queries",
                  "A 1-D (T,) mask says which keys may be attended, like a (1, T) row that broadcasts over the query "
                  "axis. Your code reshapes it to (T, 1), so it blocks whole query rows instead of key columns: the "
                  "shapes still broadcast (T_q = T_k in self-attention), only the axis is wrong.",
                  "Let broadcasting place it: scores.masked_fill(~mask, ...) reads a (T,) mask as (1, T). If you must "
                  "add dims, add them in front (mask.view(1, T), mask[None, :]), never mask.unsqueeze(-1)."),
    ]
}


def _case(
    d: Draw, name: str, B: int, T: int, d_model: int, H: int, mask=None, *, dtype="float32", grads=False, probe=False
) -> Case:
    x = d.normal(B, T, d_model, dtype=dtype)
    params = {f"{p}.weight": d.weight(d_model, d_model, dtype=dtype) for p in PROJ}
    args = {"x": x}
    if mask is not None:
        args["mask"] = mask
    care = None
    if mask is not None:
        rows = torch.broadcast_to(mask.any(dim=-1), (B, H, T)).all(dim=1)  # (B, T): every head sees a key
        care = rows[..., None].expand(B, T, d_model).clone()
    return module_case(d, name, TARGET, args, init=(d_model, H), params=params, dtype=dtype, grads=grads, care=care,
                       ctx={"n_heads": H, **({"probe": D["mask_shape_assumed"]} if probe else {})})


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    cases = []
    H = d.choice([2, 4])
    dh = d.choice([4, 8])
    T = d.int(4, 9)
    cases.append(_case(d, f"fp32 d_model={H * dh}, n_heads={H}, no mask", 2, T, H * dh, H, grads=True))
    H, dh, T = 3, d.choice([4, 6]), d.int(5, 10)
    causal = causal_mask(T)
    cases.append(_case(d, f"fp32 causal mask (T,T), n_heads={H}", 2, T, H * dh, H, causal, grads=True))
    H, dh, T = d.choice([4, 8]), 4, d.int(5, 9)
    pad = torch.ones(3, 1, 1, T, dtype=torch.bool)
    pad[0, ..., -2:] = False
    pad[2, ..., -1:] = False
    cases.append(_case(d, f"fp32 padding mask (B,1,1,T), n_heads={H}", 3, T, H * dh, H, pad, grads=True))
    H, dh, T = 2, 8, d.int(4, 8)
    m = d.bools(2, 1, T, T, p=0.6)
    m[..., 0] = True
    m[0, 0, d.int(0, T - 1), :] = False
    cases.append(_case(d, "fp32 random mask (B,1,T,T) with a fully masked row", 2, T, H * dh, H, m))
    cases.append(_case(d, "fp32 single head (n_heads=1)", 2, d.int(3, 6), 16, 1))
    cases.append(_case(d, "fp32 d_head=4, n_heads=6", 1, d.int(5, 8), 24, 6))
    T = d.int(4, 8)
    cases.append(_case(d, "fp16, n_heads=4, no mask", 2, T, 32, 4, dtype="float16"))
    T = d.int(4, 8)
    m = d.bools(2, 1, T, T, p=0.6)
    m[..., 0] = True
    m[1, 0, d.int(0, T - 1), :] = False
    cases.append(_case(d, "fp16 random mask with a fully masked row, n_heads=2", 2, T, 16, 2, m, dtype="float16"))
    T = d.int(4, 8)
    cases.append(
        _case(d, "bf16 causal mask, n_heads=2", 2, T, 32, 2, causal_mask(T), dtype="bfloat16")
    )
    return twice_probes(cases + _mask_shape_cases(d) + [_repeat_case(d)])  # each drawn after the ones before


def _mask_shape_cases(d: Draw) -> list[Case]:
    """The legal mask forms the cases above leave out: a 1-D key mask, and one mask per head.

    Drawn last, so the earlier cases of a seed are unchanged. Every row of the
    per-head mask keeps a key, and heads differ, so using one head's mask for
    all (mask_heads_collapsed) moves the output.
    """
    H, T = d.choice([2, 4]), d.int(5, 9)
    keys = torch.ones(T, dtype=torch.bool)
    keys[T - d.int(1, T // 2):] = False
    cases = [_case(d, f"fp32 1-D key mask (T,), n_heads={H}", 2, T, H * 8, H, keys, probe=True)]
    H, T = d.choice([2, 3]), d.int(5, 9)
    per_head = d.bools(2, H, T, T, p=0.5)
    per_head[:, 0, :, 0] = True  # head 0 always sees key 0,
    per_head[:, 1:, :, 0] = False  # the other heads never do,
    per_head[:, 1:, :, 1] = True  # but always see key 1: no row is empty, and no two heads agree
    cases.append(
        _case(d, f"fp32 per-head mask (B,n_heads,T,T), n_heads={H}", 2, T, H * 4, H, per_head, grads=True, probe=True)
    )
    return cases


def _padding(d: Draw, B: int, T: int) -> torch.Tensor:
    """(B,1,1,T) key padding; every row keeps its first key."""
    pad = torch.ones(B, 1, 1, T, dtype=torch.bool)
    for b in range(B):
        pad[b, ..., T - d.int(1, T // 2):] = False
    return pad


def _repeat_case(d: Draw) -> Case:
    """The same module instance called first on other inputs and another padding mask of the same shapes."""
    H, T = 2, d.int(5, 9)
    first = {"x": d.normal(2, T, 16), "mask": _padding(d, 2, T)}
    case = _case(d, f"repeat call: one module called twice, x (2,{T},16), padding masks", 2, T, 16, H,
                 _padding(d, 2, T))
    return repeat_probe(case, first)


def _weights(case: Case) -> list[torch.Tensor]:
    return [case.params[f"{p}.weight"] for p in PROJ]


def reference(case: Case):
    from drill.reference.attention import multi_head_attention

    H = case.ctx["n_heads"]
    return reference_with_grads(
        case,
        lambda a, p: multi_head_attention(a["x"], *(p[f"{n}.weight"] for n in PROJ), H, a.get("mask")),
    )


def mha_variant(
    case: Case, *, core=None, split_ok=True, merge_ok=True, out_proj=True, scale=None, head0_mask=False,
    strided_split=False, strided_merge=False, mask_1d_on_queries=False,
):
    """MHA recomputed with one mistake; returns (output, unknown) in fp32, or None if the mistake cannot show."""
    x = case.args["x"].float()
    mask = case.args.get("mask")
    if head0_mask:
        if mask is None or mask.dim() < 3 or mask.shape[-3] == 1:
            return None
        mask = mask[..., :1, :, :]
    if mask_1d_on_queries:
        if mask is None or mask.dim() != 1:
            return None
        mask = mask.unsqueeze(-1)  # (T,) read as (T, 1): query rows blocked instead of key columns
    wq, wk, wv, wo = (w.float() for w in _weights(case))
    B, T, dm = x.shape
    H = case.ctx["n_heads"]
    dh = dm // H

    if (strided_split or strided_merge) and H == 1:
        return None  # one head: strided and contiguous are the same slice

    def split(t):
        return split_heads(t, H, strided_split) if split_ok else t.reshape(B, H, T, dh)

    def merge(t):
        return merge_heads(t, strided_merge) if merge_ok else t.reshape(B, T, dm)

    q, k, v = split(F.linear(x, wq)), split(F.linear(x, wk)), split(F.linear(x, wv))
    unknown = None
    if core is None:
        o = attend(q, k, v, mask, scale=scale)
        if mask is not None:
            unknown = torch.broadcast_to(~mask.any(-1, keepdim=True), (*o.shape[:-1], 1)).expand(o.shape)
    else:
        produced = core(q, k, v, mask, case.args["x"].dtype)
        if produced is None:
            return None
        o, unknown = produced if isinstance(produced, tuple) else (produced, None)
    merged = merge(o)
    out = F.linear(merged, wo) if out_proj else merged
    if unknown is not None:
        unknown = merge(unknown).any(dim=-1, keepdim=True).expand(B, T, dm)
    return out, unknown


def _core_bug(fn):
    return lambda case: mha_variant(case, core=fn)


def _fit_scale(case: Case, got):
    """wrong_scale with any factor built from the sizes (d_model, n_heads, d_head, T, B): the one nearest
    the learner's."""
    B, T, dm = case.args["x"].shape
    H = case.ctx["n_heads"]
    scales = [1.0 / math.sqrt(dm // H)] + [c for c in shape_scales(B, T, dm, H, dm // H) if c != 1.0]
    return closest(got, [mha_variant(case, scale=c) for c in scales])


_SIZES = {
    "d_head": lambda c: c.args["x"].shape[-1] // c.ctx["n_heads"],
    "d_model": lambda c: c.args["x"].shape[-1],
    "n_heads": lambda c: c.ctx["n_heads"],
    "T": lambda c: c.args["x"].shape[1],
    "B": lambda c: c.args["x"].shape[0],
}
# d_head's 1/d and sqrt slips come from the shared ATTENTION_VARIANTS (d_k is d_head per head).
NAMED_SCALES = named_scales(_SIZES, lambda c, s: mha_variant(c, scale=s),
                            skip={"1/sqrt(d_head)", "1/d_head", "sqrt(d_head)"})

BUGS = [*variant_bugs(D, ATTENTION_VARIANTS, _core_bug)] + [
    Bug(MHA_D["split_heads_no_transpose"], lambda c: mha_variant(c, split_ok=False, merge_ok=False),
        "view without transpose, both ways"),
    Bug(MHA_D["split_heads_no_transpose"], lambda c: mha_variant(c, split_ok=False), "view without transpose"),
    Bug(MHA_D["merge_heads_no_transpose"], lambda c: mha_variant(c, merge_ok=False), "reshape without transpose"),
    Bug(D["heads_strided_split"], lambda c: mha_variant(c, strided_split=True, strided_merge=True),
        "view(B, T, d_head, n_heads) to split, the same layout to merge"),
    Bug(D["heads_strided_split"], lambda c: mha_variant(c, strided_split=True), "view(B, T, d_head, n_heads) to split"),
    Bug(MHA_D["missing_output_projection"], lambda c: mha_variant(c, out_proj=False), "no o_proj"),
    Bug(MHA_D["mask_heads_collapsed"], lambda c: mha_variant(c, head0_mask=True), "head 0's mask for every head"),
    Bug(MHA_D["mask_1d_on_queries"], lambda c: mha_variant(c, mask_1d_on_queries=True),
        "(T,) mask unsqueezed to (T, 1)"),
    *NAMED_SCALES,
    Bug(D["wrong_scale"], _fit_scale, "another factor made of the sizes", fit=True),
]

# Two mistakes in one file (issue 31): the head plumbing's and the scale's change every test, so they come first
# and the attention core's (softmax axis, mask) after them; `attend`'s knobs go to the core, the rest to
# `mha_variant`. A scale given as a function of the case is a factor made of its sizes.
MHA_KNOBS: tuple[tuple[str, str, dict], ...] = (
    ("split_heads_no_transpose", "view without transpose", {"split_ok": False}),
    ("merge_heads_no_transpose", "reshape without transpose", {"merge_ok": False}),
    ("heads_strided_split", "view(B, T, d_head, n_heads) to split", {"strided_split": True}),
    ("missing_output_projection", "no o_proj", {"out_proj": False}),
    ("missing_scale", "no scaling", {"scale": 1.0}),
    ("wrong_scale", "scaled by 1/sqrt(d_model)", {"scale": lambda c: 1.0 / math.sqrt(c.args["x"].shape[-1])}),
    ("wrong_scale", "divided by d_head", {"scale": lambda c: c.ctx["n_heads"] / c.args["x"].shape[-1]}),
    *(knob for knob in ATTENTION_KNOBS if "scale" not in knob[2]),
    ("mask_heads_collapsed", "head 0's mask for every head", {"head0_mask": True}),
    ("mask_1d_on_queries", "(T,) mask unsqueezed to (T, 1)", {"mask_1d_on_queries": True}),
)
_CORE_KNOBS = {"dim", "fill", "invert"}


def _knobbed_mha(knobs: dict):
    core = {k: v for k, v in knobs.items() if k in _CORE_KNOBS}
    rest = {k: v for k, v in knobs.items() if k not in _CORE_KNOBS}

    def fn(case: Case):
        scale = rest.get("scale")
        kw = {**rest, "scale": scale(case) if callable(scale) else scale}
        return mha_variant(case, core=knobbed({**core, "scale": kw.pop("scale")}) if core else None, **kw)

    return fn


BUGS += knob_pair_bugs({**D, **MHA_D}, MHA_KNOBS, _knobbed_mha)

SPEC = Spec(
    name="mha",
    graded=(TARGET,),
    make_cases=make_cases,
    reference=reference,
    tolerances=TOLERANCES,
    bugs=tuple(BUGS),
    exception_bugs=(("without overflow", D["fp16_fill_overflow"]),),
    forbidden=FORBIDDEN_ATTENTION,
    forbidden_classes=FORBIDDEN_ATTENTION_CLASSES,
    absent_arg_bugs=(("mask", D["mask_none_unhandled"]),),
)
