"""Nothing a bank or a typed answer holds can break the quiz (issue 15, section 4).

Every hostile input class ends in ONE line naming file:line (or the file),
exit 2, quickly, in bounded memory — never a traceback, a hang or a
MemoryError. Each class is tried through `drill validate` (every problem is
listed) and through `drill quiz --bank` (the bank is refused with its first
problem), in a subprocess with a timeout where a hang is the failure mode.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drill.cli import app
from drill.quiz.formula import FormulaError, evaluate
from drill.quiz.loader import load_bank
from drill.quiz.numbers import AnswerFormatError, read_answer

runner = CliRunner()

HEAD = "topic: {topic}\nquestions:\n"
QUESTION = """\
  - id: {topic}-one
    kind: numeric
    difficulty: easy
    prompt: "How many?"
    explanation: "Because."
    answer: {answer}
"""

# An alias bomb: nine levels of nine-fold aliases (9**9 strings) in under a kilobyte.
BOMB = "topic: bomb\n" + 'a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 9)
) + "questions: *a8\n"


def _drill(*args: str, home: Path, timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    """drill in a child process, its memory capped at 1 GiB: a hang is a timeout, a blow-up a failure."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    env = {**os.environ, "DRILL_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "drill.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, stdin=subprocess.DEVNULL, preexec_fn=limit)


def _one_line_exit_2(proc: subprocess.CompletedProcess[str], where: str, fragment: str) -> None:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert where in lines[0] and fragment in lines[0], lines[0]


def _write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


CASES = {
    # name: (file text, expected line, fragment of the message)
    "alias-bomb": (BOMB, 2, "anchors and aliases"),
    "anchor-alone": (HEAD.format(topic="anchor-alone") + QUESTION.format(topic="x", answer="&n 4"), 8,
                     "anchors and aliases"),
    "timestamp-tag": (HEAD.format(topic="timestamp-tag") + QUESTION.format(topic="x", answer="!!timestamp 2024-13-45"),
                      8, "the tag !!timestamp is not allowed"),
    "huge-int": (HEAD.format(topic="huge-int") + QUESTION.format(topic="x", answer="9" * 5000), 8,
                 "more than 30 digits"),
    "python-tag": (HEAD.format(topic="python-tag")
                   + QUESTION.format(topic="x", answer='!!python/object/apply:os.system ["true"]'),
                   8, "the tag !!python/object/apply:os.system is not allowed"),
    "binary-tag": (HEAD.format(topic="binary-tag") + QUESTION.format(topic="x", answer="!!binary aGVsbG8="), 8,
                   "!!binary is not allowed"),
    "local-tag": (HEAD.format(topic="local-tag") + QUESTION.format(topic="x", answer="!mine 4"), 8,
                  "!mine is not allowed"),
    "bad-int-tag": (HEAD.format(topic="bad-int-tag") + QUESTION.format(topic="x", answer="!!int four"), 8,
                    "is not a whole number"),
    "deep-nesting": (HEAD.format(topic="deep-nesting") + QUESTION.format(topic="x", answer="[" * 200 + "]" * 200), 8,
                     "nested more than"),
    "infinite-float": (HEAD.format(topic="infinite-float") + QUESTION.format(topic="x", answer=".inf"), 8,
                       "must be a finite number"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_yaml_is_one_line_at_its_line(tmp_path: Path, name: str) -> None:
    text, line, fragment = CASES[name]
    bank = _write(tmp_path / "bank", f"{name}.yaml", text)
    started = time.monotonic()
    proc = _drill("validate", str(bank), home=tmp_path / "home")
    assert time.monotonic() - started < 15
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    first = proc.stderr.splitlines()[0]
    assert f"{name}.yaml:{line}: " in first and fragment in first, proc.stderr
    quiz = _drill("quiz", "-n", "1", "--bank", str(bank.parent), home=tmp_path / "home")
    _one_line_exit_2(quiz, f"{name}.yaml:{line}", fragment)


def test_an_implicit_date_is_text_not_a_broken_timestamp(tmp_path: Path) -> None:
    text = HEAD.format(topic="dates") + QUESTION.format(topic="dates", answer="4").replace('"How many?"', "2024-13-45")
    bank = _write(tmp_path / "bank", "dates.yaml", text)
    question = load_bank(bank.parent, cache_dir=tmp_path / "cache").questions[0]
    assert question.prompt == "2024-13-45"


def test_a_file_over_the_size_cap_is_refused_unread(tmp_path: Path) -> None:
    text = HEAD.format(topic="big") + QUESTION.format(topic="big", answer="4") + "# " + "x" * (2 << 20) + "\n"
    bank = _write(tmp_path / "bank", "big.yaml", text)
    proc = _drill("quiz", "-n", "1", "--bank", str(bank), home=tmp_path / "home")
    _one_line_exit_2(proc, "big.yaml", "larger than 1024 KiB")


@pytest.mark.parametrize("what", ["fifo", "dev-zero", "folder", "dangling-link"])
def test_only_regular_files_are_read(tmp_path: Path, what: str) -> None:
    folder = tmp_path / "bank"
    _write(folder, "good.yaml", HEAD.format(topic="good") + QUESTION.format(topic="good", answer="4"))
    entry = folder / "odd.yaml"
    if what == "fifo":
        os.mkfifo(entry)
    elif what == "dev-zero":
        entry.symlink_to("/dev/zero")
    elif what == "folder":
        entry.mkdir()
    else:
        entry.symlink_to(tmp_path / "nowhere.yaml")
    expected = {"fifo": "not a regular file (a FIFO)", "dev-zero": "not a regular file (a device)",
                "folder": "not a regular file (a folder)", "dangling-link": "cannot read the file"}[what]
    proc = _drill("quiz", "-n", "1", "--bank", str(folder), home=tmp_path / "home")
    _one_line_exit_2(proc, "odd.yaml", expected)
    if what in ("fifo", "dev-zero"):  # given directly, not in a folder
        direct = _drill("validate", str(entry), home=tmp_path / "home")
        assert direct.returncode == 2 and expected in direct.stderr and "Traceback" not in direct.stderr


def test_dev_zero_as_the_bank_is_one_line(tmp_path: Path) -> None:
    proc = _drill("quiz", "-n", "1", "--bank", "/dev/zero", home=tmp_path / "home")
    _one_line_exit_2(proc, "/dev/zero", "not a regular file (a device)")


# -- formulas and typed answers ------------------------------------------------

BLOWUPS = ["round(1, -10**12)", "round(1, 10**12)", "10**10**10", "9**9**9", "2**4096 * 2**4096",
           "int(1e308) * int(1e308) * int(1e308) * int(1e308) * int(1e308)", "abs(" * 60 + "1" + ")" * 60,
           "-" * 300 + "1", "exp(exp(exp(10)))", "min(1)", "round(1, 0.5)", "0.5 ** -10**6"]


@pytest.mark.parametrize("text", BLOWUPS)
def test_formula_blowups_are_errors_within_a_step_budget(text: str) -> None:
    started = time.monotonic()
    with pytest.raises(FormulaError):
        evaluate(text)
    assert time.monotonic() - started < 0.5


@pytest.mark.parametrize("text", ["round(1, -10^12)", "10^10^10", "-" * 150 + "1"])
def test_typed_blowups_are_asked_again(text: str) -> None:
    started = time.monotonic()
    with pytest.raises(AnswerFormatError):
        read_answer(text)
    assert time.monotonic() - started < 0.5


def test_a_blowup_formula_in_a_bank_is_one_line(tmp_path: Path) -> None:
    text = (HEAD.format(topic="blowup") + QUESTION.format(topic="blowup", answer="1")
            + '    formula: "round(1, -10**12)"\n')
    bank = _write(tmp_path / "bank", "blowup.yaml", text)
    proc = _drill("validate", str(bank), home=tmp_path / "home", timeout=10)
    assert proc.returncode == 2 and "blowup.yaml:9: " in proc.stderr and "round()'s digits" in proc.stderr, proc.stderr


def test_a_blowup_typed_in_the_quiz_is_asked_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRILL_HOME", str(tmp_path / "home"))
    bank = _write(tmp_path / "bank", "typed.yaml",
                  HEAD.format(topic="typed") + QUESTION.format(topic="typed", answer="4"))
    result = runner.invoke(app, ["quiz", "--bank", str(bank), "-n", "1", "--cram"], input="round(1, -10^12)\n4\n")
    assert result.exit_code == 0, result.output
    assert "round()'s digits" in result.output and "correct: 4" in result.output


# -- key-point patterns ---------------------------------------------------------

CATASTROPHIC = """\
topic: regex
questions:
  - id: regex-one
    kind: recall
    difficulty: easy
    prompt: "Say words."
    explanation: "Words."
    answer: "some words"
    key_points:
      - text: "only words"
        patterns: ['^(\\\\w+\\\\s?)+$']
      - text: "a second point"
        patterns: ['second']
"""


def test_a_catastrophic_pattern_runs_in_linear_time(tmp_path: Path) -> None:
    """`^(\\w+\\s?)+$` against words ending in "!" takes exponential time in a backtracking
    engine; RE2 answers at once, in the quiz as the learner types."""
    bank = _write(tmp_path / "bank", "regex.yaml", CATASTROPHIC)
    answer = "word " * 40 + "!"
    env = {**os.environ, "DRILL_HOME": str(tmp_path / "home")}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "drill.cli", "quiz", "--bank", str(bank), "-n", "1", "--cram"],
                          input=f"{answer}\n1\n", capture_output=True, text=True, env=env, timeout=20)
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - started < 15
    assert "Key points" in proc.stdout and "1 review saved" in proc.stdout


def test_a_pattern_re2_cannot_run_is_named_at_its_line(tmp_path: Path) -> None:
    bank = _write(tmp_path / "bank", "regex.yaml", CATASTROPHIC.replace("['second']", "['(?=second)']"))
    proc = _drill("validate", str(bank), home=tmp_path / "home")
    assert proc.returncode == 2 and "regex.yaml:12: " in proc.stderr and "invalid pattern '(?=second)'" in proc.stderr
    assert "RE2" in proc.stderr and "Traceback" not in proc.stderr
