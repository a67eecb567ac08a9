"""Exercise names, their spec modules, and resolving a file to an exercise.

Imports no torch: `drill exercises`, `drill start` and `drill hint` use it
without paying for torch. To add an exercise: write `specs/<name>.py` that
defines `SPEC` (a `drill.judge.spec.Spec`) and add the name here.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from drill.errors import UserError
from drill.paths import exercises_dir

# Exercise name -> module defining SPEC. Order is the order shown to learners.
SPECS: dict[str, str] = {
    "attention": "drill.judge.specs.attention",
    "mha": "drill.judge.specs.mha",
    "rope": "drill.judge.specs.rope",
    "rmsnorm": "drill.judge.specs.rmsnorm",
    "swiglu": "drill.judge.specs.swiglu",
    "gqa": "drill.judge.specs.gqa",
    "kv_cache": "drill.judge.specs.kv_cache",
}

# Every exercise of EXERCISES.md, graded or not yet (starter files exist for all).
ALL_EXERCISES: tuple[str, ...] = ("attention", "mha", "rope", "rmsnorm", "swiglu", "gqa", "kv_cache")


def exercise_names() -> list[str]:
    """Exercises that have a starter file, in the canonical order (then any extras)."""
    found = {p.stem for p in exercises_dir().glob("*.py") if not p.stem.startswith("_")}
    ordered = [n for n in ALL_EXERCISES if n in found]
    return ordered + sorted(found - set(ordered))


def graded_names() -> list[str]:
    return [n for n in SPECS if n in SPECS]


def is_graded(name: str) -> bool:
    return name in SPECS


def load_spec(name: str):
    """The Spec of a graded exercise (imports torch and the reference)."""
    if name not in SPECS:
        raise UserError(_unknown(name, graded_names(), "graded exercise"))
    return importlib.import_module(SPECS[name]).SPEC


def resolve_exercise(path: Path, exercise: str | None) -> str:
    """--exercise wins; otherwise the file's stem must name a graded exercise."""
    name = exercise if exercise is not None else path.stem
    if name not in SPECS:
        if exercise is None:
            raise UserError(
                f"cannot tell the exercise from the file name '{path.name}'; name the file after it or pass "
                f"--exercise ({', '.join(graded_names())})",
                str(path),
            )
        raise UserError(_unknown(name, graded_names(), "graded exercise"))
    return name


def check_known(name: str) -> str:
    """A name of an exercise with a starter file, else a UserError listing them."""
    names = exercise_names()
    if name not in names:
        raise UserError(_unknown(name, names, "exercise"))
    return name


def _unknown(name: str, valid: list[str], what: str) -> str:
    return f"unknown {what} '{name}'; valid: {', '.join(valid)}"
