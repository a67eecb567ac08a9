"""CLI command of the mock interview."""

from __future__ import annotations

import typer

from drill.cliutil import not_built


def register(app: typer.Typer) -> None:
    @app.command()
    def mock() -> None:
        """A timed mock interview: concept questions, then a coding round."""
        not_built("mock", "issue 6")
