"""Peak memory of one call on CPU, for `drill bench`: the shared storage counter (drill.storage_bytes).

CUDA has `torch.cuda.max_memory_allocated`; the CPU allocator keeps no such
statistic, so on CPU the call runs once under `LiveBytes`, which counts the
bytes of every storage an aten op allocates until its last tensor dies. The
peak of that running total is the call's peak extra memory, its output
included. The grader's GQA memory audit counts with the same class.
"""

from __future__ import annotations

from typing import Any

from drill.storage_bytes import StorageBytes

# The benchmark's name for the counter (the child and the tests use it); nothing is added to it.
LiveBytes = StorageBytes


def cpu_peak_bytes(call: Any) -> tuple[Any, int]:
    """Run `call()` once under the audit; return (its result, peak extra bytes)."""
    with LiveBytes() as audit:
        result = call()
    return result, audit.peak
