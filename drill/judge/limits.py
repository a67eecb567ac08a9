"""A graded run's resource limits, on their own: the torch-free client builds them for every request and
should not pay for the runner (subprocess, tempfile, threads) to do it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Resource limits for one graded run (the CLI's --timeout/--cpu-time/--memory-mb)."""

    timeout_s: float = 60.0
    cpu_s: float = 60.0
    memory_mb: int = 2048
    processes: int = 64  # RLIMIT_NPROC inside the sandbox's user namespace (not enforceable for root without it)
