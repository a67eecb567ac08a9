"""Watch mode (`drill check FILE --watch`): re-grade on every save, like rustlings' watch.

Polling, not inotify: the (mtime_ns, size) of each watched file is read a
few times a second, which works on every platform and filesystem and needs
no dependency. A change is acted on once the file has stayed the same for a
short debounce interval, so an editor that writes in several steps (or a
formatter run on save) triggers one grading, not three. A file that
disappears for a moment (atomic save by rename) is simply seen again; one
that stays gone past the debounce interval is reported once through
`on_missing` (its last verdict is stale) and graded again when it returns.
Only the paths given at the start are watched: a new file in the same folder
is not noticed.

`watch` is a plain function with injectable clock, sleep, stop condition and
round limit, so tests drive it without a terminal or real waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

Fingerprint = tuple[int, int] | None


def fingerprint(path: Path) -> Fingerprint:
    """(mtime_ns, size), or None while the file is missing."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


def watch(
    paths: Sequence[Path],
    grade: Callable[[list[Path]], None],
    *,
    poll_s: float = 0.25,
    debounce_s: float = 0.3,
    max_rounds: int | None = None,
    stop: Callable[[], bool] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    on_idle: Callable[[], None] | None = None,
    on_missing: Callable[[Path], None] | None = None,
) -> int:
    """Grade all `paths` now, then `grade(changed)` after each settled change; returns rounds run.

    Stops when `stop()` is true (checked between polls) or after `max_rounds`
    gradings; otherwise runs until interrupted (KeyboardInterrupt propagates
    to the caller, who owns the terminal). `on_idle()` runs after each
    grading, e.g. to print "waiting for changes". `on_missing(path)` runs
    once each time a watched file has settled as deleted.
    """
    paths = list(paths)
    seen = {p: fingerprint(p) for p in paths}
    grade(paths)
    rounds = 1
    if on_idle is not None:
        on_idle()
    pending: dict[Path, Fingerprint] = {}
    settled_at: float | None = None
    while (max_rounds is None or rounds < max_rounds) and not (stop is not None and stop()):
        sleep(poll_s)
        now = clock()
        for p in paths:
            fp = fingerprint(p)
            if fp != seen[p] and pending.get(p, seen[p]) != fp:
                pending[p] = fp  # changed (again): restart the debounce interval
                settled_at = now
        if pending and settled_at is not None and now - settled_at >= debounce_s:
            changed = [p for p in paths if p in pending and pending[p] is not None]
            gone = [p for p in paths if p in pending and pending[p] is None]
            for p, fp in pending.items():
                seen[p] = fp
            pending.clear()
            if on_missing is not None:
                for p in gone:
                    on_missing(p)
            settled_at = None
            if changed:
                grade(changed)
                rounds += 1
                if on_idle is not None:
                    on_idle()
    return rounds
