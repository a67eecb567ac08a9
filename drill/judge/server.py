"""The warm grading server: `python -m drill.judge.server` (started by `drill.judge.client` or `drill server start`).

Why: a cold `drill check` pays two `import torch` (the CLI's and the
child's) before grading anything. This process pays them once and keeps
torch, the specs and a fork server (`pool.ChildPool`) warm, so a check is
a small client round trip plus the grading itself.

What it keeps and what it does not: code (torch, drill's modules, the specs)
and the fork servers' warm interpreters. Every check still draws its own
cases, computes its expectations and forks a fresh sandboxed child through
`check.check_file`, exactly as the in-process path does; no answer, case or
learner output outlives its request, and no learner code ever runs in this
process or in a fork server (each job runs in a process forked from one,
in fresh namespaces). The progress store is not touched here: the client
records attempts after it has the verdict, and the server is started
without DRILL_HOME.

Who may talk to it: the socket lives in a 0700 folder (`server_dir`), is
0600, and every connection's peer uid (SO_PEERCRED) must be this process's;
anything else is closed unanswered. The process is non-dumpable and a child
subreaper (`sandbox.harden_parent`), like an in-process grader.

Life cycle: binds its socket (taking over a stale one under a lock), says
"ready" on the descriptor the client passed, warms up in the background,
serves one request per connection (`wire.py`), and leaves after the idle
period, on `stop`, or as soon as a client of another drill build asks
(fingerprint mismatch: it unlinks its socket first so a fresh server can
bind at once, and finishes the requests in flight). A client that
disconnects mid-check gets its runs killed; nothing of it is recorded.
"""

from __future__ import annotations

import argparse
import fcntl
import math
import os
import queue
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from drill.errors import UserError
from drill.judge import server_dir, wire
from drill.judge.server_dir import Place

MAX_REQUEST_BYTES = 4 * 2**20
MAX_CONNECTIONS = 32
LOCK_WAIT_S = 30.0


def peer_uid(conn: socket.socket) -> int | None:
    """The connecting process's uid (SO_PEERCRED), or None where the OS does not say."""
    opt = getattr(socket, "SO_PEERCRED", None)
    if opt is None:
        return None
    try:
        _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, opt, struct.calcsize("3i")))
    except OSError:
        return None
    return uid


class _Tracker:
    """The runs of one request, so that a client that went away gets them killed."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self.children: list[Any] = []
        self.lock = threading.Lock()

    def kill_all(self) -> None:
        with self.lock:
            live = list(self.children)
        for child in live:
            child._kill_group()  # a PooledChild: SIGKILL its process group and its namespace's first process


class _TrackingPool:
    """A ChildPool seen through one request: every child it makes is known to the request's tracker."""

    def __init__(self, pool: Any, tracker: _Tracker) -> None:
        self.pool, self.tracker = pool, tracker

    def child(self, limits: Any, learner: Path | None = None) -> Any:
        child = self.pool.child(limits, learner)
        with self.tracker.lock:
            self.tracker.children.append(child)
        return child


class Server:
    def __init__(self, where: Place, idle_s: float, workers: int) -> None:
        self.place = where
        self.idle_s = idle_s
        self.workers = max(1, workers)
        self.fingerprint = server_dir.fingerprint()
        self.started = time.time()
        self.last_active = time.monotonic()
        self.active = 0
        self.checks = 0
        self.took: dict[str, float] = {}  # exercise -> seconds its last check took (see _check)
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.pools: queue.Queue = queue.Queue()
        self.n_pools = 0
        self.all_pools: list[Any] = []
        self.executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="drill-grade")
        self.listener: socket.socket | None = None
        self.inode: int | None = None
        self.hardened: dict[str, bool] = {}
        self.warm = threading.Event()
        self._cuda: bool | None = None  # torch.cuda.is_available() here, asked on first need
        self.removals: queue.Queue = queue.Queue()
        # Started by serve_forever, joined by _drain: a server that never serves must be able to exit.
        self.remover = threading.Thread(target=self._remover, name="drill-remove", daemon=True)

    # -- start-up ----------------------------------------------------------------------------------

    def bind(self) -> str:
        """Take the socket path (a live server of this drill there: "running <pid>"); "" on success."""
        why = server_dir.ensure_folder(self.place.folder)
        if why:
            raise OSError(why)
        fd = os.open(self.place.lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = time.monotonic() + LOCK_WAIT_S
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise OSError("another drill server is starting and holds the lock") from None
                    time.sleep(0.05)
            other = _ask(self.place.socket, wire.request("status", self.fingerprint))
            if other is not None and other.get("fingerprint") == self.fingerprint:
                return f"running {other.get('pid')}"
            if other is not None:  # an older drill's server: ask it to leave, then take over
                _ask(self.place.socket, wire.request("stop", self.fingerprint))
                for _ in range(100):
                    if not self.place.socket.exists():
                        break
                    time.sleep(0.05)
            if os.path.lexists(self.place.socket):
                why = server_dir.not_private(self.place.socket, kind="socket")
                if why and why != "missing":
                    raise OSError(f"{self.place.socket} {why}")
                os.unlink(self.place.socket)  # stale: nobody answered on it
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            old = os.umask(0o177)
            try:
                sock.bind(str(self.place.socket))
            finally:
                os.umask(old)
            os.chmod(self.place.socket, 0o600)
            sock.listen(MAX_CONNECTIONS)
            sock.settimeout(0.5)
            self.listener = sock
            self.inode = os.stat(self.place.socket).st_ino
            return ""
        finally:
            os.close(fd)  # releases the lock

    def warm_up(self) -> None:
        """torch, every spec and a fork server per worker, then one throw-away check of a starter, off the request
        path. Every worker's fork server is started here (issue 31): one started by the first folder check made
        the file that waited on it take 8-9 s, and 20 s on a loaded 2-core machine, against 1-2 s warm."""
        pool = None
        spares: list[Any] = []
        try:
            pool = self._new_pool()
            pool._ensure()  # the fork server's torch import overlaps ours
            spares = [self._new_pool() for _ in range(self.workers - 1)]
            for spare in spares:
                spare._ensure()
            import torch

            from drill.judge import registry
            from drill.judge.check import check_file
            from drill.paths import exercises_dir

            torch.set_num_threads(1)
            self.cuda()
            for name in registry.graded_names():
                registry.load_spec(name)
            starter = exercises_dir() / "rmsnorm.py"
            if starter.is_file() and registry.is_graded("rmsnorm"):
                check_file(starter, "rmsnorm", 0, pool=pool)  # pays first-use costs here and in the zygote
        except Exception:  # noqa: BLE001 - a failed warm-up only costs the first check its speed
            traceback.print_exc()
        finally:
            import gc

            gc.freeze()  # torch and the specs, never garbage: a full collection during a check would scan them all
            for ready in [pool, *spares]:
                if ready is not None:
                    self.pools.put(ready)
            self.warm.set()

    def _new_pool(self) -> Any:
        """A fork server, started from a thread that lives until the server leaves (runner.spawn_own)."""
        from drill.judge.pool import ChildPool

        with self.lock:
            self.n_pools += 1
            pool = ChildPool()
            pool.remove = self.removals.put  # off the request path; drained before the server leaves
            self.all_pools.append(pool)
        return pool

    def _remover(self) -> None:
        import shutil

        while True:
            root = self.removals.get()
            if root is None:
                return
            shutil.rmtree(root, ignore_errors=True)

    def _take_pool(self) -> Any:
        self.warm.wait()
        try:
            return self.pools.get_nowait()
        except queue.Empty:
            pass
        with self.lock:
            grow = self.n_pools < self.workers
        return self._new_pool() if grow else self.pools.get()

    # -- serving ----------------------------------------------------------------------------------

    def serve_forever(self) -> None:
        assert self.listener is not None
        self.remover.start()
        threading.Thread(target=self._idle_watch, daemon=True, name="drill-idle").start()
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            with self.lock:
                busy = threading.active_count() > MAX_CONNECTIONS + self.workers + 8
            if busy:
                conn.close()
                continue
            threading.Thread(target=self._connection, args=(conn,), daemon=True, name="drill-conn").start()
        self._drain()

    def _idle_watch(self) -> None:
        while not self.stopping.is_set():
            time.sleep(min(1.0, self.idle_s / 4))
            with self.lock:
                idle = self.active == 0 and time.monotonic() - self.last_active > self.idle_s
            if idle:
                self.stop()

    def stop(self) -> None:
        """Stop accepting (the socket is unlinked at once, if it is still ours); requests in flight finish."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        try:
            if self.inode is not None and os.stat(self.place.socket).st_ino == self.inode:
                os.unlink(self.place.socket)
        except OSError:
            pass
        if self.listener is not None:
            try:
                self.listener.close()
            except OSError:
                pass

    def _drain(self) -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            with self.lock:
                if self.active == 0:
                    break
            time.sleep(0.1)
        self.executor.shutdown(wait=False, cancel_futures=True)
        for pool in self.all_pools:
            pool.__exit__(None, None, None)
        self.removals.put(None)
        self.remover.join(timeout=60)

    def _connection(self, conn: socket.socket) -> None:
        with conn:
            if peer_uid(conn) != os.geteuid():
                return  # another user (or an OS that cannot say who): no answer at all
            conn.settimeout(10.0)
            try:
                line = _read_line(conn, MAX_REQUEST_BYTES)
                doc = wire.parse_request(wire.decode(line))
            except (wire.WireError, OSError) as exc:
                _send(conn, {"refused": f"bad request: {exc}"})
                return
            if doc["op"] == "status":
                _send(conn, {"status": self.status()})
                return
            if doc["op"] == "stop":
                _send(conn, {"stopping": True})
                self.stop()
                return
            if doc["fingerprint"] != self.fingerprint:
                self.stop()  # unlinked before the answer: the client's fresh server can bind at once
                _send(conn, {"stale": True})
                return
            if self.stopping.is_set():
                _send(conn, {"refused": "the server is stopping"})
                return
            with self.lock:
                self.active += 1
            try:
                self._check(conn, doc["items"])
            finally:
                with self.lock:
                    self.active -= 1
                    self.last_active = time.monotonic()

    def cuda(self) -> bool:
        """Does torch see a CUDA device in this process? Asked once (imports torch; the fork servers never
        initialise CUDA, so asking here poisons nothing: this process only starts them with fork+exec)."""
        if self._cuda is None:
            import torch

            self._cuda = bool(torch.cuda.is_available())
        return self._cuda

    def status(self) -> dict[str, Any]:
        cuda = self._cuda  # None until the warm-up has imported torch (never blocks a status answer on it)
        with self.lock:
            idle = 0.0 if self.active else time.monotonic() - self.last_active
            return {"pid": os.getpid(), "fingerprint": self.fingerprint, "started": self.started, "checks": self.checks,
                    "cuda": cuda,
                    "active": self.active, "idle_s": round(idle, 1), "idle_limit_s": self.idle_s,
                    "workers": self.workers, "pools": self.n_pools, "warm": self.warm.is_set(),
                    "dumpable": _dumpable(), "hardened": dict(self.hardened), "socket": str(self.place.socket)}

    def _check(self, conn: socket.socket, items: list[dict[str, Any]]) -> None:
        tracker = _Tracker()
        # Longest first (as last measured here; unknown ones first of all): with a folder on two workers, the
        # slowest exercise graded last left one worker idle for most of its run (measured: 0.2 s of 1.1 s).
        order = sorted(range(len(items)), key=lambda i: -self.took.get(_cost_key(items[i]), math.inf))
        futures: dict[Future, int] = {self.executor.submit(self._grade, items[i], tracker): i for i in order}
        pending = set(futures)
        gone = False
        last_sent = time.monotonic()
        while pending:
            done, pending = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
            if not gone and _client_gone(conn):
                gone = True
            for fut in done:
                if gone or fut.cancelled():
                    continue
                kind, payload = fut.result()
                if not _send(conn, {"index": futures[fut], kind: payload}):
                    gone = True
                last_sent = time.monotonic()
            if gone:
                tracker.cancelled.set()
                for fut in pending:
                    fut.cancel()
                tracker.kill_all()  # again each round: a run forked after the first kill dies too
                continue
            if time.monotonic() - last_sent > wire.HEARTBEAT_S:
                gone = not _send(conn, {"alive": True})
                last_sent = time.monotonic()
        if not gone:
            _send(conn, {"done": True})

    def _grade(self, it: dict[str, Any], tracker: _Tracker) -> tuple[str, Any]:
        from drill.judge.check import check_file

        if tracker.cancelled.is_set():
            return "internal", "cancelled"
        from drill.judge.devices import wants_cuda

        if wants_cuda(it["path"], it["exercise"], it["device"]) and not self.cuda():
            return "internal", "this grading server sees no CUDA device"  # the client grades it itself
        pool = self._take_pool()
        started = time.monotonic()
        try:
            result = check_file(Path(it["path"]), it["exercise"], it["seed"], wire.item_limits(it), strict=it["strict"],
                                pool=_TrackingPool(pool, tracker), in_model=it["in_model"], audit=it["audit"],
                                policy=it["policy"], device=it["device"])
            with self.lock:
                self.checks += 1
                self.took[_cost_key(it)] = time.monotonic() - started  # the order of later folders, never a verdict
            return "result", wire.result_to_wire(result)
        except UserError as exc:
            return "error", {"message": exc.message, "where": exc.where}
        except Exception as exc:  # noqa: BLE001 - the client grades this one itself and shows the real error
            traceback.print_exc()
            return "internal", f"{type(exc).__name__}: {exc}"[:2000]
        finally:
            self.pools.put(pool)


def _cost_key(it: dict[str, Any]) -> str:
    """What a check's grading time is remembered by: its exercise, or its file's name when that decides it."""
    return str(it.get("exercise") or Path(str(it.get("path", ""))).stem)


def _dumpable() -> int:
    """PR_GET_DUMPABLE as the kernel answers it (0: no ptrace, /proc/<pid>/mem or environ for same-user processes)."""
    try:
        import ctypes

        return int(ctypes.CDLL(None, use_errno=True).prctl(3, 0, 0, 0, 0))
    except (OSError, AttributeError):
        return -1


def _client_gone(conn: socket.socket) -> bool:
    """The client closed its end (or sent more than its one request, which is not allowed either)."""
    import select

    try:
        readable, _, _ = select.select([conn], [], [], 0)
        if not readable:
            return False
        return True  # EOF, or unexpected bytes: either way this request is over
    except (OSError, ValueError):
        return True


def _read_line(conn: socket.socket, limit: int) -> bytes:
    buf = b""
    while b"\n" not in buf:
        chunk = conn.recv(65536)
        if not chunk:
            raise OSError("connection closed before a full request")
        buf += chunk
        if len(buf) > limit:
            raise OSError("request too large")
    return buf.split(b"\n", 1)[0]


def _send(conn: socket.socket, doc: dict[str, Any]) -> bool:
    try:
        conn.sendall(wire.encode(doc))
        return True
    except OSError:
        return False


def _ask(path: Path, request: dict[str, Any]) -> dict[str, Any] | None:
    """A status/stop round trip to whatever listens at `path` (None: nobody answers there)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5.0)
    try:
        sock.connect(str(path))
        sock.sendall(wire.encode(request))
        reply = wire.decode(_read_line(sock, wire.MAX_LINE_BYTES))
    except (OSError, wire.WireError):
        return None
    finally:
        sock.close()
    status = reply.get("status")
    return status if isinstance(status, dict) else ({} if reply.get("stopping") else None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m drill.judge.server", description=__doc__.splitlines()[0])
    parser.add_argument("--idle-minutes", type=float, default=server_dir.idle_minutes())
    parser.add_argument("--ready-fd", type=int, default=None, help="write one line here once the socket listens")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--folder", type=Path, default=None, help="the private folder (default: server_dir.place())")
    parser.add_argument("--key", default=None, help="the server's name in it (default: this process's key)")
    args = parser.parse_args(argv)
    from drill.judge.batch import default_workers
    from drill.judge.sandbox import harden_parent

    hardened = harden_parent()  # first: nothing of this process is readable by a graded run from here on
    os.umask(0o077)
    where = server_dir.place()
    if args.key is not None and not (args.key.isalnum() and args.key.isascii() and len(args.key) <= 64):
        parser.error("--key must be a short alphanumeric name")
    where = Place(args.folder or where.folder, args.key or where.key)
    server = Server(where, max(1.0, args.idle_minutes * 60.0), args.workers or default_workers())
    server.hardened = hardened

    def ready(line: str) -> None:
        if args.ready_fd is not None:
            try:
                os.write(args.ready_fd, (line + "\n").encode())
                os.close(args.ready_fd)
            except OSError:
                pass

    try:
        taken = server.bind()
    except OSError as exc:
        ready(f"failed {exc}")
        return 1
    if taken:
        ready(taken)
        return 0
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: server.stop())
    ready(f"ready {os.getpid()}")
    # Off the main thread, which serves connections at once; the fork server it starts dies with the
    # *thread* that started it (PR_SET_PDEATHSIG), which runner.spawn_own keeps a long-lived one.
    server.executor.submit(server.warm_up)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
