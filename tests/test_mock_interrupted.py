"""Mocks whose process died: history marks them interrupted, never a live one.

The end-to-end tests run the real CLI in a subprocess over a pipe and
SIGKILL it (no `finally` runs, exactly like a crashed terminal); the rules
themselves are tested through `drill.mock.interrupted.settle` with an
injected wall clock.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from drill.cli import app
from drill.mock import interrupted
from drill.mock.interrupted import GRACE_S, settle, this_process
from drill.store import Store, StoreUnavailable

runner = CliRunner()
LINUX_PROC = Path("/proc/self/stat").exists() and Path("/proc/sys/kernel/random/boot_id").exists()


class MockProcess:
    """`drill mock` in a child process, fed through a pipe, its output collected."""

    def __init__(self, bank: Path, work: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "drill.cli", "mock", "--minutes", "5", "--questions", "2", "--bank", str(bank),
             "--dir", str(work), "--exercise", "attention", "--seed", "5"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env={**os.environ, "COLUMNS": "100"},
        )
        self.seen = bytearray()
        self._pump = threading.Thread(target=self._read, daemon=True)
        self._pump.start()

    def _read(self) -> None:
        assert self.proc.stdout
        while chunk := self.proc.stdout.read1(4096):  # type: ignore[attr-defined]
            self.seen.extend(chunk)

    def send(self, text: str) -> None:
        assert self.proc.stdin
        self.proc.stdin.write(text.encode())
        self.proc.stdin.flush()

    def wait_for(self, marker: str, count: int = 1, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while self.seen.decode(errors="replace").count(marker) < count:
            assert self.proc.poll() is None, self.seen.decode(errors="replace")
            assert time.monotonic() < deadline, f"no {marker!r} in:\n{self.seen.decode(errors='replace')}"
            time.sleep(0.05)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        self._pump.join(5)


def history_rows(output: str) -> list[str]:
    return [line for line in output.splitlines() if line[:1].isdigit()]


@pytest.mark.parametrize(
    ("script", "concept_cell", "coding_cell"),
    [
        # killed on question 2, after answering question 1
        ([("a,b\n", "Question 2/2")], "100% of 1", "not reached"),
        # killed in the coding round, after submitting the untouched starter once
        ([("a,b\na,b\n", "Enter = grade"), ("\n", "nothing to grade yet")], "100% of 2", "untouched"),
    ],
)
def test_sigkilled_mock_shows_as_interrupted_and_keeps_its_answers(
    home: Path, bank: Path, tmp_path: Path, script: list[tuple[str, str]], concept_cell: str, coding_cell: str
) -> None:
    mock = MockProcess(bank, tmp_path / "work")
    try:
        mock.wait_for("your choice")
        for text, marker in script:
            mock.send(text)
            mock.wait_for(marker)
        mock.kill()
    finally:
        mock.close()
    with Store(home / "progress.db") as store:
        assert store.mocks()[0]["status"] == "running"  # nothing ran after the kill
    result = runner.invoke(app, ["mock", "--history"])
    assert result.exit_code == 0, result.output
    (row,) = history_rows(result.output)
    cells = row.split()
    assert "interrupted" in cells and concept_cell in row and coding_cell in row, result.output
    assert cells[-1] == "—", row  # no score, and so no trend
    assert "interrupted: drill stopped without finishing" in result.output
    with Store(home / "progress.db") as store:
        (saved,) = store.mocks()
        report = json.loads(saved["report_json"])
        assert saved["status"] == "interrupted" and saved["score"] is None and saved["ended_at"]
        answered = [q for q in report["concept"]["questions"] if q["outcome"] != "missed"]
        assert [q["outcome"] for q in answered] == ["right"] * len(answered)
        assert [r.source for r in store.reviews()] == ["mock"] * len(answered)  # the answers stayed in FSRS


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_or_sighup_saves_the_mock_as_interrupted_at_once(home: Path, bank: Path, tmp_path: Path,
                                                                 signum: int) -> None:
    mock = MockProcess(bank, tmp_path / "work")
    try:
        mock.wait_for("your choice")
        mock.send("a,b\n")
        mock.wait_for("Question 2/2")
        mock.proc.send_signal(signum)
        assert mock.proc.wait(timeout=30) == 128 + signum
    finally:
        mock.close()
    out = mock.seen.decode()
    assert "Mock #1 report — interrupted" in out and "no score" in out and "Traceback" not in out
    assert "Concept round: 100% of 1 answered" in out
    with Store(home / "progress.db") as store:
        (saved,) = store.mocks()  # saved by the process itself, before any later drill looks
        report = json.loads(saved["report_json"])
    assert (saved["status"], saved["score"], report["status"]) == ("interrupted", None, "interrupted")
    assert [q["outcome"] for q in report["concept"]["questions"]] == ["right", "missed"]


def test_a_mock_running_in_another_process_is_left_alone(home: Path, bank: Path, tmp_path: Path) -> None:
    mock = MockProcess(bank, tmp_path / "work")
    try:
        mock.wait_for("your choice")
        result = runner.invoke(app, ["mock", "--history"])
        assert result.exit_code == 0, result.output
        (row,) = history_rows(result.output)
        assert "running" in row.split() and "interrupted" not in result.output
        with Store(home / "progress.db") as store:
            assert store.mocks()[0]["status"] == "running"
        mock.send("a,b\na,b\ndone\n")
        assert mock.proc.wait(timeout=60) == 0, mock.seen.decode()
    finally:
        mock.close()
    with Store(home / "progress.db") as store:
        (saved,) = store.mocks()
        assert saved["status"] == "completed" and saved["score"] is not None


# -- the rules, with an injected wall clock --------------------------------------


def _running(store: Store, owner: Any, minutes: float = 5.0) -> tuple[int, datetime]:
    mock_id = store.start_mock(minutes, "attention")
    report: dict[str, Any] = {"status": "running", "concept": {"questions": []}}
    if owner is not None:
        report["owner"] = owner
    store.checkpoint_mock(mock_id, report)
    started = datetime.fromisoformat(store.mocks()[-1]["started_at"])
    return mock_id, started


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


OTHER_HOST = {"host": "not-this-host.invalid", "pid": 1, "boot": None, "start": None}


@pytest.mark.parametrize("owner", [None, OTHER_HOST], ids=["no owner recorded", "owner on another host"])
@pytest.mark.parametrize(
    ("after_s", "expected"),
    [(5 * 60 + GRACE_S - 1, "running"), (5 * 60 + GRACE_S + 1, "interrupted")],
    ids=["within its time and grace", "past its time and grace"],
)
def test_an_unverifiable_owner_is_judged_by_the_clock(tmp_path: Path, owner: Any, after_s: float,
                                                      expected: str) -> None:
    with Store(tmp_path / "p.db") as store:
        mock_id, started = _running(store, owner)
        shown = settle(store, started + timedelta(seconds=after_s))
        assert [m["status"] for m in shown] == [expected] == [m["status"] for m in store.mocks()]


@pytest.mark.skipif(not LINUX_PROC, reason="process start times need /proc")
@pytest.mark.parametrize(
    ("owner_of", "expected"),
    [
        (lambda me: me, "running"),  # alive: never touched, however late
        (lambda me: {**me, "pid": _dead_pid()}, "interrupted"),  # exited
        (lambda me: {**me, "start": me["start"] + 1}, "interrupted"),  # pid reused by another process
        (lambda me: {**me, "boot": "another-boot"}, "interrupted"),  # rebooted since
    ],
    ids=["alive", "exited", "pid reused", "rebooted"],
)
def test_an_owner_on_this_host_is_checked_directly(tmp_path: Path, owner_of: Any, expected: str) -> None:
    with Store(tmp_path / "p.db") as store:
        mock_id, started = _running(store, owner_of(this_process()))
        for now in (started + timedelta(seconds=1), started + timedelta(days=3)):
            shown = settle(store, now)
            assert [m["status"] for m in shown] == [expected] == [m["status"] for m in store.mocks()]


def test_a_mock_that_finished_meanwhile_keeps_its_result(tmp_path: Path) -> None:
    with Store(tmp_path / "p.db") as store:
        mock_id, started = _running(store, None)
        store.finish_mock(mock_id, "completed", 80.0, {"status": "completed"})
        assert store.interrupt_mock(mock_id, started.isoformat(), {}) is False
        store.checkpoint_mock(mock_id, {"late": True})  # a stray checkpoint is ignored too
        (saved,) = store.mocks()
        saved_report = json.loads(saved["report_json"])
        assert (saved["status"], saved["score"], saved_report) == ("completed", 80.0, {"status": "completed"})


def test_a_store_that_cannot_be_written_still_shows_the_truth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Store(tmp_path / "p.db") as store:
        mock_id, started = _running(store, None)

        def refuse(*args: Any) -> bool:
            raise StoreUnavailable("read-only", str(tmp_path / "p.db"))

        monkeypatch.setattr(store, "interrupt_mock", refuse)
        shown = settle(store, started + timedelta(days=1))
        assert [m["status"] for m in shown] == ["interrupted"]
        assert [m["status"] for m in store.mocks()] == ["running"]  # saved by a later run


def test_interrupted_mocks_are_not_a_zero_in_the_trend(home: Path) -> None:
    with Store(home / "progress.db") as store:
        for score in (40.0, None, 60.0):
            mock_id, started = _running(store, None)
            if score is not None:
                store.finish_mock(mock_id, "completed", score, {"status": "completed", "concept": {"score_pct": score}})
        # the middle one is left 'running' with no owner: the clock rule settles it
        with store.transaction() as db:
            db.execute("UPDATE mocks SET started_at = ? WHERE id = 2",
                       ((datetime.now(timezone.utc) - timedelta(days=1)).isoformat(),))
    result = runner.invoke(app, ["mock", "--history"])
    assert result.exit_code == 0, result.output
    rows = history_rows(result.output)
    assert "interrupted" in rows[1] and rows[1].split()[-1] == "—"
    assert rows[2].split()[-2:] == ["▲", "+20"]  # against 40, not against a 0
    assert "Finished mocks: 2; first 40, best 60, latest 60" in result.output


def test_minutes_past_the_cap_are_refused(home: Path) -> None:
    for value in ("inf", "1e9", str(interrupted.MAX_MINUTES + 1)):
        result = runner.invoke(app, ["mock", "--minutes", value])
        assert result.exit_code == 2, result.output
        assert "--minutes: must be at most 1440" in result.output and len(result.output.strip().splitlines()) == 1
    assert not (home / "progress.db").exists() or Store(home / "progress.db").mocks() == []


def _history_with_read_only_folder(home: Path) -> subprocess.CompletedProcess[str]:
    """`drill mock --history` with the store's folder read-only (chmod, or a read-only bind mount as root)."""
    drill = [sys.executable, "-m", "drill.cli", "mock", "--history"]
    env = {**os.environ, "DRILL_HOME": str(home), "COLUMNS": "200"}
    if os.geteuid() != 0:
        paths = [home, *home.iterdir()]
        modes = {p: p.stat().st_mode for p in paths}
        for p in paths:
            p.chmod(modes[p] & ~0o222)
        try:
            return subprocess.run(drill, capture_output=True, text=True, env=env, timeout=120)
        finally:
            for p, mode in modes.items():
                p.chmod(mode)
    if subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode != 0:
        pytest.skip("root without `unshare --mount`: cannot make a folder read-only")
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    return subprocess.run(["unshare", "--mount", "sh", "-c", script, str(home), *drill],
                          capture_output=True, text=True, env=env, timeout=120)


def test_history_of_a_read_only_store_still_shows_the_truth(home: Path) -> None:
    """History settles in memory, writes nothing, says why; a later writable run saves the mark."""
    with Store(home / "progress.db") as store:
        _running(store, None)
        with store.transaction() as db:
            yesterday = (datetime.now(timezone.utc) - timedelta(days=1)).isoformat()
            db.execute("UPDATE mocks SET started_at = ?", (yesterday,))
    before = (home / "progress.db").read_bytes()
    proc = _history_with_read_only_folder(home)
    assert proc.returncode == 0, proc.stderr
    (row,) = history_rows(proc.stdout)
    assert "interrupted" in row.split(), proc.stdout
    assert proc.stderr.startswith("note: progress store is read-only"), proc.stderr
    assert (home / "progress.db").read_bytes() == before
    with Store(home / "progress.db") as store:
        assert [m["status"] for m in store.mocks()] == ["running"]
    assert runner.invoke(app, ["mock", "--history"]).exit_code == 0
    with Store(home / "progress.db") as store:
        assert [m["status"] for m in store.mocks()] == ["interrupted"]


def test_history_on_a_fresh_machine_creates_nothing(home: Path) -> None:
    result = runner.invoke(app, ["mock", "--history"])
    assert result.exit_code == 0 and "No mocks yet" in result.output
    assert not home.exists()
