"""The fork server: one warm process that imports torch once and forks a fresh graded process per file.

`drill check a.py b.py`, a folder, --watch, the grading server and the tests grade
many files in a row; each would otherwise pay a fresh interpreter's `import torch`.
The forked process gets the same limits, protocol folder, sweep and (where Linux
allows) namespaces as a `runner.Child`: `PooledChild` is a `Child` whose process
comes from the fork server's pipe instead of `subprocess.Popen`. Only the
spawning differs, so everything about policing a run stays in runner.py.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from drill.judge.runner import (
    CUDA_HOST_MB,
    INPUTS,
    OUTPUT_CAP_BYTES,
    POLL_S,
    STARTUP_GRACE_S,
    Child,
    Limits,
    RunOutcome,
    _grader_command,
    _own,
    _prepare_run,
    child_env,
    copy_driver,
    spawn_own,
)


class ChildPool:
    """A fork server for grading many files in a row (`drill check a.py b.py`, the tests).

    One long-lived process (child.py --zygote, from its own copy of the
    driver) imports torch once; every graded file then runs in a fresh
    process forked from it, with its own session, limits, protocol folder
    and, where available, fresh namespaces (the fork enters them, see
    `child.run_forked`), so isolation is the same as with `Child` while the
    per-file cost drops from an `import torch` to a fork. The pool itself
    never runs learner code. Use one pool from one thread.
    """

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex
        self.proc: subprocess.Popen | None = None
        self.buf = b""  # what was read from the fork server past the last full line (it outlives each run)
        self.gone = False  # the fork server's pipe reached its end: it died (killed, crashed), it is not stuck
        self.home = Path(tempfile.mkdtemp(prefix="drill-pool-"))
        self.entry = copy_driver(self.home / "driver")
        # How a finished run's folder goes: at once here; the grading server hands it to a background
        # thread (removing a run's files took ~20 ms of every warm check's latency).
        self.remove: Any = lambda root: shutil.rmtree(root, ignore_errors=True)

    def _ensure(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            env = child_env(self.token)
            self.proc = spawn_own(
                _grader_command(self.entry, [], "--zygote"),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        return self.proc

    def child(self, limits: Limits, learner: Path | None = None) -> PooledChild:
        return PooledChild(self, limits, learner)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait()
        if self.proc is not None:
            _own(self.proc.pid, add=False)
        self.proc = None
        self.buf = b""

    def __enter__(self) -> ChildPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        shutil.rmtree(self.home, ignore_errors=True)


class PooledChild(Child):
    """Same contract as `Child`, but the process is forked by a `ChildPool`."""

    def __init__(self, pool: ChildPool, limits: Limits, learner: Path | None = None) -> None:  # noqa: D107 - nothing spawned yet
        from drill.judge import sandbox

        self.pool = pool
        self.limits = limits
        self.strict = True
        self.root = Path(tempfile.mkdtemp(prefix="drill-check-"))
        self.token = pool.token
        self.workdir, self.scratch, self.learner_copy = _prepare_run(self.root, learner)
        self._out = open(self.workdir / "output.txt", "wb")
        self.started = time.monotonic()
        self._init_state()
        self.sandbox_mode, self.sandbox_why = sandbox.mode()
        if self.sandbox_mode == "namespaces" and self.learner_copy is not None:
            self.spec = sandbox.spec(self.root / "newroot", pool.entry.parent, self.workdir, self.learner_copy,
                                     limits.timeout_s + 10.0)
        self.pid: int | None = None

    def use_device(self, device: str) -> None:
        """A forked run enters its sandbox when its job arrives: on CUDA the spec gains the GPU's nodes and /sys.
        (The fork server itself never initialises CUDA, which a fork could not inherit.)"""
        from drill.judge import sandbox

        if device == "cuda":
            self.host_extra_mb = CUDA_HOST_MB
        if device == "cuda" and self.spec is not None and not self.gpu:
            self.gpu = True
            self.spec = sandbox.spec(self.root / "newroot", self.pool.entry.parent, self.workdir, self.learner_copy,
                                     self.limits.timeout_s + 10.0, gpu=True)

    def send(self, job: dict[str, Any], tensors: dict[str, Any]) -> None:
        from drill.judge import tensor_file

        tensor_file.write(tensors, self.workdir / INPUTS)
        request = {
            "job": self._job(job),
            "scratch": str(self.scratch),
            "limits": {"cpu": max(1, int(round(self.limits.cpu_s))),
                       "data": (int(self.limits.memory_mb) + self.host_extra_mb) * 2**20,
                       "fsize": OUTPUT_CAP_BYTES, "nproc": self.limits.processes if self.spec else 0},
            "sandbox": self.spec,
            "sandbox_off": self.sandbox_why,
        }
        line = (json.dumps(request) + "\n").encode()
        for _ in range(2):  # a fork server found dead before it forked this run is started afresh, once
            self.pid = self._fork(line)
            if self.pid is not None or not self.pool.gone:
                break
        self.sent = time.monotonic()  # the fork server may still have been importing torch: not the learner's time

    def _fork(self, line: bytes) -> int | None:
        """Hand the request to the fork server and read the forked run's pid; None if it never said one."""
        zyg = self.pool._ensure()
        self.pool.gone = False
        try:
            assert zyg.stdin is not None
            zyg.stdin.write(line)
            zyg.stdin.flush()
        except (BrokenPipeError, OSError):
            self.pool.gone = True
            self.pool.close()
            return None
        deadline = time.monotonic() + STARTUP_GRACE_S
        reply = self._line(STARTUP_GRACE_S)
        while reply is not None and "exit" in reply:  # an earlier run's end that nobody read (see cleanup)
            reply = self._line(max(0.0, deadline - time.monotonic()))
        if reply is not None and isinstance(reply.get("pid"), int):
            return int(reply["pid"])
        self.pool.close()  # out of step, stuck or gone: the next run starts a fresh one
        return None

    def _line(self, timeout: float) -> dict[str, Any] | None:
        """Next JSON line from the zygote, or None on timeout/EOF."""
        zyg = self.pool.proc
        if zyg is None or zyg.stdout is None:
            return None
        fd = zyg.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.pool.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                self.pool.gone = True
                return None
            self.pool.buf += chunk
        line, self.pool.buf = self.pool.buf.split(b"\n", 1)
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            return None
        return value if isinstance(value, dict) else None

    def _deadline_hit(self, now: float) -> str | None:
        """The fork server is warm: the wall clock runs from the fork, whatever the child writes or deletes."""
        return "time_limit" if now - self.sent > self.limits.timeout_s else None

    def wait(self) -> RunOutcome:
        killed_for = None
        if self.pid is None:  # the fork server never said it forked the run: nothing ran
            self._returncode = 70
            killed_for = "startup"
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
            killed_for = self._limit_hit(self.pid, time.monotonic())
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
        return self._outcome(killed_for)

    def _kill_group(self) -> None:
        if self.pid is not None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                os.kill(self.pid, signal.SIGKILL)  # the run's first process: its namespace dies with it
            except (ProcessLookupError, PermissionError):
                pass

    def _kill_escaped(self) -> list[int]:
        """Every process with the pool's token except the zygote is this run's leftover."""
        zyg = self.pool.proc.pid if self.pool.proc is not None else None
        return [p for p in self._sweep(exclude={zyg, None})]

    def cleanup(self) -> None:
        if self._returncode is None and self.pid is not None:
            # Never waited for (the grader raised while it ran): kill it and read its end, so the next run's
            # pid is what the next `send` reads; a fork server that does not say so is started afresh.
            self._kill_group()
            end = self._line(10.0)
            while end is not None and end.get("exit") != self.pid:
                end = self._line(10.0)
            if end is None:
                self.pool.close()
            self._returncode = -int(signal.SIGKILL)
        self._kill_escaped()
        if not self._out.closed:
            self._out.close()
        self.pool.remove(self.root)
