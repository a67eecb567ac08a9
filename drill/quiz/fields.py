"""Typed access to parsed YAML fields, collecting every problem at its line.

Why collect instead of raising: a bank author fixing a file wants the whole
list of mistakes in one run, each as `file:line: what is wrong and how to fix
it`. Every kind's builder (drill/quiz/kinds/) reads its fields through
`Fields`, so a wrong type, a missing or unknown field is worded the same way
for every kind.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import Any

from drill.quiz.yamlread import LineDict


@dataclass(frozen=True, order=True)
class Problem:
    """One thing wrong with a bank, at file:line (line 0: the file as a whole); sorts in file order."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}" if self.line else f"{self.file}: {self.message}"


class Collector:
    """Problems found in one file."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.problems: list[Problem] = []

    def add(self, line: int, message: str) -> None:
        self.problems.append(Problem(self.file, line, message))


def suggest(name: str, allowed: list[str] | tuple[str, ...] | frozenset[str]) -> str:
    close = difflib.get_close_matches(str(name), list(allowed), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def type_name(value: Any) -> str:
    return {
        str: "text",
        int: "a whole number",
        float: "a number",
        bool: "true/false",
        list: "a list",
        LineDict: "a mapping",
        type(None): "empty",
    }.get(type(value), type(value).__name__)


class Fields:
    """Typed access to one mapping's fields, reporting problems at their lines."""

    def __init__(self, data: LineDict, out: Collector, what: str) -> None:
        self.data = data
        self.out = out
        self.what = what

    def line(self, key: str) -> int:
        return self.data.line_of(key)

    def check_keys(self, required: tuple[str, ...], optional: tuple[str, ...],
                   elsewhere: frozenset[str] = frozenset()) -> None:
        for key, line in self.data.duplicates:
            self.out.add(line, f"{self.what}: field '{key}' appears twice; keep one")
        allowed = required + optional
        for key in self.data:
            if key in allowed:
                continue
            line = self.data.line_of(key)
            if key in elsewhere:
                self.out.add(line, f"{self.what}: field '{key}' does not belong here; remove it")
            else:
                self.out.add(line, f"{self.what}: unknown field '{key}'{suggest(key, allowed)}; allowed: "
                                   f"{', '.join(allowed)}")
        for key in required:
            if key not in self.data:
                self.out.add(self.data.line, f"{self.what}: missing required field '{key}'")

    def text(self, key: str, *, required: bool = True, default: str = "") -> str:
        if key not in self.data:
            return default
        value = self.data[key]
        if isinstance(value, str) and value.strip():
            return value.strip() if "\n" not in value.strip() else value.rstrip()
        if isinstance(value, str) or value is None:
            if required:
                self.out.add(self.line(key), f"{self.what}: '{key}' is empty; write the text")
            return default
        hint = (" (YAML read yes/no/on/off as true/false: put the text in quotes)" if isinstance(value, bool)
                else " (put it in quotes)")
        self.out.add(self.line(key), f"{self.what}: '{key}' must be text, not {type_name(value)}{hint}")
        return default

    def number(self, key: str, *, default: float | None = None) -> float | None:
        if key not in self.data:
            return default
        return as_number(self.data[key], self.out, self.line(key), f"{self.what}: '{key}'")

    def items(self, key: str, *, lo: int = 0, hi: int | None = None) -> list[Any]:
        if key not in self.data:
            return []
        value = self.data[key]
        if not isinstance(value, list):
            self.out.add(self.line(key),
                         f"{self.what}: '{key}' must be a list (items starting with '- '), not {type_name(value)}")
            return []
        if len(value) < lo or (hi is not None and len(value) > hi):
            bound = f"{lo} to {hi}" if hi is not None else f"at least {lo}"
            self.out.add(self.line(key),
                         f"{self.what}: '{key}' has {len(value)} item{'s' * (len(value) != 1)}; it needs {bound}")
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        result = []
        for item in self.items(key):
            if isinstance(item, str) and item.strip():
                result.append(item)
            else:
                self.out.add(self.line(key),
                             f"{self.what}: every item of '{key}' must be non-empty text, not {type_name(item)}")
        return tuple(result)

    def mapping(self, key: str) -> LineDict | None:
        if key not in self.data:
            return None
        value = self.data[key]
        if not isinstance(value, LineDict):
            self.out.add(self.line(key),
                         f"{self.what}: '{key}' must be a mapping (name: value lines), not {type_name(value)}")
            return None
        return value

    def sub(self, item: Any, label: str, line: int) -> Fields | None:
        if not isinstance(item, LineDict):
            self.out.add(line, f"{self.what}: each {label} must be a mapping, not {type_name(item)}")
            return None
        return Fields(item, self.out, f"{self.what} {label}")


# Whole numbers past this are never a question's answer or parameter, and make every
# later comparison and formula slow: write 1.5e+24 instead.
MAX_INT_DIGITS = 30


def as_number(value: Any, out: Collector, line: int, what: str) -> float | None:
    """Accept finite ints, floats and numeric-looking text (PyYAML reads `1.5e3` as text)."""
    if isinstance(value, bool) or value is None:
        out.add(line, f"{what} must be a number, not {type_name(value)}")
        return None
    number: Any = None
    if isinstance(value, (int, float)):
        number = value
    elif isinstance(value, str) and len(value) <= 64:
        try:
            text = value.replace("_", "")
            number = float(text) if any(c in text for c in ".eEnN") else int(text)
        except ValueError:
            number = None
    if number is None:
        out.add(line, f"{what} must be a number, not {type_name(value)} {str(value)[:40]!r}")
        return None
    if isinstance(number, int) and abs(number) >= 10**MAX_INT_DIGITS:
        out.add(line, f"{what} has more than {MAX_INT_DIGITS} digits; write a large number as e.g. 1.5e+24")
        return None
    if isinstance(number, float) and not math.isfinite(number):
        out.add(line, f"{what} must be a finite number, not {value!r}")
        return None
    return number
