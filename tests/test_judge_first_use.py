"""What a new user of `drill check` trips over (issue 16), through the CLI.

An empty file is answered at once, without a process; a file that never ran
shows no test count and no seed; an exception at import is worded for the
import; the error sizes say what NaN/inf they leave out; the "slow" advisory
compares with the reference's time in the same run, so a loaded machine does
not set it off; at 80 columns no identifier is broken and --verbose shows
each worst element once.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drill.cli import app

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions"


@pytest.fixture(autouse=True)
def _plain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "80")


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def _flat(text: str) -> str:
    """The panel's words on one line (box drawing and wrapping removed)."""
    return " ".join(text.replace("│", " ").replace("╭", " ").replace("╰", " ").split())


# --- files that never run ---------------------------------------------------------------------


def _no_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Starting a graded process (fresh or forked) fails the test."""
    from drill.judge import pool, runner

    def refuse(*_a, **_k):
        raise AssertionError("a process was started for a file with nothing to run")

    monkeypatch.setattr(runner.Child, "__init__", refuse)
    monkeypatch.setattr(pool.ChildPool, "child", refuse)


@pytest.mark.parametrize(("text", "why"), [
    ("", "the file is empty"),
    ("\n   \n\t\n", "the file is empty"),
    ("# TODO: write attention here\n\n", "only comments or a docstring"),
    ('"""My attention, to be written."""\n# soon\n', "only comments or a docstring"),
])
def test_an_empty_file_is_said_at_once_without_a_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         text: str, why: str) -> None:
    _no_process(monkeypatch)
    f = tmp_path / "attention.py"
    f.write_text(text, encoding="utf-8")
    res = run("check", str(f))
    assert res.exit_code == 1, res.output
    flat = _flat(res.output)
    assert "The file is empty [empty_file]" in flat and why in flat, flat
    assert "scaled_dot_product_attention" in flat and "drill start attention" in flat  # what to write, how to start
    assert "Graded name missing" not in flat and "more failing test" not in flat
    assert "tests passed" not in flat and "seed" not in flat  # nothing was drawn: no count, no seed to replay
    doc = json.loads(run("check", str(f), "--json").stdout)
    assert doc["diagnosis"]["id"] == "empty_file" and doc["tests_total"] == 0


def test_a_file_with_code_is_not_empty(tmp_path: Path) -> None:
    """A docstring and one statement is code: it runs (and here misses the graded name)."""
    f = tmp_path / "attention.py"
    f.write_text('"""Notes."""\nimport torch\n', encoding="utf-8")
    doc = json.loads(run("check", str(f), "--json", "--seed", "1").stdout)
    assert doc["diagnosis"]["id"] == "missing_name"


def test_a_syntax_error_shows_no_test_count_and_no_seed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_process(monkeypatch)
    f = tmp_path / "attention.py"
    f.write_text("def scaled_dot_product_attention(q, k, v, mask=None):\n    return q +\n", encoding="utf-8")
    res = run("check", str(f), "--seed", "5")
    assert res.exit_code == 1
    flat = _flat(res.output)
    assert "Syntax error [syntax_error]" in flat and "line 2" in flat
    assert "0/0" not in flat and "nothing was run" in flat
    assert "seed" not in flat and "replay" not in flat, flat
    # The summary of several files says "-" for its tests, not 0/0.
    good = tmp_path / "rmsnorm.py"
    shutil.copy(SOLUTIONS / "rmsnorm" / "good_rsqrt.py", good)
    monkeypatch.undo()
    res = run("check", str(tmp_path), "--seed", "5")
    row = next(line for line in res.output.splitlines() if "attention.py" in line and "syntax_error" in line)
    assert "0/0" not in row and re.search(r"│\s+-\s+│", row), row


def test_an_exception_at_import_is_worded_for_the_import(tmp_path: Path) -> None:
    f = tmp_path / "attention.py"
    f.write_text("import torch\n\nSCALE = 1 / torch.tensor([])[0]  # raises IndexError at import\n\n"
                 "def scaled_dot_product_attention(q, k, v, mask=None):\n    return q\n", encoding="utf-8")
    res = run("check", str(f), "--seed", "2")
    assert res.exit_code == 1
    flat = _flat(res.output)
    assert "Your file raised an exception when imported [exception]" in flat, flat
    assert "IndexError" in flat and "line 3" in flat and "while importing the file" in flat
    assert "at least one hidden test" not in flat
    assert re.search(r"none of the \d+ hidden tests ran", flat) and "more failing test" not in flat
    assert "seed 2" in flat  # the tests were drawn: replaying them after the fix means something
    doc = json.loads(run("check", str(f), "--json", "--seed", "2").stdout)
    assert doc["diagnosis"]["id"] == "exception" and doc["status"] == "error"


def test_an_exception_in_a_test_keeps_the_hidden_test_wording(tmp_path: Path) -> None:
    f = tmp_path / "attention.py"
    f.write_text("def scaled_dot_product_attention(q, k, v, mask=None):\n    raise ValueError('not yet')\n",
                 encoding="utf-8")
    flat = _flat(run("check", str(f), "--seed", "2").output)
    assert "Your code raised an exception" in flat and "at least one hidden test" in flat


# --- error sizes --------------------------------------------------------------------------------


def test_the_error_sizes_say_which_nan_inf_they_leave_out() -> None:
    res = run("check", str(SOLUTIONS / "attention" / "bug_no_max_subtraction__manual_exp.py"), "-e", "attention",
              "--seed", "20261129")
    assert res.exit_code == 1
    flat = _flat(res.output)
    listed = re.search(r"output: (\d+) NaN/inf where finite expected", flat)
    assert listed, flat
    assert re.search(rf"max abs err \S+, max rel err \S+ \(\|diff\| / max\|expected\|\), not counting {listed[1]} "
                     r"NaN/inf elements where finite values were expected", flat), flat


def test_error_sizes_without_nan_say_nothing_more() -> None:
    res = run("check", str(SOLUTIONS / "attention" / "bug_missing_scale__matmul.py"), "-e", "attention",
              "--seed", "5")
    flat = _flat(res.output)
    assert "max abs err" in flat and "not counting" not in flat


# --- the slow advisory under load ----------------------------------------------------------------

SLOW_RMSNORM = '''"""RMSNorm element by element in Python: right, and thousands of times slower than the reference."""

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        rows = x.float().reshape(-1, x.shape[-1])
        out = []
        for r in range(rows.shape[0]):
            total = rows[r, 0] * 0.0
            for j in range(rows.shape[1]):
                total = total + rows[r, j] * rows[r, j]
            inv = torch.rsqrt(total / rows.shape[1] + self.eps)
            out.append(torch.stack([rows[r, j] * inv * self.weight[j].float() for j in range(rows.shape[1])]))
        return torch.stack(out).reshape(x.shape).to(x.dtype)
'''


def _load(monkeypatch: pytest.MonkeyPatch, factor: float) -> None:
    """A loaded machine, as a fake clock: every test waits `factor` times longer for a core (its wall clock,
    as the child reports it, is multiplied) while the CPU it uses stays what it is."""
    from drill.judge import runner

    events = runner.Child._events

    def slowed(self):
        found, unreadable = events(self)
        for e in found:
            if e.get("event") == "end" and isinstance(e.get("elapsed"), (int, float)):
                e["elapsed"] *= factor
        return found, unreadable

    monkeypatch.setattr(runner.Child, "_events", slowed)


def test_slow_is_judged_against_the_reference_in_the_same_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a load that makes every test take a minute of wall clock, loop-free code gets no "slow" advisory
    (a fixed 2 s of wall clock gave one); code looping over elements in Python gets it, naming the test and
    its CPU time against the reference's on the same inputs in the same run.

    The CPU floor is lowered so that this file's tiny tests can reach it; the ratio is the real one.
    """
    from drill.judge import check

    d = tmp_path / "work"
    d.mkdir()
    shutil.copy(SOLUTIONS / "attention" / "good_matmul_softmax.py", d / "attention.py")
    (d / "rmsnorm.py").write_text(SLOW_RMSNORM, encoding="utf-8")
    _load(monkeypatch, 5000.0)
    monkeypatch.setattr(check, "SLOW_FLOOR_S", 0.01)
    res = run("check", str(d), "--json", "--seed", "5")
    docs = {doc["exercise"]: doc for doc in json.loads(res.stdout)}
    assert docs["attention"]["status"] == docs["rmsnorm"]["status"] == "pass", res.stdout
    assert not [a for a in docs["attention"]["advisories"] if a.startswith("slow")]
    slow = [a for a in docs["rmsnorm"]["advisories"] if a.startswith("slow")]
    assert len(slow) == 1, docs["rmsnorm"]["advisories"]
    assert re.search(r"used [\d.]+ (ms|s) of CPU, \d+x the reference's [\d.]+ (ms|s) on the same inputs", slow[0]), slow


# --- 80 columns ---------------------------------------------------------------------------------


def test_the_summary_never_breaks_an_identifier_at_80_columns() -> None:
    """Every diagnosis id and exercise file name stays whole in the `drill check DIR` table, 80 wide."""
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from drill.judge import registry
    from drill.judge.batch import summary_table
    from drill.judge.diagnose import GENERIC

    ids = sorted({b.diagnosis.id for n in registry.graded_names() for b in registry.load_spec(n).bugs} | set(GENERIC),
                 key=len, reverse=True)
    # The worst case on purpose: the longest ids on the rows of the longest file names (a set's order would
    # otherwise decide which pairs meet, and a too-long pair fail on one run in many).
    names = sorted(registry.graded_names(), key=len, reverse=True)
    results = [SimpleNamespace(exercise=name, file=f"/work/{name}.py", status="fail", passed=3, total=21,
                               diagnosis=SimpleNamespace(id=ids[i % len(ids)]), advisories=[], elapsed_s=12.3)
               for i, name in enumerate(names)]
    long_name = "bug_rms_no_fp32_upcast__mean_in_half_root_in_fp32.py"
    results.append(SimpleNamespace(exercise="rmsnorm", file=f"/w/{long_name}", status="pass", passed=9, total=9,
                                   diagnosis=None, advisories=["a"], elapsed_s=0.3))
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(summary_table(results, 4.2, width=80))
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines), out.getvalue()
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in lines if line.startswith("│")]
    for r in results[:-1]:
        assert any(cell[0] == f"{r.exercise}.py" and cell[3] == r.diagnosis.id for cell in cells), (r, out.getvalue())
    assert "(rmsnorm)" in out.getvalue()  # a file not named after its exercise says which one it is


def test_check_dir_at_80_columns_keeps_ids_whole(tmp_path: Path) -> None:
    files = [SOLUTIONS / "rmsnorm" / "bug_rms_eps_outside_sqrt__rsqrt_plus_eps.py",
             SOLUTIONS / "rmsnorm" / "bug_rms_no_fp32_upcast__mean_in_half_root_in_fp32.py"]
    res = run("check", "-e", "rmsnorm", *map(str, files), "--seed", "3")
    assert res.exit_code == 1
    table = res.output[res.output.index("0/2 passed"):]
    assert all(len(line) <= 80 for line in table.splitlines()), table
    rows = [line for line in table.splitlines() if "FAIL" in line]
    assert [re.search(r"│ (\w+)\s+│\s+\S+ s", row)[1] for row in rows] == ["rms_eps_outside_sqrt",
                                                                         "rms_no_fp32_upcast"], table
