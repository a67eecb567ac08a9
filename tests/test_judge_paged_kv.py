"""paged_kv grading: the paged reference agrees with the contiguous oracle, the scripts reach every clause, every
mistake shows, and the checks beyond the values (layout through the learner's table, block counts, storage
beside the pools, the exception types) fail where the contract says.

Fixture verdicts are checked for every file by test_judge_fixtures.py; here:
the reference PagedKVCache, run through the child's driver, gives the oracle's
outputs on every seed; the oracle's attention is torch's SDPA over the
contiguous K/V with the heads repeated; each seed's scripts hold boundary
crossing chunks, lengths on and off a multiple of block_size, GQA and MHA,
refused appends, misuses, three id types and three dtypes; every known
mistake fails a case on every seed and no two mistakes give the same outputs;
a table that lies about the layout, a block count one too many, a copy
beside the pools and a view of the pools are judged as the contract says; a
misuse that raises another exception is told which one the contract wants.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from drill.judge import paged as paged_kind
from drill.judge.check import _tolerance_of, check_file
from drill.judge.compare import compare
from drill.judge.runner import Limits
from drill.judge.specs import paged_kv as pk
from drill.reference.paged_kv import PagedKVCache, paged_attention

SOLUTIONS = Path(__file__).parent / "fixtures" / "solutions" / "paged_kv"
SEEDS = (0, 1, 7, 20261201)
TOL = _tolerance_of(pk.SPEC)
LIMITS = Limits(timeout_s=90, cpu_s=90, memory_mb=2048)


def _prepared(seed: int) -> list:
    cases = pk.make_cases(seed)
    for c in cases:
        c.expected, _ = pk.reference(c)
    return cases


def _ok(case, got) -> bool:
    if case.judge is not None:
        return case.judge(got).ok
    return compare(got, case.expected, TOL(case), dtype=case.out_dtype).ok


def _run(cls, case, attend=paged_attention):
    return pk.drive(cls, attend, case)[case.extra["returns"]]


@pytest.mark.parametrize("seed", SEEDS)
def test_the_paged_reference_gives_the_contiguous_oracles_outputs(seed: int) -> None:
    for case in _prepared(seed):
        assert _ok(case, _run(PagedKVCache, case)), case.name


def test_the_oracles_attention_is_sdpa_over_the_contiguous_cache() -> None:
    g = torch.Generator().manual_seed(0)
    bs, n_kv, d, group = 3, 2, 8, 3
    extra = {"pool": [12, bs, n_kv, d, "float32"], "returns": "attn", "ops": [
        {"op": "allocate", "id": "x"}, {"op": "append", "id": "x", "k": "k", "v": "v"},
        {"op": "attend", "ids": ["x", "x"], "q": "q"}]}
    t = {"k": torch.randn(10, n_kv, d, generator=g), "v": torch.randn(10, n_kv, d, generator=g),
         "q": torch.randn(2, n_kv * group, d, generator=g)}
    got = pk.oracle(extra, t)["attn"]
    k = t["k"].repeat_interleave(group, dim=1).transpose(0, 1)  # (H, T, d)
    v = t["v"].repeat_interleave(group, dim=1).transpose(0, 1)
    want = torch.stack([F.scaled_dot_product_attention(t["q"][i][:, None], k, v)[:, 0] for i in range(2)])
    assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()


@pytest.mark.parametrize("seed", SEEDS)
def test_every_seeds_scripts_reach_every_clause(seed: int) -> None:
    cases = pk.make_cases(seed)
    scripts = {id(c.extra["ops"]): c for c in cases}
    dtypes = {c.extra["pool"][4] for c in scripts.values()}
    assert dtypes == {"float32", "float16", "bfloat16"}
    groups, expects, ids, lengths, crossing, stale = set(), set(), set(), [], False, False
    for c in scripts.values():
        nb, bs, n_kv = c.extra["pool"][:3]
        live: dict = {}
        freed, refilled = 0, set()
        for op in c.extra["ops"]:
            sid = paged_kind.seq_id(op.get("id"))
            if op.get("expect"):
                expects.add((op["op"], op["expect"]))
                continue
            if op["op"] == "allocate":
                live[sid] = 0
                ids.add(type(sid))
                if freed:
                    refilled.add(sid)
            elif op["op"] == "append":
                n = c.args[op["k"]].shape[0]
                crossing |= live[sid] // bs != (live[sid] + n - 1) // bs and (live[sid] + n) - live[sid] > 1
                live[sid] += n
            elif op["op"] == "attend":
                groups.add(c.args[op["q"]].shape[1] // n_kv)
            elif op["op"] == "free":
                lengths.append((live.pop(sid), bs))
                freed = max(freed, lengths[-1][0])
        lengths += [(t, bs) for t in live.values()]
        # a refill shorter than the freed sequence, ending inside a block: reused slots past its length are stale
        stale |= any(live.get(r, 0) % bs and live.get(r, 0) < freed for r in refilled)
    assert crossing
    assert {1, 2, 3} <= groups  # MHA and two GQA groupings
    assert any(t % bs == 0 for t, bs in lengths) and any(t % bs for t, bs in lengths)
    assert {("append", "RuntimeError"), ("append", "KeyError"), ("gather", "KeyError"), ("free", "KeyError"),
            ("allocate", "ValueError")} <= expects
    assert ids == {str, int, tuple}
    assert stale
    fill = next(c for c in cases if c.name.startswith("fill") and c.ctx["returns"] == "raises")
    assert int((pk.reference(fill)[0] == paged_kind.EXCEPTIONS.index("RuntimeError")).sum()) == 2  # both refused


@pytest.mark.parametrize("seed", SEEDS)
def test_every_mistake_shows_and_no_two_mistakes_look_alike(seed: int) -> None:
    cases = [c for c in _prepared(seed) if c.judge is None]
    outputs = {}
    for did, label, fn in pk.PAGED_VARIANTS:
        got = [fn(c) for c in cases]
        assert any(g is not None and not _ok(c, g) for c, g in zip(cases, got, strict=True)), (did, label)
        outputs.setdefault(did, []).append(got)
    ids = list(outputs)
    for i, a in enumerate(ids):
        for b in ids[i + 1:]:
            for got_a in outputs[a]:
                for got_b in outputs[b]:
                    same = all(x is not None and y is not None and x.shape == y.shape and torch.equal(
                        x.nan_to_num(7.0), y.nan_to_num(7.0)) for x, y in zip(got_a, got_b, strict=True))
                    assert not same, (a, b)


class _LyingTable(PagedKVCache):
    """Right values from gather, but a block table in another order than the pools hold."""

    def block_table(self, seq_id):
        return list(reversed(super().block_table(seq_id)))


class _OneMore(PagedKVCache):
    """A spare block kept at the end of every table (values unchanged)."""

    def append(self, seq_id, k, v):
        super().append(seq_id, k, v)
        table = self._tables[seq_id]
        if len(table) == math.ceil(self._lengths[seq_id] / self.block_size) and self._free:
            table.append(self._free.pop())


class _Shadow(PagedKVCache):
    def append(self, seq_id, k, v):
        super().append(seq_id, k, v)
        self.log = getattr(self, "log", [])
        self.log.append(k.clone())
        self.all_keys = torch.cat(self.log)


class _ViewsAndTable(PagedKVCache):
    """Views of the pools and a small table tensor reachable from the cache: not storage beside the pools."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.flat_k = self.k_pool.view(-1, *self.k_pool.shape[2:])
        self.owner = torch.full((self.num_blocks,), -1, dtype=torch.long)


def _case(seed: int, returns: str, name: str = "three"):
    """The first case of that output and script (storage is judged, every other output compared)."""
    return next(c for c in _prepared(seed) if c.ctx["returns"] == returns and c.name.startswith(name)
                and (c.judge is None) == (returns != "storage"))


def test_a_table_that_does_not_describe_the_pools_fails_the_layout_only() -> None:
    layout, gather = _case(3, "layout"), _case(3, "gather")
    assert not _ok(layout, _run(_LyingTable, layout))
    assert _ok(gather, _run(_LyingTable, gather))


def test_a_spare_block_fails_the_block_count() -> None:
    blocks, attn = _case(3, "blocks"), _case(3, "attn")
    assert not _ok(blocks, _run(_OneMore, blocks))
    assert _ok(attn, _run(_OneMore, attn))


def test_storage_beside_the_pools_is_named_and_views_of_them_are_not() -> None:
    storage = _case(4, "storage")
    got = _run(_Shadow, storage)
    verdict = storage.judge(got)
    assert not verdict.ok and verdict.diagnosis.id == "paged_shadow_copy" and "k_pool" in verdict.message
    assert storage.judge(_run(_ViewsAndTable, storage)).ok
    assert storage.judge(_run(PagedKVCache, storage)).ok


def test_the_driver_reads_hashable_ids_and_reports_each_exception() -> None:
    assert paged_kind.seq_id(["req", [1, 2]]) == ("req", (1, 2))
    assert paged_kind.EXCEPTIONS[paged_kind.exception_code(KeyError("x"))] == "KeyError"
    assert paged_kind.EXCEPTIONS[paged_kind.exception_code(IndexError("x"))] == "IndexError"

    class Custom(RuntimeError):
        pass

    assert paged_kind.EXCEPTIONS[paged_kind.exception_code(Custom())] == "RuntimeError"  # a subclass is fine


def _grade(tmp_path: Path, text: str, fork_server, seed: int = 3):
    path = tmp_path / "paged_kv.py"
    path.write_text(text)
    return check_file(path, "paged_kv", seed, LIMITS, pool=fork_server)


def test_another_exception_is_told_which_one_the_contract_wants(tmp_path: Path, fork_server) -> None:
    good = (SOLUTIONS / "good_stack_vectorised.py").read_text()
    text = good.replace('''    def free(self, seq_id):
        self.free_blocks.extend(self.tables.pop(seq_id))''', '''    def free(self, seq_id):
        if seq_id not in self.tables:
            raise IndexError(seq_id)
        self.free_blocks.extend(self.tables.pop(seq_id))''')
    assert text != good
    r = _grade(tmp_path, text, fork_server)
    assert r.status == "fail" and r.diagnosis.id == "paged_wrong_exception", (r.status, r.diagnosis)
    said = [t.message for t in r.tests if t.status != "pass" and "exception types" in t.name]
    assert said and "the contract wants KeyError, your code raised IndexError" in said[0], said


def test_exhaustion_raising_an_unlisted_type_is_named_by_its_type(tmp_path: Path, fork_server) -> None:
    good = (SOLUTIONS / "good_set_min.py").read_text()
    text = good.replace('raise RuntimeError(f"need', 'raise MemoryError(f"need')
    assert text != good
    r = _grade(tmp_path, text, fork_server)
    said = [t.message for t in r.tests if t.status != "pass" and "exception types" in t.name]
    assert r.diagnosis.id == "paged_wrong_exception" and said, (r.diagnosis, said)
    assert "the contract wants RuntimeError, your code raised MemoryError" in said[0], said


def test_a_failure_is_said_as_the_op_the_sequence_and_the_position(tmp_path: Path, fork_server) -> None:
    """Not an element index of a concatenation the learner never built: the op, the id, the position."""
    r = _grade(tmp_path, (SOLUTIONS / "bug_paged_eager_block__floor_plus_one.py").read_text(), fork_server)
    said = {t.name.rsplit(": ", 1)[1]: t.message for t in r.tests if t.status != "pass"}
    assert "after op " in said["block counts and num_free_blocks"] and (
        "num_free_blocks()" in said["block counts and num_free_blocks"]
        or "block count" in said["block counts and num_free_blocks"]), said
    assert "your code raised RuntimeError, the contract wants it to return" in said["the exceptions"], said
    assert "got 2, expected -1" not in r.diagnosis_detail, r.diagnosis_detail  # codes are said as exceptions
    r = _grade(tmp_path, (SOLUTIONS / "bug_paged_logical_as_physical__pool_index.py").read_text(), fork_server)
    gather = [t.message for t in r.tests if t.status != "pass" and t.name.endswith("gather's (k, v)")]
    assert gather and all(re.search(r"; the worst is op \d+, gather\(.+\), position \d+$", m) for m in gather), gather
    attn = [t.message for t in r.tests if t.status != "pass" and t.name.endswith("paged_attention's outputs")]
    assert attn and all(re.search(r"; the worst is op \d+, the query of sequence .+$", m) for m in attn), attn


def test_the_cases_of_one_script_run_it_once() -> None:
    """Each script's seven reports come from one run (the child and every known mistake), not seven."""
    made = []

    class Counted(PagedKVCache):
        def __init__(self, *args, **kwargs):
            made.append(1)
            super().__init__(*args, **kwargs)

    cases = _prepared(5)
    scripts = {repr([(k, v) for k, v in c.extra.items() if k != "returns"]) for c in cases}
    assert all(_ok(c, _run(Counted, c)) for c in cases)
    assert len(made) == len(scripts) < len(cases), (len(made), len(scripts), len(cases))
    other = next(c for c in cases if c.extra["returns"] == "attn")
    changed = {name: t + 1 if t.is_floating_point() else t for name, t in other.args.items()}
    pk.drive(Counted, paged_attention, replace(other, args=changed))  # other values: run again
    assert len(made) == len(scripts) + 1


def test_the_starter_is_not_implemented(fork_server) -> None:
    from drill.paths import exercises_dir

    r = check_file(exercises_dir() / "paged_kv.py", "paged_kv", 2, LIMITS, pool=fork_server)
    assert r.status == "fail" and r.diagnosis.id == "not_implemented", (r.status, r.diagnosis)


def test_sdpa_is_forbidden(tmp_path: Path, fork_server) -> None:
    good = (SOLUTIONS / "good_stack_vectorised.py").read_text()
    mine = ('        w = torch.softmax(torch.einsum("hd,thd->ht", q[i].float(), k) / math.sqrt(d_head), dim=-1)\n'
            '        out[i] = torch.einsum("ht,thd->hd", w, v).to(q.dtype)')
    sdpa = ("        out[i] = torch.nn.functional.scaled_dot_product_attention(\n"
            "            q[i].float()[:, None], k.transpose(0, 1), v.transpose(0, 1))[:, 0].to(q.dtype)")
    text = good.replace(mine, sdpa)
    assert text != good
    r = _grade(tmp_path, text, fork_server)
    assert r.status == "fail" and r.diagnosis.id == "forbidden_op", (r.status, r.diagnosis)
