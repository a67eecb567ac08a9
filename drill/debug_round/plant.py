"""Drawing and planting debug_gpt's bugs: (seed, K) -> the file, byte for byte the same every time.

`draw` picks the variant and the K bugs with `random.Random(seed)` (never the global generator); `plant`
writes them into the template by exact text replacement and records the line range each landed on. The
grader calls `plan_of(seed, bugs)` to rebuild what a file's header says was planted.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from drill.debug_round import bugs as library
from drill.debug_round.template import HEADER, fixed_text
from drill.errors import UserError

_MARK = "\x00"
DEFAULT_SEED = 7  # exercises/debug_gpt.py is the file of --seed 7 --bugs 4 (the README's walk-through)


@dataclass(frozen=True)
class Plan:
    seed: int
    bugs: int
    fused: bool  # one c_attn (True) or q_proj/k_proj/v_proj
    swiglu: bool  # w_gate/w_up/w_down (True) or c_fc/c_proj
    ids: tuple[str, ...]  # the planted bugs, in the order of the file

    @property
    def mlp(self) -> str:
        return "swiglu" if self.swiglu else "gelu"

    @property
    def header(self) -> str:
        return HEADER.format(seed=self.seed, bugs=self.bugs)


@dataclass(frozen=True)
class Planted:
    plan: Plan
    text: str
    lines: dict[str, tuple[int, int]]  # bug id -> (first, last) line of the written file, 1-based


def check_bugs(k: int) -> int:
    """K as the contract allows it, or the one-line refusal."""
    if not library.MIN_BUGS <= k <= library.MAX_BUGS:
        raise UserError(f"--bugs must be {library.MIN_BUGS} .. {library.MAX_BUGS} (the most the library "
                        f"places without two bugs interacting); got {k}")
    return k


def draw(seed: int, k: int) -> Plan:
    """The variant and K bugs of (seed, K): at most one per function, no interacting pair."""
    check_bugs(k)
    rng = random.Random(f"drill debug_gpt {seed}")
    fused, swiglu = rng.random() < 0.5, rng.random() < 0.5
    order = [b.id for b in library.LIBRARY]
    rng.shuffle(order)
    chosen: list[str] = []
    for bug_id in order:
        if len(chosen) == k:
            break
        if library.compatible(chosen, bug_id):
            chosen.append(bug_id)
    if len(chosen) < k:  # cannot happen with the library as it is (a test holds that for every K)
        raise UserError(f"--bugs {k}: the library cannot place that many bugs without two interacting")
    rank = {fn: i for i, fn in enumerate(library.FUNCTIONS)}
    chosen.sort(key=lambda b: rank[library.BY_ID[b].function])
    return Plan(seed, k, fused, swiglu, tuple(chosen))


def plant(plan: Plan, ids: tuple[str, ...] | None = None) -> Planted:
    """The file of `plan` with `ids` planted (default: the plan's own), and each bug's line range."""
    ids = plan.ids if ids is None else ids
    text = fixed_text(plan.fused, plan.swiglu, plan.header)
    for bug_id in ids:
        fixed, planted = library.BY_ID[bug_id].texts(plan.mlp)
        if text.count(fixed) != 1:
            raise AssertionError(f"{bug_id}: its fixed text occurs {text.count(fixed)} times")
        text = text.replace(fixed, f"{_MARK}{bug_id}{_MARK}{planted}{_MARK}")
    lines: dict[str, tuple[int, int]] = {}
    out, line, i = [], 1, 0
    while i < len(text):
        j = text.find(_MARK, i)
        if j < 0:
            out.append(text[i:])
            break
        out.append(text[i:j])
        line += text.count("\n", i, j)
        k = text.index(_MARK, j + 1)
        bug_id = text[j + 1:k]
        end = text.index(_MARK, k + 1)
        body = text[k + 1:end]
        out.append(body)
        if body:
            last = line + body.rstrip("\n").count("\n")
            lines[bug_id] = (line, last)
        else:  # a deleted line: the two lines it sat between
            lines[bug_id] = (line - 1, line)
        line += body.count("\n")
        i = end + 1
    return Planted(plan, "".join(out), lines)


def plan_of(seed: int, k: int) -> Plan:
    return draw(seed, k)


def write_starter(seed: int, k: int) -> Planted:
    """What `drill start debug_gpt --seed seed --bugs k` writes."""
    return plant(draw(seed, k))
