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
        "times": 1.0,
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
        "thousand": 1e3,
        "million": 1e6,
        "billion": 1e9,
        "bn": 1e9,
        "trillion": 1e12,
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
        # Bits, spelled out so nobody can mean bytes by them: 8 bits = 1 byte.
        "bit": 1 / 8,
        "bits": 1 / 8,
        "kbit": 1e3 / 8,
        "Kbit": 1e3 / 8,
        "Mbit": 1e6 / 8,
        "Gbit": 1e9 / 8,
        "Tbit": 1e12 / 8,
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
# The classic short bit spellings (a capital prefix and a small b). Graded as bits
# they would silently fail a learner who meant bytes; read as bytes they would
# pass a wrong answer (171.8 Gb is not 160 GiB). So they are asked again.
_SHORT_BITS: dict[str, str] = {"b": "bits", "Kb": "kilobits", "Mb": "megabits", "Gb": "gigabits", "Tb": "terabits",
                               "Pb": "petabits"}
# Count words after an optional multiplier ("7B params", "3.2M tokens"), and the
# kind of count each one names: a number of tokens is not a number of params.
_COUNT_WORDS: dict[str, str] = {
    "parameters": "params",
    "params": "params",
    "param": "params",
    "tokens": "tokens",
    "token": "tokens",
    "times": "ratio",
    "percent": "ratio",
    "x": "ratio",
    "×": "ratio",
    "%": "ratio",
}
_KIND_LABEL = {"params": "in params", "tokens": "in tokens", "ratio": "a ratio (x or %)"}
# Units a question may declare (the schema's list plus their family members).
KNOWN_UNITS: frozenset[str] = frozenset(u for fam in UNIT_FAMILIES.values() for u in fam)

_NUMBER = re.compile(
    r"""^\s*(?P<num>[-+]?(?:\d[\d,_]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*(?P<unit>[^\d\s].*?)?\s*$""",
    re.VERBOSE,
)
_GROUPED = re.compile(r"^[-+]?\d{1,3}(,\d{3})+(\.\d*)?([eE][-+]?\d+)?$")
# What a typed unit looks like: letters, µ, %, ×, spaces ("B params"). Anything
# else after a number ("^30", "/4", "**2", "√2") makes the answer an expression.
_UNIT_TEXT = re.compile(r"^[A-Za-zµ%×][A-Za-zµ%× ]*$")
_EXPRESSION = re.compile(r"^(?P<expr>.*?(?:[\d)]|(?<![A-Za-z_])pi))\s*(?P<unit>[A-Za-zµ%×][A-Za-zµ%× ]*)?$")
# pi (or π) as a word of its own: "2pi", "2 π", "π/2" — not the "pi" in "PiB" or "pib".
_PI = re.compile(r"(?<![A-Za-z_])(?:pi|π)(?![A-Za-z_])")
MAX_ANSWER_CHARS = 200


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


@dataclass(frozen=True)
class TypedAnswer:
    """What the learner typed, read: `value` is in the question's unit.

    `typed_unit` is the unit they wrote ("" for a bare number) and
    `computed` says the text was arithmetic (2^30, 1/4): the verdict then
    shows both what was typed and what it came to.
    """

    text: str
    value: float
    typed_unit: str = ""
    computed: bool = False


def unit_family(unit: str) -> str | None:
    """The family a question's declared unit belongs to (counts win ties: "B" = billion)."""
    for family, units in UNIT_FAMILIES.items():
        if unit in units:
            return family
    return None


def _typed_family(unit: str) -> str | None:
    """The family a typed unit belongs to, trying the exact spelling first, then any case."""
    family = unit_family(unit)
    if family is not None:
        return family
    if unit in _SHORT_BITS:
        return "bytes"
    for fam, members in UNIT_FAMILIES.items():
        if any(m.lower() == unit.lower() for m in members if m):
            return fam
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


def _split_count(unit: str) -> tuple[float, str | None] | None:
    """A count unit as (multiplier, kind): "B" -> (1e9, None), "7B params"'s "B params" ->
    (1e9, "params"), "%" -> (0.01, "ratio"); None when it is not a count unit.
    Multipliers are case-insensitive here ("7b" is seven billion): no byte is a count."""
    units = UNIT_FAMILIES["count"]
    text = unit.strip()
    kind: str | None = None
    for word, word_kind in _COUNT_WORDS.items():
        if text.lower().endswith(word.lower()) and (len(text) == len(word) or word not in ("x", "×")):
            kind = word_kind
            text = text[: -len(word)].strip()
            factor = units.get(word) or units.get(word.lower()) or 1.0
            break
    else:
        factor = 1.0
    if text == "":
        return factor, kind
    if kind is not None and kind == "ratio":
        return None  # "B%", "Mx": not a count anyone writes
    for name, multiplier in units.items():
        if (name and _COUNT_WORDS.get(name) is None and name.lower() == text.lower()
                and name not in ("params", "tokens")):
            return multiplier * factor, kind
    return None


def _count_factor(typed: str, unit: str) -> float:
    """Factor from a typed count unit to the question's count unit; refuses another kind."""
    theirs = _split_count(typed)
    ours = _split_count(unit)
    assert ours is not None
    if theirs is None:
        raise _wrong_unit(typed, "count")
    (typed_factor, typed_kind), (unit_factor, unit_kind) = theirs, ours
    if typed_kind and unit_kind and typed_kind != unit_kind:
        raise AnswerFormatError(f"you wrote {typed.strip()}; the answer is {_KIND_LABEL[unit_kind]} (a bare number is "
                                "fine)")
    return typed_factor / unit_factor


def _bytes_factor(typed: str, unit: str) -> float:
    units = UNIT_FAMILIES["bytes"]
    if typed in units:
        return units[typed] / units[unit]
    if typed in _SHORT_BITS:
        raise AnswerFormatError(
            f"'{typed}' means {_SHORT_BITS[typed]} (8 bits = 1 byte); for bytes type "
            f"{typed[:-1] + 'B' if typed != 'b' else 'B or bytes'}, for bits spell it "
            f"{typed[:-1] + 'bit' if typed != 'b' else 'bits'}"
        )
    # Any case is fine when it cannot mean bits: "gib", "gb", "GIB". A capital prefix
    # with a small final b ("MIb", "Gib") is the bit spelling: ask rather than guess.
    if typed.endswith("b") and typed != typed.lower():
        raise AnswerFormatError(f"'{typed}' reads as bits (a small b); write it with a capital B for bytes, or 'bits'")
    for name, factor in units.items():
        if name.lower() == typed.lower():
            return factor / units[unit]
    raise _wrong_unit(typed, "bytes")


def _resolve_unit(typed: str, unit: str, family: str) -> float:
    """Factor converting a value in the typed unit into the question's `unit`; raise if it cannot."""
    if family == "count":
        return _count_factor(typed, unit)
    if family == "bytes":
        return _bytes_factor(typed, unit)
    units = UNIT_FAMILIES[family]
    if typed in units:
        return units[typed] / units[unit]
    for name, factor in units.items():  # "tflops", "MS"
        if name.lower() == typed.lower():
            return factor / units[unit]
    raise _wrong_unit(typed, family)


def _wrong_unit(typed: str, family: str) -> AnswerFormatError:
    expected = ", ".join(u for u in UNIT_FAMILIES[family] if u)
    other = _typed_family(typed)
    if other is None and _split_count(typed) is not None:
        other = "count"
    if other is not None and other != family:
        return AnswerFormatError(
            f"'{typed}' is a unit of {_FAMILY_LABEL[other]}, but this answer is {_FAMILY_LABEL[family]}; "
            f"use one of: {expected or 'a plain number'}"
        )
    return AnswerFormatError(f"unknown unit '{typed}'; use one of: {expected or 'a plain number'}")


_FAMILY_LABEL = {"count": "a count", "bytes": "memory (bytes)", "flops": "compute (FLOPs)", "time": "time"}


def _with_pi(text: str) -> str:
    """π spelled `pi`, and the multiplication a person leaves out around it made explicit:
    2π·10000 -> 2*pi·10000, 2 pi -> 2*pi, π2 -> pi*2 (the evaluator knows pi as a constant)."""
    text = _PI.sub("pi", text)
    text = re.sub(r"(?<=[\d)])\s*(?=pi(?![A-Za-z_]))", "*", text)
    return re.sub(r"(?<![A-Za-z_])pi\s*(?=[\d(√])", "pi*", text)


def _evaluate_expression(expr: str, raw: str) -> float:
    """Simple arithmetic typed as an answer (2^30, 1/4, sqrt(128), 8√2, 3 x 4096, 2π·10000), with
    the bank's own AST-whitelisted evaluator: never `eval`, huge powers refused."""
    from drill.quiz.formula import FormulaError, evaluate

    text = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", expr)  # 1,024 * 4
    text = text.replace("^", "**")  # nobody means XOR in an answer
    text = re.sub(r"(?:(?<=[\d)])|(?<=pi))\s*[×·xX]\s*(?=[\d(√.p])", "*", text)  # 3 x 4096, 2×2, pi·10000
    text = re.sub(r"(?<=[\d)])\s*√", "*√", text)  # 8√2 = 8 * √2
    text = re.sub(r"√\s*(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)", r"sqrt(\1)", text).replace("√", "sqrt")
    try:
        value = evaluate(text)
    except FormulaError as exc:
        known = "; the one constant is pi (π), and e is exp(1)" if str(exc).startswith("unknown name") else ""
        raise AnswerFormatError(
            f"couldn't work out {raw!r} ({exc}{known}); try again (e.g. 2^30, 1/4, sqrt(128), 2π)") from None
    except (RecursionError, MemoryError):
        raise AnswerFormatError(f"couldn't work out {raw!r}; try a simpler form") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise AnswerFormatError(f"couldn't work out {raw!r} as a number; try again")
    try:
        return float(value)  # 2**4095 is a fine int but no float: too large to be an answer
    except OverflowError:
        raise AnswerFormatError(f"{raw!r} is far too large to be the answer; try again") from None


def read_answer(text: str, unit: str = "") -> TypedAnswer:
    """Read `text` as a number (or simple arithmetic) in the question's `unit`.

    A bare number is taken to be in `unit`; a number with a unit is converted
    to `unit` (so `2 GiB` for a bytes question is 2147483648). Raises
    AnswerFormatError with a one-line, learner-facing message: such input is
    asked again, never graded.
    """
    stripped = text.strip().replace("\u2212", "-")  # a typographic minus (pasted) is a minus
    if not stripped:
        raise AnswerFormatError("type a number (or q to quit)")
    if len(stripped) > MAX_ANSWER_CHARS:
        raise AnswerFormatError(f"that answer is longer than {MAX_ANSWER_CHARS} characters; type a number")
    with_pi = _PI.search(stripped) is not None  # "2 pi" is arithmetic, not 2 of a unit called pi
    match = None if with_pi else _NUMBER.match(stripped)
    typed_unit = (match.group("unit") or "").strip() if match else ""
    if match and (not typed_unit or _UNIT_TEXT.match(typed_unit)):
        value: float = _parse_plain_number(match.group("num"))
        computed = False
    else:
        expression = _EXPRESSION.match(_with_pi(stripped) if with_pi else stripped)
        if not expression or not (with_pi or re.search(r"\d", stripped)):
            raise AnswerFormatError(
                f"couldn't read {stripped!r} as a number; try again (e.g. 1500, 1.5e3, 2 GiB, 2^30)")
        value = _evaluate_expression(expression.group("expr"), stripped)
        typed_unit = (expression.group("unit") or "").strip()
        computed = True
    converted = _convert(value, typed_unit, unit)
    if not math.isfinite(converted):  # 1e400, or 1e308 TB in bytes
        raise AnswerFormatError(f"{stripped!r} is far too large to be the answer; try again")
    return TypedAnswer(stripped, converted, typed_unit, computed)


def _convert(value: float, typed_unit: str, unit: str) -> float:
    family = unit_family(unit)
    if family is None:  # a question with a unit we do not know: compare only bare numbers or the same unit
        if typed_unit and typed_unit != unit:
            raise AnswerFormatError(f"give the answer in {unit}")
        return float(value)
    if not typed_unit or typed_unit == unit:
        return float(value)
    factor = _resolve_unit(typed_unit, unit, family)
    return float(value) if factor == 1.0 else value * factor


def parse_answer(text: str, unit: str = "") -> float:
    """The value of `text` in the question's `unit` (see `read_answer`)."""
    return read_answer(text, unit).value


def scale_slip(typed: TypedAnswer, unit: str, expected: float, tolerance: Tolerance) -> str | None:
    """A "did you mean" line when a bare number is right once the question's display
    scale is applied — 11,274,289,152 for an answer in billions, 0.25 for 25% — else None.

    Such a slip is a reading of the unit, not of the concept: it is asked again
    instead of graded (like a typo), so the learner is never marked wrong for it.
    """
    family = unit_family(unit)
    if typed.typed_unit or family is None or tolerance.accepts(typed.value, expected):
        return None
    scale = UNIT_FAMILIES[family][unit]
    if scale == 1.0 or not tolerance.accepts(typed.value / scale, expected):
        return None
    meant = format_with_unit(typed.value / scale, unit)
    return (f"did you mean {meant}? A bare number is read in {unit} here, so {typed.text} would be "
            f"{format_with_unit(typed.value, unit)}; type it in {unit} or add a unit")


# The decimal and binary spelling of each prefix (KB = 10^3 bytes, KiB = 2^10), both ways.
_PREFIX_POWERS = {"K": 1, "M": 2, "G": 3, "T": 4, "P": 5}
_BYTE_TWINS = {f"{p}B": f"{p}iB" for p in _PREFIX_POWERS} | {f"{p}iB": f"{p}B" for p in _PREFIX_POWERS} | {"kB": "KiB"}


def _byte_size(name: str) -> str:
    power = _PREFIX_POWERS[name[0].upper()]
    return f"2^{10 * power}" if name.endswith("iB") else f"10^{3 * power}"


def unit_slip(typed: TypedAnswer, unit: str, expected: float, tolerance: Tolerance,
              known_wrong: tuple[float, ...] = ()) -> str | None:
    """A "did you mean GiB?" line when a memory answer typed with a decimal unit is wrong but
    the binary one would be right (2 GB for 2 GiB), or the reverse; else None.

    Like a scale slip it is asked again, never graded: the learner read the prefix, not
    the concept. Except when the value as typed is one of the question's own known
    mistakes (`known_wrong`, in the question's unit): that question is about this very
    confusion, and nudging would hand out its answer.
    """
    if unit_family(unit) != "bytes" or not typed.typed_unit or tolerance.accepts(typed.value, expected):
        return None
    if any(tolerance.accepts(typed.value, wrong) for wrong in known_wrong):
        return None
    units = UNIT_FAMILIES["bytes"]
    spelled = typed.typed_unit if typed.typed_unit in units else next(
        (name for name in units if name.lower() == typed.typed_unit.lower()), "")  # gib -> GiB
    twin = _BYTE_TWINS.get(spelled)
    if twin is None or not tolerance.accepts(typed.value * units[twin] / units[spelled], expected):
        return None
    number = typed.text[: len(typed.text) - len(typed.typed_unit)].rstrip()
    return (f"did you mean {number} {twin}? {spelled} is {_byte_size(spelled)} bytes and {twin} is {_byte_size(twin)}, "
            f"so {typed.text} would be {format_with_unit(typed.value, unit)}; type it again with the unit you mean")


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
