"""Reading a typed numeric answer: number formats, units, and tolerance checks.

Why so careful: a learner who types `2 GiB` for an answer kept in bytes is
right, one who types `2 GB` is off by 7% and must be told so, and a typo like
`12,3.4` must be a "try again", never a wrong answer. Binary (KiB = 2^10) and
decimal (KB = 10^3) prefixes are distinct; units of another family (FLOPs for
a memory question) are refused with a message instead of compared.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# family -> unit spelling -> factor to the family's base unit.
# The dimensionless family holds plain counts and their multipliers: "B" there
# is a billion (7B params); in the bytes family "B" is a byte.
UNIT_FAMILIES: dict[str, dict[str, float]] = {
    "count": {
        "": 1.0,
        "x": 1.0,
        "×": 1.0,
        "%": 0.01,
        "percent": 0.01,
        "params": 1.0,
        "tokens": 1.0,
        "K": 1e3,
        "k": 1e3,
        "M": 1e6,
        "B": 1e9,
        "G": 1e9,
        "T": 1e12,
    },
    "bytes": {
        "bytes": 1.0,
        "byte": 1.0,
        "B": 1.0,
        "KB": 1e3,
        "kB": 1e3,
        "MB": 1e6,
        "GB": 1e9,
        "TB": 1e12,
        "PB": 1e15,
        "KiB": 2.0**10,
        "MiB": 2.0**20,
        "GiB": 2.0**30,
        "TiB": 2.0**40,
        "PiB": 2.0**50,
    },
    "flops": {
        "FLOPs": 1.0,
        "FLOP": 1.0,
        "KFLOPs": 1e3,
        "MFLOPs": 1e6,
        "GFLOPs": 1e9,
        "TFLOPs": 1e12,
        "PFLOPs": 1e15,
        "EFLOPs": 1e18,
    },
    "time": {
        "s": 1.0,
        "sec": 1.0,
        "ms": 1e-3,
        "us": 1e-6,
        "µs": 1e-6,
        "ns": 1e-9,
        "min": 60.0,
        "h": 3600.0,
    },
}
# Units with a count word after a multiplier: "7B params", "3.2M tokens".
_COUNT_WORDS = ("params", "parameters", "tokens")
# Units a question may declare (the schema's list plus their family members).
KNOWN_UNITS: frozenset[str] = frozenset(u for fam in UNIT_FAMILIES.values() for u in fam)

_NUMBER = re.compile(
    r"""^\s*(?P<num>[-+]?(?:\d[\d,_]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*(?P<unit>[^\d\s].*?)?\s*$""",
    re.VERBOSE,
)
_GROUPED = re.compile(r"^[-+]?\d{1,3}(,\d{3})+(\.\d*)?([eE][-+]?\d+)?$")


class AnswerFormatError(ValueError):
    """The typed text is not a readable number/unit: ask again, do not grade."""


@dataclass(frozen=True)
class Tolerance:
    """A value is right when |value - answer| <= max(abs, rel * |answer|)."""

    rel: float = 1e-9
    abs: float = 0.0

    def accepts(self, value: float, answer: float) -> bool:
        if not (math.isfinite(value) and math.isfinite(answer)):
            return False
        return abs(value - answer) <= max(self.abs, self.rel * abs(answer))

    def describe(self) -> str:
        parts = []
        if self.rel > 1e-6:
            parts.append(f"±{self.rel * 100:g}%")
        if self.abs:
            parts.append(f"±{self.abs:g}")
        return " or ".join(parts) or "exact"


def unit_family(unit: str) -> str | None:
    """The family a question's declared unit belongs to (counts win ties: "B" = billion)."""
    for family, units in UNIT_FAMILIES.items():
        if unit in units:
            return family
    return None


def _parse_plain_number(text: str) -> float:
    raw = text
    if "," in text:
        if not _GROUPED.match(text):
            raise AnswerFormatError(f"couldn't read {raw!r} as a number; try again (e.g. 1500, 1,500, 1.5e3)")
        text = text.replace(",", "")
    if "_" in text:
        if "__" in text or text.endswith("_") or "_." in text or "._" in text:
            raise AnswerFormatError(f"couldn't read {raw!r} as a number; try again")
        text = text.replace("_", "")
    try:
        value = float(text) if any(c in text for c in ".eE") else int(text)
    except ValueError:
        raise AnswerFormatError(f"couldn't read {raw!r} as a number; try again") from None
    return value


def _resolve_unit(unit: str, family: str) -> float:
    """Factor to convert `unit` into the base of `family`; raise if it belongs elsewhere."""
    units = UNIT_FAMILIES[family]
    if unit in units:
        return units[unit]
    # Case-insensitive second try inside the question's own family: "gib", "tflops".
    for name, factor in units.items():
        if name.lower() == unit.lower():
            return factor
    # "7B params" / "3 M tokens": a multiplier followed by a count word.
    if family == "count":
        for word in _COUNT_WORDS:
            if unit.lower().endswith(word):
                prefix = unit[: -len(word)].strip()
                if prefix in units:
                    return units[prefix]
    other = unit_family(unit)
    if other is None:
        for fam, members in UNIT_FAMILIES.items():
            if any(m.lower() == unit.lower() for m in members if m):
                other = fam
                break
    expected = ", ".join(u for u in units if u)
    if other is not None and other != family:
        raise AnswerFormatError(
            f"'{unit}' is a unit of {_FAMILY_LABEL[other]}, but this answer is {_FAMILY_LABEL[family]}; "
            f"use one of: {expected or 'a plain number'}"
        )
    raise AnswerFormatError(f"unknown unit '{unit}'; use one of: {expected or 'a plain number'}")


_FAMILY_LABEL = {"count": "a count", "bytes": "memory (bytes)", "flops": "compute (FLOPs)", "time": "time"}


def parse_answer(text: str, unit: str = "") -> float:
    """Read `text` as a number in the question's `unit`.

    A bare number is taken to be in `unit`; a number with a unit is converted
    to `unit` (so `2 GiB` for a bytes question is 2147483648). Raises
    AnswerFormatError with a one-line, learner-facing message.
    """
    stripped = text.strip()
    if not stripped:
        raise AnswerFormatError("type a number (or q to quit)")
    match = _NUMBER.match(stripped)
    if not match:
        raise AnswerFormatError(f"couldn't read {stripped!r} as a number; try again (e.g. 1500, 1.5e3, 2 GiB)")
    value = _parse_plain_number(match.group("num"))
    typed_unit = (match.group("unit") or "").strip()
    family = unit_family(unit)
    if family is None:  # a question with a unit we do not know: compare only bare numbers or the same unit
        if typed_unit and typed_unit != unit:
            raise AnswerFormatError(f"give the answer in {unit}")
        return float(value)
    if not typed_unit:
        return float(value)
    factor = _resolve_unit(typed_unit, family)
    target = UNIT_FAMILIES[family][unit]
    if factor == target:
        return value if isinstance(value, float) else float(value)
    return value * factor / target


def format_number(value: float) -> str:
    """Show a number the way a person writes it: 11,008, 4,060,000, 1.5e+18, 0.0625.

    A typed `4.06M` is 4060000.000000001 in floating point; it is shown as
    the integer the learner meant, not as 4.06e+06.
    """
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return str(value)
    nearest = round(value)
    if abs(value) < 1e15 and (value == nearest or abs(value - nearest) <= 1e-9 * abs(value)):
        return f"{int(nearest):,}"
    if 1e3 <= abs(value) < 1e15:  # 1,234,567.8 rather than 1.23457e+06
        decimals = max(0, 6 - len(str(int(abs(value)))))
        return f"{value:,.{decimals}f}".rstrip("0").rstrip(".")
    return f"{value:.6g}"


def format_with_unit(value: float, unit: str) -> str:
    text = format_number(value)
    if not unit:
        return text
    if unit in ("%", "x"):
        return f"{text}{unit}"
    return f"{text} {unit}"
