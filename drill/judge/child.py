"""The grader's child process: runs a learner's file on inputs from the parent.

Run as a script from a *copy* of its folder that the parent placed in the
run's own directory (`python -I -S -B <run>/driver/child.py --path=SITE ...`):
`-S` and the explicit `--path` entries give it torch and numpy but no
`drill` package (an editable or installed drill is not on its path, and a
meta-path hook refuses `import drill` on top), so neither the reference
answers nor the grader itself exist in the process that runs untrusted code.
It imports only the standard library, torch and its sibling files
(chain.py, audit.py, tiling.py, sandbox_child.py), which it loads by path.

Protocol (all files live in the folder named by the job's "work"; the
learner's code runs with a different cwd and is not told it):
- The child imports torch at once, then blocks on stdin for the job (JSON),
  so its start-up overlaps the parent's own work.
- Inputs come from `inputs.bin` (tensors by key, see tensor_file.py: written by the parent).
- For each case i it appends {"event": "start", "case": i} and then an
  "end" record to `status.jsonl`, and saves the learner's output tensors to
  `out_<i>.bin` (plain tensors only, tensor_file.py). The parent compares those tensors with
  its own expectations; nothing the child writes can make a case pass except
  tensors that really equal the reference.
- Status records only ever explain failures (exception type and message,
  the learner's line, a forbidden op's name).

Defences in this process (see drill/judge/README.md, "Known limits"):
- layer 3 first, when the job asks for it: `sandbox_child.enter` puts the
  worker into fresh user/PID/mount/network namespaces with a read-only view
  of the file system (it forks; this file's code then runs in the worker);
- layer 2: the forbidden ops' aten kernels are overridden with a tripping
  kernel for every dispatch key they have (CPU, CUDA, composite, nested;
  `block_kernels`), which holds for every thread and for TorchScript, and
  the registration is pinned with no Python reference (`_pin`); the
  pure-Python forbidden functions are replaced module-wide (and objects
  named by dotted path, autograd's entry points and its engine, by
  tripwires: `block_paths`), forbidden
  higher-order ops trip on every call; forbidden classes trap at
  construction; an audit hook (irremovable, process-wide) refuses process
  creation, signals, ctypes, sockets, object-graph and frame introspection
  and writes outside the scratch folders, and `_guard_native` replaces the
  native ways out that raise no audit event;
- on top, the thread-local TorchFunctionMode/TorchDispatchMode traps name
  the learner's line and the op as the learner wrote it;
- every trap raises a BaseException subclass and records the hit at once
  (`status.jsonl`), so neither `except Exception` nor a bare `except:` nor a
  later exit hides it.
"""

from __future__ import annotations

import fnmatch
import gc
import importlib.abc
import importlib.util
import json
import os
import re
import resource
import sys
import threading
import time
import traceback
from contextlib import nullcontext


def matcher(patterns: list[str]):
    """`name -> bool` for an exercise's fnmatch patterns: one compiled regex, bound now.

    Matching every aten op and torch attribute name with fnmatchcase, pattern
    by pattern, cost ~40 ms per graded run (measured, torch 2.13); the regex
    does it in ~2 ms. Bound at once, so replacing fnmatch or re later does not
    reach the traps.
    """
    if not patterns:
        return lambda name: False
    match = re.compile("|".join(fnmatch.translate(p) for p in patterns)).match
    return lambda name: match(name) is not None


def _opts() -> tuple[dict, list[str]]:
    opts, paths = {}, []
    for a in sys.argv[1:]:
        if a.startswith("--path="):
            paths.append(a[len("--path="):])
        elif a.startswith("--") and "=" in a:
            k, v = a[2:].split("=", 1)
            opts[k] = v
    return opts, paths


def _limit_self(opts: dict) -> None:
    """Apply the parent's limits (--cpu=S --data=BYTES --fsize=BYTES --nproc=N) before anything else."""
    if "cpu" in opts:
        cpu = int(opts["cpu"])
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    if "data" in opts:
        resource.setrlimit(resource.RLIMIT_DATA, (int(opts["data"]), int(opts["data"])))
    if "fsize" in opts:
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(opts["fsize"]), int(opts["fsize"])))
    if "nproc" in opts:
        _set_nproc(int(opts["nproc"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _set_nproc(n: int) -> None:
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
        n = n if hard == resource.RLIM_INFINITY else min(n, hard)
        resource.setrlimit(resource.RLIMIT_NPROC, (n, n))
    except (ValueError, OSError):
        pass


def _sibling(name: str, directory: str | None = None):
    """A sibling file of this driver (chain.py, audit.py, tiling.py, sandbox_child.py), loaded once by path."""
    key = f"_drill_judge_{name}"
    if key not in sys.modules:
        path = os.path.join(directory or DRIVER_DIR, f"{name}.py")
        spec = importlib.util.spec_from_file_location(key, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[key] = module
    return sys.modules[key]


DRIVER_DIR = os.path.dirname(os.path.abspath(__file__))
SANDBOX: dict = {"sandbox": "off", "reason": "not requested"}
OPTS: dict = {}

if __name__ == "__main__":
    OPTS, _paths = _opts()
    sys.path.extend(_paths)
    _limit_self(OPTS)
    if "parent" in OPTS:
        _sibling("sandbox_child").die_with_parent(int(OPTS["parent"]))
    if "sandbox" in OPTS and "--zygote" not in sys.argv:
        # One graded run: enter the namespaces before torch is imported (the worker imports it).
        with open(OPTS["sandbox"], encoding="utf-8") as _fh:
            _spec = json.load(_fh)
        SANDBOX = _sibling("sandbox_child").enter_or_leave(_spec)
        if SANDBOX.get("sandbox") == "namespaces":
            DRIVER_DIR = _spec["driver_inside"]

import torch  # noqa: E402 - after the limits, so they cover the import too
from torch.overrides import TorchFunctionMode  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

try:  # private, but present from torch 2.0 to at least 2.13
    from torch.utils._python_dispatch import _disable_current_modes as _no_dispatch_modes  # noqa: E402
except ImportError:  # pragma: no cover - a future torch without it
    import contextlib as _contextlib

    _no_dispatch_modes = _contextlib.nullcontext

WORK = ""
LEARNER = ""
TRIPPED: list[dict] = []


class ForbiddenOp(BaseException):
    """Raised by a trap; BaseException so `except Exception` cannot hide it."""

    def __init__(self, op: str, line: int | None, source: str | None) -> None:
        super().__init__(f"{op} is forbidden in this exercise")
        self.op = op
        self.line = line
        self.source = source


class ContractError(Exception):
    """The learner's object does not fit the contract (missing attribute, wrong shape...)."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


def learner_line_of_stack() -> tuple[int | None, str | None]:
    """Innermost frame of the running stack that lies in the learner's file."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename == LEARNER:
            return frame.f_lineno, _source_line(frame.f_lineno)
        frame = frame.f_back
    return None, None


def learner_line_of_tb(tb) -> tuple[int | None, str | None]:
    """Innermost traceback entry in the learner's file."""
    line = None
    for entry in traceback.extract_tb(tb):
        if entry.filename == LEARNER:
            line = entry.lineno
    return line, (_source_line(line) if line else None)


ECHO_WIDTH = 120  # as drill/judge/source.py: a long line is cut, not echoed whole


def _source_line(lineno: int) -> str | None:
    """Line `lineno` of the learner's file, decoded as Python decoded it (BOM, PEP 263 cookie).

    `tokenize.open` is the interpreter's own detection; a file it cannot
    decode (the import would have failed first) falls back to lossy UTF-8.
    """
    import tokenize

    try:
        try:
            fh = tokenize.open(LEARNER)
        except SyntaxError:
            fh = open(LEARNER, encoding="utf-8", errors="replace")
        with fh:
            for i, text in enumerate(fh, 1):
                if i == lineno:
                    text = text.strip()
                    return text if len(text) <= ECHO_WIDTH else text[: ECHO_WIDTH - 1] + "…"
    except (OSError, UnicodeDecodeError):
        pass
    return None


def trip(op: str) -> None:
    """A forbidden op was reached (any thread, any path): record it at once, then refuse to run it."""
    with trusted():
        line, source = learner_line_of_stack()
    hit = {"op": op, "line": line, "source": source}
    TRIPPED.append(hit)
    if WORK:
        record({"event": "trip", **hit})
    raise ForbiddenOp(op, line, source)


def _op_name(func) -> str:
    """'scaled_dot_product_attention' for functions, OpOverloads and packets alike."""
    name = getattr(func, "__name__", None) or str(func)
    name = name.split(".")[0] if not name.startswith("_ops.") else name
    return name


class FunctionTrap(TorchFunctionMode):
    def __init__(self, patterns: list[str]) -> None:
        super().__init__()
        self.forbidden = matcher(patterns)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = _op_name(func)
        if self.forbidden(name):
            trip(name)
        return func(*args, **(kwargs or {}))


# Set while the grader's own model runs around the learner's part (--in-model): its embedding, attention and
# initialisers are not the learner's ops; the unit cases hold the learner's code to the allowance.
ALLOWANCE_PAUSED: list = []


class DispatchTrap(TorchDispatchMode):
    """Trips a forbidden aten op; with an exercise's allowance (drill/judge/allowance.py: `allowed` patterns and
    their description) also every op outside it."""

    def __init__(self, patterns: list[str], allowed: list[str] | None = None, allowed_what: str = "") -> None:
        super().__init__()
        self.forbidden = matcher(patterns)
        self.allowed = matcher(allowed) if allowed else None
        self.allowed_what = allowed_what

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        # func is an OpOverload such as aten._scaled_dot_product_flash_attention_for_cpu.default
        name = getattr(func, "__name__", str(func)).split(".")[0]
        if self.forbidden(name):
            trip("aten." + name)
        if self.allowed is not None and not ALLOWANCE_PAUSED and not self.allowed(name):
            trip(f"aten.{name} (not among this exercise's ops: {self.allowed_what})")
        return func(*args, **(kwargs or {}))


# TorchDispatchMode subclasses get __torch_dispatch__ wrapped in
# torch._disable_dynamo, whose first call imports torch._dynamo: 1.7 s
# measured on torch 2.13 CPU, paid by every graded run. Nothing is compiled
# here, so the plain function is used (no-op on versions without the wrapper).
DispatchTrap.__torch_dispatch__ = getattr(DispatchTrap.__torch_dispatch__, "__wrapped__",
                                          DispatchTrap.__torch_dispatch__)


class BlockDrill(importlib.abc.MetaPathFinder):
    """The learner's file may not import drill (its reference holds the answers)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "drill" or fullname.startswith("drill."):
            trip(f"import {fullname}")
        return None


# Case kinds (chained calls, tiling measurement) and the audits are implemented in sibling files. They import
# only torch at module level and are loaded by path from the driver folder.
EXTENSIONS = {"chain": "chain", "audit": "audit", "tiling": "tiling", "grads": "grads", "optim": "optim",
              "exact": "exact", "adapter": "adapter", "rolling": "rolling", "beam": "beam", "paged": "paged",
              "train": "train_run", "dgpt": "dgpt"}
# The device the learner's code runs on ("cpu" or "cuda", set by `serve` from the job before the file is
# imported): inputs are moved there, modules are moved there after construction, outputs must come from it.
DEVICE = "cpu"


def extension(name: str):
    """The sibling module for a case kind or for the audits, loaded once by file path."""
    module = _sibling(EXTENSIONS[name])
    module.ContractError = ContractError  # their contract failures classify like ours
    return module


# -- layer 2: process-wide blocks ------------------------------------------------------------------

# The dispatch keys probed for kernels where torch cannot list an op's kernels (`_kernel_keys`).
KERNEL_KEYS = ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional",
               "CPU", "CUDA", "NestedTensorCPU", "NestedTensorCUDA", "AutogradNestedTensor", "SparseCPU", "SparseCUDA")


def forbidden_op_names(patterns: list[str]) -> list[str]:
    """Every aten operator (with overload) whose name matches an exercise's forbidden patterns."""
    get_all = getattr(torch._C, "_dispatch_get_all_op_names", None)
    names = get_all() if get_all is not None else []
    out = []
    forbidden = matcher(patterns)
    for full in names:
        if not full.startswith("aten::"):
            continue
        base = full[len("aten::"):]
        if forbidden(base.split(".")[0]):
            out.append(base)
    return sorted(out)


def block_kernels(patterns: list[str]) -> tuple[list[str], list[str]]:
    """Replace the kernels of the forbidden aten ops with one that trips, for every thread and TorchScript.

    A `torch.library` registration lives in the C++ dispatcher: no Python
    mode, thread or TorchScript function gets around it, and it covers the
    fused CUDA kernels (flash, memory-efficient, cuDNN) as well as the CPU
    ones. Returns (the ops blocked, for the record; the ops of which some
    kernel could not be replaced). With the second list empty every path to a
    forbidden op ends in a tripping kernel, so the per-op DispatchTrap adds
    nothing and is left off (`needs_dispatch_trap`).
    """
    import warnings

    plan = kernel_plan(patterns)
    leaks = list(_PLANS[tuple(patterns)][1])
    if not plan:
        return [], leaks
    lib = torch.library.Library("aten", "IMPL")
    blocked = []
    with warnings.catch_warnings():  # "Overriding a previously registered kernel": that is the point
        warnings.simplefilter("ignore")
        for base, keys in plan:
            kernel = _tripping_kernel("aten." + base.split(".")[0])
            for key in keys:
                try:
                    lib.impl(base, kernel, key)
                except (RuntimeError, ValueError):  # a key this build cannot register for
                    if key in _REGISTERED.get(base, ()):
                        leaks.append(base)  # it has a kernel there that stays reachable
            blocked.append(base)
    _pin(lib)
    return blocked, sorted(set(leaks))


def needs_dispatch_trap(leaks: list[str]) -> bool:
    """The thread-local DispatchTrap (a Python call on every aten op: 40-60% of a kv_cache or flash_attention
    check's grading time, measured) only where a forbidden op kept a kernel `block_kernels` could not replace,
    or where this torch cannot list an op's kernels."""
    return bool(leaks)


# patterns -> (op, keys) per op to block, and the ops whose kernels this torch could not list (then the
# DispatchTrap stays on for that exercise's runs).
_PLANS: dict[tuple[str, ...], tuple[list[tuple[str, list[str]]], list[str]]] = {}
_REGISTERED: dict[str, tuple[str, ...]] = {}  # op -> the dispatch keys it has a kernel for (from the dispatcher)
_UNPLANNED: set[str] = set()


def kernel_plan(patterns: list[str]) -> list[tuple[str, list[str]]]:
    """(op, dispatch keys to override) per forbidden op. Cached: a fork server computes it before forking.

    Asking the dispatcher which keys an op has costs ~0.4 ms per (op, key) on
    torch 2.13 (15 ms per run for attention); the answer is fixed for a torch
    build, so the fork server works it out once per exercise (reading the
    dispatcher, never running learner code) and every run forked after it
    inherits the plan. An op with no kernel in this build is left out.
    """
    cache_key = tuple(patterns)
    if cache_key not in _PLANS:
        plan = []
        names = forbidden_op_names(patterns)
        for base in names:
            keys = _kernel_keys(base)
            if keys:
                plan.append((base, keys))
        unlisted = patterns and not hasattr(torch._C, "_dispatch_get_all_op_names")  # no op could be found
        _PLANS[cache_key] = plan, [b for b in names if b in _UNPLANNED] + (["(every op)"] if unlisted else [])
    return _PLANS[cache_key][0]


# Keys whose kernels only wrap the op's real computation and redispatch (autograd, tracing, autocast, vmap,
# functionalization, meta shapes): an op registered only there cannot compute values in this build.
WRAPPER_KEYS = ("Autograd", "Tracer", "ADInplaceOrView", "Functionalize", "FuncTorch", "Autocast", "Batched", "Meta",
                "Python", "Named", "Conjugate", "Negative", "ZeroTensor", "BackendSelect")
_DUMP_KEY = re.compile(r"^([A-Za-z]+)(?:\[alias\])?: registered at", re.M)  # "(inactive)" entries do not match


def _kernel_keys(base: str) -> list[str]:
    """The dispatch keys to override for aten op `base`: every key the dispatcher lists a kernel for (wrappers
    included: under vmap or autocast a decomposition registered there would otherwise compute the op from
    allowed ones), plus CPU, and CUDA in a CUDA build, so a backend kernel registered later cannot slip in beside
    ours. An op whose only kernels are wrappers (the CUDA-only fused kernels on a CPU build) cannot run and is
    left alone: registering it would only cost time.

    The listing is cross-checked against a direct probe of the known keys (~1 ms for attention's 30 ops): a
    kernel the probe finds that the listing lacks means this torch's listing is not understood, and the op is
    recorded in `_UNPLANNED`, which keeps the DispatchTrap on for the exercise's runs."""
    backends = ("CPU", "CUDA") if torch.backends.cuda.is_built() else ("CPU",)
    probed = _probed_keys(base)
    dump = getattr(torch._C, "_dispatch_dump", None)
    try:
        listed = [k for k in _DUMP_KEY.findall(dump("aten::" + base)) if k != "debug"] if dump else None
    except (RuntimeError, ValueError):
        listed = None
    if listed is None or (probed is not None and not set(probed) <= set(listed)):
        _UNPLANNED.add(base)
        known = listed or []
        listed = known + [k for k in (probed if probed is not None else backends) if k not in known]
    if not any(not k.startswith(WRAPPER_KEYS) for k in listed):
        return []
    _REGISTERED[base] = tuple(listed)
    return listed + [k for k in backends if k not in listed]


def _probed_keys(base: str) -> list[str] | None:
    """The known keys (KERNEL_KEYS) that aten op `base` has a kernel for, asked one by one; None if torch cannot
    be asked."""
    has_kernel = getattr(torch._C, "_dispatch_has_kernel_for_dispatch_key", None)
    if has_kernel is None:
        return None
    found = []
    for key in KERNEL_KEYS:
        try:
            if has_kernel("aten::" + base, key):
                found.append(key)
        except (RuntimeError, ValueError):  # an unknown key in this build
            continue
    return found


def _pin(lib) -> None:
    """Keep `lib`'s registrations for the life of the process with no Python path back to them.

    The registrations belong to the C++ library object `lib.m`; whoever holds
    it (or the `Library` around it) can undo them (`_destroy`). Code that
    reaches this module's globals (frames, with the policy off) once did just
    that and ran the real fused kernel. So `lib.m` gets one reference from C
    and none from Python: the finalizer that held it is detached, the
    `Library` lets it go, and the object itself is not tracked by gc, so no
    object walk finds it either.
    """
    import ctypes

    _detach_finalizer(lib)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(lib.m))
    lib.m = None


def _tripping_kernel(name: str):
    def kernel(*args, **kwargs):
        trip(name)

    return kernel


def _detach_finalizer(lib) -> None:
    """torch registers a weakref.finalize per Library; detached, nothing reachable by name can undo ours."""
    import weakref

    for fin in list(getattr(weakref.finalize, "_registry", {})):
        info = weakref.finalize._registry.get(fin)
        if info is not None and getattr(info, "weakref", lambda: None)() is lib:
            fin.detach()


def block_functions(patterns: list[str]) -> None:
    """Forbidden functions written in Python (F.multi_head_attention_forward, F.rms_norm, ...) replaced module-wide.

    Unlike the thread-local TorchFunctionMode, this holds on every thread.
    Builtins (torch.rms_norm, F.scaled_dot_product_attention) are left to
    `block_kernels`, which catches them below Python.
    """
    import types

    forbidden = matcher(patterns)
    for module in (torch.nn.functional, torch, *_attention_modules()):
        for name in dir(module):
            if not forbidden(name):
                continue
            value = getattr(module, name, None)
            if isinstance(value, types.FunctionType):
                setattr(module, name, _tripping_function(name))


def _attention_modules() -> list:
    """torch.nn.attention's flex_attention module, whose eager entry compiles the op through Dynamo before the
    higher-order op is reached (the audit hook refuses that as frame access, which named the wrong thing)."""
    try:
        import torch.nn.attention.flex_attention as flex  # ~2 ms; the fork server imports it once in warm_up
    except Exception:  # noqa: BLE001 - an older torch without it: nothing to block there
        return []
    return [flex]


def block_higher_order_ops(patterns: list[str]) -> list[str]:
    """Forbidden higher-order operators (flex_attention) made to trip on every call, from any thread.

    A HOP is neither an aten kernel nor a plain function: its eager path runs
    a Python implementation made of ordinary ops, so only its own entry can
    be blocked. Each HOP named by a pattern has a class of its own, whose
    `__call__` is replaced (process-wide).
    """
    import torch._ops as ops

    base = getattr(ops, "HigherOrderOperator", None)
    blocked = []
    forbidden = matcher(patterns)
    for name, hop in sorted(getattr(ops, "_higher_order_ops", {}).items()):
        cls = type(hop)
        if base is not None and cls is not base and forbidden(name):
            cls.__call__ = _tripping_function(name)
            blocked.append(name)
    return blocked


def _tripping_function(name: str):
    def blocked(*args, **kwargs):
        trip(name)

    blocked.__name__ = name
    return blocked


# How a trip through a blocked path reads when the path itself says little.
_PATH_NAMES = {"torch.autograd.variable.Variable._execution_engine": "autograd's backward engine (backward/grad)",
               "torch.Tensor.grad_fn": "reading a tensor's grad_fn (the recorded graph's nodes are autograd)",
               "torch.Tensor._grad_fn": "reading a tensor's grad_fn (the recorded graph's nodes are autograd)"}


def block_paths(patterns: list[str]) -> list[str]:
    """Forbidden Python objects named by dotted path, replaced process-wide by tripwires; returns what was blocked.

    A pattern with a dot names an attribute of a module or class:
    "torch.autograd.grad", "torch.Tensor.backward", a wildcard over a
    module's public functions ("torch.autograd.functional.*"), or an object
    that is no function ("torch.autograd.variable.Variable._execution_engine",
    the engine every reverse-mode path runs through: functorch's grad/vjp and
    torch.autograd.functional reach it even by references taken before the
    block). Holds on every thread; names that do not exist in this torch are
    skipped. Undotted patterns are left to `block_kernels`/`block_functions`.
    """
    import types

    blocked = []
    for pattern in patterns:
        if "." not in pattern:
            continue
        owner_path, _, attr = pattern.rpartition(".")
        owner = _resolve_path(owner_path)
        if owner is None:
            continue
        if any(c in attr for c in "*?["):
            wanted = matcher([attr])
            names = [n for n, v in list(vars(owner).items())
                     if not n.startswith("_") and wanted(n) and isinstance(v, types.FunctionType)]
        else:
            names = [attr] if hasattr(owner, attr) else []
        for name in names:
            path = f"{owner_path}.{name}"
            setattr(owner, name, _tripwire(_PATH_NAMES.get(path, path), getattr(owner, name)))
            blocked.append(path)
    return blocked


def _resolve_path(dotted: str):
    """The module or class a dotted path names (the longest importable prefix, then attributes), or None."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            obj = getattr(obj, part, None)
            if obj is None:
                return None
        return obj
    return None


class _Tripwire:
    """Stands in for a forbidden object that is not a function: any use of it trips."""

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_name", name)

    def __getattr__(self, attr):
        trip(object.__getattribute__(self, "_name"))

    def __call__(self, *args, **kwargs):
        trip(object.__getattribute__(self, "_name"))


def _tripwire(name: str, original):
    import types

    functions = (types.FunctionType, types.BuiltinFunctionType, types.MethodDescriptorType, types.MethodType,
                 types.WrapperDescriptorType)
    if isinstance(original, (types.GetSetDescriptorType, types.MemberDescriptorType, property)):
        return property(lambda self: trip(name))  # an attribute read (Tensor.grad_fn): trips when read
    return _tripping_function(name) if isinstance(original, functions) else _Tripwire(name)


class _Trust(threading.local):
    on = False


_TRUST = _Trust()


class trusted:
    """The grader's own introspection (the learner's line, a traceback) passes the audit hook on this thread."""

    def __enter__(self):
        self.before = _TRUST.on
        _TRUST.on = True

    def __exit__(self, *exc):
        _TRUST.on = self.before
        return False


_DENIED_EVENTS = frozenset({
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "subprocess.Popen", "pty.spawn",
    "os.kill", "os.killpg", "signal.pthread_kill", "os.setuid", "os.setgid",
    "ctypes.dlopen", "ctypes.dlsym", "ctypes.call_function", "ctypes.cdata", "ctypes.string_at", "ctypes.wstring_at",
    "ctypes.addressof", "ctypes.get_errno", "ctypes.set_errno", "ctypes.seh_exception",
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames", "sys._current_exceptions",
    "sys.addaudithook", "sys.setprofile", "sys.settrace", "sqlite3.connect", "sqlite3.connect/handle",
    "webbrowser.open", "resource.setrlimit",
})
# Audited attribute reads that lead to another frame's globals (sys._getframe and __code__ are left alone:
# namedtuple, TypeVar, enum and dataclasses use them in ordinary solutions).
_FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "__globals__"})
_PATH_EVENTS = frozenset({"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.truncate", "os.chmod", "os.chown",
                          "os.link", "os.symlink", "shutil.rmtree", "shutil.move", "shutil.copyfile", "os.utime",
                          "os.chflags", "os.lchflags", "os.setxattr", "os.removexattr"})
# Standard-library helpers that can hand the frame they get from sys._getframe back to their caller
# (logging's own findCaller uses currentframe too, and is allowed: it returns names, and its caller is logging).
_FRAME_GIVERS = ("inspect.py", "traceback.py", os.path.join("logging", "__init__.py"), "pdb.py", "bdb.py")
# Native modules whose functions below are replaced (they raise no audit event): loading them again would
# bring the originals back, so their "import" event is refused once the hook is in.
_RELOAD_REFUSED = frozenset({"_posixsubprocess", "posix", "_signal", "resource"})


class Denied(BaseException):
    """Raised by the audit hook; BaseException so `except Exception` cannot hide it."""


def install_audit_hook(writable: list[str], hidden: list[str], tools: dict | None = None) -> None:
    """Refuse, from now on and in every thread, what no solution does (irremovable: PEP 578).

    `writable`: the only folders files may be created or changed in (scratch,
    /tmp, the protocol folder); `hidden`: folders that may not even be read
    (drill's own package, if it is on disk somewhere visible). `tools`: a
    Triton job's compiler programs (gpu.prepare_triton), which may then be
    started, with Triton's own argument shapes only (gpu.exec_rule); every
    other process creation stays refused.

    Also refused: `sys._getframe` called by the learner's code (or code it
    compiled) or through a helper that returns the frame (inspect,
    traceback, logging): a frame's `f_back` and `f_globals` raise no audit
    event and lead to this module's globals; and, as they raise none either,
    the native ways to start a process, signal one or write a file that
    `_guard_native` replaces before the learner's code runs.
    """
    realpath, startswith, getpid, getframe = os.path.realpath, str.startswith, os.getpid, sys._getframe
    denied, frame_attrs, path_events, givers = _DENIED_EVENTS, _FRAME_ATTRS, _PATH_EVENTS, _FRAME_GIVERS
    reload_refused = _RELOAD_REFUSED
    trust = _TRUST
    write_roots = tuple(realpath(p).rstrip("/") + "/" for p in writable)
    hidden_roots = tuple(realpath(p).rstrip("/") + "/" for p in hidden)
    learner = LEARNER
    hits = []
    may_run = _sibling("gpu").exec_rule(tools, write_roots) if tools else None
    spawns = {"subprocess.Popen": (0, 1), "os.posix_spawn": (0, 1), "os.posix_spawnp": (0, 1)}  # (exe, argv) args

    def refuse(event: str, detail: str = "") -> None:
        hits.append(event)
        if len(hits) <= 20 and WORK:
            try:
                record({"event": "denied", "what": event, "detail": detail[:200]})
            except BaseException:  # noqa: BLE001 - the record is best effort, the refusal is not
                pass
        raise Denied(f"{event} is not allowed in graded code" + (f": {detail}" if detail else ""))

    def under(path: str, roots: tuple) -> bool:
        full = realpath(path).rstrip("/") + "/"
        return any(startswith(full, r) for r in roots)

    def untrusted(filename: str) -> bool:
        return filename == learner or (startswith(filename, "<") and not startswith(filename, "<frozen"))

    def frame_refused() -> str:
        """Why this sys._getframe call is refused ("" if not): this hook runs inside that C call, so frame 2 is
        its caller; a frame-giving helper (inspect.currentframe) is judged by who called the helper."""
        trust.on = True  # our own sys._getframe below raises the event again
        try:
            caller = getframe(2)
            name = caller.f_code.co_filename
            if untrusted(name):
                return os.path.basename(name)
            if any(name.endswith(os.sep + g) for g in givers):
                above = caller.f_back.f_code.co_filename if caller.f_back is not None else ""
                return f"{os.path.basename(name)} for {os.path.basename(above)}" if untrusted(above) else ""
            return ""
        finally:
            trust.on = False

    def hook(event: str, args: tuple) -> None:
        if trust.on:
            return
        if may_run is not None and event in spawns and len(args) > 1:
            exe, argv = spawns[event]
            if may_run(args[exe], args[argv]):  # Triton's ptxas / C compiler, in Triton's shapes only
                return
        if event in denied or event.startswith("socket."):
            refuse(event)
        elif event == "object.__getattr__":
            if len(args) > 1 and args[1] in frame_attrs:
                refuse(event, str(args[1]))
        elif event == "sys._getframe":
            why = frame_refused()
            if why:
                refuse(event, f"called from {why}: frames lead to the grader's own objects")
        elif event == "resource.prlimit":
            if (len(args) > 0 and args[0] not in (0, getpid())) or (len(args) > 2 and args[2] is not None):
                refuse(event)
        elif event == "import":
            name = args[0] if args else ""
            if isinstance(name, str) and (name == "drill" or startswith(name, "drill.") or name in reload_refused):
                refuse("import", name)
        elif event == "open":
            path, mode = (args + (None, None))[:2]
            if isinstance(path, bytes):
                path = path.decode("utf-8", "replace")
            if not isinstance(path, str):
                return
            if hidden_roots and under(path, hidden_roots):
                refuse("open", path)
            if startswith(path, "/proc/") and path[6:7].isdigit() and not startswith(path, f"/proc/{getpid()}/"):
                refuse("open", path)
            flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
            writing = ((isinstance(mode, str) and any(c in mode for c in "wax+"))
                       or bool(flags & (os.O_WRONLY | os.O_RDWR)))
            if writing and path != os.devnull and not under(path, write_roots):
                refuse("open", f"{path} (write)")
        elif event in path_events:
            for p in args[:2]:
                if isinstance(p, (str, bytes)) and not under(os.fsdecode(p), write_roots):
                    refuse(event, os.fsdecode(p))

    def writable_path(f) -> bool:
        return not isinstance(f, (str, bytes, os.PathLike)) or os.fsdecode(f) == os.devnull or under(
            os.fsdecode(f), write_roots)

    _guard_native(refuse, writable_path, may_run)
    sys.addaudithook(hook)


def _guard_native(refuse, writable_path, may_run=None) -> None:
    """Replace the native ways out that raise no audit event (CPython 3.11, torch 2.13), before learner code.

    Starting a process (`_posixsubprocess.fork_exec`), signalling any
    process (`os.pidfd_open`, `signal.pidfd_send_signal`) and writing a file
    from C++ (`torch.save` and its `PyTorchFileWriter`, `torch.from_file`
    with `shared=True`, `torch.jit.save`) go around the audit hook; each is
    replaced by a wrapper that refuses (or, for the writers, checks the path
    against the writable folders unless the grader itself is saving). This
    holds against the static policy's allowed API; code with the policy off
    that digs out an original (`__wrapped__`, a base class) is what the OS
    sandbox is for (README, "Known limits").
    """
    import _posixsubprocess
    import posix
    import signal
    import subprocess

    def refusing(what: str):
        def blocked(*args, **kwargs):
            refuse(what)

        blocked.__name__ = what.rsplit(".", 1)[-1]
        return blocked

    def spawning(real):
        """fork_exec(args, executable_list, ...): refused, except a Triton tool in Triton's shapes (may_run)."""
        def spawn(*args, **kwargs):
            if may_run is not None and len(args) > 1 and args[1] and all(may_run(e, args[0]) for e in args[1]):
                return real(*args, **kwargs)
            refuse("subprocess.fork_exec")

        spawn.__name__ = "fork_exec"
        return spawn

    fork_exec = spawning(_posixsubprocess.fork_exec) if hasattr(_posixsubprocess, "fork_exec") else None
    for module, name, what in ((posix, "pidfd_open", "os.pidfd_open"), (os, "pidfd_open", "os.pidfd_open"),
                               (signal, "pidfd_send_signal", "signal.pidfd_send_signal")):
        if hasattr(module, name):
            setattr(module, name, refusing(what))
    for module, name in ((_posixsubprocess, "fork_exec"), (subprocess, "_fork_exec")):
        if fork_exec is not None and hasattr(module, name):
            setattr(module, name, fork_exec)
    # The run's cap on CUDA memory (gpu.enter_cuda) is the allocator's per-process fraction: not the learner's
    # to raise (torch.cuda is allowed by the policy; the private setter is refused there, and here).
    cuda_memory = sys.modules.get("torch.cuda.memory")
    for module, name in ((torch.cuda, "set_per_process_memory_fraction"),
                         (cuda_memory, "set_per_process_memory_fraction"),
                         (torch._C, "_cuda_setMemoryFraction"), (cuda_memory, "_set_allocator_settings")):
        if module is not None and hasattr(module, name):
            setattr(module, name, refusing(f"torch.cuda.{name.lstrip('_')}"))
    signal_c = sys.modules.get("_signal")
    if signal_c is not None and hasattr(signal_c, "pidfd_send_signal"):
        signal_c.pidfd_send_signal = refusing("signal.pidfd_send_signal")

    def checked(what: str, real, path_of):
        def wrapper(*args, **kwargs):
            path = path_of(args, kwargs)
            if not _TRUST.on and path is not None and not writable_path(path):
                refuse(what, f"{os.fsdecode(path)} (write)")
            return real(*args, **kwargs)

        wrapper.__name__ = getattr(real, "__name__", what)
        return wrapper

    first = lambda name: lambda a, k: a[0] if a else k.get(name)  # noqa: E731
    second = lambda name: lambda a, k: a[1] if len(a) > 1 else k.get(name)  # noqa: E731
    shared = lambda a, k: (a[0] if a else k.get("filename")) if (a[1:2] or [k.get("shared")])[0] else None  # noqa: E731
    save = checked("torch.save", torch.serialization.save, second("f"))
    torch.save = torch.serialization.save = save
    torch.from_file = checked("torch.from_file", torch.from_file, shared)
    for cls in (torch.UntypedStorage, torch.TypedStorage):  # `real` is bound to the class already
        cls.from_file = staticmethod(checked("Storage.from_file", cls.from_file, shared))
    writer = checked("PyTorchFileWriter", torch._C.PyTorchFileWriter, first("file_name"))
    torch._C.PyTorchFileWriter = writer
    if hasattr(torch, "PyTorchFileWriter"):
        torch.PyTorchFileWriter = writer
    jit_save = getattr(getattr(torch, "jit", None), "save", None)
    if jit_save is not None:
        torch.jit.save = checked("torch.jit.save", jit_save, second("f"))


def attr_report(mod, name: str) -> dict:
    """A module-level name for the parent (rope's CONVENTION): JSON scalars only, else just the type."""
    if not hasattr(mod, name):
        return {"present": False}
    value = getattr(mod, name)
    plain_value = value if isinstance(value, (str, int, float, bool, type(None))) else None
    if isinstance(plain_value, str):
        plain_value = plain_value[:100]
    return {"present": True, "value": plain_value, "type": type(value).__name__}


def trap_classes(names: list[str]) -> None:
    for dotted in names:
        mod_name, _, cls_name = dotted.rpartition(".")
        try:
            cls = getattr(sys.modules.get(mod_name) or importlib.import_module(mod_name), cls_name)
        except (ImportError, AttributeError):
            continue

        shown = dotted.replace("torch.nn.", "nn.")

        def blocked_init(self, *a, _name=shown, **k):  # the default binds this iteration's name
            trip(_name)

        cls.__init__ = blocked_init


_STATUS_FD: list[int] = []
def close_name(mod, name: str) -> str:
    """' (did you mean `LayerNrom`?)' when the file defines a near miss of a graded name, else ''.

    Compared case-insensitively with - and _ ignored, among the module's own
    public names (imports excluded, so `torch` is never offered).
    """
    import difflib  # only on this error path

    def key(n: str) -> str:
        return n.lower().replace("_", "").replace("-", "")

    own = [n for n, v in vars(mod).items() if not n.startswith("_") and getattr(v, "__module__", None) == mod.__name__]
    by_key = {key(n): n for n in own}
    close = difflib.get_close_matches(key(name), list(by_key), n=1, cutoff=0.75)
    return f" (did you mean `{by_key[close[0]]}`?)" if close else ""


def record(event: dict) -> None:
    """Append one status record (one write(2) of one line, O_APPEND: lines never interleave)."""
    line = (json.dumps(event) + "\n").encode()
    if _STATUS_FD:
        os.write(_STATUS_FD[0], line)
        return
    with trusted():
        with open(os.path.join(WORK, "status.jsonl"), "ab") as fh:
            fh.write(line)


def plain(t: torch.Tensor) -> torch.Tensor:
    """A detached, contiguous, CPU, plain-class copy (no subclass survives the trip).

    Runs with the traps' dispatch mode lifted: on torch 2.4 `as_subclass`
    under an active TorchDispatchMode raises "the raw Tensor object is already
    associated to a python object", even for a plain Tensor. The copy is the
    grader's own work, so nothing the learner runs escapes the traps.
    """
    with _no_dispatch_modes():
        odd = _odd_tensor(t)
        if odd:
            raise ContractError("wrong_type", f"returned a {odd} tensor; the contract needs a dense (strided) tensor")
        return t.as_subclass(torch.Tensor).detach().to("cpu").contiguous().clone()


def _odd_tensor(t: torch.Tensor) -> str:
    """What makes `t` something other than a dense tensor with data (sparse, nested, quantized, meta...), or ""."""
    if t.is_nested:
        return "nested"
    if t.is_quantized:
        return "quantized"
    if t.is_meta:
        return "meta"
    if t.layout != torch.strided:
        return str(t.layout).replace("torch.", "")
    return ""


def type_name(obj) -> str:
    t = type(obj)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"


def resolve_attr(obj, path: str, owner: str):
    cur = obj
    walked = owner
    for part in path.split("."):
        if not hasattr(cur, part):
            raise ContractError("missing_name",
                                f"{walked} has no attribute `{part}` (the contract needs `{owner}.{path}`)")
        cur = getattr(cur, part)
        walked += "." + part
    return cur


# This module, for the sibling executors (sys.modules loses "__main__" before learner code).
HOST = sys.modules.get(__name__)
# What an answer may be, captured before any learner code runs (`type(t)` reads the object's own type, which a
# file cannot redirect the way it can `__class__`): a plain tensor, or a parameter handed back as it is.
_PLAIN_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)


def run_inmodel(mod, case: dict, tensors: dict) -> dict:
    """An in-model case, the op allowance paused (ALLOWANCE_PAUSED): the decoder around the part is the grader's."""
    ALLOWANCE_PAUSED.append(True)
    try:
        return _run_inmodel(mod, case, tensors)
    finally:
        ALLOWANCE_PAUSED.pop()


def _run_inmodel(mod, case: dict, tensors: dict) -> dict:
    """In-model case: build the decoder from the source the parent sent (the graded part cut out), swap the
    learner's component in, return logits or greedy tokens (see drill/judge/inmodel.py and decoder.py)."""
    extra = case["extra"]
    exercise = extra["exercise"]
    namespace: dict = {"__name__": "_drill_judge_decoder"}
    with trusted():
        exec(compile(extra["decoder"], "<drill decoder>", "exec"), namespace)  # noqa: S102 - the parent's own code
    convention = getattr(mod, "CONVENTION", "half") if exercise == "rope" else "half"
    model = namespace["Decoder"](extra["config"], exercise,
                                 convention if convention in ("half", "interleaved") else "half")
    weights = {key: tensors[t] for key, t in case["params"].items()}
    model.load_state_dict({key[len("decoder."):]: t for key, t in weights.items() if key.startswith("decoder.")})
    ids = tensors[case["args"][0]["t"]]
    if exercise == "lora":  # the learner's layer wraps the decoder's projections: one training step
        factors = {key[len("lora."):]: t for key, t in weights.items() if key.startswith("lora.")}
        names = [key[len("decoder."):] for key in weights if key.startswith("decoder.")]
        out = namespace["lora_run"](model.to(ids.device), mod.LoRALinear, factors, ids, extra["returns"],
                                    r=int(extra["r"]), alpha=float(extra["alpha"]), lr=float(extra["lr"]), names=names)
        return {"out": plain(out)}
    model.swap(exercise, mod)
    model.eval()
    model.to(ids.device)  # on a CUDA check the decoder and your component run on the GPU too
    if extra["returns"] == "logits":
        with torch.no_grad():
            out = model(ids)
    else:
        out = namespace["greedy"](model, ids, int(extra["new_tokens"]), cached=bool(extra["cached"]))
    return {"out": plain(out)}


_ABSENT = object()


def run_case(mod, case: dict, tensors: dict) -> dict:
    """Run one case with the module-level names it sets (`module_attrs`), restored afterwards, whatever happens."""
    attrs = case.get("module_attrs") or {}
    before = {name: mod.__dict__.get(name, _ABSENT) for name in attrs}
    for name, value in attrs.items():
        setattr(mod, name, value)
    try:
        return _run_case(mod, case, tensors)
    finally:
        for name, value in before.items():
            if value is _ABSENT:
                mod.__dict__.pop(name, None)
            else:
                setattr(mod, name, value)


# What a map case's function must return, per row: "int" (ffn_hidden_dim) or "float" (cosine_lr: a Python
# float, an int accepted as the number it is). A bool, a tensor or a numpy array is the wrong type: the
# contract says a Python number, and a 0-dim tensor that compares equal would hide which was written.
_MAP_RETURNS = {"int": ((int,), torch.int64, "an int"), "float": ((int, float), torch.float64, "a float")}


def _run_map(fn, target: str, rows: list, returns: str):
    """Call fn(*row) for every row; the answers as one tensor (the parent compares it like any output)."""
    kinds, dtype, wanted = _MAP_RETURNS[returns]
    values = []
    for row in rows:
        got = fn(*row)
        if isinstance(got, bool) or not isinstance(got, kinds):
            raise ContractError("wrong_type",
                                f"{target}{tuple(row)} returned {type_name(got)} ({got!r:.60}) instead of {wanted}")
        values.append(got)
    return torch.tensor([int(v) if dtype == torch.int64 else float(v) for v in values], dtype=dtype)


def ints_of(got, target: str) -> list:
    """A call's answer that the contract makes a Python list of ints (extra "returns": "int_list",
    speculative_decoding's verify), checked: a tensor, a tuple or a list holding bools or floats is the wrong
    type, since the contract says list[int]."""
    if not isinstance(got, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in got):
        raise ContractError("wrong_type", f"{target} returned {type_name(got)} ({got!r:.80}) instead of a list of ints")
    return got


def int_list(got, target: str) -> torch.Tensor:
    """That list as an int64 tensor, which the parent compares exactly."""
    return torch.tensor(ints_of(got, target), dtype=torch.int64)


class RandomStateChanged(Exception):
    """A call that the contract says draws no random numbers changed a global generator (extra "rng_unchanged")."""


def rng_unchanged(run, target: str):
    """`run` (no arguments) checked for randomness of its own: torch's global CPU generator and Python's `random`
    module must be in the same state after it as before. A change raises RandomStateChanged, whose message the
    spec's exception_bugs name (speculative_decoding: random numbers are inputs, spec_rng_inside)."""
    import random

    torch_before, python_before = torch.get_rng_state(), random.getstate()
    out = run()
    changed = [name for name, same in (("torch's global generator", torch.equal(torch.get_rng_state(), torch_before)),
                                       ("Python's random module", random.getstate() == python_before)) if not same]
    if changed:
        raise RandomStateChanged(f"{target} changed the global random state ({' and '.join(changed)}): it draws "
                                 f"random numbers of its own, where the contract passes every random number in")
    return out


def over_rows(call, args: list, case: dict) -> torch.Tensor:
    """Many calls in one case (extra "over": arg names split along dim 0, "width": the longest answer): call i gets
    row i of those args and the others whole, the same tensors for every call (an edit in place shows in the
    later calls' answers); each answer a list of ints, padded with -1 into one (N, width) int64 tensor that the
    case's judge reads (speculative_decoding's distribution check). The loop itself does no torch work beyond the
    learner's: 30 000 calls under the child's traps cost what the learner's code costs."""
    extra, target = case["extra"], case["target"]
    split = [a.unbind(0) if name in extra["over"] else None for name, a in zip(case["arg_names"], args, strict=True)]
    n = len(next(rows for rows in split if rows is not None))
    width = int(extra["width"])
    answers = []
    for i in range(n):
        got = ints_of(call(*[a if rows is None else rows[i] for a, rows in zip(args, split, strict=True)]), target)
        if len(got) > width:
            raise ContractError("wrong_shape", f"{target} returned {len(got)} ints, at most {width} are possible")
        answers.append(got + [-1] * (width - len(got)))
    return torch.tensor(answers, dtype=torch.int64).reshape(n, width)


def _run_case(mod, case: dict, tensors: dict) -> dict:
    """Run one case; return the tensors to save. Raises on any learner failure."""
    if case["kind"] == "inmodel":
        return run_inmodel(mod, case, tensors)
    if case["kind"] in EXTENSIONS:
        return extension(case["kind"]).run_case(mod, case, tensors, HOST)
    target = case["target"]
    fn = getattr(mod, target)
    if case["kind"] == "map":
        return {"out": _run_map(fn, target, case["rows"], case.get("returns", "int"))}

    def value(spec):
        if isinstance(spec, dict) and "t" in spec:
            return tensors[spec["t"]].clone()
        return spec["v"] if isinstance(spec, dict) else spec

    views = (case.get("extra") or {}).get("views") or {}

    def fresh() -> list:
        """The call's arguments, fresh copies; a non-contiguous view where the case asks for one (triton_rmsnorm)."""
        out = [value(a) for a in case["args"]]
        for name, how in views.items():
            if name in case["arg_names"]:
                i = case["arg_names"].index(name)
                out[i] = input_view(out[i], how)
        return out

    args = fresh()
    grad_names = case.get("grad_inputs", [])
    # extra "track_grad": these args require grad and the case grades only whether the output does (dpo: the
    # rewards must come back detached); the output becomes tensor([0]) or tensor([1]), and nothing is backpropagated.
    tracked = (case.get("extra") or {}).get("track_grad") or []
    for name, i in zip(case["arg_names"], range(len(args)), strict=True):
        if name in grad_names or name in tracked:
            args[i].requires_grad_(True)
    module = None
    if case["kind"] == "module":
        module = fn(*[value(a) for a in case["init"]])
        if not isinstance(module, torch.nn.Module):
            raise ContractError("wrong_type", f"{target}(...) built a {type_name(module)}, not an nn.Module")
        if DEVICE != "cpu":  # as a user does: Module(...).to("cuda")
            module.to(DEVICE)
        if case.get("module_dtype"):
            module.to(getattr(torch, case["module_dtype"]))
        for path, key in case["params"].items():
            p = resolve_attr(module, path, target)
            if not isinstance(p, torch.Tensor):
                raise ContractError("wrong_type", f"{target}.{path} is a {type_name(p)}, not a tensor")
            want = tensors[key]
            if tuple(p.shape) != tuple(want.shape):
                raise ContractError(
                    "wrong_shape",
                    f"{target}.{path} has shape {tuple(p.shape)}, the contract needs {tuple(want.shape)}",
                )
            with torch.no_grad():
                p.copy_(want.to(p.dtype))
    # A repeat-call probe: first two calls with other inputs of the same shapes on the same
    # function or module instance (outputs not graded), kept alive so their tensors' storage
    # is not reused by the graded call's; state kept between calls then shows in `out`. Two, so
    # the graded call is the third of its shape: a cache used only from the third call on once
    # passed (issue 30: RoPE rotated by stale angles a few decode steps in).
    first = [value(a) for a in case["repeat"]] if case.get("repeat") else None
    call = with_keywords(module if module is not None else fn, case)
    if first is not None:
        call(*first)
        call(*first)
    raises = (case.get("extra") or {}).get("raises")
    if raises:
        return {"out": raised(call, args, raises)}
    extra = case.get("extra") or {}
    if extra.get("over"):  # many calls, one answer tensor (the case's judge reads it); the generators watched once
        if extra.get("rng_unchanged"):
            return {"out": rng_unchanged(lambda: over_rows(call, args, case), target)}
        return {"out": over_rows(call, args, case)}
    if extra.get("rng_unchanged"):  # random numbers are inputs: the global generators must not move
        plain_call = call

        def call(*values):
            return rng_unchanged(lambda: plain_call(*values), target)
    measure = extra.get("measure")
    if measure and module is not None:  # an audit measures this graded call itself (issue 30 §2), not one of its own
        out, figures = extension("audit").measure_case(measure, [value(a) for a in case["init"]], module, args,
                                                       lambda: call(*args), HOST, mod)
        MEASURED.setdefault(measure, []).append(figures)
    else:
        out = call(*args)
    if extra.get("returns") == "int_list":
        out = int_list(out, target)
    if (case.get("extra") or {}).get("tuple"):
        out = tuple_element(out, case["extra"]["tuple"], target)
    if not isinstance(out, torch.Tensor):
        raise ContractError("wrong_type", f"{target} returned {type_name(out)} instead of a tensor")
    if type(out) not in _PLAIN_TENSOR_TYPES:  # a subclass may compute when first looked at, outside any measurement
        raise ContractError("wrong_type", f"{target} returned a {type_name(out)}, a subclass of torch.Tensor; the "
                                          f"contract needs a plain torch.Tensor")
    on_device(out, target)
    if tracked:
        return {"out": torch.tensor([1 if out.requires_grad else 0], dtype=torch.int64)}
    result = {"out": plain(out)}
    if case.get("upstream"):
        up = tensors[case["upstream"]]
        grad_error = None
        if not out.requires_grad:
            grad_error = "the output is not connected to the inputs' autograd graph"
        elif tuple(out.shape) == tuple(up.shape):
            try:
                (out * up.to(out.dtype)).sum().backward()  # = out.backward(up), minus a slow import
            except ForbiddenOp:
                raise
            except Exception as exc:  # the learner's backward failed
                grad_error = f"backward raised {type(exc).__name__}: {str(exc)[:200]}"
        else:
            grad_error = "output shape differs, gradients not computed"
        if grad_error is None:
            for name, i in zip(case["arg_names"], range(len(args)), strict=True):
                if name in grad_names and args[i].grad is not None:
                    result["input:" + name] = plain(args[i].grad)
            if case.get("grad_params") and module is not None:
                for path in case["params"]:
                    g = resolve_attr(module, path, target).grad
                    if g is not None:
                        result["param:" + path] = plain(g)
        result["__grad_error__"] = torch.tensor([1 if grad_error else 0])
        if grad_error:
            record({"event": "grad_error", "case": case["index"], "message": grad_error})
    # A determinism probe (extra "twice", specs/_common.twice_probe): after the graded call and its
    # backward, the same function or module instance is called again on fresh copies of the same
    # inputs; the parent compares the two outputs (dropout left active differs, a correct file cannot).
    if (case.get("extra") or {}).get("twice"):
        again = call(*fresh())
        if case["extra"].get("returns") == "int_list":
            again = int_list(again, target)
        if case["extra"].get("tuple"):  # the same element of the tuple as the graded call's
            again = tuple_element(again, case["extra"]["tuple"], target)
        if isinstance(again, torch.Tensor):
            result["again"] = plain(again)
    return result


def with_keywords(call, case: dict):
    """`call` taking the case's arguments in order, those named in `extra["keywords"]` by keyword (keyword-only
    parameters: rope_scaling's original_max_position, seq_len, ...); the others positionally, as before."""
    keywords = set((case.get("extra") or {}).get("keywords") or ())
    if not keywords:
        return call
    names = list(case["arg_names"])

    def invoke(*values):
        pos = [v for n, v in zip(names, values, strict=True) if n not in keywords]
        return call(*pos, **{n: v for n, v in zip(names, values, strict=True) if n in keywords})

    return invoke


# The exceptions a case may require (`extra["raises"]`): the contract's refusals (rope_scaling: an unknown kind).
_RAISES = {"ValueError": ValueError, "TypeError": TypeError}


def raised(call, args: list, wanted: str) -> torch.Tensor:
    """A case whose call must raise `wanted`: tensor([1]) when it did, [0] when it returned, [2] when it raised
    another exception (the parent's Case.judge words the verdict). NotImplementedError and the traps propagate
    (a starter, a forbidden op), like any other case's."""
    try:
        call(*args)
    except NotImplementedError:
        raise
    except _RAISES[wanted]:
        return torch.tensor([1])
    except Exception:  # noqa: BLE001 - the wrong exception is the answer being graded
        return torch.tensor([2])
    return torch.tensor([0])


def input_view(t: torch.Tensor, how: list) -> torch.Tensor:
    """A case's non-contiguous view of an input, as the parent's spec drew it (specs/triton_rmsnorm.view):
    ["narrow", d] = t[..., :d], ["rows", k] = t[::k], ["t"] = the transpose of the last two dims."""
    kind = how[0] if how else None
    if kind == "narrow":
        return t[..., : int(how[1])]
    if kind == "rows":
        return t[:: int(how[1])]
    if kind == "t":
        return t.transpose(-2, -1)
    raise ContractError("crashed", f"unknown input view {how!r} in the job")


def on_device(out: torch.Tensor, target: str) -> None:
    """On a CUDA check the output must live where the inputs did (a CPU tensor back means a silent copy)."""
    if out.device.type != DEVICE:
        raise ContractError("wrong_type", f"{target} returned a tensor on {out.device.type}, but its inputs are on "
                                          f"{DEVICE}: keep the result on the inputs' device")


def tuple_element(result, spec: dict, target: str):
    """The graded element of a call returning a tuple (moe's (out, aux)): `spec` = {"names": [...], "pick": i}.

    Each such case grades one element (its gradients flow from that element
    alone); the parent compares it like any single output and its message
    names the element (the case's ctx["what"]).
    """
    names = [str(n) for n in spec["names"]]
    if not isinstance(result, (tuple, list)) or len(result) != len(names):
        raise ContractError("wrong_type",
                            f"{target} returned {type_name(result)} instead of a tuple ({', '.join(names)})")
    i = int(spec["pick"])
    if i in (spec.get("numbers") or ()):  # a Python number by contract (rope_scaling's attention_scale)
        v = result[i]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ContractError("wrong_type", f"{target} returned {names[i]} as {type_name(v)} ({v!r:.60}) instead "
                                              f"of a float in the tuple ({', '.join(names)})")
        return torch.tensor(float(v), dtype=torch.float64, device=DEVICE)
    if not isinstance(result[i], torch.Tensor):
        raise ContractError("wrong_type", f"{target} returned {names[i]} as {type_name(result[i])} instead of a tensor "
                                          f"in the tuple ({', '.join(names)})")
    return result[i]


def classify(exc: BaseException) -> dict:
    """Turn a learner exception into a status record (the parent picks the diagnosis)."""
    with trusted():
        line, source = learner_line_of_tb(exc.__traceback__)
    if isinstance(exc, Denied):
        return {"status": "denied", "message": str(exc)[:300], "line": line, "source": source}
    text = str(exc)
    if isinstance(exc, ForbiddenOp):
        return {"status": "forbidden_op", "op": exc.op, "line": exc.line, "source": exc.source, "message": text}
    if isinstance(exc, ContractError):
        return {"status": exc.status, "message": text, "line": line, "source": source}
    if isinstance(exc, NotImplementedError):
        return {"status": "not_implemented", "message": text, "line": line, "source": source}
    if isinstance(exc, SystemExit):
        return {"status": "crashed", "message": f"raised SystemExit({exc.code!r})", "line": line, "source": source}
    if isinstance(exc, MemoryError) or "can't allocate memory" in text or "not enough memory" in text:
        return {"status": "memory_limit", "message": text[:300], "line": line, "source": source}
    if DEVICE == "cuda" and _sibling("gpu").is_device_oom(exc):  # past the run's cap on device memory
        return {"status": "memory_limit", "message": f"CUDA memory limit: {text.split('. ', 1)[0][:240]}",
                "line": line, "source": source}
    return {
        "status": "exception",
        "type": type(exc).__name__,
        "message": text[:500],
        "line": line,
        "source": source,
    }


def warm_up() -> None:
    """Pay torch's first-use costs (autograd engine, modes, serialisation) before the job arrives.

    Measured: the first case of a run otherwise took ~0.4 s of one-off set-up.
    In single-run mode this overlaps the parent's own work; the fork server
    pays it once for all runs.
    """
    q = torch.randn(2, 3, 4, requires_grad=True)
    with FunctionTrap([]), DispatchTrap([]):
        s = (q @ q.transpose(-2, -1)).masked_fill(torch.ones(3, 3, dtype=torch.bool).tril(), float("-inf"))
        y = torch.softmax(s.float(), dim=-1).to(torch.float16).float() @ q
        out = torch.nn.functional.silu(torch.nn.Linear(4, 4, bias=False)(y))
        # sum(out * upstream), never out.backward(upstream): an explicit upstream gradient imports
        # torch.fx's symbolic_shapes (0.2-0.5 s measured on torch 2.13), paid on a cold check's critical path.
        (out * torch.ones_like(out)).sum().backward()
    _sibling("tensor_file").write({"out": plain(y)}, os.devnull)
    _attention_modules()


def main() -> None:
    torch.set_num_threads(1)
    warm_up()
    gc.freeze()  # see zygote: torch's objects are never scanned by the learner's collections
    if OPTS.get("device") in ("cuda", "auto"):  # `drill check --device cuda`: overlaps the parent's work
        _sibling("gpu").warm_cuda()
    serve(json.loads(sys.stdin.read()))


def deny_processes(triton: bool) -> dict:
    """The kernel's refusal of every new process from here on (`seccomp.py`), as {"seccomp", "seccomp_reason"}.
    Not for a Triton job: its compiler (ptxas, a C compiler) runs as processes of this one."""
    if triton:
        return {"seccomp": "off", "seccomp_reason": "Triton's compiler runs as processes of the child"}
    done = _sibling("seccomp").deny_process_creation()
    return {"seccomp": done["seccomp"], **({"seccomp_reason": done["reason"]} if "reason" in done else {})}


def _paths(job: dict) -> dict:
    """Where the protocol folder, the learner's file and the scratch folder are, as this process sees them."""
    if SANDBOX.get("sandbox") == "namespaces" and job.get("inside"):
        return dict(job["inside"])
    return {"work": job["work"], "learner": job["learner"], "scratch": job.get("scratch", os.getcwd())}


def serve(job: dict) -> None:
    """Grade one job in this process, then leave with os._exit (never returns)."""
    global WORK, LEARNER
    where = _paths(job)
    WORK = where["work"]
    LEARNER = os.path.realpath(where["learner"])
    _STATUS_FD.append(os.open(os.path.join(WORK, "status.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    tensors = _sibling("tensor_file").read(os.path.join(WORK, "inputs.bin"))
    sys.modules.pop("__main__", None)  # the driver's globals are not reachable by name from the learner's code
    tensors, tools = _enter_device(job, where["scratch"], tensors)

    sys.meta_path.insert(0, BlockDrill())
    trap_classes(job.get("forbidden_classes", []))
    patterns = job.get("forbidden", [])
    blocked, leaks = block_kernels(patterns)
    allowed = job.get("allowed") or None  # the exercise's op allowance: every other aten op trips
    dispatch_trap = needs_dispatch_trap(leaks) or allowed is not None
    block_functions(patterns)
    block_higher_order_ops(patterns)
    block_paths(patterns)  # Python objects, not aten ops: not counted in kernels_blocked
    boxed = SANDBOX.get("sandbox") == "namespaces"  # /tmp and /dev/shm are private tmpfs only inside the sandbox
    writable = [where["scratch"], WORK] + (["/tmp", "/dev/shm"] if boxed else [])
    no_processes = deny_processes(bool(job.get("triton")))  # before the hook, which refuses the ctypes it needs
    install_audit_hook(writable, job.get("hidden", []), tools)
    record({"event": "sandbox", **{k: v for k, v in SANDBOX.items() if k != "fatal"}, "kernels_blocked": len(blocked),
            "audit_hook": True, **no_processes})

    def traps():
        """The thread-local traps for one action. With nothing forbidden the function trap can match nothing, yet
        its Python call on every torch function doubled the cost of small-tensor code (speculative_decoding's 30 000
        verify calls: 100 us a call under it, 44 us without, measured), so it is left off then, as the DispatchTrap
        is where no kernel leaks."""
        function = FunctionTrap(patterns) if patterns else nullcontext()
        trap = DispatchTrap(patterns, allowed, job.get("allowed_what", "")) if dispatch_trap else nullcontext()
        return function, trap

    def guarded(action):
        """Run action with the traps on; return (value, failure record or None)."""
        TRIPPED.clear()
        function, dispatch = traps()
        try:
            with function, dispatch:
                value = action()
        except BaseException as exc:  # noqa: BLE001 - everything the learner raises is data
            failure = classify(exc)
            if TRIPPED and failure["status"] != "forbidden_op":
                failure = {"status": "forbidden_op", **TRIPPED[0], "message": f"{TRIPPED[0]['op']} is forbidden"}
            return None, failure
        if TRIPPED:
            return None, {"status": "forbidden_op", **TRIPPED[0], "message": f"{TRIPPED[0]['op']} is forbidden"}
        return value, None

    def load():
        spec = importlib.util.spec_from_file_location("learner_solution", LEARNER)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["learner_solution"] = mod
        spec.loader.exec_module(mod)
        return mod

    integrity = _sibling("integrity").Snapshot()  # after every trap is in place, before the file runs

    def untouched(when: str) -> None:
        """Stop the run, as a refusal, if the file replaced part of torch (see integrity.py)."""
        with trusted():
            name = integrity.changed()
        if name is not None:
            record({"event": "denied", "what": f"replacing {name}",
                    "detail": f"({when}; the grader's own code uses torch too)"})
            _leave()

    record({"event": "load"})
    mod, failure = guarded(load)
    untouched("while importing the file")
    if failure is not None:
        if (isinstance(failure.get("message"), str) and failure["status"] == "exception"
                and failure.get("type") == "SyntaxError"):
            failure["status"] = "syntax_error"
        record({"event": "load_error", **failure})
        _leave()
    missing = [name for name in job["graded"] if not hasattr(mod, name)]
    if missing:
        text = ", ".join(f"{name} not defined{close_name(mod, name)}" for name in missing)
        record({"event": "load_error", "status": "missing_name", "message": text, "names": missing})
        _leave()
    record({"event": "loaded"})
    if job.get("report_attrs"):
        record({"event": "attrs", "values": {n: attr_report(mod, n) for n in job["report_attrs"]}})

    for case in job["cases"]:
        i = case["index"]
        record({"event": "start", "case": i})
        t0, c0 = time.perf_counter(), time.process_time()
        result, failure = guarded(lambda case=case: run_case(mod, case, tensors))  # called right here
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0  # CPU: what load does not inflate
        untouched(f"during test {i + 1}")
        if failure is None:
            try:
                with trusted():
                    _sibling("tensor_file").write(result, os.path.join(WORK, f"out_{i}.bin"))
            except BaseException as exc:  # noqa: BLE001
                failure = {"status": "exception", "type": type(exc).__name__,
                           "message": f"could not save the output: {exc}"[:300]}
        record({"event": "end", "case": i, "elapsed": elapsed, "cpu": cpu, **(failure or {"status": "ok"})})
    if job.get("audit"):
        t0 = time.perf_counter()
        data, failure = guarded(lambda: extension("audit").run(job["audit"], mod, HOST))
        entry = {"event": "audit", "name": job["audit"]["name"], "elapsed": time.perf_counter() - t0}
        record({**entry, "data": data} if failure is None else {**entry, "error": failure})
    _leave()


# The audits measured during graded calls (audit.ON_CASES): name -> one measurement per call, reported by the
# job's audit step. A forked job starts with it empty.
MEASURED: dict = {}
LAUNCHES: list = []  # the Triton launch counter (gpu.count_launches), for the kernel-bandwidth audit


def _enter_device(job: dict, scratch: str, tensors: dict) -> tuple[dict, dict]:
    """The trusted phase of a CUDA or Triton job, before any trap or the learner's code: CUDA initialised and
    capped, the inputs moved to the device, Triton prepared. Returns (inputs, the programs Triton may run).
    A device that cannot be used ends the run here, recorded as such (the parent says it is not the file's fault).
    """
    global DEVICE
    spec = job.get("device") or {}
    triton = job.get("triton")
    if spec.get("type") != "cuda" and not triton:
        return tensors, {}
    gpu = _sibling("gpu")
    tools: dict = {}
    try:
        if spec.get("type") == "cuda":
            seen = gpu.enter_cuda(int(spec.get("memory_mb", 2048)))
            record(seen)
            if seen.get("error"):
                _leave()
            DEVICE = "cuda"
            tensors = {k: v.to("cuda") for k, v in tensors.items()}
        if triton:
            tools = gpu.prepare_triton(scratch, bool(triton.get("interpret")), DEVICE == "cuda")
            LAUNCHES.append(gpu.count_launches())
    except Exception as exc:  # noqa: BLE001 - a machine problem (no triton, no compiler), not the learner's
        record({"event": "device", "device": spec.get("type", "cpu"), "error": f"{type(exc).__name__}: {exc}"[:300]})
        _leave()
    return tensors, tools


def _leave() -> None:
    """Record the end and exit at once: no atexit handler or finalizer the learner registered runs."""
    if TRIPPED:  # a trip on another thread after the last case ended
        record({"event": "trip", **TRIPPED[-1]})
    record({"event": "done"})
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(0)


def _set_limits(lim: dict) -> None:
    cpu = int(lim["cpu"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_DATA, (int(lim["data"]), int(lim["data"])))
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(lim["fsize"]), int(lim["fsize"])))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if lim.get("nproc"):
        _set_nproc(int(lim["nproc"]))


def run_forked(req: dict) -> None:
    """In a process just forked from a fork server: own session, limits, output file, sandbox; then serve.

    This is the whole per-job entry a fork server needs (issue 14's warm
    server calls it too): every job gets fresh namespaces because
    `sandbox_child.enter` unshares in the forked, single-threaded process.
    """
    global SANDBOX, DRIVER_DIR
    try:
        os.setsid()
        _sibling("sandbox_child").die_with_parent()
        _set_limits(req["limits"])
        null = os.open(os.devnull, os.O_RDONLY)
        log = os.open(os.path.join(req["job"]["work"], "output.txt"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.chdir(req["scratch"])
        spec = req.get("sandbox")
        if spec:
            SANDBOX = _sibling("sandbox_child").enter_or_leave(spec)
            if SANDBOX.get("sandbox") == "namespaces":
                DRIVER_DIR = spec["driver_inside"]
        else:
            SANDBOX = {"sandbox": "off", "reason": req.get("sandbox_off", "not requested")}
        os.environ["PWD"] = os.getcwd()
        serve(req["job"])
    finally:
        os._exit(70)


def zygote() -> None:
    """Fork server for grading many files: torch is imported once, here.

    Reads one request per line on stdin ({"job", "scratch", "limits", "sandbox"}); for
    each, forks a fresh process (`run_forked`) that takes its own session,
    limits and namespaces, runs `serve` and exits, so no learner code ever
    runs in this process. Replies {"pid": N} at once and
    {"exit": N, "code": C, "cpu": S} when it ends.
    """
    torch.set_num_threads(1)
    warm_up()
    # loaded once here, inherited by every fork
    for name in ("sandbox_child", "chain", "audit", "tiling", "gpu", "tensor_file", "grads", "optim", "exact",
                 "adapter", "rolling", "integrity", "beam", "dgpt", "seccomp"):
        _sibling(name)
    out = sys.stdout
    for line in sys.stdin:
        try:
            req = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            continue
        try:  # the job's dispatcher plan, once per exercise, inherited by this fork and every later one
            kernel_plan(list(req["job"].get("forbidden", [])))
        except Exception:  # noqa: BLE001 - the fork computes it itself then
            pass
        # Everything alive now (torch, the specs' plans) moves out of the collector's sight: measured, each
        # full collection in a graded run otherwise scanned it for ~50 ms, a third of a flash_attention check.
        gc.freeze()
        pid = os.fork()
        if pid == 0:
            run_forked(req)
        out.write(json.dumps({"pid": pid}) + "\n")
        out.flush()
        _, status, usage = os.wait4(pid, 0)
        out.write(json.dumps({"exit": pid, "code": os.waitstatus_to_exitcode(status),
                              "cpu": usage.ru_utime + usage.ru_stime}) + "\n")
        out.flush()


if __name__ == "__main__":
    if "--zygote" in sys.argv:
        zygote()
    else:
        main()
