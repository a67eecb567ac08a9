"""`drill quiz` through the CLI on what a new user tripped over (issue 16): no pi in the
calculator, no "did you mean GiB?", `?` for hints documented nowhere on screen, no cram
banner, `--topics` refused, and no way to ask for one kind of question."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drill.cli import app
from drill.quiz import kinds
from drill.store import Store

runner = CliRunner()

BANK = {
    "positional": """\
      - id: pos-period
        kind: numeric
        difficulty: hard
        tags: [rope]
        prompt: "Period in tokens of RoPE's slowest pair, Θ = 10,000, d_k = 128?"
        hints: ["Period = 2π / θ_63.", "2π · 10000^(126/128)."]
        explanation: "2π · 10000^(126/128) ≈ 54,410."
        answer: 54410
        unit: tokens
        tolerance: {rel: 0.01}
    """,
    "attention": """\
      - id: attn-probs-gib
        kind: numeric
        difficulty: medium
        tags: [memory]
        prompt: "How many GiB do the fp16 attention probabilities take?"
        explanation: "64 GiB."
        answer: 64
        unit: GiB
        tolerance: {rel: 0.01}
        wrong_answers:
          - value: 68.72
            feedback: "That is the size in decimal GB; the question asks for GiB."
      - id: attn-pick
        kind: choice
        difficulty: easy
        tags: [memory, shapes]
        prompt: "Pick the first option."
        explanation: "The first one."
        options:
          - {text: first, correct: true}
          - {text: second, correct: false}
    """,
}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DRILL_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def bank(tmp_path: Path) -> Path:
    folder = tmp_path / "bank"
    folder.mkdir()
    for topic, body in BANK.items():
        questions = textwrap.indent(textwrap.dedent(body), "  ")
        (folder / f"{topic}.yaml").write_text(f"topic: {topic}\nquestions:\n{questions}")
    return folder


def _quiz(bank: Path, *args: str, input: str = "") -> object:
    return runner.invoke(app, ["quiz", "--bank", str(bank), "--no-shuffle", *args], input=input)


def _saved(home: Path) -> list[tuple[str, int, str, str]]:
    with Store(home / "progress.db") as store:
        return [(r.question_id, r.rating, r.answer or "", r.source) for r in store.reviews()]


@pytest.mark.parametrize("typed", ["2π·10000^(126/128)", "2*pi*10000^(126/128)", "2 pi 10000^(126/128) tokens"])
def test_pi_in_a_typed_answer_is_graded(home: Path, bank: Path, typed: str) -> None:
    result = _quiz(bank, "--topic", "positional", input=typed + "\n")
    assert result.exit_code == 0, result.output
    assert "✓ correct: 54,410 tokens" in result.output
    assert _saved(home) == [("pos-period", 3, typed, "quiz")]


def test_gb_for_a_gib_answer_is_asked_again_with_a_nudge_never_graded(home: Path, bank: Path) -> None:
    result = _quiz(bank, "--tag", "memory", "--kind", "numeric", input="64 GB\n64 GiB\n")
    assert result.exit_code == 0, result.output
    assert "did you mean 64 GiB? GB is 10^9 bytes and GiB is 2^30" in result.output
    assert _saved(home) == [("attn-probs-gib", 3, "64 GiB", "quiz")]  # one review: the slip was not graded


def test_the_questions_own_known_mistake_is_graded_not_nudged(home: Path, bank: Path) -> None:
    result = _quiz(bank, "--tag", "memory", "--kind", "numeric", input="68.72 GiB\n")
    assert result.exit_code == 0, result.output
    assert "did you mean" not in result.output
    assert "known mistake: That is the size in decimal GB" in result.output
    assert _saved(home) == [("attn-probs-gib", 1, "68.72 GiB", "quiz")]


def test_help_says_how_to_get_a_hint() -> None:
    result = runner.invoke(app, ["quiz", "--help"])
    assert result.exit_code == 0
    assert "? shows a hint" in " ".join(result.output.split())


def test_a_card_with_hints_says_so_once_and_one_without_says_nothing(home: Path, bank: Path) -> None:
    # A typo re-asks the prompt: the hint line is not repeated.
    result = _quiz(bank, "--topic", "positional", input="twelve\n?\n54410\n")
    assert result.exit_code == 0, result.output
    assert result.output.count("? for a hint (2 available)") == 1
    assert "hint: Period = 2π / θ_63." in result.output
    assert result.output.index("? for a hint") < result.output.index("couldn't read 'twelve'")
    plain = _quiz(bank, "--kind", "choice", input="a\n")
    assert plain.exit_code == 0, plain.output
    assert "for a hint" not in plain.output


def test_cram_says_so_before_the_first_question(home: Path, bank: Path) -> None:
    cram = _quiz(bank, "--cram", "--kind", "choice", input="a\n")
    assert cram.exit_code == 0, cram.output
    banner = cram.output.find("cram: answers are not scheduled")
    assert 0 <= banner < cram.output.index("Question 1/1")
    assert _saved(home) == [("attn-pick", 3, "a", "cram")]
    due = _quiz(bank, "--kind", "choice", input="a\n")
    assert "cram:" not in due.output


@pytest.mark.parametrize(
    ("flags", "shown"),
    [
        (["--topics", "positional"], "pos-period"),
        (["--topic", "positional"], "pos-period"),
        (["--tags", "rope"], "pos-period"),
        (["--tags", "shapes", "--kind", "choice"], "attn-pick"),
        (["--kind", "CHOICE"], "attn-pick"),
        (["--kind", "numeric", "--topics", "attention"], "attn-probs-gib"),
    ],
)
def test_plural_filter_spellings_and_kind(home: Path, bank: Path, flags: list[str], shown: str) -> None:
    result = _quiz(bank, "--cram", *flags, input="q\n")
    assert result.exit_code == 0, result.output
    assert "Question 1/1" in result.output
    prompts = {"pos-period": "Period in tokens", "attn-pick": "Pick the first", "attn-probs-gib": "How many GiB"}
    assert [qid for qid, text in prompts.items() if text in result.output] == [shown]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--kind", "essay"], "unknown kind 'essay'"),
        (["--kind", "spot-bug"], "no question matches all of these filters together (kind spot_bug alone: 0)"),
        (["--kind", "choice", "--topics", "positional"],
         "no question matches all of these filters together (topic positional alone: 1; kind choice alone: 1)"),
    ],
)
def test_kind_filter_errors(home: Path, bank: Path, flags: list[str], message: str) -> None:
    result = _quiz(bank, *flags)
    assert result.exit_code == 2
    assert message in result.output


def test_help_names_every_registered_kind() -> None:
    result = runner.invoke(app, ["quiz", "--help"])
    text = " ".join(result.output.replace("│", " ").split())
    for name in kinds.names():
        assert name.replace("_", "-") in text


@pytest.mark.parametrize("flag", ["--topic", "--topics"])
def test_mock_takes_both_topic_spellings(home: Path, flag: str) -> None:
    result = runner.invoke(app, ["mock", flag, "no-such-topic"])
    assert result.exit_code == 2
    assert "unknown topic 'no-such-topic'" in result.output and "No such option" not in result.output


@pytest.mark.parametrize("flags", [["--topics", "attention"], ["--tags", "memory"]])
def test_anki_export_takes_the_plural_spellings(home: Path, bank: Path, tmp_path: Path, flags: list[str]) -> None:
    out = tmp_path / "deck.apkg"
    result = runner.invoke(app, ["export", "anki", "--bank", str(bank), *flags, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "2 cards written" in result.output and out.stat().st_size > 0
