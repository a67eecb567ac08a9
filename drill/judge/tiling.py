"""flash_attention's tiling, graded and failing: measured in the child, judged in the parent.

The point of FlashAttention is that the T_q x T_k score matrix never exists:
only a tile of BLOCK_Q x BLOCK_K scores per (batch, head) is alive at a
time, and with causal attention the tiles entirely above the diagonal are
never computed. A "tiling" case checks both, on inputs the child draws
itself (their values are graded by the ordinary cases):

- child side (`run_case`, loaded by path like chain.py, torch only): the
  block sizes in effect are the module's BLOCK_Q / BLOCK_K at call time (the
  grader may have set them, spec.Case.module_attrs); T_q and T_k are given
  or derived from them; the call runs under `audit.ScoreTracker`, which
  follows score provenance from the q and k it was handed (see there). The
  measurement comes back as one int64 vector (`FIELDS`).
- parent side (`judge`): the largest float score storage against BLOCK_Q *
  BLOCK_K per (batch, head) (`flash_not_tiled`, or `flash_blocks_ignored`
  when that tensor is exactly the file's own tile size although the grader
  set others), then with causal=True the scores computed against the
  minimum of the tile grid, both in scores and in q.k products
  (`flash_causal_tiles_not_skipped`). A run in
  which the tracker saw no score tensor is `flash_tiling_unmeasured`: a
  failure, never a pass.

Like the audits, the measurement is reported by the learner's process; a
forged one could pass these tests, never the value tests.
"""

from __future__ import annotations

import math
from typing import Any

import torch

KIND = "tiling"
BLOCK_NAMES = ("BLOCK_Q", "BLOCK_K")
BLOCK_RANGE = (16, 256)
DTYPES = ("", "float32", "float16", "bfloat16", "float64")
SHAPE_DIMS = 6
FIELDS = ("version", "score_storages", "products", "computed", "largest_per_bh", "largest_numel", "largest_line",
          "largest_dtype", "largest_ndim", *(f"shape{i}" for i in range(SHAPE_DIMS)), "t_q", "t_k", "block_q",
          "block_k", "batch", "heads")
VERSION = 1


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
    with torch.no_grad():
        tracker = audit.ScoreTracker({audit._ptr(q): "Q", audit._ptr(k): "K"}, b * h, line_of)
        with tracker:
            result = fn(q, k, v, bool(extra["causal"]))
        del result
    big = tracker.largest
    shape = (list(big["shape"]) + [0] * SHAPE_DIMS)[:SHAPE_DIMS]
    dtype = DTYPES.index(big["dtype"]) if big["dtype"] in DTYPES else 0
    values = [VERSION, tracker.score_storages, tracker.products, tracker.computed, big["per_bh"], big["numel"],
              big["line"], dtype, len(big["shape"]), *shape, t_q, t_k, bq, bk, b, h]
    return {"out": torch.tensor(values, dtype=torch.int64)}


# --------------------------------------------------------------- parent side


def parse(got: Any) -> dict[str, int] | None:
    """The measurement as a dict, or None when it is not one (wrong length, dtype or version)."""
    if not isinstance(got, torch.Tensor) or got.dtype != torch.int64 or tuple(got.shape) != (len(FIELDS),):
        return None
    data = dict(zip(FIELDS, (int(x) for x in got.tolist()), strict=True))
    return data if data["version"] == VERSION else None


def min_scores(t_q: int, t_k: int, bq: int, bk: int) -> tuple[int, int, int]:
    """(scores, tiles, all tiles): what computing exactly the tiles not entirely above the diagonal costs."""
    offset = t_k - t_q
    scores = tiles = total = 0
    for q0 in range(0, t_q, bq):
        q1 = min(q0 + bq, t_q)
        for k0 in range(0, t_k, bk):
            k1 = min(k0 + bk, t_k)
            total += 1
            if k0 <= offset + q1 - 1:  # some query of the tile sees the tile's first key
                scores += (q1 - q0) * (k1 - k0)
                tiles += 1
    return scores, tiles, total


def judge(got: Any, *, causal: bool, blocks: tuple[int, int], own: tuple[int, int] | None, grader_set: bool,
          diagnoses: dict[str, Any]) -> Any:
    """A Comparison for one tiling case (see the module docstring); `own` is the file's own (BLOCK_Q, BLOCK_K)."""
    from drill.judge.compare import Comparison

    def fail(message: str, short: str, diagnosis_id: str) -> Any:
        return Comparison(False, "measurement", message, short=short, diagnosis=diagnoses[diagnosis_id])

    data = parse(got)
    if data is None:
        return fail("could not measure the tiling: the measurement was malformed", "could not measure",
                    "flash_tiling_unmeasured")
    if data["products"] == 0 or data["score_storages"] == 0:
        return fail("could not measure the tiling: no q.k score tensor was seen during the call (computed on another "
                    "thread, outside PyTorch ops, or by an op the tracker does not follow)",
                    "could not measure: no score tensor seen", "flash_tiling_unmeasured")
    bq, bk = blocks
    limit = bq * bk
    per_bh = data["largest_per_bh"]
    shape = tuple(data[f"shape{i}"] for i in range(min(data["largest_ndim"], SHAPE_DIMS)))
    dtype = DTYPES[data["largest_dtype"]] if 0 < data["largest_dtype"] < len(DTYPES) else "float"
    line = f" at line {data['largest_line']}" if data["largest_line"] else ""
    what = f"a {dtype} score tensor of shape {shape}{line}"
    if per_bh > limit:
        scores = f"{per_bh} scores per (batch, head), more than BLOCK_Q * BLOCK_K = {bq} * {bk} = {limit}"
        # The file's own tile size, although the grader set another: only telling when the lengths exceed that tile
        # (else a whole row block against every key fits in it too).
        if grader_set and own is not None and own != blocks and per_bh <= own[0] * own[1] and len(shape) >= 2 \
                and shape[-2] <= own[0] and shape[-1] <= own[1] and data["t_q"] > own[0] and data["t_k"] > own[1]:
            return fail(f"with BLOCK_Q={bq}, BLOCK_K={bk} set by the grader, the code held {what}: {scores}; that "
                        f"is a tile of the file's own {own[0]} x {own[1]}",
                        f"tiles of {own[0]}x{own[1]}, not the {bq}x{bk} set", "flash_blocks_ignored")
        return fail(f"the code held {what}: {scores}", f"{shape} scores alive{line} > {bq}x{bk}", "flash_not_tiled")
    if causal:
        need, tiles, total = min_scores(data["t_q"], data["t_k"], bq, bk)
        # Both counts over the minimum: a padded last tile computes extra scores in the right number of
        # products, a finer loop (rows, sub-tiles) more products over the right scores; neither is waste.
        if data["computed"] > need and data["products"] > tiles:
            return fail(f"with causal=True (T_q={data['t_q']}, T_k={data['t_k']}, tiles {bq}x{bk}) the code computed "
                        f"{data['computed']} scores in {data['products']} q.k products; skipping the tiles entirely "
                        f"above the diagonal leaves {need} ({tiles} of {total} tiles)",
                        f"{data['computed']} scores computed, {need} needed", "flash_causal_tiles_not_skipped")
    return Comparison(True, "", "")
