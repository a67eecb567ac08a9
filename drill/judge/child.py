"""The grader's child process: runs a learner's file on inputs from the parent.

Run as a script (`python -I -B child.py --cpu=S --data=BYTES --fsize=BYTES`), never imported by drill: it
imports only the standard library and torch, so it starts as fast as torch
does and nothing of drill (the reference answers included) is loaded in the
process that runs untrusted code.

Protocol (all files live in the folder named by the job's "work", created by
the parent; the learner's code runs with a different cwd and is not told it):
- The child imports torch at once, then blocks on stdin for the job (JSON),
  so its start-up overlaps the parent's own work.
- Inputs come from `inputs.pt` (tensors by key, loaded weights_only).
- For each case i it appends {"event": "start", "case": i} and then an
  "end" record to `status.jsonl`, and saves the learner's output tensors to
  `out_<i>.pt` (plain tensors only). The parent compares those tensors with
  its own expectations; nothing the child writes can make a case pass except
  tensors that really equal the reference.
- Status records only ever explain failures (exception type and message,
  the learner's line, a forbidden op's name).

Sandboxing done here (the limits are set by the parent before exec):
- forbidden ops trapped with a TorchFunctionMode (torch functions, whatever
  alias reached them) and a TorchDispatchMode (aten ops, e.g. the kernels
  behind SDPA); forbidden classes trapped at construction;
- `import drill` blocked with a meta-path hook;
- the trap raises a BaseException subclass, so `except Exception` in the
  learner's code cannot swallow it, and it is also recorded, so even a bare
  `except:` does not hide it.
"""

from __future__ import annotations

import fnmatch
import importlib.abc
import importlib.util
import json
import os
import resource
import sys
import time
import traceback


def _limit_self() -> None:
    """Apply the parent's limits (--cpu=S --data=BYTES --fsize=BYTES) before anything else."""
    opts = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
    if "cpu" in opts:
        cpu = int(opts["cpu"])
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    if "data" in opts:
        resource.setrlimit(resource.RLIMIT_DATA, (int(opts["data"]), int(opts["data"])))
    if "fsize" in opts:
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(opts["fsize"]), int(opts["fsize"])))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


if __name__ == "__main__":
    _limit_self()

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
    line, source = learner_line_of_stack()
    TRIPPED.append({"op": op, "line": line, "source": source})
    raise ForbiddenOp(op, line, source)


def _op_name(func) -> str:
    """'scaled_dot_product_attention' for functions, OpOverloads and packets alike."""
    name = getattr(func, "__name__", None) or str(func)
    name = name.split(".")[0] if not name.startswith("_ops.") else name
    return name


class FunctionTrap(TorchFunctionMode):
    def __init__(self, patterns: list[str]) -> None:
        super().__init__()
        self.patterns = patterns

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = _op_name(func)
        if any(fnmatch.fnmatchcase(name, p) for p in self.patterns):
            trip(name)
        return func(*args, **(kwargs or {}))


class DispatchTrap(TorchDispatchMode):
    def __init__(self, patterns: list[str]) -> None:
        super().__init__()
        self.patterns = patterns

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        # func is an OpOverload such as aten._scaled_dot_product_flash_attention_for_cpu.default
        name = getattr(func, "__name__", str(func)).split(".")[0]
        if any(fnmatch.fnmatchcase(name, p) for p in self.patterns):
            trip("aten." + name)
        return func(*args, **(kwargs or {}))


# TorchDispatchMode subclasses get __torch_dispatch__ wrapped in
# torch._disable_dynamo, whose first call imports torch._dynamo: 1.7 s
# measured on torch 2.13 CPU, paid by every graded run. Nothing is compiled
# here, so the plain function is used (no-op on versions without the wrapper).
DispatchTrap.__torch_dispatch__ = getattr(DispatchTrap.__torch_dispatch__, "__wrapped__", DispatchTrap.__torch_dispatch__)


class BlockDrill(importlib.abc.MetaPathFinder):
    """The learner's file may not import drill (its reference holds the answers)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "drill" or fullname.startswith("drill."):
            trip(f"import {fullname}")
        return None


# Case kinds and the audits implemented in sibling files (issue 4). They import only torch at
# module level and are loaded by path, so `import drill` stays blocked for the learner.
EXTENSIONS = {"chain": "chain.py", "inmodel": "inmodel.py", "audit": "audit.py"}
_LOADED: dict = {}


def extension(name: str):
    """The sibling module for a case kind or for the audits, loaded once by file path."""
    if name not in _LOADED:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), EXTENSIONS[name])
        spec = importlib.util.spec_from_file_location(f"_drill_judge_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.ContractError = ContractError  # their contract failures classify like ours
        _LOADED[name] = module
    return _LOADED[name]


class drill_allowed:
    """Lift the `import drill` block for the grader's own import (the in-model decoder), never for the learner's."""

    def __enter__(self):
        self.removed = [f for f in sys.meta_path if isinstance(f, BlockDrill)]
        for f in self.removed:
            sys.meta_path.remove(f)

    def __exit__(self, *exc):
        for f in self.removed:
            sys.meta_path.insert(0, f)
        return False


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

        def blocked_init(self, *a, _name=dotted.replace("torch.nn.", "nn."), **k):
            trip(_name)

        cls.__init__ = blocked_init


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
    with open(os.path.join(WORK, "status.jsonl"), "a", encoding="utf-8") as fh:
        fh.write(json.dumps(event) + "\n")


def plain(t: torch.Tensor) -> torch.Tensor:
    """A detached, contiguous, CPU, plain-class copy (no subclass survives the trip).

    Runs with the traps' dispatch mode lifted: on torch 2.4 `as_subclass`
    under an active TorchDispatchMode raises "the raw Tensor object is already
    associated to a python object", even for a plain Tensor. The copy is the
    grader's own work, so nothing the learner runs escapes the traps.
    """
    with _no_dispatch_modes():
        return t.as_subclass(torch.Tensor).detach().to("cpu").contiguous().clone()


def type_name(obj) -> str:
    t = type(obj)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"


def resolve_attr(obj, path: str, owner: str):
    cur = obj
    walked = owner
    for part in path.split("."):
        if not hasattr(cur, part):
            raise ContractError("missing_name", f"{walked} has no attribute `{part}` (the contract needs `{owner}.{path}`)")
        cur = getattr(cur, part)
        walked += "." + part
    return cur


def run_case(mod, case: dict, tensors: dict) -> dict:
    """Run one case; return the tensors to save. Raises on any learner failure."""
    if case["kind"] in EXTENSIONS:
        return extension(case["kind"]).run_case(mod, case, tensors, sys.modules[__name__])
    target = case["target"]
    fn = getattr(mod, target)
    if case["kind"] == "map":
        values = []
        for row in case["rows"]:
            got = fn(*row)
            if isinstance(got, bool) or not isinstance(got, int):
                raise ContractError("wrong_type", f"{target}{tuple(row)} returned {type_name(got)} ({got!r:.60}) instead of an int")
            values.append(int(got))
        return {"out": torch.tensor(values, dtype=torch.int64)}

    def value(spec):
        if isinstance(spec, dict) and "t" in spec:
            return tensors[spec["t"]].clone()
        return spec["v"] if isinstance(spec, dict) else spec

    args = [value(a) for a in case["args"]]
    grad_names = case.get("grad_inputs", [])
    for name, i in zip(case["arg_names"], range(len(args))):
        if name in grad_names:
            args[i].requires_grad_(True)
    module = None
    if case["kind"] == "module":
        module = fn(*[value(a) for a in case["init"]])
        if not isinstance(module, torch.nn.Module):
            raise ContractError("wrong_type", f"{target}(...) built a {type_name(module)}, not an nn.Module")
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
    # A repeat-call probe: first a call with other inputs of the same shapes on the same
    # function or module instance (output not graded), kept alive so its tensors' storage
    # is not reused by the graded call's; state kept between calls then shows in `out`.
    first = [value(a) for a in case["repeat"]] if case.get("repeat") else None
    call = module if module is not None else fn
    if first is not None:
        call(*first)
    out = call(*args)
    if not isinstance(out, torch.Tensor):
        raise ContractError("wrong_type", f"{target} returned {type_name(out)} instead of a tensor")
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
            for name, i in zip(case["arg_names"], range(len(args))):
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
    return result


def classify(exc: BaseException) -> dict:
    """Turn a learner exception into a status record (the parent picks the diagnosis)."""
    line, source = learner_line_of_tb(exc.__traceback__)
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
    import io

    q = torch.randn(2, 3, 4, requires_grad=True)
    with FunctionTrap([]), DispatchTrap([]):
        s = (q @ q.transpose(-2, -1)).masked_fill(torch.ones(3, 3, dtype=torch.bool).tril(), float("-inf"))
        y = torch.softmax(s.float(), dim=-1).to(torch.float16).float() @ q
        out = torch.nn.functional.silu(torch.nn.Linear(4, 4, bias=False)(y))
        out.backward(torch.ones_like(out))  # an explicit upstream grad imports symbolic_shapes (~0.5 s)
    torch.save({"out": plain(y)}, io.BytesIO())


def main() -> None:
    torch.set_num_threads(1)
    warm_up()
    serve(json.loads(sys.stdin.read()))


def serve(job: dict) -> None:
    """Grade one job in this process, then leave with os._exit (never returns)."""
    global WORK, LEARNER
    WORK = job["work"]
    LEARNER = os.path.realpath(job["learner"])
    tensors = torch.load(os.path.join(WORK, "inputs.pt"), weights_only=True)

    sys.meta_path.insert(0, BlockDrill())
    trap_classes(job.get("forbidden_classes", []))
    patterns = job.get("forbidden", [])
    sys.path.insert(0, os.path.dirname(LEARNER))

    def guarded(action):
        """Run action with the traps on; return (value, failure record or None)."""
        TRIPPED.clear()
        try:
            with FunctionTrap(patterns), DispatchTrap(patterns):
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

    record({"event": "load"})
    mod, failure = guarded(load)
    if failure is not None:
        if isinstance(failure.get("message"), str) and failure["status"] == "exception" and failure.get("type") == "SyntaxError":
            failure["status"] = "syntax_error"
        record({"event": "load_error", **failure})
        record({"event": "done"})
        os._exit(0)
    missing = [name for name in job["graded"] if not hasattr(mod, name)]
    if missing:
        text = ", ".join(f"{name} not defined{close_name(mod, name)}" for name in missing)
        record({"event": "load_error", "status": "missing_name", "message": text, "names": missing})
        record({"event": "done"})
        os._exit(0)
    record({"event": "loaded"})
    if job.get("report_attrs"):
        record({"event": "attrs", "values": {n: attr_report(mod, n) for n in job["report_attrs"]}})

    for case in job["cases"]:
        i = case["index"]
        record({"event": "start", "case": i})
        t0 = time.perf_counter()
        result, failure = guarded(lambda: run_case(mod, case, tensors))
        elapsed = time.perf_counter() - t0
        if failure is None:
            try:
                torch.save(result, os.path.join(WORK, f"out_{i}.pt"))
            except BaseException as exc:  # noqa: BLE001
                failure = {"status": "exception", "type": type(exc).__name__, "message": f"could not save the output: {exc}"[:300]}
        record({"event": "end", "case": i, "elapsed": elapsed, **(failure or {"status": "ok"})})
    if job.get("audit"):
        t0 = time.perf_counter()
        data, failure = guarded(lambda: extension("audit").run(job["audit"], mod, sys.modules[__name__]))
        entry = {"event": "audit", "name": job["audit"]["name"], "elapsed": time.perf_counter() - t0}
        record({**entry, "data": data} if failure is None else {**entry, "error": failure})
    record({"event": "done"})
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip atexit handlers and finalizers the learner may have registered.
    os._exit(0)


def _set_limits(cpu: int, data: int, fsize: int) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_DATA, (data, data))
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def zygote() -> None:
    """Fork server for grading many files: torch is imported once, here.

    Reads one request per line on stdin ({"job", "scratch", "limits"}); for
    each, forks a fresh process that takes its own session and limits, runs
    `serve` and exits, so no learner code ever runs in this process. Replies
    {"pid": N} at once and {"exit": N, "code": C, "cpu": S} when it ends.
    """
    torch.set_num_threads(1)
    warm_up()
    out = sys.stdout
    for line in sys.stdin:
        try:
            req = json.loads(line)
        except json.JSONDecodeError:
            continue
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()
                lim = req["limits"]
                _set_limits(int(lim["cpu"]), int(lim["data"]), int(lim["fsize"]))
                os.chdir(req["scratch"])
                null = os.open(os.devnull, os.O_RDONLY)
                log = os.open(os.path.join(req["job"]["work"], "output.txt"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
                os.dup2(null, 0)
                os.dup2(log, 1)
                os.dup2(log, 2)
                os.environ["PWD"] = req["scratch"]
                serve(req["job"])
            finally:
                os._exit(70)
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
