"""The CLI shell: help, version, every command reachable, and no torch at import."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

from drill import __version__
from drill.cli import app

runner = CliRunner()

COMMANDS = ["quiz", "validate", "stats", "check", "start", "mock", "bench"]


def test_help_lists_every_command() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for name in COMMANDS:
        assert name in result.output


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"drill {__version__}"


def test_each_command_has_help() -> None:
    for name in COMMANDS:
        result = runner.invoke(app, [name, "--help"])
        assert result.exit_code == 0, (name, result.output)


def test_unknown_command_is_a_usage_error() -> None:
    result = runner.invoke(app, ["qiuz"])
    assert result.exit_code == 2


def test_importing_the_cli_does_not_import_torch() -> None:
    code = "import sys, drill.cli; sys.exit(3 if 'torch' in sys.modules else 0)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr or "drill.cli imported torch"


def test_console_script_runs() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "from drill.cli import main; main()", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and __version__ in proc.stdout
