"""The client side of the warm grading server: what `drill check`, `--watch`, `drill mock` and `drill bench` call.

`grade(jobs)` returns one `Result` per job, in order, exactly as
`check.check_file` would: through the user's server when one can be used
(started on first use, with one dim line saying so), else in this process.
No torch is imported on the server path: a warm check costs a Python start,
a socket round trip and the grading itself.

The server is never trusted with more than it needs, and never needed:
- DRILL_NO_SERVER=1 (or `--no-server`, `use_server=False`) grades in-process
  as before the server existed;
- a folder or socket that is not this user's alone, a server that cannot
  start, dies, answers garbage or falls silent (no heartbeat for
  SILENCE_S) costs one dim line and the in-process path for what it had not
  answered yet; the seed was drawn here, so the replayed cases are the same;
- a server built from other drill files answers "stale": it leaves, and a
  fresh one is started (one line);
- attempts are recorded by the caller, after it has the verdicts: a server
  never sees DRILL_HOME, and a check cut short records nothing.
"""

from __future__ import annotations

import os
import random
import select
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drill.errors import UserError
from drill.judge import server_dir, wire
from drill.judge.limits import Limits
from drill.judge.server_dir import Place

if TYPE_CHECKING:
    from drill.judge.check import Result

READY_S = 60.0  # the server binds before it imports torch: this is Python start-up on a very busy machine
SILENCE_S = 30.0  # the server says "alive" every wire.HEARTBEAT_S while it grades
LOG_CAP_BYTES = 2**20
_SPAWNED: list[subprocess.Popen] = []  # kept alive (and registered with the runner's sweep as our own)


@dataclass
class Job:
    """One file to grade, with `check_file`'s options."""

    path: Path
    exercise: str | None = None
    seed: int | None = None
    limits: Limits | None = None
    strict: bool = False
    in_model: bool = False
    audit: bool = True
    policy: bool = True
    device: str | None = None  # "cpu" | "cuda" | "auto"; None: the CPU, or CUDA for an exercise that needs it


@dataclass
class _Run:
    jobs: list[Job]
    seeds: list[int]
    answers: dict[int, Any] = field(default_factory=dict)  # index -> Result or UserError
    sent: list[int] = field(default_factory=list)  # the jobs a server request carries, in its items' order


class ServerUnavailable(Exception):
    """Why the server cannot be used for (the rest of) this request, in words for the one dim line."""


def note(text: str) -> None:
    """One dim line on stderr (the CLI's console; plain when it is not a terminal)."""
    from rich.text import Text

    from drill.cliutil import err_console

    err_console.print(Text(text, style="dim"), soft_wrap=True)


def grade(jobs: list[Job], *, workers: int | None = None, use_server: bool | None = None, pool: Any = None,
          say: Callable[[str], None] = note, while_waiting: Callable[[], None] | None = None) -> list[Result]:
    """Grade every job; the first UserError (in job order) is raised after all were graded, as check_file would.

    `pool` (a pool.ChildPool) is used for the in-process path of a single
    job (watch mode keeps one warm); several jobs in-process go through
    `batch.grade_all` with `workers` threads, as `drill check DIR` always did.
    `while_waiting` runs once the request is on its way to the server (the CLI
    imports its renderer there, while the server grades).
    """
    run = _Run(list(jobs), [j.seed if j.seed is not None else random.SystemRandom().randrange(2**31) for j in jobs])
    if use_server is None:
        # The server admits only its own user, by SO_PEERCRED (Linux); where the OS cannot say who connects,
        # there is no server: in-process, as before it existed.
        use_server = not server_dir.disabled() and hasattr(socket, "SO_PEERCRED")
    if use_server:
        try:
            _through_server(run, say, while_waiting)
        except ServerUnavailable as exc:
            say(f"grading server not used: {exc}; grading in this process")
    todo = [i for i in range(len(run.jobs)) if i not in run.answers]
    if todo:
        _in_process(run, todo, workers, pool)
    for i in range(len(run.jobs)):
        if isinstance(run.answers[i], UserError):
            raise run.answers[i]
    return [run.answers[i] for i in range(len(run.jobs))]


def grade_one(path: str | Path, exercise: str | None = None, seed: int | None = None, limits: Limits | None = None,
              **options: Any) -> Result:
    """`check_file`'s signature, through the server when it can be used (mock and bench call this)."""
    return grade([Job(Path(path), exercise, seed, limits, **options)])[0]


# -- in-process ------------------------------------------------------------------------------------


def _in_process(run: _Run, todo: list[int], workers: int | None, pool: Any) -> None:
    from drill.judge.check import check_file

    def one(i: int, use_pool: Any) -> None:
        j = run.jobs[i]
        try:
            run.answers[i] = check_file(j.path, j.exercise, run.seeds[i], j.limits, strict=j.strict, pool=use_pool,
                                        in_model=j.in_model, audit=j.audit, policy=j.policy, device=j.device)
        except UserError as exc:
            run.answers[i] = exc

    if len(todo) == 1:
        one(todo[0], pool)
        return
    from drill.judge.batch import grade_all

    grade_all([(run.jobs[i].path, str(i)) for i in todo], lambda _p, i, p: one(int(i), p), workers=workers)


# -- through the server ----------------------------------------------------------------------------


def _through_server(run: _Run, say: Callable[[str], None], while_waiting: Callable[[], None] | None = None) -> None:
    where = server_dir.place()
    why = server_dir.ensure_folder(where.folder)
    if why:
        raise ServerUnavailable(why)
    fp = server_dir.fingerprint()
    run.sent = _servable(run, where, say)
    if not run.sent:
        return
    items = [wire.item(os.path.abspath(run.jobs[i].path), run.jobs[i].exercise, run.seeds[i],
                       run.jobs[i].limits or Limits(),
                       strict=run.jobs[i].strict, in_model=run.jobs[i].in_model, audit=run.jobs[i].audit,
                       policy=run.jobs[i].policy, device=run.jobs[i].device) for i in run.sent]
    request = wire.request("check", fp, items)
    for attempt in range(2):
        conn = connect(where)
        if conn is None:
            start(where, say, reason="")
            conn = connect(where)
            if conn is None:
                raise ServerUnavailable("it started but does not accept connections")
        with conn:
            if _exchange(conn, request, run, while_waiting if attempt == 0 else None) == "stale" and attempt == 0:
                start(where, say, reason="drill changed since the grading server started")
                continue
            return
    raise ServerUnavailable("it keeps answering for another drill build")


def _servable(run: _Run, where: Place, say: Callable[[str], None]) -> list[int]:
    """The jobs to send: all of them, except checks needing CUDA when the server's status says it has none
    (those go to this process, which refuses them in one line; one dim line first only when the server's
    status could not be had). The status is asked only when a CUDA check is
    among them (a running server answers in a millisecond; none running yet is started for it)."""
    from drill.judge.devices import wants_cuda

    everything = list(range(len(run.jobs)))
    cuda = [i for i in everything if wants_cuda(run.jobs[i].path, run.jobs[i].exercise, run.jobs[i].device)]
    if not cuda:
        return everything
    status = ask(where, "status")
    if status is None:
        start(where, say, reason="")
        status = ask(where, "status")
    deadline = time.monotonic() + READY_S
    while status is not None and status.get("cuda") is None and time.monotonic() < deadline:
        time.sleep(0.1)  # a server still importing torch does not know yet
        status = ask(where, "status")
    if status is not None and status.get("cuda") is True:
        return everything
    if status is None or status.get("cuda") is not False:
        say("the grading server did not say whether it sees a CUDA device; grading the CUDA checks in this process")
    # A server that sees no CUDA device: nor does this process (the same machine, and the server's key holds the
    # CUDA settings), so grading them here ends in its one-line refusal; a line before it would only say "here".
    return [i for i in everything if i not in cuda]


def _exchange(conn: _Conn, request: dict[str, Any], run: _Run, while_waiting: Callable[[], None] | None = None) -> str:
    """Send the request and collect the answers into run.answers; "done" or "stale"."""
    order = run.sent or list(range(len(run.jobs)))  # item index -> job index
    try:
        conn.send(request)
        wire.prepare_to_read()  # while the server grades (measured: the request went out 0.115 s after exec)
        if while_waiting is not None:
            while_waiting()
        while True:
            kind, payload = wire.parse_reply(conn.line(SILENCE_S), len(order))
            if kind == "alive":
                continue
            if kind in ("done", "stale"):
                return kind
            if kind == "refused":
                raise ServerUnavailable(f"it refused the request ({payload})")
            if kind == "result":
                i, result = payload
                i = order[i]
                result.file = str(run.jobs[i].path)  # the path as the learner typed it, as check_file reports it
                run.answers[i] = result
            elif kind == "error":
                i, message, where = payload
                i = order[i]
                run.answers[i] = UserError(message, _display(where, run.jobs[i].path))
            elif kind == "internal":
                pass  # graded here instead, where the real error shows
            else:
                raise wire.WireError(f"unexpected {kind}")
    except wire.WireError as exc:
        raise ServerUnavailable(f"its answer was not understood ({exc})") from None
    except OSError as exc:
        raise ServerUnavailable(f"it stopped answering ({exc.strerror or exc})") from None


def _display(where: str | None, path: Path) -> str | None:
    """A UserError's file:line with the absolute path sent to the server turned back into the typed one."""
    absolute = os.path.abspath(path)
    if where is not None and where.startswith(absolute):
        return str(path) + where[len(absolute):]
    return where


class _Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def __enter__(self) -> _Conn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, doc: dict[str, Any]) -> None:
        self.sock.sendall(wire.encode(doc))

    def line(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise OSError(f"no answer for {timeout:g} s")
            ready, _, _ = select.select([self.sock], [], [], left)
            if not ready:
                continue
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise OSError("the connection closed")
            self.buf += chunk
            if len(self.buf) > wire.MAX_LINE_BYTES:
                raise wire.WireError("message too large")
        line, self.buf = self.buf.split(b"\n", 1)
        return wire.decode(line)


def connect(where: Place) -> _Conn | None:
    """A connection to the server at `where`; None when nobody listens (missing or stale socket).

    Raises ServerUnavailable for a socket this user does not own alone: it is never used, nor removed.
    """
    why = server_dir.not_private(where.socket, kind="socket")
    if why == "missing":
        return None
    if why:
        raise ServerUnavailable(f"{where.socket} {why}")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(where.socket))
    except (ConnectionRefusedError, FileNotFoundError):
        sock.close()
        return None
    except OSError as exc:
        sock.close()
        raise ServerUnavailable(f"cannot connect to {where.socket} ({exc.strerror})") from None
    return _Conn(sock)


def ask(where: Place, op: str) -> dict[str, Any] | None:
    """status/stop: the server's status dict ({} for stop), or None when no server answers."""
    conn = connect(where)
    if conn is None:
        return None
    with conn:
        try:
            conn.send(wire.request(op, server_dir.fingerprint()))
            kind, payload = wire.parse_reply(conn.line(10.0), 0)
        except (OSError, wire.WireError):
            return None
    return payload if kind == "status" else ({} if kind == "stopping" else None)


def start(where: Place, say: Callable[[str], None] | None, *, reason: str = "",
          idle_minutes: float | None = None) -> int:
    """Start a server for `where` and wait until it listens; its pid. Raises ServerUnavailable.

    A server of this drill that is already there (another client started it
    a moment ago) is used as it is; then nothing is said.
    """
    idle = server_dir.idle_minutes() if idle_minutes is None else idle_minutes
    try:
        if where.log.exists() and where.log.stat().st_size > LOG_CAP_BYTES:
            where.log.unlink()
        log = open(where.log, "ab")
    except OSError as exc:
        raise ServerUnavailable(f"cannot write its log {where.log} ({exc.strerror})") from None
    read_fd, write_fd = os.pipe()
    env = {k: v for k, v in os.environ.items() if k != "DRILL_HOME"}  # the store stays with the client
    cmd = [sys.executable, "-m", "drill.judge.server", "--folder", str(where.folder), "--key", where.key,
           "--idle-minutes", f"{idle:g}", "--ready-fd", str(write_fd)]
    try:
        from drill.judge.runner import spawn_own  # never taken for a graded run's orphan by our own sweeps

        with log:
            proc = spawn_own(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                             pass_fds=(write_fd,), cwd=str(where.folder), env=env, start_new_session=True,
                             close_fds=True)
    except OSError as exc:
        os.close(read_fd)
        raise ServerUnavailable(f"cannot start it ({exc.strerror})") from None
    finally:
        os.close(write_fd)
    _SPAWNED.append(proc)
    answer = _ready_line(read_fd, proc)
    word, _, rest = answer.partition(" ")
    if word == "running":
        return int(rest) if rest.isdigit() else proc.pid
    if word != "ready":
        raise ServerUnavailable(f"it did not start ({rest or answer or 'no answer'}; see {where.log})")
    if say is not None:
        lead = f"{reason}: restarted" if reason else "started"
        say(f"{lead} the grading server (pid {proc.pid}): torch stays loaded for the next checks; it stops after "
            f"{idle:g} min idle (drill server stop; DRILL_NO_SERVER=1 to grade without it)")
    return proc.pid


def _ready_line(fd: int, proc: subprocess.Popen) -> str:
    buf = b""
    deadline = time.monotonic() + READY_S
    try:
        while b"\n" not in buf and time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buf += chunk
    finally:
        os.close(fd)
    if b"\n" not in buf and proc.poll() is None:
        proc.kill()  # too slow to even listen: not worth waiting for
    return buf.split(b"\n", 1)[0].decode("utf-8", "replace").strip()
