"""CLI command of the mock interview: `drill mock` and `drill mock --history`.

Thin: parses flags and calls drill.mock.run. Imports nothing heavy at module
level (drill.cli must not pull in torch); the grader is imported only when
the coding round grades a file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from drill.cliutil import user_errors

# One paragraph per line: Typer's rich help keeps a docstring's line breaks, which
# wrapped mid-sentence at 80 columns. The score rule is drill.mock.report.score_rule(), the time
# rule drill.mock.plan.time_rule() (written out: importing them here would slow every start).
MOCK_HELP = "\n\n".join([
    "A timed mock interview: concept questions, then a coding round, then a report card.",
    "Concept answers feed your reviews (source \"mock\"). A question you skip, end the round on (q), "
    "or leave unanswered on screen for 5 s or more when time runs out counts as a miss (Again); "
    "one shown for less, or never reached, is not rated.",
    "The concept round gets at most 40% of the mock and never its last 2 minutes, so the coding round always "
    "has time to grade your file at least once (a grading can take up to a minute); questions that do not fit "
    "at 20 s each are left out.",
    "The exercise (without --exercise): one you have not passed yet; once every one is passed, the one you "
    "passed longest ago. It may be debug_gpt, the debug round, like any other.",
    "The debug round (--round debug), as onsite loops run it, coding only (45 minutes unless --minutes): a runnable "
    "mini GPT with 4 planted bugs (drawn with --seed, as `drill start debug_gpt --seed N` draws them) to find "
    "and fix, then a KV cache to add to its generate. Each grade says how many planted bugs are left and "
    "where; the card scores 75% for the bugs fixed (in proportion) and 25% for the cache, and shows the time "
    "taken.",
    "Score = 40% concept + 60% coding (your last graded file: all tests pass 100%, else ½ × share passed). "
    "The last graded file counts, not the best: an interviewer judges the code you end with; "
    "typing done on a file that scores below an earlier one asks first.",
    "--history lists every mock: completed, expired (time ran out), abandoned (Ctrl-C, or end of input "
    "before the time was up), running (in another terminal) or interrupted (drill was killed or its "
    "terminal closed: the answers up to then are kept). Only completed and expired mocks have a score "
    "and a place in the trend.",
])


app = typer.Typer()


@app.command(help=MOCK_HELP)
def mock(
    minutes: Annotated[float, typer.Option(
        "--minutes", "-m", help="Length of the mock in minutes (at most 1440).")] = 45.0,
    topics: Annotated[list[str] | None, typer.Option(
        "--topics", "--topic", "-t", metavar="TOPIC[,TOPIC]",
        help="Only these question topics (comma-separated or repeated).")] = None,
    exercise: Annotated[str | None, typer.Option(
        "--exercise", "-e", help="Coding exercise (default: one you have not passed yet).")] = None,
    questions: Annotated[int, typer.Option(
        "--questions", "-n", help="Concept questions before the coding round (0 = coding only).")] = 6,
    seed: Annotated[int | None, typer.Option(
        "--seed", help="Seed for the choice of questions, exercise and test inputs.")] = None,
    folder: Annotated[Path | None, typer.Option(
        "--dir",
        help="Folder for the exercise file (default: here; a fresh drill-mock-<time>/ inside it if the file exists).",
    )] = None,
    bank: Annotated[Path | None, typer.Option(
        "--bank", help="Question folder or file instead of the shipped bank.")] = None,
    solution: Annotated[Path | None, typer.Option(
        "--solution", metavar="FILE",
        help="Copy FILE over the exercise file at the coding round's first Enter, then grade it "
             "(drives a whole mock from a script or a pipe).")] = None,
    round_: Annotated[str, typer.Option(
        "--round", metavar="standard|debug",
        help="standard: concept questions, then a coding round; debug: the debug round (see above).")] = "standard",
    history: Annotated[bool, typer.Option(
        "--history", help="List past mocks with scores and trend, then exit.")] = False,
) -> None:
    """`drill mock` (its help is MOCK_HELP)."""
    from drill.mock.run import MockOptions, run_mock, show_history
    from drill.quiz.select import split_values

    with user_errors():
        if history:
            show_history()
            return
        options = MockOptions(
            minutes=minutes, topics=tuple(dict.fromkeys(split_values(topics))), exercise=exercise, questions=questions,
            seed=seed, folder=folder, bank=bank, solution=solution, round=round_.strip().lower(),
        )
        code = run_mock(options)
    raise typer.Exit(code)
