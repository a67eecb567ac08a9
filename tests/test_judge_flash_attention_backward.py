"""flash_attention_backward grading: autograd's expectations, cases that reach the contract, mistakes that show and
differ, the tracker that sees P, dP and dS, the causal products ratio, the extra-passes advisory, the kernels trapped.

Fixture verdicts (every good_ style passes, every bug_ is named) are checked
by test_judge_fixtures.py. Here: the tiled reference agrees with autograd of
the naive forward on every case; rows with lse = -inf get zero gradients;
each variant fails a test and no two ids coincide; the tracker, in-process,
counts a full dP (no q/k label of its own) and a row sum of P * dP, but not a
dP tile as a q.k product; judge_backward's verdicts on given measurements;
through the fork server, a three-pass file passes with the fab_extra_passes
advisory and fails under --strict, and the aten attention backward kernels
are forbidden_op with the policy off.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from drill.judge import audit, tiling
from drill.judge.check import _tolerance_of, check_file
from drill.judge.compare import compare
from drill.judge.runner import Limits
from drill.judge.specs import flash_attention_backward as fab
from drill.reference import flash_attention_backward_tiled

SEEDS = (0, 1, 7, 20261201)
TOL = _tolerance_of(fab.SPEC)
LIMITS = Limits(timeout_s=120, cpu_s=120, memory_mb=2048)
ROOT = Path(__file__).parent / "fixtures" / "solutions" / "flash_attention_backward"


def _prepared(seed: int) -> list:
    cases = [c for c in fab.make_cases(seed) if c.kind != tiling.KIND]
    for c in cases:
        c.ctx.setdefault("blocks", (64, 64))  # the starter's own tiles, as prepare() hands them
        c.expected, c.expected_grads = fab.reference(c)
    return cases


@pytest.mark.parametrize("seed", SEEDS)
def test_the_tiled_reference_agrees_with_autograd_on_every_case(seed: int) -> None:
    for case in _prepared(seed):
        a = case.args
        bq, bk = case.ctx["blocks"]
        ours = flash_attention_backward_tiled(*(a[n].float() for n in ("q", "k", "v", "out")), a["lse"],
                                              a["grad_out"].float(), a["causal"], block_q=bq, block_k=bk)
        got = ours[case.ctx["pick"]]
        assert torch.isfinite(case.expected).all(), case.name
        assert torch.allclose(got, case.expected, rtol=1e-3, atol=1e-3 * max(1.0, float(got.abs().max()))), case.name


def test_a_query_that_sees_no_key_gets_zero_gradients() -> None:
    case = next(c for c in _prepared(3) if "rows with no visible key" in c.name and c.ctx["pick"] == 0)
    a = case.args
    dead = torch.isneginf(a["lse"])
    assert bool(dead.any()) and bool((~dead).any())
    assert torch.equal(case.expected[dead], torch.zeros_like(case.expected[dead]))


@pytest.mark.parametrize("seed", SEEDS)
def test_the_cases_reach_what_the_contract_names(seed: int) -> None:
    cases = fab.make_cases(seed)
    values = [c for c in cases if c.kind != tiling.KIND]
    assert {c.ctx["what"] for c in values} == {"dq", "dk", "dv"}
    assert {c.args["q"].dtype for c in values} == {torch.float32, torch.float16, torch.bfloat16}
    assert all(c.args["lse"].dtype == torch.float32 and c.args["out"].dtype == c.args["q"].dtype for c in values)
    shapes = [(c.args["q"].shape[-2], c.args["k"].shape[-2], c.args["causal"]) for c in values]
    assert any(tq != tk for tq, tk, _ in shapes)
    assert any(c and tq < tk for tq, tk, c in shapes) and any(c and tq > tk for tq, tk, c in shapes)
    assert any(c and tq == tk for tq, tk, c in shapes) and any(c and tk == tq + 1 for tq, tk, c in shapes)
    assert any(tq % 16 and tk % 16 for tq, tk, _ in shapes)  # no tile divides the lengths
    assert any(bool(torch.isneginf(c.args["lse"]).any()) for c in values)
    set_by_grader = {tuple(c.module_attrs.values()) for c in values if c.module_attrs}
    assert {(16, 16), (16, 32), (32, 16)} <= set_by_grader and any(not c.module_attrs for c in values)
    tilings = [c for c in cases if c.kind == tiling.KIND]
    assert {bool(c.extra["causal"]) for c in tilings} == {True, False} and all(c.extra["backward"] for c in tilings)
    assert any(not c.module_attrs for c in tilings) and any(c.module_attrs for c in tilings)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_mistake_shows_and_no_two_are_alike(seed: int) -> None:
    cases = _prepared(seed)
    outputs = {}
    for bug in fab.SPEC.bugs:
        outs = []
        for c in cases:
            produced = bug.fn(c)
            outs.append(produced if isinstance(produced, tuple) or produced is None else (produced, None))
        outputs[bug.label] = outs
        failing = [c.name for c, o in zip(cases, outs, strict=True)
                   if o is not None and not compare(o[0], c.expected, TOL(c), ignore=o[1]).ok]
        assert failing, bug.label
    ids = {b.label: b.diagnosis.id for b in fab.SPEC.bugs}

    def differ(x, y, c):
        if x is None or y is None:
            return (x is None) != (y is None)
        ignore = None if x[1] is None and y[1] is None else (x[1] if y[1] is None else y[1] if x[1] is None
                                                             else x[1] | y[1])
        return not compare(x[0], y[0], TOL(c), ignore=ignore).ok

    for x, ox in outputs.items():
        for y, oy in outputs.items():
            if ids[x] < ids[y]:
                assert any(differ(a, b, c) for a, b, c in zip(ox, oy, cases, strict=True)), (x, y)


# ---------------------------------------------------------------- the tracker, in-process


def _track(fn, t_q: int = 40, t_k: int = 50):
    gen = torch.Generator().manual_seed(0)
    q, k, v, g = (torch.randn(1, 1, t, 16, generator=gen) for t in (t_q, t_k, t_k, t_q))
    sources = {audit._ptr(q): "Q", audit._ptr(k): "K", audit._ptr(v): "V", audit._ptr(g): "G"}
    tracker = audit.ScoreTracker(sources, 1, lambda: (0, None))
    with torch.no_grad(), tracker:
        fn(q, k, v, g)
    return tracker


def test_a_full_dp_is_seen_and_a_dp_tile_is_no_product() -> None:
    whole = _track(lambda q, k, v, g: (q[:, :, :16] @ k[:, :, :16].mT, g @ v.mT))
    assert whole.largest["per_bh"] == 40 * 50 and whole.largest["kind"] == 2
    assert whole.products == 1  # the q.k tile only: dP is not a q.k product
    tile = _track(lambda q, k, v, g: (q[:, :, :16] @ k[:, :, :16].mT, g[:, :, :16] @ v[:, :, :16].mT))
    assert tile.largest["per_bh"] == 256 and tile.products == 1
    summed = _track(lambda q, k, v, g: ((g[:, :, :, None] * v[:, :, None]).sum(-1)))  # dP by a sum of products
    assert summed.largest["per_bh"] == 40 * 50


def test_a_row_sum_of_p_times_dp_is_counted() -> None:
    def d_from_p(q, k, v, g):
        p = torch.exp(q[:, :, :16] @ k.mT / 4.0)
        return (p * (g[:, :, :16] @ v.mT)).sum(-1)

    assert _track(d_from_p).d_from_p == 1
    right = _track(lambda q, k, v, g: (torch.exp(q[:, :, :16] @ k[:, :, :16].mT) * (g[:, :, :16] @ v[:, :, :16].mT))
                   @ k[:, :, :16])
    assert right.d_from_p == 0


def _measure(**over) -> torch.Tensor:
    data = {f: 0 for f in tiling.FIELDS}
    data.update(version=tiling.VERSION, values=1, score_storages=8, products=8, computed=8 * 256, largest_per_bh=256,
                largest_line=12, largest_dtype=1, largest_ndim=4, shape0=1, shape1=1, shape2=16, shape3=16,
                t_q=69, t_k=69, block_q=16, block_k=16, batch=1, heads=1, largest_kind=1, nc_products=25,
                nc_computed=69 * 69)
    data.update(over)
    return torch.tensor([data[f] for f in tiling.FIELDS], dtype=torch.int64)


def _judge(got, causal=True, blocks=(16, 16), own=(64, 64), grader_set=True):
    return tiling.judge_backward(got, causal=causal, blocks=blocks, own=own, grader_set=grader_set,
                                 diagnoses=fab.ROLES)


def test_the_causal_products_ratio_is_bounded_by_the_visible_tiles() -> None:
    _, tiles, total = tiling.min_scores(69, 69, 16, 16)
    assert (tiles, total) == (15, 25)
    assert _judge(_measure(products=15)).ok
    assert _judge(_measure(products=30, nc_products=50)).ok  # two passes each: the same ratio
    assert _judge(_measure(products=15 * 16, nc_products=25 * 16)).ok  # a finer loop
    verdict = _judge(_measure(products=16))
    assert not verdict.ok and verdict.diagnosis.id == "fab_causal_tiles_not_skipped" and "15/25" in verdict.message
    assert _judge(_measure(products=25), causal=False).ok


def test_memory_verdicts_name_full_p_d_from_p_and_blocks_at_import() -> None:
    full = _judge(_measure(largest_per_bh=69 * 69, shape2=69, shape3=69, largest_kind=2))
    assert full.diagnosis.id == "fab_full_p" and "dP" in full.message and "line 12" in full.message
    rows = _judge(_measure(largest_per_bh=16 * 69, shape2=16, shape3=69, d_from_p=1))
    assert rows.diagnosis.id == "fab_d_from_p"
    own = _judge(_measure(largest_per_bh=64 * 64, shape2=64, shape3=64, t_q=100, t_k=100), causal=False)
    assert own.diagnosis.id == "fab_blocks_at_import"
    for bad in (_measure(products=0), _measure(version=1), torch.zeros(3), _measure(nc_products=0)):
        verdict = _judge(bad)
        assert not verdict.ok and verdict.diagnosis.id == "fab_tiling_unmeasured"


def test_extra_passes_are_counted_in_products_and_scores() -> None:
    assert tiling.extra_passes(_measure(products=30, computed=2 * 2415), True) is None
    note = tiling.extra_passes(_measure(products=45, computed=3 * 2415), True)
    assert note and "two passes" in note
    assert tiling.extra_passes(_measure(products=45 * 16, computed=2415), True) is None  # finer loop, one pass


# ---------------------------------------------------------------- through the fork server


@pytest.fixture(scope="module")
def pool(fork_server):
    return fork_server


def test_three_passes_pass_with_the_advisory_and_fail_under_strict(pool) -> None:
    path = ROOT / "good_three_passes_advisory.py"
    plain = check_file(path, "flash_attention_backward", seed=5, limits=LIMITS, pool=pool)
    assert plain.status == "pass" and any(a.startswith("fab_extra_passes") for a in plain.advisories)
    strict = check_file(path, "flash_attention_backward", seed=5, limits=LIMITS, pool=pool, strict=True)
    assert strict.status == "fail" and "--strict" in strict.diagnosis_detail
    one_pass = check_file(ROOT / "good_kv_outer.py", "flash_attention_backward", seed=5, limits=LIMITS, pool=pool,
                          strict=True)
    assert one_pass.status == "pass" and not one_pass.advisories


KERNELS = {
    "flash backward": "torch.ops.aten._scaled_dot_product_flash_attention_backward(g, q, k, v, out, lse, None, None, "
                      "0, 0, 0.0, False, None, None)",
    "efficient backward": "torch.ops.aten._efficient_attention_backward(g, q, k, v, None, out, None, None, 0, 0, lse, "
                          "0.0, None, None, 0)",
}
BODY = """import torch

BLOCK_Q = 64
BLOCK_K = 64


def flash_attention_backward(q, k, v, out, lse, grad_out, causal=False):
    g = grad_out
    grads = {call}
    return grads[0], grads[1], grads[2]
"""


@pytest.mark.parametrize("way", sorted(KERNELS))
def test_backward_kernels_are_trapped_at_run_time(way: str, tmp_path: Path, pool) -> None:
    path = tmp_path / "flash_attention_backward.py"
    path.write_text(BODY.format(call=KERNELS[way]))
    on = check_file(path, seed=2, limits=LIMITS, pool=pool)
    assert on.status == "fail" and on.diagnosis.id == "policy_violation", (way, on.diagnosis_detail)
    off = check_file(path, seed=2, limits=LIMITS, pool=pool, policy=False)
    assert off.status == "fail" and off.diagnosis.id == "forbidden_op", (way, off.diagnosis_detail)


def test_the_reference_matches_the_unfused_closed_form() -> None:
    from drill.reference import attention_backward

    gen = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 2, t, 8, generator=gen) for t in (37, 21, 21))
    g = torch.randn(2, 2, 37, 8, generator=gen)
    from drill.reference.flash import attention_lse

    out, lse = attention_lse(q, k, v, True, impl="math")
    mask = torch.ones(37, 21, dtype=torch.bool).tril(21 - 37)
    want = attention_backward(q, k, v, g, mask)
    got = flash_attention_backward_tiled(q, k, v, out, lse, g, True, block_q=16, block_k=16)
    for a, b in zip(got, want, strict=True):
        assert torch.allclose(a, b, atol=1e-5), float((a - b).abs().max())
    assert math.isinf(float(lse[0, 0, 0]))
