"""Hidden tests for `quant_matmul`: quantize_rowwise(x) -> (x_q, scale) and int8_matmul(a_q, a_s, b_q, b_s).

quantize_rowwise returns a pair, so each input is two cases, one per element
(`extra["tuple"]`): the int8 codes and the fp32 scales are each compared with
no tolerance at all (the contract grades them exactly). What the inputs reveal:
- rows of very different magnitudes (row scales drawn over four decades): one
  scale for the whole tensor, a scale per column, the wrong divisor;
- fp32, fp16 and bf16 inputs (the arithmetic is fp32 whatever the input);
- rows of zeros: 0 / 0 where the contract gives scale 1;
- the tie test: rows whose largest magnitude is 127 (scale exactly 1) holding
  values such as +-2.5, 0.5, 126.5: half to even gives 2, 0, 126, where
  floor(x + 0.5) or rounding away from zero gives 3, 1, 127; everywhere else the
  drawn values, divided by their row's scale in fp32, stay at least 1e-3 from a
  half-integer, so every correct way to divide rounds alike;
- a square input (M == K): a scale broadcast over the columns instead of the
  rows gives wrong values there and a broadcasting error on every other shape;
- one row, and 96 rows redrawn until amax * (1 / 127) and amax / 127 differ in
  some row's last bit (the scales are graded exactly, as the contract defines them).

int8_matmul gets int8 codes and positive scales. M != N everywhere except one
square case (the scales' axes; on other shapes the swap raises), K from 16 to
1024, one decode row (M = 1), a case built by quantize_rowwise itself, unit
scales with K <= 1024 (the exact integers, no tolerance), and K = 4096 with rows
of 127 (the sum 127 * 127 * 4096 overflows int8 and fp16 accumulators; an fp32
matmul of the codes stays exact here and passes). Products are graded within
rtol 1e-6 of the exact one plus atol 5e-6 (5e-5 for K = 4096) x the largest
|expected|: room for an fp32 matmul of dequantised values (see TOLS).

Both functions have a repeat call (other values, same shapes). The advisory
audit (`audit.quant_matmul`) says whether the product ran on integer tensors:
a float matmul of dequantised values passes, and is reported as
`quant_dequant_matmul` (a failure under --strict).
"""

from __future__ import annotations

import dataclasses

import torch

from drill.judge.spec import Bug, Case, Diagnosis, Spec, Tolerance
from drill.judge.specs._common import (
    DTYPE_LABEL,
    DTYPES,
    TOLERANCES,
    Draw,
    call_case,
    diagnoses,
    repeat_probe,
    twice_probes,
)

QUANT, MATMUL = "quantize_rowwise", "int8_matmul"
OUTPUTS = ("x_q", "scale")
QMAX = 127
CLEARANCE = 1e-3  # drawn codes before rounding stay this far from a half-integer (the tie test aside)
TIES = (2.5, -2.5, 0.5, -0.5, 126.5, -126.5, 1.5, -3.5, 4.5, 125.5)

# The contract's rtol 1e-6 on every product, plus an atol (x the largest |expected|) that lets an fp32 matmul of
# dequantised values pass (reported by the audit, not failed): over 60 seeds its normwise error was 1.3e-6 at most
# on the K <= 1024 cases and 1.4e-5 on K = 4096 (same-sign sums). Integer sums with fp32 scales are within 1.2e-7;
# fp16 sums are >= 3.7e-5 off on every case (inf on K = 4096), int8 sums wrap: both stay far outside.
TOLS = {**TOLERANCES, "exact": Tolerance(atol=0.0, rtol=0.0), "product": Tolerance(atol=5e-6, rtol=1e-6),
        "product_long": Tolerance(atol=5e-5, rtol=1e-6)}

QD = diagnoses(
    Diagnosis("quant_per_tensor_scale", "One scale for the whole tensor instead of one per row",
              "Each row (token) gets its own scale, amax over that row / 127. A single amax over the whole "
              "tensor lets one large row set the step for every other row, whose small values then round to a "
              "handful of codes (or to 0); the scale output must be (M,), one value per row.",
              "amax = x.float().abs().amax(dim=1): reduce over the row (dim 1), not over everything."),
    Diagnosis("quant_zero_row_nan", "A row of zeros does not get scale 1",
              "A row of zeros has amax 0, so amax / 127 is 0 and x / scale is 0 / 0 = NaN, which becomes some "
              "arbitrary int8 code. The contract gives such a row scale 1.0 (its codes are all 0); clamping amax "
              "at a tiny eps avoids the NaN but returns another scale than the contract's.",
              "scale = torch.where(amax > 0, amax / 127, torch.ones_like(amax))."),
    Diagnosis("quant_truncate", "Codes truncated instead of rounded",
              "Casting a float to int8 with .to(torch.int8) drops the fraction (towards zero), and floor() drops "
              "it downwards: 3.9 becomes 3 instead of 4. Quantisation rounds to the nearest code.",
              "torch.round(x.float() / scale[:, None]).clamp(-127, 127).to(torch.int8)."),
    Diagnosis("quant_round_half_up", "Halves rounded up (or away from zero) instead of to even",
              "floor(v + 0.5) sends every .5 up (2.5 -> 3, 0.5 -> 1, 126.5 -> 127), and Python's textbook "
              "'round half away from zero' sends -2.5 to -3. The contract rounds half to even, as torch.round "
              "does: 2.5 -> 2, 0.5 -> 0, 126.5 -> 126, -2.5 -> -2.",
              "Use torch.round (half to even) on the fp32 quotient."),
    Diagnosis("quant_scale_divisor", "The scale divides amax by the wrong number",
              "Symmetric int8 uses the codes -127 .. 127, so the largest magnitude maps to 127: scale = amax / "
              "127. Dividing by 128 lets the largest value reach 128 (clamped back to 127, so it is off), and "
              "dividing by 255 (the width of the whole uint8 range) uses only half the codes.",
              "scale = amax / 127."),
    Diagnosis("quant_asymmetric", "Asymmetric quantisation with a zero point",
              "The contract is symmetric: code = round(x / scale) with no offset, in -127 .. 127, scale = amax / "
              "127. A zero point with scale = (max - min) / 255 over [-128, 127] is the affine scheme of "
              "activation observers; it gives other codes and another scale.",
              "No zero point: scale = amax / 127 and codes clamp(round(x / scale), -127, 127)."),
    Diagnosis("quant_scale_axis", "A scale broadcast on the wrong axis",
              "A (M,) vector of row scales must be used as scale[:, None] (one per row). Written as scale[None, "
              ":] (or as a bare (M,) vector next to an (M, N) or (M, K) tensor) it lines up with the columns: "
              "that raises a broadcasting error unless the two sizes happen to be equal, and gives wrong values "
              "when they are (a square input). In int8_matmul a_s scales the rows, b_s the columns.",
              "quantize: x / scale[:, None]; int8_matmul: acc * a_s[:, None] * b_s[None, :]."),
    Diagnosis("quant_int8_accumulate", "The products are summed in int8 and wrap around",
              "a_q @ b_q.T on int8 tensors returns int8: every sum of products beyond -128 .. 127 wraps modulo "
              "256 (127 * 127 alone is 16129). The dot products need a wide integer accumulator: int32 (what "
              "int8 GEMM hardware does, torch._int_mm on CUDA) or int64.",
              "acc = a_q.to(torch.int32) @ b_q.to(torch.int32).T (or .long()), then apply the scales in fp32."),
    Diagnosis("quant_fp16_accumulate", "The products are summed in fp16",
              "fp16 has an 11-bit significand and a maximum of 65504: integer sums beyond 2048 are rounded and "
              "beyond 65504 become inf (127 * 127 * 4096 = 66 million). An fp32 matmul of the codes is exact "
              "while partial sums stay under 2^24; an integer matmul is exact always.",
              "Accumulate in int32/int64 (or at least fp32): a_q.long() @ b_q.long().T."),
    Diagnosis("quant_per_column", "A scale per column (over the rows) instead of per row",
              "amax over dim 0 gives one scale per column (K of them): per-channel quantisation of a weight stored "
              "(in, out). Here every row is one token or one output channel in nn.Linear's (out, in) layout, so "
              "the amax runs along the row (dim 1) and the scale has M entries.",
              "amax = x.float().abs().amax(dim=1); scale shape (M,)."),
    Diagnosis("quant_scale_reciprocal", "The scale or the codes computed through a reciprocal",
              "The codes and scales are graded bit for bit, as the contract defines them: scale = amax / 127 and "
              "code = round(x / scale), each one correctly rounded fp32 division. amax * (1 / 127) is a "
              "different fp32 number in the last bit for a good share of rows, and a half precision division "
              "rounds differently still.",
              "Divide in fp32: scale = amax / 127 with amax = x.float().abs().amax(dim=1)."),
)


def _guard(amax: torch.Tensor, zero: str) -> torch.Tensor:
    """The scale from amax: the contract's scale 1 for zero rows ("one"), or the bug's 0 ("none")."""
    return torch.where(amax > 0, amax / QMAX, torch.ones_like(amax)) if zero == "one" else amax / QMAX


def quantize(x: torch.Tensor, *, over: str = "row", divisor: float = QMAX, rounding: str = "even",
             zero: str = "one", axis: str = "rows", scale_math: str = "divide") -> tuple[torch.Tensor, torch.Tensor]:
    """The contract in fp32 with one knob per mistake (the defaults are the contract itself).

    over: "row" | "tensor" (one amax, scale returned (M,)) | "tensor0" (a 0-dim scale) | "column".
    rounding: "even" | "half_up" (floor(v + 0.5)) | "away" | "trunc" | "floor". zero: "one" | "none" (0 / 0).
    axis: "rows" | "columns" (scale[None, :], only defined on a square input). scale_math: "divide" |
    "reciprocal" (amax * (1 / 127)).
    """
    xf = x.float()
    if over == "column":
        amax = xf.abs().amax(dim=0)
    elif over in ("tensor", "tensor0"):
        amax = xf.abs().amax()
    else:
        amax = xf.abs().amax(dim=1)
    if scale_math == "reciprocal":
        scale = torch.where(amax > 0, amax * torch.tensor(1.0 / QMAX, dtype=torch.float32), torch.ones_like(amax))
    elif divisor != QMAX:
        scale = torch.where(amax > 0, amax / divisor, torch.ones_like(amax))
    else:
        scale = _guard(amax, zero)
    if over == "column" or axis == "columns":
        v = xf / scale[None, :]
    elif over in ("tensor", "tensor0"):
        v = xf / scale
    else:
        v = xf / scale[:, None]
    q = {"even": torch.round, "half_up": lambda t: torch.floor(t + 0.5),
         "away": lambda t: torch.sign(t) * torch.floor(t.abs() + 0.5), "trunc": torch.trunc,
         "floor": torch.floor}[rounding](v)
    codes = q.clamp(-QMAX, QMAX).to(torch.int8)
    if over == "tensor":
        scale = scale.expand(x.shape[0]).clone()
    return codes, scale


def asymmetric(x: torch.Tensor, *, include_zero: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Affine int8 per row: scale = (max - min) / 255, zero point -128 - round(min / scale), codes in [-128, 127]."""
    xf = x.float()
    lo, hi = xf.amin(dim=1), xf.amax(dim=1)
    if include_zero:
        lo, hi = lo.clamp(max=0), hi.clamp(min=0)
    span = hi - lo
    scale = torch.where(span > 0, span / 255, torch.ones_like(span))
    zp = -128 - torch.round(lo / scale)
    codes = (torch.round(xf / scale[:, None]) + zp[:, None]).clamp(-128, 127).to(torch.int8)
    return codes, scale


def _exact_acc(a_q: torch.Tensor, b_q: torch.Tensor) -> torch.Tensor:
    return a_q.long() @ b_q.long().T


def product(a_q, a_s, b_q, b_s, *, acc: str = "int", axis: str = "right") -> torch.Tensor | None:
    """int8_matmul with one knob per mistake. acc: "int" | "int8" (wrapped) | "fp16" (rounded, inf past 65504).
    axis: "right" | "swapped" (a_s[None, :] * b_s[:, None]) | "bare" (acc * a_s * b_s). None where torch's
    broadcasting raises (the learner's code raises there too)."""
    exact = _exact_acc(a_q, b_q)
    if acc == "int8":
        total = (((exact + 128) % 256) - 128).double()
    elif acc == "fp16":
        total = exact.double().to(torch.float16).double()
    else:
        total = exact.double()
    sa, sb = a_s.double(), b_s.double()
    try:
        if axis == "swapped":
            out = total * sa[None, :] * sb[:, None]
        elif axis == "bare":
            out = total * sa * sb
        else:
            out = total * sa[:, None] * sb[None, :]
    except RuntimeError:
        return None
    return out.float()


# ----------------------------------------------------------------------------- drawing


def _clear_of_halves(x: torch.Tensor) -> torch.Tensor:
    """x with every element whose fp32 quotient by its row's scale lies within CLEARANCE of a half-integer
    shrunk by 3% (in x's dtype) until none does; the row maxima are integers (+-127) and never move."""
    x = x.clone()
    for _ in range(200):
        v = x.float() / quantize(x)[1][:, None]
        near = ((v - torch.floor(v) - 0.5).abs() < CLEARANCE) & (v.abs() < QMAX - 0.25)
        if not bool(near.any()):
            return x
        x[near] = (x[near].float() * 0.97).to(x.dtype)
    raise AssertionError("could not keep the drawn values clear of half-integers")


def _rows(d: Draw, m: int, k: int, dtype: str, *, decades: float = 4.0) -> torch.Tensor:
    """(m, k) values whose rows differ in magnitude by up to 10 ** decades, in `dtype`, clear of halves."""
    spread = torch.tensor([10 ** d.rng.uniform(-decades / 2, decades / 2) for _ in range(m)])
    x = (torch.randn(m, k, generator=d.gen) * spread[:, None]).to(DTYPES[dtype])
    return _clear_of_halves(x)


def _tie_rows(d: Draw, k: int) -> torch.Tensor:
    """Three fp32 rows whose amax is exactly 127 (scale 1), holding the ties and drawn values clear of halves."""
    rows = []
    for sign in (1.0, -1.0, 1.0):
        row = torch.randn(k, generator=d.gen) * 40
        row = row.clamp(-126, 126)
        row = torch.where((row - torch.floor(row) - 0.5).abs() < 0.05, row + 0.2, row)
        row[torch.randperm(k, generator=d.gen)[: len(TIES)]] = torch.tensor(TIES)
        row[d.int(0, k - 1)] = sign * QMAX
        rows.append(row)
    return torch.stack(rows)


def _many_rows(d: Draw) -> torch.Tensor:
    """96 short fp32 rows, redrawn until amax * (1 / 127) differs from amax / 127 in at least one row's scale
    (it does in ~4% of rows; the other cases have too few rows to be sure of one)."""
    while True:
        x = _rows(d, 96, 8, "float32")
        if not torch.equal(quantize(x)[1], quantize(x, scale_math="reciprocal")[1]):
            return x


def _pair(case: Case) -> list[Case]:
    """`case` grading x_q and its twin grading scale, on the very same input."""
    m, k = case.args["x"].shape
    shapes = {"x_q": ((m, k), torch.int8), "scale": ((m,), torch.float32)}
    return [dataclasses.replace(
        case, name=f"{case.name}: {what}", out_dtype=shapes[what][1],
        ctx={**case.ctx, "what": what, "pick": pick, "tol": "exact"},
        extra={**case.extra, "tuple": {"names": list(OUTPUTS), "pick": pick}},
    ) for pick, what in enumerate(OUTPUTS)]


def _quant(d: Draw, name: str, x: torch.Tensor) -> list[Case]:
    dtype = next(k for k, v in DTYPES.items() if v == x.dtype)
    base = call_case(d, f"quantize_rowwise {DTYPE_LABEL[dtype]} {tuple(x.shape)}, {name}", QUANT, {"x": x},
                     dtype=dtype, out_shape=x.shape, out_dtype=torch.int8)
    return _pair(base)


def _codes(d: Draw, m: int, k: int, *, full: bool = False) -> torch.Tensor:
    if full:
        return torch.randint(-QMAX, QMAX + 1, (m, k), generator=d.gen, dtype=torch.int8)
    # codes as quantised activations look: most small, each row reaching +-127 once
    x = torch.randn(m, k, generator=d.gen)
    return quantize(x)[0]


def _scales(d: Draw, n: int) -> torch.Tensor:
    return torch.tensor([10 ** d.rng.uniform(-4, -1) for _ in range(n)], dtype=torch.float32)


def _mm(d: Draw, name: str, a_q, a_s, b_q, b_s, *, tol: str = "product") -> Case:
    m, n = a_q.shape[0], b_q.shape[0]
    return call_case(d, f"int8_matmul M={m} N={n} K={a_q.shape[1]}, {name}", MATMUL,
                     {"a_q": a_q, "a_s": a_s, "b_q": b_q, "b_s": b_s}, out_shape=(m, n), out_dtype=torch.float32,
                     ctx={"tol": tol})


def _distinct_mk(d: Draw, lo: int, hi: int) -> tuple[int, int]:
    m = d.int(lo, hi)
    n = d.int(lo, hi)
    while n == m:
        n = d.int(lo, hi)
    return m, n


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    cases: list[Case] = []
    for dtype in ("float32", "float16", "bfloat16"):
        m, k = d.int(3, 9), d.int(16, 64)
        cases += _quant(d, "rows of different magnitudes", _rows(d, m, k, dtype))
    m, k = d.int(5, 9), d.int(8, 40)
    x = _rows(d, m, k, "float32")
    for r in d.rng.sample(range(m), 2):
        x[r] = 0
    cases += _quant(d, "two rows of zeros", x)
    ties = _tie_rows(d, d.int(24, 48))
    cases += _quant(d, "the tie test: amax 127 (scale 1) and values such as 2.5, 0.5, 126.5", ties)
    n = d.int(4, 10)
    cases += _quant(d, "a square input (M == K)", _rows(d, n, n, "float32"))
    x = _rows(d, d.int(3, 6), d.int(16, 48), "float16")
    x[0] = 0
    cases += _quant(d, "a row of zeros", x)
    cases += _quant(d, "one row", _rows(d, 1, d.int(64, 256), "float32"))
    cases += _quant(d, "many rows", _many_rows(d))

    m, n = _distinct_mk(d, 3, 9)
    k = d.int(16, 64)
    cases.append(_mm(d, "drawn scales", _codes(d, m, k, full=True), _scales(d, m), _codes(d, n, k, full=True),
                     _scales(d, n)))
    m, n = _distinct_mk(d, 4, 16)
    k = d.int(256, 1024)
    cases.append(_mm(d, "drawn scales", _codes(d, m, k), _scales(d, m), _codes(d, n, k), _scales(d, n)))
    s = d.int(4, 8)
    k = d.int(16, 64)
    cases.append(_mm(d, "a square output (M == N)", _codes(d, s, k, full=True), _scales(d, s),
                     _codes(d, s, k, full=True), _scales(d, s)))
    m, n = _distinct_mk(d, 2, 6)
    k = d.int(512, 1024)
    cases.append(_mm(d, "unit scales: the exact integers", _codes(d, m, k, full=True), torch.ones(m),
                     _codes(d, n, k, full=True), torch.ones(n), tol="exact"))
    a_q, b_q = _codes(d, 3, 4096), _codes(d, 5, 4096)
    a_q[0], a_q[2], b_q[1], b_q[3] = QMAX, -QMAX, QMAX, QMAX
    cases.append(_mm(d, "rows of 127 (sums of 66 million)", a_q, _scales(d, 3), b_q, _scales(d, 5),
                     tol="product_long"))
    n, k = d.int(8, 24), d.int(32, 128)
    cases.append(_mm(d, "one decode row (M = 1)", _codes(d, 1, k), _scales(d, 1), _codes(d, n, k), _scales(d, n)))
    m, n = _distinct_mk(d, 3, 8)
    k = d.int(32, 96)
    xa = torch.randn(m, k, generator=d.gen) * 3
    wb = torch.randn(n, k, generator=d.gen) * k**-0.5
    (qa, sa), (qb, sb) = quantize(xa), quantize(wb)
    cases.append(_mm(d, "codes and scales from quantize_rowwise", qa, sa, qb, sb))
    cases += _repeats(d)
    return twice_probes(cases)


def _repeats(d: Draw) -> list[Case]:
    """Drawn last: each function called on other values of the same shapes just before the graded call."""
    m, k = d.int(3, 7), d.int(16, 40)
    first, x = _rows(d, m, k, "float32"), _rows(d, m, k, "float32")
    pair = _quant(d, "", x)
    for c in pair:
        c.name = f"repeat call: quantize_rowwise {tuple(x.shape)}: {c.ctx['what']} just after another input"
        repeat_probe(c, {"x": first})
    m, n = _distinct_mk(d, 3, 8)
    k = d.int(16, 64)
    one = {"a_q": _codes(d, m, k, full=True), "a_s": _scales(d, m), "b_q": _codes(d, n, k, full=True),
           "b_s": _scales(d, n)}
    mm = _mm(d, "", _codes(d, m, k, full=True), _scales(d, m), _codes(d, n, k, full=True), _scales(d, n))
    mm.name = f"repeat call: int8_matmul M={m} N={n} K={k} just after another call of the same shapes"
    return [*pair, repeat_probe(mm, one)]


def reference(case: Case):
    from drill.reference.quant import int8_matmul, quantize_rowwise

    a = case.args
    if case.target == QUANT:
        return quantize_rowwise(a["x"])[case.ctx["pick"]], {}
    return int8_matmul(a["a_q"], a["a_s"], a["b_q"], a["b_s"]), {}


# ----------------------------------------------------------------------------- variants


def _quant_variant(fn):
    """A mistake in quantize_rowwise: its pair element on quantize cases, nothing to change on int8_matmul's."""

    def run(case: Case):
        if case.target != QUANT:
            return None
        out = fn(case.args["x"])
        return None if out is None else out[case.ctx["pick"]]

    return run


def _zero_rows_nan(case: Case):
    """0 / 0 on zero rows: their scale 0, their codes whatever NaN casts to (unknown)."""
    if case.target != QUANT:
        return None
    x = case.args["x"]
    zero = x.float().abs().amax(dim=1) == 0
    if not bool(zero.any()):
        return None
    codes, scale = quantize(x, zero="none")
    if case.ctx["pick"] == 1:
        return scale
    return codes, zero[:, None].expand_as(codes).clone()


def _zero_rows_other(case: Case, got):
    """A zero row given any scale but 1 (amax clamped at an eps): the learner's own value there, the rest right."""
    if case.target != QUANT or case.ctx["pick"] != 1:
        return None
    zero = case.args["x"].float().abs().amax(dim=1) == 0
    if not bool(zero.any()) or not isinstance(got, torch.Tensor) or got.shape != zero.shape:
        return None
    out = case.expected.clone()
    out[zero] = got.float()[zero]
    return out


def _square_only(fn):
    def run(x):
        return fn(x) if x.shape[0] == x.shape[1] else None

    return run


def _mm_variant(**knobs):
    def run(case: Case):
        if case.target != MATMUL:
            return None
        a = case.args
        return product(a["a_q"], a["a_s"], a["b_q"], a["b_s"], **knobs)

    return run


QUANT_VARIANTS = [
    ("quant_per_tensor_scale", "one amax over the tensor, the scale repeated per row",
     lambda x: quantize(x, over="tensor")),
    ("quant_per_tensor_scale", "one amax over the tensor, a 0-dim scale", lambda x: quantize(x, over="tensor0")),
    ("quant_truncate", ".to(torch.int8) without rounding", lambda x: quantize(x, rounding="trunc")),
    ("quant_truncate", "floor()", lambda x: quantize(x, rounding="floor")),
    ("quant_round_half_up", "floor(v + 0.5)", lambda x: quantize(x, rounding="half_up")),
    ("quant_round_half_up", "halves away from zero", lambda x: quantize(x, rounding="away")),
    ("quant_scale_divisor", "amax / 128", lambda x: quantize(x, divisor=128.0)),
    ("quant_scale_divisor", "amax / 255", lambda x: quantize(x, divisor=255.0)),
    ("quant_asymmetric", "(max - min) / 255 with a zero point", lambda x: asymmetric(x, include_zero=False)),
    ("quant_asymmetric", "(max(x, 0) - min(x, 0)) / 255 with a zero point", lambda x: asymmetric(x, include_zero=True)),
    ("quant_scale_axis", "x / scale[None, :]", _square_only(lambda x: quantize(x, axis="columns"))),
    ("quant_per_column", "amax over dim 0", lambda x: quantize(x, over="column")),
    ("quant_scale_reciprocal", "amax * (1 / 127)", lambda x: quantize(x, scale_math="reciprocal")),
]

MATMUL_VARIANTS = [
    ("quant_scale_axis", "acc * a_s[None, :] * b_s[:, None]", _mm_variant(axis="swapped")),
    ("quant_scale_axis", "acc * a_s * b_s", _mm_variant(axis="bare")),
    ("quant_int8_accumulate", "int8 sums, wrapped modulo 256", _mm_variant(acc="int8")),
    ("quant_fp16_accumulate", "fp16 sums", _mm_variant(acc="fp16")),
]

BUGS = (
    *(Bug(QD[i], _quant_variant(fn), label) for i, label, fn in QUANT_VARIANTS if i != "quant_scale_reciprocal"),
    Bug(QD["quant_zero_row_nan"], _zero_rows_nan, "amax / 127 with no guard: 0 / 0 on a zero row"),
    Bug(QD["quant_zero_row_nan"], _zero_rows_other, "a zero row given a scale other than 1", fit=True),
    *(Bug(QD[i], fn, label) for i, label, fn in MATMUL_VARIANTS),
    # appended after the contract's list: a tie with an older variant keeps the older name
    *(Bug(QD[i], _quant_variant(fn), label) for i, label, fn in QUANT_VARIANTS if i == "quant_scale_reciprocal"),
)

FORBIDDEN = (
    "quantize_per_tensor*", "quantize_per_channel*", "*fake_quantize_per_tensor_affine*",
    "*fake_quantize_per_channel_affine*", "_fake_quantize_learnable_*", "_weight_int8pack_mm",
)

SPEC = Spec(
    name="quant_matmul",
    graded=(QUANT, MATMUL),
    make_cases=make_cases,
    reference=reference,
    tolerances=TOLS,
    bugs=BUGS,
    exception_bugs=(("must match the size of tensor b", QD["quant_scale_axis"]),),
    forbidden=FORBIDDEN,
    audit={"name": "quant_matmul", "m": 6, "n": 5, "k": 64},
)
