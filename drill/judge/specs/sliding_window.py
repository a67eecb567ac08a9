"""Hidden tests for `sliding_window`: sliding_window_attention(q, k, v, window) and RollingKVCache(window).

The function ("call" cases, gradients of q, k and v graded on fp32): query i
of T_q sits at position T_k - T_q + i and sees the `window` keys ending at
itself. The cases are built so each convention mistake shows: T_q < T_k
(top-left alignment), T_q == T_k, a decode step T_q = 1, window 1 (the output
is v), window >= T_k (plain causal attention), windows in between and windows
one below T_k (window + 1 keys), queries with keys after them (a bidirectional
band), leading dims B and H, fp16 and bf16.

The cache ("rolling" cases, drill/judge/rolling.py): the child builds
`RollingKVCache(window)` and feeds one sequence through `attend` in a given
split (one call, one token at a time, a prompt then tokens, chunks longer than
the window, exactly the window, mixes); the expected answer is always
sliding_window_attention over the whole sequence, so any split-invariant
cache passes. After each call the child counts the elements of the
floating-point tensors reachable from the cache object; a "held" case fails
(`swa_cache_grows`) when a count passes 2 * B * H * window * d.

The mistakes are replayed in the parent: the function's through `band` (one
knob per mistake), the cache's through the same rolling driver as the
learner's file, with cache classes that keep the last `window` (or window - 1)
positions and attend with a mistaken `band` (the cache calling a wrong
function), or attend right and evict too early, or mask chunks wrongly.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from drill.judge import rolling
from drill.judge.compare import Comparison
from drill.judge.spec import FORBIDDEN_ATTENTION, FORBIDDEN_ATTENTION_CLASSES, Bug, Case, Diagnosis, Spec
from drill.judge.specs._attention_bugs import D as AD
from drill.judge.specs._common import (
    DTYPE_LABEL,
    DTYPES,
    TOLERANCES,
    Draw,
    call_case,
    diagnoses,
    repeat_after,
    twice_probes,
)

FUNCTION = "sliding_window_attention"
CACHE = "RollingKVCache"
KIND = rolling.KIND

SD = diagnoses(
    Diagnosis("swa_window_plus_one", "The window holds window + 1 keys",
              "Query p sees the keys p - window < j <= p: `window` keys, itself included (Hugging Face's "
              "kv_idx > q_idx - window, Mistral, Gemma). j >= p - window (or tril/triu one diagonal too far) lets "
              "in the key exactly `window` positions back as well.",
              "Keep j > p - window: with a band of torch.ones(...).tril(diagonal=T_k - T_q) and "
              ".triu(diagonal=T_k - T_q - window + 1), or (pos_q - pos_k) < window on absolute positions."),
    Diagnosis("swa_window_minus_one", "The window holds window - 1 keys",
              "Query p sees `window` keys, itself included: p - window < j <= p. Your band stops one key short "
              "(p - j < window - 1, or the triu diagonal one too high), so a window of 1 sees nothing at all.",
              "Allowed iff 0 <= p - j < window (p - j <= window - 1)."),
    Diagnosis("swa_bidirectional", "The window reaches both ways (|i - j| < window)",
              "The sliding window of a decoder is causal: query p sees the window - 1 keys before it and itself. "
              "|p - j| < window (TorchCode's band) also lets it see up to window - 1 keys after it.",
              "Add the causal bound: allowed iff j <= p and j > p - window."),
    Diagnosis("swa_not_causal", "Only the lower end of the window is applied",
              "The mask keeps j > p - window but not j <= p: every query also sees all the keys after it.",
              "Allowed iff p - window < j <= p: both bounds."),
    Diagnosis("swa_top_left", "Query i placed at position i (top-left alignment)",
              "With T_q < T_k the queries are the *last* T_q positions: query i sits at p = T_k - T_q + i. "
              "Counting it as position i (tril of the (T_q, T_k) rectangle) hides nearly all of its window and "
              "shows it the wrong keys; only T_q == T_k looks right.",
              "pos_q = torch.arange(T_k - T_q, T_k), pos_k = torch.arange(T_k); compare those."),
    Diagnosis("swa_cache_grows", "The cache keeps every position",
              "A query looks back window - 1 positions at most, so between calls the cache needs only the last "
              "window - 1 (at most `window`) keys and values: 2 * B * H * window * d elements. Yours holds more "
              "after a call (every position so far, or the last chunk kept whole on top of the window), so its "
              "memory grows with the sequence or the chunk: the memory the sliding window exists to save.",
              "After attending, keep only the last `window` (or window - 1) positions: self.k = k_all[..., -keep:, "
              ":] (a ring buffer of `window` slots works too)."),
    Diagnosis("swa_evicts_before_attend", "Old positions dropped before the new queries attended",
              "A chunk of new positions is appended and the cache cut to the last `window` before attending: the "
              "first queries of a chunk longer than one token then miss keys inside their window that were still "
              "needed (a single token at a time looks right).",
              "Attend over cache + new keys first, then keep the last `window` positions for the next call."),
    Diagnosis("swa_chunk_future", "A chunk's queries see later keys of the same chunk",
              "In the cache, a call with several new positions needs the causal bound among them: the cached keys "
              "all lie in the past, but the chunk's own keys do not. Yours applies the window's lower bound only, "
              "so each query also sees the chunk's later keys (one token at a time looks right).",
              "Mask the chunk with absolute positions, j <= p and j > p - window, or call your "
              "sliding_window_attention on (q, cached + new k, cached + new v)."),
)


# ---------------------------------------------------------------- the mistakes: one attention with knobs

def band(q, k, v, window: int, *, lo: int = 0, bidir: bool = False, causal: bool = True, top_left: bool = False,
         after: bool = False, fill_zero: bool = False, scale: float | None = None):
    """Attention over a band, one knob per mistake, in fp32; returns (out, unknown) (rows with no allowed key).

    lo: the lower bound moved (+1: window + 1 keys, -1: window - 1); bidir: |p - j| < window; causal=False: the
    lower bound alone; top_left: query i at position i; after: softmax over every key, then the band zeroed;
    fill_zero: blocked logits set to 0; scale: another factor than 1/sqrt(d).
    """
    q, k, v = q.float(), k.float(), v.float()
    t_q, t_k = q.shape[-2], k.shape[-2]
    pos_q = (torch.arange(t_q) if top_left else torch.arange(t_k - t_q, t_k)).unsqueeze(-1)
    pos_k = torch.arange(t_k).unsqueeze(0)
    dist = pos_q - pos_k
    width = window + lo
    if bidir:
        allowed = dist.abs() < width
    elif causal:
        allowed = (dist >= 0) & (dist < width)
    else:
        allowed = dist < width
    s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if after:
        p = torch.softmax(s, dim=-1) * allowed
    else:
        p = torch.softmax(s.masked_fill(~allowed, 0.0 if fill_zero else float("-inf")), dim=-1)
    out = p @ v
    empty = ~allowed.any(dim=-1, keepdim=True)
    unknown = torch.broadcast_to(empty, (*out.shape[:-1], 1)).expand(out.shape).clone()
    return torch.nan_to_num(out, nan=0.0), unknown


class VariantCache:
    """A rolling cache with knobs; every knob at its default is the contract.

    core: band's knobs (the attention the cache calls); keep: positions kept between calls ("window",
    "window-1", "all"); evict_first: the chunk appended and the cache cut to `window` before attending;
    chunk_future: the chunk's queries see the chunk's later keys (the lower bound alone, inside the cache).
    """

    core: dict = {}
    keep = "window"
    evict_first = False
    chunk_future = False

    def __init__(self, window: int) -> None:
        self.window = window
        self.k = self.v = None
        self.unknown: list[torch.Tensor] = []

    def attend(self, q, k, v):
        q, k, v = q.float(), k.float(), v.float()
        k_all = k if self.k is None else torch.cat([self.k, k], dim=-2)
        v_all = v if self.v is None else torch.cat([self.v, v], dim=-2)
        if self.evict_first:
            k_all, v_all = k_all[..., -self.window:, :], v_all[..., -self.window:, :]
        knobs = dict(self.core)
        if self.chunk_future:
            knobs["causal"] = False
        out, unknown = band(q, k_all, v_all, self.window, **knobs)
        self.unknown.append(unknown)
        n = {"window": self.window, "window-1": self.window - 1, "all": k_all.shape[-2]}[self.keep]
        n = min(n, k_all.shape[-2])
        self.k, self.v = k_all[..., k_all.shape[-2] - n:, :], v_all[..., v_all.shape[-2] - n:, :]
        return out


class _Host:
    @staticmethod
    def plain(t: torch.Tensor) -> torch.Tensor:
        return t.detach().clone()


def cache_class(**knobs: Any) -> type:
    return type("VariantCache_" + "_".join(f"{k}" for k in knobs), (VariantCache,), dict(knobs))


def drive(cls: Any, case: Case) -> torch.Tensor:
    """What cache class `cls` returns on this rolling case, through the child's own driver."""
    a = case.args
    return rolling.run_scenario(cls, case.extra, a["q"], a["k"], a["v"], _Host, CACHE)


def _drive_variant(cls: type, case: Case):
    """The variant cache's joined outputs and the rows it leaves unknown (queries with no allowed key)."""
    made: list[VariantCache] = []

    class Recording(cls):  # type: ignore[misc, valid-type]
        def __init__(self, window: int) -> None:
            super().__init__(window)
            made.append(self)

    out = drive(Recording, case)
    unknown = torch.cat(made[0].unknown, dim=-2)
    return out, unknown


def _memo(case: Case, key: tuple, compute):
    memo = case.ctx.setdefault("memo", {})
    if key not in memo:
        memo[key] = compute()
    return memo[key]


def function_bug(core: dict, cache: str | None = "window", cache_only: bool = False):
    """A mistake in the attention: on the function's cases (unless `cache_only`), and on the cache's cases when
    the cache attends through it (`cache`: how many positions it keeps; None: the cache is right)."""

    def fn(case: Case):
        if case.kind == KIND:
            if case.extra["returns"] != "out" or cache is None:
                return None
            return _memo(case, ("cache", cache, tuple(sorted(core.items()))),
                         lambda: _drive_variant(cache_class(core=core, keep=cache), case))
        if cache_only:
            return None
        a = case.args
        return band(a["q"], a["k"], a["v"], a["window"], **core)

    return fn


def cache_bug(**knobs: Any):
    """A mistake of the cache alone: the function's cases are right."""

    def fn(case: Case):
        if case.kind != KIND or case.extra["returns"] != "out":
            return None
        return _memo(case, ("cache", tuple(sorted(knobs.items()))), lambda: _drive_variant(cache_class(**knobs), case))

    return fn


CORE_MISTAKES = [
    ("swa_window_plus_one", "j >= p - window", {"lo": 1}),
    ("swa_window_minus_one", "p - j < window - 1", {"lo": -1}),
    ("swa_bidirectional", "|p - j| < window", {"bidir": True}),
    ("swa_bidirectional", "|i - j| < window, query i at position i", {"bidir": True, "top_left": True}),
    ("swa_not_causal", "j > p - window only", {"causal": False}),
    ("swa_top_left", "query i at position i", {"top_left": True}),
]
GENERIC_MISTAKES = [
    ("mask_after_softmax", "softmax over every key, then the band zeroed", {"after": True}),
    ("mask_fill_zero", "keys outside the band given logit 0", {"fill_zero": True}),
    ("missing_scale", "no 1/sqrt(d)", {"scale": 1.0}),
]


def _bugs() -> tuple[Bug, ...]:
    table = {**SD, **AD}
    bugs: list[Bug] = []
    for i, label, core in CORE_MISTAKES + GENERIC_MISTAKES:
        bugs.append(Bug(table[i], function_bug(core, "window"), f"{label}; the cache keeps `window` positions"))
        bugs.append(Bug(table[i], function_bug(core, "window-1"), f"{label}; the cache keeps window - 1 positions"))
        bugs.append(Bug(table[i], function_bug(core, None), f"{label}; the cache is right"))
        if i in SD and i != "swa_not_causal":  # the cache's own lower-bound-only mask is swa_chunk_future
            bugs.append(Bug(table[i], function_bug(core, "window", cache_only=True),
                            f"{label}, in the cache's own mask only"))
    bugs += [
        Bug(SD["swa_evicts_before_attend"], cache_bug(evict_first=True),
            "new positions appended, the cache cut to `window`, then attended"),
        Bug(SD["swa_chunk_future"], cache_bug(chunk_future=True),
            "the chunk masked with j > p - window only"),
    ]
    return tuple(bugs)


# ---------------------------------------------------------------- the cases

def _fn_case(d: Draw, name: str, b: int, h: int, t_q: int, t_k: int, dim: int, window: int, *,
             dtype: str = "float32", grads: bool = False) -> Case:
    args = {"q": d.normal(b, h, t_q, dim, dtype=dtype), "k": d.normal(b, h, t_k, dim, dtype=dtype),
            "v": d.normal(b, h, t_k, dim, dtype=dtype), "window": window}
    label = f"{DTYPE_LABEL[dtype]} {name}, (B,H)=({b},{h}), T_q={t_q}, T_k={t_k}, d={dim}, window {window}"
    return call_case(d, label, FUNCTION, args, dtype=dtype, grads=("q", "k", "v") if grads else (),
                     out_shape=(b, h, t_q, dim))


def _held_judge(case: Case):
    def judge(got) -> Comparison:
        limit = case.ctx["limit"]
        calls = case.extra["calls"]
        if not isinstance(got, torch.Tensor) or got.dtype != torch.int64 or tuple(got.shape) != (len(calls),):
            return Comparison(False, "values", "the cache's size could not be measured")
        over = [i for i, n in enumerate(got.tolist()) if n > limit]
        if not over:
            return Comparison(True, "", "")
        i = over[0]
        seen = sum(calls[: i + 1])
        b, h, _, dim = case.args["q"].shape
        message = (f"after call {i + 1} ({seen} positions so far) the cache holds {int(got[i])} elements of "
                   f"floating-point tensors, more than 2 * B * H * window * d = 2 * {b} * {h} * "
                   f"{case.extra['window']} * {dim} = {limit}; at the last call: {int(got[-1])}")
        return Comparison(False, "values", message, short=f"cache holds {int(got[i])} > {limit} elements",
                          diagnosis=SD["swa_cache_grows"])

    return judge


def _cache_cases(d: Draw, name: str, window: int, calls: list[int], *, b: int = 2, h: int = 2, dim: int = 8,
                 dtype: str = "float32", held: bool = True) -> list[Case]:
    t = sum(calls)
    args = {"q": d.normal(b, h, t, dim, dtype=dtype), "k": d.normal(b, h, t, dim, dtype=dtype),
            "v": d.normal(b, h, t, dim, dtype=dtype)}
    split = "+".join(str(n) for n in calls)
    label = f"{DTYPE_LABEL[dtype]} cache, {name} [{split}], window {window}, (B,H,d)=({b},{h},{dim})"
    memo: dict = {}
    cases = [Case(name=f"{label}: outputs", target=CACHE, kind=KIND, args=dict(args), out_dtype=DTYPES[dtype],
                  extra={"window": window, "calls": list(calls), "returns": "out"},
                  ctx={"dtype": dtype, "what": "outputs", "memo": memo})]
    if held:
        case = Case(name=f"{label}: positions held", target=CACHE, kind=KIND, args=dict(args),
                    out_dtype=torch.int64, extra={"window": window, "calls": list(calls), "returns": "held"},
                    ctx={"dtype": "int64", "limit": 2 * b * h * window * dim, "memo": memo})
        case.judge = _held_judge(case)
        cases.append(case)
    return cases


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    cases: list[Case] = []
    # The function. fp32 first (gradients graded), then half precision.
    t = d.int(9, 14)
    cases.append(_fn_case(d, "T_q == T_k", d.int(1, 2), d.int(2, 3), t, t, 8, d.int(3, t - 4), grads=True))
    t_k = d.int(12, 18)
    t_q = d.int(3, 6)
    cases.append(_fn_case(d, "T_q < T_k", 2, 3, t_q, t_k, 16, d.int(3, t_q + 2), grads=True))
    t_k = d.int(10, 16)
    cases.append(_fn_case(d, "a decode step T_q = 1", 2, 2, 1, t_k, 8, d.int(3, t_k - 3), grads=True))
    t_k = d.int(8, 12)
    cases.append(_fn_case(d, "window 1 (the output is v)", 1, 2, d.int(3, 5), t_k, 8, 1, grads=True))
    t_k = d.int(6, 10)
    cases.append(_fn_case(d, "window >= T_k (plain causal)", 2, 2, d.int(3, 5), t_k, 8, t_k + d.int(0, 3),
                          grads=True))
    t = d.int(6, 10)
    cases.append(_fn_case(d, "window > T_q == T_k (plain causal)", 1, 3, t, t, 8, t + d.int(1, 4)))
    t_k = d.int(10, 14)
    cases.append(_fn_case(d, "window T_k - 1", 2, 2, d.int(4, 6), t_k, 8, t_k - 1, grads=True))
    t_k = d.int(12, 20)
    cases.append(_fn_case(d, "T_q < T_k, window 2", 3, 1, d.int(4, 7), t_k, 8, 2))
    t_k = d.int(10, 16)
    cases.append(_fn_case(d, "T_q < T_k", 2, 2, d.int(3, 6), t_k, 16, d.int(3, 5), dtype="float16"))
    t = d.int(8, 12)
    cases.append(_fn_case(d, "T_q == T_k", 2, 2, t, t, 16, d.int(2, 5), dtype="bfloat16"))
    t_k = d.int(10, 16)
    cases.append(_fn_case(d, "T_q < T_k", 1, 4, d.int(3, 6), t_k, 16, d.int(3, 5), dtype="bfloat16"))
    # The cache: splits of one sequence.
    w = d.int(3, 5)
    cases += _cache_cases(d, "one call", w, [d.int(w + 4, w + 8)], held=False)
    w = d.int(3, 5)
    cases += _cache_cases(d, "one token at a time", w, [1] * d.int(2 * w + 2, 2 * w + 5))
    w = d.int(4, 6)
    cases += _cache_cases(d, "a short prompt, then tokens", w, [d.int(2, w - 1)] + [1] * d.int(w + 1, w + 4))
    w = d.int(3, 5)
    cases += _cache_cases(d, "a prompt longer than the window, then tokens", w,
                          [d.int(w + 2, w + 5)] + [1] * d.int(3, 6), b=1, h=3)
    w = d.int(2, 4)
    cases += _cache_cases(d, "chunks longer than the window", w, [d.int(w + 1, w + 3) for _ in range(3)], dim=16)
    w = d.int(3, 5)
    cases += _cache_cases(d, "chunks of exactly the window", w, [w, w, w, 1, w])
    w = d.int(3, 6)
    cases += _cache_cases(d, "mixed", w, [d.int(2, 4), 1, d.int(w + 1, w + 4), 1, 1, d.int(2, w), 1, d.int(2, 3)])
    cases += _cache_cases(d, "window 1, tokens and chunks", 1, [d.int(2, 4), 1, 1, d.int(2, 3), 1])
    n = d.int(8, 12)
    cases += _cache_cases(d, "window beyond the sequence (plain causal)", n + d.int(1, 4),
                          [d.int(2, 4), 1, 1, d.int(2, 4), 1], held=False)
    w = d.int(3, 5)
    cases += _cache_cases(d, "mixed", w, [d.int(2, 4), 1, d.int(w + 1, w + 3), 1, 2], dim=16, dtype="float16",
                          held=False)
    w = d.int(3, 5)
    cases += _cache_cases(d, "mixed", w, [d.int(w + 1, w + 3), 1, 1, d.int(2, 4), 1], dim=16, dtype="bfloat16",
                          held=False)
    cases = twice_probes(cases)  # determinism probes on the first three fp32 function cases; draws nothing
    t_k, t_q = d.int(10, 14), d.int(3, 5)
    probe = _fn_case(d, "repeat call: two calls of the same shapes", 2, 2, t_q, t_k, 8, d.int(3, 5))
    return cases + [repeat_after(d, probe)]


def reference(case: Case):
    from drill.reference.sliding_window import sliding_window_attention

    if case.kind == KIND:
        a = case.args
        if case.extra["returns"] == "held":  # judged by the case itself; the expectation is unused
            return torch.zeros(len(case.extra["calls"]), dtype=torch.int64), {}
        out = sliding_window_attention(a["q"].float(), a["k"].float(), a["v"].float(), case.extra["window"])
        return out, {}
    from drill.judge.specs._common import reference_with_grads

    return reference_with_grads(case, lambda a, p: sliding_window_attention(a["q"], a["k"], a["v"], a["window"]))


SPEC = Spec(
    name="sliding_window",
    graded=(FUNCTION, CACHE),
    make_cases=make_cases,
    reference=reference,
    tolerances=TOLERANCES,
    bugs=_bugs(),
    exception_bugs=(("without overflow", AD["fp16_fill_overflow"]),),
    forbidden=FORBIDDEN_ATTENTION,
    forbidden_classes=FORBIDDEN_ATTENTION_CLASSES,
)
