"""The `drill` command line: a thin Typer shell over plain functions.

Each area registers its own commands (drill/quiz/commands.py, drill/judge/
commands.py, ...), so this file only assembles them. Nothing imported here may
import torch: `drill quiz` must start as fast as the interpreter does.
"""

from __future__ import annotations

import sys

import typer

from drill import __version__
from drill.judge import commands as judge_commands
from drill.mock_commands import register as register_mock
from drill.quiz import commands as quiz_commands
from drill.bench_commands import register as register_bench
from drill.cliutil import install_fast_coercion

install_fast_coercion()

app = typer.Typer(
    name="drill",
    help="Practice transformer internals for ML-engineering interviews: quiz, graded exercises, mock interviews.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"drill {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """drill — interview practice for transformer internals."""


quiz_commands.register(app)
judge_commands.register(app)
register_mock(app)
register_bench(app)


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        sys.stderr.write("\ninterrupted\n")
        sys.exit(130)


if __name__ == "__main__":
    main()
