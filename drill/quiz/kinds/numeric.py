"""numeric: a number (with a unit), read leniently (2 GiB, 2^30, 1.5e3) and checked within a tolerance.

Also home of what parametric shares with it: the unit and tolerance fields
and the way a typed number is asked, read and graded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from drill.quiz.fields import Fields, suggest, type_name
from drill.quiz.kinds.base import Add, Asked, Asker, Kind
from drill.quiz.numbers import (
    KNOWN_UNITS,
    AnswerFormatError,
    Tolerance,
    format_with_unit,
    read_answer,
    scale_slip,
    unit_slip,
)
from drill.quiz.schedule import AGAIN, GOOD
from drill.quiz.schema import Question
from drill.quiz.text import reflow

SCHEMA_UNITS = ('"" (a plain number), bytes, KB, MB, GB, TB, KiB, MiB, GiB, TiB, FLOPs, GFLOPs, TFLOPs, params, '
                'tokens, K, M, B, %, x, s, ms')


@dataclass(frozen=True)
class WrongAnswer:
    """A known wrong numeric value and the mistake that produces it."""

    value: float
    feedback: str


@dataclass(frozen=True, kw_only=True)
class NumericQuestion(Question):
    """A number (with a unit), checked within a tolerance."""

    answer: float
    unit: str = ""
    tolerance: Tolerance = field(default_factory=Tolerance)
    wrong_answers: tuple[WrongAnswer, ...] = ()
    formula: str | None = None


def unit_and_tolerance(fields: Fields) -> tuple[str, Tolerance]:
    """The `unit` and `tolerance` fields of a numeric or parametric question."""
    unit = ""
    if "unit" in fields.data:
        value = fields.data["unit"]
        if value is None or value == "":
            unit = ""
        elif not isinstance(value, str):
            fields.out.add(fields.line("unit"),
                           f"{fields.what}: 'unit' must be text like \"bytes\" or \"\", not {type_name(value)}")
        elif value not in KNOWN_UNITS:
            fields.out.add(fields.line("unit"),
                           f"{fields.what}: unknown unit {value!r}{suggest(value, KNOWN_UNITS)}; use one of "
                           f"{SCHEMA_UNITS}")
        else:
            unit = value
    tolerance = Tolerance()
    spec = fields.mapping("tolerance")
    if spec is not None:
        sub = Fields(spec, fields.out, f"{fields.what} tolerance")
        sub.check_keys((), ("rel", "abs"))
        if not spec:
            fields.out.add(fields.line("tolerance"), f"{fields.what}: tolerance needs 'rel' and/or 'abs'")
        rel = sub.number("rel", default=0.0 if "abs" in spec else 1e-9)
        absolute = sub.number("abs", default=0.0)
        for name, value in (("rel", rel), ("abs", absolute)):
            if value is not None and value < 0:
                fields.out.add(sub.line(name), f"{fields.what}: tolerance {name} must not be negative")
        if rel is not None and rel >= 1:
            fields.out.add(sub.line("rel"),
                           f"{fields.what}: tolerance rel {rel} is a fraction (0.01 = 1%); it must be < 1")
        tolerance = Tolerance(rel=float(rel or 0.0), abs=float(absolute or 0.0))
    return unit, tolerance


def build(fields: Fields, common: dict[str, Any]) -> Question:
    answer = fields.number("answer")
    unit, tolerance = unit_and_tolerance(fields)
    wrong = []
    for item in fields.items("wrong_answers"):
        sub = fields.sub(item, "wrong answer", fields.line("wrong_answers"))
        if sub is None:
            continue
        sub.check_keys(("value", "feedback"), ())
        value = sub.number("value")
        if value is not None:
            wrong.append(WrongAnswer(value, sub.text("feedback")))
    formula = fields.text("formula", required=True, default="") or None if "formula" in fields.data else None
    return NumericQuestion(
        answer=answer if answer is not None else 0.0,
        unit=unit,
        tolerance=tolerance,
        wrong_answers=tuple(wrong),
        formula=formula,
        **common,
    )


def ask_number(session: Asker, question: Question, expected: float, unit: str, tolerance: Tolerance,
               wrong: list[tuple[float, str]]) -> Asked:
    """Read a number until it is readable and not a slip of scale or of a decimal/binary unit,
    grade it, name a known mistake it matches, and teach."""
    where = f"in {unit}" if unit else "a number"
    while True:
        text = session.answer(question, f"your answer ({where}) >")
        try:
            typed = read_answer(text, unit)
        except AnswerFormatError as exc:
            session.say(str(exc), "yellow")
            continue
        slip = scale_slip(typed, unit, expected, tolerance) or unit_slip(
            typed, unit, expected, tolerance, tuple(value for value, _ in wrong))
        if slip is None:
            break
        session.say(slip, "yellow")  # a slip of scale or of KB/KiB is re-asked like a typo, never graded
    value = typed.value
    right = tolerance.accepts(value, expected)
    shown = format_with_unit(expected, unit)
    said = format_with_unit(value, unit)
    if typed.typed_unit or typed.computed:  # "you said 171.8 GB (= 160 GiB)": what was typed, and what it came to
        said = f"{typed.text} (= {said})"
    if right:
        session.verdict(True, f"correct: {shown}"
                        + (f" ({typed.text} = {format_with_unit(value, unit)})" if typed.computed else ""))
    else:
        session.verdict(False, f"you said {said}; the answer is {shown} ({tolerance.describe()})")
        for wrong_value, feedback in wrong:
            if tolerance.accepts(value, wrong_value):
                session.items([("known mistake:", feedback, "red")])
                break
    session.teach(question)
    return Asked(GOOD if right else AGAIN, text.strip(), right)


def ask(session: Asker, question: NumericQuestion) -> Asked:
    session.say(reflow(question.prompt))
    wrong = [(w.value, w.feedback) for w in question.wrong_answers]
    return ask_number(session, question, question.answer, question.unit, question.tolerance, wrong)


def check(question: NumericQuestion, add: Add) -> None:
    """The answer agrees with its own formula; no listed wrong answer would be graded right."""
    from drill.quiz import parametric
    from drill.quiz.formula import FormulaError

    if not math.isfinite(question.answer):
        add(question.line_of("answer"), "answer must be a finite number")
        return
    if question.formula is not None:
        line = question.line_of("formula")
        try:
            formula = parametric.compiled(question.formula)
            if formula.names:
                add(line, f"formula uses unknown names {', '.join(sorted(formula.names))}; a numeric question's "
                          "formula may only use numbers (use kind: parametric for parameters)")
            else:
                value = parametric.finite(formula.evaluate({}))
                if not question.tolerance.accepts(question.answer, value):
                    add(question.line_of("answer"), f"answer {question.answer} is outside the tolerance "
                        f"({question.tolerance.describe()}) of its own formula, which gives {value:.10g}; "
                        "fix the answer or the formula")
        except FormulaError as exc:
            add(line, f"formula {question.formula!r}: {exc}")
    for wrong in question.wrong_answers:
        if question.tolerance.accepts(wrong.value, question.answer):
            add(question.line_of("wrong_answers"), f"wrong answer {wrong.value} is within tolerance of the right "
                f"answer {question.answer}; it would be graded right — remove it or tighten the tolerance")


def card(question: NumericQuestion) -> tuple[str, str]:
    back = format_with_unit(question.answer, question.unit)
    if question.tolerance.describe() != "exact":
        back += f" ({question.tolerance.describe()})"
    return reflow(question.prompt), f"{back}\n\n{reflow(question.explanation)}"


KIND = Kind(
    name="numeric",
    question=NumericQuestion,
    required=("answer",),
    optional=("unit", "tolerance", "wrong_answers", "formula", "common_wrong"),
    build=build,
    ask=ask,
    card=card,
    check=check,
    budget_s=120.0,
    exports=(WrongAnswer,),
)
