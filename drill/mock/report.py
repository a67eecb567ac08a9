"""Scoring a mock, its report card, and the history of past mocks.

The report is a plain dict (saved as the mock's report_json) and the card is
rendered from that dict alone, so `drill mock --history` and any later tool
read exactly what the learner saw. Scores are honest rather than generous:
a coding round counts fully only when the hidden tests all pass; a failing
file earns at most half, in proportion to the tests it passes; and the file
that counts is the last one graded, because an interviewer judges the code
you end with (the card says so, and notes an earlier, better submission).

Weak topics come from two sources that the card keeps apart: the questions
this mock asked, and the learner's reviews before it. Merging them made the
card recommend topics the mock never asked.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from drill.mock.clock import duration, mmss
from drill.mock.coding import DEBUG_BUGS_WEIGHT, DEBUG_EXERCISE, CodingRound, coding_credit
from drill.mock.concept import MIN_SEEN_S, ConceptRound
from drill.quiz import kinds
from drill.quiz.schedule import RATING_NAMES
from drill.quiz.stats import WEAKEST_RULE

# 2: weak_topics is this mock's alone, history_weak_topics the reviews before it,
# to_review only questions that were shown, no score for an abandoned mock.
# 3: history_weak_topics ranked as `drill stats` ranks them (drill.quiz.stats.weakest_topics).
REPORT_VERSION = 3
CONCEPT_WEIGHT = 0.4  # of the overall score; the coding round carries the rest
OUTCOME_MARK = {"right": "✓ right", "partial": "~ partial", "wrong": "✗ wrong", "skipped": "– skipped",
                "timeout": "✗ time ran out", "missed": "✗ not answered"}
STATUS_WORDS = {"completed": "completed", "expired": "time ran out", "abandoned": "abandoned",
                "interrupted": "interrupted", "running": "running"}
# Only these have a score and count towards the trend: a mock that was abandoned or
# interrupted is not a result (older reports stored a score for abandoned ones: not shown).
SCORED_STATUSES = ("completed", "expired")


def coding_score(submission: dict[str, Any] | None) -> float:
    """Credit (0..1) of one stored submission; see drill.mock.coding.coding_credit."""
    if not submission:
        return 0.0
    return coding_credit(submission.get("status", ""), submission.get("passed") or 0, submission.get("total") or 0,
                         submission.get("bugs_planted"), submission.get("bugs_left"), submission.get("cache"))


def score_rule(has_concept: bool = True, debug: bool = False) -> str:
    """The scoring rule in one line, as the brief, the card and --help state it."""
    coding = "your last graded file: all tests pass 100%, else ½ × share passed"
    if debug:
        coding = (f"your last graded file: {DEBUG_BUGS_WEIGHT:.0%} × share of planted bugs fixed + "
                  f"{1 - DEBUG_BUGS_WEIGHT:.0%} the KV cache")
    if not has_concept:
        return f"Score = coding only ({coding})"
    return f"Score = {CONCEPT_WEIGHT:.0%} concept + {1 - CONCEPT_WEIGHT:.0%} coding ({coding})"


def build_report(
    *,
    mock_id: int,
    status: str,
    minutes: float,
    elapsed_s: float,
    seed: int | None,
    concept: ConceptRound | None,
    coding: CodingRound | None,
    exercise: str,
    history_weak: list[str],
    error: str | None = None,
) -> dict[str, Any]:
    """Everything the report card shows, as JSON-ready data.

    `history_weak` is drill.quiz.stats.weakest_topics of the reviews before this mock (the
    rule `drill stats` shows); this mock's own weak topics are ranked from its answers here.
    """
    questions = [dict(r.__dict__) for r in concept.results] if concept else []
    submissions = [s.to_dict() for s in coding.submissions] if coding else []
    final = submissions[-1] if submissions else None
    concept_pct = 100.0 * sum(_points(q) for q in questions) / len(questions) if questions else None
    coding_pct = 100.0 * coding_score(final)
    if concept_pct is None:
        overall = coding_pct
    else:
        overall = CONCEPT_WEIGHT * concept_pct + (1 - CONCEPT_WEIGHT) * coding_pct
    weak = _mock_weak_topics(questions)
    # A question never shown is nothing to review; one shown and not answered right is.
    to_review = [q["id"] for q in questions if q["outcome"] != "right" and q["seconds"] is not None]
    return {
        "version": REPORT_VERSION,
        "mock_id": mock_id,
        "status": status,
        "error": error,
        "minutes": minutes,
        "elapsed_s": round(elapsed_s, 1),
        "seed": seed,
        "concept": {"score_pct": _round(concept_pct), "questions": questions},
        "coding": {
            "exercise": exercise,
            "file": str(coding.coding.path) if coding and coding.reached else None,
            "reached": bool(coding and coding.reached),
            "untouched": bool(coding and coding.untouched()),  # the file still holds the starter
            "score_pct": _round(coding_pct),
            "submissions": submissions,
        },
        "score": _round(overall) if status in SCORED_STATUSES else None,
        "weak_topics": weak,  # from this mock's answers only
        "history_weak_topics": list(history_weak),  # from the reviews before this mock
        "to_review": to_review,
        # what `drill quiz --topic` is suggested for: exactly one of the two lists above
        "review_topics": weak or history_weak,
        "review_from": "mock" if weak else "history" if history_weak else None,
    }


def _points(question: dict[str, Any]) -> float:
    return {"right": 1.0, "partial": 0.5}.get(question["outcome"], 0.0)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _mock_weak_topics(questions: list[dict[str, Any]]) -> list[str]:
    """Topics this mock's answers went wrong on (wrong, partial, skipped, time ran out),
    the largest share of lost points first. A question not answered (never reached, or
    abandoned on screen) says nothing about its topic."""
    lost: dict[str, list[float]] = defaultdict(list)
    for q in questions:
        if q["outcome"] != "missed":
            lost[q["topic"]].append(1.0 - _points(q))
    shares = {topic: sum(vals) / len(vals) for topic, vals in lost.items()}
    ordered = sorted(shares.items(), key=lambda item: (-item[1], item[0]))  # ties: alphabetical, for stable reports
    return [topic for topic, share in ordered[:3] if share > 0.0]


# -- rendering -------------------------------------------------------------


def render_report(console: Console, report: dict[str, Any]) -> None:
    """The report card: per round, per question, the code verdict, what to study next."""
    console.print()
    status = STATUS_WORDS.get(report["status"], report["status"])
    score = "no score" if report.get("score") is None else f"score {report['score']:.0f}/100"
    console.print(Text(f"Mock #{report['mock_id']} report — {status} after {duration(report['elapsed_s'])} "
                       f"of {mmss(report['minutes'] * 60)} — {score}", style="bold reverse"))
    if report.get("error"):
        console.print(Text(f"stopped by an error: {report['error']}", style="red"))
    questions = report["concept"]["questions"]
    if report["status"] in SCORED_STATUSES:
        console.print(Text(score_rule(bool(questions), report["coding"]["exercise"] == DEBUG_EXERCISE), style="dim"))
    else:
        console.print(Text(f"{status}: no score, and not in the trend of `drill mock --history`", style="dim"))
    if questions:
        console.print()
        score = _concept_cell(report["status"], report)
        if report["status"] not in SCORED_STATUSES:  # unreached questions say nothing about you
            score = "nothing answered" if score == "—" else f"{score} answered"
        console.print(Text(f"Concept round: {score}", style="bold"))
        console.print(_concept_table(console, questions))
        outcomes = {q["outcome"] for q in questions}
        if "timeout" in outcomes:
            console.print(Text(f"  time ran out = on screen {MIN_SEEN_S:g} s or more when the clock stopped: "
                               "a miss (Again) in your reviews", style="dim"))
        if "missed" in outcomes:
            console.print(Text("  not answered = never reached, or on screen too briefly: not rated", style="dim"))
    _render_coding(console, report["coding"])
    console.print()
    console.print(Text("What to review next", style="bold"))
    if report["to_review"]:
        console.print(Text("  questions: " + ", ".join(report["to_review"])))
    _render_topics(console, report)
    coding = report["coding"]
    final = coding["submissions"][-1] if coding["submissions"] else None
    if coding["reached"] and (final is None or final["status"] != "pass"):
        console.print(Text(f"  drill check {coding['file']}   (keep going until it passes)", style="cyan"))
    if not report["to_review"] and final is not None and final["status"] == "pass":
        console.print(Text("  nothing missed — try a longer mock or another exercise (--exercise)", style="green"))


CONCEPT_COLUMNS = ("#", "question", "topic · kind", "result", "time/budget")


def _concept_table(console: Console, questions: list[dict[str, Any]]) -> Table:
    """The concept round's table, in the widest layout that fits without breaking an identifier.

    One line per question where it fits; else each question's topic and kind go under its id
    (two lines a row, so an id of 30+ characters still fits at 80 columns); only a screen
    narrower than an id plus the result columns folds the id, the one cell that may break.
    """
    rows = [(str(number), *_concept_cells(q)) for number, q in enumerate(questions, 1)]

    def build(stacked: bool, fold: bool = False) -> Table:
        table = Table(box=None, padding=(0, 1), show_edge=False)
        for column in CONCEPT_COLUMNS:
            if stacked and column == "topic · kind":
                continue
            title = "question / topic · kind" if stacked and column == "question" else column
            if fold and column == "question":  # folded at any character (ids have no spaces); the rest stay whole
                table.add_column(title, overflow="fold", ratio=1, min_width=12)
            else:
                table.add_column(title, no_wrap=True)
        for number, qid, topic_kind, result, spent in rows:
            if stacked:
                table.add_row(number, Text(f"{qid}\n  {topic_kind}"), result, spent)
            else:
                table.add_row(number, qid, topic_kind, result, spent)
        return table

    unbounded = console.options.update_width(10_000)
    for table in (build(stacked=False), build(stacked=True)):
        if Measurement.get(console, unbounded, table).maximum <= console.width:
            return table
    return build(stacked=True, fold=True)


def _concept_cells(q: dict[str, Any]) -> tuple[str, str, str, Text]:
    result = OUTCOME_MARK.get(q["outcome"], q["outcome"])
    kind = kinds.REGISTRY.get(q["kind"])  # a report may name a kind this drill no longer has
    if q["rating"] is not None and kind is not None and kind.self_rated:
        result += f" ({RATING_NAMES[q['rating']]})"
    spent = "—" if q["seconds"] is None else duration(q["seconds"])
    over = q["seconds"] is not None and q["seconds"] > q["budget_s"]
    time_cell = Text(f"{spent} / {mmss(q['budget_s'])}", style="yellow" if over else "")
    return q["id"], f"{q['topic']} · {q['kind']}", result, time_cell


def _render_topics(console: Console, report: dict[str, Any]) -> None:
    """Each topic list under its source, the quiz command right under the list it covers."""
    def suggest(topics: list[str]) -> None:
        console.print(Text(f"    drill quiz --topic {','.join(topics)}", style="cyan"))

    if report.get("version", 1) < 2:  # older reports merged this mock with the history
        if report.get("weak_topics"):
            console.print(Text("  weakest topics (this mock and your reviews): " + ", ".join(report["weak_topics"])))
        if report.get("review_topics"):
            suggest(report["review_topics"])
        return
    mock_weak, history_weak = report["weak_topics"], report["history_weak_topics"]
    if mock_weak:
        console.print(Text("  missed in this mock: " + ", ".join(mock_weak)))
        suggest(mock_weak)
    if history_weak:
        console.print(Text("  weakest in your reviews before this mock: " + ", ".join(history_weak)))
        if report["version"] >= 3:
            console.print(Text(f"    weak = {WEAKEST_RULE} (drill stats)", style="dim"))
        if not mock_weak:
            suggest(history_weak)


def _render_coding(console: Console, coding: dict[str, Any]) -> None:
    console.print()
    if not coding["reached"]:
        console.print(Text(f"Coding round ({coding['exercise']}): not reached — 0%", style="bold"))
        return
    subs = coding["submissions"]
    count = f"{len(subs)} submission{'s' * (len(subs) != 1)}" if subs else "no submissions"
    console.print(Text(f"Coding round ({coding['exercise']}): {coding['score_pct']:.0f}% — {count}", style="bold"))
    if not subs:
        # Older reports have no "untouched" key: they recorded the starter as a submission.
        why = "the file is still the untouched starter" if coding.get("untouched") else "nothing graded"
        console.print(Text(f"  {why}", style="red"))
        return
    for n, s in enumerate(subs, 1):
        when = duration(s["at_s"]) + (" (at time-up)" if s["at_deadline"] else "")
        verdict = "not attempted" if s["status"] == "not_attempted" else f"{s['status']} {s['passed']}/{s['total']}"
        counts = "  ← counts (the last graded file)" if n == len(subs) > 1 else ""
        console.print(Text(f"  #{n} at {when}: {verdict}{counts}", style="green" if s["status"] == "pass" else "red"))
    final = subs[-1]
    best_n, best = max(enumerate(subs, 1), key=lambda pair: (coding_score(pair[1]), pair[0]))
    if coding_score(best) > coding_score(final):
        console.print(Text(f"  note: #{best_n} ({best['status']} {best['passed']}/{best['total']}) would have "
                           f"scored {100 * coding_score(best):.0f}% here; the last graded file is the one that counts",
                           style="yellow"))
    if final["diagnosis"]:
        console.print(Text(f"  diagnosis: {final['diagnosis']}", style="bold red"))
        if final["detail"]:
            console.print(Text(f"    {final['detail']}"))
        if final["fix"]:
            console.print(Text(f"    fix: {final['fix']}", style="dim"))
    for note in final["advisories"]:
        console.print(Text(f"  note: {note}", style="yellow"))
    if final.get("bugs_planted") is not None:
        fixed = final["bugs_planted"] - final["bugs_left"]
        where = f" (left: {', '.join(final['left_lines'])})" if final.get("left_lines") else ""
        console.print(Text(f"  planted bugs fixed: {fixed} of {final['bugs_planted']}{where}; KV cache: "
                           f"{final['cache']}; time taken: {duration(final['at_s'])}", style="bold"))


def render_history(console: Console, mocks: list[dict[str, Any]]) -> None:
    """Past mocks, oldest first, with the change in score since the previous finished one."""
    if not mocks:
        console.print(Text("No mocks yet. Sit one with `drill mock` "
                           "(try `--minutes 20 --questions 3` for a short one)."))
        return
    rows: list[tuple[str, ...]] = []
    previous: float | None = None
    scores: list[float] = []
    statuses = set()
    for mock in mocks:
        report = load_report(mock.get("report_json"))
        statuses.add(mock["status"])
        concept = _concept_cell(mock["status"], report)
        coding = report.get("coding", {})
        final = coding.get("submissions", [])[-1:] if coding else []
        verdict = "—"
        if final:  # "not_attempted": how reports before untouched files stopped counting put it
            last = final[0]
            verdict = ("untouched" if last["status"] == "not_attempted"
                       else f"{last['status']} {last['passed']}/{last['total']}")
        elif coding.get("untouched"):
            verdict = "untouched"
        elif coding.get("reached") is False and report:
            verdict = "not reached"
        elif coding.get("reached"):
            verdict = "not graded"
        score = mock.get("score")
        trend = ""
        if mock["status"] not in SCORED_STATUSES:
            score = None  # no result yet or ever: no number that could read as one
        if score is not None:
            if previous is not None:
                delta = score - previous
                trend = "=" if abs(delta) < 0.5 else (f"▲ +{delta:.0f}" if delta > 0 else f"▼ {delta:.0f}")
            previous = score
            scores.append(score)
        rows.append((
            str(mock["id"]), _local_time(mock.get("started_at")), f"{mock.get('minutes') or 0:g}",
            mock["status"], mock.get("exercise") or "—", concept, verdict,
            "—" if score is None else f"{score:.0f}", trend,
        ))
    console.print(_history_table(console, rows))
    for status, note in STATUS_NOTES.items():
        if status in statuses:
            console.print(Text(note, style="dim"))
    if len(scores) >= 2:
        console.print(Text(f"Finished mocks: {len(scores)}; first {scores[0]:.0f}, best {max(scores):.0f}, "
                           f"latest {scores[-1]:.0f}"))


HISTORY_COLUMNS = ("#", "date", "min", "status", "exercise", "concept", "coding", "score", "trend")


def _history_table(console: Console, rows: list[tuple[str, ...]]) -> Table:
    """Two spaces between columns where they fit, else one: at 80 columns a full table
    (an interrupted mock, 'not reached', a '▼ -100' trend) fits only with one, and no
    column of it may be cut (a cut trend reads as a different number)."""
    def build(gap: int) -> Table:
        table = Table(title="Mock interviews", title_justify="left", padding=(0, gap, 0, 0), box=None,
                      pad_edge=False, header_style="bold underline")
        for column in HISTORY_COLUMNS:
            table.add_column(column, justify="right" if column in ("#", "min", "concept", "score") else "left",
                             no_wrap=True)
        for row in rows:
            table.add_row(*row)
        return table

    wide = build(2)
    if Measurement.get(console, console.options.update_width(10_000), wide).maximum <= console.width:
        return wide
    return build(1)


STATUS_NOTES = {
    "abandoned": "abandoned: ended with Ctrl-C, end of input (Ctrl-D) before time was up, or an error; "
                 "its score is not in the trend.",
    "interrupted": "interrupted: drill stopped without finishing (killed, crashed, terminal closed); "
                   "answers and graded files up to then are kept, no score, not in the trend.",
    "running": "running: still going in another terminal.",
}


def _concept_cell(status: str, report: dict[str, Any]) -> str:
    """Concept score for the history table. A mock that did not finish (abandoned,
    interrupted, running) is scored only on the questions it got to ('50% of 2'):
    its unasked questions say nothing."""
    concept = report.get("concept") or {}
    if status in SCORED_STATUSES:
        pct = concept.get("score_pct")
        return "—" if pct is None else f"{pct:.0f}%"
    settled = [q for q in concept.get("questions") or [] if isinstance(q, dict) and q.get("outcome") != "missed"]
    if not settled:
        return "—"
    pct = 100.0 * sum(_points(q) for q in settled) / len(settled)
    return f"{pct:.0f}% of {len(settled)}"


def load_report(text: str | None) -> dict[str, Any]:
    """A stored report_json as a dict; {} for a missing or damaged one (history must still list the mock)."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _local_time(iso: str | None) -> str:
    """'2025-01-06T09:00:00+00:00' -> '01-06 10:00' in the learner's time zone."""
    if not iso:
        return ""
    from drill.quiz.schedule import parse_time

    try:
        return parse_time(iso).astimezone().strftime("%m-%d %H:%M")
    except ValueError:
        return iso[:16]
