"""CLI commands of the quiz area: quiz, validate, stats."""

from __future__ import annotations

import typer

from drill.cliutil import not_built


def register(app: typer.Typer) -> None:
    @app.command()
    def quiz() -> None:
        """Drill interview questions with spaced repetition."""
        not_built("quiz", "issue 5")

    @app.command()
    def validate() -> None:
        """Check a question bank for errors."""
        not_built("validate", "issue 5")

    @app.command()
    def stats() -> None:
        """Your review history, retention and what is due."""
        not_built("stats", "issue 5")
