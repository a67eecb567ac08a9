"""Watch mode: re-grade after a save, debounced; driven without a terminal or real waiting."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drill.cli import app
from drill.judge.check import check_file
from drill.judge.pool import ChildPool
from drill.judge.runner import Limits
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
    verdicts, details = [], []
    fixed = (SOLUTIONS / "rope" / "good_rotate_half.py").read_text()
    t = FakeTime({0.5: lambda: _touch(f, fixed, 5_000_000_000)})
    with ChildPool() as pool:
        def grade(changed):
            for p in changed:
                r = check_file(p, None, 9, Limits(), pool=pool)
                verdicts.append(r.status if r.diagnosis is None else r.diagnosis.id)
                details.append(r.diagnosis_detail)

        watch([f], grade, poll_s=0.1, debounce_s=0.2, max_rounds=2, sleep=t.sleep, clock=t.clock)
    assert verdicts == ["rope_sign_flipped", "pass"], details


@pytest.mark.parametrize(("script", "missing_at", "grades"), [
    # deleted and left gone: reported once, after the debounce; graded again when it is back
    ({1.0: "unlink", 3.0: "restore"}, [1.2], 2),
    # an atomic save (gone for 0.1 s, under the debounce): no notice, one grading
    ({1.0: "unlink", 1.1: "restore"}, [], 2),
    # gone twice: a notice each time
    ({1.0: "unlink", 2.0: "restore", 3.0: "unlink", 4.0: "restore"}, [1.2, 3.2], 3),
])
def test_a_deleted_file_is_reported_once_per_disappearance(tmp_path: Path, script: dict, missing_at: list,
                                                           grades: int) -> None:
    f = tmp_path / "rope.py"
    _touch(f, "x", 1_000_000_000)
    actions = {"unlink": f.unlink, "restore": lambda: _touch(f, "y" * int(t.now * 10), int(t.now * 1e9) + 7)}
    t = FakeTime({at: actions[what] for at, what in script.items()})
    graded: list[float] = []
    missing: list[tuple[float, str]] = []
    watch([f], lambda changed: graded.append(t.now), poll_s=0.1, debounce_s=0.2, sleep=t.sleep, clock=t.clock,
          stop=lambda: t.now >= 6, on_missing=lambda p: missing.append((t.now, p.name)))
    assert len(graded) == grades
    assert [name for _, name in missing] == ["rope.py"] * len(missing_at)
    assert all(abs(at - want) < 0.15 for (at, _), want in zip(missing, missing_at, strict=True)), missing


def _fake_watch(*steps: str):
    """A stand-in for watch(): grade / report the file missing / Ctrl-C, in the given order."""

    def fake(paths, grade, on_idle=None, on_missing=None, **kwargs):
        for step in steps:
            if step == "grade":
                grade(list(paths))
            elif step == "missing":
                on_missing(paths[0])
        raise KeyboardInterrupt

    return fake


@pytest.mark.parametrize(("solution", "steps", "code", "shown"), [
    ("rmsnorm/good_rsqrt.py", ("grade",), 0, "PASS"),
    ("rmsnorm/bug_rms_eps_outside_sqrt__sqrt_plus_eps.py", ("grade",), 1, "FAIL"),
    ("rmsnorm/good_rsqrt.py", (), 130, "stopped watching"),  # Ctrl-C before any verdict: interrupted, not failed
    ("rmsnorm/good_rsqrt.py", ("grade", "missing"), 0, "rmsnorm.py deleted — waiting for it to come back"),
])
def test_watch_cli_exit_codes_and_notices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, solution: str,
                                          steps: tuple, code: int, shown: str) -> None:
    import drill.judge.watch as watch_mod

    monkeypatch.setenv("DRILL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(watch_mod, "watch", _fake_watch(*steps))
    f = tmp_path / "rmsnorm.py"
    shutil.copy(SOLUTIONS / solution, f)
    res = CliRunner().invoke(app, ["check", str(f), "--watch", "--seed", "2"])
    assert res.exit_code == code, res.output
    assert shown in res.output


def test_watch_help_says_what_is_and_is_not_watched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    out = " ".join(CliRunner().invoke(app, ["check", "--help"]).output.replace("│", " ").split())
    for phrase in ("130 if none was shown yet", "a file deleted while watched is waited for",
                   "a file missing at the start is refused (exit 2)", "is not picked up"):
        assert phrase in out, phrase
