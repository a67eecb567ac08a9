"""The CLI shell: help, version, every command reachable, and no torch at import."""

from __future__ import annotations

import os
import subprocess
import sys

import typer
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


# --- start-up: what a quiz start may import ------------------------------------


def _imports_of_quiz_start(home: str) -> set[str]:
    """Module names imported by `drill quiz -n 1 --cram` (stdin empty), via -X importtime."""
    import os

    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "from drill.cli import main; main()", "quiz", "-n", "1", "--cram"],
        input="", capture_output=True, text=True, timeout=120, env={**os.environ, "DRILL_HOME": home},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}


def test_quiz_start_skips_pydantic_and_warm_start_skips_yaml(tmp_path) -> None:
    # Typer's own option coercion would import pydantic (~80 ms); drill's plain one must not.
    cold = _imports_of_quiz_start(str(tmp_path))
    assert "pydantic" not in cold and "torch" not in cold
    assert "yaml" in cold  # the first start parses the bank...
    warm = _imports_of_quiz_start(str(tmp_path))
    assert "yaml" not in warm  # ...later ones start from the parse cache


def test_plain_option_coercion_still_rejects_bad_values() -> None:
    cases = [
        (["quiz", "-n", "abc"], "'abc' is not an integer"),
        (["quiz", "-n", "0"], "must be >= 1"),
        (["quiz", "--retention", "x"], "'x' is not a number"),
        (["mock", "--minutes", "soon"], "'soon' is not a number"),
    ]
    for args, message in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert message in " ".join(result.output.split()), (args, result.output)


# --- help: flags show no value placeholder ---------------------------------------


def _option_rows(command_name: str | None) -> tuple[list, str]:
    """(options of the command, its --help text rendered 200 columns wide)."""
    import typer.main

    root = typer.main.get_command(app)
    command = root if command_name is None else root.commands[command_name]  # type: ignore[attr-defined]
    args = ["--help"] if command_name is None else [command_name, "--help"]
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return [p for p in command.params if p.param_type_name == "option"], result.output


def test_help_shows_a_type_for_value_options_and_none_for_flags() -> None:
    import re

    checked_flags = 0
    for name in [None, *COMMANDS, "exercises", "hint"]:
        options, text = _option_rows(name)
        assert "<bool>" not in text, (name, text)
        for option in options:
            first = option.opts[0]
            # the row that starts with the option (its name may recur in other options' help)
            pattern = rf"\S?\s*(\*\s+)?{re.escape(first)}[\s,]"
            line = next((ln for ln in text.splitlines() if re.match(pattern, ln)), None)
            assert line is not None, (name, first, text)
            # the option's own names, then (for a value option) its type in angle brackets or its metavar
            placeholder = re.escape(option.metavar) if option.metavar else "<"
            shows_type = re.search(rf"{re.escape(first)}([\s,]+-{{1,2}}[\w-]+)*\s+{placeholder}", line) is not None
            assert shows_type is not option.is_flag, (name, first, line)
            checked_flags += option.is_flag
    assert checked_flags >= 10  # --help everywhere, --cram/--due, --json, --watch, ...


def test_bare_drill_shows_the_help_and_exits_0() -> None:
    """Typing `drill` alone is how a new user asks what it does: the command list, exit 0
    (Typer's no_args_is_help exits 2, a usage error), through the app and the console script."""
    result = runner.invoke(app, [])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output and all(name in result.output for name in ("quiz", "check", "mock", "bench"))
    proc = subprocess.run([sys.executable, "-c", "from drill.cli import main; main()"], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "COLUMNS": "100"})
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "Commands" in proc.stdout and "mock" in proc.stdout


def test_every_area_has_the_same_shape() -> None:
    """Each area's commands live in <area>/commands.py as a module-level Typer of module-level functions,
    and a group in an area (`drill server`, `drill export`) is a Typer of the same shape; none registers
    through a closure, and drill.cli adds each area's `app` and nothing else."""
    import importlib
    import inspect

    from drill import cli

    areas = ("quiz", "judge", "mock", "bench")
    assert cli.AREA_MODULES == tuple(f"drill.{a}.commands" for a in areas)
    modules = [importlib.import_module(m) for m in cli.AREA_MODULES]
    assert [g.typer_instance for g in cli.app.registered_groups] == [m.app for m in modules]
    assert not hasattr(cli, "_add_area")
    groups = {}
    for area in areas:
        module = importlib.import_module(f"drill.{area}.commands")
        assert isinstance(module.app, typer.Typer) and not hasattr(module, "register"), area
        typers = [(module.app, module.__name__)]
        while typers:
            commands, where = typers.pop()
            for command in commands.registered_commands:
                fn = command.callback
                assert fn.__module__ == where and fn.__qualname__ == fn.__name__, (area, fn.__qualname__)
                # every option and argument is declared in the annotation, none as a default value
                for param in inspect.signature(fn).parameters.values():
                    assert "Annotated[" in str(param.annotation), (area, fn.__name__, param.name)
            for group in commands.registered_groups:
                # a module-level Typer of the module that holds its commands (its own module, or the area's)
                sub = importlib.import_module(group.typer_instance.registered_commands[0].callback.__module__)
                assert group.typer_instance in vars(sub).values(), group.name
                assert sub.__name__.startswith(f"drill.{area}.") and not hasattr(sub, "register"), sub.__name__
                groups[group.name] = area
                typers.append((group.typer_instance, sub.__name__))
    assert groups == {"export": "quiz", "server": "judge"}


def test_server_commands_are_reachable_from_drill() -> None:
    """`drill server start|stop|status` belong to the judge area and keep working through the root app."""
    result = runner.invoke(app, ["server", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert all(name in result.output for name in ("start", "stop", "status"))
    for name in ("start", "stop", "status"):
        result = runner.invoke(app, ["server", name, "--help"])
        assert result.exit_code == 0, (name, result.output)
    result = runner.invoke(app, ["--help"], env={"COLUMNS": "200"})
    rows = [ln for ln in result.output.splitlines() if ln.startswith("│ ") and not ln.startswith("│ --")]
    listed = [ln.split()[1] for ln in rows]
    assert listed == ["quiz", "validate", "stats", "optimize", "export", "check", "start", "exercises", "hint",
                      "train", "server", "mock", "bench"], result.output


def test_a_quiz_area_command_starts_without_the_other_areas() -> None:
    """`drill quiz` (and validate, stats, optimize, export) builds an app of the quiz area alone: the other
    areas' commands and imports were a third of its start-up (issue 28); anything else gets the whole app."""
    probe = ("import sys; from drill.cli import app_for, quiz_area_commands; "
             "print(sorted(quiz_area_commands())); app = app_for(sys.argv[1:]); "
             "print(len(app.registered_groups), any(m.startswith(('drill.judge', 'drill.bench', 'drill.mock')) "
             "for m in sys.modules))")
    for argv, groups, others in ((["quiz", "-n", "1"], 1, False), (["export", "reviews"], 1, False),
                                 (["check", "x.py"], 4, True), (["--help"], 4, True), (["quz"], 4, True)):
        out = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=60)
        names, built = out.stdout.strip().splitlines()
        assert names == "['export', 'optimize', 'quiz', 'stats', 'validate']", names
        assert built == f"{groups} {others}", (argv, built)
