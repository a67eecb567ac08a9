"""Known sampling-filter mistakes, recomputed on a case's own inputs (parent side only).

One parameterised pipeline, `pipeline`, reproduces each mistake by a knob:
the order of the three filters (and which of them run at all), where the
temperature goes, whether top-k keeps the k-th token, whether top-p keeps
the token that crosses top_p and which mass it cuts at, what min-p compares
with, what top_k=0 means, the value removed logits get, how the result is
normalised and what removed tokens read in the output. With every knob at
its default it is the contract (in float64), which
`tests/test_judge_sampling.py` checks against the reference.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from drill.judge.spec import Diagnosis
from drill.judge.specs._attention_bugs import D as ATTENTION_DIAGNOSES
from drill.judge.specs._common import TOLERANCES, diagnoses

NEG_INF = -math.inf
STEPS = ("top_k", "top_p", "min_p")  # the contract's order, after the temperature

SD = diagnoses(
    Diagnosis("sampling_top_p_crossing_dropped", "top-p drops the token that crosses top_p",
              "top-p keeps the smallest set of most probable tokens whose mass REACHES top_p, so the token whose "
              "probability takes the running sum past top_p stays. Keeping only tokens with cumsum < top_p (or "
              "<= top_p) stops one token short, and with a very small top_p keeps nothing at all.",
              "Keep a token when the mass ranked strictly above it is below top_p: "
              "keep = (cumsum - sorted_probs) < top_p; or, as Hugging Face does, sort ascending and remove "
              "cumsum <= 1 - top_p. The most probable token always stays."),
    Diagnosis("sampling_top_k_off_by_one", "top-k keeps k - 1 tokens",
              "top-k keeps the k most probable tokens, the k-th included: removing every logit at or below the k-th "
              "largest (x <= kth) drops the k-th token too, so only k - 1 stay, and with top_k = 1 nothing stays at "
              "all: every logit is -inf and the softmax is NaN.",
              "Remove only what lies strictly below the k-th largest logit: kth = x.topk(k).values[..., -1:]; "
              "x = x.masked_fill(x < kth, float('-inf'))."),
    Diagnosis("sampling_filter_missing", "A filter is never applied",
              "The contract chains three filters (top-k, top-p, min-p), each one active whenever its argument is "
              "given. One of them never runs here: the tests that pass only that option get the plain tempered "
              "softmax back, and the combined ones keep the tokens the missing filter should have removed.",
              "Implement the missing step (the label says which) and apply it whenever its argument is set: "
              "top_k > 0, top_p < 1.0, min_p not None, in the order temperature, top-k, top-p, min-p."),
    Diagnosis("sampling_top_p_complement", "top-p cuts the nucleus at 1 - top_p",
              "top_p is the mass of the nucleus that is KEPT: the most probable tokens up to a running sum of "
              "top_p. Comparing the descending running sum with 1 - top_p keeps a nucleus of the wrong mass (tiny "
              "for top_p = 0.9, and top_p = 0.5 only looks right); mixing Hugging Face's ascending rule (remove "
              "cumsum <= 1 - top_p) with a descending sort removes the most probable tokens instead.",
              "Sorted descending: keep = (cumsum - sorted_probs) < top_p. Sorted ascending (Hugging Face): remove "
              "cumsum <= 1 - top_p. Use one rule with its own sort direction."),
    Diagnosis("sampling_filter_order", "Filters applied in the wrong order",
              "top-p reads the probabilities of what is still kept, so it must run after top-k and before "
              "min-p (Hugging Face's order: temperature, top-k, top-p, min-p). On the full distribution, or on "
              "one min-p already trimmed and renormalised, the cumulative mass crosses top_p at another token.",
              "Apply temperature, then top-k, then top-p on the softmax of the logits top-k kept (the removed ones "
              "at -inf), then min-p, then one final softmax."),
    Diagnosis("sampling_temperature_late", "Temperature applied after the filters",
              "Temperature must divide the logits first: top-p and min-p read probabilities, and the tempered "
              "distribution is a different one (T < 1 sharpens it, T > 1 flattens it). Filtering the untempered "
              "probabilities and dividing only for the final softmax keeps the wrong set of tokens.",
              "Start with x = logits.float() / temperature and run every filter on x."),
    Diagnosis("sampling_temperature_on_probs", "Temperature applied to probabilities",
              "Temperature divides the LOGITS before the softmax. Dividing the probabilities by T only rescales "
              "them: after renormalising the temperature has no effect at all, and a top-p on p / T compares "
              "mass that no longer sums to 1.",
              "Divide the logits: softmax(logits / temperature), never softmax(logits) / temperature."),
    Diagnosis("sampling_min_p_absolute", "min-p threshold not relative to the top probability",
              "min-p keeps the tokens whose probability is at least min_p TIMES the row's largest probability; "
              "comparing with min_p itself (p >= min_p) removes far more, and on a flat row everything but the "
              "first token.",
              "threshold = min_p * probs.amax(dim=-1, keepdim=True); keep probs >= threshold."),
    Diagnosis("sampling_min_p_mixed", "min-p compares two different distributions",
              "min-p's threshold and the probabilities it is compared with must come from the same distribution "
              "(the one left after top-p). Taking the threshold from the distribution before top-p and comparing "
              "it with renormalised probabilities (or the reverse) shifts the cut by the mass top-p removed.",
              "Compute probs = softmax of the logits left after top-p, then keep probs >= min_p * probs.max(); "
              "or compare logits: keep x >= x.max() + log(min_p)."),
    Diagnosis("sampling_top_k_edge", "top_k = 0 or top_k >= V mishandled",
              "The contract: top_k None or 0 turns top-k off, and top_k >= V keeps every token. torch.topk with "
              "k > V raises, and topk(x, 0) keeps nothing (its [..., -1] then raises, or every logit ends at -inf "
              "and the softmax is NaN).",
              "if top_k: k = min(top_k, logits.shape[-1]); kth = x.topk(k).values[..., -1:]; keep x >= kth. "
              "Skip the step when top_k is None or 0."),
    Diagnosis("sampling_no_renormalise", "Probabilities not renormalised",
              "Zeroing the removed tokens of a softmax leaves rows that sum to less than 1: a sampler then draws "
              "from the wrong distribution (torch.multinomial renormalises silently, torch's own checks do not).",
              "Set removed logits to -inf and take one softmax at the end (or divide the kept probabilities by "
              "their sum)."),
    Diagnosis("sampling_removed_not_zero", "Removed tokens do not get probability exactly 0",
              "A removed token must have probability exactly 0: a sampler must never draw it. -inf or NaN in "
              "the output is not a probability, a finite fill on the logits (0, or -1e4 when the logits are "
              "~ -2e4) leaves removed tokens a share of the mass, and flooring the probabilities (clamp_min(1e-10) "
              "to keep a later log finite) gives each one a tiny but real chance.",
              "Fill removed logits with float('-inf') before the final softmax (exp(-inf) is exactly 0), or zero "
              "the probabilities and renormalise; never fill the probabilities with -inf."),
    Diagnosis("sampling_output_not_fp32", "Probabilities not returned in fp32",
              "The contract returns fp32 probabilities whatever the logits' dtype (unlike most exercises, which "
              "return the input's dtype): cast to fp16/bf16, every probability is rounded (bf16 keeps ~3 "
              "digits), small ones vanish and the rows no longer sum to 1.",
              "Return the fp32 result of the final softmax as it is; do not cast it back to logits.dtype."),
    Diagnosis("sampling_no_fp32_upcast", "Computed in half precision",
              "With fp16/bf16 logits the temperature, softmax or cumulative sums were computed in the half dtype: "
              "bf16 keeps 3 significant digits, so probabilities (and top-p's running sum) are off by ~1%, and the "
              "contract returns fp32.",
              "Upcast first: x = logits.float() / temperature; do every step on x and return fp32."),
    ATTENTION_DIAGNOSES["no_max_subtraction"],
)


def _softmax(x: Tensor, keep: Tensor, fill: float) -> Tensor:
    return torch.softmax(torch.where(keep, x, torch.full_like(x, fill)), dim=-1)


def pipeline(
    logits: Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
    min_p: float | None = None, *, order: tuple[str, ...] = STEPS, temp: str = "logits", crossing: bool = True,
    k_strict: bool = False, p_cut: str = "top_p",
    guard: bool = True, min_p_ref: str = "same", k_zero: str = "off", fill: float = NEG_INF, renorm: str = "all",
    removed: float = 0.0, floor: float = 0.0, dtype: torch.dtype = torch.float64, with_keep: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """The filtered probabilities (fp32), with one knob per known mistake (the defaults are the contract).

    order: the filters run, in order (leaving one out: a filter never applied). k_strict: top-k keeps only
    logits strictly above the k-th (k - 1 tokens). p_cut: "top_p" (the contract), "one_minus" (the descending
    rule with 1 - top_p, skipped at top_p >= 1), "one_minus_always" (the same, applied at top_p = 1.0 too),
    "tail" (Hugging Face's ascending rule on a descending sort: the head of mass 1 - top_p removed, the last
    token kept).
    temp: "logits" (the contract), "late" (after the filters), "probs" (top-p on p / T; the final softmax
    untempered), "ignored". min_p_ref: "same", "one" (p >= min_p), "stale_threshold" (threshold from the
    distribution before top-p), "stale_probs" (probabilities from before top-p). k_zero: "off" or "none"
    (top_k = 0 keeps nothing). renorm: "all", "none" (the tempered full softmax, zeroed), "after_top_k"
    (the softmax after top-k, zeroed). removed: what removed tokens read in the output (0, -inf, NaN).
    floor: every probability clamped up to it and the row renormalised (removed tokens then ~floor).
    Half precision and a softmax without the max subtraction are families (`half_precision`,
    `exp_out_of_range`): their exact values depend on the code. with_keep: also return the kept tokens.
    """
    x = logits.to(dtype)
    if temp == "logits":
        x = x / temperature
    keep = torch.ones_like(x, dtype=torch.bool)
    after_k = before_p = keep
    for step in order:
        if step == "top_k":
            if top_k == 0 and k_zero == "none":
                keep = torch.zeros_like(keep)
            elif top_k:
                kth = x.masked_fill(~keep, NEG_INF).topk(min(top_k, x.shape[-1]), dim=-1).values[..., -1:]
                keep = keep & ((x > kth) if k_strict else (x >= kth))
            after_k = keep
        elif step == "top_p":
            before_p = keep
            if top_p is None or (top_p >= 1.0 and p_cut != "one_minus_always"):
                continue
            p = _softmax(x, keep, fill)
            if temp == "probs":
                p = p / temperature
            sorted_p, idx = p.sort(dim=-1, descending=True, stable=True)
            cum = sorted_p.cumsum(dim=-1)
            mass = top_p if p_cut == "top_p" else 1.0 - top_p
            if p_cut == "tail":
                nucleus = cum > mass
                nucleus[..., -1] = True
            else:
                nucleus = (cum - sorted_p < mass) if crossing else (cum < mass)
            if guard and p_cut != "tail":
                nucleus[..., 0] = True
            keep = keep & torch.zeros_like(keep).scatter(-1, idx, nucleus)
        elif step == "min_p" and min_p is not None:
            p = _softmax(x, keep, fill)
            if min_p_ref == "one":
                keep = keep & ((p >= min_p) | (p == p.amax(dim=-1, keepdim=True)) if guard else (p >= min_p))
            elif min_p_ref == "stale_threshold":
                keep = keep & (p >= min_p * _softmax(x, before_p, fill).amax(dim=-1, keepdim=True))
            elif min_p_ref == "stale_probs":
                keep = keep & (_softmax(x, before_p, fill) >= min_p * p.amax(dim=-1, keepdim=True))
            else:
                keep = keep & (p >= min_p * p.amax(dim=-1, keepdim=True))
    if temp == "late":
        x = x / temperature
    if renorm == "none":
        out = _softmax(x, torch.ones_like(keep), fill) * keep
    elif renorm == "after_top_k":
        out = _softmax(x, after_k, fill) * keep
    else:
        out = _softmax(x, keep, fill)
    if removed != 0.0:
        out = torch.where(keep, out, torch.full_like(out, removed))
    if floor:
        out = out.clamp_min(floor)
        out = out / out.sum(dim=-1, keepdim=True)
    return (out.to(torch.float32), keep) if with_keep else out.to(torch.float32)


def _args(case: Any) -> tuple:
    a = case.args
    return (a["logits"], a.get("temperature", 1.0), a.get("top_k"), a.get("top_p"), a.get("min_p"))


def variant(**knobs: Any):
    """A Bug fn: the pipeline with these knobs on the case's inputs."""
    return lambda case: pipeline(*_args(case), **knobs)


def tie_aware(**knobs: Any):
    """A Bug fn like `variant`, leaving unknown the rows where the variant keeps one token and removes another
    of exactly the same logit.

    The hidden rows are drawn clear of the contract's thresholds only, so a
    variant that walks another path (top-p on the full distribution when
    top-k never ran) can meet a tie at its own top-p crossing, frequent in
    fp16 logits; which of the tied tokens stays is then the sort's choice,
    and every probability of the row follows from it.
    """

    def run(case: Any) -> Any:
        out, keep = pipeline(*_args(case), **knobs, with_keep=True)
        logits, temperature = _args(case)[:2]
        x = logits.to(torch.float64) / temperature
        removed_max = x.masked_fill(keep, NEG_INF).amax(dim=-1)
        kept_min = x.masked_fill(~keep, math.inf).amin(dim=-1)
        tied = removed_max == kept_min
        if not bool(tied.any()):
            return out
        return out, tied[:, None].expand_as(out)

    return run


def _edge_zero(case: Any) -> Tensor | None:
    """top_k = 0 read as "keep none": every logit at -inf, a NaN row (only on top_k = 0 cases)."""
    if _args(case)[2] != 0:
        return None
    return torch.full_like(case.expected, math.nan)


def half_precision(returned_half: bool):
    """Family fn for a half-precision result: on a half-input case, the learner's own output if it is within
    that dtype's rounding of the reference (else the reference, which no failing output matches); the
    reference on fp32 cases. `returned_half`: the output itself is in the half dtype (cast back) rather than
    fp32 computed in half precision."""

    def fit(case: Any, got: Tensor) -> Tensor | None:
        if case.ctx["dtype"] not in ("float16", "bfloat16"):
            return None
        if (got.dtype != torch.float32) != returned_half:
            return case.expected
        return _within_half_rounding(case, got)

    return fit


def _within_half_rounding(case: Any, got: Tensor) -> Tensor:
    """The learner's output when it is the reference to the half dtype's rounding, or a softmax over a keep
    set that differs from the reference's only where a half-precision walk may decide the other way."""
    if got.shape != case.expected.shape or not torch.isfinite(got).all():
        return case.expected
    if _close_in_half(case, got, case.expected):
        return got.detach().float()
    kept = got > 0
    tight, loose = _half_decision_band(case)
    if bool((tight & ~kept).any() | (kept & ~loose).any()):
        return case.expected
    logits, temperature = _args(case)[:2]
    own = _softmax(logits.to(torch.float64) / temperature, kept, NEG_INF)
    return got.detach().float() if _close_in_half(case, got, own) else case.expected


def _close_in_half(case: Any, got: Tensor, want: Tensor) -> bool:
    tol = TOLERANCES[case.ctx["dtype"]]
    g, e = got.to(torch.float64), want.to(torch.float64)
    return bool(((g - e).abs() <= tol.atol * max(1.0, float(e.abs().max())) + tol.rtol * e.abs()).all())


def _half_decision_band(case: Any) -> tuple[Tensor, Tensor]:
    """(tokens every half-precision walk keeps, tokens some half-precision walk may keep). A half dtype
    rounds each probability by about eps and the top-p running sum by a few eps, and ties logits that fp64
    tells apart, so a token near a threshold may go either way: the band is the fp64 walk with top_p and
    min_p moved by a few eps each way, joined with the walk done wholly in the half dtype."""
    logits, temperature, top_k, top_p, min_p = _args(case)
    half = getattr(torch, case.ctx["dtype"])
    eps = torch.finfo(half).eps
    p_slack, m_slack = 8 * eps, 4 * eps

    def keep(dp: float, dm: float, dtype: torch.dtype = torch.float64) -> Tensor:
        tp = None if top_p is None else min(max(top_p + dp, 0.0), 1.0)
        mp = None if min_p is None else min_p * (1.0 + dm)
        return pipeline(logits, temperature, top_k, tp, mp, dtype=dtype) > 0

    in_half = keep(0.0, 0.0, half)
    return keep(-p_slack, m_slack) & in_half, keep(p_slack, -m_slack) | in_half


EXP_RANGE = (math.log(torch.finfo(torch.float32).tiny), math.log(torch.finfo(torch.float32).max))  # -87.3, 88.7


def exp_out_of_range(case: Any, got: Tensor) -> Tensor | None:
    """Family for a softmax without the max subtraction: NaN/inf confined to the rows whose tempered logits
    leave fp32 exp()'s range (exp(89) = inf, and a row whose largest logit is below -87 sums to 0 or a
    denormal), every other row right. Which elements of such a row turn NaN depends on the code (a NaN in
    top-p's sum spreads), so the learner's own non-finite rows are taken as they are."""
    logits, temperature = _args(case)[:2]
    row_max = (logits.float() / temperature).amax(dim=-1)
    wild = (row_max > EXP_RANGE[1]) | (row_max < EXP_RANGE[0])
    if not bool(wild.any()):
        return None
    if got.shape != case.expected.shape:
        return case.expected
    taken = wild & ~torch.isfinite(got.to(torch.float64)).all(dim=-1)
    out = case.expected.clone()
    out[taken] = got.detach().float()[taken]
    return out


# (diagnosis id, label, fn(case) -> output or None); the families (Bug.fit) are added by the spec.
SAMPLING_VARIANTS = [
    ("sampling_top_p_crossing_dropped", "keeps cumsum < top_p, the most probable token always kept",
     variant(crossing=False)),
    ("sampling_top_p_crossing_dropped", "keeps cumsum < top_p, nothing kept when the top token alone crosses it",
     variant(crossing=False, guard=False)),
    ("sampling_filter_order", "min-p before top-p", variant(order=("top_k", "min_p", "top_p"))),
    ("sampling_filter_order", "top-p on the distribution before top-k (top-p first, or top-k's probabilities "
     "not renormalised)", variant(order=("top_p", "top_k", "min_p"))),
    ("sampling_filter_order", "top-p after min-p but before top-k", variant(order=("min_p", "top_p", "top_k"))),
    ("sampling_temperature_late", "filters on the untempered logits, temperature only in the final softmax",
     variant(temp="late")),
    ("sampling_temperature_on_probs", "top-p on softmax(x) / T, the final distribution untempered",
     variant(temp="probs")),
    ("sampling_temperature_on_probs", "softmax(x) / T renormalised: the temperature has no effect",
     variant(temp="ignored")),
    ("sampling_min_p_absolute", "keeps p >= min_p (and the top token)", variant(min_p_ref="one")),
    ("sampling_min_p_absolute", "keeps p >= min_p, nothing when no token reaches min_p",
     variant(min_p_ref="one", guard=False)),
    ("sampling_min_p_mixed", "threshold from the distribution before top-p, probabilities after it",
     variant(min_p_ref="stale_threshold")),
    ("sampling_min_p_mixed", "probabilities from before top-p, threshold after it", variant(min_p_ref="stale_probs")),
    ("sampling_top_k_edge", "top_k = 0 keeps no token (NaN rows)", _edge_zero),
    ("sampling_no_renormalise", "the tempered softmax with removed tokens zeroed", variant(renorm="none")),
    ("sampling_no_renormalise", "renormalised after top-k only", variant(renorm="after_top_k")),
    ("sampling_removed_not_zero", "removed tokens read -inf", variant(removed=NEG_INF)),
    ("sampling_removed_not_zero", "removed tokens read NaN", variant(removed=math.nan)),
    ("sampling_removed_not_zero", "removed logits set to 0 instead of -inf", variant(fill=0.0)),
    ("sampling_removed_not_zero", "removed logits set to -1e4", variant(fill=-1e4)),
    ("sampling_removed_not_zero", "probabilities floored (clamp_min) and renormalised: removed tokens ~1e-10, not 0",
     variant(floor=1e-10)),
    # Signatures from real code (issue 31), after the planted ones: a tie goes to the earlier variant.
    ("sampling_top_k_off_by_one", "removes x <= kth: k - 1 tokens kept, none at top_k = 1", variant(k_strict=True)),
    ("sampling_filter_missing", "top-p never applied", tie_aware(order=("top_k", "min_p"))),
    ("sampling_filter_missing", "min-p never applied", tie_aware(order=("top_k", "top_p"))),
    ("sampling_filter_missing", "top-k never applied", tie_aware(order=("top_p", "min_p"))),
    ("sampling_top_p_complement", "keeps the descending mass below 1 - top_p", tie_aware(p_cut="one_minus")),
    ("sampling_top_p_complement", "keeps the descending mass below 1 - top_p, top_p = 1.0 included",
     tie_aware(p_cut="one_minus_always")),
    ("sampling_top_p_complement", "removes cumsum <= 1 - top_p on a descending sort: the most probable tokens go",
     tie_aware(p_cut="tail")),
]
