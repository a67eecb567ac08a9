"""`drill quiz` through the CLI on the gaps a QA pass found: units read too leniently,
arithmetic answers, scale slips, -n, filters, a locked store, line editing."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drill.cli import app
from drill.store import Store

runner = CliRunner()


def _numeric(qid: str, answer: float, unit: str, tags: str = "[arithmetic]", rel: float = 0.01,
             topic_difficulty: str = "easy") -> str:
    return textwrap.dedent(f"""\
      - id: {qid}
        kind: numeric
        difficulty: {topic_difficulty}
        tags: {tags}
        prompt: "What is the value for {qid}?"
        explanation: "Because {qid}."
        answer: {answer}
        unit: "{unit}"
        tolerance: {{rel: {rel}}}
    """)


def _bank(folder: Path, topics: dict[str, list[str]]) -> Path:
    folder.mkdir()
    for topic, questions in topics.items():
        body = "".join(textwrap.indent(q, "  ") for q in questions)
        (folder / f"{topic}.yaml").write_text(f"topic: {topic}\nquestions:\n{body}")
    return folder


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DRILL_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def bank(tmp_path: Path) -> Path:
    return _bank(tmp_path / "bank", {
        "moe": [_numeric("moe-active-b", 11.274289152, "B", "[moe, parameters]")],
        "gqa": [
            _numeric("gqa-kv-share", 25, "%", "[gqa-ratio, memory]", topic_difficulty="medium"),
            _numeric("gqa-cache-gib", 160, "GiB", "[kv-cache, memory]"),
        ],
        "kv_cache": [_numeric("kv-params", 4198400, "params", "[kv-cache, parameters]", rel=1e-9)],
    })


def _quiz(bank: Path, *args: str, input: str = "") -> object:
    return runner.invoke(app, ["quiz", "--bank", str(bank), "--cram", *args], input=input)


def _saved(home: Path) -> list[tuple[str, int, str]]:
    with Store(home / "progress.db") as store:
        return [(r.question_id, r.rating, r.answer) for r in store.reviews()]


# --- 1-3: answers ------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "typed", "said", "graded"),
    [
        # Gigabits are not gigabytes: asked again (not graded), then a real answer is graded.
        (["--tag", "kv-cache", "--topic", "gqa"], ["171.8 Gb", "171.8 GB"], "'Gb' means gigabits", ("171.8 GB", 3)),
        # Tokens are not params: asked again; a bare number is fine.
        (["--topic", "kv_cache"], ["4198400 tokens", "4198400"], "you wrote tokens; the answer is in params",
         ("4198400", 3)),
        # A full count for an answer in billions: "did you mean", not a wrong answer.
        (["--topic", "moe"], ["11,274,289,152", "1.127e10", "11.27"], "did you mean 11.2743 B?", ("11.27", 3)),
        # 0.25 on a percentage question.
        (["--tag", "gqa-ratio"], ["0.25", "25"], "did you mean 25%?", ("25", 3)),
        # Decimal GB for an answer in GiB: "did you mean GiB?", not a wrong answer (issue 16).
        (["--topic", "gqa", "--tag", "kv-cache"], ["160 GB", "160 GiB"], "did you mean 160 GiB?", ("160 GiB", 3)),
        # Arithmetic is worked out with the safe evaluator, unit and all.
        (["--topic", "gqa", "--tag", "kv-cache"], ["160 * 2^30 bytes"], "(160 * 2^30 bytes = 160 GiB)",
         ("160 * 2^30 bytes", 3)),
    ],
)
def test_answers_are_read_strictly_and_slips_are_asked_again(home: Path, bank: Path, flags: list[str], typed: list[str],
                                                             said: str, graded: tuple[str, int]) -> None:
    result = _quiz(bank, "-n", "1", *flags, input="\n".join(typed) + "\n")
    assert result.exit_code == 0, result.output
    assert said in result.output
    assert "✓ correct" in result.output
    assert [(a, r) for _, r, a in _saved(home)] == [graded]


def test_a_wrong_arithmetic_answer_shows_what_it_came_to(home: Path, bank: Path) -> None:
    result = _quiz(bank, "--topic", "kv_cache", input="2^22\n")
    assert "you said 2^22 (= 4,194,304 params); the answer is 4,198,400 params" in result.output
    assert [r for _, r, _ in _saved(home)] == [1]


# --- 4: -n is a ceiling, and the denominator never grows ------------------------


def test_due_mode_never_asks_more_than_n(home: Path, bank: Path) -> None:
    result = runner.invoke(app, ["quiz", "--bank", str(bank), "-n", "2", "--seed", "7"], input="0\n0\n0\n0\n")
    assert result.exit_code == 0, result.output
    assert "Question 1/2" in result.output and "Question 2/2" in result.output
    assert "Question 3/" not in result.output and "Repeat" not in result.output
    assert len(_saved(home)) == 2


def test_due_mode_repeats_a_miss_only_while_there_is_room(home: Path, bank: Path) -> None:
    result = runner.invoke(app, ["quiz", "--bank", str(bank), "--topic", "gqa", "-n", "3", "--seed", "7"],
                           input="0\n0\n0\n0\n")
    assert result.exit_code == 0, result.output
    assert result.output.count("Question ") == 2 and "Question 2/2" in result.output
    assert result.output.count("Repeat 1 (missed earlier)") == 1 and "Repeat 2" not in result.output
    assert len(_saved(home)) == 3


# --- 5: filters ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "ids"),
    [
        (["--tag", "GQA-RATIO"], {"gqa-kv-share"}),
        (["--topic", "GQA", "--difficulty", "Medium"], {"gqa-kv-share"}),
        (["--topic", "moe,kv-cache"], {"moe-active-b", "kv-params"}),
        (["--tag", "parameters, gqa-ratio"], {"moe-active-b", "kv-params", "gqa-kv-share"}),
    ],
)
def test_filters_ignore_case_and_take_comma_lists(home: Path, bank: Path, flags: list[str], ids: set[str]) -> None:
    result = _quiz(bank, *flags, input="q\n")
    assert result.exit_code == 0, result.output
    shown = {qid for qid in ("moe-active-b", "gqa-kv-share", "gqa-cache-gib", "kv-params")
             if f"for {qid}?" in result.output}
    assert len(shown) == 1 and shown <= ids  # q after the first: one shown, and from the filtered set
    assert f"Question 1/{len(ids)}" in result.output


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--tag", "nonexistent"], "unknown tag 'nonexistent'; 5 tags, e.g."),
        (["--tag", "kv-cach"], "unknown tag 'kv-cach'; did you mean kv-cache?"),
        (["--tag", "gqa"], "unknown tag 'gqa'; did you mean gqa-ratio?"),
        (["--topic", "moe,gq"], "unknown topic 'gq'; did you mean gqa?"),
        (["--topic", "moe", "--tag", "memory"],
         "no question matches all of these filters together (topic moe alone: 1; tag memory alone: 2)"),
    ],
)
def test_unknown_filters_are_named_with_suggestions(home: Path, bank: Path, flags: list[str], message: str) -> None:
    result = _quiz(bank, *flags)
    assert result.exit_code == 2
    assert message in result.output and len(result.output.strip().splitlines()) == 1


# --- 8: a store another process holds ---------------------------------------------


def test_a_locked_store_is_refused_before_the_first_question(home: Path, bank: Path) -> None:
    home.mkdir()
    Store(home / "progress.db").close()
    holder = sqlite3.connect(home / "progress.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        started = time.monotonic()
        result = _quiz(bank, "-n", "1", input="25\n")
        took = time.monotonic() - started
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert result.exit_code == 2
    assert "holding the progress store's write lock" in result.output
    assert "Question 1/" not in result.output and took < 5  # not after a 10 s wait for the answer's save


# --- 7: line editing ----------------------------------------------------------------


@pytest.mark.parametrize("tty", [True, False])
def test_readline_is_loaded_for_a_terminal_only(tty: bool) -> None:
    script = textwrap.dedent(f"""\
        import io, sys
        from rich.console import Console
        class In(io.StringIO):
            def isatty(self): return {tty}
        sys.stdin = In("")
        from drill.quiz.session import terminal_reader
        terminal_reader(Console(file=io.StringIO()))
        print("readline" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, env={**os.environ})
    assert out.stdout.strip() == str(tty)
