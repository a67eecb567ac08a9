"""The grader's handling of awkward learner input, through the CLI and `check_file`.

- Source is decoded the way `python FILE` decodes it: a UTF-8 BOM and a PEP
  263 coding line are accepted (a correct file passes); a file that cannot be
  decoded is one line at file:line and exit 2, before anything runs.
- A print storm trips the grader's output cap: that is named `output_limit`,
  not "your code raised OSError: File too large", in single-file, folder
  (fork-server) and import-time forms, and when the learner restores SIGXFSZ.
- A progress store that cannot be read is refused by `exercises` and `hint`
  (one line, exit 2, file untouched); `check` still shows its verdict, then
  says in one line that the attempt was not saved and exits 2.
- Echoed learner source lines are clipped.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drill.cli import app
from drill.judge import runner
from drill.judge.check import check_file
from drill.judge.source import ECHO_WIDTH, clip
from drill.store import Attempt, Store

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions"
GOOD_RMS = (SOLUTIONS / "rmsnorm" / "good_rsqrt.py").read_bytes()
BOM = b"\xef\xbb\xbf"
LATIN1_COMMENT = "# poids appris, mis à l'échelle — café\n".replace("—", "-").encode("latin-1")


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DRILL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "100")
    return tmp_path / "home"


def run(*args: str):
    return CliRunner().invoke(app, list(args))


# --- encodings -----------------------------------------------------------------------

# name -> bytes of a correct rmsnorm.py that `python FILE` accepts
DECODABLE = {
    "bom": BOM + GOOD_RMS,
    "latin1_cookie": b"# -*- coding: latin-1 -*-\n" + LATIN1_COMMENT + GOOD_RMS,
    "cookie_on_line_2": b"#!/usr/bin/env python3\n# vim: set fileencoding=iso-8859-15 :\n" + LATIN1_COMMENT + GOOD_RMS,
    "bom_and_utf8_cookie": BOM + b"# coding: utf-8\n# caf\xc3\xa9\n" + GOOD_RMS,
}


def test_a_bom_file_passes_on_its_own(home: Path, tmp_path: Path) -> None:
    f = tmp_path / "rmsnorm.py"
    f.write_bytes(DECODABLE["bom"])
    res = run("check", str(f), "--json", "--seed", "2")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["status"] == "pass"


def test_files_python_can_decode_all_pass_in_one_batch(home: Path, tmp_path: Path) -> None:
    files = []
    for name, data in DECODABLE.items():
        f = tmp_path / f"{name}.py"
        f.write_bytes(data)
        files.append(str(f))
    res = run("check", *files, "-e", "rmsnorm", "--json", "--seed", "2")
    assert res.exit_code == 0, res.output
    docs = json.loads(res.stdout)
    assert {Path(d["file"]).stem: d["status"] for d in docs} == {name: "pass" for name in DECODABLE}


# name -> (bytes, line the message must point at, words it must contain)
UNDECODABLE = {
    "latin1_without_cookie": (b"import torch\n\n# caf\xe9\n" + GOOD_RMS, 3, "no encoding declared|PEP 263"),
    "latin1_on_line_1_without_cookie": (b"# caf\xe9\n" + GOOD_RMS, 1, "PEP 263"),
    "bad_byte_under_utf8_cookie": (b"# coding: utf-8\nimport torch\n\n\nx = 'caf\xe9'\n", 5, "declares"),
    "unknown_codec": (b"# -*- coding: klingon -*-\n" + GOOD_RMS, 1, "unknown encoding 'klingon'"),
    "bom_contradicts_cookie": (BOM + b"# coding: latin-1\n" + GOOD_RMS, 1, "byte-order mark"),
    "binary_junk": (bytes(range(128, 256)) * 4, 1, "UTF-8"),
}


@pytest.mark.parametrize("name", sorted(UNDECODABLE))
def test_an_undecodable_file_is_one_line_at_file_line_and_exit_2(name: str, home: Path, tmp_path: Path) -> None:
    data, line, words = UNDECODABLE[name]
    f = tmp_path / "rmsnorm.py"
    f.write_bytes(data)
    res = run("check", str(f))
    assert res.exit_code == 2, res.output
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {f}:{line}: "), res.stderr
    assert re.search(words, lines[0]), lines[0]
    assert res.stdout == "" and not (home / "progress.db").exists()  # nothing graded, nothing recorded


def test_learner_lines_are_echoed_decoded_and_clipped(tmp_path: Path) -> None:
    """The child's line lookup decodes like the import did (latin-1 here) and cuts long lines."""
    f = tmp_path / "attention.py"
    source = (
        "# -*- coding: latin-1 -*-\n"
        "def scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    raise ValueError('déjà vu')  # " + "x" * 500 + "\n"
    )
    f.write_bytes(source.encode("latin-1"))
    result = check_file(f, seed=1, limits=runner.Limits(timeout_s=60))
    assert result.status == "fail" and result.diagnosis.id == "exception", result.diagnosis_detail
    echoed = re.search(r"\(line 3: (.*)\) in test", result.diagnosis_detail)
    assert echoed is not None, result.diagnosis_detail
    assert echoed.group(1).startswith("raise ValueError('déjà vu')")
    assert echoed.group(1).endswith("…") and len(echoed.group(1)) <= ECHO_WIDTH


def test_a_syntax_error_on_a_huge_line_echoes_a_window_of_it(home: Path, tmp_path: Path) -> None:
    f = tmp_path / "notes.txt"
    f.write_text("x = [" + "1, " * 4000 + "2 3]\n")  # the error sits at the far end of a 12,000-char line
    res = run("check", str(f), "--exercise", "attention", "--json")
    assert res.exit_code == 1
    detail = json.loads(res.stdout)["diagnosis"]["detail"]
    assert detail.startswith("line 1: ") and "2 3]" in detail  # the window is centred on the error
    assert len(detail) < ECHO_WIDTH + 80
    panel = run("check", str(f), "--exercise", "attention")
    assert len(panel.stdout.splitlines()) < 15, panel.stdout


@pytest.mark.parametrize(
    ("text", "column", "want"),
    [
        ("short line", None, "short line"),
        ("  indented  ", 3, "indented"),
        ("a" * 300, None, "a" * (ECHO_WIDTH - 1) + "…"),
        ("a" * 150 + "HERE" + "b" * 150, 151, "…"),
    ],
)
def test_clip(text: str, column: int | None, want: str) -> None:
    got = clip(text, column)
    assert len(got) <= ECHO_WIDTH
    if want == "…":
        assert got.startswith("…") and got.endswith("…") and "HERE" in got
    else:
        assert got == want


# --- the output cap ----------------------------------------------------------------------

STORM_IN_CALL = """import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        while True:
            print("x" * 10000)
"""
STORM_AT_IMPORT = "import torch\nwhile True:\n    print('debug ' * 2000)\n"
STORM_WITH_SIGXFSZ = "import signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_DFL)\n" + STORM_IN_CALL


@pytest.fixture()
def small_cap(monkeypatch: pytest.MonkeyPatch) -> int:
    """A 2 MB output cap instead of 64 MB: the same code path, a fraction of the printing."""
    monkeypatch.setattr(runner, "OUTPUT_CAP_BYTES", 2 * 2**20)
    return runner.OUTPUT_CAP_BYTES


def _assert_output_limit(doc: dict) -> None:
    assert doc["status"] in ("fail", "error")
    assert doc["diagnosis"]["id"] == "output_limit", doc["diagnosis"]
    assert "2 MB" in doc["diagnosis"]["detail"]
    assert "OSError" not in json.dumps(doc)  # the learner raised nothing


@pytest.mark.parametrize(
    ("source", "where"),
    [(STORM_IN_CALL, "line 13"), (STORM_AT_IMPORT, "while importing")],
    ids=["in_call", "at_import"],
)
def test_a_print_storm_is_output_limit_single_file(source: str, where: str, home: Path, tmp_path: Path,
                                                   small_cap: int) -> None:
    f = tmp_path / "rmsnorm.py"
    f.write_text(source)
    res = run("check", str(f), "--json", "--seed", "1")
    assert res.exit_code == 1, res.output
    doc = json.loads(res.stdout)
    _assert_output_limit(doc)
    assert where in doc["diagnosis"]["detail"]


def test_a_storm_that_restores_sigxfsz_is_refused_or_output_limit(home: Path, tmp_path: Path, small_cap: int) -> None:
    """`import signal` never gets past the static policy; with the policy off (layers 2-4 alone), the
    learner's own SIGXFSZ default still ends as output_limit, never a crash or an exception of theirs."""
    from drill.judge.check import check_file

    f = tmp_path / "rmsnorm.py"
    f.write_text(STORM_WITH_SIGXFSZ)
    res = run("check", str(f), "--json", "--seed", "1")
    assert res.exit_code == 1, res.output
    assert json.loads(res.stdout)["diagnosis"]["id"] == "policy_violation"
    doc = check_file(f, seed=1, policy=False).to_json()
    _assert_output_limit(doc)
    assert "during test" in doc["diagnosis"]["detail"]


def test_a_print_storm_is_output_limit_in_a_folder(home: Path, tmp_path: Path, small_cap: int) -> None:
    """`drill check DIR` grades in processes forked by the fork server: same diagnosis."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "rmsnorm.py").write_text(STORM_IN_CALL)
    (tmp_path / "ws" / "attention.py").write_text(STORM_AT_IMPORT)
    res = run("check", str(tmp_path / "ws"), "--json", "--seed", "1")
    assert res.exit_code == 1, res.output
    docs = json.loads(res.stdout)
    assert len(docs) == 2
    for doc in docs:
        _assert_output_limit(doc)
    per_test = [t["message"] for d in docs for t in d["tests"] if t["status"] == "error"]
    assert per_test and all(m.startswith("output limit") for m in per_test)


# --- an unreadable progress store ----------------------------------------------------------


def _garbage(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x09\x6a\x41 not a database " * 3000)


def _truncated(path: Path) -> None:
    """A real store cut after its first page: the header reads, the tables do not."""
    with Store(path) as s:
        for i in range(200):
            s.record_attempt(Attempt("rope", f"2026-01-01T00:00:{i % 60:02d}+00:00", "pass", None, i, 7, 7, 10))
    data = path.read_bytes()
    for side in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        side.unlink(missing_ok=True)
    path.write_bytes(data[:1000])


@pytest.mark.parametrize("damage", [_garbage, _truncated], ids=["garbage", "truncated"])
@pytest.mark.parametrize("command", [["exercises"], ["hint", "attention"]], ids=["exercises", "hint"])
def test_progress_commands_refuse_an_unreadable_store(damage, command: list[str], home: Path) -> None:
    path = home / "progress.db"
    damage(path)
    before = path.read_bytes()
    res = run(*command)
    assert res.exit_code == 2, res.output
    assert res.stdout == ""  # no table of zeros, no hint that will not be remembered
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "progress.db" in lines[0], res.stderr
    assert path.read_bytes() == before


def test_watch_reports_a_lost_attempt_and_exits_2(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--watch keeps grading on a broken store, says so per verdict, and ends with exit 2."""
    import drill.judge.watch as watch_mod

    def one_save_then_ctrl_c(paths, grade, **kwargs):
        grade(list(paths))
        raise KeyboardInterrupt

    monkeypatch.setattr(watch_mod, "watch", one_save_then_ctrl_c)
    _garbage(home / "progress.db")
    f = tmp_path / "rmsnorm.py"
    f.write_bytes(GOOD_RMS)
    res = run("check", str(f), "--watch", "--seed", "1")
    assert res.exit_code == 2, res.output
    assert "PASS" in res.stdout
    errors = [x for x in res.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: attempt not saved:"), res.stderr


def test_wrong_hidden_sizes_print_as_integers(home: Path) -> None:
    """The panel and --verbose show ffn_hidden_dim's int answers as ints (10752), not 1.075e+04."""
    bug = SOLUTIONS / "swiglu" / "bug_ffn_hidden_rounding__rounds_down.py"
    res = run("check", str(bug), "-e", "swiglu", "--verbose", "--seed", "3")
    assert res.exit_code == 1, res.output
    flat = " ".join(res.stdout.replace("│", " ").split())  # the panel's words, wrapping undone
    worst = re.findall(r"got (-?[\d.e+]+), expected (-?[\d.e+]+)", flat)
    assert worst and all(re.fullmatch(r"-?\d+", g) and re.fullmatch(r"-?\d+", e) for g, e in worst), worst
