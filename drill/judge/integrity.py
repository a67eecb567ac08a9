"""Child side: did the learner's file change torch for the grader's own code? (Loaded by path; torch only.)

The grader's measurement code in the child (tiling, copy detection, output checks) calls torch like the
learner's file does. A file that assigns `torch.tensor = ...` or `torch.Tensor.clone = ...` could rewrite that
measurement on its way out ("one small tile seen"). The static policy refuses such assignments it can see;
this catches them whatever form they take (policy off, an alias the policy cannot follow): `Snapshot` keeps
the identity of every attribute of torch's public namespaces and central classes, taken after the grader's
own traps are installed and before the file is imported, and `changed` names the first one that is no
longer the same object. See `changed` for which new attributes count.
"""

from __future__ import annotations

import sys
import types

import torch

MODULES = ("torch", "torch.nn", "torch.nn.functional", "torch.nn.init", "torch.linalg", "torch.special",
           "torch.fft", "torch.autograd", "torch.autograd.function", "torch.nn.parameter", "torch.nn.modules.module")
CLASSES = (torch.Tensor, torch.nn.Module, torch.nn.Parameter, torch.nn.Linear, torch.nn.Embedding,
           torch.autograd.Function)
_MISSING = object()


class Snapshot:
    """The watched attributes as they are now (one dict copy per namespace: a few thousand entries)."""

    def __init__(self) -> None:
        owners = [(name, sys.modules[name]) for name in MODULES if name in sys.modules]
        owners += [(f"{cls.__module__}.{cls.__qualname__}", cls) for cls in CLASSES]
        self._seen = [(label, owner, dict(vars(owner))) for label, owner in owners]

    def changed(self) -> str | None:
        """`module.name` of the first watched attribute replaced, deleted or added since the snapshot, else None.

        An attribute added to a class shadows the inherited one (`torch.Tensor.clone = ...` lands in Tensor's
        own dict, over TensorBase's method), so every new class attribute counts. A module gains attributes
        of its own accord only as lazily imported submodules, so there a new attribute counts unless it is a
        module."""
        for label, owner, before in self._seen:
            now = vars(owner)
            for name, value in before.items():
                if now.get(name, _MISSING) is not value:
                    return f"{label}.{name}"
            if len(now) != len(before):
                is_class = isinstance(owner, type)
                for name, value in list(now.items()):
                    if name not in before and (is_class or not isinstance(value, types.ModuleType)):
                        return f"{label}.{name}"
        return None
