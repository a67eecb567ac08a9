"""Text from untrusted places made unable to drive the terminal it is printed on.

One rule for everything drill prints that someone else wrote: a learner's printed output and messages
(drill/judge/boundary.py) and a question bank's text (drill/quiz/yamlread.py). C0/C1 control characters
(ESC starts colour, clear-screen and OSC 8 link sequences), zero-width and bidi marks, line and paragraph
separators (some terminals break lines at them), the BOM, interlinear annotations and the invisible tag
characters that can hide text are shown escaped, as \\xNN / \\uNNNN, never sent raw.
"""

from __future__ import annotations

import re

CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb"
    "\U000e0000-\U000e007f]"
)


def _escaped(m: re.Match) -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c < 0x100 else (f"\\u{c:04x}" if c < 0x10000 else f"\\U{c:08x}")


def escape_controls(text: str) -> str:
    """`text` with every CONTROL character escaped; tabs and newlines (not in CONTROL) are kept."""
    return CONTROL.sub(_escaped, text)
