"""`drill quiz` end to end: CLI, pipes, persistence, quitting, Ctrl-C, SIGKILL, start-up imports."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from drill.cli import app
from drill.quiz.kinds.choice import parse_choice
from drill.quiz.run import QuizOptions, run_quiz
from drill.quiz.session import lines_reader
from drill.store import Store

FIXTURES = Path(__file__).parent / "fixtures" / "questions"
GOOD = FIXTURES / "good"
BROKEN = FIXTURES / "broken"
runner = CliRunner()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DRILL_HOME", str(tmp_path))
    return tmp_path


def _store(home: Path) -> Store:
    return Store(home / "progress.db")


def _quiz(*args: str, input: str = "") -> object:
    # --no-shuffle: these tests answer by letter, so options stay in file order.
    return runner.invoke(app, ["quiz", "--bank", str(GOOD), "--no-shuffle", *args], input=input)


def test_cram_choice_only_grades_and_logs_without_schedule(home: Path) -> None:
    result = _quiz("--cram", "--topic", "attention", "--difficulty", "easy", "--tag", "complexity", input="b\n")
    assert result.exit_code == 0, result.output
    assert "✓ correct" in result.output
    assert "Each of n queries scores n keys." in result.output  # feedback of the picked option
    with _store(home) as store:
        reviews = store.reviews()
        assert [(r.question_id, r.rating, r.source) for r in reviews] == [("attn-complexity-choice", 3, "cram")]
        assert store.cards() == {}
        row = store._db.execute("SELECT card_json FROM reviews").fetchone()
        assert row[0] is None


def test_wrong_choice_is_again_and_shows_feedback(home: Path) -> None:
    result = _quiz("--tag", "complexity", "--difficulty", "easy", input="a\n")
    assert result.exit_code == 0, result.output
    assert "✗ the answer is b" in result.output
    assert "That is a linear-attention variant." in result.output
    with _store(home) as store:
        assert [r.rating for r in store.reviews()] == [1]
        assert "attn-complexity-choice" in store.cards()


def test_typos_are_reasked_not_graded(home: Path) -> None:
    result = _quiz("--tag", "swiglu", input="12,3.4\n2 GiB\n10922\n")
    assert result.exit_code == 0, result.output
    assert "couldn't read '12,3.4' as a number; try again" in result.output
    assert "is a unit of memory (bytes), but this answer is a count" in result.output
    assert "known mistake: That is 8/3 d before rounding up" in result.output
    with _store(home) as store:
        reviews = store.reviews()
    assert [(r.rating, r.answer) for r in reviews] == [(1, "10922")]


def test_multiple_choice_needs_every_correct_letter(home: Path) -> None:
    result = _quiz("--tag", "softmax", "--difficulty", "hard", input="a c\n")
    assert "✗ the answer is a, b" in result.output
    result = _quiz("--cram", "--tag", "softmax", "--difficulty", "hard", input="b,a\n")
    assert "✓ correct" in result.output


@pytest.mark.parametrize(
    ("text", "count", "multiple", "expected"),
    [("b", 3, False, {"b"}), ("A, C", 3, True, {"a", "c"}), ("a c", 3, True, {"a", "c"}), ("ac", 3, True, {"a", "c"})],
)
def test_parse_choice(text: str, count: int, multiple: bool, expected: set[str]) -> None:
    assert parse_choice(text, count, multiple) == expected


@pytest.mark.parametrize(("text", "multiple"), [("d", False), ("", False), ("a,b", False), ("zz", True)])
def test_parse_choice_rejects(text: str, multiple: bool) -> None:
    with pytest.raises(ValueError):
        parse_choice(text, 3, multiple)


def test_recall_ticks_matching_points_and_suggests_a_rating(home: Path) -> None:
    answer = "the variance of the dot product grows with d_k and softmax saturates"
    result = _quiz("--tag", "scaling", input=f"{answer}\n\n")  # Enter accepts the suggestion
    assert result.exit_code == 0, result.output
    assert "✓ dot product variance grows with d_k" in result.output
    assert "✓ large logits saturate softmax" in result.output
    assert "[Enter = 3 Good]" in result.output
    assert "To speed up training." in result.output  # common wrong answers are shown
    with _store(home) as store:
        assert [r.rating for r in store.reviews()] == [3]


def test_recall_empty_answer_requires_an_explicit_rating(home: Path) -> None:
    result = _quiz("--tag", "scaling", input="\n\n9\n2\n")
    assert "type 1, 2, 3 or 4" in result.output
    with _store(home) as store:
        assert [r.rating for r in store.reviews()] == [2]


def test_parametric_is_seeded_and_checked(home: Path) -> None:
    first = _quiz("--cram", "--tag", "kv-cache", "--seed", "7", input="q\n")
    second = _quiz("--cram", "--tag", "kv-cache", "--seed", "7", input="q\n")
    prompt = [line for line in first.output.splitlines() if line.startswith("KV cache bytes")]
    assert prompt and prompt == [line for line in second.output.splitlines() if line.startswith("KV cache bytes")]
    numbers = [int(x) for x in __import__("re").findall(r"\d+", prompt[0])]
    n_layers, n_kv, d_head, seq, batch = numbers[0], numbers[1], numbers[2], numbers[3], numbers[4]
    right = 2 * n_layers * n_kv * d_head * seq * batch * 2
    ok = _quiz("--cram", "--tag", "kv-cache", "--seed", "7", input=f"{right / 2**20} MiB\n")
    assert "✓ correct" in ok.output, ok.output
    wrong = _quiz("--cram", "--tag", "kv-cache", "--seed", "7", input=f"{right // 2}\n")
    assert "Forgot the factor 2" in wrong.output


def test_quit_and_eof_keep_answered_reviews(home: Path) -> None:
    result = _quiz("--cram", "--seed", "1", input="q\n")
    assert result.exit_code == 0
    assert "Session ended (q) — 0 reviews saved" in result.output
    result = _quiz("--cram", "--seed", "1", "--tag", "complexity", input="b\n")  # EOF on the 2nd
    assert result.exit_code == 0
    assert "1 review saved" in result.output


def test_ctrl_c_ends_cleanly_and_keeps_reviews(home: Path) -> None:
    lines = iter(["b"])

    def read(prompt: str) -> str | None:
        try:
            return next(lines)
        except StopIteration:
            raise KeyboardInterrupt from None

    console = Console(record=True, width=100)
    code = run_quiz(QuizOptions(bank=GOOD, tags=("complexity",), seed=3), console=console, read=read)
    assert code == 130
    assert "Session interrupted (Ctrl-C) — 1 review saved" in console.export_text()
    with _store(home) as store:
        assert len(store.reviews()) == 1


def test_store_persists_across_sessions_and_due_mode_skips_fresh_cards(home: Path) -> None:
    _quiz("--tag", "complexity", "--difficulty", "easy", input="b\n")
    again = _quiz("--tag", "complexity", "--difficulty", "easy", input="b\n")
    assert "Nothing due right now" in again.output
    with _store(home) as store:
        assert len(store.reviews()) == 1


def test_new_limit_counts_todays_reviews(home: Path) -> None:
    first = _quiz("--new-limit", "2", "--seed", "1", input="q\n")
    assert "Question 1/2" in first.output
    _quiz("--new-limit", "2", "--seed", "1", "--tag", "complexity", "--difficulty", "easy", input="b\n")
    second = _quiz("--new-limit", "2", "--seed", "1", input="q\n")
    assert "Question 1/1" in second.output


def test_broken_bank_refuses_to_start(home: Path) -> None:
    result = runner.invoke(app, ["quiz", "--bank", str(BROKEN)])
    assert result.exit_code == 2
    assert "fields.yaml:4:" in result.output and "more; run `drill validate" in result.output
    assert not (home / "progress.db").exists()


def test_unknown_topic_and_bad_flags_are_usage_errors(home: Path) -> None:
    assert "unknown topic 'atention'" in _quiz("--topic", "atention").output
    assert _quiz("--topic", "atention").exit_code == 2
    assert _quiz("--difficulty", "extreme").exit_code == 2
    assert _quiz("--retention", "1.5").exit_code == 2
    assert _quiz("--tag", "no-such-tag").exit_code == 2


def test_corrupt_store_is_refused_with_exit_2(home: Path) -> None:
    (home / "progress.db").write_bytes(b"this is not sqlite" * 100)
    result = _quiz(input="b\n")
    assert result.exit_code == 2
    assert "not a readable SQLite database" in result.output


def test_corrupt_cache_is_rebuilt_silently(home: Path) -> None:
    assert _quiz("--cram", input="q\n").exit_code == 0
    caches = list((home / "cache").glob("bank-*.marshal"))
    assert len(caches) == 1
    caches[0].write_bytes(b"\x00garbage")
    result = _quiz("--cram", "--tag", "complexity", "--difficulty", "easy", input="b\n")
    assert result.exit_code == 0 and "✓ correct" in result.output
    assert caches[0].read_bytes() != b"\x00garbage"


def test_cache_notices_an_edited_bank(home: Path, tmp_path: Path) -> None:
    bank = tmp_path / "bank"
    bank.mkdir()
    text = (GOOD / "ffn.yaml").read_text()
    (bank / "ffn.yaml").write_text(text)
    assert runner.invoke(app, ["quiz", "--bank", str(bank), "--cram"], input="q\n").exit_code == 0
    (bank / "ffn.yaml").write_text(text.replace("answer: 11008", "answer: 11000"))
    result = runner.invoke(app, ["quiz", "--bank", str(bank), "--cram"], input="q\n")
    assert result.exit_code == 2
    assert "outside the tolerance" in result.output


def _spawn(home: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "DRILL_HOME": str(home), "PYTHONUNBUFFERED": "1", "COLUMNS": "120"}
    return subprocess.Popen(
        [sys.executable, "-m", "drill.cli", "quiz", "--bank", str(GOOD), "--no-shuffle", *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )


def _read_until(proc: subprocess.Popen[str], marker: str, timeout: float = 60.0) -> str:
    seen = ""
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while marker not in seen:
        assert time.monotonic() < deadline, f"timed out waiting for {marker!r}; got:\n{seen}"
        char = proc.stdout.read(1)
        assert char, f"process ended before {marker!r}; got:\n{seen}"
        seen += char
    return seen


def test_real_pipe_session(home: Path) -> None:
    proc = _spawn(home, "--cram", "--tag", "complexity", "--difficulty", "easy")
    out, _ = proc.communicate("b\n", timeout=120)
    assert proc.returncode == 0, out
    assert "✓ correct" in out and "1 review saved" in out


@pytest.mark.parametrize("k", [0, 2])
def test_sigkill_after_k_answers_keeps_exactly_k_reviews(home: Path, k: int) -> None:
    # Choice-only questions: one line answers each; order fixed by the seed.
    proc = _spawn(home, "--tag", "complexity", "--seed", "5")  # three choice questions
    try:
        assert proc.stdin is not None
        for i in range(k):
            _read_until(proc, f"Question {i + 1}/")
            _read_until(proc, "your choice")
            proc.stdin.write("a\n")
            proc.stdin.flush()
        _read_until(proc, f"Question {k + 1}/")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    with _store(home) as store:
        assert len(store.reviews()) == k


def test_quiz_does_not_import_torch(home: Path) -> None:
    code = (
        "import sys, runpy\n"
        "sys.argv = ['drill', 'quiz', '--bank', sys.argv[1], '--cram', '-n', '1']\n"
        "try:\n    runpy.run_module('drill.cli', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print('TORCH_LOADED' if 'torch' in sys.modules else 'TORCH_ABSENT')\n"
    )
    env = {**os.environ, "DRILL_HOME": str(home)}
    out = subprocess.run([sys.executable, "-c", code, str(GOOD)], input="q\n", capture_output=True, text=True, env=env,
                         timeout=120)
    assert "Question 1/1" in out.stdout, out.stdout + out.stderr
    assert "TORCH_ABSENT" in out.stdout


def test_choice_options_are_shuffled_and_graded_by_what_was_shown(home: Path) -> None:
    """With shuffling on, the letter of the right option moves with the seed, and
    grading follows the letters on screen, not the file order."""
    positions = set()
    for seed in range(8):
        args = ["quiz", "--bank", str(GOOD), "--cram", "--tag", "complexity", "--difficulty", "easy", "--seed",
                str(seed)]
        shown = runner.invoke(app, args, input="q\n").output
        (line,) = [ln for ln in shown.splitlines() if ln.strip().endswith(") O(n^2)")]
        right = line.strip()[0]
        positions.add(right)
        graded = runner.invoke(app, args, input=f"{right}\n").output
        assert "✓ correct" in graded, graded
    assert len(positions) > 1, positions


def test_a_lapsed_card_comes_back_once_in_the_same_session(home: Path) -> None:
    result = _quiz("--tag", "complexity", "--difficulty", "easy", input="a\nb\n")
    assert result.exit_code == 0, result.output
    assert "Question 1/1" in result.output and "Repeat 1 (missed earlier)" in result.output
    assert "Question 2/" not in result.output and "✓ correct" in result.output
    with _store(home) as store:
        assert [r.rating for r in store.reviews()] == [1, 3]


def test_wrapped_options_and_feedback_keep_a_hanging_indent(home: Path, tmp_path: Path) -> None:
    # At 40 columns the long option and its feedback wrap; their continuation lines must
    # start under the text, not at column 0 under the letter.
    bank = tmp_path / "bank"
    bank.mkdir()
    long = "one two three four five six seven eight nine ten eleven twelve"
    (bank / "wrap.yaml").write_text(
        "topic: wrap\nquestions:\n  - id: wrap-choice\n    kind: choice\n    difficulty: easy\n"
        "    prompt: Pick.\n    explanation: Because.\n    options:\n"
        f"      - {{text: '{long}', correct: true, feedback: '{long}'}}\n"
        "      - {text: short, correct: false}\n"
    )
    out = io.StringIO()
    options = QuizOptions(bank=bank, shuffle=False, cram=True, count=1)
    run_quiz(options, console=Console(file=out, width=40), read=lines_reader(["a"]))
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    option = lines.index(next(line for line in lines if line.startswith("  a) one")))
    assert lines[option + 1].startswith("     ") and lines[option + 1].strip().split()[0] in long.split()
    feedback = lines.index(next(line for line in lines if line.startswith("  ✓ a) one")))
    assert lines[feedback + 1].startswith("       ") and lines[feedback + 1].strip()


def test_asking_for_a_hint_on_a_question_without_hints_says_so(home: Path) -> None:
    result = _quiz("--cram", "--tag", "complexity", "--difficulty", "easy", input="?\nb\n")
    assert result.exit_code == 0, result.output
    assert "this question has no hints" in result.output and "no more hints" not in result.output


def test_reflow_joins_wrapped_prose_but_keeps_lists_and_code() -> None:
    from drill.quiz.session import reflow

    assert reflow("one two\nthree four\n\nnext para\n") == "one two three four\n\nnext para"
    listed = "Steps:\n- first\n- second"
    assert reflow(listed) == listed
    code = "Compute:\n    y = x @ w\n    z = y.sum()"
    assert reflow(code) == code


def test_cram_keeps_to_its_count_even_after_a_miss(home: Path) -> None:
    result = _quiz("--cram", "-n", "1", "--tag", "complexity", "--difficulty", "easy", input="a\n")
    assert result.exit_code == 0, result.output
    assert "Question 1/1" in result.output and "Question 2/" not in result.output
