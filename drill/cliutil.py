"""Small helpers every command module shares: error output and exit codes.

Exit codes across drill: 0 success, 1 the learner's work failed (a check that
did not pass), 2 usage or input error (bad flag, missing file, bad YAML,
unreadable store), 141 stdout closed early by a pager or `head` (quietly).
Messages for exit 2 are one line, saying what and where.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console

from drill.errors import UserError

EXIT_FAIL = 1
EXIT_USAGE = 2
# The reader of stdout went away (`drill stats | head -1`): 128 + SIGPIPE, as cat or seq exit.
EXIT_BROKEN_PIPE = 141

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


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


# --- help: flags take no value -------------------------------------------------


def install_flag_help() -> None:
    """Show boolean flags (`--cram/--due`, `--json`, `--help`) without a `<bool>` placeholder.

    Why: Typer 0.29's Rich help panel prints every option's type column from
    `TyperOption.display_type_rich`, which does not skip flags (its plain-text
    `get_help_record` does), so `drill quiz --help` read `--cram --due <bool>`
    as if the flag took a value. Flags and counters get no type column, as in
    Click and earlier Typers; options that take a value are unchanged. A Typer
    without this method (older or newer) is left alone.
    """
    try:
        from typer.core import TyperOption
    except ImportError:
        return
    original = getattr(TyperOption, "display_type_rich", None)
    if original is None or getattr(original, "drill_flag_help", False):
        return

    def display_type_rich(self: Any, ctx: Any) -> Any:
        takes_no_value = getattr(self, "is_flag", False) or getattr(self, "count", False)
        if getattr(self, "metavar", None) is None and takes_no_value:
            return None
        return original(self, ctx)

    display_type_rich.drill_flag_help = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


# --- start-up: option values without pydantic -----------------------------------


def install_fast_coercion() -> None:
    """Coerce drill's plain option types (str, int, float, bool, Path, lists of them) without pydantic.

    Why: Typer 0.2x checks every non-flag option value through a pydantic
    TypeAdapter, and importing pydantic and building the adapters costs about
    80 ms on every start — more than `drill quiz` needs to load its bank and
    show the first question. The checks drill relies on (a number that parses,
    min/max, a path) are a few lines of plain Python. Anything else, and any
    Typer without this hook, keeps Typer's own coercion; errors are Typer's
    BadParameter, so messages and exit code 2 stay as they were.
    """
    try:  # _coerce_one imports the last two again, lazily
        from typer import _coercion, _param_types, core  # noqa: F401
        from typer._click.exceptions import BadParameter  # noqa: F401
    except ImportError:  # an older Typer: click coercion, no pydantic to avoid
        return
    original = getattr(core, "build_runtime_param", None)
    base = getattr(_coercion, "RuntimeParam", None)
    if original is None or base is None or getattr(original, "drill_fast", False):
        return
    plain_param = _plain_runtime_param(base)

    def build(descriptor: Any) -> Any:
        kind = _plain_kind(descriptor)
        if kind is None:
            return original(descriptor)
        return plain_param(parameter_info=descriptor.parameter_info, annotation=descriptor.annotation, kind=kind)

    build.drill_fast = True  # type: ignore[attr-defined]
    core.build_runtime_param = build


_SCALARS = (str, int, float, bool, Path)
_TRUTH = {"1": True, "true": True, "t": True, "yes": True, "y": True, "on": True,
          "0": False, "false": False, "f": False, "no": False, "n": False, "off": False}


def _plain_kind(descriptor: Any) -> type | None:
    """The scalar type drill coerces itself for this parameter, or None to leave it to Typer."""
    from typing import get_args, get_origin

    info = descriptor.parameter_info
    if descriptor.file_annotation is not None or getattr(info, "parser", None) is not None:
        return None
    if getattr(info, "path_type", None) is not None:
        return None
    annotation = descriptor.annotation
    if get_origin(annotation) is list:
        args = get_args(annotation)
        return args[0] if len(args) == 1 and args[0] in _SCALARS else None
    return annotation if annotation in _SCALARS else None


def _plain_runtime_param(base: type) -> type:
    """Typer's RuntimeParam for one scalar kind, coerced by `_coerce_one` (a subclass made at run time:
    the base class lives in Typer's private module and may be absent)."""
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class PlainRuntimeParam(base):  # type: ignore[misc, valid-type]
        """A scalar option's runtime parameter, coerced without Typer's per-call type analysis."""

        kind: type = str

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            if isinstance(value, (list, tuple)):
                return [_coerce_one(self.kind, item, self.parameter_info, param, ctx) for item in value]
            return _coerce_one(self.kind, value, self.parameter_info, param, ctx)

    return PlainRuntimeParam


def _coerce_one(kind: type, value: Any, info: Any, param: Any, ctx: Any) -> Any:
    """One option value as `kind`; BadParameter (Typer's, so exit 2 and its message shape) when it is not one."""
    from typer import _param_types
    from typer._click.exceptions import BadParameter

    if kind is Path:
        path = value if isinstance(value, Path) else Path(value)
        return _param_types.coerce_cli_path(path, info, path_type=Path, param=param, ctx=ctx)
    if kind is str:
        return value if isinstance(value, str) else str(value)
    if kind is bool:
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower()
        if word not in _TRUTH:
            raise BadParameter(f"{value!r} is not a valid boolean.", ctx=ctx, param=param)
        return _TRUTH[word]
    if isinstance(value, bool):
        raise BadParameter(f"{value!r} is not a valid {kind.__name__}.", ctx=ctx, param=param)
    try:
        number = kind(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        what = "an integer" if kind is int else "a number"
        raise BadParameter(f"{value!r} is not {what}.", ctx=ctx, param=param) from None
    if kind is float and number != number:
        raise BadParameter(f"{value!r} is not a number.", ctx=ctx, param=param)
    return _in_range(number, value, info, param, ctx)


def _in_range(number: Any, value: Any, info: Any, param: Any, ctx: Any) -> Any:
    """Apply the option's min/max: clamp when it says so, else BadParameter outside them."""
    from typer._click.exceptions import BadParameter

    low, high = info.min, info.max
    if info.clamp:
        number = max(number, low) if low is not None else number
        return min(number, high) if high is not None else number
    if (low is not None and number < low) or (high is not None and number > high):
        bounds = " and ".join(b for b in (f">= {low}" if low is not None else "",
                                          f"<= {high}" if high is not None else "") if b)
        raise BadParameter(f"{value} is out of range: it must be {bounds}.", ctx=ctx, param=param)
    return number
