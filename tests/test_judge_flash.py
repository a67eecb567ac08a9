"""flash_attention: the tiling measurement (tracker and judge), the kernels it forbids, the tiles the grader sets.

The fixture verdicts themselves (every good_ style passes, every bug_ is
named) are in test_judge_fixtures.py and, over several seeds, in
test_judge_wave2_seeds.py. Here: what the tracker counts on known code
in-process, what the judge says about given measurements, and, through the
fork server, that the aten SDPA kernels (some return lse) are blocked below
Python with the static policy off, and that a missing or invalid tile size
is refused in one sentence.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from drill.judge import audit, tiling
from drill.judge.check import check_file
from drill.judge.pool import ChildPool
from drill.judge.runner import Limits
from drill.judge.specs._flash_bugs import FD

ROOT = Path(__file__).parent / "fixtures" / "solutions" / "flash_attention"
LIMITS = Limits(timeout_s=60, cpu_s=60, memory_mb=2048)


def _track(fn, t_q: int = 40, t_k: int = 50, b: int = 1, h: int = 1):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, h, t, 16, generator=gen) for t in (t_q, t_k, t_k))
    tracker = audit.ScoreTracker({audit._ptr(q): "Q", audit._ptr(k): "K"}, b * h, lambda: (0, None))
    with torch.no_grad(), tracker:
        fn(q, k, v)
    return tracker


def _tiled(q, k, v, bq=16, bk=16):
    for q0 in range(0, q.shape[-2], bq):
        acc = 0
        for k0 in range(0, k.shape[-2], bk):
            s = q[:, :, q0:q0 + bq] @ k[:, :, k0:k0 + bk].transpose(-2, -1) / 4.0
            p = torch.exp(s - s.amax(-1, keepdim=True))
            acc = acc + p @ v[:, :, k0:k0 + bk]
    return acc


def test_tracker_sees_each_tile_and_nothing_bigger() -> None:
    t = _track(_tiled)
    assert t.largest["per_bh"] == 16 * 16 and t.products == 3 * 4  # 40 queries, 50 keys: 3 x 4 tiles
    assert t.computed == 40 * 50  # every score computed once


def test_tracker_names_the_full_matrix_in_every_form() -> None:
    forms = {
        "matmul": lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1), -1) @ v,
        "einsum": lambda q, k, v: torch.einsum("bhqk,bhkd->bhqd", torch.einsum("bhqd,bhkd->bhqk", q, k).exp(), v),
        "broadcast product summed": lambda q, k, v: (q[..., :, None, :] * k[..., None, :, :]).sum(-1).exp() @ v,
        "tiles concatenated": lambda q, k, v: torch.cat([q @ k[:, :, i:i + 16].mT for i in range(0, 50, 16)], -1),
        "tiles written into a buffer": lambda q, k, v: _into_buffer(q, k),
        "float64 copy of the scores": lambda q, k, v: (q @ k.mT).double().softmax(-1),
        "keys split, last tile padded": lambda q, k, v: torch.cat(
            [q @ torch.nn.functional.pad(kt, (0, 0, 0, 16 - kt.shape[2])).mT for kt in k.split(16, dim=2)], -1),
        "per head, unbound": lambda q, k, v: torch.stack(
            [qh @ kh.T for qh, kh in zip(q[0].unbind(0), k[0].unbind(0), strict=True)]),
    }
    for name, fn in forms.items():
        t = _track(fn)
        assert t.largest["per_bh"] >= 40 * 50, (name, t.largest)
        assert t.products >= 1, name


def _into_buffer(q, k):
    buf = torch.empty(1, 1, 40, 50)
    for k0 in range(0, 50, 16):
        buf[:, :, :, k0:k0 + 16] = q @ k[:, :, k0:k0 + 16].mT
    return buf


def test_tracker_does_not_count_what_is_not_scores() -> None:
    """Row statistics, the output accumulator, a float causal bias and a bool mask are not scores."""

    def fn(q, k, v):
        bias = torch.zeros(40, 50).masked_fill(torch.ones(40, 50, dtype=torch.bool).triu(1), float("-inf"))
        keep = torch.ones(40, 50, dtype=torch.bool)
        out = torch.zeros(1, 1, 40, 16)
        for k0 in range(0, 50, 10):
            s = q @ k[:, :, k0:k0 + 10].mT + bias[:, k0:k0 + 10]
            s = s.masked_fill(~keep[:, k0:k0 + 10], float("-inf"))
            out = out + s.softmax(-1) @ v[:, :, k0:k0 + 10]
        return out, bias, keep

    t = _track(fn)
    assert t.largest["per_bh"] == 40 * 10 and t.products == 5


def test_batch_and_heads_divide_the_count() -> None:
    t = _track(lambda q, k, v: q @ k.mT, b=2, h=3)
    assert t.largest["per_bh"] == 40 * 50 and t.largest["numel"] == 6 * 40 * 50


def _measure(**over) -> torch.Tensor:
    data = {f: 0 for f in tiling.FIELDS}
    data.update(version=tiling.VERSION, values=1, score_storages=3, products=4, computed=4 * 256, largest_per_bh=256,
                largest_numel=256, largest_line=12, largest_dtype=1, largest_ndim=4, shape0=1, shape1=1, shape2=16,
                shape3=16, t_q=64, t_k=64, block_q=16, block_k=16, batch=1, heads=1)
    data.update(over)
    return torch.tensor([data[f] for f in tiling.FIELDS], dtype=torch.int64)


def _judge(got, causal=False, blocks=(16, 16), own=(64, 64), grader_set=True):
    return tiling.judge(got, causal=causal, blocks=blocks, own=own, grader_set=grader_set, diagnoses=FD)


def test_judge_passes_a_tile_and_fails_more_naming_shape_and_line() -> None:
    assert _judge(_measure()).ok
    big = _judge(_measure(largest_per_bh=70 * 90, shape2=70, shape3=90))
    assert not big.ok and big.diagnosis.id == "flash_not_tiled"
    assert "(1, 1, 70, 90)" in big.message and "line 12" in big.message and "16 * 16 = 256" in big.message


def test_judge_names_the_files_own_tiles_when_the_grader_set_others() -> None:
    own = _judge(_measure(largest_per_bh=64 * 64, shape2=64, shape3=64, t_q=70, t_k=90))
    assert own.diagnosis.id == "flash_blocks_ignored" and "64 x 64" in own.message
    same = _judge(_measure(largest_per_bh=64 * 64, shape2=64, shape3=64), grader_set=False, blocks=(16, 16))
    assert same.diagnosis.id == "flash_not_tiled"
    short = _judge(_measure(largest_per_bh=64 * 50, shape2=64, shape3=50, t_q=75, t_k=50))  # every key fits a tile
    assert short.diagnosis.id == "flash_not_tiled"


def test_judge_counts_causal_tiles_against_the_minimum() -> None:
    need, tiles, total = tiling.min_scores(64, 64, 16, 16)
    assert (tiles, total) == (10, 16) and need == 10 * 256
    assert tiling.min_scores(10, 40, 16, 16)[1] == 3  # T_q < T_k: the row sees every key tile
    assert tiling.min_scores(40, 10, 16, 16)[1] == 2  # query tile 0 (positions -30..-15) sees nothing
    assert _judge(_measure(computed=need, products=10), causal=True).ok
    assert _judge(_measure(computed=need + 100, products=10), causal=True).ok  # last tiles padded to full size
    assert _judge(_measure(computed=need, products=40), causal=True).ok  # finer loops, the same scores
    waste = _judge(_measure(computed=16 * 256, products=16), causal=True)
    assert waste.diagnosis.id == "flash_causal_tiles_not_skipped" and "10 of 16 tiles" in waste.message


@pytest.mark.parametrize("got", [_measure(products=0, score_storages=0), torch.zeros(3, dtype=torch.int64),
                                 _measure(version=99), torch.zeros(len(tiling.FIELDS))])
def test_judge_never_passes_what_it_could_not_measure(got) -> None:
    verdict = _judge(got)
    assert not verdict.ok and verdict.diagnosis.id == "flash_tiling_unmeasured"


# ---------------------------------------------------------------- through the child

KERNEL_CALLS = {
    "flash_for_cpu": "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)",
    "flash": "torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal)",
    "efficient": "torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, causal)",
    "cudnn": "torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal)",
    "math": "torch.ops.aten._scaled_dot_product_attention_math(q, k, v, None, 0.0, causal)",
    "functional": "torch._C._nn.scaled_dot_product_attention(q, k, v, is_causal=causal)",
}
CALLER = """import torch

BLOCK_Q = 64
BLOCK_K = 64


def flash_attention(q, k, v, causal=False):
    res = {call}
    out = res[0] if isinstance(res, (tuple, list)) else res
    return out, torch.zeros(q.shape[:-1])
"""


@pytest.fixture(scope="module")
def pool(fork_server):
    return fork_server


@pytest.mark.parametrize("kernel", sorted(KERNEL_CALLS))
def test_sdpa_kernels_are_blocked_below_python(kernel: str, tmp_path: Path, pool: ChildPool) -> None:
    path = tmp_path / "flash_attention.py"
    path.write_text(CALLER.format(call=KERNEL_CALLS[kernel]))
    off = check_file(path, "flash_attention", seed=3, limits=LIMITS, pool=pool, policy=False)
    assert off.diagnosis.id == "forbidden_op", (kernel, off.diagnosis_detail)
    assert "line 8" in off.diagnosis_detail, off.diagnosis_detail
    on = check_file(path, "flash_attention", seed=3, limits=LIMITS, pool=pool)
    assert on.diagnosis.id in ("policy_violation", "forbidden_op"), on.diagnosis_detail


def test_the_blocked_kernels_include_every_one_that_returns_lse() -> None:
    import importlib.util

    from drill.judge.spec import FORBIDDEN_ATTENTION

    spec = importlib.util.spec_from_file_location("_child_probe", Path(audit.__file__).with_name("child.py"))
    child = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(child)
    names = {n.split(".")[0] for n in child.forbidden_op_names(list(FORBIDDEN_ATTENTION))}
    for op in ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
               "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
               "_scaled_dot_product_attention_math"):
        if hasattr(torch.ops.aten, op):
            assert op in names, op


@pytest.mark.parametrize("edit, words", [
    (("BLOCK_K = 64\n", ""), "BLOCK_K is not defined"),
    (("BLOCK_Q = 64", "BLOCK_Q = 512"), "BLOCK_Q = 512 is not a power of two from 16 to 256"),
    (("BLOCK_Q = 64", "BLOCK_Q = 64.0"), "BLOCK_Q is a float"),
])
def test_tile_sizes_are_checked(edit, words: str, tmp_path: Path, pool: ChildPool) -> None:
    path = tmp_path / "flash_attention.py"
    path.write_text((ROOT / "good_online_softmax.py").read_text().replace(*edit))
    result = check_file(path, seed=3, limits=LIMITS, pool=pool)
    assert result.status == "fail" and result.diagnosis.id == "flash_block_invalid", result.diagnosis_detail
    assert words in result.diagnosis_detail


def test_a_materialised_matrix_is_reported_with_its_shape_and_line(pool: ChildPool) -> None:
    result = check_file(ROOT / "bug_flash_not_tiled__full_matrix.py", "flash_attention", seed=3, limits=LIMITS,
                        pool=pool)
    assert result.diagnosis.id == "flash_not_tiled"
    assert "line 12" in result.diagnosis_detail
    shape = re.search(r"score tensor of shape \((\d+), (\d+), \d+, \d+\)", result.diagnosis_detail)
    test = re.search(r"B=(\d+), H=(\d+)", result.diagnosis_detail)  # the whole (B, H, T_q, T_k) of the drawn sizes
    assert shape and test and shape.groups() == test.groups(), result.diagnosis_detail
    tiling_tests = [t for t in result.tests if t.name.startswith("tiling:")]
    assert tiling_tests and all(t.status == "fail" for t in tiling_tests)
    assert all(t.status == "pass" for t in result.tests if not t.name.startswith("tiling:"))


def test_values_are_named_first_and_the_tiling_listed(tmp_path: Path, pool: ChildPool) -> None:
    """The full-matrix file without its scale: the value mistake is the name, the tiling failure is listed."""
    source = (ROOT / "bug_flash_not_tiled__full_matrix.py").read_text().replace(" / math.sqrt(q.shape[-1])", "")
    path = tmp_path / "flash_attention.py"
    path.write_text(source)
    result = check_file(path, seed=3, limits=LIMITS, pool=pool)
    assert result.diagnosis.id == "missing_scale", result.diagnosis_detail
    assert "also failing: flash_not_tiled" in result.diagnosis_detail


def test_a_tiling_failure_renders_in_the_panel_and_the_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json
    import shutil

    from typer.testing import CliRunner

    from drill.cli import app

    monkeypatch.setenv("DRILL_HOME", str(tmp_path / "home"))
    target = tmp_path / "flash_attention.py"
    shutil.copy(ROOT / "bug_flash_not_tiled__row_blocks_all_keys.py", target)
    panel = CliRunner().invoke(app, ["check", str(target), "--seed", "3"])
    assert panel.exit_code == 1, panel.output
    assert "flash_not_tiled" in panel.output and "scores alive at line 16" in panel.output
    doc = json.loads(CliRunner().invoke(app, ["check", str(target), "--seed", "3", "--json"]).output)
    assert doc["diagnosis"]["id"] == "flash_not_tiled" and re.search(r"\(\d+, \d+, 64, ", doc["diagnosis"]["detail"])
    tiling_tests = [t for t in doc["tests"] if t["name"].startswith("tiling:")]
    assert tiling_tests and all(t["status"] == "fail" and t["max_abs_err"] is None for t in tiling_tests)
