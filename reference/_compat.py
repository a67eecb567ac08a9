"""Feature probes for the torch versions we support (>= 2.4) and optional kernels.

Kept in one place so the rest of the package reads as if every feature existed,
and so a version bump means editing one file.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch
import torch.nn.functional as F


@functools.cache
def sdpa_has_enable_gqa() -> bool:
    """`F.scaled_dot_product_attention(..., enable_gqa=True)` arrived in torch 2.5."""
    try:
        q = torch.zeros(1, 2, 1, 4)
        kv = torch.zeros(1, 1, 1, 4)
        F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
    except (TypeError, RuntimeError):
        return False
    return True


def has_fused_rms_norm() -> bool:
    """`F.rms_norm` exists from torch 2.4; probe anyway in case of a trimmed build."""
    return hasattr(F, "rms_norm")


@functools.cache
def fused_rms_norm_upcasts() -> bool:
    """Whether `F.rms_norm` accumulates half-precision input in fp32.

    torch 2.4's F.rms_norm squares and averages in the input dtype, so an fp16
    row of magnitude ~300 overflows to inf and normalises to all zeros (seen on
    2.4.1); later versions upcast. Probed rather than version-compared, and the
    caller upcasts itself where this is False.
    """
    x = torch.full((1, 1024), 300.0, dtype=torch.float16)
    out = F.rms_norm(x, (1024,), None, 1e-6)
    return bool(torch.isfinite(out).all() and (out.float() - 1).abs().max() < 1e-2)


@functools.cache
def liger_ops() -> dict[str, Any]:
    """liger-kernel's Triton autograd functions, or {} when not installed.

    Imported lazily (and only ever used on CUDA tensors) because importing
    Triton is slow and fails on CPU-only machines; the reference must work
    without it.
    """
    ops: dict[str, Any] = {}
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction  # type: ignore[import-not-found]

        ops["rms_norm"] = LigerRMSNormFunction
    except Exception:  # noqa: BLE001 - any import failure just means "not available"
        pass
    try:
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction  # type: ignore[import-not-found]

        ops["silu_mul"] = LigerSiLUMulFunction
    except Exception:  # noqa: BLE001
        pass
    return ops


def liger_enabled() -> bool:
    """liger kernels are opt-in (`DRILL_USE_LIGER=1`): PyTorch's own fused ops are the default
    ground truth, and a third-party Triton kernel should not change a verdict unasked."""
    return os.environ.get("DRILL_USE_LIGER", "") == "1"


def use_liger(x: torch.Tensor, op: str) -> Any | None:
    """The liger autograd function for `op` if enabled, `x` is on CUDA and liger is installed."""
    if not (x.is_cuda and liger_enabled()):
        return None
    return liger_ops().get(op)
