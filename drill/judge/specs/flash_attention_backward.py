"""Hidden tests for `flash_attention_backward`: the FlashAttention-2 backward pass, tiled, without autograd.

flash_attention_backward(q, k, v, out, lse, grad_out, causal=False) -> (dq, dk, dv).

Two kinds of case:
- values: each of dq, dk, dv (one element per case, `_backward.elements`)
  against autograd of the naive masked forward in the parent
  (drill.reference.sdpa, math path, fp32), with `out` and `lse` from the
  reference forward (drill.reference.attention_lse): T_q != T_k, lengths
  that no tile divides, bottom-right causal in all three regimes, rows that
  see no key (lse = -inf: zero gradients, EXERCISES.md "Choices made"),
  logits ~1e2, fp16 and bf16, a decode step, a repeat call; the file's own
  BLOCK_Q / BLOCK_K and tiles the grader sets (16 and 32). Two inputs have
  square tiles only (T a multiple of the tile), where `dS q` has dk's shape
  and so shows as values (fab_dk_uses_ds).
- tiling (`drill/judge/tiling.py`, `judge_backward`): the call under the
  score tracker with grad_out and v labelled too, so a full-size dP (grad_out
  v^T) counts as a score tensor; failing above one tile of scores, P, dP or
  dS per (batch, head) (`fab_full_p`, or `fab_d_from_p` when a row sum of
  P * dP was taken, `fab_blocks_at_import` when the tile is the file's own
  although the grader set others), and with causal=True when the q.k
  products exceed a causal=False call's times the share of tiles not
  entirely above the diagonal. More than two passes over the visible tiles
  is the advisory `fab_extra_passes` (failing under --strict only).

Bug variants run the tiles themselves (`simulate`), with the block sizes the
case used, in float64 on the case's inputs and its given out and lse.
"""

from __future__ import annotations

import math

import torch

from drill.judge import tiling
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
    interleaved,
    repeat_after,
    twice_probes,
)

TARGET = "flash_attention_backward"
OUTPUTS = (("dq", "q"), ("dk", "k"), ("dv", "v"))
FORBIDDEN = (*FORBIDDEN_AUTOGRAD, *FORBIDDEN_ATTENTION, "_scaled_dot_product_flash_attention_backward",
             "_scaled_dot_product_efficient_attention_backward", "_flash_attention_backward",
             "_efficient_attention_backward")

FB = diagnoses(
    Diagnosis("fab_full_p", "More than one tile of P, dP or dS alive",
              "The backward's memory saving is that P is never stored: each (query tile, key tile) recomputes its "
              "BLOCK_Q x BLOCK_K probabilities from q, k and lse, and dP, dS live only as long as that tile. A "
              "tensor of scores, probabilities, dP = grad_out v^T or dS larger than one tile per (batch, head) was "
              "alive during the call (a full T_q x T_k matrix, a query tile against every key, tiles stacked).",
              "Inside the tile loop: p = torch.exp(s - lse_tile[..., None]) for that tile only, dp = do_t @ "
              "v_t.transpose(-2, -1), ds = p * (dp - D_t[..., None]); accumulate dq, dk, dv, never the tiles."),
    Diagnosis("fab_d_from_p", "D computed as rowsum(P * dP) over whole rows",
              "D = rowsum(P * dP) is the same number as rowsum(grad_out * out), but it needs every probability of "
              "the row, so it keeps a row of P and dP against all keys (or a separate pass over them). The "
              "forward's out makes it one (T_q, d) product, computed once before the tile loop.",
              "D = (grad_out.float() * out.float()).sum(-1), once, before the loops."),
    Diagnosis("fab_no_lse", "P recomputed as exp(S), without lse",
              "The forward saved lse = logsumexp(S) of each row so the backward can rebuild the normalised "
              "probabilities tile by tile: P = exp(S - lse). exp(S) alone is unnormalised (and overflows for large "
              "scores), so dv, dS and everything after them are scaled wrongly.",
              "p = torch.exp(s - lse_tile[..., None]) (with 0 where lse is -inf)."),
    Diagnosis("fab_tile_softmax", "P from a softmax over each tile",
              "A softmax taken over one key tile normalises the tile's scores among themselves, but P is the "
              "softmax over all keys of the row: each tile holds only part of the row's mass. The row's lse, "
              "which the forward saved, gives the right normaliser in every tile.",
              "p = torch.exp(s - lse_tile[..., None]), not torch.softmax(s, -1)."),
    Diagnosis("fab_scale_missing", "1/sqrt(d) missing in the backward",
              "S = q k^T / sqrt(d), so the scores must be scaled before exp(S - lse) (lse is the logsumexp of "
              "the scaled scores), and the chain rule carries 1/sqrt(d) into dq = dS k / sqrt(d) and "
              "dk = dS^T q / sqrt(d). One of them is missing.",
              "scale = 1 / math.sqrt(q.shape[-1]); s = q_t @ k_t.transpose(-2, -1) * scale; dq_t += ds @ k_t * "
              "scale; dk_t += ds.transpose(-2, -1) @ q_t * scale."),
    Diagnosis("fab_causal_not_in_backward", "causal not applied in the backward",
              "causal=True must shape the backward as it shaped the forward: P is 0 above the diagonal. Without "
              "the mask inside the tiles that cross the diagonal (or without any causal handling), the recomputed "
              "P = exp(S - lse) is nonzero on future keys, so dv and dk get gradient from queries that never read "
              "them, and dq from keys it never saw (the bug of triton-lang/triton #7216).",
              "In each tile crossing the diagonal: s = s.masked_fill(key_pos > query_pos + (T_k - T_q), "
              "float('-inf')), and skip the tiles entirely above it."),
    Diagnosis("fab_causal_top_left", "Causal alignment top-left, not bottom-right",
              "With T_q != T_k the queries are the last T_q positions: query i sits at T_k - T_q + i and sees keys "
              "0 .. T_k - T_q + i, as in flash_attention. Aligning query i with key i (mask or tile skip) recomputes "
              "P over the wrong keys.",
              "offset = T_k - T_q; key j is visible to query i when j <= offset + i; skip key tiles against the "
              "same offset."),
    Diagnosis("fab_dq_overwritten", "dq assigned per key tile instead of accumulated",
              "A query's dq sums dS k / sqrt(d) over every key tile it sees. Assigning it (dq[rows] = ...) in the "
              "key loop keeps only the last key tile's share.",
              "dq[:, :, q0:q1] += ds @ k_t * scale (dq zeroed once, in fp32, before the loops)."),
    Diagnosis("fab_dk_uses_ds", "dk from dS q, not dS^T q",
              "dS has a row per query and a column per key, so each key's gradient gathers the queries through "
              "dS^T: dk = dS^T q / sqrt(d). dS q has dk's shape only when the tile is square and sums over the "
              "wrong index.",
              "dk[:, :, k0:k1] += ds.transpose(-2, -1) @ q_t * scale."),
    Diagnosis("fab_empty_row_nan", "NaN from a query that sees no key (exp(-inf - -inf))",
              "A causal query with T_q > T_k placed before every key has lse = -inf and all its scores -inf, so "
              "exp(S - lse) = exp(-inf + inf) = NaN; the NaN runs through dS into its dq and, through the sums over "
              "queries, into dk and dv of every key tile it met. Its P is 0 (the contract): all its gradients "
              "are 0.",
              "p = torch.where(torch.isinf(lse_tile)[..., None], 0.0, torch.exp(s - lse_tile[..., None])), or "
              "subtract a safe lse (+inf where it is -inf)."),
    Diagnosis("fab_blocks_at_import", "BLOCK_Q / BLOCK_K not read at call time",
              "The grader set BLOCK_Q and BLOCK_K to other values before calling, and the code still used the "
              "file's own tile sizes: they were captured when the file was imported (a default argument, a copy "
              "into another name) instead of being read from the module on each call.",
              "Read the module-level BLOCK_Q and BLOCK_K inside flash_attention_backward, on every call."),
    Diagnosis("fab_causal_tiles_not_skipped", "Causal: tiles entirely above the diagonal computed",
              "With causal=True a (query tile, key tile) pair whose first key is after the tile's last query is "
              "all zero in P; computing it and masking wastes the work the causal backward saves. The q.k "
              "products of a causal call, against a causal=False call on the same inputs, exceed the share of "
              "tiles that some query sees.",
              "Skip the pair when k0 > (T_k - T_q) + q1 - 1 (in a key-outer loop: start at the first query tile "
              "that sees k0); a query tile that sees no key computes nothing."),
    Diagnosis("fab_measured_values_differ", "Wrong gradients in a tiling test",
              "The tiling tests are graded calls too: the grader measures the tiles of one call and checks that it "
              "returned attention's (dq, dk, dv) on those inputs. This one returned other values while the value "
              "tests passed: the code computes differently on some calls (a path taken only for some sizes, "
              "tiles or call counts).",
              "Compute every call the same way; the tiling tests use ordinary inputs and your BLOCK_Q/BLOCK_K or "
              "the grader's."),
    Diagnosis("fab_tiling_unmeasured", "Tiling could not be measured",
              "The grader follows the scores from the q and k (and dP from the grad_out and v) it passed, through "
              "PyTorch's operators; during this call it saw no q.k product at all (NumPy, another thread, an op it "
              "does not follow), so it cannot confirm the tiling. This counts as a failure, never a pass.",
              "Compute the score tiles from q and k with ordinary torch ops (q_t @ k_t.transpose(-2, -1), einsum) "
              "on the calling thread."),
    Diagnosis("fab_block_invalid", "BLOCK_Q / BLOCK_K missing or invalid",
              "The contract asks for module-level BLOCK_Q and BLOCK_K, powers of two from 16 to 256; the grader "
              "reads them to know your tile size.",
              "Define BLOCK_Q = 64 and BLOCK_K = 64 (or other powers of two from 16 to 256) at module level."),
    Diagnosis("fab_extra_passes", "More than two passes over the tiles",
              "FlashAttention-2's backward computes each visible tile's scores once (a key-outer loop that "
              "accumulates dq) or twice (a dK/dV loop, then a dQ loop, as Triton's tutorial kernel). More q.k "
              "products than that recompute the scores again: D from P, or a pass per gradient. Reported, "
              "failing only under --strict.",
              "D = rowsum(grad_out * out) before the loops, and dq, dk, dv from the same tile's P and dS."),
)
ROLES = {"unmeasured": FB["fab_tiling_unmeasured"], "values": FB["fab_measured_values_differ"],
         "full_p": FB["fab_full_p"], "d_from_p": FB["fab_d_from_p"], "blocks_ignored": FB["fab_blocks_at_import"],
         "causal_tiles": FB["fab_causal_tiles_not_skipped"]}


# ---------------------------------------------------------------- the tiles, with a knob per mistake


def simulate(q, k, v, out, lse, g, causal: bool, block_q: int, block_k: int, *, p_from: str = "lse",
             score_scale: bool = True, grad_scale: bool = True, causal_mode: str = "right", dq_acc: bool = True,
             dk_form: str = "right", guard: bool = True) -> tuple:
    """(dq, dk, dv) in float64 from a query-outer tile loop; dk None where `dk_form="ds_q"` meets a tile that is not
    square (the learner's matmul raises there).

    p_from: "lse" (P = exp(S - lse)), "exp" (exp(S)), "tile" (a softmax over the tile's keys);
    causal_mode: "right", "ignored" (no mask, no skip), "no_mask" (tiles skipped, none masked), "top_left";
    guard=False: exp(S - lse) taken as it is on rows with lse = -inf (NaN)."""
    q, k, v, out, g = (t.double() for t in (q, k, v, out, g))
    lse = lse.double()
    t_q, t_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    s = 1.0 / math.sqrt(d)
    off = 0 if causal_mode == "top_left" else t_k - t_q
    big_d = (g * out).sum(-1)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    dk_ok = True
    for q0 in range(0, t_q, block_q):
        q1 = min(q0 + block_q, t_q)
        qt, gt, lt, dt = q[..., q0:q1, :], g[..., q0:q1, :], lse[..., q0:q1], big_d[..., q0:q1]
        for k0 in range(0, t_k, block_k):
            k1 = min(k0 + block_k, t_k)
            if causal and causal_mode != "ignored" and k0 > off + q1 - 1:
                continue
            kt, vt = k[..., k0:k1, :], v[..., k0:k1, :]
            sc = qt @ kt.transpose(-2, -1) * (s if score_scale else 1.0)
            if causal and causal_mode in ("right", "top_left"):
                future = torch.arange(k0, k1)[None, :] > torch.arange(q0, q1)[:, None] + off
                sc = sc.masked_fill(future, float("-inf"))
            dead = torch.isneginf(lt)[..., None]
            if p_from == "lse":
                p = torch.exp(sc - lt[..., None])
                if guard:
                    p = p.masked_fill(dead, 0.0)
            elif p_from == "exp":
                p = torch.exp(sc)
            else:
                top = sc.amax(-1, keepdim=True)
                e = torch.exp(sc - top.masked_fill(torch.isinf(top), 0.0))
                z = e.sum(-1, keepdim=True)
                p = e / torch.where(z > 0, z, torch.ones_like(z))
            dv[..., k0:k1, :] += p.transpose(-2, -1) @ gt
            ds = p * (gt @ vt.transpose(-2, -1) - dt[..., None])
            share = ds @ kt * (s if grad_scale else 1.0)
            if dq_acc:
                dq[..., q0:q1, :] += share
            else:
                dq[..., q0:q1, :] = share
            if dk_form == "right":
                dk[..., k0:k1, :] += ds.transpose(-2, -1) @ qt * (s if grad_scale else 1.0)
            elif q1 - q0 == k1 - k0:
                dk[..., k0:k1, :] += ds @ qt * (s if grad_scale else 1.0)
            else:
                dk_ok = False
    return dq, dk if dk_ok else None, dv


# (diagnosis id, label, knobs, shows only with causal=True)
VARIANTS = (
    ("fab_no_lse", "P = exp(S)", {"p_from": "exp"}, False),
    ("fab_tile_softmax", "P = softmax over each key tile", {"p_from": "tile"}, False),
    ("fab_scale_missing", "dq, dk without 1/sqrt(d)", {"grad_scale": False}, False),
    ("fab_scale_missing", "scores not scaled before exp(S - lse)", {"score_scale": False}, False),
    ("fab_scale_missing", "no 1/sqrt(d) anywhere", {"score_scale": False, "grad_scale": False}, False),
    ("fab_causal_not_in_backward", "causal ignored in the backward", {"causal_mode": "ignored"}, True),
    ("fab_causal_not_in_backward", "tiles skipped, the diagonal tiles not masked", {"causal_mode": "no_mask"}, True),
    ("fab_causal_top_left", "mask and skip aligned top-left", {"causal_mode": "top_left"}, True),
    ("fab_dq_overwritten", "dq assigned per key tile", {"dq_acc": False}, False),
    ("fab_dk_uses_ds", "dk += dS q", {"dk_form": "ds_q"}, False),
    ("fab_empty_row_nan", "exp(S - lse) on a row with lse = -inf", {"guard": False}, True),
)


def _variant(knobs: dict, causal_only: bool):
    key = tuple(sorted(knobs.items()))

    def run(case: Case):
        a = case.args
        if causal_only and not a["causal"]:
            return None
        memo = case.ctx["memo"]
        if (key, case.ctx["blocks"]) not in memo:  # dq, dk and dv of one input share the tiles' run
            memo[(key, case.ctx["blocks"])] = simulate(a["q"], a["k"], a["v"], a["out"], a["lse"], a["grad_out"],
                                                       a["causal"], *case.ctx["blocks"], **knobs)
        got = memo[(key, case.ctx["blocks"])][case.ctx["pick"]]
        if got is None:
            return None
        got = got.to(case.out_dtype).float()  # rounded as the learner's cast does
        if knobs.get("p_from") == "exp" and _overflows(case):  # fp32 exp(S) is inf there: the NaNs spread anyhow
            return got, torch.ones_like(got, dtype=torch.bool)
        return got

    return run


def _overflows(case: Case) -> bool:
    """Whether some scaled score exceeds log(fp32 max) ~ 88, where exp(S) without lse is inf in fp32."""
    a = case.args
    s = (a["q"].double() @ a["k"].double().transpose(-2, -1)) / math.sqrt(a["q"].shape[-1])
    return bool((s > 80).any())


# ---------------------------------------------------------------- cases


def _off_tile(d: Draw, lo: int, hi: int, *blocks: int) -> int:
    """A length in [lo, hi] that is a multiple of none of `blocks` (so the last tile is partial)."""
    while True:
        n = d.int(lo, hi)
        if all(n % b for b in blocks):
            return n


def _value_case(d: Draw, name: str, shape: tuple[int, int, int, int, int], causal: bool, *, dtype: str = "float32",
                blocks: tuple[int, int] | None = None, scale: float = 1.0, tol: str | None = None) -> list[Case]:
    """The three cases (dq, dk, dv) of one input; out and lse come from the reference forward."""
    from drill.reference.flash import attention_lse

    b, h, t_q, t_k, dh = shape
    q = d.normal(b, h, t_q, dh, dtype=dtype, scale=scale)
    k = d.normal(b, h, t_k, dh, dtype=dtype, scale=scale)
    v = d.normal(b, h, t_k, dh, dtype=dtype)
    g = d.normal(b, h, t_q, dh, dtype=dtype)
    out, lse = attention_lse(q.float(), k.float(), v.float(), causal, impl="math")
    tiles = f"BLOCK_Q={blocks[0]}, BLOCK_K={blocks[1]}" if blocks else "your BLOCK_Q/BLOCK_K"
    args = {"q": q, "k": k, "v": v, "out": out.to(q.dtype), "lse": lse, "grad_out": g, "causal": causal}
    case = call_case(d, f"{name}, {tiles}", TARGET, args, dtype=dtype, out_dtype=q.dtype,
                     module_attrs=dict(zip(tiling.BLOCK_NAMES, blocks, strict=True)) if blocks else None,
                     ctx={"memo": {}, **({"tol": tol} if tol else {}), **({"blocks": blocks} if blocks else {})})
    return elements(case, OUTPUTS)


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    cases: list[Case] = []
    tq = _off_tile(d, 70, 100, 16, 32, 64)
    tk = tq + _off_tile(d, 5, 40, 16, 32, 64)
    cases += _value_case(d, f"fp32 T_q={tq} != T_k={tk}, not causal", (2, 2, tq, tk, d.choice([16, 32])), False)
    tk = _off_tile(d, 33, 50, 16)
    tq = tk + _off_tile(d, 5, 25, 16)
    cases += _value_case(d, f"fp32 T_q={tq} > T_k={tk}, d=8, not causal", (1, 3, tq, tk, 8), False, blocks=(16, 16))
    t = 16 * d.int(2, 4)
    cases += _value_case(d, f"fp32 square tiles T_q = T_k = {t}, not causal", (1, 2, t, t, 16), False,
                         blocks=(16, 16))
    t = _off_tile(d, 40, 62, 16, 32)
    cases += _value_case(d, f"fp32 causal T_q = T_k = {t}", (2, 1, t, t, 16), True, blocks=(16, 32))
    t = 16 * d.int(2, 3)
    cases += _value_case(d, f"fp32 causal square tiles T_q = T_k = {t}", (1, 2, t, t, 16), True, blocks=(16, 16))
    tq = _off_tile(d, 20, 45, 16, 32)
    tk = tq + _off_tile(d, 20, 40, 16, 32)
    cases += _value_case(d, f"fp32 causal T_q={tq} < T_k={tk} (bottom-right)", (1, 2, tq, tk, 16), True,
                         blocks=(32, 16))
    tk = _off_tile(d, 12, 28, 16)
    tq = tk + _off_tile(d, 20, 30, 16)  # rows 0 .. tq-tk-1 see no key; the boundary is inside a query tile
    cases += _value_case(d, f"fp32 causal T_q={tq} > T_k={tk} (rows with no visible key)", (2, 1, tq, tk, 8), True,
                         blocks=(16, 16))
    tq = _off_tile(d, 20, 44, 16)
    cases += _value_case(d, f"fp32 causal T_k = T_q + 1 = {tq + 1}", (1, 2, tq, tq + 1, 16), True, blocks=(16, 16))
    tq, tk = _off_tile(d, 20, 40, 16), _off_tile(d, 40, 70, 16)
    cases += _value_case(d, f"fp32 large logits (|q.k|/sqrt(d) ~ 1e2), T_q={tq}, T_k={tk}", (1, 2, tq, tk, 16),
                         False, blocks=(16, 16), scale=10.0, tol="float32_large_logits")
    tk = _off_tile(d, 40, 70, 16)
    cases += _value_case(d, f"fp32 decode step T_q=1, causal, T_k={tk}", (2, 2, 1, tk, 16), True, blocks=(16, 16))
    tq = _off_tile(d, 50, 90, 16, 32, 64)
    tk = tq + _off_tile(d, 30, 70, 16, 32, 64)
    cases += _value_case(d, f"fp32 causal T_q={tq} < T_k={tk}", (1, 2, tq, tk, 16), True)
    t = _off_tile(d, 33, 60, 16)
    cases += _value_case(d, f"fp16 causal T_q = T_k = {t}", (1, 2, t, t, 16), True, dtype="float16", blocks=(16, 16))
    tq, tk = _off_tile(d, 70, 120, 16, 32, 64), _off_tile(d, 70, 130, 16, 32, 64)
    cases += _value_case(d, f"bf16 T_q={tq}, T_k={tk}, not causal", (1, 2, tq, tk, 16), False, dtype="bfloat16")
    tk = _off_tile(d, 12, 28, 16, 32)
    tq = tk + _off_tile(d, 20, 30, 16, 32)
    cases += _value_case(d, f"fp16 causal T_q={tq} > T_k={tk} (rows with no visible key)", (1, 2, tq, tk, 16), True,
                         dtype="float16", blocks=(16, 32))
    tq, tk = _off_tile(d, 20, 40, 16), _off_tile(d, 30, 60, 16)
    probe = _value_case(d, f"repeat call: two calls, q (1,2,{tq},16), {tk} keys", (1, 2, tq, tk, 16), False,
                        blocks=(16, 16))[0]
    cases.append(repeat_after(d, probe, {"causal": False, "lse": _lse_like(probe)}))  # one probe (on dq)
    return interleaved(twice_probes(cases), _tiling_cases(seed), seed)


def _lse_like(case: Case) -> torch.Tensor:
    """A plausible lse for the probe's first call (redrawn q, k: any finite row values do; it is not graded)."""
    return case.args["lse"] + 0.25


def _tiling_cases(seed: int) -> list[Case]:
    cases = []
    for i, (name, extra, blocks) in enumerate(tiling.drawn_cases(seed)):
        extra = {"seed": (seed * 37 + i) % 2**31, "backward": True, **extra}
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
                              "unknown", short="could not measure", diagnosis=FB["fab_tiling_unmeasured"])
        return tiling.judge_backward(got, causal=bool(case.extra["causal"]), blocks=tuple(blocks),
                                     own=case.ctx.get("own"), grader_set=bool(case.module_attrs), diagnoses=ROLES)

    return judge


def advise(cases: list[Case], gots: list) -> list[str]:
    """fab_extra_passes: the first tiling case whose q.k work exceeds two passes over the visible tiles."""
    for case, got in zip(cases, gots, strict=False):
        if case.kind != tiling.KIND:
            continue
        note = tiling.extra_passes(got, bool(case.extra["causal"]))
        if note is not None:
            return [f"{FB['fab_extra_passes'].id}: {note} in test '{case.name}' (D recomputed from P, or a pass per "
                    "gradient?)"]
    return []


def reference(case: Case):
    if case.kind == tiling.KIND:
        return None, {}
    from drill.reference.attention import sdpa

    a = case.args
    leaves = [a[like].detach().float().requires_grad_(True) for _, like in OUTPUTS]
    mask = causal_mask(a["q"].shape[-2], a["k"].shape[-2]) if a["causal"] else None
    out = sdpa(*leaves, mask, impl="math")
    (out * a["grad_out"].float()).sum().backward()
    return leaves[case.ctx["pick"]].grad.detach(), {}


def prepare(cases: list[Case], attrs: dict):
    """The file's own BLOCK_Q / BLOCK_K, checked, handed to every case (the variants and the tiling judge need them)."""
    own, problem = tiling.own_blocks(attrs)
    if own is None:
        return FB["fab_block_invalid"], problem
    for case in cases:
        case.ctx["own"] = own
        case.ctx.setdefault("blocks", own)
    return None


SPEC = Spec(
    name=TARGET,
    graded=(TARGET,),
    make_cases=make_cases,
    reference=reference,
    tolerances=TOLERANCES,
    bugs=tuple(Bug(FB[i], _variant(knobs, causal_only), label) for i, label, knobs, causal_only in VARIANTS),
    forbidden=FORBIDDEN,
    forbidden_classes=FORBIDDEN_ATTENTION_CLASSES,
    report_attrs=tiling.BLOCK_NAMES,
    prepare=prepare,
    advise=advise,
)
