"""Spawning and policing the child process that runs a learner's file.

Limits, and why each is done this way:
- wall clock: the parent waits with a deadline (counted from the moment the
  job is sent, so the child's `import torch` does not eat the learner's time;
  start-up has its own, generous deadline) and then kills the whole process
  group with SIGKILL;
- CPU time: RLIMIT_CPU in the child (SIGXCPU at the soft limit, SIGKILL one
  second later), so a busy loop ends even if the parent is slow to notice;
- memory: RLIMIT_DATA, not RLIMIT_AS. Measured on torch 2.13 CPU: importing
  torch maps far more virtual address space than it touches (thread arenas,
  library reservations), so an address-space cap either kills the import or
  is too loose; RLIMIT_DATA counts private writable memory (malloc, big
  tensors) and `import torch` needs about 220 MB of it. An allocation past
  the limit fails inside the child (torch raises "can't allocate memory",
  Python raises MemoryError). As a second line the parent polls the resident
  memory of the child and its descendants every 50 ms and kills past the
  limit (covers memory outside RLIMIT_DATA's view, e.g. a forked helper
  each within its own limit);
- escapes: the child gets its own session (`start_new_session=True`) and an
  environment token; after the run, the group is killed and every process of
  this user that still carries the token (a grandchild that called setsid,
  a double-forked daemon) is found in /proc and killed too. A learner who
  leaves such a process behind fails the run.

Nothing here trusts the child: its exit code, its status file and its output
tensors are read as data, and a missing or garbled record is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHILD_SCRIPT = Path(__file__).with_name("child.py")
TOKEN_VAR = "DRILL_JUDGE_TOKEN"
STARTUP_GRACE_S = 120.0  # import torch on a loaded machine; not the learner's time
POLL_S = 0.05
OUTPUT_CAP_BYTES = 64 * 2**20  # RLIMIT_FSIZE: printed output and saved tensors


def child_env(token: str) -> dict[str, str]:
    """The environment of a graded process: none of drill's own settings, the
    run's token (to find escaped descendants later), and one thread — small
    cases, a shared machine, and deterministic CPU accounting."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRILL_")}
    env[TOKEN_VAR] = token
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return env


@dataclass(frozen=True)
class Limits:
    """Resource limits for one graded run (the CLI's --timeout/--cpu-time/--memory-mb)."""

    timeout_s: float = 60.0
    cpu_s: float = 60.0
    memory_mb: int = 2048


@dataclass
class RunOutcome:
    """What happened to the child, as observed by the parent."""

    events: list[dict[str, Any]]
    returncode: int | None
    killed_for: str | None  # "time_limit" | "cpu_limit" | "memory_limit" | "startup" | None
    cpu_s: float
    wall_s: float
    leftovers: list[int] = field(default_factory=list)
    output_tail: str = ""
    output_bytes: int = 0  # size of the child's printed output; OUTPUT_CAP_BYTES means the cap fired

    @property
    def finished(self) -> bool:
        return any(e.get("event") == "done" for e in self.events)


def _limit_args(limits: Limits) -> list[str]:
    """The child sets these rlimits on itself first thing, before importing torch.

    (Not a preexec_fn: that is unsafe when the parent has threads, and the
    child script is our code, so it can lower its own hard limits just as well.)
    """
    cpu = max(1, int(round(limits.cpu_s)))
    return [f"--cpu={cpu}", f"--data={int(limits.memory_mb) * 2**20}", f"--fsize={OUTPUT_CAP_BYTES}"]


class Child:
    """A started child, waiting for its job. Start it as early as possible."""

    def __init__(self, limits: Limits, script: Path | None = None) -> None:
        """`script`: the child entry script (default the grader's; `drill bench` passes its own)."""
        self.limits = limits
        self.root = Path(tempfile.mkdtemp(prefix="drill-check-"))
        self.token = uuid.uuid4().hex
        # Protocol files live in a folder whose name the learner's code is never
        # told (it reaches the child through stdin); the child's cwd is a
        # separate scratch folder, so files the learner writes there mean nothing.
        self.workdir = self.root / f"p-{uuid.uuid4().hex}"
        self.scratch = self.root / "scratch"
        self.workdir.mkdir()
        self.scratch.mkdir()
        env = child_env(self.token)
        self._out = open(self.workdir / "output.txt", "wb")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-B", str(script or CHILD_SCRIPT), *_limit_args(limits)],
            stdin=subprocess.PIPE,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            cwd=self.scratch,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
        self._returncode: int | None = None
        self._rusage_cpu = 0.0
        self._seen: set[int] = set()

    # -- job ---------------------------------------------------------------

    def send(self, job: dict[str, Any], tensors: dict[str, Any]) -> None:
        """Write the inputs, then hand the job to the waiting child."""
        import torch

        torch.save(tensors, self.workdir / "inputs.pt")
        self.sent = time.monotonic()
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({**job, "work": str(self.workdir)}).encode())
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass  # the child died already; wait() reports it

    def wait(self) -> RunOutcome:
        """Wait for the child under the limits; always leaves no process behind."""
        killed_for = None
        pid = self.proc.pid
        start_deadline = self.started + STARTUP_GRACE_S
        while True:
            if self._reap(block=False):
                break
            now = time.monotonic()
            started_work = (self.workdir / "status.jsonl").exists()
            if started_work and now - self.sent > self.limits.timeout_s:
                killed_for = "time_limit"
            elif not started_work and now > start_deadline:
                killed_for = "startup"
            elif self._rss_bytes(pid) > self.limits.memory_mb * 2**20:
                killed_for = "memory_limit"
            if killed_for:
                self._kill_group()
                self._reap(block=True)
                break
            time.sleep(POLL_S)
        leftovers = self._kill_escaped()
        if leftovers:
            # Descendants are killed; give the kernel a moment so they are gone for good.
            time.sleep(0.05)
        self._out.close()
        wall = time.monotonic() - getattr(self, "sent", self.started)
        return RunOutcome(
            events=self._events(),
            returncode=self._returncode,
            killed_for=killed_for,
            cpu_s=self._rusage_cpu,
            wall_s=wall,
            leftovers=leftovers,
            output_tail=self._output_tail(),
            output_bytes=self._output_bytes(),
        )

    def output_file(self, name: str) -> Path:
        return self.workdir / name

    def cleanup(self) -> None:
        """Kill (if still running) and remove the work folder."""
        if self._returncode is None and self.proc.poll() is None:
            self._kill_group()
            self._reap(block=True)
        self._kill_escaped()
        if not self._out.closed:
            self._out.close()
        shutil.rmtree(self.root, ignore_errors=True)

    # -- plumbing ------------------------------------------------------------

    def _reap(self, block: bool) -> bool:
        if self._returncode is not None:
            return True
        try:
            pid, status, usage = os.wait4(self.proc.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            self._returncode = self.proc.returncode if self.proc.returncode is not None else -1
            return True
        if pid == 0:
            return False
        self._rusage_cpu = usage.ru_utime + usage.ru_stime
        self._returncode = os.waitstatus_to_exitcode(status)
        self.proc.returncode = self._returncode  # keep Popen from waiting again
        return True

    def _descendants(self, pid: int) -> list[int]:
        found: list[int] = []
        stack = [pid]
        while stack:
            p = stack.pop()
            try:
                tasks = os.listdir(f"/proc/{p}/task")
            except OSError:
                continue
            for tid in tasks:
                try:
                    with open(f"/proc/{p}/task/{tid}/children") as fh:
                        kids = [int(x) for x in fh.read().split()]
                except OSError:
                    continue
                for kid in kids:
                    if kid not in found:
                        found.append(kid)
                        stack.append(kid)
        return found

    def _rss_bytes(self, pid: int) -> int:
        total = 0
        page = os.sysconf("SC_PAGE_SIZE")
        pids = [pid, *self._descendants(pid)]
        self._seen.update(pids[1:])
        for p in pids:
            try:
                with open(f"/proc/{p}/statm") as fh:
                    total += int(fh.read().split()[1]) * page
            except (OSError, ValueError, IndexError):
                continue
        return total

    def _kill_group(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def _kill_escaped(self) -> list[int]:
        """Kill every process that carries this run's token; return their pids."""
        return self._sweep(exclude={self.proc.pid} if self._returncode is not None else set())

    def _sweep(self, exclude: set) -> list[int]:
        marker = f"{TOKEN_VAR}={self.token}".encode()
        uid = os.getuid()
        killed: list[int] = []
        for _ in range(3):  # a forking process may spawn while we kill: sweep a few times
            found = []
            try:
                entries = os.listdir("/proc")
            except OSError:
                return killed
            for entry in entries:
                if not entry.isdigit() or int(entry) in exclude:
                    continue
                try:
                    if os.stat(f"/proc/{entry}").st_uid != uid:
                        continue
                    with open(f"/proc/{entry}/environ", "rb") as fh:
                        env = fh.read()
                except OSError:
                    continue
                if marker in env.split(b"\0"):
                    found.append(int(entry))
            if not found:
                break
            for pid in found:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    continue
                if pid not in killed:
                    killed.append(pid)
            time.sleep(0.02)
        for pid in killed:  # reap the ones that are our own children, if any
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        return killed

    def _events(self) -> list[dict[str, Any]]:
        events = []
        try:
            text = (self.workdir / "status.jsonl").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return events
        for line in text.splitlines():
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                events.append(value)
        return events

    def _output_bytes(self) -> int:
        try:
            return (self.workdir / "output.txt").stat().st_size
        except OSError:
            return 0

    def _output_tail(self, limit: int = 2000) -> str:
        try:
            with open(self.workdir / "output.txt", "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - limit))
                return fh.read().decode("utf-8", errors="replace")
        except OSError:
            return ""


class ChildPool:
    """A fork server for grading many files in a row (`drill check a.py b.py`, the tests).

    One long-lived process (child.py --zygote) imports torch once; every
    graded file then runs in a fresh process forked from it, with its own
    session, limits and protocol folder, so isolation is the same as with
    `Child` while the per-file cost drops from an `import torch` to a fork.
    The pool itself never runs learner code. Use one pool from one thread.
    """

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex
        self.proc: subprocess.Popen | None = None

    def _ensure(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            env = child_env(self.token)
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-B", str(CHILD_SCRIPT), "--zygote"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        return self.proc

    def child(self, limits: Limits) -> "PooledChild":
        return PooledChild(self, limits)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait()
        self.proc = None

    def __enter__(self) -> "ChildPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PooledChild(Child):
    """Same contract as `Child`, but the process is forked by a `ChildPool`."""

    def __init__(self, pool: ChildPool, limits: Limits) -> None:  # noqa: D107 - no super().__init__: nothing spawned yet
        self.pool = pool
        self.limits = limits
        self.root = Path(tempfile.mkdtemp(prefix="drill-check-"))
        self.token = pool.token
        self.workdir = self.root / f"p-{uuid.uuid4().hex}"
        self.scratch = self.root / "scratch"
        self.workdir.mkdir()
        self.scratch.mkdir()
        self._out = open(self.workdir / "output.txt", "wb")
        self.started = time.monotonic()
        self._returncode = None
        self._rusage_cpu = 0.0
        self._seen = set()
        self.pid: int | None = None
        self._buf = b""

    def send(self, job: dict[str, Any], tensors: dict[str, Any]) -> None:
        import torch

        torch.save(tensors, self.workdir / "inputs.pt")
        zyg = self.pool._ensure()
        self.sent = time.monotonic()
        request = {
            "job": {**job, "work": str(self.workdir)},
            "scratch": str(self.scratch),
            "limits": {"cpu": max(1, int(round(self.limits.cpu_s))), "data": int(self.limits.memory_mb) * 2**20,
                       "fsize": OUTPUT_CAP_BYTES},
        }
        try:
            assert zyg.stdin is not None
            zyg.stdin.write((json.dumps(request) + "\n").encode())
            zyg.stdin.flush()
        except (BrokenPipeError, OSError):
            self.pool.close()
            return
        reply = self._line(STARTUP_GRACE_S)
        if reply is not None and "pid" in reply:
            self.pid = int(reply["pid"])

    def _line(self, timeout: float) -> dict[str, Any] | None:
        """Next JSON line from the zygote, or None on timeout/EOF."""
        import select

        zyg = self.pool.proc
        if zyg is None or zyg.stdout is None:
            return None
        fd = zyg.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            return None

    def wait(self) -> RunOutcome:
        killed_for = None
        if self.pid is None:
            self._returncode = -1
        while self.pid is not None and self._returncode is None:
            reply = self._line(POLL_S)
            if reply is not None and reply.get("exit") == self.pid:
                self._returncode = int(reply["code"])
                self._rusage_cpu = float(reply.get("cpu", 0.0))
                break
            if self.pool.proc is None or self.pool.proc.poll() is not None:
                # The zygote is gone (killed by the learner?): stop the child, report a crash.
                self._kill_group()
                self._returncode = -int(signal.SIGKILL)
                self.pool.close()
                break
            now = time.monotonic()
            if now - self.sent > self.limits.timeout_s:
                killed_for = "time_limit"
            elif self._rss_bytes(self.pid) > self.limits.memory_mb * 2**20:
                killed_for = "memory_limit"
            if killed_for:
                self._kill_group()
                reply = self._line(10.0)
                if reply is not None and reply.get("exit") == self.pid:
                    self._returncode = int(reply["code"])
                    self._rusage_cpu = float(reply.get("cpu", 0.0))
                else:
                    self.pool.close()
                    self._returncode = -int(signal.SIGKILL)
                break
        leftovers = self._kill_escaped()
        self._out.close()
        return RunOutcome(
            events=self._events(),
            returncode=self._returncode,
            killed_for=killed_for,
            cpu_s=self._rusage_cpu,
            wall_s=time.monotonic() - getattr(self, "sent", self.started),
            leftovers=leftovers,
            output_tail=self._output_tail(),
            output_bytes=self._output_bytes(),
        )

    def _kill_group(self) -> None:
        if self.pid is not None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def _kill_escaped(self) -> list[int]:
        """Every process with the pool's token except the zygote is this run's leftover."""
        zyg = self.pool.proc.pid if self.pool.proc is not None else None
        return [p for p in self._sweep(exclude={zyg, None})]

    def cleanup(self) -> None:
        if self._returncode is None and self.pid is not None:
            self._kill_group()
        self._kill_escaped()
        if not self._out.closed:
            self._out.close()
        shutil.rmtree(self.root, ignore_errors=True)
