"""Child-side executor for "adapter" cases: a layer that wraps a frozen nn.Linear (lora's LoRALinear).

Loaded by the grader's child process by file path (it imports only torch);
the parent runs its reference and every known mistake through the same
`run_scenario`, so a variant is a small class and all its outputs (forward,
gradients, merged layer, parameter counts) follow from it. A scenario is
plain JSON in `Case.extra` (in / out features, bias, dtype, r, alpha, the
seed of torch's global generator, what to return) plus tensors named `w`,
`b` (the base's weight and bias), `A`, `B` (the adapter's factors, set by the
grader), `x` and `up` (the upstream gradient). `returns` picks one tensor:

- "init": lora_A and lora_B as the constructor left them, flattened and joined
  in fp32 (the parent's judge checks B == 0 and A's uniform law);
- "forward": layer(x) with the grader's A and B;
- "grad_x" / "grad_A" / "grad_B": one gradient of sum(layer(x) * up), fp32;
- "merged": layer.merged()(x);
- "after_merge": layer(x) called after layer.merged() (the layer must be unchanged);
- "frozen": [trainable parameter count, base.weight.grad set after a backward
  (0/1), base.bias.grad set (0/1), lora_A in base's dtype (0/1), lora_B too].

A factor may be a tensor attribute or, PEFT's layout, a module whose `.weight`
has the factor's shape (the projection rule).
"""

from __future__ import annotations

from typing import Any

import torch

KIND = "adapter"


class ContractError(Exception):
    """Replaced by the child's own ContractError when it loads this file (see chain.py)."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


def _type_name(obj: Any) -> str:
    t = type(obj)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"


def factor(layer: Any, name: str, shape: tuple[int, ...], target: str) -> torch.Tensor:
    """The tensor behind `layer.<name>`: the attribute itself, or its `.weight` (PEFT's nn.Linear layout)."""
    if not hasattr(layer, name):
        raise ContractError("missing_name",
                            f"{target} has no attribute `{name}` (the contract needs `{target}.{name}`)")
    held = getattr(layer, name)
    t = held if isinstance(held, torch.Tensor) else getattr(held, "weight", None)
    if not isinstance(t, torch.Tensor):
        raise ContractError("wrong_type", f"{target}.{name} is a {_type_name(held)}: neither a tensor nor a module "
                                          "with a .weight tensor")
    if tuple(t.shape) != tuple(shape):
        raise ContractError("wrong_shape", f"{target}.{name} has shape {tuple(t.shape)}, the contract needs "
                                           f"{tuple(shape)}")
    return t


def _base(extra: dict, tensors: dict) -> torch.nn.Linear:
    dtype = getattr(torch, extra["dtype"])
    # on the inputs' device (a `--device cuda` check moves them there), as a user's model would be
    base = torch.nn.Linear(extra["in"], extra["out"], bias=bool(extra["bias"]), dtype=dtype, device=tensors["w"].device)
    with torch.no_grad():
        base.weight.copy_(tensors["w"])
        if base.bias is not None:
            base.bias.copy_(tensors["b"])
    return base


def _plain(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().clone()


def _seed(seed: int, device: torch.device) -> None:
    """Seed the generator the layer's init and dropout draw from: the CPU's, and the GPU's on a CUDA check.

    Not torch.manual_seed: on a machine where CUDA is not initialised it also queues a lazy seed for every
    accelerator, recording a stack trace each time (0.7 ms a call), and the parent replays a failing file's
    variants about 800 times."""
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        torch.cuda.manual_seed(seed)


def run_scenario(cls: Any, extra: dict, tensors: dict, target: str = "LoRALinear",
                 first: dict | None = None) -> torch.Tensor:
    """Build cls(base, r, alpha) on the scenario's base, run what `extra["returns"]` asks, return that tensor.

    `first`: a repeat-call probe's first inputs (spec.Case.repeat): the layer is called on first["x"] just before
    the graded call (output not graded), so a layer that keeps state between calls shows it."""
    base = _base(extra, tensors)
    r, n_in, n_out = int(extra["r"]), int(extra["in"]), int(extra["out"])
    _seed(int(extra["seed"]), base.weight.device)
    layer = cls(base, r, extra["alpha"])
    if not isinstance(layer, torch.nn.Module):
        raise ContractError("wrong_type", f"{target}(...) built a {_type_name(layer)}, not an nn.Module")
    a = factor(layer, "lora_A", (r, n_in), target)
    b = factor(layer, "lora_B", (n_out, r), target)
    returns = extra["returns"]
    if returns == "init":
        return torch.cat([_plain(a).float().reshape(-1), _plain(b).float().reshape(-1)])
    if "A" in tensors:
        with torch.no_grad():
            a.copy_(tensors["A"].to(a.dtype))
            b.copy_(tensors["B"].to(b.dtype))
    x = tensors["x"].clone()
    _seed(int(extra["seed"]) + 1, base.weight.device)
    if returns in ("merged", "after_merge"):
        merged = layer.merged()
        if not isinstance(merged, torch.nn.Linear):
            raise ContractError("wrong_type", f"{target}.merged() returned a {_type_name(merged)}, not an nn.Linear")
        if merged.weight.dtype != base.weight.dtype:
            raise ContractError("wrong_type", f"{target}.merged()'s weight is {merged.weight.dtype}, the base's is "
                                               f"{base.weight.dtype}: cast the merged weight back to the base's dtype")
        if (merged.bias is None) != (base.bias is None):
            raise ContractError("wrong_type", f"{target}.merged() has {'no' if merged.bias is None else 'a'} bias, "
                                              f"the base has {'one' if base.bias is not None else 'none'}")
        with torch.no_grad():
            out = merged(x) if returns == "merged" else layer(x)
        return _plain(out)
    if first is not None:
        layer(first["x"].clone())
    if returns == "forward":
        return _plain(layer(x))
    if returns == "frozen":
        x.requires_grad_(True)
        out = layer(x)
        if out.requires_grad:
            (out * tensors["up"].to(out.dtype)).sum().backward()
        count = sum(p.numel() for p in layer.parameters() if p.requires_grad)
        flags = [base.weight.grad is not None, base.bias is not None and base.bias.grad is not None,
                 a.dtype == base.weight.dtype, b.dtype == base.weight.dtype]
        return torch.tensor([count, *(int(f) for f in flags)], dtype=torch.int64)
    x.requires_grad_(True)
    out = layer(x)
    held = {"grad_x": x, "grad_A": a, "grad_B": b}[returns]
    if not out.requires_grad:  # nothing reaches x, A or B: a missing gradient counts as zero (autograd's None)
        return torch.zeros(held.shape)
    (out * tensors["up"].to(out.dtype)).sum().backward()
    g = held.grad
    return torch.zeros(held.shape) if g is None else _plain(g).float()


def run_case(mod: Any, case: dict, tensors: dict, host: Any) -> dict[str, torch.Tensor]:
    """Execute one adapter case; returns {"out": tensor} for the parent to compare."""
    refs = dict(zip(case["arg_names"], case["args"], strict=True))
    named = {name: tensors[ref["t"]] for name, ref in refs.items() if isinstance(ref, dict) and "t" in ref}
    first = None
    if case.get("repeat"):
        first = {name: tensors[ref["t"]] for name, ref in zip(case["arg_names"], case["repeat"], strict=True)
                 if isinstance(ref, dict) and "t" in ref}
    cls = getattr(mod, case["target"])
    return {"out": host.plain(run_scenario(cls, case["extra"], named, case["target"], first))}
