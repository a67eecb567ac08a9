"""Drawing, rendering and solving parametric questions.

Why one module for all three: the quiz and the validator must agree exactly
on how parameters are drawn, how derived values and constraints are applied
and how the prompt is filled in — the validator proves a question works by
running the very code the quiz runs, on many seeded draws.
"""

from __future__ import annotations

import math
import random
import re
from functools import lru_cache
from typing import TYPE_CHECKING

from drill.quiz.formula import Formula, FormulaError, Number, parse_formula
from drill.quiz.numbers import format_number

if TYPE_CHECKING:
    from drill.quiz.kinds.parametric import ParametricQuestion

PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
MAX_TRIES = 1000


class NoValidDraw(FormulaError):
    """No parameter draw satisfied the constraints."""


@lru_cache(maxsize=4096)
def compiled(text: str) -> Formula:
    """Parse once per distinct formula text (formulas are immutable strings)."""
    return parse_formula(text)


def draw_params(question: ParametricQuestion, rng: random.Random) -> dict[str, Number]:
    env: dict[str, Number] = {}
    for spec in question.params:
        if spec.choices:
            env[spec.name] = rng.choice(spec.choices)
        else:
            env[spec.name] = rng.randrange(spec.low, spec.high + 1, spec.step)
    return env


def complete(question: ParametricQuestion, params: dict[str, Number]) -> dict[str, Number] | None:
    """Add derived values; None when a constraint rejects this draw."""
    env = dict(params)
    for name, text in question.derived:
        env[name] = compiled(text).evaluate(env)
    for text in question.constraints:
        if not compiled(text).evaluate(env):
            return None
    return env


def draw(question: ParametricQuestion, rng: random.Random, tries: int = MAX_TRIES) -> dict[str, Number]:
    """A parameter draw (with derived values) that satisfies every constraint."""
    for _ in range(tries):
        env = complete(question, draw_params(question, rng))
        if env is not None:
            return env
    raise NoValidDraw(f"no parameter draw satisfied the constraints in {tries} tries")


def render(question: ParametricQuestion, env: dict[str, Number]) -> str:
    """Fill `{name}` placeholders; only plain names are substituted (no format-spec tricks)."""

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in env:
            value = env[name]
            # Plain digits for whole numbers: prompts read "d_model 4096", not "4,096".
            if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e15):
                return str(int(value))
            return format_number(value)
        return match.group(0)

    text = _PLURAL.sub(lambda m: _plural(m, env), question.prompt)
    return PLACEHOLDER.sub(fill, text)


# "{n} byte(s)" reads "1 byte" / "2 bytes" once the number is known.
_PLURAL = re.compile(r"\{([A-Za-z][A-Za-z0-9_]*)\}(\s+)([A-Za-z]+)\(s\)")


def _plural(match: re.Match[str], env: dict[str, Number]) -> str:
    name, space, word = match.groups()
    if name not in env:
        return match.group(0)
    return "{" + name + "}" + space + word + ("" if env[name] == 1 else "s")


def answer(question: ParametricQuestion, env: dict[str, Number]) -> float:
    """The right answer for this draw; raises FormulaError if it is not a finite number."""
    return finite(compiled(question.formula).evaluate(env))


def wrong_values(question: ParametricQuestion, env: dict[str, Number]) -> list[tuple[float, str]]:
    """(value, feedback) of each known-wrong formula for this draw; failing ones are skipped."""
    result = []
    for wrong in question.wrong_formulas:
        try:
            result.append((finite(compiled(wrong.formula).evaluate(env)), wrong.feedback))
        except FormulaError:
            continue
    return result


def finite(value: Number) -> float:
    """`value` as the answer of a formula: a finite number, not a comparison; else FormulaError."""
    if isinstance(value, bool):
        raise FormulaError("the formula is a comparison (true/false), not a number")
    if not math.isfinite(value):
        raise FormulaError(f"the formula gives {value}")
    return value
