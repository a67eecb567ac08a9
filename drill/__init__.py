"""drill: interview practice for transformer internals.

`drill.check(exercise, obj)` grades a function, class, module or file from Python (drill/api.py);
`%load_ext drill` adds the notebook magics (drill/notebook.py). Both load on first use, so
`import drill` stays light: no torch, no IPython, not even the grader (tests/test_notebook_api.py).
"""

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

# Lazy attributes (PEP 562), taken from drill.api when first used. `import_module` rather than an import
# statement: the package must not import its own submodules at import time (tests/test_import_layers.py).
_API = ("check", "check_source", "CheckResult")


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(import_module("drill.api"), name)
    raise AttributeError(f"module 'drill' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext drill`: %%drill, %drill_hint, %drill_start (drill/notebook.py)."""
    import_module("drill.notebook").load_ipython_extension(ipython)
