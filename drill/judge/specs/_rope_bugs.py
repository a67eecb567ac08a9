"""Known RoPE mistakes, recomputed on a case's own inputs (parent side only).

One parameterised rotation, `rotate`, reproduces every mistake by a knob:
which pairs (convention), the sign of the angle, the frequency exponent,
which positions, which base, and the dtype the angles are computed in.
The exact variants are computed in float64 so that they sit as close to a
learner's fp32 code as the reference itself does; only the low-precision
variant copies the half-precision arithmetic step by step, since its whole
point is the rounding.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from drill.judge.registry import default
from drill.judge.spec import Case, Diagnosis

DEFAULT_BASE = default("rope", "base")  # what code that ignores `base` uses

CONVENTIONS = ("half", "interleaved")

RD = {
    d.id: d
    for d in [
        Diagnosis("rope_convention_swapped", "RoPE pairs of the other convention",
                  "Your rotation pairs features the way the other convention does: 'half' pairs (i, i + d/2), "
                  "'interleaved' pairs (2i, 2i+1); the grader checks the one the file declares.",
                  "Either change the pairing, or declare what you implement at the top of the file: "
                  "CONVENTION = \"interleaved\" (or \"half\", the default when CONVENTION is absent)."),
        Diagnosis("rope_convention_invalid", "CONVENTION has an unknown value",
                  "The module-level CONVENTION must be \"half\" or \"interleaved\" (absent means \"half\").",
                  "Set CONVENTION = \"half\" or CONVENTION = \"interleaved\", exactly as written."),
        Diagnosis("rope_sign_flipped", "Rotation in the wrong direction",
                  "Each pair (a, b) must become (a cos - b sin, a sin + b cos); yours turns by -angle "
                  "(the minus sign sits on the other sin term).",
                  "Fix rotate_half to cat((-x2, x1)) or the pair formula's sin signs."),
        Diagnosis("rope_freq_exponent", "Frequency exponent i/d instead of 2i/d",
                  "theta_i = base ** (-2i / d_head) with i counting pairs; base ** (-i / d_head) makes the "
                  "low frequencies far too high.",
                  "Use torch.arange(0, d_head, 2) / d_head (or 2 * arange(d_head // 2) / d_head) as the exponent."),
        Diagnosis("rope_positions_ignored", "Positions argument ignored",
                  "Tokens are rotated by 0..T-1 instead of their absolute `positions`, which is wrong for any "
                  "offset (a decode step, a later chunk) or gap.",
                  "Compute the angles from `positions` itself: positions.float()[:, None] * inv_freq."),
        Diagnosis("rope_base_ignored", "RoPE base hard-coded",
                  "The `base` argument has no effect (10000 is used), so a model with another base "
                  "(Llama 3: 500000) gets the wrong frequencies.",
                  "Build inv_freq from the `base` argument."),
        Diagnosis("rope_low_precision_angles", "Angles computed in half precision",
                  "With bf16/fp16 input the angles position * theta were rounded to the input's dtype; "
                  "at position ~10000 bf16 can only hold multiples of 64, so the rotation is badly off.",
                  "Compute positions.float() * inv_freq (fp32), take cos/sin in fp32, and cast only the result."),
        Diagnosis("rope_low_precision_positions", "Positions rounded to the input's half dtype",
                  "positions.to(x.dtype) (or .type_as(x)) rounds every position before the multiply: bf16 holds "
                  "integers exactly only up to 256 and fp16 up to 2048, so position 10000 becomes a multiple of 64 in "
                  "bf16. The angles are then computed in fp32, but for the wrong positions.",
                  "Convert with positions.float() (or .to(torch.float32)), never to x's dtype; cast only the rotated "
                  "result back to x.dtype."),
        Diagnosis("rope_convention_mixed", "Pairs and frequencies from different conventions",
                  "Your code rotates the pairs of one convention with the cos/sin table laid out for the other: "
                  "interleaved pairs (2i, 2i+1) with the half layout's cat((freqs, freqs)) table (or half pairs with "
                  "each frequency repeated in place), so the two features of a pair turn by different frequencies. "
                  "That is not a rotation: vector norms change and scores stop depending on relative position only.",
                  "Lay the table out like your pairs: interleaved pairs take freqs.repeat_interleave(2, dim=-1); "
                  "half pairs (rotate_half) take torch.cat((freqs, freqs), dim=-1). A complex multiply "
                  "(torch.polar, view_as_complex) pairs features and frequencies together by construction."),
    ]
}


def apply_convention(cases: list[Case], attrs: dict, default_convention: str) -> tuple | None:
    """A spec's `prepare` for a file-level CONVENTION (rope, decoder_block): keep the declared one's expectations.

    Each case holds both conventions' (expected, grads) in ctx["alt"]; a
    missing CONVENTION means `default_convention`; any other value than the
    two known ones is refused as `rope_convention_invalid`, one line.
    """
    info = attrs.get("CONVENTION") or {}
    if not info.get("present"):
        convention, declared = default_convention, "absent"
    else:
        value = info.get("value")
        if not isinstance(value, str) or value not in CONVENTIONS:
            plain = info.get("type") in ("str", "int", "float", "bool", "NoneType")
            shown = repr(value) if plain else f"a {info.get('type')}"
            return RD["rope_convention_invalid"], f"CONVENTION is {shown}; expected \"half\" or \"interleaved\""
        convention, declared = value, value
    for case in cases:
        case.ctx["convention"], case.ctx["declared"] = convention, declared
        alt = case.ctx.get("alt")
        if alt is not None:
            case.expected, case.expected_grads = alt[convention]
    return None


def other(convention: str) -> str:
    return "interleaved" if convention == "half" else "half"


def rotate(
    x: Tensor,
    positions: Tensor,
    base: float,
    convention: str,
    *,
    sign: float = 1.0,
    pair_exponent: bool = True,
) -> Tensor:
    """x rotated in float64; `sign=-1` turns the other way, `pair_exponent=False` uses i/d."""
    d = x.shape[-1]
    i = torch.arange(d // 2, dtype=torch.float64)
    exponent = (2.0 * i / d) if pair_exponent else (i / d)
    inv_freq = float(base) ** (-exponent)
    angles = sign * positions.to(torch.float64)[:, None] * inv_freq[None, :]
    cos, sin = angles.cos(), angles.sin()
    xf = x.to(torch.float64)
    if convention == "half":
        a, b = xf[..., : d // 2], xf[..., d // 2 :]
    else:
        a, b = xf[..., 0::2], xf[..., 1::2]
    ra, rb = a * cos - b * sin, a * sin + b * cos
    if convention == "half":
        return torch.cat([ra, rb], dim=-1)
    return torch.stack([ra, rb], dim=-1).flatten(-2)


def rotate_low_precision(x: Tensor, positions: Tensor, base: float, convention: str, *,
                         where: str = "all") -> Tensor | None:
    """The half-precision-angle mistake, step by step in x's dtype (None for fp32/fp64 input).

    where: "all" (positions and inv_freq cast to x.dtype, product in x.dtype),
    "angles" (product in fp32, the angles then cast to x.dtype before cos/sin),
    "inv_freq" (inv_freq cast to x.dtype, product and cos/sin in fp32).
    """
    dt = x.dtype
    if dt not in (torch.float16, torch.bfloat16):
        return None
    d = x.shape[-1]
    inv_freq = 1.0 / (float(base) ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    if where == "all":
        angles = positions.to(dt)[:, None] * inv_freq.to(dt)[None, :]
    elif where == "angles":
        angles = (positions.float()[:, None] * inv_freq[None, :]).to(dt)
    else:
        angles = positions.float()[:, None] * inv_freq.to(dt).float()[None, :]
    if convention == "half":
        angles = torch.cat((angles, angles), dim=-1)
        first, second = x.chunk(2, dim=-1)
        turned = torch.cat((-second, first), dim=-1)
    else:
        angles = angles.repeat_interleave(2, dim=-1)
        pairs = x.unflatten(-1, (-1, 2))
        turned = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    cos, sin = angles.cos(), angles.sin()
    if where == "inv_freq":  # fp32 trig: only the frequencies were rounded
        return x.float() * cos + turned.float() * sin
    return x * cos + turned * sin


# (diagnosis id, label, fn(x, positions, base, declared convention) -> output or None)
def _swapped(declared_is: str):
    def fn(x, positions, base, convention):
        if convention != declared_is:
            return None
        return rotate(x, positions, base, other(convention))

    return fn


def _positions_ignored(x, positions, base, convention):
    plain = torch.arange(x.shape[-2])
    if torch.equal(positions.cpu(), plain):
        return None
    return rotate(x, plain, base, convention)


def _base_ignored(x, positions, base, convention):
    if float(base) == DEFAULT_BASE:
        return None
    return rotate(x, positions, DEFAULT_BASE, convention)


def _positions_rounded(x, positions, base, convention):
    """Positions cast to x's half dtype, the rest exact (fp32 angles of rounded positions)."""
    if x.dtype not in (torch.float16, torch.bfloat16):
        return None
    return rotate(x, positions.to(x.dtype), base, convention)


def mixed(pairs: str):
    """The pairs of convention `pairs` turned by the other convention's per-feature frequency layout.

    Independent of the declared convention: wrong for either. Computed in
    float64, like `rotate`.
    """

    def fn(x, positions, base, convention):
        d = x.shape[-1]
        inv_freq = float(base) ** (-(2.0 * torch.arange(d // 2, dtype=torch.float64) / d))
        angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]
        layout = torch.cat([angles, angles], dim=-1) if pairs == "interleaved" else angles.repeat_interleave(2, dim=-1)
        xf = x.to(torch.float64)
        if pairs == "interleaved":
            turned = torch.stack([-xf[..., 1::2], xf[..., 0::2]], dim=-1).flatten(-2)
        else:
            turned = torch.cat([-xf[..., d // 2 :], xf[..., : d // 2]], dim=-1)
        return xf * layout.cos() + turned * layout.sin()

    return fn


ROPE_VARIANTS = [
    ("rope_convention_swapped", "your math pairs features the 'interleaved' way (2i, 2i+1) but the file declares "
     "'half' or no CONVENTION: declare CONVENTION = \"interleaved\"", _swapped("half")),
    ("rope_convention_swapped", "your math pairs features the 'half' way (i, i + d/2) but the file declares "
     "CONVENTION = \"interleaved\": declare CONVENTION = \"half\" (or delete the line)", _swapped("interleaved")),
    ("rope_sign_flipped", "rotation by -angle", lambda x, p, b, c: rotate(x, p, b, c, sign=-1.0)),
    ("rope_freq_exponent", "theta_i = base ** (-i / d_head)",
     lambda x, p, b, c: rotate(x, p, b, c, pair_exponent=False)),
    ("rope_positions_ignored", "rotated by arange(T) instead of positions", _positions_ignored),
    ("rope_base_ignored", "base fixed at 10000", _base_ignored),
    ("rope_low_precision_angles", "angles rounded to the input dtype", rotate_low_precision),
    ("rope_low_precision_angles", "fp32 angles cast to the input dtype before cos/sin",
     lambda x, p, b, c: rotate_low_precision(x, p, b, c, where="angles")),
    ("rope_low_precision_angles", "inv_freq cast to the input dtype",
     lambda x, p, b, c: rotate_low_precision(x, p, b, c, where="inv_freq")),
    # Issue 18: mistakes seen in real code, after the planted ones.
    ("rope_low_precision_positions", "positions cast to the input dtype before an fp32 multiply", _positions_rounded),
    ("rope_convention_mixed", "interleaved pairs (2i, 2i+1) with the half layout's cat((freqs, freqs)) table",
     mixed("interleaved")),
    ("rope_convention_mixed", "half pairs (i, i + d/2) with each frequency repeated in place", mixed("half")),
]


# Mistakes as `rotate` knobs, so that two compose (issue 31): the file with both. Ordered as they are named: the
# sign and the exponent move every test, ignored positions only those whose positions are not arange(T), a
# hard-coded base only those that pass another one.
ROPE_KNOBS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("rope_sign_flipped", "rotation by -angle", {"sign": -1.0}),
    ("rope_freq_exponent", "theta_i = base ** (-i / d_head)", {"pair_exponent": False}),
    ("rope_positions_ignored", "rotated by arange(T) instead of positions", {"positions": "arange"}),
    ("rope_base_ignored", "base fixed at 10000", {"base": DEFAULT_BASE}),
)


def knobbed(knobs: dict[str, Any]):
    def fn(x, positions, base, convention):
        form = dict(knobs)
        if form.pop("positions", None) == "arange":
            positions = torch.arange(x.shape[-2])
        return rotate(x, positions, form.pop("base", base), convention, **form)

    return fn
