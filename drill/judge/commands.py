"""CLI commands of the grader area: check, start, exercises, hint.

Thin: parse options, call `drill.judge.check.check_file` (or the small helpers
below), render. Nothing here imports torch at module import time.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from drill.cliutil import EXIT_FAIL, EXIT_USAGE, err_console, fail_usage, user_errors
from drill.errors import UserError
from drill.judge.registry import in_model_names

# Exercises with a slot in the reference decoder for --in-model, from the torch-free index
# (drill.judge.inmodel imports torch; --help must not).
IN_MODEL_EXERCISES = in_model_names()
EXIT_INTERRUPTED = 130  # Ctrl-C before --watch showed any verdict

CHECK_HELP = """Grade your implementation of an exercise with hidden tests.

The exercise comes from the file name (attention.py) or --exercise. A folder
grades every <exercise>.py in it, several at once, and ends with one summary
table. Your code runs in a separate, limited process; expected outputs are
computed here with the reference model. gqa, kv_cache and moe also get
an advisory audit (K/V memory; decode-step work; expert FLOPs against the
routed minimum), which fails only with --strict. Exit code: 0 all passed, 1 a test failed or your code errored,
2 usage error, a file Python cannot decode, or an attempt the progress store
could not save (the verdict is still shown, then one error line); with
--watch: the last verdict's code after Ctrl-C, 130 if none was shown yet.

--watch polls the files given when it starts: a file deleted while watched
is waited for and graded again when it comes back, but a file missing at
the start is refused (exit 2), and a new file saved into a watched folder
is not picked up (start --watch again to include it).

The panel lists at most 4 failing tests; --verbose shows every test with its
inputs and which defences were active. --json prints one JSON document (an
object for one file, a list for several) with every test: """


def _check_help() -> str:
    from drill.judge.schema import outline

    return CHECK_HELP + outline() + ". See drill/judge/README.md.\n"


def register(app: typer.Typer) -> None:
    from drill.judge import server_commands  # `drill server ...`: the judge area's warm grader

    server_commands.register(app)

    @app.command(help=_check_help())
    def check(
        files: list[Path] = typer.Argument(..., help="Your solution file(s), or a folder: every <exercise>.py in it is graded."),
        exercise: Optional[str] = typer.Option(None, "--exercise", "-e", help="Exercise name (any case, - or _), if the file is not named after it."),
        seed: Optional[int] = typer.Option(None, "--seed", help="Replay the hidden tests of an earlier run."),
        json_out: bool = typer.Option(False, "--json", help="Print one JSON document instead of panels."),
        verbose: bool = typer.Option(False, "--verbose", "-v", help="Show every test, failing inputs' shapes/dtypes, worst elements."),
        timeout: float = typer.Option(60.0, "--timeout", help="Wall-clock limit for your code, seconds.", min=0.1),
        cpu_time: float = typer.Option(60.0, "--cpu-time", help="CPU-time limit of the graded process (includes importing torch), seconds.", min=1.0),
        memory_mb: int = typer.Option(2048, "--memory-mb", help="Memory limit of the graded process, MB.", min=300),
        strict: bool = typer.Option(False, "--strict", help="Advisories fail the check too."),
        in_model: bool = typer.Option(False, "--in-model", help="Also run your component inside the reference decoder (logits + 16 greedy tokens); for "
        + ", ".join(IN_MODEL_EXERCISES) + "."),
        no_audit: bool = typer.Option(False, "--no-audit", help="Skip the advisory memory/work audits (gqa, kv_cache, moe)."),
        watch_mode: bool = typer.Option(False, "--watch", help="Re-grade on every save until Ctrl-C."),
        jobs: Optional[int] = typer.Option(None, "--jobs", "-j", help="Files graded at once (default: min(4, CPU cores)).", min=1),
        no_server: bool = typer.Option(False, "--no-server", help="Grade in this process, without the warm grading server "
                                       "(as DRILL_NO_SERVER=1; see `drill server`)."),
        device: Optional[str] = typer.Option(None, "--device", help="Where your code, its inputs and the reference run: "
                                             "cpu (default), cuda (the reference's fused CUDA kernels; --memory-mb then "
                                             "caps GPU memory too) or auto (cuda when torch sees a GPU). CUDA-only "
                                             "exercises (triton_rmsnorm) always run on cuda."),
    ) -> None:
        from drill.judge.batch import expand
        from drill.judge.devices import check_choice
        from drill.judge.runner import Limits

        limits = Limits(timeout_s=timeout, cpu_s=cpu_time, memory_mb=memory_mb)
        with user_errors():  # every usage problem is reported before any grading starts
            device = check_choice(device)
            items = expand(files, canonical_exercise(exercise, graded=True) if exercise is not None else None)
            if watch_mode and json_out:
                raise UserError("--watch and --json cannot be combined")
        # A folder always ends with its summary table, even when it holds one exercise file.
        summary = len(items) > 1 or any(f.is_dir() for f in files)
        if device == "cuda" and (watch_mode or summary):  # one line before watching or grading many files
            from drill.judge.devices import require_cuda

            with user_errors():
                require_cuda()
        if in_model and not summary:
            with user_errors():
                _check_in_model(items[0])
        opts = {"seed": seed, "limits": limits, "strict": strict, "in_model": in_model, "audit": not no_audit,
                "device": device}
        if no_server:
            opts["use_server"] = False
        out = Console(highlight=False)
        if watch_mode:
            raise typer.Exit(_watch(items, opts, out, verbose))
        results = _grade_items(items, opts, out, verbose=verbose, quiet=json_out, jobs=jobs, summary=summary)
        if json_out:
            from drill.judge.report import to_json

            typer.echo(to_json(results))
        # After the verdicts are out (panels or JSON), so a broken store never hides one.
        if not _record(results):
            raise typer.Exit(EXIT_USAGE)
        if any(r.status != "pass" for r in results):
            raise typer.Exit(EXIT_FAIL)

    @app.command()
    def start(
        name: str = typer.Argument(..., help="Exercise name (see `drill exercises`)."),
        directory: Path = typer.Argument(Path("."), help="Folder to copy the starter file into."),
        force: bool = typer.Option(False, "--force", help="Overwrite an existing file."),
    ) -> None:
        """Copy an exercise's starter file into a folder."""
        with user_errors():
            path = start_exercise(name, directory, force=force)
        typer.echo(f"wrote {path}  —  when ready: drill check {path}")

    @app.command("exercises")
    def exercises_cmd() -> None:
        """List the exercises with your attempts and best result so far."""
        from drill.judge.registry import INDEX, exercise_names

        from drill.store import open_store

        # Read-only, so a read-only or busy store still lists (with a note); a store that
        # cannot be read at all is refused (exit 2): a table of zeros would look like lost progress.
        with user_errors(), store_errors(), open_store(read_only=True) as store:
            attempts = store.attempts()
            best = store.best_results()
            note = store.note
        if note:
            err_console.print(Text(f"note: {note}", style="dim"), soft_wrap=True)
        table = Table(show_header=True, header_style="bold")
        table.add_column("exercise")
        table.add_column("track")
        table.add_column("level")
        table.add_column("attempts", justify="right")
        table.add_column("best result")
        table.add_column("last attempt")
        styles = {"pass": "green", "fail": "red", "error": "red"}
        for name in exercise_names():
            mine = [a for a in attempts if a.exercise == name]
            status = best.get(name, "-")
            last = f"{mine[-1].attempted_at[:10]} {mine[-1].status}" if mine else "-"
            entry = next((e for e in INDEX if e.name == name), None)  # a starter the index lacks: listed bare
            track, level = (entry.track, entry.difficulty) if entry else ("-", "-")
            table.add_row(name, track, level, str(len(mine)), f"[{styles.get(status, 'dim')}]{status}[/]", last)
        Console(highlight=False).print(table)
        if not attempts:
            Console(highlight=False).print("[dim]start one: drill start attention[/]")

    @app.command()
    def hint(
        name: str = typer.Argument(..., help="Exercise name."),
        n: Optional[int] = typer.Argument(None, help="Show hints 1..N (default: one more than you have seen)."),
    ) -> None:
        """Show an exercise's hints, one more each time you ask (they get more revealing)."""
        with user_errors():
            name = canonical_exercise(name)  # `Attention`, `kv-cache`: stored under the canonical name
            hints = load_hints(name)
            if n is not None and not 1 <= n <= len(hints):
                raise UserError(f"hint number must be 1..{len(hints)} for {name}, got {n}")
        from drill.store import open_store

        # `hint` saves progress (how many hints were seen), so like every writing command it
        # refuses a store it cannot read or write before showing anything: exit 2, file untouched.
        with user_errors(), store_errors():
            store = open_store()
        with store:
            with user_errors(), store_errors():
                seen = store.hints_shown(name)
            upto = n if n is not None else min(seen + 1, len(hints))
            console = Console(highlight=False)
            for i, text in enumerate(hints[:upto], 1):
                console.print(f"[bold]Hint {i}/{len(hints)}[/]: {escape(text)}\n")
            if upto < len(hints):
                console.print(f"[dim]next: drill hint {name} (hint {upto + 1} of {len(hints)})[/]")
            else:
                console.print("[dim]that was the last hint[/]")
            try:  # shown but not remembered (disk full, lock): say so in one line, exit 2
                with store_errors():
                    store.record_hints_shown(name, upto)
            except UserError as exc:
                fail_usage(f"hint shown but not remembered: {escape(str(exc))}")


def _grade(jobs: list, opts: dict, *, workers: int | None = None, pool=None) -> list:
    """Through the warm grading server when it can be used (drill/judge/client.py), else in this process."""
    from drill.judge.client import Job, grade

    use_server = opts.get("use_server")
    options = {k: v for k, v in opts.items() if k != "use_server"}
    return grade([Job(f, ex, **{**options, "in_model": in_model}) for f, ex, in_model in jobs], workers=workers,
                 use_server=use_server, pool=pool)


def _run_check(f: Path, exercise: str | None, opts: dict, quiet: bool, pool=None):
    if not quiet and sys.stderr.isatty():
        with err_console.status(f"grading {f.name} …", spinner="dots"):
            return _grade([(f, exercise, opts["in_model"])], opts, pool=pool)[0]
    return _grade([(f, exercise, opts["in_model"])], opts, pool=pool)[0]


def _check_in_model(item: tuple) -> None:
    """Refuse --in-model up front, before any grading, for a lone file of an exercise without a decoder slot.

    With several files or a folder it applies to those that have one (a
    folder of every exercise stays gradable); a file named alone is a usage error.
    """
    from drill.judge.registry import resolve_exercise

    name = resolve_exercise(*item)
    if name not in IN_MODEL_EXERCISES:
        raise UserError(f"--in-model is available for {', '.join(IN_MODEL_EXERCISES)}; not for {name}", str(item[0]))


def _grade_items(
    items: list, opts: dict, out: Console, *, verbose: bool, quiet: bool, jobs: int | None = None, summary: bool = False
) -> list:
    """Grade one file (a panel) or several (concurrently; panels for the failures, then one summary table).

    `summary` forces the table for a single file too (it came from a folder).
    """
    import time

    from drill.judge.report import render

    if len(items) == 1 and not summary:
        f, ex = items[0]
        with user_errors():
            result = _run_check(f, ex, opts, quiet)
        if not quiet:
            render(result, out, verbose=verbose)
        return [result]

    from drill.judge.batch import summary_table
    from drill.judge.registry import resolve_exercise

    t0 = time.monotonic()
    with user_errors():
        # several files: --in-model applies to those with a slot for it
        todo = [(f, ex, opts["in_model"] and resolve_exercise(f, ex) in IN_MODEL_EXERCISES) for f, ex in items]
        if not quiet and sys.stderr.isatty():
            with err_console.status(f"grading {len(items)} files …", spinner="dots"):
                results = _grade(todo, opts, workers=jobs)
        else:
            results = _grade(todo, opts, workers=jobs)
    for r in results:
        if not quiet and (verbose or r.status != "pass" or r.advisories):
            render(r, out, verbose=verbose)
    if not quiet:
        out.print(summary_table(results, time.monotonic() - t0))
    return results


def _watch(items: list, opts: dict, out: Console, verbose: bool) -> int:
    """Re-grade changed files until Ctrl-C; the exit code is the last verdict's (0 = all pass)."""
    from contextlib import nullcontext

    from drill.judge.report import render
    from drill.judge.runner import ChildPool
    from drill.judge.server_dir import disabled
    from drill.judge.watch import watch

    exercise_of = {f: ex for f, ex in items}
    last: dict = {}
    saved: list[bool] = []  # one per verdict: was its attempt recorded?
    in_process = opts.get("use_server") is False or disabled()
    # Warm between saves: the grading server, or without it a fork server of our own (a fork, not an import of torch).
    with ChildPool() if in_process else nullcontext() as pool:

        def grade(changed: list) -> None:
            from drill.judge.registry import resolve_exercise

            for f in changed:
                try:  # --in-model applies to the files with a slot for it, as in a one-shot run
                    in_model = opts["in_model"] and resolve_exercise(f, exercise_of[f]) in IN_MODEL_EXERCISES
                    result = _grade([(f, exercise_of[f], in_model)], opts, pool=pool)[0]
                except UserError as exc:  # e.g. the file vanished mid-save: say so, keep watching
                    err_console.print(f"[red]error:[/] {escape(str(exc))}")
                    continue
                last[f] = result
                render(result, out, verbose=verbose)
                saved.append(_record([result]))

        def idle() -> None:
            out.print(f"[dim]watching {len(items)} file{'s' if len(items) != 1 else ''} — save to re-grade, Ctrl-C to stop[/]")

        def missing(f: Path) -> None:  # its last panel is stale now: say so, keep waiting
            out.print(Text(f"{f} deleted — waiting for it to come back", style="dim"))

        try:
            watch(list(exercise_of), grade, on_idle=idle, on_missing=missing)
        except KeyboardInterrupt:
            out.print("[dim]stopped watching[/]")
    if not last:  # stopped before any verdict: an interruption, not a failure
        return EXIT_INTERRUPTED
    if not all(saved):
        return EXIT_USAGE
    return 0 if all(r.status == "pass" for r in last.values()) else EXIT_FAIL


def _record(results: list) -> bool:
    """Save the attempts; False (after one `error:` line on stderr) when the store refused them.

    Called after the verdicts are printed: grading is useful even when the
    progress store is broken, so the verdict is never withheld, but losing the
    attempt is never silent either: the caller exits 2 (an unreadable or
    unwritable store, as for every command that saves progress), which also
    keeps a pass whose record was lost from reading as a clean 0.
    """
    from drill.store import Attempt, now_iso, open_store

    try:
        with store_errors(), open_store() as store:
            for result in results:
                store.record_attempt(
                    Attempt(
                        exercise=result.exercise,
                        attempted_at=now_iso(),
                        status=result.status,
                        diagnosis=result.diagnosis.id if result.diagnosis else None,
                        seed=result.seed,
                        tests_passed=result.passed,
                        tests_total=result.total,
                        elapsed_ms=int(result.elapsed_s * 1000),
                        file=str(Path(result.file).resolve()),
                    )
                )
    except UserError as exc:
        what = "attempt" if len(results) == 1 else "attempts"
        err_console.print(f"[bold red]error:[/] {what} not saved: {escape(str(exc))}", soft_wrap=True)
        return False
    return True


@contextmanager
def store_errors() -> Iterator[None]:
    """A store that opened but fails a read (damage past its header) becomes the store's one-line refusal."""
    import sqlite3

    try:
        yield
    except sqlite3.DatabaseError as exc:
        from drill.store import default_path

        raise UserError(
            f"progress store is not a readable SQLite database ({exc}); it was left untouched — "
            "move it aside (or set DRILL_HOME) to start a fresh one",
            str(default_path()),
        ) from exc


def canonical_exercise(name: str, *, graded: bool = False) -> str:
    """An exercise name as typed (`Attention`, `kv-cache`, `KV_Cache`) -> its canonical form, when one matches.

    Quiz filters ignore case, so exercise names do too. A name that matches
    nothing is returned unchanged, for the caller's "unknown exercise" message.
    """
    from drill.judge.registry import exercise_names, graded_names

    canon = name.strip().lower().replace("-", "_")
    return canon if canon in (graded_names() if graded else exercise_names()) else name


def start_exercise(name: str, directory: Path, *, force: bool = False) -> Path:
    """Copy the starter file of `name` into `directory`; never overwrite without force."""
    from drill.judge.registry import check_known
    from drill.paths import exercises_dir

    name = check_known(canonical_exercise(name))
    src = exercises_dir() / f"{name}.py"
    dest = directory / f"{name}.py"
    blocker = next((p for p in (directory, *directory.parents) if p.exists()), None)
    if blocker is not None and not blocker.is_dir():  # mkdir would say "File exists" / "Not a directory"
        raise UserError(f"{blocker} is a file, not a folder")
    if dest.exists() and not force:
        raise UserError("already exists; pass --force to overwrite it", str(dest))
    try:
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
    except OSError as exc:
        raise UserError(f"cannot write the starter file: {exc.strerror}", str(dest)) from exc
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
