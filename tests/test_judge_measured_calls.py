"""Measured calls that cannot be told apart from graded ones (issue 30 §2).

The memory (gqa) and routing (moe) audits used to make a call of their own, under no_grad on a module
they built, and a file that checked `torch.is_grad_enabled()` grouped K/V or routed its tokens only
then: it passed `--strict` while every graded call did the wasteful thing. They now measure the graded
calls; the kv_cache and mla decode audits still make their own, now with autograd on.
flash_attention's tiling cases ran under no_grad, at fixed sizes (B = H = 1), after every value case:
a file could tile only when autograd was off, only at those sizes, or only after so many calls.
They now run in the value cases' grad mode, at drawn sizes, among the value cases, and their answers
are graded. Each fixture in tests/fixtures/measured/ is one of those files: it passed before, and fails
now with the name its waste deserves (the audit ones under --strict; their values are right).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from drill.judge import audit
from drill.judge.check import check_file
from drill.judge.runner import Limits
from drill.judge.specs import gqa, moe

MEASURED = Path(__file__).parent / "fixtures" / "measured"

# fixture -> (exercise, a phrase of the advice, a phrase of the audit's lines)
SWITCHERS = {
    "gqa__grouped_only_without_grad": ("gqa", "K/V copied to all 8 query heads", "graded calls"),
    "moe__routed_only_without_grad": ("moe", "every expert runs on every token", "graded calls"),
    # the decode audit still makes its own calls, now with autograd on as the graded chained calls
    "kv_cache__reprojects_only_with_grad": ("kv_cache", "past tokens are re-projected", "decode step"),
}


@pytest.mark.parametrize("stem", SWITCHERS)
def test_a_file_that_behaves_only_when_autograd_is_off_fails_strict(stem: str, fork_server) -> None:
    exercise, advice, line = SWITCHERS[stem]
    path = MEASURED / f"{stem}.py"
    strict = check_file(path, exercise, 3, Limits(), pool=fork_server, strict=True)
    assert strict.status == "fail" and "--strict" in strict.diagnosis_detail, strict.diagnosis_detail
    assert any(advice in a for a in strict.advisories), strict.advisories
    assert any(line in text for text in strict.audit), strict.audit
    plain = check_file(path, exercise, 3, Limits(), pool=fork_server)
    assert plain.status == "pass", (plain.diagnosis, plain.diagnosis_detail)


@pytest.mark.parametrize("spec", [gqa.SPEC, moe.SPEC], ids=lambda s: s.name)
def test_the_measured_cases_are_graded_cases_in_grad_mode(spec) -> None:
    cases = spec.make_cases(5)
    marked = [c for c in cases if c.extra.get("measure")]
    assert marked and all(c.extra["measure"] == spec.audit["name"] for c in marked)
    assert all(c.kind == "module" and c.ctx["dtype"] == "float32" for c in marked)
    assert any(c.upstream is not None for c in marked)  # graded with gradients, as the other fp32 cases
    biggest = max(c.args["x"].numel() for c in marked)
    assert biggest == max(c.args["x"].numel() for c in cases)  # the audit-sized case is among them


def _gqa(batch: int, seq: int, expanded: list) -> dict:
    return {"config": {"batch": batch, "seq": seq, "d_model": 32, "n_heads": 4, "n_kv_heads": 2},
            "peak_bytes": 1000, "baseline_peak_bytes": 900, "kv_bytes": 100, "expanded": expanded}


COPY = {"what": "K", "shape": [2, 4, 5, 8], "bytes": 640}


def test_the_largest_call_is_shown_and_any_call_s_waste_is_advised() -> None:
    lines, advice, measured = audit.judge("gqa_memory", {"cases": [_gqa(1, 5, [COPY]), _gqa(2, 48, [])]})
    assert measured and "B=2, T=48" in lines[0]
    assert any("B=1, T=5" in line for line in lines) and advice and "K/V copied" in advice[0]
    lines, advice, measured = audit.judge("gqa_memory", {"cases": [_gqa(1, 5, []), _gqa(2, 48, [])]})
    assert measured and advice == [] and lines[-1].startswith("measured during 2 graded calls")


@pytest.mark.parametrize("cases", [[], "x", [{"config": {}}]], ids=["none", "not a list", "unreadable"])
def test_no_or_malformed_measurements_could_not_measure(cases) -> None:
    lines, advice, measured = audit.judge("gqa_memory", {"cases": cases})
    assert not measured and advice == [] and "could not measure" in lines[0]


def test_one_call_that_measured_nothing_makes_the_audit_unmeasured() -> None:
    silent = {**_gqa(1, 5, []), "peak_bytes": 0}
    lines, _advice, measured = audit.judge("gqa_memory", {"cases": [_gqa(2, 48, []), silent]})
    assert not measured and "could not measure one of the graded calls" in lines[-1]


# ---------------------------------------------------------------- flash_attention's tiling cases

FLASH = Path(__file__).parent / "fixtures" / "solutions" / "flash_attention"
TILING_SWITCHERS = ["flash_attention__tiled_only_without_grad", "flash_attention__tiled_only_at_the_tiling_sizes",
                    "flash_attention__tiled_only_after_the_value_calls"]


@pytest.mark.parametrize("stem", TILING_SWITCHERS)
def test_a_file_that_tiles_only_when_measured_fails_as_not_tiled(stem: str, fork_server) -> None:
    result = check_file(MEASURED / f"{stem}.py", "flash_attention", 3, Limits(), pool=fork_server)
    assert result.status == "fail" and result.diagnosis.id == "flash_not_tiled", result.diagnosis_detail


def test_the_tiling_cases_draw_their_sizes_and_keep_their_scenarios() -> None:
    from drill.judge import tiling

    drawn = [tiling.drawn_cases(seed) for seed in range(1, 9)]
    assert len({tuple(str(row) for row in rows) for rows in drawn}) == len(drawn)  # another draw per seed
    for rows in drawn:
        extras = [extra for _, extra, _ in rows]
        assert any(e["batch"] * e["heads"] > 1 for e in extras) and all(e["d"] in (8, 16) for e in extras)
        fixed = [(e, blocks) for (_, e, blocks) in rows if blocks]
        for e, blocks in fixed:  # the last tile of each length is partial
            assert all(e[t] % b for t in ("t_q", "t_k") for b in blocks), e
        causal = [e for e, _ in fixed if e["causal"]]
        assert [e["t_q"] == e["t_k"] for e in causal] == [True, False, False]
        assert causal[1]["t_q"] < causal[1]["t_k"] and causal[2]["t_q"] > causal[2]["t_k"] + 16


@pytest.mark.parametrize("name", ["flash_attention", "flash_attention_backward"])
def test_the_tiling_cases_sit_among_the_value_cases(name: str) -> None:
    from drill.judge import registry, tiling

    spec = registry.load_spec(name)
    last_value = []
    for seed in range(1, 6):
        kinds = [c.kind == tiling.KIND for c in spec.make_cases(seed)]
        assert sum(kinds) == 7
        last_value.append(max(i for i, t in enumerate(kinds) if not t))
        assert kinds.index(True) < last_value[-1]  # not all after the value cases


def test_a_measured_call_s_wrong_answer_is_named_only_when_the_values_pass() -> None:
    from drill.judge import tiling
    from drill.judge.specs import flash_attention_backward as fab
    from drill.judge.specs._flash_bugs import FD

    data = {f: 0 for f in tiling.FIELDS}
    data.update(version=tiling.VERSION, values=0, score_storages=3, products=4, computed=4 * 256, largest_per_bh=256,
                largest_ndim=4, t_q=64, t_k=64, block_q=16, block_k=16, batch=1, heads=1, nc_products=4,
                nc_computed=4 * 256)
    got = torch.tensor([data[f] for f in tiling.FIELDS], dtype=torch.int64)
    forward = tiling.judge(got, causal=False, blocks=(16, 16), own=(64, 64), grader_set=True, diagnoses=FD)
    assert not forward.ok and forward.diagnosis.id == "flash_measured_values_differ"
    assert forward.reason == tiling.MEASURED_VALUES and "graded like the others" in forward.message
    backward = tiling.judge_backward(got, causal=False, blocks=(16, 16), own=(64, 64), grader_set=True,
                                     diagnoses=fab.ROLES)
    assert not backward.ok and backward.diagnosis.id == "fab_measured_values_differ"


def test_a_value_mistake_is_named_without_the_measured_answer(fork_server) -> None:
    result = check_file(FLASH / "bug_missing_scale__no_sqrt.py", "flash_attention", 3, Limits(), pool=fork_server)
    assert result.diagnosis.id == "missing_scale", result.diagnosis_detail
    assert "measured_values" not in result.diagnosis_detail


@pytest.mark.parametrize("causal", [False, True])
def test_the_answer_check_of_a_measured_call(causal: bool) -> None:
    from drill.judge import tiling

    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 1, t, 8, generator=gen) for t in (40, 25, 25))
    g = torch.randn(2, 1, 40, 8, generator=gen)
    out, lse = tiling._forward(q, k, v, causal)
    assert tiling._answers((out, lse), q, k, v, None, causal)
    assert not tiling._answers((out, lse + 1e-2), q, k, v, None, causal)
    assert not tiling._answers(out, q, k, v, None, causal) and not tiling._answers((out,), q, k, v, None, causal)
    grads = tiling._gradients(q, k, v, g, causal)
    assert tiling._answers(tuple(t.float() for t in grads), q, k, v, g, causal)
    assert not tiling._answers((grads[0], grads[1] * 1.01, grads[2]), q, k, v, g, causal)
