"""parametric: a numeric question whose numbers are drawn fresh each time; the answer is a formula.

Drawing, filling in the prompt and solving live in drill.quiz.parametric, which
the validator runs too: it proves a question by running the quiz's own code.
Its audit goes over the draws themselves — every one when the parameter space
is small, else AUDIT_DRAWS seeded ones — so that no listed wrong formula lands
within the answer's tolerance on a draw (a learner making that mistake would
be graded right there).
"""

from __future__ import annotations

import itertools
import math
import random
import re
from dataclasses import dataclass, field
from typing import Any

from drill.quiz import parametric
from drill.quiz.fields import Fields, as_number, suggest, type_name
from drill.quiz.formula import FormulaError
from drill.quiz.kinds.base import Add, Asked, Asker, Kind
from drill.quiz.kinds.numeric import ask_number, unit_and_tolerance
from drill.quiz.numbers import Tolerance, format_with_unit
from drill.quiz.schema import Question
from drill.quiz.text import reflow
from drill.quiz.yamlread import LineDict

_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
SAMPLE_DRAWS = 200
SAMPLE_SEED = 20240607
# The audit tries every draw of a parameter space up to this size, else this many seeded ones.
AUDIT_DRAWS = 5000
MAX_PARAM_VALUES = 100_000  # a range with more values than this is a typo, and slow to audit


@dataclass(frozen=True)
class WrongFormula:
    """A parametric question's known mistake, as a formula."""

    formula: str
    feedback: str
    line: int = field(default=0, compare=False)


@dataclass(frozen=True)
class ParamSpec:
    """One parameter: either a list of choices or an inclusive integer range with a step."""

    name: str
    choices: tuple[int | float, ...] = ()
    low: int = 0
    high: int = 0
    step: int = 1

    def values_count(self) -> int:
        return len(self.choices) if self.choices else (self.high - self.low) // self.step + 1

    def values(self) -> list[int | float]:
        return list(self.choices) if self.choices else list(range(self.low, self.high + 1, self.step))


@dataclass(frozen=True, kw_only=True)
class ParametricQuestion(Question):
    """A numeric question with values drawn per ask; the answer is a formula of them."""

    params: tuple[ParamSpec, ...]
    formula: str
    derived: tuple[tuple[str, str], ...] = ()
    constraints: tuple[str, ...] = ()
    unit: str = ""
    tolerance: Tolerance = field(default_factory=Tolerance)
    wrong_formulas: tuple[WrongFormula, ...] = ()


# -- building -----------------------------------------------------------------


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _param(name: Any, spec: Any, fields: Fields, line: int) -> ParamSpec | None:
    what = f"{fields.what}: parameter '{name}'"
    if not isinstance(name, str) or not _NAME_RE.match(name):
        fields.out.add(line, f"{what}: a name must be letters, digits and '_' starting with a letter")
        return None
    if not isinstance(spec, LineDict):
        fields.out.add(line, f"{what} must be {{choices: [...]}} or {{range: [lo, hi]}}, not {type_name(spec)}")
        return None
    sub = Fields(spec, fields.out, what)
    if "choices" in spec:
        sub.check_keys(("choices",), ())
        values = []
        for item in sub.items("choices", lo=1):
            number = as_number(item, fields.out, line, f"{what}: each choice")
            if number is not None:
                values.append(number)
        return ParamSpec(name, choices=tuple(values)) if values else None
    if "range" in spec:
        sub.check_keys(("range",), ("step",))
        bounds = spec["range"]
        step = spec.get("step", 1)
        if not isinstance(bounds, list) or len(bounds) != 2 or not all(_whole(b) for b in bounds):
            fields.out.add(line, f"{what}: range must be [lo, hi] with two whole numbers")
            return None
        if not _whole(step) or step < 1:
            fields.out.add(line, f"{what}: step must be a whole number >= 1")
            return None
        if bounds[0] > bounds[1]:
            fields.out.add(line, f"{what}: range [{bounds[0]}, {bounds[1]}] is empty; put the smaller bound first")
            return None
        spec_out = ParamSpec(name, low=bounds[0], high=bounds[1], step=step)
        if spec_out.values_count() > MAX_PARAM_VALUES:
            fields.out.add(line, f"{what}: range has {spec_out.values_count()} values (at most {MAX_PARAM_VALUES}); "
                                 "raise 'step' or narrow it")
            return None
        return spec_out
    hint = suggest(next(iter(spec), ""), ("choices", "range"))
    fields.out.add(line, f"{what} needs 'choices: [...]' or 'range: [lo, hi]'{hint}")
    return None


def build(fields: Fields, common: dict[str, Any]) -> Question:
    params = []
    spec = fields.mapping("params")
    if spec is not None:
        if not spec:
            fields.out.add(fields.line("params"), f"{fields.what}: 'params' is empty; add at least one parameter")
        for key, line in spec.duplicates:
            fields.out.add(line, f"{fields.what}: parameter '{key}' appears twice")
        for name, value in spec.items():
            param = _param(name, value, fields, spec.line_of(name))
            if param is not None:
                params.append(param)
    derived = []
    dspec = fields.mapping("derived")
    if dspec is not None:
        for name, value in dspec.items():
            line = dspec.line_of(name)
            if not isinstance(name, str) or not _NAME_RE.match(name):
                fields.out.add(line, f"{fields.what}: derived name {name!r} must be letters, digits and '_'")
            elif not isinstance(value, (str, int, float)) or isinstance(value, bool):
                fields.out.add(line, f"{fields.what}: derived '{name}' must be a formula in quotes, not "
                                     f"{type_name(value)}")
            elif name in {p.name for p in params}:
                fields.out.add(line, f"{fields.what}: derived '{name}' has the name of a parameter; rename it")
            else:
                derived.append((name, str(value)))
    wrong = []
    for item in fields.items("wrong_formulas"):
        sub = fields.sub(item, "wrong formula", fields.line("wrong_formulas"))
        if sub is None:
            continue
        sub.check_keys(("formula", "feedback"), ())
        wrong.append(WrongFormula(sub.text("formula"), sub.text("feedback"), sub.data.line))
    unit, tolerance = unit_and_tolerance(fields)
    return ParametricQuestion(
        params=tuple(params),
        formula=fields.text("formula"),
        derived=tuple(derived),
        constraints=fields.strings("constraints"),
        unit=unit,
        tolerance=tolerance,
        wrong_formulas=tuple(wrong),
        **common,
    )


# -- asking -------------------------------------------------------------------


def ask(session: Asker, question: ParametricQuestion) -> Asked:
    env = parametric.draw(question, session.rng)
    session.say(reflow(parametric.render(question, env)))
    expected = parametric.answer(question, env)
    return ask_number(session, question, expected, question.unit, question.tolerance,
                      parametric.wrong_values(question, env))


def card(question: ParametricQuestion) -> tuple[str, str]:
    """One fixed draw (seeded by the id, so a re-export gives the same card), with the formula."""
    env = parametric.draw(question, random.Random(question.id))
    expected = parametric.answer(question, env)
    return reflow(parametric.render(question, env)), (f"{format_with_unit(expected, question.unit)}\n\n"
                                                      f"formula: {question.formula}\n\n{reflow(question.explanation)}")


# -- checking -----------------------------------------------------------------


def _usable(question: ParametricQuestion, add: Add | None) -> tuple[bool, set[int]]:
    """Every formula parses and names only known values; (all main ones ok, usable wrong ones)."""
    known = {p.name for p in question.params}
    ok = True

    def check_formula(text: str, line: int, label: str, names: set[str]) -> bool:
        try:
            formula = parametric.compiled(text)
        except FormulaError as exc:
            if add:
                add(line, f"{label} {text!r}: {exc}")
            return False
        missing = formula.names - names
        if missing:
            if add:
                add(line, f"{label} {text!r} uses unknown name(s) {', '.join(sorted(missing))}; known: "
                          f"{', '.join(sorted(names))}")
            return False
        return True

    for name, text in question.derived:
        ok &= check_formula(text, question.line_of("derived"), f"derived '{name}'", known)
        known.add(name)
    for text in question.constraints:
        ok &= check_formula(text, question.line_of("constraints"), "constraint", known)
    ok &= check_formula(question.formula, question.line_of("formula"), "formula", known)
    usable_wrong = {
        i for i, wrong in enumerate(question.wrong_formulas)
        if check_formula(wrong.formula, wrong.line or question.line_of("wrong_formulas"), "wrong formula", known)
    }
    if add:
        for match in parametric.PLACEHOLDER.finditer(question.prompt):
            name = match.group(1)
            if not parametric.NAME.match(name):
                add(question.line_of("prompt"),
                    f"placeholder {match.group(0)!r} is not allowed; use {{name}} with a parameter or derived "
                    "name only")
            elif name not in known:
                add(question.line_of("prompt"),
                    f"placeholder {{{name}}} is not a parameter or derived value; known: {', '.join(sorted(known))}")
    return bool(ok), usable_wrong


def check(question: ParametricQuestion, add: Add) -> None:
    """Formulas parse; on SAMPLE_DRAWS seeded draws derived values, constraints and the
    formula evaluate to finite numbers, and no wrong formula equals the answer on all of them."""
    ok, usable_wrong = _usable(question, add)
    if not ok:
        return
    rng = random.Random(SAMPLE_SEED)
    valid = tries = 0
    coincide = [0] * len(question.wrong_formulas)
    failed_wrong: set[int] = set(range(len(question.wrong_formulas))) - usable_wrong
    while valid < SAMPLE_DRAWS and tries < SAMPLE_DRAWS * 20:
        tries += 1
        params = parametric.draw_params(question, rng)
        outcome = _evaluate(question, params, add)
        if outcome is None:
            return
        env, right = outcome
        if env is None:
            continue
        valid += 1
        for i, wrong in enumerate(question.wrong_formulas):
            if i in failed_wrong:
                continue
            try:
                value = parametric.finite(parametric.compiled(wrong.formula).evaluate(env))
            except FormulaError as exc:
                failed_wrong.add(i)
                add(wrong.line or question.line, f"wrong formula {wrong.formula!r} fails for {_shown(params)}: {exc}")
                continue
            if question.tolerance.accepts(value, right):
                coincide[i] += 1
    if valid == 0:
        add(question.line_of("constraints"),
            f"the constraints are never satisfied (0 of {tries} seeded draws); relax them or change the parameter "
            "ranges")
        return
    for i, wrong in enumerate(question.wrong_formulas):
        if i not in failed_wrong and coincide[i] == valid:
            add(wrong.line or question.line,
                f"wrong formula {wrong.formula!r} gives the right answer on every draw ({valid} tried); it can never "
                "be told apart — fix or remove it")


def _shown(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def _evaluate(
    question: ParametricQuestion, params: dict[str, Any], add: Add | None
) -> tuple[dict[str, Any] | None, float] | None:
    """(env, right answer) for a draw, (None, nan) when a constraint rejects it, None after
    reporting a failure (the caller stops: one message per question is enough)."""
    try:
        env = parametric.complete(question, params)
    except FormulaError as exc:
        if add:
            add(question.line_of("derived") if question.derived else question.line_of("constraints"),
                f"derived values or constraints fail for {_shown(params)}: {exc}; add a constraint or narrow the "
                "parameter ranges")
        return None
    if env is None:
        return None, math.nan
    try:
        return env, parametric.answer(question, env)
    except FormulaError as exc:
        if add:
            add(question.line_of("formula"),
                f"formula fails for {_shown(params)}: {exc}; add a constraint or narrow the parameter ranges")
        return None


def audit_draws(question: ParametricQuestion) -> tuple[list[dict[str, Any]], bool]:
    """The draws the audit tries and whether they are all of them: the whole parameter
    space when it has at most AUDIT_DRAWS points, else AUDIT_DRAWS seeded draws."""
    size = math.prod(p.values_count() for p in question.params)
    if size <= AUDIT_DRAWS:
        names = [p.name for p in question.params]
        return [dict(zip(names, combo, strict=True))
                for combo in itertools.product(*(p.values() for p in question.params))], True
    rng = random.Random(SAMPLE_SEED)
    return [parametric.draw_params(question, rng) for _ in range(AUDIT_DRAWS)], False


def audit(question: ParametricQuestion, add: Add) -> None:
    """No listed wrong formula lands within the answer's tolerance on any draw."""
    ok, usable_wrong = _usable(question, None)
    if not ok or not usable_wrong:
        return
    draws, everything = audit_draws(question)
    hits: dict[int, list[dict[str, Any]]] = {}
    valid = 0
    for params in draws:
        outcome = _evaluate(question, params, None)
        if outcome is None or outcome[0] is None:
            continue  # a failing draw is check's to report; a rejected one is never asked
        env, right = outcome
        valid += 1
        for i in usable_wrong:
            try:
                value = parametric.finite(parametric.compiled(question.wrong_formulas[i].formula).evaluate(env))
            except FormulaError:
                continue
            if question.tolerance.accepts(value, right):
                hits.setdefault(i, []).append(params)
    scope = f"{valid} draws (all of them)" if everything else f"{valid} seeded draws"
    for i, found in sorted(hits.items()):
        wrong = question.wrong_formulas[i]
        if len(found) == valid:
            continue  # check already says it can never be told apart
        add(wrong.line or question.line,
            f"wrong formula {wrong.formula!r} lands within the answer's tolerance ({question.tolerance.describe()}) "
            f"on {len(found)} of {scope}, e.g. {_shown(found[0])}: a learner making that mistake is graded right "
            "there — add a constraint that excludes those draws, or fix the formula or the tolerance")


KIND = Kind(
    name="parametric",
    question=ParametricQuestion,
    required=("params", "formula"),
    optional=("derived", "constraints", "unit", "tolerance", "wrong_formulas", "common_wrong"),
    build=build,
    ask=ask,
    card=card,
    check=check,
    audit=audit,
    budget_s=150.0,
    exports=(WrongFormula, ParamSpec),
)
