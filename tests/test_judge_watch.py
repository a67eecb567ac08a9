"""Watch mode: re-grade after a save, debounced; driven without a terminal or real waiting."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from drill.judge.check import check_file
from drill.judge.runner import ChildPool, Limits
from drill.judge.watch import watch

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions"


class FakeTime:
    """A clock that advances only when the watcher sleeps; `script[t]` runs when time t is reached."""

    def __init__(self, script: dict[float, object]) -> None:
        self.now = 0.0
        self.script = dict(script)

    def sleep(self, s: float) -> None:
        self.now = round(self.now + s, 6)
        for t in sorted(self.script):
            if t <= self.now:
                self.script.pop(t)()

    def clock(self) -> float:
        return self.now


def _touch(path: Path, text: str, mtime: int) -> None:
    path.write_text(text)
    os.utime(path, ns=(mtime, mtime))


def test_regrades_once_per_settled_change(tmp_path: Path) -> None:
    f = tmp_path / "rope.py"
    _touch(f, "a", 1_000_000_000)
    graded: list[tuple[float, list[str]]] = []
    t = FakeTime({
        1.0: lambda: _touch(f, "ab", 2_000_000_000),  # an editor writing in two steps ...
        1.1: lambda: _touch(f, "abc", 3_000_000_000),  # ... is graded once, after it settles
        5.0: lambda: _touch(f, "abcd", 4_000_000_000),
    })
    rounds = watch([f], lambda changed: graded.append((t.now, [p.name for p in changed])), poll_s=0.1,
                   debounce_s=0.3, max_rounds=3, sleep=t.sleep, clock=t.clock)
    assert rounds == 3
    assert [names for _, names in graded] == [["rope.py"]] * 3
    assert graded[0][0] == 0.0 and 1.3 <= graded[1][0] <= 1.6 and 5.0 < graded[2][0] <= 5.5


def test_stop_condition_and_unchanged_files(tmp_path: Path) -> None:
    f = tmp_path / "gqa.py"
    _touch(f, "x", 1_000_000_000)
    t = FakeTime({})
    calls = []
    rounds = watch([f], calls.append, poll_s=0.5, sleep=t.sleep, clock=t.clock, stop=lambda: t.now >= 10)
    assert rounds == 1 and len(calls) == 1  # nothing changed in 10 s: graded once


def test_vanishing_file_is_not_graded_until_it_returns(tmp_path: Path) -> None:
    f = tmp_path / "rope.py"
    _touch(f, "x", 1_000_000_000)
    t = FakeTime({1.0: f.unlink, 3.0: lambda: _touch(f, "y", 2_000_000_000)})
    graded = []
    watch([f], lambda changed: graded.append(t.now), poll_s=0.1, debounce_s=0.2, max_rounds=2, sleep=t.sleep,
          clock=t.clock)
    assert len(graded) == 2 and graded[1] >= 3.2


def test_watch_regrades_a_real_check_after_the_fix(tmp_path: Path) -> None:
    """End to end: a buggy file fails, the learner saves the fix, the next round passes."""
    f = tmp_path / "rope.py"
    shutil.copy(SOLUTIONS / "rope" / "bug_rope_sign_flipped__rotate_half.py", f)
    verdicts = []
    fixed = (SOLUTIONS / "rope" / "good_rotate_half.py").read_text()
    t = FakeTime({0.5: lambda: _touch(f, fixed, 5_000_000_000)})
    with ChildPool() as pool:
        def grade(changed):
            for p in changed:
                r = check_file(p, None, 9, Limits(), pool=pool)
                verdicts.append(r.status if r.diagnosis is None else r.diagnosis.id)

        watch([f], grade, poll_s=0.1, debounce_s=0.2, max_rounds=2, sleep=t.sleep, clock=t.clock)
    assert verdicts == ["rope_sign_flipped", "pass"]
