"""What every `drill bench` workload is made of: the `Workload` record and the helpers its callables share.

Kept apart from the workload tables (drill/bench/workloads.py and its
siblings) so that each table module imports this one and `workloads.py`
gathers them all without an import circle. Imports no torch at module level:
the parent reads ladders and validates options before torch is loaded.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Call = Callable[[], Any]


@dataclass(frozen=True)
class Workload:
    exercise: str
    size_name: str  # what varies, in words ("sequence length T")
    size_label: str  # table header ("T", "d_model", "cache T")
    ladder_cpu: tuple[int, ...]
    ladder_cuda: tuple[int, ...]
    dims_cpu: dict[str, Any]
    dims_cuda: dict[str, Any]
    expected_exponent: float  # time ~ size^this for an efficient implementation
    expected_note: str
    build: Callable[..., dict[str, Any]]
    reference: Callable[..., Call]
    learner: Callable[..., Call]
    est_bytes: Callable[[int, dict[str, Any], int], int]
    tokens: Callable[[int, dict[str, Any]], int]  # tokens processed per call
    bytes_moved: Callable[[int, dict[str, Any], int], int] | None = None  # minimum memory traffic per call
    bandwidth_bound: bool = False  # report bandwidth as a fraction of the device's peak
    comparable: bool = True  # the learner's output must match the fused reference's on the same inputs
    # what a peak memory growing faster than the fused reference's usually means, for the report's note
    memory_note: str = "for attention, the T x T scores"

    def ladder(self, device: str) -> tuple[int, ...]:
        return self.ladder_cuda if device == "cuda" else self.ladder_cpu

    def dims(self, device: str) -> dict[str, Any]:
        return dict(self.dims_cuda if device == "cuda" else self.dims_cpu)


# -- helpers (torch imported inside) -----------------------------------------


def randn(gen: Any, *shape: int, dtype: Any, device: Any, scale: float = 1.0) -> Any:
    """Drawn on the device itself (large CUDA weights never pass through host memory), then cast."""
    import torch

    t = torch.randn(*shape, generator=gen, dtype=torch.float32, device=device)
    if scale != 1.0:
        t.mul_(scale)
    return t.to(dtype=dtype)


def gen(seed: int, device: Any) -> Any:
    import torch

    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def linear_weights(gen: Any, shapes: dict[str, tuple[int, int]], dtype: Any, device: Any) -> dict[str, Any]:
    """Weights named by attribute path, scaled 1/sqrt(fan_in) so activations stay O(1)."""
    return {k: randn(gen, o, i, dtype=dtype, device=device, scale=1.0 / math.sqrt(i)) for k, (o, i) in shapes.items()}


def load_module(factory: Callable[[], Any], weights: dict[str, Any], dtype: Any, device: Any) -> Any:
    """Build the learner's module ON the device, cast it, and copy the shared weights into it.

    Built under `with torch.device(device)` so that its parameters are created
    (and randomly initialised) where they will live: a CUDA SwiGLU at
    d_model=8192 has 540 M parameters, whose fp32 CPU copy alone would be
    2.2 GB of host memory and seconds of single-threaded init.
    """
    import torch

    with torch.device(device):
        module = factory()
    module.to(device=device, dtype=dtype)
    for path, value in weights.items():
        obj = module
        for part in path.split("."):
            obj = getattr(obj, part)
        with torch.no_grad():
            obj.copy_(value)
    return module.eval()


def lm_loss_inputs(size: int, dims: dict[str, Any], dtype: Any, device: Any, seed: int, ignore_index: int) -> dict:
    """(N, V) logits and N targets, a tenth of them `ignore_index` (padding), as an LM's loss sees them: the
    inputs of both cross_entropy and cross_entropy_backward."""
    import torch

    g = gen(seed, device)
    n = dims["N"]
    logits = randn(g, n, size, dtype=dtype, device=device, scale=2.0)
    targets = torch.randint(0, size, (n,), generator=g, device=device)
    padded = torch.rand(n, generator=g, device=device) < 0.1
    padded[0] = False  # at least one position counts
    return {"logits": logits, "targets": targets.masked_fill(padded, ignore_index)}
