"""Typed question objects: what a validated YAML question becomes.

Why dataclasses and not dicts: after loading, the rest of the quiz never has
to wonder whether a field exists or has the right type — the loader has
already refused anything else with a file:line message. Each question keeps
the file and line it came from, so later checks (and learners' bug reports)
can point at it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from drill.quiz.numbers import Tolerance

KINDS = ("recall", "choice", "numeric", "parametric")
DIFFICULTIES = ("easy", "medium", "hard")
ID_PATTERN = r"^[a-z0-9][a-z0-9-]{2,63}$"

# Fields every kind has, then each kind's own; anything else is a typo.
COMMON_REQUIRED = ("id", "kind", "difficulty", "prompt", "explanation")
COMMON_OPTIONAL = ("tags", "source", "hints")
KIND_REQUIRED: dict[str, tuple[str, ...]] = {
    "recall": ("answer", "key_points"),
    "choice": ("options",),
    "numeric": ("answer",),
    "parametric": ("params", "formula"),
}
KIND_OPTIONAL: dict[str, tuple[str, ...]] = {
    "recall": ("common_wrong",),
    "choice": ("common_wrong",),
    "numeric": ("unit", "tolerance", "wrong_answers", "formula", "common_wrong"),
    "parametric": ("derived", "constraints", "unit", "tolerance", "wrong_formulas", "common_wrong"),
}


@dataclass(frozen=True)
class KeyPoint:
    """One point a recall answer should make; `patterns` pre-tick it."""
    text: str
    patterns: tuple[str, ...] = ()
    line: int = field(default=0, compare=False)

    def matches(self, answer: str) -> bool:
        """Pre-tick this point when EVERY pattern matches the typed answer (case-insensitive)."""
        if not self.patterns or not answer.strip():
            return False
        import re

        return all(re.search(p, answer, re.IGNORECASE) for p in self.patterns)


@dataclass(frozen=True)
class CommonWrong:
    """A tempting wrong answer and why it is wrong."""
    answer: str
    why: str


@dataclass(frozen=True)
class Option:
    """One choice option; `feedback` is shown when it is picked or is right."""
    text: str
    correct: bool
    feedback: str = ""


@dataclass(frozen=True)
class WrongAnswer:
    """A known wrong numeric value and the mistake that produces it."""
    value: float
    feedback: str


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


@dataclass(frozen=True, kw_only=True)
class Question:
    """Fields shared by every kind; subclasses add their own."""

    id: str
    topic: str
    kind: str
    difficulty: str
    prompt: str
    explanation: str
    tags: tuple[str, ...] = ()
    source: str = ""
    hints: tuple[str, ...] = ()
    common_wrong: tuple[CommonWrong, ...] = ()
    file: str = ""
    line: int = 0
    field_lines: tuple[tuple[str, int], ...] = field(default=(), compare=False, repr=False)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def line_of(self, name: str) -> int:
        """Source line of one field (for validation messages); the question's line if unknown."""
        return dict(self.field_lines).get(name, self.line)


@dataclass(frozen=True, kw_only=True)
class RecallQuestion(Question):
    """Free recall: the learner compares with the model answer and rates themselves."""
    answer: str
    key_points: tuple[KeyPoint, ...]


@dataclass(frozen=True, kw_only=True)
class ChoiceQuestion(Question):
    """Single or multiple choice, checked automatically."""
    options: tuple[Option, ...]

    @property
    def multiple(self) -> bool:
        """More than one correct option: the learner must pick all of them."""
        return sum(o.correct for o in self.options) > 1

    @property
    def correct_letters(self) -> frozenset[str]:
        return frozenset(letter(i) for i, o in enumerate(self.options) if o.correct)


@dataclass(frozen=True, kw_only=True)
class NumericQuestion(Question):
    """A number (with a unit), checked within a tolerance."""
    answer: float
    unit: str = ""
    tolerance: Tolerance = field(default_factory=Tolerance)
    wrong_answers: tuple[WrongAnswer, ...] = ()
    formula: str | None = None


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


def letter(index: int) -> str:
    """Option label: 0 -> 'a'."""
    return "abcdefgh"[index]


@dataclass(frozen=True)
class Bank:
    """A loaded, valid question bank in file order."""

    questions: tuple[Question, ...]
    files: tuple[str, ...] = ()

    def by_id(self) -> dict[str, Question]:
        return {q.id: q for q in self.questions}

    def topics(self) -> list[str]:
        seen: dict[str, None] = {}
        for q in self.questions:
            seen.setdefault(q.topic, None)
        return list(seen)
