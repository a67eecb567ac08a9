"""The debug round's plain functions: what `drill start/check --explain/hint debug_gpt` and the mock call.

Torch-free except `grade`, which imports the grader when called.

- `write_starter(directory, seed, bugs, force)`: write debug_gpt.py for (seed, K); returns (path, Planted).
- `grade(path, seed=None, pool=None)`: drill.judge.check.check_file on it (a Result).
- `remaining(result)`: the planted bugs a Result still shows, in file order, with their line ranges.
- `explain(result)`: --explain's lines; `hints(path)`: the per-bug hints in file order.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from drill.debug_round import bugs as library
from drill.debug_round.header import parse
from drill.debug_round.plant import Planted, plan_of, plant
from drill.errors import UserError

NAME = "debug_gpt"
PROBE_PREFIX = "probe: "  # the probe tests' names (drill/judge/specs/debug_gpt.py)


def write_starter(directory: Path, seed: int | None = None, bugs: int = library.DEFAULT_BUGS, *,
                  force: bool = False) -> tuple[Path, Planted]:
    """Write `directory/debug_gpt.py` with `bugs` planted bugs drawn with `seed` (random when None)."""
    from drill.judge.exercise_files import start_exercise

    if seed is None:
        seed = random.SystemRandom().randrange(2**31)
    if not 0 <= seed < 2**31:
        raise UserError(f"--seed must be 0 .. {2**31 - 1}; got {seed}")
    written = plant(plan_of(seed, bugs))
    path = start_exercise(NAME, directory, force=force, text=written.text.encode("utf-8"))
    return path, written


def read_planted(path: str | Path) -> Planted:
    """What the file's line 1 says was planted; the one-line refusal when it is missing or edited."""
    try:
        source = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read it: {exc}", str(path)) from exc
    return plant(plan_of(*parse(source, str(path))))


def grade(path: str | Path, seed: int | None = None, pool: Any = None) -> Any:
    """Grade a debug_gpt file (drill.judge.check.Result): the mock's entry point."""
    from drill.judge.check import check_file

    return check_file(path, NAME, seed, pool=pool)


def remaining(result: Any, planted: Planted | None = None) -> list[tuple[library.PlantedBug, tuple[int, int]]]:
    """The planted bugs whose function's probe still fails in `result`, in file order; [] once part 1 passes."""
    planted = planted or read_planted(result.file)
    whole_ok = all(t.status == "pass" for t in result.tests
                   if not t.name.startswith(PROBE_PREFIX) and not t.name.startswith("part 2"))
    if whole_ok and result.tests:
        return []
    failing = {t.name[len(PROBE_PREFIX):] for t in result.tests
               if t.name.startswith(PROBE_PREFIX) and t.status in ("fail", "error")}
    return [(library.BY_ID[b], planted.lines[b]) for b in planted.plan.ids if library.BY_ID[b].function in failing]


def _span(lines: tuple[int, int]) -> str:
    a, b = lines
    return f"line {a}" if a == b else f"lines {a}-{b}"


def explain(result: Any) -> list[str]:
    """--explain: each remaining planted bug's lines, name and what it breaks."""
    if any(t.name.startswith(PROBE_PREFIX) and t.status == "not_run" for t in result.tests):
        return ["the probes did not all run (see the verdict above): nothing to explain yet"]
    left = remaining(result)
    if not left:
        return ["no planted bug remains"]
    return [f"{_span(lines)}: {bug.id}, {bug.title} ({bug.breaks})" for bug, lines in left]


def hints(path: str | Path) -> list[str]:
    """Every planted bug's hints, bug by bug in file order, vague to specific; only a bug's last hint gives
    its lines."""
    if not Path(path).exists():  # no planted file here: the generic hints (exercises/debug_gpt.hints.yaml)
        from drill.judge.exercise_files import load_hints

        return load_hints(NAME)
    planted = read_planted(path)
    out = []
    for i, bug_id in enumerate(planted.plan.ids, 1):
        bug = library.BY_ID[bug_id]
        head = f"bug {i} of {len(planted.plan.ids)}, in {bug.function}: "
        out += [head + h for h in bug.hints]
        out.append(head + f"it was planted at {_span(planted.lines[bug_id])} of the file as written.")
    return out


def progress(result: Any) -> dict[str, Any]:
    """What the mock records of one graded debug_gpt file: the planted bugs, how many remain and where,
    and the cache part ("pass", "fail", "not attempted", or "not run" while part 1 fails).

    A file that did not run (no test results) still has every planted bug: bugs_left is then the count.
    """
    planted = read_planted(result.file)
    left = remaining(result, planted) if result.tests else [(library.BY_ID[b], planted.lines[b])
                                                           for b in planted.plan.ids]
    part2 = [t for t in result.tests if t.name.startswith("part 2")]
    if getattr(result.diagnosis, "id", None) == "dgpt_cache_not_attempted":
        cache = "not attempted"
    elif part2 and all(t.status == "pass" for t in part2):
        cache = "pass"
    elif part2 and all(t.status in ("pass", "fail", "error") for t in part2):
        cache = "fail"
    else:
        cache = "not run"
    return {"bugs_planted": len(planted.plan.ids), "bugs_left": len(left),
            "left_lines": [_span(lines) for _, lines in left], "cache": cache}


def starter_text(seed: int, bugs: int = library.DEFAULT_BUGS) -> str:
    """The file `drill start debug_gpt --seed seed --bugs bugs` writes (the mock's coding file)."""
    return plant(plan_of(seed, bugs)).text
