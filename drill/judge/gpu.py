"""Child-side GPU support for `drill check --device cuda` and the Triton exercises (torch and stdlib only).

Loaded by the grader's child by file path from its driver folder, like
chain.py and audit.py; it never imports drill. Everything here runs in the
child *before* the learner's file is imported (the trusted phase), except
the closures it hands back (`exec_rule`'s checker, the launch counter),
which the audit hook and the traps call later.

- `enter_cuda`: initialise CUDA in this process (a fork server never does:
  a forked process cannot use its parent's context) and cap the caching
  allocator at the run's memory limit (`torch.cuda.set_per_process_memory_fraction`),
  so a learner's `torch.empty(10**12, device="cuda")` raises
  `torch.OutOfMemoryError`, reported as `memory_limit`. Nothing outlives the
  run: the process exits, and the driver frees its context.
- `prepare_triton`: a per-run Triton cache and temp folder in the run's
  scratch (never a cache another run, or another user, could have written:
  a cached launcher is native code), libcuda's folder given to Triton so it
  does not run `ldconfig`, `import triton` and, on CUDA, its driver helper
  compiled now, under our own trust.
- `exec_rule`: the two programs Triton runs while compiling a learner's
  kernel (ptxas, and the C compiler for its launcher), each allowed by the
  audit hook only with the argument shapes Triton uses and with every file
  it writes inside the run's writable folders.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import torch

# Flags Triton 3.x passes (triton/backends/nvidia/compiler.py make_cubin, runtime/build.py _build).
PTXAS_FLAGS = frozenset({"-lineinfo", "-suppress-debug-info", "-v", "--fmad=false", "--version"})
CC_FLAGS = frozenset({"-O3", "-shared", "-fPIC", "-Wno-psabi"})


def warm_cuda() -> None:
    """A single run's warm-up: initialise CUDA while the parent draws the cases (errors wait for the job)."""
    try:
        if torch.cuda.is_available():
            torch.cuda.init()
            (torch.ones(8, 8, device="cuda") @ torch.ones(8, 8, device="cuda")).sum().item()
    except Exception:  # noqa: BLE001 - enter_cuda reports it with the job
        pass


def enter_cuda(memory_mb: int) -> dict[str, Any]:
    """CUDA initialised and its allocator capped at `memory_mb`; the "device" status record (or why not)."""
    try:
        torch.cuda.init()
        props = torch.cuda.get_device_properties(0)
        cap = int(memory_mb) * 2**20
        torch.cuda.set_per_process_memory_fraction(min(1.0, cap / props.total_memory), 0)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - a machine problem, not the learner's
        return {"event": "device", "device": "cuda", "error": f"{type(exc).__name__}: {exc}"[:300]}
    name = f"cuda:0 ({props.name}, {props.total_memory / 2**30:.0f} GiB)"
    return {"event": "device", "device": "cuda", "name": name, "memory_cap_mb": int(memory_mb)}


def is_device_oom(exc: BaseException) -> bool:
    """torch's CUDA out-of-memory error (the run's cap or the device itself)."""
    oom = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom is not None and isinstance(exc, oom)) or "CUDA out of memory" in str(exc)


def libcuda_dir() -> str | None:
    """The folder of the libcuda.so.1 this process loaded (after CUDA init), from /proc/self/maps."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                path = line.rsplit(" ", 1)[-1].strip()
                if os.path.basename(path).startswith("libcuda.so"):
                    return os.path.dirname(path)
    except OSError:
        pass
    return None


def prepare_triton(scratch: str, interpret: bool, on_cuda: bool) -> dict[str, str]:
    """Set Triton up for this run (before the learner's code); returns the tools it may run {name: real path}."""
    home = os.path.join(scratch, ".triton-home")
    tmp = os.path.join(scratch, ".tmp")
    for folder in (home, tmp):
        os.makedirs(folder, exist_ok=True)
    os.environ["TRITON_HOME"] = home
    os.environ["TRITON_CACHE_DIR"] = os.path.join(home, "cache")
    os.environ["TMPDIR"] = tmp  # the C compiler's temporaries
    tempfile.tempdir = tmp  # Triton's own (NamedTemporaryFile for the PTX, TemporaryDirectory for a build)
    if interpret:
        os.environ["TRITON_INTERPRET"] = "1"
    if on_cuda and "TRITON_LIBCUDA_PATH" not in os.environ:
        found = libcuda_dir()
        if found:
            os.environ["TRITON_LIBCUDA_PATH"] = found  # else Triton runs /sbin/ldconfig -p, which is not allowed
    import triton  # noqa: F401 - imported here, trusted: the learner's `import triton` is then a cache hit
    import triton.language  # noqa: F401

    tools: dict[str, str] = {}
    if on_cuda and not interpret:
        from triton import knobs

        triton.runtime.driver.active.utils  # noqa: B018 - builds Triton's CUDA helper (C compiler) now, trusted
        tools["ptxas"] = os.path.realpath(knobs.nvidia.ptxas.path)
        cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")
        if cc:
            tools["cc"] = os.path.realpath(cc)
    return tools


def count_launches() -> Callable[[], int]:
    """Count launches of @triton.jit kernels from now on (the bandwidth audit: was a Triton kernel used?)."""
    import triton.runtime.jit as jit

    seen = [0]
    classes = [jit.JITFunction]
    interp = getattr(__import__("triton.runtime.interpreter", fromlist=["InterpretedFunction"]),
                     "InterpretedFunction", None)
    if interp is not None:
        classes.append(interp)
    for cls in classes:
        real = cls.run

        def run(self, *args, _real=real, **kwargs):
            seen[0] += 1
            return _real(self, *args, **kwargs)

        cls.run = run
    return lambda: seen[0]


def exec_rule(tools: dict[str, str], roots: tuple[str, ...]) -> Callable[[Any, Any], bool] | None:
    """`allowed(executable, argv)` for the audit hook: ptxas or the C compiler, in Triton's argument shapes,
    writing only under `roots` (real paths ending in "/"). None when no tool is allowed (every other run)."""
    if not tools:
        return None
    realpath, isabs = os.path.realpath, os.path.isabs
    ptxas, cc = (realpath(tools[k]) if tools.get(k) else None for k in ("ptxas", "cc"))

    def under(path: str) -> bool:
        return isabs(path) and any((realpath(path).rstrip("/") + "/").startswith(r) for r in roots)

    def args_ok(args: list[str], plain_ok: Callable[[str], bool]) -> bool:
        """Every argument allowed: "-o PATH" only under `roots`, any other one as the tool's `plain_ok` says."""
        i = 0
        while i < len(args):
            if args[i] == "-o":
                if i + 1 >= len(args) or not under(args[i + 1]):
                    return False
                i += 2
            elif plain_ok(args[i]):
                i += 1
            else:
                return False
        return True

    def ptxas_arg(a: str) -> bool:
        return a in PTXAS_FLAGS or a.startswith("--gpu-name=sm_") or (not a.startswith("-") and under(a))

    def cc_arg(a: str) -> bool:
        searched = a.startswith(("-L", "-I")) and len(a) > 2 and "," not in a  # search paths: read-only
        library = a.startswith("-l") and len(a) > 2 and "/" not in a and "," not in a
        source = not a.startswith("-") and a.endswith(".c") and under(a)
        return a in CC_FLAGS or searched or library or source

    def allowed(executable: Any, argv: Any) -> bool:
        if isinstance(argv, (str, bytes)) or not isinstance(argv, (list, tuple)) or not argv:
            return False
        args = [os.fsdecode(a) for a in argv]
        exe = os.fsdecode(executable) if executable is not None else args[0]
        if not isabs(exe) or not isabs(args[0]) or realpath(exe) != realpath(args[0]):
            return False
        tool = realpath(exe)
        if tool == ptxas:
            return args[1:] == ["--version"] or args_ok(args[1:], ptxas_arg)
        if tool == cc:
            return args_ok(args[1:], cc_arg)
        return False

    return allowed
