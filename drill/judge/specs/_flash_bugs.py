"""Known FlashAttention mistakes, as one tiled forward pass with a knob per mistake.

What a buggy online softmax outputs depends on the tiling (which key tiles a
row has seen when its max grows, which tiles a skip rule drops), so every
variant runs the tiles itself with the block sizes the case ran with
(`simulate`). It loops over key tiles only: all query rows are processed at
once, each row updated only where the skip rule computes its (query tile,
key tile) pair, which is exactly what a per-query-tile loop does. Computed
in float64 on the case's (already rounded) inputs.

Rows a variant leaves without any computed key are returned as unknown:
what they come out as depends on the learner's guard (0, or 0/0 = NaN).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from drill.judge.spec import Diagnosis
from drill.judge.specs._attention_bugs import D as ATTENTION
from drill.judge.specs._common import diagnoses

FD = diagnoses(
    Diagnosis("flash_no_output_rescale", "Running output not rescaled when the max grows",
              "When a new key tile raises a row's max from m_old to m_new, everything accumulated so far was "
              "weighted by exp(s - m_old); it must be multiplied by exp(m_old - m_new) before the new tile's p @ v "
              "is added. l is rescaled but the output is not, so earlier tiles count too much.",
              "acc = acc * torch.exp(m_old - m_new)[..., None] + p @ v_tile, with the same factor as l."),
    Diagnosis("flash_rescale_inverted", "Rescale factor inverted",
              "The factor that moves old sums to the new max is exp(m_old - m_new) <= 1; exp(m_new - m_old) grows "
              "instead, and on a row's first tile (m_old = -inf) it is inf, and inf * 0 = NaN.",
              "alpha = torch.exp(m_old - m_new) (guard the m = -inf start: it must give 0, not NaN)."),
    Diagnosis("flash_l_not_rescaled", "Running sum l not rescaled",
              "l sums exp(s - m) over the keys seen so far; when m grows, the old part of l must be multiplied by "
              "exp(m_old - m_new) like the output, or the final division (and lse) uses a sum taken against "
              "an older, smaller max.",
              "l = l * alpha + p.sum(-1), with the alpha you apply to the output."),
    Diagnosis("flash_no_final_division", "Final division by l missing",
              "The online softmax accumulates exp(s - m) @ v without normalising; the output is that divided "
              "by l, once, after the last key tile.",
              "After the key loop: out = acc / l[..., None] (0 for rows that saw no key)."),
    Diagnosis("flash_division_per_tile", "Division by l done per tile",
              "Dividing the accumulator by the running l inside the loop normalises the old part again on every "
              "tile (it is already divided by the old l), so earlier tiles shrink; with a single key tile it "
              "happens to be right.",
              "Keep acc unnormalised in the loop and divide once at the end (or, FlashAttention-1 style, "
              "multiply back by l_old * alpha before dividing by l_new)."),
    Diagnosis("flash_lse_without_max", "lse without the running max",
              "l is a sum of exp(s - m), so logsumexp(s) = m + log(l); log(l) alone is off by the row max.",
              "lse = m + torch.log(l) (and -inf for rows that saw no key)."),
    Diagnosis(ATTENTION["missing_scale"].id, "Missing 1/sqrt(d) scaling",
              "The scores are q.k / sqrt(d); without the scale the softmax is too peaked and lse too large.",
              "Multiply q @ k^T by 1/math.sqrt(q.shape[-1]) (or scale q once before the loop)."),
    Diagnosis("flash_scale_twice", "Scale applied twice",
              "The scores are scaled by 1/sqrt(d) twice (q pre-scaled and the scores scaled again): 1/d overall.",
              "Scale once: either q * (1/sqrt(d)) before the loop, or each score tile, not both."),
    Diagnosis("flash_causal_diagonal_skipped", "Causal tile skip off by one: a visible tile skipped",
              "A key tile may be skipped only when it lies entirely above the diagonal, i.e. its first key is "
              "after the last query of the query tile (key k0 > T_k - T_q + q_last); the test used skips tiles "
              "that some query of the tile still sees (often the diagonal tile itself).",
              "Skip key tile [k0, k1) for query tile [q0, q1) only when k0 > (T_k - T_q) + q1 - 1; mask inside "
              "the tiles that cross the diagonal."),
    Diagnosis("flash_causal_top_left", "Causal alignment top-left, not bottom-right",
              "With T_q != T_k, query i sits at position T_k - T_q + i (the queries are the last T_q positions, "
              "as with a KV cache); the code aligns query i with key i, in its mask or in its tile skip.",
              "Use offset = T_k - T_q: key j is visible to query i when j <= offset + i, and tiles are skipped "
              "against the same offset."),
    Diagnosis("flash_masked_row_nan", "NaN on rows with no visible key",
              "A row whose keys in a tile are all masked has m_new = -inf there, and exp(-inf - (-inf)) = NaN; a "
              "row that saw no key at all has l = 0, and 0/0 = NaN. The contract wants zeros and lse = -inf.",
              "Subtract a safe max (m_new where finite, else 0) inside exp, and divide only where l > 0 "
              "(torch.where(l > 0, acc / l, 0)); lse = -inf where l == 0."),
    Diagnosis("flash_softmax_dropped", "Softmax dropped: raw scores used as weights",
              "p = exp(s - m) is computed, but the output accumulates s @ v (the scores themselves), so the "
              "weights are neither positive nor normalised.",
              "Accumulate p @ v_tile, with p the exponentiated, max-subtracted scores."),
    Diagnosis("flash_causal_mask_unapplied", "Causal mask not applied inside the tiles",
              "causal=True is accepted, but the tiles crossing the diagonal are used whole (or every tile is), so "
              "queries attend to keys after their own position.",
              "In a tile that crosses the diagonal, set s to -inf where key position > T_k - T_q + query index."),
    Diagnosis("flash_not_tiled", "Scores not tiled: more than one tile of scores alive",
              "FlashAttention never holds more than BLOCK_Q x BLOCK_K scores per (batch, head): that is the memory "
              "it saves. A tensor of scores or probabilities larger than one tile (a full T_q x T_k matrix, a "
              "row block against every key, or tiles concatenated) was alive during the call.",
              "Loop over query tiles and, inside, over key tiles of BLOCK_K keys; keep only m, l and the output "
              "accumulator across key tiles, never the scores."),
    Diagnosis("flash_blocks_ignored", "BLOCK_Q / BLOCK_K not read at call time",
              "The grader set BLOCK_Q and BLOCK_K to other values before calling, and the code still used the "
              "file's own tile sizes: they were captured when the file was imported (a default argument, a "
              "constant copied into another name) instead of being read from the module when called.",
              "Read the module-level BLOCK_Q and BLOCK_K inside flash_attention, on every call."),
    Diagnosis("flash_causal_tiles_not_skipped", "Causal: tiles entirely above the diagonal computed",
              "With causal=True a key tile whose first key is after the query tile's last query is fully masked; "
              "computing and masking it wastes about half of the work FlashAttention saves.",
              "Stop the key loop (or skip) once k0 > (T_k - T_q) + q1 - 1; a query tile that sees no key at all "
              "computes nothing."),
    Diagnosis("flash_measured_values_differ", "Wrong answer in a tiling test",
              "The tiling tests are graded calls too: the grader measures the tiles of one call and checks that it "
              "returned attention's (out, lse) on those inputs. This one returned other values while the value "
              "tests passed: the code computes differently on some calls (a path taken only for some sizes, "
              "tiles or call counts).",
              "Compute every call the same way; the tiling tests use ordinary inputs and your BLOCK_Q/BLOCK_K or "
              "the grader's."),
    Diagnosis("flash_tiling_unmeasured", "Tiling could not be measured",
              "The grader follows the scores from the q and k it passed through PyTorch's operators; during this "
              "call it saw no q.k product at all (computed on another thread, through NumPy, or by an op it "
              "does not follow), so it cannot confirm the tiling. This counts as a failure, never a pass.",
              "Compute the scores from q and k with ordinary torch ops (q_tile @ k_tile.transpose(-2, -1), "
              "einsum), on the calling thread."),
    Diagnosis("flash_lse_phantom_key", "Running max / lse started at 0, not -inf",
              "The running state must start empty: m = -inf and l = 0 (or a running lse of -inf). Starting it at 0 "
              "(m = 0 with l = 1, or lse = 0) counts one extra key of score 0 and value 0 in every row: with S the "
              "row's sum of exp(scores), the output comes out as out * S / (1 + S) and lse as log(1 + S). It shows "
              "where the scores are small (S near 1) and vanishes for large logits, so it is easy to miss.",
              "Start each query tile with m = -inf and l = 0 (lse = -inf in a running-lse form), and guard "
              "exp(-inf - (-inf)) with a safe max."),
    Diagnosis("flash_lse_empty_row_finite", "lse finite on rows with no visible key",
              "A causal row with T_q > T_k whose query comes before every key sees no key: its softmax sum is 0, "
              "so its logsumexp is log(0) = -inf (the contract's value, also PyTorch's). The output's 0 is right "
              "there, but a finite lse (0, or log of a clamped l such as log(l + 1e-20)) claims the row had mass; "
              "a backward pass or a merge of two attention results would then weigh it.",
              "lse = torch.where(l > 0, m + torch.log(l), float('-inf')); keep the clamp only inside the "
              "division of the output."),
    Diagnosis("flash_block_invalid", "BLOCK_Q / BLOCK_K missing or invalid",
              "The contract asks for module-level BLOCK_Q and BLOCK_K, powers of two from 16 to 256; the grader "
              "reads them to know your tile size.",
              "Define BLOCK_Q = 64 and BLOCK_K = 64 (or other powers of two from 16 to 256) at module level."),
)

# Skip rules: which (query tile [q0, q1), key tile k0) pairs a causal loop computes; off = T_k - T_q.
SKIPS = {
    "right": lambda k0, q0, q1, off: k0 <= off + q1 - 1,
    "first_ge": lambda k0, q0, q1, off: k0 < off + q0,  # j >= i with square tiles: the diagonal tile skipped
    "first_gt": lambda k0, q0, q1, off: k0 <= off + q0,  # compared with the tile's first query, not its last
    "last_ge": lambda k0, q0, q1, off: k0 < off + q1 - 1,  # >= where > was meant
    "top_left": lambda k0, q0, q1, off: k0 <= q1 - 1,
    "none": lambda k0, q0, q1, off: q0 >= 0,
}


def simulate(
    q: Tensor, k: Tensor, v: Tensor, causal: bool, block_q: int, block_k: int, *, scale: str = "right",
    rescale_out: bool = True, rescale_l: bool = True, alpha: str = "right", division: str = "final",
    lse_max: bool = True, skip: str = "right", mask: str = "right", guard: bool = True, weights: str = "p",
    start: str = "empty", empty_lse: str = "-inf",
) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """((out, unknown), (lse, unknown)) of a tiled forward with the given mistakes, in float64.

    `start="phantom"` starts the running state at m = 0, l = 1 (a running lse of 0): one extra key of score 0
    and value 0. `empty_lse="zero"` gives lse 0 on rows that saw no visible key (rows of tiles that were never
    computed stay unknown: their lse is whatever the learner's buffer started with)."""
    q, k, v = q.double(), k.double(), v.double()
    t_q, t_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    factor = {"right": 1.0 / math.sqrt(d), "none": 1.0, "twice": 1.0 / d}[scale]
    off = t_k - t_q
    rows = torch.arange(t_q)
    q0 = (rows // block_q) * block_q
    q1 = torch.clamp(q0 + block_q, max=t_q)
    phantom = start == "phantom"
    m = torch.full((*q.shape[:-1],), 0.0 if phantom else float("-inf"), dtype=torch.float64)
    l_sum = torch.ones_like(m) if phantom else torch.zeros_like(m)
    acc = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=torch.float64)
    touched = torch.zeros(t_q, dtype=torch.bool)  # a tile was computed for the row
    fuzzy = torch.zeros(t_q, dtype=torch.bool)  # values depend on the learner's fill of masked scores
    rule = SKIPS[skip if causal else "none"]
    for k0 in range(0, t_k, block_k):
        k1 = min(k0 + block_k, t_k)
        computed = rule(k0, q0, q1, off)  # per query row (its tile's q0, q1), elementwise
        if not bool(computed.any()):
            continue
        s = (q @ k[..., k0:k1, :].transpose(-2, -1)) * factor
        if causal and mask != "none":
            shift = off if mask == "right" else 0
            visible = torch.arange(k0, k1).unsqueeze(0) <= (rows + shift).unsqueeze(1)
            s = s.masked_fill(~visible, float("-inf"))
            if weights == "s":
                fuzzy |= computed & ~visible.all(dim=-1)
        m_new = torch.maximum(m, s.amax(dim=-1))
        ref = m_new.masked_fill(torch.isinf(m_new), 0.0) if guard else m_new
        p = torch.exp(s - ref.unsqueeze(-1))
        if alpha == "right":
            a = torch.exp(m - ref)
        elif alpha == "inverted":
            a = torch.exp(ref - m)
        else:  # inverted, with a row's first tile special-cased
            a = torch.where(torch.isinf(m), torch.zeros_like(m), torch.exp(ref - m))
        l_new = (a if rescale_l else 1.0) * l_sum + p.sum(dim=-1)
        pv = (p if weights == "p" else s) @ v[..., k0:k1, :]
        if division == "per_tile":
            acc_new = (a.unsqueeze(-1) * acc + pv) / l_new.unsqueeze(-1)
        else:
            acc_new = (a.unsqueeze(-1) if rescale_out else 1.0) * acc + pv
        m = torch.where(computed, m_new, m)
        l_sum = torch.where(computed, l_new, l_sum)
        acc = torch.where(computed.unsqueeze(-1), acc_new, acc)
        touched |= computed
    if division == "final":
        out = acc / l_sum.unsqueeze(-1) if not guard else torch.where(
            (l_sum > 0).unsqueeze(-1), acc / l_sum.clamp_min(1e-300).unsqueeze(-1), torch.zeros_like(acc))
    else:
        out = acc
    lse = (m + torch.log(l_sum)) if lse_max else torch.log(l_sum)
    if guard:
        lse = torch.where(l_sum > 0, lse, torch.full_like(lse, 0.0 if empty_lse == "zero" else float("-inf")))
    untouched = ~touched  # rows never computed: 0 or 0/0 by the learner's own guard
    unknown_rows = (untouched | fuzzy).expand(*q.shape[:-1])
    lse_unknown = unknown_rows.clone()
    if not guard and causal:  # NaN or -inf on a row with no visible key: the learner's order decides
        lse_unknown |= (rows + off < 0).expand(*q.shape[:-1])
    out_unknown = unknown_rows.unsqueeze(-1).expand(out.shape).clone() if bool(unknown_rows.any()) else None
    return (out, out_unknown), (lse, lse_unknown if bool(lse_unknown.any()) else None)


# (diagnosis id, label, knobs, shows only with causal=True)
FLASH_VARIANTS: list[tuple[str, str, dict[str, Any], bool]] = [
    ("flash_no_output_rescale", "acc += p @ v without the exp(m_old - m_new) factor", {"rescale_out": False}, False),
    ("flash_rescale_inverted", "exp(m_new - m_old): inf * 0 = NaN from the first tile", {"alpha": "inverted"}, False),
    ("flash_rescale_inverted", "exp(m_new - m_old), first tile special-cased", {"alpha": "inverted_first"}, False),
    ("flash_l_not_rescaled", "l += p.sum(-1) without the factor", {"rescale_l": False}, False),
    ("flash_no_final_division", "out = acc, never divided by l", {"division": "none"}, False),
    ("flash_division_per_tile", "acc = (alpha * acc + p @ v) / l on every tile", {"division": "per_tile"}, False),
    ("flash_lse_without_max", "lse = log(l)", {"lse_max": False}, False),
    ("missing_scale", "no 1/sqrt(d)", {"scale": "none"}, False),
    ("flash_scale_twice", "scaled by 1/d", {"scale": "twice"}, False),
    ("flash_causal_diagonal_skipped", "skips key tiles starting at or after the tile's first query",
     {"skip": "first_ge"}, True),
    ("flash_causal_diagonal_skipped", "skips key tiles starting after the tile's first query", {"skip": "first_gt"},
     True),
    ("flash_causal_diagonal_skipped", "skips key tiles starting at the tile's last query (>= for >)",
     {"skip": "last_ge"}, True),
    ("flash_causal_top_left", "mask and tile skip aligned top-left", {"skip": "top_left", "mask": "top_left"}, True),
    ("flash_causal_top_left", "tile skip aligned top-left", {"skip": "top_left"}, True),
    ("flash_causal_top_left", "mask aligned top-left", {"mask": "top_left"}, True),
    ("flash_masked_row_nan", "exp(-inf - (-inf)) / 0/0 on rows with no visible key", {"guard": False}, True),
    ("flash_softmax_dropped", "s @ v instead of p @ v", {"weights": "s"}, False),
    ("flash_causal_mask_unapplied", "tiles skipped, no mask inside them", {"mask": "none"}, True),
    ("flash_causal_mask_unapplied", "no mask and no tile skip", {"mask": "none", "skip": "none"}, True),
    # issue 31: seen in running-lse (FlashAttention-2 style) ports
    ("flash_lse_phantom_key", "m = 0, l = 1 (or lse = 0) at the start: a phantom key of score 0", {"start": "phantom"},
     False),
    ("flash_lse_empty_row_finite", "lse = 0 on rows with no visible key", {"empty_lse": "zero"}, True),
]
