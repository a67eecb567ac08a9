"""What a mock asks: concept questions aimed at weak topics, one exercise, time budgets.

Why weighted and not just "due cards": a mock is a rehearsal, so it should
hit the topics the learner has been getting wrong (from the review history),
while still mixing question kinds the way an interviewer would (a definition,
a multiple choice, a back-of-envelope number). Nothing here prints or reads
input; it is all plain functions over the bank and the store.
"""

from __future__ import annotations

import os
import random
import stat
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from drill.errors import UserError
from drill.quiz import kinds
from drill.quiz.schedule import AGAIN, HARD, parse_time
from drill.quiz.schema import Question
from drill.store import Attempt, Review

# The concept round gets at most this share of the mock; the rest is for coding.
CONCEPT_SHARE = 0.4
# ...and never the last CODING_MIN_S: one grading can take up to a minute (the grader's
# default time limit for the learner's code), plus a minute to edit the file before it.
CODING_MIN_S = 120.0
MIN_BUDGET_S = 20.0


def topic_weakness(reviews: Iterable[Review]) -> dict[str, float]:
    """Topic -> share of recent answers that went wrong (Again = 1, Hard = 0.5): a sampling weight.

    Only what `pick_questions` draws by: every topic needs a weight, even one never
    answered. The "weakest topics" the learner is told about are ranked elsewhere, by one
    rule (drill.quiz.stats.weakest_topics), in `drill stats` and on the mock's card alike.

    Smoothed with one right and one wrong pseudo-answer, so a topic with no
    history sits at 0.5 and a single bad answer does not dominate. Only each
    question's last three answers count: old mistakes since fixed fade out.
    """
    per_question: dict[str, list[Review]] = defaultdict(list)
    for review in reviews:
        if review.topic:
            per_question[review.question_id].append(review)
    wrong: dict[str, float] = defaultdict(float)
    seen: dict[str, int] = defaultdict(int)
    for answers in per_question.values():
        for review in answers[-3:]:
            topic = review.topic or ""
            seen[topic] += 1
            wrong[topic] += 1.0 if review.rating == AGAIN else 0.5 if review.rating == HARD else 0.0
    return {topic: (wrong[topic] + 1.0) / (seen[topic] + 2.0) for topic in seen}


def question_weight(question: Question, weakness: dict[str, float], last_rating: dict[str, int]) -> float:
    """Weak topic -> likelier; a question last answered Again is likelier still."""
    weight = weakness.get(question.topic, 0.5)
    rating = last_rating.get(question.id)
    if rating == AGAIN:
        weight *= 2.0
    elif rating == HARD:
        weight *= 1.5
    return max(weight, 0.05)


def pick_questions(
    pool: list[Question], reviews: list[Review], count: int, rng: random.Random
) -> list[Question]:
    """`count` questions drawn one at a time by weakness weight, without replacement.

    Each draw is among the kinds drawn least so far, so the round mixes
    recall, choice, numeric and parametric questions, while the topic
    weighting decides which question (and so which of those kinds) comes up.
    """
    if count <= 0 or not pool:
        return []
    weakness = topic_weakness(reviews)
    last_rating = {r.question_id: r.rating for r in reviews}
    remaining = list(pool)
    used: dict[str, int] = defaultdict(int)
    chosen: list[Question] = []
    while remaining and len(chosen) < count:
        fewest = min(used[q.kind] for q in remaining)
        candidates = [q for q in remaining if used[q.kind] == fewest]
        # Efraimidis–Spirakis: the largest u^(1/w) is a draw weighted by w.
        best = max(candidates, key=lambda q: rng.random() ** (1.0 / question_weight(q, weakness, last_rating)))
        remaining.remove(best)
        used[best.kind] += 1
        chosen.append(best)
    return chosen


def concept_seconds(minutes: float) -> float:
    """Seconds the concept round may plan for: CONCEPT_SHARE of the mock, never CODING_MIN_S of it."""
    total = minutes * 60.0
    return max(0.0, min(total * CONCEPT_SHARE, total - CODING_MIN_S))


def fit_questions(questions: list[Question], minutes: float) -> tuple[list[Question], list[float]]:
    """The questions that fit the concept round, and their soft budgets in seconds.

    Each gets its kind's usual time, squeezed (all alike) into `concept_seconds`;
    while that would leave one under MIN_BUDGET_S, the last drawn is left out. So
    the budgets never add up to more than the concept round's share, and a short
    mock keeps its coding round (a 3-minute mock: 2 questions of 30 s, 2:00 to code).
    """
    cap = concept_seconds(minutes)
    kept = list(questions)
    while kept:
        natural = [kinds.get(q.kind).budget_s for q in kept]
        scale = min(1.0, cap / sum(natural))
        if min(natural) * scale >= MIN_BUDGET_S:
            return kept, [s * scale for s in natural]
        kept.pop()
    return [], []


def time_rule() -> str:
    """How a mock's time is split, as the brief and --help state it."""
    return (f"The concept round gets at most {CONCEPT_SHARE:.0%} of the mock and never its last "
            f"{CODING_MIN_S / 60:g} minutes, so the coding round always has time to grade your file at least once "
            f"(a grading can take up to a minute); questions that do not fit at {MIN_BUDGET_S:g} s each are left out.")


@dataclass(frozen=True)
class ExerciseChoice:
    name: str
    why: str = ""  # "" when the learner named it with --exercise


def choose_exercise(
    requested: str | None, available: list[str], attempts: Iterable[Attempt], rng: random.Random
) -> ExerciseChoice:
    """--exercise if given (must be gradable), else a random one not passed yet; when every one
    is passed, the one whose last pass is oldest (the likeliest to have faded), saying so."""
    if not available:
        raise UserError("no gradable exercise is installed; the coding round needs one")
    if requested is not None:
        if requested not in available:
            from drill.judge.registry import did_you_mean

            raise UserError(f"unknown exercise '{requested}'{did_you_mean(requested, available)}; "
                            f"choose from {', '.join(available)}", "--exercise")
        return ExerciseChoice(requested)
    last_pass: dict[str, datetime] = {}
    for attempt in attempts:
        if attempt.status == "pass" and attempt.exercise in available:
            when = parse_time(attempt.attempted_at)
            last_pass[attempt.exercise] = max(when, last_pass.get(attempt.exercise, when))
    not_passed = [name for name in available if name not in last_pass]
    if not_passed:
        return ExerciseChoice(rng.choice(not_passed), "not passed yet")
    name = min(available, key=lambda n: (last_pass[n], n))
    return ExerciseChoice(name, f"every exercise is passed: practising the one you passed longest ago, "
                                f"on {last_pass[name].astimezone():%Y-%m-%d}")


def gradable_exercises() -> list[str]:
    """The exercises a coding round can use: graded (starter and spec installed), and gradable here.

    From the exercise index, without importing the specs (they import torch);
    an exercise that needs a CUDA device is offered only where one is present.
    """
    from drill.judge import registry
    from drill.judge.devices import device_available

    return [name for name in registry.graded_names() if device_available(registry.entry(name))]


@dataclass(frozen=True)
class CodingFile:
    """Where the learner's file goes, decided before the mock starts."""

    folder: Path
    path: Path
    fresh_folder: bool  # True: a new drill-mock-<timestamp>/ because the name was taken


def plan_coding_file(base: Path, exercise: str, when: datetime, *, overwrite: bool = False) -> CodingFile:
    """`base/<exercise>.py`, or the same inside a fresh `drill-mock-<timestamp>/` when that
    file already exists (a learner's file is never overwritten unless they said so).

    Raises UserError when the folder cannot be created or written to.
    """
    base = base.expanduser()
    if base.exists() and not base.is_dir():
        raise UserError("not a folder", str(base))
    target = base / f"{exercise}.py"
    fresh = target.exists() and not overwrite
    folder = base
    if fresh:
        stamp = when.astimezone().strftime("%Y%m%d-%H%M%S")
        folder = base / f"drill-mock-{stamp}"
        suffix = 1
        while folder.exists():
            suffix += 1
            folder = base / f"drill-mock-{stamp}-{suffix}"
    _check_writable(base)
    return CodingFile(folder, folder / f"{exercise}.py", fresh)


def _check_writable(base: Path) -> None:
    probe = base
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise UserError("cannot write here (permission denied); pass --dir with a folder you own", str(probe))


def write_starter(coding: CodingFile, starter: Path) -> None:
    """Copy the starter file into place (creating the folder); UserError on failure."""
    try:
        text = starter.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read the starter: {exc.strerror or exc}", str(starter)) from exc
    write_exercise_file(coding, text)


def write_exercise_file(coding: CodingFile, text: str) -> None:
    """Put `text` in the learner's file through a rename, so an editor never sees half of it; UserError on failure."""
    from drill.safe_files import write_atomic

    write_atomic(coding.path, text)


SOLUTION_MAX_BYTES = 1 << 20  # a solution file is source code: a megabyte is already far past any exercise


def read_solution(path: Path) -> str:
    """The text of `--solution FILE`, read before the mock starts so a bad path costs nothing; UserError if unusable.

    Read now rather than at the first Enter: a scripted mock must not depend on the file
    still being there minutes later, and a typo is refused before a mock row exists.
    """
    where = str(path)
    try:
        info = path.stat()
    except FileNotFoundError:
        raise UserError("no such file", where) from None
    except OSError as exc:
        raise UserError(f"cannot read it: {exc.strerror or exc}", where) from exc
    if not stat.S_ISREG(info.st_mode):
        raise UserError("not a regular file", where)
    if info.st_size > SOLUTION_MAX_BYTES:
        raise UserError(f"too large for a solution file ({info.st_size} bytes; at most {SOLUTION_MAX_BYTES})", where)
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"not UTF-8 text (byte {exc.start})", where) from None
    except OSError as exc:
        raise UserError(f"cannot read it: {exc.strerror or exc}", where) from exc
