"""Checks that need to *run* a question: regexes, formulas, parametric draws.

Why separate from the structural checks in build.py: these are slower (a
parametric question is exercised on hundreds of seeded draws), so the quiz
runs them only when the bank changed (see cache.py), while `drill validate`
always runs them. A question that passes here cannot crash the quiz: every
formula evaluates on every draw we tried, every regex compiles, and every
stored answer agrees with its own formula.
"""

from __future__ import annotations

import math
import random
import re

from drill.quiz import parametric
from drill.quiz.build import Problem
from drill.quiz.formula import FormulaError
from drill.quiz.schema import ChoiceQuestion, NumericQuestion, ParametricQuestion, Question, RecallQuestion

SAMPLE_DRAWS = 200
SAMPLE_SEED = 20240607


def deep_problems(question: Question) -> list[Problem]:
    """Every problem found by running the question's regexes and formulas."""
    out: list[Problem] = []

    def add(line: int, message: str) -> None:
        out.append(Problem(question.file, line, f"question '{question.id}': {message}"))

    if isinstance(question, RecallQuestion):
        _check_patterns(question, add)
    elif isinstance(question, NumericQuestion):
        _check_numeric(question, add)
    elif isinstance(question, ParametricQuestion):
        _check_parametric(question, add)
    elif isinstance(question, ChoiceQuestion):
        pass  # fully checked structurally
    return out


def _check_patterns(question: RecallQuestion, add) -> None:  # type: ignore[no-untyped-def]
    for point in question.key_points:
        for pattern in point.patterns:
            try:
                re.compile(pattern, re.IGNORECASE)
            except re.error as exc:
                add(point.line or question.line, f"invalid regex {pattern!r} ({exc}); fix it or quote special characters with \\")
                continue
            if re.search(pattern, "", re.IGNORECASE):
                add(point.line or question.line, f"pattern {pattern!r} matches an empty answer, so it ticks for anything; make it specific")


def _check_numeric(question: NumericQuestion, add) -> None:  # type: ignore[no-untyped-def]
    if not math.isfinite(question.answer):
        add(question.line_of("answer"), "answer must be a finite number")
        return
    if question.formula is not None:
        line = question.line_of("formula")
        try:
            formula = parametric.compiled(question.formula)
            if formula.names:
                add(line, f"formula uses unknown names {', '.join(sorted(formula.names))}; a numeric question's formula may only use numbers (use kind: parametric for parameters)")
            else:
                value = parametric._finite(formula.evaluate({}))
                if not question.tolerance.accepts(question.answer, value):
                    add(question.line_of("answer"), f"answer {question.answer} is outside the tolerance ({question.tolerance.describe()}) of its own formula, which gives {value:.10g}; fix the answer or the formula")
        except FormulaError as exc:
            add(line, f"formula {question.formula!r}: {exc}")
    for wrong in question.wrong_answers:
        if question.tolerance.accepts(wrong.value, question.answer):
            add(question.line_of("wrong_answers"), f"wrong answer {wrong.value} is within tolerance of the right answer {question.answer}; it would be graded right — remove it or tighten the tolerance")


def _check_parametric(question: ParametricQuestion, add) -> None:  # type: ignore[no-untyped-def]
    known = {p.name for p in question.params}
    ok = True

    def check_formula(text: str, line: int, label: str, names: set[str]) -> bool:
        try:
            formula = parametric.compiled(text)
        except FormulaError as exc:
            add(line, f"{label} {text!r}: {exc}")
            return False
        missing = formula.names - names
        if missing:
            add(line, f"{label} {text!r} uses unknown name(s) {', '.join(sorted(missing))}; known: {', '.join(sorted(names))}")
            return False
        return True

    for name, text in question.derived:
        ok &= check_formula(text, question.line_of("derived"), f"derived '{name}'", known)
        known.add(name)
    for text in question.constraints:
        ok &= check_formula(text, question.line_of("constraints"), "constraint", known)
    ok &= check_formula(question.formula, question.line_of("formula"), "formula", known)
    usable_wrong = {
        i
        for i, wrong in enumerate(question.wrong_formulas)
        if check_formula(wrong.formula, wrong.line or question.line_of("wrong_formulas"), "wrong formula", known)
    }
    for match in parametric.PLACEHOLDER.finditer(question.prompt):
        name = match.group(1)
        if not parametric.NAME.match(name):
            add(question.line_of("prompt"), f"placeholder {match.group(0)!r} is not allowed; use {{name}} with a parameter or derived name only")
        elif name not in known:
            add(question.line_of("prompt"), f"placeholder {{{name}}} is not a parameter or derived value; known: {', '.join(sorted(known))}")
    if ok:
        _sample(question, add, usable_wrong)


def _sample(question: ParametricQuestion, add, usable_wrong: set[int]) -> None:  # type: ignore[no-untyped-def]
    """Run the question on many seeded draws, like the quiz would."""
    rng = random.Random(SAMPLE_SEED)
    valid = 0
    tries = 0
    coincide = [0] * len(question.wrong_formulas)
    failed_wrong: set[int] = set(range(len(question.wrong_formulas))) - usable_wrong
    while valid < SAMPLE_DRAWS and tries < SAMPLE_DRAWS * 20:
        tries += 1
        params = parametric._draw_params(question, rng)
        shown = ", ".join(f"{k}={v}" for k, v in params.items())
        try:
            env = parametric.complete(question, params)
        except FormulaError as exc:
            add(question.line_of("derived") if question.derived else question.line_of("constraints"), f"derived values or constraints fail for {shown}: {exc}; add a constraint or narrow the parameter ranges")
            return
        if env is None:
            continue
        valid += 1
        try:
            right = parametric.answer(question, env)
        except FormulaError as exc:
            add(question.line_of("formula"), f"formula fails for {shown}: {exc}; add a constraint or narrow the parameter ranges")
            return
        for i, wrong in enumerate(question.wrong_formulas):
            if i in failed_wrong:
                continue
            try:
                value = parametric._finite(parametric.compiled(wrong.formula).evaluate(env))
            except FormulaError as exc:
                if i not in failed_wrong:
                    failed_wrong.add(i)
                    add(wrong.line or question.line, f"wrong formula {wrong.formula!r} fails for {shown}: {exc}")
                continue
            if question.tolerance.accepts(value, right):
                coincide[i] += 1
    if valid == 0:
        add(question.line_of("constraints"), f"the constraints are never satisfied (0 of {tries} seeded draws); relax them or change the parameter ranges")
        return
    for i, wrong in enumerate(question.wrong_formulas):
        if i not in failed_wrong and coincide[i] == valid:
            add(wrong.line or question.line, f"wrong formula {wrong.formula!r} gives the right answer on every draw ({valid} tried); it can never be told apart — fix or remove it")
