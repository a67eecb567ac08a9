"""Bytes of the tensor storages that PyTorch ops allocate: live, peak and total, one counter for two users.

`drill bench` measures a call's peak memory on CPU with it (drill.bench.memory),
and the grader's GQA audit measures a forward's peak and labels K/V copies on
top of it (drill.judge.audit.StorageTracker). The CPU allocator keeps no
peak statistic (CUDA has `torch.cuda.max_memory_allocated`), so the counter
is a TorchDispatchMode that sees every aten op's outputs: a storage that an
output lives on and that is neither one of the op's inputs' storages, nor one
counted already, nor one of `known` (memory that existed before: weights) was
allocated by the op. It counts its bytes until the last tensor seen on it is
garbage-collected (a weakref finalizer per tensor, reference-counted per
storage); `peak` is the high-water mark of that running total.

Blind spots, by design: scratch memory inside a fused kernel (not a tensor)
and tensors made outside any op (none in practice). A materialised T x T
score matrix is a tensor, and it is what both users are after.

Standard library and torch only, and no relative imports: the grader's child
loads this file by its path (it cannot import the `drill` package), the
benchmark imports it as `drill.storage_bytes`.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

NEW, LIVE = "new", "live"  # what StorageBytes.count says of an output's storage


def storage_ptr(t: torch.Tensor) -> int:
    """The address of `t`'s storage, 0 when it has none to count (sparse, meta, empty)."""
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return 0


def tensors_in(x: Any, found: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
    """The tensors in an op's arguments or results (tensors, lists, tuples, dicts of them), in order.

    What `torch.utils._pytree.tree_flatten` finds there, at a third of its cost:
    the trackers call it twice per aten op, and on flash_attention's tiling
    cases pytree was 40% of the grading time.
    """
    found = [] if found is None else found
    if isinstance(x, torch.Tensor):
        found.append(x)
    elif isinstance(x, (list, tuple)):
        for item in x:
            tensors_in(item, found)
    elif isinstance(x, dict):
        for item in x.values():
            tensors_in(item, found)
    return found


class StorageBytes(TorchDispatchMode):
    """Live (`current`), `peak` and `total` bytes of storages allocated by ops while the mode is active.

    A subclass that needs more than bytes (labels, provenance) overrides `observe`,
    which sees each op after it ran, and calls `count` for the outputs it keeps;
    `released` is told when a counted storage is freed.
    """

    def __init__(self, known: Iterable[int] = ()) -> None:
        super().__init__()
        self.known = set(known)  # storages that existed before (weights): never counted
        self.live: dict[int, list[int]] = {}  # storage ptr -> [nbytes, tensors alive on it]
        self.current = self.peak = self.total = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.observe(func, tensors_in(kwargs, tensors_in(args)), tensors_in(out))
        return out

    def observe(self, func: Any, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
        """One op ran: count its outputs' storages."""
        in_ptrs = {storage_ptr(t) for t in inputs}
        for t in outputs:
            self.count(t, in_ptrs)

    def count(self, t: torch.Tensor, in_ptrs: set[int]) -> str | None:
        """Count `t` on its storage: NEW (allocated by this op), LIVE (counted before) or None (not ours:
        a view of, or an in-place write into, memory that existed before the op)."""
        ptr = storage_ptr(t)
        if not ptr:
            return None
        state = LIVE
        if ptr not in self.live:
            if ptr in in_ptrs or ptr in self.known:
                return None
            nbytes = t.untyped_storage().nbytes()
            self.live[ptr] = [nbytes, 0]
            self.current += nbytes
            self.total += nbytes
            self.peak = max(self.peak, self.current)
            state = NEW
        self.live[ptr][1] += 1
        weakref.finalize(t, self._release, ptr)
        return state

    def released(self, ptr: int) -> None:
        """The last tensor on a counted storage died (a hook for subclasses)."""

    def _release(self, ptr: int) -> None:
        entry = self.live.get(ptr)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            self.current -= entry[0]
            del self.live[ptr]
            self.released(ptr)


# TorchDispatchMode wraps a subclass's __torch_dispatch__ in torch._disable_dynamo, whose first call
# imports torch._dynamo (~1.7 s on torch 2.13 CPU); nothing here is compiled, so keep the plain function.
StorageBytes.__torch_dispatch__ = getattr(StorageBytes.__torch_dispatch__, "__wrapped__",  # type: ignore[method-assign]
                                          StorageBytes.__torch_dispatch__)
