"""The question kinds, one module each; REGISTRY is the only list of them.

To add a kind: write a module here that builds a `Kind` (see base.py: its
fields, builder, how it is asked, checked and audited, its mock budget and
its flash card), add it to REGISTRY below, and document its fields in
questions/README.md. The loader, the quiz, `drill validate`, the mock and
the exports then know it; none of them names a kind.
"""

from __future__ import annotations

from drill.errors import UserError
from drill.quiz.kinds import choice, numeric, parametric, recall, spot_bug
from drill.quiz.kinds.base import Asked, Asker, Kind

REGISTRY: dict[str, Kind] = {kind.name: kind for kind in (
    recall.KIND,
    choice.KIND,
    numeric.KIND,
    parametric.KIND,
    spot_bug.KIND,
)}

__all__ = ["REGISTRY", "Asked", "Asker", "Kind", "get", "names"]


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def get(name: str) -> Kind:
    """The kind called `name`; a UserError (not a KeyError) for a name no module registers."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise UserError(f"unknown question kind {name!r}; known kinds: {', '.join(REGISTRY)}") from None
