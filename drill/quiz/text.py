"""Prose as the learner reads it: YAML block scalars reflowed to the terminal's width."""

from __future__ import annotations

import re

_BULLET_OR_CODE = re.compile(r"^(\s|[-*•>|])")
_NUMBERED = re.compile(r"^\d+[.)]\s")


def _is_structure(lines: list[str], index: int) -> bool:
    """A bullet or indented line; or a numbered item that is part of a list (the
    paragraph has two of them, or the line before ends with ':'), so a wrapped
    sentence that happens to start "1. What is..." stays prose."""
    line = lines[index]
    if _BULLET_OR_CODE.match(line):
        return True
    if not _NUMBERED.match(line):
        return False
    numbered = sum(1 for other in lines if _NUMBERED.match(other))
    return numbered >= 2 or (index > 0 and lines[index - 1].rstrip().endswith(":"))


def reflow(text: str) -> str:
    """Undo the hard line breaks of YAML block scalars so Rich can wrap prose to
    the terminal's width; paragraphs stay apart, and a paragraph with list items
    or indented (code-like) lines is left exactly as written."""
    paragraphs = text.strip("\n").split("\n\n")
    out = []
    for para in paragraphs:
        lines = para.split("\n")
        if any(_is_structure(lines, i) for i in range(len(lines))):
            out.append(para)
        else:
            out.append(" ".join(line.strip() for line in lines))
    return "\n\n".join(out)
