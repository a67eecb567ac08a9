"""An earlier run's descendant that exits after being re-parented to drill is reaped, not blamed on the next run.

drill is a child subreaper, so a graded run's escaped descendants come back
to it and are killed by that run's sweep. One that is re-parented only after
the sweep (its own parent, e.g. the sandbox's init, died later) and then
exits stays a zombie child of drill; the next run's sweep used to count it
as "left N process(es) running after grading" and fail a correct file. Seen
in the full suite: the first file graded after tests/test_judge_tamper.py.
"""

from __future__ import annotations

import os
import time

from drill.judge import runner
from drill.judge.sandbox import harden_parent


def _zombie_orphan() -> int:
    """A grandchild in its own session that is re-parented here and exits: returns its pid."""
    harden_parent()  # makes this process a child subreaper, as check_file does
    read, write = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.close(read)
        grandchild = os.fork()
        if grandchild == 0:
            os.setsid()
            time.sleep(0.3)  # outlive the middle process, then exit unreaped
            os._exit(0)
        os.write(write, str(grandchild).encode())
        os._exit(0)
    os.close(write)
    pid = int(os.read(read, 32))
    os.close(read)
    os.waitpid(middle, 0)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                if fh.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    return pid
        except OSError:
            break
        time.sleep(0.02)
    raise AssertionError("the grandchild did not become our zombie")


def test_a_zombie_orphan_is_reaped_not_reported() -> None:
    pid = _zombie_orphan()
    assert pid in runner._children_of_self()
    assert runner._orphans() == []
    assert pid not in runner._children_of_self()  # reaped


def test_a_process_being_started_is_never_taken_for_an_orphan() -> None:
    """A fork server starting on one grading thread while another thread sweeps for a graded run's orphans (a
    child of ours in a session of its own that we did not register) must not be swept: it is registered in the
    same step that starts it (runner.spawn_own), and the sweep lists children under the same lock."""
    import threading

    from drill.judge import runner

    seen: set[int] = set()
    started: list = []
    stop = threading.Event()

    def sweep() -> None:
        while not stop.is_set():
            seen.update(runner._orphans())

    sweeper = threading.Thread(target=sweep)
    sweeper.start()
    try:
        for _ in range(40):
            started.append(runner.spawn_own(["sleep", "30"], start_new_session=True))
    finally:
        stop.set()
        sweeper.join()
        for proc in started:
            proc.kill()
            proc.wait()
            runner._own(proc.pid, add=False)
    assert len(started) == 40 and not seen & {p.pid for p in started}
