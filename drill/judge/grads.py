"""Child-side executor for "grads" cases: a function that works on parameters' gradients in place.

Loaded by the grader's child process by file path (it imports only torch),
and usable in-process by tests. A grads case builds a small module of
parameters, gives some of them the parent's gradients (others are frozen, or
trainable with no gradient yet), calls the graded function on them as a list
or as `module.parameters()` (a generator, which must be iterated only once),
and reports one of three things, chosen by the case:

- "norm": what the call returned (a 0-dim tensor, the contract says);
- "grads": every gradient that existed before the call, flattened and joined
  in fp32, as it is after the call (the in-place edit is the answer);
- "same": per parameter, 1 if its `.grad` is afterwards the very tensor object
  it was before (or still None), else 0: rebinding `p.grad = p.grad * c`
  gives the right numbers in a new tensor, which an optimizer holding the old
  one (or a hook, a fused buffer) never sees.
The three come from three separate runs of the same scenario, so each case
grades one thing and a mistake in one does not hide the others.
"""

from __future__ import annotations

from typing import Any

import torch

KIND = "grads"


class ContractError(Exception):
    """Replaced by the child's own ContractError when it loads this file (see chain.py)."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


def _type_name(obj: Any) -> str:
    t = type(obj)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"


def build(extra: dict, grads: list[torch.Tensor | None]) -> tuple[torch.nn.Module, list[torch.nn.Parameter]]:
    """The scenario's parameters in a module (registration order = `extra["shapes"]`), their gradients set."""
    holder = torch.nn.Module()
    params = []
    frozen = set(extra.get("frozen", []))
    for i, (shape, dtype) in enumerate(zip(extra["shapes"], extra["dtypes"], strict=True)):
        p = torch.nn.Parameter(torch.zeros(shape, dtype=getattr(torch, dtype)), requires_grad=i not in frozen)
        holder.register_parameter(f"p{i}", p)
        if grads[i] is not None:
            p.grad = grads[i].clone()
        params.append(p)
    return holder, params


def run_case(mod: Any, case: dict, tensors: dict, host: Any) -> dict[str, torch.Tensor]:
    """Execute one grads case; returns {"out": tensor} for the parent to compare."""
    extra = case["extra"]
    target = case["target"]
    refs = dict(zip(case["arg_names"], case["args"], strict=True))
    grads = [tensors[refs[f"g{i}"]["t"]] if f"g{i}" in refs else None for i in range(len(extra["shapes"]))]
    fn = getattr(mod, target)
    if case.get("repeat"):  # a first call on other gradients of the same shapes (spec.Case.repeat), not graded
        first = dict(zip(case["arg_names"], case["repeat"], strict=True))
        _, warm = build(extra, [tensors[first[f"g{i}"]["t"]] if f"g{i}" in first else None
                                for i in range(len(extra["shapes"]))])
        fn(warm if extra["as"] == "list" else iter(warm), extra["max_norm"])
    holder, params = build(extra, grads)
    before = [p.grad for p in params]
    given = holder.parameters() if extra["as"] == "generator" else list(params)
    kwargs = {"eps": extra["eps"]} if extra.get("eps") is not None else {}
    total = fn(given, extra["max_norm"], **kwargs)
    returns = extra["returns"]
    if returns == "norm":
        if not isinstance(total, torch.Tensor):
            raise ContractError("wrong_type", f"{target} returned {_type_name(total)} ({total!r:.60}) instead of the "
                                              "norm as a 0-dim tensor")
        return {"out": host.plain(total)}
    if returns == "same":
        same = [int(p.grad is b) for p, b in zip(params, before, strict=True)]
        return {"out": torch.tensor(same, dtype=torch.int64)}
    flat = []
    for i, p in enumerate(params):
        if before[i] is None:
            continue
        if not isinstance(p.grad, torch.Tensor):
            raise ContractError("wrong_type", f"after {target}, parameter {i}'s .grad is {_type_name(p.grad)}: "
                                              "the contract scales each gradient in place")
        if tuple(p.grad.shape) != tuple(before[i].shape):
            raise ContractError("wrong_shape", f"after {target}, parameter {i}'s .grad has shape "
                                               f"{tuple(p.grad.shape)} instead of {tuple(before[i].shape)}")
        flat.append(host.plain(p.grad).reshape(-1).to(torch.float32))
    return {"out": torch.cat(flat) if flat else torch.zeros(0)}
