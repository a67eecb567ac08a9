"""CLI commands of the quiz area: quiz, validate, stats.

Thin on purpose: each command parses its options, calls plain functions in
drill.quiz, and renders. Nothing here (or imported at module level) pulls in
torch or fsrs, so `drill quiz` starts about as fast as the interpreter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from drill.cliutil import EXIT_USAGE, fail_usage, user_errors


def register(app: typer.Typer) -> None:
    @app.command()
    def quiz(
        topic: Annotated[Optional[list[str]], typer.Option("--topic", "-t", metavar="TOPIC[,TOPIC]", help="Only these topics (comma-separated or repeated; any case).")] = None,
        tag: Annotated[Optional[list[str]], typer.Option("--tag", metavar="TAG[,TAG]", help="Only questions with one of these tags (comma-separated or repeated; any case).")] = None,
        difficulty: Annotated[Optional[str], typer.Option("--difficulty", "-d", help="easy, medium or hard.")] = None,
        count: Annotated[int, typer.Option("--count", "-n", min=1, help="At most this many questions, repeats included (a missed card comes back once at the end while there is room).")] = 20,
        cram: Annotated[bool, typer.Option("--cram/--due", help="--due (default): due cards, then new ones. --cram: practice the filtered set without touching the schedule.")] = False,
        new_limit: Annotated[int, typer.Option("--new-limit", min=0, help="New cards per day (counted from today's reviews).")] = 10,
        seed: Annotated[Optional[int], typer.Option("--seed", help="Seed for question order and parametric values.")] = None,
        retention: Annotated[float, typer.Option("--retention", help="Desired retention for FSRS scheduling (0.7-0.99).")] = 0.9,
        bank: Annotated[Optional[Path], typer.Option("--bank", help="Question folder or file instead of the shipped bank.")] = None,
        shuffle: Annotated[bool, typer.Option("--shuffle/--no-shuffle", help="Show choice options in a random (seeded) order.")] = True,
    ) -> None:
        """Drill interview questions with spaced repetition."""
        from drill.quiz.run import QuizOptions, run_quiz

        if difficulty is not None and difficulty.strip().lower() not in ("easy", "medium", "hard"):
            fail_usage(f"--difficulty must be easy, medium or hard, not {difficulty!r}")
        if not 0.7 <= retention <= 0.99:
            fail_usage(f"--retention must be between 0.7 and 0.99 (e.g. 0.9), not {retention}")
        options = QuizOptions(
            topics=tuple(topic or ()),
            tags=tuple(tag or ()),
            difficulty=difficulty,
            count=count,
            cram=cram,
            new_limit=new_limit,
            seed=seed,
            retention=retention,
            bank=bank,
            shuffle=shuffle,
        )
        with user_errors():
            code = run_quiz(options)
        raise typer.Exit(code)

    @app.command()
    def validate(
        path: Annotated[Optional[Path], typer.Argument(help="A bank folder or one .yaml file (default: the shipped bank).")] = None,
    ) -> None:
        """Check a question bank for errors (every problem as file:line)."""
        from rich.console import Console
        from rich.text import Text

        from drill.cliutil import err_console
        from drill.paths import questions_dir
        from drill.quiz.loader import scan

        with user_errors():
            result = scan(path if path is not None else questions_dir())
        for problem in result.problems:
            err_console.print(Text(str(problem)), soft_wrap=True)
        if result.problems:
            err_console.print(Text(result.summary(), style="bold red"))
            raise typer.Exit(EXIT_USAGE)
        Console(highlight=False).print(Text(result.summary(), style="bold green"))

    @app.command()
    def stats(
        bank: Annotated[Optional[Path], typer.Option("--bank", help="Question folder used to name leeches (default: the shipped bank).")] = None,
    ) -> None:
        """Your review history, retention and what is due."""
        from drill.quiz.stats import show_stats

        with user_errors():
            show_stats(bank)
