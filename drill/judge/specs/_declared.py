"""A module-level constant by which a file declares which of two conventions it implements.

rope's `CONVENTION` ("half" | "interleaved") and sinusoidal's `LAYOUT`
("interleaved" | "concat") work alike: the child reports the constant
(`Spec.report_attrs`), the parent has computed each case's expected answers
for every choice up front (`Case.ctx["alt"]`), and `Declared.apply` (the
spec's `prepare`) keeps the declared one's, or refuses the run in one line
when the value is none of the choices. Whatever the file declares, its
output must equal that convention's exact answer, so a wrong declaration
can only fail, never pass.

The two diagnoses each such constant needs, "your math is the other
convention" and "the value is unknown", are templates here, worded from the
constant's name and choices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from drill.judge.spec import Case, Diagnosis

# attr_report types whose value the child sends back (anything else arrives as its type name only).
_SCALAR_TYPES = ("str", "int", "float", "bool", "NoneType")


@dataclass(frozen=True)
class Declared:
    """One declarable constant: its name, its choices (the first is not special), its default, its diagnoses."""

    name: str  # the module-level name the child reports ("LAYOUT")
    choices: tuple[str, ...]
    default: str  # what a file without the constant is graded as
    ctx_key: str  # where each case's ctx records the choice in force ("layout")
    invalid: Diagnosis  # the refusal of a value that is none of the choices

    def choose(self, attrs: dict[str, Any]) -> tuple[str, str] | tuple[Diagnosis, str]:
        """(choice in force, what the file declared or "absent"), or (Diagnosis, detail) for an unknown value."""
        info = attrs.get(self.name) or {}
        if not info.get("present"):
            return self.default, "absent"
        value = info.get("value")
        if not isinstance(value, str) or value not in self.choices:
            shown = repr(value) if info.get("type") in _SCALAR_TYPES else f"a {info.get('type')}"
            expected = " or ".join(f'"{c}"' for c in self.choices)
            return self.invalid, f"{self.name} is {shown}; expected {expected}"
        return value, value

    def apply(self, cases: list[Case], attrs: dict[str, Any]) -> tuple[Diagnosis, str] | None:
        """`Spec.prepare`: record the choice in every case and keep its expected answers; refuse an unknown one."""
        chosen, declared = self.choose(attrs)
        if isinstance(chosen, Diagnosis):
            return chosen, declared
        for case in cases:
            case.ctx[self.ctx_key], case.ctx["declared"] = chosen, declared
            alt = case.ctx.get("alt")
            if alt is not None:
                case.expected, case.expected_grads = alt[chosen]
        return None

    def other(self, choice: str) -> str:
        """The other convention of a two-way choice."""
        return next(c for c in self.choices if c != choice)


def invalid_diagnosis(prefix: str, name: str, choices: tuple[str, ...], default: str) -> Diagnosis:
    """`<prefix>_<name>_invalid`: the constant holds none of the choices (the run is refused, nothing compared)."""
    listed = " or ".join(f'"{c}"' for c in choices)
    return Diagnosis(
        f"{prefix}_{name.lower()}_invalid", f"{name} has an unknown value",
        f"The module-level {name} must be {listed} (absent means \"{default}\").",
        "Set " + " or ".join(f'{name} = "{c}"' for c in choices) + ", exactly as written.",
    )


def swapped_diagnosis(prefix: str, name: str, what: str, meaning: dict[str, str], default: str) -> Diagnosis:
    """`<prefix>_<name>_swapped`: the math is the other choice's (`meaning` says what each one is)."""
    described = "; ".join(f'"{c}" {m}' for c, m in meaning.items())
    return Diagnosis(
        f"{prefix}_{name.lower()}_swapped", f"{what} of the other {name.lower()}",
        f"Your output is laid out the way the other {name.lower()} does it ({described}); the grader checks the "
        f"one the file declares.",
        f"Either change the code, or declare what you implement at the top of the file: {name} = \"...\" "
        f"(\"{default}\" is the default when {name} is absent).",
    )
