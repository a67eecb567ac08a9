"""Hidden tests for `rope`: apply_rope(x, positions, base=10000.0) and CONVENTION.

What each case is built to reveal:
- positions that are not 0..T-1 (an offset, random gaps, values ~10k):
  rotating by arange(T) instead of `positions`;
- a base other than 10000 (Llama 3's 500000): a hard-coded base;
- bf16/fp16 inputs at large positions: angles computed in the half dtype
  (invisible in fp32, errors of order 1 at position ~10k in bf16);
- several head dims: frequency exponent i/d instead of 2i/d, pairing;
- two property checks on the learner's own tensors: every rotated vector
  keeps its norm, and the scores <R_m q, R_n k> stay the same when every
  position is shifted by the same amount (the child rotates a shifted copy
  in the same call; the parent forms the scores).

- a repeat call (same T and d_head as a first call just before it, other
  positions): a cos/sin cache keyed on the shape instead of the positions.
  Such a cache is also replayed as a variant over the whole run
  (`_annotate_stale`), since it can collide with an earlier case too.

The convention is the file's `CONVENTION` (absent: "half"), reported by the
child and applied by `prepare`: the parent computes the expected outputs of
both conventions up front and keeps the declared one. Whatever the file
declares, its output must equal the exact rotation of that convention, so
a wrong declaration can only fail, never pass.

Tolerances grow with the largest position: correct fp32-angle solutions
differ from each other by about 1e-7 x position (fp32 spacing of the angle),
so a case at position 12000 allows ~4e-3 more than one at position 100.
Gradients are compared with the engine's one fixed gradient tolerance, so
only cases with positions below ~600 check them (at position ~3000 a correct
fp32 solution's gradient already differs by ~5e-4 from the reference's).
"""

from __future__ import annotations

import torch

from drill.judge.diagnose import GENERIC
from drill.judge.registry import default
from drill.judge.spec import Bug, Case, Spec
from drill.judge.specs._common import (
    ANGLE_ERROR_PER_POSITION,
    Draw,
    knob_pair_bugs,
    position_tol,
    position_tolerances,
    reference_with_grads,
    repeat_probe,
    twice_probes,
    variant_bugs,
)
from drill.judge.specs._rope_bugs import (
    CONVENTIONS,
    RD,
    ROPE_KNOBS,
    ROPE_VARIANTS,
    apply_convention,
    knobbed,
    rotate,
)

TARGET = "apply_rope"
DEFAULT_CONVENTION = default("rope", "CONVENTION")  # a file without CONVENTION is graded as this
def _case(d: Draw, name: str, x: torch.Tensor, positions: torch.Tensor, base: float, *, grads=False) -> Case:
    dtype = str(x.dtype).replace("torch.", "")
    return Case(
        name=name,
        target=TARGET,
        args={"x": x, "positions": positions, "base": float(base)},
        grad_inputs=("x",) if grads else (),
        upstream=d.normal(*x.shape) if grads else None,
        out_dtype=x.dtype,
        ctx={"dtype": dtype, "tol": position_tol(dtype, int(positions.abs().max())), "kind": "direct"},
    )


def _gaps(d: Draw, t: int, hi: int) -> torch.Tensor:
    """t distinct sorted positions in [0, hi], with gaps."""
    picked = sorted(d.rng.sample(range(hi + 1), t))
    return torch.tensor(picked, dtype=torch.int64)


def _norm_case(d: Draw, dh: int) -> Case:
    t = d.int(5, 9)
    x = d.normal(2, 3, t, dh)
    positions = _gaps(d, t, 12000)

    def derive(got: torch.Tensor) -> torch.Tensor:
        return got.to(torch.float64).norm(dim=-1) if got.shape == x.shape else got

    return Case(
        name=f"property: rotation keeps every vector's norm (d_head={dh}, positions up to 12000)",
        target=TARGET,
        args={"x": x, "positions": positions, "base": 10000.0},
        ctx={"dtype": "float32", "tol": position_tol("float32", 12000), "kind": "norm"},
        expected=x.to(torch.float64).norm(dim=-1),
        derive=derive,
    )


def _relative_case(d: Draw, dh: int) -> Case:
    """Rotate q and k at positions p and again at p + shift, in one call; compare the scores."""
    t = d.int(4, 7)
    q, k = d.normal(1, 2, t, dh), d.normal(1, 2, t, dh)
    p = _gaps(d, t, 300)
    shift = d.int(2000, 6000)
    x = torch.cat([q, k, q, k], dim=2)
    positions = torch.cat([p, p, p + shift, p + shift])

    def derive(got: torch.Tensor) -> torch.Tensor:
        if got.shape != x.shape:
            return got
        g = got.to(torch.float64)
        return g[..., 2 * t : 3 * t, :] @ g[..., 3 * t :, :].transpose(-2, -1)

    return Case(
        name=f"property: scores <R_m q, R_n k> unchanged when all positions shift by {shift} (d_head={dh})",
        target=TARGET,
        args={"x": x, "positions": positions, "base": 10000.0},
        ctx={"dtype": "float32", "tol": position_tol("float32", 300 + shift), "kind": "relative", "t": t,
             "unshifted": (q, k, p)},
        derive=derive,
    )


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    dims = [8, 16, 32, 64]
    cases = []
    dh, t = d.choice([16, 32]), d.int(4, 9)
    cases.append(_case(d, f"fp32 positions 0..T-1, d_head={dh}", d.normal(2, 3, t, dh), torch.arange(t), 10000.0,
                       grads=True))
    dh, t, start = d.choice(dims), d.int(3, 8), d.int(50, 500)
    cases.append(_case(d, f"fp32 positions offset by {start} (a later chunk), d_head={dh}", d.normal(1, 4, t, dh),
                       torch.arange(start, start + t), 10000.0, grads=True))
    dh, t = d.choice(dims), d.int(5, 10)
    cases.append(_case(d, f"fp32 positions with gaps up to 2000, d_head={dh}", d.normal(2, 2, t, dh), _gaps(d, t, 2000),
                       10000.0))
    dh, t, start = d.choice([32, 64]), d.int(3, 6), d.int(9000, 12000)
    cases.append(_case(d, f"fp32 large positions from {start}, d_head={dh}", d.normal(1, 2, t, dh),
                       torch.arange(start, start + t), 10000.0))
    dh, t, start = d.choice([16, 64]), d.int(4, 8), d.int(100, 4000)
    cases.append(_case(d, f"fp32 base 500000 (Llama 3), positions from {start}, d_head={dh}", d.normal(2, 2, t, dh),
                       torch.arange(start, start + t), 500000.0))
    dh, t = d.choice([8, 16]), d.int(2, 5)
    cases.append(_case(d, f"fp32 small d_head={dh}, single-digit gaps", d.normal(3, 1, t, dh), _gaps(d, t, 12),
                       10000.0))
    dh, t, start = d.choice([32, 64]), d.int(3, 6), d.int(8000, 12000)
    cases.append(_case(d, f"bf16 large positions from {start}, d_head={dh}", d.normal(1, 2, t, dh, dtype="bfloat16"),
                       torch.arange(start, start + t), 10000.0))
    dh, t, start = d.choice([16, 32]), d.int(3, 6), d.int(3000, 6000)
    cases.append(_case(d, f"fp16 positions from {start}, base 500000, d_head={dh}",
                       d.normal(2, 2, t, dh, dtype="float16"), torch.arange(start, start + t), 500000.0))
    cases.append(_norm_case(d, d.choice([16, 32])))
    cases.append(_relative_case(d, d.choice([8, 16])))
    cases.append(_repeat_case(d))
    _annotate_stale(cases)  # draws nothing
    return twice_probes(cases)  # draws nothing


# How a cos/sin cache keyed without the positions can be kept: (label, key fields, only the
# last entry). The child calls apply_rope for the cases in order in one process (a repeat probe's
# first call just before its graded one), so such a cache carries angles from case to case.
STALE_KEYS = (
    ("cos/sin cached per (T, d_head, base), not per position", ("t", "dh", "base"), False),
    ("cos/sin cached per (T, d_head), not per position", ("t", "dh"), False),
    ("cos/sin of the last call reused while (T, d_head, base) is unchanged", ("t", "dh", "base"), True),
)


def _stale_lookup(table: dict, fields: tuple[str, ...], last_only: bool, call: dict) -> torch.Tensor:
    """The positions a cache keyed on `fields` (in `table`) returns for one apply_rope call."""
    x = call["x"]
    values = {"t": x.shape[-2], "dh": x.shape[-1], "base": float(call["base"])}
    key = tuple(values[f] for f in fields)
    if key not in table:
        if last_only:
            table.clear()
        table[key] = call["positions"]
    return table[key]


def _annotate_stale(cases: list[Case]) -> None:
    """ctx["stale"][label]: the positions whose angles such a cache returns for the graded call."""
    for label, fields, last_only in STALE_KEYS:
        table: dict = {}
        for case in cases:
            if case.repeat:
                _stale_lookup(table, fields, last_only, case.repeat)
            got = _stale_lookup(table, fields, last_only, case.args)
            case.ctx.setdefault("stale", {})[label] = None if torch.equal(got, case.args["positions"]) else got


def _repeat_case(d: Draw) -> Case:
    """Same T and d_head as a first call, other positions and x: a cos/sin cache keyed on shapes shows.

    Drawn last, so the cases above are unchanged for a given seed.
    """
    dh, t = d.choice([16, 32, 64]), d.int(4, 8)
    first_x, first_pos = d.normal(2, 2, t, dh), _gaps(d, t, 1500)
    pos = _gaps(d, t, 1500)
    while torch.equal(pos, first_pos):
        pos = _gaps(d, t, 1500)
    case = _case(d, f"repeat call: same T={t}, d_head={dh} as a first call, other positions",
                 d.normal(2, 2, t, dh), pos, 10000.0)
    case.ctx["tol"] = position_tol("float32", int(max(pos.max(), first_pos.max())))
    return repeat_probe(case, {"x": first_x, "positions": first_pos, "base": 10000.0})


def _rope(convention: str):
    from drill.reference.rope import apply_rope

    return lambda a, p: apply_rope(a["x"], a["positions"], a["base"], convention, impl="math")


def _scores(convention: str, case: Case) -> torch.Tensor:
    from drill.reference.rope import apply_rope

    q, k, p = case.ctx["unshifted"]
    rq = apply_rope(q, p, 10000.0, convention, impl="math").to(torch.float64)
    rk = apply_rope(k, p, 10000.0, convention, impl="math").to(torch.float64)
    return rq @ rk.transpose(-2, -1)


def reference(case: Case):
    """Expected output for "half"; the "interleaved" one is kept in ctx["alt"] for `prepare`."""
    kind = case.ctx["kind"]
    if kind == "norm":
        return case.expected, {}
    if kind == "relative":
        case.ctx["alt"] = {c: (_scores(c, case), {}) for c in CONVENTIONS}
        return case.ctx["alt"]["half"]
    case.ctx["alt"] = {c: reference_with_grads(case, _rope(c)) for c in CONVENTIONS}
    return case.ctx["alt"]["half"]


def prepare(cases: list[Case], attrs: dict) -> tuple | None:
    """Apply the file's declared CONVENTION (reported by the child); refuse an unknown one."""
    return apply_convention(cases, attrs, DEFAULT_CONVENTION)


def _variant(fn):
    """Run a variant on the case's inputs; property cases get the same derivation as the learner's output."""

    def run(case: Case):
        a = case.args
        convention = case.ctx.get("convention", "half")
        out = fn(a["x"], a["positions"], a["base"], convention)
        if out is None:
            return None
        if case.ctx["kind"] == "relative":
            t = case.ctx["t"]
            out = out.to(torch.float64)
            return out[..., 2 * t : 3 * t, :] @ out[..., 3 * t :, :].transpose(-2, -1)
        if case.derive is not None:
            return case.derive(out)
        return out

    return run


def _stale_variant(label: str):
    """The case's output rotated at the positions a shape-keyed cache hands back (None if its own)."""

    def run(case: Case):
        stale = case.ctx.get("stale", {}).get(label)
        if stale is None:
            return None
        return _variant(lambda x, p, b, c: rotate(x, stale, b, c))(case)

    return run


SPEC = Spec(
    name="rope",
    graded=(TARGET,),
    make_cases=make_cases,
    reference=reference,
    tolerances=position_tolerances(ANGLE_ERROR_PER_POSITION),
    bugs=variant_bugs(RD, ROPE_VARIANTS, _variant)
    + tuple(Bug(GENERIC["state_between_calls"], _stale_variant(label), label) for label, _, _ in STALE_KEYS)
    + knob_pair_bugs(RD, ROPE_KNOBS, lambda knobs: _variant(knobbed(knobs))),
    report_attrs=("CONVENTION",),
    prepare=prepare,
)
