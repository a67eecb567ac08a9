"""debug_gpt without the child: the template and library as data, planting, the header, "keeps running",
the template equal to the reference, and the probes' exactness (alone and every drawable pair) in-process.

The probes are run here on the planted file imported in this process, through the same `dgpt.run_probe` and
`compare` the grader uses; tests/test_judge_debug_gpt.py grades files through the fork server.
"""

from __future__ import annotations

import itertools
import math
import types
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from drill.cli import app
from drill.debug_round import bugs as library
from drill.debug_round.header import parse
from drill.debug_round.plant import DEFAULT_SEED, Plan, draw, plant, write_starter
from drill.debug_round.template import fixed_text
from drill.errors import UserError
from drill.judge import dgpt
from drill.judge.compare import compare
from drill.judge.specs import debug_gpt as spec
from drill.reference.debug_gpt import namespace

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = [(f, s) for f in (True, False) for s in (True, False)]


def _plan(fused: bool, swiglu: bool, ids: tuple[str, ...] = (), seed: int = 1) -> Plan:
    return Plan(seed, max(1, len(ids)), fused, swiglu, ids)


def _module(text: str, name: str = "debug_gpt_under_test") -> types.ModuleType:
    mod = types.ModuleType(name)
    exec(compile(text, f"<{name}>", "exec", dont_inherit=True), mod.__dict__)  # noqa: S102 - the test's own generated file
    return mod


# -- the library as data ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fused", "swiglu"), VARIANTS)
def test_every_fixed_text_occurs_exactly_once_in_every_variant(fused: bool, swiglu: bool) -> None:
    text = fixed_text(fused, swiglu, "# header")
    mlp = "swiglu" if swiglu else "gelu"
    for bug in library.LIBRARY:
        fixed, planted = bug.texts(mlp)
        assert text.count(fixed) == 1, bug.id
        assert fixed != planted, bug.id
        assert bug.function in library.FUNCTIONS, bug.id
        assert 2 <= len(bug.hints) <= 3 and bug.title and bug.breaks, bug.id


def test_the_library_is_the_contracts_list() -> None:
    contract = (ROOT.parent / "shared" / "EXERCISES.md")
    ids = {b.id for b in library.LIBRARY}
    assert len(ids) == len(library.LIBRARY) == 19
    if contract.is_file():
        section = contract.read_text(encoding="utf-8").split("## debug_gpt", 1)[1].split("\n---", 1)[0]
        for bug_id in ids | set(library.CACHE_MISTAKES):
            assert f"`{bug_id}`" in section, bug_id


# -- planting and the header -----------------------------------------------------------------------------------


@pytest.mark.parametrize("k", range(1, 9))
def test_the_draw_is_deterministic_one_per_function_and_never_an_interacting_pair(k: int) -> None:
    variants = set()
    for seed in range(200):
        plan = draw(seed, k)
        assert plan == draw(seed, k)
        assert len(plan.ids) == k
        fns = [library.BY_ID[b].function for b in plan.ids]
        assert len(set(fns)) == k
        assert not any(frozenset(p) in library.INTERACTIONS for p in itertools.combinations(plan.ids, 2))
        assert [library.FUNCTIONS.index(f) for f in fns] == sorted(library.FUNCTIONS.index(f) for f in fns)
        variants.add((plan.fused, plan.swiglu))
    assert variants == set(VARIANTS)


def test_the_same_seed_and_k_write_the_same_bytes_and_line_one_says_so() -> None:
    a, b = write_starter(11, 5), write_starter(11, 5)
    assert a.text == b.text and a.lines == b.lines
    assert a.text.splitlines()[0] == "# drill debug_gpt seed=11 bugs=5 (keep this line)"
    assert parse(a.text) == (11, 5)
    assert write_starter(12, 5).text != a.text
    lines = a.text.splitlines()
    for bug_id, (first, last) in a.lines.items():
        fixed, planted = library.BY_ID[bug_id].texts(a.plan.mlp)
        if planted:
            assert planted.strip().splitlines()[0].strip() in lines[first - 1], bug_id
            assert last - first == planted.rstrip("\n").count("\n")
        else:  # a deleted line: the two lines it sat between
            assert last == first + 1


def test_the_shipped_starter_is_the_documented_seed() -> None:
    assert (ROOT / "exercises" / "debug_gpt.py").read_text(encoding="utf-8") == \
        write_starter(DEFAULT_SEED, library.DEFAULT_BUGS).text


@pytest.mark.parametrize("first", ["", "# drill debug_gpt seed=7 bugs=4",
                                   "# drill debug_gpt seed=7 bugs=9 (keep this line)",
                                   "# drill debug_gpt seed=x bugs=4 (keep this line)", "import torch"])
def test_a_missing_or_edited_header_is_refused_in_one_line(first: str) -> None:
    body = write_starter(7, 4).text.split("\n", 1)[1]
    with pytest.raises(UserError) as err:
        parse(first + "\n" + body, "f.py")
    assert str(err.value) == ("f.py:1: this file was not written by `drill start debug_gpt`; start again with "
                              "`drill start debug_gpt --seed N`")


def test_drill_start_writes_the_seed_and_refuses_bad_counts(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["start", "debug_gpt", str(tmp_path), "--seed", "5", "--bugs", "3"])
    assert ok.exit_code == 0, ok.output
    assert (tmp_path / "debug_gpt.py").read_text(encoding="utf-8") == write_starter(5, 3).text
    assert "seed 5, 3 planted bugs" in ok.output
    again = runner.invoke(app, ["start", "debug_gpt", str(tmp_path)])
    assert again.exit_code == 2 and "already exists" in again.output
    drawn = runner.invoke(app, ["start", "debug_gpt", str(tmp_path / "r")])
    assert drawn.exit_code == 0 and "seed " in drawn.output
    for k in ("0", "9"):
        bad = runner.invoke(app, ["start", "debug_gpt", str(tmp_path / "x"), "--bugs", k])
        assert bad.exit_code == 2 and len(bad.output.strip().splitlines()) == 1, bad.output
        assert "--bugs must be 1 .. 8" in bad.output
        assert not (tmp_path / "x" / "debug_gpt.py").exists()


def test_hints_come_bug_by_bug_in_file_order_and_the_first_never_gives_a_line(tmp_path: Path) -> None:
    runner = CliRunner()
    runner.invoke(app, ["start", "debug_gpt", str(tmp_path), "--seed", "7"])
    target = str(tmp_path / "debug_gpt.py")
    plan = draw(7, 4)
    first = library.BY_ID[plan.ids[0]]
    one = runner.invoke(app, ["hint", "debug_gpt", "--file", target])
    assert one.exit_code == 0, one.output
    assert first.hints[0].split()[0] in one.output and "line" not in one.output.split("next:")[0].lower()
    two = runner.invoke(app, ["hint", "debug_gpt", "--file", target])
    assert "Hint 2/" in two.output
    every = runner.invoke(app, ["hint", "debug_gpt", "99", "--file", target])
    assert every.exit_code == 2
    n = 4 * (len(first.hints) + 1) if all(len(library.BY_ID[b].hints) == len(first.hints) for b in plan.ids) else 0
    if n:
        last = runner.invoke(app, ["hint", "debug_gpt", str(n), "--file", target])
        positions = [last.output.find(library.BY_ID[b].function + ":") for b in plan.ids]
        assert positions == sorted(positions) and -1 not in positions
        assert "planted at line" in last.output


# -- the file keeps running; the template is the reference ------------------------------------------------------


def _exercise(mod: types.ModuleType) -> float:
    torch.manual_seed(0)
    config = mod.GPTConfig(vocab_size=32, block_size=8, n_layer=2, n_head=2, n_embd=16, dropout=0.1)
    model = mod.GPT(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randint(0, 32, (3, 9))
    losses = [mod.train_step(model, data, opt) for _ in range(2)]
    out = mod.generate(model, data[:, :3], 7)
    assert out.shape == (3, 10) and out.dtype == torch.int64
    logits, loss = model(data[:, :-1], data[:, 1:])
    assert logits.shape == (3, 8, 32)
    return max(losses + [loss.item()])


@pytest.mark.parametrize(("fused", "swiglu"), VARIANTS)
def test_every_planted_bug_keeps_the_file_running_with_a_finite_loss(fused: bool, swiglu: bool) -> None:
    for bug in library.LIBRARY:
        text = plant(_plan(fused, swiglu, (bug.id,))).text
        assert math.isfinite(_exercise(_module(text))), bug.id


def _weights(fused: bool, swiglu: bool, seed: int = 0) -> tuple[dict, dict]:
    cfg = {"vocab_size": 40, "block_size": 10, "n_layer": 2, "n_head": 4, "n_embd": 24, "dropout": 0.0}
    return cfg, spec._reference_weights(namespace(fused, swiglu), cfg, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(("fused", "swiglu"), VARIANTS)
def test_the_templates_fixed_file_behaves_as_the_reference(fused: bool, swiglu: bool) -> None:
    mod = _module(plant(_plan(fused, swiglu)).text)
    ref = namespace(fused, swiglu)
    cfg, sd = _weights(fused, swiglu)
    mine, theirs = mod.GPT(mod.GPTConfig(**cfg)), ref.GPT(ref.GPTConfig(**cfg))
    assert list(mine.state_dict()) == list(theirs.state_dict())
    mine.load_state_dict(sd)
    theirs.load_state_dict(sd)
    idx = torch.randint(0, 40, (2, 9), generator=torch.Generator().manual_seed(1))
    for model in (mine, theirs):
        model.train()
    (la, ra), (lb, rb) = mine(idx[:, :-1], idx[:, 1:]), theirs(idx[:, :-1], idx[:, 1:])
    torch.testing.assert_close(la, lb)
    ra.backward()
    rb.backward()
    for (n, p), (_, q) in zip(mine.named_parameters(), theirs.named_parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, msg=n)
    assert torch.equal(mod.generate(mine, idx[:, :3], 12), ref.generate(theirs, idx[:, :3], 12))
    assert torch.equal(ref.generate(theirs, idx[:, :3], 12, use_cache=True), ref.generate(theirs, idx[:, :3], 12))


# -- the probes' exactness, in-process --------------------------------------------------------------------------


def failing_functions(plan: Plan, seed: int) -> set[str]:
    """The functions whose probe the file of `plan` fails, computed as the grader does (same cases, same
    compare)."""
    mod = _module(plant(plan).text)
    failing = set()
    for case in spec.cases_for_plan(plan, seed):
        if case.ctx["role"] != "probe":
            continue
        expected, _ = spec.reference(case)
        torch.manual_seed(0)
        try:
            got = dgpt.run_probe(mod, case.extra["probe"], case.extra,
                                 {k: v.clone() for k, v in case.args.items()})
        except Exception:  # noqa: BLE001 - a probe that cannot run fails
            failing.add(case.ctx["function"])
            continue
        if not compare(got, expected, spec.TOL).ok:
            failing.add(case.ctx["function"])
    return failing


@pytest.mark.slow
@pytest.mark.parametrize(("fused", "swiglu"), VARIANTS)
def test_the_fixed_file_passes_every_probe_and_each_bug_alone_fails_only_its_own(fused: bool, swiglu: bool) -> None:
    assert failing_functions(_plan(fused, swiglu), 3) == set()
    for bug in library.LIBRARY:
        assert failing_functions(_plan(fused, swiglu, (bug.id,)), 3) == {bug.function}, bug.id


def drawable_pairs() -> list[tuple[str, str]]:
    return [(a, b) for a, b in itertools.combinations([x.id for x in library.LIBRARY], 2)
            if library.compatible([a], b)]


@pytest.mark.slow
def test_every_drawable_pair_fails_exactly_its_two_probes() -> None:
    pairs = drawable_pairs()
    assert len(pairs) > 100
    for i, (a, b) in enumerate(pairs):
        fused, swiglu = VARIANTS[i % 4]
        plan = _plan(fused, swiglu, (a, b), seed=i)
        assert failing_functions(plan, i) == {library.BY_ID[a].function, library.BY_ID[b].function}, (a, b)
