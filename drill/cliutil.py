"""Small helpers every command module shares: error output and exit codes.

Exit codes across drill: 0 success, 1 the learner's work failed (a check that
did not pass), 2 usage or input error (bad flag, missing file, bad YAML,
unreadable store). Messages for exit 2 are one line, saying what and where.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import typer
from rich.console import Console

from drill.errors import UserError

EXIT_FAIL = 1
EXIT_USAGE = 2

err_console = Console(stderr=True, highlight=False)


def fail_usage(message: str) -> NoReturn:
    """Print a one-line error and exit 2."""
    err_console.print(f"[bold red]error:[/] {message}", markup=True, soft_wrap=True)
    raise typer.Exit(EXIT_USAGE)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn a UserError raised anywhere below into one line on stderr and exit 2."""
    try:
        yield
    except UserError as exc:
        fail_usage(_escape(str(exc)))


def not_built(command: str, issue: str) -> NoReturn:
    """The answer of a command that exists in the design but not yet in code."""
    err_console.print(f"drill {command}: not built yet ({issue}).")
    raise typer.Exit(EXIT_USAGE)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
