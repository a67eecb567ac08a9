"""The advisory audits: memory (gqa) and work (kv_cache).

The memory audit must agree with what each gqa fixture's docstring says
(MATERIALISES or not), the work audit must flag exactly the solution that
re-projects its past tokens, and neither may fail a check unless --strict.
The measuring halves run in-process here (they are plain functions of the
learner's module); one end-to-end run per audit goes through the child.
"""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path

import pytest
import torch

from drill.judge import audit, chain
from drill.judge.check import check_file
from drill.judge.runner import Limits
from drill.judge.specs import gqa, kv_cache

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions"
HOST = types.SimpleNamespace(
    resolve_attr=lambda obj, path, owner: [obj := getattr(obj, part) for part in path.split(".")][-1],
    extension=lambda name: chain,
)


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"fixture_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("path", sorted((SOLUTIONS / "gqa").glob("good_*.py")), ids=lambda p: p.stem)
def test_memory_audit_agrees_with_the_docstring(path: Path) -> None:
    materialises = "MATERIALISES" in (_load(path).__doc__ or "")
    data = audit.run(gqa.SPEC.audit, _load(path), HOST)
    lines, advice, measured = audit.judge("gqa_memory", data)
    assert measured, lines
    assert bool(data["expanded"]) == materialises, lines
    assert bool(advice) == materialises
    assert data["peak_bytes"] > 0 and data["baseline_peak_bytes"] > 0
    assert "peak" in lines[0]
    if materialises:  # the advice carries numbers the learner can act on
        assert "KB" in advice[0] and "n_kv_heads, group" in advice[0]


@pytest.mark.parametrize("path", sorted((SOLUTIONS / "kv_cache").glob("good_*.py")), ids=lambda p: p.stem)
def test_work_audit_flags_only_recomputation(path: Path) -> None:
    data = audit.run(kv_cache.SPEC.audit, _load(path), HOST)
    lines, advice, measured = audit.judge("kv_work", data)
    assert measured, lines
    recomputes = "inefficient" in path.stem
    assert bool(advice) == recomputes, lines
    assert all(f > 0 for f in data["flops"]) and data["flops"] == sorted(data["flops"])
    assert "linear" in lines[0] and "faster than linear" not in lines[0]
    if recomputes:
        assert "re-projected" in advice[0] and max(data["rows"]["k_proj"]) > 1
    else:
        assert data["rows"]["k_proj"] == [1] * len(data["lengths"])


@pytest.mark.parametrize("stem", ["good_repeat_interleave", "good_expand_reshape", "good_index_select",
                                  "good_index_floor_div"])
def test_memory_audit_shows_the_copies_as_the_learner_made_them(stem: str) -> None:
    """repeat_interleave decomposes into unsqueeze + expand + clone + flatten: the storage is allocated as
    (B, n_kv_heads, group, T, d_head), but the learner's tensor is (B, n_heads, T, d_head), and that is shown."""
    data = audit.run(gqa.SPEC.audit, _load(SOLUTIONS / "gqa" / f"{stem}.py"), HOST)
    c = data["config"]
    learner_shape = [c["batch"], c["n_heads"], c["seq"], c["d_model"] // c["n_heads"]]
    assert [(e["what"], e["shape"]) for e in data["expanded"]] == [("K", learner_shape), ("V", learner_shape)]
    lines, _advice, _ = audit.judge("gqa_memory", data)
    assert f"K {tuple(learner_shape)}" in lines[1] and "inside" not in lines[1], lines


def test_a_copy_the_learner_never_holds_says_which_call_made_it() -> None:
    """matmul broadcasting an unsqueezed K clones it for itself: that tensor dies inside the `@`, so its
    shape is the op's and the line says where it was made."""
    data = audit.run(gqa.SPEC.audit, _load(SOLUTIONS / "gqa" / "good_broadcast_matmul.py"), HOST)
    assert data["expanded"] and all(e.get("inside") == "matmul" for e in data["expanded"]), data["expanded"]
    lines, _advice, _ = audit.judge("gqa_memory", data)
    assert "(made inside matmul)" in lines[1]


def test_the_tracker_is_the_shared_storage_counter() -> None:
    """One per-storage byte counter (drill/storage_bytes.py) under the bench's CPU audit and the gqa audit."""
    from drill.bench.memory import LiveBytes
    from drill.judge import runner

    assert [c.__name__ for c in audit.StorageTracker.__mro__[:2]] == ["StorageTracker", "StorageBytes"]
    assert audit.StorageTracker.__mro__[1].__module__ == "_drill_storage_bytes"  # loaded by path, as in the child
    assert LiveBytes.__name__ == "StorageBytes" and "storage_bytes.py" in "".join(runner.DRIVER_FILES)


def test_storage_tracker_counts_peak_and_frees() -> None:
    with torch.no_grad(), audit.StorageTracker() as t:
        a = torch.ones(1024)  # 4 KB
        b = a * 2  # 8 KB live
        del a
        c = b + 1  # 8 KB live again (a was freed)
        del b, c
    assert t.peak == 8192 and t.current == 0 and t.total == 3 * 4096


def test_quadratic_recompute_module_is_called_out() -> None:
    """A correct module that re-runs full attention over its history each step (the bench fixture)."""
    quadratic = Path(__file__).parent / "fixtures" / "bench" / "kv_cache_quadratic.py"
    if not quadratic.exists():
        pytest.skip("bench fixture not present")
    data = audit.run(kv_cache.SPEC.audit, _load(quadratic), HOST)
    lines, advice, _ = audit.judge("kv_work", data)
    assert "faster than linear" in lines[0]
    assert any("faster than linearly" in a for a in advice) and any("re-projected" in a for a in advice)


def test_quadratic_work_is_called_out() -> None:
    data = {"lengths": [16, 32, 48, 64], "flops": [16**2, 32**2, 48**2, 64**2], "rows": {"q_proj": [1] * 4,
            "k_proj": [1] * 4, "v_proj": [1] * 4}}
    lines, advice, measured = audit.judge("kv_work", data)
    assert "faster than linear" in lines[0] and advice and measured


def test_malformed_measurements_do_not_crash() -> None:
    lines, advice, measured = audit.judge("gqa_memory", {"config": {}})
    assert "unreadable" in lines[0] and advice == [] and not measured


def test_advisories_fail_only_under_strict(fork_server) -> None:
    rep = SOLUTIONS / "gqa" / "good_repeat_interleave.py"
    lean = SOLUTIONS / "gqa" / "good_grouped_einsum.py"
    waste = SOLUTIONS / "kv_cache" / "good_recompute_inefficient.py"
    pool = fork_server
    plain = check_file(rep, "gqa", 2, Limits(), pool=pool)
    strict = check_file(rep, "gqa", 2, Limits(), pool=pool, strict=True)
    ok = check_file(lean, "gqa", 2, Limits(), pool=pool, strict=True)
    kv = check_file(waste, "kv_cache", 2, Limits(), pool=pool, strict=True)
    skipped = check_file(waste, "kv_cache", 2, Limits(), pool=pool, strict=True, audit=False)
    assert plain.status == "pass" and any("materialised" in line for line in plain.audit) and plain.advisories
    assert strict.status == "fail" and "--strict" in strict.diagnosis_detail
    assert ok.status == "pass" and ok.audit and not ok.advisories
    assert kv.status == "fail" and any("re-projected" in a for a in kv.advisories)
    assert skipped.status == "pass" and not skipped.audit
