"""`moe`: the hidden tests' coverage, NORM_TOPK_PROB, the (out, aux) pair, the routing audit, CLI and mock.

Fixtures' verdicts at the suite's seed are tests/test_judge_fixtures.py's;
here every fixture is also graded at other seeds (nothing may flip), and
the pieces the fixtures cannot show are checked one by one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from drill.judge import audit
from drill.judge.check import check_file
from drill.judge.runner import Limits
from drill.judge.specs import moe as spec
from drill.judge.specs._moe_bugs import moe_variant

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions" / "moe"
GOOD = SOLUTIONS / "good_hf_mixtral_loop.py"
DENSE = SOLUTIONS / "good_dense_all_experts.py"
SEEDS = (1, 2, 3, 4, 5)
LIMITS = Limits(timeout_s=60, cpu_s=60, memory_mb=2048)


def _prepared(seed: int, attrs: dict | None = None) -> list:
    cases = spec.make_cases(seed)
    for case in cases:
        case.expected, case.expected_grads = spec.reference(case)
    assert spec.prepare(cases, attrs or {}) is None
    return cases


@pytest.mark.parametrize("seed", SEEDS)
def test_cases_cover_the_contract(seed: int) -> None:
    cases = _prepared(seed)
    ks = {c.ctx["top_k"] for c in cases}
    es = {c.ctx["n_experts"] for c in cases}
    assert ks == {1, 2, 3, 4} and max(es) == 16
    assert {c.ctx["dtype"] for c in cases} == {"float32", "bfloat16"}
    assert {c.ctx["pick"] for c in cases} == {"out", "aux"} and any(c.repeat for c in cases)
    graded = [c for c in cases if c.wants_grads]
    assert graded and all(c.grad_params and c.grad_inputs == ("x",) for c in graded)
    assert {"param:router.weight", "param:experts.0.w_gate.weight", "input:x"} <= set(graded[0].expected_grads)
    for case in cases:  # the contract: each token's k-th and (k+1)-th router logits are well apart, in every dtype
        x = case.args["x"].reshape(-1, case.args["x"].shape[-1])
        assert bool(spec._well_routed(x, case.params["router.weight"], case.ctx["top_k"]).all()), case.name
        assert case.out_dtype == (torch.float32 if case.ctx["pick"] == "aux" else case.args["x"].dtype)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_token_on_the_same_experts_leaves_the_others_without_gradient(seed: int) -> None:
    hot = [c for c in _prepared(seed) if "every token picks" in c.name and c.ctx["pick"] == "out"]
    assert len(hot) == 2
    for case in hot:
        unused = [k for k, g in case.expected_grads.items() if ".w_gate." in k and not bool(g.any())]
        assert len(unused) == case.ctx["n_experts"] - case.ctx["top_k"], case.name


@pytest.mark.parametrize("seed", SEEDS)
def test_the_bf16_router_case_separates_a_half_precision_softmax(seed: int) -> None:
    cases = _prepared(seed)
    aux = next(c for c in cases if c.ctx["dtype"] == "bfloat16" and c.ctx["pick"] == "aux")
    tol = spec.SPEC.tolerances["aux"]
    gap = float((moe_variant(aux, half="softmax").double() - aux.expected.double()).abs())
    assert gap > 20 * (tol.atol * max(1.0, float(aux.expected)) + tol.rtol * float(aux.expected))
    # the bf16 router logits are exact: a router matmul in fp32 gives the same probabilities
    x = aux.args["x"].reshape(-1, aux.args["x"].shape[-1])
    w = aux.params["router.weight"]
    assert torch.equal(F.linear(x, w).float(), F.linear(x.float(), w.float()))


def test_the_declared_convention_is_graded_and_named_in_every_test() -> None:
    absent = _prepared(3)
    declared = _prepared(3, {"NORM_TOPK_PROB": {"present": True, "value": False, "type": "bool"}})
    assert all(c.name.endswith("[NORM_TOPK_PROB=True, the default]") for c in absent)
    assert all(c.name.endswith("[NORM_TOPK_PROB=False]") for c in declared)
    out_true, out_false = absent[0].expected, declared[0].expected  # top_k = 2: the conventions differ
    assert not torch.allclose(out_true, out_false)
    for bad, shown in ((1, "1"), ("yes", "'yes'"), (None, "None")):
        kind = type(bad).__name__
        attrs = {"NORM_TOPK_PROB": {"present": True, "value": bad, "type": kind}}
        diagnosis, detail = spec.prepare(spec.make_cases(3), attrs)
        assert diagnosis.id == "moe_norm_topk_invalid"
        assert detail == f"NORM_TOPK_PROB is {shown}; expected True or False"


NO_MATMUL = '''
import torch
from torch import nn


class Expert(nn.Module):
    def __init__(self, d, f):
        super().__init__()
        self.w_gate, self.w_up = nn.Linear(d, f, bias=False), nn.Linear(d, f, bias=False)
        self.w_down = nn.Linear(f, d, bias=False)


def lin(x, w):  # no matmul at all: what a FLOP counter cannot see
    return (x[..., None, :] * w).sum(-1)


class MoE(nn.Module):
    def __init__(self, d_model, d_ff, n_experts, top_k):
        super().__init__()
        self.k = top_k
        self.router = nn.Linear(d_model, n_experts, bias=False)
        self.experts = nn.ModuleList(Expert(d_model, d_ff) for _ in range(n_experts))

    def forward(self, x):
        p = torch.softmax(lin(x, self.router.weight).float(), -1)
        w, idx = p.topk(self.k, -1)
        w = w / w.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for e, ex in enumerate(self.experts):
            sel = (idx == e).to(x.dtype)
            if bool(sel.any()):
                g = lin(x, ex.w_gate.weight)
                y = lin(g * torch.sigmoid(g) * lin(x, ex.w_up.weight), ex.w_down.weight)
                out = out + (y * (w * sel).sum(-1, keepdim=True)).to(x.dtype)
        f = torch.zeros_like(p).scatter(-1, idx, 1.0).mean(dim=(0, 1))
        return out, p.shape[-1] * (f * p.mean(dim=(0, 1))).sum()
'''


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory, fork_server) -> dict:
    no_matmul = tmp_path_factory.mktemp("moe") / "moe.py"
    no_matmul.write_text(NO_MATMUL)
    pool = fork_server
    return {
        "good": check_file(GOOD, "moe", 7, LIMITS, pool=pool, strict=True),
        "dense": check_file(DENSE, "moe", 7, LIMITS, pool=pool),
        "dense_strict": check_file(DENSE, "moe", 7, LIMITS, pool=pool, strict=True),
        "no_matmul": check_file(no_matmul, "moe", 7, LIMITS, pool=pool, strict=True),
    }


def test_a_routed_layer_passes_strict_with_its_flops_next_to_the_minimum(graded: dict) -> None:
    good = graded["good"]
    assert good.status == "pass" and not good.advisories, good.diagnosis_detail
    assert "1.0x" in good.audit[0] and "NORM_TOPK_PROB = True (absent, the default)" in good.audit[0]
    assert "routed: 128 = tokens x top_k" in good.audit[1]


def test_every_expert_on_every_token_is_named_and_fails_only_under_strict(graded: dict) -> None:
    dense, strict = graded["dense"], graded["dense_strict"]
    assert dense.status == "pass" and len(dense.advisories) == 1
    note = dense.advisories[0]
    minimum = audit.moe_minimum_flops(spec.SPEC.audit) / 1e6
    assert note.startswith("every expert runs on every token") and f"routed minimum of {minimum:.2f}" in note
    assert strict.status == "fail" and "advisories" in strict.diagnosis_detail


def test_an_audit_that_sees_no_matmul_could_not_measure(graded: dict) -> None:
    result = graded["no_matmul"]
    assert any("could not measure" in line for line in result.audit), result.audit
    assert result.unmeasured and result.status == "fail"  # passes its tests, fails --strict
    assert all(t.status == "pass" for t in result.tests)


def test_moe_judge_reads_only_what_it_needs_and_survives_garbage() -> None:
    lines, notes, measured = audit.judge("moe_work", {"config": {}, "flops": 1})
    assert not measured and "could not measure" in lines[0] and not notes


@pytest.mark.slow
def test_no_fixture_verdict_flips_across_seeds() -> None:
    from test_judge_fixtures import verdict_flips

    assert not verdict_flips("moe", SEEDS[:4], LIMITS)


# ---------------------------------------------------------------- CLI and mock


from test_judge_cli import run  # noqa: E402 - the CLI tests' runner; `home` (a private DRILL_HOME) is conftest's


def test_start_hint_exercises_and_check_through_the_cli(home: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    assert run("start", "moe", str(work)).exit_code == 0
    starter = work / "moe.py"
    assert "NORM_TOPK_PROB = True" in starter.read_text()
    res = run("check", str(starter), "--json", "--seed", "3")
    assert res.exit_code == 1 and json.loads(res.stdout)["diagnosis"]["id"] == "not_implemented"
    hint = run("hint", "moe", "3")
    assert hint.exit_code == 0 and "Hint 3/3" in hint.output and "index_add_" in hint.output
    shutil.copy(SOLUTIONS / "bug_moe_router_half__softmax_bf16.py", starter)
    doc = json.loads(run("check", str(starter), "--json", "--seed", "3").stdout)
    assert doc["diagnosis"]["id"] == "moe_router_half"
    failing = [t["name"] for t in doc["tests"] if t["status"] == "fail"]
    assert failing and all(n.startswith("bf16") and ": aux loss [" in n for n in failing)
    assert "moe" in run("exercises").output
    folder = tmp_path / "dir"
    folder.mkdir()
    shutil.copy(GOOD, folder / "moe.py")
    shutil.copy(SOLUTIONS.parent / "decoder_block" / "good_hf_llama.py", folder / "decoder_block.py")
    res = run("check", str(folder), "--seed", "3")
    assert res.exit_code == 0 and "moe" in res.output and "decoder_block" in res.output


def test_a_tuple_missing_its_aux_is_worded_as_a_tuple(home: Path) -> None:
    path = SOLUTIONS / "bug_wrong_type__output_only.py"
    doc = json.loads(run("check", str(path), "--exercise", "moe", "--json").stdout)
    assert doc["diagnosis"]["id"] == "wrong_type" and "tuple" in doc["diagnosis"]["title"]
    assert "no .tolist()" not in doc["diagnosis"]["fix"] and "(out, aux)" in doc["diagnosis"]["detail"]


def test_a_mock_can_be_run_on_moe(tmp_path: Path, bank: Path) -> None:
    from test_mock import RIGHT, _real_grader, last_report, sit

    work = tmp_path / "work"
    steps = [(60, RIGHT), (200, RIGHT), lambda: (shutil.copy(GOOD, work / "moe.py"), "submit")[1]]
    code, store, out, _ = sit(tmp_path, bank, steps, grade=_real_grader(), exercise="moe")
    assert code == 0, out
    mock = last_report(store)
    assert mock["exercise"] == "moe" and mock["report"]["coding"]["submissions"][-1]["status"] == "pass"
