"""spot_bug: a short code snippet with exactly one mistake; the learner names the line, then sees the fix.

Why a kind of its own: in an interview the bug is found by reading, not by
recalling a definition — a scale by d_model, a mask on the wrong axis, a
softmax over the batch. The learner types the line number; the answer is
checked, and the fix and the reason are shown either way. Lines that look
suspicious but are right can carry their own explanation (`decoys`), shown
when the learner picks one. The snippet (and the snippet with the fix
applied) must parse as Python; it is never run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rich.text import Text

from drill.quiz.fields import Fields, type_name
from drill.quiz.kinds.base import Add, Asked, Asker, Kind
from drill.quiz.schedule import AGAIN, GOOD
from drill.quiz.schema import Question
from drill.quiz.text import reflow

MIN_LINES = 3
MAX_LINES = 40
MAX_LINE_CHARS = 72  # with its line number, a line fits an 80-column terminal
_LINE_ANSWER = re.compile(r"^\s*(?:line\s*|l\s*)?#?(\d{1,3})\s*[.)]?\s*$", re.IGNORECASE)


def dedent(text: str) -> str:
    """`text` without the leading whitespace all its non-blank lines share (textwrap.dedent,
    without importing textwrap on the quiz's start-up path)."""
    lines = text.split("\n")
    widths = [len(line) - len(line.lstrip()) for line in lines if line.strip()]
    cut = min(widths, default=0)
    return "\n".join(line[cut:] if line.strip() else "" for line in lines)


@dataclass(frozen=True)
class Decoy:
    """A line that looks wrong but is not, and why."""

    line: int
    why: str


@dataclass(frozen=True, kw_only=True)
class SpotBugQuestion(Question):
    """Code with one mistake at `bug_line` (1-based); `fix` replaces that line."""

    code: str
    bug_line: int
    fix: str
    decoys: tuple[Decoy, ...] = ()

    @property
    def lines(self) -> list[str]:
        return self.code.split("\n")

    def fixed_lines(self) -> list[str]:
        """The fix as it replaces the buggy line: written without that line's indentation,
        it gets it (a multi-line fix keeps its own relative indentation)."""
        original = self.lines[self.bug_line - 1]
        indent = original[: len(original) - len(original.lstrip())]
        return [indent + line if line.strip() else "" for line in dedent(self.fix).strip("\n").split("\n")]

    def fixed_code(self) -> str:
        lines = self.lines
        return "\n".join(lines[: self.bug_line - 1] + self.fixed_lines() + lines[self.bug_line:])


def _line_number(value: Any, fields: Fields, key: str, what: str, count: int) -> int | None:
    line = fields.line(key)
    if not isinstance(value, int) or isinstance(value, bool):
        fields.out.add(line, f"{fields.what}: {what} must be a line number of 'code' (1-{count}), not "
                             f"{type_name(value)}")
        return None
    if not 1 <= value <= count:
        fields.out.add(line, f"{fields.what}: {what} {value} is not a line of 'code', which has {count} lines")
        return None
    return value


def build(fields: Fields, common: dict[str, Any]) -> Question:
    code = fields.text("code")
    code = dedent(code).strip("\n") if code else ""
    lines = code.split("\n") if code else []
    if code:
        if not MIN_LINES <= len(lines) <= MAX_LINES:
            fields.out.add(fields.line("code"),
                           f"{fields.what}: 'code' has {len(lines)} lines; a snippet needs {MIN_LINES} to {MAX_LINES}")
        long = [i + 1 for i, text in enumerate(lines) if len(text) > MAX_LINE_CHARS]
        if long:
            fields.out.add(fields.line("code"),
                           f"{fields.what}: line {long[0]} of 'code' is longer than {MAX_LINE_CHARS} characters; wrap "
                           "it")
        if any("\t" in text for text in lines):
            fields.out.add(fields.line("code"), f"{fields.what}: 'code' has a tab; indent with spaces")
    count = max(len(lines), 1)
    bug_line = None
    if "bug_line" in fields.data:
        bug_line = _line_number(fields.data.get("bug_line"), fields, "bug_line", "'bug_line'", count)
    if bug_line is not None and lines and not lines[bug_line - 1].strip():
        fields.out.add(fields.line("bug_line"), f"{fields.what}: bug_line {bug_line} is a blank line of 'code'")
    fix = fields.text("fix")
    if bug_line is not None and fix and lines and " ".join(fix.split()) == " ".join(lines[bug_line - 1].split()):
        fields.out.add(fields.line("fix"),
                       f"{fields.what}: 'fix' is the same as line {bug_line}; write the corrected line")
    if bug_line is not None and fix and lines:
        long = [line for line in SpotBugQuestion(code=code, bug_line=bug_line, fix=fix, **common).fixed_lines()
                if len(line) > MAX_LINE_CHARS]
        if long:
            fields.out.add(fields.line("fix"),
                           f"{fields.what}: 'fix' makes a line longer than {MAX_LINE_CHARS} characters; wrap it")
    decoys = []
    for item in fields.items("decoys"):
        sub = fields.sub(item, "decoy", fields.line("decoys"))
        if sub is None:
            continue
        sub.check_keys(("line", "why"), ())
        number = _line_number(sub.data.get("line"), sub, "line", "decoy line", count) if "line" in sub.data else None
        if number is not None and number == bug_line:
            sub.out.add(sub.line("line"), f"{sub.what}: line {number} is the bug itself, not a decoy")
        elif number is not None and lines and not lines[number - 1].strip():
            sub.out.add(sub.line("line"), f"{sub.what}: line {number} is blank")
        decoys.append(Decoy(number or 0, sub.text("why")))
    seen = [d.line for d in decoys]
    for number in {n for n in seen if seen.count(n) > 1 and n}:
        fields.out.add(fields.line("decoys"), f"{fields.what}: line {number} has two decoys; keep one")
    return SpotBugQuestion(code=code, bug_line=bug_line or 1, fix=fix, decoys=tuple(decoys), **common)


def numbered(question: SpotBugQuestion) -> Text:
    """The snippet with right-aligned line numbers, as the learner reads it."""
    width = len(str(len(question.lines)))
    text = Text()
    for number, line in enumerate(question.lines, 1):
        text.append(f"  {number:>{width}} │ ", style="dim")
        text.append(line + "\n")
    text.rstrip()
    return text


def read_line(text: str, question: SpotBugQuestion) -> int:
    """A typed line number (`3`, `line 3`, `L3`); ValueError with a learner-facing message."""
    count = len(question.lines)
    match = _LINE_ANSWER.match(text)
    if not match:
        raise ValueError(f"type the number of the line with the bug (1-{count}), or q to quit")
    number = int(match.group(1))
    if not 1 <= number <= count:
        raise ValueError(f"the snippet has lines 1-{count}; type one of them")
    if not question.lines[number - 1].strip():
        raise ValueError(f"line {number} is blank; type the line with the mistake")
    return number


def ask(session: Asker, question: SpotBugQuestion) -> Asked:
    session.say(reflow(question.prompt))
    session.console.print(numbered(question))
    while True:
        text = session.answer(question, "which line has the bug? (a line number) >")
        try:
            picked = read_line(text, question)
            break
        except ValueError as exc:
            session.say(str(exc), "yellow")
    right = picked == question.bug_line
    session.verdict(right, f"correct: line {picked}" if right
                    else f"the bug is on line {question.bug_line} (you said {picked})")
    decoy = next((d for d in question.decoys if d.line == picked), None)
    if not right and decoy is not None:
        session.items([(f"line {picked}:", decoy.why, "yellow")])
    # the line number goes in the heading: as a mark of the removed line ("- 5 return ...") it read as code
    rows = [("-", question.lines[question.bug_line - 1].strip(), "red")]
    rows += [("+", line.strip() if i == 0 else line, "green") for i, line in enumerate(question.fixed_lines())]
    session.say(f"The fix, line {question.bug_line}", "bold")
    session.items(rows)
    session.teach(question)
    return Asked(GOOD if right else AGAIN, str(picked), right)


def check(question: SpotBugQuestion, add: Add) -> None:
    """The snippet, and the snippet with the fix applied, parse as Python (nothing is run)."""
    import ast

    for label, source, line in (("'code'", question.code, question.line_of("code")),
                                ("'code' with the fix applied", question.fixed_code(), question.line_of("fix"))):
        try:
            ast.parse(source)
        except SyntaxError as exc:
            add(line, f"{label} is not valid Python (line {exc.lineno}: {exc.msg}); fix the snippet")
            return
        except (ValueError, RecursionError, MemoryError) as exc:
            add(line, f"{label} cannot be parsed ({type(exc).__name__}); simplify the snippet")
            return


def card(question: SpotBugQuestion) -> tuple[str, str]:
    width = len(str(len(question.lines)))
    code = "\n".join(f"{n:>{width}} | {line}" for n, line in enumerate(question.lines, 1))
    fixed = "\n".join(question.fixed_lines())
    return (f"{reflow(question.prompt)}\n\n{code}",
            f"line {question.bug_line}: {question.lines[question.bug_line - 1].strip()}\nfix: {fixed.strip()}\n\n"
            f"{reflow(question.explanation)}")


KIND = Kind(
    name="spot_bug",
    question=SpotBugQuestion,
    required=("code", "bug_line", "fix"),
    optional=("decoys",),
    build=build,
    ask=ask,
    card=card,
    check=check,
    budget_s=120.0,
    exports=(Decoy,),
)
