"""The bank's spot-the-bug cards cover every topic and point at real grader mistakes (issue 28 §3).

Every topic has at least two spot-bug cards with real code (6+ executable
lines), and a card that says "this is the mistake `drill check` names as X;
practise it with `drill start Y`" names a diagnosis the grader really has and
an exercise that really exists: renaming either breaks this test, not the
learner's trust in the card.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest

from drill.judge.registry import exercise_names
from drill.paths import questions_dir
from drill.quiz.kinds.spot_bug import SpotBugQuestion
from drill.quiz.loader import scan

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "solutions"
NAMED = re.compile(r"names as\s+(\w+);\s+practise it with\s+`drill\s+start\s+(\w+)`")


def _graded_pairs() -> set[tuple[str, str]]:
    """(diagnosis, exercise) pairs the grader is tested on: tests/fixtures/solutions/<exercise>/bug_<id>__*.py.

    Some diagnoses are built by shared factories (the norms' `unbiased_variance("ln")`), so the spec
    sources do not spell every id out; the fixtures do, and they also say which exercise names it.
    """
    return {(path.name[len("bug_"):].split("__")[0], path.parent.name)
            for path in FIXTURES.glob("*/bug_*__*.py")}


@pytest.fixture(scope="module")
def spot_bugs() -> list[SpotBugQuestion]:
    result = scan(questions_dir())
    assert not result.problems, result.problems[:5]
    return [q for q in result.bank.questions if isinstance(q, SpotBugQuestion)]


@pytest.fixture(scope="module")
def bank_questions() -> list:
    return list(scan(questions_dir()).bank.questions)


@pytest.fixture(scope="module")
def topics() -> set[str]:
    return set(scan(questions_dir()).bank.topics())


def test_every_topic_has_two_spot_bugs(spot_bugs: list[SpotBugQuestion], topics: set[str]) -> None:
    per_topic = Counter(q.topic for q in spot_bugs)
    thin = {t: per_topic[t] for t in sorted(topics) if per_topic[t] < 2}
    assert not thin, f"topics with fewer than 2 spot-bug cards: {thin}"


def _executable_lines(code: str) -> int:
    """Lines that hold a statement (not blank, not a comment, not a docstring)."""
    tree = ast.parse(code)
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            docstrings.update(range(body[0].lineno, body[0].end_lineno + 1))
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and node.lineno not in docstrings:
            lines.add(node.lineno)
    return len(lines)


def test_executable_line_count_counts_statements_only() -> None:
    code = 'import torch\n\ndef f(x):\n    """Doc."""\n    # note\n    return x\n'
    assert _executable_lines(code) == 3


def test_every_spot_bug_snippet_is_real_code(spot_bugs: list[SpotBugQuestion]) -> None:
    short = {q.id: _executable_lines(q.code) for q in spot_bugs if _executable_lines(q.code) < 6}
    assert not short, f"spot-bug snippets with fewer than 6 statements: {short}"


def test_cards_that_name_a_grader_mistake_name_a_real_one(bank_questions: list) -> None:
    exercises, graded = set(exercise_names()), _graded_pairs()
    assert "decoder_block" in exercises and ("block_norm_shared", "decoder_block") in graded  # readers work
    assert ("ln_unbiased_variance", "layernorm") in graded and ("gqa_tiled_kv", "gqa") in graded
    named = [(q.id, *m) for q in bank_questions for m in NAMED.findall(" ".join(q.explanation.split()))]
    assert len(named) >= 25, named
    wrong = [(qid, d, e) for qid, d, e in named if e not in exercises or (d, e) not in graded]
    assert not wrong, f"cards naming a diagnosis the exercise's grader is not tested on naming: {wrong}"


def test_a_card_drawn_from_a_named_bug_ends_by_naming_it(bank_questions: list) -> None:
    """A card whose source is one of the grader's named bugs tells the learner where to practise it."""
    drawn = {q.id: m.group(1) for q in bank_questions
             if (m := re.search(r"drill judge named bug (\w+)", getattr(q, "source", None) or ""))}
    assert len(drawn) >= 25, drawn
    silent = []
    for qid, diagnosis in drawn.items():
        q = next(q for q in bank_questions if q.id == qid)
        last = NAMED.findall(" ".join(q.explanation.split())[-160:])
        if not last or last[-1][0] != diagnosis:
            silent.append((qid, diagnosis))
    assert not silent, f"cards drawn from a named bug whose explanation does not end by naming it: {silent}"
