"""The `drill` command line: a thin Typer shell over plain functions.

Each area keeps its commands in its own `commands.py` (drill/quiz, drill/judge,
drill/mock, drill/bench), so this file only assembles them; see `AREA_MODULES` and `app_for`.
Nothing imported here may import torch: `drill quiz` must start as fast as the
interpreter does.
"""

from __future__ import annotations

import sys
from typing import Annotated, NoReturn

import typer

from drill import __version__
from drill.cliutil import EXIT_BROKEN_PIPE, EXIT_USAGE, err_console, install_fast_coercion, install_flag_help
from drill.quiz import commands as quiz_commands

install_fast_coercion()
install_flag_help()


def _version(value: bool) -> None:
    if value:
        typer.echo(f"drill {__version__}")
        raise typer.Exit()


def _root(
    ctx: typer.Context,
    version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    """drill — interview practice for transformer internals."""
    if ctx.invoked_subcommand is None:
        _show_help(ctx)


def _show_help(ctx: typer.Context) -> NoReturn:
    """Bare `drill` (or a command whose Typer shows help when given nothing) prints the help and exits 0.

    Why 0: typing the program's name alone is how a new user asks what it does.
    Typer's `no_args_is_help` exits 2 instead (the Click it vendors raises NoArgsIsHelpError,
    a UsageError, for it since pallets/click#1489), which reads as "you did it wrong".
    """
    text = ctx.get_help()  # Typer's rich help prints itself and returns ""
    if text:
        typer.echo(text)
    raise typer.Exit(0)


# The one shape of an area: `<area>/commands.py` holds a module-level `app = typer.Typer()` whose
# commands are module-level functions taking `Annotated` options (a group such as `drill server` or
# `drill export` is a Typer of the same shape, added to its area's app by name); add_typer without a
# name merges each area into this app as top-level commands, in this order: it is the order of `drill --help`.
AREA_MODULES = ("drill.quiz.commands", "drill.judge.commands", "drill.mock.commands", "drill.bench.commands")


def build_app(areas: tuple[str, ...] = AREA_MODULES, only: str | None = None) -> typer.Typer:
    """The `drill` app made of `areas` (module names, each with a Typer `app` of its commands);
    with `only`, of that one top-level command (or group) of theirs."""
    import importlib

    built = typer.Typer(
        name="drill",
        help="Practice transformer internals for ML-engineering interviews: quiz, graded exercises, mock interviews.",
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode="rich",
    )
    built.callback(invoke_without_command=True)(_root)
    for name in areas:
        area = importlib.import_module(name).app
        if only is not None:
            area = _one_command(area, only)
        built.add_typer(area)
    return built


def _one_command(area: typer.Typer, name: str) -> typer.Typer:
    """A Typer holding only the command or group `name` of `area`: Typer builds the Click command of
    every registered one, signature and annotations, before it runs any."""
    one = typer.Typer()
    one.registered_commands = [c for c in area.registered_commands if _command_name(c) == name]
    one.registered_groups = [g for g in area.registered_groups if g.name == name]
    return one


def _command_name(info: typer.models.CommandInfo) -> str:
    return info.name or info.callback.__name__.replace("_", "-")  # type: ignore[union-attr]


def quiz_area_commands() -> frozenset[str]:
    """The top-level names the quiz area defines (quiz, validate, stats, optimize, export)."""
    names = {_command_name(c) for c in quiz_commands.app.registered_commands}
    return frozenset(names | {g.name for g in quiz_commands.app.registered_groups if g.name})


def app_for(argv: list[str]) -> typer.Typer:
    """The app a command line needs. A quiz-area command gets an app of that command alone: Typer builds
    the Click command of every registered command before it runs one (their signatures, annotations
    evaluated), and the other commands and areas were a third of `drill quiz`'s start-up (issue 28).
    Anything else (`drill --help`, a mistyped command, the other areas) gets the whole app."""
    if argv and argv[0] in quiz_area_commands():
        return build_app(AREA_MODULES[:1], only=argv[0])
    return _full_app()


_FULL: list[typer.Typer] = []


def _full_app() -> typer.Typer:
    if not _FULL:
        _FULL.append(build_app())
    return _FULL[0]


def __getattr__(name: str) -> typer.Typer:
    """`drill.cli.app`, the whole app (tests, `typer.testing.CliRunner`), built on first use."""
    if name == "app":
        return _full_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Console-script entry point.

    Runs Typer in non-standalone mode so that usage errors (a mistyped flag or
    command, a bad value) come out as ONE line on stderr with exit code 2, as
    every other drill error does, instead of a multi-line box. Before that it
    makes the standard streams safe to use: a closed stdin/stdout/stderr is
    replaced by /dev/null (otherwise the next file drill opens — the progress
    store — would take its descriptor), and output that the terminal's encoding
    cannot show (`✓` under a Latin-1 locale) is replaced instead of crashing
    mid-question. A reader that stops early (`drill stats | head -1`) ends
    drill quietly with EXIT_BROKEN_PIPE; see `_exit_on_broken_pipe`.
    """
    _reopen_closed_std_streams()
    _tolerate_unencodable_output()
    _route_rich_broken_pipes()
    try:
        code = _run()
        sys.stdout.flush()  # buffered output meets a closed pipe here, not at interpreter exit
    except (BrokenPipeError, _StdoutGone):
        _exit_on_broken_pipe()
    except SystemExit as exc:
        if exc.code == 1 and _typer_saw_broken_pipe():
            _exit_on_broken_pipe()
        raise
    sys.exit(code)


def _run() -> int:
    """Run the app; return its exit code (or exit with drill's code for a usage error)."""
    try:  # Typer >= 0.2x vendors Click; older ones use the click package
        from typer._click.exceptions import ClickException, UsageError
    except ImportError:
        from click.exceptions import ClickException, UsageError
    Abort = typer.Abort

    try:
        code = app_for(sys.argv[1:])(standalone_mode=False)
    except UsageError as exc:
        if exc.__class__.__name__ == "NoArgsIsHelpError" and exc.ctx is not None:
            _show_help(exc.ctx)
        hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
        _one_line_error(exc.format_message() + hint)
        sys.exit(EXIT_USAGE)
    except ClickException as exc:
        _one_line_error(exc.format_message())
        sys.exit(exc.exit_code)
    except (KeyboardInterrupt, Abort):
        sys.stderr.write("\ninterrupted\n")
        sys.exit(130)
    return code if isinstance(code, int) else 0


class _StdoutGone(SystemExit):
    """Raised from Rich when stdout's reader has gone; a SystemExit so no `except OSError`
    in a command swallows it and carries on printing into the void."""


def _route_rich_broken_pipes() -> None:
    """Rich answers a broken pipe by exiting 1 (Console.on_broken_pipe, its documented
    hook), indistinguishable from a failed check; make it raise _StdoutGone instead."""
    from rich.console import Console

    if not hasattr(Console, "on_broken_pipe"):  # an older Rich: BrokenPipeError propagates
        return

    def on_broken_pipe(self: Console) -> None:
        self.quiet = True
        raise _StdoutGone(EXIT_BROKEN_PIPE)

    Console.on_broken_pipe = on_broken_pipe  # type: ignore[method-assign]


def _typer_saw_broken_pipe() -> bool:
    """Typer/Click answer EPIPE themselves: they wrap stdout in PacifyFlushWrapper and exit 1.

    That exit 1 would read as "your check failed"; the wrapper tells it apart."""
    return type(sys.stdout).__name__ == "PacifyFlushWrapper"


def _exit_on_broken_pipe() -> NoReturn:
    """Stop quietly because whoever read stdout (head, a pager) has gone.

    Exit code EXIT_BROKEN_PIPE (141 = 128 + SIGPIPE, what `cat` or `seq` give
    under `| head`), not 0: the command was cut short, and `drill check ... |
    head` must never read as a pass under `set -o pipefail`. stdout is pointed
    at /dev/null first, as the Python docs' note on SIGPIPE recommends, so the
    interpreter's final flush does not print "Exception ignored ... BrokenPipeError".
    Python's SIGPIPE stays ignored on purpose: the grader talks to its child
    process over pipes and must see a dead child as an error, not die of it.
    """
    import os

    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError):
        pass
    sys.exit(EXIT_BROKEN_PIPE)


def _one_line_error(message: str) -> None:
    from rich.markup import escape

    err_console.print(f"[bold red]error:[/] {escape(' '.join(message.split()))}", soft_wrap=True)


def _reopen_closed_std_streams() -> None:
    import io
    import os

    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:  # lowest free descriptor: it is `fd` when `fd` was the closed one
            os.dup2(null, fd)
            os.close(null)
        setattr(sys, name, io.TextIOWrapper(io.FileIO(fd, mode, closefd=False), encoding="utf-8", errors="replace"))


def _tolerate_unencodable_output() -> None:
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        if encoding != "utf8" and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="replace")
            except (ValueError, OSError):
                pass


if __name__ == "__main__":
    main()
