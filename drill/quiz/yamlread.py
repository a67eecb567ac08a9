"""Reading YAML safely while remembering which line every mapping and key came from.

Why a custom loader: error messages must say `file:line`, and plain
`yaml.safe_load` forgets positions. This SafeLoader subclass (the C-accelerated
one when libyaml is present, for start-up speed) builds `LineDict`s that carry
the line of the mapping and of each key, and records duplicate keys, which
YAML itself would silently overwrite (a second `prompt:` must be an error).
Only the safe constructors are registered: no Python objects, ever.

A bank is untrusted input (downloaded, shared), so reading one is bounded:
regular files only (not /dev/zero, a FIFO or a folder), at most
MAX_FILE_BYTES each, no anchors or aliases (747 bytes of nested aliases
expand to gigabytes), nesting at most MAX_DEPTH deep, and only plain data:
text, numbers (integers of at most MAX_INT_DIGITS digits), true/false, null,
lists and mappings; control characters in text are escaped
(drill/terminal_text.py). Dates are text (`2024-13-45` is not a broken
timestamp but a string), and every other tag is refused. Whatever goes wrong is a
YamlSyntaxError with the line, never a traceback.

PyYAML itself is imported on the first parse, not with this module: a quiz
that starts from the bank cache (every start but the first) never needs it.
"""

from __future__ import annotations

import os
import re
import stat
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drill.terminal_text import escape_controls

if TYPE_CHECKING:
    import yaml


class LineDict(dict):
    """A YAML mapping plus its source lines (1-based)."""

    line: int = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.key_lines: dict[Any, int] = {}
        self.duplicates: list[tuple[Any, int]] = []

    def line_of(self, key: str) -> int:
        """Line of `key` if present, else of the mapping itself."""
        return self.key_lines.get(key, self.line)


MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_INT_DIGITS = 30
_PLAIN_TAGS = frozenset(f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null", "seq", "map"))
_TIMESTAMP = "tag:yaml.org,2002:timestamp"


class _Refused(Exception):
    """Raised inside the loader; read_yaml turns it into a YamlSyntaxError at `line`."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


def _line(node: Any) -> int:
    mark = getattr(node, "start_mark", None)
    return mark.line + 1 if mark is not None else 0


def _construct_mapping(loader: Any, node: yaml.MappingNode) -> Any:
    import yaml

    if not isinstance(node, yaml.MappingNode):
        raise _Refused(_line(node), "a !!map tag on something that is not a mapping; remove the tag")
    data = LineDict()
    data.line = node.start_mark.line + 1
    yield data
    loader.flatten_mapping(node)
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            key = repr(key)
        line = key_node.start_mark.line + 1
        if key in data:
            data.duplicates.append((key, line))
        data[key] = loader.construct_object(value_node, deep=True)
        data.key_lines[key] = line


def _construct_int(loader: Any, node: Any) -> int:
    text = str(node.value)
    if sum(c.isdigit() for c in text) > MAX_INT_DIGITS:
        raise _Refused(_line(node), f"an integer with more than {MAX_INT_DIGITS} digits; write a large number as e.g. "
                                    "1.5e+24")
    try:
        return loader.construct_yaml_int(node)
    except (ValueError, TypeError):
        raise _Refused(_line(node),
                       f"{text[:40]!r} is not a whole number; remove the !!int tag or fix the number") from None


def _construct_str(loader: Any, node: Any) -> str:
    """Bank text reaches the terminal (quiz, mock, stats): control characters and invisible marks are kept
    escaped (drill/terminal_text.py), so a shared bank cannot clear the screen or plant an OSC 8 link."""
    return escape_controls(loader.construct_yaml_str(node))


def _checked(constructor_name: str, what: str):  # type: ignore[no-untyped-def]
    """A SafeConstructor scalar constructor whose ValueError/KeyError becomes a message at the line."""

    def construct(loader: Any, node: Any) -> Any:
        try:
            return getattr(loader, constructor_name)(node)
        except (ValueError, TypeError, KeyError):
            raise _Refused(_line(node),
                           f"{str(node.value)[:40]!r} is not {what}; remove the tag or fix the value") from None

    return construct


def _refuse_tag(loader: Any, node: Any) -> Any:
    tag = str(node.tag).replace("tag:yaml.org,2002:", "!!")
    raise _Refused(_line(node), f"the tag {tag} is not allowed in a question bank (plain data only: text, numbers, "
                                "true/false, lists, mappings); remove it")


@lru_cache(maxsize=1)
def _line_loader() -> type:
    """The SafeLoader subclass (C-accelerated when libyaml is present) that builds LineDicts:
    plain data only, dates left as text."""
    import yaml

    base: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    resolvers = {first: [(tag, regexp) for tag, regexp in items if tag != _TIMESTAMP]
                 for first, items in base.yaml_implicit_resolvers.items()}
    loader = type("_LineLoader", (base,), {"yaml_implicit_resolvers": resolvers})
    loader.yaml_constructors = {}  # start from nothing: only what is listed here exists
    loader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)
    loader.add_constructor("tag:yaml.org,2002:seq", base.construct_yaml_seq)
    loader.add_constructor("tag:yaml.org,2002:str", _construct_str)
    loader.add_constructor("tag:yaml.org,2002:null", base.construct_yaml_null)
    loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
    loader.add_constructor("tag:yaml.org,2002:float", _checked("construct_yaml_float", "a number"))
    loader.add_constructor("tag:yaml.org,2002:bool", _checked("construct_yaml_bool", "true or false"))
    loader.add_constructor(None, _refuse_tag)
    return loader


def _read_bounded(path: Path) -> bytes:
    """The bytes of a regular file of at most MAX_FILE_BYTES; never blocks on a FIFO or
    reads a device forever."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise YamlSyntaxError(0, f"cannot read the file: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        raise YamlSyntaxError(0, f"cannot read the file: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        what = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a device" if (
            stat.S_ISCHR(mode) or stat.S_ISBLK(mode)) else "a socket" if stat.S_ISSOCK(mode) else "not a file"
        raise YamlSyntaxError(0, f"not a regular file ({what}); a bank is made of .yaml files")
    with os.fdopen(fd, "rb") as handle:
        try:
            data = handle.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise YamlSyntaxError(0, f"cannot read the file: {exc.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise YamlSyntaxError(0, f"the file is larger than {MAX_FILE_BYTES // 1024} KiB; split it into topic files")
    return data


def _check_events(text: str, loader_class: type) -> None:
    """Refuse anchors, aliases and deep nesting while streaming parse events, before
    anything is built (an alias bomb is refused at its first anchor, in constant memory)."""
    import yaml

    depth = 0
    loader = loader_class(text)
    try:
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                name = getattr(event, "anchor", "") or ""
                raise YamlSyntaxError(_line(event), f"anchors and aliases (&{name}, *{name}) are not allowed in a "
                                                    "question bank; write the value out")
            if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise YamlSyntaxError(_line(event), f"nested more than {MAX_DEPTH} levels deep; flatten it")
            elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                depth -= 1
    finally:
        loader.dispose()


class YamlSyntaxError(Exception):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


def read_yaml(path: Path) -> Any:
    """Parse one YAML file into plain data with LineDicts; raise YamlSyntaxError with a line."""
    text = _read_bounded(path)
    try:
        text_str = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YamlSyntaxError(0, f"not UTF-8 text (byte {exc.start}); save the file as UTF-8") from None
    import yaml

    try:
        _check_events(text_str, _line_loader())
        return yaml.load(text_str, Loader=_line_loader())  # noqa: S506 - a SafeLoader subclass
    except _Refused as exc:
        raise YamlSyntaxError(exc.line, exc.message) from None
    except yaml.constructor.ConstructorError as exc:  # e.g. !!seq on a scalar
        line = exc.problem_mark.line + 1 if exc.problem_mark is not None else 0
        raise YamlSyntaxError(
            line, f"{exc.problem or 'a value YAML cannot build'}; keep to plain data (remove the tag)") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        if exc.context_mark is not None and "quoted scalar" in (exc.context or ""):
            # The scanner notices an unclosed quote only where the file (or the next quote)
            # ends: point at the line where the quote was opened.
            line = exc.context_mark.line + 1
            rows, col = text_str.splitlines(), exc.context_mark.column
            quote = rows[exc.context_mark.line][col : col + 1] if exc.context_mark.line < len(rows) else '"'
            where = ("before the end of the file" if "end of stream" in (exc.problem or "")
                     else f"({exc.problem} on line {mark.line + 1 if mark else '?'})")
            raise YamlSyntaxError(line, f"the {quote} quote opened on this line is never closed {where}; add the "
                                        f"closing {quote}") from None
        line = mark.line + 1 if mark is not None else 0
        what = " ".join(p for p in (exc.context, exc.problem) if p)
        lines = text_str.splitlines()
        if 0 < line <= len(lines) and "\t" in lines[line - 1][: mark.column + 1 if mark is not None else None]:
            raise YamlSyntaxError(line, "a tab character where YAML needs spaces; indent with spaces only") from None
        started = ""
        if exc.context_mark is not None and exc.context_mark.line + 1 != line:  # e.g. a [ never closed
            construct = re.sub(r"^while (parsing|scanning) (an? )?", "", exc.context or "") or "construct"
            started = f" (the {construct} starts on line {exc.context_mark.line + 1})"
        raise YamlSyntaxError(line, f"YAML syntax error: {what}{started}; check indentation and quoting") from None
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(0, f"YAML error: {exc}") from None
    except (ValueError, TypeError, KeyError, RecursionError, MemoryError) as exc:  # a constructor we did not foresee
        raise YamlSyntaxError(0, f"cannot read this YAML ({type(exc).__name__}); keep to plain text, numbers, lists "
                                 "and mappings") from None
