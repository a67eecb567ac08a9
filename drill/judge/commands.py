"""CLI commands of the grader area: check, start, exercises, hint."""

from __future__ import annotations

import typer

from drill.cliutil import not_built


def register(app: typer.Typer) -> None:
    @app.command()
    def check() -> None:
        """Grade your implementation of an exercise with hidden tests."""
        not_built("check", "issue 3")

    @app.command()
    def start() -> None:
        """Copy an exercise's starter file into a folder."""
        not_built("start", "issue 3")
