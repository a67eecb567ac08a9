"""Child-side executor for "rolling" cases: a cache object fed one sequence over many `attend` calls.

Loaded by the grader's child process by file path (it imports only torch),
and used in-process by the parent too: the spec runs its reference cache and
its known mistakes (cache classes with knobs) through the same
`run_scenario`, as adamw's optimizers go through optim.py.

A scenario is `case["extra"]` (JSON) plus the tensors `q`, `k`, `v` of shape
(B, H, T, d), the whole sequence:
- `window`: the constructor's argument, `cls(window)`;
- `calls`: the split of T into consecutive chunks, one `attend(q, k, v)` per
  chunk (each argument a fresh contiguous copy of its slice);
- `returns`: "out", the outputs of every call joined along T (B, H, T, d),
  or "held", int64 per call: the elements of the floating-point tensors
  reachable from the cache object after that call (see `held_elements`).
Everything travels back as tensors, never as pickled objects.
"""

from __future__ import annotations

import collections
import types
from typing import Any

import torch

KIND = "rolling"
MAX_OBJECTS = 10000  # objects walked per measurement: a pathological structure stops the walk, not the child


class ContractError(Exception):
    """Replaced by the child's own ContractError when it loads this file (see chain.py)."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


def _type_name(obj: Any) -> str:
    t = type(obj)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"


_SKIP = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, str, bytes,
         int, float, bool, complex, type(None))


def held_elements(cache: Any, home: str | None = None) -> int:
    """Elements of the floating-point tensors reachable from `cache`'s attributes.

    The walk goes through lists, tuples, sets, deques and dicts (keys and
    values), and into the attributes of objects whose class is defined in the
    module `home` (the learner's file: a helper class of its own, or the cache
    itself) or is an nn.Module. Each tensor counts once (by identity), and
    views of one storage count as their largest view. Integer and bool tensors
    (positions, slot indices, masks of positions) are bookkeeping, not keys or
    values, and do not count.
    """
    seen: set[int] = set()
    per_storage: dict[Any, int] = {}
    stack = [cache]
    walked = 0
    while stack and walked < MAX_OBJECTS:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _SKIP):
            continue
        seen.add(id(obj))
        walked += 1
        if isinstance(obj, torch.Tensor):
            if obj.is_floating_point() or obj.is_complex():
                try:
                    key: Any = (obj.device.type, obj.untyped_storage().data_ptr())
                except (RuntimeError, NotImplementedError):
                    key = ("tensor", id(obj))
                per_storage[key] = max(per_storage.get(key, 0), obj.numel())
            continue
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
            continue
        if isinstance(obj, (list, tuple, set, frozenset, collections.deque)):
            stack.extend(obj)
            continue
        cls = type(obj)
        if obj is cache or (home is not None and cls.__module__ == home) or isinstance(obj, torch.nn.Module):
            stack.extend(vars(obj).values() if hasattr(obj, "__dict__") else ())
            for klass in cls.__mro__:
                slots = klass.__dict__.get("__slots__", ())
                for name in (slots,) if isinstance(slots, str) else slots:
                    try:
                        stack.append(object.__getattribute__(obj, name))
                    except AttributeError:
                        pass
    return sum(per_storage.values())


def run_scenario(cls: Any, extra: dict, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, host: Any,
                 target: str = "RollingKVCache", home: str | None = None) -> torch.Tensor:
    """Drive `cls(window)` over the scenario's calls; what `extra["returns"]` asks for, as one tensor."""
    cache = cls(int(extra["window"]))
    outs, held = [], []
    start = 0
    b, h, _, d = q.shape
    for i, n in enumerate(extra["calls"]):
        chunk = [t[:, :, start: start + n].clone() for t in (q, k, v)]
        out = cache.attend(*chunk)
        where = f"{target}.attend (call {i + 1}, {n} new position{'s' if n != 1 else ''})"
        if not isinstance(out, torch.Tensor):
            raise ContractError("wrong_type", f"{where} returned {_type_name(out)} instead of a tensor")
        if tuple(out.shape) != (b, h, n, d):
            raise ContractError("wrong_shape", f"{where} returned shape {tuple(out.shape)}, the contract needs "
                                               f"{(b, h, n, d)}: the new queries' rows only")
        if hasattr(host, "on_device"):
            host.on_device(out, target)
        outs.append(host.plain(out))
        if extra["returns"] == "held":
            held.append(held_elements(cache, home))
        start += n
    if extra["returns"] == "held":
        return torch.tensor(held, dtype=torch.int64)
    return torch.cat(outs, dim=-2)


def run_case(mod: Any, case: dict, tensors: dict, host: Any) -> dict[str, torch.Tensor]:
    """Execute one rolling case in the child; returns {"out": tensor} for the parent to compare."""
    refs = dict(zip(case["arg_names"], case["args"], strict=True))
    q, k, v = (tensors[refs[name]["t"]] for name in ("q", "k", "v"))
    target = case["target"]
    return {"out": run_scenario(getattr(mod, target), case["extra"], q, k, v, host, target,
                                home=getattr(mod, "__name__", None))}
