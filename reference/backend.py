"""Which implementation the reference uses by default: fused kernels or plain math.

Every public function in `drill.reference` takes `impl=None`, meaning "ask this
module". Two paths exist so that each can check the other: the fused path is
what production code runs (FlashAttention-style SDPA, `F.rms_norm`, optional
liger-kernel Triton kernels on CUDA); the math path is a few lines of plain
PyTorch that a reader can verify by eye. The grader computes expectations with
one and the test-suite keeps them in agreement.
"""

from __future__ import annotations

import threading
from collections import Counter
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


# -- which kernel ran ---------------------------------------------------------------------------
#
# The grader reports which reference backend computed its expectations (`drill check --json`'s
# "reference_backend"): on CUDA that is a claim about SDPA's backend selection, so it is read from
# the dispatcher's own choice (`torch._fused_sdp_choice`, the function `F.scaled_dot_product_attention`
# calls to pick a kernel), not assumed. `python -m drill.reference.selftest` proves the same thing
# independently, by forcing each backend and watching the aten op that runs.

SDPA_BACKENDS = {0: "math", 1: "flash", 2: "memory-efficient", 3: "cudnn", 4: "overrideable"}
_LOG = threading.local()


@contextmanager
def kernel_log() -> Iterator[Counter]:
    """Count, on this thread, which kernel each reference call took: keys (device, op, kernel), e.g.
    ("cuda", "sdpa", "flash"), ("cpu", "rms_norm", "math")."""
    previous = getattr(_LOG, "counts", None)
    counts: Counter = Counter()
    _LOG.counts = counts
    try:
        yield counts
    finally:
        _LOG.counts = previous


def logging_kernels() -> bool:
    return getattr(_LOG, "counts", None) is not None


def note_kernel(op: str, kernel: str, device: str = "cpu") -> None:
    """Record one call of `op` on `kernel` on `device` ("cpu", "cuda") in the active `kernel_log` (else nothing)."""
    counts = getattr(_LOG, "counts", None)
    if counts is not None:
        counts[(device, op, kernel)] += 1


def sdpa_choice(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, is_causal: bool,
                scale: float, enable_gqa: bool = False) -> str:
    """The kernel `F.scaled_dot_product_attention` will take for these operands ("flash", "math", ...).

    Asks the dispatcher (`torch._fused_sdp_choice`, private but present from torch 2.0 to 2.13); "unknown"
    when this torch lacks it. Honours an enclosing `sdpa_kernel` restriction, as the real call does.
    """
    choose = getattr(torch, "_fused_sdp_choice", None)
    if choose is None:
        return "unknown"
    kwargs = {"enable_gqa": True} if enable_gqa else {}
    try:
        index = int(choose(q, k, v, mask, 0.0, is_causal, scale=scale, **kwargs))
    except (RuntimeError, TypeError):
        return "unknown"
    return SDPA_BACKENDS.get(index, f"backend {index}")
