"""Key-point patterns, compiled by RE2: matching a learner's answer takes time linear in its length.

Why not `re`: a backtracking engine can take exponential time on a pattern a
bank author thought harmless — `^(\\w+\\s?)+$` against an answer that ends in
"!" hangs the quiz — and a downloaded bank is untrusted input. RE2 (the
`google-re2` package) guarantees linear time and a bounded memory for every
pattern it accepts; what it refuses (backreferences, lookarounds) is named by
`drill validate`. Its `\\w` and `\\b` are ASCII, which is what the patterns match.
The module is imported on the first match, after the question is on screen.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

MAX_PATTERN_CHARS = 300
# A compiled pattern's program may use at most this much memory (RE2 refuses bigger ones).
MAX_PROGRAM_BYTES = 1 << 20


class PatternError(ValueError):
    """A pattern RE2 cannot compile (syntax, an unsupported construct, too big)."""


@lru_cache(maxsize=4096)
def compiled(pattern: str) -> Any:
    """The case-insensitive RE2 program of `pattern`; PatternError if it has none."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(f"longer than {MAX_PATTERN_CHARS} characters")
    import re2

    options = re2.Options()
    options.case_sensitive = False
    options.log_errors = False  # RE2 would print its own copy of the error on stderr
    options.max_mem = MAX_PROGRAM_BYTES
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        detail = exc.args[0] if exc.args else exc
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise PatternError(str(detail)) from None


def matches(pattern: str, text: str) -> bool:
    """Whether `pattern` occurs anywhere in `text` (ignoring case); a bad pattern never matches.

    The loader refuses a bank with a bad pattern, so here that only guards a
    bank changed behind the cache's back."""
    try:
        return compiled(pattern).search(text) is not None
    except PatternError:
        return False
