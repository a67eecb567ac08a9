"""Hidden tests for `alibi`: alibi_slopes(n_heads) and alibi_bias(n_heads, t_q, t_k).

What each case is built to reveal:
- slopes for powers of two (1, 8 and one drawn) and for head counts that are
  not (6, 12, 20, 40 and one drawn): the geometric sequence extrapolated to
  2 ** (-8/n), or the second part taken at odd indices or as a prefix of the
  2m sequence instead of at its even indices; negative slopes; exponents
  counted from head 0 (the first slope 1; alibi_slopes(1) shows it alone);
- the bias with t_q == t_k, t_q < t_k (a chunk after a cache) and t_q == 1
  (a decode step), for both kinds of head count: the sign, top-left instead
  of bottom-right alignment (p_i = i), BLOOM's key-only bias slope * j (a
  constant per row away from the contract's, invisible to softmax but not
  to this test), |p_i - j|, and future keys masked inside the function;
- two repeat calls: the bias of a decode step right after the prompt's full
  bias (a table cached per head count or key length, sliced from the top),
  and the slopes of one head count right after another's.
"""

from __future__ import annotations

import math

import torch

from drill.judge.spec import Case, Diagnosis, Spec
from drill.judge.specs._common import (
    TOLERANCES,
    Distinct,
    Draw,
    call_case,
    diagnoses,
    repeat_probe,
    twice_probes,
    variant_bugs,
)

SLOPES, BIAS = "alibi_slopes", "alibi_bias"
POW2 = (1, 8)
NON_POW2 = (6, 12, 20, 40)

AD = diagnoses(
    Diagnosis("alibi_geometric_slopes", "Non-power-of-two head count: slopes from a plain geometric sequence",
              "2 ** (-8 (h + 1) / n) holds only when n is a power of two. For other n the ALiBi paper takes the "
              "slopes of the largest power of two m < n and then n - m in-between slopes of the 2m sequence, "
              "so models trained with it (BLOOM has 112 heads) expect those exact values.",
              "slopes(n) = slopes_pow2(m) + slopes_pow2(2 * m)[0::2][: n - m] with m = 2 ** floor(log2(n))."),
    Diagnosis("alibi_even_indices", "Extra slopes taken from the wrong places of the 2m sequence",
              "The n - m extra slopes are the 2m sequence at its EVEN indices 0, 2, 4, ... (the values that "
              "fall between the m slopes), in that order; odd indices repeat slopes the m heads already have, "
              "and the first n - m entries mix both.",
              "extra = slopes_pow2(2 * m)[0::2][: n - m]."),
    Diagnosis("alibi_negative_slopes", "Slopes returned negative",
              "alibi_slopes returns the positive slopes 2 ** (-8 (h + 1) / n); the minus sign belongs to the "
              "bias, -slope * (p_i - j).",
              "Return the slopes without the sign; put it in alibi_bias."),
    Diagnosis("alibi_bias_sign", "Bias rewards distance",
              "bias[h, i, j] = -slope_h * (p_i - j): keys further in the past get a MORE negative bias. With "
              "the sign flipped (slope * (p_i - j), or -slope * (j - p_i)) the far past is favoured.",
              "Use -slope[:, None, None] * (p_i - j) with p_i - j >= 0 for past keys."),
    Diagnosis("alibi_top_left", "Queries aligned top-left",
              "With t_q < t_k the queries are the LAST t_q positions: query i sits at p_i = t_k - t_q + i "
              "(bottom-right, as with a KV cache). Using p_i = i treats a decode step as position 0.",
              "p = torch.arange(t_q) + (t_k - t_q); distance = p[:, None] - torch.arange(t_k)[None, :]."),
    Diagnosis("alibi_key_only", "Bias depends on the key position only",
              "slope * j (BLOOM's build_alibi_tensor), or one row of the bias broadcast to every query, differs "
              "from -slope * (p_i - j) by a constant per query row. Softmax cannot see a row constant, so in "
              "attention it is equivalent, but the contract defines the bias itself and graders compare it.",
              "Compute the distance per query: -slope * (p_i - j) with p_i = t_k - t_q + i, a (t_q, t_k) table."),
    Diagnosis("alibi_abs_distance", "Bias uses |p_i - j|",
              "The contract's bias is linear, -slope * (p_i - j): keys after the query (j > p_i) come out "
              "positive and the causal mask removes them. -slope * |p_i - j| is the symmetric (encoder) variant.",
              "Drop the abs(): -slope * (p_i - j)."),
    Diagnosis("alibi_slope_offset", "Slope exponents start at 0: the first head's slope is 1",
              "The slopes are 2 ** (-8 (h + 1) / n) for heads h = 0 .. n - 1, so the first is 2 ** (-8 / n) "
              "(0.0039 for one head, 0.5 for eight) and none is 1. With 2 ** (-8 h / n) and h from 0, every "
              "exponent is one step short: head 0 gets slope 1 (a bias as strong as the whole distance) and "
              "every other head the slope meant for the head before it.",
              "Count the heads from 1 in the exponent: 2 ** (-8 * (h + 1) / n) for h in range(n), or "
              "start ** (h + 1) with start = 2 ** (-8 / n); the same for the 2m sequence of the extra slopes."),
    Diagnosis("alibi_bias_masked", "Future keys masked inside alibi_bias",
              "alibi_bias returns the plain linear bias for every (i, j), positive where j > p_i; hiding those "
              "keys is the causal mask's job, applied separately (a bias with -inf in it cannot be reused for "
              "bidirectional attention and gives NaN rows when combined carelessly).",
              "Return -slope * (p_i - j) everywhere, without masked_fill or triu."),
)


def pow2_slopes(n: int, first: int = 1) -> list[float]:
    """2 ** (-8 h / n) for h = first .. first + n - 1 (the contract: first = 1)."""
    return [2.0 ** (-8.0 * h / n) for h in range(first, first + n)]


def slopes(n: int, rule: str = "paper", sign: float = 1.0, first: int = 1) -> torch.Tensor:
    """(n,) float64 slopes by a rule: "paper" (the contract), "geometric" (2 ** (-8 (h+1) / n) for every n),
    "next_pow2" (the first n of the next power of two's), "odd" (odd indices of 2m's), "prefix" (2m's first).
    first: the exponent's first head number (1 in the contract, 0 for the off-by-one)."""
    m = 2 ** math.floor(math.log2(n))
    if rule == "geometric" or m == n:
        values = pow2_slopes(n, first)
    elif rule == "next_pow2":
        values = pow2_slopes(2 * m, first)[:n]
    else:
        twice = pow2_slopes(2 * m, first)
        extra = {"paper": twice[0::2], "odd": twice[1::2], "prefix": twice}
        values = pow2_slopes(m, first) + extra[rule][: n - m]
    return sign * torch.tensor(values, dtype=torch.float64)


def bias(n: int, t_q: int, t_k: int, *, rule: str = "paper", sign: float = 1.0, form: str = "linear",
         align: str = "bottom_right", masked: float | None = None, first: int = 1) -> torch.Tensor:
    """(n, t_q, t_k) fp32 bias with one knob per mistake; the defaults are the contract in float64.

    form: "linear" (-s (p_i - j)), "flipped" (+s (p_i - j)), "key_only" (s * j, BLOOM), "last_row" (the
    last query's row for every query), "abs" (-s |p_i - j|). masked: a fill for the keys j > p_i.
    """
    s = slopes(n, rule, sign, first)[:, None, None]
    p = torch.arange(t_q, dtype=torch.float64)[:, None] + (t_k - t_q if align == "bottom_right" else 0)
    j = torch.arange(t_k, dtype=torch.float64)[None, :]
    dist = p - j
    out = {
        "linear": -s * dist, "flipped": s * dist, "key_only": s * j, "abs": -s * dist.abs(),
        "last_row": -s * ((t_k - 1) - j),
    }[form].expand(n, t_q, t_k)
    if masked is not None:
        out = out.masked_fill((dist < 0).expand_as(out), masked)
    return out.to(torch.float32)


def _slopes_case(d: Draw, n: int, why: str) -> Case:
    return call_case(d, f"alibi_slopes({n}) ({why})", SLOPES, {"n_heads": n}, out_shape=(n,),
                     out_dtype=torch.float32)


def _bias_case(d: Draw, n: int, t_q: int, t_k: int, why: str) -> Case:
    return call_case(d, f"alibi_bias({n}, t_q={t_q}, t_k={t_k}) ({why})", BIAS, {"n_heads": n, "t_q": t_q, "t_k": t_k},
                     out_shape=(n, t_q, t_k), out_dtype=torch.float32)


def _non_pow2(d: Draw, lo: int, hi: int) -> int:
    return d.choice([n for n in range(lo, hi + 1) if n & (n - 1) and n not in NON_POW2])


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    # (n_heads, t_k) never repeats across the bias cases: a bias cached on them collides only in the probe.
    key = Distinct().pick
    cases = [_slopes_case(d, n, "a power of two") for n in POW2]
    cases.append(_slopes_case(d, d.choice([2, 4, 16, 32, 64]), "a power of two"))
    cases += [_slopes_case(d, n, "not a power of two") for n in NON_POW2]
    cases.append(_slopes_case(d, _non_pow2(d, 3, 100), "not a power of two"))
    n, t = key(lambda: (8, d.int(4, 9)))
    cases.append(_bias_case(d, n, t, t, "t_q == t_k"))
    (n, t_k), t_q = key(lambda: (6, d.int(7, 12))), d.int(2, 5)
    cases.append(_bias_case(d, n, t_q, t_k, "t_q < t_k, heads not a power of two"))
    n, t_k = key(lambda: (12, d.int(9, 30)))
    cases.append(_bias_case(d, n, 1, t_k, "t_q == 1, a decode step"))
    n, t = key(lambda: (20, d.int(3, 7)))
    cases.append(_bias_case(d, n, t, t, "t_q == t_k, heads not a power of two"))
    n, t_k = key(lambda: (40, d.int(5, 16)))
    cases.append(_bias_case(d, n, 2, t_k, "t_q < t_k"))
    t_q, (n, t_k) = d.int(2, 6), key(lambda: (_non_pow2(d, 3, 48), d.int(7, 20)))
    cases.append(_bias_case(d, n, t_q, t_k, "t_q < t_k, heads not a power of two"))
    n, t_k = key(lambda: (d.choice([2, 4, 16]), d.int(4, 25)))
    cases.append(_bias_case(d, n, 1, t_k, "t_q == 1, a decode step"))
    (n, t_k), t_q = key(lambda: (1, d.int(6, 10))), d.int(2, 5)
    cases.append(_bias_case(d, n, t_q, t_k, "one head, t_q < t_k"))
    cases += _repeat_cases(d, key)
    return twice_probes(cases)


def _repeat_cases(d: Draw, key) -> list[Case]:
    """Drawn last: a decode step's bias right after the prompt's, and one head count's slopes after another's."""
    n_bias, t_k = key(lambda: (d.choice([6, 8, 12]), d.int(6, 16)))
    step = _bias_case(d, n_bias, 1, t_k, "")
    step.name = f"repeat call: alibi_bias({n_bias}, t_q=1, t_k={t_k}) just after alibi_bias({n_bias}, {t_k}, {t_k})"
    first_n, n_slopes = d.choice([4, 8, 16]), _non_pow2(d, 3, 30)
    heads = _slopes_case(d, n_slopes, "")
    heads.name = f"repeat call: alibi_slopes({n_slopes}) just after alibi_slopes({first_n})"
    return [
        repeat_probe(step, {"n_heads": n_bias, "t_q": t_k, "t_k": t_k}, vary=("t_q",)),
        repeat_probe(heads, {"n_heads": first_n}, vary=("n_heads",)),
    ]


def reference(case: Case):
    from drill.reference.alibi import alibi_bias, alibi_slopes

    a = case.args
    if case.target == SLOPES:
        return alibi_slopes(a["n_heads"], impl="math"), {}
    return alibi_bias(a["n_heads"], a["t_q"], a["t_k"], impl="math"), {}


def _variant(*, rule: str = "paper", sign: float = 1.0, first: int = 1, **bias_knobs):
    """The same mistake on both functions: its slopes on slopes cases, its bias (from those slopes) on bias cases."""

    def run(case: Case) -> torch.Tensor:
        a = case.args
        if case.target == SLOPES:
            return slopes(a["n_heads"], rule, sign, first).to(torch.float32)
        return bias(a["n_heads"], a["t_q"], a["t_k"], rule=rule, sign=sign, first=first, **bias_knobs)

    return run


def _bias_only(**bias_knobs):
    """A mistake in alibi_bias alone (its slopes cases are right)."""
    return lambda case: None if case.target == SLOPES else _variant(**bias_knobs)(case)


ALIBI_VARIANTS = [
    ("alibi_geometric_slopes", "2 ** (-8 (h + 1) / n) for every n", _variant(rule="geometric")),
    ("alibi_geometric_slopes", "the first n slopes of the next power of two", _variant(rule="next_pow2")),
    ("alibi_even_indices", "the 2m sequence at odd indices", _variant(rule="odd")),
    ("alibi_even_indices", "the first n - m slopes of the 2m sequence", _variant(rule="prefix")),
    ("alibi_negative_slopes", "negative slopes, the bias -slope * (p_i - j) from them", _variant(sign=-1.0)),
    ("alibi_negative_slopes", "negative slopes, the bias right", _variant(sign=-1.0, form="flipped")),
    ("alibi_bias_sign", "bias = slope * (p_i - j)", _bias_only(form="flipped")),
    ("alibi_top_left", "p_i = i", _bias_only(align="top_left")),
    ("alibi_key_only", "bias = slope * j (BLOOM's build_alibi_tensor)", _bias_only(form="key_only")),
    ("alibi_key_only", "the last query's row for every query", _bias_only(form="last_row")),
    ("alibi_abs_distance", "-slope * |p_i - j|", _bias_only(form="abs")),
    ("alibi_bias_masked", "future keys at -inf", _bias_only(masked=-math.inf)),
    ("alibi_bias_masked", "future keys at 0", _bias_only(masked=0.0)),
    ("alibi_bias_masked", "future keys at the fp32 minimum", _bias_only(masked=float(torch.finfo(torch.float32).min))),
    # Issue 31: appended, so a tie with an older variant keeps the older fixtures' names.
    ("alibi_slope_offset", "2 ** (-8 h / n) with h from 0, the first slope 1", _variant(first=0)),
    ("alibi_slope_offset", "2 ** (-8 h / n) with h from 0 for every n (no 2m sequence)",
     _variant(rule="geometric", first=0)),
]

SPEC = Spec(
    name="alibi",
    graded=(SLOPES, BIAS),
    make_cases=make_cases,
    reference=reference,
    tolerances=TOLERANCES,
    bugs=variant_bugs(AD, ALIBI_VARIANTS),
)
