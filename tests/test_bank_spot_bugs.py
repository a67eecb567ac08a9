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
from drill.quiz.loader import scan
from drill.quiz.schema import SpotBugQuestion

SPECS = Path(__file__).resolve().parents[1] / "drill" / "judge" / "specs"
NAMED = re.compile(r"names as\s+(\w+);\s+practise it with\s+`drill\s+start\s+(\w+)`")


def _diagnosis_ids() -> set[str]:
    """Every named mistake of the grader, read from the spec sources (no torch import)."""
    ids: set[str] = set()
    for path in SPECS.glob("*.py"):
        ids.update(re.findall(r'Diagnosis\(\s*"(\w+)"', path.read_text()))
    return ids


@pytest.fixture(scope="module")
def spot_bugs() -> list[SpotBugQuestion]:
    result = scan(questions_dir())
    assert not result.problems, result.problems[:5]
    return [q for q in result.bank.questions if isinstance(q, SpotBugQuestion)]


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


def test_cards_that_name_a_grader_mistake_name_a_real_one(spot_bugs: list[SpotBugQuestion]) -> None:
    known, exercises = _diagnosis_ids(), set(exercise_names())
    assert "block_norm_shared" in known and "decoder_block" in exercises  # the readers themselves work
    named = [(q.id, *m) for q in spot_bugs for m in NAMED.findall(" ".join(q.explanation.split()))]
    assert len(named) >= 10, named
    wrong = [(qid, d, e) for qid, d, e in named if d not in known or e not in exercises]
    assert not wrong, f"cards naming a diagnosis or exercise that does not exist: {wrong}"
