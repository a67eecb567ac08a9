"""An exercise's files as the commands hand them out: the canonical name, the starter copy, the hints.

Plain functions under `drill start` and `drill hint` (drill/judge/commands.py);
torch-free, like everything the CLI imports at start-up.
"""

from __future__ import annotations

import os
from pathlib import Path

from drill.errors import UserError


def canonical_exercise(name: str, *, graded: bool = False) -> str:
    """An exercise name as typed (`Attention`, `kv-cache`, `KV_Cache`) -> its canonical form, when one matches.

    Quiz filters ignore case, so exercise names do too. A name that matches
    nothing is returned unchanged, for the caller's "unknown exercise" message.
    """
    from drill.judge.registry import exercise_names, graded_names

    canon = name.strip().lower().replace("-", "_")
    return canon if canon in (graded_names() if graded else exercise_names()) else name


def start_exercise(name: str, directory: Path, *, force: bool = False, text: bytes | None = None) -> Path:
    """Copy the starter file of `name` into `directory`; never overwrite without force. `text`: a generated
    starter to write instead of the copy (debug_gpt's planted file, drill/debug_round/round.py)."""
    from drill.judge.registry import check_known
    from drill.paths import exercises_dir
    from drill.safe_files import write_atomic

    name = check_known(canonical_exercise(name))
    src = exercises_dir() / f"{name}.py"
    dest = directory / f"{name}.py"
    blocker = next((p for p in (directory, *directory.parents) if p.exists()), None)
    if blocker is not None and not blocker.is_dir():  # mkdir would say "File exists" / "Not a directory"
        raise UserError(f"{blocker} is a file, not a folder")
    if os.path.lexists(dest) and not force:  # a dangling symlink too: never written through
        raise UserError("already exists; pass --force to overwrite it", str(dest))
    try:
        text = src.read_bytes() if text is None else text
    except OSError as exc:
        raise UserError(f"cannot read the starter file: {exc.strerror}", str(src)) from exc
    write_atomic(dest, text)
    return dest


def load_hints(name: str) -> list[str]:
    """The hints list of exercises/<name>.hints.yaml, validated."""
    import yaml

    from drill.judge.registry import check_known
    from drill.paths import exercises_dir

    name = check_known(canonical_exercise(name))
    path = exercises_dir() / f"{name}.hints.yaml"
    if not path.is_file():
        raise UserError(f"no hints for {name}", str(path))
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise UserError(f"bad YAML: {getattr(exc, 'problem', exc)}", where) from exc
    hints = data.get("hints") if isinstance(data, dict) else None
    if not isinstance(hints, list) or not hints or not all(isinstance(h, str) and h.strip() for h in hints):
        raise UserError("expected `hints:` with a list of non-empty strings", str(path))
    return [h.strip() for h in hints]
