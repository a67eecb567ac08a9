"""Typed question objects: what a validated YAML question becomes.

Why dataclasses and not dicts: after loading, the rest of the quiz never has
to wonder whether a field exists or has the right type — the loader has
already refused anything else with a file:line message. Each question keeps
the file and line it came from, so later checks (and learners' bug reports)
can point at it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

DIFFICULTIES = ("easy", "medium", "hard")
ID_PATTERN = r"^[a-z0-9][a-z0-9-]{2,63}$"
TOPIC_PATTERN = r"^[a-z][a-z0-9_]{0,31}$"

# What a question read back from the bank cache holds before anything else is read from it: enough to
# filter, schedule and name it (drill.quiz.loader keeps the rest packed until then, see Question.__getattr__).
LISTED = ("id", "topic", "kind", "difficulty", "tags", "file", "line")
PACKED = "_packed"  # the instance-dict key of that rest: a callable returning the other fields by name

# Fields every kind has; each kind (drill/quiz/kinds/) adds its own. Anything else is a typo.
# `topic` on a question overrides its file's topic (a file of one kind across topics: spot_bug.yaml).
COMMON_REQUIRED = ("id", "kind", "difficulty", "prompt", "explanation")
COMMON_OPTIONAL = ("topic", "tags", "source", "hints")


@dataclass(frozen=True)
class CommonWrong:
    """A tempting wrong answer and why it is wrong."""
    answer: str
    why: str


@dataclass(frozen=True, kw_only=True)
class Question:
    """Fields shared by every kind; subclasses add their own."""

    id: str
    topic: str
    kind: str
    difficulty: str
    prompt: str
    explanation: str
    tags: tuple[str, ...] = ()
    source: str = ""
    hints: tuple[str, ...] = ()
    worked_hints: tuple[int, ...] = ()  # indexes of the hints marked `worked: true` (they carry the worked formula)
    common_wrong: tuple[CommonWrong, ...] = ()
    file: str = ""
    line: int = 0
    field_lines: tuple[tuple[str, int], ...] = field(default=(), compare=False, repr=False)

    def __getattr__(self, name: str) -> Any:
        # Python calls this only for a name the instance lacks. A question read back from the bank
        # cache starts with its LISTED fields alone and unpacks the rest the first time any is read:
        # a quiz start shows a few questions of hundreds and need not rebuild them all.
        unpack: Callable[[], dict[str, Any]] | None = self.__dict__.get(PACKED) if name[:2] != "__" else None
        if unpack is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self.__dict__.update(unpack())  # raises (and stays packed) if the cache was damaged
        del self.__dict__[PACKED]
        return object.__getattribute__(self, name)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def hint_caps(self, shown: int) -> bool:
        """Whether reading the first `shown` hints caps the answer's rating at Hard: the learner
        read the last hint, or one marked `worked` (it does the card's work for them)."""
        if shown <= 0 or not self.hints:
            return False
        return shown >= len(self.hints) or any(index < shown for index in self.worked_hints)

    def line_of(self, name: str) -> int:
        """Source line of one field (for validation messages); the question's line if unknown."""
        return dict(self.field_lines).get(name, self.line)


def letter(index: int) -> str:
    """Option label: 0 -> 'a'."""
    return "abcdefgh"[index]


@dataclass(frozen=True)
class Bank:
    """A loaded, valid question bank in file order."""

    questions: tuple[Question, ...]
    files: tuple[str, ...] = ()

    def by_id(self) -> dict[str, Question]:
        return {q.id: q for q in self.questions}

    def topics(self) -> list[str]:
        seen: dict[str, None] = {}
        for q in self.questions:
            seen.setdefault(q.topic, None)
        return list(seen)
