"""Reading YAML safely while remembering which line every mapping and key came from.

Why a custom loader: error messages must say `file:line`, and plain
`yaml.safe_load` forgets positions. This SafeLoader subclass (the C-accelerated
one when libyaml is present, for start-up speed) builds `LineDict`s that carry
the line of the mapping and of each key, and records duplicate keys, which
YAML itself would silently overwrite (a second `prompt:` must be an error).
Only the safe constructors are registered: no Python objects, ever.

PyYAML itself is imported on the first parse, not with this module: a quiz
that starts from the parse cache (every start but the first) never needs it.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

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


def _construct_mapping(loader: Any, node: yaml.MappingNode) -> Any:
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


@lru_cache(maxsize=1)
def _line_loader() -> type:
    """The SafeLoader subclass (C-accelerated when libyaml is present) that builds LineDicts."""
    import yaml

    base: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    loader = type("_LineLoader", (base,), {})
    loader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)
    return loader


class YamlSyntaxError(Exception):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


def read_yaml(path: Path) -> Any:
    """Parse one YAML file into plain data with LineDicts; raise YamlSyntaxError with a line."""
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise YamlSyntaxError(0, f"cannot read the file: {exc.strerror}") from None
    try:
        text_str = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YamlSyntaxError(0, f"not UTF-8 text (byte {exc.start}); save the file as UTF-8") from None
    import yaml

    try:
        return yaml.load(text_str, Loader=_line_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.constructor.ConstructorError as exc:
        # Only the safe constructors exist, so an unknown tag is the one way to get here:
        # !!python/object is an attempt to run code, not a typo in indentation.
        line = exc.problem_mark.line + 1 if exc.problem_mark is not None else 0
        tag = re.search(r"tag '([^']*)'", exc.problem or "")
        shown = tag.group(1).replace("tag:yaml.org,2002:", "!!") if tag else "this tag"
        raise YamlSyntaxError(line, f"tags like !!python/... are not allowed in a question bank (plain data only): remove {shown}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        if exc.context_mark is not None and "quoted scalar" in (exc.context or ""):
            # The scanner notices an unclosed quote only where the file (or the next quote)
            # ends: point at the line where the quote was opened.
            line = exc.context_mark.line + 1
            quote = text_str.splitlines()[exc.context_mark.line][exc.context_mark.column : exc.context_mark.column + 1] if exc.context_mark.line < len(text_str.splitlines()) else '"'
            where = "before the end of the file" if "end of stream" in (exc.problem or "") else f"({exc.problem} on line {mark.line + 1 if mark else '?'})"
            raise YamlSyntaxError(line, f"the {quote} quote opened on this line is never closed {where}; add the closing {quote}") from None
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


# --- a marshal-friendly form for the parsed-bank cache ------------------------
# A LineDict becomes a tuple (line, [(key, key_line, value), ...]); the loader
# never produces tuples otherwise, so the round trip is unambiguous.


def freeze(value: Any) -> Any:
    if isinstance(value, LineDict):
        return (value.line, [(k, value.key_lines.get(k, value.line), freeze(v)) for k, v in value.items()])
    if isinstance(value, list):
        return [freeze(v) for v in value]
    return value


def thaw(value: Any) -> Any:
    if isinstance(value, tuple):
        line, items = value
        data = LineDict()
        data.line = int(line)
        for key, key_line, item in items:
            data[key] = thaw(item)
            data.key_lines[key] = int(key_line)
        return data
    if isinstance(value, list):
        return [thaw(v) for v in value]
    return value
