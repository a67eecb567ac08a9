"""Line 1 of a debug_gpt file, read back: which (seed, K) wrote it, or the one-line refusal."""

from __future__ import annotations

import re

from drill.debug_round.bugs import MAX_BUGS, MIN_BUGS
from drill.errors import UserError

_LINE = re.compile(r"# drill debug_gpt seed=(0|[1-9][0-9]{0,9}) bugs=([1-9][0-9]?) \(keep this line\)")
MAX_SEED = 2**31 - 1


def refusal(seed_hint: str = "N") -> str:
    return ("this file was not written by `drill start debug_gpt`; start again with "
            f"`drill start debug_gpt --seed {seed_hint}`")


def parse(source: str, where: str = "") -> tuple[int, int]:
    """(seed, K) of line 1; a UserError with the refusal (at file:1) when line 1 is missing or edited."""
    first = source.lstrip("\ufeff").split("\n", 1)[0].rstrip("\r")
    match = _LINE.fullmatch(first)
    if match is None or int(match.group(1)) > MAX_SEED or not MIN_BUGS <= int(match.group(2)) <= MAX_BUGS:
        raise UserError(refusal(), f"{where}:1" if where else "")
    return int(match.group(1)), int(match.group(2))
