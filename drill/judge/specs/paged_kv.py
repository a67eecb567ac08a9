"""Hidden tests for `paged_kv`: PagedKVCache (block pools, block tables, a free list) and paged_attention.

A scenario is a script of many calls (allocate / append / free / gather /
attention over several interleaved sequences whose ids are a str, an int and
a tuple) that the child runs on the learner's class through
drill/judge/paged.py; each scenario is graded as several "paged" cases, one
per thing the driver reports (attention outputs, gathers, the pools read
through the learner's own block tables, block counts, the exceptions, the
storage beside the pools). The expectation comes from a contiguous oracle
(one plain (T, n_kv_heads, d_head) tensor per sequence and a count of the
blocks it would hold); the known mistakes are paged caches with one flaw,
run through the same driver as the learner's file. What the scenarios hold:
- chunks of 1 .. 2 * block_size positions, round robin over three sequences,
  so appends cross block boundaries and the tables interleave; lengths that
  are exact multiples of block_size and lengths that are not;
- GQA (n_heads = 2 or 3 times n_kv_heads = 2) and MHA;
- a pool filled to its last block, an append needing two blocks when one is
  free (RuntimeError, nothing written), then one filling it, one more
  (RuntimeError with none free), a free, and a refill whose reused blocks
  still hold the freed sequence's keys past the new length;
- an unknown id (append, gather, free, and a free twice) -> KeyError, an
  allocate of a live id -> ValueError;
- fp32, fp16 and bf16 pools.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import torch

from drill.judge import paged as paged_kind
from drill.judge.spec import FORBIDDEN_ATTENTION, FORBIDDEN_ATTENTION_CLASSES, Bug, Case, Diagnosis, Spec
from drill.judge.specs._common import DTYPE_LABEL, TOLERANCES, Draw, diagnoses

TARGET = "PagedKVCache"
ATTENTION = "paged_attention"
KIND = paged_kind.KIND
WHAT = {"attn": "paged_attention's outputs", "gather": "gather's (k, v)",
        "layout": "the pools read through your block_table", "blocks": "block counts and num_free_blocks",
        "raises": "the exceptions", "storage": "no storage beside the pools"}
FLOAT_RETURNS = ("attn", "gather", "layout")
IDS = ("a", 7, ["req", 2])  # a str, an int, a tuple (JSON list)

PD = diagnoses(
    Diagnosis("paged_logical_as_physical", "The logical block index used as the physical block",
              "Position p is in logical block p // block_size of its sequence, and that block lives wherever the "
              "block table says: k_pool[table[p // block_size]]. Reading k_pool[p // block_size] works for the "
              "first sequence of a fresh pool only; every other sequence reads someone else's keys.",
              "blocks = table[p // block_size]; read k_pool[blocks, p % block_size]."),
    Diagnosis("paged_reads_stale_slots", "The last block read whole, past the sequence's length",
              "A sequence of T positions uses only T % block_size slots of its last block (all of them when T is a "
              "multiple). The other slots hold zeros, or the keys of a sequence freed earlier whose block was "
              "handed out again: attending over them adds positions that are not there.",
              "Gather exactly positions 0 .. T - 1 (torch.arange(T)), not len(table) * block_size slots."),
    Diagnosis("paged_block_not_freed", "free() does not give the blocks back",
              "Freeing a sequence must return every block of its table to the free pool, or the pool leaks until "
              "an append that should fit raises out of blocks (and num_free_blocks never goes up).",
              "In free: self.free_blocks.extend(table), then forget the id."),
    Diagnosis("paged_boundary_missed", "No new block at a block boundary: a position overwrites another",
              "The position p with p % block_size == 0 is the first slot of a new block. Without taking one there "
              "it lands in the last block's slot 0, on top of an earlier position, and the block count is one "
              "short.",
              "Take a free block whenever p // block_size == len(table), then write slot p % block_size of it."),
    Diagnosis("paged_eager_block", "A block taken one position early",
              "A sequence of T positions holds exactly ceil(T / block_size) blocks. Taking the next one as soon as "
              "a block is full (T // block_size + 1) holds a block no position uses yet, at every multiple of "
              "block_size, and runs out of blocks one sequence too early.",
              "needed = math.ceil((T + T_new) / block_size) - len(table)."),
    Diagnosis("paged_partial_append", "An append that runs out of blocks writes part of its positions",
              "When the blocks an append needs are not all free, it must raise before writing anything: the "
              "sequence keeps its length, its table and its contents, and num_free_blocks is unchanged. Taking "
              "blocks and writing positions one by one until none is left leaves half an append behind.",
              "Count the blocks needed first; raise RuntimeError if there are fewer free, then take and write."),
    Diagnosis("paged_gqa_mapping", "Query head h reads KV head h % n_kv_heads",
              "With n_heads = g * n_kv_heads, query heads h = 0 .. g - 1 share KV head 0, the next g share KV head "
              "1, and so on: KV head h // g, as repeat_interleave lays it out. h % n_kv_heads is the order repeat "
              "(tiling) gives.",
              "k = k.repeat_interleave(n_heads // n_kv_heads, dim=1), or index with torch.arange(n_heads) // g."),
    Diagnosis("paged_shared_block", "Two live sequences hold the same block",
              "A block belongs to one live sequence until it is freed. Handing out block ids from a counter that "
              "wraps, or keeping a block on the free list after giving it away, lets a new sequence write into a "
              "block another sequence still reads.",
              "Pop the block off the free list when you take it, and only free() puts blocks back."),
    Diagnosis("paged_shadow_copy", "A contiguous copy of each sequence kept beside the pools",
              "The point of paging is that K and V live only in the block pools: a per-sequence tensor kept too "
              "(torch.cat on every append) is the contiguous cache again, its memory beside the pools.",
              "Keep only block ids and lengths per sequence; gather reads the pools through the table."),
    Diagnosis("paged_wrong_exception", "Another exception than the contract's",
              "The contract names one exception per misuse: KeyError for an id that is not live (append, free, "
              "gather, block_table), ValueError for allocating an id that is live, RuntimeError (or a subclass) "
              "when the pool has too few free blocks. Callers catch exactly these.",
              "raise KeyError(seq_id), ValueError(...) and RuntimeError(...) where the contract says."),
)


# ---------------------------------------------------------------- the mistakes, as caches the driver runs

class Variant:
    """A paged cache with knobs; every knob at its default is the contract (used for the mistakes)."""

    reads = "table"  # "logical": k_pool[p // bs] read; "logical_both": written there too
    stale = False  # attention over len(table) * bs slots
    frees = True
    take = "ceil"  # "eager": T // bs + 1 blocks; "strict": a new block only when p > len(table) * bs
    partial = False
    gqa = "div"  # "mod"
    alloc = "stack"  # "counter": block ids from a counter modulo num_blocks
    shadow = False
    order = "low"  # which free block comes next: "low" (a stack handing out 0 first), "high" (list.pop() of
    # range(num_blocks)), "fifo" (a deque: freed blocks queue behind the never used ones)

    def __init__(self, num_blocks, block_size, n_kv_heads, d_head, dtype=torch.float32):
        self.nb, self.bs = num_blocks, block_size
        self.k_pool = torch.zeros(num_blocks, block_size, n_kv_heads, d_head, dtype=dtype)
        self.v_pool = torch.zeros_like(self.k_pool)
        self.free_list = list(range(num_blocks - 1, -1, -1)) if self.order == "low" else list(range(num_blocks))
        self.counter, self.n_free = 0, num_blocks
        self.tables: dict = {}
        self.lengths: dict = {}
        self.copies: dict = {}

    def allocate(self, sid):
        if sid in self.tables:
            raise ValueError(sid)
        self.tables[sid], self.lengths[sid] = [], 0
        if self.shadow:
            self.copies[sid] = (self.k_pool[0, :0, :, :].clone(), self.v_pool[0, :0].clone())

    def _live(self, sid):
        if sid not in self.tables:
            raise KeyError(sid)
        return self.tables[sid]

    def _needs(self, p: int, n_table: int) -> bool:
        if self.take == "eager":
            return (p + 1) // self.bs + 1 > n_table
        if self.take == "strict":
            return n_table == 0 or p > n_table * self.bs
        return p // self.bs >= n_table

    def _free_count(self) -> int:
        return self.n_free if self.alloc == "counter" else len(self.free_list)

    def _take(self) -> int:
        if self._free_count() == 0:
            raise RuntimeError("out of blocks")
        if self.alloc == "counter":
            b = self.counter % self.nb
            self.counter += 1
            self.n_free -= 1
            return b
        return self.free_list.pop(0) if self.order == "fifo" else self.free_list.pop()

    def append(self, sid, k, v):
        table = self._live(sid)
        start, n = self.lengths[sid], k.shape[0]
        if not self.partial:
            size = len(table)
            for p in range(start, start + n):
                size += self._needs(p, size)
            if size - len(table) > self._free_count():
                raise RuntimeError("out of blocks")
        for t in range(n):
            p = start + t
            if self._needs(p, len(table)):
                table.append(self._take())
            blk = table[-1] if self.take == "strict" else table[p // self.bs]
            if self.reads == "logical_both":
                blk = p // self.bs
            self.k_pool[blk, p % self.bs] = k[t].to(self.k_pool.dtype)
            self.v_pool[blk, p % self.bs] = v[t].to(self.v_pool.dtype)
            self.lengths[sid] = p + 1
        if self.shadow:
            ck, cv = self.copies[sid]
            self.copies[sid] = (torch.cat([ck, k.to(ck.dtype)]), torch.cat([cv, v.to(cv.dtype)]))

    def free(self, sid):
        table = self._live(sid)
        if self.frees:
            if self.alloc == "counter":
                self.n_free += len(table)
            else:
                self.free_list.extend(reversed(table) if self.order == "low" else table)
        del self.tables[sid], self.lengths[sid]
        self.copies.pop(sid, None)

    def _positions(self, sid, whole: bool = False):
        table = self._live(sid)
        n = len(table) * self.bs if whole else self.lengths[sid]
        if self.shadow and not whole:
            return self.copies[sid]
        pos = torch.arange(n)
        logical = pos // self.bs
        blocks = logical if self.reads.startswith("logical") else torch.tensor(table, dtype=torch.long)[logical]
        return self.k_pool[blocks, pos % self.bs], self.v_pool[blocks, pos % self.bs]

    def gather(self, sid):
        return self._positions(sid)

    def block_table(self, sid):
        return list(self._live(sid))

    def num_free_blocks(self):
        return self._free_count()


def variant_attention(q, cache, seq_ids):
    n_heads, d = q.shape[1], q.shape[2]
    n_kv = cache.k_pool.shape[2]
    heads = torch.arange(n_heads)
    kv_of = heads % n_kv if cache.gqa == "mod" else heads // (n_heads // n_kv)
    out = torch.empty_like(q)
    for i, sid in enumerate(seq_ids):
        k, v = cache._positions(sid, whole=cache.stale)
        k, v = k.float()[:, kv_of], v.float()[:, kv_of]
        w = (torch.einsum("hd,thd->ht", q[i].float(), k) / math.sqrt(d)).softmax(-1)
        out[i] = torch.einsum("ht,thd->hd", w, v).to(q.dtype)
    return out


class _Host:
    @staticmethod
    def plain(t: torch.Tensor) -> torch.Tensor:
        return t.detach().clone()


def drive(cls: Any, attend: Any, case: Case) -> dict[str, torch.Tensor]:
    """What cache class `cls` and attention `attend` report on this case's script, through the child's driver."""
    return paged_kind.run_script(cls, attend, case.extra, case.args, _Host, TARGET)


def variant(**knobs: Any) -> type:
    return type("Variant_" + "_".join(f"{k}_{v}" for k, v in knobs.items()), (Variant,), dict(knobs))


def _v(**knobs: Any):
    cls = variant(**knobs)

    def fn(case: Case):
        try:
            return drive(cls, variant_attention, case)[case.extra["returns"]]
        except Exception:  # noqa: BLE001 - a flawed cache that crashes on this script cannot be compared
            return None

    return fn


# ---------------------------------------------------------------- the oracle: contiguous caches

def oracle(extra: dict, tensors: dict[str, torch.Tensor],
           places: dict[str, list[str]] | None = None) -> dict[str, torch.Tensor]:
    """The driver's outputs as the contract fixes them, from one contiguous (T, n_kv, d) pair per sequence.

    `places`, when given, is filled with what each row of the float outputs and each entry of "blocks" stands for
    (the op, the sequence, the position), so a failure is said in the script's terms rather than as an index.
    """
    said = places if places is not None else {}
    for r in ("attn", "gather", "layout", "blocks"):
        said[r] = []
    nb, bs, n_kv, d, dtype = extra["pool"]
    dt = getattr(torch, dtype)
    seqs: dict[Any, list[torch.Tensor]] = {}
    code = {name: paged_kind.EXCEPTIONS.index(name) for name in ("KeyError", "ValueError", "RuntimeError")}
    attn, gathered, layout, blocks, raises = [], [], [], [], []

    def held() -> int:
        return sum(math.ceil(k.shape[0] / bs) for k, _ in seqs.values())

    for op in extra["ops"]:
        kind, sid = op["op"], paged_kind.seq_id(op.get("id"))
        c = -1
        if kind == "allocate":
            if sid in seqs:
                c = code["ValueError"]
            else:
                seqs[sid] = [torch.zeros(0, n_kv, d, dtype=dt), torch.zeros(0, n_kv, d, dtype=dt)]
        elif kind == "append":
            if sid not in seqs:
                c = code["KeyError"]
            else:
                k, v = tensors[op["k"]].to(dt), tensors[op["v"]].to(dt)
                t = seqs[sid][0].shape[0]
                if math.ceil((t + k.shape[0]) / bs) - math.ceil(t / bs) > nb - held():
                    c = code["RuntimeError"]
                else:
                    seqs[sid] = [torch.cat([seqs[sid][0], k]), torch.cat([seqs[sid][1], v])]
        elif kind == "free":
            if sid not in seqs:
                c = code["KeyError"]
            else:
                del seqs[sid]
        elif kind == "gather":
            if sid not in seqs:
                c = code["KeyError"]
                gathered.append(torch.full((0, 2, n_kv, d), float("nan")))
            else:
                gathered.append(torch.stack(seqs[sid], 1).float())
                said["gather"] += [f"op {len(raises) + 1}, gather({sid!r}), position {p}"
                                   for p in range(seqs[sid][0].shape[0])]
        elif kind == "attend":
            q = tensors[op["q"]]
            n_heads = q.shape[1]
            kv_of = torch.arange(n_heads) // (n_heads // n_kv)
            rows = []
            for i, s in enumerate(paged_kind.seq_id(x) for x in op["ids"]):
                k, v = seqs[s][0].float()[:, kv_of], seqs[s][1].float()[:, kv_of]
                w = (torch.einsum("hd,thd->ht", q[i].float(), k) / math.sqrt(d)).softmax(-1)
                rows.append(torch.einsum("ht,thd->hd", w, v).to(q.dtype).float())
            attn.append(torch.stack(rows))
            said["attn"] += [f"op {len(raises) + 1}, the query of sequence {paged_kind.seq_id(x)!r}" for x in op["ids"]]
        raises.append(c)
        after = f"after op {len(raises)} ({_op_text(op)})"
        for s, (k, v) in seqs.items():
            layout.append(torch.stack([k, v], 1).float())
            said["layout"] += [f"{after}, sequence {s!r} position {p}" for p in range(k.shape[0])]
        blocks.extend([*(math.ceil(k.shape[0] / bs) for k, _ in seqs.values()), nb - held(), 0, 0])
        said["blocks"] += [*(f"{after}: sequence {s!r}'s block count" for s in seqs),
                           f"{after}: num_free_blocks()", f"{after}: blocks shared by two table entries",
                           f"{after}: table entries outside 0 .. num_blocks - 1"]
    empty = torch.zeros(0, 2, n_kv, d)
    return {"attn": torch.cat(attn) if attn else torch.zeros(0), "gather": torch.cat(gathered) if gathered else empty,
            "layout": torch.cat(layout) if layout else empty, "blocks": torch.tensor(blocks, dtype=torch.int64),
            "raises": torch.tensor(raises, dtype=torch.int64), "storage": torch.tensor([0, 0], dtype=torch.int64)}


def reference(case: Case):
    out, _ = paged_kind.RUNS.get((oracle,), case.extra, case.args, lambda: (oracle(case.extra, case.args), None))
    return out[case.extra["returns"]], {}


# ---------------------------------------------------------------- scripts

class Script:
    """Builds a script: ops as JSON, tensors by name, and a text per op for the messages."""

    def __init__(self, d: Draw, pool: list, n_heads: int) -> None:
        self.d, self.pool, self.n_heads = d, pool, n_heads
        self.ops: list[dict] = []
        self.tensors: dict[str, torch.Tensor] = {}
        self.lengths: dict[Any, int] = {}

    @property
    def dtype(self) -> str:
        return self.pool[4]

    def allocate(self, sid, expect: str | None = None) -> None:
        self._op({"op": "allocate", "id": sid}, expect)
        if expect is None:
            self.lengths[paged_kind.seq_id(sid)] = 0

    def append(self, sid, n: int, expect: str | None = None) -> None:
        _, _, n_kv, dh, dtype = self.pool
        i = len(self.tensors)
        self.tensors[f"k{i}"] = self.d.normal(n, n_kv, dh, dtype=dtype)
        self.tensors[f"v{i}"] = self.d.normal(n, n_kv, dh, dtype=dtype)
        self._op({"op": "append", "id": sid, "k": f"k{i}", "v": f"v{i}"}, expect)
        if expect is None:
            self.lengths[paged_kind.seq_id(sid)] += n

    def free(self, sid, expect: str | None = None) -> None:
        self._op({"op": "free", "id": sid}, expect)
        if expect is None:
            del self.lengths[paged_kind.seq_id(sid)]

    def gather(self, sid, expect: str | None = None) -> None:
        self._op({"op": "gather", "id": sid}, expect)

    def attend(self, ids: list) -> None:
        i = len(self.tensors)
        # scores of order 1-3: softmax weights spread, so a wrong key set moves the output
        self.tensors[f"q{i}"] = self.d.normal(len(ids), self.n_heads, self.pool[3], dtype=self.dtype, scale=1.5)
        self._op({"op": "attend", "ids": list(ids), "q": f"q{i}"}, None)

    def _op(self, op: dict, expect: str | None) -> None:
        if expect:
            op["expect"] = expect
        self.ops.append(op)

    def blocks_held(self) -> int:
        return sum(math.ceil(t / self.pool[1]) for t in self.lengths.values())


def _op_text(op: dict) -> str:
    sid = op.get("id")
    name = repr(paged_kind.seq_id(sid)) if "id" in op else ""
    if op["op"] == "attend":
        return f"paged_attention(q, cache, {[paged_kind.seq_id(i) for i in op['ids']]!r})"
    return f"{op['op']}({name})"


def _cases(name: str, script: Script, returns: tuple[str, ...] = paged_kind.RETURNS) -> list[Case]:
    extra = {"pool": script.pool, "ops": script.ops, "attention": ATTENTION}
    label = (f"{name} ({DTYPE_LABEL[script.dtype]}, num_blocks={script.pool[0]}, block_size={script.pool[1]}, "
             f"n_heads={script.n_heads}, n_kv_heads={script.pool[2]}, d_head={script.pool[3]})")
    cases = []
    for r in returns:
        is_float = r in FLOAT_RETURNS
        ctx = {"returns": r, "tol": script.dtype if is_float else "int64",
               "dtype": script.dtype if is_float else "int64", "ops": [_op_text(o) for o in script.ops]}
        case = Case(name=f"{label}: {WHAT[r]}", target=TARGET, kind=KIND, args=dict(script.tensors),
                    extra={**extra, "returns": r}, out_dtype=torch.float32 if is_float else torch.int64, ctx=ctx)
        if r in (*FLOAT_RETURNS, "blocks"):
            case.ctx["locate"] = _locate(case)
        if r == "raises":
            case.ctx.update(locate=_locate_raise(case), codes=True)
        if r == "storage":
            case.judge = _storage_judge(case)
        if r == "raises":
            case.derive = _raised_at_expected(script.ops)
        cases.append(case)
    if "raises" in returns:
        cases.append(_exception_case(label, extra, script))
    return cases


def _locate(case: Case):
    """A failing comparison's worst (or first non-finite) element said as the op, the sequence and the position."""

    def locate(comparison):
        if comparison.ok or not comparison.worst_index:
            return comparison
        places: dict[str, list[str]] = {}
        oracle(case.extra, case.args, places)  # only on a failure: the rows' names, not the values
        rows = places[case.extra["returns"]]
        row = comparison.worst_index[0]
        if not 0 <= row < len(rows):
            return comparison
        said = rows[row]
        first = "the first NaN/inf" if comparison.reason == "nonfinite" else "the worst"
        short = f"{said}: {(comparison.short or comparison.message).removeprefix('output: ')}"
        return replace(comparison, message=f"{comparison.message}; {first} is {said}", short=short, where=said)

    return locate


def _locate_raise(case: Case):
    """The first op that raised where it should return, or returned where it should raise, said as that op."""

    def said(code: float | None, past: bool) -> str:
        if code is None or code < 0:
            return "returned" if past else "return"
        return f"{'raised' if past else 'raise'} {paged_kind.EXCEPTIONS[int(code)]}"

    def locate(comparison):
        if comparison.ok or not comparison.worst_index or not 0 <= comparison.worst_index[0] < len(case.ctx["ops"]):
            return comparison
        i = comparison.worst_index[0]
        msg = (f"op {i + 1}, {case.ctx['ops'][i]}: your code {said(comparison.worst_got, True)}, the contract wants it "
               f"to {said(comparison.worst_expected, False)}")
        return replace(comparison, message=msg, short=msg, where=f"op {i + 1}")

    return locate


def _raised_at_expected(ops: list[dict]):
    """Where an op expects an exception and any was raised, count it as the one wanted: the exception's type is
    the judged case's (`paged_wrong_exception`); this case grades whether each op raised or returned."""
    wanted = {i: paged_kind.EXCEPTIONS.index(op["expect"]) for i, op in enumerate(ops) if op.get("expect")}

    def derive(got):
        if not isinstance(got, torch.Tensor) or got.shape != (len(ops),):
            return got
        got = got.clone()
        for i, code in wanted.items():
            if got[i] >= 0:
                got[i] = code
        return got

    return derive


def _exception_case(label: str, extra: dict, script: Script) -> Case:
    """A judged copy of the exceptions case: names paged_wrong_exception when a misuse raised another type."""
    ctx = {"returns": "raises", "tol": "int64", "dtype": "int64", "ops": [_op_text(o) for o in script.ops],
           "exception_types": True}
    case = Case(name=f"{label}: the exception types the contract names", target=TARGET, kind=KIND,
                args=dict(script.tensors), extra={**extra, "returns": "raises"}, out_dtype=torch.int64, ctx=ctx)
    case.judge = _exception_judge(case)
    return case


def _exception_judge(case: Case):
    def judge(got):
        from drill.judge.compare import Comparison

        want = case.expected
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            return Comparison(False, "shape", "the exceptions could not be read back")
        for i, (g, w) in enumerate(zip(got.tolist(), want.tolist(), strict=True)):
            if w >= 0 and g >= 0 and g != w:
                names = paged_kind.EXCEPTIONS
                raised = names[g] if names[g] != "Exception" else f"another type (none of {', '.join(names[:-1])})"
                msg = f"op {i + 1}, {case.ctx['ops'][i]}: the contract wants {names[w]}, your code raised {raised}"
                return Comparison(False, "values", msg, short=msg, diagnosis=PD["paged_wrong_exception"])
        return Comparison(True, "", "")

    return judge


def _storage_judge(case: Case):
    def judge(got):
        from drill.judge.compare import Comparison

        if not isinstance(got, torch.Tensor) or got.numel() != 2:
            return Comparison(False, "shape", "the storage count could not be read back")
        n, big = (int(x) for x in got.tolist())
        if n == 0:
            return Comparison(True, "", "")
        nb = case.extra["pool"][0]
        msg = (f"{n} tensor(s) reachable from the cache beside k_pool and v_pool hold more than num_blocks = {nb} "
               f"elements (the largest {big}): K and V must live in the pools only")
        return Comparison(False, "values", msg, short=msg, diagnosis=PD["paged_shadow_copy"])

    return judge


def _chunk(d: Draw, bs: int) -> int:
    return d.int(1, 2 * bs)


def _interleaved(d: Draw, dtype: str, group: int) -> list[Case]:
    """Three sequences appended in chunks, round robin, in a pool large enough; attention and gathers between."""
    bs = d.choice([2, 3, 4])
    n_kv, dh = 2, d.choice([4, 8])
    s = Script(d, [30, bs, n_kv, dh, dtype], n_kv * group)  # 26 blocks at most: never runs out
    ids = list(IDS)
    for sid in ids:
        s.allocate(sid)
    for _ in range(3):
        for sid in ids:
            s.append(sid, _chunk(d, bs))
        s.attend(ids)
    # the final lengths: an exact multiple of block_size, a multiple plus one, one short of a multiple; each
    # above the 6 * block_size three chunks can reach, so the last append crosses several blocks
    targets = [d.int(7, 8) * bs, d.int(7, 8) * bs + 1, d.int(7, 8) * bs - 1]
    for sid, want in zip(ids, targets, strict=True):
        s.append(sid, want - s.lengths[paged_kind.seq_id(sid)])
    s.attend([ids[2], ids[0], ids[1], ids[0]])
    for sid in ids:
        s.gather(sid)
    return _cases("three sequences appended in chunks across block boundaries", s)


def _fill_free_refill(d: Draw, dtype: str) -> list[Case]:
    """A pool filled to its last block, two appends refused, a free, a refill over stale blocks; misuses."""
    bs = d.choice([3, 4])
    n_kv, dh, group = 2, d.choice([4, 8]), 2
    nb = d.int(8, 10)
    s = Script(d, [nb, bs, n_kv, dh, dtype], n_kv * group)
    a, b, c = IDS
    s.allocate(b)  # b first: it holds block 0 in a pool that hands out low ids first
    s.allocate(a)
    s.append(b, bs + 1)  # 2 blocks
    s.append(a, 2 * bs)  # 2 blocks, an exact multiple
    s.append(b, bs - 1)  # 2 blocks still, T = 2 bs
    s.append(a, bs + d.int(1, bs - 1))  # 4 blocks; a's last one part full
    while s.blocks_held() < nb - 1:  # b grows until one block is left
        s.append(b, bs)
    s.attend([a, b])
    # two blocks needed, one free: refused, nothing written
    t_a = s.lengths[paged_kind.seq_id(a)]
    s.append(a, (math.ceil(t_a / bs) + 1) * bs - t_a + 1, expect="RuntimeError")
    s.attend([a, b])
    s.gather(a)
    s.append(a, (math.ceil(t_a / bs) + 1) * bs - t_a)  # exactly fills the last block
    s.append(b, 1, expect="RuntimeError")  # b's length is a multiple of block_size: one block needed, none free
    # misuses
    s.append("ghost", 2, expect="KeyError")
    s.gather(("ghost", 1), expect="KeyError")
    s.allocate(b, expect="ValueError")
    s.free(a)
    s.free(a, expect="KeyError")
    s.attend([b])
    # refill: c reuses a's blocks, shorter than a was, so its last block holds a's old keys past its length
    s.allocate(c)
    t_c = bs * d.int(2, 3) + d.int(1, bs - 1)
    s.append(c, t_c - 2)
    s.append(c, 2)
    s.attend([c, b, c])
    s.gather(c)
    s.gather(b)
    s.allocate(a)  # a's id is free again
    s.append(a, bs)
    s.attend([a, c])
    s.gather(a)
    return _cases("fill the pool, refuse, free, refill", s)


def make_cases(seed: int) -> list[Case]:
    d = Draw(seed)
    cases: list[Case] = []
    cases += _interleaved(d, "float32", group=2)
    cases += _interleaved(d, "float16", group=1)
    cases += _interleaved(d, "bfloat16", group=3)
    cases += _fill_free_refill(d, "float32")
    cases += _fill_free_refill(d, "bfloat16")
    return cases


ORDERS = {"low": "block 0 first", "high": "the highest block first", "fifo": "a FIFO free list"}

PAGED_VARIANTS = [
    *(("paged_logical_as_physical", f"reads k_pool[p // block_size] ({said})", _v(reads="logical", order=o))
      for o, said in ORDERS.items()),
    *(("paged_logical_as_physical", f"reads and writes k_pool[p // block_size] ({said})",
       _v(reads="logical_both", order=o)) for o, said in ORDERS.items()),
    *(("paged_reads_stale_slots", f"attention over len(table) * block_size slots ({said})", _v(stale=True, order=o))
      for o, said in ORDERS.items()),
    ("paged_block_not_freed", "free() forgets the blocks", _v(frees=False)),
    *(("paged_boundary_missed", f"a new block only when p > len(table) * block_size ({said})",
       _v(take="strict", order=o)) for o, said in ORDERS.items()),
    ("paged_eager_block", "T // block_size + 1 blocks", _v(take="eager")),
    ("paged_partial_append", "blocks taken and positions written until none is free", _v(partial=True)),
    ("paged_gqa_mapping", "KV head h % n_kv_heads", _v(gqa="mod")),
    ("paged_shared_block", "block ids from a counter modulo num_blocks", _v(alloc="counter")),
]

SPEC = Spec(
    name="paged_kv",
    graded=(TARGET, ATTENTION),
    make_cases=make_cases,
    reference=reference,
    tolerances=dict(TOLERANCES),
    bugs=tuple(Bug(PD[i], fn, label) for i, label, fn in PAGED_VARIANTS),
    forbidden=FORBIDDEN_ATTENTION,
    forbidden_classes=FORBIDDEN_ATTENTION_CLASSES,
    no_determinism_probes="every case builds a fresh cache and runs its whole script from the start, and the "
                          "script already calls gather and paged_attention many times on one cache between "
                          "appends: a second run would repeat what the cases grade.",
)
