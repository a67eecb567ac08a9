"""Measuring one call on a device: its time, its peak memory, and the device's practical bandwidth.

Why a module of its own: the CUDA half of `drill bench` cannot run on the
machines where the test suite runs, so everything here takes a *backend*
object (`CudaBackend` wraps `torch.cuda`; tests pass a fake one) and keeps the
arithmetic in plain functions. What the tests pin down, on CPU:
- a CUDA event pair is read only after a synchronize (an unsynchronised
  `elapsed_time` raises, or times nothing);
- the peak-memory statistics are reset before every measured call, for the
  device measured, and the reading is relative to what was allocated before;
- the bandwidth of a copy counts the bytes read AND the bytes written;
- an L2 flush runs before each timed call and outside the timed region (the
  H100/H200 L2 is 50-60 MB: without a flush a "bandwidth-bound" kernel on a
  32 MB input is partly timed out of cache and can beat the copy "peak").

No `drill` import may happen lazily in here: the benchmark child loads this
module before it hides `drill` from the learner's code.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

FLUSH_BYTES = 256 * 2**20  # well above any current GPU's L2 (H200: 60 MB)
COPY_BYTES = 2**30  # the bandwidth probe's buffer; both buffers together are 2 GiB


class CudaBackend:
    """The handful of `torch.cuda` calls the measurements use, bound to one device."""

    def __init__(self, device: Any) -> None:
        import torch

        self.torch = torch
        self.device = device

    def synchronize(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def event(self) -> Any:
        return self.torch.cuda.Event(enable_timing=True)

    def reset_peak(self) -> None:
        self.torch.cuda.reset_peak_memory_stats(self.device)

    def allocated(self) -> int:
        return int(self.torch.cuda.memory_allocated(self.device))

    def max_allocated(self) -> int:
        return int(self.torch.cuda.max_memory_allocated(self.device))

    def mem_get_info(self) -> tuple[int, int]:
        free, total = self.torch.cuda.mem_get_info(self.device)
        return int(free), int(total)

    def empty(self, nbytes: int) -> Any:
        return self.torch.empty(nbytes, dtype=self.torch.uint8, device=self.device)

    def empty_cache(self) -> None:
        self.torch.cuda.empty_cache()


# -- arithmetic ----------------------------------------------------------------------------

# Vendor datasheet HBM bandwidth, bytes/s, by a substring of the device name (first match wins): what
# "% of peak" means in the targets. The copy probe (`copy_bandwidth`) is the practical peak.
DATASHEET_BANDWIDTH: tuple[tuple[str, float], ...] = (
    ("H200", 4.8e12), ("H100 PCIe", 2.0e12), ("H100 NVL", 3.9e12), ("H100", 3.35e12), ("GH200", 4.0e12),
    ("B200", 8.0e12), ("A100-SXM4-80GB", 2.039e12), ("A100 80GB PCIe", 1.935e12), ("A100", 1.555e12),
    ("L40S", 0.864e12), ("L4", 0.3e12), ("A10G", 0.6e12), ("A10", 0.6e12), ("T4", 0.32e12), ("V100", 0.9e12),
)


def datasheet_bandwidth(name: str, memory_clock_khz: int | None = None,
                        bus_width_bits: int | None = None) -> float | None:
    """The device's peak memory bandwidth (bytes/s): the datasheet figure for a known name, else what its
    memory clock and bus width give (double data rate: 2 x clock x width / 8), else None."""
    for key, value in DATASHEET_BANDWIDTH:
        if key in name:
            return value
    if memory_clock_khz and bus_width_bits:
        return 2.0 * memory_clock_khz * 1e3 * bus_width_bits / 8
    return None


def copy_bandwidth_from(nbytes: int, seconds: list[float]) -> float:
    """Bytes/s of a copy of `nbytes`: each byte is read once and written once, so 2 * nbytes moved.

    The median of the samples (a single slow sample must not set the "peak").
    """
    good = sorted(s for s in seconds if s > 0)
    if not good or nbytes <= 0:
        raise ValueError("copy_bandwidth_from needs a positive size and at least one positive time")
    mid = len(good) // 2
    median = good[mid] if len(good) % 2 else (good[mid - 1] + good[mid]) / 2
    return 2 * nbytes / median


def probe_size(free_bytes: int, cap: int = COPY_BYTES) -> int:
    """Bytes per buffer for the copy probe: at most `cap`, and both buffers under a quarter of free memory."""
    return int(max(0, min(cap, free_bytes // 8)))


def memory_budget(free_bytes: int, fraction: float) -> int:
    """What a size's naive estimate may use: a fraction of the device memory free before the ladder."""
    return int(max(0, free_bytes) * fraction)


# -- timing and peak memory -----------------------------------------------------------------


class Timer:
    """Times one call: perf_counter on CPU; CUDA events around the call, read after a synchronize, on GPU.

    On CUDA the device is synchronised *before* the start event (so no earlier
    work is timed) and *after* the end event (so `elapsed_time` reads two
    completed events), and an L2 flush buffer is zeroed before the start
    event, outside the timed region.
    """

    def __init__(self, backend: CudaBackend | None = None, flush_bytes: int = FLUSH_BYTES) -> None:
        self.backend = backend
        self.flush = backend.empty(flush_bytes) if backend is not None and flush_bytes > 0 else None

    def once(self, call: Callable[[], Any]) -> float:
        be = self.backend
        if be is not None:
            start, end = be.event(), be.event()
            if self.flush is not None:
                self.flush.zero_()
            be.synchronize()
            start.record()
            out = call()
            end.record()
            be.synchronize()
            del out
            return start.elapsed_time(end) / 1e3
        t0 = time.perf_counter()
        out = call()
        elapsed = time.perf_counter() - t0
        del out
        return elapsed


def cuda_peak_bytes(call: Callable[[], Any], backend: CudaBackend) -> tuple[int, Any]:
    """Peak extra device bytes of one call, its output included; returns (peak, output).

    The allocator's peak counter is reset right before the call (per device)
    and read after a synchronize; `allocated()` before the call is the base,
    so tensors that already existed (the inputs, other outputs) are not counted.
    """
    backend.synchronize()
    backend.reset_peak()
    base = backend.allocated()
    out = call()
    backend.synchronize()
    return max(0, backend.max_allocated() - base), out


def copy_bandwidth(backend: CudaBackend, timer: Timer, reps: int = 10) -> float | None:
    """Practical peak bandwidth (bytes/s): a device-to-device copy, measured in this run, read + write counted."""
    free, _ = backend.mem_get_info()
    n = probe_size(free)
    if n < 2**20:
        return None
    src, dst = backend.empty(n), backend.empty(n)
    for _ in range(3):
        dst.copy_(src)
    samples = [timer.once(lambda: dst.copy_(src)) for _ in range(reps)]
    src = dst = None  # both buffers freed before the cache is emptied
    backend.empty_cache()
    return copy_bandwidth_from(n, samples)
