"""`drill check --format line` and `--junit`, tested against what reads them: the VS Code problem matcher in
exercises/README.md, Vim's default errorformat, and a published JUnit XSD (tests/fixtures/junit/junit-10.xsd).

Real fixture files are graded once per module on the shared fork server (tests/conftest.py); the CLI tests
grade through it too (`warm`), so the module costs a few seconds of grading, not a torch import per test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drill.cli import app
from drill.judge.check import Result, check_file
from drill.judge.check import TestResult as OneTest
from drill.judge.editor_lines import lines_for
from drill.judge.junit import to_junit
from drill.judge.runner import Limits
from drill.judge.spec import Diagnosis

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "tests" / "fixtures" / "solutions"
XSD = ROOT / "tests" / "fixtures" / "junit" / "junit-10.xsd"
SEED = 3

# File name -> (its text, the diagnosis id, the marker on the line the editor must jump to).
RAISES = '''import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        y = x.float()
        raise ValueError("not done (line 3)\\x1b[31m")  # HERE
'''
IMPORT_RAISES = '''import torch

x = 1
raise RuntimeError("decoy (line 3: x = 1)")  # HERE (line 3: x = 1)
'''
SYNTAX = '''import torch

def RMSNorm(:  # HERE
    pass
'''


def _files() -> dict[str, tuple[str, str | None, str | None]]:
    """name -> (text, diagnosis id or None for a pass, the text on the expected line or None: the `class`)."""
    rms = SOLUTIONS / "rmsnorm"
    return {
        "good.py": ((rms / "good_rsqrt.py").read_text(), None, None),
        "variant.py": ((rms / "bug_rms_eps_outside_sqrt__sqrt_plus_eps.py").read_text(), "rms_eps_outside_sqrt",
                       "class RMSNorm"),
        "policy.py": ((rms / "bug_policy_violation__f_rms_norm_computed_name.py").read_text(), "policy_violation",
                      'getattr(F, "rms" + "_norm")'),
        "forbidden.py": ((rms / "bug_forbidden_op__layer_norm_trick.py").read_text(), "forbidden_op",
                         "F.layer_norm("),
        "starter.py": ((ROOT / "exercises" / "rmsnorm.py").read_text(), "not_implemented",
                       "raise NotImplementedError"),
        "raises.py": (RAISES, "exception", "# HERE"),
        "import_raises.py": (IMPORT_RAISES, "exception", "# HERE"),
        "syntax.py": (SYNTAX, "syntax_error", "# HERE"),
    }


def _expected_line(text: str, marker: str) -> tuple[int, int]:
    """(line, column) of the first line holding `marker`, column at its first non-blank character (for a file
    that does not compile, the column Python's SyntaxError gives)."""
    try:
        compile(text, "x.py", "exec")
    except SyntaxError as exc:
        assert marker in text.splitlines()[exc.lineno - 1]
        return exc.lineno, exc.offset
    for n, line in enumerate(text.splitlines(), 1):
        if marker in line:
            return n, len(line) - len(line.lstrip()) + 1
    raise AssertionError(marker)


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory, fork_server) -> dict[str, Result]:
    folder = tmp_path_factory.mktemp("editors")
    out = {}
    for name, (text, _, _) in _files().items():
        (folder / name).write_text(text)
        out[name] = check_file(folder / name, "rmsnorm", SEED, Limits(), pool=fork_server)
    return out


@pytest.fixture()
def warm(monkeypatch: pytest.MonkeyPatch, fork_server) -> None:
    """The CLI's in-process grading on the shared fork server, one file after another."""
    import drill.judge.client as client

    real = client._in_process

    def in_process(run, todo, workers, pool):
        for i in todo:
            real(run, [i], workers, fork_server)

    monkeypatch.setattr(client, "_in_process", in_process)
    monkeypatch.setenv("NO_COLOR", "1")


# ------------------------------------------------------------------------------------ --format line


def test_each_diagnosis_points_at_its_line(graded: dict[str, Result]) -> None:
    for name, (text, wanted, marker) in _files().items():
        r = graded[name]
        lines = lines_for(r)
        if wanted is None:
            assert r.status == "pass" and lines == [], (name, lines)
            continue
        assert r.diagnosis is not None and r.diagnosis.id == wanted, (name, r.diagnosis, r.diagnosis_detail)
        line, col = _expected_line(text, marker)
        assert lines[0] == f"{r.file}:{line}:{col}: error: {r.diagnosis.title} [{wanted}]", (name, lines)
        assert all(x.startswith(f"{r.file}:{line}:{col}: ") for x in lines), lines
        assert all("\n" not in x and "\x1b" not in x for x in lines), lines  # one line each, no raw escapes


def test_advisories_are_warnings_and_a_strict_failure_names_its_reason(tmp_path: Path) -> None:
    """A pass prints nothing but its advisories (warnings, at the graded class); --strict's failure has no
    diagnosis, so its line says why. Both lines as VS Code's matcher and Vim read them."""
    f = tmp_path / "rmsnorm.py"
    shutil.copy(SOLUTIONS / "rmsnorm" / "good_rsqrt.py", f)
    line, col = _expected_line(f.read_text(), "class RMSNorm")
    slow = "slow: test 'x' used 3 s of CPU\x1b[2J\nline two"
    ok = Result(exercise="rmsnorm", file=str(f), status="pass", seed=1, advisories=[slow])
    assert lines_for(ok) == [f"{f}:{line}:{col}: warning: slow: test 'x' used 3 s of CPU\\x1b[2J ⏎ line two"]
    strict = Result(exercise="rmsnorm", file=str(f), status="fail", seed=1, advisories=[slow],
                    diagnosis_detail="failed under --strict because of the advisories")
    got = lines_for(strict)
    assert got[0] == f"{f}:{line}:{col}: error: failed under --strict because of the advisories [fail]"
    pattern = _js_regex(_readme_matcher()["pattern"]["regexp"])
    assert [pattern.match(x)[4] for x in got] == ["error", "warning"]


def test_format_json_is_json_and_a_report_not_written_after_grading_exits_2(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A syntax error is answered without a child process, so these cost no grading."""
    import drill.safe_files as safe_files
    from drill.errors import UserError

    f = tmp_path / "rmsnorm.py"
    f.write_text(SYNTAX)
    docs = []
    for args in (["--json"], ["--format", "JSON"], ["--json", "--format", "json"]):
        res = CliRunner().invoke(app, ["check", str(f), "--seed", "5", *args])
        assert res.exit_code == 1, res.output
        docs.append({k: v for k, v in json.loads(res.stdout).items() if k != "elapsed_s"})
    assert docs[0] == docs[1] == docs[2] and docs[0]["diagnosis"]["id"] == "syntax_error"

    def full_disk(path, data, **kwargs):
        raise UserError("cannot write the file: No space left on device", str(path))

    monkeypatch.setattr(safe_files, "write_atomic", full_disk)
    res = CliRunner().invoke(app, ["check", str(f), "--format", "line", "--junit", str(tmp_path / "r.xml")])
    assert res.exit_code == 2, res.output
    assert res.stdout.startswith(f"{f}:3:") and "JUnit report not written" in res.output  # the verdict first


def test_lines_are_counted_as_python_counts_them(tmp_path: Path) -> None:
    """A form feed or U+2028 inside a line is no line break for Python (str.splitlines would count one), and
    the column is that of the line's first non-blank character."""
    f = tmp_path / "rmsnorm.py"
    f.write_text("import torch\n# a form feed \x0c and a \u2028 inside\n\nclass RMSNorm:\n    x = boom()\n")
    r = Result(exercise="rmsnorm", file=str(f), status="fail", seed=1, tests=[
        OneTest("t", "error", "NameError: boom (line 5)")], diagnosis=Diagnosis("exception", "Raised", "w", "f"))
    assert lines_for(r) == [f"{f}:5:5: error: Raised [exception]"]
    r.tests = [OneTest("t", "fail", "values off")]  # no line of the learner's: the graded class
    assert lines_for(r) == [f"{f}:4:1: error: Raised [exception]"]


def test_cli_line_format_for_a_folder_prints_relative_paths_and_exits_as_check(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warm: None) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copy(SOLUTIONS / "rmsnorm" / "bug_rms_eps_outside_sqrt__sqrt_plus_eps.py", ws / "rmsnorm.py")
    shutil.copy(SOLUTIONS / "layernorm" / "good_float64.py", ws / "layernorm.py")
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["check", "ws", "--format", "line", "--seed", str(SEED)])
    assert res.exit_code == 1, res.output
    out = res.stdout.splitlines()
    line, col = _expected_line((ws / "rmsnorm.py").read_text(), "class RMSNorm")
    assert out[0] == f"ws/rmsnorm.py:{line}:{col}: error: eps added outside the square root [rms_eps_outside_sqrt]"
    assert not any("layernorm" in x for x in out), out  # a pass prints nothing
    assert not any("passed" in x or "│" in x for x in out), out  # no panel, no summary table
    good = CliRunner().invoke(app, ["check", "ws/layernorm.py", "--format", "line"])
    assert good.exit_code == 0 and good.stdout == "", good.output


def _readme_matcher() -> dict:
    text = (ROOT / "exercises" / "README.md").read_text()
    block = re.search(r"```json\n(\{\n  \"version\": \"2\.0\.0\".*?)```", text, re.DOTALL)
    assert block, "exercises/README.md has no VS Code tasks.json block"
    tasks = json.loads(block[1])["tasks"]
    matchers = [t["problemMatcher"] for t in tasks]
    assert len({json.dumps(m["pattern"]) for m in matchers}) == 1  # the watch task reads the same lines
    return matchers[-1]


def _js_regex(source: str) -> re.Pattern:
    """A VS Code (JavaScript) regexp as Python's re: the constructs it may use mean the same in both; anything
    else (lookbehind, named groups, \\d in unicode mode, flags) is refused rather than guessed."""
    assert re.fullmatch(r"[\^$().+*?|:\\dsa-z ]*", source), f"translate by hand: {source}"
    return re.compile(source)


def test_vscode_problem_matcher_from_the_readme_reads_real_output(graded: dict[str, Result]) -> None:
    matcher = _readme_matcher()
    pattern = _js_regex(matcher["pattern"]["regexp"])
    groups = matcher["pattern"]
    background = matcher["background"]
    assert re.match(background["beginsPattern"], "drill: grading ws/rmsnorm.py")
    assert re.match(background["endsPattern"], "drill: watching 1 file — save to re-grade, Ctrl-C to stop")
    for name, (text, wanted, marker) in _files().items():
        if wanted is None:
            continue
        line, col = _expected_line(text, marker)
        for out in lines_for(graded[name]):
            m = pattern.match(out)
            assert m, out
            assert m[groups["file"]] == graded[name].file and int(m[groups["line"]]) == line
            assert int(m[groups["column"]]) == col and m[groups["severity"]] in ("error", "note")
            assert m[groups["message"]] == out.split(f": {m[groups['severity']]}: ", 1)[1]


# The shape compilers print; Vim's default 'errorformat' (Unix) holds it as "%f:%l:%c:%m", without the space.
VIM_EFMS = ("%f:%l:%c: %m", "%f:%l:%c:%m")


def _efm_regex(efm: str) -> re.Pattern:
    """Vim's translation of an errorformat entry (quickfix.c, efm_to_regpat): %f followed by a literal becomes
    `.\\{-1,}` (shortest, so "%f:%l" allows a ':' in the name), %l and %c digits, %m the rest of the line."""
    parts = {"%f": r"(?P<f>.+?)", "%l": r"(?P<l>\d+)", "%c": r"(?P<c>\d+)", "%m": r"(?P<m>.*)"}
    pattern = "".join(parts.get(tok, re.escape(tok)) for tok in re.findall(r"%[flcm]|[^%]", efm))
    return re.compile(f"^{pattern}$")


def test_vim_default_errorformat_reads_real_output(graded: dict[str, Result]) -> None:
    for efm in map(_efm_regex, VIM_EFMS):
        for name in ("raises.py", "policy.py", "variant.py"):
            r = graded[name]
            text, _, marker = _files()[name]
            got = [efm.match(x) for x in lines_for(r)]
            assert all(got), lines_for(r)
            assert {(m["f"], int(m["l"]), int(m["c"])) for m in got} == {(r.file, *_expected_line(text, marker))}
            assert got[0]["m"].strip() == f"error: {r.diagnosis.title} [{r.diagnosis.id}]"


def test_format_choices_are_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import drill.judge.client as client

    monkeypatch.setattr(client, "grade", lambda *a, **k: pytest.fail("graded despite a usage error"))
    f = tmp_path / "rmsnorm.py"
    shutil.copy(SOLUTIONS / "rmsnorm" / "good_rsqrt.py", f)
    for args, said in (
        (["--format", "xml"], "--format must be one of rich, line, json"),
        (["--json", "--format", "line"], "--json and --format line cannot be combined"),
        (["--format", "line", "--verbose"], "--verbose and --format line cannot be combined"),
        (["--watch", "--format", "json"], "--watch and --json cannot be combined"),
        (["--watch", "--junit", str(tmp_path / "r.xml")], "--watch and --junit cannot be combined"),
    ):
        res = CliRunner().invoke(app, ["check", str(f), *args])
        assert res.exit_code == 2 and said in res.output and len(res.output.strip().splitlines()) == 1, res.output


def test_watch_line_format_marks_each_round(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warm: None) -> None:
    import drill.judge.watch as watch_mod

    def fake(paths, grade, on_idle=None, on_missing=None, **kwargs):
        for _ in range(2):
            grade(list(paths))
            on_idle()
        raise KeyboardInterrupt

    monkeypatch.setattr(watch_mod, "watch", fake)
    monkeypatch.chdir(tmp_path)
    shutil.copy(SOLUTIONS / "rmsnorm" / "bug_rms_eps_outside_sqrt__sqrt_plus_eps.py", "rmsnorm.py")
    res = CliRunner().invoke(app, ["check", "rmsnorm.py", "--watch", "--format", "line", "--seed", str(SEED)])
    assert res.exit_code == 1, res.output
    out = [x for x in res.stdout.splitlines() if x.strip()]
    line, col = _expected_line(Path("rmsnorm.py").read_text(), "class RMSNorm")
    error = f"rmsnorm.py:{line}:{col}: error: eps added outside the square root [rms_eps_outside_sqrt]"
    assert out[0] == "drill: grading rmsnorm.py" and out[1] == error, out
    assert out.count(error) == 2 and sum(x.startswith("drill: watching 1 file") for x in out) == 2, out


# ------------------------------------------------------------------------------------ --junit


def _schema():
    xmlschema = pytest.importorskip("xmlschema")  # the dev extra installs it
    return xmlschema.XMLSchema(str(XSD))


def _check_counts(root: ET.Element) -> None:
    """Every testsuite's counts are those of its children, and the testsuites' the sums (the XSD types them as
    strings, so it cannot check this)."""
    total = {k: 0 for k in ("tests", "failures", "errors")}
    for suite in root.iter("testsuite"):
        cases = suite.findall("testcase")
        got = {"tests": len(cases), "failures": sum(c.find("failure") is not None for c in cases),
               "errors": sum(c.find("error") is not None for c in cases),
               "skipped": sum(c.find("skipped") is not None for c in cases)}
        assert {k: int(suite.get(k)) for k in got} == got, suite.get("name")
        for k in total:
            total[k] += got[k]
    assert {k: int(root.get(k)) for k in total} == total


def test_junit_of_every_kind_of_result_is_valid_and_carries_the_diagnosis(graded: dict[str, Result]) -> None:
    schema = _schema()
    results = list(graded.values())
    doc = to_junit(results)
    schema.validate(doc.decode())
    root = ET.fromstring(doc)
    _check_counts(root)
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert list(suites) == [r.file for r in results]
    for r in results:
        suite = suites[r.file]
        cases = suite.findall("testcase")
        assert [c.get("name") for c in cases[: len(r.tests)]] == [t.name for t in r.tests]
        assert {c.get("classname") for c in cases} == {"rmsnorm"}
        if r.status == "pass":
            assert not any(len(c) for c in cases)
            continue
        label = f"{r.diagnosis.title} [{r.diagnosis.id}]"
        marks = [m for c in cases for m in c if m.tag in ("failure", "error")]
        assert marks and all(m.get("message") == label for m in marks), r.file
        assert all(f"Why: {r.diagnosis.why}" in m.text and f"Fix: {r.diagnosis.fix}" in m.text for m in marks)
    variant = graded["variant.py"]
    failing = [c for c in suites[variant.file].findall("testcase") if c.find("failure") is not None]
    assert len(failing) == sum(t.status == "fail" for t in variant.tests) and "max abs err" in failing[0][0].text
    for ungraded in ("syntax.py", "policy.py", "import_raises.py"):  # could not be graded: one <error> for the file
        whole = [c for c in suites[graded[ungraded].file].findall("testcase") if c.get("name") == "(whole file)"]
        assert len(whole) == 1 and whole[0].find("error") is not None, ungraded


def test_junit_escapes_what_xml_cannot_hold() -> None:
    schema = _schema()
    nasty = "bad \x01\x0b\ud800 ]]> <tag> & \"q\""
    r = Result(exercise="rmsnorm", file="a\x02.py", status="fail", seed=1,
               tests=[OneTest(name=f"t {nasty}", status="fail", message=nasty, max_abs=float("nan"))],
               diagnosis=Diagnosis("x", f"title {nasty}", "why", "fix"), diagnosis_detail=nasty)
    doc = to_junit([r])
    schema.validate(doc.decode())
    root = ET.fromstring(doc)
    case = root.find("testsuite/testcase")
    assert case.get("name") == "t bad \\x01\\x0b\\ud800 ]]> <tag> & \"q\""
    assert "<tag>" in case.find("failure").text and root.find("testsuite").get("name") == "a\\x02.py"


def test_cli_junit_report_for_a_cohort_of_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  warm: None) -> None:
    """docs/ci.md's command: `drill check submissions/*/ --junit reports/drill.xml`, one testsuite per file."""
    schema = _schema()
    for learner in ("alice", "bob"):
        (tmp_path / "submissions" / learner).mkdir(parents=True)
    shutil.copy(SOLUTIONS / "rmsnorm" / "bug_rms_eps_outside_sqrt__sqrt_plus_eps.py",
                tmp_path / "submissions" / "alice" / "rmsnorm.py")
    (tmp_path / "submissions" / "bob" / "layernorm.py").write_text("def LayerNorm(:\n")
    report = tmp_path / "reports" / "drill.xml"
    report.parent.mkdir()
    report.write_text("old")
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["check", "submissions/alice/", "submissions/bob/", "--junit", "reports/drill.xml",
                                   "--seed", str(SEED), "--json"])
    assert res.exit_code == 1, res.output
    docs = json.loads(res.stdout)  # --json still prints its document: the report is a file beside it
    schema.validate(str(report))
    root = ET.parse(report).getroot()
    _check_counts(root)
    names = [s.get("name") for s in root.findall("testsuite")]
    assert names == [d["file"] for d in docs] == ["submissions/alice/rmsnorm.py", "submissions/bob/layernorm.py"]
    assert root.find("testsuite/properties/property[@name='seed']").get("value") == str(SEED)
    bob = root.findall("testsuite")[1].findall("testcase")
    assert [c.get("name") for c in bob] == ["(whole file)"] and bob[0][0].get("message").endswith("[syntax_error]")
    assert [p.name for p in report.parent.iterdir()] == ["drill.xml"]  # no temporary file left beside it


@pytest.mark.parametrize("where", ["missing folder", "a folder", "under a file", "read-only folder"])
def test_an_unwritable_junit_path_is_refused_before_grading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            where: str) -> None:
    import drill.judge.client as client

    monkeypatch.setattr(client, "grade", lambda *a, **k: pytest.fail("graded despite an unwritable --junit"))
    f = tmp_path / "rmsnorm.py"
    shutil.copy(SOLUTIONS / "rmsnorm" / "good_rsqrt.py", f)
    target = {"missing folder": tmp_path / "nope" / "r.xml", "a folder": tmp_path,
              "under a file": f / "r.xml", "read-only folder": tmp_path / "ro" / "r.xml"}[where]
    if where == "read-only folder":
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only folder")
        target.parent.mkdir(mode=0o500)
    res = CliRunner().invoke(app, ["check", str(f), "--junit", str(target)])
    assert res.exit_code == 2, res.output
    assert len(res.output.strip().splitlines()) == 1 and str(target) in res.output.replace("\n", ""), res.output
    assert not target.exists() or target.is_dir()
