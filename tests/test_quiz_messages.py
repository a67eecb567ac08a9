"""Wording the learner reads: prose reflow, YAML errors at the right line, plurals in prompts."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drill.cli import app
from drill.paths import questions_dir
from drill.quiz import parametric
from drill.quiz.kinds.parametric import ParametricQuestion
from drill.quiz.loader import display, load_bank
from drill.quiz.session import reflow

runner = CliRunner()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A sentence that wraps onto a line starting "1. What..." is prose, not a list item.
        ("mean 0 and variance\n1. What is the std?\n", "mean 0 and variance 1. What is the std?"),
        ("Two steps:\n1. load\n2. run", "Two steps:\n1. load\n2. run"),  # a real numbered list
        ("Do this:\n1) one thing", "Do this:\n1) one thing"),  # an item after a colon
        ("1. first\n2. second", "1. first\n2. second"),
        ("wrapped\nprose", "wrapped prose"),
    ],
)
def test_reflow_tells_numbered_items_from_wrapped_sentences(text: str, expected: str) -> None:
    assert reflow(text) == expected


def test_shipped_attn_score_std_prompt_reads_as_one_paragraph() -> None:
    question = next(q for q in load_bank(questions_dir()).questions if q.id == "attn-score-std")
    assert "variance 1. What is" in reflow(question.prompt)


@pytest.mark.parametrize(
    ("body", "line", "fragment"),
    [
        # The scanner fails at the end of the file; the quote was opened on line 5.
        ('topic: t\nquestions:\n  - id: t-one\n    kind: recall\n    prompt: "unterminated\n    answer: x\n', 5,
         'the " quote opened on this line is never closed before the end of the file'),
        ("topic: t\nquestions:\n  - id: t-one\n    kind: numeric\n    difficulty: easy\n"
         "    prompt: !!python/object/apply:os.system [\"true\"]\n    answer: 4\n", 6,
         "the tag !!python/object/apply:os.system is not allowed in a question bank"),
        ("topic: t\nquestions: [1, 2\nfoo: 3\n", 3, "(the flow sequence starts on line 2)"),
    ],
)
def test_yaml_errors_name_where_the_problem_starts(tmp_path: Path, body: str, line: int, fragment: str) -> None:
    bank = tmp_path / "t.yaml"
    bank.write_text(body)
    result = runner.invoke(app, ["validate", str(bank)])
    assert result.exit_code == 2
    assert f"{display(bank)}:{line}: " in result.output and fragment in result.output, result.output
    assert "check indentation and quoting" not in result.output or "flow sequence" in fragment


@pytest.mark.parametrize(("value", "word"), [(1, "1 byte per"), (2, "2 bytes per"), (4, "4 bytes per")])
def test_parametric_prompts_pluralise_after_the_number(value: int, word: str) -> None:
    question = next(q for q in load_bank(questions_dir()).questions if q.id == "kv-cache-bytes")
    assert isinstance(question, ParametricQuestion) and "byte(s)" in question.prompt
    env = parametric.draw(question, random.Random(0))
    env = {**env, "bytes_per_elem": value}
    rendered = parametric.render(question, env)
    assert word in rendered and "(s)" not in rendered
