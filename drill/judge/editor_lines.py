"""`drill check --format line`: one `file:line:col: severity: message` line per problem, for editors.

Why this shape: it is the one compilers print (gcc, clang, rustc --error-format short), so Vim's default
`errorformat` (`%f:%l:%c: %m`), Emacs' compilation mode and a VS Code problem matcher (exercises/README.md)
jump to the line without any drill-specific setup. A passing file prints nothing (the compiler convention;
its advisories, if any, are `warning:` lines); a failing one prints an `error:` line with the diagnosis
(`<title> [id]`) and, when the judge wrote a detail, a `note:` line at the same place.

Which line is a rendering of what the Result already holds, never a second grader:
1. an erroring test's message ends with the learner's line (`... (line 13)`, appended by check.py from
   the traceback's innermost frame in the learner's file): the diagnosis of a crash, an exception, a
   forbidden op or an unfinished function points there;
2. a syntax error's detail starts with `line N: `; a policy refusal's with `<path>:N: `; an import-time
   error's detail ends with ` (line N: <that line>)` (diagnose.where): the group that closes the detail and
   quotes the file's own line N is taken, not a "(line 3: ...)" in the learner's own message;
3. otherwise (a wrong value, shape or dtype: no line in the learner's code to blame) the `def`/`class` line
   of the graded name the first failing test names, else the first graded name the file defines, else 1.
The column is the first non-blank character of that line (the `def` keyword for 3; for a syntax error,
Python's own offset, from compiling the file again). Torch-free: the file
is read and parsed with the stdlib only, and a file that does not parse falls back to line 1.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

_TEST_LINE = re.compile(r"\(line (\d+)\)$")
_SYNTAX = re.compile(r"line (\d+): ")
_POLICY = re.compile(r"[^\n]*?:(\d+): ")
_WHERE = re.compile(r"\(line (\d+)(?:: |\))")
_IMPORTING = " while importing the file"  # check._run_failure's suffix for an import-time failure
_MESSAGE_WIDTH = 400  # a note is one line: editors show it in a list


def lines_for(result: Any, source: str | None = None) -> list[str]:
    """The editor lines of one Result (empty for a pass without advisories). `source`: the file's text, read
    here when not given (an unreadable file places the problem on line 1)."""
    if source is None:
        source = _read(Path(result.file))
    out: list[str] = []
    if result.status != "pass":
        line, col = locate(result, source)
        d = result.diagnosis
        at = f"{_one_line(result.file)}:{line}:{col}"
        if d is not None:
            out.append(f"{at}: error: {_one_line(d.title)} [{d.id}]")
            if result.diagnosis_detail:
                out.append(f"{at}: note: {_one_line(result.diagnosis_detail)}")
        else:  # --strict failed a pass on its advisories: no diagnosis, the detail says why
            why = result.diagnosis_detail or f"{result.passed}/{result.total} tests passed"
            out.append(f"{at}: error: {_one_line(why)} [{result.status}]")
    if result.advisories:
        line, col = graded_def(result, source)
        out += [f"{_one_line(result.file)}:{line}:{col}: warning: {_one_line(note)}" for note in result.advisories]
    return out


def locate(result: Any, source: str) -> tuple[int, int]:
    """(line, column), both 1-based, of the learner's code the diagnosis points at (see the module docstring)."""
    # Python's own line breaks only: str.splitlines also breaks at \x0c, \x1c or U+2028, which a line may hold.
    lines = source.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    line = _diagnosis_line(result, lines)
    if result.diagnosis is not None and result.diagnosis.id == "syntax_error" and line is not None:
        at = _syntax_error_at(source)  # the column too: compiling again is what check did, minus the child
        if at is not None and at[0] == line:
            return at
    if line is None or not 1 <= line <= max(1, len(lines)):
        return graded_def(result, source)
    return line, _first_column(lines, line)


def graded_def(result: Any, source: str) -> tuple[int, int]:
    """The `def`/`class` line of the graded name the failure is about, or (1, 1) when the file has none."""
    from drill.judge.registry import entry

    try:
        graded = list(entry(result.exercise).graded)
    except Exception:  # noqa: BLE001 - an exercise the index lacks (a result from elsewhere): nothing to find
        graded = []
    named = next((t.name for t in result.tests if t.status in ("fail", "error")), "")
    # The graded name a failing test is named after first (swiglu: "ffn_hidden_dim(...)" vs "SwiGLU ...").
    graded.sort(key=lambda g: not named.startswith(g))
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return 1, 1
    found = {node.name: (node.lineno, node.col_offset + 1) for node in tree.body
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    return next((found[g] for g in graded if g in found), (1, 1))


def _diagnosis_line(result: Any, lines: list[str]) -> int | None:
    d = result.diagnosis
    detail = result.diagnosis_detail or ""
    if d is not None and d.id == "syntax_error":
        m = _SYNTAX.match(detail)
        return int(m.group(1)) if m else None
    if d is not None and d.id == "policy_violation":
        m = _POLICY.match(detail)
        if m:
            return int(m.group(1))
    for t in result.tests:
        if t.status == "error":
            m = _TEST_LINE.search(t.message)
            if m:
                return int(m.group(1))
    return _where_line(detail, lines)


def _where_line(detail: str, lines: list[str]) -> int | None:
    """The N of the ` (line N: <source>)` group that closes the detail (before " while importing the file")
    and holds the file's own line N as the child echoes it; else the last group's N. The learner's message
    and source line come before and inside that group, so "(line 3: ...)" text of theirs is not taken."""
    body = detail.removesuffix(_IMPORTING)
    found = [(int(m.group(1)), m.end()) for m in _WHERE.finditer(body)]
    for n, end in found:
        if 1 <= n <= len(lines) and body.endswith(")") and body[end:-1] == _echoed(lines[n - 1]):
            return n
    return found[-1][0] if found else None


def _echoed(text: str) -> str:
    """A source line as the child quotes it (child._source_line, then the boundary's safe_text)."""
    from drill.judge.boundary import safe_text
    from drill.judge.source import ECHO_WIDTH

    text = text.strip()
    return safe_text(text if len(text) <= ECHO_WIDTH else text[: ECHO_WIDTH - 1] + "…")


def _syntax_error_at(source: str) -> tuple[int, int] | None:
    try:
        compile(source, "<learner>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        if exc.lineno:
            return exc.lineno, max(1, exc.offset or 1)
    except ValueError:  # null bytes: check.py reports no line either
        pass
    return None


def _first_column(lines: list[str], line: int) -> int:
    text = lines[line - 1] if line <= len(lines) else ""
    return len(text) - len(text.lstrip()) + 1 if text.strip() else 1


def _one_line(text: str) -> str:
    """Terminal-safe (drill/terminal_text.py's rule, through boundary.safe_text) and on one line."""
    from drill.judge.boundary import safe_text

    return " ".join(safe_text(text, _MESSAGE_WIDTH).split())


def _read(path: Path) -> str:
    from drill.errors import UserError
    from drill.judge.source import read_source

    try:
        return read_source(path)
    except UserError:
        return ""
