"""The exercise index against the files, in the spirit of rustlings' `dev check` (fast, no grading).

`index_errors` walks every entry of `drill.judge.registry.INDEX` and says,
one line per problem, what the repository lacks or contradicts: the starter
and its NotImplementedError stubs, the contract's defaults in its signature,
three hints, the spec's name and graded names, good_/bug_ fixtures, the bench
workload and the decoder slot exactly where the index says, the quiz topic,
the README's table, a section in exercises/README.md, and every "N exercises"
in the prose. The real repository must give no error; a copy of it broken one
way at a time must give that one error (so every check can fail).
"""

from __future__ import annotations

import ast
import dataclasses
import re
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from drill.judge import devices, registry
from drill.judge.registry import DEVICES, DIFFICULTIES, INDEX, TRACKS, Exercise, count_word

ROOT = Path(__file__).resolve().parents[1]
NUMBER = re.compile(
    r"\b((?:twenty|thirty|forty)(?:-(?:one|two|three|four|five|six|seven|eight|nine))?|"
    r"one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|"
    r"seventeen|eighteen|nineteen)\s+(?:graded\s+|indexed\s+)?exercises\b",
    re.IGNORECASE,
)
# Where prose may count the exercises: docs, CLI help texts and docstrings.
PROSE = ("README.md", "*/README.md", "drill/**/*.md", "drill/**/*.py", "benchmarks/*.py", "exercises/*.py",
         "reference/*.py")


# ---------------------------------------------------------------- the checker


def index_errors(
    index: Iterable[Exercise],
    root: Path,
    *,
    spec_of: Callable[[str], Any],
    workloads: Iterable[str],
    swaps: Iterable[str],
) -> list[str]:
    """Every disagreement between `index` and the files under `root`, one line each."""
    index = list(index)
    names = [e.name for e in index]
    errors = [f"{n}: listed twice in the index" for n in sorted({n for n in names if names.count(n) > 1})]
    for e in index:
        errors += [f"{e.name}: {msg}" for msg in _entry_errors(e, root, spec_of)]
    errors += _membership(names, [e.name for e in index if e.bench], workloads,
                          "a bench workload (drill/bench/workloads.py)")
    errors += _membership(names, [e.name for e in index if e.in_model], swaps, "a decoder slot (decoder.GRADED_PARTS)")
    for what, found in (
        ("starter file exercises/{}.py",
         {p.stem for p in (root / "exercises").glob("*.py") if not p.stem.startswith("_")}),
        ("spec drill/judge/specs/{}.py",
         {p.stem for p in (root / "drill/judge/specs").glob("*.py") if not p.stem.startswith("_")}),
        ("fixture folder tests/fixtures/solutions/{}/",
         {p.name for p in (root / "tests/fixtures/solutions").glob("*") if p.is_dir()}),
    ):
        errors += [f"{n}: {what.format(n)} exists but the index has no such exercise"
                   for n in sorted(found - set(names))]
    errors += _readme_table_errors(index, root / "README.md")
    errors += _count_errors(len(index), root)
    return errors


def _entry_errors(e: Exercise, root: Path, spec_of: Callable[[str], Any]) -> list[str]:
    errors = []
    if e.track not in TRACKS:
        errors.append(f"track {e.track!r} is not one of {', '.join(TRACKS)}")
    if e.difficulty not in DIFFICULTIES:
        errors.append(f"difficulty {e.difficulty!r} is not one of {', '.join(DIFFICULTIES)}")
    if e.device not in DEVICES:
        errors.append(f"device {e.device!r} is not one of {', '.join(DEVICES)}")
    if not e.summary.strip() or "\n" in e.summary or len(e.summary) > 110:
        errors.append("summary must be one non-empty line of at most 110 characters")
    if not e.graded:
        errors.append("graded names are empty")
    errors += _starter_errors(e, root / "exercises" / f"{e.name}.py")
    errors += _hint_errors(root / "exercises" / f"{e.name}.hints.yaml")
    if not (root / "drill/judge/specs" / f"{e.name}.py").is_file():
        errors.append(f"no spec drill/judge/specs/{e.name}.py")
    else:
        spec = spec_of(e.name)
        if spec.name != e.name:
            errors.append(f"spec's name is {spec.name!r}, expected {e.name!r}")
        if tuple(spec.graded) != tuple(e.graded):
            errors.append(f"spec grades {tuple(spec.graded)}, the index says {tuple(e.graded)}")
    errors += _fixture_errors(e, root / "tests/fixtures/solutions" / e.name)
    errors += _topic_errors(e, root / "questions")
    errors += _contract_doc_errors(e, root / "exercises" / "README.md")
    return errors


def _raises_not_implemented(node: ast.AST) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Raise) and n.exc is not None:
            exc = n.exc.func if isinstance(n.exc, ast.Call) else n.exc
            if isinstance(exc, ast.Name) and exc.id == "NotImplementedError":
                return True
    return False


def _generated_starter_errors(e: Exercise, path: Path, defined: dict, where: str) -> list[str]:
    from drill.debug_round.header import parse
    from drill.debug_round.plant import write_starter
    from drill.errors import UserError

    errors = [f"{where}: graded name {name} is not defined at module level" for name in e.graded
              if name not in defined]
    text = path.read_text(encoding="utf-8")
    try:
        seed, bugs = parse(text)
    except UserError as exc:
        return [*errors, f"{where}:1: {exc}"]
    if text != write_starter(seed, bugs).text:
        errors.append(f"{where}: is not what `drill start {e.name} --seed {seed} --bugs {bugs}` writes")
    return errors


def _starter_errors(e: Exercise, path: Path) -> list[str]:
    where = f"exercises/{e.name}.py"
    if not path.is_file():
        return [f"no starter file {where}"]
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as exc:
        return [f"{where}:{exc.lineno}: starter does not parse ({exc.msg})"]
    defined = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    if e.generated:  # written by `drill start` (debug_gpt): the shipped file is its output for line 1's seed
        return _generated_starter_errors(e, path, defined, where)
    errors = []
    for name in e.graded:
        node = defined.get(name)
        if node is None:
            errors.append(f"{where}: graded name {name} is not defined at module level")
        elif isinstance(node, ast.FunctionDef) and not _raises_not_implemented(node):
            errors.append(f"{where}:{node.lineno}: {name} does not raise NotImplementedError")
        elif isinstance(node, ast.ClassDef):
            methods = [m for m in node.body if isinstance(m, ast.FunctionDef)]
            if not methods:
                errors.append(f"{where}:{node.lineno}: class {name} defines no method to implement")
            for m in methods:
                if not _raises_not_implemented(m):
                    errors.append(f"{where}:{m.lineno}: {name}.{m.name} does not raise NotImplementedError")
    errors += _default_errors(e, tree, where)
    return errors


def _default_errors(e: Exercise, tree: ast.Module, where: str) -> list[str]:
    """Each of the index's defaults appears in the starter (a parameter's default or a module-level
    constant), and only with that value."""
    seen: dict[str, list[tuple[int, Any]]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                seen.setdefault(node.targets[0].id, []).append((node.lineno, ast.literal_eval(node.value)))
            except ValueError:
                pass
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        args = fn.args.posonlyargs + fn.args.args
        pairs = list(zip(args[len(args) - len(fn.args.defaults):], fn.args.defaults, strict=True))
        pairs += [(a, d) for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True) if d is not None]
        for arg, value in pairs:
            try:
                literal = ast.literal_eval(value)
            except ValueError:
                continue
            seen.setdefault(arg.arg, []).append((fn.lineno, literal))
    errors = []
    for arg, want in e.defaults.items():
        if arg not in seen:
            errors.append(f"{where}: no parameter or constant {arg!r}, which the index gives a default for")
        for line, got in seen.get(arg, []):
            if got != want or type(got) is not type(want):
                errors.append(f"{where}:{line}: default {arg}={got!r}, the index says {arg}={want!r}")
    return errors


def _hint_errors(path: Path) -> list[str]:
    where = f"exercises/{path.name}"
    if not path.is_file():
        return [f"no hints file {where}"]
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        return [f"{where}: bad YAML ({exc})"]
    hints = data.get("hints") if isinstance(data, dict) else None
    if not isinstance(hints, list) or len(hints) != 3 or not all(isinstance(h, str) and h.strip() for h in hints):
        return [f"{where}: expected `hints:` with exactly 3 non-empty strings"]
    return []


def _fixture_errors(e: Exercise, folder: Path) -> list[str]:
    where = f"tests/fixtures/solutions/{e.name}/"
    files = [p.name for p in folder.glob("*.py")] if folder.is_dir() else []
    errors = []
    if not any(f.startswith("good_") for f in files):
        errors.append(f"no good_*.py fixture in {where}")
    if not any(f.startswith("bug_") and "__" in f for f in files):
        errors.append(f"no bug_<id>__*.py fixture in {where}")
    if not (e.fixture.startswith("good_") and e.fixture in files):
        errors.append(f"fixture {e.fixture!r} is not a good_*.py file in {where}")
    return errors


def _topic_errors(e: Exercise, questions: Path) -> list[str]:
    if not e.topics:
        return ["no quiz topic"]
    errors = []
    for topic in e.topics:
        path = questions / f"{topic}.yaml"
        data = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None
        if not isinstance(data, dict) or data.get("topic") != topic or not data.get("questions"):
            errors.append(f"quiz topic {topic!r} has no questions (questions/{topic}.yaml)")
    return errors


def _contract_doc_errors(e: Exercise, path: Path) -> list[str]:
    """exercises/README.md has `## <name> — ...` under its wave's part, saying it is graded."""
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    match = re.search(rf"^## {re.escape(e.name)} — .*$", text, re.MULTILINE)
    if match is None:
        return [f"exercises/README.md has no section '## {e.name} — ...'"]
    # The wave a section is in: the last "# Wave N" heading above it (none: wave 1).
    headings = [(m.start(), int(m.group(1))) for m in re.finditer(r"^# Wave (\d+)$", text, re.MULTILINE)]
    wave = max((n for at, n in headings if at < match.start()), default=1)
    if wave != e.wave:
        return [f"exercises/README.md puts {e.name} in the wrong wave (the index says wave {e.wave})"]
    body = text[match.end():].split("\n## ", 1)[0]
    if "Graded today" not in body:
        return [f"exercises/README.md's section on {e.name} does not say it is graded today"]
    return []


def _membership(names: list[str], flagged: list[str], have: Iterable[str], what: str) -> list[str]:
    have = set(have)
    errors = [f"{n}: the index says it has {what}, but there is none" for n in flagged if n not in have]
    errors += [f"{n}: has {what}, but the index does not say so" for n in sorted(have - set(flagged)) if n in names]
    errors += [f"{n}: has {what}, but the index has no such exercise" for n in sorted(have - set(names))]
    return errors


def _readme_rows(path: Path) -> list[list[str]]:
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    section = text.split("\n## Exercises\n", 1)
    if len(section) < 2:
        return []
    rows = []
    for line in section[1].split("\n## ", 1)[0].splitlines():
        if line.startswith("|") and not set(line) <= set("|-: "):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows[1:]  # the header row


def _readme_table_errors(index: list[Exercise], path: Path) -> list[str]:
    """README.md's `## Exercises` table has one row per indexed exercise, in order, agreeing with it."""
    rows = _readme_rows(path)
    if [r[0].strip("`") for r in rows] != [e.name for e in index]:
        return [f"README.md's exercise table lists {[r[0].strip('`') for r in rows]}, the index "
                f"{[e.name for e in index]}"]
    errors = []
    for e, row in zip(index, rows, strict=True):
        want = [e.name, ", ".join(f"`{g}`" for g in e.graded), e.track, e.difficulty, e.summary,
                "yes" if e.in_model else "", "yes" if e.bench else ""]
        got = [row[0].strip("`"), *row[1:]]
        if got != want:
            errors.append(f"{e.name}: README.md's table row {got} disagrees with the index {want}")
    return errors


def _count_errors(n: int, root: Path) -> list[str]:
    want = count_word(n)
    errors = []
    for pattern in PROSE:
        for path in sorted(root.glob(pattern)):
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                for m in NUMBER.finditer(line):
                    if m.group(1).lower() != want:
                        errors.append(f"{path.relative_to(root)}:{i}: says {m.group(0)!r}; the index has {want}")
    return errors


def _real_checks() -> dict[str, Any]:
    from drill.bench import workloads
    from drill.judge import decoder

    return {"spec_of": registry.load_spec, "workloads": workloads._DEFINED, "swaps": decoder.GRADED_PARTS}


# ---------------------------------------------------------------- the repository


def test_the_index_agrees_with_the_repository() -> None:
    errors = index_errors(INDEX, ROOT, **_real_checks())
    assert not errors, "\n".join(errors)


def test_every_list_in_the_code_derives_from_the_index() -> None:
    from drill.bench.workloads import WORKLOADS
    from drill.judge.commands import IN_MODEL_EXERCISES
    from drill.mock.plan import gradable_exercises

    names = [e.name for e in INDEX]
    assert list(registry.SPECS) == names == list(registry.ALL_EXERCISES)
    assert registry.exercise_names() == names and registry.graded_names() == names
    assert IN_MODEL_EXERCISES == tuple(e.name for e in INDEX if e.in_model)
    assert list(WORKLOADS) == [e.name for e in INDEX if e.bench]
    assert gradable_exercises() == [e.name for e in INDEX if devices.device_available(e)]


def test_graded_names_leave_out_an_exercise_whose_spec_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.SPECS, "rmsnorm", "drill.judge.specs.no_such_module")
    assert "rmsnorm" not in registry.graded_names() and "attention" in registry.graded_names()


def test_a_cuda_only_exercise_is_not_offered_by_the_mock_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from drill.mock.plan import gradable_exercises

    cuda_only = dataclasses.replace(registry.entry("rmsnorm"), device="cuda")
    monkeypatch.setitem(registry._BY_NAME, "rmsnorm", cuda_only)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "rmsnorm" not in gradable_exercises() and "attention" in gradable_exercises()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(devices, "gpu_nodes_visible", lambda: True)  # a GPU machine: its nodes exist too
    assert "rmsnorm" in gradable_exercises()


def test_the_defaults_reach_spec_and_workload() -> None:
    from drill.bench import workloads
    from drill.judge.specs import rmsnorm, swiglu

    assert rmsnorm.DEFAULT_EPS == registry.default("rmsnorm", "eps") == workloads.RMS_EPS
    assert swiglu.MULTIPLE_OF == registry.default("swiglu", "multiple_of") == workloads.FFN_MULTIPLE_OF
    assert workloads.ROPE_BASE == registry.default("rope", "base")
    for case in rmsnorm.make_cases(3):  # a case built without an explicit eps uses the index's
        if case.init == (case.args["x"].shape[-1],):
            assert case.ctx["eps"] == registry.default("rmsnorm", "eps")


# ---------------------------------------------------------------- every check can fail


def _copy_one(tmp: Path, name: str = "rmsnorm") -> Path:
    """A repository holding only `name`: its starter, hints, spec, fixtures, quiz topic and docs."""
    e = registry.entry(name)
    for rel in (f"exercises/{name}.py", f"exercises/{name}.hints.yaml", f"drill/judge/specs/{name}.py",
                "exercises/README.md", *(f"questions/{t}.yaml" for t in e.topics)):
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp / rel)
    shutil.copytree(ROOT / "tests/fixtures/solutions" / name, tmp / "tests/fixtures/solutions" / name)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    head, rest = readme.split("\n## Exercises\n", 1)
    table = [line for line in rest.split("\n## ", 1)[0].splitlines() if line.startswith("|")]
    rows = [line for line in table[2:] if line.split("|")[1].strip().strip("`") == name]
    (tmp / "README.md").write_text("\n".join(["# drill", "", "One exercise.", "", "## Exercises", "", *table[:2], *rows,
                                              ""]))
    return tmp


def _errors(root: Path, entry: Exercise | None = None, **over: Any) -> list[str]:
    e = entry or registry.entry("rmsnorm")
    spec = SimpleNamespace(name=e.name, graded=e.graded)
    checks = {"spec_of": lambda n: spec, "workloads": {e.name}, "swaps": {e.name}, **over}
    return index_errors([e], root, **checks)


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def test_a_copy_of_one_exercise_is_clean(tmp_path: Path) -> None:
    assert _errors(_copy_one(tmp_path)) == []


BREAKAGES: dict[str, tuple[Callable[[Path], Any], str]] = {
    "starter missing": (lambda r: (r / "exercises/rmsnorm.py").unlink(), "no starter file exercises/rmsnorm.py"),
    "starter implemented": (
        lambda r: _edit(r / "exercises/rmsnorm.py", 'raise NotImplementedError("write RMSNorm.forward")', "return x"),
        "RMSNorm.forward does not raise NotImplementedError"),
    "graded name renamed": (lambda r: _edit(r / "exercises/rmsnorm.py", "class RMSNorm(", "class RmsNorm("),
                            "graded name RMSNorm is not defined"),
    "starter default differs": (lambda r: _edit(r / "exercises/rmsnorm.py", "eps: float = 1e-6", "eps: float = 1e-5"),
                                "default eps=1e-05, the index says eps=1e-06"),
    "starter default missing": (lambda r: _edit(r / "exercises/rmsnorm.py", "eps: float = 1e-6",
                                                "epsilon: float = 1e-6"),
                                "no parameter or constant 'eps'"),
    "hints missing": (lambda r: (r / "exercises/rmsnorm.hints.yaml").unlink(), "no hints file"),
    "two hints": (lambda r: (r / "exercises/rmsnorm.hints.yaml").write_text("hints: [one, two]\n"),
                  "exactly 3 non-empty"),
    "empty hint": (lambda r: (r / "exercises/rmsnorm.hints.yaml").write_text("hints: [one, two, ' ']\n"),
                   "exactly 3 non-empty"),
    "spec missing": (lambda r: (r / "drill/judge/specs/rmsnorm.py").unlink(), "no spec drill/judge/specs/rmsnorm.py"),
    "orphan spec": (lambda r: (r / "drill/judge/specs/gelu.py").write_text(""),
                    "gelu: spec drill/judge/specs/gelu.py exists"),
    "orphan starter": (lambda r: (r / "exercises/gelu.py").write_text(""),
                       "gelu: starter file exercises/gelu.py exists"),
    "no good fixture": (lambda r: [p.rename(p.with_name("bug_x__" + p.name))
                                   for p in (r / "tests/fixtures/solutions/rmsnorm").glob("good_*")],
                        ("no good_*.py fixture", "fixture 'good_rsqrt.py' is not a good_*.py file")),
    "no bug fixture": (lambda r: [p.unlink() for p in (r / "tests/fixtures/solutions/rmsnorm").glob("bug_*")],
                       "no bug_<id>__*.py fixture"),
    "bench fixture gone": (lambda r: (r / "tests/fixtures/solutions/rmsnorm/good_rsqrt.py").unlink(),
                           "fixture 'good_rsqrt.py' is not a good_*.py file"),
    "topic gone": (lambda r: (r / "questions/normalization.yaml").unlink(),
                   "quiz topic 'normalization' has no questions"),
    "no contract section": (lambda r: _edit(r / "exercises/README.md", "## rmsnorm — ", "## rms_norm — "),
                            "exercises/README.md has no section '## rmsnorm"),
    "README row missing": (lambda r: _edit(r / "README.md", "| `rmsnorm` |", "| `rms` |"),
                           "README.md's exercise table lists"),
    "README row wrong": (lambda r: _edit(r / "README.md", "| easy |", "| hard |"), "README.md's table row"),
    "prose count wrong": (lambda r: (r / "README.md").write_text((r / "README.md").read_text() + "\nthe seven "
                                                                                                 "exercises\n"),
                          "README.md:"),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_each_check_fails_on_its_breakage(tmp_path: Path, breakage: str) -> None:
    root = _copy_one(tmp_path)
    action, messages = BREAKAGES[breakage]
    action(root)
    errors = _errors(root)
    messages = (messages,) if isinstance(messages, str) else messages
    assert len(errors) == len(messages) and all(m in e for m, e in zip(messages, errors, strict=True)), errors


@pytest.mark.parametrize("field,value,message", [
    ("track", "vision", "track 'vision' is not one of"),
    ("difficulty", "trivial", "difficulty 'trivial'"),
    ("device", "tpu", "device 'tpu'"),
    ("summary", "two\nlines", "summary must be one"),
    ("topics", ("no_such_topic",), "quiz topic 'no_such_topic'"),
    ("wave", 2, "in the wrong wave"),
    ("wave", 3, "in the wrong wave"),
])
def test_each_field_is_checked(tmp_path: Path, field: str, value: Any, message: str) -> None:
    entry = dataclasses.replace(registry.entry("rmsnorm"), **{field: value})
    errors = _errors(_copy_one(tmp_path), entry)
    assert message in errors[0], errors
    assert all("README.md's table row" in e for e in errors[1:]), errors  # the shown fields also disagree there


@pytest.mark.parametrize("over,message", [
    ({"spec_of": lambda n: SimpleNamespace(name="rms", graded=("RMSNorm",))}, "spec's name is 'rms'"),
    ({"spec_of": lambda n: SimpleNamespace(name="rmsnorm", graded=("RMSNorm", "extra"))}, "spec grades"),
    ({"workloads": set()}, "the index says it has a bench workload"),
    ({"workloads": {"rmsnorm", "gelu"}}, "gelu: has a bench workload"),
    ({"swaps": set()}, "the index says it has a decoder slot"),
])
def test_spec_workload_and_slot_disagreements_are_reported(tmp_path: Path, over: dict, message: str) -> None:
    errors = _errors(_copy_one(tmp_path), **over)
    assert len(errors) == 1 and message in errors[0], errors


def test_a_module_constant_default_is_checked(tmp_path: Path) -> None:
    """rope's CONVENTION: a starter declaring the other convention disagrees with the index's default."""
    root = _copy_one(tmp_path, "rope")
    assert _errors(root, registry.entry("rope")) == []
    _edit(root / "exercises/rope.py", 'CONVENTION = "half"', 'CONVENTION = "interleaved"')
    errors = _errors(root, registry.entry("rope"))
    assert len(errors) == 1, errors
    assert "default CONVENTION='interleaved', the index says CONVENTION='half'" in errors[0], errors


def test_an_unflagged_workload_is_reported(tmp_path: Path) -> None:
    entry = dataclasses.replace(registry.entry("rmsnorm"), bench=False)
    root = _copy_one(tmp_path)
    _edit(root / "README.md", "| yes | yes |", "| yes |  |")
    errors = _errors(root, entry)
    assert errors == ["rmsnorm: has a bench workload (drill/bench/workloads.py), but the index does not say so"]


def test_a_duplicate_entry_is_reported(tmp_path: Path) -> None:
    root = _copy_one(tmp_path)
    e = registry.entry("rmsnorm")
    spec = SimpleNamespace(name=e.name, graded=e.graded)
    errors = index_errors([e, e], root, spec_of=lambda n: spec, workloads={"rmsnorm"}, swaps={"rmsnorm"})
    assert "rmsnorm: listed twice in the index" in errors


def test_count_word() -> None:
    assert count_word(7) == "seven" and count_word(12) == "twelve" and count_word(20) == "twenty"
    assert count_word(21) == "twenty-one" and count_word(37) == "thirty-seven" and count_word(40) == "forty"
    assert NUMBER.search("Twenty-one exercises, each").group(1) == "Twenty-one"


def test_a_cuda_only_exercise_is_refused_by_check_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from drill.errors import UserError
    from drill.judge.check import check_file

    monkeypatch.setitem(registry._BY_NAME, "rmsnorm", dataclasses.replace(registry.entry("rmsnorm"), device="cuda"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match="rmsnorm can only be graded on a CUDA device"):
        check_file(ROOT / "tests/fixtures/solutions/rmsnorm/good_rsqrt.py", "rmsnorm", seed=1)
