"""Round 1 of a mock: concept questions, each with a soft time budget.

Questions are asked by the quiz engine (`drill.quiz.session.Session.ask`: the
same checking, the same FSRS update, recorded with source='mock'); this module
adds the mock's words (skip, q), the budget in the prompt, and the rule for a
question on screen when the clock runs out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from drill.mock.clock import budget_left, mmss
from drill.mock.context import InputClosed, MockContext
from drill.mock.reader import EndOfInput, TimeUp
from drill.quiz import kinds
from drill.quiz.schedule import AGAIN, GOOD, HARD, Scheduler
from drill.quiz.schema import Question
from drill.quiz.session import HINT_WORDS, QUIT_WORDS, Session

SKIP_WORDS = {"skip", "pass"}
# A question on screen this long when the mock's clock runs out, still unanswered, is a
# lapse (rated Again). Less than this is too short even to read it: not rated, only "missed".
MIN_SEEN_S = 5.0


class _Skip(Exception):
    pass


class _EndRound(Exception):
    pass


@dataclass
class QuestionResult:
    id: str
    topic: str
    kind: str
    budget_s: float
    outcome: str = "missed"  # right | partial | wrong | skipped | timeout | missed (not answered, not rated)
    rating: int | None = None
    seconds: float | None = None

    @property
    def points(self) -> float:
        return {"right": 1.0, "partial": 0.5}.get(self.outcome, 0.0)


def _outcome(rating: int, right: bool | None) -> str:
    if right is not None:
        return "right" if right else "wrong"
    return "right" if rating >= GOOD else "partial" if rating == HARD else "wrong"


@dataclass
class ConceptRound:
    ctx: MockContext
    questions: list[Question]
    budgets: list[float]
    scheduler: Scheduler
    results: list[QuestionResult] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.results = [QuestionResult(q.id, q.topic, q.kind, b)
                        for q, b in zip(self.questions, self.budgets, strict=True)]

    def run(self) -> None:
        """Ask every question; TimeUp and Abandoned propagate (results so far are kept)."""
        ctx = self.ctx
        if not self.questions:
            return
        ctx.console.print()
        ctx.say(f"Round 1 — {len(self.questions)} concept question{'s' * (len(self.questions) != 1)}", "bold")
        for index, (question, result) in enumerate(zip(self.questions, self.results, strict=True)):
            began = ctx.clock.monotonic()
            self._header(index, question, result, began)
            typed: list[str] = []  # the learner's lines for this question, hints excluded
            session = Session(
                ctx.store, ctx.console, self._line_reader(began, result.budget_s, typed), self.scheduler, ctx.rng,
                ctx.clock.now, source="mock",
            )
            try:
                while True:
                    try:
                        rating, _answer, right = session.ask(question)
                        result.rating, result.outcome = rating, _outcome(rating, right)
                        break
                    except KeyboardInterrupt:
                        ctx.interrupted()
                        self._header(index, question, result, began)  # continue: the same question again
            except _Skip:
                self._pass_on(session, question, result, began, "(skipped in a mock)")
                ctx.say("skipped — it goes on your review list and comes back soon in drill quiz", "yellow")
            except _EndRound:
                self._pass_on(session, question, result, began, "(skipped in a mock: round ended)")
                ctx.say("concept round ended early: this question counts as skipped, the rest as missed", "yellow")
                return
            except EndOfInput:
                raise InputClosed from None  # the question on screen and the rest count as missed
            except TimeUp:
                self._time_ran_out(session, question, result, began, typed)
                raise
            finally:
                result.seconds = self._on_screen(began)
                ctx.progress()
            if result.seconds > result.budget_s:
                ctx.say(f"took {mmss(result.seconds)} of a {mmss(result.budget_s)} budget", "yellow")

    def _pass_on(self, session: Session, question: Question, result: QuestionResult, began: float, note: str) -> None:
        """The learner saw the question and chose not to answer: a failed recall (Again)."""
        result.outcome, result.rating = "skipped", AGAIN
        session.record_miss(question, note, self.ctx.clock.monotonic() - began)

    def _time_ran_out(self, session: Session, question: Question, result: QuestionResult, began: float,
                      typed: list[str]) -> None:
        """The mock's clock ran out with this question on screen.

        Rule: on screen for MIN_SEEN_S or more and not answered -> a lapse, rated
        Again (like a skip), outcome 'timeout'. Shorter -> 'missed', not rated:
        the learner had no fair chance to read it. A recall question whose answer
        was typed but not yet self-rated is also left unrated: the answer may well
        have been right, and only the learner could say.
        """
        shown = self._on_screen(began)
        answered_recall = kinds.get(question.kind).self_rated and bool(typed)
        if shown < MIN_SEEN_S or answered_recall:
            return
        result.outcome, result.rating = "timeout", AGAIN
        session.record_miss(question, "(time ran out in a mock)", shown)

    def _on_screen(self, began: float) -> float:
        """Seconds since the question appeared, not counting past the mock's deadline."""
        return min(self.ctx.clock.monotonic(), self.ctx.countdown.deadline) - began

    def _header(self, index: int, question: Question, result: QuestionResult, began: float) -> None:
        """The question's title line. Times left are shown where they stay true: on the live status
        line when there is one (it ticks: the question's budget too), else in the printed line."""
        ctx = self.ctx
        ctx.phase(f"round 1: question {index + 1}/{len(self.questions)}", budget_until=began + result.budget_s)
        ctx.console.print()
        left = "" if ctx.live is not None else f" · {mmss(ctx.countdown.remaining())} left in the mock"
        ctx.say(f"Question {index + 1}/{len(self.questions)} · {question.topic} · {question.kind} · "
                f"budget {mmss(result.budget_s)}{left}", "bold magenta")

    def _line_reader(self, began: float, budget: float, typed: list[str]) -> Callable[[str], str]:
        """The quiz engine's LineReader, with the question's budget in the prompt (without a live
        status line) and
        the mock's own words (skip, q) taken out before the quiz sees them; every
        other line but a hint request is appended to `typed`."""
        ctx = self.ctx

        def read(prompt: str) -> str:
            if ctx.live is None:  # else the live status line shows the budget, ticking
                prompt = f"({budget_left(budget - (ctx.clock.monotonic() - began))}) {prompt}"
            line = ctx.read(prompt, ctx.countdown)
            word = line.strip().lower()
            if word in SKIP_WORDS:
                raise _Skip
            if word in QUIT_WORDS:
                raise _EndRound
            if word not in HINT_WORDS:
                typed.append(line)
            return line

        return read
