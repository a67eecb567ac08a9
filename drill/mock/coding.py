"""The coding round of a mock: write the starter, grade on request, grade once more at the end.

Grading is `drill.judge.check.check_file` (injected as `Grader`, so tests can
stub it); every graded file is recorded as an attempt tied to the mock.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drill.errors import UserError
from drill.mock.context import InputClosed, MockContext
from drill.mock.plan import CodingFile, write_exercise_file, write_starter
from drill.mock.reader import EndOfInput, TimeUp
from drill.quiz.session import QUIT_WORDS
from drill.store import Attempt

SUBMIT_WORDS = {"", "submit", "s"}
FINISH_WORDS = {"done", "finish"} | QUIT_WORDS
KEEP_WORDS = {"", "keep", "k", "y", "yes"} | FINISH_WORDS

Grader = Callable[[Path, str, "int | None"], Any]  # (file, exercise, seed) -> drill.judge.check.Result


DEBUG_EXERCISE = "debug_gpt"
# The debug round's split: the planted bugs fixed, then the KV cache (graded once every bug is gone).
DEBUG_BUGS_WEIGHT = 0.75


def coding_credit(status: str, passed: int, total: int, bugs_planted: int | None = None,
                  bugs_left: int | None = None, cache: str | None = None) -> float:
    """Share of the coding round one graded file earns, 0..1.

    The rule the report card and --help state: every hidden test passing
    earns it all; a failing file earns at most half, in proportion to the
    tests it passes (a nearly right file is worth something, never as much
    as a right one). Which file counts is the round's last graded one.
    The debug round (debug_gpt) counts what its interviewers count instead:
    75% for the planted bugs fixed, in proportion, and 25% for the cache.
    """
    if bugs_planted:
        if status == "pass":
            return 1.0
        fixed = bugs_planted - (bugs_planted if bugs_left is None else bugs_left)
        return DEBUG_BUGS_WEIGHT * fixed / bugs_planted + (1 - DEBUG_BUGS_WEIGHT) * (cache == "pass")
    if not total:
        return 0.0
    if status == "pass":
        return 1.0
    return 0.5 * passed / total


@dataclass
class Submission:
    at_s: float  # seconds into the mock
    status: str  # pass | fail | error | not_attempted
    passed: int = 0
    total: int = 0
    diagnosis_id: str | None = None
    diagnosis: str | None = None
    detail: str = ""
    fix: str = ""
    advisories: list[str] = field(default_factory=list)
    seed: int | None = None
    at_deadline: bool = False
    output_tail: str = ""  # what the graded file printed (kept short), to explain errors
    # The debug round only (debug_gpt): planted bugs, how many remain and their lines, the cache part.
    bugs_planted: int | None = None
    bugs_left: int | None = None
    left_lines: list[str] = field(default_factory=list)
    cache: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @property
    def credit(self) -> float:
        return coding_credit(self.status, self.passed, self.total, self.bugs_planted, self.bugs_left, self.cache)


@dataclass
class CodingRound:
    """Grades the learner's file on request, and once more at the end if it changed.

    A submission is a version of the file that was graded. Enter on the
    untouched starter grades nothing; Enter on a file unchanged since its last
    grade repeats that verdict without re-running the tests; neither adds a
    submission. At 0:00 (or on done) the saved file is graded only if it
    changed since its last grade, so the count is what the learner submitted
    plus at most one final grade, and an unchanged file costs no grading time
    after the deadline.
    """

    ctx: MockContext
    exercise: str
    coding: CodingFile
    starter: Path
    grade: Grader
    number: int = 2  # its round number as the learner sees it: 1 in a coding-only mock
    # `--solution FILE`: (its name, its text), copied over the learner's file at the first Enter, so a
    # script can drive a whole mock through a plain pipe (no editor, no timed writes).
    solution: tuple[str, str] | None = None
    # The file to start from when it is not the exercise's starter file (the debug round's planted file).
    starter_text: str | None = None
    submissions: list[Submission] = field(default_factory=list)
    reached: bool = False
    _warned_at: int = 0  # submissions count when the learner last confirmed keeping a worse file
    _starter_digest: str = ""
    _graded_digest: str | None = None
    _untouched: bool = True  # last known: the file still holds the starter

    def run(self) -> None:
        """Write the starter, then grade on each Enter until pass, done or time; end of input abandons."""
        ctx = self.ctx
        if ctx.countdown.expired():
            raise TimeUp
        if self.starter_text is not None:
            write_exercise_file(self.coding, self.starter_text)
        else:
            write_starter(self.coding, self.starter)
        self.reached = True
        self._starter_digest = self._digest()
        ctx.progress()  # a killed mock's history then knows the round was reached, and the file
        ctx.phase(f"round {self.number}: coding {self.coding.path.name}")
        ctx.console.print()
        if self.exercise == DEBUG_EXERCISE:
            ctx.say(f"Round {self.number} — debugging: a mini GPT with planted bugs. Find and fix each one, "
                    "then add a KV cache to its generate (use_cache=True)", "bold")
        else:
            ctx.say(f"Round {self.number} — coding: implement `{self.exercise}`", "bold")
        ctx.say(f"Your file: {self.coding.path}", "bold green")
        if self.coding.fresh_folder:
            taken = self.coding.folder.parent / f"{self.exercise}.py"
            ctx.say(f"({taken} already exists, so a fresh folder was made)", "dim")
        ctx.say("Open it in your editor; its docstring is the contract. Save, then press Enter (or type submit) "
                "to run the hidden tests. Resubmit as often as you like; type done to finish early. "
                "When time runs out, the last saved version is graded. Your last graded file is the one that counts.")
        while True:
            try:
                line = ctx.read(f"Enter = grade {self.coding.path.name}, done = finish >", ctx.countdown)
            except TimeUp:
                self._time_up()
            except EndOfInput:
                raise InputClosed from None
            except KeyboardInterrupt:
                self._ask_abandon()
                continue
            word = line.strip().lower()
            if word in SUBMIT_WORDS:
                self._copy_solution()
                if self._grade_now():
                    return
            elif word in FINISH_WORDS:
                self.final()
                if self._confirm_finish():
                    return
            else:
                ctx.say("press Enter (or type submit) to grade your file, or type done to finish", "yellow")

    def _copy_solution(self) -> None:
        """The first Enter with `--solution`: the solution replaces the file, once; later Enters grade the file."""
        if self.solution is None:
            return
        name, text = self.solution
        self.solution = None
        write_exercise_file(self.coding, text)
        self.ctx.say(f"copied {name} into {self.coding.path.name} (--solution)", "dim")

    def _grade_now(self) -> bool:
        """Grade the saved file on request; True when it passes (the round is over)."""
        try:
            submission = self.submit()
        except KeyboardInterrupt:
            self.ctx.say("grading interrupted", "yellow")
            self._ask_abandon()
            return False
        if submission is not None and submission.status == "pass":
            self.ctx.say("All hidden tests pass: the coding round is complete.", "bold green")
            return True
        return False

    def better_earlier(self) -> tuple[int, Submission] | None:
        """(number, submission) of the best earlier graded file when it beats the last one."""
        if len(self.submissions) < 2:
            return None
        last = self.submissions[-1]
        number, best = max(enumerate(self.submissions[:-1], 1), key=lambda pair: (pair[1].credit, pair[0]))
        return (number, best) if best.credit > last.credit else None

    def _confirm_finish(self) -> bool:
        """On done: True to finish. When the last graded file scores below an earlier
        one, say so once and ask, because the last one is what counts."""
        better = self.better_earlier()
        if better is None or self._warned_at == len(self.submissions):
            return True
        self._warned_at = len(self.submissions)
        number, best = better
        last = self.submissions[-1]
        ctx = self.ctx
        ctx.say(f"your submission #{number} passed {best.passed}/{best.total}; this one passes "
                f"{last.passed}/{last.total} — the last one counts.", "bold yellow")
        try:
            answer = ctx.read("Enter = keep it and finish, submit = grade the file again (restore the better "
                              "version first), anything else = back to coding >", ctx.countdown)
        except TimeUp:
            self._time_up()
        except EndOfInput:
            return True  # they asked to finish, and nothing more can be typed
        except KeyboardInterrupt:
            self._ask_abandon()
            return False
        word = answer.strip().lower()
        if word in KEEP_WORDS:
            return True
        if word in SUBMIT_WORDS:
            return self._grade_now()
        self.ctx.say("back to coding: Enter = grade your file, done = finish", "yellow")
        return False

    def _time_up(self) -> None:
        """0:00: grade the last saved file if it changed, then end the mock (raises TimeUp)."""
        self.final(at_deadline=True)
        raise TimeUp

    def _ask_abandon(self) -> None:
        """Ctrl-C: ask whether to abandon; the clock may run out while the question is
        on screen, and then the saved file is still graded, as promised."""
        try:
            self.ctx.interrupted()
        except TimeUp:
            self._time_up()

    def final(self, *, at_deadline: bool = False) -> None:
        """Grade the latest saved file unless it is the starter or was graded already as it is."""
        if not self.reached:
            return
        digest = self._digest()
        lead = "Time is up — " if at_deadline else ""
        style = "bold yellow" if at_deadline else "yellow"
        if digest == self._starter_digest:
            self.ctx.say(f"{lead}your file is still the untouched starter: nothing to grade.", style)
        elif digest == self._graded_digest:
            if at_deadline:
                self.ctx.say(f"Time is up — your last saved file was already graded (#{len(self.submissions)}): "
                             "that verdict stands.", style)
        else:
            if at_deadline:
                self.ctx.say("Time is up — grading your last saved file.", style)
            # On done, _confirm_finish says it if this file is worse than an earlier one.
            self.submit(at_deadline=at_deadline, note_worse=at_deadline)

    def untouched(self) -> bool:
        """Whether the file still holds the starter (as last seen, when it cannot be read now)."""
        if self.reached:
            try:
                self._untouched = hashlib.sha256(self.coding.path.read_bytes()).hexdigest() == self._starter_digest
            except OSError:
                pass
        return self.reached and self._untouched

    def _digest(self) -> str:
        try:
            return hashlib.sha256(self.coding.path.read_bytes()).hexdigest()
        except FileNotFoundError:
            raise UserError("the exercise file was deleted during the coding round", str(self.coding.path)) from None
        except OSError as exc:
            raise UserError(f"cannot read the exercise file: {exc.strerror or exc}", str(self.coding.path)) from exc

    def submit(self, *, at_deadline: bool = False, note_worse: bool = True) -> Submission | None:
        """Grade the saved file and add a submission; None for the untouched starter.

        A file unchanged since its last grade is not graded again: that
        submission's verdict is repeated and returned, and nothing is added.
        """
        ctx = self.ctx
        digest = self._digest()
        if digest == self._starter_digest:
            ctx.say("✗ the file is still the untouched starter — nothing to grade yet (save your edits first)",
                    "bold red")
            return None
        if digest == self._graded_digest and self.submissions:
            last = self.submissions[-1]
            ctx.say(f"unchanged since submission #{len(self.submissions)} ({_verdict(last)}) — not graded again; "
                    "save your edits first", "yellow")
            return last
        # A grade at time-up is stamped at the deadline, not when a late read noticed it.
        at = min(ctx.countdown.elapsed(), ctx.countdown.deadline - ctx.countdown.started)
        ctx.say("grading with the hidden tests…", "dim")
        began = ctx.clock.monotonic()
        with ctx.busy():
            result = self.grade(self.coding.path, self.exercise, ctx.seed)
        planted_header = self.starter_text.split("\n", 1)[0] if self.starter_text is not None else None
        submission = _submission(result, at, at_deadline, debug=self.exercise == DEBUG_EXERCISE,
                                 planted_header=planted_header)
        ctx.store.record_attempt(Attempt(
            exercise=self.exercise, attempted_at=ctx.clock.now().isoformat(), status=result.status,
            diagnosis=submission.diagnosis_id, seed=result.seed, tests_passed=result.passed,
            tests_total=result.total, elapsed_ms=int((ctx.clock.monotonic() - began) * 1000),
            file=str(self.coding.path), mock_id=ctx.mock_id,
        ))
        self._show(submission)
        self._graded_digest = digest
        self.submissions.append(submission)
        better = self.better_earlier()
        if better is not None and note_worse:
            ctx.say(f"  lower than submission #{better[0]} ({_verdict(better[1])}): your last graded file is the one "
                    "that counts — restore the better version and submit it again to count it", "yellow")
        ctx.progress()
        return submission

    def _show(self, s: Submission) -> None:
        ctx = self.ctx
        mark, style = ("✓ pass", "bold green") if s.status == "pass" else (f"✗ {s.status}", "bold red")
        ctx.say(f"{mark}: {s.passed}/{s.total} hidden tests", style)
        if s.bugs_planted is not None:
            where = f" ({', '.join(s.left_lines)})" if s.left_lines else ""
            ctx.say(f"  planted bugs left: {s.bugs_left} of {s.bugs_planted}{where}; KV cache: {s.cache}",
                    "green" if not s.bugs_left else "red")
        if s.diagnosis:
            ctx.say(f"  likely mistake: {s.diagnosis}" + (f" — {s.detail}" if s.detail else ""), "red")
        for note in s.advisories:
            ctx.say(f"  note: {note}", "yellow")


def _verdict(s: Submission) -> str:
    return f"{s.status} {s.passed}/{s.total}"


def _submission(result: Any, at: float, at_deadline: bool, debug: bool = False,
                planted_header: str | None = None) -> Submission:
    """The record of one grade. In the debug round, a file whose line 1 is not the one this mock planted
    (another seed's fixed file pasted in) fixes no bug: the grader judges a file by its own line 1."""
    d = result.diagnosis
    extra: dict[str, Any] = {}
    status = result.status
    if debug:
        from drill.debug_round.header import parse
        from drill.debug_round.round import progress

        try:
            extra = progress(result)
        except UserError:  # line 1 edited away: the verdict already says so, and no bug counts as fixed
            extra = {}
        if planted_header is not None and _first_line(result.file) != planted_header:
            k = parse(planted_header)[1]
            extra = {"bugs_planted": k, "bugs_left": k, "cache": "not run",
                     "left_lines": [f"all: line 1 is no longer this mock's `{planted_header}`"]}
            status = "fail" if result.status == "pass" else result.status
    return Submission(
        at_s=at, status=status, passed=result.passed, total=result.total,
        diagnosis_id=getattr(d, "id", None), diagnosis=getattr(d, "title", None),
        detail=result.diagnosis_detail or "", fix=getattr(d, "fix", "") or "",
        advisories=list(result.advisories), seed=result.seed, at_deadline=at_deadline,
        output_tail=(getattr(result, "output_tail", "") or "")[-400:],
        **extra,
    )


def _first_line(path: Any) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.readline().lstrip("\ufeff").rstrip("\r\n")
    except OSError:
        return None
