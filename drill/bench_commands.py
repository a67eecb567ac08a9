"""CLI command of the benchmark."""

from __future__ import annotations

import typer

from drill.cliutil import not_built


def register(app: typer.Typer) -> None:
    @app.command()
    def bench() -> None:
        """Time your implementation against the fused reference."""
        not_built("bench", "issue 7")
