"""Grading several files in one run: `drill check DIR`, `drill check a.py b.py`, watch mode.

- `expand` turns the command line's paths into (file, exercise) pairs: a
  directory contributes every `<exercise>.py` inside it (top level only,
  one per graded exercise), a file stands for itself.
- `grade_all` grades them concurrently with a small pool of workers
  (min(4, cores)). Each worker owns one `ChildPool` (a fork server that
  imports torch once; one pool serves one thread at a time), so N files
  cost a couple of torch imports, not N, and the parent's reference
  computations overlap with the children's runs.
- `summary_table` is the one table that closes a multi-file run (fits the terminal: ids never break).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from drill.errors import UserError


def expand(paths: list[Path], exercise: str | None,
           left_out: list[str] | None = None) -> list[tuple[Path, str | None]]:
    """(file, exercise or None) for every path; directories expand to their exercise files.

    A directory's file of an exercise this machine cannot grade (triton_rmsnorm without a GPU) is left out
    and named in `left_out`, so a folder of every starter still grades the rest; named on the command line,
    such a file is refused by check_file in one line. Raises UserError for a missing path, a directory
    combined with --exercise, or a directory holding no exercise file it can grade.
    """
    from drill.judge.devices import device_available
    from drill.judge.registry import entry, graded_names, resolve_exercise

    items: list[tuple[Path, str | None]] = []
    for p in paths:
        if p.is_dir():
            if exercise is not None:
                raise UserError("--exercise cannot be used with a directory (files there are named after their "
                                "exercise)", str(p))
            found = [p / f"{name}.py" for name in graded_names() if (p / f"{name}.py").is_file()]
            if not found:
                raise UserError("no exercise files here (expected names like "
                                f"{', '.join(n + '.py' for n in graded_names()[:3])}, ...)", str(p))
            here = [f for f in found if device_available(entry(f.stem))]  # torch asked only for a CUDA-only one
            skipped = [f"{f.name}: {f.stem} is graded on CUDA only, and torch sees no GPU here"
                       for f in found if f not in here]
            if not here:
                raise UserError(skipped[0], str(p))
            if left_out is not None:
                left_out += skipped
            items += [(f, None) for f in here]
        elif p.is_file():
            resolve_exercise(p, exercise)  # refuses an unknown name before anything runs
            items.append((p, exercise))
        else:
            raise UserError("no such file or directory", str(p))
    seen: set[Path] = set()
    unique = []
    for f, ex in items:
        key = f.resolve()
        if key not in seen:
            seen.add(key)
            unique.append((f, ex))
    return unique


def default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def grade_all(
    items: list[tuple[Path, str | None]],
    grade: Callable[[Path, str | None, Any], Any],
    *,
    workers: int | None = None,
    on_result: Callable[[int, Any], None] | None = None,
) -> list[Any]:
    """Results of `grade(path, exercise, pool)` for every item, in input order.

    `on_result(index, result)` is called as each one finishes (from a worker
    thread; keep it short). One ChildPool per worker thread, closed at the end.
    """
    from drill.judge.pool import ChildPool

    workers = max(1, min(workers or default_workers(), len(items)))
    local = threading.local()
    pools: list[ChildPool] = []
    lock = threading.Lock()

    def pool() -> ChildPool:
        if getattr(local, "pool", None) is None:
            local.pool = ChildPool()
            local.pool._ensure()  # start its torch import now, overlapping the parent's own
            with lock:
                pools.append(local.pool)
        return local.pool

    def one(index: int) -> Any:
        path, exercise = items[index]
        result = grade(path, exercise, pool())
        if on_result is not None:
            on_result(index, result)
        return result

    try:
        if workers == 1:
            return [one(i) for i in range(len(items))]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="drill-check") as ex:
            return list(ex.map(one, range(len(items))))
    finally:
        for p in pools:
            p.close()


STYLE = {"pass": "green", "fail": "red", "error": "red"}


def summary_table(results: list[Any], elapsed_s: float | None = None, width: int = 80) -> Table:
    """One row per graded file: file (and its exercise), verdict, tests, diagnosis, time; at most `width` wide.

    Identifiers (diagnosis ids, `<exercise>.py`) are never broken mid-word: a learner reads and types them
    (`drill hint ...`, the README's table of ids). A file named after its exercise says which one it is; any
    other name carries its exercise in brackets, and only such a long name folds when a row is too wide.
    """
    passed = sum(r.status == "pass" for r in results)
    title = f"{passed}/{len(results)} passed" + (f" in {elapsed_s:.1f} s" if elapsed_s is not None else "")
    rows = [(_file_cell(r), r.status.upper(), f"{r.passed}/{r.total}" if r.total else "-",  # "-": none drawn
             _note(r), _took(r.elapsed_s)) for r in results]
    headers = ("file", "result", "tests", "diagnosis / advisories", "time")
    widths = [max([len(h) if i != 3 else len("advisories"), *(len(row[i]) for row in rows)])
              for i, h in enumerate(headers)]
    # Rich's box: a rule between cells and at both ends, one space of padding each side of a cell; the
    # padding at the table's two edges goes only when the longest file name would not fit otherwise.
    room = width - sum(widths[1:]) - 3 * len(headers) - 1
    # Still too narrow for a whole file name (a long exercise name beside the longest id): the time column
    # goes, the one cell nobody types.
    whole = max((len(row[0]) for row, r in zip(rows, results, strict=True) if row[0] == f"{r.exercise}.py"),
                default=0)  # the names that may not fold
    timed = room + 2 >= whole
    if not timed:
        room += widths[4] + 3
    pad_edge = room >= widths[0]
    file_width = max(16, room if pad_edge else room + 2)
    table = Table(title=title, show_header=True, header_style="bold", title_justify="left", pad_edge=pad_edge)
    table.add_column("file", overflow="fold", max_width=file_width)
    table.add_column("result", no_wrap=True)
    table.add_column("tests", justify="right", no_wrap=True)
    table.add_column("diagnosis / advisories", min_width=widths[3])
    if timed:
        table.add_column("time", justify="right", no_wrap=True)
    for r, (name, status, tests, note, took) in zip(results, rows, strict=True):
        cells = (name, Text(status, style=STYLE.get(r.status, "")), tests, Text(note, no_wrap=True))
        table.add_row(*cells, *((took,) if timed else ()))
    return table


def _took(seconds: float) -> str:
    """"4.2 s", "12 s": a tenth of a second is news on a fast check, not on a slow one."""
    return f"{seconds:.1f} s" if seconds < 9.95 else f"{seconds:.0f} s"


def _file_cell(result: Any) -> str:
    name = Path(result.file).name
    return name if name == f"{result.exercise}.py" else f"{name} ({result.exercise})"


def _note(result: Any) -> str:
    if result.diagnosis is not None:
        return result.diagnosis.id
    n = len(result.advisories)
    return f"{n} advisor{'y' if n == 1 else 'ies'}" if n else ""
