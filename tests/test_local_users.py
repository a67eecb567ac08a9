"""Another local user cannot aim drill's writes, hang it, or drive its terminal (issue 30, section 5).

The attacks, each tried through the CLI: a symlink planted at the predictable temporary name beside an
export (it made drill overwrite the victim's progress.db), a target pre-created by someone else (it kept their
ownership and mode 0666), a dangling symlink where `drill start` writes its starter, a FIFO as progress.db
(drill hung), and a shared bank whose text holds terminal escapes. Ownership by another user is simulated
by making drill see another uid (a test cannot count on a second account), so it runs as root or not.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drill.cli import app
from drill.errors import UserError
from drill.safe_files import write_atomic

runner = CliRunner()

BANK = """\
topic: hostile
questions:
  - id: hostile-choice
    kind: choice
    difficulty: easy
    prompt: "Pick one.\\e[2J\\e]8;;https://evil.example\\e\\\\click\\e]8;;\\e\\\\ \\u202eright-to-left"
    explanation: "First.\\e[31m"
    options:
      - {text: "first\\e[5m", correct: true}
      - {text: "second", correct: false}
"""


def _victim(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    victim = folder / "progress.db"
    victim.write_bytes(b"the victim's reviews")
    return victim


def test_a_link_at_the_old_temporary_name_is_never_written_through(home: Path, tmp_path: Path) -> None:
    victim = _victim(tmp_path / "victim")
    shared = tmp_path / "shared"
    shared.mkdir()
    out = shared / "reviews.csv"
    # The names the old code used: `.reviews.csv.<pid>.tmp` for this process (CliRunner runs in it).
    (shared / f".reviews.csv.{os.getpid()}.tmp").symlink_to(victim)
    result = runner.invoke(app, ["export", "reviews", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert victim.read_bytes() == b"the victim's reviews"
    assert out.read_text(encoding="utf-8").startswith("card_id,")
    assert stat.S_IMODE(out.stat().st_mode) & 0o022 == 0


def test_a_pre_created_world_writable_target_is_replaced_not_reused(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "deck.apkg"
    out.write_bytes(b"planted")
    out.chmod(0o666)
    before = out.stat().st_ino
    result = runner.invoke(app, ["export", "anki", "-o", str(out), "--topic", "attention"])
    assert result.exit_code == 0, result.output
    assert out.stat().st_ino != before  # a new file, renamed into place
    assert stat.S_IMODE(out.stat().st_mode) == 0o644 & ~_umask()
    assert out.read_bytes()[:2] == b"PK"


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


@pytest.mark.parametrize("command", [["export", "reviews", "-o"], ["export", "anki", "--topic", "attention", "-o"]])
def test_a_target_owned_by_another_user_is_refused_in_one_line(home: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               command: list[str]) -> None:
    out = tmp_path / "theirs.out"
    out.write_bytes(b"someone else's file")
    monkeypatch.setattr("drill.safe_files.my_uid", lambda: os.getuid() + 4242)  # every file looks foreign
    result = runner.invoke(app, [*command, str(out)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "owned by another user" in lines[0] and str(out) in lines[0], result.output
    assert out.read_bytes() == b"someone else's file"
    assert [p.name for p in tmp_path.iterdir()] == ["theirs.out"]  # no temporary file left behind


def test_a_symlink_owned_by_another_user_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    victim = _victim(tmp_path)
    link = tmp_path / "out.csv"
    link.symlink_to(victim)
    monkeypatch.setattr("drill.safe_files.my_uid", lambda: os.getuid() + 4242)
    with pytest.raises(UserError, match="symbolic link owned by another user"):
        write_atomic(link, "x")
    assert victim.read_bytes() == b"the victim's reviews"


def test_my_own_symlink_to_my_own_file_is_followed(tmp_path: Path) -> None:
    real = tmp_path / "real.csv"
    real.write_text("old", encoding="utf-8")
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    assert write_atomic(link, "new") == real.resolve()
    assert link.is_symlink() and real.read_text(encoding="utf-8") == "new"


@pytest.mark.parametrize("force", [False, True])
def test_start_does_not_follow_a_dangling_symlink_out_of_its_folder(home: Path, tmp_path: Path, force: bool) -> None:
    folder = tmp_path / "work"
    folder.mkdir()
    outside = tmp_path / "outside.py"
    (folder / "attention.py").symlink_to(outside)
    result = runner.invoke(app, ["start", "attention", str(folder), *(["--force"] if force else [])])
    assert result.exit_code == 2, result.output
    assert "attention.py" in result.output and ("already exists" in result.output) != force, result.output
    assert not outside.exists() and (folder / "attention.py").is_symlink()


@pytest.mark.parametrize("command", [["stats"], ["quiz", "-n", "1"]])
def test_a_fifo_as_the_progress_store_is_refused_not_waited_on(home: Path, command: list[str]) -> None:
    home.mkdir(parents=True, exist_ok=True)
    fifo = home / "progress.db"
    os.mkfifo(fifo)
    env = {**os.environ, "DRILL_HOME": str(home)}
    proc = subprocess.run([sys.executable, "-m", "drill.cli", *command], capture_output=True, text=True, env=env,
                          timeout=60, stdin=subprocess.DEVNULL)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert len(lines) == 1 and "not a regular file" in lines[0] and "progress.db" in lines[0], proc.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # left as it was


def test_bank_text_reaches_the_terminal_escaped(home: Path, tmp_path: Path) -> None:
    bank = tmp_path / "hostile.yaml"
    bank.write_text(BANK, encoding="utf-8")
    result = runner.invoke(app, ["quiz", "--bank", str(bank), "--no-shuffle", "-n", "1"], input="a\n")
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\u202e" not in result.output
    assert "\\x1b[2J" in result.output and "\\u202e" in result.output
    assert "First.\\x1b[31m" in result.output  # the explanation too
