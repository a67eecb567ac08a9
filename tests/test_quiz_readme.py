"""README.md's quiz parts are true: its piped example does what it says, and it names every quiz command.

Why run the example: `printf 'b\\n3\\n' | drill quiz` used to answer whatever card came
first, so on most stores it recorded a wrong review (issue 16). The README's example
is now parsed from the README itself and run exactly as written, in a shell, on a
fresh DRILL_HOME: a bank edit that changes which card its seed draws fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from drill.quiz.commands import app as quiz_app
from drill.store import Store

README = Path(__file__).resolve().parents[1] / "README.md"
PIPED = re.compile(r"`(printf '[^`]*' \| drill quiz [^`]*)`")


def test_the_readme_pipe_example_answers_one_card_right(tmp_path: Path) -> None:
    examples = PIPED.findall(README.read_text(encoding="utf-8"))
    assert len(examples) == 1, f"expected one piped quiz example in README.md, found {examples}"
    command = examples[0]
    assert "--seed" in command  # without a seed no example can say which card it answers
    home = tmp_path / "home"
    bin_dir = str(Path(sys.executable).parent)  # the venv's `drill`, as the README's install makes it
    env = {**os.environ, "DRILL_HOME": str(home), "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
           "COLUMNS": "100"}
    done = subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "✓ correct" in done.stdout, done.stdout
    with Store(home / "progress.db") as store:
        reviews = store.reviews()
        assert [(r.rating, r.answer) for r in reviews] == [(3, "b")], done.stdout
        if "--cram" in command:
            assert reviews[0].source == "cram" and store.cards() == {}  # and the schedule is left alone


def test_the_readme_names_every_quiz_command() -> None:
    text = README.read_text(encoding="utf-8")
    names = [c.name or (c.callback.__name__ if c.callback else "") for c in quiz_app.registered_commands]
    names += [g.name or "" for g in quiz_app.registered_groups]
    assert {"quiz", "validate", "stats", "optimize", "export"} <= set(names)
    for name in names:
        assert f"drill {name}" in text, f"README.md never shows `drill {name}`"
