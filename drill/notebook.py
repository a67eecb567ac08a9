"""The IPython magics `%load_ext drill` adds: `%%drill`, `%drill_hint`, `%drill_start`.

`%%drill EXERCISE [--seed N] ...` grades the cell's text as the file `<exercise>.py` (drill.api.check_source):
the cell must be self-contained, like a file, because that is what `drill check` grades; names from
earlier cells do not travel, and the cell is not run in the kernel (its code runs only in the sandboxed
child). `%drill_start EXERCISE` puts the starter, under a `%%drill EXERCISE` line, in a new cell;
`%drill_hint EXERCISE [N]` shows one more hint, counted in the progress store as `drill hint` counts it.

IPython is imported only by IPython itself (this module is loaded by `%load_ext drill`): the magics are
plain functions registered on the shell, so drill needs no IPython at run time.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from drill.errors import UserError

CELL_USAGE = "%%drill EXERCISE [--seed N] [--strict] [--in-model] [--verbose] [--device D] [--timeout S] " \
             "[--no-record] [--no-server]"


def load_ipython_extension(ipython: Any) -> None:
    """Register the three magics on the shell (what `%load_ext drill` calls)."""

    def drill_start(line: str) -> None:
        ipython.set_next_input(start_cell(line), replace=False)

    ipython.register_magic_function(drill_cell, "cell", "drill")
    ipython.register_magic_function(drill_hint, "line", "drill_hint")
    ipython.register_magic_function(drill_start, "line", "drill_start")


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad magic line as a UserError (one line) instead of exiting the kernel."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(f"{message}; usage: {self.usage}")


def _cell_parser() -> _Parser:
    p = _Parser(prog="%%drill", usage=CELL_USAGE, add_help=False)
    p.add_argument("exercise")
    p.add_argument("--seed", type=int)
    p.add_argument("--strict", action="store_true")
    p.add_argument("--in-model", action="store_true")
    p.add_argument("--verbose", "-v", action="store_true")
    p.add_argument("--device")
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--no-record", action="store_true")
    p.add_argument("--no-server", action="store_true")
    return p


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError as exc:  # an unclosed quote
        raise UserError(f"cannot read the magic's line: {exc}") from None


def drill_cell(line: str, cell: str) -> Any:
    """`%%drill EXERCISE ...`: the cell graded as a file; the result (the CLI's panel) is the cell's output."""
    from drill.api import check_source

    args = _cell_parser().parse_args(_split(line))
    # An empty first line stands for the magic's: line N of a message is line N of the cell as shown.
    result = check_source(args.exercise, "\n" + cell, label="<cell>", seed=args.seed, strict=args.strict,
                          in_model=args.in_model, device=args.device, timeout=args.timeout,
                          record=not args.no_record, use_server=False if args.no_server else None)
    result.verbose = args.verbose
    return result


def start_cell(line: str) -> str:
    """The text of the new cell `%drill_start EXERCISE` makes: `%%drill EXERCISE` over the starter file."""
    from drill.api import starter

    words = _split(line)
    if len(words) != 1:
        raise UserError("usage: %drill_start EXERCISE (see `drill exercises`)")
    name, text = starter(words[0])
    return f"%%drill {name}\n{text}"


def drill_hint(line: str) -> None:
    """`%drill_hint EXERCISE [N]`: hints 1..N, by default one more than seen (as `drill hint`)."""
    from rich.console import Console, Group
    from rich.text import Text

    from drill.api import hints

    words = _split(line)
    if not 1 <= len(words) <= 2 or (len(words) == 2 and not words[1].isdigit()):
        raise UserError("usage: %drill_hint EXERCISE [N]")
    shown, total, name = hints(words[0], int(words[1]) if len(words) == 2 else None)
    lines = [Text.assemble((f"Hint {i}/{total}", "bold"), ": ", text) for i, text in enumerate(shown, 1)]
    more = len(shown) < total
    lines.append(Text(f"next: %drill_hint {name} (hint {len(shown) + 1} of {total})" if more else
                      "that was the last hint", style="dim"))
    Console(highlight=False).print(Group(*lines))  # one output in Jupyter
