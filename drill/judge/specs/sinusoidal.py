"""Hidden tests for `sinusoidal`: sinusoidal_positions(positions, d_model, base=10000.0) and LAYOUT.

What each case is built to reveal:
- positions that are not 0..T-1 (an offset, gaps, shuffled with a repeat,
  values up to ~6e4): encoding arange(T) instead of `positions`, and angles
  computed in half precision (exact in fp32 below ~2000, off by whole
  radians at 1e4 in bf16);
- a base other than 10000 (500000, 100): a hard-coded base;
- several d_model, including d_model/2 odd and d_model = 2: the frequency
  exponent (i/d or 4i/d instead of 2i/d, the column index instead of the
  pair index), sin and cos swapped, the other layout's columns;
- the defaults (a call without `base`);
- a repeat call (same T and d_model as a first call, other positions): a
  table cached per shape instead of per position.

The layout is the file's `LAYOUT` (absent: "interleaved"), handled like
rope's CONVENTION by `_declared.Declared`: the expected outputs of both
layouts are computed up front and `prepare` keeps the declared one; any
other value refuses the run as `sinusoidal_layout_invalid`.

Expected values are the reference's float64 angles rounded once; correct
fp32-angle solutions differ from them by up to 9e-8 x position (measured
over 30 seeds of positions below 65536 and d_model 2..512, for w computed as
base ** (-2i/d), exp(-2i/d * log base), 1 / base ** (2i/d) and p / base **
(2i/d); tests/test_judge_sinusoidal.py keeps it), so the atol grows with the
largest position like rope's, by `ANGLE_ERROR_PER_POSITION` (3e-7, rope's)
per unit of position.
"""

from __future__ import annotations

import torch

from drill.judge.registry import default
from drill.judge.spec import Case, Diagnosis, Spec
from drill.judge.specs._common import (
    ANGLE_ERROR_PER_POSITION,
    Distinct,
    Draw,
    call_case,
    diagnoses,
    knob_pair_bugs,
    position_tol,
    position_tolerances,
    repeat_probe,
    twice_probes,
    variant_bugs,
)
from drill.judge.specs._declared import Declared, invalid_diagnosis, swapped_diagnosis

TARGET = "sinusoidal_positions"
DEFAULT_BASE = default("sinusoidal", "base")  # also what code that ignores `base` uses
LAYOUTS = ("interleaved", "concat")

LAYOUT = Declared(
    "LAYOUT", LAYOUTS, default("sinusoidal", "LAYOUT"), "layout",
    invalid_diagnosis("sinusoidal", "LAYOUT", LAYOUTS, default("sinusoidal", "LAYOUT")),
)

SD = diagnoses(
    LAYOUT.invalid,
    swapped_diagnosis("sinusoidal", "LAYOUT", "Columns",
                      {"interleaved": "puts sin(p w_i) at column 2i and cos at 2i + 1",
                       "concat": "puts sin at column i and cos at d_model/2 + i"}, LAYOUT.default),
    Diagnosis("sinusoidal_sin_cos_swapped", "sin and cos swapped",
              "Each frequency's sin goes first (column 2i in the interleaved layout, column i in the concat "
              "one) and its cos second; yours has cos where sin belongs. Position 0 then encodes as ones and "
              "zeros the wrong way round.",
              "Put sin(angle) in the first slot of each pair (or the first half) and cos(angle) in the second."),
    Diagnosis("sinusoidal_freq_exponent", "Frequency exponent off by a factor",
              "w_i = base ** (-2i / d_model) with i counting the d_model/2 frequencies; base ** (-i / d_model) "
              "(or base ** (-2i / (d_model/2))) spreads the wavelengths over the wrong range.",
              "Use the exponent torch.arange(0, d_model, 2) / d_model (that is 2i / d_model)."),
    Diagnosis("sinusoidal_freq_per_column", "Frequency indexed by column instead of by pair",
              "Both members of a sin/cos pair share one frequency w_i; computing it from the column index j "
              "(base ** (-2j / d_model) for every column) gives the cos of each pair a frequency of its own.",
              "Compute d_model/2 frequencies from the pair index (j // 2 for column j in the interleaved layout)."),
    Diagnosis("sinusoidal_t2t_frequencies", "tensor2tensor's frequencies: base ** (-i / (d_model/2 - 1))",
              "Spreading the exponents evenly from 0 to exactly 1 (w_i = base ** (-i / (d_model/2 - 1)), as "
              "tensor2tensor, fairseq and Whisper do) is a real convention, but not this contract's: here "
              "w_i = base ** (-2i / d_model), whose slowest frequency stops one step short of 1/base. Every "
              "frequency but the first differs, and at d_model = 2 the step divides by zero "
              "(a ZeroDivisionError, or NaN in torch).",
              "Use the exponent 2i / d_model (torch.arange(0, d_model, 2) / d_model), not "
              "i / (d_model/2 - 1) (torch.linspace(0, 1, d_model // 2))."),
    Diagnosis("sinusoidal_angles_reshaped", "Reshaped where a transpose was needed",
              "reshape keeps the elements in memory order and only relabels the axes: a (d_model/2, T) table of "
              "angles reshaped to (T, d_model/2), or a (2, T, d_model/2) stack of sin and cos reshaped to "
              "(T, d_model), mixes values of different positions and frequencies in each row. Only a single "
              "position (T = 1) comes out right.",
              "Build the angles as positions[:, None] * w[None, :] (already (T, d_model/2)), or move the axes "
              "with .T / .permute / .transpose before the reshape: torch.stack([s, c], dim=-1).flatten(-2)."),
    Diagnosis("sinusoidal_sin_cos_by_row", "sin and cos alternate by row instead of by column",
              "sin and cos alternate along the feature axis (columns 2i and 2i + 1, or the two halves), every "
              "position getting both. Choosing them by row (pe[0::2] = sin, pe[1::2] = cos) gives the even "
              "positions only sines and the odd ones only cosines, each column holding one frequency.",
              "Index the columns: pe[:, 0::2] = sin(angles), pe[:, 1::2] = cos(angles), with angles of shape "
              "(T, d_model/2)."),
    Diagnosis("sinusoidal_base_ignored", "Base hard-coded",
              "The `base` argument has no effect (10000 is used), so a model with another base gets other "
              "wavelengths.",
              "Build the frequencies from the `base` argument."),
    Diagnosis("sinusoidal_low_precision_angles", "Angles in half precision",
              "The angles position * w_i were computed (or the positions stored) in fp16/bf16: bf16 holds "
              "integers exactly only up to 256 and fp16 up to 2048, so at position 10000 the angle is off by "
              "whole radians.",
              "Compute positions.float()[:, None] * w[None, :] (fp32 or float64) and take sin/cos of that."),
    Diagnosis("sinusoidal_positions_ignored", "Positions argument ignored",
              "The rows encode 0..T-1 instead of the given absolute `positions`, which is wrong for an offset "
              "(a later chunk, a decode step), gaps or any order.",
              "Compute the angles from `positions` itself: positions.float()[:, None] * w[None, :]."),
)


def encode(positions: torch.Tensor, d: int, base: float, layout: str, *, swap: bool = False,
           exponent: str = "pair", angle_dtype: torch.dtype = torch.float64, where: str = "all",
           build: str = "outer", rows: bool = False) -> torch.Tensor:
    """The encoding with one knob per mistake (fp32 result); the defaults are the contract in float64.

    exponent: "pair" (2i/d), "i_over_d", "four_i_over_d", "column" (each column j's own 2j/d), "t2t"
    (i / (d/2 - 1), tensor2tensor's guard max(d/2 - 1, 1) at d = 2).
    build: "outer" (positions[:, None] * w[None, :]), "reshape" (the (d/2, T) table reshaped to (T, d/2)),
    "stack" ((2, T, d/2) sin/cos stacked first, reshaped to (T, d)).
    rows: sin on the even rows and cos on the odd ones, of each column's angle in the layout.
    angle_dtype: a half dtype rounds the angles (where="all": positions and w in that dtype, the product
    and sin/cos too; where="positions": positions rounded to it, the rest in fp32).
    """
    half = d // 2
    if exponent == "column":
        cols = torch.arange(d, dtype=torch.float64)
        w_sin = float(base) ** (-2.0 * cols / d)
        if layout == "interleaved":
            w_s, w_c = w_sin[0::2], w_sin[1::2]
        else:
            w_s, w_c = w_sin[:half], w_sin[half:]
    else:
        i = torch.arange(half, dtype=torch.float64)
        scale = {"pair": 2.0 / d, "i_over_d": 1.0 / d, "four_i_over_d": 4.0 / d,
                 "t2t": 1.0 / max(half - 1, 1)}[exponent]
        w_s = w_c = float(base) ** (-scale * i)
    if angle_dtype in (torch.float16, torch.bfloat16):
        if where == "positions":
            p = positions.to(angle_dtype).float()
            s, c = (p[:, None] * w_s.float()[None, :]).sin(), (p[:, None] * w_c.float()[None, :]).cos()
        else:
            p = positions.to(angle_dtype)
            s, c = (p[:, None] * w_s.to(angle_dtype)[None, :]).sin(), (p[:, None] * w_c.to(angle_dtype)[None, :]).cos()
        s, c = s.float(), c.float()
    else:
        p = positions.to(torch.float64)
        a_s, a_c = p[:, None] * w_s[None, :], p[:, None] * w_c[None, :]
        if build == "reshape":
            a_s, a_c = ((w[:, None] * p[None, :]).reshape(p.numel(), half) for w in (w_s, w_c))
        if rows:
            angles = _lay_out(a_s, a_c, layout)
            even = (torch.arange(p.numel()) % 2 == 0)[:, None]
            return torch.where(even, angles.sin(), angles.cos()).to(torch.float32)
        s, c = a_s.sin(), a_c.cos()
    if swap:
        s, c = c, s
    out = torch.stack([s, c]).reshape(s.shape[0], d) if build == "stack" else _lay_out(s, c, layout)
    return out.to(torch.float32)


def _lay_out(first: torch.Tensor, second: torch.Tensor, layout: str) -> torch.Tensor:
    """Two (T, d/2) tables as (T, d) columns: pairs side by side (interleaved) or one half each (concat)."""
    if layout == "interleaved":
        return torch.stack([first, second], dim=-1).flatten(-2)
    return torch.cat([first, second], dim=-1)


def _case(d: Draw, label: str, positions: list[int] | torch.Tensor, d_model: int, base: float | None = None) -> Case:
    """A call with `base` only when given (so the default is exercised without it)."""
    pos = torch.as_tensor(positions, dtype=torch.int64)
    args = {"positions": pos, "d_model": d_model, **({} if base is None else {"base": float(base)})}
    shown = "default base" if base is None else f"base {base:g}"
    name = f"{label}, T={pos.numel()}, d_model={d_model}, {shown}"
    return call_case(d, name, TARGET, args, out_shape=(pos.numel(), d_model), out_dtype=torch.float32,
                     ctx={"tol": position_tol("float32", int(pos.abs().max()))})


def _gaps(d: Draw, t: int, lo: int, hi: int) -> list[int]:
    return sorted(d.rng.sample(range(lo, hi + 1), t))


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    # (T, d_model) never repeats across cases: a table cached on them collides only in the repeat probe.
    size = Distinct().pick
    t, dm = size(lambda: (d.int(4, 12), d.choice([16, 32, 64])))
    cases = [_case(d, "positions 0..T-1", list(range(t)), dm)]
    (t, dm), start = size(lambda: (d.int(3, 9), d.choice([16, 32, 48]))), d.int(100, 3000)
    cases.append(_case(d, f"positions from {start} (an offset)", list(range(start, start + t)), dm, 10000.0))
    t, dm = size(lambda: (d.int(4, 10), d.choice([8, 32, 64])))
    cases.append(_case(d, "positions with gaps up to 3000", _gaps(d, t, 0, 3000), dm, 10000.0))
    (t, dm), start = size(lambda: (d.int(3, 8), d.choice([64, 128]))), d.int(9000, 30000)
    cases.append(_case(d, f"large positions from {start}", list(range(start, start + t)), dm, 10000.0))
    t, dm = size(lambda: (d.int(3, 8), d.choice([32, 64])))
    cases.append(_case(d, "positions up to 60000, with gaps", _gaps(d, t, 30000, 60000), dm))
    (t, dm), start = size(lambda: (d.int(3, 9), d.choice([16, 32]))), d.int(0, 5000)
    cases.append(_case(d, f"base 500000, positions from {start}", list(range(start, start + t)), dm, 500000.0))
    t, dm = size(lambda: (d.int(3, 9), d.choice([8, 16])))
    cases.append(_case(d, "base 100 (short wavelengths)", _gaps(d, t, 0, 400), dm, 100.0))
    t, dm = size(lambda: (d.choice([3, 5, 7, 9]), d.choice([6, 10, 14, 22, 30])))
    cases.append(_case(d, "odd T, d_model/2 odd", _gaps(d, t, 0, 800), dm, 10000.0))
    t, dm = size(lambda: (d.int(2, 6), 2))
    cases.append(_case(d, "the smallest d_model", _gaps(d, t, 0, 5000), dm, 10000.0))
    t, dm = size(lambda: (1, d.choice([16, 24, 32])))
    cases.append(_case(d, "a single position", [d.int(1, 20000)], dm, 10000.0))
    t, dm = size(lambda: (d.int(5, 9), d.choice([16, 32])))
    shuffled = _gaps(d, t, 0, 2000)
    shuffled[-1] = shuffled[0]  # a repeated position
    d.rng.shuffle(shuffled)
    cases.append(_case(d, "shuffled positions with a repeat", shuffled, dm, 10000.0))
    cases.append(_repeat_case(d, size))
    return twice_probes(cases)


def _repeat_case(d: Draw, size) -> Case:
    """Same T and d_model as a first call, other positions: a table cached per shape shows. Drawn last."""
    t, dm = size(lambda: (d.int(4, 8), d.choice([16, 32])))
    first = torch.tensor(_gaps(d, t, 0, 1500))
    pos = torch.tensor(_gaps(d, t, 0, 1500))
    while torch.equal(pos, first):
        pos = torch.tensor(_gaps(d, t, 0, 1500))
    case = _case(d, "repeat call: same T and d_model as a first call, other positions", pos, dm, 10000.0)
    case.ctx["tol"] = position_tol("float32", int(max(pos.max(), first.max())))
    return repeat_probe(case, {"positions": first, "d_model": dm, "base": 10000.0})


def _args(case: Case) -> tuple:
    a = case.args
    return a["positions"], a["d_model"], a.get("base", DEFAULT_BASE)


def reference(case: Case):
    """Expected output for the default layout; both layouts' are kept in ctx["alt"] for `prepare`."""
    from drill.reference.sinusoidal import sinusoidal_positions

    positions, d_model, base = _args(case)
    case.ctx["alt"] = {lay: (sinusoidal_positions(positions, d_model, base, lay, impl="math"), {}) for lay in LAYOUTS}
    return case.ctx["alt"][LAYOUT.default]


def _variant(fn):
    """fn(positions, d_model, base, layout in force) -> output or None, run on the case's arguments."""
    return lambda case: fn(*_args(case), case.ctx.get("layout", LAYOUT.default))


def _swapped(declared: str):
    return lambda p, d, b, lay: None if lay != declared else encode(p, d, b, LAYOUT.other(lay))


def _half(dtype: torch.dtype, where: str = "all"):
    return lambda p, d, b, lay: encode(p, d, b, lay, angle_dtype=dtype, where=where)


SINUSOIDAL_VARIANTS = [
    ("sinusoidal_layout_swapped", "your columns are laid out 'concat' (sin in the first half) but the file "
     "declares 'interleaved' or no LAYOUT: declare LAYOUT = \"concat\"", _swapped("interleaved")),
    ("sinusoidal_layout_swapped", "your columns are laid out 'interleaved' (sin at 2i, cos at 2i+1) but the file "
     "declares LAYOUT = \"concat\": declare LAYOUT = \"interleaved\" (or delete the line)", _swapped("concat")),
    ("sinusoidal_sin_cos_swapped", "cos in sin's columns", lambda p, d, b, lay: encode(p, d, b, lay, swap=True)),
    ("sinusoidal_freq_exponent", "w_i = base ** (-i / d_model)",
     lambda p, d, b, lay: encode(p, d, b, lay, exponent="i_over_d")),
    ("sinusoidal_freq_exponent", "w_i = base ** (-2i / (d_model / 2))",
     lambda p, d, b, lay: encode(p, d, b, lay, exponent="four_i_over_d")),
    ("sinusoidal_freq_per_column", "w = base ** (-2j / d_model) for column j",
     lambda p, d, b, lay: encode(p, d, b, lay, exponent="column")),
    ("sinusoidal_base_ignored", "base fixed at 10000",
     lambda p, d, b, lay: None if float(b) == DEFAULT_BASE else encode(p, d, DEFAULT_BASE, lay)),
    ("sinusoidal_low_precision_angles", "angles in fp16", _half(torch.float16)),
    ("sinusoidal_low_precision_angles", "angles in bf16", _half(torch.bfloat16)),
    ("sinusoidal_low_precision_angles", "positions stored in fp16", _half(torch.float16, "positions")),
    ("sinusoidal_low_precision_angles", "positions stored in bf16", _half(torch.bfloat16, "positions")),
    ("sinusoidal_positions_ignored", "encodes arange(T) instead of positions", lambda p, d, b, lay: None
     if torch.equal(p, torch.arange(p.numel())) else encode(torch.arange(p.numel()), d, b, lay)),
    # Signatures from real code (issue 31), after the planted ones: a tie goes to the earlier variant.
    ("sinusoidal_t2t_frequencies", "w_i = base ** (-i / (d_model/2 - 1))",
     lambda p, d, b, lay: encode(p, d, b, lay, exponent="t2t")),
    ("sinusoidal_angles_reshaped", "the (d_model/2, T) angles reshaped to (T, d_model/2)",
     lambda p, d, b, lay: encode(p, d, b, lay, build="reshape")),
    ("sinusoidal_angles_reshaped", "sin and cos stacked as (2, T, d_model/2), reshaped to (T, d_model)",
     lambda p, d, b, lay: encode(p, d, b, lay, build="stack")),
    ("sinusoidal_sin_cos_by_row", "sin on even rows, cos on odd rows, each column's own pair frequency",
     lambda p, d, b, lay: encode(p, d, b, lay, rows=True)),
    ("sinusoidal_sin_cos_by_row", "sin on even rows, cos on odd rows, w = base ** (-2j / d_model) for column j",
     lambda p, d, b, lay: encode(p, d, b, lay, rows=True, exponent="column")),
]

# Mistakes as `encode` knobs, so that two compose (issue 31): the file with both. Ordered as they are named: the
# swap and the exponents move every test, a hard-coded base only the tests that pass another one.
SINUSOIDAL_KNOBS: tuple[tuple[str, str, dict], ...] = (
    ("sinusoidal_sin_cos_swapped", "cos in sin's columns", {"swap": True}),
    ("sinusoidal_freq_exponent", "w_i = base ** (-i / d_model)", {"exponent": "i_over_d"}),
    ("sinusoidal_freq_exponent", "w_i = base ** (-2i / (d_model / 2))", {"exponent": "four_i_over_d"}),
    ("sinusoidal_t2t_frequencies", "w_i = base ** (-i / (d_model/2 - 1))", {"exponent": "t2t"}),
    ("sinusoidal_base_ignored", "base fixed at 10000", {"base": DEFAULT_BASE}),
)


def _knobbed(knobs: dict):
    def fn(p, d, b, lay):
        form = dict(knobs)
        return encode(p, d, form.pop("base", b), lay, **form)

    return fn


SPEC = Spec(
    name="sinusoidal",
    graded=(TARGET,),
    make_cases=make_cases,
    reference=reference,
    tolerances=position_tolerances(ANGLE_ERROR_PER_POSITION),
    bugs=variant_bugs(SD, SINUSOIDAL_VARIANTS, _variant)
    + knob_pair_bugs(SD, SINUSOIDAL_KNOBS, lambda knobs: _variant(_knobbed(knobs))),
    report_attrs=(LAYOUT.name,),
    prepare=LAYOUT.apply,
)
