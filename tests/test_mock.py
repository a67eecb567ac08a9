"""`drill mock`: timed sessions end to end, with a fake clock, scripted input and the real grader.

Most tests inject a FakeClock + ScriptedReader through the Python API (a
"45-minute" mock runs in milliseconds) and a stub grader; two tests use the
real `check_file` (each spawns a grading child, a few seconds): one through
the API, one through the installed CLI over a pipe.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from drill.cli import app
from drill.mock.clock import Countdown, FakeClock, SystemClock
from drill.mock.concept import MIN_SEEN_S
from drill.mock.reader import INTERRUPT, EndOfInput, ScriptedReader, TimeUp, stream_reader
from drill.mock.run import EXIT_ABANDONED, MockOptions, run_mock
from drill.quiz import kinds
from drill.store import Store

from mockkit import RIGHT, WRONG, StubGrader, last_report, sit, write_into

ROOT = Path(__file__).resolve().parent.parent
GOOD_ATTENTION = ROOT / "tests" / "fixtures" / "solutions" / "attention" / "good_matmul_softmax.py"
BUGGY_ATTENTION = ROOT / "tests" / "fixtures" / "solutions" / "attention" / "bug_missing_scale__matmul.py"
runner = CliRunner()


# -- full sessions ------------------------------------------------------------


def test_full_mock_with_real_grader_records_everything(tmp_path: Path, bank: Path) -> None:
    work = tmp_path / "work"
    steps = [(60, RIGHT), (200, RIGHT), lambda: (shutil.copy(GOOD_ATTENTION, work / "attention.py"), "submit")[1]]
    code, store, out, _ = sit(tmp_path, bank, steps, grade=_real_grader())
    assert code == 0, out
    mock = last_report(store)
    report = mock["report"]
    assert mock["status"] == "completed" and mock["exercise"] == "attention"
    assert report["concept"]["score_pct"] == 100.0
    assert [q["outcome"] for q in report["concept"]["questions"]] == ["right", "right"]
    assert [q["seconds"] for q in report["concept"]["questions"]] == [60.0, 200.0]
    final = report["coding"]["submissions"][-1]
    assert final["status"] == "pass" and final["passed"] == final["total"] > 0
    assert report["score"] == 100.0 == mock["score"]
    # concept answers feed FSRS as mock reviews; the attempt is tied to the mock
    assert {r.source for r in store.reviews()} == {"mock"} and len(store.cards()) == 2
    attempts = store.attempts("attention")
    assert [(a.status, a.mock_id) for a in attempts] == [("pass", mock["id"])]
    assert "All hidden tests pass" in out and "Mock #1 report" in out


def _real_grader():
    from drill.mock.run import _check_file

    return _check_file


def test_wrong_answers_and_failed_code_name_what_to_review(tmp_path: Path, bank: Path) -> None:
    work = tmp_path / "work"
    steps = [WRONG, "skip", write_into(work / "attention.py", "# BUGGY attempt\n"), "done"]
    code, store, out, _ = sit(tmp_path, bank, steps)
    report = last_report(store)["report"]
    assert code == 0
    outcomes = [q["outcome"] for q in report["concept"]["questions"]]
    assert outcomes == ["wrong", "skipped"]
    assert report["to_review"] == [q["id"] for q in report["concept"]["questions"]]
    assert report["review_topics"] and "drill quiz --topic" in out
    final = report["coding"]["submissions"][-1]
    assert (final["status"], final["diagnosis"]) == ("fail", "Missing 1/sqrt(d_k) scaling")
    assert "diagnosis: Missing 1/sqrt(d_k) scaling" in out and "drill check" in out
    # 0 concept points, failing code with 3/12 tests: half credit in proportion
    assert report["score"] == pytest.approx(0.6 * 100 * 0.5 * 3 / 12, abs=0.1)
    # a skipped question is a failed recall: both reached FSRS as Again, from the mock
    reviews = store.reviews()
    assert [(r.rating, r.source) for r in reviews] == [(1, "mock"), (1, "mock")]
    assert reviews[1].answer == "(skipped in a mock)"
    assert set(store.cards()) == {q["id"] for q in report["concept"]["questions"]}


def test_resubmission_until_pass_records_each_attempt(tmp_path: Path, bank: Path) -> None:
    work = tmp_path / "work"
    grader = StubGrader()
    steps = [RIGHT, RIGHT, write_into(work / "attention.py", "BUGGY"), write_into(work / "attention.py", "GOOD", "")]
    code, store, out, reader = sit(tmp_path, bank, steps, grade=grader)
    assert code == 0
    assert grader.graded == ["BUGGY", "GOOD"]
    assert [a.status for a in store.attempts()] == ["fail", "pass"]
    assert not reader.steps  # the pass ended the coding round without asking again


# -- time -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("steps", "outcome", "rated"),
    [
        # question 2 on screen for 4:30 when the clock ran out: a lapse, rated Again
        ([(30, RIGHT), (10 * 60, RIGHT)], "timeout", True),
        # question 2 on screen for 2 s (< MIN_SEEN_S): no fair chance to read it, not rated
        ([(298, RIGHT), (10 * 60, RIGHT)], "missed", False),
    ],
)
def test_time_running_out_mid_question(tmp_path: Path, bank: Path, steps: list, outcome: str, rated: bool) -> None:
    grader = StubGrader()
    code, store, out, _ = sit(tmp_path, bank, steps, grade=grader, minutes=5)
    mock = last_report(store)
    report = mock["report"]
    questions = report["concept"]["questions"]
    assert code == 0 and mock["status"] == "expired"
    assert [q["outcome"] for q in questions] == ["right", outcome]
    assert questions[1]["seconds"] == 300.0 - steps[0][0]  # on screen until 0:00, not past it
    assert report["coding"]["reached"] is False and grader.graded == []
    reviews = store.reviews()
    if rated:
        assert [(r.question_id, r.rating, r.source) for r in reviews[1:]] == [(questions[1]["id"], 1, "mock")]
        assert reviews[1].answer == "(time ran out in a mock)"
        assert f"time ran out = on screen {MIN_SEEN_S:g} s or more" in out  # the card states the rule
        assert questions[1]["id"] in store.cards() and questions[1]["rating"] == 1
    else:
        assert len(reviews) == 1 and questions[1]["rating"] is None
        assert "not answered = never reached, or on screen too briefly" in out
    assert f"on screen for {MIN_SEEN_S:g} s or more counts as a miss" in out  # and so does the brief
    assert questions[1]["id"] in report["to_review"]
    assert "Time is up" in out and "not reached" in out
    assert report["elapsed_s"] == 300.0


RECALL_BANK = """\
topic: gamma
questions:
  - id: gamma-recall
    kind: recall
    difficulty: easy
    prompt: "Why scale the scores?"
    answer: "Variance grows with d_k."
    explanation: "Softmax saturates otherwise."
    key_points:
      - text: "variance grows"
        patterns: ["varian"]
      - text: "softmax saturates"
        patterns: ["saturat"]
"""


@pytest.mark.parametrize(
    ("steps", "outcome", "rated"),
    [
        ([(600, "variance")], "timeout", True),  # still typing the answer at 0:00: Again
        (["variance", (600, "3")], "missed", False),  # answered, not yet self-rated: only the learner knows
    ],
)
def test_time_running_out_on_a_recall_question(tmp_path: Path, steps: list, outcome: str, rated: bool) -> None:
    folder = tmp_path / "recall-bank"
    folder.mkdir()
    (folder / "gamma.yaml").write_text(RECALL_BANK)
    code, store, out, _ = sit(tmp_path, folder, steps, minutes=5, questions=1)
    questions = last_report(store)["report"]["concept"]["questions"]
    assert [q["outcome"] for q in questions] == [outcome]
    assert [(r.rating, r.source) for r in store.reviews()] == ([(1, "mock")] if rated else [])


def test_q_mid_question_counts_it_skipped_and_rates_it_again(tmp_path: Path, bank: Path) -> None:
    code, store, out, _ = sit(tmp_path, bank, ["q", "done"])
    questions = last_report(store)["report"]["concept"]["questions"]
    assert [q["outcome"] for q in questions] == ["skipped", "missed"]
    assert [(r.question_id, r.rating, r.source) for r in store.reviews()] == [(questions[0]["id"], 1, "mock")]


def test_at_zero_the_latest_saved_file_is_graded(tmp_path: Path, bank: Path) -> None:
    work = tmp_path / "work"
    grader = StubGrader()
    steps = [RIGHT, RIGHT, write_into(work / "attention.py", "BUGGY v1"),
             write_into(work / "attention.py", "GOOD v2", then="hmm"),  # saved, not submitted
             (45 * 60, "submit")]  # too late: the clock ran out while they typed
    code, store, out, _ = sit(tmp_path, bank, steps, grade=grader)
    mock = last_report(store)
    subs = mock["report"]["coding"]["submissions"]
    assert mock["status"] == "expired"
    assert grader.graded == ["BUGGY v1", "GOOD v2"]
    assert [(s["status"], s["at_deadline"]) for s in subs] == [("fail", False), ("pass", True)]
    assert "Time is up" in out


def test_time_running_out_at_the_abandon_question_still_grades_the_file(tmp_path: Path, bank: Path) -> None:
    work = tmp_path / "work"
    grader = StubGrader()
    steps = [RIGHT, RIGHT, write_into(work / "attention.py", "GOOD v1", then=INTERRUPT), (45 * 60, "")]
    code, store, out, reader = sit(tmp_path, bank, steps, grade=grader, interactive=True)
    mock = last_report(store)
    assert "abandon this mock?" in reader.prompts[-1]
    assert code == 0 and mock["status"] == "expired" and grader.graded == ["GOOD v1"]
    assert [(s["status"], s["at_deadline"]) for s in mock["report"]["coding"]["submissions"]] == [("pass", True)]


def test_countdown_in_every_prompt_is_computed_from_the_clock(tmp_path: Path, bank: Path) -> None:
    code, store, out, reader = sit(tmp_path, bank, [(90, RIGHT), (30, RIGHT), "done"], minutes=10)
    assert "[10:00 left]" in out and "[8:30 left]" in out and "[8:00 left]" in out
    assert any("over budget" in p for p in reader.prompts) is False
    assert "budget" in reader.prompts[0]


# -- interruption ------------------------------------------------------------


def test_ctrl_c_without_terminal_abandons_and_saves(tmp_path: Path, bank: Path) -> None:
    code, store, out, _ = sit(tmp_path, bank, [RIGHT, INTERRUPT])
    mock = last_report(store)
    assert code == EXIT_ABANDONED and mock["status"] == "abandoned"
    assert [q["outcome"] for q in mock["report"]["concept"]["questions"]] == ["right", "missed"]
    assert mock["ended_at"] and "abandoned" in out


def test_ctrl_c_on_terminal_asks_and_can_continue(tmp_path: Path, bank: Path) -> None:
    steps = [INTERRUPT, "", RIGHT, RIGHT, INTERRUPT, "y"]
    code, store, out, reader = sit(tmp_path, bank, steps, interactive=True)
    mock = last_report(store)
    assert "abandon this mock?" in reader.prompts[1]
    assert [q["outcome"] for q in mock["report"]["concept"]["questions"]] == ["right", "right"]
    assert code == EXIT_ABANDONED and mock["status"] == "abandoned"
    assert mock["report"]["coding"]["reached"] is True


# -- files -------------------------------------------------------------------


def test_existing_file_is_never_overwritten(tmp_path: Path, bank: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "attention.py").write_text("my own work\n")
    code, store, out, _ = sit(tmp_path, bank, [RIGHT, RIGHT, "done"])
    assert (work / "attention.py").read_text() == "my own work\n"
    fresh = list(work.glob("drill-mock-*/attention.py"))
    assert len(fresh) == 1 and "raise NotImplementedError" in fresh[0].read_text()
    assert last_report(store)["report"]["coding"]["file"] == str(fresh[0])


def test_file_deleted_mid_round_is_a_clear_error_and_the_mock_is_saved(tmp_path: Path, bank: Path) -> None:
    from drill.errors import UserError

    work = tmp_path / "work"
    with pytest.raises(UserError, match="deleted during the coding round"):
        sit(tmp_path, bank, [RIGHT, RIGHT, lambda: (os.remove(work / "attention.py"), "submit")[1]])
    with Store(tmp_path / "progress.db") as store:
        mock = last_report(store)
    assert mock["status"] == "abandoned" and "deleted" in mock["report"]["error"]
    assert [q["outcome"] for q in mock["report"]["concept"]["questions"]] == ["right", "right"]


def test_a_refused_final_save_still_shows_the_card_and_keeps_the_checkpoint(tmp_path: Path, bank: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from drill.store import StoreUnavailable

    def refuse(*args: Any) -> None:
        raise StoreUnavailable("the disk is full: nothing was saved by this step", "progress.db")

    monkeypatch.setattr(Store, "finish_mock", refuse)
    clock = FakeClock()
    console = Console(record=True, width=100, force_terminal=False)
    with Store(tmp_path / "progress.db") as store:
        options = MockOptions(minutes=45, questions=2, seed=3, exercise="attention", folder=tmp_path / "work",
                              bank=bank)
        with pytest.raises(StoreUnavailable, match="disk is full"):
            run_mock(options, console=console, read=ScriptedReader(console, clock, [RIGHT, RIGHT, "done"]),
                     clock=clock, store=store, grade=StubGrader(), interactive=False, fuzz=False)
        (mock,) = store.mocks()
    assert "Mock #1 report — completed" in console.export_text()
    checkpoint = json.loads(mock["report_json"])  # what history falls back on
    assert mock["status"] == "running"
    assert [q["outcome"] for q in checkpoint["concept"]["questions"]] == ["right", "right"]
    assert checkpoint["owner"]["pid"] == os.getpid() and checkpoint["coding"]["reached"] is True
    assert checkpoint["coding"]["untouched"] is True and checkpoint["coding"]["submissions"] == []


# -- CLI ---------------------------------------------------------------------


def _cli(*args: str, input: str = "") -> Any:
    return runner.invoke(app, ["mock", *args], input=input)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--topics", "nope"], "unknown topic 'nope'"),
        (["--exercise", "nope"], "unknown exercise 'nope'"),
        (["--minutes", "0"], "--minutes: must be positive"),
        (["--questions", "-1"], "--questions: must be 0 or more"),
    ],
)
def test_bad_options_exit_2_without_starting_a_mock(home: Path, bank: Path, tmp_path: Path, args: list[str],
                                                    message: str) -> None:
    result = _cli("--bank", str(bank), "--dir", str(tmp_path / "w"), *args)
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1
    assert f"{args[0]}: {args[0]}" not in result.output  # the flag is named once
    with Store(home / "progress.db") as store:
        assert store.mocks() == []


def test_help_states_the_miss_rule_and_the_history_statuses() -> None:
    result = runner.invoke(app, ["mock", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert f"on screen for {MIN_SEEN_S:g} s or more when time runs out counts as a miss" in text
    for status in ("completed", "expired", "abandoned", "running", "interrupted"):
        assert status in text


def test_unwritable_folder_exits_2(home: Path, bank: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = _cli("--bank", str(bank), "--dir", str(blocker / "sub"), "--exercise", "attention")
    assert result.exit_code == 2 and "cannot write here" in result.output


def test_a_locked_store_is_refused_before_the_first_question(home: Path, bank: Path, tmp_path: Path) -> None:
    import sqlite3

    Store(home / "progress.db").close()
    holder = sqlite3.connect(home / "progress.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        started = time.monotonic()
        result = _cli("--bank", str(bank), "--dir", str(tmp_path / "w"), "--exercise", "attention", input=RIGHT + "\n")
        waited = time.monotonic() - started
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert result.exit_code == 2, result.output
    assert "Question" not in result.output and "Mock interview #" not in result.output
    assert waited < 8  # refused at once, not after the 10 s busy timeout of a write
    with Store(home / "progress.db") as store:
        assert store.mocks() == []


def test_history_lists_scores_and_trend(home: Path, bank: Path, tmp_path: Path) -> None:
    empty = _cli("--history")
    assert empty.exit_code == 0 and "No mocks yet" in empty.output
    # Two piped mocks: first all wrong, then all right; the coding file is left untouched.
    for answers in ("a\na\ndone\n", "a,b\na,b\ndone\n"):
        result = _cli("--bank", str(bank), "--dir", str(tmp_path / "w"), "--exercise", "attention",
                      "--questions", "2", "--seed", "1", input=answers)
        assert result.exit_code == 0, result.output
    result = _cli("--history")
    assert result.exit_code == 0
    lines = [line for line in result.output.splitlines() if line[:1].isdigit()]
    assert len(lines) == 2
    assert "0%" in lines[0] and "100%" in lines[1] and "▲ +40" in lines[1]
    assert "untouched" in lines[1]


@pytest.mark.slow
def test_cli_pipe_end_to_end_with_real_grader(home: Path, bank: Path, tmp_path: Path) -> None:
    """The installed command over a pipe: answers, then the solution appears, then submit."""
    work = tmp_path / "work"
    proc = subprocess.Popen(
        [sys.executable, "-m", "drill.cli", "mock", "--minutes", "5", "--questions", "2", "--bank", str(bank),
         "--dir", str(work), "--exercise", "attention", "--seed", "5"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "COLUMNS": "100"},
    )
    assert proc.stdin and proc.stdout
    seen = bytearray()

    def pump() -> None:
        while chunk := proc.stdout.read1(4096):  # type: ignore[union-attr]
            seen.extend(chunk)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    proc.stdin.write(b"a,b\na,b\n")
    proc.stdin.flush()
    deadline = time.monotonic() + 60
    while b"Enter = grade" not in seen and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (work / "attention.py").is_file(), seen.decode()
    shutil.copy(GOOD_ATTENTION, work / "attention.py")
    proc.stdin.write(b"submit\n")
    proc.stdin.close()
    assert proc.wait(timeout=120) == 0
    reader.join(5)
    out = seen.decode()
    assert "✓ pass" in out and "score 100/100" in out, out
    with Store(home / "progress.db") as store:
        assert store.mocks()[0]["status"] == "completed"
        assert [a.status for a in store.attempts()] == ["pass"]



def test_solution_is_copied_in_at_the_first_enter_and_edits_after_it_are_graded(tmp_path: Path, bank: Path) -> None:
    """--solution through the API: the first Enter grades the solution's text, a later Enter the file as edited."""
    work = tmp_path / "work"
    solution = tmp_path / "mine.py"
    solution.write_text("BUGGY from --solution")
    grader = StubGrader()
    steps = [RIGHT, RIGHT, "", write_into(work / "attention.py", "GOOD after an edit")]
    code, store, out, _ = sit(tmp_path, bank, steps, grade=grader, solution=solution)
    assert code == 0, out
    assert grader.graded == ["BUGGY from --solution", "GOOD after an edit"]
    assert f"copied {solution} into attention.py (--solution)" in " ".join(out.split())
    assert [a.status for a in store.attempts()] == ["fail", "pass"]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: None, "no such file"),
        (lambda p: p.mkdir(), "not a regular file"),
        (lambda p: p.write_bytes(b"def f():\n    return '\xff'\n"), "not UTF-8 text (byte 21)"),
    ],
)
def test_a_bad_solution_file_exits_2_before_a_mock_starts(home: Path, bank: Path, tmp_path: Path, make: Any,
                                                         message: str) -> None:
    solution = tmp_path / "mine.py"
    make(solution)
    result = _cli("--bank", str(bank), "--dir", str(tmp_path / "w"), "--exercise", "attention",
                  "--solution", str(solution), input="a,b\n")
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1
    assert message in result.output and "mine.py" in result.output
    assert not (tmp_path / "w").exists()
    with Store(home / "progress.db") as store:
        assert store.mocks() == []


@pytest.mark.slow
def test_a_whole_mock_runs_from_a_plain_pipe_with_solution(home: Path, bank: Path, tmp_path: Path) -> None:
    """A script drives a mock with one write to a pipe that then closes: answers, Enter, done. No FIFO, no timing."""
    work = tmp_path / "work"
    proc = subprocess.run(
        [sys.executable, "-m", "drill.cli", "mock", "--minutes", "5", "--questions", "2", "--bank", str(bank),
         "--dir", str(work), "--exercise", "attention", "--seed", "5", "--solution", str(GOOD_ATTENTION)],
        input=b"a,b\na,b\n\n", capture_output=True, env={**os.environ, "COLUMNS": "100"}, timeout=180,
    )
    out = proc.stdout.decode() + proc.stderr.decode()
    assert proc.returncode == 0, out
    assert "✓ pass" in out and "score 100/100" in out, out
    assert (work / "attention.py").read_bytes() == GOOD_ATTENTION.read_bytes()
    with Store(home / "progress.db") as store:
        assert store.mocks()[0]["status"] == "completed"
        assert [a.status for a in store.attempts()] == ["pass"]


# -- the deadline reader -------------------------------------------------------


def test_stream_reader_reads_a_pipe_and_stops_at_the_deadline() -> None:
    read_fd, write_fd = os.pipe()
    console = Console(record=True, width=80)
    with os.fdopen(read_fd) as stream:
        reader = stream_reader(console, stream, tick=0.05)
        os.write(write_fd, b"first answer\nsecond")
        countdown = Countdown(SystemClock(), 30)
        assert reader("q1 >", countdown) == "first answer"
        short = Countdown(SystemClock(), 0.3)
        began = time.monotonic()
        with pytest.raises(TimeUp):
            reader("q2 >", short)  # "second" has no newline yet: still typing when time runs out
        assert 0.25 <= time.monotonic() - began < 3.0
        os.close(write_fd)
        assert reader("q3 >", countdown) == "second"
        with pytest.raises(EndOfInput):
            reader("q4 >", countdown)
    assert "left] q1 >" in console.export_text()


# -- planning ------------------------------------------------------------------


def test_questions_lean_to_weak_topics_and_mix_kinds() -> None:
    import random

    from drill.mock.plan import pick_questions, topic_weakness
    from drill.quiz.loader import load_bank
    from drill.store import Review

    bank = load_bank(ROOT / "tests" / "fixtures" / "questions" / "good")
    weak = next(q.topic for q in bank.questions)
    reviews = [Review(q.id, "2025-01-01T00:00:00+00:00", 1 if q.topic == weak else 4, None, None, q.topic, "quiz")
               for q in bank.questions]
    assert topic_weakness(reviews)[weak] > 0.5 > min(topic_weakness(reviews).values())
    draws = [q for seed in range(200) for q in pick_questions(list(bank.questions), reviews, 1, random.Random(seed))]
    share = sum(q.topic == weak for q in draws) / len(draws)
    unweighted = sum(q.topic == weak for q in bank.questions) / len(bank.questions)
    assert share > unweighted + 0.1
    three = pick_questions(list(bank.questions), [], 3, random.Random(0))
    assert len({q.kind for q in three}) == 3 and len({q.id for q in three}) == 3


def test_cram_answers_do_not_make_a_topic_weak_in_the_mock(tmp_path: Path, bank: Path) -> None:
    """Weakest topics must rest on the same evidence as `drill stats`: scheduled answers only."""
    store = Store(tmp_path / "progress.db")
    for i in range(6):  # a burst of cram misses on alpha, scheduled misses on beta
        store.record_review(f"alpha-{i % 2}", 1, topic="alpha", source="cram")
        store.record_review(f"beta-{i % 2}", 1, topic="beta", source="quiz", card_json="{}",
                            due="2099-01-01T00:00:00+00:00")
    store.close()
    code, store, out, _ = sit(tmp_path, bank, ["done"], questions=0)  # history alone decides
    weak = last_report(store)["report"]["history_weak_topics"]
    assert "beta" in weak and "alpha" not in weak, (weak, out)


def test_report_table_stays_readable_at_80_columns(home: Path, bank: Path, tmp_path: Path) -> None:
    from drill.mock.report import render_report

    code, store, _, _ = sit(tmp_path, bank, [None])  # end of input: every question unanswered
    report = last_report(store)["report"]
    long_id = "moe-expert-parallel-communication-and-overlap"
    report["concept"]["questions"][0]["id"] = long_id
    for width in (80, 64):
        console = Console(record=True, width=width, force_terminal=False)
        render_report(console, report)
        text = console.export_text()
        rows = [line for line in text.splitlines() if "✗ not answered" in line]
        assert len(rows) == len(report["concept"]["questions"]), text  # the result column is not cut
        assert [row.split()[0] for row in rows] == [str(i + 1) for i in range(len(rows))], text  # nor the number
        assert "…" not in text and long_id[:12] in text, text  # the id is folded, not cut
        assert width < 80 or long_id[-12:] in text, text


# -- counting submissions ------------------------------------------------------------
# A submission is a version of the file that was graded: pressing Enter on the
# untouched starter, or again on a file unchanged since its last grade, grades
# nothing and adds no row; at 0:00 (or on `done`) the file is graded once more
# only if it changed since its last grade.


@pytest.mark.parametrize(
    ("coding_steps", "expected", "graded", "said"),
    [
        # the untouched starter, submitted, then done: nothing was ever graded
        (["", "done"], [], [], "the file is still the untouched starter"),
        # the untouched starter, submitted twice, then the clock ran out
        (["", "", (45 * 60, "")], [], [], "still the untouched starter: nothing to grade"),
        # nothing typed at all until 0:00
        ([(45 * 60, "")], [], [], "still the untouched starter: nothing to grade"),
        # a file submitted, the same file submitted again, then 0:00: one grade, reused
        (["BUGGY v1", "", (45 * 60, "")], [("fail", False)], ["BUGGY v1"], "already graded (#1)"),
        # a file submitted, then done without a change: no second grade
        (["BUGGY v1", "done"], [("fail", False)], ["BUGGY v1"], "1 submission"),
        # a file submitted, another version saved but not submitted, then 0:00: graded once more
        (["BUGGY v1", "BUGGY v2 saved", (45 * 60, "")], [("fail", False), ("fail", True)],
         ["BUGGY v1", "BUGGY v2 saved"], "2 submissions"),
    ],
)
def test_submission_count_is_what_was_submitted_plus_one_final_grade_of_a_changed_file(
        tmp_path: Path, bank: Path, coding_steps: list, expected: list, graded: list, said: str) -> None:
    work = tmp_path / "work"
    steps: list = [RIGHT, RIGHT]
    for step in coding_steps:
        if isinstance(step, str) and step.startswith("BUGGY"):
            # write that text; submit it unless it is only "saved"
            step = write_into(work / "attention.py", step, then="hmm" if step.endswith("saved") else "submit")
        steps.append(step)
    grader = StubGrader()
    code, store, out, _ = sit(tmp_path, bank, steps, grade=grader)
    report = last_report(store)["report"]
    subs = report["coding"]["submissions"]
    assert [(s["status"], s["at_deadline"]) for s in subs] == expected, out
    assert grader.graded == graded
    assert [a.status for a in store.attempts()] == [s for s, _ in expected]
    assert all(s["at_s"] <= 45 * 60 for s in subs)  # a grade at time-up is stamped 45:00, not later
    assert said in " ".join(out.split())
    n = len(expected)
    assert ("no submissions" if n == 0 else f"{n} submission{'s' * (n != 1)}") in out
    assert report["coding"]["untouched"] is (not graded)


def test_an_unchanged_resubmission_says_so_and_keeps_the_verdict(tmp_path: Path, bank: Path) -> None:
    work = tmp_path / "work"
    grader = StubGrader()
    steps = [RIGHT, RIGHT, write_into(work / "attention.py", "BUGGY"), "", "done"]
    code, store, out, _ = sit(tmp_path, bank, steps, grade=grader)
    text = " ".join(out.split())
    assert grader.graded == ["BUGGY"]
    assert "unchanged since submission #1 (fail 3/12)" in text
    assert len(last_report(store)["report"]["coding"]["submissions"]) == 1


# -- end of input ---------------------------------------------------------------------
# Closing the input (Ctrl-D, a pipe that ends) before the time is up and before the
# rounds are done is walking away: the mock is abandoned, exactly like Ctrl-C on a pipe.


@pytest.mark.parametrize(
    ("steps", "outcomes", "reached", "graded"),
    [
        ([None], ["missed", "missed"], False, []),  # nothing answered
        ([RIGHT, None], ["right", "missed"], False, []),  # mid concept round
        ([RIGHT, RIGHT, None], ["right", "right"], True, []),  # at the coding prompt, file untouched
        ([RIGHT, RIGHT, "BUGGY", None], ["right", "right"], True, ["BUGGY"]),  # after a failing submission
        # a changed file not submitted is not graded on the way out, as with Ctrl-C
        ([RIGHT, RIGHT, "BUGGY", "BUGGY v2 saved", None], ["right", "right"], True, ["BUGGY"]),
    ],
)
def test_end_of_input_before_the_end_abandons_the_mock(tmp_path: Path, bank: Path, steps: list, outcomes: list,
                                                       reached: bool, graded: list) -> None:
    work = tmp_path / "work"
    script = [write_into(work / "attention.py", s, then="hmm" if s.endswith("saved") else "submit")
              if isinstance(s, str) and s.startswith("BUGGY") else s for s in steps]
    grader = StubGrader()
    code, store, out, _ = sit(tmp_path, bank, script, grade=grader)
    mock = last_report(store)
    assert code == EXIT_ABANDONED and mock["status"] == "abandoned", out
    assert mock["report"]["status"] == "abandoned" and mock["ended_at"]
    assert [q["outcome"] for q in mock["report"]["concept"]["questions"]] == outcomes
    assert mock["report"]["coding"]["reached"] is reached and grader.graded == graded
    assert "end of input" in out and "Mock #1 report — abandoned" in out


@pytest.mark.parametrize(
    ("steps", "status"),
    [
        ([RIGHT, RIGHT, "GOOD"], "completed"),  # the pass ends the coding round: no read is left to hit EOF
        ([RIGHT, RIGHT, "done"], "completed"),
        ([RIGHT, (45 * 60, RIGHT)], "expired"),  # time ran out first
    ],
)
def test_a_mock_that_finished_is_not_abandoned_by_a_closed_input(tmp_path: Path, bank: Path, steps: list,
                                                                 status: str) -> None:
    work = tmp_path / "work"
    script = [write_into(work / "attention.py", s) if s == "GOOD" else s for s in steps] + [None]
    code, store, out, _ = sit(tmp_path, bank, script)
    assert last_report(store)["status"] == status and code == 0, out


def test_end_of_input_on_a_real_pipe_is_abandoned_and_out_of_the_trend(home: Path, bank: Path, tmp_path: Path) -> None:
    args = ["--bank", str(bank), "--dir", str(tmp_path / "w"), "--exercise", "attention", "--questions", "2",
            "--seed", "1"]
    assert _cli(*args, input="a\na\ndone\n").exit_code == 0  # all wrong: score 0
    walked_away = subprocess.run([sys.executable, "-m", "drill.cli", "mock", "--minutes", "3", *args],
                                 input=b"a,b\n", capture_output=True, timeout=60, env={**os.environ, "COLUMNS": "120"})
    assert walked_away.returncode == EXIT_ABANDONED, walked_away.stdout.decode()
    assert "abandoned" in walked_away.stdout.decode()
    assert _cli(*args, input="a,b\na,b\ndone\n").exit_code == 0  # all right: score 40
    result = _cli("--history")
    lines = [line for line in result.output.splitlines() if line[:1].isdigit()]
    assert [line.split()[4] for line in lines] == ["completed", "abandoned", "completed"], result.output
    assert lines[1].split()[-1] != "=" and "▲" not in lines[1]  # no trend on the abandoned one
    assert "▲ +40" in lines[2]  # compared with mock 1, not with the abandoned mock 2
    assert "end of input" in result.output  # the legend says what abandoned covers


# -- the time split, the live clock, the exercise's reason ---------------------------


@pytest.mark.parametrize("minutes", [1, 2, 2.5, 3, 5, 10, 20, 45, 90])
@pytest.mark.parametrize("asked", [1, 3, 6, 12])
def test_the_concept_round_always_leaves_time_to_grade(minutes: float, asked: int) -> None:
    """Budgets fit in the concept round's share and never eat the coding round's minimum."""
    from drill.mock import plan
    from drill.quiz.loader import load_bank

    questions = list(load_bank(None).questions)[:asked]
    kept, budgets = plan.fit_questions(questions, minutes)
    assert kept == questions[:len(kept)] and len(budgets) == len(kept)
    assert all(b >= plan.MIN_BUDGET_S for b in budgets)
    assert sum(budgets) <= plan.concept_seconds(minutes) + 1e-9
    assert minutes * 60 - sum(budgets) >= min(plan.CODING_MIN_S, minutes * 60)
    if minutes >= 45 and asked <= 6:  # a long mock asks everything at each kind's usual time
        assert kept == questions and budgets == [kinds.get(q.kind).budget_s for q in questions]


def test_a_short_mock_says_what_did_not_fit_and_why(tmp_path: Path, bank: Path) -> None:
    from drill.mock.plan import CODING_MIN_S, time_rule

    code, store, out, _ = sit(tmp_path, bank, [RIGHT, RIGHT, RIGHT, "done"], minutes=3, questions=4)
    report = last_report(store)["report"]
    budgets = [q["budget_s"] for q in report["concept"]["questions"]]
    assert len(budgets) == 3 and sum(budgets) <= 3 * 60 - CODING_MIN_S
    text = " ".join(out.split())
    assert "Round 1: 3 concept questions" in text and "(1 more did not fit in a 3-minute mock)" in text
    assert time_rule() in text
    code, store, out, _ = sit(tmp_path, bank, ["done"], minutes=2, questions=4)
    assert "No concept round: a 2-minute mock keeps its time for coding." in out and "Round 1: coding" in out
    help_text = " ".join(runner.invoke(app, ["mock", "--help"], env={"COLUMNS": "80"}).output.split())
    assert time_rule() in help_text


def test_with_a_live_status_line_it_is_the_only_clock_on_screen(tmp_path: Path, bank: Path) -> None:
    """On a terminal the status line ticks; a printed '[3:00 left]' or '(0:30 of budget)' would go stale."""
    import io

    from drill.mock.live import LiveStatus

    clock = FakeClock()
    console = Console(record=True, width=100, force_terminal=False)
    live = LiveStatus(io.StringIO())
    seen: list[str] = []

    def answer_after_14_s() -> str:
        clock.advance(14)
        seen.append(live.status_text())
        return RIGHT

    reader = ScriptedReader(console, clock, [answer_after_14_s, RIGHT, "done"], clock_in_prompt=False)
    options = MockOptions(minutes=3, questions=2, seed=3, exercise="attention", folder=tmp_path / "work", bank=bank)
    run_mock(options, console=console, read=reader, clock=clock, store=Store(tmp_path / "progress.db"),
             grade=StubGrader(), interactive=False, fuzz=False, live=live)
    out = console.export_text()
    assert "left]" not in out and "left in the mock" not in out, out
    assert not any("budget" in p for p in reader.prompts), reader.prompts
    with Store(tmp_path / "progress.db") as store:
        budget = last_report(store)["report"]["concept"]["questions"][0]["budget_s"]
    assert seen == [f" ⏱  2:46 left · drill mock #1 · round 1: question 1/2 · 0:{budget - 14:02.0f} of budget"]
    assert live.countdown is None  # stopped: the terminal's scroll region given back


def _passed(store: Store, exercise: str, when: str) -> None:
    from drill.store import Attempt

    store.record_attempt(Attempt(exercise=exercise, attempted_at=when, status="pass", diagnosis=None, seed=1,
                                 tests_passed=5, tests_total=5, elapsed_ms=10, file=f"{exercise}.py", mock_id=None))


def test_with_every_exercise_passed_the_mock_says_which_and_why(tmp_path: Path, bank: Path) -> None:
    from drill.mock.plan import gradable_exercises

    names = gradable_exercises()
    oldest = names[len(names) // 2]
    with Store(tmp_path / "progress.db") as store:
        for name in names:
            _passed(store, name, "2025-03-01T12:00:00+00:00" if name != oldest else "2024-12-30T12:00:00+00:00")
        _passed(store, names[0], "2024-01-01T12:00:00+00:00")  # an old pass, then a newer one: the newer counts
    code, store, out, _ = sit(tmp_path, bank, ["done"], questions=0, exercise=None)
    assert last_report(store)["exercise"] == oldest
    text = " ".join(out.split())
    assert (f"implement `{oldest}` (every exercise is passed: practising the one you passed longest ago, "
            "on 2024-12-30)") in text


def test_an_exercise_not_passed_yet_is_said_so(tmp_path: Path, bank: Path) -> None:
    code, store, out, _ = sit(tmp_path, bank, ["done"], questions=0, exercise=None)
    exercise = last_report(store)["exercise"]
    assert f"implement `{exercise}` (not passed yet)" in out
    code, store, out, _ = sit(tmp_path, bank, ["done"], questions=0, exercise="rope")
    assert "implement `rope` in" in out  # named with --exercise: nothing to explain
