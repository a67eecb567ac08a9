"""CLI commands of the grader area: check, start, exercises, hint, and `drill server ...`.

Thin: parse options, call `drill.judge.client.grade` (or the plain functions of
drill/judge/exercise_files.py), render. Nothing here imports torch at module import time.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from drill.cliutil import EXIT_FAIL, EXIT_USAGE, err_console, fail_usage, user_errors
from drill.errors import UserError
from drill.judge import server_commands
from drill.judge.exercise_files import canonical_exercise, load_hints, start_exercise
from drill.judge.registry import in_model_names
from drill.judge.train_view import TRAIN_HELP

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


def _explain(results: list, out: Console) -> None:
    """--explain: the remaining planted bugs of each debug_gpt result, by name (drill/debug_round/round.py)."""
    from drill.debug_round.round import explain

    for r in results:
        if r.exercise == "debug_gpt" and r.status != "error":
            with user_errors():
                lines = explain(r)
            out.print(f"[bold]{escape(r.file)}[/]: planted bugs remaining")
            for line in lines:
                out.print(f"  {escape(line)}")


def _check_help() -> str:
    from drill.judge.schema import outline

    return CHECK_HELP + outline() + ". See drill/judge/README.md.\n"


app = typer.Typer()
app.add_typer(server_commands.app, name="server")  # `drill server ...`: the judge area's warm grader


@app.command(help=_check_help())
def check(
    files: Annotated[list[Path], typer.Argument(
        help="Your solution file(s), or a folder: every <exercise>.py in it is graded.")],
    exercise: Annotated[str | None, typer.Option(
        "--exercise", "-e", help="Exercise name (any case, - or _), if the file is not named after it.")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Replay the hidden tests of an earlier run.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON document instead of panels.")] = False,
    fmt: Annotated[str | None, typer.Option(
        "--format", metavar="rich|line|json", help="rich (default): panels, and a summary table for several "
        "files; line: one file:line:col: error: <title> \\[id] line per problem, for editors (nothing for a "
        "pass; see exercises/README.md); json: as --json.")] = None,
    junit: Annotated[Path | None, typer.Option(
        "--junit", help="Also write a JUnit XML report (one testsuite per file, one testcase per hidden test) "
        "for CI; its folder must exist.")] = None,
    verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="Show every test, failing inputs' shapes/dtypes, worst elements.")] = False,
    timeout: Annotated[float, typer.Option(
        "--timeout", help="Wall-clock limit for your code, seconds.", min=0.1)] = 60.0,
    cpu_time: Annotated[float, typer.Option(
        "--cpu-time", help="CPU-time limit of the graded process (includes importing torch), seconds.",
        min=1.0)] = 60.0,
    memory_mb: Annotated[int, typer.Option(
        "--memory-mb", help="Memory limit of the graded process, MB.", min=300)] = 2048,
    strict: Annotated[bool, typer.Option("--strict", help="Advisories fail the check too.")] = False,
    in_model: Annotated[bool, typer.Option(
        "--in-model", help="Also run your component inside the reference decoder (logits + 16 greedy tokens; lora: "
        "one training step of its adapters); for "
        + ", ".join(IN_MODEL_EXERCISES) + ".")] = False,
    no_audit: Annotated[bool, typer.Option(
        "--no-audit", help="Skip the advisory memory/work audits (gqa, kv_cache, moe).")] = False,
    watch_mode: Annotated[bool, typer.Option("--watch", help="Re-grade on every save until Ctrl-C.")] = False,
    explain: Annotated[bool, typer.Option(
        "--explain", help="debug_gpt: name each planted bug that remains and what it breaks.")] = False,
    jobs: Annotated[int | None, typer.Option(
        "--jobs", "-j", help="Files graded at once (default: min(4, CPU cores)).", min=1)] = None,
    no_server: Annotated[bool, typer.Option(
        "--no-server",
        help="Grade in this process, without the warm grading server (as DRILL_NO_SERVER=1; see `drill server`).",
    )] = False,
    device: Annotated[str | None, typer.Option(
        "--device", help="Where your code, its inputs and the reference run: cpu (default), cuda (the reference's "
        "fused CUDA kernels; --memory-mb then caps GPU memory too) or auto (cuda when torch sees a GPU). "
        "CUDA-only exercises (triton_rmsnorm) always run on cuda.")] = None,
) -> None:
    """`drill check` (its help is CHECK_HELP)."""
    import time

    from drill.judge.batch import expand
    from drill.judge.devices import check_choice
    from drill.judge.limits import Limits

    t0 = time.monotonic()
    limits = Limits(timeout_s=timeout, cpu_s=cpu_time, memory_mb=memory_mb)
    with user_errors():  # every usage problem is reported before any grading starts
        fmt = _output_format(fmt, json_out, verbose)
        json_out = fmt == "json"
        device = check_choice(device)
        left_out: list[str] = []
        items = expand(files, canonical_exercise(exercise, graded=True) if exercise is not None else None,
                       left_out)
        if watch_mode and json_out:
            raise UserError("--watch and --json cannot be combined")
        if watch_mode and junit is not None:
            raise UserError("--watch and --junit cannot be combined (grade once to write a report)")
        if junit is not None:
            from drill.judge.junit import writable_target

            junit = writable_target(junit)
    for line in left_out:  # on stderr: --json's stdout stays one document
        err_console.print(Text(f"left out {line}", style="dim"), soft_wrap=True)
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
        raise typer.Exit(_watch(items, opts, out, verbose, fmt))
    results = _grade_items(items, opts, out, verbose=verbose, quiet=fmt != "rich", jobs=jobs, summary=summary)
    if json_out:
        from drill.judge.report import to_json

        typer.echo(to_json(results))
    elif fmt == "line":
        _print_lines(results)
    elif explain:
        _explain(results, out)
    written = junit is None or _write_junit(junit, results, time.monotonic() - t0)
    # After the verdicts are out (panels, lines or JSON), so a broken store never hides one.
    if not _record(results) or not written:
        raise typer.Exit(EXIT_USAGE)
    if any(r.status != "pass" for r in results):
        raise typer.Exit(EXIT_FAIL)


@app.command()
def start(
    name: Annotated[str, typer.Argument(help="Exercise name (see `drill exercises`).")],
    directory: Annotated[Path, typer.Argument(help="Folder to copy the starter file into.")] = Path("."),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
    bugs: Annotated[int | None, typer.Option(
        "--bugs", help="debug_gpt only: how many bugs to plant, 1 .. 8 (default 4).")] = None,
    seed: Annotated[int | None, typer.Option(
        "--seed", help="debug_gpt only: which bugs and variant (drawn at random and printed when absent).")] = None,
) -> None:
    """Copy an exercise's starter file into a folder (debug_gpt: write one with planted bugs)."""
    with user_errors():
        if canonical_exercise(name) == "debug_gpt":
            from drill.debug_round.bugs import DEFAULT_BUGS
            from drill.debug_round.round import write_starter

            path, written = write_starter(directory, seed, DEFAULT_BUGS if bugs is None else bugs, force=force)
            typer.echo(f"wrote {path} (seed {written.plan.seed}, {written.plan.bugs} planted bugs)  —  when "
                       f"ready: drill check {path}")
            return
        if bugs is not None or seed is not None:
            raise UserError("--bugs and --seed apply to debug_gpt only")
        path = start_exercise(name, directory, force=force)
    typer.echo(f"wrote {path}  —  when ready: drill check {path}")


@app.command("exercises")
def exercises_cmd() -> None:
    """List the exercises with your attempts and best result so far."""
    from drill.store import open_store

    # Read-only, so a read-only or busy store still lists (with a note); a store that
    # cannot be read at all is refused (exit 2): a table of zeros would look like lost progress.
    with user_errors(), store_errors(), open_store(read_only=True) as store:
        attempts = store.attempts()
        best = store.best_results()
        note = store.note
    if note:
        err_console.print(Text(f"note: {note}", style="dim"), soft_wrap=True)
    console = Console(highlight=False)
    console.print(_exercises_table(attempts, best, console))
    if not attempts:
        console.print("[dim]start one: drill start attention[/]")


# Dropped in this order when the table is wider than the terminal: an exercise's name is never cut.
_OPTIONAL_COLUMNS = ("track", "level", "last attempt", "attempts")


def _exercises_table(attempts: list, best: dict, console: Console | None = None) -> Table:
    """One row per exercise of the index: track, level, attempts, best result, last attempt; on a console too
    narrow for all of them, the optional columns go one by one (track first), and the name is never cut."""
    from rich.measure import Measurement

    from drill.judge.registry import INDEX, exercise_names

    styles = {"pass": "green", "fail": "red", "error": "red"}
    rows = []
    for name in exercise_names():
        mine = [a for a in attempts if a.exercise == name]
        status = best.get(name, "-")
        last = f"{mine[-1].attempted_at[:10]} {mine[-1].status}" if mine else "-"
        entry = next((e for e in INDEX if e.name == name), None)  # a starter the index lacks: listed bare
        track, level = (entry.track, entry.difficulty) if entry else ("-", "-")
        rows.append({"exercise": name, "track": track, "level": level, "attempts": str(len(mine)),
                     "best result": f"[{styles.get(status, 'dim')}]{status}[/]", "last attempt": last})
    columns = ["exercise", "track", "level", "attempts", "best result", "last attempt"]
    dropped = list(_OPTIONAL_COLUMNS)
    padding = 1
    while True:
        table = Table(show_header=True, header_style="bold", padding=(0, padding))
        for column in columns:
            table.add_column(column, justify="right" if column == "attempts" else "left",
                             no_wrap=column in ("exercise", "best result"))
        for row in rows:
            table.add_row(*(row[c] for c in columns))
        wide = console.options.update_width(10_000) if console is not None else None  # the table's natural width
        if console is None or Measurement.get(console, wide, table).maximum <= console.width:
            return table
        if dropped:
            columns.remove(dropped.pop(0))
        elif padding:  # the last resort before a cut name: no space inside the cells (40 columns)
            padding = 0
        else:
            return table
@app.command()
def hint(
    name: Annotated[str, typer.Argument(help="Exercise name.")],
    n: Annotated[int | None, typer.Argument(
        help="Show hints 1..N (default: one more than you have seen).")] = None,
    file: Annotated[Path, typer.Option(
        "--file", help="debug_gpt only: the planted file whose bugs to hint at.")] = Path("debug_gpt.py"),
) -> None:
    """Show an exercise's hints, one more each time you ask (debug_gpt: bug by bug, in the file's order).

    They get more revealing as you go; for debug_gpt they are the planted bugs' own hints, and a bug's
    line range comes only in its last one."""
    with user_errors():
        name = canonical_exercise(name)  # `Attention`, `kv-cache`: stored under the canonical name
        if name == "debug_gpt":
            from drill.debug_round.round import hints as planted_hints

            hints = planted_hints(file)
        else:
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
        _show_hints(name, hints, upto)
        try:  # shown but not remembered (disk full, lock): say so in one line, exit 2
            with store_errors():
                store.record_hints_shown(name, upto)
        except UserError as exc:
            fail_usage(f"hint shown but not remembered: {escape(str(exc))}")


def _show_hints(name: str, hints: list[str], upto: int) -> None:
    console = Console(highlight=False)
    for i, text in enumerate(hints[:upto], 1):
        console.print(f"[bold]Hint {i}/{len(hints)}[/]: {escape(text)}\n")
    if upto < len(hints):
        console.print(f"[dim]next: drill hint {name} (hint {upto + 1} of {len(hints)})[/]")
    else:
        console.print("[dim]that was the last hint[/]")


FORMATS = ("rich", "line", "json")


def _output_format(fmt: str | None, json_out: bool, verbose: bool) -> str:
    """The --format asked for, with --json as its old spelling of `json`; contradictions refused in one line."""
    if fmt is not None and fmt.lower() not in FORMATS:
        raise UserError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    chosen = fmt.lower() if fmt is not None else ("json" if json_out else "rich")
    if json_out and chosen != "json":
        raise UserError(f"--json and --format {chosen} cannot be combined (--json is --format json)")
    if verbose and chosen == "line":
        raise UserError("--verbose and --format line cannot be combined (--verbose widens the panels)")
    return chosen


def _print_lines(results: list) -> None:
    """--format line: plain lines on stdout (never wrapped by Rich: an editor parses each one)."""
    from drill.judge.editor_lines import lines_for

    for r in results:
        for line in lines_for(r):
            typer.echo(line)


def _write_junit(target: Path, results: list, elapsed_s: float) -> bool:
    """Write the --junit report; False (after one `error:` line) when it could not be written after all."""
    from drill.judge.junit import write_report

    try:
        write_report(target, results, elapsed_s)
    except UserError as exc:
        err_console.print(f"[bold red]error:[/] JUnit report not written: {escape(str(exc))}", soft_wrap=True)
        return False
    return True


def _grade(jobs: list, opts: dict, *, workers: int | None = None, pool=None) -> list:
    """Through the warm grading server when it can be used (drill/judge/client.py), else in this process."""
    from drill.judge.client import Job, grade

    use_server = opts.get("use_server")
    options = {k: v for k, v in opts.items() if k != "use_server"}
    return grade([Job(f, ex, **{**options, "in_model": in_model}) for f, ex, in_model in jobs], workers=workers,
                 use_server=use_server, pool=pool, while_waiting=_load_renderer)


def _load_renderer() -> None:
    """The report, the summary table and the progress store: imported while the server grades (see _grade)."""
    import drill.judge.batch
    import drill.judge.report
    import drill.store  # noqa: F401


def _spinner(text: str, quiet: bool):
    """A "grading …" spinner on a terminal's stderr; nothing for --json or a pipe."""
    from contextlib import nullcontext

    if quiet or not sys.stderr.isatty():
        return nullcontext()
    return err_console.status(text, spinner="dots")


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
    if len(items) == 1 and not summary:
        f, ex = items[0]
        with user_errors(), _spinner(f"grading {f.name} …", quiet):
            result = _grade([(f, ex, opts["in_model"])], opts)[0]
        if not quiet:
            from drill.judge.report import render  # after the request: see _load_renderer

            render(result, out, verbose=verbose)
        return [result]
    return _grade_many(items, opts, out, verbose=verbose, quiet=quiet, jobs=jobs)


def _grade_many(items: list, opts: dict, out: Console, *, verbose: bool, quiet: bool, jobs: int | None) -> list:
    import time

    from drill.judge.registry import resolve_exercise

    t0 = time.monotonic()
    with user_errors():
        # several files: --in-model applies to those with a slot for it
        todo = [(f, ex, opts["in_model"] and resolve_exercise(f, ex) in IN_MODEL_EXERCISES) for f, ex in items]
        with _spinner(f"grading {len(items)} files …", quiet):
            results = _grade(todo, opts, workers=jobs)
    if quiet:
        return results
    from drill.judge.batch import summary_table  # after the request: see _load_renderer
    from drill.judge.report import render

    for r in results:
        if verbose or r.status != "pass" or r.advisories:
            render(r, out, verbose=verbose)
    out.print(summary_table(results, time.monotonic() - t0, width=out.width))
    return results


def _watch(items: list, opts: dict, out: Console, verbose: bool, fmt: str = "rich") -> int:
    """Re-grade changed files until Ctrl-C; the exit code is the last verdict's (0 = all pass)."""
    from contextlib import nullcontext

    from drill.judge.pool import ChildPool
    from drill.judge.server_dir import disabled
    from drill.judge.watch import watch

    in_process = opts.get("use_server") is False or disabled()
    # Warm between saves: the grading server, or without it a fork server of our own (a fork, not an import of torch).
    with ChildPool() if in_process else nullcontext() as pool:
        session = _WatchSession(dict(items), opts, out, verbose, pool, lines=fmt == "line")
        try:
            watch(list(session.exercise_of), session.grade, on_idle=session.idle, on_missing=session.missing)
        except KeyboardInterrupt:
            out.print("[dim]stopped watching[/]")
    return session.exit_code()


class _WatchSession:
    """What --watch does on each event, and the verdicts it has seen (for the exit code)."""

    def __init__(self, exercise_of: dict, opts: dict, out: Console, verbose: bool, pool, *,
                 lines: bool = False) -> None:
        self.exercise_of, self.opts, self.out, self.verbose, self.pool = exercise_of, opts, out, verbose, pool
        self.lines = lines  # --format line: editor lines, a round's start and end marked for a background matcher
        self.last: dict = {}
        self.saved: list[bool] = []  # one per verdict: was its attempt recorded?

    def grade(self, changed: list) -> None:
        from drill.judge.registry import resolve_exercise
        from drill.judge.report import render

        if self.lines:
            typer.echo(f"drill: grading {' '.join(str(f) for f in changed)}")
        for f in changed:
            exercise = self.exercise_of[f]
            try:  # --in-model applies to the files with a slot for it, as in a one-shot run
                in_model = self.opts["in_model"] and resolve_exercise(f, exercise) in IN_MODEL_EXERCISES
                result = _grade([(f, exercise, in_model)], self.opts, pool=self.pool)[0]
            except UserError as exc:  # e.g. the file vanished mid-save: say so, keep watching
                err_console.print(f"[red]error:[/] {escape(str(exc))}")
                continue
            self.last[f] = result
            if self.lines:
                _print_lines([result])
            else:
                render(result, self.out, verbose=self.verbose)
            self.saved.append(_record([result]))

    def idle(self) -> None:
        n = len(self.exercise_of)
        if self.lines:  # plain, on stdout: VS Code's background problem matcher ends a round on this line
            typer.echo(f"drill: watching {n} file{'s' if n != 1 else ''} — save to re-grade, Ctrl-C to stop")
            return
        self.out.print(f"[dim]watching {n} file{'s' if n != 1 else ''} — save to re-grade, Ctrl-C to stop[/]")

    def missing(self, f: Path) -> None:  # its last panel is stale now: say so, keep waiting
        self.out.print(Text(f"{f} deleted — waiting for it to come back", style="dim"))

    def exit_code(self) -> int:
        if not self.last:  # stopped before any verdict: an interruption, not a failure
            return EXIT_INTERRUPTED
        if not all(self.saved):
            return EXIT_USAGE
        return 0 if all(r.status == "pass" for r in self.last.values()) else EXIT_FAIL


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


# `drill train DIR` (drill/judge/train.py): the learner's parts in a training run beside the reference's.
@app.command(help=TRAIN_HELP)
def train(
    folder: Annotated[Path, typer.Argument(help="The folder with your part files.")],
    size: Annotated[str, typer.Option(
        "--size", help="default (300 steps, about a minute) or tiny (a few seconds, a smoke test).")] = "default",
    steps: Annotated[int | None, typer.Option("--steps", help="Steps to train (default: the size's).")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Replay a run: the same weights, batches, checks.")] = None,
    chart: Annotated[bool | None, typer.Option(
        "--chart/--no-chart", help="Draw the loss curves (default: when stdout is a terminal).")] = None,
    no_check: Annotated[bool, typer.Option(
        "--no-check", help="Use every part file present without grading it first (your run, your risk).")] = False,
) -> None:
    from drill.judge import train as training
    from drill.judge.train_view import progress_bar, render

    out = Console(highlight=False, soft_wrap=True)
    with user_errors():
        progress, bar = progress_bar()
        try:
            report = training.run_train(folder, size=size, seed=seed, steps=steps, check=not no_check,
                                        say=lambda s: err_console.print(f"[dim]{escape(s)}[/]"),
                                        progress=progress)
        finally:
            if bar is not None:
                bar.stop()
    render(out, report, chart)
    if not report.passed:
        raise typer.Exit(EXIT_FAIL)
