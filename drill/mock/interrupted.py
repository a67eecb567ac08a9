"""Mocks whose drill process died: telling them from mocks that are still running.

Why: SIGTERM and SIGHUP (a closed terminal) are caught by drill.mock.run,
which saves the mock as 'interrupted' itself. But SIGKILL, the OOM killer, a
crash of the interpreter or a power cut never reach its `finally`, so the
row would say 'running' forever and history would lie. A running mock therefore records who owns it (host, pid, boot id,
the process's start time) in its checkpointed report, and any later drill
process that lists mocks settles the ones that are over:

- same host, and the owner is provably gone (no such pid, a zombie, a pid
  reused by a process that started at another time, or the machine has
  rebooted since): 'interrupted' at once;
- owner provably alive (same pid and same start time): never touched, however
  long it has run — it may be suspended with Ctrl-Z, or the laptop was asleep;
- anything we cannot check (another host sharing DRILL_HOME, a platform
  without /proc, a mock written before owners were recorded): 'interrupted'
  only once its time is over, started_at + minutes + GRACE_S, by the wall
  clock. The grace covers the final grading at 0:00.

An interrupted mock keeps its answers and graded attempts (they are in the
store already, and its last checkpoint is its report) but has no score: it
never finished, so it is neither a 0 in the trend nor a result. If its
process was in fact alive and finishes later, its own final save overwrites
the mark, so the truth wins either way.
"""

from __future__ import annotations

import json
import math
import os
import socket
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from drill.mock.report import load_report
from drill.quiz.schedule import parse_time
from drill.store import Store, StoreUnavailable

GRACE_S = 15 * 60.0
# Longest mock `drill mock --minutes` accepts; also caps odd legacy rows (inf, NULL).
MAX_MINUTES = 24 * 60.0

ALIVE, GONE, UNKNOWN = "alive", "gone", "unknown"


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks since boot) from /proc, or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    fields = text[text.rfind(")") + 2:].split()
    try:
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


def this_process() -> dict[str, Any]:
    """Who owns a mock started here: enough to tell later whether it is still alive."""
    stat = _proc_stat(os.getpid())
    return {"host": socket.gethostname(), "pid": os.getpid(), "boot": _boot_id(),
            "start": stat[1] if stat else None}


def owner_state(owner: Any) -> str:
    """ALIVE, GONE or UNKNOWN (cannot be checked from here)."""
    if not isinstance(owner, dict) or not isinstance(owner.get("pid"), int) or os.name != "posix":
        return UNKNOWN
    if owner.get("host") != socket.gethostname():
        return UNKNOWN
    boot = _boot_id()
    if boot and owner.get("boot") and owner["boot"] != boot:
        return GONE  # the machine rebooted since
    pid = owner["pid"]
    if pid <= 0:
        return UNKNOWN
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return GONE
    except PermissionError:
        pass  # exists, owned by someone else: a reused pid, unless /proc says otherwise
    except OSError:
        return UNKNOWN
    if owner.get("start") is None or not boot:
        return UNKNOWN  # a process with that pid exists, but we cannot tell it is ours
    stat = _proc_stat(pid)
    if stat is None or stat[0] in ("Z", "X") or stat[1] != owner["start"]:
        return GONE  # exited since, a zombie, or the pid now belongs to another process
    return ALIVE


def time_over(mock: dict[str, Any], now: datetime) -> bool:
    """Whether the mock's clock plus GRACE_S ran out before `now` (wall clock)."""
    try:
        started = parse_time(mock["started_at"])
    except (KeyError, TypeError, ValueError):
        return False
    minutes = mock.get("minutes")
    if not isinstance(minutes, (int, float)) or not math.isfinite(minutes) or minutes <= 0:
        minutes = MAX_MINUTES
    return now > started + timedelta(seconds=min(minutes, MAX_MINUTES) * 60.0 + GRACE_S)


def is_interrupted(mock: dict[str, Any], report: dict[str, Any], now: datetime) -> bool:
    """Whether a mock the store calls 'running' has in fact stopped."""
    state = owner_state(report.get("owner"))
    if state == GONE:
        return True
    return state == UNKNOWN and time_over(mock, now)


def settle(store: Store, now: datetime) -> list[dict[str, Any]]:
    """Every mock (as `store.mocks()` lists them), dead 'running' ones marked interrupted.

    The mark is saved when the store can be written; when it cannot (read-only,
    locked) the list still shows the truth and a later run saves it. A mock
    that finished between the read and the write keeps its real result.
    """
    mocks = store.mocks()
    unsaved: dict[int, dict[str, Any]] = {}
    saved = False
    for mock in mocks:
        if mock.get("status") != "running":
            continue
        report = load_report(mock.get("report_json"))
        if not is_interrupted(mock, report, now):
            continue
        report = {**report, "status": "interrupted", "score": None}
        ended = report.get("last_seen") or mock.get("started_at") or now.isoformat()
        try:
            saved = store.interrupt_mock(mock["id"], ended, report) or saved
        except StoreUnavailable:
            unsaved[mock["id"]] = {**mock, "status": "interrupted", "ended_at": ended, "score": None,
                                   "report_json": json.dumps(report)}
    if saved:
        mocks = store.mocks()
    return [unsaved.get(m["id"], m) if m.get("status") == "running" else m for m in mocks]
