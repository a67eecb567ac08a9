"""`drill.check` / `drill.check_source` (drill/api.py, drill/object_source.py) through the Python API.

What it must hold: an object's source is graded by the CLI's own path, so its `to_json()` equals
`drill check FILE --json` for the same file and seed; correct solutions of several styles pass and
buggy ones fail with their diagnosis id whether given as a class, a function, a module or a path;
every object that cannot be graded is refused in one line; `import drill` imports neither torch nor
IPython until a check runs. The real-kernel run is tests/test_notebook_kernel.py.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

import drill
from drill.cli import app
from drill.errors import UserError
from drill.store import Store

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions"


def _module(path: Path, name: str):
    """Import a fixture file as a module of its own (a function or class then has a file, as in a package)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _cli_json(path: Path, exercise: str, seed: int) -> dict:
    res = CliRunner().invoke(app, ["check", str(path), "-e", exercise, "--json", "--seed", str(seed)])
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.stdout)


def _timeless(doc: dict, *drop: str) -> dict:
    return {k: v for k, v in doc.items() if k not in ("elapsed_s", *drop)}


# -- torch-free import -------------------------------------------------------------------------------------


def test_import_drill_and_its_api_attributes_load_neither_torch_nor_ipython() -> None:
    code = ("import sys, drill\n"
            "names = (drill.check, drill.check_source, drill.CheckResult, drill.load_ipython_extension)\n"
            "heavy = [m for m in ('torch', 'IPython', 'numpy', 'drill.judge.check') if m in sys.modules]\n"
            "print(heavy, callable(names[0]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["[]", "True"]


def test_an_unknown_attribute_of_drill_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'chekc'"):
        drill.chekc  # noqa: B018


# -- what cannot be graded: one line each, nothing run ---------------------------------------------------


def _exec_defined():
    namespace: dict = {}
    exec(compile("def RMSNorm(dim):\n    return dim\n", "<stdin>", "exec"), namespace)  # as at a prompt
    return namespace["RMSNorm"]


def _nested():
    def RMSNorm(dim):  # noqa: N802 - the graded name
        return dim
    return RMSNorm


class _Holder:
    def RMSNorm(self):  # noqa: N802
        return 0


def _helper_user(tmp_path: Path):
    src = tmp_path / "helper_user.py"
    src.write_text("import torch\nSCALE = 2.0\n\ndef _half(x):\n    return x / SCALE\n\n"
                   "def scaled_dot_product_attention(q, k, v, mask=None):\n    return _half(q) * SCALE\n")
    return _module(src, "helper_user").scaled_dot_product_attention


BAD = [  # (id, exercise, make the object from tmp_path, what the line says)
    ("builtin", "rmsnorm", lambda p: len, "`len` is a built-in (C) function"),
    ("c_function", "rmsnorm", lambda p: __import__("torch").rsqrt, "is a built-in (C) function"),
    ("lambda", "attention", lambda p: (lambda q, k, v: q), "a lambda cannot be graded"),
    ("no_source", "rmsnorm", lambda p: _exec_defined(), "no source for `RMSNorm`"),
    ("int", "rmsnorm", lambda p: 3, "got int"),
    ("instance", "rmsnorm", lambda p: _Holder(), "got an instance of _Holder"),
    ("method", "rmsnorm", lambda p: _Holder().RMSNorm, "is a method"),
    ("nested", "rmsnorm", lambda p: _nested(), "defined inside a function"),
    ("builtin_module", "rmsnorm", lambda p: sys, "module `sys` has no Python source file"),
    ("wrong_name", "attention", lambda p: _module, "`_module` is not one of them"),
    ("missing_name", "swiglu", lambda p: _named("SwiGLU"), "`ffn_hidden_dim` is missing"),
    ("outside_names", "attention", _helper_user, "uses `SCALE` and `_half`, defined outside it"),
    ("empty", "rmsnorm", lambda p: (), "nothing to grade"),
    ("source_as_path", "rmsnorm", lambda p: "import torch\nclass RMSNorm: pass\n", "use drill.check_source"),
    ("folder", "rmsnorm", lambda p: p, "drill.check grades one file"),
    ("missing_file", "rmsnorm", lambda p: p / "rmsnorm.py", "no such file"),
    ("unknown_exercise", "attenton", lambda p: p / "x.py", "attention"),
]


def _named(name: str):
    def f():
        return 0
    f.__name__ = f.__qualname__ = name
    return f


@pytest.mark.parametrize("exercise, make, says", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_what_cannot_be_graded_is_refused_in_one_line(tmp_path: Path, home: Path, exercise: str, make,
                                                      says: str) -> None:
    with pytest.raises(UserError) as caught:
        drill.check(exercise, make(tmp_path))
    line = str(caught.value)
    assert says in line and "\n" not in line
    assert caught.value._render_traceback_() == [f"error: {line}"]  # what Jupyter shows instead of a traceback
    assert not home.exists()  # nothing graded, nothing recorded


def test_bad_options_are_refused_before_grading(home: Path) -> None:
    for kwargs, says in [({"seed": "3"}, "seed must be an int"), ({"timeout": 0}, "timeout must be"),
                         ({"device": "tpu"}, "unknown device"), ({"in_model": True}, "--in-model is available")]:
        with pytest.raises(UserError, match=says):
            drill.check_source("layernorm", "x = 1\n", **kwargs)
    with pytest.raises(UserError, match="grades source text"):
        drill.check_source("rmsnorm", b"import torch\n")


# -- graded: the CLI's path --------------------------------------------------------------------------------

GRADED = [  # (fixture, exercise, how it is passed, expected verdict)
    ("rmsnorm/good_rsqrt", "rmsnorm", "class", "pass"),
    ("rmsnorm/good_litgpt_style", "rmsnorm", "module", "pass"),
    ("rmsnorm/good_hf_style", "rmsnorm", "path", "pass"),
    ("rmsnorm/bug_rms_eps_outside_sqrt__rsqrt", "rmsnorm", "class", "rms_eps_outside_sqrt"),
    ("rmsnorm/bug_rms_missing_weight__hf_style", "rmsnorm", "path", "rms_missing_weight"),
    ("attention/good_matmul_softmax", "attention", "function", "pass"),
    ("attention/good_einsum_manual_softmax", "attention", "function", "pass"),
    ("attention/bug_missing_scale__matmul", "attention", "function", "missing_scale"),
]
GRADED_NAME = {"rmsnorm": "RMSNorm", "attention": "scaled_dot_product_attention"}


@pytest.mark.parametrize("fixture, exercise, how, verdict", GRADED, ids=[f"{g[0]}-{g[2]}" for g in GRADED])
def test_objects_of_every_kind_are_graded_with_the_right_verdict(fork_server, home: Path, fixture: str,
                                                                  exercise: str, how: str, verdict: str) -> None:
    path = SOLUTIONS / f"{fixture}.py"
    if how == "path":
        obj = str(path)
    else:
        module = _module(path, "graded_" + re.sub(r"\W", "_", fixture))
        obj = module if how == "module" else getattr(module, GRADED_NAME[exercise])
    r = drill.check(exercise, obj, seed=5, pool=fork_server)
    assert (r.status if r.passed else r.diagnosis.id) == verdict, r.to_json()
    assert r.passed is (verdict == "pass") and r.seed == 5 and r.tests_total == len(r.tests) > 3
    assert r.file == (f"<{GRADED_NAME[exercise]}>" if how in ("class", "function") else str(
        path if how == "path" else Path(obj.__file__)))
    [attempt] = Store(home / "progress.db").attempts()  # recorded as `drill check` records it
    assert (attempt.exercise, attempt.status, attempt.seed, attempt.tests_passed) == (
        exercise, r.status, 5, r.tests_passed)


def test_a_class_is_graded_as_its_own_source_under_the_imports_it_uses(fork_server, tmp_path: Path,
                                                                       home: Path) -> None:
    module = _module(SOLUTIONS / "rmsnorm" / "bug_rms_eps_outside_sqrt__rsqrt.py", "eps_bug")
    r = drill.check("rmsnorm", module.RMSNorm, seed=21, pool=fork_server)
    assert r.source.startswith("import torch\nimport torch.nn as nn\n\n\nclass RMSNorm(nn.Module):")
    # The same text as a file through the CLI: the same document, but for the file's name and the time.
    copy = tmp_path / "rmsnorm.py"
    copy.write_text(r.source)
    assert _timeless(r.to_dict(), "file") == _timeless(_cli_json(copy, "rmsnorm", 21), "file")
    assert r.to_dict()["file"] == "<RMSNorm>" and r.diagnosis.id == "rms_eps_outside_sqrt"


def test_a_path_gives_the_clis_json_document_and_panel(fork_server, tmp_path: Path, home: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "100")  # the CLI's console, not a terminal here, takes its width from it
    path = tmp_path / "attention.py"
    path.write_text((SOLUTIONS / "attention" / "bug_missing_scale__matmul.py").read_text())
    r = drill.check("attention", path, seed=8, pool=fork_server)
    cli = CliRunner().invoke(app, ["check", str(path), "--json", "--seed", "8"])
    assert _timeless(json.loads(r.to_json())) == _timeless(json.loads(cli.stdout))
    assert r.to_json().startswith("{\n  \"version\"")  # the CLI's text too: indented, in its field order
    shown = Console(record=True, width=100, file=open(Path(tmp_path / "panel.txt"), "w"))
    shown.print(r)
    panel = CliRunner().invoke(app, ["check", str(path), "--seed", "8"])
    timeless = re.compile(r"\d+\.\d s")
    assert timeless.sub("", shown.export_text()) == timeless.sub("", panel.stdout)
    bundle = r._repr_mimebundle_(include=None, exclude=None)  # what Jupyter displays
    assert "missing_scale" in bundle["text/plain"] and "<pre" in bundle["text/html"]
    assert re.fullmatch(r"<drill.CheckResult attention: FAIL, \d+/\d+ tests passed, missing_scale, seed 8>", repr(r))


def test_a_cell_refused_by_the_policy_names_the_cell_not_the_temporary_file(home: Path) -> None:
    r = drill.check_source("rmsnorm", "import torch\nimport os\n", label="<cell>", record=False)
    assert r.status == "fail" and r.diagnosis.id == "policy_violation"
    assert r.result.diagnosis_detail.startswith("<cell>:2:") and "drill-check-" not in r.to_json()
    assert not home.exists()  # record=False leaves the store alone


def test_a_source_with_a_syntax_error_is_an_error_result_not_an_exception(home: Path) -> None:
    r = drill.check_source("attention", "def scaled_dot_product_attention(q, k, v, mask=None)\n", record=False)
    assert r.status == "error" and r.diagnosis.id == "syntax_error" and r.file == "<source>"


def test_an_attempt_the_store_cannot_save_is_said_on_the_result(fork_server, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "home"
    broken.mkdir()
    (broken / "progress.db").write_bytes(b"not a database" * 100)
    monkeypatch.setenv("DRILL_HOME", str(broken))
    r = drill.check_source("rmsnorm", textwrap.dedent((SOLUTIONS / "rmsnorm" / "good_rsqrt.py").read_text()),
                           seed=2, pool=fork_server)
    assert r.passed and r.not_saved
    text = Console(record=True, width=120, file=open(tmp_path / "out.txt", "w"))
    text.print(r)
    assert "attempt not saved" in text.export_text()
    assert (broken / "progress.db").read_bytes() == b"not a database" * 100


def test_hints_count_as_drill_hint_counts(home: Path) -> None:
    from drill.api import hints

    first, total, name = hints("RMSNorm")
    second, _, _ = hints("rmsnorm")
    assert (len(first), len(second), total, name) == (1, 2, 3, "rmsnorm")
    res = CliRunner().invoke(app, ["hint", "rmsnorm"])  # the CLI continues where the notebook stopped
    assert "Hint 3/3" in res.stdout


MAGIC_LINES = [  # (magic function, line, what the one line says) — nothing graded
    ("drill_cell", "", "the following arguments are required: exercise"),
    ("drill_cell", "rmsnorm --bogus", "unrecognized arguments: --bogus"),
    ("drill_cell", "rmsnorm --seed x", "invalid int value"),
    ("drill_cell", "'rmsnorm", "cannot read the magic's line"),
    ("drill_cell", "nope", "nope"),
    ("start_cell", "", "usage: %drill_start EXERCISE"),
    ("start_cell", "nope", "nope"),
    ("drill_hint", "rmsnorm x", "usage: %drill_hint EXERCISE [N]"),
    ("drill_hint", "rmsnorm 9", "hint number must be 1..3"),
]


@pytest.mark.parametrize("magic, line, says", MAGIC_LINES)
def test_a_bad_magic_line_is_one_line(home: Path, magic: str, line: str, says: str) -> None:
    from drill import notebook

    args = (line, "import torch\n") if magic == "drill_cell" else (line,)
    with pytest.raises(UserError) as caught:
        getattr(notebook, magic)(*args)
    assert says in str(caught.value) and "\n" not in str(caught.value)
    assert not home.exists()


def test_the_starter_cell_grades_itself_as_the_exercise() -> None:
    from drill.notebook import start_cell

    text = start_cell("RMSNorm")
    first, rest = text.split("\n", 1)
    assert first == "%%drill rmsnorm" and "class RMSNorm" in rest and "NotImplementedError" in rest
