"""Peak memory of one call on CPU: an audit of the tensors PyTorch ops allocate.

CUDA has `torch.cuda.max_memory_allocated`; the CPU allocator keeps no such
statistic. So on CPU the call runs once under `LiveBytes`, a
TorchDispatchMode that sees every aten op's outputs: a tensor whose storage
is new (not one of the op's inputs' storages) counts its storage's bytes as
live until the last tensor we saw on that storage is garbage-collected (a
weakref finalizer per tensor, reference-counted per storage). The peak of
that running total is the call's peak extra memory, its output included.

What it does not see: scratch memory inside a fused kernel (it is not a
tensor), and tensors created outside ops (none in practice). That is the
right blind spot for this purpose: a materialised T x T score matrix is a
tensor, and it is what the audit is meant to catch.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def _storage_key(t: torch.Tensor) -> tuple[int, int] | None:
    try:
        st = t.untyped_storage()
    except (RuntimeError, NotImplementedError):  # sparse, meta, ...
        return None
    ptr = st.data_ptr()
    return (ptr, st.nbytes()) if ptr else None


class LiveBytes(TorchDispatchMode):
    """Track bytes of storages allocated by ops while active; `peak` is the high-water mark."""

    def __init__(self) -> None:
        super().__init__()
        self.current = 0
        self.peak = 0
        self._live: dict[int, list[int]] = {}  # data_ptr -> [nbytes, tensors alive]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        inputs = {k[0] for k in (_storage_key(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)) if k}
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._track(t, inputs)
        return out

    def _track(self, t: torch.Tensor, inputs: set[int]) -> None:
        key = _storage_key(t)
        if key is None:
            return
        ptr, nbytes = key
        entry = self._live.get(ptr)
        if entry is None:
            if ptr in inputs:
                return  # a view of (or in-place write into) memory that existed before the call
            entry = self._live[ptr] = [nbytes, 0]
            self.current += nbytes
            self.peak = max(self.peak, self.current)
        entry[1] += 1
        weakref.finalize(t, self._release, ptr)

    def _release(self, ptr: int) -> None:
        entry = self._live.get(ptr)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            self.current -= entry[0]
            del self._live[ptr]


def cpu_peak_bytes(call: Any) -> tuple[Any, int]:
    """Run `call()` once under the audit; return (its result, peak extra bytes)."""
    with LiveBytes() as audit:
        result = call()
    return result, audit.peak
