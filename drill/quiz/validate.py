"""Checks that need to *run* a question, and the audits of a bank's grading quality.

Two levels, both run by `drill validate`:
- `deep_problems`: a question that passes cannot crash the quiz (every formula
  evaluates on a sample of draws, every pattern compiles). The quiz runs these
  when the bank changed, and refuses a bank that fails them.
- `audit_problems`: a question grades right — no listed mistake is graded right
  on any draw, no nonsense answer ticks a key point, and across the bank the
  right option is not usually the longest. Slower, and about quality rather
  than safety, so only `drill validate` runs them.
Each kind supplies its own checks (drill/quiz/kinds/); this module only
iterates the registry.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from drill.quiz import kinds
from drill.quiz.fields import Problem
from drill.quiz.schema import Question


def _adder(question: Question, out: list[Problem]):  # type: ignore[no-untyped-def]
    def add(line: int, message: str) -> None:
        out.append(Problem(question.file, line, f"question '{question.id}': {message}"))

    return add


def deep_problems(question: Question) -> list[Problem]:
    """Every problem found by running the question's patterns and formulas."""
    out: list[Problem] = []
    kinds.get(question.kind).check(question, _adder(question, out))
    return out


def audit_problems(questions: Sequence[Question]) -> tuple[list[Problem], dict[str, Any]]:
    """Grading-quality problems of each question and of each kind across the bank, and
    the figures the kinds report (e.g. how often the right option is the longest)."""
    out: list[Problem] = []
    by_kind: dict[str, list[Question]] = defaultdict(list)
    for question in questions:
        kinds.get(question.kind).audit(question, _adder(question, out))
        by_kind[question.kind].append(question)
    figures: dict[str, Any] = {}

    def add(question: Question, line: int, message: str) -> None:
        _adder(question, out)(line, message)

    for name, kind in kinds.REGISTRY.items():
        if by_kind[name]:
            figures.update(kind.bank_audit(by_kind[name], add))
    return out, figures
