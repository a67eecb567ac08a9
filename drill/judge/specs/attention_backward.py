"""Hidden tests for `attention_backward`: attention_backward(q, k, v, grad_out, mask=None) -> (dq, dk, dv).

Expected values are autograd's, in the parent, through the masked forward of
the `attention` exercise's reference (drill.reference.sdpa, math path, fp32):
a query row with no allowed key gets P = 0 there, so zero gradients
(EXERCISES.md, "Choices made"). `drill.reference.attention_backward` is the
closed form the reference tests hold against it. Cases: no mask, a causal
(T, T) mask broadcast over batch and heads, a (B, 1, 1, T_k) padding mask, a
(T_k,) key mask, a per-head mask with a fully blocked row, bottom-right causal
with T_q > T_k (rows that see no key), 3-D and 5-D inputs, T_q != T_k and
d_k != d_v, logits ~1e3, fp16 (one case whose dP = grad_out v^T overflows
fp16), bf16, a repeat call. Square cases (T_q = T_k) come often, so a
forgotten transpose shows as values, not only as a shape error.
Each input is three cases, one per returned element (`Case.extra["tuple"]`).
Autograd in any form is trapped in the child (spec.FORBIDDEN_AUTOGRAD).
"""

from __future__ import annotations

import math

import torch

from drill.judge.spec import (
    FORBIDDEN_ATTENTION,
    FORBIDDEN_ATTENTION_CLASSES,
    FORBIDDEN_AUTOGRAD,
    Bug,
    Case,
    Diagnosis,
    Spec,
)
from drill.judge.specs._backward import elements
from drill.judge.specs._common import (
    TOLERANCES,
    Draw,
    call_case,
    causal_mask,
    diagnoses,
    repeat_after,
    twice_probes,
)

TARGET = "attention_backward"
OUTPUTS = (("dq", "q"), ("dk", "k"), ("dv", "v"))  # each element, and the argument whose dtype it keeps
# The softmax's own backward kernel (F.softmax's autograd formula) is the answer's core.
FORBIDDEN = (*FORBIDDEN_AUTOGRAD, *FORBIDDEN_ATTENTION, "_softmax_backward_data")

AD = diagnoses(
    Diagnosis("attnb_diag_jacobian", "Softmax Jacobian taken as diagonal (dS = P * dP)",
              "Every probability of a row depends on every score of the row (they share the normaliser), so the "
              "softmax's Jacobian is diag(P) - P P^T, not diag(P). Its product with dP is "
              "dS = P * (dP - rowsum(dP * P)); dropping the rowsum term leaves rows whose gradient no longer sums "
              "to zero.",
              "ds = p * (dp - (dp * p).sum(-1, keepdim=True))."),
    Diagnosis("attnb_no_scale", "1/sqrt(d_k) missing from dq and dk",
              "S = q k^T * s with s = 1/sqrt(d_k), so the chain rule carries s into both products that leave S: "
              "dq = s dS k and dk = s dS^T q. Without it both are sqrt(d_k) times too large (dv does not see s).",
              "Multiply dS @ k and dS^T @ q by s = 1 / math.sqrt(q.shape[-1])."),
    Diagnosis("attnb_scale_twice", "1/sqrt(d_k) applied twice in dq and dk",
              "s enters once: in dq = s dS k and dk = s dS^T q. Scaling q (or the scores) by s again, or multiplying "
              "the result by s once more, gives s**2 = 1/d_k there.",
              "Scale once: compute S = (q @ k^T) * s, and dq = (dS @ k) * s, dk = (dS^T @ q) * s."),
    Diagnosis("attnb_dk_untransposed", "dk computed as s dS q (dS not transposed)",
              "dS has one row per query and one column per key, so the gradient of the keys sums over queries: "
              "dk = s dS^T q, (T_k, T_q) @ (T_q, d_k). dS @ q only has the right shape when T_q = T_k, and even then "
              "it mixes the wrong positions.",
              "dk = (ds.transpose(-2, -1) @ q) * s."),
    Diagnosis("attnb_dv_untransposed", "dv computed without transposing P",
              "out = P v, so dv = P^T grad_out: each key's value gets the gradient of every query that read it, "
              "weighted by how much it read. P @ grad_out (or grad_out^T @ P) has the right shape only by accident "
              "(T_q = T_k) and sums over the wrong index.",
              "dv = p.transpose(-2, -1) @ grad_out."),
    Diagnosis("attnb_rowsum_axis", "The softmax correction summed over queries, not keys",
              "The softmax normalises each query's row over the keys, so its correction term is a sum over the "
              "keys: rowsum(dP * P) has shape (..., T_q, 1). Summing over dim -2 (the queries) broadcasts a "
              "(..., 1, T_k) term into every row instead.",
              "(dp * p).sum(dim=-1, keepdim=True)."),
    Diagnosis("attnb_mask_not_reapplied", "Mask not applied when P is recomputed",
              "The backward needs the forward's probabilities, and the forward's scores were masked: P must be "
              "recomputed from the masked scores (P = 0 on blocked keys). Recomputed without the mask, P spreads "
              "weight over blocked keys, so dv gets gradient on keys no query read and dq, dk are wrong.",
              "Apply the same mask before the softmax in the backward: scores.masked_fill(~mask, float('-inf'))."),
    Diagnosis("attnb_empty_row_nan", "NaN from a query with no allowed key",
              "A row whose keys are all blocked is -inf everywhere, and its softmax is 0/0 = NaN; the NaN then "
              "flows through dS into dq and, through the sums over queries, into every dk and dv of that head. "
              "The contract fixes P = 0 for such a row: its dq is 0 and it adds nothing to dk and dv.",
              "Zero the rows with no allowed key: p = torch.where(mask.any(-1, keepdim=True), p, 0), or divide by "
              "the row sum only where it is > 0 (and use a safe row max)."),
    Diagnosis("attnb_empty_row_uniform", "A query with no allowed key attends everywhere",
              "A finite fill (-1e9, finfo.min) makes a fully blocked row uniform instead of empty: it then adds to "
              "dv and dk of every key and gets a dq of its own. The contract fixes P = 0 for such a row (as "
              "PyTorch's SDPA does), so all of its gradients are 0.",
              "After the softmax, zero the rows with no allowed key: p = p * mask.any(-1, keepdim=True)."),
    Diagnosis("attnb_dq_uses_v", "dq computed from v instead of k",
              "S = q k^T s, so dS/dq is k: dq = s dS k. dS @ v multiplies by the values, which only has the right "
              "shape when d_v = d_k.",
              "dq = (ds @ k) * s."),
    Diagnosis("attnb_no_upcast", "Computed in the input's half precision",
              "dP = grad_out v^T sums d_v products; in fp16 it overflows (above 65504) for inputs a few dozen in "
              "size, and dP - rowsum(dP * P) then gives inf - inf = NaN, although every gradient itself fits "
              "fp16. Products and sums need fp32.",
              "q, k, v, grad_out = (t.float() for t in (q, k, v, grad_out)); compute; cast each result back to its "
              "input's dtype."),
)


def backward(q, k, v, g, mask, *, jacobian: str = "right", grad_scale: int = 1, score_scale: int = 1,
             dk_form: str = "right", dv_form: str = "right", dq_from: str = "k", use_mask: bool = True,
             empty: str = "zero", upcast: bool = True) -> tuple:
    """(dq, dk, dv) of masked softmax attention with one knob per mistake; None for an element a knob cannot form.

    `grad_scale` / `score_scale`: the power of s = 1/sqrt(d_k) on dq, dk and on the scores; `empty`: what a row
    with no allowed key gets ("zero" as the contract, "nan" a plain softmax, "uniform" a finite fill)."""
    dt = torch.float32 if upcast else q.dtype
    qf, kf, vf, gf = (t.to(dt) for t in (q, k, v, g))
    s = 1.0 / math.sqrt(q.shape[-1])
    scores = (qf @ kf.transpose(-2, -1)) * s**score_scale
    if mask is not None and use_mask:
        fill = torch.finfo(dt).min if empty == "uniform" else float("-inf")
        scores = scores.masked_fill(~mask, fill)
    if empty == "nan":
        p = torch.softmax(scores, dim=-1)
    else:
        top = scores.amax(dim=-1, keepdim=True)
        e = torch.exp(scores - torch.where(torch.isfinite(top), top, torch.zeros_like(top)))
        total = e.sum(dim=-1, keepdim=True)
        p = e / torch.where(total > 0, total, torch.ones_like(total))
    dp = gf @ vf.transpose(-2, -1)
    if jacobian == "diag":
        ds = p * dp
    else:
        ds = p * (dp - (dp * p).sum(dim=-2 if jacobian == "queries" else -1, keepdim=True))
    square = q.shape[-2] == k.shape[-2]
    dq = (ds @ (vf if dq_from == "v" else kf)) * s**grad_scale
    dk = (ds.transpose(-2, -1) @ qf) * s**grad_scale if dk_form == "right" else \
        ((ds @ qf) * s**grad_scale if square else None)
    dv = {"right": lambda: p.transpose(-2, -1) @ gf, "p_g": lambda: p @ gf if square else None,
          "g_t_p": lambda: gf.transpose(-2, -1) @ p}[dv_form]()
    return tuple(None if t is None else t.float() for t in (dq, dk, dv))


def _case(d: Draw, name: str, lead: tuple[int, ...], t_q: int, t_k: int, d_k: int, d_v: int, mask=None, *,
          dtype: str = "float32", scale: float = 1.0, big: float = 1.0, tol: str | None = None) -> Case:
    """The dq case of one input (see `_triple`, which adds its dk and dv twins)."""
    q = d.normal(*lead, t_q, d_k, dtype=dtype, scale=scale)
    k = d.normal(*lead, t_k, d_k, dtype=dtype, scale=scale)
    v = d.normal(*lead, t_k, d_v, dtype=dtype, scale=big)
    g = d.normal(*lead, t_q, d_v, dtype=dtype, scale=big)
    args = {"q": q, "k": k, "v": v, "grad_out": g, **({} if mask is None else {"mask": mask})}
    return call_case(d, name, TARGET, args, dtype=dtype, out_dtype=q.dtype, ctx={**({"tol": tol} if tol else {})})


def _triple(case: Case) -> list[Case]:
    """`case` grading dq, and its twins grading dk and dv, on the very same inputs."""
    return elements(case, OUTPUTS)


def _blocked_row(d: Draw, shape: tuple[int, ...], t_q: int, t_k: int) -> torch.Tensor:
    """A random mask (True = may attend) in which one query row of every slice has no allowed key."""
    m = d.bools(*shape, t_q, t_k, p=0.6)
    m[..., :, d.int(0, t_k - 1)] = True
    m[..., d.int(0, t_q - 1), :] = False
    return m


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    B, H = d.int(1, 3), d.int(1, 3)
    inputs = []
    T, dh = d.int(4, 10), d.choice([8, 16])
    inputs.append(_case(d, f"fp32 (B,H,T,d)=({B},{H},{T},{dh}), no mask", (B, H), T, T, dh, dh))
    tq, tk, dk, dv = d.int(2, 6), d.int(7, 12), d.choice([8, 16]), d.choice([4, 12])
    inputs.append(_case(d, f"fp32 5-D inputs, T_q={tq} != T_k={tk}, d_k={dk} != d_v={dv}, no mask",
                        (2, d.int(1, 2), 2), tq, tk, dk, dv))
    T = d.int(5, 11)
    inputs.append(_case(d, f"fp32 3-D inputs (B,T,d), causal mask (T,T) for every batch, T={T}", (2,), T, T, 8, 8,
                        causal_mask(T)))
    tq, tk = d.int(3, 7), d.int(8, 12)
    pad = torch.ones(2, 1, 1, tk, dtype=torch.bool)
    for b in range(2):
        pad[b, ..., tk - d.int(1, tk // 2):] = False
    inputs.append(_case(d, f"fp32 padding mask (B,1,1,T_k), T_q={tq} != T_k={tk}, d_k=16 != d_v=8", (2, 2), tq, tk,
                        16, 8, pad))
    T = d.int(5, 9)
    inputs.append(_case(d, f"fp32 per-head mask (B,H,T,T) with a fully masked row, T={T}", (2, 2), T, T, 8, 8,
                        _blocked_row(d, (2, 2), T, T)))
    tk = d.int(3, 6)
    tq = tk + d.int(2, 4)
    inputs.append(_case(d, f"fp32 causal T_q={tq} > T_k={tk}, bottom-right (first rows see no key), d_v=12",
                        (1, 2), tq, tk, 8, 12, causal_mask(tq, tk)))
    tq, tk = d.int(3, 6), d.int(7, 10)
    keys = torch.ones(tk, dtype=torch.bool)
    keys[tk - d.int(1, tk // 2):] = False
    inputs.append(_case(d, f"fp32 1-D key mask (T_k,), T_q={tq}, T_k={tk}", (2, 2), tq, tk, 8, 8, keys))
    T = d.int(6, 10)
    inputs.append(_case(d, f"fp32 large logits (|q.k|/sqrt(d) ~ 1e2), T={T}", (1, 2), T, T, 16, 16, scale=10.0,
                        tol="float32_large_logits"))
    T = d.int(5, 10)
    inputs.append(_case(d, f"fp16 (B,H,T,d), T={T}, no mask", (B, H), T, T, 16, 16, dtype="float16"))
    tk = d.int(3, 6)
    tq = tk + d.int(2, 4)
    inputs.append(_case(d, f"fp16 causal T_q={tq} > T_k={tk} (rows with no visible key)", (2, 1), tq, tk, 16, 16,
                        causal_mask(tq, tk), dtype="float16"))
    T = d.int(5, 9)
    inputs.append(_case(d, f"fp16 v and grad_out ~100 (dP = grad_out v^T overflows fp16), T={T}", (1, 2), T, T, 16,
                        32, dtype="float16", big=100.0))
    tq, tk = d.int(3, 8), d.int(4, 9)
    inputs.append(_case(d, f"bf16 random mask with a fully masked row, T_q={tq}, T_k={tk}, d_v=8", (2, 1), tq, tk, 16,
                        8, _blocked_row(d, (2, 1), tq, tk), dtype="bfloat16"))
    T = d.int(5, 10)
    inputs.append(_case(d, f"bf16 (B,H,T,d), T={T}, no mask", (B, H), T, T, 16, 16, dtype="bfloat16"))
    tq, tk = d.int(3, 6), d.int(5, 9)
    pad = torch.ones(2, 1, 1, tk, dtype=torch.bool)
    pad[1, ..., tk - d.int(1, tk // 2):] = False
    probe = _case(d, f"repeat call: two calls, q (2,2,{tq},8), {tk} keys, padding mask", (2, 2), tq, tk, 8, 8, pad)
    cases = [twin for case in inputs for twin in _triple(case)]
    cases += _triple(repeat_after(d, probe, {"mask": pad}))[:1]  # one probe (on dq), as every exercise has
    return twice_probes(cases)


def reference(case: Case):
    from drill.reference.attention import sdpa

    a = case.args
    leaves = [a[like].detach().float().requires_grad_(True) for _, like in OUTPUTS]
    out = sdpa(*leaves, a.get("mask"), impl="math")
    (out * a["grad_out"].float()).sum().backward()
    return leaves[case.ctx["pick"]].grad.detach(), {}


def _run(case: Case, **knobs):
    """The variant's element, rounded to its output dtype as the learner's cast does (a half overflow shows)."""
    a = case.args
    out = backward(a["q"], a["k"], a["v"], a["grad_out"], a.get("mask"), **knobs)[case.ctx["pick"]]
    return None if out is None else out.to(case.out_dtype).float()


def _variant(**knobs):
    return lambda case: _run(case, **knobs)


def _masked(**knobs):
    """A variant that can differ only where some query row has no allowed key (or, `any_mask`, with a mask)."""
    any_mask = knobs.pop("any_mask", False)

    def run(case: Case):
        mask = case.args.get("mask")
        if mask is None or (not any_mask and bool(mask.any(dim=-1).all())):
            return None
        return _run(case, **knobs)

    return run


def _half_math(case: Case, got):
    """All of it in the input's dtype: fp16 is predicted, except that where fp16 overflows (its NaN/inf spread
    depends on the order of operations) the learner's own non-finite values are taken; bf16 only rounds, which
    no variant can predict, so its elements are all unknown."""
    dtype = case.args["q"].dtype
    if dtype == torch.float32:
        return None
    ours = _run(case, upcast=False)
    if ours is None:
        return None
    if dtype == torch.bfloat16:
        return ours, torch.ones_like(ours, dtype=torch.bool)
    if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(ours.shape):
        return ours
    theirs = got.detach().float()
    odd = ~torch.isfinite(ours) | ~torch.isfinite(theirs)
    return torch.where(odd, theirs, ours)


BUGS = (
    Bug(AD["attnb_diag_jacobian"], _variant(jacobian="diag"), "dS = P * dP"),
    Bug(AD["attnb_no_scale"], _variant(grad_scale=0), "dq = dS k, dk = dS^T q (no s)"),
    Bug(AD["attnb_no_scale"], _variant(grad_scale=0, score_scale=0), "no 1/sqrt(d_k) anywhere"),
    Bug(AD["attnb_scale_twice"], _variant(grad_scale=2), "dq, dk multiplied by s twice"),
    Bug(AD["attnb_scale_twice"], _variant(grad_scale=2, score_scale=2), "q pre-scaled and scaled again"),
    Bug(AD["attnb_dk_untransposed"], _variant(dk_form="ds_q"), "dk = s dS q"),
    Bug(AD["attnb_dv_untransposed"], _variant(dv_form="p_g"), "dv = P grad_out"),
    Bug(AD["attnb_dv_untransposed"], _variant(dv_form="g_t_p"), "dv = grad_out^T P (transposed result)"),
    Bug(AD["attnb_rowsum_axis"], _variant(jacobian="queries"), "rowsum(dP * P) over dim -2"),
    Bug(AD["attnb_mask_not_reapplied"], _masked(use_mask=False, any_mask=True), "P recomputed without the mask"),
    Bug(AD["attnb_empty_row_nan"], _masked(empty="nan"), "plain softmax of an all -inf row"),
    Bug(AD["attnb_empty_row_uniform"], _masked(empty="uniform"), "finite fill: a blocked row is uniform"),
    Bug(AD["attnb_dq_uses_v"], _variant(dq_from="v"), "dq = s dS v"),
    Bug(AD["attnb_no_upcast"], _half_math, "computed in the input dtype", fit=True),
)

SPEC = Spec(
    name="attention_backward",
    graded=(TARGET,),
    make_cases=make_cases,
    reference=reference,
    tolerances=TOLERANCES,
    bugs=BUGS,
    forbidden=FORBIDDEN,
    forbidden_classes=FORBIDDEN_ATTENTION_CLASSES,
)
