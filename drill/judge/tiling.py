"""flash_attention's tiling, graded and failing: measured in the child, judged in the parent.

The point of FlashAttention is that the T_q x T_k score matrix never exists:
only a tile of BLOCK_Q x BLOCK_K scores per (batch, head) is alive at a
time, and with causal attention the tiles entirely above the diagonal are
never computed. A "tiling" case checks both, on inputs the child draws
itself, and grades the measured call's answer as well:

- child side (`run_case`, loaded by path like chain.py, torch only): the
  block sizes in effect are the module's BLOCK_Q / BLOCK_K at call time (the
  grader may have set them, spec.Case.module_attrs); T_q and T_k are given
  or derived from them; the call runs under `audit.ScoreTracker`, which
  follows score provenance from the q and k it was handed (see there), in
  the grad mode the value cases run in (issue 30 §2: under no_grad a file
  could tell it was measured), and its answer is checked against
  attention's on the same inputs (`values`). The measurement comes back as
  one int64 vector (`FIELDS`).
- parent side (`judge`): the largest float score storage against BLOCK_Q *
  BLOCK_K per (batch, head) (`flash_not_tiled`, or `flash_blocks_ignored`
  when that tensor is exactly the file's own tile size although the grader
  set others), then with causal=True the scores computed against the
  minimum of the tile grid, both in scores and in q.k products
  (`flash_causal_tiles_not_skipped`), and last the measured call's answer
  (`flash_measured_values_differ`, named only when the value tests pass). A run in
  which the tracker saw no score tensor is `flash_tiling_unmeasured`: a
  failure, never a pass.

flash_attention_backward's tiling cases (`extra["backward"]`) call
fn(q, k, v, out, lse, grad_out, causal) with (out, lse) computed before the
tracker starts, and label grad_out "G" and v "V" as well, so dP = grad_out
v^T is a score-like tensor too; with causal=True the child also measures a
causal=False call on the same inputs (`nc_products`), and `judge_backward`
bounds the ratio of q.k products by the share of visible tiles.
`extra_passes` is that exercise's advisory: more than two passes.

Like the audits, the measurement is reported by the learner's process; a
forged one could pass these tests, never the value tests.
"""

from __future__ import annotations

import math
import random
from typing import Any

import torch

KIND = "tiling"
BLOCK_NAMES = ("BLOCK_Q", "BLOCK_K")
BLOCK_RANGE = (16, 256)
DTYPES = ("", "float32", "float16", "bfloat16", "float64")
SHAPE_DIMS = 6
FIELDS = ("version", "score_storages", "products", "computed", "largest_per_bh", "largest_numel", "largest_line",
          "largest_dtype", "largest_ndim", *(f"shape{i}" for i in range(SHAPE_DIMS)), "t_q", "t_k", "block_q",
          "block_k", "batch", "heads", "largest_kind", "d_from_p", "nc_products", "nc_computed", "values")
VERSION = 3
# values: 1 when the measured call's answer is attention's on its inputs (rows that see a key), 0 when not.
VALUE_ATOL, VALUE_RTOL = 1e-4, 1e-3  # fp32 tiles against fp32 math: a right online softmax is ~1e-6 off
KINDS = ("", "scores", "dP")  # largest_kind: scores, probabilities or dS (from q.k), or dP (grad_out v^T) alone


def block_problem(value: Any, name: str) -> str | None:
    """Why `value` is not a legal tile size (a power of two from 16 to 256), or None."""
    lo, hi = BLOCK_RANGE
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{name} is {type(value).__name__} {value!r:.40}, not an int"
    if not (lo <= value <= hi) or value & (value - 1):
        return f"{name} = {value} is not a power of two from {lo} to {hi}"
    return None


def sequence_length(spec: Any, block: int) -> int:
    """A length given as an int, or {"per_block": f} = ceil(f * block) (so a case scales with the file's own tiles)."""
    if isinstance(spec, dict):
        return int(math.ceil(float(spec["per_block"]) * block))
    return int(spec)


def drawn_cases(seed: int) -> list[tuple[str, dict[str, Any], tuple[int, int] | None]]:
    """The tiling cases of one seed, (name, extra, grader-set blocks or None), for flash_attention and its backward.

    Each scenario keeps its property (T_q = T_k, T_q < T_k, query tiles that see no key, lengths off the tile
    grid), and its sizes are drawn per seed from the value cases' ranges, batch and heads included: with fixed
    sizes (once B = H = 1 and T = 69 everywhere) a file could tell a measured call from a graded one by its
    shape and tile only then (issue 30 §2). Lengths given per block scale with the file's own tiles."""
    rng = random.Random(seed * 104729 + 3)

    def off(lo: int, hi: int, *blocks: int) -> int:  # a length no tile size divides: the last tile is partial
        while True:
            n = rng.randint(lo, hi)
            if all(n % b for b in blocks):
                return n

    def sizes() -> dict[str, int]:
        b, h = rng.choice([(1, 2), (2, 1), (2, 2), (1, 3), (3, 1)])
        return {"batch": b, "heads": h, "d": rng.choice([8, 16])}

    t = off(60, 80, 16)
    rows = [
        ("your tiles, not causal", {"t_q": {"per_block": round(rng.uniform(2.3, 2.9), 2)},
                                    "t_k": {"per_block": round(rng.uniform(3.0, 3.6), 2)}, "causal": False}, None),
        ("BLOCK_Q=16, BLOCK_K=32 set by the grader, not causal",
         {"t_q": off(60, 80, 16, 32), "t_k": off(81, 100, 16, 32), "causal": False}, (16, 32)),
        ("BLOCK_Q=32, BLOCK_K=16, not causal", {"t_q": off(65, 85, 16, 32), "t_k": off(40, 60, 16, 32),
                                                "causal": False}, (32, 16)),
        ("causal T_q = T_k, BLOCK_Q=BLOCK_K=16 (tiles above the diagonal skipped?)",
         {"t_q": t, "t_k": t, "causal": True}, (16, 16)),
        ("causal T_q < T_k, BLOCK_Q=32, BLOCK_K=16", {"t_q": off(33, 47, 16, 32), "t_k": off(70, 85, 16, 32),
                                                      "causal": True}, (32, 16)),
        ("causal T_q > T_k, BLOCK_Q=BLOCK_K=16 (query tiles that see no key compute nothing)",
         {"t_q": off(65, 80, 16), "t_k": off(20, 35, 16), "causal": True}, (16, 16)),
        ("your tiles, causal", {"t_q": {"per_block": round(rng.uniform(3.0, 3.4), 2)},
                                "t_k": {"per_block": round(rng.uniform(3.5, 3.9), 2)}, "causal": True}, None),
    ]
    out = []
    for name, extra, blocks in rows:
        drawn = {**sizes(), **extra}
        lengths = "" if isinstance(drawn["t_q"], dict) else f", T_q={drawn['t_q']}, T_k={drawn['t_k']}"
        out.append((f"tiling: {name}, B={drawn['batch']}, H={drawn['heads']}, d={drawn['d']}{lengths}", drawn, blocks))
    return out


# ---------------------------------------------------------------- child side


class ContractError(Exception):
    """Replaced by the child's own ContractError when it loads this file (as in chain.py)."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


def run_case(mod: Any, case: dict, tensors: dict, host: Any) -> dict[str, torch.Tensor]:
    """Call the learner's function once under the score tracker; returns {"out": measurement}."""
    extra = case["extra"]
    blocks = []
    for name in BLOCK_NAMES:
        value = mod.__dict__.get(name)
        problem = block_problem(value, name)
        if problem is not None:
            raise ContractError("wrong_type", problem)
        blocks.append(value)
    bq, bk = blocks
    b, h, d = int(extra["batch"]), int(extra["heads"]), int(extra["d"])
    t_q, t_k = sequence_length(extra["t_q"], bq), sequence_length(extra["t_k"], bk)
    gen = torch.Generator().manual_seed(int(extra["seed"]))
    q, k, v = (torch.randn(b, h, t, d, generator=gen) for t in (t_q, t_k, t_k))
    audit = host.extension("audit")

    def line_of():
        with host.trusted():
            return host.learner_line_of_stack()

    fn = getattr(mod, case["target"])
    causal = bool(extra["causal"])
    backward = bool(extra.get("backward"))
    # The calls run in the grad mode the graded cases run in (enabled, inputs not requiring grad): a measurement
    # under no_grad could be told apart with torch.is_grad_enabled(), and a file tiled only then (issue 30 §2).
    with torch.no_grad():  # the grader's own inputs for the backward: (out, lse), before the tracker starts
        g = torch.randn(b, h, t_q, d, generator=gen) if backward else None
        given = {c: _forward(q, k, v, c) for c in {causal, False}} if backward else {}
    if backward:
        sources = {audit._ptr(q): "Q", audit._ptr(k): "K", audit._ptr(v): "V", audit._ptr(g): "G"}

        def call(c: bool) -> Any:
            return fn(q, k, v, *given[c], g, c)
    else:
        sources = {audit._ptr(q): "Q", audit._ptr(k): "K"}

        def call(c: bool) -> Any:
            return fn(q, k, v, c)
    tracker = audit.ScoreTracker(sources, b * h, line_of)
    with tracker:
        result = call(causal)
    answered = _answers(result, q, k, v, g, causal)  # the measured call is graded too
    del result
    nc_products = nc_computed = 0
    if backward and causal:  # the same inputs with causal=False: the products ratio's denominator
        plain = audit.ScoreTracker(sources, b * h, line_of)
        with plain:
            result = call(False)
        answered = answered and _answers(result, q, k, v, g, False)
        del result
        nc_products, nc_computed = plain.products, plain.computed
    elif backward:
        nc_products, nc_computed = tracker.products, tracker.computed
    big = tracker.largest
    shape = (list(big["shape"]) + [0] * SHAPE_DIMS)[:SHAPE_DIMS]
    dtype = DTYPES.index(big["dtype"]) if big["dtype"] in DTYPES else 0
    values = [VERSION, tracker.score_storages, tracker.products, tracker.computed, big["per_bh"], big["numel"],
              big["line"], dtype, len(big["shape"]), *shape, t_q, t_k, bq, bk, b, h, int(big.get("kind", 0)),
              tracker.d_from_p, nc_products, nc_computed, int(answered)]
    return {"out": torch.tensor(values, dtype=torch.int64)}


def _answers(result: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor | None,
             causal: bool) -> bool:
    """Whether a measured call returned attention's answer on its inputs: (out, lse) for the forward, (dq, dk, dv)
    for the backward (g given), each within VALUE_ATOL/RTOL, on the query rows that see a key (the only ones the
    contract fixes; key-side gradients whole). Anything else is False."""
    with torch.no_grad():
        want = _forward(q, k, v, causal) if g is None else _gradients(q, k, v, g, causal)
        if not isinstance(result, (tuple, list)) or len(result) != len(want):
            return False
        t_q, t_k = q.shape[-2], k.shape[-2]
        seen = torch.arange(t_q) + (t_k - t_q) >= 0 if causal else torch.ones(t_q, dtype=torch.bool)
        query_side = (0, 1) if g is None else (0,)  # out and lse, or dq
        for i, (got, ref) in enumerate(zip(result, want, strict=True)):
            if type(got) is not torch.Tensor or tuple(got.shape) != tuple(ref.shape) or not got.dtype.is_floating_point:
                return False
            got, ref = got.detach().double(), ref.double()
            if i in query_side:  # rows along dim 2 (out, dq: (B, H, T_q, d); lse: (B, H, T_q))
                got, ref = got[:, :, seen], ref[:, :, seen]
            if not torch.allclose(got, ref, atol=VALUE_ATOL, rtol=VALUE_RTOL):
                return False
    return True


def _gradients(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
               causal: bool) -> tuple[torch.Tensor, ...]:
    """(dq, dk, dv) of attention's out for upstream g, in float64, by the closed form (autograd is the backward
    exercise's forbidden op, trapped in this process): dV = P^T g, dS = P (g V^T - rowsum(g out)), dQ = dS K / sqrt(d),
    dK = dS^T Q / sqrt(d)."""
    q, k, v, g = (t.double() for t in (q, k, v, g))
    p, _ = _probabilities(q, k, causal)
    ds = p * (g @ v.transpose(-2, -1) - (g * (p @ v)).sum(-1, keepdim=True))
    scale = 1.0 / math.sqrt(q.shape[-1])
    return ds @ k * scale, ds.transpose(-2, -1) @ q * scale, p.transpose(-2, -1) @ g


def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) of attention, bottom-right causal; a row that sees no key gets 0 and -inf (the backward's input)."""
    p, lse = _probabilities(q, k, causal)
    return p @ v, lse


def _probabilities(q: torch.Tensor, k: torch.Tensor, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(P, lse): softmax probabilities over the keys (bottom-right causal) and their log-normaliser; a row that
    sees no key has P = 0 and lse = -inf."""
    t_q, t_k = q.shape[-2], k.shape[-2]
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        future = torch.arange(t_k)[None, :] > torch.arange(t_q)[:, None] + (t_k - t_q)
        s = s.masked_fill(future, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.exp(s - lse.masked_fill(torch.isinf(lse), 0.0)[..., None]), lse


# --------------------------------------------------------------- parent side


def own_blocks(attrs: dict) -> tuple[tuple[int, int] | None, str]:
    """The file's own (BLOCK_Q, BLOCK_K) from the attributes the child read back (spec.report_attrs), or
    (None, why not): missing, not an int, not a power of two from 16 to 256."""
    own = []
    for name in BLOCK_NAMES:
        info = attrs.get(name) if isinstance(attrs.get(name), dict) else {}
        if not info.get("present"):
            return None, f"{name} is not defined at module level"
        problem = block_problem(info.get("value"), name) if info.get("type") == "int" else \
            f"{name} is a {info.get('type')}, not an int"
        if problem is not None:
            return None, problem
        own.append(int(info["value"]))
    return (own[0], own[1]), ""


# What a real measurement can hold: counts and sizes of a graded call (T up to a few thousand). The child's
# numbers are the learner's to forge; the judge's arithmetic below is bounded by these (a forged T = 2**62 with
# 1-wide tiles once kept the parent's tile count spinning for minutes, issue 30).
MAX_VALUE = 2**48
MAX_LENGTH = 2**16


def parse(got: Any) -> dict[str, int] | None:
    """The measurement as a dict, or None when it is not one (wrong length, dtype or version, or a value no real
    call gives: negative, past MAX_VALUE, lengths past MAX_LENGTH, tiles narrower than 1)."""
    if not isinstance(got, torch.Tensor) or got.dtype != torch.int64 or tuple(got.shape) != (len(FIELDS),):
        return None
    data = dict(zip(FIELDS, (int(x) for x in got.tolist()), strict=True))
    if data["version"] != VERSION or any(not 0 <= v <= MAX_VALUE for v in data.values()):
        return None
    if not (data["t_q"] <= MAX_LENGTH and data["t_k"] <= MAX_LENGTH and data["block_q"] >= 1 and data["block_k"] >= 1):
        return None
    return data


def min_scores(t_q: int, t_k: int, bq: int, bk: int) -> tuple[int, int, int]:
    """(scores, tiles, all tiles): what computing exactly the tiles not entirely above the diagonal costs.

    One step per row block: its visible tiles are those whose first key some query of the block sees."""
    offset = t_k - t_q
    scores = tiles = 0
    per_row = -(-t_k // bk)
    for q0 in range(0, t_q, bq):
        q1 = min(q0 + bq, t_q)
        last_key = min(t_k - 1, offset + q1 - 1)  # the last key any query of this block sees
        if last_key < 0:
            continue
        seen = last_key // bk + 1  # tiles starting at 0, bk, ... up to last_key
        tiles += seen
        scores += (q1 - q0) * min(seen * bk, t_k)
    return scores, tiles, per_row * -(-t_q // bq)


def _memory(data: dict[str, int], blocks: tuple[int, int], own: tuple[int, int] | None, grader_set: bool,
            noun: str = "score", plural: str = "scores") -> tuple[str, str, str] | None:
    """(message, short, "not_tiled" or "blocks_ignored") when more than a tile of scores was alive, else None."""
    bq, bk = blocks
    limit = bq * bk
    per_bh = data["largest_per_bh"]
    if per_bh <= limit:
        return None
    shape = tuple(data[f"shape{i}"] for i in range(min(data["largest_ndim"], SHAPE_DIMS)))
    dtype = DTYPES[data["largest_dtype"]] if 0 < data["largest_dtype"] < len(DTYPES) else "float"
    line = f" at line {data['largest_line']}" if data["largest_line"] else ""
    held = f"a {dtype} {noun} tensor of shape {shape}{line}"
    scores = f"{per_bh} {plural} per (batch, head), more than BLOCK_Q * BLOCK_K = {bq} * {bk} = {limit}"
    # The file's own tile size, although the grader set another: only telling when the lengths exceed that tile
    # (else a whole row block against every key fits in it too).
    if grader_set and own is not None and own != blocks and per_bh <= own[0] * own[1] and len(shape) >= 2 \
            and shape[-2] <= own[0] and shape[-1] <= own[1] and data["t_q"] > own[0] and data["t_k"] > own[1]:
        return (f"with BLOCK_Q={bq}, BLOCK_K={bk} set by the grader, the code held {held}: {scores}; that is a tile "
                f"of the file's own {own[0]} x {own[1]}", f"tiles of {own[0]}x{own[1]}, not the {bq}x{bk} set",
                "blocks_ignored")
    return f"the code held {held}: {scores}", f"{shape} {plural} alive{line} > {bq}x{bk}", "not_tiled"


def _unmeasured(got: Any) -> tuple[dict[str, int] | None, str, str]:
    data = parse(got)
    if data is None:
        return None, "could not measure the tiling: the measurement was malformed", "could not measure"
    if data["products"] == 0 or data["score_storages"] == 0:
        return None, ("could not measure the tiling: no q.k score tensor was seen during the call (computed on "
                      "another thread, outside PyTorch ops, or by an op the tracker does not follow)"), \
            "could not measure: no score tensor seen"
    return data, "", ""


# A measured call's wrong answer: named only where every value test passes (diagnose.judged_failure), since a
# file with a value mistake gives it in the measured calls too, and the value mistake is the one to name.
MEASURED_VALUES = "measured_values"


def _values_failure(data: dict[str, int], diagnosis: Any) -> Any:
    from drill.judge.compare import Comparison

    return Comparison(False, MEASURED_VALUES,
                      f"the measured call (T_q={data['t_q']}, T_k={data['t_k']}, tiles {data['block_q']}x"
                      f"{data['block_k']}) returned another answer than attention's on its inputs (beyond atol "
                      f"{VALUE_ATOL:g}, rtol {VALUE_RTOL:g}): the calls the grader measures are graded like the others",
                      short="measured call's answer wrong", diagnosis=diagnosis)


def judge(got: Any, *, causal: bool, blocks: tuple[int, int], own: tuple[int, int] | None, grader_set: bool,
          diagnoses: dict[str, Any]) -> Any:
    """A Comparison for one tiling case (see the module docstring); `own` is the file's own (BLOCK_Q, BLOCK_K)."""
    from drill.judge.compare import Comparison

    def fail(message: str, short: str, diagnosis_id: str) -> Any:
        return Comparison(False, "measurement", message, short=short, diagnosis=diagnoses[diagnosis_id])

    data, message, short = _unmeasured(got)
    if data is None:
        return fail(message, short, "flash_tiling_unmeasured")
    bq, bk = blocks
    memory = _memory(data, blocks, own, grader_set)
    if memory is not None:
        message, short, key = memory
        return fail(message, short, "flash_blocks_ignored" if key == "blocks_ignored" else "flash_not_tiled")
    if causal:
        need, tiles, total = min_scores(data["t_q"], data["t_k"], bq, bk)
        # Both counts over the minimum: a padded last tile computes extra scores in the right number of
        # products, a finer loop (rows, sub-tiles) more products over the right scores; neither is waste.
        if data["computed"] > need and data["products"] > tiles:
            return fail(f"with causal=True (T_q={data['t_q']}, T_k={data['t_k']}, tiles {bq}x{bk}) the code computed "
                        f"{data['computed']} scores in {data['products']} q.k products; skipping the tiles entirely "
                        f"above the diagonal leaves {need} ({tiles} of {total} tiles)",
                        f"{data['computed']} scores computed, {need} needed", "flash_causal_tiles_not_skipped")
    if not data["values"]:
        return _values_failure(data, diagnoses["flash_measured_values_differ"])
    return Comparison(True, "", "")


# The backward's ids, by the role each plays in `judge_backward` (the spec maps them to its diagnoses).
BACKWARD_ROLES = ("unmeasured", "values", "full_p", "d_from_p", "blocks_ignored", "causal_tiles")


def judge_backward(got: Any, *, causal: bool, blocks: tuple[int, int], own: tuple[int, int] | None,
                   grader_set: bool, diagnoses: dict[str, Any]) -> Any:
    """flash_attention_backward's tiling case: memory as the forward's (P, dP and dS counted with the scores, and a
    row-sum of P * dP named), then with causal=True the q.k products against a causal=False call on the same inputs:
    their ratio may not exceed the share of tiles not entirely above the diagonal. `diagnoses` maps each of
    BACKWARD_ROLES to a Diagnosis."""
    from drill.judge.compare import Comparison

    def fail(message: str, short: str, role: str) -> Any:
        return Comparison(False, "measurement", message, short=short, diagnosis=diagnoses[role])

    data, message, short = _unmeasured(got)
    if data is None:
        return fail(message, short, "unmeasured")
    noun = "dP" if data["largest_kind"] == 2 else "score/probability/dS"
    memory = _memory(data, blocks, own, grader_set, noun, "dP values" if noun == "dP" else "scores")
    if memory is not None:
        message, short, key = memory
        if key == "blocks_ignored":
            return fail(message, short, "blocks_ignored")
        if data["d_from_p"]:
            return fail(message + "; D was summed from P * dP over those rows (D = rowsum(grad_out * out) needs no "
                        "probabilities)", short, "d_from_p")
        return fail(message, short, "full_p")
    if causal:
        bq, bk = blocks
        _, tiles, total = min_scores(data["t_q"], data["t_k"], bq, bk)
        got_c, got_nc = data["products"], data["nc_products"]
        if got_nc <= 0:
            return fail("could not measure the tiling: the causal=False call made no q.k product", "could not measure",
                        "unmeasured")
        if got_c * total > tiles * got_nc:  # products ratio above the visible tiles' share, exactly
            return fail(f"with causal=True (T_q={data['t_q']}, T_k={data['t_k']}, tiles {bq}x{bk}) the code made "
                        f"{got_c} q.k products against {got_nc} with causal=False on the same inputs, a ratio of "
                        f"{got_c / got_nc:.3f}; skipping the tiles entirely above the diagonal gives at most "
                        f"{tiles}/{total} = {tiles / total:.3f}",
                        f"causal/plain products {got_c}/{got_nc} > {tiles}/{total}", "causal_tiles")
    if not data["values"]:
        return _values_failure(data, diagnoses["values"])
    return Comparison(True, "", "")


def extra_passes(got: Any, causal: bool) -> str | None:
    """The advisory of one backward tiling case: q.k work beyond two passes over the visible tiles, or None.

    Both counts must exceed two passes (as the forward's causal check): a finer loop makes more products over
    the right scores, a padded tile more scores in the right products."""
    data = parse(got)
    if data is None or not data["products"]:
        return None
    need, tiles, _ = min_scores(data["t_q"], data["t_k"], data["block_q"], data["block_k"]) if causal else \
        (data["t_q"] * data["t_k"], -(-data["t_q"] // data["block_q"]) * -(-data["t_k"] // data["block_k"]), 0)
    if data["products"] > 2 * tiles and data["computed"] > 2 * need:
        return (f"{data['products']} q.k products computing {data['computed']} scores (T_q={data['t_q']}, "
                f"T_k={data['t_k']}, causal={causal}): more than two passes over the {tiles} visible tiles "
                f"({need} scores each pass)")
    return None
