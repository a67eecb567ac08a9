"""Building blocks of the backprop-by-hand exercises (rmsnorm_backward, layernorm_backward, ...).

A backward pass returns several gradients at once. Each input becomes one
case per returned element (`Case.extra["tuple"]`, as moe), so a failing test
names the gradient that is off and a mistake confined to one of them (a
partial sum, a forgotten weight) fails exactly those tests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

from drill.judge.spec import Case

# (the returned element's name, the argument whose dtype it keeps)
Element = tuple[str, str]


def elements(case: Case, outputs: Sequence[Element]) -> list[Case]:
    """`case` once per returned element, on the very same inputs; element i is graded by the i-th copy.

    Each copy's name ends with the element's name, its `ctx` holds `what` and `pick`,
    and its output dtype is the dtype of the argument the element mirrors.
    """
    names = [name for name, _ in outputs]
    return [dataclasses.replace(
        case, name=f"{case.name}: {what}", out_dtype=case.args[like].dtype,
        ctx={**case.ctx, "what": what, "pick": pick},
        extra={**case.extra, "tuple": {"names": names, "pick": pick}},
    ) for pick, (what, like) in enumerate(outputs)]


def picked(fn: Callable[[Case], Sequence[Any] | None]) -> Callable[[Case], Any]:
    """A bug variant computing every element at once, reduced to the element its case grades."""

    def run(case: Case) -> Any:
        out = fn(case)
        return None if out is None else out[case.ctx["pick"]]

    return run


def half_only(grad: torch.Tensor, dtype: torch.dtype) -> Any:
    """A gradient computed in a half dtype as a bug variant: fp16's rounding is followed as it is, bf16's only
    where it overflows (sums of a few dozen bf16 terms land anywhere within their rounding)."""
    return grad if dtype == torch.float16 else (grad, torch.ones_like(grad, dtype=torch.bool))
