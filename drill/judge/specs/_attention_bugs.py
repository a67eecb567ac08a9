"""Known attention mistakes, as small re-implementations (shared by attention and mha).

Each function reproduces one mistake on the case's own inputs, in plain
PyTorch. `attend` is the one parameterised core: every variant is a choice
of scale, softmax axis, mask handling or exp. Where a variant's output
depends on a detail of the learner's code that we do not model (what a fully
blocked row comes out as, for instance, depends on the fill value chosen),
those elements are returned in the `unknown` mask and left out of matching.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from drill.judge.spec import Bug, Case, Diagnosis

D = {
    d.id: d
    for d in [
        Diagnosis("missing_scale", "Missing 1/sqrt(d_k) scaling",
                  "Without the scale the logits grow with d_k, so the softmax saturates towards one-hot.",
                  "Multiply q @ k^T by 1/math.sqrt(q.shape[-1]) before the softmax."),
        Diagnosis("scale_after_softmax", "Scale applied after the softmax",
                  "The 1/sqrt(d_k) is applied to the probabilities, not the logits: the softmax sees unscaled "
                  "q.k (too peaked), and the weights then sum to 1/sqrt(d_k) instead of 1, shrinking every output.",
                  "Scale the scores before the softmax: softmax((q @ k^T) / math.sqrt(d_k)) @ v; nothing after it."),
        Diagnosis("wrong_scale", "Wrong scaling factor",
                  "The logits are scaled by something other than 1/sqrt(d_k) (e.g. 1/d_k, 1/sqrt(d_v) or "
                  "1/sqrt(d_model)).",
                  "Scale by 1/sqrt(d_k), where d_k is the last dim of q (the per-head size)."),
        Diagnosis("softmax_wrong_axis", "Softmax over the wrong axis",
                  "Each query's weights must sum to 1 over the keys (the last axis); another axis mixes queries or "
                  "heads.",
                  "Use softmax(scores, dim=-1)."),
        Diagnosis("mask_fill_zero", "Masked logits set to 0",
                  "A logit of 0 still gets weight exp(0) = 1 in the softmax, so blocked keys are still attended.",
                  "Fill blocked logits with -inf (or the dtype's most negative value), not 0."),
        Diagnosis("mask_after_softmax", "Mask applied after the softmax",
                  "Zeroing probabilities after the softmax leaves rows that no longer sum to 1.",
                  "Mask the logits before the softmax so it renormalises over the allowed keys."),
        Diagnosis("mask_inverted", "Mask meaning inverted",
                  "In the contract (and in F.scaled_dot_product_attention) True means 'may attend'; your code blocks "
                  "the True entries.",
                  "Block where the mask is False: scores.masked_fill(~mask, ...)."),
        Diagnosis("mask_inf_times_zero", "Additive mask built as -inf * (~mask): NaN everywhere",
                  "Multiplying -inf by the inverted mask gives -inf where the mask is False but -inf * 0 = NaN where "
                  "it is True, so every allowed logit becomes NaN and every row with an allowed key comes out NaN; "
                  "only calls without a mask are right.",
                  "Do not build the bias by multiplying infinities: scores.masked_fill(~mask, float('-inf')), or "
                  "torch.where(mask, scores, float('-inf')) (or a bias of torch.where(mask, 0.0, -inf) added to the "
                  "scores)."),
        Diagnosis("masked_row_nan", "Fully masked row gives NaN",
                  "A row whose keys are all blocked is all -inf, and softmax of it is 0/0 = NaN.",
                  "Fill with a finite minimum, or zero the rows that have no allowed key after the softmax."),
        Diagnosis("fp16_fill_overflow", "Mask fill value overflows fp16",
                  "A fill like -1e9 or torch.finfo(torch.float32).min does not fit in fp16: PyTorch refuses it, or it "
                  "becomes -inf and a fully masked row turns NaN.",
                  "Use torch.finfo(scores.dtype).min (or compute the scores in fp32 and cast back)."),
        Diagnosis("no_max_subtraction", "Softmax without subtracting the row max",
                  "exp() of a large logit overflows (exp(89) in fp32, exp(12) in fp16), giving inf/inf = NaN; a "
                  "guard after it (nan_to_num, a clamp) only turns that NaN into wrong weights.",
                  "Subtract scores.amax(-1, keepdim=True) before exp, or use torch.softmax."),
        # A head-layout mistake of the module exercises (mha, gqa, kv_cache), kept here so all three share it.
        Diagnosis("heads_strided_split", "Heads split on the wrong axis (strided)",
                  "Head h must read the contiguous feature slice [h*d_head, (h+1)*d_head) of each projection; viewing "
                  "(B, T, d_model) as (B, T, d_head, n_heads) makes head h read every n_heads-th feature (h, "
                  "h+n_heads, ...). Merging back the same way does not undo it: o_proj's columns are laid out by "
                  "contiguous head slices.",
                  "Split with t.view(B, T, n_heads, d_head).transpose(1, 2) (heads before d_head) and merge with "
                  "out.transpose(1, 2).reshape(B, T, n_heads * d_head)."),
        Diagnosis("mask_shape_assumed", "Mask assumed to have one particular shape",
                  "A mask may be any bool tensor that broadcasts to the scores (..., T_q, T_k): a 1-D (T_k,) key mask, "
                  "(T_q, T_k) with 3-D inputs, (T_q, 1), (B, 1, 1, T_k), one mask per head. Your code works on the "
                  "other tests but raises or returns the wrong shape on this legal one, so it indexes, reshapes or "
                  "unsqueezes the mask as if it had a query axis or a fixed number of dims.",
                  "Let broadcasting do it: scores.masked_fill(~mask, ...) accepts every legal shape. If you need "
                  "explicit dims (a loop over heads or query rows), take torch.broadcast_to(mask, scores.shape) first "
                  "and slice that."),
        Diagnosis("softmax_discarded", "Softmax computed, then not used",
                  "The attention weights are softmax(scores). Your output is the raw scores times v: the weights are "
                  "neither positive nor summing to 1, so the softmax's result was computed and then dropped (a "
                  "variable reassigned or shadowed, or the scores' name used in the last matmul).",
                  "Multiply v by the probabilities: p = torch.softmax(scores, dim=-1); return p @ v (check which "
                  "variable reaches the last matmul)."),
        Diagnosis("mask_ignored", "Mask accepted but never applied",
                  "Your output equals attention with no mask at all: the mask argument is taken and has no effect. "
                  "Usually masked_fill (which returns a new tensor) whose result is dropped, or a mask applied to a "
                  "copy of the scores that the softmax never sees.",
                  "Keep the result: scores = scores.masked_fill(~mask, float('-inf')) (or the in-place masked_fill_), "
                  "then take the softmax of that same `scores`."),
        Diagnosis("mask_none_unhandled", "mask=None not handled",
                  "The mask is optional: None means every key may be attended. Your code uses it without checking for "
                  "None (~mask, mask == 0 handed to masked_fill, mask.dim()), so every call without a mask raises "
                  "while every masked test runs.",
                  "Guard the masking step: if mask is not None: scores = scores.masked_fill(~mask, float('-inf'))."),
    ]
}


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    *,
    scale: float | None = None,
    dim: int = -1,
    fill: str = "neg_inf",
    invert: bool = False,
    naive_exp: bool = False,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Attention with one knob per known mistake; computes in `dtype`, returns it.

    fill: "neg_inf" (masked logits -inf before softmax, NaN for blocked rows),
    "zero" (masked logits 0), "after" (probabilities zeroed after softmax),
    "inf_times" (a bias -inf * (~mask) added: NaN on every allowed logit).
    """
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    s = (q @ k.transpose(-2, -1)) * scale
    allowed = None if mask is None else (~mask if invert else mask)
    if allowed is not None and fill == "neg_inf":
        s = s.masked_fill(~allowed, float("-inf"))
    elif allowed is not None and fill == "zero":
        s = s.masked_fill(~allowed, 0.0)
    elif allowed is not None and fill == "inf_times":
        s = s + float("-inf") * (~allowed).to(s.dtype)  # -inf * 0 = NaN on every allowed logit
    if naive_exp:
        e = torch.exp(s)
        p = e / e.sum(dim=dim, keepdim=True)
    else:
        p = torch.softmax(s, dim=dim)
    if allowed is not None and fill == "after":
        p = p * allowed
    return p @ v


def split_heads(t: Tensor, heads: int, strided: bool = False) -> Tensor:
    """(B, T, heads * d) -> (B, heads, T, d); strided: head h gets features h, h + heads, ... (the mistake)."""
    b, n, f = t.shape
    if strided:
        return t.view(b, n, f // heads, heads).permute(0, 3, 1, 2)
    return t.view(b, n, heads, f // heads).transpose(1, 2)


def merge_heads(o: Tensor, strided: bool = False) -> Tensor:
    """(B, heads, T, d) -> (B, T, heads * d), the inverse of `split_heads` with the same `strided`."""
    b, h, n, d = o.shape
    if strided:
        return o.permute(0, 2, 3, 1).reshape(b, n, h * d)
    return o.transpose(1, 2).reshape(b, n, h * d)


def rows_unknown(mask: Tensor | None, out: Tensor) -> Tensor:
    """Rows a variant leaves fully blocked: their value depends on the learner's fill."""
    if mask is None:
        return torch.zeros(out.shape, dtype=torch.bool)
    rows = ~mask.any(dim=-1, keepdim=True)  # (..., T_q, 1)
    return torch.broadcast_to(rows, (*out.shape[:-1], 1)).expand(out.shape).clone()


# A variant: (diagnosis id, label, fn(q, k, v, mask, dtype) -> output | (output, unknown) | None).
def _guard(o: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    return o, rows_unknown(mask, o)


def _scale(factor):
    def fn(q, k, v, mask, dtype):
        s = factor(q.shape[-1], v.shape[-1])
        if s is None:
            return None
        return _guard(attend(q, k, v, mask, scale=s), mask)

    return fn


def _scale_after(q, k, v, mask, dtype):
    """softmax(unscaled logits) / sqrt(d_k) @ v: the same as dividing the output, as p @ v is linear in p."""
    return _guard(attend(q, k, v, mask, scale=1.0) / math.sqrt(q.shape[-1]), mask)


def _axis(dim):
    """Softmax over another axis; dim="implicit" is F.softmax without dim (PyTorch's legacy rule)."""

    def fn(q, k, v, mask, dtype):
        nd = q.dim()
        axis = (0 if nd in (0, 1, 3) else 1) if dim == "implicit" else dim
        if axis % nd == nd - 1 or (axis < 0 and -axis > nd) or axis >= nd:
            return None
        o = attend(q, k, v, mask, dim=axis)
        return o, torch.isnan(o)  # NaN only from groups the mask blocks entirely

    return fn


def _masked(fill: str, invert: bool = False, guard: bool = False, only_fp16: bool = False):
    def fn(q, k, v, mask, dtype):
        if mask is None or (only_fp16 and dtype != torch.float16):
            return None
        o = attend(q, k, v, mask, fill=fill, invert=invert)
        return _guard(o, ~mask if invert else mask) if guard else o

    return fn


# exp() overflows above these logits: fp16 (exp(11.09) > 65504), fp32/bf16, fp64.
_EXP_OVERFLOW = {torch.float16: 11.0, "single": 88.0, torch.float64: 709.0}


def _naive(q, k, v, mask, dtype):
    """exp() without the row max, computed in float64 (NaN where even fp64 overflows).

    Rows whose largest logit overflows the learner's compute dtype but not
    float64 are left unknown: code computing in fp32 gives NaN there, code
    computing in fp64 (or fp16: more NaN rows) gets them right or wrong by its
    own dtype, which the variant cannot know. Rows whose exp() all underflow in
    fp32 (0/0) are unknown too.
    """
    q64, k64, v64 = q.double(), k.double(), v.double()
    out = attend(q64, k64, v64, mask, naive_exp=True, dtype=torch.float64)
    unknown = rows_unknown(mask, out)
    rows = torch.broadcast_to(_overflow_rows(q, k, mask, dtype, fp64_too=False), (*out.shape[:-1], 1)).expand(out.shape)
    return out, unknown | rows


def _overflow_rows(q: Tensor, k: Tensor, mask: Tensor | None, dtype: torch.dtype, *, fp64_too: bool = True) -> Tensor:
    """(..., T_q, 1): the query rows where an unshifted exp() overflows the learner's dtype, or underflows to 0/0.

    `fp64_too=False` leaves out the rows that overflow even in float64 (there every
    unshifted exp gives NaN, which `_naive` predicts).
    """
    q64, k64 = q.double(), k.double()
    s = (q64 @ k64.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    row_max = s.amax(dim=-1, keepdim=True)
    low = _EXP_OVERFLOW[torch.float16] if dtype == torch.float16 else _EXP_OVERFLOW["single"]
    over = row_max > low
    if not fp64_too:
        over &= row_max <= _EXP_OVERFLOW[torch.float64]
    dead = torch.exp(s.float()).sum(dim=-1, keepdim=True) == 0  # 0/0 = NaN, or 0 if the learner guards it
    return over | dead


def guarded_overflow(case_args: tuple, expected: Tensor, got: Tensor) -> Any:
    """exp() without the row max, its overflow then patched (nan_to_num, a clamp of the logits or of exp).

    The natural guard of code that saw NaN: `torch.nan_to_num(torch.exp(s))`,
    `exp(s.clamp(max=80))`, `p.nan_to_num(0.0)`. What each makes of an overflowing
    row differs (zeros, a one-hot, the mean of the largest keys), so those rows
    take the learner's own values and the rest must equal the reference: the
    signature is "wrong exactly on the rows where an unshifted exp() overflows
    (or underflows to 0/0)". None where no row of the case overflows.
    """
    q, k, v, mask, dtype = case_args
    rows = _overflow_rows(q, k, mask, dtype)
    if not bool(rows.any()):
        return None
    rows = torch.broadcast_to(rows, (*expected.shape[:-1], 1)).expand(expected.shape)
    out = torch.where(rows, got.detach().double(), expected.double())
    return out, rows_unknown(mask, out)


def shape_scales(*sizes: int) -> list[float]:
    """Candidate wrong scale factors built from the sizes in play: 1/sqrt(n), 1/n, sqrt(n), n (n > 1)."""
    out: list[float] = []
    for n in sorted({int(n) for n in sizes if int(n) > 1}):
        out += [1.0 / math.sqrt(n), 1.0 / n, math.sqrt(n), float(n)]
    return out


# How a size n becomes a scale factor in the usual slips: n**-0.5, 1/n, sqrt(n), n.
POWERS: tuple[tuple[str, Callable[[int], float]], ...] = (
    ("1/sqrt({})", lambda n: n**-0.5),
    ("1/{}", lambda n: 1.0 / n),
    ("sqrt({})", lambda n: math.sqrt(n)),
    ("{}", lambda n: float(n)),
)


def named_scales(
    sizes: dict[str, Callable[[Case], int | None]],
    variant: Callable[[Case, float], Any],
    skip: set[str] = frozenset(),
) -> list[Bug]:
    """`wrong_scale` Bugs, one per factor made of one *named* size (1/sqrt(T_q), 1/n_heads, sqrt(d_model), ...).

    Unlike the per-case fit (`fit=True`), one such Bug uses the same
    expression on every case, so it is scored like any fixed variant and the
    verdict names the factor. That also covers the cases where the size is 1:
    there the learner's factor is 1 and the output equals `missing_scale`'s,
    which the per-case fit (built from sizes > 1) cannot reproduce, so a single
    mistake used to be reported as two. `sizes` maps a name to the size on a
    case (None: not defined there, the variant is skipped); `skip` holds labels
    (e.g. "1/sqrt(d_k)", the correct factor) that must not be generated.
    """
    bugs = []
    for name, size in sizes.items():
        for form, power in POWERS:
            label = form.format(name)
            if label in skip:
                continue

            def fn(case: Case, size=size, power=power) -> Any:
                n = size(case)
                return None if n is None else variant(case, power(int(n)))

            bugs.append(Bug(D["wrong_scale"], fn, f"scaled by {label}"))
    return bugs


def closest(got: Tensor, outputs: list[Any]) -> Any:
    """The candidate output (tensor or (tensor, unknown)) nearest to `got` in max |diff|."""
    g = got.detach().double()
    best, best_err = None, float("inf")
    for produced in outputs:
        out, unknown = produced if isinstance(produced, tuple) else (produced, None)
        if out.shape != g.shape:
            continue
        diff = (out.double() - g).abs()
        keep = torch.isfinite(diff) if unknown is None else torch.isfinite(diff) & ~unknown
        err = float(diff[keep].max()) if bool(keep.any()) else 0.0
        if err < best_err:
            best, best_err = produced, err
    return best


def _fitted_scale(case_args, got):
    q, k, v, mask, dtype = case_args
    correct = 1.0 / math.sqrt(q.shape[-1])
    scales = [correct] + [c for c in shape_scales(*q.shape, *k.shape, *v.shape) if c != 1.0]
    return closest(got, [_guard(attend(q, k, v, mask, scale=c), mask) for c in scales])


def _softmax_discarded(scaled: bool):
    """The scaled (or raw) scores used as weights: the output is scores @ v, no softmax.

    With a mask, a blocked key's logit holds whatever the code filled in
    (-inf gives inf/NaN, -1e9 a huge value, or the raw score if the fill went
    to a copy), so rows with any blocked key are left unknown.
    """

    def fn(q, k, v, mask, dtype):
        s = q @ k.transpose(-2, -1)
        if scaled:
            s = s / math.sqrt(q.shape[-1])
        o = s @ v
        if mask is None:
            return o
        blocked = ~mask.all(dim=-1, keepdim=True)
        return o, torch.broadcast_to(blocked, (*o.shape[:-1], 1)).expand(o.shape).clone()

    return fn


def _mask_ignored(q, k, v, mask, dtype):
    """Attention as if no mask were given (None when there is none: the mistake cannot show)."""
    return None if mask is None else attend(q, k, v, None)


ATTENTION_VARIANTS = [
    ("missing_scale", "no scaling", _scale(lambda dk, dv: 1.0)),
    ("scale_after_softmax", "probabilities divided by sqrt(d_k) after an unscaled softmax", _scale_after),
    ("wrong_scale", "divided by d_k", _scale(lambda dk, dv: 1.0 / dk)),
    ("wrong_scale", "multiplied by sqrt(d_k)", _scale(lambda dk, dv: math.sqrt(dk))),
    ("wrong_scale", "scaled by 1/sqrt(d_v)", _scale(lambda dk, dv: None if dk == dv else 1.0 / math.sqrt(dv))),
    ("softmax_wrong_axis", "softmax over dim=-2", _axis(-2)),
    ("softmax_wrong_axis", "softmax over dim=0", _axis(0)),
    ("softmax_wrong_axis", "softmax over dim=1", _axis(1)),
    ("softmax_wrong_axis", "F.softmax without dim (implicit: dim 0 for 3-D, 1 otherwise)", _axis("implicit")),
    ("mask_fill_zero", "masked logits = 0", _masked("zero")),
    ("mask_after_softmax", "probabilities zeroed after softmax", _masked("after")),
    ("mask_inverted", "True treated as blocked", _masked("neg_inf", invert=True, guard=True)),
    ("masked_row_nan", "-inf fill, NaN rows kept", _masked("neg_inf")),
    # Rows with no allowed key are left unknown: -inf everywhere, so NaN or whatever the learner's guard makes of it.
    ("mask_inf_times_zero", "bias -inf * (~mask) added to the logits", _masked("inf_times", guard=True)),
    ("fp16_fill_overflow", "fill became -inf in fp16", _masked("neg_inf", only_fp16=True)),
    ("no_max_subtraction", "exp without max subtraction", _naive),
    # Issue 18: mistakes seen in real code, drawn after the planted ones (ties keep the older names).
    ("softmax_discarded", "scaled scores @ v, the softmax's result unused", _softmax_discarded(True)),
    ("softmax_discarded", "unscaled scores @ v, the softmax's result unused", _softmax_discarded(False)),
    ("mask_ignored", "the mask has no effect", _mask_ignored),
]


# Mistakes written as `attend` keyword knobs, in the order they are named when two are present (issue 31):
# the scale and the softmax axis change every test, the mask mistakes only the masked ones, so a composed
# variant names the wider one first and the other as its `also`.
ATTENTION_KNOBS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("missing_scale", "no scaling", {"scale": 1.0}),
    ("wrong_scale", "divided by d_k", {"scale": lambda d_k: 1.0 / d_k}),
    ("softmax_wrong_axis", "softmax over dim=-2", {"dim": -2}),
    ("mask_fill_zero", "masked logits = 0", {"fill": "zero"}),
    ("mask_after_softmax", "probabilities zeroed after softmax", {"fill": "after"}),
    ("mask_inverted", "True treated as blocked", {"invert": True}),
    # The -inf fill is the learner's here, so the rows it leaves fully blocked are known: NaN.
    ("masked_row_nan", "-inf fill, NaN rows kept", {"fill": "nan_rows"}),
)


def knobbed(knobs: dict[str, Any]):
    """`attend` with two mistakes' knobs at once. Rows it leaves fully blocked, and NaNs the axis mistake makes
    out of blocked columns, depend on the learner's fill: unknown, unless one knob is that fill (`nan_rows`).
    Unmasked cases show the first mistake alone. A callable scale is a function of d_k."""

    def fn(q, k, v, mask, dtype):
        scale = knobs.get("scale")
        given = {**knobs, "scale": scale(q.shape[-1]) if callable(scale) else scale}
        if knobs.get("fill") == "nan_rows":
            return attend(q, k, v, mask, **{**given, "fill": "neg_inf"})
        o = attend(q, k, v, mask, **given)
        if mask is None:
            return o
        allowed = ~mask if knobs.get("invert") else mask
        return o, rows_unknown(allowed, o) | torch.isnan(o)

    return fn
