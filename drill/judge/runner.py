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
tensors are read as data (the status file through `boundary.read_status`:
schema, sizes, depth), and a missing or garbled record is a failure.

The grader's child runs from a copy of its driver (child.py and its
torch-only siblings) placed in the run's folder, as `python -I -S` with only
the site-packages folders on its path: no `drill` package is importable
there. Where Linux allows it, the run is sandboxed in fresh namespaces
(`sandbox.py`, `sandbox_child.py`); the deadline is latched the first time
the child is seen working and never moves again, whatever it deletes; the
protocol folder is size-capped by polling; and after every run, orphans
that came back to this (subreaper) process are killed like token carriers.

This module starts one process per run (`Child`); the fork server that
grades many files in a row from one warm process is drill/judge/pool.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drill.judge.limits import Limits

CHILD_SCRIPT = Path(__file__).with_name("child.py")
# The driver and its torch-only siblings, copied next to every run (the child never imports drill), as
# paths relative to this folder: audit.py loads the shared storage counter from its own folder there.
DRIVER_FILES = ("child.py", "chain.py", "audit.py", "tiling.py", "sandbox_child.py", "gpu.py", "tensor_file.py",
                "grads.py", "optim.py", "exact.py", "adapter.py", "integrity.py", "rolling.py", "beam.py",
                "paged.py", "../storage_bytes.py", "train_run.py", "dgpt.py", "seccomp.py")
INPUTS = "inputs.bin"  # the case inputs (drill/judge/tensor_file.py), in the protocol folder
WORK_CAP_BYTES = 512 * 2**20  # the protocol and scratch folders (outputs, printed output, files) of one run, together
_OWN_PIDS: set[int] = set()  # processes this module started on purpose (children, fork servers)
_OWN_LOCK = threading.RLock()


def copy_driver(dest: Path) -> Path:
    """The child's own copy of its driver files in `dest` (read-only); returns the entry script."""
    dest.mkdir(parents=True, exist_ok=True)
    here = Path(__file__).parent
    for name in DRIVER_FILES:
        target = dest / Path(name).name
        shutil.copyfile(here / name, target)
        os.chmod(target, 0o444)
    return dest / "child.py"


def _own(pid: int, add: bool = True) -> None:
    with _OWN_LOCK:
        (_OWN_PIDS.add if add else _OWN_PIDS.discard)(pid)


def spawn_own(cmd: list[str], **popen: Any) -> subprocess.Popen:
    """`subprocess.Popen`, registered as this process's own before any sweep on another thread can list it,
    and always started from a thread that lives as long as this process.

    Started first and registered after, a fork server coming up on one grading
    thread was once taken for a graded run's orphan by another thread's sweep
    (`_orphans`: a child of ours, in a session of its own, not registered) and
    killed, which failed that thread's next check as "killed by SIGHUP".

    The graded processes and fork servers die with their parent (PR_SET_PDEATHSIG), and Linux means the
    parent *thread*: a fork server started on a short-lived thread (a ThreadPoolExecutor worker that then
    shut down) was SIGKILLed when that thread exited, and the next check through its pool failed as "did
    not start in time". So a call off the main thread hands the start to one long-lived spawner thread.
    """
    if threading.current_thread() is threading.main_thread():
        return _spawn_registered(cmd, popen)
    try:
        started = _spawner().submit(_spawn_registered, cmd, popen)
    except RuntimeError:  # the interpreter is shutting down and takes no new work: start it here
        return _spawn_registered(cmd, popen)
    return started.result()


def _spawn_registered(cmd: list[str], popen: dict[str, Any]) -> subprocess.Popen:
    with _OWN_LOCK:
        proc = subprocess.Popen(cmd, **popen)
        _OWN_PIDS.add(proc.pid)
    return proc


_SPAWNER: Any = None  # a one-thread ThreadPoolExecutor, made on first use (see _spawner)


def _spawner() -> Any:
    """The one thread every process of ours is started from off the main thread (see spawn_own); its idle
    worker stays until the interpreter exits."""
    global _SPAWNER
    from concurrent.futures import ThreadPoolExecutor

    with _OWN_LOCK:
        if _SPAWNER is None:
            _SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="drill-spawn")
        return _SPAWNER


def _grader_command(script: Path, limits_args: list[str], *extra: str) -> list[str]:
    from drill.judge.sandbox import site_paths

    return [sys.executable, "-I", "-S", "-B", str(script), *limits_args, *(f"--path={p}" for p in site_paths()),
            f"--parent={os.getpid()}", *extra]


def _prepare_run(root: Path, learner: Path | None) -> tuple[Path, Path, Path | None]:
    """(protocol folder, scratch, the learner file's copy) inside a fresh run folder."""
    workdir = root / f"p-{uuid.uuid4().hex}"
    scratch = root / "scratch"
    workdir.mkdir()
    scratch.mkdir()
    copy = None
    if learner is not None:
        (root / "learner").mkdir()
        copy = root / "learner" / learner.name
        shutil.copyfile(learner, copy)
        os.chmod(copy, 0o444)
        (root / "newroot").mkdir()
    return workdir, scratch, copy
TOKEN_VAR = "DRILL_JUDGE_TOKEN"
STARTUP_GRACE_S = 120.0  # import torch on a loaded machine; not the learner's time
POLL_S = 0.05
OUTPUT_CAP_BYTES = 64 * 2**20  # RLIMIT_FSIZE: printed output and saved tensors
# Host memory a CUDA child needs beyond the learner's allowance, added to RLIMIT_DATA and the RSS poll on
# CUDA checks only: the CUDA context and the resident pages of torch's CUDA libraries (cuBLAS, cuDNN;
# drill/bench/README.md measured "1-3 GB of host memory" for a CUDA child). To be measured on a GPU
# (benchmarks/gpu_check.sh); the device memory itself is capped in the child at --memory-mb.
CUDA_HOST_MB = 3072


def child_env(token: str) -> dict[str, str]:
    """The environment of a graded process: none of drill's own settings, the
    run's token (to find escaped descendants later), and one thread — small
    cases, a shared machine, and deterministic CPU accounting."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRILL_")}
    env[TOKEN_VAR] = token
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return env


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
    unreadable: str = ""  # why the status report could not be believed ("" = it was well formed)
    sandbox: dict[str, Any] = field(default_factory=dict)  # what the parent asked for (the child confirms in events)

    @property
    def finished(self) -> bool:
        return any(e.get("event") == "done" for e in self.events)


def _limit_args(limits: Limits, extra_mb: int = 0) -> list[str]:
    """The child sets these rlimits on itself first thing, before importing torch.

    (Not a preexec_fn: that is unsafe when the parent has threads, and the
    child script is our code, so it can lower its own hard limits just as well.)
    `extra_mb`: CUDA_HOST_MB for a child that may use CUDA.
    """
    cpu = max(1, int(round(limits.cpu_s)))
    return [f"--cpu={cpu}", f"--data={(int(limits.memory_mb) + extra_mb) * 2**20}", f"--fsize={OUTPUT_CAP_BYTES}"]


class Child:
    """A started child, waiting for its job. Start it as early as possible.

    `learner` (the grader's runs): the file is copied into the run folder,
    the child runs from a copy of its driver with no drill on its path, and
    in a namespace sandbox where available. `script` (drill bench): that
    script, with the same limits, sweep and deadline; given `learner` too,
    the copy and the sandbox as well (drill's folders read-only in it: the
    script is drill's and imports them before the learner's file).
    """

    def __init__(self, limits: Limits, script: Path | None = None, learner: Path | None = None,
                 device: str = "cpu") -> None:
        """`device` ("cpu", "cuda", "auto"): what the grader's child warms up before its job arrives, and
        whether its sandbox shows the GPU (the single run enters the sandbox at start, before the device is
        settled; see `use_device`)."""
        self.limits = limits
        self.root = Path(tempfile.mkdtemp(prefix="drill-check-"))
        self.token = uuid.uuid4().hex
        self.strict = script is None  # the grader's protocol: records validated by the boundary
        # Protocol files live in a folder whose name the learner's code is never told (it reaches the
        # child through stdin); the child's cwd is a separate scratch folder.
        self.workdir, self.scratch, self.learner_copy = _prepare_run(self.root, learner)
        env = child_env(self.token)
        self._out = open(self.workdir / "output.txt", "wb")
        self.started = time.monotonic()
        self._init_state()
        self.gpu = device != "cpu"
        if script is not None:
            cmd = [sys.executable, "-I", "-B", str(script), *_limit_args(limits), *self._sandbox_args(None)]
        else:
            entry = copy_driver(self.root / "driver")
            extra = self._sandbox_args(entry.parent)
            if device != "cpu":
                extra.append(f"--device={device}")  # the child initialises CUDA while the parent prepares
                self.host_extra_mb = CUDA_HOST_MB
            cmd = _grader_command(entry, _limit_args(limits, self.host_extra_mb), *extra)
        self.proc = spawn_own(
            cmd,
            stdin=subprocess.PIPE,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            cwd=self.scratch,
            env=env,
            start_new_session=True,
            close_fds=True,
        )

    def _sandbox_args(self, driver: Path | None) -> list[str]:
        """`--sandbox=<spec file>` where namespaces can be used and there is a learner's copy to show, else []."""
        from drill.judge import sandbox

        self.sandbox_mode, self.sandbox_why = sandbox.mode()
        if self.sandbox_mode != "namespaces" or self.learner_copy is None:
            return []
        self.spec = sandbox.spec(self.root / "newroot", driver, self.workdir, self.learner_copy,
                                 STARTUP_GRACE_S + self.limits.timeout_s + 10.0, gpu=self.gpu,
                                 show_drill=driver is None)
        spec_file = self.root / "sandbox.json"
        spec_file.write_text(json.dumps(self.spec), encoding="utf-8")
        return [f"--sandbox={spec_file}"]

    def _init_state(self) -> None:
        self._returncode: int | None = None
        self._rusage_cpu = 0.0
        self._seen: set[int] = set()
        self._working_since: float | None = None  # latched: deleting the status file never moves the deadline
        self.sandbox_mode, self.sandbox_why = "off", "not requested"
        self.spec: dict[str, Any] | None = None
        self.gpu = False  # the sandbox spec shows the GPU's device nodes and /sys
        self.host_extra_mb = 0  # CUDA_HOST_MB on a child that may use CUDA

    def use_device(self, device: str) -> None:
        """The settled device ("cpu" or "cuda"). A single run's sandbox was built at start from the hint it was
        given (check.py passes "cuda" or "auto" whenever CUDA may be used), so only a mismatch is an error."""
        if device == "cuda" and self.spec is not None and not self.gpu:
            raise RuntimeError("a CUDA check needs a child started with device='cuda' or 'auto'")

    # -- job ---------------------------------------------------------------

    def _job(self, job: dict[str, Any]) -> dict[str, Any]:
        out = {**job, "work": str(self.workdir), "scratch": str(self.scratch)}
        if self.learner_copy is not None:
            out["learner"] = str(self.learner_copy)
        if self.spec is not None:
            out["inside"] = self.spec["inside"]
        if self.strict:
            from drill.judge.sandbox import hidden_dirs

            out["hidden"] = hidden_dirs()
        return out

    def send(self, job: dict[str, Any], tensors: dict[str, Any]) -> None:
        """Write the inputs, then hand the job to the waiting child."""
        from drill.judge import tensor_file

        tensor_file.write(tensors, self.workdir / INPUTS)
        self.sent = time.monotonic()
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(self._job(job)).encode())
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass  # the child died already; wait() reports it

    def _deadline_hit(self, now: float) -> str | None:
        """time_limit from the moment the child is first seen working (latched), or start-up too slow."""
        if self._working_since is None and (self.workdir / "status.jsonl").exists():
            self._working_since = max(now, getattr(self, "sent", now))
        if self._working_since is not None:
            return "time_limit" if now - self._working_since > self.limits.timeout_s else None
        if now - getattr(self, "sent", self.started) > STARTUP_GRACE_S + self.limits.timeout_s:
            return "time_limit"  # never seen working: the learner cannot stretch time by hiding that
        return "startup" if now > self.started + STARTUP_GRACE_S else None

    def _limit_hit(self, pid: int, now: float) -> str | None:
        hit = self._deadline_hit(now)
        if hit is None and self._rss_bytes(pid) > (self.limits.memory_mb + self.host_extra_mb) * 2**20:
            hit = "memory_limit"
        if hit is None and self.strict and self._work_bytes() > WORK_CAP_BYTES:
            hit = "disk_limit"
        return hit

    def wait(self) -> RunOutcome:
        """Wait for the child under the limits; always leaves no process behind."""
        killed_for = None
        pid = self.proc.pid
        exited = _exit_waiter(pid)
        try:
            while True:
                if self._reap(block=False):
                    break
                killed_for = self._limit_hit(pid, time.monotonic())
                if killed_for:
                    self._kill_group()
                    self._reap(block=True)
                    break
                exited(POLL_S)
        finally:
            exited(None)
        return self._outcome(killed_for)

    def _outcome(self, killed_for: str | None) -> RunOutcome:
        leftovers = self._kill_escaped()
        if leftovers:
            time.sleep(0.05)  # descendants are killed; give the kernel a moment so they are gone for good
        self._out.close()
        events, unreadable = self._events()
        return RunOutcome(
            events=events,
            returncode=self._returncode,
            killed_for=killed_for,
            cpu_s=self._rusage_cpu,
            wall_s=time.monotonic() - getattr(self, "sent", self.started),
            leftovers=leftovers,
            output_tail=self._output_tail(),
            output_bytes=self._output_bytes(),
            unreadable=unreadable,
            sandbox={"requested": self.sandbox_mode, "reason": self.sandbox_why},
        )

    def output_file(self, name: str) -> Path:
        return self.workdir / name

    def cleanup(self) -> None:
        """Kill (if still running) and remove the work folder."""
        if self._returncode is None and self.proc.poll() is None:
            self._kill_group()
            self._reap(block=True)
        self._kill_escaped()
        _own(self.proc.pid, add=False)
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
                except (OSError, ValueError):
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

    def _work_bytes(self) -> int:
        """Bytes in the protocol folder (outputs, printed output) and the scratch folder, all files together: a
        learner filling either is stopped. Without the sandbox the scratch folder is on the real disk, where
        many files each under the per-file cap once filled it unnoticed."""
        total, entries, stack = 0, 0, [self.workdir, self.scratch]
        while stack:
            try:
                with os.scandir(stack.pop()) as it:
                    for entry in it:
                        entries += 1
                        if entries > 2000:
                            return WORK_CAP_BYTES + 1
                        try:
                            if entry.is_dir(follow_symlinks=False):
                                stack.append(entry.path)
                            else:
                                total += entry.stat(follow_symlinks=False).st_size
                        except OSError:
                            continue
            except OSError:
                continue
        return total

    def _kill_group(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def _kill_escaped(self) -> list[int]:
        """Kill every process that carries this run's token, or came back to us orphaned; return their pids."""
        return self._sweep(exclude={self.proc.pid} if self._returncode is not None else set())

    def _sweep(self, exclude: set) -> list[int]:
        marker = f"{TOKEN_VAR}={self.token}".encode()
        uid = os.getuid()
        killed: list[int] = []
        for _ in range(3):  # a forking process may spawn while we kill: sweep a few times
            found = [p for p in _orphans() if p not in exclude]
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
        for pid in killed:  # reap the ones that are our own children (orphans included), if any
            try:
                os.waitpid(pid, 0 if pid in _children_of_self() else os.WNOHANG)
            except ChildProcessError:
                pass
        return killed

    def _events(self) -> tuple[list[dict[str, Any]], str]:
        """(records, "" or why the report is unreadable). The grader's records go through the boundary."""
        path = self.workdir / "status.jsonl"
        if self.strict:
            from drill.judge.boundary import Unreadable, read_status

            try:
                return read_status(path), ""
            except Unreadable as exc:
                return [], str(exc)
        events = []
        try:
            text = path.read_bytes()[: 64 * 2**20].decode("utf-8", errors="replace")
        except OSError:
            return events, ""
        for line in text.splitlines():
            if len(line) > 2**20:
                continue
            try:
                value = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(value, dict):
                events.append(value)
        return events, ""

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


def _exit_waiter(pid: int):
    """wait(timeout) that returns as soon as `pid` exits (a pidfd, Linux >= 5.3), else after the timeout;
    wait(None) closes it. A poll's sleep no longer adds up to POLL_S to every check's latency."""
    import select

    try:
        fd = os.pidfd_open(pid)  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        fd = None

    def wait(timeout: float | None) -> None:
        nonlocal fd
        if timeout is None:
            if fd is not None:
                os.close(fd)
                fd = None
        elif fd is None:
            time.sleep(timeout)
        else:
            select.select([fd], [], [], timeout)

    return wait


def _children_of_self() -> set[int]:
    out: set[int] = set()
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children") as fh:
                out.update(int(x) for x in fh.read().split())
        except (OSError, ValueError):
            continue
    return out


def _orphans() -> list[int]:
    """Direct children of this process that no Child/ChildPool started: descendants of a graded run that
    were re-parented here (this process is a child subreaper) — a helper started with env={} included."""
    with _OWN_LOCK:  # listed under the lock: a child being started (spawn_own) is registered by then
        own = set(_OWN_PIDS)
        children = _children_of_self()
    return sorted(p for p in children if p not in own and _is_python_or_unknown(p))


def _is_python_or_unknown(pid: int) -> bool:
    """Only re-parented processes are orphans: our own Popen children are registered; anything else whose
    parent is us but that we did not start came from a graded run (its environment is not trusted)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        if fields[0] == b"Z":  # already dead (a namespace's last processes, re-parented here as they exit)
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            return False
        # a child of ours that some other part of this process started (a pytest helper, a pager) is not
        # a graded run's: those have our session; orphans of a run keep the run's own session.
        return int(fields[3]) != os.getsid(0)
    except (OSError, ValueError, IndexError):
        return False
