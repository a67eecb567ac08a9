"""Hidden tests for `flash_attention`: flash_attention(q, k, v, causal=False) -> (out, lse), tiled.

Two kinds of case:
- values: `out` and `lse` (one element per case, the pair on the same inputs:
  `Case.extra["tuple"]`, as moe) against the reference (drill.reference.attention_lse)
  over shapes that are not multiples of the tiles, T_q != T_k, causal with
  the bottom-right alignment in all three regimes (T_q < T_k, ==, >, and
  T_k = T_q + 1, where an off-by-one tile skip shows), rows with no visible
  key (zeros, lse = -inf), logits ~1e3 (the running max grows a lot), fp16
  and bf16, a decode step (T_q = 1), a repeat call; with the file's own
  BLOCK_Q / BLOCK_K and with tile sizes the grader sets (16 and 32, so every
  row crosses several key tiles and the online softmax is exercised).
- tiling (`drill/judge/tiling.py`): the same function under the grader's
  score tracker, failing when more than one tile of scores per (batch, head)
  is alive, when causal tiles entirely above the diagonal are computed, when
  no score tensor could be seen at all, or when the measured call's answer
  is wrong. Their sizes are drawn per seed (`tiling.drawn_cases`) and they sit
  among the value cases (`interleaved`), run in the same grad mode: a
  measured call looks like a graded one.

Bug variants re-run the tiles with the block sizes the case used
(`_flash_bugs.simulate`), so the file's own sizes are read back from it
(`report_attrs`) and handed to the cases in `prepare`.
"""

from __future__ import annotations

import dataclasses

import torch

from drill.judge import tiling
from drill.judge.registry import default
from drill.judge.spec import FORBIDDEN_ATTENTION, FORBIDDEN_ATTENTION_CLASSES, Bug, Case, Spec
from drill.judge.specs._common import TOLERANCES, Draw, call_case, interleaved, repeat_after, twice_probes
from drill.judge.specs._flash_bugs import FD, FLASH_VARIANTS, simulate

TARGET = "flash_attention"
OUTPUTS = ("out", "lse")
OWN = (default("flash_attention", "BLOCK_Q"), default("flash_attention", "BLOCK_K"))  # the starter's


def _value_case(d: Draw, name: str, shape: tuple[int, int, int, int, int], causal: bool, *, dtype: str = "float32",
                blocks: tuple[int, int] | None = None, scale: float = 1.0, tol: str | None = None) -> Case:
    """The `out` case of one input (see `_pair`, which adds its `lse` twin)."""
    b, h, t_q, t_k, dh = shape
    q = d.normal(b, h, t_q, dh, dtype=dtype, scale=scale)
    k = d.normal(b, h, t_k, dh, dtype=dtype, scale=scale)
    v = d.normal(b, h, t_k, dh, dtype=dtype)
    tiles = f"BLOCK_Q={blocks[0]}, BLOCK_K={blocks[1]}" if blocks else "your BLOCK_Q/BLOCK_K"
    return call_case(
        d, f"{name}, {tiles}", TARGET, {"q": q, "k": k, "v": v, "causal": causal}, dtype=dtype, out_dtype=q.dtype,
        module_attrs=dict(zip(tiling.BLOCK_NAMES, blocks, strict=True)) if blocks else None,
        ctx={**({"tol": tol} if tol else {}), **({"blocks": blocks} if blocks else {})},
    )


def _pair(case: Case) -> list[Case]:
    """`case` grading `out` and its twin grading `lse` on the very same inputs (one call each, in the child).

    They share one memo (ctx["memo"]), so a bug variant's tiles run once for both.
    """
    memo: dict = {}
    pair = []
    for pick, what in enumerate(OUTPUTS):
        twin = dataclasses.replace(
            case, name=f"{case.name}: {what}", out_dtype=case.out_dtype if what == "out" else torch.float32,
            ctx={**case.ctx, "what": what, "pick": pick, "memo": memo},
            extra={**case.extra, "tuple": {"names": list(OUTPUTS), "pick": pick}})
        pair.append(twin)
    return pair


def _off_tile(d: Draw, lo: int, hi: int, *blocks: int) -> int:
    """A length in [lo, hi] that is a multiple of none of `blocks` (so the last tile is partial)."""
    while True:
        n = d.int(lo, hi)
        if all(n % b for b in blocks):
            return n


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    cases: list[Case] = []
    tq = _off_tile(d, 70, 100, 16, 32, 64)
    tk = tq + _off_tile(d, 5, 40, 16, 32, 64)
    cases += _pair(_value_case(d, f"fp32 T_q={tq} != T_k={tk}, not causal", (2, 2, tq, tk, d.choice([16, 32])), False))
    tk = _off_tile(d, 33, 50, 16)
    tq = tk + _off_tile(d, 5, 25, 16)
    cases += _pair(_value_case(d, f"fp32 T_q={tq} > T_k={tk}, d=8, not causal", (1, 3, tq, tk, 8), False,
                             blocks=(16, 16)))
    t = _off_tile(d, 40, 62, 16, 32)
    cases += _pair(_value_case(d, f"fp32 causal T_q = T_k = {t}", (2, 1, t, t, 16), True, blocks=(16, 32)))
    t = _off_tile(d, 40, 62, 16)
    cases += _pair(_value_case(d, f"fp32 causal T_q = T_k = {t}", (1, 2, t, t, 16), True, blocks=(16, 16)))
    tq = _off_tile(d, 20, 45, 16, 32)
    tk = tq + _off_tile(d, 20, 40, 16, 32)
    cases += _pair(_value_case(d, f"fp32 causal T_q={tq} < T_k={tk} (bottom-right)", (1, 2, tq, tk, 16), True,
                             blocks=(32, 16)))
    tk = _off_tile(d, 12, 28, 16)
    tq = tk + _off_tile(d, 20, 30, 16)  # rows 0 .. tq-tk-1 see no key; the boundary is inside a query tile
    cases += _pair(_value_case(d, f"fp32 causal T_q={tq} > T_k={tk} (rows with no visible key)", (2, 1, tq, tk, 8),
                             True, blocks=(16, 16)))
    tq = _off_tile(d, 20, 44, 16)
    cases += _pair(_value_case(d, f"fp32 causal T_k = T_q + 1 = {tq + 1}", (1, 2, tq, tq + 1, 16), True,
                             blocks=(16, 16)))
    tq, tk = _off_tile(d, 20, 40, 16), _off_tile(d, 40, 70, 16)
    cases += _pair(_value_case(d, f"fp32 large logits (|q.k|/sqrt(d) ~ 1e3), T_q={tq}, T_k={tk}", (1, 2, tq, tk, 16),
                             False, blocks=(16, 16), scale=30.0, tol="float32_large_logits"))
    tk = _off_tile(d, 40, 70, 16)
    cases += _pair(_value_case(d, f"fp32 decode step T_q=1, causal, T_k={tk}", (2, 2, 1, tk, 16), True,
                               blocks=(16, 16)))
    tq = _off_tile(d, 50, 90, 16, 32, 64)
    tk = tq + _off_tile(d, 30, 70, 16, 32, 64)
    cases += _pair(_value_case(d, f"fp32 causal T_q={tq} < T_k={tk}", (1, 2, tq, tk, 16), True))
    t = _off_tile(d, 33, 60, 16)
    cases += _pair(_value_case(d, f"fp16 causal T_q = T_k = {t}", (1, 2, t, t, 16), True, dtype="float16",
                             blocks=(16, 16)))
    tq, tk = _off_tile(d, 70, 120, 16, 32, 64), _off_tile(d, 70, 130, 16, 32, 64)
    cases += _pair(_value_case(d, f"bf16 T_q={tq}, T_k={tk}, not causal", (1, 2, tq, tk, 16), False, dtype="bfloat16"))
    tk = _off_tile(d, 12, 28, 16, 32)
    tq = tk + _off_tile(d, 20, 30, 16, 32)
    cases += _pair(_value_case(d, f"fp16 causal T_q={tq} > T_k={tk} (rows with no visible key)", (1, 2, tq, tk, 16),
                             True, dtype="float16", blocks=(16, 32)))
    tq, tk = _off_tile(d, 20, 40, 16), _off_tile(d, 30, 60, 16)
    probe = _value_case(d, f"repeat call: two calls, q (1,2,{tq},16), {tk} keys", (1, 2, tq, tk, 16), False,
                        blocks=(16, 16))
    cases += _pair(repeat_after(d, probe, {"causal": False}))[:1]  # one probe (on out), as every exercise has
    return interleaved(twice_probes(cases), _tiling_cases(seed), seed)


def _tiling_cases(seed: int) -> list[Case]:
    cases = []
    for i, (name, extra, blocks) in enumerate(tiling.drawn_cases(seed)):
        extra = {"seed": (seed * 31 + i) % 2**31, **extra}
        case = Case(name=name, target=TARGET, kind=tiling.KIND, extra=extra, out_dtype=torch.int64,
                    module_attrs=dict(zip(tiling.BLOCK_NAMES, blocks, strict=True)) if blocks else {},
                    ctx={"dtype": "float32", "tiling": True, **({"blocks": blocks} if blocks else {})})
        case.judge = _tiling_judge(case)
        cases.append(case)
    return cases


def _tiling_judge(case: Case):
    def judge(got):
        from drill.judge.compare import Comparison

        blocks = case.ctx.get("blocks")
        if blocks is None:  # the file's own sizes were never read back (the run failed before)
            return Comparison(False, "measurement", "could not measure the tiling: the file's BLOCK_Q/BLOCK_K are "
                              "unknown", short="could not measure", diagnosis=FD["flash_tiling_unmeasured"])
        return tiling.judge(got, causal=bool(case.extra["causal"]), blocks=tuple(blocks), own=case.ctx.get("own"),
                            grader_set=bool(case.module_attrs), diagnoses=FD)

    return judge


def reference(case: Case):
    if case.kind == tiling.KIND:
        return None, {}
    from drill.reference.flash import attention_lse

    a = case.args
    both = attention_lse(a["q"].float(), a["k"].float(), a["v"].float(), a["causal"], impl="math")
    return both[case.ctx["pick"]], {}


def prepare(cases: list[Case], attrs: dict):
    """The file's own BLOCK_Q / BLOCK_K, checked, handed to every case (the variants and the tiling judge need them)."""
    own, problem = tiling.own_blocks(attrs)
    if own is None:
        return FD["flash_block_invalid"], problem
    for case in cases:
        case.ctx["own"] = own
        case.ctx.setdefault("blocks", own)
    return None


def _variant(knobs: dict, causal_only: bool):
    key = tuple(sorted(knobs.items()))

    def run(case: Case):
        a = case.args
        if causal_only and not a["causal"]:
            return None
        memo = case.ctx["memo"]
        if (key, case.ctx["blocks"]) not in memo:  # the out and lse cases of one input share the tiles' run
            memo[(key, case.ctx["blocks"])] = simulate(a["q"], a["k"], a["v"], a["causal"], *case.ctx["blocks"],
                                                       **knobs)
        return memo[(key, case.ctx["blocks"])][case.ctx["pick"]]

    return run


def _fit_empty_lse(case: Case, got):
    """The family "some finite lse on rows with no visible key": the right (out, lse), except that each such row's
    lse is the learner's own finite value there (log(l + 1e-20), a clamp, a -1e30 sentinel...)."""
    a = case.args
    if case.ctx["pick"] != 1 or not a["causal"] or not isinstance(got, torch.Tensor):
        return None
    memo, key = case.ctx["memo"], ((), case.ctx["blocks"])
    if key not in memo:
        memo[key] = simulate(a["q"], a["k"], a["v"], a["causal"], *case.ctx["blocks"])
    lse, unknown = memo[key][1]
    if tuple(got.shape) != tuple(lse.shape):
        return None
    theirs = got.detach().double()
    empty = torch.isneginf(lse) & torch.isfinite(theirs)
    if unknown is not None:
        empty &= ~unknown
    return torch.where(empty, theirs, lse), unknown


SPEC = Spec(
    name="flash_attention",
    graded=(TARGET,),
    make_cases=make_cases,
    reference=reference,
    tolerances=TOLERANCES,
    bugs=tuple(Bug(FD[i], _variant(knobs, causal_only), label) for i, label, knobs, causal_only in FLASH_VARIANTS)
    + (Bug(FD["flash_lse_empty_row_finite"], _fit_empty_lse, "another finite lse on rows with no visible key",
           fit=True),),
    forbidden=FORBIDDEN_ATTENTION,
    forbidden_classes=FORBIDDEN_ATTENTION_CLASSES,
    report_attrs=tiling.BLOCK_NAMES,
    prepare=prepare,
)
