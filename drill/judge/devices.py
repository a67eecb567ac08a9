"""Which device a check grades on (`drill check --device cpu|cuda|auto`), decided in two steps.

`requested` needs no torch: it validates the option against the exercise
(a CUDA-only exercise cannot be asked for the CPU) and says what the child
should warm up for, so the child can be started before this process imports
torch. `resolve` then imports torch and settles the device: "auto" becomes
CUDA when torch sees a device; "cuda" without one is a one-line UserError
(exit 2), raised after the child was started and before anything is graded.

`DRILL_TRITON_INTERPRET=1` grades the Triton exercises on the CPU through
Triton's interpreter (`TRITON_INTERPRET=1` in the child): values only, no
bandwidth. It is for working on drill or on a kernel without a GPU; by
default a CUDA-only exercise says in one line that it needs a GPU.
"""

from __future__ import annotations

import os

from drill.errors import UserError

CHOICES: tuple[str, ...] = ("cpu", "cuda", "auto")
INTERPRET_ENV = "DRILL_TRITON_INTERPRET"


def interpreting(exercise) -> bool:
    """Is `exercise` (an index entry) to be graded through Triton's interpreter on the CPU?"""
    return "triton" in exercise.imports and os.environ.get(INTERPRET_ENV, "") == "1"


def device_available(exercise) -> bool:
    """Whether `exercise` can be graded on this machine (imports torch only for a CUDA-only one).

    A Triton exercise also can without a GPU under DRILL_TRITON_INTERPRET=1 (values through Triton's
    interpreter, drill/judge/devices.py)."""
    if exercise.device == "any" or interpreting(exercise):
        return True
    if not gpu_nodes_visible():  # answered without importing torch (~1 s in a torch-free client)
        return False
    import torch

    return bool(torch.cuda.is_available())


# Device nodes some GPU driver creates on Linux: NVIDIA (bare metal and containers), WSL2, ROCm.
GPU_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg", "/dev/kfd")


def gpu_nodes_visible() -> bool:
    """False only where CUDA is surely absent: a Linux machine with none of `GPU_NODES` (no driver, no GPU
    passed into the container). Elsewhere (other systems, any node present) torch has to be asked."""
    import os
    import sys

    return not sys.platform.startswith("linux") or any(os.path.exists(p) for p in GPU_NODES)


def check_choice(device: str | None) -> str | None:
    """`device` lower-cased if it is one of CHOICES (or None, the default), else a UserError naming them."""
    if device is None:
        return None
    value = device.strip().lower()
    if value not in CHOICES:
        raise UserError(f"unknown device '{device}'; valid: {', '.join(CHOICES)}")
    return value


def requested(device: str | None, exercise) -> str:
    """What to ask for, without torch: "cpu", "cuda" or "auto". None means cpu, or cuda for a CUDA-only exercise."""
    device = check_choice(device)
    if interpreting(exercise):
        return "cpu"
    if exercise.device == "cuda":
        if device == "cpu":
            raise UserError(f"{exercise.name} is graded on CUDA only; drop --device cpu (or set {INTERPRET_ENV}=1 to "
                            f"grade its values on the CPU through Triton's interpreter)")
        return "cuda"
    return device or "cpu"


def resolve(wanted: str, exercise) -> str:
    """"cpu" or "cuda" for a `requested` value; imports torch unless it is plainly the CPU."""
    if wanted == "cpu":
        return "cpu"
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if wanted == "auto":
        return "cpu"
    if exercise.device == "cuda":
        raise UserError(cuda_only_refusal(exercise))
    raise UserError(f"--device cuda: torch sees no CUDA device here ({why_no_cuda(torch)}); use --device cpu or auto")


def cuda_only_refusal(exercise) -> str:
    """The one line for a CUDA-only exercise on a machine without CUDA; for a Triton one, the way round it."""
    interpret = (f" (set {INTERPRET_ENV}=1 to grade its values on the CPU through Triton's interpreter)"
                 if "triton" in exercise.imports else "")
    return f"{exercise.name} can only be graded on a CUDA device, and torch sees none here{interpret}"


def require_cuda() -> None:
    """A UserError unless torch sees a CUDA device (imports torch): `--watch` and folders ask before grading."""
    import torch

    if not torch.cuda.is_available():
        raise UserError(f"--device cuda: torch sees no CUDA device here ({why_no_cuda(torch)}); use --device cpu or "
                        "auto")


def why_no_cuda(torch) -> str:
    """One clause on why torch has no CUDA device: a CPU-only build, or a CUDA build that found none."""
    if not torch.backends.cuda.is_built():
        return f"torch {torch.__version__} is a CPU-only build"
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None:
        return f"torch {torch.__version__} is built with CUDA {torch.version.cuda}, CUDA_VISIBLE_DEVICES={hidden!r}"
    return f"torch {torch.__version__} is built with CUDA {torch.version.cuda} but finds no device or driver"


def describe(device: str) -> str:
    """The device as reports name it: "cpu", or "cuda:0 (NVIDIA H200, 139 GiB)" (imports torch for CUDA)."""
    if device != "cuda":
        return device
    import torch

    props = torch.cuda.get_device_properties(0)
    return f"cuda:0 ({props.name}, {props.total_memory / 2**30:.0f} GiB)"


def kernel_summary(counts: dict, fallback: int = 0) -> str:
    """`reference_backend` in words: which kernels computed the expectations, per device, with call counts.

    `counts` is `drill.reference.backend.kernel_log`'s Counter ((device, op, kernel) -> calls). Exercises whose
    reference has no SDPA or norm call say which path ran ("fused path"). `fallback`: cases whose CUDA reference
    raised and were computed on the CPU instead.
    """
    by_device: dict[str, dict[str, list[str]]] = {}
    for (device, op, kernel), n in sorted(counts.items()):
        by_device.setdefault(device, {}).setdefault(op, []).append(f"{kernel} x{n}")
    parts = ["; ".join(f"{device}: " + ", ".join(f"{op} {', '.join(ks)}" for op, ks in ops.items())
                       for device, ops in by_device.items())] if by_device else []
    if fallback:
        parts.append(f"{fallback} case(s) computed on the CPU after the CUDA reference failed")
    return "; ".join(parts) or "no SDPA or norm call (elementwise ops and matmuls on the grading device)"


def wants_cuda(path, exercise: str | None, device: str | None) -> bool:
    """Does this check need CUDA (torch-free)? The client asks before sending it to a grading server.

    False for anything that is not plainly a CUDA check, a bad name or option included: those are
    refused by the grading itself, wherever it runs.
    """
    from pathlib import Path

    from drill.judge import registry

    try:
        name = registry.resolve_exercise(Path(path), exercise)
        return requested(device, registry.entry(name)) == "cuda"
    except UserError:
        return False
