"""Which implementation the reference uses by default: fused kernels or plain math.

Every public function in `drill.reference` takes `impl=None`, meaning "ask this
module". Two paths exist so that each can check the other: the fused path is
what production code runs (FlashAttention-style SDPA, `F.rms_norm`, optional
liger-kernel Triton kernels on CUDA); the math path is a few lines of plain
PyTorch that a reader can verify by eye. The grader computes expectations with
one and the test-suite keeps them in agreement.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

IMPLS: tuple[str, ...] = ("fused", "math")

_current = "fused"


def _check(name: str) -> str:
    if name not in IMPLS:
        raise ValueError(f"unknown impl {name!r}: expected one of {', '.join(IMPLS)}")
    return name


def get_impl() -> str:
    """The implementation used when a function is called with `impl=None`."""
    return _current


def set_impl(name: str) -> None:
    """Set the default implementation (`"fused"` or `"math"`) for the process."""
    global _current
    _current = _check(name)


def resolve(impl: str | None) -> str:
    """`impl` validated, or the current default when it is None."""
    return _current if impl is None else _check(impl)


@contextmanager
def use_impl(name: str) -> Iterator[str]:
    """Temporarily switch the default implementation; restores it on exit, even on error."""
    global _current
    previous = _current
    _current = _check(name)
    try:
        yield name
    finally:
        _current = previous


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype to compute in: fp32 for fp16/bf16 inputs, the input's own for fp32/fp64.

    Upcasting half inputs is what keeps softmax sums and RMS accumulations
    accurate; never *down*casting float64 keeps gradchecks and tight float64
    grading exact.
    """
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32
