"""Turning parsed YAML (LineDicts) into typed questions, collecting every problem.

Why collect instead of raising: a bank author fixing a file wants the whole
list of mistakes in one run, each as `file:line: what is wrong and how to
fix it`. This module does the structural checks (types, required and unknown
fields, ranges, duplicates); checks that evaluate formulas or compile regexes
live in `validate.py`.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

from drill.quiz.numbers import KNOWN_UNITS, Tolerance
from drill.quiz.schema import (
    COMMON_OPTIONAL,
    COMMON_REQUIRED,
    DIFFICULTIES,
    ID_PATTERN,
    KIND_OPTIONAL,
    KIND_REQUIRED,
    KINDS,
    ChoiceQuestion,
    CommonWrong,
    KeyPoint,
    NumericQuestion,
    Option,
    ParametricQuestion,
    ParamSpec,
    Question,
    RecallQuestion,
    WrongAnswer,
    WrongFormula,
)
from drill.quiz.yamlread import LineDict

_ID_RE = re.compile(ID_PATTERN)
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_TAG_RE = re.compile(r"^[a-z0-9][a-z0-9 _.+/-]{0,31}$")
SCHEMA_UNITS = '"" (a plain number), bytes, KB, MB, GB, TB, KiB, MiB, GiB, TiB, FLOPs, GFLOPs, TFLOPs, params, tokens, K, M, B, %, x, s, ms'
ALL_FIELDS = frozenset(COMMON_REQUIRED + COMMON_OPTIONAL).union(*KIND_REQUIRED.values(), *KIND_OPTIONAL.values())


@dataclass(frozen=True, order=True)
class Problem:
    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}" if self.line else f"{self.file}: {self.message}"


class Collector:
    """Problems found in one file."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.problems: list[Problem] = []

    def add(self, line: int, message: str) -> None:
        self.problems.append(Problem(self.file, line, message))


def _suggest(name: str, allowed: list[str] | tuple[str, ...] | frozenset[str]) -> str:
    close = difflib.get_close_matches(str(name), list(allowed), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _type_name(value: Any) -> str:
    return {
        str: "text",
        int: "a whole number",
        float: "a number",
        bool: "true/false",
        list: "a list",
        LineDict: "a mapping",
        type(None): "empty",
    }.get(type(value), type(value).__name__)


class _Fields:
    """Typed access to one mapping's fields, reporting problems at their lines."""

    def __init__(self, data: LineDict, out: Collector, what: str) -> None:
        self.data = data
        self.out = out
        self.what = what

    def line(self, key: str) -> int:
        return self.data.line_of(key)

    def check_keys(self, required: tuple[str, ...], optional: tuple[str, ...], elsewhere: frozenset[str] = frozenset()) -> None:
        for key, line in self.data.duplicates:
            self.out.add(line, f"{self.what}: field '{key}' appears twice; keep one")
        allowed = required + optional
        for key in self.data:
            if key in allowed:
                continue
            line = self.data.line_of(key)
            if key in elsewhere:
                self.out.add(line, f"{self.what}: field '{key}' does not belong here; remove it")
            else:
                self.out.add(line, f"{self.what}: unknown field '{key}'{_suggest(key, allowed)}; allowed: {', '.join(allowed)}")
        for key in required:
            if key not in self.data:
                self.out.add(self.data.line, f"{self.what}: missing required field '{key}'")

    def text(self, key: str, *, required: bool = True, default: str = "") -> str:
        if key not in self.data:
            return default
        value = self.data[key]
        if isinstance(value, str) and value.strip():
            return value.strip() if "\n" not in value.strip() else value.rstrip()
        if isinstance(value, str) or value is None:
            if required:
                self.out.add(self.line(key), f"{self.what}: '{key}' is empty; write the text")
            return default
        hint = " (YAML read yes/no/on/off as true/false: put the text in quotes)" if isinstance(value, bool) else " (put it in quotes)"
        self.out.add(self.line(key), f"{self.what}: '{key}' must be text, not {_type_name(value)}{hint}")
        return default

    def number(self, key: str, *, default: float | None = None) -> float | None:
        if key not in self.data:
            return default
        return as_number(self.data[key], self.out, self.line(key), f"{self.what}: '{key}'")

    def items(self, key: str, *, lo: int = 0, hi: int | None = None) -> list[Any]:
        if key not in self.data:
            return []
        value = self.data[key]
        if not isinstance(value, list):
            self.out.add(self.line(key), f"{self.what}: '{key}' must be a list (items starting with '- '), not {_type_name(value)}")
            return []
        if len(value) < lo or (hi is not None and len(value) > hi):
            bound = f"{lo} to {hi}" if hi is not None else f"at least {lo}"
            self.out.add(self.line(key), f"{self.what}: '{key}' has {len(value)} item{'s' * (len(value) != 1)}; it needs {bound}")
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        result = []
        for item in self.items(key):
            if isinstance(item, str) and item.strip():
                result.append(item)
            else:
                self.out.add(self.line(key), f"{self.what}: every item of '{key}' must be non-empty text, not {_type_name(item)}")
        return tuple(result)

    def mapping(self, key: str) -> LineDict | None:
        if key not in self.data:
            return None
        value = self.data[key]
        if not isinstance(value, LineDict):
            self.out.add(self.line(key), f"{self.what}: '{key}' must be a mapping (name: value lines), not {_type_name(value)}")
            return None
        return value

    def sub(self, item: Any, label: str, line: int) -> _Fields | None:
        if not isinstance(item, LineDict):
            self.out.add(line, f"{self.what}: each {label} must be a mapping, not {_type_name(item)}")
            return None
        return _Fields(item, self.out, f"{self.what} {label}")


def as_number(value: Any, out: Collector, line: int, what: str) -> float | None:
    """Accept ints, floats and numeric-looking text (PyYAML reads `1.5e3` as text)."""
    if isinstance(value, bool) or value is None:
        out.add(line, f"{what} must be a number, not {_type_name(value)}")
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            return float(value.replace("_", "")) if any(c in value for c in ".eE") else int(value.replace("_", ""))
        except ValueError:
            pass
    out.add(line, f"{what} must be a number, not {_type_name(value)} {value!r}")
    return None


def build_file(data: Any, stem: str, out: Collector) -> list[Question]:
    """Build the questions of one topic file; problems go to `out`."""
    if data is None:
        out.add(1, "the file is empty; it needs 'topic:' and 'questions:'")
        return []
    if not isinstance(data, LineDict):
        out.add(1, f"the file must be a mapping with 'topic:' and 'questions:', not {_type_name(data)}")
        return []
    top = _Fields(data, out, "file")
    top.check_keys(("topic", "questions"), ())
    topic = top.text("topic")
    if topic and topic != stem:
        out.add(top.line("topic"), f"topic '{topic}' must equal the file name '{stem}' (rename one of them)")
    questions = []
    for index, item in enumerate(top.items("questions", lo=1)):
        if not isinstance(item, LineDict):
            out.add(top.line("questions"), f"question #{index + 1} must be a mapping of fields, not {_type_name(item)}")
            continue
        question = build_question(item, stem, out)
        if question is not None:
            questions.append(question)
    return questions


def build_question(data: LineDict, topic: str, out: Collector) -> Question | None:
    raw_id = data.get("id")
    label = f"question '{raw_id}'" if isinstance(raw_id, str) else "question"
    fields = _Fields(data, out, label)
    before = len(out.problems)
    kind = data.get("kind")
    if kind is not None and kind not in KINDS:
        out.add(fields.line("kind"), f"{label}: unknown kind {kind!r}{_suggest(str(kind), KINDS)}; use one of {', '.join(KINDS)}")
        fields.check_keys(COMMON_REQUIRED, tuple(ALL_FIELDS - set(COMMON_REQUIRED)))
        return None
    if kind is None:
        fields.check_keys(COMMON_REQUIRED, tuple(ALL_FIELDS - set(COMMON_REQUIRED)))
        return None
    own = KIND_REQUIRED[kind] + KIND_OPTIONAL[kind]
    fields.check_keys(COMMON_REQUIRED + KIND_REQUIRED[kind], COMMON_OPTIONAL + KIND_OPTIONAL[kind], ALL_FIELDS - set(own))

    qid = fields.text("id")
    if qid and not _ID_RE.match(qid):
        out.add(fields.line("id"), f"{label}: id must match {ID_PATTERN} (lowercase letters, digits, '-'; 3-64 chars)")
    difficulty = fields.text("difficulty")
    if difficulty and difficulty not in DIFFICULTIES:
        out.add(fields.line("difficulty"), f"{label}: difficulty {difficulty!r} must be one of {', '.join(DIFFICULTIES)}")
    tags = fields.strings("tags")
    for tag in tags:
        if not _TAG_RE.match(tag):
            out.add(fields.line("tags"), f"{label}: tag {tag!r} must be short lowercase text (at most 32 characters)")
    common = dict(
        id=qid,
        topic=topic,
        kind=kind,
        difficulty=difficulty,
        prompt=fields.text("prompt"),
        explanation=fields.text("explanation"),
        tags=tags,
        source=fields.text("source", required=False),
        hints=fields.strings("hints"),
        common_wrong=_common_wrong(fields),
        file=out.file,
        line=data.line,
        field_lines=tuple((k, v) for k, v in data.key_lines.items() if isinstance(k, str)),
    )
    builder = {"recall": _recall, "choice": _choice, "numeric": _numeric, "parametric": _parametric}[kind]
    question = builder(fields, common)
    return question if len(out.problems) == before else None


def _common_wrong(fields: _Fields) -> tuple[CommonWrong, ...]:
    result = []
    for item in fields.items("common_wrong"):
        sub = fields.sub(item, "common_wrong item", fields.line("common_wrong"))
        if sub is None:
            continue
        sub.check_keys(("answer", "why"), ())
        result.append(CommonWrong(sub.text("answer"), sub.text("why")))
    return tuple(result)


def _recall(fields: _Fields, common: dict[str, Any]) -> Question:
    points = []
    for item in fields.items("key_points", lo=2, hi=5):
        sub = fields.sub(item, "key point", fields.line("key_points"))
        if sub is None:
            continue
        sub.check_keys(("text",), ("patterns",))
        points.append(KeyPoint(sub.text("text"), sub.strings("patterns"), sub.data.line))
    answer = fields.text("answer")
    return RecallQuestion(answer=answer, key_points=tuple(points), **common)


def _choice(fields: _Fields, common: dict[str, Any]) -> Question:
    options = []
    raw = fields.items("options", lo=2, hi=8)
    for item in raw:
        sub = fields.sub(item, "option", fields.line("options"))
        if sub is None:
            continue
        sub.check_keys(("text", "correct"), ("feedback",))
        correct = sub.data.get("correct")
        if "correct" in sub.data and not isinstance(correct, bool):
            sub.out.add(sub.line("correct"), f"{sub.what}: 'correct' must be true or false, not {correct!r}")
        options.append(Option(sub.text("text"), correct is True, sub.text("feedback", required=False)))
    if raw and options and not any(o.correct for o in options):
        fields.out.add(fields.line("options"), f"{fields.what}: no option is marked 'correct: true'; mark the right one(s)")
    texts = [o.text for o in options if o.text]
    for text in {t for t in texts if texts.count(t) > 1}:
        fields.out.add(fields.line("options"), f"{fields.what}: option text {text!r} appears twice; make options distinct")
    return ChoiceQuestion(options=tuple(options), **common)


def _unit_and_tolerance(fields: _Fields) -> tuple[str, Tolerance]:
    unit = ""
    if "unit" in fields.data:
        value = fields.data["unit"]
        if value is None or value == "":
            unit = ""
        elif not isinstance(value, str):
            fields.out.add(fields.line("unit"), f"{fields.what}: 'unit' must be text like \"bytes\" or \"\", not {_type_name(value)}")
        elif value not in KNOWN_UNITS:
            fields.out.add(fields.line("unit"), f"{fields.what}: unknown unit {value!r}{_suggest(value, KNOWN_UNITS)}; use one of {SCHEMA_UNITS}")
        else:
            unit = value
    tolerance = Tolerance()
    spec = fields.mapping("tolerance")
    if spec is not None:
        sub = _Fields(spec, fields.out, f"{fields.what} tolerance")
        sub.check_keys((), ("rel", "abs"))
        if not spec:
            fields.out.add(fields.line("tolerance"), f"{fields.what}: tolerance needs 'rel' and/or 'abs'")
        rel = sub.number("rel", default=0.0 if "abs" in spec else 1e-9)
        absolute = sub.number("abs", default=0.0)
        for name, value in (("rel", rel), ("abs", absolute)):
            if value is not None and value < 0:
                fields.out.add(sub.line(name), f"{fields.what}: tolerance {name} must not be negative")
        if rel is not None and rel >= 1:
            fields.out.add(sub.line("rel"), f"{fields.what}: tolerance rel {rel} is a fraction (0.01 = 1%); it must be < 1")
        tolerance = Tolerance(rel=float(rel or 0.0), abs=float(absolute or 0.0))
    return unit, tolerance


def _numeric(fields: _Fields, common: dict[str, Any]) -> Question:
    answer = fields.number("answer")
    unit, tolerance = _unit_and_tolerance(fields)
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


def _param(name: Any, spec: Any, fields: _Fields, line: int) -> ParamSpec | None:
    what = f"{fields.what}: parameter '{name}'"
    if not isinstance(name, str) or not _NAME_RE.match(name):
        fields.out.add(line, f"{what}: a name must be letters, digits and '_' starting with a letter")
        return None
    if not isinstance(spec, LineDict):
        fields.out.add(line, f"{what} must be {{choices: [...]}} or {{range: [lo, hi]}}, not {_type_name(spec)}")
        return None
    sub = _Fields(spec, fields.out, what)
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
        if (
            not isinstance(bounds, list)
            or len(bounds) != 2
            or not all(isinstance(b, int) and not isinstance(b, bool) for b in bounds)
        ):
            fields.out.add(line, f"{what}: range must be [lo, hi] with two whole numbers")
            return None
        if not isinstance(step, int) or isinstance(step, bool) or step < 1:
            fields.out.add(line, f"{what}: step must be a whole number >= 1")
            return None
        if bounds[0] > bounds[1]:
            fields.out.add(line, f"{what}: range [{bounds[0]}, {bounds[1]}] is empty; put the smaller bound first")
            return None
        return ParamSpec(name, low=bounds[0], high=bounds[1], step=step)
    fields.out.add(line, f"{what} needs 'choices: [...]' or 'range: [lo, hi]'{_suggest(next(iter(spec), ''), ('choices', 'range'))}")
    return None


def _parametric(fields: _Fields, common: dict[str, Any]) -> Question:
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
                fields.out.add(line, f"{fields.what}: derived '{name}' must be a formula in quotes, not {_type_name(value)}")
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
    unit, tolerance = _unit_and_tolerance(fields)
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
