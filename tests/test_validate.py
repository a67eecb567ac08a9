"""`drill validate`: every problem in the broken fixtures is reported at its line; good banks pass.

The broken fixture files mark each expected problem with a `# EXPECT: text`
comment on the line it must be reported at, so adding a case is one YAML edit.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drill.cli import app
from drill.paths import questions_dir
from drill.quiz.loader import BankError, display, load_bank, scan

FIXTURES = Path(__file__).parent / "fixtures" / "questions"
BROKEN = FIXTURES / "broken"
GOOD = FIXTURES / "good"
TOPICS = {
    "block", "attention", "mha", "positional", "masking", "normalization", "ffn", "gqa", "flash", "kv_cache",
    "architectures", "moe", "pitfalls", "tokenization", "sampling", "loss", "scaling", "serving", "training",
    "beyond_attention", "post_training", "quantization", "peft", "optimizers", "long_context", "decoding",
    "serving_structures", "evaluation",
}
runner = CliRunner()


def _expectations() -> list[tuple[str, int, str]]:
    found = []
    for file in sorted(BROKEN.glob("*.yaml")):
        for number, line in enumerate(file.read_text().splitlines(), start=1):
            match = re.search(r"# EXPECT: (.+)$", line)
            if match:
                found.append((display(file), number, match.group(1).strip()))
    return found


EXPECTED = _expectations()


def test_fixture_has_expectations() -> None:
    assert len(EXPECTED) >= 30


@pytest.fixture(scope="module")
def broken_problems() -> list[str]:
    return [str(p) for p in scan(BROKEN).problems]


@pytest.mark.parametrize(("file", "line", "text"), EXPECTED, ids=[f"{Path(f).name}:{n}" for f, n, _ in EXPECTED])
def test_each_expected_problem_is_reported_at_its_line(broken_problems: list[str], file: str, line: int,
                                                       text: str) -> None:
    prefix = f"{file}:{line}: "
    hits = [p for p in broken_problems if p.startswith(prefix) and text in p]
    same_file = [p for p in broken_problems if p.startswith(f"{file}:")]
    assert hits, f"no problem at {prefix} containing {text!r}; got:\n" + "\n".join(same_file)


def test_no_unexpected_problems(broken_problems: list[str]) -> None:
    expected_lines = {(f, n) for f, n, _ in EXPECTED}
    for problem in broken_problems:
        file, line = problem.split(":")[0], int(problem.split(":")[1])
        assert (file, line) in expected_lines, f"unexpected problem: {problem}"


def test_cli_lists_every_problem_and_exits_2() -> None:
    result = runner.invoke(app, ["validate", str(BROKEN)])
    assert result.exit_code == 2
    output = result.output
    for file, line, _ in EXPECTED:
        assert f"{Path(file).name}:{line}:" in output
    assert "problems" in output


def test_cli_passes_a_good_bank_with_a_summary() -> None:
    result = runner.invoke(app, ["validate", str(GOOD)])
    assert result.exit_code == 0, result.output
    assert "8 questions in 2 files: ok; recall 1, choice 4, numeric 2, parametric 1" in result.output


def test_cli_validates_a_single_file() -> None:
    result = runner.invoke(app, ["validate", str(BROKEN / "wrongtopic.yaml")])
    assert result.exit_code == 2
    assert "must equal the file name 'wrongtopic'" in result.output


def test_missing_path_is_a_usage_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "no such file or folder" in result.output


def test_load_bank_refuses_a_broken_bank_with_the_first_problem(tmp_path: Path) -> None:
    with pytest.raises(BankError) as info:
        load_bank(BROKEN, cache_dir=tmp_path)
    assert len(info.value.problems) == len(scan(BROKEN).problems)
    assert "more; run `drill validate" in str(info.value)
    assert not list(tmp_path.iterdir()), "a broken bank must never be cached"


def test_shipped_bank_is_valid() -> None:
    """Fails until the bank writers' files pass every check — intended."""
    result = scan(questions_dir())
    assert not result.problems, "\n".join(str(p) for p in result.problems[:40])
    assert {q.topic for q in result.bank.questions} == TOPICS


def test_a_tab_in_the_indentation_is_named_as_such(tmp_path: Path) -> None:
    bank = tmp_path / "tabs.yaml"
    bank.write_text("topic: tabs\nquestions:\n  - id: tab-one\n    kind: recall\n\tdifficulty: easy\n")
    result = runner.invoke(app, ["validate", str(bank)])
    assert result.exit_code == 2
    assert f"{display(bank)}:5: a tab character where YAML needs spaces" in result.output


def test_summary_counts_are_singular_for_one(tmp_path: Path) -> None:
    one = tmp_path / "solo.yaml"
    one.write_text(
        "topic: solo\nquestions:\n  - id: solo-choice\n    kind: choice\n    difficulty: easy\n"
        "    prompt: Pick.\n    explanation: Because.\n    options:\n"
        "      - {text: yes please, correct: true}\n      - {text: no thanks, correct: false}\n"
    )
    result = runner.invoke(app, ["validate", str(one)])
    assert result.exit_code == 0, result.output
    assert "1 question in 1 file: ok; choice 1" in result.output
