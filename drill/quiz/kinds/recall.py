"""recall: the learner types an answer, sees the model answer and key points, and rates themselves.

Key points may carry patterns that pre-tick them on the typed answer and so
suggest a rating. A pattern that ticks on an answer that says nothing is a
grading hole, so `drill validate` tries every key point on a fixed set of
nonsense answers (and on the question's own prompt, echoed back) and refuses
any point that one of them ticks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from drill.quiz import patterns
from drill.quiz.fields import Fields
from drill.quiz.kinds.base import Add, Asked, Asker, Kind
from drill.quiz.schedule import AGAIN, EASY, GOOD, HARD, RATING_NAMES
from drill.quiz.schema import Question
from drill.quiz.text import reflow

# Answers that know nothing: a key point ticked by one of them ticks for anyone.
# Plain filler words (each, every, all, only, and), bare numbers, the most generic
# ML words, and (added per question) the question's own prompt typed back.
NONSENSE_ANSWERS: tuple[str, ...] = (
    "yes",
    "no",
    "I don't know",
    "the thing",
    "it depends",
    "It is all about how each and every part works; only then is it better overall.",
    "About 10, 100 or 1000 times, maybe 2 or 3 on average.",
    "The model uses attention over the tokens of the input in every layer and learns better weights in training.",
)


@dataclass(frozen=True)
class KeyPoint:
    """One point a recall answer should make; `patterns` pre-tick it."""

    text: str
    patterns: tuple[str, ...] = ()
    line: int = field(default=0, compare=False)

    def matches(self, answer: str) -> bool:
        """Pre-tick this point when EVERY pattern matches the typed answer (case-insensitive, linear time)."""
        if not self.patterns or not answer.strip():
            return False
        return all(patterns.matches(p, answer) for p in self.patterns)


@dataclass(frozen=True, kw_only=True)
class RecallQuestion(Question):
    """Free recall: the learner compares with the model answer and rates themselves."""

    answer: str
    key_points: tuple[KeyPoint, ...]


def build(fields: Fields, common: dict[str, Any]) -> Question:
    points = []
    for item in fields.items("key_points", lo=2, hi=5):
        sub = fields.sub(item, "key point", fields.line("key_points"))
        if sub is None:
            continue
        sub.check_keys(("text",), ("patterns",))
        points.append(KeyPoint(sub.text("text"), sub.strings("patterns"), sub.data.line))
    return RecallQuestion(answer=fields.text("answer"), key_points=tuple(points), **common)


def ask(session: Asker, question: RecallQuestion) -> Asked:
    session.say(reflow(question.prompt))
    answer = session.answer(question, "your answer (Enter = just thought about it, q quits) >")
    session.console.print()
    session.say("Model answer", "bold green")
    session.say(reflow(question.answer))
    ticks = [point.matches(answer) for point in question.key_points]
    session.say("Key points", "bold")
    session.items([("✓" if ticked else "·", point.text, "green" if ticked else None)
                   for point, ticked in zip(question.key_points, ticks, strict=True)])
    session.show_common_wrong(question)
    session.say(reflow(question.explanation), "dim")
    default = suggest_rating(answer, question)
    names = "  ".join(f"{n} {RATING_NAMES[n]}" for n in (AGAIN, HARD, GOOD, EASY))
    suffix = f" [Enter = {default} {RATING_NAMES[default]}]" if default else ""
    while True:
        text = session.line(f"rate yourself: {names}{suffix} >").strip()
        if not text and default:
            return Asked(default, answer, None)
        if text in ("1", "2", "3", "4"):
            return Asked(int(text), answer, None)
        session.say("type 1, 2, 3 or 4 (or q to quit)", "yellow")


def suggest_rating(answer: str, question: RecallQuestion) -> int | None:
    """Default rating from the share of checkable key points the typed answer hit.

    None when there is nothing to go on (empty answer: the learner only
    thought about it; or no key point has patterns): they must choose.
    """
    checkable = [p for p in question.key_points if p.patterns]
    if not answer.strip() or not checkable:
        return None
    share = sum(p.matches(answer) for p in checkable) / len(checkable)
    if share >= 1.0:
        return GOOD
    return HARD if share >= 0.5 else AGAIN


def check(question: RecallQuestion, add: Add) -> None:
    """Every pattern compiles (RE2) and none matches the empty answer."""
    for point in question.key_points:
        line = point.line or question.line
        for pattern in point.patterns:
            try:
                program = patterns.compiled(pattern)
            except patterns.PatternError as exc:
                add(line, f"invalid pattern {pattern!r} ({exc}); fix it, or quote special characters with \\ "
                          "(patterns are RE2: no lookarounds or backreferences)")
                continue
            if program.search("") is not None:
                add(line, f"pattern {pattern!r} matches an empty answer, so it ticks for anything; make it specific")


def audit(question: RecallQuestion, add: Add) -> None:
    """No nonsense answer (nor the prompt typed back) ticks a key point."""
    for point in question.key_points:
        if not point.patterns or not all(_compiles(p) for p in point.patterns):
            continue  # reported by check
        line = point.line or question.line
        for nonsense in (*NONSENSE_ANSWERS, question.prompt):
            if point.matches(nonsense):
                said = "the question's own prompt typed back" if nonsense == question.prompt else repr(nonsense)
                add(line, f"key point {point.text[:50]!r} is ticked by the nonsense answer {said} "
                          f"(patterns {list(point.patterns)}); make its patterns name what the point says")
                break


def _compiles(pattern: str) -> bool:
    try:
        patterns.compiled(pattern)
        return True
    except patterns.PatternError:
        return False


def card(question: RecallQuestion) -> tuple[str, str]:
    points = "\n".join(f"- {p.text}" for p in question.key_points)
    back = f"{reflow(question.answer)}\n\nKey points:\n{points}\n\n{reflow(question.explanation)}"
    return reflow(question.prompt), back


KIND = Kind(
    name="recall",
    question=RecallQuestion,
    required=("answer", "key_points"),
    optional=("common_wrong",),
    build=build,
    ask=ask,
    card=card,
    check=check,
    audit=audit,
    budget_s=180.0,
    self_rated=True,
    exports=(KeyPoint,),
)
