"""Reading a learner's file the way Python reads it, and echoing its lines briefly.

Why: `python attention.py` accepts a UTF-8 BOM and a PEP 263 coding line
(`# -*- coding: latin-1 -*-`); a grader that decodes plain UTF-8 fails such a
correct file as a "syntax error" (U+FEFF) or refuses it outright. Every place
the grader reads the learner's source goes through `read_source` (the child,
which may not import drill, uses `tokenize.open`, the same decoder).

Stdlib only, no torch: `drill check` calls this before anything heavy starts.
"""

from __future__ import annotations

import ast
import io
import re
import threading
import tokenize
from pathlib import Path

from drill.errors import UserError

ECHO_WIDTH = 120  # longest learner source line echoed in a message
_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")


def read_source(path: Path) -> str:
    """The text of `path`, decoded like the interpreter does (BOM, coding cookie, else UTF-8).

    A file that cannot be decoded raises UserError at `file:line` (the first
    undecodable line, or the line of a bad coding declaration), so the CLI
    prints one line and exits 2 instead of misreporting a syntax error.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read the file: {exc.strerror or exc}", str(path)) from exc
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:  # unknown codec, BOM contradicting the cookie, undecodable first lines
        raise _declaration_error(data, path, str(exc)) from exc
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        if _cookie_line(data) is not None:
            what = f"the encoding the file declares; re-save it in {encoding} or correct the declaration"
        else:
            what = "Python's default; save it as UTF-8 or declare its encoding on line 1 (PEP 263)"
        raise UserError(f"byte 0x{data[exc.start]:02x} is not valid {encoding}, {what}", f"{path}:{line}") from exc


def _cookie_line(data: bytes) -> int | None:
    """1 or 2 when one of the first two lines declares an encoding (PEP 263), else None."""
    for number, line in enumerate(data.splitlines()[:2], 1):
        if _COOKIE.match(line.lstrip(b"\xef\xbb\xbf")):
            return number
    return None


def _declaration_error(data: bytes, path: Path, reason: str) -> UserError:
    """One line for what `tokenize.detect_encoding` refused, at the line to fix."""
    cookie = _cookie_line(data)
    if cookie is not None:
        name = _COOKIE.match(data.splitlines()[cookie - 1].lstrip(b"\xef\xbb\xbf")).group(1).decode("ascii", "replace")
        if "unknown encoding" in reason:
            return UserError(f"declares an unknown encoding '{name}'; use utf-8 or a codec Python knows",
                             f"{path}:{cookie}")
        return UserError(f"encoding declaration '{name}' contradicts the file's UTF-8 byte-order mark",
                         f"{path}:{cookie}")
    try:
        data.decode("utf-8")
        line = 1
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
    return UserError(
        "not valid UTF-8 and no encoding declared; save it as UTF-8 or declare its encoding "
        "on line 1 (PEP 263: # -*- coding: latin-1 -*-)",
        f"{path}:{line}",
    )


def clip(text: str, column: int | None = None, width: int = ECHO_WIDTH) -> str:
    """`text` cut to about `width` characters with an ellipsis, keeping `column` (1-based) in view.

    Why: a 10,000-character line echoed whole fills a hundred panel rows and
    hides the verdict. Around a syntax error the window is centred on the
    error's column, so the part Python complains about is the part shown.
    """
    if column is not None:
        column -= len(text) - len(text.lstrip())
    text = text.strip()
    if len(text) <= width:
        return text
    if column is None or column <= width - 10:
        return text[: width - 1] + "…"
    start = max(0, min(column - 1 - width // 2, len(text) - (width - 2)))
    body = text[start : start + width - 2]
    return "…" + body + ("…" if start + width - 2 < len(text) else "")


_PARSE_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse`, one thread at a time: on CPython 3.11 two threads building ASTs at once can fail one of them
    with "SystemError: AST constructor recursion depth mismatch" (seen on `drill check DIR`'s two workers)."""
    with _PARSE_LOCK:
        return ast.parse(source, filename=filename)
