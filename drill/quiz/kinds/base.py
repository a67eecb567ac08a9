"""What a question kind is: the one object the loader, the quiz, the validator and the mock ask.

Why a plug-in object: a kind used to be spread over the schema, the builder,
the session, the validator, the loader's summary and the mock's time budgets,
and three of those places said nothing when a new kind was forgotten. Now a
kind is one module that builds a `Kind`, and `drill.quiz.kinds.REGISTRY` is
the only list of kinds; everything else iterates it.

A kind's module may import only light modules at its top (the quiz imports
every kind before the first question); anything slow goes inside a function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from drill.quiz.schema import Question

if TYPE_CHECKING:
    from rich.console import Console

    from drill.quiz.fields import Fields

# add(line, message): report one problem about the question being checked.
Add = Callable[[int, str], None]


@dataclass(frozen=True)
class Asked:
    """How one question went: the rating saved, what was typed, and the auto-check's
    verdict (None when the learner rated themselves)."""

    rating: int
    answer: str
    right: bool | None


class Asker(Protocol):
    """What a kind's `ask` may use of the running session (drill.quiz.session.Session)."""

    console: Console
    rng: Any
    shuffle: bool

    def say(self, text: str, style: str | None = None) -> None: ...

    def items(self, rows: list[tuple[str, str, str | None]]) -> None: ...

    def verdict(self, right: bool, text: str) -> None: ...

    def line(self, prompt: str) -> str: ...

    def answer(self, question: Question, prompt: str) -> str: ...

    def teach(self, question: Question) -> None: ...

    def show_common_wrong(self, question: Question) -> None: ...


def no_check(question: Question, add: Add) -> None:
    """For a kind whose structural checks (in its builder) are complete."""


def no_bank_audit(questions: Sequence[Question], add: Callable[[Question, int, str], None]) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class Kind:
    """One kind of question, end to end.

    - `fields`: YAML fields of this kind beyond the common ones, required then optional.
    - `build(fields, common)`: the typed question from its fields (problems go to `fields.out`).
    - `ask(session, question)`: show it, read and check the answer, teach; returns `Asked`.
    - `check(question, add)`: the checks that run the question (formulas, regexes, a sample
      of draws) so that it cannot crash the quiz: the quiz runs them when the bank changed.
    - `audit(question, add)`: the checks that it grades right (no listed mistake graded
      right on any draw, no nonsense answer ticking a key point): slower, and about the
      bank's quality rather than the quiz's safety, so only `drill validate` runs them.
    - `bank_audit(questions, add)`: quality over all questions of this kind at once (a share,
      not one card); `drill validate` only. Returns figures for its summary.
    - `budget_s`: seconds an interviewer gives one in a mock before moving on.
    - `self_rated`: the learner rates their own answer (no auto-check), as in recall.
    - `card(question)`: (front, back) plain text for an exported flash card (drill export anki).
    - `exports`: the other dataclasses its questions hold (key points, options, ...): the
      bank cache rebuilds questions from these types only, and `drill.quiz.schema`
      re-exports them.
    """

    name: str
    question: type[Question]
    required: tuple[str, ...]
    optional: tuple[str, ...]
    build: Callable[[Fields, dict[str, Any]], Question]
    ask: Callable[[Asker, Any], Asked]
    card: Callable[[Any], tuple[str, str]]
    budget_s: float
    check: Callable[[Any, Add], None] = no_check
    audit: Callable[[Any, Add], None] = no_check
    bank_audit: Callable[[Sequence[Any], Callable[[Any, int, str], None]], dict[str, Any]] = no_bank_audit
    self_rated: bool = False
    exports: tuple[type, ...] = field(default=())

    @property
    def fields(self) -> tuple[str, ...]:
        return self.required + self.optional
