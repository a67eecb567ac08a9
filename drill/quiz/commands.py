"""CLI commands of the quiz area: quiz, validate, stats, export (reviews, anki), optimize.

Thin on purpose: each command parses its options, calls plain functions in
drill.quiz, and renders. Nothing here (or imported at module level) pulls in
torch or fsrs, so `drill quiz` starts about as fast as the interpreter; the
optimizer (torch, pandas) and genanki are imported inside their commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from drill.cliutil import EXIT_USAGE, fail_usage, user_errors

app = typer.Typer()
export = typer.Typer(help="Write your reviews or the bank in other tools' formats.", no_args_is_help=True)
app.add_typer(export, name="export")


@app.command()
def quiz(
    topic: Annotated[list[str] | None, typer.Option(
        "--topic", "--topics", "-t", metavar="TOPIC[,TOPIC]",
        help="Only these topics (comma-separated or repeated; any case).")] = None,
    tag: Annotated[list[str] | None, typer.Option(
        "--tag", "--tags", metavar="TAG[,TAG]",
        help="Only questions with one of these tags (comma-separated or repeated; any case).")] = None,
    difficulty: Annotated[str | None, typer.Option("--difficulty", "-d", help="easy, medium or hard.")] = None,
    kind: Annotated[list[str] | None, typer.Option(
        "--kind", metavar="KIND[,KIND]",
        help="Only these kinds of question: recall, choice, numeric, parametric, spot_bug "
             "(spot-bug works too).")] = None,
    count: Annotated[int, typer.Option(
        "--count", "-n", min=1,
        help="At most this many questions, repeats included (a missed card comes back once at the end "
             "while there is room).")] = 20,
    cram: Annotated[bool, typer.Option(
        "--cram/--due",
        help="--due (default): due cards, then new ones. --cram: practice the filtered set without touching "
             "the schedule.")] = False,
    new_limit: Annotated[int, typer.Option(
        "--new-limit", min=0, help="New cards per day (counted from today's reviews).")] = 10,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed for question order and parametric values.")] = None,
    retention: Annotated[float, typer.Option(
        "--retention", help="Desired retention for FSRS scheduling (0.7-0.99).")] = 0.9,
    bank: Annotated[Path | None, typer.Option(
        "--bank", help="Question folder or file instead of the shipped bank.")] = None,
    shuffle: Annotated[bool, typer.Option(
        "--shuffle/--no-shuffle", help="Show choice options in a random (seeded) order.")] = True,
) -> None:
    """Drill interview questions with spaced repetition.

    At a prompt: ? shows a hint (cards that have one say so), q ends the session."""
    from drill.quiz.run import QuizOptions, run_quiz

    if difficulty is not None and difficulty.strip().lower() not in ("easy", "medium", "hard"):
        fail_usage(f"--difficulty must be easy, medium or hard, not {difficulty!r}")
    if not 0.7 <= retention <= 0.99:
        fail_usage(f"--retention must be between 0.7 and 0.99 (e.g. 0.9), not {retention}")
    options = QuizOptions(
        topics=tuple(topic or ()),
        tags=tuple(tag or ()),
        difficulty=difficulty,
        kinds=tuple(kind or ()),
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
    path: Annotated[Path | None, typer.Argument(
        help="A bank folder or one .yaml file (default: the shipped bank).")] = None,
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
    bank: Annotated[Path | None, typer.Option(
        "--bank", help="Question folder used to name leeches (default: the shipped bank).")] = None,
) -> None:
    """Your review history, retention and what is due."""
    from drill.quiz.stats import show_stats

    with user_errors():
        show_stats(bank)


@export.command("reviews")
def export_reviews(
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="CSV file to write ('-' = standard output).")] = Path("-"),
) -> None:
    """Your scheduled reviews as CSV in the FSRS optimizer's format: card_id, review_time
    (ms since the epoch, UTC), review_rating, review_state, review_duration (ms)."""
    import sys

    from drill.cliutil import err_console
    from drill.quiz.export import reviews_csv
    from drill.safe_files import write_atomic
    from drill.store import open_store

    with user_errors():
        with open_store(read_only=True) as store:
            log = store.scheduled_log()
        text = reviews_csv(log)
        if str(output) == "-":
            sys.stdout.write(text)
            return
        write_atomic(output, text)
    err_console.print(f"{len(log)} review{'s' * (len(log) != 1)} written to {output}", markup=False)


@export.command("anki")
def export_anki(
    output: Annotated[Path, typer.Option("--output", "-o", help="The .apkg file to write.")] = Path("drill.apkg"),
    topic: Annotated[list[str] | None, typer.Option(
        "--topic", "--topics", "-t", metavar="TOPIC[,TOPIC]", help="Only these topics.")] = None,
    tag: Annotated[list[str] | None, typer.Option(
        "--tag", "--tags", metavar="TAG[,TAG]", help="Only questions with one of these tags.")] = None,
    difficulty: Annotated[str | None, typer.Option("--difficulty", "-d", help="easy, medium or hard.")] = None,
    deck: Annotated[str, typer.Option("--deck", help="Anki deck name (one sub-deck per topic).")] = "drill",
    bank: Annotated[Path | None, typer.Option(
        "--bank", help="Question folder or file instead of the shipped bank.")] = None,
) -> None:
    """The bank (or the filtered part) as an Anki deck; re-importing a newer export updates your cards."""
    from drill.cliutil import err_console
    from drill.quiz.export import write_anki
    from drill.quiz.loader import load_bank
    from drill.quiz.select import filtered, no_match_message, resolve_filters

    with user_errors():
        questions = load_bank(bank).questions
        filters = resolve_filters(list(questions), topic or (), tag or (), difficulty)
        chosen = filtered(questions, filters)
        if not chosen:
            from drill.errors import UserError

            raise UserError(no_match_message(list(questions), filters))
        count = write_anki(chosen, output, deck.strip() or "drill")
    err_console.print(f"{count} card{'s' * (count != 1)} written to {output} (Anki: File > Import)", markup=False)


@app.command()
def optimize(
    reset: Annotated[bool, typer.Option(
        "--reset", help="Forget fitted parameters: schedule with FSRS's defaults again.")] = False,
) -> None:
    """Fit FSRS's parameters to your own reviews; drill quiz and mock use them from then on."""
    from drill.cliutil import err_console
    from drill.store import open_store

    with user_errors():
        with open_store() as store:
            if reset:
                dropped = store.clear_parameters()
                err_console.print("FSRS parameters reset to the defaults" if dropped else "already on FSRS's defaults",
                                  markup=False)
                return
            from drill.quiz.optimize import fit

            fitted = fit(store)
    shown = ", ".join(f"{p:.4g}" for p in fitted.parameters)
    err_console.print(f"fitted on {fitted.reviews} reviews (of {fitted.total}); from now on drill schedules with: "
                      f"{shown}",
                      markup=False, soft_wrap=True)
