"""Child-side executor for "chain" cases: one module called several times, feeding back its cache.

Loaded by the grader's child process by file path (it imports only torch),
and usable in-process by tests. A chain case builds the learner's module
once, loads the parent's weights, then calls `forward(x_chunk, past_kv)` for
each chunk of the sequence. The cache handed to the next call is exactly the
tuple object the previous call returned (never cloned or rebuilt): a module
is allowed to recognise its own cache, and the work audit relies on that.
The first call gets `past_kv=None`, or a cache built by the reference when
the case says so (continuing someone else's cache must work too).

What comes back is one tensor, chosen by the case: the outputs of all calls
concatenated along T ("out"), or the keys/values of the last returned cache
("k", "v").
"""

from __future__ import annotations

from typing import Any

import torch

KIND = "chain"


class ContractError(Exception):
    """The module broke the calling contract (what it returned); `status` names the generic diagnosis.

    The grader's child replaces this class with its own ContractError when it
    loads this file, so its failure classification applies unchanged.
    """

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


def _type_name(obj: Any) -> str:
    t = type(obj)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"


def unpack(result: Any, call: int, target: str) -> tuple[torch.Tensor, tuple]:
    """(out, (k, v)) from one forward's return value, or a ContractError saying what is wrong."""
    where = f"{target}.forward (call {call + 1})"
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise ContractError("wrong_type", f"{where} returned {_type_name(result)} instead of (out, (k_all, v_all))")
    out, cache = result
    if not isinstance(out, torch.Tensor):
        raise ContractError("wrong_type", f"{where} returned out as {_type_name(out)} instead of a tensor")
    if not isinstance(cache, (tuple, list)) or len(cache) != 2 or not all(isinstance(t, torch.Tensor) for t in cache):
        raise ContractError("wrong_type",
                            f"{where} returned the cache as {_type_name(cache)} instead of a (k, v) tuple of tensors")
    return out, cache


def build_module(mod: Any, case: dict, tensors: dict, resolve_attr, device: str = "cpu") -> torch.nn.Module:
    """Construct the graded class with the case's init values, move it to `device`, copy the parent's weights in."""
    target = case["target"]
    init = [tensors[a["t"]] if "t" in a else a["v"] for a in case.get("init", [])]
    module = getattr(mod, target)(*init)
    if not isinstance(module, torch.nn.Module):
        raise ContractError("wrong_type", f"{target}(...) built a {_type_name(module)}, not an nn.Module")
    if device != "cpu":
        module.to(device)
    if case.get("module_dtype"):
        module.to(getattr(torch, case["module_dtype"]))
    for path, key in case.get("params", {}).items():
        p = resolve_attr(module, path, target)
        want = tensors[key]
        if not isinstance(p, torch.Tensor):
            raise ContractError("wrong_type", f"{target}.{path} is a {_type_name(p)}, not a tensor")
        if tuple(p.shape) != tuple(want.shape):
            raise ContractError("wrong_shape",
                                f"{target}.{path} has shape {tuple(p.shape)}, the contract needs {tuple(want.shape)}")
        with torch.no_grad():
            p.copy_(want.to(p.dtype))
    return module


def run_chain(module: torch.nn.Module, x: torch.Tensor, calls: list[int], past: tuple | None, target: str = "module",
              past_arg: str = "past_kv"):
    """Call module on consecutive chunks of x; returns (outputs concatenated over T, last cache).

    `past_arg` is the keyword forward takes the cache by (kv_cache's `past_kv`, mla's `past`).
    """
    outs = []
    cache = past
    start = 0
    for i, n in enumerate(calls):
        out, cache = unpack(module(x[:, start : start + n], **{past_arg: cache}), i, target)
        outs.append(out)
        start += n
    return torch.cat(outs, dim=1), cache


def run_interleaved(module: torch.nn.Module, x: torch.Tensor, x2: torch.Tensor, calls: list[int], calls2: list[int],
                    target: str = "module", past_arg: str = "past_kv"):
    """Two sequences through one module, their calls alternating (x's first); returns x's (outputs, last cache).

    A module that keeps its cache (or anything else) on itself between calls
    mixes the two sequences; one that only reads the cache it is handed cannot.
    """
    outs, cache, cache2, start, start2 = [], None, None, 0, 0
    for i in range(max(len(calls), len(calls2))):
        if i < len(calls):
            n = calls[i]
            out, cache = unpack(module(x[:, start : start + n], **{past_arg: cache}), 2 * i, target)
            outs.append(out)
            start += n
        if i < len(calls2):
            n = calls2[i]
            _, cache2 = unpack(module(x2[:, start2 : start2 + n], **{past_arg: cache2}), 2 * i + 1, target)
            start2 += n
    return torch.cat(outs, dim=1), cache


def run_case(mod: Any, case: dict, tensors: dict, host: Any) -> dict[str, torch.Tensor]:
    """Execute one chain case; returns {"out": tensor} for the parent to compare.

    `host` is the child module (`resolve_attr`, and `record` for gradient errors).
    """
    extra = case["extra"]
    args = {name: tensors[a["t"]].clone() if "t" in a else a["v"]
            for name, a in zip(case["arg_names"], case["args"], strict=True)}
    module = build_module(mod, case, tensors, host.resolve_attr, device=getattr(host, "DEVICE", "cpu"))
    grad_inputs = case.get("grad_inputs", [])
    for name in grad_inputs:
        args[name].requires_grad_(True)
    past = (args["past_k"], args["past_v"]) if extra.get("past") else None
    past_arg = extra.get("past_arg", "past_kv")
    if extra.get("calls2"):
        out, cache = run_interleaved(module, args["x"], args["x2"], list(extra["calls"]), list(extra["calls2"]),
                                     case["target"], past_arg)
    else:
        out, cache = run_chain(module, args["x"], list(extra["calls"]), past, case["target"], past_arg)
    chosen = {"out": out, "k": cache[0], "v": cache[1]}[extra["returns"]]
    if hasattr(host, "on_device"):
        host.on_device(chosen, case["target"])
    result = {"out": host.plain(chosen)}
    if case.get("upstream"):
        result.update(_grads(chosen, tensors[case["upstream"]], args, grad_inputs, module, case, host))
    if extra.get("twice"):  # a determinism probe: the same chain again, same module, fresh copies of the inputs
        if extra["twice"] == "fresh":  # (mla) a new module: its state probe is the interleaved case, not this one
            module = build_module(mod, case, tensors, host.resolve_attr, device=getattr(host, "DEVICE", "cpu"))
        fresh = {name: tensors[a["t"]].clone() for name, a in zip(case["arg_names"], case["args"], strict=True)
                 if "t" in a}
        again_past = (fresh["past_k"], fresh["past_v"]) if extra.get("past") else None
        again, again_cache = run_chain(module, fresh["x"], list(extra["calls"]), again_past, case["target"],
                                       extra.get("past_arg", "past_kv"))
        result["again"] = host.plain({"out": again, "k": again_cache[0], "v": again_cache[1]}[extra["returns"]])
    return result


def _grads(out, upstream, args, grad_inputs, module, case, host) -> dict[str, torch.Tensor]:
    """Backprop `upstream` through the whole chain (the cache carries gradient between calls)."""
    error = None
    if not out.requires_grad:
        error = "the output is not connected to the inputs' autograd graph"
    elif tuple(out.shape) != tuple(upstream.shape):
        error = "output shape differs, gradients not computed"
    else:
        try:
            (out * upstream.to(out.dtype)).sum().backward()  # = out.backward(upstream), minus a slow import
        except Exception as exc:  # noqa: BLE001 - the learner's backward failed
            error = f"backward raised {type(exc).__name__}: {str(exc)[:200]}"
    grads: dict[str, torch.Tensor] = {"__grad_error__": torch.tensor([1 if error else 0])}
    if error is not None:
        host.record({"event": "grad_error", "case": case["index"], "message": error})
        return grads
    for name in grad_inputs:
        if args[name].grad is not None:
            grads["input:" + name] = host.plain(args[name].grad)
    if case.get("grad_params"):
        for path in case.get("params", {}):
            g = host.resolve_attr(module, path, case["target"]).grad
            if g is not None:
                grads["param:" + path] = host.plain(g)
    return grads
