"""The mock's report card tells the truth: where its topics come from, what was shown,
which submission counts and why, and how its history reads at 80 columns.

Through the Python API with the fake clock (tests/test_mock.py's `sit`) and a
grader whose verdict is written in the file, plus `drill mock --help` and
`render_history` on a worst-case table.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from drill.cli import app
from drill.mock.reader import INTERRUPT
from drill.mock.report import render_history, score_rule
from drill.store import Store

from mockkit import RIGHT, WRONG, StubResult, last_report, sit, write_into

runner = CliRunner()
TOPICS = ("alpha", "beta", "gamma", "delta")


@pytest.fixture
def bank4(bank: Path) -> Path:
    """The shared two-topic bank plus gamma and delta (same scriptable questions)."""
    template = (bank / "alpha.yaml").read_text().replace("alpha", "{topic}")
    for topic in TOPICS[2:]:
        (bank / f"{topic}.yaml").write_text(template.replace("{topic}", topic))
    return bank


def seed_history(db: Path, misses: dict[str, int]) -> None:
    """Scheduled reviews before the mock: `n` Again answers per topic, one per question."""
    with Store(db) as store:
        for topic, n in misses.items():
            for i in range(n):
                store.record_review(f"{topic}-old-{i}", 1, topic=topic, source="quiz", card_json="{}",
                                    due="2099-01-01T00:00:00+00:00")


class FileVerdict:
    """Grades a file by what it says: 'PASSES 12' -> fail 12/15; 'ALL' -> pass 15/15."""

    total = 15

    def __call__(self, path: Path, exercise: str, seed: int | None) -> StubResult:
        text = path.read_text()
        if "ALL" in text:
            return StubResult("pass", self.total, self.total)
        passed = int(re.search(r"PASSES (\d+)", text).group(1))  # type: ignore[union-attr]
        return StubResult("fail", passed, self.total)


def quiz_lines(out: str) -> list[str]:
    return [line.strip() for line in out.splitlines() if line.strip().startswith("drill quiz")]


# -- 1. weak topics: this mock's and the history's, each labelled; the command covers one list


@pytest.mark.parametrize(
    ("topics", "answers", "questions", "mock_weak", "suggested"),
    [
        # both answers right on a topic the history does not flag: the history is labelled as such
        (("alpha",), [RIGHT, RIGHT], 2, [], "beta,delta,gamma"),
        # coding only: nothing asked, so only the history can speak
        ((), [], 0, [], "beta,delta,gamma"),
        # a miss in this mock: the command is for what this mock missed
        (("alpha",), [WRONG, RIGHT], 2, ["alpha"], "alpha"),
    ],
)
def test_weak_topics_name_their_source_and_the_command_matches_the_list(
        tmp_path: Path, bank4: Path, topics: tuple, answers: list, questions: int, mock_weak: list,
        suggested: str) -> None:
    # three misses each: the minimum `drill stats` ranks a topic on (test_weakest_topics_are_one_rule_...)
    seed_history(tmp_path / "progress.db", {"beta": 3, "gamma": 3, "delta": 3})
    code, store, out, _ = sit(tmp_path, bank4, [*answers, "done"], topics=topics, questions=questions)
    report = last_report(store)["report"]
    assert report["weak_topics"] == mock_weak
    assert report["history_weak_topics"] == ["beta", "delta", "gamma"]
    text = " ".join(out.split())
    assert "weakest in your reviews before this mock: beta, delta, gamma" in text
    assert ("missed in this mock: alpha" in text) is bool(mock_weak)
    assert "Weakest topics:" not in out  # the old unlabelled merge
    assert quiz_lines(out) == [f"drill quiz --topic {suggested}"]  # one command, every listed topic
    assert report["review_topics"] == suggested.split(",")


def test_a_topic_only_in_the_history_is_never_called_missed_in_this_mock(tmp_path: Path, bank4: Path) -> None:
    seed_history(tmp_path / "progress.db", {"beta": 3})
    code, store, out, _ = sit(tmp_path, bank4, [RIGHT, RIGHT, "done"], topics=("alpha",))
    asked = {q["topic"] for q in last_report(store)["report"]["concept"]["questions"]}
    assert asked == {"alpha"}
    assert "missed in this mock" not in out and "beta" in out


# -- 2. an abandoned mock: only questions shown, no score ------------------------------


def test_abandoned_early_reviews_only_the_question_shown_and_has_no_score(tmp_path: Path, bank4: Path) -> None:
    code, store, out, _ = sit(tmp_path, bank4, [(7, INTERRUPT)], questions=4)
    mock = last_report(store)
    report = mock["report"]
    first = report["concept"]["questions"][0]["id"]
    assert mock["status"] == "abandoned" and mock["score"] is None and report["score"] is None
    assert report["to_review"] == [first]
    assert f"questions: {first}" in out and "questions: " + first + "," not in out
    assert "abandoned after 0:07 of 45:00 — no score" in out
    assert "Concept round: nothing answered" in out
    assert quiz_lines(out) == []  # nothing answered, no history: no topic to suggest


def test_history_shows_no_score_for_abandoned_and_interrupted_mocks(tmp_path: Path) -> None:
    """Including an abandoned row saved before abandoned mocks lost their score (stored 0)."""
    report = {"concept": {"score_pct": 0.0, "questions": [{"outcome": "missed", "topic": "t"}]},
              "coding": {"reached": False, "submissions": []}}
    mocks = [_row(1, "completed", 60.0, report), _row(2, "abandoned", 0.0, report),
             _row(3, "interrupted", None, report), _row(4, "completed", 70.0, report)]
    console = Console(record=True, width=100, force_terminal=False)
    render_history(console, mocks)
    rows = {line.split()[0]: line.split() for line in console.export_text().splitlines() if line[:1].isdigit()}
    for mock_id in ("2", "3"):
        assert rows[mock_id][-1] == "—" and rows[mock_id][6] == "—", rows[mock_id]  # score, concept
    assert rows["4"][-2:] == ["▲", "+10"]  # compared with mock 1


def _row(mock_id: int, status: str, score: float | None, report: dict[str, Any], exercise: str = "rope",
         minutes: float = 45) -> dict[str, Any]:
    return {"id": mock_id, "started_at": "2025-01-06T09:00:00+00:00", "status": status, "minutes": minutes,
            "exercise": exercise, "score": score, "report_json": json.dumps(report)}


# -- 3. scoring: the rule is stated; the last graded file counts, and done warns -------------


def test_the_card_brief_and_help_state_the_scoring_rule(tmp_path: Path, bank4: Path) -> None:
    code, store, out, _ = sit(tmp_path, bank4, [RIGHT, RIGHT, "done"])
    assert out.count(score_rule(True)) == 2  # the brief and the card
    code, store, out, _ = sit(tmp_path, bank4, ["done"], questions=0)
    assert out.count(score_rule(False)) == 2
    help_text = " ".join(runner.invoke(app, ["mock", "--help"], env={"COLUMNS": "80"}).output.split())
    assert score_rule(True) in help_text and "The last graded file counts, not the best" in help_text


@pytest.mark.parametrize(
    ("answer", "graded", "counted", "asked"),
    [
        # Enter keeps the worse file: it counts, and the card says an earlier one was better
        ("", [12, 1], 1, 1),
        # submit after restoring the better version: graded again, that one counts
        ("restore+submit", [12, 1, 12], 12, 1),
        # anything else goes back to coding; done again does not ask twice about the same file
        ("wait", [12, 1], 1, 1),
        # time runs out while the question is on screen: the last graded file stands
        ("time-up", [12, 1], 1, 1),
    ],
)
def test_done_on_a_worse_file_asks_and_the_last_graded_file_counts(
        tmp_path: Path, bank4: Path, answer: str, graded: list, counted: int, asked: int) -> None:
    path = tmp_path / "work" / "attention.py"
    replies: dict[str, Any] = {"restore+submit": write_into(path, "PASSES 12", "submit"), "time-up": (45 * 60, "")}
    reply = replies.get(answer, answer)
    steps = [write_into(path, "PASSES 12"), write_into(path, "PASSES 1", then="done"), reply, "done"]
    code, store, out, reader = sit(tmp_path, bank4, steps, grade=FileVerdict(), questions=0)
    report = last_report(store)["report"]
    subs = report["coding"]["submissions"]
    assert [s["passed"] for s in subs] == graded
    assert last_report(store)["status"] == ("expired" if answer == "time-up" else "completed")
    assert report["score"] == pytest.approx(100 * 0.5 * counted / 15, abs=0.1)
    warning = "your submission #1 passed 12/15; this one passes 1/15 — the last one counts."
    assert " ".join(out.split()).count(warning) == asked
    assert sum("Enter = keep it and finish" in p for p in reader.prompts) == asked
    card = out[out.index("Mock #1 report"):]
    assert f"#{len(subs)} at" in card and "← counts (the last graded file)" in card
    assert ("note: #1 (fail 12/15) would have scored 40% here" in card) is (counted == 1)


def test_submitting_a_worse_file_says_the_last_one_counts(tmp_path: Path, bank4: Path) -> None:
    path = tmp_path / "work" / "attention.py"
    steps = [write_into(path, "PASSES 12"), write_into(path, "PASSES 3"), write_into(path, "PASSES 13"), "done"]
    code, store, out, reader = sit(tmp_path, bank4, steps, grade=FileVerdict(), questions=0)
    text = " ".join(out.split())
    assert text.count("lower than submission #1 (fail 12/15): your last graded file is the one that counts") == 1
    assert not any("keep it and finish" in p for p in reader.prompts)  # the last one is the best: no question
    assert last_report(store)["report"]["score"] == pytest.approx(100 * 0.5 * 13 / 15, abs=0.1)


# -- 4. cosmetics: round numbers, the history at 80 columns ---------------------------------


@pytest.mark.parametrize(("questions", "steps", "number"), [(0, ["done"], 1), (2, [RIGHT, RIGHT, "done"], 2)])
def test_rounds_are_numbered_as_they_happen(tmp_path: Path, bank4: Path, questions: int, steps: list,
                                            number: int) -> None:
    code, store, out, _ = sit(tmp_path, bank4, steps, questions=questions)
    assert f"Round {number}: coding" in out and f"Round {number} — coding" in out
    assert ("Round 2" in out) is (number == 2)


@pytest.mark.parametrize("width", [80, 120])
def test_history_fits_without_cutting_a_column(width: int) -> None:
    """Worst case: a three-digit id, a long status, 'x% of N', 'not reached', '▼ -100'."""
    answers = [{"outcome": "right", "topic": "t"}] * 10 + [{"outcome": "wrong", "topic": "t"}] * 2
    partial = {"concept": {"questions": answers},
               "coding": {"reached": False, "submissions": []}}
    done = {"concept": {"score_pct": 100.0, "questions": []},
            "coding": {"reached": True, "submissions": [{"status": "fail", "passed": 12, "total": 15}]}}
    mocks = [_row(100, "completed", 100.0, done, "attention", 1440),
             _row(101, "interrupted", None, partial, "kv_cache"),
             _row(102, "completed", 0.0, done, "attention", 1440)]
    console = Console(record=True, width=width, force_terminal=False)
    render_history(console, mocks)
    text = console.export_text()
    table = text.splitlines()[1:5]
    assert "…" not in text and all(len(line.rstrip()) <= width for line in table), text
    assert table[0].rstrip().endswith("trend") and table[3].rstrip().endswith("▼ -100"), text
    assert "83% of 12" in table[2] and "not reached" in table[2]
    gap = "  " if width >= 100 else " "  # two spaces where they fit, else one
    assert f"#{gap}date" in table[0] and f"#{gap} date" not in table[0]


@pytest.mark.parametrize("width", [80, 100])
def test_question_ids_are_never_broken_at_80_columns(tmp_path: Path, bank4: Path, width: int) -> None:
    """The shipped bank's longest ids, with the longest topic and result cells, stay whole: on one
    line in the table (topic and kind go under the id when the row does not fit) and in the review list."""
    from drill.mock.report import render_report
    from drill.quiz.loader import load_bank

    code, store, _, _ = sit(tmp_path, bank4, [None], questions=4)
    report = last_report(store)["report"]
    longest = sorted((q.id for q in load_bank(None).questions), key=len)[-4:]
    assert len(longest[-1]) >= 30
    for q, qid in zip(report["concept"]["questions"], longest, strict=True):
        q.update(id=qid, topic="normalization", kind="recall", outcome="partial", rating=2, seconds=200.0)
    report["to_review"] = longest
    console = Console(record=True, width=width, force_terminal=False)
    render_report(console, report)
    text = console.export_text()
    table = [line for line in text.splitlines() if "~ partial (Hard)" in line]
    assert len(table) == 4, text
    for number, (line, qid) in enumerate(zip(table, longest, strict=True), 1):
        assert line.split()[:2] == [str(number), qid], text  # whole, next to its number and result
    assert all(len(line.rstrip()) <= width for line in text.splitlines())
    assert "normalization · recall" in text and "…" not in text
    review = " ".join(text[text.index("questions: "):].split(maxsplit=len(longest) + 1)[:len(longest) + 1])
    assert review == "questions: " + ", ".join(longest), text
