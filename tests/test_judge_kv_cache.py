"""kv_cache grading: the splits, the replay of known mistakes, the chain executor's contract.

Fixture verdicts are checked by test_judge_fixtures.py and the work audit by
test_judge_audit.py. Here: every kind of split the issue names is among the
cases, the replay with no mistake equals the reference on every case (so each
bug variant differs from the truth only by its knob), and a module that
breaks the calling contract gets a clear generic diagnosis.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from drill.judge.check import check_file
from drill.judge.compare import compare
from drill.judge.runner import Limits
from drill.judge.specs import kv_cache
from drill.judge.specs._kv_bugs import KV_VARIANTS, replay

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions" / "kv_cache"


@pytest.mark.parametrize("seed", [0, 5, 20261129])
def test_splits_cover_every_way_of_calling(seed: int) -> None:
    cases = kv_cache.make_cases(seed)
    calls = [c.extra["calls"] for c in cases]
    assert any(len(c) == 1 for c in calls)  # all at once
    assert any(len(c) > 2 and all(n == 1 for n in c[1:]) for c in calls)  # prompt, then one token at a time
    assert any(len(c) > 2 and len(set(c)) == 1 and c[0] > 1 for c in calls)  # equal chunks of several tokens
    assert any(len(set(c)) > 2 for c in calls)  # uneven mix
    assert any(c.extra["past"] for c in cases)  # continuing a reference-built cache
    assert {c.extra["returns"] for c in cases} == {"out", "k", "v"}
    assert {(c.ctx["n_heads"] == c.ctx["n_kv_heads"], c.ctx["n_kv_heads"] == 1) for c in cases} >= {
        (True, False), (False, True), (False, False)}
    assert {c.ctx["dtype"] for c in cases} == {"float32", "bfloat16", "float16"}
    for dtype in (torch.float16, torch.bfloat16):  # module, cache and every returned tensor in the half dtype
        half = [c for c in cases if c.ctx["dtype"] == str(dtype).replace("torch.", "")]
        assert {c.extra["returns"] for c in half} == {"out", "k", "v"}, dtype
        assert all(c.module_dtype is dtype and c.out_dtype is dtype for c in half), dtype
    # a failure message names the tensor compared, not "output" for a returned cache
    assert {c.ctx["what"] for c in cases} == {"output", "returned key cache", "returned value cache"}
    assert {c.ctx["base"] for c in cases} >= {10000.0, 500000.0}


def test_replay_without_a_mistake_is_the_reference() -> None:
    for case in kv_cache.make_cases(2):
        case.expected, _ = kv_cache.reference(case)
        tol = kv_cache.SPEC.tolerances[case.ctx["dtype"]]
        assert compare(replay(case), case.expected, tol).ok, case.name


def test_every_variant_is_wrong_somewhere_and_right_on_a_single_plain_call() -> None:
    cases = kv_cache.make_cases(3)
    for case in cases:
        case.expected, _ = kv_cache.reference(case)
    single = next(c for c in cases if c.extra["calls"] == c.extra["calls"][:1] and c.extra["returns"] == "out")
    for bug_id, label, knobs in KV_VARIANTS:
        tol = kv_cache.SPEC.tolerances
        wrong = [c.name for c in cases if not compare(replay(c, **knobs), c.expected, tol[c.ctx["dtype"]]).ok]
        assert wrong, f"{bug_id} ({label}) never differs from the reference"
        if bug_id != "kv_rope_on_values":
            assert compare(replay(single, **knobs), single.expected, tol["float32"]).ok, f"{bug_id} on one call"


BROKEN = '''
import torch
from torch import nn

class CachedSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads, rope_base=10000.0):
        super().__init__()
        d_head = d_model // n_heads
        self.q_proj = nn.Linear(d_model, n_heads * d_head, bias=False)
        self.k_proj = nn.Linear(d_model, n_kv_heads * d_head, bias=False)
        self.v_proj = nn.Linear(d_model, n_kv_heads * d_head, bias=False)
        self.o_proj = nn.Linear(n_heads * d_head, d_model, bias=False)

    def forward(self, x, past_kv=None):
        return self.o_proj(self.q_proj(x))
'''


def test_module_returning_only_a_tensor_gets_wrong_type(tmp_path: Path, fork_server) -> None:
    path = tmp_path / "kv_cache.py"
    path.write_text(BROKEN, encoding="utf-8")
    pool = fork_server
    result = check_file(path, None, 1, Limits(), pool=pool)
    assert result.status == "fail" and result.diagnosis.id == "wrong_type"
    assert "(out, (k_all, v_all))" in result.diagnosis_detail


def test_gradients_flow_through_the_chained_cache(tmp_path: Path, fork_server) -> None:
    good = (SOLUTIONS / "good_concat_bottom_right.py").read_text(encoding="utf-8")
    detached = good.replace("out = scores.softmax(dim=-1) @ v_rep", "out = scores.softmax(dim=-1).detach() @ v_rep")
    assert detached != good
    (tmp_path / "kv_cache.py").write_text(detached, encoding="utf-8")
    pool = fork_server
    ok = check_file(SOLUTIONS / "good_token_loop.py", "kv_cache", 12, Limits(), pool=pool)
    bad = check_file(tmp_path / "kv_cache.py", None, 12, Limits(), pool=pool)
    assert ok.status == "pass", ok.diagnosis_detail
    assert bad.status == "fail" and bad.diagnosis.id == "grad_broken"


def _declare(cases, value):
    return kv_cache.SPEC.prepare(cases, {"CONVENTION": {"present": True, "value": value, "type": type(value).__name__}})


@pytest.mark.parametrize("convention", ["half", "interleaved"])
def test_the_declared_convention_picks_the_expectations_and_the_replay_follows_it(convention: str) -> None:
    cases = kv_cache.make_cases(4)
    for case in cases:
        case.expected, case.expected_grads = kv_cache.reference(case)
    assert _declare(cases, convention) is None
    tol = kv_cache.SPEC.tolerances
    for case in cases:
        assert case.ctx["convention"] == convention
        assert compare(replay(case), case.expected, tol[case.ctx["dtype"]]).ok, case.name
    other = "half" if convention == "interleaved" else "interleaved"
    same = [c.extra["returns"] for c in cases if compare(c.ctx["alt"][other][0], c.expected, tol[c.ctx["dtype"]]).ok]
    assert set(same) == {"v"}  # outputs and key caches tell the conventions apart; values are never rotated


def test_an_unknown_convention_is_refused_in_one_line() -> None:
    cases = kv_cache.make_cases(1)
    for case in cases:
        case.expected, case.expected_grads = kv_cache.reference(case)
    refused = _declare(cases, "neox")
    assert refused is not None and refused[0].id == "rope_convention_invalid" and "'neox'" in refused[1]
    assert "\n" not in refused[1]


def test_the_starter_declares_the_default_convention() -> None:
    from drill.paths import exercises_dir

    assert '\nCONVENTION = "half"\n' in (exercises_dir() / "kv_cache.py").read_text(encoding="utf-8")
