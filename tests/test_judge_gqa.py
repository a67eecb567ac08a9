"""gqa grading: configs, variant models, and a few verdicts through the real child.

Every fixture's verdict is checked by test_judge_fixtures.py; the memory audit
by test_judge_audit.py. Here: the cases span MHA/MQA/real GQA with several
group sizes, the variant models are exact (no knob = the reference), the
tiled-KV variant only claims what it can show, and gradients are compared.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from drill.judge.check import check_file
from drill.judge.compare import compare
from drill.judge.runner import Limits
from drill.judge.specs import gqa

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions" / "gqa"


@pytest.mark.parametrize("seed", [0, 3, 20261129])
def test_configs_cover_mha_mqa_and_several_group_sizes(seed: int) -> None:
    cases = gqa.make_cases(seed)
    configs = {(c.ctx["n_heads"], c.ctx["n_kv_heads"]) for c in cases}
    assert any(h == kv for h, kv in configs)  # MHA
    assert any(kv == 1 for h, kv in configs)  # MQA
    groups = {h // kv for h, kv in configs if 1 < kv < h}
    assert len(groups) >= 3  # real GQA, several group sizes
    assert {c.ctx["dtype"] for c in cases} == {"float32", "float16", "bfloat16"}
    assert any(c.wants_grads and c.grad_params for c in cases)
    for c in cases:  # the parameters follow the contract's shapes
        h, kv = c.ctx["n_heads"], c.ctx["n_kv_heads"]
        d_model = c.init[0]
        dh = d_model // h
        assert c.params["k_proj.weight"].shape == (kv * dh, d_model)
        assert c.params["o_proj.weight"].shape == (d_model, h * dh)


def test_variant_without_a_mistake_is_the_reference() -> None:
    for case in gqa.make_cases(1):
        case.expected, _ = gqa.reference(case)
        out, unknown = gqa.gqa_variant(case)
        assert not unknown.any()
        assert compare(out, case.expected, gqa.SPEC.tolerances[case.ctx["dtype"]]).ok, case.name


def test_tiled_variant_only_where_it_can_show() -> None:
    for case in gqa.make_cases(2):
        h, kv = case.ctx["n_heads"], case.ctx["n_kv_heads"]
        produced = gqa.gqa_variant(case, tiled=True)
        assert (produced is None) == (not 1 < kv < h), case.name


def test_strict_mask_variant_leaves_the_blind_first_row_out_of_matching() -> None:
    case = gqa.make_cases(4)[0]
    out, unknown = gqa.gqa_variant(case, mask="strict")
    assert unknown[:, 0].all() and not unknown[:, 1:].any()
    assert torch.isfinite(out[:, 1:]).all()


def test_grads_are_compared_through_the_child(fork_server) -> None:
    pool = fork_server
    good = check_file(SOLUTIONS / "good_fold_group_rows.py", "gqa", 8, Limits(), pool=pool)
    detached = check_file(SOLUTIONS / "bug_grad_broken__detach_weights.py", "gqa", 8, Limits(), pool=pool)
    assert good.status == "pass", good.diagnosis_detail
    assert detached.status == "fail" and detached.diagnosis.id == "grad_broken"
    assert any("gradient" in t.message for t in detached.tests if t.status == "fail")
