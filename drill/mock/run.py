"""`drill mock` as one plain function: plan, brief, two rounds, report, save.

Why the injected pieces (console, reader, clock, grader, store): a test can
sit a whole "45-minute" mock in milliseconds, run out of time mid-question,
or press Ctrl-C at any prompt, and check what was saved. The mock row is
created when the brief is shown and is always finished — completed, expired
or abandoned — with whatever report exists at that point, even when an error
stops it. Until then its report so far is checkpointed after every question
and every graded file, with the owning process recorded: if drill is killed
outright, a later drill marks the mock interrupted (drill.mock.interrupted).
"""

from __future__ import annotations

import random
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.text import Text

from drill.errors import UserError
from drill.mock import interrupted, plan
from drill.mock.clock import Clock, Countdown, SystemClock, mmss
from drill.mock.coding import DEBUG_EXERCISE, CodingRound, Grader
from drill.mock.concept import MIN_SEEN_S, ConceptRound
from drill.mock.context import Abandoned, InputClosed, MockContext
from drill.mock.live import LiveStatus
from drill.mock.reader import DeadlineReader, EndOfInput, TimeUp, stream_reader
from drill.mock.report import build_report, render_history, render_report, score_rule
from drill.paths import exercises_dir
from drill.quiz.loader import load_bank
from drill.quiz.schedule import scheduler_for
from drill.quiz.schema import Question
from drill.quiz.select import Filters, filtered
from drill.quiz.stats import scheduled_reviews, weakest_topics
from drill.store import Store, StoreUnavailable, default_path, now_iso, open_store

EXIT_ABANDONED = 130
MAX_MINUTES = interrupted.MAX_MINUTES
ROUNDS = ("standard", "debug")  # --round


@dataclass(frozen=True)
class MockOptions:
    minutes: float = 45.0
    topics: tuple[str, ...] = ()
    exercise: str | None = None
    questions: int = 6
    seed: int | None = None
    folder: Path | None = None
    bank: Path | None = None
    solution: Path | None = None  # copied over the exercise file at the coding round's first Enter
    round: str = "standard"  # "debug": the debug round, debug_gpt's planted file, coding only


def run_mock(
    options: MockOptions,
    *,
    console: Console | None = None,
    read: DeadlineReader | None = None,
    clock: Clock | None = None,
    store: Store | None = None,
    grade: Grader | None = None,
    interactive: bool | None = None,
    fuzz: bool = True,
    live: LiveStatus | None = None,
) -> int:
    """Sit one mock; returns the exit code (0 finished or timed out, 130 abandoned: Ctrl-C or end of input).

    `live` is the countdown's status line (default: one on a capable terminal, else none);
    with one, the status line is the only clock on screen and prompts carry no time.

    Raises UserError for bad options (before anything is recorded) and for
    errors mid-mock (after the report so far is saved).
    """
    console = console or Console(highlight=False)
    clock = clock or SystemClock()
    if interactive is None:
        interactive = read is None and sys.stdin is not None and sys.stdin.isatty()
    if not options.minutes > 0:
        raise UserError(f"must be positive, not {options.minutes:g}", "--minutes")
    if not options.minutes <= MAX_MINUTES:  # inf, or a typo like 4500
        raise UserError(f"must be at most {MAX_MINUTES:g} (a day), not {options.minutes:g}", "--minutes")
    if options.questions < 0:
        raise UserError(f"must be 0 or more, not {options.questions}", "--questions")
    if options.round not in ROUNDS:
        raise UserError(f"unknown round '{options.round}'; choose from {', '.join(ROUNDS)}", "--round")
    if options.round == "debug":
        if options.exercise not in (None, DEBUG_EXERCISE):
            raise UserError(f"the debug round is {DEBUG_EXERCISE}; drop --exercise {options.exercise}", "--round")
        options = replace(options, exercise=DEBUG_EXERCISE, questions=0)
    solution = (str(options.solution), plan.read_solution(options.solution)) if options.solution else None
    questions_pool = _question_pool(options)
    own_store = store is None
    store = store or open_store()
    try:
        _settle_quietly(store)
        store.probe_write()  # a locked or read-only store is refused before the first question, not after
        rng = random.Random(options.seed)
        # Cram answers are practice without scheduling; `drill stats` leaves them out of
        # "weakest topics" too, so both rank topics on the same evidence.
        reviews = scheduled_reviews(store.reviews())
        picked = plan.pick_questions(questions_pool, reviews, options.questions, rng)
        questions, budgets = plan.fit_questions(picked, options.minutes)
        exercise = plan.choose_exercise(options.exercise, plan.gradable_exercises(), store.attempts(), rng)
        coding_file = plan.plan_coding_file(options.folder or Path.cwd(), exercise.name, clock.now())
        if live is None and interactive and read is None:
            live = LiveStatus.for_terminal(console)
        reader = read or stream_reader(console, on_tick=live.tick if live else None, clock_in_prompt=live is None)
        if coding_file.fresh_folder and interactive:
            coding_file = _ask_overwrite(console, reader, clock, options.folder or Path.cwd(), exercise.name,
                                         coding_file)
        planned = MockPlan(questions, budgets, len(picked), exercise, coding_file,
                           [r.topic for r in weakest_topics(reviews)], solution, _debug_file(exercise.name, rng))
        return _sit(options, planned, grade or _check_file, fuzz, console=console, reader=reader, clock=clock,
                    store=store, rng=rng, interactive=interactive, live=live)
    finally:
        if own_store:
            store.close()


def _settle_quietly(store: Store) -> None:
    """Mark mocks whose process died as interrupted before starting a new one.

    Best effort: a store that cannot be written now is settled by a later run."""
    try:
        interrupted.settle(store, datetime.now(timezone.utc))
    except StoreUnavailable:
        pass


def _question_pool(options: MockOptions) -> list:  # type: ignore[type-arg]
    if options.questions == 0:
        return []
    bank = load_bank(options.bank)
    known = bank.topics()
    for topic in options.topics:
        if topic not in known:
            raise UserError(f"unknown topic {topic!r}; topics: {', '.join(known)}", "--topics")
    pool = filtered(bank.questions, Filters(topics=options.topics))
    if not pool:
        raise UserError("no question matches --topics", "--topics")
    return pool


def _ask_overwrite(console: Console, reader: DeadlineReader, clock: Clock, base: Path, exercise: str,
                   planned: plan.CodingFile) -> plan.CodingFile:
    """The learner's file exists: offer overwriting it; the default keeps it and uses a fresh folder."""
    existing = base / f"{exercise}.py"
    patience = Countdown(clock, 3600.0)  # before the mock's clock starts
    try:
        answer = reader(f"{existing} exists. Overwrite it with the starter? y = overwrite, "
                        f"Enter = use {planned.folder.name}/ >", patience)
    except (EndOfInput, TimeUp):
        return planned
    if answer.strip().lower() in ("y", "yes", "overwrite"):
        return plan.plan_coding_file(base, exercise, clock.now(), overwrite=True)
    return planned


@dataclass(frozen=True)
class MockPlan:
    """What the mock will ask, decided before its clock starts."""

    questions: list[Question]
    budgets: list[float]  # seconds, one per question
    picked: int  # questions drawn before fitting them into the concept round's time
    exercise: plan.ExerciseChoice
    coding_file: plan.CodingFile
    history_weak: list[str]  # drill.quiz.stats.weakest_topics of the reviews before the mock
    solution: tuple[str, str] | None = None  # --solution: (its path as typed, its text)
    starter_text: str | None = None  # debug_gpt: the planted file drawn for this mock


def _debug_file(exercise: str, rng: random.Random) -> str | None:
    """debug_gpt's coding file, planted with a seed drawn from the mock's (the same --seed, the same file)."""
    if exercise != DEBUG_EXERCISE:
        return None
    from drill.debug_round.round import starter_text

    return starter_text(rng.randrange(2**31))


def _sit(options: MockOptions, planned: MockPlan, grade: Grader, fuzz: bool, *, console: Console,
         reader: DeadlineReader, clock: Clock, store: Store, rng: random.Random, interactive: bool,
         live: LiveStatus | None) -> int:
    """Start the mock's row and clock, play the rounds, then save and show the report, whatever ended them."""
    minutes, exercise = options.minutes, planned.exercise.name
    mock_id = store.start_mock(minutes, exercise)
    countdown = Countdown(clock, minutes * 60.0)
    ctx = MockContext(console, reader, clock, countdown, store, mock_id, rng, interactive, options.seed, live)
    concept = ConceptRound(ctx, planned.questions, planned.budgets, scheduler_for(store, fuzz=fuzz))
    coding = CodingRound(ctx, exercise, planned.coding_file, exercises_dir() / f"{exercise}.py", grade,
                         number=2 if planned.questions else 1, solution=planned.solution,
                         starter_text=planned.starter_text)
    owner = interrupted.this_process()

    def report_so_far(status: str, error: str | None = None) -> dict:  # type: ignore[type-arg]
        return build_report(
            mock_id=mock_id, status=status, minutes=minutes, elapsed_s=min(countdown.elapsed(), minutes * 60.0),
            seed=options.seed, concept=concept, coding=coding, exercise=exercise,
            history_weak=planned.history_weak, error=error,
        )

    def checkpoint() -> None:
        """The report so far, plus who owns the mock: what history shows if this process dies."""
        try:
            store.checkpoint_mock(mock_id, {**report_so_far("running"), "owner": owner, "last_seen": now_iso()})
        except StoreUnavailable:
            pass  # the final save tries again; a checkpoint never stops the mock

    ctx.on_progress = checkpoint
    checkpoint()
    outcome = _Outcome()
    try:
        _play(ctx, planned, concept, coding, outcome)
    finally:
        if live is not None:
            live.stop()
        report = report_so_far(outcome.status, outcome.error)
        try:
            store.finish_mock(mock_id, outcome.status, report["score"], report)
        finally:
            # Shown even when the store refuses the final save (locked, disk full): the
            # learner sees their card, then the one-line error; the last checkpoint stays.
            try:
                render_report(console, report)
            except OSError:
                if outcome.status != "interrupted":
                    raise  # after SIGHUP the terminal is gone: nobody to show it to
    return outcome.code


@dataclass
class _Outcome:
    """How the mock ended: its status for the store, an error to record, the exit code."""

    status: str = "completed"
    error: str | None = None
    code: int = 0


def _play(ctx: MockContext, planned: MockPlan, concept: ConceptRound, coding: CodingRound, outcome: _Outcome) -> None:
    """The brief and both rounds; `outcome` says how they ended (an error is recorded, then re-raised)."""
    console = ctx.console
    try:
        with _terminations_raise():
            if ctx.live is not None:
                ctx.live.start(ctx.countdown, f"drill mock #{ctx.mock_id}")
            _brief(ctx, planned)
            concept.run()
            coding.run()
    except TimeUp:
        outcome.status = "expired"
        if not coding.reached:  # the coding round announces time-up itself
            console.print()
            console.print(Text("Time is up.", style="bold yellow"))
    except Abandoned as exc:
        outcome.status, outcome.code = "abandoned", EXIT_ABANDONED
        closed = isinstance(exc, InputClosed)
        why = "End of input before the time was up: mock abandoned" if closed else "Mock abandoned"
        console.print(Text(f"{why} — saving what you did.", style="bold yellow"))
    except Terminated as exc:
        outcome.status, outcome.code = "interrupted", 128 + exc.signum
    except UserError as exc:
        outcome.status, outcome.error = "abandoned", str(exc)
        raise
    except BaseException as exc:  # a crash or a second Ctrl-C: still record the mock as far as it went
        outcome.status, outcome.error = "abandoned", f"{type(exc).__name__}: {exc}"
        raise


class Terminated(BaseException):
    """SIGTERM or SIGHUP (its terminal closed) arrived during the mock.

    A BaseException, like KeyboardInterrupt, so no `except Exception` on the
    way (the grader, the store) can swallow it. The mock is saved as
    'interrupted' with its report so far, and the terminal's scroll region is
    given back, instead of the process vanishing mid-write.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def _terminations_raise() -> Iterator[None]:
    """While the mock runs, SIGTERM and SIGHUP raise Terminated (main thread only)."""
    previous = {}
    if threading.current_thread() is threading.main_thread():
        def handler(signum: int, frame: object) -> None:
            raise Terminated(signum)

        for name in ("SIGTERM", "SIGHUP"):
            signum = getattr(signal, name, None)
            if signum is not None:
                previous[signum] = signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def _brief(ctx: MockContext, planned: MockPlan) -> None:
    say = ctx.say
    questions, budgets, exercise = planned.questions, planned.budgets, planned.exercise
    minutes = ctx.countdown.remaining() / 60.0
    say(f"Mock interview #{ctx.mock_id} — {mmss(minutes * 60)} on the clock, starting now; it does not pause.",
        "bold reverse")
    left_out = planned.picked - len(questions)
    if questions:
        topics = sorted({q.topic for q in questions})
        fitted = f" ({left_out} more did not fit in a {minutes:g}-minute mock)" if left_out else ""
        say(f"Round 1: {len(questions)} concept question{'s' * (len(questions) != 1)} ({', '.join(topics)}), "
            f"about {mmss(sum(budgets))} in all{fitted}; each shows its own budget. Type skip to pass one "
            f"(it goes on your review list as a miss), q to end the round there.")
    elif left_out:
        say(f"No concept round: a {minutes:g}-minute mock keeps its time for coding.")
    why = f" ({exercise.why})" if exercise.why else ""
    say(f"Round {2 if questions else 1}: coding — implement `{exercise.name}`{why} in {planned.coding_file.path}; "
        "graded with hidden tests, resubmit as often as you like.")
    if left_out:
        say(plan.time_rule(), "dim")
    say(score_rule(bool(questions)), "dim")
    say(f"At 0:00 the mock ends: a question on screen for {MIN_SEEN_S:g} s or more counts as a miss in your reviews, "
        "the rest as not answered, and your last saved file is graded if it changed. Ctrl-C asks whether "
        "to abandon; end of input (Ctrl-D) abandons.", "dim")


def _check_file(path: Path, exercise: str, seed: int | None):  # type: ignore[no-untyped-def]
    from drill.judge.client import grade_one  # the warm grading server when it can be used, else in-process

    return grade_one(path, exercise=exercise, seed=seed)


def show_history(console: Console | None = None, store: Store | None = None) -> None:
    """`drill mock --history`: past mocks, dead 'running' ones settled as interrupted.

    Opens the store for writing so the settled marks are saved; a store that
    cannot be written (read-only file, folder or mount) is still shown, read
    only, with a one-line note on stderr, and a missing one is not created.
    """
    console = console or Console(highlight=False)
    own = store is None
    if store is None:
        if not default_path().exists():
            store = open_store(read_only=True)
        else:
            try:
                store = open_store()
            except StoreUnavailable:
                store = open_store(read_only=True)
    try:
        mocks = interrupted.settle(store, datetime.now(timezone.utc))
        note = store.note
    finally:
        if own:
            store.close()
    if note:
        Console(stderr=True, highlight=False, soft_wrap=True).print(Text(f"note: {note}", style="dim"))
    render_history(console, mocks)
