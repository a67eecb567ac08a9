"""adamw grading: the reference is PyTorch's AdamW, the scenarios reach every clause, every mistake is told apart.

Fixture verdicts are checked for every file by test_judge_fixtures.py; here:
the reference AdamW agrees with torch.optim.AdamW on every scenario (values,
state, counts, through the state_dict reload), each seed has the scenarios the
contract names, every known mistake fails a test on every seed and no two
give the same outputs, CS336's order passes everywhere but the probe, the
"optim" driver reports sharing, closures and missing state, a NaN names its
step and parameter, and the forbidden optimizers trip with their line.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from drill.judge import optim as optim_kind
from drill.judge.check import _tolerance_of, check_file
from drill.judge.compare import compare
from drill.judge.runner import Limits
from drill.judge.specs import adamw
from drill.reference.optim import AdamW

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions" / "adamw"
SEEDS = (0, 1, 7, 20261201)
TOL = _tolerance_of(adamw.SPEC)
LIMITS = Limits(timeout_s=60, cpu_s=60, memory_mb=2048)


def _prepared(seed: int) -> list:
    cases = adamw.make_cases(seed)
    for c in cases:
        c.expected, c.expected_grads = adamw.reference(c)
    return cases


@pytest.mark.parametrize("seed", SEEDS)
def test_the_reference_is_torchs_adamw(seed: int) -> None:
    for case in adamw.make_cases(seed):
        if case.ctx["returns"] == "own":
            continue
        want = adamw.drive(torch.optim.AdamW, case)
        got = adamw.drive(AdamW, case)
        if case.ctx["tol"] == "bfloat16":
            assert compare(got, want, TOL(case)).ok, case.name
        else:  # fp32: the same operations in the same order, so far inside the tolerance
            assert torch.allclose(got.double(), want.double(), rtol=1e-6, atol=1e-7), case.name


def test_the_reference_defaults_are_the_contracts() -> None:
    p = torch.nn.Parameter(torch.ones(2))
    assert AdamW([p]).defaults == {**adamw.DEFAULTS, "betas": (0.9, 0.999)}
    assert torch.optim.AdamW([p]).defaults["weight_decay"] == adamw.DEFAULTS["weight_decay"]


@pytest.mark.parametrize("seed", SEEDS)
def test_the_scenarios_the_contract_names_are_there(seed: int) -> None:
    cases = adamw.make_cases(seed)
    extras = [c.extra for c in cases]
    assert any(len(e["groups"]) == 2 and any(set(g) == {"params"} for g in e["groups"]) and
               any("lr" in g and "weight_decay" in g for g in e["groups"]) for e in extras)
    assert any(e["reload_after"] == 2 and len(e["steps"]) == 5 for e in extras)
    assert any(any(s.get("closure") for s in e["steps"]) for e in extras)
    assert any(any(s.get("set") for s in e["steps"]) for e in extras)
    assert any(any(n is None for s in e["steps"] for n in s["grads"]) for e in extras)
    assert any(e["init"] == {} for e in extras)
    assert {p["dtype"] for e in extras for p in e["params"]} == {"float32", "bfloat16"}
    assert any(len({tuple(p["shape"]) for p in e["params"]}) < len(e["params"]) for e in extras)  # shared shapes
    assert {c.ctx["returns"] for c in cases} == set(adamw.RETURNS)
    probe = [c for c in cases if c.ctx["probe"]]
    assert probe and all(c.judge is not None and c.extra["init"] == {"lr": 0.1, "weight_decay": 0.5} for c in probe)
    for c in cases:  # every shared-shape scenario runs without a reload (a shared state's reload is not modelled)
        if len({tuple(p["shape"]) for p in c.extra["params"]}) < len(c.extra["params"]):
            assert c.extra["reload_after"] is None


@pytest.mark.parametrize("seed", SEEDS)
def test_every_mistake_shows_and_no_two_give_the_same_outputs(seed: int) -> None:
    cases = _prepared(seed)
    outs = {}
    for bug in adamw.SPEC.bugs:
        got = [bug.fn(c) for c in cases]
        failing = [c.name for c, g in zip(cases, got, strict=True) if g is not None and not compare(g, c.expected,
                                                                                                     TOL(c)).ok]
        assert failing, bug.label
        outs[bug.label] = got
    ids = {b.label: b.diagnosis.id for b in adamw.SPEC.bugs}
    for a in outs:
        for b in outs:
            if ids[a] < ids[b]:
                same = all((x is None and y is None) or (x is not None and y is not None and compare(
                    x, y, TOL(c)).ok) for x, y, c in zip(outs[a], outs[b], cases, strict=True))
                assert not same, (a, b)


@pytest.mark.parametrize("seed", SEEDS)
def test_cs336_order_passes_every_test_but_the_probe(seed: int) -> None:
    for case in _prepared(seed):
        got = adamw.drive(adamw.variant(order="cs336"), case)
        ok = compare(got, case.expected, TOL(case)).ok
        assert ok != case.ctx["probe"], case.name
        if case.ctx["probe"]:
            assert case.judge(got).ok and case.ctx["order"] == "cs336"
            assert case.judge(case.expected).ok and case.ctx["order"] == "torch"
            assert not case.judge(case.expected * 1.01).ok


class _Host:
    @staticmethod
    def plain(t: torch.Tensor) -> torch.Tensor:
        return t.detach().clone()


def _extra(returns: str, **over) -> dict:
    extra = {"params": [{"shape": [3], "dtype": "float32"}, {"shape": [3], "dtype": "float32"}],
             "groups": [{"params": [0, 1]}], "init": {"lr": 0.01}, "reload_after": None,
             "steps": [{"grads": ["a", "b"]}, {"grads": ["a", None], "closure": True}], "returns": returns}
    return {**extra, **over}


def _run(cls, returns: str, **over) -> torch.Tensor:
    values = [torch.arange(3.0), torch.ones(3)]
    grads = [[torch.ones(3), -torch.ones(3)], [3 * torch.ones(3), None]]
    return optim_kind.run_scenario(cls, _extra(returns, **over), values, grads, _Host)


def test_the_driver_reports_shared_state_counts_and_the_closure() -> None:
    assert _run(AdamW, "own").tolist() == [1, 1]
    assert _run(AdamW, "steps").tolist() == [2, 1]
    assert _run(AdamW, "closure").tolist() == [1, 1, 1]
    assert _run(adamw.variant(shared=True), "own").tolist() == [0, 0]
    assert _run(adamw.variant(shared=True), "steps").tolist() == [3, 3]

    class NoGradMode(AdamW):
        @torch.no_grad()
        def step(self, closure=None):
            if closure is not None:
                closure()  # under no_grad, and its loss dropped
            return super().step()

    assert _run(NoGradMode, "closure").tolist() == [0, 0, 1]


def test_the_driver_says_which_state_key_is_missing() -> None:
    class Renamed(AdamW):
        @torch.no_grad()
        def step(self, closure=None):
            for state in self.state.values():  # its own name between steps, the contract's inside them
                state["exp_avg"] = state.pop("m")
            super().step(closure)
            for state in self.state.values():
                state["m"] = state.pop("exp_avg")

    with pytest.raises(optim_kind.ContractError, match="no 'exp_avg'"):
        _run(Renamed, "state")


def test_the_driver_refuses_state_in_another_dtype() -> None:
    class Fp32State(AdamW):
        @torch.no_grad()
        def step(self, closure=None):
            super().step(closure)
            for state in self.state.values():
                state["exp_avg_sq"] = state["exp_avg_sq"].float()

    bf16 = [{"shape": [3], "dtype": "bfloat16"}, {"shape": [3], "dtype": "bfloat16"}]
    assert _run(AdamW, "state", params=bf16).shape == (2, 6)
    with pytest.raises(optim_kind.ContractError, match="exp_avg_sq.*float32.*bfloat16"):
        _run(Fp32State, "state", params=bf16)


def test_the_reload_goes_through_state_dict() -> None:
    class Forgetful(AdamW):  # keeps its moments outside self.state: a reload starts them again from zero
        def state_dict(self):
            out = super().state_dict()
            out["state"] = {}
            return out

    with_reload = _run(AdamW, "params", reload_after=1)
    assert torch.allclose(with_reload, _run(AdamW, "params"))
    assert not torch.allclose(_run(Forgetful, "params", reload_after=1), with_reload)


def test_a_nan_names_its_step_and_parameter() -> None:
    case = next(c for c in _prepared(3) if c.ctx["returns"] == "params" and c.extra["reload_after"] == 2)
    got = case.expected.clone()
    layout = case.ctx["layout"]
    got[2, layout[1]["offset"] + 1] = math.nan
    result = case.ctx["locate"](compare(got, case.expected, TOL(case)))
    assert not result.ok and result.reason == "nonfinite"
    assert f"after step 3, parameter 1 ({layout[1]['label']})" in result.message
    assert result.where.startswith("after step 3, parameter 1")


def test_a_nan_from_the_learners_optimizer_is_reported_with_its_step(tmp_path: Path) -> None:
    source = (SOLUTIONS / "good_plain_loop.py").read_text()
    bad = source.replace("(v_hat.sqrt() + eps)", "v_hat.sqrt()")  # no eps: 0 / 0 where a gradient is 0
    bad = bad.replace("                g = p.grad\n", "                g = p.grad.clone()\n                g[0] = 0\n")
    path = tmp_path / "adamw.py"
    path.write_text(bad)
    r = check_file(path, "adamw", 5, LIMITS)
    assert r.status == "fail"
    nan = [t for t in r.tests if "NaN" in (t.message or "")]
    assert nan and all("after step 1, parameter 0" in t.message for t in nan), [t.message for t in r.tests]


@pytest.mark.parametrize(("call", "verdict"), [
    ("torch.optim.AdamW(self.param_groups)", "forbidden_op"),
    ("torch.optim.Adam(self.param_groups)", "forbidden_op"),
    # privates are refused before the run (layer 1); the child's traps hold for them too (layer 2)
    ("torch.optim._functional.adamw([], [], [], [], [], [])", "policy_violation"),
    ("torch._foreach_mul_([p for g in self.param_groups for p in g['params']], 1.0)", "policy_violation"),
])
def test_the_ready_made_optimizers_are_forbidden(tmp_path: Path, call: str, verdict: str) -> None:
    source = (SOLUTIONS / "good_plain_loop.py").read_text()
    hook = "        for group in self.param_groups:\n"
    line = f"        _ = {call}\n"
    path = tmp_path / "adamw.py"
    path.write_text(source.replace(hook, line + hook, 1))
    r = check_file(path, "adamw", 5, LIMITS)
    assert r.status == "fail" and r.diagnosis is not None and r.diagnosis.id == verdict, r.diagnosis_detail
    want = source.replace(hook, line + hook, 1).splitlines().index(line.rstrip("\n")) + 1
    assert f"line {want}" in r.diagnosis_detail or f".py:{want}:" in r.diagnosis_detail, r.diagnosis_detail


def test_the_private_optimizer_kernels_are_in_the_childs_trap_plan() -> None:
    """Layer 2 under the policy: every aten _foreach_* op and the fused Adam kernels get a tripping kernel."""
    from drill.judge import child

    names = {n.split(".")[0] for n in child.forbidden_op_names(list(adamw.SPEC.forbidden))}
    assert {"_fused_adam_", "_fused_adamw_", "_foreach_add_", "_foreach_mul_", "_foreach_lerp_",
            "_foreach_addcdiv_", "_foreach_sqrt"} <= names
    assert not {"add", "mul", "lerp", "addcdiv", "sqrt", "zeros_like"} & names


def test_the_cs336_fixture_passes_with_the_note() -> None:
    r = check_file(SOLUTIONS / "good_cs336_order.py", "adamw", 11, LIMITS)
    assert r.status == "pass", r.diagnosis_detail
    assert any(a.startswith("adamw_cs336_order") for a in r.advisories)
    plain = check_file(SOLUTIONS / "good_plain_loop.py", "adamw", 11, LIMITS)
    assert plain.status == "pass" and not any("cs336" in a for a in plain.advisories)
