"""Turning parsed YAML (LineDicts) into typed questions, collecting every problem.

This module does what every kind shares — the file layout, the common fields,
the kind lookup — and hands the rest to the kind's own builder
(drill/quiz/kinds/). Checks that evaluate formulas or compile patterns live
in `validate.py` and the kinds' `check`/`audit`.
"""

from __future__ import annotations

import re
from typing import Any

from drill.quiz import kinds
from drill.quiz.fields import Collector, Fields, Problem, as_number, suggest, type_name
from drill.quiz.schema import (
    COMMON_OPTIONAL,
    COMMON_REQUIRED,
    DIFFICULTIES,
    ID_PATTERN,
    TOPIC_PATTERN,
    CommonWrong,
    Question,
)
from drill.quiz.yamlread import LineDict

__all__ = ["Collector", "Problem", "as_number", "build_file", "build_question"]

_ID_RE = re.compile(ID_PATTERN)
_TOPIC_RE = re.compile(TOPIC_PATTERN)
_TAG_RE = re.compile(r"^[a-z0-9][a-z0-9 _.+/-]{0,31}$")


def all_fields() -> frozenset[str]:
    """Every field some kind allows: one of these on the wrong kind "does not belong here"."""
    return frozenset(COMMON_REQUIRED + COMMON_OPTIONAL).union(*(k.fields for k in kinds.REGISTRY.values()))


def build_file(data: Any, stem: str, out: Collector) -> list[Question]:
    """Build the questions of one topic file; problems go to `out`."""
    if data is None:
        out.add(1, "the file is empty; it needs 'topic:' and 'questions:'")
        return []
    if not isinstance(data, LineDict):
        out.add(1, f"the file must be a mapping with 'topic:' and 'questions:', not {type_name(data)}")
        return []
    top = Fields(data, out, "file")
    top.check_keys(("topic", "questions"), ())
    topic = top.text("topic")
    if topic and topic != stem:
        out.add(top.line("topic"), f"topic '{topic}' must equal the file name '{stem}' (rename one of them)")
    questions = []
    every = all_fields()
    for index, item in enumerate(top.items("questions", lo=1)):
        if not isinstance(item, LineDict):
            out.add(top.line("questions"), f"question #{index + 1} must be a mapping of fields, not {type_name(item)}")
            continue
        question = build_question(item, stem, out, every)
        if question is not None:
            questions.append(question)
    return questions


def build_question(data: LineDict, topic: str, out: Collector, every: frozenset[str] | None = None) -> Question | None:
    """One question of `topic`'s file; None (problems in `out`) if it has any. `every`: all_fields()."""
    raw_id = data.get("id")
    label = f"question '{raw_id}'" if isinstance(raw_id, str) else "question"
    fields = Fields(data, out, label)
    before = len(out.problems)
    every = every if every is not None else all_fields()
    name = data.get("kind")
    if isinstance(name, str) and name not in kinds.REGISTRY and name.replace("-", "_") in kinds.REGISTRY:
        name = name.replace("-", "_")  # `spot-bug` as typed on the command line: one kind, one spelling shown
    kind = kinds.REGISTRY.get(name) if isinstance(name, str) else None
    if kind is None:
        if name is not None:
            known = kinds.names()
            out.add(fields.line("kind"),
                    f"{label}: unknown kind {name!r}{suggest(str(name), known)}; use one of {', '.join(known)}")
        fields.check_keys(COMMON_REQUIRED, tuple(every - set(COMMON_REQUIRED)))
        return None
    fields.check_keys(COMMON_REQUIRED + kind.required, COMMON_OPTIONAL + kind.optional, every - set(kind.fields))

    qid = fields.text("id")
    if qid and not _ID_RE.match(qid):
        out.add(fields.line("id"), f"{label}: id must match {ID_PATTERN} (lowercase letters, digits, '-'; 3-64 chars)")
    difficulty = fields.text("difficulty")
    if difficulty and difficulty not in DIFFICULTIES:
        out.add(fields.line("difficulty"),
                f"{label}: difficulty {difficulty!r} must be one of {', '.join(DIFFICULTIES)}")
    own_topic = fields.text("topic", required=True, default="") if "topic" in data else ""
    if own_topic and not _TOPIC_RE.match(own_topic):
        out.add(fields.line("topic"), f"{label}: topic {own_topic!r} must be a topic name (lowercase letters, digits, "
                                      "'_')")
    tags = fields.strings("tags")
    for tag in tags:
        if not _TAG_RE.match(tag):
            out.add(fields.line("tags"), f"{label}: tag {tag!r} must be short lowercase text (at most 32 characters)")
    common = dict(
        id=qid,
        topic=own_topic or topic,
        kind=kind.name,
        difficulty=difficulty,
        prompt=fields.text("prompt"),
        explanation=fields.text("explanation"),
        tags=tags,
        source=fields.text("source", required=False),
        **_hints(fields),
        common_wrong=_common_wrong(fields),
        file=out.file,
        line=data.line,
        field_lines=tuple((k, v) for k, v in data.key_lines.items() if isinstance(k, str)),
    )
    question = kind.build(fields, common)
    return question if len(out.problems) == before else None


def _hints(fields: Fields) -> dict[str, tuple[Any, ...]]:
    """`hints`: each item is text, or `{text, worked: true}` for a hint that carries the worked
    formula (reading it caps the rating at Hard, as reading the last hint does)."""
    texts: list[str] = []
    worked: list[int] = []
    for item in fields.items("hints"):
        if isinstance(item, str):
            if item.strip():
                texts.append(item)
            else:
                fields.out.add(fields.line("hints"), f"{fields.what}: every item of 'hints' must be non-empty text "
                                                     "or a mapping {text, worked}")
            continue
        line = item.line if isinstance(item, LineDict) else fields.line("hints")
        sub = fields.sub(item, "hint (text, or a mapping {text, worked})", line)
        if sub is None:
            continue
        sub.check_keys(("text",), ("worked",))
        text = sub.text("text")
        flag = item.get("worked", False)
        if not isinstance(flag, bool):
            fields.out.add(sub.line("worked"), f"{fields.what}: a hint's 'worked' must be true or false, "
                                               f"not {type_name(flag)}")
        if text:
            if flag is True:
                if not texts:
                    fields.out.add(line, f"{fields.what}: the first hint is marked worked; the first hint must "
                                         "nudge towards the method: put the worked formula in a later hint")
                worked.append(len(texts))
            texts.append(text)
    return {"hints": tuple(texts), "worked_hints": tuple(worked)}


def _common_wrong(fields: Fields) -> tuple[CommonWrong, ...]:
    result = []
    for item in fields.items("common_wrong"):
        sub = fields.sub(item, "common_wrong item", fields.line("common_wrong"))
        if sub is None:
            continue
        sub.check_keys(("answer", "why"), ())
        result.append(CommonWrong(sub.text("answer"), sub.text("why")))
    return tuple(result)
