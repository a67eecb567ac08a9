"""Child-side executor for "paged" cases: a paged KV cache driven by a script of many calls.

Loaded by the grader's child process by file path (it imports only torch), and
used in-process by the parent too: the spec runs its known mistakes (paged
caches with a flaw) through the same `run_script`, so what each mistake leaves
behind is what such code really does. The expected answer comes from the
spec's contiguous oracle, not from this driver.

A script is plain data (`case["extra"]`, JSON) plus tensors the parent sends:
- `pool`: [num_blocks, block_size, n_kv_heads, d_head, dtype name];
- `ops`: in order, each one of
  `{"op": "allocate", "id": ID}`, `{"op": "append", "id": ID, "k": name, "v": name}`,
  `{"op": "free", "id": ID}`, `{"op": "gather", "id": ID}`,
  `{"op": "attend", "ids": [ID, ...], "q": name}`, `{"op": "free_blocks"}`;
  an op may carry `"expect": "KeyError" | "ValueError" | "RuntimeError"`, the
  exception the contract wants from it. An ID is a JSON value; a list stands
  for a tuple (ids are any hashable), so `["a", 1]` is the id `("a", 1)`;
- `returns`: which of the outputs below the case reports, under "out".

The driver keeps its own view of each live sequence's length (the contract's:
an append that raises adds nothing), and reports, as tensors only:
- "attn": every attend op's output, fp32, concatenated over the queries;
- "gather": every gather op's (k, v) stacked on dim 1, fp32, concatenated over T;
- "layout": after every op, each live sequence's positions read straight from
  `k_pool` / `v_pool` through its own `block_table` (position p at
  `pool[table[p // block_size], p % block_size]`), fp32; NaN where the table
  cannot be read there (too short, an id outside the pool);
- "blocks": int64, after every op: each live sequence's table length, then
  `num_free_blocks()`, then how many table entries are shared with another
  entry of a live table, then how many lie outside 0 .. num_blocks - 1;
- "raises": int64 per op: -1 when it returned, else the index of its exception's
  type in `EXCEPTIONS` (the first base class that matches);
- "storage": int64 [tensors reachable from the cache, other than the pools and
  their views, that hold more than num_blocks elements; the largest of them].

Every op's exception is caught and reported as its code (the op's output NaN,
its effect on the lengths none), whether the op expects one or not: a known
mistake that makes a read fail (a table one block short, an IndexError) is then
compared like any other, and the parent names the op and the exception type.
"""

from __future__ import annotations

from typing import Any

import torch

KIND = "paged"
EXCEPTIONS = ("KeyError", "ValueError", "RuntimeError", "IndexError", "TypeError", "AssertionError", "LookupError",
              "ZeroDivisionError", "ArithmeticError", "AttributeError", "MemoryError", "Exception")
RETURNS = ("attn", "gather", "layout", "blocks", "raises", "storage")


class ContractError(Exception):
    """Replaced by the child's own ContractError when it loads this file (see chain.py)."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


def seq_id(value: Any) -> Any:
    """The Python id a JSON id stands for: lists become tuples, recursively."""
    if isinstance(value, list):
        return tuple(seq_id(v) for v in value)
    return value


def exception_code(exc: BaseException) -> int:
    for name in type(exc).__mro__:
        if name.__name__ in EXCEPTIONS:
            return EXCEPTIONS.index(name.__name__)
    return len(EXCEPTIONS) - 1


def _type_name(obj: Any) -> str:
    t = type(obj)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"


def _nan(*shape: int) -> torch.Tensor:
    return torch.full(shape, float("nan"), dtype=torch.float32)


def _fit(t: Any, shape: tuple[int, ...], host: Any) -> torch.Tensor:
    """t as fp32 when it has the shape wanted, else NaNs of that shape."""
    if isinstance(t, torch.Tensor) and tuple(t.shape) == shape:
        return host.plain(t).to(torch.float32).cpu()
    return _nan(*shape)


def _table(cache: Any, sid: Any) -> list[int] | None:
    try:
        table = cache.block_table(sid)
    except Exception:  # noqa: BLE001 - an unreadable table reads as NaN
        return None
    if isinstance(table, torch.Tensor):
        table = table.reshape(-1).tolist()
    try:
        return [int(b) for b in table]
    except (TypeError, ValueError):
        return None


def _read(cache: Any, table: list[int] | None, length: int, nb: int, bs: int, shape: tuple[int, int],
          host: Any) -> torch.Tensor:
    out = _nan(length, 2, *shape)
    if table is None:
        return out
    k_pool, v_pool = getattr(cache, "k_pool", None), getattr(cache, "v_pool", None)
    want = (nb, bs, *shape)
    if not all(isinstance(p, torch.Tensor) and tuple(p.shape) == want for p in (k_pool, v_pool)):
        return out
    k_pool, v_pool = host.plain(k_pool).to(torch.float32).cpu(), host.plain(v_pool).to(torch.float32).cpu()
    pos = torch.arange(length)
    blocks = [b if 0 <= b < nb else -1 for b in table]  # an id outside the pool reads as NaN, however large
    j = (pos // bs).clamp(max=len(blocks))
    block = torch.tensor([*blocks, -1], dtype=torch.long)[j]  # past the table's end: -1 too
    ok = block >= 0
    out[ok, 0] = k_pool[block[ok], pos[ok] % bs]
    out[ok, 1] = v_pool[block[ok], pos[ok] % bs]
    return out


def _reachable_tensors(root: Any, limit: int = 20000) -> list[torch.Tensor]:
    """Every tensor reachable from `root` through attributes, containers and dict values (each object once)."""
    seen: set[int] = set()
    found: list[torch.Tensor] = []
    stack = [root]
    while stack and len(seen) < limit:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            found.append(obj)
            continue
        if isinstance(obj, (str, bytes, int, float, bool, type(None), type)) or callable(obj) and not hasattr(
                obj, "__dict__"):
            continue
        if isinstance(obj, dict):
            stack.extend(obj.values())
            stack.extend(k for k in obj if isinstance(k, torch.Tensor))
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif hasattr(obj, "__iter__") and type(obj).__module__ == "collections":  # deque
            try:
                stack.extend(list(obj))
            except TypeError:
                pass
        d = getattr(obj, "__dict__", None)
        if isinstance(d, dict) and not isinstance(obj, type):
            stack.extend(d.values())
        for slot in getattr(type(obj), "__slots__", ()) if not isinstance(obj, type) else ():
            if isinstance(slot, str) and hasattr(obj, slot):
                stack.append(getattr(obj, slot))
    return found


def _storage(cache: Any, nb: int) -> torch.Tensor:
    pools = [getattr(cache, name, None) for name in ("k_pool", "v_pool")]
    own = {p.untyped_storage().data_ptr() for p in pools if isinstance(p, torch.Tensor)}
    big = [t.numel() for t in _reachable_tensors(cache)
           if t.untyped_storage().data_ptr() not in own and t.numel() > nb]
    return torch.tensor([len(big), max(big, default=0)], dtype=torch.int64)


class ScriptMemo:
    """The last runs of each script in this process, so the cases that share a script run it once.

    A script's cases differ only in which output they report (`returns`), and a run of many calls is what a paged
    check spends its time on: the child would drive the learner's cache through the same script once per output,
    and the parent each known mistake and the oracle the same way. A hit needs the same functions, the same script
    and tensors of the same values; the outputs handed out are copies, so a caller cannot spoil a later hit.
    """

    def __init__(self, size: int = 64) -> None:
        self.size, self.runs = size, {}

    def get(self, fns: tuple, extra: dict, tensors: dict, run: Any) -> tuple[dict[str, torch.Tensor], Any]:
        key = (*(id(f) for f in fns), repr([(k, v) for k, v in extra.items() if k != "returns"]))
        hit = self.runs.get(key)
        stale = hit is None or any(a is not b for a, b in zip(hit[0], fns, strict=True))
        if stale or not _same_tensors(hit[1], tensors):
            if len(self.runs) >= self.size:
                self.runs.pop(next(iter(self.runs)))
            hit = self.runs[key] = (fns, dict(tensors), *run())
        return {k: v.clone() for k, v in hit[2].items()}, hit[3]


def _same_tensors(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        isinstance(a[k], torch.Tensor) and isinstance(b[k], torch.Tensor) and a[k].dtype == b[k].dtype
        and a[k].shape == b[k].shape and torch.equal(a[k], b[k]) for k in a)


RUNS = ScriptMemo()


def run_script(cls: Any, attend: Any, extra: dict, tensors: dict, host: Any,
               target: str = "PagedKVCache") -> dict[str, torch.Tensor]:
    """Drive the cache class and the attention function through the script; every output listed above.

    Run once per script and process (`RUNS`): the storage count, asked by one case, is read from the cache the
    run left behind.
    """
    out, cache = RUNS.get((cls, attend, host), extra, tensors,
                          lambda: _run_script(cls, attend, extra, tensors, host, target))
    if extra["returns"] == "storage":
        out["storage"] = _storage(cache, extra["pool"][0])
    return out


def _run_script(cls: Any, attend: Any, extra: dict, tensors: dict, host: Any,
                target: str) -> tuple[dict[str, torch.Tensor], Any]:
    nb, bs, n_kv, d, dtype = extra["pool"]
    cache = cls(nb, bs, n_kv, d, getattr(torch, dtype))
    for name in ("k_pool", "v_pool"):
        pool = getattr(cache, name, None)
        if not isinstance(pool, torch.Tensor):
            raise ContractError("wrong_type", f"{target}(...).{name} is {_type_name(pool)}, not a tensor")
        if tuple(pool.shape) != (nb, bs, n_kv, d):
            raise ContractError("wrong_shape", f"{target}(...).{name} has shape {tuple(pool.shape)}, the contract "
                                               f"needs (num_blocks, block_size, n_kv_heads, d_head) = "
                                               f"{(nb, bs, n_kv, d)}")
    lengths: dict[Any, int] = {}
    attn, gathered, layout, blocks, raises = [], [], [], [], []

    def op_call(op: dict, fn):
        try:
            return fn(), -1
        except Exception as exc:  # noqa: BLE001 - the learner's exception is the graded answer here
            return None, exception_code(exc)

    for op in extra["ops"]:
        kind = op["op"]
        sid = seq_id(op.get("id"))
        if kind == "allocate":
            _, code = op_call(op, lambda sid=sid: cache.allocate(sid))
            if code == -1 and sid not in lengths:
                lengths[sid] = 0
        elif kind == "append":
            k, v = tensors[op["k"]].clone(), tensors[op["v"]].clone()
            _, code = op_call(op, lambda sid=sid, k=k, v=v: cache.append(sid, k, v))
            if code == -1 and sid in lengths:
                lengths[sid] += k.shape[0]
        elif kind == "free":
            _, code = op_call(op, lambda sid=sid: cache.free(sid))
            if code == -1:
                lengths.pop(sid, None)
        elif kind == "gather":
            got, code = op_call(op, lambda sid=sid: cache.gather(sid))
            t = lengths.get(sid, 0)
            if isinstance(got, (tuple, list)) and len(got) == 2:
                gathered.append(torch.stack([_fit(got[0], (t, n_kv, d), host), _fit(got[1], (t, n_kv, d), host)], 1))
            else:
                gathered.append(_nan(t, 2, n_kv, d))
        elif kind == "attend":
            q = tensors[op["q"]].clone()
            ids = [seq_id(i) for i in op["ids"]]
            got, code = op_call(op, lambda q=q, ids=ids: attend(q, cache, ids))
            attn.append(_fit(got, tuple(q.shape), host))
        elif kind == "free_blocks":
            _, code = op_call(op, lambda: None)
        else:
            raise ValueError(f"unknown op {kind!r}")
        raises.append(code)
        counts: list[int] = []
        entries: list[int] = []
        for live, t in lengths.items():
            table = _table(cache, live)
            counts.append(-1 if table is None else len(table))
            entries.extend(table or [])
            layout.append(_read(cache, table, t, nb, bs, (n_kv, d), host))
        try:
            free = int(cache.num_free_blocks())
        except Exception:  # noqa: BLE001 - an unreadable count is -1
            free = -1
        shared = sum(1 for b in entries if entries.count(b) > 1)
        outside = sum(1 for b in entries if not 0 <= b < nb)
        blocks.extend([*counts, free, shared, outside])
    empty = _nan(0, 2, n_kv, d)
    out = {
        "attn": torch.cat(attn) if attn else _nan(0),
        "gather": torch.cat(gathered) if gathered else empty,
        "layout": torch.cat(layout) if layout else empty,
        "blocks": torch.tensor(blocks, dtype=torch.int64),
        "raises": torch.tensor(raises, dtype=torch.int64),
    }
    return out, cache


def scenario_tensors(case: dict, tensors: dict) -> dict[str, torch.Tensor]:
    """The script's tensors by name, from the case's argument references."""
    return {name: tensors[a["t"]] for name, a in zip(case["arg_names"], case["args"], strict=True) if "t" in a}


def run_case(mod: Any, case: dict, tensors: dict, host: Any) -> dict[str, torch.Tensor]:
    """Execute one paged case in the child; returns {"out": tensor} for the parent to compare."""
    target = case["target"]
    named = scenario_tensors(case, tensors)
    out = run_script(getattr(mod, target), getattr(mod, case["extra"]["attention"]), case["extra"], named, host,
                     target)
    return {"out": out[case["extra"]["returns"]]}
