"""`drill.check`: grade a function, a class, a module or a file from Python (a notebook, a script).

No second grader: the object's source is written to `<exercise>.py` in a private temporary folder (or a
path is graded where it is) and goes through `drill.judge.client.grade`, the path `drill check FILE`
takes: the static policy, the sandboxed child, the warm grading server when it can be used, the same
seed handling. The attempt is recorded in the progress store as the CLI records it (`record=False`
leaves the store alone), so `drill exercises` shows notebook attempts too. What is graded for an
object is decided in `drill/object_source.py`.

Nothing here imports torch: on the server path the notebook's kernel never does (the server holds it);
with DRILL_NO_SERVER=1 the check imports it, as `drill check --no-server` does.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.jupyter import JupyterMixin
from rich.text import Text

from drill.errors import UserError
from drill.judge.limits import Limits


class CheckResult(JupyterMixin):
    """One graded object: `.passed` (bool), `.status`, `.tests`, `.diagnosis`, `.seed`, `to_json()`.

    In Jupyter it shows as the CLI's panel (Rich's JupyterMixin renders `__rich_console__` as HTML);
    `.result` is the judge's own `Result` (the `drill check` one), `.source` the text graded for an
    object or a cell (None for a file), `.not_saved` why the attempt could not be recorded ("" when it was,
    or when `record=False`).
    """

    def __init__(self, result: Any, source: str | None = None, not_saved: str = "") -> None:
        self.result = result
        self.source = source
        self.not_saved = not_saved
        self.verbose = False

    @property
    def passed(self) -> bool:
        return self.result.status == "pass"

    @property
    def status(self) -> str:
        return self.result.status

    @property
    def exercise(self) -> str:
        return self.result.exercise

    @property
    def file(self) -> str:
        return self.result.file

    @property
    def seed(self) -> int:
        return self.result.seed

    @property
    def tests(self) -> list:
        return self.result.tests

    @property
    def tests_passed(self) -> int:
        return self.result.passed

    @property
    def tests_total(self) -> int:
        return self.result.total

    @property
    def diagnosis(self) -> Any:
        """The named mistake (`id`, `title`, `why`, `fix`), or None (a pass, or no known mistake)."""
        return self.result.diagnosis

    def to_json(self) -> str:
        """The document `drill check FILE --json` prints for the same file and seed."""
        from drill.judge.report import to_json

        return to_json([self.result])

    def to_dict(self) -> dict[str, Any]:
        return json.loads(self.to_json())

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from drill.judge.report import panel

        parts: list[Any] = [panel(self.result, verbose=self.verbose)]
        if self.not_saved:
            parts.append(Text(f"attempt not saved: {self.not_saved}", style="bold red"))
        yield Group(*parts)

    def __repr__(self) -> str:
        head = f"{self.exercise}: {self.status.upper()}, {self.tests_passed}/{self.tests_total} tests passed"
        if self.diagnosis is not None:
            head += f", {self.diagnosis.id}"
        return f"<drill.CheckResult {head}, seed {self.seed}>"


def check(exercise: str, obj: Any, *, seed: int | None = None, strict: bool = False, in_model: bool = False,
          device: str | None = None, timeout: float = 60.0, record: bool = True,
          use_server: bool | None = None, pool: Any = None) -> CheckResult:
    """Grade `obj` (a function, a class, a tuple of them, a module or a path) as `exercise`.

    The options are `drill check`'s (`--seed`, `--strict`, `--in-model`, `--device`, `--timeout`,
    `--no-server` as use_server=False); `pool`, a `drill.judge.pool.ChildPool`, forks the graded process
    from a warm fork server when grading in this process (as `drill check --watch` does). Raises
    `drill.errors.UserError` (shown as one line in Jupyter) for anything that cannot be graded: an
    unknown exercise, a builtin, a lambda, a missing file.
    """
    from drill.object_source import graded_source

    name, entry = _exercise(exercise, in_model)
    what = graded_source(obj, name, entry.graded)
    opts = _options(seed, strict, in_model, device, timeout, use_server, pool)
    if what.path is not None:
        return _finish(_grade(what.path, name, opts), None, record)
    return _grade_text(name, what.text or "", what.label, opts, record)


def check_source(exercise: str, source: str, *, label: str = "<source>", seed: int | None = None,
                 strict: bool = False, in_model: bool = False, device: str | None = None, timeout: float = 60.0,
                 record: bool = True, use_server: bool | None = None, pool: Any = None) -> CheckResult:
    """Grade a source text as the file `<exercise>.py` holding it (what `%%drill` does with a cell).

    `label` is what the result's `file` says (and what stands for the temporary file in its messages).
    """
    if not isinstance(source, str):
        raise UserError(f"drill.check_source grades source text (a str); got {type(source).__name__}")
    name, _ = _exercise(exercise, in_model)
    return _grade_text(name, source, label, _options(seed, strict, in_model, device, timeout, use_server, pool),
                       record)


def hints(exercise: str, n: int | None = None) -> tuple[list[str], int, str]:
    """(hints to show, how many the exercise has, canonical name): one more than seen, as `drill hint`.

    The count is remembered in the progress store, as the CLI remembers it; a store that cannot be
    read or written is refused (UserError) before anything is shown.
    """
    from drill.judge.commands import store_errors
    from drill.judge.exercise_files import canonical_exercise, load_hints
    from drill.store import open_store

    name = canonical_exercise(exercise)
    every = load_hints(name)
    if n is not None and not 1 <= n <= len(every):
        raise UserError(f"hint number must be 1..{len(every)} for {name}, got {n}")
    with store_errors(), open_store() as store:
        upto = n if n is not None else min(store.hints_shown(name) + 1, len(every))
        store.record_hints_shown(name, upto)
    return every[:upto], len(every), name


def starter(exercise: str) -> tuple[str, str]:
    """(canonical name, the starter file's text) for `%drill_start`."""
    from drill.judge.exercise_files import canonical_exercise
    from drill.judge.registry import check_known
    from drill.judge.source import read_source
    from drill.paths import exercises_dir

    name = check_known(canonical_exercise(exercise))
    return name, read_source(exercises_dir() / f"{name}.py")


# -- the CLI's path ------------------------------------------------------------------------------------


def _exercise(exercise: str, in_model: bool) -> tuple[str, Any]:
    """The canonical graded exercise and its index entry; the CLI's one-line refusals for a bad name."""
    from drill.judge import registry
    from drill.judge.exercise_files import canonical_exercise

    if not isinstance(exercise, str):
        raise UserError(f"the exercise is named by a str (see `drill exercises`); got {type(exercise).__name__}")
    name = canonical_exercise(exercise, graded=True)
    registry.resolve_exercise(Path(f"{name}.py"), name)  # an unknown name: the CLI's message
    if in_model and name not in registry.in_model_names():
        raise UserError(f"--in-model is available for {', '.join(registry.in_model_names())}; not for {name}")
    return name, registry.entry(name)


def _options(seed: int | None, strict: bool, in_model: bool, device: str | None, timeout: float,
             use_server: bool | None, pool: Any = None) -> dict[str, Any]:
    from drill.judge.devices import check_choice

    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise UserError(f"seed must be an int, got {type(seed).__name__}")
    if not isinstance(timeout, (int, float)) or not timeout >= 0.1:
        raise UserError(f"timeout must be at least 0.1 s, got {timeout!r}")
    return {"seed": seed, "limits": Limits(timeout_s=float(timeout)), "strict": bool(strict),
            "in_model": bool(in_model), "device": check_choice(device), "use_server": use_server, "pool": pool}


def _grade(path: Path, name: str, opts: dict[str, Any]) -> Any:
    from drill.judge.client import Job, grade

    options = {k: v for k, v in opts.items() if k not in ("use_server", "pool")}
    return grade([Job(path, name, **options)], use_server=opts["use_server"], pool=opts["pool"])[0]


def _grade_text(name: str, text: str, label: str, opts: dict[str, Any], record: bool) -> CheckResult:
    """Write `text` to `<name>.py` in a private folder (0700, removed afterwards), grade it, relabel it."""
    folder = Path(tempfile.mkdtemp(prefix="drill-check-"))
    try:
        path = folder / f"{name}.py"
        path.write_text(text, encoding="utf-8")
        try:
            result = _grade(path, name, opts)
        except UserError as exc:  # its file:line names the temporary file: name what the learner wrote
            raise UserError(exc.message, _relabel(exc.where, path, label) if exc.where else None) from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    _relabel_result(result, path, label)
    return _finish(result, text, record)


def _relabel(text: str, path: Path, label: str) -> str:
    """The temporary file's path (as written, or resolved) in a message -> the label."""
    for form in dict.fromkeys((str(path), str(path.resolve()))):
        text = text.replace(form, label)
    return text


def _relabel_result(result: Any, path: Path, label: str) -> None:
    result.file = label
    for t in result.tests:
        t.message, t.short, t.detail = (_relabel(s, path, label) for s in (t.message, t.short, t.detail))
    result.diagnosis_detail = _relabel(result.diagnosis_detail, path, label)
    result.advisories = [_relabel(a, path, label) for a in result.advisories]
    result.output_tail = _relabel(result.output_tail, path, label)


def _finish(result: Any, source: str | None, record: bool) -> CheckResult:
    return CheckResult(result, source, _record(result) if record else "")


def _record(result: Any) -> str:
    """Save the attempt as `drill check` does; "" when saved, else why not (the verdict stands either way)."""
    from drill.judge.commands import store_errors
    from drill.store import Attempt, now_iso, open_store

    file = result.file if result.file.startswith("<") else str(Path(result.file).resolve())
    try:
        with store_errors(), open_store() as store:
            store.record_attempt(Attempt(
                exercise=result.exercise, attempted_at=now_iso(), status=result.status,
                diagnosis=result.diagnosis.id if result.diagnosis else None, seed=result.seed,
                tests_passed=result.passed, tests_total=result.total, elapsed_ms=int(result.elapsed_s * 1000),
                file=file))
    except UserError as exc:
        return str(exc)
    return ""
